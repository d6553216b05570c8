"""``asymgeo fit --plot FILE``: the training curves and the generalisation bars of one fit (extra ``plot``).

:func:`fit_plot_data` decides what is drawn (numbers only, tested); :func:`plot_fit` draws it.
"""

from __future__ import annotations

import math
import os
import textwrap
from pathlib import Path
from typing import Any

from ..estimators.plots import _pyplot

__all__ = ["plot_fit", "fit_plot_data", "MIN_SCALE_QUERIES"]

_SUBSETS = (("all", "all"), ("seen", "seen-doc"), ("unseen", "unseen-doc"), ("unseen_relevant", "unseen-rel"))

#: Groups of fewer queries (and under a tenth of all test queries) do not set the right panel's
#: scale: their intervals are clipped at the axis and marked, so the bars that matter are readable.
MIN_SCALE_QUERIES = 20


def _selection_maps(report: Any) -> dict[str, Any]:
    """The trained maps whose ``history_`` scores the selection queries: the families ``auto`` trained
    (or the one fitted) and, under the joint deployment, the query-only map whose checkpoint was chosen
    on the same queries.  Not drawn: the query-only map chosen on all validation queries (other
    queries; with ``selection="all"`` it is the selection one) and the blends (no training run)."""
    maps = dict(report.candidates or {report.adapter.geometry_: report.adapter})
    sel = report.metrics.get("selection")
    for name, ad in (getattr(report, "joint", None) or {}).items():
        if name == f"{ad.geometry_} ({sel})" and ad.geometry_ not in maps:
            maps[ad.geometry_] = ad
    return maps


def _curves(report: Any) -> list[dict[str, Any]]:
    out = []
    for fam, ad in _selection_maps(report).items():
        runs: dict[float, list[tuple[int, float]]] = {}
        for h in ad.history_:
            if h.get("validation_ndcg") is not None:
                runs.setdefault(h["learning_rate"], []).append((h["epoch"], h["validation_ndcg"]))
        for lr, pts in runs.items():
            out.append({"family": fam, "learning_rate": lr, "epochs": [e for e, _ in pts],
                        "ndcg": [v for _, v in pts]})
    return out


def _chosen(report: Any, curves: list[dict[str, Any]]) -> dict[str, Any] | None:
    ad = report.adapter
    joint = report.metrics.get("joint")
    if joint and joint.get("choice") != f"{ad.geometry_} ({report.metrics.get('selection')})":
        return None  # a blend, or a map chosen on all validation queries: no checkpoint on these curves
    for c in curves:
        if c["family"] == ad.geometry_ and c["learning_rate"] == ad.learning_rate_ and ad.best_epoch_ in c["epochs"]:
            i = c["epochs"].index(ad.best_epoch_)
            return {"family": c["family"], "learning_rate": c["learning_rate"], "epoch": ad.best_epoch_,
                    "ndcg": c["ndcg"][i]}
    return None


def _joint_title(report: Any, chosen: dict[str, Any] | None, top: float) -> str:
    """The title under the joint deployment (``metrics["joint"]``): map + memory chosen on all
    validation queries, so the deployed map need not be the highest point of these map-only curves."""
    m = report.metrics
    name = m["joint"]["choice"]
    with_memory = " + memory" if getattr(report.adapter, "memory_", None) is not None else ""
    how = f"chosen with its memory on all {m.get('n_validation', '?')} validation queries"
    if chosen is None:
        if "blend" in name:
            what = "a blend of the query-only maps chosen on the selection queries and on all validation queries"
        else:
            what = f"its checkpoint chosen on all {m.get('n_validation', '?')} validation queries, not these"
        return f"deployed: {name}{with_memory} ({what}; not a point on these curves), {how}"
    star = (f"star: the deployed map{with_memory} ({chosen['family']}, lr {chosen['learning_rate']:g}, "
            f"epoch {chosen['epoch']}), {how}")
    if chosen["ndcg"] >= top:
        return star + ", the highest point"
    return star + "; not the highest point (the curves score the map alone on the selection queries)"


