"""CARS (paper eq. 7, Section 3.2) and its expectation identity (Appendix C.1).

The fast factored kernel :func:`asymgeo.cars_score` is checked against
``reference_impl.naive_cars_score`` (explicit half moments by loops, full SVD and
full eigendecomposition per half, explicit p x p residuals).
"""

from __future__ import annotations

import numpy as np
import pytest

from asymgeo import cars_score, half_splits, selector_projection
from asymgeo.kernels.selection import MIN_CARS_TRIPLES, residual_factors
from reference_impl import naive_cars_score, naive_moment, naive_residual


def _triples(rng, n, p, asym=0.8, noise=1.0):
    """Triples with a non-PSD relevance moment (so V is not trivially 0)."""
    X = rng.standard_normal((n, p))
    A = np.eye(p) + asym * rng.standard_normal((p, p))
    Y_pos = X @ A + noise * rng.standard_normal((n, p))
    Y_neg = noise * rng.standard_normal((n, p))
    return X, Y_pos, Y_neg


def _random_splits(rng, n, L, complement=True):
    out = []
    for _ in range(L):
        perm = rng.permutation(n)
        m = n // 2
        if complement:
            out.append((perm[:m], perm[m:]))
        else:  # disjoint but not covering: drop a few items
            out.append((perm[: m - 1], perm[m: n - 1]))
    return out


def _assert_close_to_naive(res, naive, rtol=1e-8):
    score, agree, disagree = naive
    scale = max(np.abs(agree).max(), np.abs(disagree).max(), 1e-300)
    np.testing.assert_allclose(res.agreement, agree, rtol=rtol, atol=rtol * scale)
    np.testing.assert_allclose(res.disagreement, disagree, rtol=rtol, atol=rtol * scale)
    assert res.score == pytest.approx(score, rel=rtol, abs=rtol * scale)


@pytest.mark.parametrize("method", ["auto", "dense", "krylov"])
@pytest.mark.parametrize(
    "n,p,r",
    [(4, 2, 1), (9, 3, 2), (30, 5, 5), (64, 8, 2), (101, 40, 2), (120, 48, 4), (80, 20, 10)],
)
def test_cars_matches_naive_with_explicit_splits(method, n, p, r):
    rng = np.random.default_rng(n * 1000 + p * 10 + r)
    X, Yp, Yn = _triples(rng, n, p)
    splits = _random_splits(rng, n, 6)
    res = cars_score(X, Yp, Yn, r, splits=splits, solver=method)
    _assert_close_to_naive(res, naive_cars_score(X, Yp, Yn, r, splits))
    assert res.n == n and res.rank == r and res.n_splits == 6
    naive = naive_cars_score(X, Yp, Yn, r, splits)
    np.testing.assert_allclose(res.terms, naive[1] - naive[2] / 4, rtol=1e-6, atol=1e-9 * max(1.0, abs(naive[0])))
    if abs(naive[0]) > 1e-9:  # the decision follows the sign of the independently computed score
        assert res.choice == ("dual" if naive[0] > 0 else "shared")


@pytest.mark.parametrize("method", ["dense", "krylov"])
def test_cars_non_complementary_splits(method):
    """Halves that do not cover the sample take the separate-moment code path."""
    rng = np.random.default_rng(3)
    n, p, r = 61, 36, 3
    X, Yp, Yn = _triples(rng, n, p)
    splits = _random_splits(rng, n, 4, complement=False)
    splits.append((np.arange(0, 10), np.arange(40, 61)))  # unequal sizes
    res = cars_score(X, Yp, Yn, r, splits=splits, solver=method)
    _assert_close_to_naive(res, naive_cars_score(X, Yp, Yn, r, splits))


