"""``asymgeo fit --plot FILE``: the training curves and the generalisation bars of one fit (extra ``plot``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..estimators.plots import _pyplot

__all__ = ["plot_fit"]

_SUBSETS = (("all", "all"), ("seen", "seen-doc"), ("unseen", "unseen-doc"), ("unseen_relevant", "unseen-rel"))


def plot_fit(report: Any, path: str | os.PathLike) -> Path:
    """Draw ``report`` (a :class:`~asymgeo.adapters.workflow.FitReport`) to ``path`` (PNG, written atomically).

    Left: validation NDCG@10 per epoch, one line per family and learning rate (epoch 0 is
    the start), with the frozen model's validation NDCG@10 dashed.  Right: test NDCG@10 gain
    over frozen per subset (all, seen-document, unseen-document, unseen-relevant) for the
    document prior, the closed form and the trained adapter, with paired 95% intervals.
    """
    import numpy as np

    from .._atomic import PLOT_SOFTWARE, atomic_path

    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    families = report.candidates or {report.adapter.geometry_: report.adapter}
    for fam, ad in families.items():
        runs: dict[float, list[tuple[int, float]]] = {}
        for h in ad.history_:
            if h.get("validation_ndcg") is not None:
                runs.setdefault(h["learning_rate"], []).append((h["epoch"], h["validation_ndcg"]))
        for lr, pts in runs.items():
            e, v = zip(*pts)
            ax1.plot(e, v, marker=".", label=f"{fam}, lr {lr:g}")
    ax1.axhline(report.metrics["frozen"]["validation_ndcg@10"], color="k", ls="--", lw=1, label="frozen")
    ax1.set_xlabel("epoch")
    ax1.set_ylabel(f"validation NDCG@10 ({report.metrics.get('n_selection', '?')} selection queries)")
    ax1.set_title("training (the chosen checkpoint has the highest point)")
    ax1.legend(fontsize=7)
    gen = report.metrics.get("generalisation")
    if gen:
        names = [n for n in gen["rows"] if n != "frozen"]
        width = 0.8 / max(len(names), 1)
        x = np.arange(len(_SUBSETS))
        for i, name in enumerate(names):
            cells = [gen["rows"][name][s] for s, _ in _SUBSETS]
            diff = np.array([c.get("diff", np.nan) for c in cells])
            lo = np.array([c.get("ci_low", np.nan) for c in cells])
            hi = np.array([c.get("ci_high", np.nan) for c in cells])
            err = np.vstack([np.nan_to_num(diff - lo), np.nan_to_num(hi - diff)])
            ax2.bar(x + (i - (len(names) - 1) / 2) * width, np.nan_to_num(diff), width, yerr=err, capsize=3,
                    label=name)
        ax2.set_xticks(x, [f"{lab}\n({gen['rows']['frozen'][s]['n']} q)" for s, lab in _SUBSETS])
        ax2.axhline(0, color="k", lw=1)
        ax2.set_ylabel("test NDCG@10 - frozen (paired 95% interval)")
        ax2.set_title("does it help new queries?")
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
