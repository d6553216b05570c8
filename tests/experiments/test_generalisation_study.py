"""The generalisation study: the validation choice and the goal table, on hand-made records."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from asymgeo.experiments import generalisation as study


def _rows():
    # two variants on one dataset/encoder/family, two seeds each
    base = dict(dataset="scifact", encoder="e", geometry="dual", learning_rate=1e-3, best_epoch=3, fallback=False)
    recs = []
    for variant, val_u, test_u, test_all, prior_all in (("paper", -0.04, -0.05, 0.70, 0.69),
                                                        ("disjoint", 0.02, 0.01, 0.66, 0.69)):
        for seed in (0, 1):
            recs.append({**base, "variant": variant, "seed_index": seed,
                         "val_trained_unseen_diff": val_u + 0.001 * seed, "val_frozen_unseen_n": 67,
                         "val_trained_all_diff": 0.05, "test_trained_unseen_diff": test_u,
                         "test_trained_unseen_ci_low": test_u - 0.02, "test_trained_unseen_ci_high": test_u + 0.02,
                         "test_trained_all_ndcg": test_all, "test_prior_all_ndcg": prior_all,
                         "test_frozen_all_ndcg": 0.64, "test_trained_all_diff": test_all - 0.64})
    return pd.DataFrame(recs)


def test_choice_is_by_validation_unseen_gain():
    rows = study.summarise(_rows())
    default, means = study.choose_default(rows)
    assert default == "disjoint"
    assert means["paper"] == pytest.approx(-0.0395) and means["disjoint"] == pytest.approx(0.0205)


def test_small_unseen_validation_falls_back_to_the_all_query_gain():
    t = _rows()
    t["val_frozen_unseen_n"] = 1  # NFCorpus-like: one unseen-document validation query
    rows = study.summarise(t)
    _, means = study.choose_default(rows)
    assert means["paper"] == pytest.approx(0.05) and means["disjoint"] == pytest.approx(0.05)


def test_goal_rows_say_which_half_fails_and_by_how_much():
    rows = study.summarise(_rows())
    goal = study._goal_rows(rows, "disjoint")
    assert goal == [["scifact", "e", "dual", "+0.010 [-0.010, +0.030]", "yes", "-0.030", "no (short by 0.030)"]]
    text = study.format_summary(rows, "cmd")
    assert "**Default chosen: `disjoint`.**" in text and "short by 0.030" in text
    assert not np.isnan(rows[0]["test_trained_all_ndcg"])


def test_quick_cell_records_both_tables(shared_dir):
    rec = study.cell({"dataset": "scifact", "encoder": "all-MiniLM-L6-v2", "geometry": "dual",
                      "variant": "disjoint", "seed_index": 0, "rank": 4, "epochs": 1, "learning_rates": "1e-3",
                      "data_dir": str(shared_dir / "data"), "cache_dir": str(shared_dir / "embeddings")})
    assert rec["n_selection"] == 67 and rec["fallback"] is False
    assert rec["test_frozen_seen_n"] + rec["test_frozen_unseen_n"] == 300
    assert rec["val_frozen_all_n"] == 162
    assert rec["test_trained_all_diff"] == pytest.approx(rec["test_trained_all_ndcg"] - rec["test_frozen_all_ndcg"],
                                                         abs=1e-9)