def _title(report: Any, chosen: dict[str, Any] | None, curves: list[dict[str, Any]]) -> str:
    m = report.metrics
    auto = m.get("auto") or {}
    top = max((v for c in curves for v in c["ndcg"]), default=math.nan)
    if m.get("joint"):
        return _joint_title(report, chosen, top)
    if chosen is None:
        return "training curves"
    what = f"star: the kept checkpoint ({chosen['family']}, lr {chosen['learning_rate']:g}, epoch {chosen['epoch']})"
    tie = str(auto.get("rule", "")).startswith("tie")  # the one-SE rule kept a family whose points are lower
    if tie and chosen["ndcg"] < top:
        how = "broken by CARS" if auto.get("rule") == "tie: CARS" else "kept by the one-SE rule"
        what += f"; a tie within one standard error {how}, not the highest point"
    elif chosen["ndcg"] >= top:
        what += ", the highest point"
    else:  # a family fixed by --geometry: its own best point
        what += f", the best of {chosen['family']}"
    return what


def _bars(gen: dict[str, Any]) -> dict[str, Any]:
    rows = gen["rows"]
    frozen = rows.get("frozen", {})
    n_all = int(frozen.get("all", {}).get("n", 0))
    shown: list[tuple[str, str]] = []
    merged: list[str] = []
    for key, label in _SUBSETS:
        n = int(frozen.get(key, {}).get("n", 0))
        if n == 0:
            continue  # an empty group: no slot
        if key in ("seen", "unseen") and n == n_all:  # the same queries as "all": drawn once
            merged.append(label)
            continue
        shown.append((key, label))
    labels = []
    for key, label in shown:
        n = int(frozen[key]["n"])
        labels.append(f"{label}{' (= ' + ', '.join(merged) + ')' if key == 'all' and merged else ''}\n({n} q)")
    names = [n for n in rows if n != "frozen"]
    small = max(MIN_SCALE_QUERIES, math.ceil(0.1 * n_all))
    lo, hi, clipped = [0.0], [0.0], []
    for key, _label in shown:
        for name in names:
            c = rows[name].get(key, {})
            vals = [c.get(k) for k in ("diff", "ci_low", "ci_high")]
            if any(v is None or not math.isfinite(v) for v in vals):
                continue
            if int(frozen[key]["n"]) >= small or key == "all":
                lo.append(vals[1])
                hi.append(vals[2])
            else:
                lo.append(vals[0])
                hi.append(vals[0])
                clipped.append((key, name))
    pad = 0.1 * (max(hi) - min(lo) or 0.01)
    ylim = (min(lo) - pad, max(hi) + pad)
    clipped = [(k, n) for k, n in clipped
               if rows[n][k]["ci_low"] < ylim[0] or rows[n][k]["ci_high"] > ylim[1]]
    return {"subsets": [k for k, _ in shown], "labels": labels, "names": names, "ylim": ylim,
            "clipped": clipped, "merged": merged, "min_scale_queries": small}


def fit_plot_data(report: Any) -> dict[str, Any]:
    """What :func:`plot_fit` draws for ``report`` (a :class:`~asymgeo.adapters.workflow.FitReport`).

    Returns ``curves`` (per family and learning rate: epochs and selection NDCG@10; under the joint
    deployment also the query-only map chosen on the same queries), ``chosen``
    (the kept checkpoint: family, learning rate, epoch, NDCG@10; marked by a star; ``None`` when
    the joint deployment chose a blend or a map whose checkpoint was chosen on other queries),
    ``title`` (true under every rule: the star is the highest point, the best of a fixed family,
    the family the ``auto`` rule kept although another point is higher, or the map the joint
    deployment chose with its memory on all validation queries; else which map was deployed and
    that it is not on the curves), ``frozen`` (the frozen
    model's NDCG@10 on the same selection queries as the curves, ``frozen_queries`` of them) and,
    with a generalisation report, ``bars``: the subsets drawn (empty groups left out; a
    seen- or unseen-document group holding every test query is drawn once, as "all"), their
    labels, and the y range, set by groups of at least ``min_scale_queries`` queries (a group
    with fewer queries shows its bar, its interval clipped where it leaves the range, listed in
    ``clipped``).
    """
    m = report.metrics
    curves = _curves(report)
    chosen = _chosen(report, curves)
    fr = m["frozen"]
    frozen = fr.get("selection_ndcg@10")
    n_frozen = m.get("n_selection")
    if frozen is None:  # a report from before the selection score was recorded
        frozen, n_frozen = fr["validation_ndcg@10"], m.get("n_validation")
    out: dict[str, Any] = {"curves": curves, "chosen": chosen, "title": _title(report, chosen, curves),
                           "frozen": frozen, "frozen_queries": n_frozen, "n_selection": m.get("n_selection")}
    gen = m.get("generalisation")
    if gen:
        out["bars"] = _bars(gen)
    return out


