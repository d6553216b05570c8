"""Top-r spectral solvers of :mod:`asymgeo.linalg.lowrank` against dense LAPACK decompositions.

Each fast path (thin factors, subset syevr, certified block Krylov with warm starts) is
run on a case where it must answer, checked against ``numpy.linalg.svd`` / ``eigh`` of the
same matrix, and the path counters prove that the fast path (not a fallback) answered.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asymgeo.linalg.lowrank import path_counts, reset_path_counts, top_eigen, top_singular


def _projector(U: np.ndarray) -> np.ndarray:
    return U @ U.T


def _check_singular(C: np.ndarray, r: int, U: np.ndarray, s: np.ndarray, V: np.ndarray, rtol: float = 1e-9) -> None:
    Ud, sd, Vdt = np.linalg.svd(C)
    np.testing.assert_allclose(s, sd[:r], rtol=rtol, atol=rtol * sd[0])
    # the rank-r truncation is unique when s_r > s_{r+1}
    np.testing.assert_allclose((U * s) @ V.T, (Ud[:, :r] * sd[:r]) @ Vdt[:r], atol=rtol * sd[0] * 10)
    np.testing.assert_allclose(U.T @ U, np.eye(r), atol=1e-9)
    np.testing.assert_allclose(V.T @ V, np.eye(r), atol=1e-9)


def _gapped_symmetric(rng: np.random.Generator, p: int, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric S with r leading eigenvalues well above the rest (and a negative tail)."""
    Q, _ = np.linalg.qr(rng.standard_normal((p, p)))
    w = np.concatenate([np.linspace(10.0, 5.0, r), rng.uniform(-0.5, 0.5, p - r)])
    return (Q * w) @ Q.T, Q[:, :r]


def test_thin_singular_path_at_p512():
    rng = np.random.default_rng(0)
    m, p, q, r = 200, 512, 512, 16  # r <= p/16, m < 3p/4
    A, B = rng.standard_normal((m, p)), rng.standard_normal((m, q))
    C = A.T @ B / m
    reset_path_counts()
    U, s, V = top_singular(C, r, factors=(A, B, 1.0 / m))
    assert path_counts() == {"singular:thin": 1}
    _check_singular(C, r, U, s, V)
    # the same answer from Gram matrices passed in (as CARS does with sub-blocks)
    reset_path_counts()
    U2, s2, V2 = top_singular(C, r, factors=(A, B, 1.0 / m), grams=(A @ A.T, B @ B.T))
    assert path_counts() == {"singular:thin": 1}
    np.testing.assert_allclose(s2, s, rtol=1e-12)
    np.testing.assert_allclose((U2 * s2) @ V2.T, (U * s) @ V.T, atol=1e-12 * s[0])


def test_thin_singular_with_repeated_rows():
    """Repeated rows make A A^T singular (Cholesky fails or loses its certificate; the
    Householder basis then answers): still the thin path, still the right triplets."""
    rng = np.random.default_rng(1)
    m, p, r = 120, 512, 8
    A, B = rng.standard_normal((m, p)), rng.standard_normal((m, p))
    A[5] = A[9]
    C = A.T @ B / m
    reset_path_counts()
    U, s, V = top_singular(C, r, factors=(A, B, 1.0 / m))
    assert path_counts() == {"singular:thin": 1}
    _check_singular(C, r, U, s, V)


def test_thin_factors_with_wrong_shapes_are_refused():
    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((10, 30)), rng.standard_normal((10, 20))
    with pytest.raises(ValueError, match="factors"):
        top_singular(A.T @ A, 2, factors=(A, B, 0.1))


def test_gram_singular_path_when_factors_are_wide():
    """No factors (or m >= 3p/4): the certified subset eigh of C^T C answers."""
    rng = np.random.default_rng(3)
    p, r = 512, 16
    C = rng.standard_normal((p, p)) / np.sqrt(p)
    reset_path_counts()
    U, s, V = top_singular(C, r)
    assert path_counts() == {"singular:gram": 1}
    _check_singular(C, r, U, s, V, rtol=1e-8)


def test_subset_eigen_path_at_p512():
    rng = np.random.default_rng(4)
    p, r = 512, 16
    G = rng.standard_normal((p, p))
    S = (G + G.T) / 2  # no gap anywhere, a large negative end
    reset_path_counts()
    w, Q = top_eigen(S, r)
    assert path_counts() == {"eigen:subset": 1}
    wd, Qd = np.linalg.eigh(S)
    np.testing.assert_allclose(w, wd[::-1][:r], rtol=1e-10, atol=1e-10 * np.abs(wd).max())
    np.testing.assert_allclose(_projector(Q), _projector(Qd[:, ::-1][:, :r]), atol=1e-8)
    assert np.all(np.diff(w) <= 0)


