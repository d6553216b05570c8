r"""Relevance-informed query rotations (paper, Section 5.3 and Appendix F.1, RQ3).

The RQ3 experiment rotates **only the query embeddings** "in eight relevance-informed
planes" through 0, 15, ..., 90 degrees, leaving documents, labels and splits unchanged.
The paper does not define the planes; this module fixes one principled construction.

Planes
------
Let :math:`C = \frac1n\sum_i x_i (y^+_i - y^-_i)^\top` be the training relevance moment
(rows of :math:`C` index query coordinates) and :math:`\Sigma_x = \frac1n X^\top X` the
(uncentred) second moment of the training queries.

* :math:`u_i` is the :math:`i`-th leading **left** singular vector of :math:`C`: the query
  direction that carries the :math:`i`-th largest share of the relevance signal.
* The *leading query subspace* :math:`S` is the span of :math:`u_1,\dots,u_m` together with
  the leading principal directions of :math:`\Sigma_x` that hold a fraction
  ``query_energy`` (default 90%) of the queries' energy :math:`\mathrm{tr}\,\Sigma_x`.
* :math:`w_1,\dots,w_m` are the leading eigenvectors of :math:`\Sigma_x` restricted to
  the orthogonal complement :math:`S^\perp`.

Why this choice: every :math:`w_i` is orthogonal to every :math:`u_j` and to the
directions the queries mostly use, so at 90 degrees the relevance signal of plane
:math:`i` is carried into a direction where queries had (by construction) little
content and documents are not moved: the best operator becomes
:math:`R M` (asymmetric) while the data keep their norms and their marginal spread.
Taking the *leading* directions of :math:`\Sigma_x` inside :math:`S^\perp` (rather than
the trailing ones) keeps the construction well conditioned: trailing eigenvalues of an
embedding second moment are a near-degenerate noise floor (exactly degenerate when
:math:`n < p`), so their eigenvectors are not well defined, whereas the leading ones
outside :math:`S` are separated and hold at most ``1 - query_energy`` of the energy.

Rotation
--------
With :math:`U = [u_1..u_m]`, :math:`W = [w_1..w_m]` (orthonormal columns, :math:`U^\top W=0`)

.. math::
    R(\theta) = I + (\cos\theta - 1)(UU^\top + WW^\top) + \sin\theta\,(WU^\top - UW^\top),

so :math:`R u_i = \cos\theta\,u_i + \sin\theta\,w_i`, :math:`R w_i = \cos\theta\,w_i -
\sin\theta\,u_i`, and :math:`R` is the identity on the complement of the planes.  Query
rows transform as :math:`X' = X R^\top`; the relevance moment of the rotated queries is
:math:`C' = R\,C`, and an operator :math:`M` for the original queries becomes
:math:`R M` (Appendix D's planar-rotation example in every plane).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .._validation import as_float_matrix

__all__ = ["query_rotation", "relevance_planes", "rotate_queries"]


def _check_planes(U: Any, W: Any) -> tuple[np.ndarray, np.ndarray]:
    U = as_float_matrix(U, "U")
    W = as_float_matrix(W, "W")
    if U.shape != W.shape:
        raise ValueError(f"U, W: expected the same (p, m) shape, got {U.shape} and {W.shape}")
    p, m = U.shape
    if m < 1 or 2 * m > p:
        raise ValueError(f"U, W: expected (p, m) with 1 <= m <= p/2, got shape {U.shape}")
    B = np.hstack([U, W])
    err = float(np.abs(B.T @ B - np.eye(2 * m)).max())
    if err > 1e-8:
        raise ValueError(f"U, W: the columns of [U, W] must be orthonormal (max |[U W]^T [U W] - I| = {err:.2e})")
    return U, W


def _check_angle(angle: Any) -> float:
    if isinstance(angle, bool) or not isinstance(angle, numbers.Real) or not np.isfinite(float(angle)):
        raise ValueError(f"angle: expected a finite number of radians, got {angle!r}")
    return float(angle)


def relevance_planes(
    C: Any,
    X: Any,
    n_planes: int = 8,
    *,
    query_energy: float = 0.9,
    directions: str = "leading",
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Relevance-informed rotation planes ``span(u_i, w_i)`` (see the module docstring).

    ``u_i`` is the i-th leading left singular vector of the relevance moment ``C``;
    ``w_i`` the i-th leading eigenvector of :math:`\Sigma_x = X^\top X / n` inside the
    orthogonal complement of ``span(U)`` plus the leading principal subspace of ``X``
    that holds ``query_energy`` of :math:`\mathrm{tr}\,\Sigma_x` (capped so that
    ``2 * n_planes`` directions fit in the complement).

    Parameters
    ----------
    C : (p, p) training relevance moment (rows = query coordinates), e.g.
        :func:`asymgeo.relevance_moment` of the training triples.
    X : (n, p) training query embeddings (rows).
    n_planes : number of planes m, ``1 <= m`` and ``2 m <= p``.
    query_energy : fraction in [0, 1) of the query energy whose principal subspace the
        ``w_i`` must avoid (``directions="leading"`` only).
    directions : {"leading", "random"}
        ``"leading"`` (default): the construction above.  ``"random"`` (the RQ3 variant):
        ``w_i`` are a seeded Gaussian draw orthonormalised against ``U`` only, so they may
        fall inside the leading query subspace: :math:`W = \mathrm{qr}((I - UU^\top) G)`,
        :math:`G \sim N(0, 1)^{p \times m}`.
    seed : seeds the Gaussian draw of ``directions="random"``.

    Returns
    -------
    U, W : (p, m) float64 with orthonormal columns, ``U^T W = 0``; each column's sign is
        fixed so that its largest-magnitude entry is positive (a deterministic answer).

    Raises
    ------
    ValueError
        On shapes that disagree, non-finite input, or an invalid ``n_planes`` /
        ``query_energy``.
    """
    C = as_float_matrix(C, "C")
    X = as_float_matrix(X, "X")
    if C.shape[0] != C.shape[1]:
        raise ValueError(f"C: expected a square (p, p) relevance moment, got shape {C.shape}")
    p = C.shape[0]
    if X.shape[1] != p or X.shape[0] < 1:
        raise ValueError(f"X: expected shape (n, {p}) with n >= 1 (C is {C.shape}), got {X.shape}")
    if isinstance(n_planes, bool) or not isinstance(n_planes, numbers.Integral) or n_planes < 1 or 2 * n_planes > p:
        raise ValueError(f"n_planes: expected an integer with 1 <= n_planes <= p/2 = {p // 2}, got {n_planes!r}")
    m = int(n_planes)
    if isinstance(query_energy, bool) or not isinstance(query_energy, numbers.Real) or not 0 <= query_energy < 1:
        raise ValueError(f"query_energy: expected a number in [0, 1), got {query_energy!r}")
    if directions not in ("leading", "random"):
        raise ValueError(f"directions: expected 'leading' or 'random', got {directions!r}")
    if not np.any(C):
        raise ValueError("C: the relevance moment is zero; it defines no relevance direction")
    left, _s, _vt = np.linalg.svd(C)
    U = left[:, :m]
    if directions == "random":
        G = np.random.default_rng(np.random.SeedSequence(int(seed))).standard_normal((p, m))
        G = G - U @ (U.T @ G)
        W, _ = np.linalg.qr(G)
        W = W - U @ (U.T @ W)
        W, _ = np.linalg.qr(W)
        return _fix_signs(U), _fix_signs(W)
    sigma_x = X.T @ X / X.shape[0]
    evals, evecs = np.linalg.eigh(sigma_x)
    evals, evecs = evals[::-1].clip(min=0.0), evecs[:, ::-1]
    total = float(evals.sum())
    if total > 0 and query_energy > 0:
        q = int(np.searchsorted(np.cumsum(evals) / total, query_energy) + 1)
    else:
        q = 0
    q = min(q, p - 2 * m)
    # Orthonormal basis of S = span(U, top-q principal directions), then of its complement.
    basis, sv, _ = np.linalg.svd(np.hstack([U, evecs[:, :q]]), full_matrices=True)
    dim_s = int(np.sum(sv > 1e-10 * sv[0]))
    comp = basis[:, dim_s:]
    _z_vals, z_vecs = np.linalg.eigh(comp.T @ sigma_x @ comp)
    W = comp @ z_vecs[:, ::-1][:, :m]
    # Re-orthonormalise against U (exact up to rounding) and fix signs deterministically.
    W = W - U @ (U.T @ W)
    W, _ = np.linalg.qr(W)
    return _fix_signs(U), _fix_signs(W)