def plot_fit(report: Any, path: str | os.PathLike) -> Path:
    """Draw ``report`` (a :class:`~asymgeo.adapters.workflow.FitReport`) to ``path`` (PNG, written atomically).

    Left: selection-query NDCG@10 per epoch, one line per family and learning rate (epoch 0 is
    the start), the kept checkpoint starred, and the frozen model's NDCG@10 on the same queries
    dashed.  Right: test NDCG@10 gain over frozen per subset (all, seen-document,
    unseen-document, unseen-relevant) for the document prior, the closed form and the trained
    adapter, with paired 95% intervals (:func:`fit_plot_data`: which subsets, which scale).
    """
    import numpy as np

    from .._atomic import PLOT_SOFTWARE, atomic_path

    data = fit_plot_data(report)
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for c in data["curves"]:
        ax1.plot(c["epochs"], c["ndcg"], marker=".", label=f"{c['family']}, lr {c['learning_rate']:g}")
    ch = data["chosen"]
    if ch is not None:
        ax1.plot([ch["epoch"]], [ch["ndcg"]], marker="*", ms=14, color="k", ls="none",
                 label="deployed checkpoint" if report.metrics.get("joint") else "kept checkpoint")
    ax1.axhline(data["frozen"], color="k", ls="--", lw=1, label="frozen")
    ax1.set_xlabel("epoch")
    ax1.set_ylabel(f"NDCG@10 on the {data['n_selection']} selection queries")
    ax1.set_title(textwrap.fill(data["title"], 90), fontsize=8)
    ax1.legend(fontsize=7)
    gen = report.metrics.get("generalisation")
    if gen:
        b = data["bars"]
        names, subsets = b["names"], b["subsets"]
        width = 0.8 / max(len(names), 1)
        x = np.arange(len(subsets))
        lo_lim, hi_lim = b["ylim"]
        for i, name in enumerate(names):
            cells = [gen["rows"][name][s] for s in subsets]
            diff = np.array([c.get("diff", np.nan) for c in cells], dtype=float)
            lo = np.clip(np.array([c.get("ci_low", np.nan) for c in cells], dtype=float), lo_lim, hi_lim)
            hi = np.clip(np.array([c.get("ci_high", np.nan) for c in cells], dtype=float), lo_lim, hi_lim)
            err = np.vstack([np.nan_to_num(np.maximum(diff - lo, 0)), np.nan_to_num(np.maximum(hi - diff, 0))])
            xs = x + (i - (len(names) - 1) / 2) * width
            ax2.bar(xs, np.nan_to_num(diff), width, yerr=err, capsize=3, label=name)
            for j, s in enumerate(subsets):
                if (s, name) in b["clipped"]:
                    ax2.annotate("interval clipped", (xs[j], hi_lim), fontsize=6, ha="center", va="top")
        ax2.set_xticks(x, b["labels"])
        ax2.set_ylim(lo_lim, hi_lim)
        ax2.axhline(0, color="k", lw=1)
        ax2.set_ylabel("test NDCG@10 - frozen (paired 95% interval)")
        note = (f"; groups under {b['min_scale_queries']} queries do not set the scale" if b["clipped"] else "")
        ax2.set_title(f"does it help new queries?{note}", fontsize=9)
        ax2.legend(fontsize=7)
    else:
        ax2.set_axis_off()
    fig.suptitle(f"{report.dataset} / {report.encoder}: {report.adapter.geometry_} adapter, rank "
                 f"{report.metrics['rank']}, n = {report.n_train}", fontsize=10)
    fig.tight_layout()
    dest = Path(path)
    with atomic_path(dest, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110, format="png", metadata={"Software": PLOT_SOFTWARE})
    plt.close(fig)
    return dest