def test_cars_generator_seed_uses_half_splits():
    rng = np.random.default_rng(4)
    n, p, r, L = 50, 6, 2, 7
    X, Yp, Yn = _triples(rng, n, p)
    res = cars_score(X, Yp, Yn, r, n_splits=L, seed=np.random.default_rng(99))
    splits = half_splits(n, L, np.random.default_rng(99))
    _assert_close_to_naive(res, naive_cars_score(X, Yp, Yn, r, splits))
    assert res.seed is None  # not an int seed


def test_cars_int_seed_is_reproducible_and_matches_naive():
    rng = np.random.default_rng(5)
    n, p, r, L = 41, 7, 3, 9
    X, Yp, Yn = _triples(rng, n, p)
    a = cars_score(X, Yp, Yn, r, n_splits=L, seed=17)
    b = cars_score(X, Yp, Yn, r, n_splits=L, seed=17)
    c = cars_score(X, Yp, Yn, r, n_splits=L, seed=18)
    np.testing.assert_array_equal(a.terms, b.terms)
    assert not np.array_equal(a.terms, c.terms)
    assert a.seed == 17 and a.n_splits == L
    # Reproduce the splits: int seeds spawn (projection, split) streams from SeedSequence(seed).
    _, split_ss = np.random.SeedSequence(17).spawn(2)
    splits = half_splits(n, L, np.random.default_rng(split_ss))
    _assert_close_to_naive(a, naive_cars_score(X, Yp, Yn, r, splits))


def test_cars_selector_dim_projects_both_views():
    rng = np.random.default_rng(6)
    n, p, d, r, L = 60, 30, 12, 2, 5
    X, Yp, Yn = _triples(rng, n, p)
    res = cars_score(X, Yp, Yn, r, n_splits=L, seed=np.random.default_rng(7), selector_dim=d)
    g = np.random.default_rng(7)
    R = selector_projection(p, d, g)
    splits = half_splits(n, L, g)
    # Projecting queries and document differences by R: moment R^T C R.
    _assert_close_to_naive(res, naive_cars_score(X @ R, Yp @ R, Yn @ R, r, splits))
    assert res.selector_dim == d
    # selector_dim >= p means no projection.
    full = cars_score(X, Yp, Yn, r, n_splits=L, seed=3, selector_dim=p)
    plain = cars_score(X, Yp, Yn, r, n_splits=L, seed=3)
    np.testing.assert_allclose(full.terms, plain.terms, rtol=1e-12)
    # rank is checked against the projected dimension.
    with pytest.raises(ValueError, match="rank"):
        cars_score(X, Yp, Yn, d + 1, seed=1, selector_dim=d)


def test_selector_projection_orthonormal_and_reproducible():
    R = selector_projection(20, 7, 3)
    np.testing.assert_allclose(R.T @ R, np.eye(7), atol=1e-12)
    np.testing.assert_array_equal(R, selector_projection(20, 7, 3))
    assert not np.allclose(R, selector_projection(20, 7, 4))


@pytest.mark.parametrize("n", [2, 4, 7, 100])
def test_half_splits_are_disjoint_halves(n):
    splits = half_splits(n, 5, 0)
    assert len(splits) == 5
    for I1, I2 in splits:
        assert I1.size == n // 2 and I2.size == n - n // 2
        assert np.intersect1d(I1, I2).size == 0
        np.testing.assert_array_equal(np.sort(np.concatenate([I1, I2])), np.arange(n))
    again = half_splits(n, 5, 0)
    for (a1, a2), (b1, b2) in zip(splits, again):
        np.testing.assert_array_equal(a1, b1)
        np.testing.assert_array_equal(a2, b2)