def _fix_signs(V: np.ndarray) -> np.ndarray:
    idx = np.argmax(np.abs(V), axis=0)
    signs = np.sign(V[idx, np.arange(V.shape[1])])
    signs[signs == 0] = 1.0
    return np.ascontiguousarray(V * signs)


def query_rotation(U: Any, W: Any, angle: float) -> np.ndarray:
    r"""The orthogonal (p, p) map rotating by ``angle`` radians in every plane ``span(u_i, w_i)``.

    .. math::
        R(\theta) = I + (\cos\theta - 1)(UU^\top + WW^\top) + \sin\theta\,(WU^\top - UW^\top)

    ``R u_i = cos(θ) u_i + sin(θ) w_i``, ``R w_i = cos(θ) w_i − sin(θ) u_i``; the identity
    on the orthogonal complement of the planes; ``R(a) R(b) = R(a + b)``.  Query rows
    transform as ``X @ R.T`` (:func:`rotate_queries`); documents are never rotated.

    Parameters
    ----------
    U, W : (p, m) with orthonormal columns of ``[U, W]`` (from :func:`relevance_planes`).
    angle : rotation angle in radians (``numpy.deg2rad(15)`` for 15 degrees).

    Returns
    -------
    (p, p) float64 orthogonal matrix with determinant 1.
    """
    U, W = _check_planes(U, W)
    a = _check_angle(angle)
    c, s = np.cos(a), np.sin(a)
    R = np.eye(U.shape[0]) + (c - 1.0) * (U @ U.T + W @ W.T) + s * (W @ U.T - U @ W.T)
    return R


def rotate_queries(X: Any, U: Any, W: Any, angle: float) -> np.ndarray:
    r"""Rotated query rows ``X @ R(angle).T`` without forming ``R``.

    .. math::
        X' = X + (\cos\theta - 1)(XUU^\top + XWW^\top) + \sin\theta\,(XUW^\top - XWU^\top)

    Parameters
    ----------
    X : (n, p) query embeddings (rows; float16/float32 are computed in float64).
    U, W : the planes, as in :func:`query_rotation`.
    angle : radians.

    Returns
    -------
    (n, p) float64 rotated queries (row norms unchanged).
    """
    U, W = _check_planes(U, W)
    a = _check_angle(angle)
    X = as_float_matrix(X, "X")
    if X.shape[1] != U.shape[0]:
        raise ValueError(f"X: expected shape (n, {U.shape[0]}) to match the planes, got {X.shape}")
    c, s = np.cos(a), np.sin(a)
    XU, XW = X @ U, X @ W
    return X + (c - 1.0) * (XU @ U.T + XW @ W.T) + s * (XU @ W.T - XW @ U.T)
