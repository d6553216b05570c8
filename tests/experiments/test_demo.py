"""``asymgeo demo`` is a column of the RQ1 grid: each row is one RQ1 cell."""

from __future__ import annotations

import pytest

from asymgeo.experiments import rq1
from asymgeo.experiments.demo import format_demo, run_demo


def test_demo_rows_are_rq1_cells():
    res = run_demo(angle=0.8, rank=4, sizes=(16, 64), seed=5, n_test=40, n_negatives=20, n_splits=4)
    for row in res["rows"]:
        rec = rq1.cell({"angle": 0.8, "n": row["n"], "rank": 4, "seed_index": 0, "p": 32, "latent_rank": 8,
                        "noise_sd": 0.6, "n_test": 40, "n_negatives": 20, "master_seed": 5, "cars_splits": 4})
        assert row["ndcg10_shared"] == rec["ndcg_shared"] and row["ndcg10_dual"] == rec["ndcg_dual"]
        assert row["cars_score"] == rec["cars_score"] and row["cars_choice"] == rec["cars_choice"]
        assert row["train_gap"] == rec["train_gap"]
        assert row["seeds"]["train_seed"] == rec["train_seed"] == rq1.cell_seed(5, 2, 0, row["n"])
    assert res["population"] == {"gap": rec["population_gap"], "psd_distance": rec["population_gpsd"]}
    assert "CARS agreed with the held-out winner" in format_demo(res)


@pytest.mark.parametrize("kwargs, match", [
    ({"sizes": ()}, "sizes"),
    ({"sizes": (2,)}, "n: every training size"),
    ({"seed": -1}, "seed: expected a non-negative integer"),
    ({"seed": 1.5}, "seed"),
])
def test_demo_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        run_demo(**kwargs)
