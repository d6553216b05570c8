"""RQ1: the shared-to-dual boundary in two-view retrieval (paper Figure 3, Appendix F).

One cell = (angle, n, rank, seed_index).  Seeds are derived from the master seed with
:func:`~asymgeo.experiments.runner.cell_seed` and are **paired**:

* ``model_seed = cell_seed(master, 0)``: one query loading for every cell, so angles
  differ only by the rotation of the document loading;
* ``test_seed = cell_seed(master, 1, seed_index)``: one test set per seed index,
  shared by every angle, size, rank and both families;
* ``train_seed = cell_seed(master, 2, seed_index, n)``: the training triples, shared
  by both families, every rank and every angle (the latent draws and the noise are
  the same; only the loadings rotate).

Both closed-form projections are fitted on the same triples and ranked on the same
test set (each positive against ``n_negatives`` independent negatives, NDCG@10).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..estimators.projections import DualProjection, SharedProjection
from ..estimators.simulation import candidate_ndcg, two_view_model
from ..kernels.geometry import approximation_gap, psd_distance
from ..kernels.selection import cars_score
from .runner import cell_seed

__all__ = ["cell", "summarise", "first_positive", "first_significant", "claims", "plot", "PAPER_FIRST_POSITIVE",
           "selector_regrets"]

#: Paper, Section 5.1: first positive rank-8 grid mean (angle -> n).
PAPER_FIRST_POSITIVE = {0.8: 256, 1.2: 64}


@functools.lru_cache(maxsize=1)
def _model_and_test(p: int, latent_rank: int, noise_sd: float, angle: float, model_seed: int,
                    n_test: int, n_negatives: int, test_seed: int) -> tuple[Any, Any]:
    """The two-view model and its test set, a pure function of its arguments.

    Memoised (one entry): consecutive cells that differ only in n or rank, as in the demo,
    share the test set, whose sampling costs more than the rest of a small cell.
    """
    model = two_view_model(p=p, latent_rank=latent_rank, noise_sd=noise_sd, angle=angle, seed=model_seed)
    return model, model.sample_test(n_test, n_negatives, test_seed)


def cell(config: dict[str, Any]) -> dict[str, Any]:
    """One RQ1 cell: fit shared and dual at (angle, n, rank) and compare NDCG@10.

    Config keys: ``angle, n, rank, seed_index, p, latent_rank, noise_sd, n_test,
    n_negatives, master_seed`` and optionally ``cars_splits`` (0 disables CARS).
    Returns NDCG@10 of both families, their paired difference and its standard error,
    CARS, the population distance ``G_PSD`` and Theorem 1's gap, the training moment's
    ``G_PSD`` and Theorem 1 gap, and the seeds.
    """
    master = int(config["master_seed"])
    angle = float(config["angle"])
    n, rank, s = int(config["n"]), int(config["rank"]), int(config["seed_index"])
    model_seed = cell_seed(master, 0)
    test_seed = cell_seed(master, 1, s)
    train_seed = cell_seed(master, 2, s, n)
    cars_seed = cell_seed(master, 3, s, n)
    model, test = _model_and_test(int(config["p"]), int(config["latent_rank"]), float(config["noise_sd"]), angle,
                                  model_seed, int(config["n_test"]), int(config["n_negatives"]), test_seed)
    tr = model.sample_triples(n, train_seed)
    shared = SharedProjection(rank).fit(tr.X, tr.Y_pos, tr.Y_neg)
    dual = DualProjection(rank).fit(tr.X, tr.Y_pos, tr.Y_neg)
    nd_s = candidate_ndcg(shared.operator_, test)
    nd_d = candidate_ndcg(dual.operator_, test)
    diff = nd_d - nd_s
    C_pop = model.population_moment()
    out: dict[str, Any] = {
        "ndcg_shared": float(nd_s.mean()),
        "ndcg_dual": float(nd_d.mean()),
        "ndcg_diff": float(diff.mean()),
        "ndcg_diff_se": float(diff.std(ddof=1) / np.sqrt(diff.size)),
        "population_gpsd": psd_distance(C_pop, rank),
        "population_gap": approximation_gap(C_pop, rank).gap,
        "train_gpsd": psd_distance(shared.moment_, rank),
        "train_gap": approximation_gap(shared.moment_, rank).gap,
        "model_seed": model_seed,
        "test_seed": test_seed,
        "train_seed": train_seed,
    }
    splits = int(config.get("cars_splits", 0))
    if splits > 0 and n >= 4:
        cars = cars_score(tr.X, tr.Y_pos, tr.Y_neg, rank, n_splits=splits, seed=cars_seed, n_jobs=1)
        out.update(cars_score=cars.score, cars_se=cars.standard_error, cars_choice=cars.choice,
                   cars_seed=cars_seed, n_jobs=1)
    if config.get("selectors"):
        out.update(_other_selectors(tr, rank, cell_seed(master, 4, s, n), config.get("selector_rules")))
    return out


#: Registered rules the RQ1 selector cells compute beside CARS (``config["selectors"]`` true),
#: unless the config lists its own (``config["selector_rules"]``, comma-separated).
OTHER_SELECTORS = ("cv", "anisotropic", "sure", "pairwise")


def _other_selectors(tr: Any, rank: int, seed: int, names: Any = None) -> dict[str, Any]:
    """Beyond the paper (issue 20): the other registered selectors on the same training triples,
    each with ``seed`` (5 inner folds for the cross-validated risk; a rule that does not apply,
    such as SURE without a rank-r PSD point, picks shared with score NaN).  Columns
    ``<rule>_choice``, ``<rule>_score`` and, with a standard error, ``<rule>_se``; ``pairwise`` is
    the held-out pairwise accuracy (:mod:`asymgeo.selectors.pairwise`)."""
    from ..selectors.registry import RuleNotApplicable, SelectionContext, get_rule

    X = np.asarray(tr.X, dtype=np.float64)
    D = np.asarray(tr.Y_pos, dtype=np.float64) - np.asarray(tr.Y_neg, dtype=np.float64)
    listed = OTHER_SELECTORS if not names else [n.strip() for n in str(names).split(",") if n.strip()]
    out: dict[str, Any] = {}
    for name in listed:
        rule = get_rule(name, argument="selector_rules")
        try:
            out.update(rule.decide(X, D, rank, seed=seed, context=SelectionContext(cv_folds=5)).cell())
        except RuleNotApplicable:
            out.update({f"{rule.name}_choice": "shared", f"{rule.name}_score": float("nan")})
    return out


def selector_regrets(df, angles: tuple[float, ...] = (0.4, 0.6, 0.8)):
    """Near the zero contour (``angles``): each selector's retrieval regret (NDCG@10 of the better
    family minus the chosen one's, per cell) and accuracy, per (rank, angle), and over all."""
    import pandas as pd

    sub = df[np.isin(np.round(df["angle"].astype(float), 6), np.round(angles, 6))].copy()
    best = np.maximum(sub["ndcg_shared"], sub["ndcg_dual"])
    winner = np.where(sub["ndcg_dual"] > sub["ndcg_shared"], "dual", "shared")
    rules = [r for r in ("cars", "sure", "anisotropic", "cv", "pairwise") if f"{r}_choice" in sub]
    rows = []
    for key, g in [(("all", "all"), sub), *sub.groupby(["rank", "angle"])]:
        idx = g.index
        row: dict[str, Any] = {"rank": key[0], "angle": key[1], "cells": len(g)}
        for rule in [*rules, "shared", "dual"]:
            chosen = g[f"{rule}_choice"] if rule in rules else pd.Series(rule, index=idx)
            got = np.where(chosen == "dual", g["ndcg_dual"], g["ndcg_shared"])
            row[f"regret_{rule}"] = float(np.mean(best.loc[idx] - got))
            row[f"accuracy_{rule}"] = float(np.mean(chosen.to_numpy() == winner[sub.index.get_indexer(idx)]))
        rows.append(row)
    return pd.DataFrame(rows)


