"""RQ2 on real data: deciles and claims on synthetic fits with known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from asymgeo.experiments import rq2_real


def _fits(cars_sign=1.0):
    rng = np.random.default_rng(0)
    adv = np.linspace(-1.0, 1.0, 100)
    return pd.DataFrame({"advantage": adv,
                         "raw_distance": rng.permutation(100).astype(float),      # uninformative
                         "corrected_distance": -adv,                               # anti-informative
                         "cars_score": cars_sign * adv * 3.0})


def test_deciles_by_hand():
    d = rq2_real.deciles(_fits())
    g = d[d.score == "cars_score"].sort_values("decile")
    adv = np.linspace(-1.0, 1.0, 100)
    assert np.allclose(g["mean"], [adv[10 * b:10 * b + 10].mean() for b in range(10)])
    assert list(g["fits"]) == [10] * 10
    assert g["dual_share"].iloc[0] == 0.0 and g["dual_share"].iloc[-1] == 1.0
    h = d[d.score == "corrected_distance"].sort_values("decile")
    assert h["mean"].iloc[0] == pytest.approx(adv[90:].mean())   # reversed order


def test_claims_hold_and_fail():
    c = rq2_real.claims(_fits())
    assert c["cars_score_spearman"] == pytest.approx(1.0)
    assert c["corrected_distance_spearman"] == pytest.approx(-1.0)
    assert c["corrected_stronger"] and c["corrected_rises"]
    bad = rq2_real.claims(_fits(cars_sign=-1.0))
    assert not bad["corrected_stronger"] and not bad["corrected_rises"]


def test_plot(tmp_path):
    rq2_real.plot(_fits(), tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000
