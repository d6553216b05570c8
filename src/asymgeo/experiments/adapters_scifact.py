"""Measured adapters on SciFact: frozen vs closed-form baseline vs trained shared / dual.

One sweep cell = (encoder, n, seed_index).  The ``n`` training queries are a prefix of one
seeded permutation of the adaptation train split (:func:`asymgeo.data.nested_subsets`,
seed ``cell_seed(master, seed_index)``), so smaller sets are nested in larger ones; the
same subset, epoch permutations (training seed) and initialisation serve every family
and form (paired seeds).  Each cell records test and validation NDCG@10 (exact
full-corpus search) of the frozen encoder, the closed-form baselines (shared and dual),
the four trained adapters, the CARS choice on the training triples and the family that
actually won.  Run with ``asymgeo reproduce adapters`` (packaged config ``adapters.toml``) and
summarise with ``python -m asymgeo.experiments.adapters_scifact results/adapters docs/results``.
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["cell", "summarise", "format_summary"]

FAMILIES = ("shared", "dual")
FORMS = ("augmented", "projection")


@functools.lru_cache(maxsize=4)
def _load(dataset: str, encoder: str, data_dir: str, cache_dir: str, k: int) -> Any:
    from ..adapters.workflow import load_adaptation_data

    return load_adaptation_data(dataset, encoder, data_dir=data_dir, cache_dir=cache_dir, k=k)


def _num(x: float | None) -> float:
    return float("nan") if x is None else float(x)


def _test_ndcg(d: Any, operator: np.ndarray | None) -> float:
    from ..adapters.workflow import ndcg_at_10

    return ndcg_at_10(d.T, d.test, d.corpus, operator)


def _val_ndcg(d: Any, operator: np.ndarray | None) -> float:
    from ..adapters.workflow import ndcg_at_10

    return ndcg_at_10(d.V, d.validation, d.corpus, operator)


def cell(config: dict[str, Any]) -> dict[str, Any]:
    """One cell.  Config keys: ``dataset, encoder, n, seed_index, rank, epochs, master_seed,
    data_dir, cache_dir, hard_negatives, init`` (and optional ``learning_rates`` as a
    comma-separated string)."""
    import torch

    from ..adapters.adapter import Adapter
    from ..adapters.baseline import closed_form_adapter
    from ..data import nested_subsets
    from ..kernels.selection import cars_score
    from .runner import cell_seed

    torch.set_num_threads(1)
    master = int(config["master_seed"])
    s, n, rank = int(config["seed_index"]), int(config["n"]), int(config["rank"])
    d = _load(str(config["dataset"]), str(config["encoder"]), str(config["data_dir"]), str(config["cache_dir"]),
              int(config.get("hard_negatives", 8)))
    tr = d.triples
    subset_seed = cell_seed(master, 1, s)
    train_seed = cell_seed(master, 2, s) % (2**31)
    subsets = nested_subsets(tr.query_ids, sizes=[n], seed=subset_seed, include_full=False)
    if n not in subsets:
        if n != len(tr):
            raise ValueError(f"n: {n} exceeds the {len(tr)} training queries")
        subsets = {n: nested_subsets(tr.query_ids, sizes=[n], seed=subset_seed)[n]}
    ids = subsets[n]
    sub = tr.subset(ids)
    where = {q: i for i, q in enumerate(tr.query_ids)}
    relevant = [d.relevant[where[q]] for q in ids]
    lrs = tuple(float(x) for x in str(config.get("learning_rates", "3e-4,1e-3,3e-3")).split(","))
    common = {"hard_negative_rows": sub.hard_negative_rows, "validation_queries": d.V,
              "validation_relevance": d.validation}
    out: dict[str, Any] = {"subset_seed": subset_seed, "train_seed": train_seed, "n_docs": int(d.corpus.shape[0]),
                           "frozen_test": _test_ndcg(d, None), "frozen_validation": _val_ndcg(d, None)}
    for fam in FAMILIES:
        b = closed_form_adapter(sub.X, sub.pos_rows, d.corpus, geometry=fam, rank=rank, **common)
        out[f"baseline_{fam}_test"] = _test_ndcg(d, b.operator_)
        out[f"baseline_{fam}_validation"] = _num(b.validation_ndcg_)
        out[f"baseline_{fam}_c"] = _num(b.init_scale_)
    trained: dict[str, np.ndarray] = {}
    for form in FORMS:
        for fam in FAMILIES:
            t0 = time.perf_counter()
            ad = Adapter(geometry=fam, rank=rank, form=form, init=str(config.get("init", "closed_form")),
                         learning_rates=lrs, epochs=int(config["epochs"]), seed=train_seed)
            ad.fit(sub.X, sub.pos_rows, d.corpus, relevant_rows=relevant, **common)
            key = f"{fam}_{form}"
            trained[key] = ad.operator_
            out[f"{key}_test"] = _test_ndcg(d, ad.operator_)
            out[f"{key}_validation"] = _num(ad.validation_ndcg_)
            out[f"{key}_lr"] = float(ad.learning_rate_) if ad.learning_rate_ is not None else float("nan")
            out[f"{key}_epoch"] = -1 if ad.best_epoch_ is None else int(ad.best_epoch_)
            out[f"{key}_seconds"] = time.perf_counter() - t0
    # does the gain carry over? test queries split by whether a relevant document was one of
    # these n training queries' positives (asymgeo.adapters.generalisation), against frozen
    from ..adapters.generalisation import generalisation_report

    gen = generalisation_report(d, ids, {f"{fam}_augmented": trained[f"{fam}_augmented"] for fam in FAMILIES},
                                seed=s, n_boot=200)
    for name, cells in gen.rows.items():
        key = "prior" if name.startswith("doc prior") else name
        for subset in ("seen", "unseen"):
            c = cells[subset]
            out[f"n_{subset}"] = int(c["n"])
            if "diff" in c:
                out[f"{key}_{subset}_diff"] = float(c["diff"])
        if "diff" in cells["all"]:
            out[f"{key}_all_diff"] = float(cells["all"]["diff"])
    out["prior_weight"] = gen.prior_weight
    if n >= 4:
        cars = cars_score(sub.X, sub.Y_pos, sub.Y_neg, rank, n_splits=20, seed=train_seed, n_jobs=1)
        out["cars_choice"] = cars.choice
        out["cars_score"] = float(cars.score)
    else:  # pragma: no cover - the grid starts at 32
        out["cars_choice"] = ""
        out["cars_score"] = float("nan")
    for form in FORMS:
        out[f"winner_{form}"] = "dual" if out[f"dual_{form}_test"] > out[f"shared_{form}_test"] else "shared"
    return out


def summarise(df):
    """Per (encoder, n): mean and standard deviation over seeds of every test NDCG@10, the
    dual-minus-shared gap, CARS choices and the winning family (augmented form)."""
    import pandas as pd

    rows = []
    cols = ["frozen_test", "baseline_shared_test", "baseline_dual_test"] + [
        f"{fam}_{form}_test" for form in FORMS for fam in FAMILIES]
    for (enc, n), g in df.groupby(["encoder", "n"]):
        row: dict[str, Any] = {"encoder": enc, "n": int(n), "seeds": len(g)}
        for c in cols:
            x = g[c].to_numpy(float)
            row[f"{c}_mean"] = float(x.mean())
            row[f"{c}_sd"] = float(x.std(ddof=1)) if len(x) > 1 else float("nan")
        for form in FORMS:
            gap = (g[f"dual_{form}_test"] - g[f"shared_{form}_test"]).to_numpy(float)
            row[f"gap_{form}_mean"] = float(gap.mean())
            row[f"gap_{form}_sd"] = float(gap.std(ddof=1)) if len(gap) > 1 else float("nan")
            row[f"dual_wins_{form}"] = int((gap > 0).sum())
        row["cars_dual"] = int((g["cars_choice"] == "dual").sum())
        for c in [f"{fam}_augmented_{s}_diff" for fam in FAMILIES for s in ("seen", "unseen", "all")] + [
                "prior_all_diff", "prior_seen_diff", "prior_unseen_diff", "n_seen", "n_unseen"]:
            if c in g:
                x = g[c].to_numpy(float)
                row[f"{c}_mean"] = float(np.nanmean(x)) if np.isfinite(x).any() else float("nan")
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["encoder", "n"]).reset_index(drop=True)


def format_summary(summary) -> str:
    """Markdown tables of :func:`summarise` (mean ± sd over paired seeds)."""

    def ms(r, c):
        return f"{r[c + '_mean']:.4f} ± {r[c + '_sd']:.4f}"

    lines = []
    for enc, g in summary.groupby("encoder"):
        lines += [f"### {enc}", "",
                  "| n | seeds | frozen | closed-form shared | closed-form dual | shared aug. | dual aug. "
                  "| shared proj. | dual proj. |",
                  "|---:|---:|---|---|---|---|---|---|---|"]
        for _, r in g.iterrows():
            lines.append(
                f"| {r['n']} | {r['seeds']} | {ms(r, 'frozen_test')} | {ms(r, 'baseline_shared_test')} | "
                f"{ms(r, 'baseline_dual_test')} | {ms(r, 'shared_augmented_test')} | {ms(r, 'dual_augmented_test')} | "
                f"{ms(r, 'shared_projection_test')} | {ms(r, 'dual_projection_test')} |")
        lines += ["", "| n | dual − shared (augmented) | dual wins (aug.) | dual − shared (projection) "
                  "| dual wins (proj.) | CARS chose dual |", "|---:|---|---:|---|---:|---:|"]
        for _, r in g.iterrows():
            k = r["seeds"]
            lines.append(
                f"| {r['n']} | {r['gap_augmented_mean']:+.4f} ± {r['gap_augmented_sd']:.4f} | "
                f"{r['dual_wins_augmented']}/{k} | {r['gap_projection_mean']:+.4f} ± {r['gap_projection_sd']:.4f} | "
                f"{r['dual_wins_projection']}/{k} | {r['cars_dual']}/{k} |")
        if "shared_augmented_unseen_diff_mean" in r and np.isfinite(r["shared_augmented_unseen_diff_mean"]):
            lines += ["", "Does the gain carry over? Test NDCG@10 gain over frozen (mean over seeds) on the test "
                      "queries whose relevant documents include a positive of the n training queries (seen-doc) "
                      "and on the others (unseen-doc); the document prior is frozen + beta for those positives "
                      "(docs/adapters.md#generalisation).", "",
                      "| n | seen-doc / unseen-doc queries | shared aug. seen / unseen | dual aug. seen / unseen "
                      "| doc prior seen / unseen / all |", "|---:|---|---|---|---|"]
            for _, r2 in g.iterrows():
                lines.append(
                    f"| {r2['n']} | {r2['n_seen_mean']:.0f} / {r2['n_unseen_mean']:.0f} | "
                    f"{r2['shared_augmented_seen_diff_mean']:+.3f} / {r2['shared_augmented_unseen_diff_mean']:+.3f} | "
                    f"{r2['dual_augmented_seen_diff_mean']:+.3f} / {r2['dual_augmented_unseen_diff_mean']:+.3f} | "
                    f"{r2['prior_seen_diff_mean']:+.3f} / {r2['prior_unseen_diff_mean']:+.3f} / "
                    f"{r2['prior_all_diff_mean']:+.3f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - thin script
    """``python -m asymgeo.experiments.adapters_scifact RESULTS_DIR OUT_DIR``: write the summary table."""
    from .._atomic import atomic_write_text
    from .runner import read_results

    args = sys.argv[1:] if argv is None else argv
    results_dir, out_dir = Path(args[0]), Path(args[1])
    name = results_dir.name
    df = read_results(results_dir.parent, name)
    summary = summarise(df)
    atomic_write_text(out_dir / f"{name}_scifact.md", format_summary(summary))
    atomic_write_text(out_dir / f"{name}_scifact.csv", summary.to_csv(index=False))
    print(f"wrote {out_dir / f'{name}_scifact.md'} ({len(df)} cells)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
