r"""Beyond the paper: how much of Table 1's regret is the held-out fold's own noise (issue 20).

Table 1 scores a choice against the *realised* held-out difference
:math:`\Delta = L_s - L_d` of one fold of 130 (SciFact) to 520 (NFCorpus) queries.  This
experiment measures how reproducible that target is, on the same design (full space, the fold
design of :func:`asymgeo.experiments.real_pool.fold_design`), with the truncations of every
(fold, nested size, rank) evaluated against reweighted held-out targets
(:func:`asymgeo.kernels.operator_risk.resampled_losses`):

* ``diff_se``: the bootstrap standard error of :math:`\Delta` over resamples of the held-out
  queries (``bootstrap`` resamples); ``|Δ| < 2 diff_se`` means the held-out fold itself cannot
  tell the two families apart at the 95% level.
* Half-fold regrets: the held-out fold split at random into halves A and B (``half_splits``
  times); a rule's regret on B is :math:`L_{\hat g}(B) - \min_g L_g(B)`, averaged over the splits
  and both directions (A scores B, B scores A).  ``half_regret_oracle`` is the rule that *reads
  half A of the held-out fold* (dual iff :math:`L_s(A) > L_d(A)`) and is scored on B: what
  looking at held-out data of the same kind, half a fold of it, buys.  Training-only rules are
  scored on the same halves (their choices come from the selectors cells), so the comparison
  is on one footing.
* Within-size split-half reliability: at each nested size, Spearman's correlation over
  folds x ranks of :math:`\Delta(A)` with :math:`\Delta(B)`, averaged over the splits.  It bounds
  what any score's within-size correlation with the held-out difference can reproducibly be.

One cell = (centring, dataset, encoder), every fold of ``heldout_folds`` and every rank of
``ranks``; seeds: ``cell_seed(master_seed, 4)`` with ``spawn_key = (fold,)`` per fold (halves,
then bootstrap counts, from one generator).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..estimators.validation import _derived_seed
from ..kernels.folds import NESTED_SIZES
from ..kernels.operator_risk import prefix_moments, resampled_losses, truncation_spectra
from .real_pool import fold_arrays, fold_design, pool_triples
from .runner import cell_seed

__all__ = ["cell", "explode", "join_selectors", "summarise", "reliability", "report_section", "section",
           "SEED_KEY", "RULES"]

#: ``cell_seed(master_seed, SEED_KEY)`` is the base seed of the halves and bootstrap resamples.
SEED_KEY = 4
#: Rules scored on the half folds: the selectors' rules, then the half-fold oracle.
RULES = ("cars", "sure", "anisotropic", "cv", "cv0", "ranking", "shared", "dual", "oracle")
_KEYS = ["centring", "dataset", "encoder", "fold", "rank", "size"]
_ROW_COLUMNS = ("fold", "size", "rank", "loss_shared", "loss_dual", "diff_se", "half_regret_shared",
                "half_regret_dual", "half_regret_oracle")


def _size_label(m: int) -> str:
    """The nested size, or ``full`` for a fold's whole training pool (SciFact's 647 or 648)."""
    return str(m) if m in NESTED_SIZES else "full"


def _fold_rows(X: np.ndarray, D: np.ndarray, design: Any, ranks: list[int], half_splits: int, bootstrap: int,
               seed: int) -> tuple[list[dict[str, Any]], dict[str, list[np.ndarray]]]:
    """Rows of one fold, and per size label the half-split differences ``(Δ(A), Δ(B))`` of shape
    (half_splits, ranks)."""
    train, test = design.train_order, design.test_rows
    Xt, Dt = X[test], D[test]
    n_t = test.size
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    half = n_t // 2
    A = np.zeros((half_splits, n_t))
    B = np.zeros((half_splits, n_t))
    for k in range(half_splits):
        perm = rng.permutation(n_t)
        A[k, perm[:half]] = 1.0 / half
        B[k, perm[half:]] = 1.0 / (n_t - half)
    boot = rng.multinomial(n_t, np.full(n_t, 1.0 / n_t), size=bootstrap) / n_t
    weights = np.vstack([np.full((1, n_t), 1.0 / n_t), A, B, boot])
    gram = (Xt @ Xt.T) * (Dt @ Dt.T)
    Xtr, Dtr = X[train], D[train]
    moments = prefix_moments(Xtr, Dtr, design.sizes)
    rows: list[dict[str, Any]] = []
    diffs: dict[str, list[np.ndarray]] = {}
    for m in design.sizes:
        spectra = truncation_spectra(moments[m], max(ranks), factors=(Xtr[:m], Dtr[:m], 1.0 / m))
        ls, ld = resampled_losses(spectra, Xt, Dt, ranks, weights, gram=gram)
        a = slice(1, 1 + half_splits)
        b = slice(1 + half_splits, 1 + 2 * half_splits)
        bt = slice(1 + 2 * half_splits, None)
        diff_boot = ls[bt] - ld[bt]
        regrets = {g: np.zeros(len(ranks)) for g in ("shared", "dual", "oracle")}
        for read, scored in ((a, b), (b, a)):  # A reads, B scores; then B reads, A scores
            best = np.minimum(ls[scored], ld[scored])
            oracle = np.where(ls[read] > ld[read], ld[scored], ls[scored])
            regrets["shared"] += (ls[scored] - best).mean(axis=0) / 2
            regrets["dual"] += (ld[scored] - best).mean(axis=0) / 2
            regrets["oracle"] += (oracle - best).mean(axis=0) / 2
        label = _size_label(int(m))
        pair = diffs.setdefault(label, [np.zeros((half_splits, 0)), np.zeros((half_splits, 0))])
        pair[0] = np.hstack([pair[0], ls[a] - ld[a]])
        pair[1] = np.hstack([pair[1], ls[b] - ld[b]])
        for j, r in enumerate(ranks):
            rows.append({"fold": int(design.fold), "size": int(m), "rank": int(r),
                         "loss_shared": float(ls[0, j]), "loss_dual": float(ld[0, j]),
                         "diff_se": float(np.std(diff_boot[:, j], ddof=1)),
                         **{f"half_regret_{g}": float(v[j]) for g, v in regrets.items()}})
    return rows, diffs


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> float:
    """Mean over rows of Spearman's correlation of ``x[k]`` with ``y[k]`` (NaN rows skipped)."""
    from scipy import stats

    vals = []
    for xk, yk in zip(x, y, strict=True):
        if np.unique(xk).size > 1 and np.unique(yk).size > 1:
            vals.append(float(stats.spearmanr(xk, yk).statistic))
    return float(np.mean(vals)) if vals else float("nan")


