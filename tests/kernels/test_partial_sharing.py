"""Partial sharing (issue 20): the fitted member against brute force and Theorem 1's pure optima."""

import numpy as np
import pytest
import scipy.optimize as so

from asymgeo.kernels.partial_sharing import cross_fitted_sharing, partial_truncate, sharing_grid


def _shared_loss(C, r):
    """Theorem 1 by hand: skew energy + every squared eigenvalue of sym(C) not among the top-r positive."""
    S = (C + C.T) / 2
    w = np.sort(np.linalg.eigvalsh(S))[::-1]
    kept = np.maximum(w[:r], 0.0)
    return float(np.sum(((C - C.T) / 2) ** 2) + np.sum(w**2) - np.sum(kept**2))


def _dual_loss(C, r):
    s = np.linalg.svd(C, compute_uv=False)
    return float(np.sum(s[r:] ** 2))


def _brute(C, r, s, starts=12, seed=0):
    """Best of random L-BFGS starts over the factors P (r-s, p), A, B (s, p)."""
    p, a = C.shape[0], r - s
    rng = np.random.default_rng(seed)

    def f(z):
        P = z[: a * p].reshape(a, p)
        A = z[a * p: (a + s) * p].reshape(s, p)
        B = z[(a + s) * p:].reshape(s, p)
        R = P.T @ P + A.T @ B - C
        return float(np.sum(R * R)), np.concatenate([(2 * P @ (R + R.T)).ravel(), (2 * B @ R.T).ravel(),
                                                     (2 * A @ R).ravel()])

    best = np.inf
    for _ in range(starts):
        res = so.minimize(f, 0.5 * rng.standard_normal((r + s) * p), jac=True, method="L-BFGS-B",
                          options={"maxiter": 5000, "gtol": 1e-12, "ftol": 1e-15})
        best = min(best, res.fun)
    return best


def test_pure_ends_equal_theorem_1_truncations():
    rng = np.random.default_rng(3)
    C = rng.standard_normal((12, 12))
    w, U = np.linalg.eigh((C + C.T) / 2)
    shared = (U[:, -4:] * np.maximum(w[-4:], 0)) @ U[:, -4:].T
    u, sv, vt = np.linalg.svd(C)
    dual = (u[:, :4] * sv[:4]) @ vt[:4]
    np.testing.assert_allclose(partial_truncate(C, 4, 0).operator, shared, atol=1e-10)
    np.testing.assert_allclose(partial_truncate(C, 4, 4).operator, dual, atol=1e-10)


@pytest.mark.parametrize("trial", range(8))
def test_matches_brute_force_and_lies_between_the_pure_optima(trial):
    rng = np.random.default_rng(100 + trial)
    p, r = 6, 3
    s = 1 + trial % 2
    C = rng.standard_normal((p, p))
    if trial % 3 == 0:
        C = C @ C.T / 3 + 0.5 * (C - C.T)
    elif trial % 3 == 1:  # sym(C) negative definite: the PSD block must stay at zero
        C = -(C @ C.T) / 3 - 0.1 * np.eye(p) + 0.5 * (C - C.T)
    fit = partial_truncate(C, r, s)
    brute = _brute(C, r, s)
    assert fit.loss <= brute * (1 + 1e-3) + 1e-9
    assert _dual_loss(C, r) - 1e-9 <= fit.loss <= _shared_loss(C, r) + 1e-9
    assert fit.loss <= fit.sequential_loss + 1e-9
    R = fit.operator - C
    assert fit.loss == pytest.approx(float(np.sum(R * R)), rel=1e-10)


def test_planted_partial_moment_is_recovered_in_the_subspace_path():
    """C = P^T P + A^T B exactly (rank 4 + 2 = r = 6, p = 40 > 3r, so the subspace path runs): the
    loss reaches zero, which the shared family at rank 6 cannot."""
    rng = np.random.default_rng(7)
    p, a, s = 40, 4, 2
    P, A, B = rng.standard_normal((a, p)), rng.standard_normal((s, p)), rng.standard_normal((s, p))
    C = P.T @ P + A.T @ B
    fit = partial_truncate(C, a + s, s)
    c2 = float(np.sum(C * C))
    assert fit.loss / c2 < 1e-8
    assert _shared_loss(C, a + s) / c2 > 1e-3
    np.testing.assert_allclose(fit.query_maps[:a], fit.document_maps[:a])  # tied rows
    np.testing.assert_allclose(fit.query_maps.T @ fit.document_maps, fit.operator, atol=1e-9)
    assert np.linalg.eigvalsh(fit.shared_map.T @ fit.shared_map).min() > -1e-9


def test_sharing_grid():
    assert sharing_grid(16) == [0, 4, 8, 12, 16]
    assert sharing_grid(2) == [0, 1, 2]
    with pytest.raises(ValueError, match="rank"):
        sharing_grid(0)


def test_cross_fitted_sharing_rule_and_planted_families():
    rng = np.random.default_rng(11)
    n, p = 600, 20
    X = rng.standard_normal((n, p))
    G = rng.standard_normal((p, 3))
    sym_truth = G @ G.T  # a PSD moment: shared is the truth
    D = X @ sym_truth + 0.3 * rng.standard_normal((n, p))
    cv = cross_fitted_sharing(X, D, 4, folds=4, seed=1)
    assert cv.losses.shape == (4, len(cv.grid))
    # the one-SE rule, by hand from the table
    mean, se = cv.losses.mean(0), cv.losses.std(0, ddof=1) / 2
    j = int(np.argmin(mean))
    assert cv.asymmetric == min(s for s, m in zip(cv.grid, mean) if m <= mean[j] + se[j])
    assert cv.asymmetric == 0
    # a strongly skew truth: the asymmetric end
    W = rng.standard_normal((p, 4))
    V = rng.standard_normal((p, 4))
    D2 = X @ (W @ V.T) + 0.3 * rng.standard_normal((n, p))
    assert cross_fitted_sharing(X, D2, 4, folds=4, seed=1).asymmetric == 4


def test_one_se_rule_takes_the_fewest_asymmetric_directions_within_one_se_of_the_best():
    from asymgeo.kernels.partial_sharing import _one_se_choice

    # best mean at s = 8 (0.50, SE 0.03): s = 4 (0.52) is within it, s = 0 (0.60) is not
    assert _one_se_choice([0, 4, 8], np.array([0.60, 0.52, 0.50]), np.array([0.01, 0.01, 0.03])) == 4
    assert _one_se_choice([0, 4, 8], np.array([0.60, 0.52, 0.50]), np.array([0.01, 0.01, 0.01])) == 8
    assert _one_se_choice([0, 4, 8], np.array([0.50, 0.50, 0.50]), np.array([0.0, 0.0, 0.0])) == 0


def test_bad_input_is_named():
    C = np.eye(5)
    with pytest.raises(ValueError, match="asymmetric"):
        partial_truncate(C, 3, 4)
    with pytest.raises(ValueError, match="max_iter"):
        partial_truncate(C, 3, 1, max_iter=-1)
    with pytest.raises(ValueError, match="folds"):
        cross_fitted_sharing(np.ones((3, 5)), np.ones((3, 5)), 2, folds=5)
