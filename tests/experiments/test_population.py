"""Selectors judged on the two-view model's exact population risk (issue #37)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from asymgeo.experiments import population as pop
from asymgeo.experiments.runner import cell_seed

BASE = dict(angle=0.6, n=256, rank=4, seed_index=1, p=16, latent_rank=4, noise_sd=0.6, master_seed=7,
            cars_splits=4, cv_folds=5)


def test_population_risks_by_hand():
    # C = diag(2, -1): the shared truncation at rank 1 keeps the positive eigenvalue 2, dual the
    # largest singular value 2 as well; C_hat = diag(2, -1.5) at rank 2: shared keeps 2 only
    C = np.diag([2.0, -1.0])
    C_hat = np.diag([2.0, -1.5])
    rs, rd = pop.population_risks(C_hat, C, 2)
    assert rs == pytest.approx(1.0 / 5.0) and rd == pytest.approx(0.25 / 5.0)
    with pytest.raises(ValueError, match="population moment is zero"):
        pop.population_risks(C_hat, np.zeros((2, 2)), 1)


@pytest.mark.parametrize("variant", list(pop.VARIANTS))
def test_a_cell_scores_every_rule_against_the_population_risk(variant):
    from asymgeo.estimators.simulation import two_view_model
    from asymgeo.kernels.geometry import dual_truncate, shared_truncate
    from asymgeo.kernels.selection import cars_score

    out = pop.cell({**BASE, "variant": variant, "rules": "cars,cv"})
    decay, share = {"paper": (0.0, 0.0), "anisotropic_noise": (3.0, 0.0), "mean_offset": (0.0, 0.46)}[variant]
    model = two_view_model(p=16, latent_rank=4, noise_sd=0.6, angle=0.6, seed=cell_seed(7, 0),
                           query_noise_decay=decay, mean_share=share)
    tr = model.sample_triples(256, cell_seed(7, 2, 1, 256))
    C = model.population_moment()
    C_hat = tr.X.T @ (tr.Y_pos - tr.Y_neg) / 256
    for g, trunc in (("shared", shared_truncate), ("dual", dual_truncate)):
        want = np.sum((trunc(C_hat, 4, solver="dense") - C) ** 2) / np.sum(C ** 2)
        assert out[f"risk_{g}"] == pytest.approx(want, rel=1e-9)
    cars = cars_score(tr.X, tr.Y_pos, tr.Y_neg, 4, n_splits=4, seed=cell_seed(7, 4, 1, 256), n_jobs=1)
    assert (out["cars_choice"], out["cars_score"]) == (cars.choice, pytest.approx(cars.score, rel=1e-9))
    assert "cv_choice" in out and "sure_choice" not in out
    if variant == "mean_offset":
        assert 0.25 < out["mean_share_train"] < 0.6
    else:
        assert out["mean_share_train"] < 0.05


def test_every_registered_triple_rule_runs_by_default():
    from asymgeo.selectors.registry import rule_names

    out = pop.cell({**BASE, "variant": "paper"})
    assert all(f"{r}_choice" in out for r in rule_names(triples_only=True))


def _table():
    # two seeds x two sizes, hand-made risks: dual wins the n = 512 cells, shared the n = 256 ones
    rows = []
    for s in (0, 1):
        for n, (rs, rd) in ((256, (1.0, 1.2)), (512, (1.0, 0.7 - 0.1 * s))):
            rows.append({"variant": "paper", "seed_index": s, "n": n, "rank": 4, "risk_shared": rs, "risk_dual": rd,
                         "mean_share_train": 0.0, "cars_choice": "dual", "cars_score": 1.0 if n == 512 else 0.5,
                         "toy_choice": "dual" if n == 512 else "shared", "toy_score": rs - rd})
    return pd.DataFrame(rows)


def test_summary_by_hand():
    s = pop.summarise(_table(), n_boot=200)
    v = s["variants"]["paper"]
    cars, toy = v["rules"]["cars"], v["rules"]["toy"]
    assert s["rules"] == ["cars", "toy"]                  # the reference rule first
    assert cars["accuracy"] == 0.5 and toy["accuracy"] == 1.0
    assert cars["regret"] == pytest.approx(0.2 / 2) and toy["regret"] == 0.0   # CARS loses 0.2 at n = 256
    assert toy["ratio"] == 0.0 and toy["ratio_low"] == toy["ratio_high"] == 0.0
    assert v["rules"]["shared"]["regret"] == pytest.approx((0.3 + 0.4) / 4)
    assert np.isnan(toy["spearman"][512])        # two cells at n = 512: too few for a rank correlation
    assert v["dual_wins"] == 0.5 and v["seeds"] == 2
    page = pop.format_summary(s, "cmd")
    assert "## `paper`: 4 cells, 2 seeds" in page and "| `toy` | 100.0% | 0 | 0.00 [0.00, 0.00] |" in page


def test_a_tie_goes_to_shared():
    # equal population risks: shared is the winner, so a rule choosing shared is right and costs nothing
    t = pd.DataFrame([{"variant": "paper", "seed_index": 0, "n": 64, "rank": 4, "risk_shared": 0.5,
                       "risk_dual": 0.5, "mean_share_train": 0.0, "cars_choice": "dual", "cars_score": 0.1,
                       "toy_choice": "shared", "toy_score": -0.1}])
    v = pop.summarise(t, n_boot=10)["variants"]["paper"]
    assert v["dual_wins"] == 0.0
    assert v["rules"]["toy"]["accuracy"] == 1.0 and v["rules"]["cars"]["accuracy"] == 0.0
    assert v["rules"]["cars"]["regret"] == 0.0


def test_the_expected_risk_oracle_leaves_each_cells_own_seed_out():
    # one design, three seeds: R_s - R_d = +0.3, +0.3, -0.1 (dual wins the first two draws)
    rows = [{"variant": "paper", "seed_index": s, "n": 256, "rank": 4, "angle": 0.6, "risk_shared": 1.0,
             "risk_dual": 1.0 - d, "mean_share_train": 0.0, "cars_choice": "shared", "cars_score": -1.0}
            for s, d in enumerate((0.3, 0.3, -0.1))]
    # a second design where the cell's own draw would flip its choice: +0.5, -0.2, -0.2 (mean +0.033)
    rows += [{"variant": "paper", "seed_index": s, "n": 128, "rank": 4, "angle": 0.6, "risk_shared": 1.0,
              "risk_dual": 1.0 - d, "mean_share_train": 0.0, "cars_choice": "shared", "cars_score": -1.0}
             for s, d in enumerate((0.5, -0.2, -0.2))]
    # a third design with one seed: no other seed to learn from, so shared
    rows.append({"variant": "paper", "seed_index": 0, "n": 512, "rank": 4, "angle": 0.6, "risk_shared": 1.0,
                 "risk_dual": 0.5, "mean_share_train": 0.0, "cars_choice": "dual", "cars_score": 1.0})
    t = pd.DataFrame(rows)
    # by hand: seeds 0 and 1 see the mean of the other two, (0.3 - 0.1) / 2 > 0 -> dual (right);
    # seed 2 sees (0.3 + 0.3) / 2 > 0 -> dual, wrong by 0.1.  Second design: seed 0 sees -0.2 ->
    # shared, wrong by 0.5; seeds 1 and 2 see (0.5 - 0.2) / 2 > 0 -> dual, wrong by 0.2 each (with
    # their own draw in, all three would say dual).  The lone design -> shared, wrong by 0.5
    assert pop.expected_risk_oracle(t).tolist() == ["dual", "dual", "dual", "shared", "dual", "dual", "shared"]
    v = pop.summarise(t, n_boot=20)["variants"]["paper"]
    o = v["rules"][pop.ORACLE]
    assert o["regret"] == pytest.approx((0.1 + 0.5 + 0.2 + 0.2 + 0.5) / 7) and o["accuracy"] == pytest.approx(2 / 7)  # right: design A seeds 0 and 1
    assert o["spearman"] == {}  # a reference, not a score
    assert v["rules"]["cars"]["regret"] == pytest.approx((0.3 + 0.3 + 0.5) / 7)
    assert o["ratio"] == pytest.approx(1.5 / 1.1)
    assert "| `oracle_expected` | 28.6% |" in pop.format_summary(pop.summarise(t, n_boot=20), "cmd")
