"""Bootstrap SURE (rule ``bsure``, issue #37) against a brute-force reimplementation, hand
calculations and the anisotropic SURE statistic it reduces to where the truncations are linear."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asymgeo.kernels.bootstrap_risk import BOOTSTRAP_PAIRS, noise_doubled_risk
from asymgeo.selectors.registry import SelectionContext, get_rule


def _truncations(M, r):
    """(shared, dual) by numpy's eigh and svd: the top r positive eigenvalues of sym(M); rank-r SVD."""
    w, U = np.linalg.eigh((M + M.T) / 2)
    top = [j for j in np.argsort(-w)[:r] if w[j] > 0]
    u, s, vt = np.linalg.svd(M)
    return (U[:, top] * w[top]) @ U[:, top].T, (u[:, :r] * s[:r]) @ vt[:r]


def _brute_force(X, D, r, pairs, seed, t=2.0):
    """The module docstring's formula with per-row outer products and explicit loops."""
    n = X.shape[0]
    W = [np.outer(X[i], D[i]) for i in range(n)]
    C = sum(W) / n
    G = np.random.default_rng(np.random.SeedSequence(seed)).standard_normal((pairs, n))
    total = 0.0
    for b in range(pairs):
        E = sum(G[b, i] * (W[i] - C) for i in range(n)) / np.sqrt(n * (n - 1))
        for sign in (1.0, -1.0):
            Ps, Pd = _truncations(C + sign * np.sqrt(t) * E, r)
            total += np.sum((Ps - C) ** 2) - np.sum((Pd - C) ** 2)
    norm = np.sum(C * C)
    Ps, Pd = _truncations(C, r)
    a = np.array([X[i] @ (Pd - Ps) @ D[i] for i in range(n)])
    se = 2 * np.sqrt(np.sum((a - a.mean()) ** 2) / (n * (n - 1))) / norm
    return total / (2 * pairs) / norm, se


def _triples(n, p, seed, skew=0.4):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((p, p))
    C = A @ A.T / p + skew * (A - A.T) / 2
    X = rng.standard_normal((n, p)) + 0.5 * rng.standard_normal(p)  # a common mean, like the real encoders'
    return X, X @ C + rng.standard_normal((n, p))


@pytest.mark.parametrize("n, p, r, pairs", [(23, 5, 2, 3), (9, 4, 4, 2), (40, 6, 1, 4)])
def test_kernel_matches_the_brute_force_formula(n, p, r, pairs):
    X, D = _triples(n, p, n)
    res = noise_doubled_risk(X, D, r, pairs=pairs, seed=17)
    score, se = _brute_force(X, D, r, pairs, 17)
    assert res.score == pytest.approx(score, rel=1e-9, abs=1e-12)
    assert res.standard_error == pytest.approx(se, rel=1e-9)
    assert res.terms.shape == (pairs,) and res.choice == ("dual" if score > 0 else "shared")


def test_rule_is_the_kernel_with_32_antithetic_pairs():
    X, D = _triples(30, 5, 1)
    d = get_rule("bsure").decide(X, D, 2, seed=5, context=SelectionContext())
    score, se = _brute_force(X, D, 2, BOOTSTRAP_PAIRS, 5)
    assert BOOTSTRAP_PAIRS == 32 and d.evidence["pairs"] == 32 and d.evidence["inflation"] == 2.0
    assert d.score == pytest.approx(score, rel=1e-9) and d.standard_error == pytest.approx(se, rel=1e-9)
    assert d.choice == ("dual" if d.score > 0 else "shared")
    assert set(d.cell()) == {"bsure_choice", "bsure_score", "bsure_se"}
    assert "bootstrap R_s - R_d" in get_rule("bsure").explain(d)


def test_identical_rows_leave_only_the_training_difference_by_hand():
    # every row x = e1, d = e2: no noise to draw (E = 0); C = e1 e2^T, dual keeps it exactly;
    # sym(C) has eigenvalues +1/2, -1/2, shared keeps (1/2) w w^T with w = (1, 1)/sqrt 2, so
    # ||P_s - C||^2 = ||[[-1/4, 3/4], [-1/4, -1/4]]||^2 = 3/4 and ||C||^2 = 1
    X = np.tile([1.0, 0.0], (3, 1))
    D = np.tile([0.0, 1.0], (3, 1))
    res = noise_doubled_risk(X, D, 1, pairs=4, seed=0)
    assert res.score == pytest.approx(0.75) and res.plug_in == pytest.approx(0.75)
    assert res.standard_error == 0.0 and res.monte_carlo_error == 0.0 and res.choice == "dual"
    # x = d = e1: C = e1 e1^T is PSD, both families keep it, a tie that goes to shared
    same = noise_doubled_risk(X, X, 1, pairs=4, seed=0)
    assert same.score == 0.0 and same.choice == "shared"


