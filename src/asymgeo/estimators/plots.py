"""``asymgeo select --validate --plot FILE``: the held-out check of the decision, drawn (extra ``plot``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["plot_validation"]

#: Rules drawn when their choices are in the cells (at most this many, CARS first), with their registry labels.
_MAX_RULES = 6


def _rules_in(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """Registered rules whose choice every cell carries, CARS first."""
    from ..selectors.catalogue import REFERENCE_RULE
    from ..selectors.registry import rule_names

    names = [n for n in rule_names() if all(c.get(f"{n}_choice") for c in cells)]
    return sorted(names, key=lambda n: n != REFERENCE_RULE)[:_MAX_RULES]


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - installed in the dev env
        raise ImportError("--plot needs matplotlib: pip install asymgeo[plot]") from exc
    return plt


def _size_groups(sizes: Sequence[int]) -> list[list[int]]:
    """Sorted sizes with runs one apart merged (the full training pool of folds of unequal size:
    517 and 518 are one size), as ``select``'s table merges them."""
    groups: list[list[int]] = []
    for m in sorted(set(sizes)):
        if groups and m - groups[-1][-1] <= 1:
            groups[-1].append(m)
        else:
            groups.append([m])
    return groups


def validation_curves(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    r"""What :func:`plot_validation` draws, per training size ``n`` (sorted).

    Sizes one apart are one point, as in ``select``'s table (the full pool of folds of unequal
    size: 517 and 518): ``groups`` lists each point's sizes, ``labels`` names it (``"517-518"``)
    and ``sizes`` is its largest size (the x position).
    ``advantage``: the held-out :math:`L_s - L_d` of every fold (positive favours dual);
    ``mean``: its mean over folds; ``dual_share[rule]``: the fraction of folds in which the rule
    chose dual (``"held-out"``: the fraction in which dual had the lower held-out loss, ties to
    shared).
    """
    groups = _size_groups([int(c["size"]) for c in cells])
    by = [[c for c in cells if int(c["size"]) in g] for g in groups]
    out: dict[str, Any] = {
        "sizes": [g[-1] for g in groups],
        "groups": groups,
        "labels": [str(g[0]) if len(g) == 1 else f"{g[0]}-{g[-1]}" for g in groups],
        "advantage": [[float(c["loss_shared"]) - float(c["loss_dual"]) for c in at] for at in by],
    }
    out["mean"] = [sum(a) / len(a) for a in out["advantage"]]
    share: dict[str, list[float]] = {
        "held-out": [sum(float(c["loss_dual"]) < float(c["loss_shared"]) for c in at) / len(at) for at in by]}
    for rule in _rules_in(cells):
        share[rule] = [sum(c[f"{rule}_choice"] == "dual" for c in at) / len(at) for at in by]
    out["dual_share"] = share
    return out


def plot_validation(cells: Sequence[Mapping[str, Any]], path: str | os.PathLike, *, title: str = "") -> Path:
    r"""Draw the (fold, size) cells of a validation run to ``path`` (PNG, written atomically).

    Top: held-out :math:`L_s - L_d` against the training size ``n`` (log scale), one grey dot per
    held-out fold and the mean over folds (both in the legend), zero dashed (above zero dual has
    the lower held-out loss); sizes one apart are one point (:func:`validation_curves`).
    Bottom: for each registered selector in the cells (CARS, SURE, anisotropic SURE, ...), the fraction of
    folds choosing dual at each ``n``, beside the fraction in which dual was the held-out winner.
    """
    from .._atomic import PLOT_SOFTWARE, atomic_path

    if not cells:
        raise ValueError("cells: no validation cells to plot")
    cur = validation_curves(cells)
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True, height_ratios=(3, 2))
    for i, (m, adv) in enumerate(zip(cur["sizes"], cur["advantage"], strict=True)):
        ax1.scatter([m] * len(adv), adv, s=12, color="0.55", zorder=2,
                    label="one held-out fold" if i == 0 else None)
    ax1.plot(cur["sizes"], cur["mean"], marker="o", color="C0", label="mean over folds", zorder=3)
    for m, label, mean in zip(cur["sizes"], cur["labels"], cur["mean"], strict=True):
        if "-" in label:  # sizes one apart drawn as one point: say which
            ax1.annotate(f"n = {label}", (m, mean), textcoords="offset points", xytext=(4, 6), fontsize=7)
    ax1.axhline(0.0, color="k", ls="--", lw=1)
    ax1.set_xscale("log", base=2)
    ax1.set_ylabel(r"held-out $L_s - L_d$ (> 0: dual better)")
    ax1.legend(fontsize=8)
    ax1.set_title(title or "held-out check of the geometry decision", fontsize=10)
    from ..selectors.registry import get_rule

    styles = [("C1", "o"), ("C2", "^"), ("C3", "D"), ("C4", "v"), ("C5", "P"), ("C6", "X")]
    for i, (rule, share) in enumerate(cur["dual_share"].items()):
        colour, marker = ("k", "s") if rule == "held-out" else styles[(i - 1) % len(styles)]
        label = "held-out winner is dual" if rule == "held-out" else get_rule(rule).label
        ax2.plot(cur["sizes"], share, marker=marker, color=colour, ls="-" if rule != "held-out" else ":",
                 label=label)
    ax2.set_ylim(-0.05, 1.05)
    ax2.set_xlabel("training queries n")
    ax2.set_ylabel("fraction of folds choosing dual")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    dest = Path(path)
    with atomic_path(dest, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110, format="png", metadata={"Software": PLOT_SOFTWARE})
    plt.close(fig)
    return dest