def test_cars_standard_error_and_distances_by_hand():
    rng = np.random.default_rng(8)
    n, p, r = 40, 5, 2
    X, Yp, Yn = _triples(rng, n, p)
    splits = _random_splits(rng, n, 8)
    res = cars_score(X, Yp, Yn, r, splits=splits)
    _, agree, disagree = naive_cars_score(X, Yp, Yn, r, splits)
    terms = agree - disagree / 4
    se = np.sqrt(np.sum((terms - terms.mean()) ** 2) / (len(terms) - 1)) / np.sqrt(len(terms))
    assert res.standard_error == pytest.approx(se, rel=1e-8)
    assert res.corrected_distance == pytest.approx(agree.mean(), rel=1e-8)
    V_all = naive_residual(naive_moment(X, Yp, Yn), r)
    assert res.raw_distance == pytest.approx(float(np.sum(V_all ** 2)), rel=1e-8)
    single = cars_score(X, Yp, Yn, r, splits=splits[:1])
    assert np.isnan(single.standard_error)
    d = res.as_dict()
    assert d["score"] == res.score and d["n_splits"] == 8 and len(d["agreement"]) == 8


def test_cars_choice_tie_goes_to_shared():
    """Diagonal positive half moments: V = 0 exactly on every half, score exactly 0."""
    X = np.repeat(np.diag([3.0, 2.0, 1.0]), 4, axis=0)
    D = np.repeat(np.eye(3), 4, axis=0)
    for method in ("dense", "auto"):
        res = cars_score(X, D, np.zeros_like(D), 2, n_splits=5, seed=0, solver=method)
        assert res.score == 0.0
        assert res.choice == "shared"


def test_cars_choice_follows_sign():
    rng = np.random.default_rng(10)
    n, p = 2000, 4
    X = rng.standard_normal((n, p))
    R = np.linalg.qr(rng.standard_normal((p, p)))[0]
    theta = 1.3  # strong rotation: large skew/negative signal
    G = np.eye(p)
    # Singular values 2, 2, 1, 1 (no tie at rank 2); the top plane is a rotation.
    G[:2, :2] = 2.0 * np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    Yp = X @ (R @ G @ R.T).T + 0.3 * rng.standard_normal((n, p))
    Yn = rng.standard_normal((n, p))
    res = cars_score(X, Yp, Yn, 2, n_splits=10, seed=1)
    assert res.score > 0 and res.choice == "dual"
    # Symmetric PSD relation with tiny n: noise dominates, shared chosen.
    Xs = rng.standard_normal((12, 6))
    Ys = Xs + 2.0 * rng.standard_normal((12, 6))
    res2 = cars_score(Xs, Ys, rng.standard_normal((12, 6)), 3, n_splits=10, seed=1)
    assert res2.choice == "shared" and res2.score < 0


def test_residual_factors_reconstruct_V():
    rng = np.random.default_rng(11)
    C = rng.standard_normal((9, 9))
    for method in ("dense", "krylov"):
        L, R = residual_factors(C, 2, method=method)
        assert L.shape == R.shape == (9, 4)
        np.testing.assert_allclose(L @ R.T, naive_residual(C, 2), atol=1e-10)


def test_min_cars_triples_constant():
    assert MIN_CARS_TRIPLES == 4


# --------------------------------------------------------------------------- Appendix C.1
def test_expectation_identity_arithmetic_independent_half_model():
    """V_j = Delta + eps_j, eps_j iid N(0, 2 Sigma / n): E[<V1,V2> - |V1-V2|^2/4] = |Delta|^2 - tr(Sigma)/n.

    This checks the per-split term formula (which the fast kernel is shown above
    to compute exactly) against the paper's identity, with a non-isotropic Sigma.
    """
    rng = np.random.default_rng(12)
    q, n, draws = 6, 50, 200_000  # q operator coordinates
    Delta = rng.standard_normal(q) * 0.2
    L = rng.standard_normal((q, q)) * 0.5
    Sigma = L @ L.T
    chol = np.linalg.cholesky(2 * Sigma / n)
    V1 = Delta + rng.standard_normal((draws, q)) @ chol.T
    V2 = Delta + rng.standard_normal((draws, q)) @ chol.T
    term = np.sum(V1 * V2, axis=1) - np.sum((V1 - V2) ** 2, axis=1) / 4
    expected = Delta @ Delta - np.trace(Sigma) / n
    assert abs(term.mean() - expected) < 4 * term.std(ddof=1) / np.sqrt(draws)
    # And the disagreement alone has mean 4 tr(Sigma)/n.
    dis = np.sum((V1 - V2) ** 2, axis=1)
    assert abs(dis.mean() - 4 * np.trace(Sigma) / n) < 4 * dis.std(ddof=1) / np.sqrt(draws)