def test_linear_regime_is_the_anisotropic_sure_statistic():
    """Well-separated rank-2 PSD point plus a small skew part, n large: the truncations move along
    Theorem 2's tangent spaces, and n ||C||^2 score = ||Pi_A Z||^2 - 2 tr(Pi_A Sigma) (computed
    independently by tangent projectors in :func:`asymgeo.kernels.theory.anisotropic_sure`)."""
    from asymgeo.kernels.theory import anisotropic_sure

    rng = np.random.default_rng(5)
    p, r, n = 6, 2, 4000
    U = np.linalg.qr(rng.standard_normal((p, p)))[0][:, :r]
    C = U @ np.diag([3.0, 2.0]) @ U.T + 0.02 * rng.standard_normal((p, p))
    X = rng.standard_normal((n, p))
    D = X @ C + rng.standard_normal((n, p))
    res = noise_doubled_risk(X, D, r, pairs=400, seed=1)
    an = anisotropic_sure(X, D, r)
    scale = n * np.sum((X.T @ D / n) ** 2)
    assert abs(res.score * scale - (an.statistic - an.threshold)) < 4 * res.monte_carlo_error * scale + 0.03 * an.threshold


def test_tracks_the_population_risk_on_clear_cells():
    rng = np.random.default_rng(3)
    p, n = 8, 400
    A = rng.standard_normal((p, p))
    for C, want in ((A - A.T, "dual"), (A @ A.T / p, "shared")):
        X = rng.standard_normal((n, p))
        D = X @ C + 0.3 * rng.standard_normal((n, p))
        assert get_rule("bsure").decide(X, D, 2).choice == want


def test_refusals():
    X, D = _triples(10, 3, 0)
    with pytest.raises(ValueError, match="at least 2 triples"):
        noise_doubled_risk(X[:1], D[:1], 1)
    with pytest.raises(ValueError, match="exactly zero"):
        noise_doubled_risk(X, np.zeros_like(D), 1)
    with pytest.raises(ValueError, match="rank"):
        noise_doubled_risk(X, D, 4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(4, 30), p=st.integers(2, 6), r=st.integers(1, 6), seed=st.integers(0, 2**16),
       a=st.floats(0.1, 10.0), b=st.floats(0.1, 10.0))
def test_invariant_to_a_change_of_basis_and_to_scale(n, p, r, seed, a, b):
    """An orthogonal Q on both sides moves both truncations and every draw by Q (so every norm
    stays), and scaling X, D scales the moment and its noise alike; the thin basis of the rows
    gives the same score (the rule's ``basis_invariant``)."""
    r = min(r, p)
    X, D = _triples(n, p, seed)
    base = noise_doubled_risk(X, D, r, pairs=3, seed=seed, solver="dense")
    Q = np.linalg.qr(np.random.default_rng(seed + 1).standard_normal((p, p)))[0]
    for Xs, Ds in ((X @ Q, D @ Q), (a * X, b * D)):
        got = noise_doubled_risk(Xs, Ds, r, pairs=3, seed=seed, solver="dense")
        assert got.score == pytest.approx(base.score, rel=1e-6, abs=1e-9)
        assert got.standard_error == pytest.approx(base.standard_error, rel=1e-6, abs=1e-9)
    assert base.standard_error >= 0.0 and base.plug_in >= -1e-12
    assert base.choice == ("dual" if base.score > 0 else "shared")
    q = max(1, p - 1)  # rows confined to a q-dimensional subspace: the same score in its basis
    P = np.linalg.qr(np.random.default_rng(seed + 2).standard_normal((p, q)))[0]
    Xq, Dq = X[:, :q], D[:, :q]
    rq = min(r, q)
    inner = noise_doubled_risk(Xq, Dq, rq, pairs=3, seed=seed, solver="dense")
    outer = noise_doubled_risk(Xq @ P.T, Dq @ P.T, rq, pairs=3, seed=seed, solver="dense")
    assert outer.score == pytest.approx(inner.score, rel=1e-6, abs=1e-9)


# ---------------------------------------------------------------- #41: data that reach both sides of each branch
def test_an_inflation_other_than_two_is_the_brute_force_at_that_inflation():
    # every other test runs at t = 2, where a kernel that ignores ``inflation`` agrees
    X, D = _triples(15, 4, 2)
    res = noise_doubled_risk(X, D, 2, pairs=3, seed=4, inflation=0.5)
    score, se = _brute_force(X, D, 2, 3, 4, t=0.5)
    assert res.score == pytest.approx(score, rel=1e-9, abs=1e-12) and res.inflation == 0.5
    assert res.standard_error == pytest.approx(se, rel=1e-9)  # the first-order error does not depend on t
    assert abs(score - _brute_force(X, D, 2, 3, 4, t=2.0)[0]) > 1e-3  # the data tell t = 0.5 from t = 2


def test_a_single_pair_has_no_monte_carlo_error():
    X, D = _triples(12, 3, 6)
    res = noise_doubled_risk(X, D, 1, pairs=1, seed=9)
    assert res.score == pytest.approx(_brute_force(X, D, 1, 1, 9)[0], rel=1e-9, abs=1e-12)
    assert np.isnan(res.monte_carlo_error) and res.terms.shape == (1,)