def cell(config: dict[str, Any]) -> dict[str, Any]:
    """One (centring, dataset, encoder).  Config keys: ``centring, dataset, encoder, heldout_folds``
    (folds ``0 .. k-1`` of the design are evaluated), ``ranks`` (comma-separated, e.g. ``"4,8,16,32"``),
    ``folds, half_splits, bootstrap, data_dir, cache_dir, pool, master_seed``."""
    pool = pool_triples(str(config["dataset"]), str(config["encoder"]), config.get("data_dir") or None,
                        config.get("cache_dir") or None, str(config.get("pool", "train")))
    try:
        ranks = sorted({int(r) for r in str(config["ranks"]).split(",")})
    except ValueError:
        raise ValueError(f"ranks: expected comma-separated integers, got {config['ranks']!r}") from None
    half_splits, bootstrap = int(config["half_splits"]), int(config["bootstrap"])
    if half_splits < 1 or bootstrap < 2:
        raise ValueError(f"half_splits >= 1 and bootstrap >= 2 expected, got {half_splits}, {bootstrap}")
    n_folds, k_folds = int(config.get("folds", 5)), int(config["heldout_folds"])
    if not 1 <= k_folds <= n_folds:
        raise ValueError(f"heldout_folds: expected 1 to {n_folds} (the folds of the design), got {k_folds}")
    base = cell_seed(int(config["master_seed"]), SEED_KEY)
    rows: list[dict[str, Any]] = []
    diffs: dict[str, list[list[np.ndarray]]] = {}
    n_test = []
    for fold in range(k_folds):
        design = fold_design(pool.ids, fold, n_folds)
        if design.test_rows.size < 4:
            raise ValueError(f"fold {fold}: {design.test_rows.size} held-out queries; halves need at least 4")
        X, D = fold_arrays(pool, design, str(config["centring"]))
        fr, fd = _fold_rows(X, D, design, ranks, half_splits, bootstrap, _derived_seed(base, fold))
        rows += fr
        n_test.append(int(design.test_rows.size))
        for label, (da, db) in fd.items():
            diffs.setdefault(label, [[], []])
            diffs[label][0].append(da)
            diffs[label][1].append(db)
    labels = sorted(diffs, key=lambda s: (s == "full", int(s) if s != "full" else 0))
    rel = [_spearman_rows(np.hstack(diffs[lab][0]), np.hstack(diffs[lab][1])) for lab in labels]
    cells = [int(sum(d.shape[1] for d in diffs[lab][0])) for lab in labels]
    out: dict[str, Any] = {key: [r[key] for r in rows] for key in _ROW_COLUMNS}
    out.update({"reliability_size": labels, "reliability_cells": cells, "reliability_spearman": rel,
                "n_test": n_test, "p": pool.p, "seed": base})
    return out


