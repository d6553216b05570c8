"""Solver choice for many truncations of one set of triples: which path answers, decided once.

CARS (:func:`asymgeo.kernels.selection.cars_score`) truncates the full-data moment
``C = X^T D / n`` and, for every half-split ``(I1, I2)``, the two half moments
``C_I = X_I^T D_I / |I|``: it needs the top-r singular triplets of each moment and the
top-r algebraic eigenpairs of its symmetric part.  The kernel says *what* it needs (the
:class:`TopSpectra` of each moment); this module decides *how*, once per call, from the
full-data moment (:class:`HalfMomentSolver`):

``solver``
    ``"krylov"`` when the certified block-Krylov solver answers for the full-data moment
    (a clear spectral gap at ``rank``; then, warm-started from the full-data subspaces,
    it beats LAPACK on every half), else ``"dense"`` (:func:`choose_solver`).
mixed precision
    At ``p >= 256`` the mixed-precision eigensolver on the full-data moment
    (:func:`asymgeo.linalg.lowrank.mixed_probe`) is both its answer and the probe for the
    halves: when it certifies, every half's symmetric part goes to the mixed solver with a
    float32 copy formed by BLAS ``ssyr2k`` (or by complement, ``n S = m1 S1 + m2 S2``), and
    halves whose moment is formed take the mixed SVD at ``p >= 512``; when it declines (a
    cluster across the truncation edge) every half goes to float64 LAPACK at once.  Its
    tridiagonal form also tells whether the Krylov probe is worth running.
thin factors or a formed moment
    Halves of fewer than ``3p/4`` triples take the thin-factor SVD, their Gram matrices cut
    from the full-data ones (computed once); larger halves (and Krylov) form the float64
    half moment, the second from the full moment by complement when the halves cover the data.

Every path is certified by :mod:`.lowrank` with a LAPACK fallback, so the choice changes
the cost and never the answer; :func:`asymgeo.linalg.lowrank.path_counts` reports which
paths ran.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from .._runtime import limit_blas_threads
from . import lapack
from .lowrank import (
    KRYLOV_MIN_GAP,
    MIXED_MIN_DIM,
    MixedProbe,
    _count_input,
    krylov_suits,
    mixed_probe,
    top_eigen,
    top_singular,
    top_sym_eigen,
)

__all__ = [
    "SOLVERS", "TopSpectra", "HalfMomentSolver", "top_spectra", "choose_solver", "check_solver", "krylov_starts",
    "single_threaded_blas",
]

#: The truncation solvers a caller may ask for (``"auto"`` lets :func:`choose_solver` decide).
SOLVERS = ("auto", "dense", "krylov")


@dataclass(frozen=True)
class TopSpectra:
    """The top-r singular triplets of a moment ``C`` (p, q) and the top-r eigenpairs of ``sym(C)``.

    Attributes
    ----------
    left : (p, r) left singular vectors ``U``.
    singular_values : (r,) singular values ``s``, descending.
    right : (q, r) right singular vectors ``V`` (``C V = U diag(s)``).
    eigenvalues : (r,) the ``r`` algebraically largest eigenvalues of ``(C + C^T) / 2``,
        descending (possibly negative).
    eigenvectors : (p, r) their orthonormal eigenvectors.
    """

    left: np.ndarray
    singular_values: np.ndarray
    right: np.ndarray
    eigenvalues: np.ndarray
    eigenvectors: np.ndarray


def check_solver(solver: str, name: str = "solver") -> str:
    """``solver`` if it is one of :data:`SOLVERS`, else ValueError naming the argument ``name``."""
    if solver not in SOLVERS:
        raise ValueError(f"{name}: expected 'auto', 'dense' or 'krylov', got {solver!r}")
    return solver


def single_threaded_blas() -> contextlib.AbstractContextManager:
    """BLAS held to one thread for the solvers of this package, numpy's and SciPy's OpenBLAS alike.

    The solvers alternate the two libraries, and two multithreaded pools taking turns spin
    against each other (measured 20x slower on a loaded 2-core machine); callers parallelise
    over tasks instead.  SciPy's library is loaded first: one loaded inside the block would
    keep its own thread count (and its multithreaded rounding) for that call.
    """
    import scipy.linalg  # noqa: F401  (loads SciPy's OpenBLAS, so that the limit reaches it)

    return limit_blas_threads(1)


def _symmetric_part(C: np.ndarray) -> np.ndarray:
    """``(C + C^T) / 2`` (the same arithmetic as :func:`asymgeo.kernels.geometry.sym`)."""
    return (C + C.T) / 2.0


def top_spectra(
    C: np.ndarray,
    rank: int,
    *,
    method: str = "auto",
    start_right: np.ndarray | None = None,
    start_eig: np.ndarray | None = None,
    factors: tuple[np.ndarray, np.ndarray, float] | None = None,
    grams: tuple[np.ndarray, np.ndarray] | None = None,
    mixed: bool = False,
    eigen: tuple[np.ndarray, np.ndarray] | None = None,
) -> TopSpectra:
    """The :class:`TopSpectra` of a formed moment ``C``, by the solver path asked for.

    Parameters
    ----------
    C : (p, q) the moment.
    rank : r, the number of singular triplets and eigenpairs.
    method : ``"auto"``, ``"dense"`` or ``"krylov"`` (see :func:`asymgeo.linalg.lowrank.top_singular`).
    start_right, start_eig : warm starts of ``method="krylov"`` for the right singular
        vectors and for the eigenvectors.
    factors : ``(X, D, c)`` with ``C == c X^T D``: the SVD may run on the thin factors.
    grams : ``(X X^T, D D^T)`` of those factors, when already known.
    mixed : try the mixed-precision solvers first (the eigensolver, and for ``p >= 512``
        the SVD of the formed moment).
    eigen : the top-r eigenpairs of ``sym(C)`` when already known (not recomputed).

    Returns
    -------
    TopSpectra
        Certified by :mod:`.lowrank` (else its LAPACK fallback answered).
    """
    U, s, V = top_singular(C, rank, method=method, start=start_right, factors=factors, grams=grams, mixed=mixed)
    if eigen is not None:
        eta, Q = eigen
    else:
        eta, Q = top_eigen(_symmetric_part(C), rank, method=method, start=start_eig, mixed=mixed)
    return TopSpectra(U, s, V, eta, Q)


def _spectra_from_factors(
    X: np.ndarray, D: np.ndarray, c: float, rank: int,
    grams: tuple[np.ndarray, np.ndarray] | None, S32: np.ndarray,
) -> TopSpectra:
    """The :class:`TopSpectra` of ``c X^T D`` from its factors only (the moment never formed in
    float64): the thin-factor SVD, and the mixed eigensolver on the float32 symmetric part
    ``S32`` (its lower triangle; overwritten)."""
    U, s, V = top_singular(None, rank, factors=(X, D, c), grams=grams)
    eta, Q = top_sym_eigen(X, D, c, rank, S32=S32, overwrite=True)
    return TopSpectra(U, s, V, eta, Q)


def choose_solver(moment: np.ndarray, rank: int, method: str, probe: MixedProbe | None = None) -> str:
    """The solver for truncations of perturbed copies of ``moment`` (CARS' half moments).

    ``method="auto"``: ``"krylov"`` if it certifies on ``moment`` (a clear spectral gap at
    ``rank``: then warm-started Krylov beats LAPACK on every copy,
    :func:`asymgeo.linalg.lowrank.krylov_suits`), else ``"dense"`` (thin factors, mixed
    precision and subset LAPACK: real embeddings).  The Krylov probe is skipped when the
    mixed-precision ``probe`` already shows a spectrum too flat for it (``krylov_gap`` below
    :data:`asymgeo.linalg.lowrank.KRYLOV_MIN_GAP`).  Any other ``method`` is returned as given.
    """
    if method != "auto":
        return method
    if probe is not None and probe.krylov_gap < KRYLOV_MIN_GAP:
        return "dense"
    return "krylov" if krylov_suits(moment, rank) else "dense"


def krylov_starts(
    moment: np.ndarray, eigenvectors: np.ndarray, rank: int, method: str
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Warm starts for ``method="krylov"``: the full-data leading subspaces, with headroom.

    Right singular vectors of ``moment`` of width ``2r`` (so the solver also sees the
    directions just below the truncation edge), and both ends of the symmetric spectrum:
    ``eigenvectors`` (the top-r of ``sym(moment)``) and the top-r of ``-sym(moment)`` (large
    negative eigenvalues are what slows a Krylov solver for the top algebraic ones).
    ``(None, None)`` for other methods or when the basis would not fit in ``p``.
    """
    p = moment.shape[0]
    width = min(2 * rank, p)
    if method != "krylov" or 4 * width + 16 > p:
        return None, None
    _, _, V_all = top_singular(moment, width, method=method)
    Q_all = np.concatenate([eigenvectors, top_eigen(-_symmetric_part(moment), rank, method=method)[1]], axis=1)
    return V_all, Q_all


def _gram(A: np.ndarray) -> np.ndarray:
    """``A A^T`` by BLAS ``syrk`` (half the flops of a general product), both triangles."""
    from scipy.linalg import blas

    G = blas.dsyrk(1.0, A, lower=1)
    return np.tril(G) + np.tril(G, -1).T


def _half_moments(
    X: np.ndarray, D: np.ndarray, moment: np.ndarray, I1: np.ndarray, I2: np.ndarray,
    X1: np.ndarray, D1: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Both float64 half moments; the second from the full moment when the halves cover the
    data (``n C = m1 C1 + m2 C2``: half the work, and no copy of the second half's rows)."""
    n, m1, m2 = X.shape[0], I1.size, I2.size
    C1 = X1.T @ D1 / m1
    if m1 + m2 == n:
        _count_input("half:moment_by_complement")
        return C1, (n * moment - m1 * C1) / m2
    _count_input("half:moment_formed")
    return C1, X[I2].T @ D[I2] / m2


@dataclass
class _Float32Triples:
    """float32 copies of the triples and of ``sym(C_all)`` for the mixed-precision path."""

    X32: np.ndarray
    D32: np.ndarray
    S_all32: np.ndarray

    @classmethod
    def build(cls, X: np.ndarray, D: np.ndarray, moment: np.ndarray) -> _Float32Triples:
        S = _symmetric_part(moment).astype(np.float32)
        return cls(X.astype(np.float32), D.astype(np.float32), np.asfortranarray(S))

    def symmetric_part(self, idx: np.ndarray) -> np.ndarray:
        """Lower triangle of ``sym(C_I)`` in float32 (BLAS ``ssyr2k``, Fortran order)."""
        return lapack.ssyr2k_lower(0.5 / idx.size, self.X32[idx], self.D32[idx])

    def half_symmetric_parts(self, I1: np.ndarray, I2: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``sym(C_I1)``, ``sym(C_I2)`` in float32; the second by complement when the halves cover
        the ``n`` triples."""
        S1 = self.symmetric_part(I1)
        m1, m2 = I1.size, I2.size
        if m1 + m2 != n:
            _count_input("half:float32_formed")
            return S1, self.symmetric_part(I2)
        _count_input("half:float32_by_complement")
        S2 = self.S_all32 * np.float32(n / m2)  # complement: n S = m1 S1 + m2 S2
        S2 -= np.float32(m1 / m2) * S1
        return S1, S2


class HalfMomentSolver:
    """Top-r spectra of a full moment ``C = X^T D / n`` and of its half moments, the solver chosen once.

    Built once per CARS call from the full-data triples; it runs the mixed-precision probe
    (``p >= 256``, ``method`` ``"auto"`` or ``"dense"``), chooses the solver
    (:func:`choose_solver`), truncates the full moment (:attr:`full`) and prepares what the
    halves share: Krylov warm starts, the full-data Gram matrices (halves of fewer than
    ``3p/4`` triples) and float32 copies (when the probe certified).  Then
    :meth:`half_spectra` answers each half-split.  Read-only after construction:
    :meth:`half_spectra` may run on several threads at once.

    Parameters
    ----------
    X, D : (n, p) the triples' queries and document differences (float64).
    moment : (p, p) ``X^T D / n``, already formed by the caller.
    rank : r, the truncation rank (``1 <= r <= p``).
    method : ``"auto"``, ``"dense"`` or ``"krylov"`` (:data:`SOLVERS`).

    Attributes
    ----------
    method : the solver chosen, ``"dense"`` or ``"krylov"``.
    full : :class:`TopSpectra` of ``moment``.
    """

    def __init__(self, X: np.ndarray, D: np.ndarray, moment: np.ndarray, rank: int, method: str) -> None:
        n, p = X.shape
        self._X, self._D, self._moment, self.rank = X, D, moment, rank
        probe = mixed_probe(moment, rank) if method in ("auto", "dense") and p >= MIXED_MIN_DIM else None
        self.method = choose_solver(moment, rank, method, probe)
        # the probe's eigenpairs are the full-data answer, unless Krylov was chosen anyway
        eigen_all = (probe.values, probe.vectors) if probe is not None and self.method != "krylov" else None
        self.full = top_spectra(moment, rank, method=self.method, factors=(X, D, 1.0 / n), eigen=eigen_all)
        self._starts = krylov_starts(moment, self.full.eigenvectors, rank, self.method)
        # Halves of fewer than 3p/4 triples take the thin-factor SVD: their Gram matrices are
        # sub-blocks of the full-data ones, computed once here.
        thin = self.method != "krylov" and 4 * (n // 2 + 1) <= 3 * p
        self._grams = (_gram(X), _gram(D)) if thin else None
        self._float32 = _Float32Triples.build(X, D, moment) if eigen_all is not None else None

    def half_spectra(self, I1: np.ndarray, I2: np.ndarray) -> tuple[TopSpectra, TopSpectra]:
        """The :class:`TopSpectra` of the half moments ``C_I = X_I^T D_I / |I|`` of disjoint ``I1``, ``I2``.

        Thin halves with a certified probe never form their moment in float64 (thin-factor
        SVD on Gram sub-blocks, mixed eigensolver on a float32 ``ssyr2k`` symmetric part);
        other thin halves take the thin-factor SVD of the formed moment; the rest (Krylov, or
        halves of more than ``3p/4`` triples) truncate the formed moment (mixed precision when
        the probe certified).
        """
        X, D, rank, method = self._X, self._D, self.rank, self.method
        n, m1, m2 = X.shape[0], I1.size, I2.size
        X1, D1 = X[I1], D[I1]
        start_right, start_eig = self._starts
        grams, low = self._grams, self._float32
        if grams is not None:  # halves of fewer than 3p/4 triples: the thin-factor SVD
            X2, D2 = X[I2], D[I2]
            g1 = (grams[0][np.ix_(I1, I1)], grams[1][np.ix_(I1, I1)])
            g2 = (grams[0][np.ix_(I2, I2)], grams[1][np.ix_(I2, I2)])
            if low is not None:  # no float64 half moment at all
                S1, S2 = low.half_symmetric_parts(I1, I2, n)
                return (_spectra_from_factors(X1, D1, 1.0 / m1, rank, g1, S1),
                        _spectra_from_factors(X2, D2, 1.0 / m2, rank, g2, S2))
            C1, C2 = _half_moments(X, D, self._moment, I1, I2, X1, D1)
            return (top_spectra(C1, rank, method=method, start_right=start_right, start_eig=start_eig,
                                factors=(X1, D1, 1.0 / m1), grams=g1),
                    top_spectra(C2, rank, method=method, start_right=start_right, start_eig=start_eig,
                                factors=(X2, D2, 1.0 / m2), grams=g2))
        # the formed moments answer (Krylov, or halves of more than 3p/4 triples): no factors needed
        C1, C2 = _half_moments(X, D, self._moment, I1, I2, X1, D1)
        mixed = low is not None
        return (top_spectra(C1, rank, method=method, start_right=start_right, start_eig=start_eig, mixed=mixed),
                top_spectra(C2, rank, method=method, start_right=start_right, start_eig=start_eig, mixed=mixed))