def test_cars_score_expectation_exact_linear_regime():
    """End-to-end C.1 check on ``cars_score`` itself.

    At rank r = p with sym(C_I) positive definite on every half, the dual fit is C_I
    and the shared fit is sym(C_I), so V_I = skew(C_I) exactly: V_I = Delta + eps_I
    with Delta = skew(C) and eps_I the mean of |I| = n/2 iid centred skew(W_i),
    i.e. covariance 2 Sigma / n with Sigma = Cov(skew(W_i)).  Hence
    E[score] = ||skew C||^2 - tr(Sigma)/n.
    """
    rng = np.random.default_rng(13)
    p, n, reps, s = 3, 60, 400, 1.5
    K = np.array([[0.0, 0.3, -0.1], [-0.3, 0.0, 0.2], [0.1, -0.2, 0.0]])
    A = 5.0 * np.eye(p) + K  # d = A x + s e  =>  C = E[x d^T] = A^T
    C = A.T
    Delta2 = float(np.sum(((C - C.T) / 2) ** 2))
    # tr Cov(skew W) = E||skew W||^2 - ||skew C||^2, by a large independent simulation.
    m = 1_000_000
    xb = rng.standard_normal((m, p))
    db = xb @ A.T + s * rng.standard_normal((m, p))
    # ||skew(x d^T)||^2 = (|x|^2 |d|^2 - (x.d)^2) / 2
    sk2 = (np.sum(xb ** 2, 1) * np.sum(db ** 2, 1) - np.sum(xb * db, 1) ** 2) / 2
    trSigma = float(sk2.mean()) - Delta2
    expected = Delta2 - trSigma / n
    scores = []
    for _ in range(reps):
        X = rng.standard_normal((n, p))
        Yp = X @ A.T + s * rng.standard_normal((n, p))
        Yn = np.zeros((n, p))
        splits = half_splits(n, 3, rng)
        for I in (I for pair in splits for I in pair):  # the linear regime really holds
            CI = X[I].T @ (Yp[I] - Yn[I])
            assert np.linalg.eigvalsh((CI + CI.T) / 2).min() > 0
        scores.append(cars_score(X, Yp, Yn, p, splits=splits).score)
    scores = np.array(scores)
    se = scores.std(ddof=1) / np.sqrt(reps)
    # The large-sample estimate of tr(Sigma) has ~0.3% relative MC error; allow for it.
    assert abs(scores.mean() - expected) < 4 * se + 0.01 * trSigma / n
    # The correction matters: without the tr(Sigma)/n penalty the prediction is rejected.
    assert abs(scores.mean() - Delta2) > 6 * se


def test_cars_threads_give_identical_result():
    """Splits run on threads (n_jobs) give the same terms up to BLAS rounding (thread count
    changes the summation order of the products) and the same choice."""
    rng = np.random.default_rng(5)
    n, p, r = 64, 300, 4
    X = rng.standard_normal((n, p))
    Yp = X @ rng.standard_normal((p, p)) / np.sqrt(p) + rng.standard_normal((n, p))
    Yn = rng.standard_normal((n, p))
    seq = cars_score(X, Yp, Yn, r, n_splits=6, seed=3, n_jobs=1)
    par = cars_score(X, Yp, Yn, r, n_splits=6, seed=3, n_jobs=2)
    np.testing.assert_allclose(par.terms, seq.terms, rtol=1e-12, atol=0)
    assert seq.choice == par.choice
    again = cars_score(X, Yp, Yn, r, n_splits=6, seed=3, n_jobs=2)
    np.testing.assert_array_equal(again.terms, par.terms)  # deterministic for fixed n_jobs
    # p = 300: the mixed-precision path, its LAPACK calls outside the GIL on six threads at once
    many = cars_score(X, Yp, Yn, r, n_splits=6, seed=3, n_jobs=6)
    np.testing.assert_allclose(many.terms, seq.terms, rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="n_jobs"):
        cars_score(X, Yp, Yn, r, n_splits=2, seed=3, n_jobs=0)


