"""Top-r spectral solvers of :mod:`asymgeo._lowrank` against dense LAPACK decompositions.

Each fast path (thin factors, subset syevr, certified block Krylov with warm starts) is
run on a case where it must answer, checked against ``numpy.linalg.svd`` / ``eigh`` of the
same matrix, and the path counters prove that the fast path (not a fallback) answered.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asymgeo._lowrank import path_counts, reset_path_counts, top_eigen, top_singular


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
    from asymgeo._lowrank import krylov_suits

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
