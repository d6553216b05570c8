"""RQ3 at 0 degrees (issue #37): the 2 x 2 summary against hand-computed means, errors and effects,
and the quick grid through the runner to the page."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from asymgeo.experiments.rq3_zero_angle import format_summary, summarise


def _table():
    rows = []
    gaps = {(20260809, "random"): [0.02, 0.01, 0.03], (20260809, "random_independent"): [0.00, 0.01, -0.01],
            (7, "random"): [0.01, 0.01, 0.01], (7, "random_independent"): [0.0, 0.02, 0.01]}
    for (split, init), vals in gaps.items():
        for s, v in enumerate(vals):
            rows.append({"dataset": "scifact", "encoder": "m", "split_seed": split, "init": init, "seed_index": s,
                         "ndcg_diff": v, "ndcg_frozen": 0.6, "status": "ok"})
            rows.append({"dataset": "nfcorpus", "encoder": "m", "split_seed": split, "init": init, "seed_index": s,
                         "ndcg_diff": 0.0, "ndcg_frozen": 0.3, "status": "ok"})
    rows.append({**rows[0], "status": "failed", "ndcg_diff": 9.0})  # not finished: ignored
    return pd.DataFrame(rows)


def test_summary_by_hand():
    s = summarise(_table())
    c = s["cells"][("scifact", "m", 20260809, "random")]
    assert c["mean"] == pytest.approx(0.02) and c["seeds"] == 3
    assert c["se"] == pytest.approx(0.01 / math.sqrt(3))  # sd of (0.02, 0.01, 0.03) is 0.01
    assert s["cells"][("scifact", "m", 7, "random")]["se"] == pytest.approx(0.0, abs=1e-15)
    o = s["overall"][(20260809, "random")]  # mean of the pairs: (0.02 + 0) / 2, se sqrt(se^2 + 0) / 2
    assert o["mean"] == pytest.approx(0.01) and o["se"] == pytest.approx(0.01 / math.sqrt(3) / 2)
    e = s["effects"][("scifact", "m")]
    # split: ((0.01 + 0.01) - (0.02 + 0.0)) / 2 = 0; start: ((0.0 + 0.01) - (0.02 + 0.01)) / 2 = -0.01
    assert e["split"] == pytest.approx(0.0, abs=1e-12) and e["start"] == pytest.approx(-0.01)
    ses = [np.std(v, ddof=1) / math.sqrt(3) for v in ([0.02, 0.01, 0.03], [0.0, 0.01, -0.01], [0.01] * 3,
                                                      [0.0, 0.02, 0.01])]
    assert e["start_se"] == pytest.approx(math.sqrt(sum(x * x for x in ses)) / 2)
    assert s["n_cells"] == 24  # 2 pairs x 4 (split, start) x 3 seeds; the failed row left out
    page = format_summary(s, "cmd")
    assert "| scifact | m | 20260809 | tied (A = B) | 3 | 0.6000 | +0.0200 ± 0.0058 |" in page
    assert page.index("| 20260809 | tied") < page.index("| 7 | tied")  # the default split first


def test_quick_grid_runs_to_the_page(tmp_path):
    from asymgeo.experiments.config import load_experiment
    from asymgeo.experiments.runner import read_results, run_sweep

    exp = load_experiment("rq3_zero_angle", quick=True)
    run_sweep(exp, results_dir=tmp_path, workers=1, progress=False)
    table = read_results(tmp_path, exp.name)
    assert set(table["init"]) == {"random", "random_independent"} and set(table["split_seed"]) == {20260809, 7}
    page = format_summary(summarise(table), "cmd")
    assert "## Which factor moves the gap" in page and "| scifact | all-MiniLM-L6-v2 |" in page
