"""Solver choice for CARS' half moments (:mod:`asymgeo.linalg.solver_choice`).

:class:`HalfMomentSolver` is built once from the full-data moment and answers the top-r
spectra of each half; the path counters prove which path it chose (formed moment vs thin
factors, mixed precision vs float64 LAPACK, Krylov vs dense), and every answer is checked
against ``numpy.linalg.svd`` / ``eigh`` of the explicitly formed half moment.
"""

from __future__ import annotations

import numpy as np
import pytest

from asymgeo._runtime import limit_blas_threads
from asymgeo.linalg import lowrank
from asymgeo.linalg import solver_choice as sc
from asymgeo.linalg.lowrank import path_counts, reset_path_counts
from asymgeo.linalg.solver_choice import HalfMomentSolver, TopSpectra, check_solver, choose_solver, top_spectra


@pytest.fixture(autouse=True)
def _single_threaded_blas():
    """As inside ``cars_score``: the solvers alternate numpy's and SciPy's OpenBLAS, and two
    multithreaded pools taking turns spin against each other on a loaded machine."""
    with limit_blas_threads(1):
        yield


def _spiked_triples(rng: np.random.Generator, n: int, p: int, k: int = 6, noise: float = 0.3):
    """(X, D) whose moment has k leading directions far above the rest (a clear gap at r = k)."""
    U = np.linalg.qr(rng.standard_normal((p, k)))[0]
    B = U @ np.diag(np.linspace(60.0, 40.0, k)) @ U.T
    X = rng.standard_normal((n, p))
    D = X @ B + noise * rng.standard_normal((n, p))
    return X, D


def _flat_triples(rng: np.random.Generator, n: int, p: int):
    """(X, D) with a non-symmetric moment and no clear gap (like real embeddings)."""
    X = rng.standard_normal((n, p))
    A = np.eye(p) + 0.3 * rng.standard_normal((p, p)) / np.sqrt(p)
    return X, X @ A + 0.5 * rng.standard_normal((n, p))


def _check_against_dense(C: np.ndarray, spectra: TopSpectra, r: int, rtol: float = 1e-10) -> None:
    """The spectra equal a dense numpy SVD / eigh of C (values, and the rank-r truncations)."""
    Ud, sd, Vdt = np.linalg.svd(C)
    np.testing.assert_allclose(spectra.singular_values, sd[:r], rtol=rtol, atol=rtol * sd[0])
    np.testing.assert_allclose((spectra.left * spectra.singular_values) @ spectra.right.T,
                               (Ud[:, :r] * sd[:r]) @ Vdt[:r], atol=rtol * sd[0])
    w, Q = np.linalg.eigh((C + C.T) / 2.0)
    w, Q = w[::-1][:r], Q[:, ::-1][:, :r]
    scale = np.abs(w).max()
    np.testing.assert_allclose(spectra.eigenvalues, w, rtol=rtol, atol=rtol * scale)
    np.testing.assert_allclose((spectra.eigenvectors * spectra.eigenvalues) @ spectra.eigenvectors.T,
                               (Q * w) @ Q.T, atol=rtol * scale)


def _halves(n: int, seed: int, cover: bool = True) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(seed).permutation(n)
    m = n // 2
    if cover:
        return np.sort(perm[:m]), np.sort(perm[m:])
    return np.sort(perm[: m - 2]), np.sort(perm[m:-1])