def summarise(df, rank: int = 8):
    """Per (rank, angle, n): mean Dual-Shared NDCG@10 over seeds, its 95% normal interval,
    ``G_PSD`` and the CARS dual-selection rate.  Returns a DataFrame."""
    import pandas as pd

    g = df.groupby(["rank", "angle", "n"])
    out = g.agg(
        diff_mean=("ndcg_diff", "mean"),
        diff_sd=("ndcg_diff", "std"),
        seeds=("ndcg_diff", "size"),
        ndcg_shared=("ndcg_shared", "mean"),
        ndcg_dual=("ndcg_dual", "mean"),
        population_gpsd=("population_gpsd", "mean"),
        population_gap=("population_gap", "mean"),
    ).reset_index()
    half = 1.96 * out["diff_sd"].fillna(0.0) / np.sqrt(out["seeds"])
    out["ci_low"] = out["diff_mean"] - half
    out["ci_high"] = out["diff_mean"] + half
    if "cars_choice" in df:
        rate = df.assign(_d=(df["cars_choice"] == "dual").astype(float)).groupby(
            ["rank", "angle", "n"])["_d"].mean().reset_index(drop=True)
        out["cars_dual_rate"] = rate.values
    return pd.DataFrame(out)


def first_positive(summary, rank: int = 8) -> dict[float, int | None]:
    """Smallest n whose mean Dual-Shared NDCG@10 is positive, per angle (None if never)."""
    res: dict[float, int | None] = {}
    sub = summary[summary["rank"] == rank]
    for angle, grp in sub.groupby("angle"):
        grp = grp.sort_values("n")
        pos = grp[grp["diff_mean"] > 0]
        res[round(float(angle), 6)] = int(pos["n"].iloc[0]) if len(pos) else None
    return res


