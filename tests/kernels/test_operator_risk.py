"""operator_risk: held-out losses against per-rank truncations, prefix moments by loops,
the mean-term decomposition, centring and the log2 slope."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asymgeo.kernels.geometry import dual_truncate, shared_truncate
from asymgeo.kernels.operator_risk import centre, heldout_loss, log2_slope, mean_term, prefix_moments, truncation_losses


def test_heldout_loss_by_hand():
    T = np.array([[1.0, 0.0], [0.0, 2.0]])        # ||T||^2 = 5
    M = np.array([[1.0, 1.0], [0.0, 0.0]])        # M - T = [[0, 1], [0, -2]]: squared norm 5
    assert heldout_loss(M, T) == pytest.approx(1.0)
    assert heldout_loss(T, T) == 0.0
    assert heldout_loss(np.zeros((2, 2)), T) == pytest.approx(1.0)


def test_heldout_loss_refuses_zero_target_and_shape():
    with pytest.raises(ValueError, match="M_test"):
        heldout_loss(np.eye(2), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="M_hat"):
        heldout_loss(np.eye(3), np.eye(2))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), p=st.integers(2, 9))
def test_truncation_losses_match_per_rank_truncations(seed, p):
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((p, p)) + 0.5 * np.diag(rng.standard_normal(p))
    T = rng.standard_normal((p, p))
    ranks = list(range(1, p + 1))
    res = truncation_losses(C, T, ranks)
    for j, r in enumerate(ranks):
        assert res.shared[j] == pytest.approx(heldout_loss(shared_truncate(C, r, solver="dense"), T), abs=1e-9)
        assert res.dual[j] == pytest.approx(heldout_loss(dual_truncate(C, r, solver="dense"), T), abs=1e-9)
    assert np.allclose(res.advantage, res.shared - res.dual)


def test_shared_keeps_only_positive_eigenvalues():
    # sym(C) = diag(3, -2, -1): beyond rank 1 the shared truncation stays at diag(3, 0, 0).
    C = np.diag([3.0, -2.0, -1.0]) + np.array([[0, 1.0, 0], [-1.0, 0, 0], [0, 0, 0]])  # + skew part
    T = np.eye(3)
    res = truncation_losses(C, T, [1, 2, 3])
    expected_shared = np.sum((np.diag([3.0, 0, 0]) - T) ** 2) / 3
    assert np.allclose(res.shared, expected_shared)
    assert res.dual[2] == pytest.approx(np.sum((C - T) ** 2) / 3)   # full rank: C itself


def test_truncation_losses_errors():
    with pytest.raises(ValueError, match="rank"):
        truncation_losses(np.eye(3), np.eye(3), [4])
    with pytest.raises(ValueError, match="ranks"):
        truncation_losses(np.eye(3), np.eye(3), [])
    with pytest.raises(ValueError, match="M_test"):
        truncation_losses(np.eye(3), np.eye(2), [1])


def test_prefix_moments_equal_loops_over_outer_products(rng):
    X = rng.standard_normal((40, 5)).astype(np.float16)
    D = rng.standard_normal((40, 5)).astype(np.float32)
    out = prefix_moments(X, D, [40, 3, 17])
    assert sorted(out) == [3, 17, 40]
    for m, C in out.items():
        ref = sum(np.outer(X[i].astype(np.float64), D[i].astype(np.float64)) for i in range(m)) / m
        assert np.allclose(C, ref, atol=1e-12)
    with pytest.raises(ValueError, match="sizes"):
        prefix_moments(X, D, [41])
    with pytest.raises(ValueError, match="sizes"):
        prefix_moments(X, D, [0])


def test_mean_term_decomposition(rng):
    X = rng.standard_normal((50, 4)) + 2.0
    D = rng.standard_normal((50, 4)) - 1.0
    mt = mean_term(X, D)
    C = sum(np.outer(x, d) for x, d in zip(X, D, strict=True)) / 50
    xm, dm = X.mean(0), D.mean(0)
    Cc = sum(np.outer(x - xm, d - dm) for x, d in zip(X, D, strict=True)) / 50
    assert np.allclose(C, Cc + np.outer(xm, dm))
    assert mt.share == pytest.approx(np.sum(np.outer(xm, dm) ** 2) / np.sum(C**2))
    assert mt.centred_share == pytest.approx(np.sum(Cc**2) / np.sum(C**2))
    M = np.outer(xm, dm)
    assert mt.cosine == pytest.approx(np.sum(C * M) / np.linalg.norm(C) / np.linalg.norm(M))


def test_mean_term_all_mean_when_queries_identical(rng):
    X = np.tile(rng.standard_normal(3), (10, 1))
    D = rng.standard_normal((10, 3))
    mt = mean_term(X, D)
    assert mt.share == pytest.approx(1.0) and mt.centred_share == pytest.approx(0.0, abs=1e-12)
    assert mt.cosine == pytest.approx(1.0)
    with pytest.raises(ValueError, match="zero"):
        mean_term(np.zeros((3, 2)), np.ones((3, 2)))


def test_centre_uses_given_means(rng):
    X, D = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    xm, dm = np.array([1.0, 2.0, 3.0]), np.array([0.5, 0.0, -0.5])
    Xc, Dc = centre(X, D, xm, dm)
    assert np.allclose(Xc + xm, X) and np.allclose(Dc + dm, D)
    with pytest.raises(ValueError, match="x_mean"):
        centre(X, D, np.zeros(2), dm)


def test_log2_slope():
    n = [32, 64, 128, 256]
    assert log2_slope(n, [3 * np.log2(v) + 1 for v in n]) == pytest.approx(3.0)
    y = [0.3, -0.1, 0.4, 0.9]
    assert log2_slope(n, y) == pytest.approx(np.polyfit(np.log2(n), y, 1)[0])
    with pytest.raises(ValueError, match="two distinct"):
        log2_slope([32, 32], [1.0, 2.0])
    with pytest.raises(ValueError, match="values"):
        log2_slope([32, 64], [1.0])


# ------------------------------------------------------------ cross-validated operator risk (issue 20)
def _brute_losses(C, T, r):
    """Shared: top-r positive eigenpairs of sym(C); dual: rank-r SVD; both against T, relative."""
    w, V = np.linalg.eigh((C + C.T) / 2)
    idx = np.argsort(w)[::-1][:r]
    S = (V[:, idx] * np.maximum(w[idx], 0)) @ V[:, idx].T
    U, s, Wt = np.linalg.svd(C)
    Dr = (U[:, :r] * s[:r]) @ Wt[:r]
    t2 = np.sum(T * T)
    return np.sum((S - T) ** 2) / t2, np.sum((Dr - T) ** 2) / t2


def test_cross_validated_risk_against_brute_force():
    from asymgeo.kernels.operator_risk import cross_validated_risk

    rng = np.random.default_rng(5)
    n, p, r = 90, 10, 3
    X = rng.standard_normal((n, p))
    A = rng.standard_normal((p, p))
    Yp = X @ A + 0.5 * rng.standard_normal((n, p))  # an asymmetric signal: dual should win
    Yn = rng.standard_normal((n, p))
    res = cross_validated_risk(X, Yp, Yn, r, folds=3, seed=11)
    order = np.random.default_rng(np.random.SeedSequence(11)).permutation(n)
    D = Yp - Yn
    want = []
    for part in np.array_split(order, 3):
        rest = np.setdiff1d(np.arange(n), part)
        C = X[rest].T @ D[rest] / rest.size
        T = X[part].T @ D[part] / part.size
        ls, ld = _brute_losses(C, T, r)
        want.append(ls - ld)
    np.testing.assert_allclose(res.differences, want, rtol=1e-9, atol=1e-12)
    assert res.score == pytest.approx(np.mean(want))
    assert res.standard_error == pytest.approx(np.std(want, ddof=1) / np.sqrt(3))
    assert res.choice == ("dual" if np.mean(want) > np.std(want, ddof=1) / np.sqrt(3) else "shared")
    assert res.choice == "dual"
    # a symmetric (PSD) signal: the one-SE rule keeps shared
    Ys = X @ (A @ A.T) / p + 0.5 * rng.standard_normal((n, p))
    assert cross_validated_risk(X, Ys, np.zeros_like(Ys), r, folds=5, seed=1).choice == "shared"
    with pytest.raises(ValueError, match="folds"):
        cross_validated_risk(X, Yp, Yn, r, folds=1)


def test_cross_validated_risk_at_p512_takes_the_mixed_svd_and_equals_brute_force():
    """At p = 512 the inner-fold truncations take the mixed-precision solvers (float32
    reductions refined and certified in float64): the fold differences still equal numpy's
    full eigh and SVD, and the mixed SVD demonstrably answered for every fold."""
    from asymgeo.kernels.operator_risk import cross_validated_risk
    from asymgeo.linalg.lowrank import path_counts, reset_path_counts

    rng = np.random.default_rng(7)
    n, p, r = 900, 512, 8
    Z = rng.standard_normal((n, 24))
    X = Z @ rng.standard_normal((24, p)) + rng.standard_normal((n, p))
    Yp = Z @ rng.standard_normal((24, p)) + 2.0 * rng.standard_normal((n, p))
    Yn = np.zeros_like(Yp)
    reset_path_counts()
    res = cross_validated_risk(X, Yp, Yn, r, folds=3, seed=2)
    assert path_counts().get("singular:mixed") == 3 and path_counts().get("eigen:mixed") == 3
    order = np.random.default_rng(np.random.SeedSequence(2)).permutation(n)
    want = []
    for part in np.array_split(order, 3):
        rest = np.setdiff1d(np.arange(n), part)
        ls, ld = _brute_losses(X[rest].T @ Yp[rest] / rest.size, X[part].T @ Yp[part] / part.size, r)
        want.append(ls - ld)
    np.testing.assert_allclose(res.differences, want, rtol=1e-8, atol=1e-12)


def test_validation_scores_the_cv_selector_like_cars():
    from asymgeo.estimators.validation import validate_selection

    rng = np.random.default_rng(2)
    n, p = 200, 8
    X = rng.standard_normal((n, p))
    Yp = X @ rng.standard_normal((p, p)) + rng.standard_normal((n, p))
    Yn = rng.standard_normal((n, p))
    v = validate_selection(X, Yp, Yn, 2, folds=4, n_splits=4, cv_folds=3, sizes=(32, 64))
    assert all(c["cv_choice"] in ("shared", "dual") for c in v.cells) and "cv" in v.regret
    # the cv regret, by hand from the cells (within fold, then over folds)
    by_fold: dict[int, list[float]] = {}
    for c in v.cells:
        best = min(c["loss_shared"], c["loss_dual"])
        by_fold.setdefault(c["fold"], []).append((c["loss_dual"] if c["cv_choice"] == "dual" else c["loss_shared"])
                                                 - best)
    assert v.regret["cv"] == pytest.approx(np.mean([np.mean(x) for x in by_fold.values()]))
    assert "cv" not in validate_selection(X, Yp, Yn, 2, folds=4, n_splits=4, sizes=(32,)).regret


def test_cross_validated_risk_keeps_shared_within_one_standard_error():
    """A dual advantage smaller than its fold noise (0 < score <= SE) stays shared."""
    from asymgeo.kernels.operator_risk import cross_validated_risk

    rng = np.random.default_rng(0)
    n, p = 60, 6
    X = rng.standard_normal((n, p))
    A = rng.standard_normal((p, p))
    Y = X @ (A @ A.T / p + 0.15 * (A - A.T)) + rng.standard_normal((n, p))
    res = cross_validated_risk(X, Y, np.zeros_like(Y), 2, folds=5, seed=0)
    assert 0 < res.score <= res.standard_error  # the case the one-SE rule exists for
    assert res.choice == "shared"


def test_truncation_spectra_serve_every_rank_and_match_full_decompositions(rng):
    # p >= 256: the mixed-precision eigensolver and the thin-factor SVD answer; the result must
    # equal the losses from full LAPACK decompositions (numpy eigh / svd, computed here)
    from asymgeo.kernels.operator_risk import truncation_spectra
    from asymgeo.linalg.lowrank import path_counts, reset_path_counts

    n, p = 150, 260
    X = rng.standard_normal((n, p))
    D = X @ (rng.standard_normal((p, p)) / np.sqrt(p)) + rng.standard_normal((n, p))
    C, T = X.T @ D / n, rng.standard_normal((p, p))
    reset_path_counts()
    spectra = truncation_spectra(C, 12, factors=(X, D, 1.0 / n))
    paths = path_counts()
    assert paths.get("singular:thin") == 1 and paths.get("eigen:mixed") == 1
    res = truncation_losses(C, T, [3, 12, 7], spectra=spectra)
    w, Q = np.linalg.eigh((C + C.T) / 2)
    U, s, Vt = np.linalg.svd(C)
    t2 = np.sum(T * T)
    for j, r in enumerate([3, 12, 7]):
        keep = np.maximum(w[::-1][:r], 0.0)
        S = (Q[:, ::-1][:, :r] * keep) @ Q[:, ::-1][:, :r].T
        Dr = (U[:, :r] * s[:r]) @ Vt[:r]
        assert res.shared[j] == pytest.approx(np.sum((S - T) ** 2) / t2, rel=1e-10)
        assert res.dual[j] == pytest.approx(np.sum((Dr - T) ** 2) / t2, rel=1e-10)
    assert np.array_equal(res.shared, truncation_losses(C, T, [3, 12, 7]).shared)
    with pytest.raises(ValueError, match="spectra"):
        truncation_losses(C, T, [13], spectra=spectra)  # computed only up to rank 12


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), p=st.integers(3, 8), n=st.integers(4, 12))
def test_resampled_losses_equal_truncations_scored_on_explicit_targets(seed, p, n):
    """Uniform weights, a subset and a bootstrap resample: each target formed row by row and
    scored with heldout_loss on the per-rank truncations (no expansion)."""
    from asymgeo.kernels.operator_risk import resampled_losses, truncation_spectra

    rng = np.random.default_rng(seed)
    C = rng.standard_normal((p, p)) + np.diag(rng.standard_normal(p))
    X, D = rng.standard_normal((n, p)), rng.standard_normal((n, p))
    A = rng.permutation(n)[: n // 2]
    counts = rng.multinomial(n, np.full(n, 1.0 / n))
    W = np.zeros((3, n))
    W[0] = 1.0 / n
    W[1, A] = 1.0 / A.size
    W[2] = counts / n
    targets = [X.T @ D / n, X[A].T @ D[A] / A.size,
               np.repeat(X, counts, axis=0).T @ np.repeat(D, counts, axis=0) / n]
    ranks = list(range(1, p + 1))
    shared, dual = resampled_losses(truncation_spectra(C, p), X, D, ranks, W)
    assert shared.shape == dual.shape == (3, p)
    for k, T in enumerate(targets):
        for j, r in enumerate(ranks):
            assert shared[k, j] == pytest.approx(heldout_loss(shared_truncate(C, r, solver="dense"), T), rel=1e-8, abs=1e-10)
            assert dual[k, j] == pytest.approx(heldout_loss(dual_truncate(C, r, solver="dense"), T), rel=1e-8, abs=1e-10)


def test_resampled_losses_refuse_bad_weights_and_ranks():
    from asymgeo.kernels.operator_risk import resampled_losses, truncation_spectra

    rng = np.random.default_rng(3)
    X, D = rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    sp = truncation_spectra(rng.standard_normal((4, 4)), 2)
    ok = np.full((1, 5), 0.2)
    with pytest.raises(ValueError, match=r"weights: expected shape \(K, 5\)"):
        resampled_losses(sp, X, D, [1], np.full((1, 4), 0.25))
    with pytest.raises(ValueError, match="sum to one"):
        resampled_losses(sp, X, D, [1], ok * 2)
    with pytest.raises(ValueError, match="non-negative"):
        resampled_losses(sp, X, D, [1], np.array([[0.6, 0.6, -0.2, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="rank"):
        resampled_losses(sp, X, D, [3], ok)                     # beyond the spectra computed
    with pytest.raises(ValueError, match="X: expected 4 columns"):
        resampled_losses(sp, X[:, :3], D[:, :3], [1], ok)
    Z = np.zeros((5, 4))
    with pytest.raises(ValueError, match="target moment M_w is zero"):
        resampled_losses(sp, Z, D, [1], ok)
    G = (X @ X.T) * (D @ D.T)
    with pytest.raises(ValueError, match=r"gram: expected shape \(5, 5\)"):
        resampled_losses(sp, X, D, [1], ok, gram=G[:4, :4])
    given = resampled_losses(sp, X, D, [1, 2], ok, gram=G)       # a formed gram: the same answer
    assert np.allclose(given, resampled_losses(sp, X, D, [1, 2], ok), rtol=1e-13, atol=0)


def test_extrapolated_cross_validated_risk_by_hand():
    """Issue #37: each fold's difference at the folds' size equals cross_validated_risk's (same
    permutation), the smaller size drops the next fold, and the line in 1/m is read at n."""
    from asymgeo.kernels.geometry import dual_truncate, shared_truncate
    from asymgeo.kernels.operator_risk import cross_validated_risk, extrapolated_cross_validated_risk

    rng = np.random.default_rng(3)
    X = rng.standard_normal((47, 6))
    D = X @ rng.standard_normal((6, 6)) * 0.3 + rng.standard_normal((47, 6))
    res = extrapolated_cross_validated_risk(X, D, 2, folds=4, seed=9)
    cv = cross_validated_risk(X, D, np.zeros_like(D), 2, folds=4, seed=9)
    np.testing.assert_allclose(res.at_train, cv.differences, rtol=1e-10, atol=1e-14)
    parts = np.array_split(np.random.default_rng(np.random.SeedSequence(9)).permutation(47), 4)
    for k, part in enumerate(parts):
        nxt = parts[(k + 1) % 4]
        rest = np.setdiff1d(np.arange(47), np.concatenate([part, nxt]))
        T = X[part].T @ D[part] / part.size
        C2 = X[rest].T @ D[rest] / rest.size
        Ms, Md = shared_truncate(C2, 2, solver="dense"), dual_truncate(C2, 2, solver="dense")
        d2 = (np.sum((Ms - T) ** 2) - np.sum((Md - T) ** 2)) / np.sum(T ** 2)
        assert res.at_smaller[k] == pytest.approx(d2, rel=1e-9, abs=1e-12)
        m1, m2 = 47 - part.size, rest.size
        want = res.at_train[k] + (res.at_train[k] - d2) * (1 / m1 - 1 / 47) / (1 / m2 - 1 / m1)
        assert res.extrapolated[k] == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert res.score == pytest.approx(res.extrapolated.mean()) and res.choice == ("dual" if res.score > 0 else "shared")
    with pytest.raises(ValueError, match=r"folds: expected an integer in \[3, n = 47\]"):
        extrapolated_cross_validated_risk(X, D, 2, folds=2)
