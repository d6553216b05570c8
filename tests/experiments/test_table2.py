"""Table 2 cell: batched nearest points, the design, and agreement with Theorems 2-3
within Monte-Carlo tolerance (theory recomputed here from the paper's formulas)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from asymgeo.experiments import table2
from asymgeo.kernels.geometry import dual_truncate, shared_truncate, tangent_projectors

CFG = dict(p=12, rank=3, sigma=1.0, shared_signal=4.0, risk_draws=3000, sure_draws=40000, chunk=1000,
           master_seed=20260809)


def test_batched_truncations_match_library():
    rng = np.random.default_rng(0)
    Y = rng.standard_normal((5, 12, 12))
    Y[0] = -Y[0] @ Y[0].T  # negative semidefinite: shared truncation must be 0
    for b in range(5):
        np.testing.assert_allclose(table2.batched_dual_truncate(Y, 3)[b], dual_truncate(Y[b], 3), atol=1e-10)
        np.testing.assert_allclose(table2.batched_shared_truncate(Y, 3)[b], shared_truncate(Y[b], 3), atol=1e-10)
    assert np.abs(table2.batched_shared_truncate(Y[:1], 3)).max() < 1e-12


@pytest.mark.parametrize("level", [0.0, 1.0, 2.0])
def test_design_has_requested_directional_signal(level):
    S, U, H, delta2, k = table2.design(12, 3, 1.0, level, 4.0, 20260809)
    assert k == 3 * (2 * 12 - 3 - 1) // 2 == 30
    Pd, Ps, Pa = tangent_projectors(U)
    assert np.sum(Pa(H) ** 2) == pytest.approx(level * 30, abs=1e-9)
    assert np.sum(Ps(H) ** 2) == pytest.approx(4.0)
    np.testing.assert_allclose(Pd(H), H, atol=1e-12)
    np.testing.assert_allclose(S, S.T)
    assert np.linalg.matrix_rank(S) == 3


def test_cell_deterministic():
    cfg = {**CFG, "n": 256, "level": 0.5, "risk_draws": 200, "sure_draws": 1000}
    assert table2.cell(cfg) == table2.cell(dict(cfg))


@pytest.mark.parametrize("level", [0.0, 2.0])
def test_cell_agrees_with_theory_within_monte_carlo_error(level):
    p, r, k = 12, 3, 30
    out = table2.cell({**CFG, "n": 4096, "level": level})
    d_d, d_s = 2 * p * r - r * r, p * r - r * (r - 1) // 2  # Appendix B.1
    delta2 = level * k
    theory_dual, theory_shared = d_d, delta2 + d_s          # Theorem 2, sigma = 1
    # 4 standard errors (from the simulated losses) plus the O(n^-1/2) local-expansion slack
    assert abs(out["risk_dual"] - theory_dual) < 4 * out["risk_dual_se"] + 0.01 * theory_dual
    assert abs(out["risk_shared"] - theory_shared) < 4 * out["risk_shared_se"] + 0.01 * theory_shared
    p_exact = stats.ncx2.sf(2 * k, k, delta2) if delta2 > 0 else stats.chi2.sf(2 * k, k)  # Theorem 3
    p_hat = out["sure_prob"]
    se = np.sqrt(max(p_hat * (1 - p_hat), p_exact * (1 - p_exact)) / CFG["sure_draws"])
    assert abs(p_hat - p_exact) < 4 * se + 1e-4
    assert out["sure_prob_theory"] == pytest.approx(p_exact)


def test_small_n_is_visibly_nonlinear():
    # At n = 64 the nonlinear projections are far from their local limits: the table
    # is informative only because the risks converge as n grows.
    out = table2.cell({**CFG, "n": 64, "level": 0.0, "risk_draws": 1000, "sure_draws": 1000})
    assert out["risk_dual"] > out["risk_dual_theory"] + 5 * out["risk_dual_se"]


def test_claims_on_a_hand_made_summary():
    import pandas as pd

    from asymgeo.experiments.table2 import claims

    s = pd.DataFrame({
        "n": [256, 4096, 4096],
        "rel_err_dual": [0.05, 0.001, -0.002], "rel_err_shared": [0.04, 0.0005, 0.003],
        "rel_se_dual": [0.01, 0.0010, 0.0011], "rel_se_shared": [0.01, 0.0012, 0.0009],
        "z_dual": [5.0, 1.0, -1.8], "z_shared": [4.0, 0.4, 3.3],
        "abs_err_sure": [0.01, -0.0004, 0.0012], "sure_prob_se": [0.002, 0.0005, 0.0004], "z_sure": [5.0, -0.8, 3.0],
    })
    c = claims(s)  # only the n = 4096 rows count
    assert c["n"] == 4096
    assert c["max_rel_err"] == 0.003 and c["max_rel_se"] == 0.0012 and c["max_abs_z"] == 3.3
    assert c["risks_hold"] is False  # 0.3% > 0.25%
    assert c["max_abs_err_sure"] == 0.0012 and c["max_sure_se"] == 0.0005 and c["max_abs_z_sure"] == 3.0
    assert c["sure_holds"] is False  # 0.0012 > 0.001
    assert claims(s.assign(rel_err_shared=[0.0, 0.0, 0.002], abs_err_sure=[0.0, 0.0, 0.0009]))["risks_hold"] is True