def explode(df):
    """One row per (centring, dataset, encoder, fold, rank, size) of the results table."""
    import pandas as pd

    rows = []
    for r in df.itertuples(index=False):
        base = {key: getattr(r, key) for key in ("centring", "dataset", "encoder")}
        cols = {key: list(getattr(r, key)) for key in _ROW_COLUMNS}
        for j in range(len(cols["size"])):
            rows.append({**base, **{key: cols[key][j] for key in _ROW_COLUMNS}})
    return pd.DataFrame(rows)


def reliability(df):
    """Per (centring, dataset, encoder, size label): the split-half reliability of the held-out difference."""
    import pandas as pd

    rows = []
    for r in df.itertuples(index=False):
        for lab, cells, rho in zip(r.reliability_size, r.reliability_cells, r.reliability_spearman, strict=True):
            rows.append({"centring": r.centring, "dataset": r.dataset, "encoder": r.encoder, "size": str(lab),
                         "cells": int(cells), "spearman": float(rho)})
    return pd.DataFrame(rows)


def join_selectors(rows, selector_cells):
    """The half-fold rows with every rule's choice from the selectors cells (committed
    ``docs/results/selectors_cells.csv`` or the run); refuses missing cells and rows whose
    full-fold losses differ from the selectors' (1e-4 relative, the committed precision)."""
    sel = selector_cells.copy()
    if "cv_choice" not in sel:
        sel["cv_choice"] = np.where(sel["cv_score"] > sel["cv_se"], "dual", "shared")
    if "cv0_choice" not in sel:
        sel["cv0_choice"] = np.where(sel["cv_score"] > 0, "dual", "shared")
    choices = [f"{g}_choice" for g in RULES if g not in ("shared", "dual", "oracle")]
    sel = sel[[*_KEYS, "loss_shared", "loss_dual", "cars_score", "cv_score", *choices]].rename(
        columns={"loss_shared": "sel_loss_shared", "loss_dual": "sel_loss_dual"})
    c = rows.copy()
    for key in ("fold", "rank", "size"):
        c[key], sel[key] = c[key].astype(int), sel[key].astype(int)
    joined = c.merge(sel, on=_KEYS, how="left", validate="one_to_one")
    missing = joined["cars_choice"].isna()
    if missing.any():
        first = joined[missing].iloc[0]
        raise ValueError(f"selectors cells: no cell for {dict((k, first[k]) for k in _KEYS)} "
                         f"({int(missing.sum())} of {len(joined)} missing); run `asymgeo reproduce selectors`")
    for g in ("shared", "dual"):
        rel = (np.abs(joined[f"loss_{g}"] - joined[f"sel_loss_{g}"])
               / np.maximum(np.abs(joined[f"sel_loss_{g}"]), 1e-12))
        if float(rel.max()) > 1e-4:
            raise ValueError(f"selectors cells: held-out loss_{g} differs from this run's by {float(rel.max()):.2g} "
                             "(relative): not the same design")
    joined["advantage"] = joined["loss_shared"] - joined["loss_dual"]
    return joined.drop(columns=["sel_loss_shared", "sel_loss_dual"])


