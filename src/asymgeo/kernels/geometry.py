"""Operator geometry of shared and dual projections (paper, Section 2 and Appendices A-B).

Conventions used throughout asymgeo
-----------------------------------
* Queries and documents are **rows**: ``X`` is ``(n, p)``.
* An operator ``M`` (p, p) scores a query ``x`` and a document ``y`` by ``x^T M y``;
  for row matrices the score matrix is ``X @ M @ Y.T``.
* Shared family ``M_s(r) = {P^T P : P in R^{r x p}}`` (symmetric PSD, rank <= r);
  dual family ``M_d(r) = {A^T B : A, B in R^{r x p}}`` (any rank <= r).
* Maps are ``(r, p)`` matrices applied as ``X @ A.T``; then
  ``(X A^T)(Y B^T)^T = X A^T B Y^T = X M Y^T``.

All functions here are pure kernels on arrays (no I/O, no state).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from .._deprecation import renamed_argument
from .._validation import as_float_matrix, check_int, check_rank, check_same_shape, check_square
from ..linalg.lowrank import top_eigen, top_singular

__all__ = [
    "relevance_moment",
    "sym",
    "skew",
    "dual_truncate",
    "shared_truncate",
    "dual_factors",
    "shared_factors",
    "ApproximationGap",
    "approximation_gap",
    "psd_distance",
    "tangent_dims",
    "tangent_projectors",
    "TangentProjectors",
]

_MOMENT_CHUNK = 65_536


def relevance_moment(X: np.ndarray, Y_pos: np.ndarray, Y_neg: np.ndarray) -> np.ndarray:
    r"""Empirical relevance moment of training triples (paper, Section 3.2).

    .. math:: \widehat C = \frac1n \sum_{i=1}^n X_i (Y^+_i - Y^-_i)^\top

    Parameters
    ----------
    X : (n, p) queries
    Y_pos : (n, p) positive documents
    Y_neg : (n, p) negative documents

    Returns
    -------
    C : (p, p) float64
        Accumulated in float64 in row chunks, so float16 input (the embedding cache)
        loses no precision and memory stays bounded.
    """
    X = np.asarray(X)
    Y_pos = np.asarray(Y_pos)
    Y_neg = np.asarray(Y_neg)
    for name, arr in (("X", X), ("Y_pos", Y_pos), ("Y_neg", Y_neg)):
        if arr.ndim != 2:
            raise ValueError(f"{name}: expected a 2-d array of shape (n, p), got shape {arr.shape}")
    check_same_shape({"X": X, "Y_pos": Y_pos, "Y_neg": Y_neg})
    n, p = X.shape
    if n == 0 or p == 0:
        raise ValueError(f"X: expected at least one triple and one dimension, got shape {X.shape}")
    C = np.zeros((p, p), dtype=np.float64)
    for start in range(0, n, _MOMENT_CHUNK):
        sl = slice(start, start + _MOMENT_CHUNK)
        xs = as_float_matrix(X[sl], "X")
        ds = as_float_matrix(Y_pos[sl], "Y_pos") - as_float_matrix(Y_neg[sl], "Y_neg")
        C += xs.T @ ds
    return C / n


def sym(M: np.ndarray) -> np.ndarray:
    """Symmetric part ``(M + M^T) / 2``."""
    return (M + M.T) / 2.0


def skew(M: np.ndarray) -> np.ndarray:
    """Skew-symmetric part ``(M - M^T) / 2``."""
    return (M - M.T) / 2.0


def _check_operator(C: np.ndarray, name: str = "C") -> np.ndarray:
    C = as_float_matrix(C, name)
    check_square(C, name)
    return C


def _solver(solver: str, method: str | None, owner: str) -> str:
    return renamed_argument(owner, "method", "solver", method, solver, "auto", stacklevel=5)


def _dual_parts(C: np.ndarray, rank: int, solver: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return top_singular(C, rank, method=solver)


def _shared_parts(C: np.ndarray, rank: int, solver: str) -> tuple[np.ndarray, np.ndarray]:
    eta, U = top_eigen(sym(C), rank, method=solver)
    return np.maximum(eta, 0.0), U


def dual_truncate(C: np.ndarray, rank: int, *, solver: str = "auto", method: str | None = None) -> np.ndarray:
    r"""Rank-r SVD truncation: the Frobenius-nearest member of :math:`\mathcal M_d(r)`.

    .. math:: \mathcal P_{d,r}(C) = \sum_{j\le r} \sigma_j u_j v_j^\top

    (Eckart-Young; the dual minimum of Theorem 1.)

    Parameters
    ----------
    C : (p, p) operator (e.g. a relevance moment)
    rank : int, 1 <= rank <= p
    solver : {"auto", "dense", "krylov"}
        ``"auto"`` uses a certified block-Krylov solver when ``p >= 512`` and ``rank <= p/16``.
    method : deprecated alias of ``solver`` (removed in 0.3).
    """
    C = _check_operator(C)
    rank = check_rank(rank, C.shape[0])
    U, s, V = _dual_parts(C, rank, _solver(solver, method, "dual_truncate"))
    return (U * s) @ V.T


def shared_truncate(C: np.ndarray, rank: int, *, solver: str = "auto", method: str | None = None) -> np.ndarray:
    r"""Positive eigen-truncation: the Frobenius-nearest member of :math:`\mathcal M_s(r)`.

    With :math:`\mathrm{sym}(C) = U\,\mathrm{diag}(\eta)\,U^\top`,

    .. math:: \mathcal P_{s,r}(C) = S_r^+ = U\,\mathrm{diag}(\eta_j 1\{j\in J_r\})\,U^\top

    where :math:`J_r` indexes the largest *at most* r positive eigenvalues
    (Theorem 1).  Negative eigenvalues are never kept, so the result may have rank < r.

    Parameters
    ----------
    C : (p, p) operator
    rank : int, 1 <= rank <= p
    solver : {"auto", "dense", "krylov"}
    method : deprecated alias of ``solver`` (removed in 0.3).
    """
    C = _check_operator(C)
    rank = check_rank(rank, C.shape[0])
    eta, U = _shared_parts(C, rank, _solver(solver, method, "shared_truncate"))
    return (U * eta) @ U.T


def dual_factors(
    C: np.ndarray, rank: int, *, solver: str = "auto", method: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    r"""Dual maps ``A, B`` (each (r, p)) with :math:`A^\top B = \mathcal P_{d,r}(C)`.

    :math:`A = \Sigma_r^{1/2} U_r^\top`, :math:`B = \Sigma_r^{1/2} V_r^\top`
    (paper, Section 2; balanced factorisation).  Rows for zero singular values are zero.
    """
    C = _check_operator(C)
    rank = check_rank(rank, C.shape[0])
    U, s, V = _dual_parts(C, rank, _solver(solver, method, "dual_factors"))
    root = np.sqrt(np.maximum(s, 0.0))
    return (U * root).T.copy(), (V * root).T.copy()


def shared_factors(C: np.ndarray, rank: int, *, solver: str = "auto", method: str | None = None) -> np.ndarray:
    r"""Shared map ``P`` (r, p) with :math:`P^\top P = \mathcal P_{s,r}(C)`.

    :math:`P = \mathrm{diag}(\sqrt{\eta^+_{J_r}})\,U_{J_r}^\top`; rows for
    non-positive eigenvalues are zero (padding, as in Appendix A).
    """
    C = _check_operator(C)
    rank = check_rank(rank, C.shape[0])
    eta, U = _shared_parts(C, rank, _solver(solver, method, "shared_factors"))
    return (U * np.sqrt(eta)).T.copy()


@dataclass(frozen=True)
class ApproximationGap:
    r"""Theorem 1 decomposition of the shared-minus-dual approximation error.

    Attributes
    ----------
    shared_error : float
        :math:`\\min_{S\\in\\mathcal M_s(r)}\\|M-S\\|_F^2` = skew + negative + discarded.
    dual_error : float
        :math:`\\min_{D\\in\\mathcal M_d(r)}\\|M-D\\|_F^2 = \\sum_{j>r}\\sigma_j^2`.
    gap : float
        ``shared_error - dual_error`` (>= 0).
    skew_energy : float
        :math:`\\|K\\|_F^2`, K the skew part.
    negative_energy : float
        :math:`\\sum_{\\eta_j<0}\\eta_j^2`.
    discarded_energy : float
        :math:`\\sum_{\\eta_j>0, j\\notin J_r}\\eta_j^2`.
    rank : int
    """

    shared_error: float
    dual_error: float
    gap: float
    skew_energy: float
    negative_energy: float
    discarded_energy: float
    rank: int

    def as_dict(self) -> dict[str, float]:
        return {
            "shared_error": self.shared_error,
            "dual_error": self.dual_error,
            "gap": self.gap,
            "skew_energy": self.skew_energy,
            "negative_energy": self.negative_energy,
            "discarded_energy": self.discarded_energy,
            "rank": self.rank,
        }


def approximation_gap(M: np.ndarray, rank: int) -> ApproximationGap:
    r"""Exact shared-minus-dual approximation gap (Theorem 1, eq. 1).

    .. math::
        \min_{\mathcal M_s(r)}\|M-S\|_F^2 = \|K\|_F^2 + \sum_{\eta_j<0}\eta_j^2
            + \sum_{\eta_j>0,\,j\notin J_r}\eta_j^2,
        \qquad \min_{\mathcal M_d(r)}\|M-D\|_F^2 = \sum_{j>r}\sigma_j(M)^2.

    Parameters
    ----------
    M : (p, p) target operator
    rank : int, 1 <= rank <= p
    """
    M = _check_operator(M, "M")
    rank = check_rank(rank, M.shape[0])
    K = skew(M)
    eta = sla.eigvalsh(sym(M), check_finite=False)[::-1]  # descending
    sigma = sla.svdvals(M, check_finite=False)
    skew_energy = float(np.sum(K * K))
    negative_energy = float(np.sum(eta[eta < 0] ** 2))
    positive = eta[eta > 0]
    discarded_energy = float(np.sum(positive[rank:] ** 2))
    shared_error = skew_energy + negative_energy + discarded_energy
    dual_error = float(np.sum(sigma[rank:] ** 2))
    return ApproximationGap(
        shared_error=shared_error,
        dual_error=dual_error,
        gap=shared_error - dual_error,
        skew_energy=skew_energy,
        negative_energy=negative_energy,
        discarded_energy=discarded_energy,
        rank=rank,
    )


def psd_distance(M: np.ndarray, rank: int, *, solver: str = "auto", method: str | None = None) -> float:
    r"""Squared distance between the dual and shared rank-r fits of ``M``.

    .. math:: G_{\rm PSD}(M, r) = \|\mathcal P_{d,r}(M) - \mathcal P_{s,r}(M)\|_F^2

    This is :math:`\|V\|_F^2` of Section 3.2 evaluated at ``M``: the quantity CARS's
    cross-half agreement estimates.  At a population moment it is the "population
    distance to the shared family" of Figures 3B and 4A; at a training moment it is
    the raw plug-in asymmetry, inflated by noise.
    """
    M = _check_operator(M, "M")
    rank = check_rank(rank, M.shape[0])
    solver = _solver(solver, method, "psd_distance")
    V = dual_truncate(M, rank, solver=solver) - shared_truncate(M, rank, solver=solver)
    return float(np.sum(V * V))


def tangent_dims(p: int, rank: int) -> tuple[int, int, int]:
    r"""Tangent-space dimensions at a rank-r PSD point (Theorem 2, eq. 2; Appendix B.1).

    Returns
    -------
    (dim_Td, dim_Ts, k) with :math:`\dim T_d = 2pr - r^2`,
    :math:`\dim T_s = pr - r(r-1)/2` and :math:`k = r(2p-r-1)/2`.
    """
    p = check_int(p, "p")
    rank = check_rank(rank, p)
    d_d = 2 * p * rank - rank * rank
    d_s = p * rank - rank * (rank - 1) // 2
    return d_d, d_s, d_d - d_s


@dataclass(frozen=True)
class TangentProjectors:
    r"""Frobenius-orthogonal projectors onto :math:`T_d`, :math:`T_s` and
    :math:`\\mathcal A = T_d \\cap T_s^\\perp` at ``S = U Lambda U^T`` (Appendix B.1).

    Each is a callable mapping a (p, p) matrix to a (p, p) matrix; the object also
    unpacks as a 3-tuple ``(Pi_Td, Pi_Ts, Pi_A)``.
    """

    Pi_Td: Callable[[np.ndarray], np.ndarray]
    Pi_Ts: Callable[[np.ndarray], np.ndarray]
    Pi_A: Callable[[np.ndarray], np.ndarray]
    U: np.ndarray

    def __iter__(self):
        return iter((self.Pi_Td, self.Pi_Ts, self.Pi_A))


def tangent_projectors(U: np.ndarray) -> TangentProjectors:
    r"""Tangent projectors at a rank-r PSD point with column space ``U`` (Appendix B.1).

    With :math:`P = UU^\top` and :math:`Z_{\rm sym} = (Z+Z^\top)/2`:

    .. math::
        \Pi_{T_d}(Z) = PZ + ZP - PZP,\qquad
        \Pi_{T_s}(Z) = PZ_{\rm sym} + Z_{\rm sym}P - PZ_{\rm sym}P,\qquad
        \Pi_{\mathcal A} = \Pi_{T_d} - \Pi_{T_s}.

    Parameters
    ----------
    U : (p, r) matrix with orthonormal columns (checked to 1e-8).
    """
    U = as_float_matrix(U, "U")
    p, r = U.shape
    if r > p:
        raise ValueError(f"U: expected shape (p, r) with r <= p, got {U.shape}")
    gram = U.T @ U
    if not np.allclose(gram, np.eye(r), atol=1e-8):
        raise ValueError("U: columns must be orthonormal (U^T U = I to 1e-8)")
    # P = U U^T is applied through U: P Z = U (U^T Z) costs 2 p^2 r per product, not p^3

    def _left(Z: np.ndarray) -> np.ndarray:  # P Z
        if Z.ndim == 2:
            return U @ (U.T @ Z)
        return np.einsum("pr,...rq->...pq", U, np.einsum("pr,...pq->...rq", U, Z))

    def _right(Z: np.ndarray) -> np.ndarray:  # Z P
        return np.swapaxes(_left(np.swapaxes(Z, -1, -2)), -1, -2)

    def _td(Z: np.ndarray) -> np.ndarray:
        Z = np.asarray(Z, dtype=np.float64)
        if Z.shape[-2:] != (p, p):
            raise ValueError(f"Z: expected shape (..., {p}, {p}), got {Z.shape}")
        PZ = _left(Z)
        return PZ + _right(Z) - _right(PZ)

    def _ts(Z: np.ndarray) -> np.ndarray:
        Z = np.asarray(Z, dtype=np.float64)
        if Z.shape[-2:] != (p, p):
            raise ValueError(f"Z: expected shape (..., {p}, {p}), got {Z.shape}")
        Zs = (Z + np.swapaxes(Z, -1, -2)) / 2.0
        PZ = _left(Zs)
        return PZ + _right(Zs) - _right(PZ)

    def _a(Z: np.ndarray) -> np.ndarray:
        return _td(Z) - _ts(Z)

    return TangentProjectors(Pi_Td=_td, Pi_Ts=_ts, Pi_A=_a, U=U)
