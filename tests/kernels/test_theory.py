"""Local risks, SURE and optimal separation (paper Section 3, Theorems 2-4, Appendices B-D).

Expected values are computed independently of the code under test: Monte Carlo in
the local Gaussian model with truncations from numpy's full decompositions,
brute-force maximisation over the operator families, exact Gaussian expectations
(via scipy's matrix square root) and the closed-form planar-rotation example.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla
from scipy.optimize import minimize

from asymgeo import (
    approximation_gap,
    local_risks,
    optimal_separation,
    sure_regret,
    sure_select,
    sure_select_probability,
    tangent_dims,
)
from asymgeo.kernels.theory import inverse_sqrt_psd
from reference_impl import naive_dual_truncate, naive_pi_A_norm2, naive_tangent_blocks, random_orthonormal


# --------------------------------------------------------------------------- helpers
def own_pi_td(Z: np.ndarray, U: np.ndarray) -> np.ndarray:
    """Pi_Td(Z) = PZ + ZP - PZP (Appendix B.1), batched over leading axes."""
    P = U @ U.T
    PZ = P @ Z
    return PZ + Z @ P - PZ @ P


def own_pi_A_norm2_batch(Z: np.ndarray, U: np.ndarray) -> np.ndarray:
    """||Pi_A Z||^2 = ||skew(U^T Z U)||^2 + 1/2 ||U_perp^T Z U - (U^T Z U_perp)^T||^2, batched."""
    _, _, _, Up = naive_tangent_blocks(np.zeros((U.shape[0],) * 2), U)
    A = U.T @ Z @ U
    B = Up.T @ Z @ U
    C = U.T @ Z @ Up
    skewA = (A - np.swapaxes(A, -1, -2)) / 2
    return np.sum(skewA ** 2, axis=(-2, -1)) + 0.5 * np.sum((B - np.swapaxes(C, -1, -2)) ** 2, axis=(-2, -1))


def batch_dual_truncate(Y: np.ndarray, r: int) -> np.ndarray:
    U, s, Vt = np.linalg.svd(Y)
    return (U[..., :, :r] * s[..., None, :r]) @ Vt[..., :r, :]


def batch_shared_truncate(Y: np.ndarray, r: int) -> np.ndarray:
    w, Q = np.linalg.eigh((Y + np.swapaxes(Y, -1, -2)) / 2)
    w, Q = w[..., ::-1][..., :r], Q[..., :, ::-1][..., :, :r]
    w = np.maximum(w, 0.0)
    return (Q * w[..., None, :]) @ np.swapaxes(Q, -1, -2)


def direction_with_delta(U: np.ndarray, rng, delta2: float, shared_part: float = 1.0) -> np.ndarray:
    """H in T_d with ||Pi_A H||^2 = delta2 (exactly, up to rounding) plus a T_s component."""
    p = U.shape[0]
    G = own_pi_td(rng.standard_normal((p, p)), U)
    # Split G into its T_s part (symmetric tangent) and its A part by hand.
    Gs = own_pi_td((G + G.T) / 2, U)
    Ga = G - Gs
    Ga = Ga / np.sqrt(np.sum(Ga ** 2))
    return shared_part * Gs + np.sqrt(delta2) * Ga


# --------------------------------------------------------------------------- Theorem 2
def test_local_risks_closed_form_values():
    rng = np.random.default_rng(0)
    p, r, sigma = 12, 3, 0.7
    U = random_orthonormal(rng, p, r)
    H = direction_with_delta(U, rng, 5.0)
    lr = local_risks(H, U, sigma)
    assert (lr.dim_Td, lr.dim_Ts, lr.k) == (63, 33, 30)
    assert lr.delta2 == pytest.approx(naive_pi_A_norm2(H, U), rel=1e-10)
    assert lr.delta2 == pytest.approx(5.0, rel=1e-10)
    assert lr.dual == pytest.approx(sigma ** 2 * 63)
    assert lr.shared == pytest.approx(5.0 + sigma ** 2 * 33)
    assert lr.difference == pytest.approx(5.0 - sigma ** 2 * 30)
    assert lr.better == "shared"  # 5 < 0.49 * 30
    assert local_risks(direction_with_delta(U, rng, 20.0), U, sigma).better == "dual"  # 20 > 14.7


@pytest.mark.parametrize("delta2", [0.5, 12.0])
def test_theorem2_monte_carlo_local_model(delta2):
    """n E||M_hat - M_n||^2 by simulation vs the Theorem 2 limits (p=5, r=2, sigma=1)."""
    rng = np.random.default_rng(42)
    p, r, sigma, n, draws = 5, 2, 1.0, 40_000, 4000
    U = random_orthonormal(rng, p, r)
    S = (U * np.array([3.0, 2.0])) @ U.T
    H = direction_with_delta(U, rng, delta2)
    M_n = naive_dual_truncate(S + H / np.sqrt(n), r)  # rank r, = S + H/sqrt(n) + O(1/n)
    G = rng.standard_normal((draws, p, p))
    Y = M_n + sigma / np.sqrt(n) * G
    loss_d = n * np.sum((batch_dual_truncate(Y, r) - M_n) ** 2, axis=(1, 2))
    loss_s = n * np.sum((batch_shared_truncate(Y, r) - M_n) ** 2, axis=(1, 2))
    lr = local_risks(H, U, sigma)
    bias_allow = (1 + np.sum(H ** 2) + lr.dim_Td) / np.sqrt(n)
    for loss, target in ((loss_d, lr.dual), (loss_s, lr.shared)):
        se = loss.std(ddof=1) / np.sqrt(draws)
        assert abs(loss.mean() - target) < 4 * se + bias_allow, (loss.mean(), target, se)
    # Risk difference: paired draws, smaller standard error.
    diff = loss_s - loss_d
    se = diff.std(ddof=1) / np.sqrt(draws)
    assert abs(diff.mean() - lr.difference) < 4 * se + bias_allow


def test_local_risks_ignores_component_outside_Td():
    rng = np.random.default_rng(1)
    U = random_orthonormal(rng, 6, 2)
    H = direction_with_delta(U, rng, 3.0)
    _, _, _, Up = naive_tangent_blocks(np.zeros((6, 6)), U)
    N = Up @ rng.standard_normal((4, 4)) @ Up.T  # normal to T_d
    assert local_risks(H + N, U, 1.0).delta2 == pytest.approx(local_risks(H, U, 1.0).delta2, rel=1e-10)


# --------------------------------------------------------------------------- Theorem 3 (SURE)
@pytest.mark.parametrize("lam", [0.0, 3.0, 6.0, 12.0])
def test_sure_select_probability_monte_carlo(lam):
    """10^5 Gaussian matrices projected onto T_d; fraction with ||Pi_A Z||^2 > 2 sigma^2 k."""
    rng = np.random.default_rng(2024 + int(lam))
    p, r, sigma = 4, 1, 1.3
    k = tangent_dims(p, r)[2]
    assert k == 3
    U = random_orthonormal(rng, p, r)
    H = direction_with_delta(U, rng, lam * sigma ** 2)
    draws = 100_000
    Z = H + sigma * own_pi_td(rng.standard_normal((draws, p, p)), U)
    stat = own_pi_A_norm2_batch(Z, U)
    mc = float(np.mean(stat > 2 * sigma ** 2 * k))
    assert abs(mc - sure_select_probability(k, lam)) < 0.003


def test_sure_probability_against_independent_noncentral_sum():
    """Pr{chi^2_k(lam) > 2k} from sums of squared shifted normals (10^5 draws, k = 7)."""
    rng = np.random.default_rng(9)
    k, lam = 7, 9.5
    mu = np.zeros(k)
    mu[0] = np.sqrt(lam)
    x = rng.standard_normal((100_000, k)) + mu
    mc = float(np.mean(np.sum(x ** 2, axis=1) > 2 * k))
    assert abs(mc - sure_select_probability(k, lam)) < 0.003


@pytest.mark.parametrize("k", [1, 2, 3, 5, 10, 30, 100])
def test_sure_false_dual_rate_bound_at_delta_zero(k):
    prob = sure_select_probability(k, 0.0)
    assert 0 < prob <= (2 / np.e) ** (k / 2)
    # Continuity at lam = 0 (noncentral -> central).
    assert sure_select_probability(k, 1e-10) == pytest.approx(prob, rel=1e-6)


def test_sure_probability_vectorised_and_monotone():
    lam = np.array([0.0, 1.0, 5.0, 20.0, 80.0])
    out = sure_select_probability(5, lam)
    assert out.shape == lam.shape
    assert np.all(np.diff(out) > 0)
    for l, o in zip(lam, out):
        assert o == pytest.approx(sure_select_probability(5, float(l)))
    assert out[-1] > 0.99


@pytest.mark.parametrize("ratio", [0.3, 0.9, 1.1, 2.5])
def test_sure_regret_monte_carlo(ratio):
    """Model-choice regret E[(R_pick - min R)] by simulating the SURE decision."""
    rng = np.random.default_rng(77 + int(10 * ratio))
    p, r, sigma = 4, 1, 0.8
    k = tangent_dims(p, r)[2]
    delta2 = ratio * sigma ** 2 * k
    U = random_orthonormal(rng, p, r)
    H = direction_with_delta(U, rng, delta2)
    draws = 100_000
    Z = H + sigma * own_pi_td(rng.standard_normal((draws, p, p)), U)
    pick_dual = own_pi_A_norm2_batch(Z, U) > 2 * sigma ** 2 * k
    gap = delta2 - sigma ** 2 * k  # R_s - R_d
    wrong = pick_dual if gap < 0 else ~pick_dual
    regret = np.abs(gap) * wrong
    se = regret.std(ddof=1) / np.sqrt(draws)
    expected = sure_regret(k, delta2, sigma ** 2)
    assert abs(regret.mean() - expected) < 4 * se + 1e-12


def test_sure_regret_zero_at_boundary_and_vectorised():
    k, s2 = 6, 0.5
    assert sure_regret(k, s2 * k, s2) == 0.0
    d2 = np.array([0.0, 1.0, 3.0, 10.0])
    out = sure_regret(k, d2, s2)
    for d, o in zip(d2, out):
        assert o == pytest.approx(sure_regret(k, float(d), s2))
    # delta = 0: regret = sigma^2 k * Pr(select dual).
    assert out[0] == pytest.approx(s2 * k * sure_select_probability(k, 0.0))


def test_sure_select_matches_hand_computed_risks():
    rng = np.random.default_rng(5)
    p, r, sigma = 6, 2, 0.9
    d_d, d_s, k = tangent_dims(p, r)
    U = random_orthonormal(rng, p, r)
    P = U @ U.T
    n_dual = 0
    for _ in range(200):
        H = direction_with_delta(U, rng, rng.uniform(0, 3 * sigma ** 2 * k))
        Z = H + sigma * own_pi_td(rng.standard_normal((p, p)), U)
        Zs = (Z + Z.T) / 2
        ts = P @ Zs + Zs @ P - P @ Zs @ P
        td = own_pi_td(Z, U)
        R_d = np.sum((Z - td) ** 2) + sigma ** 2 * d_d
        R_s = np.sum((Z - ts) ** 2) + sigma ** 2 * (2 * d_s - d_d)
        res = sure_select(Z, U, sigma)
        assert res.risk_dual == pytest.approx(R_d, rel=1e-10)
        assert res.risk_shared == pytest.approx(R_s, rel=1e-10)
        assert res.choice == ("dual" if R_d < R_s else "shared")
        assert res.k == k and res.threshold == pytest.approx(2 * sigma ** 2 * k)
        assert res.statistic == pytest.approx(naive_pi_A_norm2(Z, U), rel=1e-10)
        # Eq. (4): the same decision as the statistic vs threshold.
        assert (res.choice == "dual") == (res.statistic > res.threshold)
        n_dual += res.choice == "dual"
    assert 0 < n_dual < 200  # both branches exercised


def test_sure_select_tie_goes_to_shared():
    """p=2, r=1, U=e1, Z = [[0,1],[-1,0]], sigma=1: R_d = R_s = 3 exactly (hand calculation)."""
    U = np.array([[1.0], [0.0]])
    Z = np.array([[0.0, 1.0], [-1.0, 0.0]])
    res = sure_select(Z, U, 1.0)
    assert res.risk_dual == 3.0 and res.risk_shared == 3.0
    assert res.statistic == 2.0 and res.threshold == 2.0
    assert res.choice == "shared"
    # Slightly more signal tips it to dual.
    assert sure_select(1.01 * Z, U, 1.0).choice == "dual"


def test_sure_risks_are_unbiased_monte_carlo():
    """Mean of the library's SURE estimates vs the fixed-model risks R_s, R_d (Appendix C)."""
    rng = np.random.default_rng(11)
    p, r, sigma = 4, 2, 1.0
    U = random_orthonormal(rng, p, r)
    H = direction_with_delta(U, rng, 4.0)
    lr = local_risks(H, U, sigma)
    rs, rd = [], []
    for _ in range(3000):
        Z = H + sigma * own_pi_td(rng.standard_normal((p, p)), U)
        res = sure_select(Z, U, sigma)
        rs.append(res.risk_shared)
        rd.append(res.risk_dual)
    rs, rd = np.array(rs), np.array(rd)
    assert np.allclose(rd, lr.dual)  # R_hat_d is the constant sigma^2 d_d (Z in T_d)
    assert abs(rs.mean() - lr.shared) < 4 * rs.std(ddof=1) / np.sqrt(rs.size)