def first_significant(summary, rank: int = 8) -> dict[float, int | None]:
    """Smallest n whose 95% normal interval of the mean gap lies above zero, per angle."""
    res: dict[float, int | None] = {}
    sub = summary[summary["rank"] == rank]
    for angle, grp in sub.groupby("angle"):
        grp = grp.sort_values("n")
        pos = grp[grp["ci_low"] > 0]
        res[round(float(angle), 6)] = int(pos["n"].iloc[0]) if len(pos) else None
    return res


def claims(summary, rank: int = 8) -> dict[str, Any]:
    """Checks of the RQ1 claims (Section 5.1, Figure 3) on a :func:`summarise` table at ``rank``.

    Returns a dict with

    * ``first_positive``: per angle, the first n with a positive mean Dual-Shared NDCG@10;
      ``paper_first_positive``: one entry per angle of :data:`PAPER_FIRST_POSITIVE`
      (``angle, paper_n, ours, holds``; ``ours`` is ``"not in grid"`` for an angle outside the
      grid, ``holds`` None when the paper's n is not a grid size);
    * ``first_significant`` and ``significant``: the stricter reading (95% interval above 0);
    * ``positive_cells`` of ``cells`` (angle, n) means, ``both_signs`` (the zero contour splits
      the grid);
    * ``first_positive_08``, ``first_positive_12``, ``order_holds`` (stronger mismatch needs
      fewer pairs);
    * ``largest_n``, ``gpsd_trend_corr``, ``trend_holds`` (at the largest n the Dual advantage
      grows with the population ``G_PSD``).
    """
    first = first_positive(summary, rank)
    sizes = sorted(summary["n"].unique())
    paper = []
    for angle, paper_n in PAPER_FIRST_POSITIVE.items():
        key = round(angle, 6)
        if key not in first:
            paper.append({"angle": angle, "paper_n": paper_n, "ours": "not in grid", "holds": None})
            continue
        ours = first[key]
        paper.append({"angle": angle, "paper_n": paper_n, "ours": ours,
                      "holds": ours == paper_n if paper_n in sizes else None})
    signif = first_significant(summary, rank)
    significant = [{"angle": angle, "paper_n": paper_n, "ours": signif[round(angle, 6)],
                    "holds": signif[round(angle, 6)] == paper_n}
                   for angle, paper_n in PAPER_FIRST_POSITIVE.items() if round(angle, 6) in signif]
    sub = summary[summary["rank"] == rank]
    f08, f12 = first.get(0.8), first.get(1.2)
    order_holds = None if f12 is None else (f08 is None or f12 <= f08)
    big = sub[sub["n"] == sub["n"].max()].sort_values("population_gpsd")
    trend = float(np.corrcoef(big["population_gpsd"], big["diff_mean"])[0, 1]) if len(big) > 2 else float("nan")
    return {
        "rank": rank,
        "first_positive": first,
        "paper_first_positive": paper,
        "first_significant": signif,
        "significant": significant,
        "positive_cells": int((sub["diff_mean"] > 0).sum()),
        "cells": int(len(sub)),
        "both_signs": bool((sub["diff_mean"] > 0).any() and (sub["diff_mean"] < 0).any()),
        "first_positive_08": f08,
        "first_positive_12": f12,
        "order_holds": order_holds,
        "largest_n": int(sub["n"].max()),
        "gpsd_trend_corr": trend,
        "trend_holds": bool(trend > 0) if np.isfinite(trend) else None,
    }


