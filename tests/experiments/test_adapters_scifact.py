"""Tests of asymgeo.experiments.adapters_scifact: the SciFact sweep cell and its summary."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from asymgeo.experiments.adapters_scifact import cell, format_summary, summarise
from asymgeo.experiments.runner import load_experiment


def _row(enc, n, s, shared, dual):
    r = {"encoder": enc, "n": n, "seed_index": s, "frozen_test": 0.6, "baseline_shared_test": 0.61,
         "baseline_dual_test": 0.62, "cars_choice": "dual" if s == 0 else "shared"}
    for form in ("augmented", "projection"):
        r[f"shared_{form}_test"] = shared
        r[f"dual_{form}_test"] = dual
    return r


def test_summarise_by_hand():
    df = pd.DataFrame([_row("m", 32, 0, 0.70, 0.71), _row("m", 32, 1, 0.72, 0.70), _row("m", 32, 2, 0.74, 0.75)])
    s = summarise(df).iloc[0]
    assert s["seeds"] == 3 and s["shared_augmented_test_mean"] == pytest.approx(0.72)
    assert s["shared_augmented_test_sd"] == pytest.approx(0.02)  # sample sd of 0.70, 0.72, 0.74
    assert s["gap_augmented_mean"] == pytest.approx((0.01 - 0.02 + 0.01) / 3)
    assert s["dual_wins_augmented"] == 2 and s["cars_dual"] == 1
    text = format_summary(summarise(df))
    assert "| 32 | 3 | 0.6000 ± 0.0000 |" in text and "2/3" in text


def test_experiment_config_is_the_issue_grid():
    exp = load_experiment("adapters")
    cfgs = exp.configs()
    assert len(cfgs) == 2 * 5 * 3
    assert {c["n"] for c in cfgs} == {32, 64, 128, 256, 647} and {c["rank"] for c in cfgs} == {16}


@pytest.mark.slow
def test_quick_cell_runs_and_is_paired(shared_dir):
    cfg = dict(load_experiment("adapters", quick=True).configs()[0])
    cfg.update(data_dir=str(shared_dir / "data"), cache_dir=str(shared_dir / "embeddings"))
    out = cell(cfg)
    # frozen all-MiniLM-L6-v2 on SciFact's 300 test queries: MTEB's published NDCG@10, 0.6451
    assert out["frozen_test"] == pytest.approx(0.6451, abs=5e-5)
    assert out["cars_choice"] == ("dual" if out["cars_score"] > 0 else "shared")
    assert np.isfinite([out[f"{f}_{m}_test"] for f in ("shared", "dual") for m in ("augmented", "projection")]).all()
    again = cell(cfg)  # deterministic given the seeds (wall times aside)
    assert {k: v for k, v in out.items() if not k.endswith("_seconds")} == {
        k: v for k, v in again.items() if not k.endswith("_seconds")}