def test_cars_method_keyword_is_a_deprecated_alias_of_solver(rng):
    X, Yp, Yn = _triples(rng, 40, 6)
    new = cars_score(X, Yp, Yn, 2, n_splits=3, seed=1, solver="dense")
    with pytest.warns(DeprecationWarning, match="cars_score: method= is renamed to solver="):
        old = cars_score(X, Yp, Yn, 2, n_splits=3, seed=1, method="dense")
    assert old.score == new.score


def test_cars_thin_factor_path_matches_naive_with_repeated_rows():
    """Fewer triples per half than 3p/4 (real training sets): the SVD of every half runs on
    its thin factors (from sub-blocks of the full Gram matrices), also when queries repeat
    and a difference row is zero (the Cholesky basis then fails and Householder QR is used);
    the score still equals the naive one and the thin path demonstrably answered."""
    from asymgeo.linalg.lowrank import path_counts, reset_path_counts

    rng = np.random.default_rng(17)
    n, p, r = 40, 96, 3
    X, Yp, Yn = _triples(rng, n, p)
    X[7] = X[3]  # a repeated query
    Yn[11] = Yp[11]  # a triple whose positive and negative coincide: D row 11 is zero
    splits = _random_splits(rng, n, 5)
    reset_path_counts()
    res = cars_score(X, Yp, Yn, r, splits=splits, n_jobs=1)
    counts = path_counts()
    _assert_close_to_naive(res, naive_cars_score(X, Yp, Yn, r, splits))
    assert counts.get("singular:thin", 0) == 2 * len(splits) + 1  # every half and the full moment
    assert counts.get("singular:full", 0) == 0


@pytest.mark.parametrize("complement", [True, False])
def test_cars_on_real_mpnet_triples_takes_the_fast_paths_and_matches_naive(shared_dir, complement):
    """Real MPNet SciFact triples (p = 768, queries with several positives repeat): every
    half's SVD runs on its thin factors and every half's symmetric part on the
    mixed-precision solver (float32 moment, by complement when the halves cover the data);
    the score equals the loop-based naive one to 1e-8."""
    from asymgeo.data import load_beir, load_triples
    from asymgeo.linalg.lowrank import path_counts, reset_path_counts

    data = shared_dir / "data" / "scifact"
    ids = load_beir(data).labelled_query_ids("train")
    t = load_triples(data, "all-mpnet-base-v2", ids, cache_dir=shared_dir / "embeddings")
    X, Yp, Yn = (np.asarray(a, dtype=np.float64)[:240] for a in t.arrays())
    rng = np.random.default_rng(5)
    splits = _random_splits(rng, X.shape[0], 2, complement=complement)
    reset_path_counts()
    res = cars_score(X, Yp, Yn, 8, splits=splits, n_jobs=1)
    counts = path_counts()
    assert counts.get("eigen:mixed") == 2 * len(splits) + 1  # every half and the full moment
    assert counts.get("singular:thin") == 2 * len(splits) + 1
    assert counts.get("singular:full", 0) == 0 and counts.get("eigen:full", 0) == 0
    # the accelerations ran: each half's Gram blocks were cut from the full-data Gram matrices
    # and its float32 symmetric part handed to the solver (formed by ssyr2k, or by complement),
    # not recomputed inside the solvers (only the full-data moment forms its own)
    inputs = path_counts(inputs=True)
    assert inputs.get("thin:grams_given") == 2 * len(splits) and inputs.get("thin:grams_formed") == 1
    assert "thin:householder_retry" not in inputs, "every half's Gram blocks gave a certified answer"
    assert inputs.get("mixed:float32_given") == 2 * len(splits) and "mixed:float32_formed" not in inputs
    # the second half's float32 symmetric part: by complement exactly when the halves cover the
    # triples (no float64 half moment is formed on this path at all)
    done, other = ("half:float32_by_complement", "half:float32_formed")[::1 if complement else -1]
    assert inputs.get(done) == len(splits) and other not in inputs
    assert "half:moment_by_complement" not in inputs and "half:moment_formed" not in inputs
    _assert_close_to_naive(res, naive_cars_score(X, Yp, Yn, 8, splits))


