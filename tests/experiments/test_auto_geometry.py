"""The auto-geometry experiment: rule picks recomputed from the records, scored by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from asymgeo.experiments import auto_geometry


def _table():
    # four cells: (val_diff, val_se, CARS choice and clarity, test shared, test dual)
    rows = [
        dict(val_diff=+0.02, val_se=0.01, choice_cars="shared", cars_score=-1.0, cars_se=0.1, test_shared=0.60,
             test_dual=0.65),  # clear validation win for dual; dual wins test
        dict(val_diff=+0.005, val_se=0.01, choice_cars="dual", cars_score=1.0, cars_se=0.1, test_shared=0.70,
             test_dual=0.68),  # tie: one-SE -> shared (right); CARS -> dual (wrong)
        dict(val_diff=-0.03, val_se=0.01, choice_cars="dual", cars_score=1.0, cars_se=0.1, test_shared=0.50,
             test_dual=0.52),  # clear validation win for shared; dual wins test
        dict(val_diff=0.0, val_se=0.01, choice_cars="dual", cars_score=0.05, cars_se=0.1, test_shared=0.40,
             test_dual=0.41),  # tie, CARS unclear: shared either way (wrong)
    ]
    t = pd.DataFrame(rows)
    t["dataset"], t["encoder"], t["rank"], t["seconds_auto"] = "d", "e", 4, 1.0
    return t


def test_rule_picks_follow_choose_family():
    picks = auto_geometry.rule_picks(_table())
    assert list(picks["validation"]) == ["dual", "shared", "shared", "shared"]
    assert list(picks["validation, CARS breaks ties"]) == ["dual", "dual", "shared", "shared"]
    assert list(picks["cars"]) == ["shared", "dual", "dual", "dual"]


def test_summary_accuracy_and_loss_by_hand():
    s = auto_geometry.summarise(_table())
    v = s["rules"]["validation"]
    assert v["accuracy"] == pytest.approx(2 / 4)
    assert v["mean_loss"] == pytest.approx((0 + 0 + 0.02 + 0.01) / 4)
    c = s["rules"]["cars"]
    assert c["accuracy"] == pytest.approx(2 / 4) and c["mean_loss"] == pytest.approx((0.05 + 0.02 + 0 + 0) / 4)
    assert s["rules"]["dual"]["accuracy"] == pytest.approx(3 / 4)
    text = auto_geometry.format_summary(s, "cmd")
    assert "| validation | 50% | 0.0075 |" in text and "after** seeing" in text


def test_quick_cell_runs(shared_dir):
    rec = auto_geometry.cell({"dataset": "scifact", "encoder": "all-MiniLM-L6-v2", "rank": 4, "seed_index": 0,
                              "epochs": 1, "learning_rates": "1e-3", "selection": "document_disjoint", "anchor": 0.0,
                              "data_dir": str(shared_dir / "data"), "cache_dir": str(shared_dir / "embeddings")})
    assert rec["val_se"] > 0
    # choose_family's rule: the better family beyond one standard error, else shared
    assert rec["choice_validation"] == ("dual" if rec["val_diff"] > rec["val_se"] else "shared")
    assert rec["val_diff"] == pytest.approx(rec["val_dual"] - rec["val_shared"], abs=1e-12)
    # frozen all-MiniLM-L6-v2 on SciFact's 300 test queries: MTEB's published NDCG@10, 0.6451
    assert rec["test_frozen"] == pytest.approx(0.6451, abs=5e-5)