def plot(summary, path, rank: int = 8) -> None:
    """Figure 3: A, heatmap of mean Dual-Shared NDCG@10 over angle x n with the zero
    contour; B, the gap against the population ``G_PSD`` with 95% normal bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    sub = summary[summary["rank"] == rank]
    pivot = sub.pivot(index="angle", columns="n", values="diff_mean").sort_index()
    angles, sizes = pivot.index.to_numpy(), pivot.columns.to_numpy()
    Z = pivot.to_numpy()
    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(11, 4.2))
    lim = float(np.nanmax(np.abs(Z))) or 1.0
    im = ax_a.imshow(Z, origin="lower", aspect="auto", cmap="RdBu_r",
                     norm=TwoSlopeNorm(vmin=-lim, vcenter=0.0, vmax=lim))
    if Z.shape[0] > 1 and Z.shape[1] > 1 and np.nanmin(Z) < 0 < np.nanmax(Z):
        ax_a.contour(np.arange(len(sizes)), np.arange(len(angles)), Z, levels=[0.0],
                     colors="gold", linewidths=2.5)
    ax_a.set_xticks(range(len(sizes)), [str(int(v)) for v in sizes])
    ax_a.set_yticks(range(len(angles)), [f"{a:.1f}" for a in angles])
    ax_a.set_xlabel("training pairs n")
    ax_a.set_ylabel("rotation angle (rad)")
    ax_a.set_title(f"A. mean Dual - Shared NDCG@10 (rank {rank})")
    fig.colorbar(im, ax=ax_a, shrink=0.85)
    cmap = plt.get_cmap("viridis")
    for j, n in enumerate(sizes):
        grp = sub[sub["n"] == n].sort_values("population_gpsd")
        color = cmap(j / max(1, len(sizes) - 1))
        ax_b.plot(grp["population_gpsd"], grp["diff_mean"], "o-", color=color, ms=3, label=f"n={int(n)}")
        ax_b.fill_between(grp["population_gpsd"], grp["ci_low"], grp["ci_high"], color=color, alpha=0.15)
    ax_b.axhline(0.0, color="k", lw=0.8)
    ax_b.set_xlabel(r"population distance $G_{\rm PSD}$ to the shared family")
    ax_b.set_ylabel("Dual - Shared NDCG@10")
    ax_b.set_title("B. gap vs population distance (95% normal CI)")
    ax_b.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
