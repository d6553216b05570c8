r"""RQ2 on real embeddings (Figure 4B): corrected score versus raw plug-in distance.

Does the corrected score predict held-out fit better than the raw plug-in distance?

Across all operator fits of Table 1 (dataset x encoder x fold x nested size x rank, one
variant of projection and centring), the held-out shared-minus-dual loss advantage
``L_s - L_d`` is averaged by decile of the raw plug-in distance
:math:`\|\mathcal P_{d,r}(\widehat C) - \mathcal P_{s,r}(\widehat C)\|_F^2` and by decile of the
corrected score, the CARS score of eq. (7) (cross-half agreement minus a quarter of the
disagreement: "accounting for variation between training splits", Section 5.2); the mean
cross-half agreement alone (Appendix C.1) is shown as well.  The paper: the raw trend is
nearly flat; the corrected trend rises from Shared-favoured to Dual-favoured held-out fit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["deciles", "claims", "plot", "SCORES"]

#: Score columns of the Table 1 cells compared here.
SCORES = {"raw_distance": "raw plug-in distance", "corrected_distance": "cross-half agreement",
          "cars_score": "corrected score (CARS, eq. 7)"}


def deciles(cells, n_bins: int = 10):
    """Mean, standard error and count of ``advantage`` per decile (by rank order, ties split
    by position) of each score in :data:`SCORES`."""
    import pandas as pd

    rows = []
    for score in SCORES:
        order = np.argsort(cells[score].to_numpy(float), kind="stable")
        adv = cells["advantage"].to_numpy(float)[order]
        for b, part in enumerate(np.array_split(np.arange(order.size), n_bins)):
            a = adv[part]
            rows.append({"score": score, "decile": b + 1, "fits": int(a.size), "mean": float(a.mean()),
                         "se": float(a.std(ddof=1) / np.sqrt(a.size)) if a.size > 1 else float("nan"),
                         "median": float(np.median(a)),
                         "dual_share": float((a > 0).mean())})
    return pd.DataFrame(rows)


def claims(cells) -> dict[str, Any]:
    """Spearman correlation of each score with the held-out advantage over all fits, bottom and
    top decile means and dual-favoured shares; ``corrected_stronger``: the CARS score's
    correlation is positive and above the raw distance's; ``corrected_rises``: its bottom
    decile mean is < 0 < its top decile mean (shared- to dual-favoured)."""
    from scipy import stats

    d = deciles(cells)
    out: dict[str, Any] = {"fits": int(len(cells))}
    for score in SCORES:
        rho = stats.spearmanr(cells[score], cells["advantage"]).statistic
        g = d[d["score"] == score].sort_values("decile")
        out[f"{score}_spearman"] = float(rho)
        out[f"{score}_bottom"] = float(g["mean"].iloc[0])
        out[f"{score}_top"] = float(g["mean"].iloc[-1])
        out[f"{score}_dual_share_bottom"] = float(g["dual_share"].iloc[0])
        out[f"{score}_dual_share_top"] = float(g["dual_share"].iloc[-1])
    out["corrected_stronger"] = bool(out["cars_score_spearman"] > max(out["raw_distance_spearman"], 0.0))
    out["corrected_rises"] = bool(out["cars_score_bottom"] < 0 < out["cars_score_top"])
    return out


def plot(cells, path) -> None:
    """Figure 4B analogue: mean held-out ``L_s - L_d`` (+/- 1.96 SE) by decile of each score."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = deciles(cells)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for score, color in zip(SCORES, ("tab:red", "tab:gray", "tab:blue"), strict=True):
        g = d[d["score"] == score]
        axes[0].errorbar(g["decile"], g["mean"], yerr=1.96 * g["se"], fmt="o-", color=color, ms=3, capsize=2,
                         label=SCORES[score])
        axes[1].plot(g["decile"], g["dual_share"], "o-", color=color, ms=3, label=SCORES[score])
    axes[0].axhline(0, color="k", lw=0.6)
    axes[0].set_yscale("symlog", linthresh=1e-3)
    axes[0].set_ylabel("mean held-out $L_s - L_d$ (>0 favours dual)")
    axes[1].set_ylabel("share of fits where dual wins")
    for ax in axes:
        ax.set_xlabel("score decile")
    axes[1].legend(fontsize=7)
    fig.suptitle(f"RQ2 on real embeddings (Figure 4B analogue): {len(cells)} operator fits")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