def _moment(X: np.ndarray, D: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return X[idx].T @ D[idx] / idx.size


@pytest.mark.parametrize("cover", [True, False])
def test_halves_of_more_than_3p_4_triples_take_the_formed_moment_and_the_mixed_svd(cover):
    """p = 512, halves of 500 triples (> 3p/4 = 384): each half moment is formed in float64
    (the second by complement when the halves cover the data), its SVD by the mixed-precision
    Gram route and its symmetric part by the mixed eigensolver; no Gram blocks, no thin factors."""
    rng = np.random.default_rng(0)
    n, p, r = 1000, 512, 8
    X, D = _flat_triples(rng, n, p)
    C_all = X.T @ D / n
    reset_path_counts()
    solver = HalfMomentSolver(X, D, C_all, r, "auto")
    assert solver.method == "dense"
    assert path_counts() == {"eigen:mixed": 1, "singular:gram": 1}  # the probe, and the full moment
    _check_against_dense(C_all, solver.full, r)
    I1, I2 = _halves(n, 1, cover)
    reset_path_counts()
    s1, s2 = solver.half_spectra(I1, I2)
    assert path_counts() == {"singular:mixed": 2, "eigen:mixed": 2}
    half = "half:moment_by_complement" if cover else "half:moment_formed"
    assert path_counts(inputs=True) == {half: 1}
    _check_against_dense(_moment(X, D, I1), s1, r)
    _check_against_dense(_moment(X, D, I2), s2, r)


@pytest.mark.parametrize("cover", [True, False])
def test_halves_of_fewer_than_3p_4_triples_take_the_thin_factors(cover):
    """p = 512, halves of 150 triples (< 3p/4): the thin-factor SVD on Gram sub-blocks of the
    full-data Gram matrices, the mixed eigensolver on a float32 symmetric part handed to it;
    the float64 half moment is never formed."""
    rng = np.random.default_rng(2)
    n, p, r = 300, 512, 8
    X, D = _flat_triples(rng, n, p)
    C_all = X.T @ D / n
    solver = HalfMomentSolver(X, D, C_all, r, "dense")
    _check_against_dense(C_all, solver.full, r)
    I1, I2 = _halves(n, 3, cover)
    reset_path_counts()
    s1, s2 = solver.half_spectra(I1, I2)
    assert path_counts() == {"singular:thin": 2, "eigen:mixed": 2}
    half = "half:float32_by_complement" if cover else "half:float32_formed"
    assert path_counts(inputs=True) == {"thin:grams_given": 2, "mixed:float32_given": 2, half: 1}
    _check_against_dense(_moment(X, D, I1), s1, r)
    _check_against_dense(_moment(X, D, I2), s2, r)


def test_a_declined_probe_sends_every_half_to_float64_lapack(monkeypatch):
    rng = np.random.default_rng(4)
    n, p, r = 300, 256, 4
    X, D = _flat_triples(rng, n, p)
    C_all = X.T @ D / n
    monkeypatch.setattr(sc, "mixed_probe", lambda C, rank: None)
    solver = HalfMomentSolver(X, D, C_all, r, "dense")
    I1, I2 = _halves(n, 5)
    reset_path_counts()
    s1, s2 = solver.half_spectra(I1, I2)
    assert path_counts() == {"singular:thin": 2, "eigen:subset": 2}
    assert path_counts(inputs=True) == {"thin:grams_given": 2, "half:moment_by_complement": 1}  # the halves cover the data
    _check_against_dense(_moment(X, D, I1), s1, r)
    _check_against_dense(_moment(X, D, I2), s2, r)


def test_small_operators_take_float64_lapack_without_a_probe():
    rng = np.random.default_rng(6)
    n, p, r = 80, 24, 3
    X, D = _flat_triples(rng, n, p)
    C_all = X.T @ D / n
    reset_path_counts()
    solver = HalfMomentSolver(X, D, C_all, r, "auto")
    assert solver.method == "dense" and "eigen:mixed" not in path_counts()
    I1, I2 = _halves(n, 7)
    reset_path_counts()
    s1, s2 = solver.half_spectra(I1, I2)
    assert path_counts() == {"singular:gram": 2, "eigen:subset": 2}
    _check_against_dense(_moment(X, D, I1), s1, r)
    _check_against_dense(_moment(X, D, I2), s2, r)


def test_a_clear_gap_chooses_warm_started_krylov():
    rng = np.random.default_rng(8)
    n, p, r = 1200, 512, 6
    X, D = _spiked_triples(rng, n, p, k=r)
    C_all = X.T @ D / n
    solver = HalfMomentSolver(X, D, C_all, r, "auto")
    assert solver.method == "krylov"
    _check_against_dense(C_all, solver.full, r)
    V_all, Q_all = solver._starts
    assert V_all is not None and V_all.shape == (p, 2 * r)
    assert Q_all is not None and Q_all.shape == (p, 2 * r)
    I1, I2 = _halves(n, 9)
    reset_path_counts()
    s1, s2 = solver.half_spectra(I1, I2)
    counts = path_counts()
    assert counts.get("eigen:krylov") == 2 and counts.get("singular:krylov") == 2, counts
    _check_against_dense(_moment(X, D, I1), s1, r)
    _check_against_dense(_moment(X, D, I2), s2, r)


def test_choose_solver():
    rng = np.random.default_rng(10)
    X, D = _spiked_triples(rng, 1200, 512, k=6)
    C = X.T @ D / 1200
    assert choose_solver(C, 6, "dense") == "dense" and choose_solver(C, 6, "krylov") == "krylov"
    assert choose_solver(C, 6, "auto") == "krylov"
    flat = lowrank.MixedProbe(np.zeros(6), np.zeros((512, 6)), krylov_gap=lowrank.KRYLOV_MIN_GAP / 2)
    reset_path_counts()
    assert choose_solver(C, 6, "auto", flat) == "dense"  # a flat probe skips the Krylov attempt
    assert path_counts() == {}
    Xf, Df = _flat_triples(rng, 600, 512)
    assert choose_solver(Xf.T @ Df / 600, 8, "auto") == "dense"
    assert choose_solver(C[:64, :64], 2, "auto") == "dense"  # p < 512: no Krylov probe


def test_krylov_starts_only_for_krylov():
    rng = np.random.default_rng(11)
    C = rng.standard_normal((100, 100))
    Q = np.linalg.qr(rng.standard_normal((100, 4)))[0]
    assert sc.krylov_starts(C, Q, 4, "dense") == (None, None)
    assert sc.krylov_starts(C[:40, :40], Q[:40], 4, "krylov") == (None, None)  # 4 * 8 + 16 > 40
    V_all, Q_all = sc.krylov_starts(C, Q, 4, "krylov")
    assert V_all is not None and V_all.shape == (100, 8)
    assert Q_all is not None and Q_all.shape == (100, 8)
    np.testing.assert_array_equal(Q_all[:, :4], Q)


@pytest.mark.parametrize("method", ["auto", "dense", "krylov"])
@pytest.mark.parametrize("mixed", [False, True])
def test_top_spectra_of_a_formed_moment(method, mixed):
    rng = np.random.default_rng(12)
    X, D = _flat_triples(rng, 400, 300)
    C = X.T @ D / 400
    _check_against_dense(C, top_spectra(C, 5, method=method, mixed=mixed), 5)
    # known eigenpairs are passed through, not recomputed
    known = (np.arange(5.0), np.eye(300)[:, :5])
    got = top_spectra(C, 5, method=method, eigen=known)
    assert got.eigenvalues is known[0] and got.eigenvectors is known[1]


def test_check_solver():
    assert [check_solver(s) for s in sc.SOLVERS] == list(sc.SOLVERS)
    with pytest.raises(ValueError, match="solver: expected 'auto', 'dense' or 'krylov', got 'lanczos'"):
        check_solver("lanczos")


def test_gram_helper_equals_the_plain_product():
    A = np.random.default_rng(13).standard_normal((9, 6))
    np.testing.assert_allclose(sc._gram(A), A @ A.T, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("cover", [True, False])
def test_the_second_float32_symmetric_part_comes_by_complement_when_the_halves_cover(cover, monkeypatch):
    """``n S = m1 S1 + m2 S2``: one ``ssyr2k`` per split when the halves cover the triples, and the
    complement equals the direct float32 symmetric part to float32 rounding."""
    rng = np.random.default_rng(14)
    n, p = 101, 256
    X, D = _flat_triples(rng, n, p)
    C_all = X.T @ D / n
    low = sc._Float32Triples.build(X, D, C_all)
    I1, I2 = _halves(n, 15, cover)
    calls = []
    direct = sc._Float32Triples.symmetric_part
    monkeypatch.setattr(sc._Float32Triples, "symmetric_part", lambda self, idx: calls.append(idx.size) or direct(self, idx))
    S1, S2 = low.half_symmetric_parts(I1, I2, n)
    assert calls == ([I1.size] if cover else [I1.size, I2.size])
    want = np.tril((_moment(X, D, I2) + _moment(X, D, I2).T) / 2.0)
    np.testing.assert_allclose(np.tril(S2), want, atol=1e-4 * np.abs(want).max())
    assert S1.dtype == S2.dtype == np.float32


def test_single_threaded_blas_also_limits_scipys_blas_when_loaded_late():
    """A fresh interpreter: SciPy's OpenBLAS is loaded on entry, so the one-thread limit reaches it
    (a library first loaded inside the block would run its default threads, and CARS' first call
    would round differently from the next ones)."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys\nfrom threadpoolctl import threadpool_info\n"
            "from asymgeo.linalg.solver_choice import single_threaded_blas\n"
            "with single_threaded_blas():\n"
            "    assert 'scipy.linalg' in sys.modules\n"
            "    blas = [i for i in threadpool_info() if i['user_api'] == 'blas']\n"
            "    assert blas and all(i['num_threads'] == 1 for i in blas), blas\n")
    src = Path(__file__).resolve().parents[2] / "src"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "2"})
    assert out.returncode == 0, out.stderr
