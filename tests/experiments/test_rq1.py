"""RQ1 cell: determinism, seed pairing, population gap, and honest sign checks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from asymgeo.experiments import rq1

BASE = dict(p=32, latent_rank=8, noise_sd=0.6, n_negatives=299, master_seed=20260809, cars_splits=0)


def _cfg(**kw):
    return {**BASE, "angle": 0.0, "n": 64, "rank": 8, "seed_index": 0, "n_test": 100, **kw}


def test_cell_is_deterministic():
    a = rq1.cell(_cfg(angle=0.6, cars_splits=3))
    b = rq1.cell(_cfg(angle=0.6, cars_splits=3))
    assert a == b
    assert {"ndcg_shared", "ndcg_dual", "ndcg_diff", "population_gpsd", "train_seed", "test_seed",
            "model_seed", "cars_score", "cars_choice"} <= set(a)
    assert a["ndcg_diff"] == pytest.approx(a["ndcg_dual"] - a["ndcg_shared"])


def test_seeds_are_paired_across_angles_ranks_and_sizes():
    a = rq1.cell(_cfg(angle=0.0, rank=4))
    b = rq1.cell(_cfg(angle=1.2, rank=8))
    c = rq1.cell(_cfg(angle=1.2, n=128))
    d = rq1.cell(_cfg(seed_index=1))
    assert a["train_seed"] == b["train_seed"] and a["test_seed"] == b["test_seed"] == c["test_seed"]
    assert a["model_seed"] == d["model_seed"]
    assert c["train_seed"] != b["train_seed"] and d["test_seed"] != a["test_seed"]


def test_population_distance_zero_at_angle_zero_and_growing():
    angles = (0.0, 0.4, 0.8, 1.2)
    vals = [rq1.cell(_cfg(angle=a, n=32, n_test=10))["population_gpsd"] for a in angles]
    # Closed form, independent of psd_distance: C = C_q C_d^T has k unit singular values
    # (||C||^2 = k) and sym(C) has k eigenvalues (1 + cos t)/2 > 0 and k <= 0, so the best
    # rank-k PSD fit keeps the k positive ones: G_PSD = k (1 - ((1 + cos t)/2)^2).
    k = 8
    for a, v in zip(angles, vals):
        assert v == pytest.approx(k * (1 - ((1 + np.cos(a)) / 2) ** 2), abs=1e-9)


def test_dual_wins_at_large_angle_and_large_n():
    out = rq1.cell(_cfg(angle=1.2, n=2048, n_test=500))
    assert out["ndcg_diff"] > 3 * out["ndcg_diff_se"] > 0


def test_shared_wins_at_angle_zero_small_n():
    # With no population asymmetry and few pairs, dual only adds variance.
    diffs = [rq1.cell(_cfg(angle=0.0, n=32, n_test=400, seed_index=s))["ndcg_diff"] for s in range(3)]
    assert np.mean(diffs) < 0


def test_summary_first_positive_and_plot(tmp_path):
    rows = []
    for angle, diffs in ((0.8, [-0.02, -0.01, 0.01, 0.02]), (1.2, [-0.01, 0.02, 0.03, 0.04])):
        for n, d in zip((32, 64, 128, 256), diffs):
            for s, eps in enumerate((-0.001, 0.001)):
                rows.append(dict(rank=8, angle=angle, n=n, seed_index=s, ndcg_diff=d + eps, ndcg_shared=0.5,
                                 ndcg_dual=0.5 + d + eps, population_gpsd=angle, population_gap=angle,
                                 cars_choice="dual" if d > 0 else "shared"))
    summary = rq1.summarise(pd.DataFrame(rows))
    assert rq1.first_positive(summary, 8) == {0.8: 128, 1.2: 64}
    assert rq1.first_significant(summary, 8) == {0.8: 128, 1.2: 64}  # +-0.001 spread: tight intervals
    wide = summary.assign(ci_low=summary["diff_mean"] - 0.015)
    assert rq1.first_significant(wide, 8) == {0.8: 256, 1.2: 64}
    row = summary[(summary.angle == 0.8) & (summary.n == 32)].iloc[0]
    assert row.diff_mean == pytest.approx(-0.02)
    half = 1.96 * np.std([-0.021, -0.019], ddof=1) / np.sqrt(2)
    assert row.ci_high - row.diff_mean == pytest.approx(half)
    rq1.plot(summary, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000


def test_claims_on_a_hand_made_summary():
    import pandas as pd

    from asymgeo.experiments.rq1 import claims

    rows = [  # angle, n, diff_mean, ci_low, population_gpsd
        (0.0, 64, -0.20, -0.30, 0.0), (0.0, 256, -0.05, -0.10, 0.0),
        (0.8, 64, -0.10, -0.20, 1.0), (0.8, 256, 0.10, -0.01, 1.0),
        (1.2, 64, 0.05, 0.01, 2.0), (1.2, 256, 0.20, 0.10, 2.0),
    ]
    s = pd.DataFrame(rows, columns=["angle", "n", "diff_mean", "ci_low", "population_gpsd"]).assign(rank=8)
    c = claims(s, rank=8)
    assert c["first_positive"] == {0.0: None, 0.8: 256, 1.2: 64}
    assert [(e["angle"], e["ours"], e["holds"]) for e in c["paper_first_positive"]] == [(0.8, 256, True), (1.2, 64, True)]
    assert c["first_significant"] == {0.0: None, 0.8: None, 1.2: 64}
    assert [(e["ours"], e["holds"]) for e in c["significant"]] == [(None, False), (64, True)]
    assert (c["positive_cells"], c["cells"], c["both_signs"]) == (3, 6, True)
    assert (c["first_positive_12"], c["first_positive_08"], c["order_holds"]) == (64, 256, True)
    # corr of (0, 1, 2) with (-0.05, 0.10, 0.20) by hand: 0.25 / sqrt(2 * 0.0316667)
    assert c["largest_n"] == 256 and c["gpsd_trend_corr"] == pytest.approx(0.25 / (2 * 0.0316666667) ** 0.5, rel=1e-6)
    assert c["trend_holds"] is True
    missing = claims(s[s["angle"] != 0.8], rank=8)["paper_first_positive"]
    assert missing[0] == {"angle": 0.8, "paper_n": 256, "ours": "not in grid", "holds": None}


def test_selector_regrets_by_hand():
    import pandas as pd

    from asymgeo.experiments.rq1 import selector_regrets

    df = pd.DataFrame([  # angle 0.4: dual wins by .1, angle 0.6: shared wins by .2; angle 1.0 is left out
        dict(rank=8, angle=0.4, ndcg_shared=0.5, ndcg_dual=0.6, cars_choice="shared", cv_choice="dual"),
        dict(rank=8, angle=0.6, ndcg_shared=0.7, ndcg_dual=0.5, cars_choice="shared", cv_choice="dual"),
        dict(rank=8, angle=1.0, ndcg_shared=0.1, ndcg_dual=0.9, cars_choice="shared", cv_choice="shared"),
    ])
    out = selector_regrets(df).set_index("angle")
    assert out.loc["all", "cells"] == 2
    assert out.loc["all", "regret_cars"] == pytest.approx(0.05) and out.loc["all", "regret_cv"] == pytest.approx(0.1)
    assert out.loc["all", "accuracy_cars"] == 0.5 and out.loc["all", "accuracy_cv"] == 0.5
    assert out.loc["all", "regret_shared"] == pytest.approx(0.05) and out.loc["all", "regret_dual"] == pytest.approx(0.1)
    assert out.loc[0.4, "regret_cars"] == pytest.approx(0.1) and out.loc[0.6, "regret_cv"] == pytest.approx(0.2)


def test_rq1_cell_carries_the_other_selectors():
    # the ranking rule of the simulation by hand: 80/20 split of the triples, held-out pairwise accuracy
    import numpy as np

    from asymgeo.estimators.simulation import two_view_model
    from asymgeo.experiments import rq1
    from asymgeo.experiments.runner import cell_seed
    from asymgeo.kernels.geometry import dual_truncate, shared_truncate
    from asymgeo.kernels.operator_risk import cross_validated_risk
    from asymgeo.kernels.theory import anisotropic_sure

    cfg = dict(angle=0.8, n=128, rank=4, seed_index=1, p=16, latent_rank=4, noise_sd=0.6, n_test=50,
               n_negatives=9, master_seed=7, cars_splits=0, selectors=True)
    out = rq1.cell(cfg)
    model = two_view_model(p=16, latent_rank=4, noise_sd=0.6, angle=0.8, seed=cell_seed(7, 0))
    tr = model.sample_triples(128, cell_seed(7, 2, 1, 128))
    X, D = tr.X.astype(float), tr.Y_pos.astype(float) - tr.Y_neg
    seed = cell_seed(7, 4, 1, 128)
    assert out["cv_choice"] == cross_validated_risk(X, D, np.zeros_like(D), 4, folds=5, seed=seed).choice
    assert out["anisotropic_choice"] == anisotropic_sure(X, D, 4).choice
    perm = np.random.default_rng(np.random.SeedSequence(seed)).permutation(128)
    val, fit = perm[:25], perm[25:]
    C = X[fit].T @ D[fit] / fit.size
    acc = {g: np.array([float(X[i] @ M @ D[i] > 0) for i in val])
           for g, M in (("shared", shared_truncate(C, 4, solver="dense")), ("dual", dual_truncate(C, 4, solver="dense")))}
    d = acc["dual"] - acc["shared"]
    assert out["pairwise_score"] == pytest.approx(d.mean())
    assert out["pairwise_choice"] == ("dual" if d.mean() > d.std(ddof=1) / np.sqrt(25) else "shared")