def _pick(row: dict[str, Any], rule: str) -> str:
    return rule if rule in ("shared", "dual") else str(row[f"{rule}_choice"])


def _half_regret(row: dict[str, Any], rule: str) -> float:
    if rule in ("shared", "dual", "oracle"):
        return float(row[f"half_regret_{rule}"])
    return float(row["half_regret_dual"] if row[f"{rule}_choice"] == "dual" else row["half_regret_shared"])


def summarise(joined):
    """Per (centring, dataset, encoder): every rule's half-fold regret (within fold, then over
    folds); CARS's full-fold regret, its error cells, and the share of that regret in cells whose
    held-out difference is within two bootstrap standard errors of zero."""
    import pandas as pd

    out = []
    for key, g in joined.groupby(["centring", "dataset", "encoder"], sort=True):
        recs = g.to_dict("records")
        folds = sorted({int(r["fold"]) for r in recs})
        row: dict[str, Any] = dict(zip(("centring", "dataset", "encoder"), key, strict=True))
        row["cells"] = len(recs)
        for rule in RULES:
            row[f"half_regret_{rule}"] = float(np.mean([np.mean([_half_regret(r, rule) for r in recs
                                                                  if int(r["fold"]) == f]) for f in folds]))
        regret = np.array([(r["loss_dual"] if r["cars_choice"] == "dual" else r["loss_shared"])
                           - min(r["loss_shared"], r["loss_dual"]) for r in recs])
        noisy = np.array([abs(r["advantage"]) < 2 * r["diff_se"] for r in recs])
        row["cars_regret"] = float(np.mean([regret[[int(r["fold"]) == f for r in recs]].mean() for f in folds]))
        row["cars_errors"] = int((regret > 0).sum())
        row["cars_errors_noisy"] = int(((regret > 0) & noisy).sum())
        row["noisy_share"] = float(regret[noisy].sum() / regret.sum()) if regret.sum() > 0 else float("nan")
        row["noisy_cells"] = int(noisy.sum())
        decided = ~noisy
        for rule in ("cars", "shared", "dual"):  # accuracy on the cells the fold decides (ties to shared)
            right = [(_pick(r, rule) == ("dual" if r["loss_dual"] < r["loss_shared"] else "shared")) for r in recs]
            row[f"decided_accuracy_{rule}"] = (float(np.mean(np.asarray(right)[decided])) if decided.any()
                                               else float("nan"))
        out.append(row)
    return pd.DataFrame(out)


def _fmt(x: float, pct: bool = False) -> str:
    if not np.isfinite(x):
        return "–"
    return f"{100 * x:.0f}%" if pct else f"{x:.4g}"


