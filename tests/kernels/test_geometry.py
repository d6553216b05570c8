"""Operator geometry (paper Section 2, Theorem 1, Appendices A and B.1).

Expected values come from independent computations: brute-force optimisation over
the families, numpy's full decompositions (``reference_impl``), finite differences
along curves on the manifolds, and explicit p^2 x p^2 projector matrices.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from asymgeo import (
    approximation_gap,
    dual_factors,
    dual_truncate,
    psd_distance,
    relevance_moment,
    shared_factors,
    shared_truncate,
    skew,
    sym,
    tangent_dims,
    tangent_projectors,
)
from reference_impl import (
    naive_approximation_errors,
    naive_dual_truncate,
    naive_moment,
    naive_pi_A_norm2,
    naive_shared_truncate,
    naive_tangent_blocks,
    random_orthonormal,
)


def fro2(A: np.ndarray) -> float:
    return float(np.sum(np.asarray(A) ** 2))


# --------------------------------------------------------------------------- brute force
def _best_shared_error(M: np.ndarray, r: int, rng: np.random.Generator, starts: int = 25) -> float:
    """min_P ||M - P^T P||_F^2 over P in R^{r x p} by BFGS from many random starts."""
    p = M.shape[0]

    def f(x):
        P = x.reshape(r, p)
        E = M - P.T @ P
        g = -2.0 * P @ (E + E.T)
        return float(np.sum(E * E)), g.ravel()

    best = np.inf
    scale = np.sqrt(np.abs(M).max() + 1e-3)
    for _ in range(starts):
        x0 = scale * rng.standard_normal(r * p)
        res = minimize(f, x0, jac=True, method="BFGS", options={"gtol": 1e-12, "maxiter": 5000})
        best = min(best, res.fun)
    return best


def _best_dual_error(M: np.ndarray, r: int, rng: np.random.Generator, starts: int = 15) -> float:
    """min_{A,B} ||M - A^T B||_F^2 over A, B in R^{r x p}."""
    p = M.shape[0]

    def f(x):
        A = x[: r * p].reshape(r, p)
        B = x[r * p:].reshape(r, p)
        E = M - A.T @ B
        gA = -2.0 * B @ E.T
        gB = -2.0 * A @ E
        return float(np.sum(E * E)), np.concatenate([gA.ravel(), gB.ravel()])

    best = np.inf
    for _ in range(starts):
        x0 = rng.standard_normal(2 * r * p)
        res = minimize(f, x0, jac=True, method="BFGS", options={"gtol": 1e-12, "maxiter": 5000})
        best = min(best, res.fun)
    return best


@pytest.mark.parametrize("p,r,seed", [(3, 1, 0), (3, 2, 1), (4, 1, 2), (4, 2, 3), (5, 2, 4)])
def test_theorem1_matches_brute_force(p, r, seed):
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((p, p))
    gap = approximation_gap(M, r)
    best_s = _best_shared_error(M, r, rng)
    best_d = _best_dual_error(M, r, rng)
    # The closed form is attained by the optimiser ...
    assert gap.shared_error == pytest.approx(best_s, rel=1e-6, abs=1e-8)
    assert gap.dual_error == pytest.approx(best_d, rel=1e-6, abs=1e-8)
    # ... and is never beaten by it (it is a true minimum).
    assert best_s >= gap.shared_error - 1e-8
    assert best_d >= gap.dual_error - 1e-8
    assert gap.gap == pytest.approx(best_s - best_d, rel=1e-5, abs=1e-7)


def test_theorem1_brute_force_psd_target_with_negative_eigenvalues():
    """A symmetric indefinite target: shared must drop the negative eigenvalue."""
    rng = np.random.default_rng(7)
    Q = random_orthonormal(rng, 4, 4)
    M = (Q * np.array([3.0, 1.0, -0.5, -2.0])) @ Q.T
    gap = approximation_gap(M, 2)
    assert gap.skew_energy == pytest.approx(0.0, abs=1e-24)
    assert gap.negative_energy == pytest.approx(0.25 + 4.0)
    assert gap.discarded_energy == pytest.approx(0.0, abs=1e-24)
    assert gap.shared_error == pytest.approx(_best_shared_error(M, 2, rng), rel=1e-6)
    # Dual keeps the two largest singular values 3 and 2; tail 1 + 0.25.
    assert gap.dual_error == pytest.approx(1.25)


def test_theorem1_three_part_decomposition_by_hand():
    """A 3x3 example worked by hand: M = diag(2, 1, -1) + skew part."""
    M = np.diag([2.0, 1.0, -1.0])
    M[0, 1], M[1, 0] = 0.5, -0.5
    gap = approximation_gap(M, 1)
    assert gap.skew_energy == pytest.approx(0.5)  # 2 * 0.5^2
    assert gap.negative_energy == pytest.approx(1.0)
    assert gap.discarded_energy == pytest.approx(1.0)  # eta = 1 dropped at rank 1
    assert gap.shared_error == pytest.approx(2.5)
    sigma = np.linalg.svd(M, compute_uv=False)
    assert gap.dual_error == pytest.approx(float(np.sum(sigma[1:] ** 2)))
    assert gap.rank == 1
    d = gap.as_dict()
    assert d["shared_error"] == gap.shared_error and d["gap"] == gap.gap


# --------------------------------------------------------------------------- property tests
PROPERTY_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

matrix_case = st.tuples(
    st.integers(min_value=2, max_value=7),  # p
    st.integers(min_value=1, max_value=7),  # r (clipped to p)
    st.integers(min_value=0, max_value=2**31 - 1),  # seed
    st.sampled_from([1e-3, 1.0, 1e3]),  # scale
)


def _draw(case):
    p, r, seed, scale = case
    r = min(r, p)
    rng = np.random.default_rng(seed)
    return rng.standard_normal((p, p)) * scale, r, rng


@PROPERTY_SETTINGS
@given(matrix_case)
def test_property_gap_terms_match_numpy_and_gap_nonnegative(case):
    M, r, _ = _draw(case)
    gap = approximation_gap(M, r)
    ref = naive_approximation_errors(M, r)
    scale = max(fro2(M), 1e-300)
    for key in ("skew_energy", "negative_energy", "discarded_energy", "shared_error", "dual_error"):
        assert getattr(gap, key) == pytest.approx(ref[key], rel=1e-9, abs=1e-12 * scale)
    assert gap.gap >= -1e-12 * scale
    assert gap.shared_error == pytest.approx(
        gap.skew_energy + gap.negative_energy + gap.discarded_energy, rel=1e-12, abs=1e-14 * scale
    )
    # The closed-form errors are attained by the truncations themselves.
    assert fro2(M - shared_truncate(M, r, solver="dense")) == pytest.approx(gap.shared_error, rel=1e-8, abs=1e-12 * scale)
    assert fro2(M - dual_truncate(M, r, solver="dense")) == pytest.approx(gap.dual_error, rel=1e-8, abs=1e-12 * scale)


@PROPERTY_SETTINGS
@given(matrix_case)
def test_property_truncations_are_members_of_their_families(case):
    M, r, _ = _draw(case)
    scale = np.abs(M).max()
    S = shared_truncate(M, r)
    D = dual_truncate(M, r)
    np.testing.assert_allclose(S, S.T, atol=1e-12 * scale)
    w = np.linalg.eigvalsh(sym(S))
    assert w.min() >= -1e-10 * scale
    tol = 1e-9 * scale * M.shape[0]
    assert np.sum(w > tol) <= r
    assert np.linalg.matrix_rank(D, tol=tol) <= r
    np.testing.assert_allclose(S, naive_shared_truncate(M, r), atol=1e-9 * scale)
    np.testing.assert_allclose(D, naive_dual_truncate(M, r), atol=1e-9 * scale)


@PROPERTY_SETTINGS
@given(matrix_case)
def test_property_nearest_point_beats_random_members(case):
    M, r, rng = _draw(case)
    p = M.shape[0]
    gap = approximation_gap(M, r)
    s = np.sqrt(np.abs(M).max())
    for _ in range(20):
        P = s * rng.standard_normal((r, p))
        A, B = s * rng.standard_normal((2, r, p))
        assert fro2(M - P.T @ P) >= gap.shared_error * (1 - 1e-12)
        assert fro2(M - A.T @ B) >= gap.dual_error * (1 - 1e-12)
        # Small perturbations of the optimum never improve it either.
        P0 = shared_factors(M, r)
        Pp = P0 + 1e-3 * s * rng.standard_normal(P0.shape)
        assert fro2(M - Pp.T @ Pp) >= gap.shared_error * (1 - 1e-9) - 1e-12 * fro2(M)


@PROPERTY_SETTINGS
@given(st.integers(2, 7), st.integers(1, 7), st.integers(1, 7), st.integers(0, 2**31 - 1))
def test_property_psd_of_rank_le_r_has_zero_gap(p, q, r, seed):
    q, r = min(q, p), min(r, p)
    q = min(q, r)
    rng = np.random.default_rng(seed)
    G = rng.standard_normal((q, p))
    M = G.T @ G  # PSD, rank q <= r
    gap = approximation_gap(M, r)
    scale = fro2(M)
    assert abs(gap.gap) <= 1e-10 * scale
    assert gap.shared_error <= 1e-10 * scale
    np.testing.assert_allclose(shared_truncate(M, r), M, atol=1e-9 * np.sqrt(scale))
    np.testing.assert_allclose(dual_truncate(M, r), M, atol=1e-9 * np.sqrt(scale))
    assert psd_distance(M, r) <= 1e-16 * scale + 1e-20


def test_shared_truncation_rank_below_r_when_few_positive_eigenvalues():
    M = np.diag([2.0, -1.0, -3.0, -4.0])
    S = shared_truncate(M, 3)
    np.testing.assert_allclose(S, np.diag([2.0, 0, 0, 0]), atol=1e-14)
    P = shared_factors(M, 3)
    assert P.shape == (3, 4)
    np.testing.assert_allclose(P.T @ P, S, atol=1e-14)
    # All-negative symmetric part: the nearest PSD point is 0.
    np.testing.assert_allclose(shared_truncate(-np.eye(3), 2), np.zeros((3, 3)), atol=0)


@pytest.mark.parametrize("method", ["auto", "dense", "krylov"])
@pytest.mark.parametrize("p,r", [(6, 2), (48, 3), (80, 5), (80, 30)])
def test_truncations_all_solvers_match_full_decompositions(method, p, r):
    rng = np.random.default_rng(p * 100 + r)
    # Geometric spectrum so the truncation is well defined (no ties at r).
    U = random_orthonormal(rng, p, p)
    V = random_orthonormal(rng, p, p)
    M = (U * 0.8 ** np.arange(p)) @ V.T + 0.3 * rng.standard_normal((p, p)) / np.sqrt(p)
    np.testing.assert_allclose(dual_truncate(M, r, solver=method), naive_dual_truncate(M, r), atol=1e-9)
    np.testing.assert_allclose(shared_truncate(M, r, solver=method), naive_shared_truncate(M, r), atol=1e-9)
    A, B = dual_factors(M, r, solver=method)
    assert A.shape == B.shape == (r, p)
    np.testing.assert_allclose(A.T @ B, naive_dual_truncate(M, r), atol=1e-9)
    # Balanced factorisation: A A^T = B B^T = diag(sigma_1..r).
    sig = np.linalg.svd(M, compute_uv=False)[:r]
    np.testing.assert_allclose(A @ A.T, np.diag(sig), atol=1e-9)
    np.testing.assert_allclose(B @ B.T, np.diag(sig), atol=1e-9)
    P = shared_factors(M, r, solver=method)
    np.testing.assert_allclose(P.T @ P, naive_shared_truncate(M, r), atol=1e-9)
    expected = fro2(naive_dual_truncate(M, r) - naive_shared_truncate(M, r))
    assert psd_distance(M, r, solver=method) == pytest.approx(expected, rel=1e-8)


def test_family_inclusion_minus_e1e1_is_dual_not_shared():
    """Appendix A: -e1 e1^T lies in M_d(r) but not in M_s(r)."""
    M = np.zeros((3, 3))
    M[0, 0] = -1.0
    gap = approximation_gap(M, 1)
    assert gap.dual_error == pytest.approx(0.0, abs=1e-30)
    assert gap.shared_error == pytest.approx(1.0)
    A, B = dual_factors(M, 1)
    np.testing.assert_allclose(A.T @ B, M, atol=1e-15)


def test_sym_skew():
    rng = np.random.default_rng(0)
    M = rng.standard_normal((5, 5))
    np.testing.assert_allclose(sym(M) + skew(M), M)
    np.testing.assert_allclose(sym(M), sym(M).T)
    np.testing.assert_allclose(skew(M), -skew(M).T)
    assert abs(np.sum(sym(M) * skew(M))) < 1e-12


# --------------------------------------------------------------------------- relevance moment
def test_relevance_moment_equals_loop_of_outer_products():
    rng = np.random.default_rng(3)
    X, Yp, Yn = rng.standard_normal((3, 37, 6))
    np.testing.assert_allclose(relevance_moment(X, Yp, Yn), naive_moment(X, Yp, Yn), rtol=1e-12, atol=1e-14)


def test_relevance_moment_chunking(monkeypatch):
    """Row chunking must not change the result (force many small chunks)."""
    import asymgeo.kernels.geometry as geo

    rng = np.random.default_rng(4)
    X, Yp, Yn = rng.standard_normal((3, 101, 5))
    monkeypatch.setattr(geo, "_MOMENT_CHUNK", 7)
    np.testing.assert_allclose(relevance_moment(X, Yp, Yn), naive_moment(X, Yp, Yn), rtol=1e-12, atol=1e-14)


def test_relevance_moment_float16_accumulates_in_float64():
    rng = np.random.default_rng(5)
    X, Yp, Yn = (rng.standard_normal((3, 4000, 8)) * 3).astype(np.float16)
    C = relevance_moment(X, Yp, Yn)
    assert C.dtype == np.float64
    ref = naive_moment(X.astype(np.float64), Yp.astype(np.float64), Yn.astype(np.float64))
    np.testing.assert_allclose(C, ref, rtol=1e-12, atol=1e-12)
    # A float16 accumulation would be far off; make sure we are much closer than that.
    X16 = X.T @ (Yp - Yn)  # float16 matmul
    assert np.abs(C - ref).max() < 1e-10 < np.abs(X16.astype(np.float64) / 4000 - ref).max() + 1e-10


# --------------------------------------------------------------------------- tangent spaces
@pytest.mark.parametrize("p,r", [(1, 1), (2, 1), (3, 1), (3, 3), (5, 2), (12, 3), (32, 8)])
def test_tangent_dims_formulas(p, r):
    d_d, d_s, k = tangent_dims(p, r)
    # Counted block by block (Appendix B.1): A (r x r), B and C (each (p-r) x r).
    assert d_d == r * r + 2 * r * (p - r)
    assert d_s == r * (r + 1) // 2 + r * (p - r)
    assert k == r * (r - 1) // 2 + r * (p - r)
    assert 2 * k == r * (2 * p - r - 1)


def test_tangent_dims_paper_example():
    assert tangent_dims(12, 3) == (63, 33, 30)


def _projector_matrix(Pi, p: int) -> np.ndarray:
    """The p^2 x p^2 matrix of a linear map on p x p matrices (column j = Pi(E_j))."""
    cols = []
    for j in range(p * p):
        E = np.zeros(p * p)
        E[j] = 1.0
        cols.append(Pi(E.reshape(p, p)).ravel())
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("p,r", [(2, 1), (4, 1), (4, 2), (5, 3), (6, 6)])
def test_projectors_are_orthogonal_projectors_of_the_right_rank(p, r):
    rng = np.random.default_rng(p + 10 * r)
    U = random_orthonormal(rng, p, r)
    proj = tangent_projectors(U)
    Pi_Td, Pi_Ts, Pi_A = proj
    d_d, d_s, k = tangent_dims(p, r)
    for Pi, dim in ((Pi_Td, d_d), (Pi_Ts, d_s), (Pi_A, k)):
        Mx = _projector_matrix(Pi, p)
        np.testing.assert_allclose(Mx @ Mx, Mx, atol=1e-12)  # idempotent
        np.testing.assert_allclose(Mx, Mx.T, atol=1e-12)  # self-adjoint in <.,.>_F
        sv = np.linalg.svd(Mx, compute_uv=False)
        assert int(np.sum(sv > 1e-8)) == dim
        assert np.trace(Mx) == pytest.approx(dim)
    for _ in range(3):
        Z = rng.standard_normal((p, p))
        np.testing.assert_allclose(Pi_Ts(Pi_Td(Z)), Pi_Ts(Z), atol=1e-12)
        np.testing.assert_allclose(Pi_Td(Pi_Ts(Z)), Pi_Ts(Z), atol=1e-12)
        assert abs(np.sum(Pi_A(Z) * Pi_Ts(Z))) < 1e-10  # A is orthogonal to T_s
        np.testing.assert_allclose(Pi_A(Z) + Pi_Ts(Z), Pi_Td(Z), atol=1e-12)


def test_projectors_accept_batches():
    rng = np.random.default_rng(1)
    U = random_orthonormal(rng, 5, 2)
    Pi_Td, Pi_Ts, Pi_A = tangent_projectors(U)
    Z = rng.standard_normal((7, 5, 5))
    for Pi in (Pi_Td, Pi_Ts, Pi_A):
        out = Pi(Z)
        assert out.shape == Z.shape
        for i in range(7):
            np.testing.assert_allclose(out[i], Pi(Z[i]), atol=1e-13)


@pytest.mark.parametrize("p,r", [(3, 1), (5, 2), (6, 3)])
def test_finite_differences_psd_curve_lies_in_Ts(p, r):
    """S(t) = U(t) Lambda(t) U(t)^T with U(t) = expm(t Omega) U: (S(t)-S)/t in T_s."""
    rng = np.random.default_rng(100 + p)
    U = random_orthonormal(rng, p, r)
    Lam = np.diag(np.linspace(2.0, 1.0, r))
    S = U @ Lam @ U.T
    W = rng.standard_normal((p, p))
    Omega = W - W.T
    L = rng.standard_normal((r, r))
    L = L + L.T
    Pi_Td, Pi_Ts, _ = tangent_projectors(U)
    residuals = []
    for t in (1e-3, 1e-4):
        Ut = sla.expm(t * Omega) @ U
        St = Ut @ (Lam + t * L) @ Ut.T
        V = (St - S) / t
        residuals.append(np.linalg.norm(V - Pi_Ts(V)) / np.linalg.norm(V))
        assert np.linalg.norm(V - Pi_Td(V)) / np.linalg.norm(V) < 1e-2
    assert residuals[1] < 1e-3
    assert residuals[1] < residuals[0] / 5  # O(t) convergence
    # A generic direction is far from T_s (the test above is not vacuous).
    G = rng.standard_normal((p, p))
    assert np.linalg.norm(G - Pi_Ts(G)) / np.linalg.norm(G) > 0.1


@pytest.mark.parametrize("p,r", [(3, 1), (5, 2), (6, 3)])
def test_finite_differences_fixed_rank_curve_lies_in_Td_not_Ts(p, r):
    """(U + tA)(Sigma + tB)(V + tC)^T at S = U Lambda U^T: derivative in T_d, generally not in T_s."""
    rng = np.random.default_rng(200 + p)
    U = random_orthonormal(rng, p, r)
    Lam = np.diag(np.linspace(2.0, 1.0, r))
    S = U @ Lam @ U.T
    A = rng.standard_normal((p, r))
    B = rng.standard_normal((r, r))
    C = rng.standard_normal((p, r))
    Pi_Td, Pi_Ts, Pi_A = tangent_projectors(U)
    res = []
    for t in (1e-3, 1e-4):
        St = (U + t * A) @ (Lam + t * B) @ (U + t * C).T
        V = (St - S) / t
        res.append(np.linalg.norm(V - Pi_Td(V)) / np.linalg.norm(V))
    assert res[1] < 1e-3 and res[1] < res[0] / 5
    assert np.linalg.norm(V - Pi_Ts(V)) / np.linalg.norm(V) > 1e-2
    assert np.linalg.norm(Pi_A(V)) > 1e-2
    # Off-manifold directions (the (U_perp, U_perp) block) are annihilated by Pi_Td.
    _, _, _, Up = naive_tangent_blocks(S, U)
    if Up.shape[1]:
        N = Up @ rng.standard_normal((p - r, p - r)) @ Up.T
        np.testing.assert_allclose(Pi_Td(N), 0, atol=1e-12)


@pytest.mark.parametrize("p,r", [(2, 1), (4, 2), (7, 3), (5, 5)])
def test_pi_A_norm_block_formula(p, r):
    """||Pi_A X||^2 = ||skew(A)||^2 + 1/2 ||B - C^T||^2 for X = [[A, C], [B, 0]] (Appendix B.1)."""
    rng = np.random.default_rng(p * 7 + r)
    U = random_orthonormal(rng, p, r)
    _, _, _, Up = naive_tangent_blocks(np.zeros((p, p)), U)
    Ab = rng.standard_normal((r, r))
    Bb = rng.standard_normal((p - r, r))
    Cb = rng.standard_normal((r, p - r))
    X = U @ Ab @ U.T + Up @ Bb @ U.T + U @ Cb @ Up.T
    _, _, Pi_A = tangent_projectors(U)
    expected = fro2((Ab - Ab.T) / 2) + 0.5 * fro2(Bb - Cb.T)
    assert fro2(Pi_A(X)) == pytest.approx(expected, rel=1e-12)
    # The explicit component of Appendix B.1: [[skew(A), -D^T], [D, 0]], D = (B - C^T)/2.
    D = (Bb - Cb.T) / 2
    comp = U @ ((Ab - Ab.T) / 2) @ U.T + Up @ D @ U.T - U @ D.T @ Up.T
    np.testing.assert_allclose(Pi_A(X), comp, atol=1e-12)
    # And for an arbitrary Z the reference formula agrees.
    Z = rng.standard_normal((p, p))
    assert fro2(Pi_A(Z)) == pytest.approx(naive_pi_A_norm2(Z, U), rel=1e-10)


@pytest.mark.parametrize("fn", ["dual_truncate", "shared_truncate", "dual_factors", "shared_factors", "psd_distance"])
def test_method_keyword_is_a_deprecated_alias_of_solver(fn):
    import asymgeo

    M = np.random.default_rng(3).standard_normal((6, 6))
    f = getattr(asymgeo, fn)
    with pytest.warns(DeprecationWarning, match=f"{fn}: method= is renamed to solver=") as rec:
        old = f(M, 2, method="dense")
    assert rec[0].filename == __file__  # the warning points at the caller
    np.testing.assert_equal(old, f(M, 2, solver="dense"))
