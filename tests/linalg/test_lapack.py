"""The GIL-free LAPACK/BLAS calls of :mod:`asymgeo.linalg.lapack` against SciPy's f2py wrappers
and numpy, on both of its paths (SciPy's Cython API through ctypes, and the fallback)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import blas, lapack

from asymgeo.linalg import lapack as _nogil


@pytest.fixture(params=["cython", "f2py"])
def path(request, monkeypatch):
    if request.param == "f2py":
        monkeypatch.setattr(_nogil, "available", lambda: False)
    else:
        assert _nogil.available(), "SciPy's Cython LAPACK API should be readable here"
    return request.param


def _sym(rng, n):
    G = rng.standard_normal((n, n))
    return (G + G.T) / 2


def test_ssytrd_matches_f2py(path):
    rng = np.random.default_rng(0)
    S = np.asfortranarray(_sym(rng, 120).astype(np.float32))
    a, d, e, tau = _nogil.ssytrd(S.copy(order="F"))
    c2, d2, e2, tau2, info = lapack.ssytrd(S, lower=1, lwork=int(lapack.ssytrd_lwork(120, lower=1)[0]))
    assert info == 0
    np.testing.assert_array_equal(d, d2)
    np.testing.assert_array_equal(e, e2)
    np.testing.assert_array_equal(tau, tau2)
    np.testing.assert_array_equal(np.tril(a, -1), np.tril(c2, -1))


def test_ssytrd_refuses_c_order():
    with pytest.raises(ValueError, match="Fortran"):
        _nogil.ssytrd(np.zeros((4, 4), np.float32, order="C") + np.eye(4, dtype=np.float32)[::-1])


def test_sormtr_applies_the_reflectors():
    """Q from sormtr applied to the identity reduces S to the tridiagonal (d, e)."""
    rng = np.random.default_rng(1)
    n = 90
    S = _sym(rng, n).astype(np.float32)
    a, d, e, tau = _nogil.ssytrd(np.asfortranarray(S.copy()))
    Q = _nogil.sormtr(a, tau, np.eye(n, dtype=np.float32)).astype(np.float64)
    T = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    np.testing.assert_allclose(Q.T @ S.astype(np.float64) @ Q, T, atol=5e-5 * np.abs(S).max())
    Qt = _nogil.sormtr(a, tau, np.eye(n, dtype=np.float32), transpose=True)
    np.testing.assert_allclose(Qt, Q.T, atol=1e-6)


def test_ssyr2k_lower(path):
    rng = np.random.default_rng(2)
    A, B = (rng.standard_normal((30, 50)).astype(np.float32) for _ in range(2))
    C = _nogil.ssyr2k_lower(0.25, A, B)
    ref = 0.25 * (A.T.astype(np.float64) @ B + B.T.astype(np.float64) @ A)
    np.testing.assert_allclose(np.tril(C), np.tril(ref), atol=1e-4)
    assert C.flags.f_contiguous and C.dtype == np.float32


def test_dsyevr_top(path):
    rng = np.random.default_rng(3)
    S = _sym(rng, 80)
    w, Z = _nogil.dsyevr_top(S, 6)
    wd, Zd = np.linalg.eigh(S)
    np.testing.assert_allclose(w, wd[-6:], rtol=1e-12)
    np.testing.assert_allclose(Z @ Z.T, Zd[:, -6:] @ Zd[:, -6:].T, atol=1e-10)


def test_dpstrf_finds_the_rank(path):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((40, 15))
    G = X @ X.T  # rank 15
    c, piv, rank = _nogil.dpstrf(G)
    assert rank == 15
    L = np.tril(c[:, :rank])
    P = piv - 1
    np.testing.assert_allclose(G[np.ix_(P, P)], L @ L.T, atol=1e-10)


@pytest.mark.parametrize("right,transpose", [(True, False), (False, True), (False, False), (True, True)])
def test_dtrmm(path, right, transpose):
    rng = np.random.default_rng(5)
    L = np.tril(rng.standard_normal((12, 12)))
    B = rng.standard_normal((7, 12)) if right else rng.standard_normal((12, 7))
    op = L.T if transpose else L
    ref = 1.5 * (B @ op if right else op @ B)
    np.testing.assert_allclose(_nogil.dtrmm(1.5, L, B, right=right, transpose=transpose), ref, atol=1e-12)


def test_dstebz_and_dstein(path):
    rng = np.random.default_rng(6)
    d, e = rng.standard_normal(60), rng.standard_normal(59)
    T = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    w, block, split = _nogil.dstebz_index(d, e, 55, 60, 0.0)
    wd, Zd = np.linalg.eigh(T)
    np.testing.assert_allclose(w, wd[-6:], rtol=1e-12, atol=1e-12)
    Z = _nogil.dstein(d, e, w, block, split)
    np.testing.assert_allclose(T @ Z, Z * w, atol=1e-10)
    np.testing.assert_allclose(Z.T @ Z, np.eye(6), atol=1e-10)


def test_lapack_errors_are_raised_as_linalgerror(path):
    """An argument LAPACK rejects (eigenvalue index 0) is a LinAlgError naming the routine."""
    with pytest.raises(np.linalg.LinAlgError, match="dstebz"):
        _nogil.dstebz_index(np.zeros(3), np.zeros(2), 0, 2, 0.0)


def test_the_cython_path_does_not_touch_the_f2py_wrappers(monkeypatch):
    """With SciPy's Cython API readable, no call goes through scipy.linalg.lapack/blas (whose
    wrappers do not run two calls at once; the speed-up over threads is measured in
    benchmarks/bench_cars.py)."""
    assert _nogil.available()

    def refuse(*args, **kwargs):
        raise AssertionError("the f2py wrapper was called")

    for name in ("ssytrd", "ssytrd_lwork", "dpstrf", "dstebz", "dstein"):
        monkeypatch.setattr(lapack, name, refuse)
    for name in ("ssyr2k", "dtrmm"):
        monkeypatch.setattr(blas, name, refuse)
    rng = np.random.default_rng(8)
    S = np.asfortranarray(_sym(rng, 50).astype(np.float32))
    a, d, e, tau = _nogil.ssytrd(S)
    _nogil.sormtr(a, tau, np.eye(50, dtype=np.float32))
    _nogil.ssyr2k_lower(1.0, S, S)
    w, block, split = _nogil.dstebz_index(d.astype(float), e.astype(float), 48, 50, 0.0)
    _nogil.dstein(d.astype(float), e.astype(float), w, block, split)
    _nogil.dpstrf(np.eye(5))
    _nogil.dtrmm(1.0, np.eye(3), np.ones((3, 3)), right=True, transpose=False)