# --------------------------------------------------------------------------- Theorem 4
def _brute_max_ratio(T: np.ndarray, r: int, shared: bool, rng, starts: int = 12) -> float:
    """max <N, T>_F / ||N||_F over N = A^T B (or P^T P) of rank <= r, numerically."""
    p = T.shape[0]
    nvar = r * p if shared else 2 * r * p

    def f(x):
        if shared:
            P = x.reshape(r, p)
            N = P.T @ P
        else:
            N = x[: r * p].reshape(r, p).T @ x[r * p:].reshape(r, p)
        nn = np.sqrt(np.sum(N * N)) + 1e-300
        return -float(np.sum(N * T)) / nn

    best = -np.inf
    for _ in range(starts):
        res = minimize(f, rng.standard_normal(nvar), method="BFGS", options={"gtol": 1e-10, "maxiter": 5000})
        best = max(best, -res.fun)
    return best


@pytest.mark.parametrize("p,r,seed", [(3, 1, 0), (3, 2, 1), (4, 1, 2), (4, 2, 3)])
def test_theorem4_whitened_brute_force(p, r, seed):
    rng = np.random.default_rng(seed)
    T = rng.standard_normal((p, p))
    res = optimal_separation(T, None, None, r)
    assert res.dual == pytest.approx(_brute_max_ratio(T, r, False, rng), rel=1e-6)
    assert res.shared == pytest.approx(max(_brute_max_ratio(T, r, True, rng), 0.0), rel=1e-6, abs=1e-9)
    # Whitened squared-separation gap = Theorem 1 gap with M = T.
    assert res.gap == pytest.approx(approximation_gap(T, r).gap, rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(res.T, T)


def _random_spd(rng, p):
    G = rng.standard_normal((p, p))
    return G @ G.T / p + 0.5 * np.eye(p)


def test_theorem4_nonwhitened_dual_brute_force():
    """max tr(M^T C) / ||Sigma_x^{1/2} M Sigma_y^{1/2}||_F over rank-r M = A^T B."""
    rng = np.random.default_rng(21)
    p, r = 4, 2
    C = rng.standard_normal((p, p))
    Sx, Sy = _random_spd(rng, p), _random_spd(rng, p)
    Rx, Ry = np.real(sla.sqrtm(Sx)), np.real(sla.sqrtm(Sy))

    def f(x):
        M = x[: r * p].reshape(r, p).T @ x[r * p:].reshape(r, p)
        return -float(np.trace(M.T @ C)) / (np.linalg.norm(Rx @ M @ Ry) + 1e-300)

    best = max(-minimize(f, rng.standard_normal(2 * r * p), method="BFGS", options={"gtol": 1e-10}).fun
               for _ in range(12))
    res = optimal_separation(C, Sx, Sy, r)
    assert res.dual == pytest.approx(best, rel=1e-6)
    # Returned operators: unit negative-score second moment, attain the optimum.
    for M, value in ((res.dual_operator, res.dual), (res.shared_operator, res.shared)):
        assert np.linalg.norm(Rx @ M @ Ry) ** 2 == pytest.approx(1.0, rel=1e-9)
        assert np.trace(M.T @ C) == pytest.approx(value, rel=1e-9)
    assert np.linalg.matrix_rank(res.dual_operator, tol=1e-9) <= r
    # Shared is defined on the whitened views: N = Rx M Ry must be PSD of rank <= r.
    N = Rx @ res.shared_operator @ Ry
    np.testing.assert_allclose(N, N.T, atol=1e-9)
    assert np.linalg.eigvalsh((N + N.T) / 2).min() > -1e-9
    T = np.linalg.inv(Rx) @ C @ np.linalg.inv(Ry)
    assert res.shared == pytest.approx(max(_brute_max_ratio(T, r, True, rng), 0.0), rel=1e-6)


def test_theorem4_separation_definition_by_monte_carlo():
    """Latent two-view Gaussian data: E[x^T M (y+ - y-)] and E[(x^T M y-)^2] for the optimum."""
    rng = np.random.default_rng(31)
    p, k, s = 4, 2, 0.7
    Cq = rng.standard_normal((p, k))
    Cd = rng.standard_normal((p, k))
    C = Cq @ Cd.T
    Sx = Cq @ Cq.T + s ** 2 * np.eye(p)
    Sy = Cd @ Cd.T + s ** 2 * np.eye(p)
    res = optimal_separation(C, Sx, Sy, 1)
    n = 200_000
    z = rng.standard_normal((n, k))
    X = z @ Cq.T + s * rng.standard_normal((n, p))
    Yp = z @ Cd.T + s * rng.standard_normal((n, p))
    Yn = rng.standard_normal((n, k)) @ Cd.T + s * rng.standard_normal((n, p))
    for M, value in ((res.dual_operator, res.dual), (res.shared_operator, res.shared)):
        margin = np.einsum("ij,jk,ik->i", X, M, Yp - Yn)
        neg2 = np.einsum("ij,jk,ik->i", X, M, Yn) ** 2
        assert abs(margin.mean() - value) < 4 * margin.std() / np.sqrt(n)
        assert abs(neg2.mean() - 1.0) < 4 * neg2.std() / np.sqrt(n)
    assert res.dual >= res.shared


@pytest.mark.parametrize("rho", [0.3, 1.0])
@pytest.mark.parametrize("theta", [0.0, 0.4, np.pi / 4, 1.2, np.pi / 2])
def test_planar_rotation_example(rho, theta):
    """Appendix D: T = rho R_theta at rank one gives rho and rho cos(theta)."""
    R = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    res = optimal_separation(rho * R, None, None, 1)
    assert res.dual == pytest.approx(rho, rel=1e-12)
    assert res.shared == pytest.approx(rho * np.cos(theta), rel=1e-12, abs=1e-15)
    assert res.gap == pytest.approx(rho ** 2 * np.sin(theta) ** 2, abs=1e-14)
    # Identity covariances given explicitly change nothing.
    res2 = optimal_separation(rho * R, np.eye(2), np.eye(2), 1)
    assert res2.dual == pytest.approx(res.dual) and res2.shared == pytest.approx(res.shared, abs=1e-15)


def test_planar_rotation_beyond_right_angle_shared_is_zero():
    theta = 2.0
    R = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    res = optimal_separation(0.5 * R, None, None, 1)
    assert res.shared == 0.0
    np.testing.assert_array_equal(res.shared_operator, np.zeros((2, 2)))
    assert res.dual == pytest.approx(0.5)


def test_corollary2_matched_latent_views_shared_equals_dual():
    rng = np.random.default_rng(8)
    p, k = 6, 3
    C0 = rng.standard_normal((p, k))
    Psi = np.diag(rng.uniform(0.2, 1.0, p))
    Sigma = C0 @ C0.T + Psi
    res = optimal_separation(C0 @ C0.T, Sigma, Sigma, 2)
    assert res.shared == pytest.approx(res.dual, rel=1e-10)
    assert abs(res.gap) < 1e-10


def test_zero_moment_gives_zero_operators():
    res = optimal_separation(np.zeros((3, 3)), None, None, 2)
    assert res.dual == 0.0 and res.shared == 0.0
    np.testing.assert_array_equal(res.dual_operator, 0)
    np.testing.assert_array_equal(res.shared_operator, 0)


def test_inverse_sqrt_psd_against_scipy_sqrtm():
    rng = np.random.default_rng(4)
    S = _random_spd(rng, 5)
    W = inverse_sqrt_psd(S)
    np.testing.assert_allclose(W, np.linalg.inv(np.real(sla.sqrtm(S))), atol=1e-10)
    np.testing.assert_allclose(W @ S @ W, np.eye(5), atol=1e-10)


def test_sure_regret_old_argument_order_is_deprecated():
    k, s2 = 6, 0.5
    d2 = np.array([0.0, 1.0, 3.0, 9.0])
    new = sure_regret(k, d2, s2)
    with pytest.warns(DeprecationWarning, match=r"now sure_regret\(k, delta2, sigma2\)"):
        old = sure_regret(d2, s2, k)
    np.testing.assert_array_equal(old, new)
    with pytest.warns(DeprecationWarning):
        assert sure_regret(2.0, 0.5, k) == sure_regret(k, 2.0, 0.5)
    assert sure_regret(k=k, delta2=2.0, sigma2=0.5) == sure_regret(k, 2.0, 0.5)


def test_sure_statistic_against_dense_projectors_and_with_known_eigenpairs():
    # independent computation: full numpy eigh, the p x p projector P = U U^T, Appendix B.1's
    # formulas written out; eq. 4's risks compared as numbers
    from asymgeo.kernels.theory import estimate_moment_noise, sure_statistic

    rng = np.random.default_rng(11)
    n, p, r = 90, 12, 3
    X = rng.standard_normal((n, p))
    D = X @ (np.eye(p) + 0.4 * rng.standard_normal((p, p))) + rng.standard_normal((n, p))
    C = X.T @ D / n
    w, V = np.linalg.eigh((C + C.T) / 2)
    U = V[:, ::-1][:, :r]
    P = U @ U.T
    S = (U * w[::-1][:r]) @ U.T
    Z = np.sqrt(n) * (P @ (C - S) + (C - S) @ P - P @ (C - S) @ P)
    Zs = (Z + Z.T) / 2
    sig = estimate_moment_noise(X, D)
    d_d, d_s = 2 * p * r - r * r, p * r - r * (r - 1) // 2
    risk_d = 0.0 + sig**2 * d_d                     # Z lies in T_d
    risk_s = np.sum((Z - (P @ Zs + Zs @ P - P @ Zs @ P)) ** 2) + sig**2 * (2 * d_s - d_d)
    res, sigma = sure_statistic(X, D, r)
    assert sigma == pytest.approx(sig)
    assert res.risk_dual == pytest.approx(risk_d, rel=1e-9, abs=1e-9)
    assert res.risk_shared == pytest.approx(risk_s, rel=1e-9)
    assert res.choice == ("dual" if risk_d < risk_s else "shared")
    known, _ = sure_statistic(X, D, r, eigen=(w[::-1][: r + 2], V[:, ::-1][:, : r + 2]))
    assert known.risk_shared == pytest.approx(res.risk_shared, rel=1e-10)
    assert known.statistic == pytest.approx(res.statistic, rel=1e-10)
    with pytest.raises(ValueError, match="eigen"):
        sure_statistic(X, D, r, eigen=(w[::-1][:2], V[:, ::-1][:, :2]))  # fewer than r pairs


def _dense_pi_A(U):
    """Pi_A as a (p^2, p^2) matrix from Appendix B.1's formulas with the explicit P = U U^T."""
    p = U.shape[0]
    P = U @ U.T

    def td(Z):
        return P @ Z + Z @ P - P @ Z @ P

    cols = []
    for j in range(p * p):
        E = np.zeros(p * p)
        E[j] = 1.0
        Z = E.reshape(p, p)
        cols.append((td(Z) - td((Z + Z.T) / 2)).ravel())
    return np.array(cols).T


def _triples_model(rng, p):
    Lx = rng.standard_normal((p, p)) * np.linspace(0.4, 1.6, p)     # anisotropic queries
    A = rng.standard_normal((p, p)) / np.sqrt(p) + np.diag(np.linspace(1, 2, p))
    noise = np.linspace(0.2, 1.5, p)

    def draw(n):
        X = rng.standard_normal((n, p)) @ Lx.T
        return X, X @ A.T + rng.standard_normal((n, p)) * noise
    return draw, Lx @ Lx.T @ A.T                                    # E[x d^T] = Sx A^T


def test_skew_tangent_noise_is_unbiased_for_tr_pi_A_sigma_monte_carlo():
    # Theorem 2 with a general covariance: the dual-only directions' noise tr(Pi_A Sigma), Sigma =
    # Cov(vec x d^T), estimated per triple.  Truth: a 400k-sample covariance of vec(x d^T) (16 x 16)
    # traced against the dense Pi_A matrix; the estimate averaged over 300 data sets of n = 40.
    from asymgeo.kernels.theory import skew_tangent_noise

    rng = np.random.default_rng(3)
    p, r = 4, 1
    draw, _ = _triples_model(rng, p)
    U = np.linalg.qr(rng.standard_normal((p, r)))[0]
    X, D = draw(400_000)
    W = np.einsum("ni,nj->nij", X, D).reshape(len(X), -1)
    truth = float(np.trace(_dense_pi_A(U) @ np.cov(W, rowvar=False)))
    est = [skew_tangent_noise(*draw(40), U) for _ in range(300)]
    se = np.std(est, ddof=1) / np.sqrt(len(est))
    assert abs(np.mean(est) - truth) < 4 * se + 0.01 * truth
    # the rank-1 shortcut equals the dense projector on every row
    Xs, Ds = draw(7)
    from asymgeo.kernels.theory import _skew_tangent_norms

    dense = [float(np.sum((_dense_pi_A(U) @ np.outer(x, d).ravel()) ** 2)) for x, d in zip(Xs, Ds)]
    np.testing.assert_allclose(_skew_tangent_norms(Xs, Ds, U), dense, rtol=1e-10, atol=1e-12)


def test_anisotropic_statistic_mean_is_signal_plus_noise_monte_carlo():
    # E ||Pi_A Z||^2 = n ||Pi_A C||^2 + tr(Pi_A Sigma) at a fixed tangent base (the identity behind
    # the rule "dual iff ||Pi_A Z||^2 > 2 tr(Pi_A Sigma)")
    from asymgeo.kernels.theory import skew_tangent_noise

    rng = np.random.default_rng(8)
    p, r, n = 4, 2, 60
    draw, C = _triples_model(rng, p)
    U = np.linalg.qr(rng.standard_normal((p, r)))[0]
    PA = _dense_pi_A(U)
    stats, noises = [], []
    for _ in range(2000):
        X, D = draw(n)
        stats.append(n * float(np.sum((PA @ (X.T @ D / n).ravel()) ** 2)))
        noises.append(skew_tangent_noise(X, D, U))
    want = n * float(np.sum((PA @ C.ravel()) ** 2)) + np.mean(noises)
    se = np.std(stats, ddof=1) / np.sqrt(len(stats))
    assert abs(np.mean(stats) - want) < 4 * se + 0.02 * want


def test_anisotropic_sure_by_hand():
    from asymgeo.kernels.theory import anisotropic_sure, estimate_moment_noise

    rng = np.random.default_rng(5)
    p, r, n = 6, 2, 120
    draw, _ = _triples_model(rng, p)
    X, D = draw(n)
    C = X.T @ D / n
    w, V = np.linalg.eigh((C + C.T) / 2)
    U = V[:, ::-1][:, :r]
    PA = _dense_pi_A(U)
    stat = n * float(np.sum((PA @ C.ravel()) ** 2))
    W = np.einsum("ni,nj->nij", X, D).reshape(n, -1)
    noise = float(np.trace(PA @ np.cov(W, rowvar=False)))          # the sample covariance, ddof = 1
    res = anisotropic_sure(X, D, r)
    assert res.statistic == pytest.approx(stat, rel=1e-9) and res.threshold == pytest.approx(2 * noise, rel=1e-9)
    assert res.choice == ("dual" if stat > 2 * noise else "shared")
    assert res.score == pytest.approx((stat - 2 * noise) / n, rel=1e-9, abs=1e-12)
    k = r * (p - r) + r * (r - 1) // 2
    assert res.k == k and res.isotropic_threshold == pytest.approx(2 * estimate_moment_noise(X, D) ** 2 * k)
    same = anisotropic_sure(X, D, r, eigen=(w[::-1], V[:, ::-1]))
    assert same.statistic == pytest.approx(res.statistic, rel=1e-10)
    with pytest.raises(ValueError, match="eigen"):
        anisotropic_sure(X, D, r, eigen=(w[:1], V[:, :1]))