def report_section(joined, rel, out_dir: str | Path | None = None, suffix: str = "") -> str:
    """The evidence page's held-out-noise subsection; writes ``heldout_noise_cells{suffix}.csv``
    and ``heldout_noise_reliability{suffix}.csv`` to ``out_dir`` when given."""
    from ._markdown import md_table

    s = summarise(joined)
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        cols = [*_KEYS, "loss_shared", "loss_dual", "diff_se", "half_regret_shared", "half_regret_dual",
                "half_regret_oracle"]
        joined[cols].to_csv(Path(out_dir) / f"heldout_noise_cells{suffix}.csv", index=False, float_format="%.12g")
        rel.to_csv(Path(out_dir) / f"heldout_noise_reliability{suffix}.csv", index=False, float_format="%.12g")
    s["oracle_ratio"] = np.where(s["half_regret_cars"] > 0, s["half_regret_oracle"]
                                 / s["half_regret_cars"].where(s["half_regret_cars"] > 0), np.nan)
    rows = [[r.dataset, r.encoder, r.centring, *(_fmt(getattr(r, f"half_regret_{g}")) for g in RULES),
             f"{r.oracle_ratio:.2f}" if np.isfinite(r.oracle_ratio) else "–"] for r in s.itertuples()]
    noise_rows = [[r.dataset, r.encoder, r.centring, _fmt(r.cars_regret), f"{r.cars_errors} of {r.cells}",
                   f"{r.cars_errors_noisy} of {r.cars_errors}", _fmt(r.noisy_share, True),
                   f"{r.noisy_cells} of {r.cells}",
                   " / ".join(_fmt(getattr(r, f"decided_accuracy_{g}"), True) for g in ("cars", "shared", "dual"))]
                  for r in s.itertuples()]
    by_data = s.groupby("dataset")[["half_regret_cars", "half_regret_oracle"]].mean()
    data_lines = [f"- {d}: CARS {_fmt(v.half_regret_cars)}, half-fold oracle {_fmt(v.half_regret_oracle)} "
                  f"(ratio {v.half_regret_oracle / v.half_regret_cars:.2f}; halving CARS's regret is a ratio of "
                  "0.50 or less)" for d, v in by_data.iterrows() if v.half_regret_cars > 0]
    finite = s["oracle_ratio"][np.isfinite(s["oracle_ratio"])]
    big = rel[rel["size"].isin(["1024", "2048", "full"]) & (rel["dataset"] == "nfcorpus")]
    verdict_lines = []
    if len(finite):
        below, worse = int((finite <= 0.5).sum()), int((finite >= 1.0).sum())
        verdict_lines.append(
            f"- The half-fold oracle's regret is {finite.min():.2f} to {finite.max():.2f} times CARS's: at most half "
            f"of it in {below} of {len(finite)} dataset x encoder x centring rows, and no lower than CARS's in "
            f"{worse}. A direct look at held-out data of the same kind, half a fold of it, decides these cells no "
            "better than CARS does from the training prefix. (This is not a bound on rules that read only the "
            "training prefix: one could in principle know the population difference better than half a fold "
            "does.)")
        errors, noisy = int(s["cars_errors"].sum()), int(s["cars_errors_noisy"].sum())
        share = s["noisy_share"][np.isfinite(s["noisy_share"])]
        verdict_lines.append(
            f"- Of CARS's {errors} wrong cells, {noisy} have a held-out difference within two bootstrap standard "
            f"errors of zero; per row they carry {share.min():.0%} to {share.max():.0%} of its regret. The rest "
            "are cells the fold does decide, where the fitted pair from this training prefix is better in the "
            "other family than the prefix's own evidence says.")
    if len(big):
        verdict_lines.append(
            f"- On NFCorpus at n >= 1024 the held-out difference agrees with itself across halves at a split-half "
            f"Spearman of {big['spearman'].min():.2f} to {big['spearman'].max():.2f}: there, a positive within-size "
            "correlation of any score with the held-out difference at every n is a target that the held-out "
            "difference itself does not reproducibly meet.")
    rel_rows = [[r.dataset, r.encoder, r.centring, r.size, int(r.cells), _fmt(r.spearman)]
                for r in rel.sort_values(["centring", "dataset", "encoder"], kind="stable").itertuples()
                if r.size == "full" or int(r.size) >= 256]
    return "\n".join([
        "",
        "### How much of the regret is the held-out fold's own noise",
        "",
        "Table 1 scores each choice against one realised held-out difference L_s - L_d. Built by "
        "`asymgeo.experiments.heldout_noise` on the same design (every fold, size and rank of the table "
        "above): the held-out fold split at random into halves (each half scores what the other half "
        "reads, both ways, averaged over the splits), and bootstrap resamples of its queries. "
        "`oracle` reads half of the held-out fold itself (dual iff L_s > L_d on that half) and is scored "
        "on the other half; every other rule is scored on the same halves with the choice it made from "
        "the training prefix. Mean regret on half folds (within fold, then over folds):",
        "",
        md_table(["dataset", "encoder", "centring", *RULES, "oracle / CARS"], rows),
        "",
        "Averaged over encoders and centrings, per dataset:",
        "",
        *data_lines,
        "",
        "CARS's full-fold regret (the table above) and the cells whose held-out difference is within two "
        "bootstrap standard errors of zero (the fold itself cannot tell the families apart at 95%):",
        "",
        md_table(["dataset", "encoder", "centring", "CARS regret", "CARS errors", "errors within 2 SE",
                  "share of CARS's regret within 2 SE", "cells within 2 SE",
                  "accuracy on the other cells: CARS / shared / dual"], noise_rows),
        "",
        "Split-half reliability of the held-out difference within a training size: Spearman's correlation "
        "over folds x ranks of L_s - L_d on one half of the held-out fold with the other half's, averaged "
        "over the splits (`full`: each fold's whole training pool). A score's within-size correlation "
        "with the held-out difference cannot be reproducibly larger than the target's agreement with "
        "itself:",
        "",
        md_table(["dataset", "encoder", "centring", "n", "cells", "split-half Spearman"], rel_rows),
        "",
        "What this says about issue 20's goal (halve CARS's regret; a positive within-size correlation at "
        "every n >= 256):",
        "",
        *verdict_lines,
        "",
    ])


