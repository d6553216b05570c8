"""Cost of ``fit --geometry auto`` (both families, chosen by validation; CARS beside it) against
one family, on SciFact and NFCorpus with MiniLM (rank 16, the default learning-rate grid and
30 epochs; ``--quick``: SciFact only, 64 training queries, 2 epochs, one learning rate).

Both timings run in this process one after the other, best of ``repeats``; the ratio is the
figure (auto trains two families, so about 2x is the expected cost). Goal (issue #17):
``fit --geometry auto`` on NFCorpus under 60 s on 2 cores.
"""

from __future__ import annotations

import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / ".." / "shared"


def _fit(dataset: str, geometry: str, quick: bool) -> tuple[float, dict]:
    from asymgeo.adapters.workflow import fit_adapter

    kw = dict(n_train=64, epochs=2, learning_rates=(1e-3,)) if quick else {}
    t0 = time.perf_counter()
    rep = fit_adapter(dataset, "all-MiniLM-L6-v2", geometry=geometry, rank=16, report=False,
                      data_dir=SHARED / "data", cache_dir=SHARED / "embeddings", **kw)
    return time.perf_counter() - t0, rep.metrics


def run(quick: bool = False) -> str:
    from asymgeo.adapters.workflow import load_adaptation_data

    datasets = ["scifact"] if quick else ["scifact", "nfcorpus"]
    repeats = 1 if quick else 2
    rows = []
    for ds in datasets:
        load_adaptation_data(ds, "all-MiniLM-L6-v2", data_dir=SHARED / "data", cache_dir=SHARED / "embeddings")
        one = min(_fit(ds, "dual", quick)[0] for _ in range(repeats))
        runs = [_fit(ds, "auto", quick) for _ in range(repeats)]
        auto = min(t for t, _ in runs)
        a = runs[0][1]["auto"]
        rows.append(f"| {ds} | {one:.1f} | {auto:.1f} | {auto / one:.2f}x | {a['choice']} ({a['rule']}) |")
    return "\n".join([
        "## `fit --geometry auto` against one family",
        "",
        "MiniLM, rank 16" + (" (quick: 64 training queries, 2 epochs, lr 1e-3)" if quick else
                             ", learning rates 3e-4 / 1e-3 / 3e-3, 30 epochs")
        + f"; wall seconds, best of {repeats}, data loaded (and hard negatives mined) before timing.",
        "",
        "| dataset | one family (dual) s | auto (both + CARS) s | ratio | auto chose |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "Goal (issue #17): `fit --geometry auto` on NFCorpus under 60 s on 2 cores.",
    ])


if __name__ == "__main__":
    import sys

    print(run(quick="--quick" in sys.argv))
