"""RQ2 cell: raw/corrected/population definitions and the t-interval summary."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from asymgeo.estimators.simulation import two_view_model
from asymgeo.experiments import rq2
from asymgeo.experiments.runner import cell_seed
from asymgeo.kernels.geometry import psd_distance, relevance_moment
from asymgeo.kernels.selection import half_splits
from reference_impl import naive_cars_score

CFG = dict(angle=0.8, n=256, seed_index=1, rank=8, p=32, latent_rank=8, noise_sd=0.6, cars_splits=6,
           master_seed=20260809)


def test_cell_deterministic_and_definitions():
    out = rq2.cell(CFG)
    assert out == rq2.cell(dict(CFG))
    model = two_view_model(32, 8, 0.6, 0.8, seed=cell_seed(20260809, 0))
    tr = model.sample_triples(256, cell_seed(20260809, 2, 1, 256))
    assert out["raw"] == pytest.approx(psd_distance(relevance_moment(tr.X, tr.Y_pos, tr.Y_neg), 8), rel=1e-8)
    assert out["population"] == pytest.approx(psd_distance(model.C_q @ model.C_d.T, 8))
    # CARS from scratch (tests/reference_impl.py: loops, full SVD / eigendecomposition) on the same splits
    # (cars_score draws its splits from the second child of SeedSequence(seed))
    split_ss = np.random.SeedSequence(cell_seed(20260809, 3, 1, 256)).spawn(2)[1]
    splits = half_splits(256, 6, np.random.default_rng(split_ss))
    score, agree, disagree = naive_cars_score(tr.X, tr.Y_pos, tr.Y_neg, 8, splits)
    assert out["cars_score"] == pytest.approx(score, rel=1e-6)
    assert out["corrected"] == pytest.approx(float(np.mean(agree)), rel=1e-6)


def test_raw_is_inflated_and_corrected_is_closer_on_average():
    outs = [rq2.cell({**CFG, "n": 64, "seed_index": s}) for s in range(6)]
    pop = outs[0]["population"]
    raw = np.mean([o["raw"] for o in outs])
    cor = np.mean([o["corrected"] for o in outs])
    assert raw > pop
    assert abs(cor - pop) < raw - pop


def test_summary_t_interval_and_claims(tmp_path):
    rows = []
    vals = {32: [3.0, 3.4, 3.2], 256: [2.5, 2.6, 2.55]}
    for n, raws in vals.items():
        for s, r in enumerate(raws):
            rows.append(dict(angle=0.8, n=n, seed_index=s, raw=r, corrected=2.2 + 0.1 * (s - 1),
                             cars_score=2.0, population=2.24))
    s = rq2.summarise(pd.DataFrame(rows))
    lo, hi = stats.t.interval(0.95, 2, loc=np.mean(vals[32]), scale=stats.sem(vals[32]))
    r0 = s[s.n == 32].iloc[0]
    assert (r0.raw_low, r0.raw_high) == pytest.approx((lo, hi))
    c = rq2.claims(s)
    assert c["raw_ci_above_population_everywhere"] and c["raw_excess_shrinks_with_n_every_angle"]
    assert c["corrected_ci_covers_population"] == 2 and c["corrected_closer_than_raw"] == 2
    rq2.plot(s, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000


def test_claims_fail_on_failing_inputs():
    """Raw below the population, no shrinkage, corrected far off: every claim is false."""
    rows = []
    for n, raw in ((32, [1.0, 1.1, 0.9]), (256, [1.5, 1.6, 1.4])):
        for s, r in enumerate(raw):
            rows.append(dict(angle=0.8, n=n, seed_index=s, raw=r, corrected=5.0 + 0.1 * s,
                             cars_score=4.0, population=2.24))
    c = rq2.claims(rq2.summarise(pd.DataFrame(rows)))
    assert c["raw_ci_above_population_everywhere"] is False
    assert c["raw_excess_shrinks_with_n_every_angle"] is False  # excess -1.24 -> -0.74: |.| shrinks, value grows
    assert c["corrected_ci_covers_population"] == 0 and c["corrected_closer_than_raw"] == 0