def _committed_tables(cells_csv: Path, rel_csv: Path, rerun: str):
    """The committed per-cell and reliability tables, or one line naming the file at fault."""
    import pandas as pd

    try:
        rows, rel = pd.read_csv(cells_csv), pd.read_csv(rel_csv, dtype={"size": str})
    except (ValueError, pd.errors.ParserError) as exc:
        raise ValueError(f"{cells_csv.parent}: heldout_noise tables not readable ({exc}); "
                         f"rerun `{rerun}`") from None
    need = {*_KEYS, "loss_shared", "loss_dual", "diff_se", "half_regret_shared", "half_regret_dual",
            "half_regret_oracle"}
    if missing := sorted(need - set(rows.columns)):
        raise ValueError(f"{cells_csv}: missing column(s) {missing}; rerun `{rerun}`")
    if missing := sorted({"centring", "dataset", "encoder", "size", "cells", "spearman"} - set(rel.columns)):
        raise ValueError(f"{rel_csv}: missing column(s) {missing}; rerun `{rerun}`")
    return rows, rel


def section(results_dir: Any, docs: Path, suffix: str, selector_cells) -> str:
    """The subsection from the run (``heldout_noise{suffix}``; its tables then saved under
    ``docs/results``), else from the committed tables; a "not run" line when neither exists."""
    from .runner import read_results

    cells_csv = docs / "results" / f"heldout_noise_cells{suffix}.csv"
    rel_csv = docs / "results" / f"heldout_noise_reliability{suffix}.csv"
    rerun = f"asymgeo reproduce heldout_noise{' --quick' if suffix else ''}"
    out_dir: Path | None = docs / "results"
    try:
        df = read_results(results_dir, "heldout_noise" + suffix)
        rows, rel = explode(df), reliability(df)
    except FileNotFoundError:
        if not (cells_csv.is_file() and rel_csv.is_file()):
            return f"\n### How much of the regret is the held-out fold's own noise\n\nNot run: `{rerun}`.\n"
        rows, rel = _committed_tables(cells_csv, rel_csv, rerun)
        out_dir = None
    return report_section(join_selectors(rows, selector_cells), rel, out_dir, suffix)