@pytest.mark.parametrize("p,r", [(512, 16), (768, 16), (1024, 32)])
def test_krylov_eigen_converges_with_warm_start(p, r):
    rng = np.random.default_rng(p + r)
    S, top = _gapped_symmetric(rng, p, r)
    start = top + 1e-4 * rng.standard_normal(top.shape)  # e.g. the full-data subspace
    reset_path_counts()
    w, Q = top_eigen(S, r, method="krylov", start=start)
    assert path_counts() == {"eigen:krylov": 1}
    wd, Qd = np.linalg.eigh(S)
    np.testing.assert_allclose(w, wd[::-1][:r], rtol=1e-10)
    np.testing.assert_allclose(_projector(Q), _projector(Qd[:, ::-1][:, :r]), atol=1e-9)


def test_krylov_singular_converges_with_warm_start():
    rng = np.random.default_rng(7)
    p, r = 512, 16
    Uq, _ = np.linalg.qr(rng.standard_normal((p, p)))
    Vq, _ = np.linalg.qr(rng.standard_normal((p, p)))
    sv = np.concatenate([np.linspace(20.0, 10.0, r), rng.uniform(0.0, 1.0, p - r)])
    C = (Uq * sv) @ Vq.T
    start = Vq[:, :r] + 1e-3 * rng.standard_normal((p, r))
    reset_path_counts()
    U, s, V = top_singular(C, r, method="krylov", start=start)
    assert path_counts() == {"singular:krylov": 1}
    _check_singular(C, r, U, s, V)


def test_krylov_without_gap_falls_back_and_is_counted():
    """A spectrum without a gap at r: the certificate fails, the dense answer is returned."""
    rng = np.random.default_rng(8)
    p, r = 512, 16
    G = rng.standard_normal((p, p))
    S = (G + G.T) / 2
    reset_path_counts()
    w, Q = top_eigen(S, r, method="krylov")
    counts = path_counts()
    assert counts.get("eigen:krylov_failed") == 1 and "eigen:krylov" not in counts
    wd, Qd = np.linalg.eigh(S)
    np.testing.assert_allclose(w, wd[::-1][:r], rtol=1e-10, atol=1e-10 * np.abs(wd).max())


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="method"):
        top_eigen(np.eye(4), 1, method="magic")
    with pytest.raises(ValueError, match="method"):
        top_singular(np.eye(4), 1, method="magic")


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(2, 30),
    p=st.integers(8, 60),
    r=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
    repeat=st.booleans(),
)
def test_thin_singular_property(m, p, r, seed, repeat):
    """Whatever path answers, the triplets agree with the full SVD of C = A^T B / m."""
    rng = np.random.default_rng(seed)
    r = min(r, m - 1) if m > 1 else 1
    A, B = rng.standard_normal((m, p)), rng.standard_normal((m, p))
    if repeat and m > 2:
        A[1] = A[0]
    C = A.T @ B / m
    sd = np.linalg.svd(C, compute_uv=False)
    if r < len(sd) and sd[r - 1] - sd[r] < 1e-6 * sd[0]:
        return  # truncation not unique: nothing to compare
    U, s, V = top_singular(C, r, factors=(A, B, 1.0 / m))
    _check_singular(C, r, U, s, V, rtol=1e-8)


def test_krylov_probe_separates_gapped_from_gapless_spectra():
    """krylov_suits (CARS' choice for method="auto") accepts a moment with a clear gap at r
    and refuses one without, and refuses small operators at once."""
    from asymgeo.linalg.lowrank import krylov_suits

    rng = np.random.default_rng(9)
    p, r = 512, 16
    Qo, _ = np.linalg.qr(rng.standard_normal((p, p)))
    S = (Qo * np.concatenate([np.linspace(10.0, 5.0, r), rng.uniform(-0.05, 0.05, p - r)])) @ Qo.T
    K = rng.standard_normal((p, p))
    C_gap = S + (K - K.T) * 0.01  # sym(C_gap) == S: a clear gap at r
    assert krylov_suits(C_gap, r)
    G = rng.standard_normal((p, p))
    assert not krylov_suits(G / np.sqrt(p), r)  # no gap anywhere
    assert not krylov_suits(np.eye(64), 2)  # too small to be worth a probe


# --- mixed precision (float32 reduction, float64 refinement) and the pivoted thin basis ---

from asymgeo.linalg.lowrank import (  # noqa: E402
    _congruence,
    _thin_core,
    _Tridiagonal,
    mixed_top_eigen,
    top_sym_eigen,
)