def test_cars_halves_too_large_for_thin_factors_refine_with_the_float64_moment(monkeypatch):
    """Halves of more than 3p/4 triples (p = 256): the moment is formed in float64, the mixed
    solver refines with it; when the full-data probe declines, float64 LAPACK answers every
    half. Both equal the naive score."""
    import asymgeo.linalg.solver_choice as solver_choice
    from asymgeo.linalg.lowrank import path_counts, reset_path_counts

    rng = np.random.default_rng(31)
    n, p, r = 600, 256, 4
    X, Yp, Yn = _triples(rng, n, p, asym=0.3)
    splits = _random_splits(rng, n, 2)
    naive = naive_cars_score(X, Yp, Yn, r, splits)
    reset_path_counts()
    res = cars_score(X, Yp, Yn, r, splits=splits, n_jobs=1, solver="dense")
    counts = path_counts()
    assert counts.get("eigen:mixed") == 2 * len(splits) + 1
    assert counts.get("singular:thin", 0) == 0
    # each pair's second moment came from the full one (the halves cover the triples), and no
    # float32 half was cut (the moments are formed on this path)
    inputs = path_counts(inputs=True)
    assert inputs.get("half:moment_by_complement") == len(splits) and "half:moment_formed" not in inputs
    assert not {k for k in inputs if k.startswith("half:float32")}
    _assert_close_to_naive(res, naive)
    # halves that leave triples out: the second moment is formed from its rows
    gaps = _random_splits(rng, n, 2, complement=False)
    reset_path_counts()
    res_gaps = cars_score(X, Yp, Yn, r, splits=gaps, n_jobs=1, solver="dense")
    inputs = path_counts(inputs=True)
    assert inputs.get("half:moment_formed") == len(gaps) and "half:moment_by_complement" not in inputs
    _assert_close_to_naive(res_gaps, naive_cars_score(X, Yp, Yn, r, gaps))

    monkeypatch.setattr(solver_choice, "mixed_probe", lambda C, rank: None)
    reset_path_counts()
    res = cars_score(X, Yp, Yn, r, splits=splits, n_jobs=1, solver="dense")
    counts = path_counts()
    assert "eigen:mixed" not in counts and counts.get("eigen:subset") == 2 * len(splits) + 1
    _assert_close_to_naive(res, naive)


def test_cars_on_real_nfcorpus_mpnet_halves_takes_the_mixed_svd_and_matches_naive(shared_dir):
    """NFCorpus MPNet training triples (p = 768), halves of 600 triples (more than 3p/4): every
    half's SVD runs on the mixed-precision Gram path (float32 reduction of C^T C, refined in
    float64) and its symmetric part on the mixed eigensolver; the score equals the naive one
    (full float64 SVD and eigh per half) to 1e-8."""
    from asymgeo.data import load_triples
    from asymgeo.linalg.lowrank import path_counts, reset_path_counts

    t = load_triples(shared_dir / "data" / "nfcorpus", "all-mpnet-base-v2", "train",
                     cache_dir=shared_dir / "embeddings")
    X, Yp, Yn = (np.asarray(a, dtype=np.float64)[:1200] for a in t.arrays())
    splits = _random_splits(np.random.default_rng(6), X.shape[0], 2, complement=True)
    reset_path_counts()
    res = cars_score(X, Yp, Yn, 16, splits=splits, n_jobs=1)
    counts = path_counts()
    assert counts.get("singular:mixed") == 2 * len(splits)  # every half (the full moment: thin factors or Gram)
    assert counts.get("eigen:mixed") == 2 * len(splits) + 1
    assert counts.get("singular:full", 0) == 0 and counts.get("eigen:full", 0) == 0
    _assert_close_to_naive(res, naive_cars_score(X, Yp, Yn, 16, splits))


