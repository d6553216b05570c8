"""RQ2 (simulation): raw versus corrected asymmetry (paper Figure 4A, Appendix F).

One cell = (angle, n, seed_index) in the rank-r two-view simulation.  The training
triples use exactly the seeds of :mod:`asymgeo.experiments.rq1` (same model seed,
``train_seed = cell_seed(master, 2, seed_index, n)``), so RQ2's fits are RQ1's fits.
For each training set, CARS (eq. 7) gives

* ``raw``: the plug-in PSD distance of the training moment,
  ``||P_d,r(Ĉ) - P_s,r(Ĉ)||²`` (``CarsResult.raw_distance``), biased upward by noise;
* ``corrected``: the mean cross-half agreement ``<V_I1, V_I2>``
  (``CarsResult.corrected_distance``), whose noise bias cross-fitting removes;
* the CARS score (agreement minus a quarter of the disagreement),

compared with the population distance ``G_PSD = psd_distance(C_pop, r)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..estimators.simulation import two_view_model
from ..kernels.geometry import psd_distance
from ..kernels.selection import cars_score
from .runner import cell_seed

__all__ = ["cell", "summarise", "plot", "claims"]


def cell(config: dict[str, Any]) -> dict[str, Any]:
    """One RQ2 cell.  Config keys: ``angle, n, seed_index, rank, p, latent_rank, noise_sd,
    cars_splits, master_seed``."""
    master = int(config["master_seed"])
    angle, n, s = float(config["angle"]), int(config["n"]), int(config["seed_index"])
    rank = int(config["rank"])
    model_seed = cell_seed(master, 0)
    train_seed = cell_seed(master, 2, s, n)
    cars_seed = cell_seed(master, 3, s, n)
    model = two_view_model(p=int(config["p"]), latent_rank=int(config["latent_rank"]),
                           noise_sd=float(config["noise_sd"]), angle=angle, seed=model_seed)
    tr = model.sample_triples(n, train_seed)
    cars = cars_score(tr.X, tr.Y_pos, tr.Y_neg, rank, n_splits=int(config["cars_splits"]), seed=cars_seed, n_jobs=1)
    return {
        "raw": cars.raw_distance,
        "corrected": cars.corrected_distance,
        "cars_score": cars.score,
        "cars_se": cars.standard_error,
        "cars_choice": cars.choice,
        "population": psd_distance(model.population_moment(), rank),
        "model_seed": model_seed,
        "train_seed": train_seed,
        "cars_seed": cars_seed,
    }


def summarise(df):
    """Per (angle, n): mean and 95% t interval over seeds of raw, corrected and the score."""
    import pandas as pd
    from scipy import stats

    rows = []
    for (angle, n), g in df.groupby(["angle", "n"]):
        m = len(g)
        tq = stats.t.ppf(0.975, m - 1) if m > 1 else np.nan
        row = {"angle": angle, "n": n, "seeds": m, "population": float(g["population"].iloc[0])}
        for col in ("raw", "corrected", "cars_score"):
            x = g[col].to_numpy(float)
            half = tq * x.std(ddof=1) / np.sqrt(m) if m > 1 else np.nan
            row[f"{col}_mean"] = float(x.mean())
            row[f"{col}_low"] = float(x.mean() - half)
            row[f"{col}_high"] = float(x.mean() + half)
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["angle", "n"]).reset_index(drop=True)


def claims(summary) -> dict[str, Any]:
    """Checks of the RQ2 claim: raw is inflated above the population distance (and the
    inflation shrinks with n); the corrected estimate tracks the population."""
    raw_excess = summary["raw_mean"] - summary["population"]
    cor_err = summary["corrected_mean"] - summary["population"]
    raw_above = bool((summary["raw_low"] > summary["population"]).all())
    shrinking = []
    for _, g in summary.assign(excess=raw_excess).groupby("angle"):
        g = g.sort_values("n")
        shrinking.append(float(g["excess"].iloc[-1]) < float(g["excess"].iloc[0]))
    covered = ((summary["corrected_low"] <= summary["population"])
               & (summary["population"] <= summary["corrected_high"]))
    return {
        "cells": int(len(summary)),
        "raw_ci_above_population_everywhere": raw_above,
        "raw_excess_shrinks_with_n_every_angle": bool(all(shrinking)),
        "corrected_ci_covers_population": int(covered.sum()),
        "corrected_closer_than_raw": int((cor_err.abs() < raw_excess.abs()).sum()),
        "median_abs_raw_excess": float(raw_excess.abs().median()),
        "median_abs_corrected_error": float(cor_err.abs().median()),
    }


def plot(summary, path) -> None:
    """Figure 4A: raw, corrected and population PSD distance against n, one panel per
    angle, with 95% t bands over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    angles = sorted(summary["angle"].unique())
    fig, axes = plt.subplots(1, len(angles), figsize=(3.8 * len(angles), 3.8), squeeze=False)
    for ax, angle in zip(axes[0], angles):
        g = summary[summary["angle"] == angle].sort_values("n")
        for col, label, color in (("raw", "raw plug-in", "tab:red"),
                                  ("corrected", "corrected (cross-half)", "tab:blue")):
            ax.plot(g["n"], g[f"{col}_mean"], "o-", color=color, ms=3, label=label)
            ax.fill_between(g["n"], g[f"{col}_low"], g[f"{col}_high"], color=color, alpha=0.2)
        ax.plot(g["n"], g["population"], "k--", label="population $G_{\\rm PSD}$")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training pairs n")
        ax.set_title(f"angle {angle:.1f} rad")
    axes[0][0].set_ylabel("PSD distance  $\\|P_d(C)-P_s(C)\\|_F^2$")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("RQ2: raw asymmetry is inflated; the corrected estimate tracks the population (95% t)")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