def _flat_moment(rng: np.random.Generator, m: int, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Factors of a moment like a real half: correlated unit rows, no gap in the spectrum."""
    Z = rng.standard_normal((m, 24))
    X = Z @ rng.standard_normal((24, p)) + rng.standard_normal((m, p))
    D = Z @ rng.standard_normal((24, p)) + 2.0 * rng.standard_normal((m, p))
    return X / np.linalg.norm(X, axis=1, keepdims=True), D / np.linalg.norm(D, axis=1, keepdims=True)


@pytest.mark.parametrize("cython_api", [True, False])
def test_tridiagonal_reduction_is_an_orthogonal_similarity(cython_api, monkeypatch):
    """Q from the float32 reflectors (LAPACK sormtr, or compact WY blocks without SciPy's
    Cython API) is orthogonal to float32 precision and Q^T S Q is the tridiagonal (d, e)
    that LAPACK reported: checked by explicit products."""
    from asymgeo.linalg import lapack as _nogil

    if not cython_api:
        monkeypatch.setattr(_nogil, "available", lambda: False)
    rng = np.random.default_rng(20)
    p = 300
    G = rng.standard_normal((p, p))
    S = ((G + G.T) / 2).astype(np.float32)
    tri = _Tridiagonal(np.asfortranarray(S.copy()))
    assert bool(tri.blocks) is not cython_api  # which way Q is applied
    Q = tri.apply_q(np.eye(p, dtype=np.float32)).astype(np.float64)
    np.testing.assert_allclose(Q.T @ Q, np.eye(p), atol=2e-5)
    T = np.diag(tri.d) + np.diag(tri.e, 1) + np.diag(tri.e, -1)
    np.testing.assert_allclose(Q.T @ S.astype(np.float64) @ Q, T, atol=2e-4 * np.abs(S).max())
    # Q^T applied through the transposed blocks is the inverse
    Z = rng.standard_normal((p, 5)).astype(np.float32)
    np.testing.assert_allclose(tri.apply_q(tri.apply_q(Z), transpose=True), Z, atol=1e-4)
    # the top eigenvectors of T (bisection + inverse iteration) against numpy
    Y = tri.top_eigenvectors(7, 7)
    wt, Yt = np.linalg.eigh(T)
    np.testing.assert_allclose(_projector(Y), _projector(Yt[:, ::-1][:, :7]), atol=1e-8)


@pytest.mark.parametrize("m,p,r", [(150, 300, 8), (400, 768, 16), (700, 512, 32)])
def test_mixed_eigen_matches_lapack_without_a_gap(m, p, r):
    """Top-r eigenpairs of sym(c X^T D) from a float32 reduction refined in float64 equal
    the float64 LAPACK answer, on spectra without a gap (as real embedding moments)."""
    rng = np.random.default_rng(m + p + r)
    X, D = _flat_moment(rng, m, p)
    c = 1.0 / m
    reset_path_counts()
    w, Q = top_sym_eigen(X, D, c, r)
    assert path_counts() == {"eigen:mixed": 1}
    S = c * (X.T @ D)
    S = (S + S.T) / 2
    wd, Qd = np.linalg.eigh(S)
    np.testing.assert_allclose(w, wd[::-1][:r], rtol=1e-11, atol=1e-12 * np.abs(wd).max())
    # the truncation the selector uses, P = Q diag(w) Q^T
    ref = (Qd[:, ::-1][:, :r] * wd[::-1][:r]) @ Qd[:, ::-1][:, :r].T
    np.testing.assert_allclose((Q * w) @ Q.T, ref, atol=1e-9 * np.abs(wd).max())
    np.testing.assert_allclose(Q.T @ Q, np.eye(r), atol=1e-12)
    assert np.linalg.norm(S @ Q - Q * w, axis=0).max() <= 1e-10 * np.linalg.norm(S)


def test_mixed_eigen_refuses_a_bad_float32_copy_and_the_dense_path_answers():
    """A float32 'copy' of another matrix cannot be refined to a certificate: the solver
    says None and top_sym_eigen falls back to float64 LAPACK (counted as such)."""
    rng = np.random.default_rng(21)
    m, p, r = 200, 300, 8
    X, D = _flat_moment(rng, m, p)
    c = 1.0 / m
    S = c * (X.T @ D)
    S = (S + S.T) / 2
    G = rng.standard_normal((p, p))
    wrong = ((G + G.T) / 2).astype(np.float32)
    assert mixed_top_eigen(wrong, lambda W: S @ W, r, max_iter=1) is None
    reset_path_counts()
    w, _ = top_sym_eigen(X, D, c, r, S32=wrong)
    counts = path_counts()
    assert "eigen:mixed" not in counts and counts.get("eigen:subset") == 1
    np.testing.assert_allclose(w, np.linalg.eigvalsh(S)[::-1][:r], rtol=1e-10)


def test_a_cluster_across_the_truncation_edge_goes_to_float64():
    """Eigenvalues r and r+1 within 1e-6 of each other: float32 rounding mixes them, so the
    mixed solver declines at once (before refining) and float64 LAPACK answers."""
    rng = np.random.default_rng(24)
    p, r = 300, 10
    Q, _ = np.linalg.qr(rng.standard_normal((p, p)))
    w = np.concatenate([np.linspace(5.0, 2.0, r - 1), 1.0 + 1e-7 * np.arange(20)[::-1],
                        rng.uniform(-1.0, 0.5, p - r - 19)])
    S = (Q * w) @ Q.T
    assert mixed_top_eigen(S.astype(np.float32), lambda W: S @ W, r) is None
    from asymgeo.linalg.lowrank import mixed_probe

    reset_path_counts()
    assert mixed_probe(S, r) is None
    assert path_counts() == {}
    probe = mixed_probe(S, 5)  # well separated at r = 5: the probe answers (and is counted)
    assert path_counts() == {"eigen:mixed": 1}
    ws = np.sort(w)[::-1]
    np.testing.assert_allclose(probe.values, ws[:5], rtol=1e-12)
    # the Krylov gap ratio from the float32 tridiagonal form: (t_5 - t_17) / (t_17 - t_min)
    np.testing.assert_allclose(probe.krylov_gap, (ws[4] - ws[16]) / (ws[16] - ws[-1]), rtol=1e-5)
    reset_path_counts()
    wt, _ = top_eigen(S, r, mixed=True)
    assert path_counts() == {"eigen:subset": 1}
    np.testing.assert_allclose(wt, np.sort(w)[::-1][:r], rtol=1e-12)


def test_small_dimension_goes_dense():
    rng = np.random.default_rng(22)
    X, D = _flat_moment(rng, 40, 64)
    reset_path_counts()
    top_sym_eigen(X, D, 1 / 40, 4)
    assert path_counts() == {"eigen:subset": 1}


def test_mixed_eigen_on_a_real_half_moment(shared_dir, monkeypatch):
    """The MPNet SciFact training triples (p = 768): one half moment, mixed path, against
    float64 LAPACK on the same matrix; one refinement step reaches the certificate."""
    from asymgeo.data import load_triples

    steps = []
    solve = _Tridiagonal.solve_shifted
    monkeypatch.setattr(_Tridiagonal, "solve_shifted",
                        lambda self, R, shifts: steps.append(1) or solve(self, R, shifts))

    t = load_triples(shared_dir / "data" / "scifact", "all-mpnet-base-v2", "train",
                     cache_dir=shared_dir / "embeddings")
    X, Yp, Yn = (np.asarray(a, dtype=np.float64) for a in t.arrays())
    idx = np.random.default_rng(0).permutation(X.shape[0])[: X.shape[0] // 2]
    Xh, Dh = X[idx], (Yp - Yn)[idx]
    c, r = 1.0 / idx.size, 16
    reset_path_counts()
    w, Q = top_sym_eigen(Xh, Dh, c, r)
    assert path_counts() == {"eigen:mixed": 1}
    assert len(steps) == 1
    S = c * (Xh.T @ Dh)
    S = (S + S.T) / 2
    wd, Qd = np.linalg.eigh(S)
    ref = (Qd[:, ::-1][:, :r] * wd[::-1][:r]) @ Qd[:, ::-1][:, :r].T
    np.testing.assert_allclose((Q * w) @ Q.T, ref, atol=1e-9 * np.abs(wd).max())


def test_pivoted_thin_basis_handles_exact_duplicates():
    """Repeated rows make A A^T singular: pivoted Cholesky finds the rank, and the core
    answer (before any fallback) already equals the SVD of C."""
    rng = np.random.default_rng(23)
    m, p, r = 120, 400, 8
    A, B = rng.standard_normal((m, p)), rng.standard_normal((m, p))
    A[10:20] = A[0]  # ten copies of one query
    c = 1.0 / m
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.cholesky(A @ A.T)
    out = _thin_core(A, B, c, r, (A @ A.T, B @ B.T))
    assert out is not None
    U, s, V = out
    _check_singular(c * (A.T @ B), r, U, s, V)


@settings(max_examples=30, deadline=None)
@given(m=st.integers(2, 40), k_gap=st.integers(0, 10), seed=st.integers(0, 10**6))
def test_congruence_equals_the_plain_products(m, k_gap, seed):
    """c L^T H L with triangular BLAS on the leading block equals the general product."""
    rng = np.random.default_rng(seed)
    k = max(1, m - k_gap)
    L = np.tril(rng.standard_normal((m, k)))
    G = rng.standard_normal((m, m))
    H = G @ G.T
    np.testing.assert_allclose(_congruence(L, H, 0.3), 0.3 * L.T @ H @ L, rtol=1e-10,
                               atol=1e-12 * np.abs(H).max() * max(1.0, np.abs(L).max()) ** 2 * m)


@settings(max_examples=25, deadline=None)
@given(p=st.integers(260, 360), r=st.integers(1, 20), cluster=st.booleans(), seed=st.integers(0, 10**6))
def test_mixed_eigen_is_right_or_declines(p, r, cluster, seed):
    """With a tight cluster at the truncation edge the mixed solver either declines (None) or
    returns the float64 LAPACK answer; with a clear gap at r (a tenth of the spread) it must
    answer, and correctly."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((p, p)))
    w = np.sort(rng.standard_normal(p))[::-1]
    if cluster:
        w[max(r - 3, 0): r + 3] = w[r - 1] + 1e-9 * rng.standard_normal(len(w[max(r - 3, 0): r + 3]))
    else:
        w[:r] += 0.1 * (w[0] - w[-1])
    S = (Q * w) @ Q.T
    S = (S + S.T) / 2
    out = mixed_top_eigen(S.astype(np.float32), lambda W: S @ W, r)
    if out is None:
        assert cluster, "declined a spectrum with a clear gap at r"
        return
    wt, Qt = out
    wd, Qd = np.linalg.eigh(S)
    np.testing.assert_allclose(wt, wd[::-1][:r], atol=1e-9 * np.abs(wd).max())
    assert np.linalg.norm(S @ Qt - Qt * wt, axis=0).max() <= 1e-10 * np.linalg.norm(S)
    np.testing.assert_allclose(Qt.T @ Qt, np.eye(r), atol=1e-10)


def _ill_conditioned(seed, sr, tail, p=60, r=6):
    rng = np.random.default_rng(seed)
    U, _ = np.linalg.qr(rng.normal(size=(p, p)))
    V, _ = np.linalg.qr(rng.normal(size=(p, p)))
    s = np.r_[np.geomspace(1, sr, r), np.full(p - r, sr * tail)]
    return (U * s) @ V.T


@pytest.mark.parametrize("seed, sr, tail, path", [
    (0, 1e-7, 1e-3, "singular:full"),   # s_r <= 1e-6 s_1: the Gram path declines
    (0, 1.2e-6, 0.9, "singular:full"),  # the Gram answer fails its residual certificate
    (0, 1e-4, 1e-3, "singular:gram"),   # well conditioned: the Gram path answers
])
def test_gram_svd_declines_or_is_certified_on_ill_conditioned_moments(seed, sr, tail, path):
    """s_r / s_1 near 1e-6: squaring into C^T C loses the small triplets; the path counts show the
    fallback ran, and every answer equals LAPACK's full SVD truncation."""
    from asymgeo.linalg.lowrank import path_counts, reset_path_counts, top_singular

    C, r = _ill_conditioned(seed, sr, tail), 6
    reset_path_counts()
    U, s, V = top_singular(C, r)
    assert path_counts() == {path: 1}
    Ur, sr_, Vr = np.linalg.svd(C)
    np.testing.assert_allclose(s, sr_[:r], rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose((U * s) @ V.T, (Ur[:, :r] * sr_[:r]) @ Vr[:r], atol=1e-10)


# --- forced failures: every fallback answers, and the path counter shows which ran (issue #19) ---
import asymgeo.linalg.lowrank as lowrank  # noqa: E402


def _raise_linalg(*_a, **_k):
    raise np.linalg.LinAlgError("forced by the test")


def test_a_failed_pivoted_cholesky_leaves_the_householder_basis_to_answer(monkeypatch):
    rng = np.random.default_rng(30)
    m, p, r = 150, 512, 8
    A, B = rng.standard_normal((m, p)), rng.standard_normal((m, p))
    C = A.T @ B / m
    monkeypatch.setattr(lowrank.lapack, "dpstrf", _raise_linalg)
    assert lowrank._pivoted_basis(A @ A.T) is None
    reset_path_counts()
    U, s, V = top_singular(C, r, factors=(A, B, 1.0 / m))
    assert path_counts() == {"singular:thin": 1}
    assert path_counts(inputs=True).get("thin:householder_retry") == 1  # the fallback basis answered
    _check_singular(C, r, U, s, V)


def test_a_moment_of_lower_rank_than_r_goes_to_the_full_svd():
    # C = A^T (A P) / m with P a rank-4 projector: s_5.. are 0, below 1e-6 s_1, so the thin
    # core and its Householder retry both decline and the full SVD answers
    rng = np.random.default_rng(31)
    m, p, r = 100, 512, 8
    A = rng.standard_normal((m, p))
    Qp, _ = np.linalg.qr(rng.standard_normal((p, 4)))
    B = A @ (Qp @ Qp.T)
    C = A.T @ B / m
    reset_path_counts()
    U, s, V = top_singular(C, r, factors=(A, B, 1.0 / m))
    assert path_counts() == {"singular:full": 1}
    sd = np.linalg.svd(C, compute_uv=False)
    np.testing.assert_allclose(s, sd[:r], atol=1e-9 * sd[0])
    Ud, _, Vdt = np.linalg.svd(C)
    np.testing.assert_allclose((U[:, :4] * s[:4]) @ V[:, :4].T, (Ud[:, :4] * sd[:4]) @ Vdt[:4], atol=1e-9 * sd[0])


def test_a_zero_moment_gives_zero_singular_values():
    A = np.zeros((20, 300))
    reset_path_counts()
    U, s, V = top_singular(A.T @ A, 3, factors=(A, A, 1.0))
    assert path_counts() == {"singular:full": 1}
    assert np.all(s == 0) and U.shape == (300, 3) and V.shape == (300, 3)


def test_factors_without_a_matrix():
    rng = np.random.default_rng(32)
    with pytest.raises(ValueError, match=r"top_singular: C=None needs factors=\(A, B, c\)"):
        top_singular(None, 2)
    # many rows (m >= 3p/4): C is formed from the factors and the Gram path answers
    A, B = rng.standard_normal((400, 64)), rng.standard_normal((400, 64))
    reset_path_counts()
    U, s, V = top_singular(None, 4, factors=(A, B, 0.5))
    assert path_counts() == {"singular:gram": 1}
    _check_singular(0.5 * A.T @ B, 4, U, s, V, rtol=1e-8)


def test_a_subset_eigen_answer_that_fails_its_certificate_is_replaced_by_the_full_eigh(monkeypatch):
    rng = np.random.default_rng(33)
    p, r = 300, 6
    S, _ = _gapped_symmetric(rng, p, r)
    real = lowrank._top_eigh

    def spoiled(M, k):
        w, Q, path = real(M, k)
        return w, Q + 1e-3 * rng.standard_normal(Q.shape), path  # a wrong subset answer

    monkeypatch.setattr(lowrank, "_top_eigh", spoiled)
    reset_path_counts()
    w, Q = top_eigen(S, r)
    assert path_counts() == {"eigen:full": 1}
    wd, Qd = np.linalg.eigh(S)
    np.testing.assert_allclose(w, wd[::-1][:r], rtol=1e-12)
    np.testing.assert_allclose(_projector(Q), _projector(Qd[:, ::-1][:, :r]), atol=1e-10)


def test_krylov_eigen_of_the_zero_matrix():
    w, Q = top_eigen(np.zeros((120, 120)), 4, method="krylov", rng=np.random.default_rng(0))
    assert np.all(w == 0) and Q.shape == (120, 4)
    np.testing.assert_allclose(Q.T @ Q, np.eye(4), atol=1e-12)


def test_mixed_eigen_declines_and_the_dense_path_answers(monkeypatch):
    rng = np.random.default_rng(34)
    m, p, r = 200, 300, 8
    X, D = _flat_moment(rng, m, p)
    S = (X.T @ D + D.T @ X) / (2 * m)
    S32 = np.asfortranarray(S, dtype=np.float32)
    want = np.linalg.eigvalsh(S)[::-1][:r]
    # too few dimensions for the extra block, or no rank at all
    assert mixed_top_eigen(S32[:20, :20].copy(order="F"), lambda W: S[:20, :20] @ W, 15) is None
    assert mixed_top_eigen(S32, lambda W: S @ W, 0) is None
    # a non-finite product, a singular shifted solve, a failed tridiagonal reduction
    assert mixed_top_eigen(S32, lambda W: W * np.nan, r) is None
    monkeypatch.setattr(lowrank._Tridiagonal, "solve_shifted", lambda self, R, shifts: None)
    assert mixed_top_eigen(S32, lambda W: S @ W, r, tol=0.0) is None
    monkeypatch.undo()
    monkeypatch.setattr(lowrank, "_Tridiagonal", _raise_linalg)
    assert mixed_top_eigen(S32, lambda W: S @ W, r) is None
    reset_path_counts()
    w, _ = top_sym_eigen(X, D, 1.0 / m, r)
    assert "eigen:mixed" not in path_counts()
    np.testing.assert_allclose(w, want, rtol=1e-10)


def test_bisection_failures_in_the_mixed_probe(monkeypatch):
    rng = np.random.default_rng(35)
    m, p, r = 200, 300, 8
    X, D = _flat_moment(rng, m, p)
    C = X.T @ D / m
    want = np.linalg.eigvalsh((C + C.T) / 2)[::-1][:r]
    real = lowrank.lapack.dstebz_index
    calls = []

    def first_only(*a, **k):  # the eigenvectors' bisection works, the probe's gap bisection fails
        calls.append(1)
        if len(calls) > 1:
            raise np.linalg.LinAlgError("forced")
        return real(*a, **k)

    monkeypatch.setattr(lowrank.lapack, "dstebz_index", first_only)
    probe = lowrank.mixed_probe(C, r)
    assert probe is not None and probe.krylov_gap == np.inf
    np.testing.assert_allclose(probe.values, want, rtol=1e-10)
    monkeypatch.setattr(lowrank.lapack, "dstebz_index", _raise_linalg)  # every bisection fails
    assert lowrank.mixed_probe(C, r) is None


def test_distinct_rows_by_hand():
    A = np.array([[1.0, 2.0], [1.0, 2.0], [0.0, 1.0]])
    assert lowrank._distinct_rows(A) == 2 and lowrank._distinct_rows(A[:1]) == 1


# --------------------------------------------------------------------------- mixed-precision SVD (issue #22)
@pytest.mark.parametrize("m,p,r", [(700, 512, 16), (1200, 768, 16), (900, 512, 24)])
def test_mixed_singular_matches_the_full_svd_on_formed_moments(m, p, r):
    """Top-r SVD of a formed moment C = X^T D / m with more rows than p (CARS' large halves):
    the float32 reduction of C^T C refined in float64 equals numpy's full SVD (values to
    1e-11, the rank-r truncation to 1e-9 of s_1) on spectra without a gap, and the mixed
    path demonstrably answered."""
    from asymgeo.linalg.lowrank import mixed_top_singular

    rng = np.random.default_rng(m + p + r)
    X, D = _flat_moment(rng, m, p)
    C = X.T @ D / m
    reset_path_counts()
    U, s, V = top_singular(C, r, mixed=True)
    assert path_counts() == {"singular:mixed": 1}
    _check_singular(C, r, U, s, V)
    sd = np.linalg.svd(C, compute_uv=False)
    np.testing.assert_allclose(s, sd[:r], rtol=1e-11)
    assert np.linalg.norm(C.T @ U - V * s, axis=0).max() <= 1e-10 * sd[0]
    direct = mixed_top_singular(C.astype(np.float32), C, r)
    assert direct is not None
    np.testing.assert_allclose(direct[1], s, rtol=1e-13)


def test_mixed_singular_only_at_p512_and_only_on_request():
    """Below 512 dimensions (where it is no faster) and without ``mixed=True`` the float64
    subset eigh of C^T C answers, to the same truncation."""
    rng = np.random.default_rng(40)
    for p, mixed, path in [(384, True, "singular:gram"), (512, False, "singular:gram"), (512, True, "singular:mixed")]:
        X, D = _flat_moment(rng, 600, p)
        C = X.T @ D / 600
        reset_path_counts()
        U, s, V = top_singular(C, 8, mixed=mixed)
        assert path_counts() == {path: 1}, (p, mixed)
        _check_singular(C, 8, U, s, V)


def test_mixed_singular_refuses_a_wrong_float32_copy_and_float64_answers():
    """A float32 'copy' of another matrix cannot be refined to the certificate: None, and
    top_singular then takes the float64 path (counted), with the right answer."""
    import asymgeo.linalg.lowrank as lowrank_module
    from asymgeo.linalg.lowrank import mixed_top_singular

    rng = np.random.default_rng(41)
    X, D = _flat_moment(rng, 700, 512)
    C = X.T @ D / 700
    X2, D2 = _flat_moment(rng, 700, 512)
    wrong = (X2.T @ D2 / 700).astype(np.float32)
    assert mixed_top_singular(wrong, C, 8) is None
    assert mixed_top_singular(C[:, :500].astype(np.float32), C, 8) is None  # shapes differ
    reset_path_counts()
    real = lowrank_module.mixed_top_singular
    try:
        lowrank_module.mixed_top_singular = lambda C32, C_, r, tol=1e-10: real(wrong, C_, r, tol=tol)
        U, s, V = top_singular(C, 8, mixed=True)
    finally:
        lowrank_module.mixed_top_singular = real
    assert path_counts() == {"singular:gram": 1}
    _check_singular(C, 8, U, s, V)


def test_mixed_eigen_per_pair_bounds_decide_when_refinement_stops(monkeypatch):
    """``allowed`` replaces the bound tol * scale: infinite bounds accept the first
    Rayleigh-Ritz answer (no refinement step), zero bounds are never met (None)."""
    steps = []
    solve = _Tridiagonal.solve_shifted
    monkeypatch.setattr(_Tridiagonal, "solve_shifted",
                        lambda self, R, shifts: steps.append(1) or solve(self, R, shifts))
    rng = np.random.default_rng(43)
    X, D = _flat_moment(rng, 300, 384)
    S = X.T @ D / 300
    S = (S + S.T) / 2
    S32 = S.astype(np.float32)
    assert mixed_top_eigen(S32, lambda W: S @ W, 8, allowed=lambda th: np.full_like(th, np.inf)) is not None
    assert steps == []
    assert mixed_top_eigen(S32, lambda W: S @ W, 8, max_iter=2, allowed=lambda th: np.zeros_like(th)) is None
    assert len(steps) == 2


def test_mixed_singular_bounds_the_triplet_certificate(monkeypatch):
    """The bound handed to the eigensolver of G = C^T C is tol * s * s_1 / 4 per pair
    (s = sqrt(theta)): ||C^T u - s v|| = ||G v - theta v|| / s then stays below tol * s_1
    with a margin of four (checked on the callable itself, by hand)."""
    import asymgeo.linalg.lowrank as lowrank_module
    from asymgeo.linalg.lowrank import mixed_top_singular

    seen = {}
    real = lowrank_module.mixed_top_eigen

    def spy(*args, allowed=None, **kwargs):
        seen["allowed"] = allowed
        return real(*args, allowed=allowed, **kwargs)

    monkeypatch.setattr(lowrank_module, "mixed_top_eigen", spy)
    rng = np.random.default_rng(44)
    X, D = _flat_moment(rng, 700, 512)
    C = X.T @ D / 700
    assert mixed_top_singular(C.astype(np.float32), C, 8, tol=1e-10) is not None
    np.testing.assert_allclose(seen["allowed"](np.array([16.0, 4.0, 1.0])),
                               0.25 * 1e-10 * np.array([4.0, 2.0, 1.0]) * 4.0, rtol=1e-15)


def test_mixed_singular_declines_a_moment_of_lower_rank_than_r():
    """A formed moment of rank 4 asked for r = 8 (s_5.. are 0): the mixed route declines
    (s_r below 1e-6 s_1), so does the Gram route, and the full SVD answers."""
    from asymgeo.linalg.lowrank import mixed_top_singular

    rng = np.random.default_rng(45)
    m, p, r = 700, 512, 8
    A = rng.standard_normal((m, p))
    Qp, _ = np.linalg.qr(rng.standard_normal((p, 4)))
    C = A.T @ (A @ (Qp @ Qp.T)) / m
    assert mixed_top_singular(C.astype(np.float32), C, r) is None
    reset_path_counts()
    U, s, V = top_singular(C, r, mixed=True)
    assert path_counts() == {"singular:full": 1}
    sd = np.linalg.svd(C, compute_uv=False)
    np.testing.assert_allclose(s, sd[:r], atol=1e-9 * sd[0])


@pytest.mark.parametrize("damage", ["rotated", "ritz_of_a_wrong_subspace", "zero_value", "not_orthonormal"])
def test_mixed_singular_checks_the_triplets_it_returns(monkeypatch, damage):
    """The triplet certificate is checked on what the eigensolver returned: Ritz vectors off
    by 1e-6, Ritz pairs of a subspace off by 1e-6 (so that U = C V / s is exactly orthonormal
    and only the residual ||C^T u - s v|| shows the damage), a zero singular value, or
    non-orthonormal vectors are refused (None)."""
    import asymgeo.linalg.lowrank as lowrank_module
    from asymgeo.linalg.lowrank import mixed_top_singular

    rng = np.random.default_rng(46)
    X, D = _flat_moment(rng, 700, 512)
    C = X.T @ D / 700
    real = lowrank_module.mixed_top_eigen

    def damaged(*args, **kwargs):
        theta, V = real(*args, **kwargs)
        if damage == "rotated":
            V, _ = np.linalg.qr(V + 1e-6 * rng.standard_normal(V.shape))
        elif damage == "ritz_of_a_wrong_subspace":
            W, _ = np.linalg.qr(V + 1e-6 * rng.standard_normal(V.shape))
            theta, Z = np.linalg.eigh(W.T @ (C.T @ (C @ W)))
            theta, V = theta[::-1], (W @ Z)[:, ::-1]
        elif damage == "zero_value":
            theta = theta.copy()
            theta[-1] = 0.0
        else:  # an exact eigenpair twice: every residual is zero, only orthonormality fails
            V, theta = V.copy(), theta.copy()
            V[:, 1], theta[1] = V[:, 0], theta[0]
        return theta, V

    assert mixed_top_singular(C.astype(np.float32), C, 8) is not None
    monkeypatch.setattr(lowrank_module, "mixed_top_eigen", damaged)
    assert mixed_top_singular(C.astype(np.float32), C, 8) is None