# --------------------------------------------------------------------------- survivors of mutation testing (issue #19)
def test_gram_helper_equals_the_plain_product():
    from asymgeo.linalg.solver_choice import _gram

    A = np.random.default_rng(8).standard_normal((7, 5))
    np.testing.assert_allclose(_gram(A), A @ A.T, rtol=1e-13, atol=1e-13)


def test_result_as_dict_holds_every_field():
    rng = np.random.default_rng(9)
    X, Yp, Yn = (rng.standard_normal((40, 6)) for _ in range(3))
    res = cars_score(X, Yp, Yn, 2, n_splits=3, seed=4)
    d = res.as_dict()
    assert set(d) == {"score", "choice", "standard_error", "raw_distance", "corrected_distance", "n", "rank",
                      "n_splits", "selector_dim", "seed", "agreement", "disagreement"}
    assert (d["score"], d["choice"], d["standard_error"]) == (res.score, res.choice, res.standard_error)
    assert (d["raw_distance"], d["corrected_distance"]) == (res.raw_distance, res.corrected_distance)
    assert (d["n"], d["rank"], d["n_splits"], d["selector_dim"], d["seed"]) == (40, 2, 3, None, 4)
    assert d["agreement"] == res.agreement.tolist() and d["disagreement"] == res.disagreement.tolist()
    assert len(d["agreement"]) == 3


@pytest.mark.parametrize("splits, message", [
    ([(np.arange(3),)], "splits[0]: expected a pair (I1, I2) of index arrays"),
    ([(np.arange(3).reshape(1, 3), np.arange(3, 6))], "splits[0].I1: expected a non-empty 1-d index array"),
    ([(np.arange(3), [])], "splits[0].I2: expected a non-empty 1-d index array"),
    ([(np.arange(3), [3, 10])], "splits[0].I2: indices must lie in [0, 10), got range [3, 10]"),
    ([(np.arange(3), [3, -1])], "splits[0].I2: indices must lie in [0, 10), got range [-1, 3]"),
    ([([1, 1, 2], [3, 4])], "splits[0].I1: contains repeated indices"),
    ([(np.arange(3), np.arange(4, 8)), ([0, 1], [1, 2])], "splits[1]: I1 and I2 must be disjoint"),
    ([], "splits: expected at least one (I1, I2) pair"),
])
def test_explicit_splits_are_refused_with_their_position(splits, message):
    rng = np.random.default_rng(10)
    X, Yp, Yn = (rng.standard_normal((10, 4)) for _ in range(3))
    with pytest.raises(ValueError) as e:
        cars_score(X, Yp, Yn, 1, splits=splits)
    assert str(e.value) == message


def test_explicit_splits_of_one_element_halves_and_float_indices_are_accepted():
    rng = np.random.default_rng(11)
    X, Yp, Yn = (rng.standard_normal((10, 4)) for _ in range(3))
    a = cars_score(X, Yp, Yn, 1, splits=[(np.array([0.0, 1.0, 2.0]), np.array([3.0, 4.0, 5.0]))])
    b = cars_score(X, Yp, Yn, 1, splits=[([0, 1, 2], [3, 4, 5])])
    assert a.score == b.score
    c = cars_score(X, Yp, Yn, 1, splits=[([0], [1])])
    assert np.isfinite(c.score) and c.n_splits == 1


def test_half_splits_refuses_fewer_than_two_items():
    with pytest.raises(ValueError) as e:
        half_splits(1, 3, 0)
    assert str(e.value) == "n: need at least 2 items to split, got 1"
