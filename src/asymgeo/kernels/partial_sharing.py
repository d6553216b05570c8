r"""Partial sharing (issue 20; the paper's conclusion): a PSD part plus ``s`` asymmetric directions.

Within one rank budget ``r`` the partially shared family with ``s`` asymmetric directions is

.. math::
    \mathcal M_{r,s} = \{S + K :\; S \succeq 0,\ \mathrm{rank}\,S \le r - s,\ \mathrm{rank}\,K \le s\},

so :math:`\mathcal M_{r,0} = \mathcal M_s(r)` (shared) and :math:`\mathcal M_{r,r} = \mathcal M_d(r)`
(dual), and the families are nested in ``s``.  A member deploys as two maps whose first
``r - s`` rows are tied: with :math:`S = P^\top P` (P (r-s, p)) and :math:`K = A^\top B`
(A, B (s, p)),

.. math:: x^\top (S + K)\, y = (Px)\cdot(Py) + (Ax)\cdot(By) = ([P; A]\,x)\cdot([P; B]\,y).

Closed form (:func:`partial_truncate`).  The Frobenius-nearest member of :math:`\mathcal M_{r,s}`
to a moment ``C`` has no known closed form for ``0 < s < r`` (the problem is non-convex), but
each block has one:

* given ``K``, :math:`\min_S \|S - (C - K)\|_F^2` is the rank-(r-s) positive eigen-truncation of
  :math:`\mathrm{sym}(C - K)` (Theorem 1: for symmetric S,
  :math:`\|S - R\|_F^2 = \|S - \mathrm{sym} R\|_F^2 + \|\mathrm{skew} R\|_F^2`);
* given ``S``, :math:`\min_K \|K - (C - S)\|_F^2` is the rank-s SVD truncation of ``C - S``
  (Eckart-Young).

Two starts are built from these closed forms (PSD block first: :math:`S_0 = \mathcal P_{s,r-s}(C)`,
:math:`K_0 = \mathcal P_{d,s}(C - S_0)`, the issue's sequential form, whose loss is returned as
``sequential_loss``; asymmetric block first: :math:`K_0 = \mathcal P_{d,s}(C)`, then the PSD block
of the residual), each refined by a few alternating exact block steps (which never raise the
loss) and then by L-BFGS on all factors jointly (alternation alone crawls along the coupled
directions: on random 6 x 6 moments 100 steps left it up to 20% above the optimum); the lower
end point is kept and re-expressed in canonical factors.  ``tests/kernels/test_partial_sharing.py``
checks the result against brute-force minimisation over the factors.

Choosing ``s`` (:func:`cross_fitted_sharing`): K-fold within the training pool, the held-out
operator loss :math:`\|\widehat M_{r,s}(\widehat C_{-k}) - M_k\|_F^2 / \|M_k\|_F^2` (the RQ4 loss)
for every ``s`` on a grid; the smallest ``s`` whose mean loss is within one standard error of
the best (one-SE rule toward sharing, as the cross-validated selector's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._runtime import limit_blas_threads
from .._validation import as_float_matrix, check_rank, check_same_shape, check_square
from ..linalg.lowrank import top_eigen, top_singular
from .geometry import dual_factors, shared_factors, sym
from .operator_risk import heldout_loss

__all__ = ["PartialTruncation", "partial_truncate", "sharing_grid", "SharingChoice", "cross_fitted_sharing"]


@dataclass(frozen=True)
class PartialTruncation:
    r"""A member :math:`S + K` of :math:`\mathcal M_{r,s}` fitted to a moment ``C``.

    Attributes
    ----------
    shared_map : (r - s, p) ``P`` with :math:`S = P^\top P` (zero rows for non-positive eigenvalues).
    query_map, document_map : (s, p) ``A``, ``B`` with :math:`K = A^\top B` (balanced factors).
    loss : :math:`\|S + K - C\|_F^2` at the returned point.
    sequential_loss : the loss of the one-step form :math:`S_0 = \mathcal P_{s,r-s}(C)`,
        :math:`K_0 = \mathcal P_{d,s}(C - S_0)`.
    iterations : L-BFGS iterations of the joint descent from the start that was kept.
    converged : that descent met its tolerance (0 iterations and True for s = 0 or s = r).
    rank, asymmetric : ``r`` and ``s``.
    """

    shared_map: np.ndarray
    query_map: np.ndarray
    document_map: np.ndarray
    loss: float
    sequential_loss: float
    iterations: int
    converged: bool
    rank: int
    asymmetric: int

    @property
    def operator(self) -> np.ndarray:
        r""":math:`M = P^\top P + A^\top B` (p, p)."""
        return self.shared_map.T @ self.shared_map + self.query_map.T @ self.document_map

    @property
    def query_maps(self) -> np.ndarray:
        """(r, p) the deployed query map ``[P; A]``."""
        return np.vstack([self.shared_map, self.query_map])

    @property
    def document_maps(self) -> np.ndarray:
        """(r, p) the deployed document map ``[P; B]``."""
        return np.vstack([self.shared_map, self.document_map])


def _psd_block(R: np.ndarray, k: int) -> np.ndarray:
    """``P`` (k, p): the rank-k positive eigen-truncation of sym(R) is ``P^T P``."""
    return shared_factors(R, k, solver="dense") if k else np.zeros((0, R.shape[0]))


def _svd_block(R: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``A, B`` (k, p) balanced factors of the rank-k SVD truncation of R."""
    return dual_factors(R, k, solver="dense") if k else (np.zeros((0, R.shape[0])), np.zeros((0, R.shape[0])))


def _loss(C: np.ndarray, P: np.ndarray, A: np.ndarray, B: np.ndarray) -> float:
    R = P.T @ P + A.T @ B - C
    return float(np.sum(R * R))


def _alternate(C: np.ndarray, a: int, s: int, start: str, steps: int):
    """The start of one descent: the first block's truncation, the other's on the residual,
    then ``steps`` alternating exact block minimisations (each never raises the loss)."""
    if start == "psd":
        P = _psd_block(C, a)
        A, B = _svd_block(C - P.T @ P, s)
    elif start == "svd":
        A, B = _svd_block(C, s)
        P = _psd_block(C - A.T @ B, a)
    else:  # the shared truncation at rank r, its s weakest directions moved into K: loss L_s(r)
        Q = _psd_block(C, a + s)
        P, A, B = Q[:a], Q[a:], Q[a:].copy()
        return P, A, B, _loss(C, P, A, B)
    first = _loss(C, P, A, B)
    for _ in range(steps):
        P = _psd_block(C - A.T @ B, a)
        A, B = _svd_block(C - P.T @ P, s)
    return P, A, B, first


def _psd_part(R: np.ndarray, a: int) -> np.ndarray:
    """The rank-a positive eigen-truncation of sym(R) by a full eigendecomposition (small R)."""
    w, U = np.linalg.eigh(0.5 * (R + R.T))
    w, U = np.maximum(w[::-1][:a], 0.0), U[:, ::-1][:, :a]
    return (U * w) @ U.T


def _joint_descent(C: np.ndarray, P: np.ndarray, A: np.ndarray, B: np.ndarray, max_iter: int, tol: float):
    r"""Variable projection: L-BFGS over the asymmetric factors only, the PSD block exact.

    .. math:: f(A, B) = \min_{S} \|S + A^\top B - C\|_F^2 = \|R\|_F^2,\quad
        R = \mathcal P_{s,r-s}(C - A^\top B) + A^\top B - C,

    with :math:`\nabla_A f = 2BR^\top`, :math:`\nabla_B f = 2AR` (the envelope theorem: S is the
    block minimiser).  ``P`` is only the start's PSD block; the end point's is recomputed."""
    import scipy.optimize as so

    a, s, p = P.shape[0], A.shape[0], C.shape[0]
    scale = max(float(np.sum(C * C)), np.finfo(float).tiny)

    def f(z: np.ndarray) -> tuple[float, np.ndarray]:
        Az = z[: s * p].reshape(s, p)
        Bz = z[s * p:].reshape(s, p)
        K = Az.T @ Bz
        R = _psd_part(C - K, a) + K - C
        g = np.concatenate([(2.0 * Bz @ R.T).ravel(), (2.0 * Az @ R).ravel()])
        return float(np.sum(R * R)) / scale, g / scale

    z0 = np.concatenate([A.ravel(), B.ravel()])
    res = so.minimize(f, z0, jac=True, method="L-BFGS-B", options={"maxiter": max_iter, "ftol": tol, "gtol": 1e-10})
    z = res.x if res.fun <= f(z0)[0] else z0
    A, B = z[: s * p].reshape(s, p), z[s * p:].reshape(s, p)
    P = _psd_block(C - A.T @ B, a)
    return P, A, B, int(res.nit), bool(res.success)


def _subspace(C: np.ndarray, r: int) -> np.ndarray | None:
    """Orthonormal basis (p, k <= 3r) of the top-r eigenvectors of sym(C) and the top-r left and
    right singular vectors of C, or ``None`` when it would not be smaller than the space."""
    p = C.shape[0]
    if 3 * r >= p:
        return None
    _, E = top_eigen(sym(C), r, method="dense")
    U, _, V = top_singular(C, r, method="dense")
    Q, R = np.linalg.qr(np.hstack([E, U, V]))
    keep = np.abs(np.diag(R)) > 1e-10 * max(1.0, float(np.abs(np.diag(R)).max()))
    return Q[:, keep]


def _solve(C: np.ndarray, a: int, s: int, steps: int, max_iter: int, tol: float, restarts: int,
           rng: np.random.Generator):
    """Best end point over the closed-form starts and ``restarts`` random ones."""
    best = None
    sequential = float("nan")
    scale = np.sqrt(max(float(np.linalg.norm(C, 2)), np.finfo(float).tiny) / max(C.shape[0], 1))
    starts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for kind in ("psd", "svd", "shared"):
        P, A, B, first = _alternate(C, a, s, kind, steps)
        if kind == "psd":
            sequential = first
        starts.append((P, A, B))
    p = C.shape[0]
    for _ in range(restarts):
        starts.append(tuple(scale * rng.standard_normal((k, p)) for k in (a, s, s)))
    for P, A, B in starts:
        P, A, B, it, ok = _joint_descent(C, P, A, B, max_iter, tol)
        loss = _loss(C, P, A, B)
        if best is None or loss < best[3]:
            best = (P, A, B, loss, it, ok)
    assert best is not None  # three closed-form starts at least
    return (*best, sequential)


def partial_truncate(
    C: np.ndarray,
    rank: int,
    asymmetric: int,
    *,
    steps: int = 3,
    max_iter: int = 2000,
    tol: float = 1e-13,
    restarts: int = 4,
    seed: int = 0,
) -> PartialTruncation:
    r"""The nearest member found of :math:`\mathcal M_{r,s}` (``s = asymmetric``) to ``C``.

    ``s = 0`` returns Theorem 1's shared truncation :math:`\mathcal P_{s,r}(C)` and ``s = r`` the
    dual one :math:`\mathcal P_{d,r}(C)`, exactly (no iteration).  For ``0 < s < r``: the
    search runs in the span ``Q`` (k <= 3r columns) of the top-r eigenvectors of
    :math:`\mathrm{sym}(C)` and the top-r singular vectors of ``C``, which holds both pure
    optima; for M in that span :math:`\|M - C\|_F^2 = \|Q^\top M Q - Q^\top C Q\|_F^2 +
    \|C\|_F^2 - \|Q^\top C Q\|_F^2`, so the k x k problem is solved and lifted.  Starts: the
    sequential closed form, the asymmetric-first one, the rank-r shared truncation with its s
    weakest directions moved into K (so the result is never worse than shared), and
    ``restarts`` seeded random ones; each is refined by ``steps`` alternating exact block
    steps (the first two) and L-BFGS on all factors, and the lowest end point kept.

    Parameters
    ----------
    C : (p, p) moment.
    rank : r, 1 <= r <= p.
    asymmetric : s, 0 <= s <= r, the asymmetric directions.
    steps : alternating exact block steps that refine each closed-form start, >= 0.
    max_iter : L-BFGS iterations of the joint descent from each start.
    tol : the descent stops when a step lowers the loss by at most ``tol * ||C||_F^2``.
    restarts : random starts besides the three closed-form ones, >= 0.
    seed : seeds the random starts.
    """
    C = as_float_matrix(C, "C")
    check_square(C, "C")
    r = check_rank(rank, C.shape[0])
    if isinstance(asymmetric, bool) or not isinstance(asymmetric, (int, np.integer)) or not 0 <= asymmetric <= r:
        raise ValueError(f"asymmetric: expected an integer s in [0, rank = {r}], got {asymmetric!r}")
    for name, v in (("steps", steps), ("max_iter", max_iter), ("restarts", restarts)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{name}: expected a non-negative integer, got {v!r}")
    s, a = int(asymmetric), r - int(asymmetric)
    if s in (0, r):
        P = _psd_block(C, a)
        A, B = _svd_block(C, s)
        loss = _loss(C, P, A, B)
        return PartialTruncation(P, A, B, loss, loss, 0, True, r, s)
    Q = _subspace(C, r)
    Ck = C if Q is None else Q.T @ C @ Q
    rng = np.random.default_rng(np.random.SeedSequence(int(seed)))
    with limit_blas_threads(1):  # thousands of k x k products: threads cost 30x here
        P, A, B, _, it, ok, sequential = _solve(Ck, a, s, int(steps), int(max_iter), float(tol), int(restarts), rng)
    P, A, B = _rebalance(P, A, B)
    if Q is not None:
        P, A, B = P @ Q.T, A @ Q.T, B @ Q.T
        sequential = _loss(C, *_alternate(C, a, s, "psd", 0)[:3])
    return PartialTruncation(P, A, B, _loss(C, P, A, B), sequential, it, ok, r, s)


def _rebalance(P: np.ndarray, A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same ``S = P^T P`` and ``K = A^T B`` in canonical factors: P's rows the scaled
    eigenvectors of S, (A, B) the balanced factors of K's SVD."""
    a, s = P.shape[0], A.shape[0]
    if a:
        w, U = np.linalg.eigh(P.T @ P)
        keep = np.argsort(w)[::-1][:a]
        P = (U[:, keep] * np.sqrt(np.maximum(w[keep], 0.0))).T
    if s:
        Qa, Ra = np.linalg.qr(A.T)
        Qb, Rb = np.linalg.qr(B.T)
        u, sv, vt = np.linalg.svd(Ra @ Rb.T)
        root = np.sqrt(sv)
        A, B = ((Qa @ u) * root).T, ((Qb @ vt.T) * root).T
    return P, A, B


def sharing_grid(rank: int, points: int = 5) -> list[int]:
    """``points`` asymmetric counts spread evenly over [0, rank], always with 0 and ``rank``
    (the two pure families); all of 0..rank when ``rank < points``."""
    if rank < 1:
        raise ValueError(f"rank: expected a positive integer, got {rank!r}")
    if points < 2:
        raise ValueError(f"points: expected at least 2, got {points!r}")
    return sorted({int(round(v)) for v in np.linspace(0, rank, min(points, rank + 1))})


@dataclass(frozen=True)
class SharingChoice:
    """Outcome of :func:`cross_fitted_sharing`.

    Attributes
    ----------
    asymmetric : the chosen ``s``.
    grid : the ``s`` values tried.
    losses : (folds, len(grid)) held-out normalised operator losses.
    mean, standard_error : (len(grid),) over folds.
    best : the ``s`` of the lowest mean loss (before the one-SE rule).
    rank, folds, seed : the settings.
    """

    asymmetric: int
    grid: list[int]
    losses: np.ndarray
    mean: np.ndarray
    standard_error: np.ndarray
    best: int
    rank: int
    folds: int
    seed: int

    def as_dict(self) -> dict[str, object]:
        return {"asymmetric": self.asymmetric, "grid": list(self.grid), "mean": [float(v) for v in self.mean],
                "standard_error": [float(v) for v in self.standard_error], "best": self.best, "rank": self.rank,
                "folds": self.folds, "seed": self.seed}


def cross_fitted_sharing(
    X: np.ndarray,
    D: np.ndarray,
    rank: int,
    *,
    grid: Sequence[int] | None = None,
    folds: int = 5,
    seed: int = 0,
    max_iter: int = 200,
    restarts: int = 4,
) -> SharingChoice:
    r"""Choose the number of asymmetric directions ``s`` by cross-fitting.

    Rows are permuted with ``seed`` and cut into ``folds`` near-equal folds; for fold k,
    :math:`\widehat C_{-k}` (the other folds' moment) is fitted at every ``s`` in ``grid`` by
    :func:`partial_truncate` and scored by the normalised held-out loss against fold k's moment
    :math:`M_k`.  The choice is the smallest ``s`` whose mean loss is at most the best mean plus
    the best's standard error (:math:`s_L/\sqrt K`; one-SE rule toward sharing).

    Parameters
    ----------
    X, D : (n, p) training queries and ``Y_pos - Y_neg`` (moment :math:`X^\top D / n`).
    rank : r.
    grid : the ``s`` values (each in [0, r]); default :func:`sharing_grid` of r.
    folds : K, 2 <= K <= n.
    seed : seeds the row permutation.
    max_iter : L-BFGS iterations of each fit (:func:`partial_truncate`).
    restarts : random starts of each fit besides its three closed-form ones (:func:`partial_truncate`).
    """
    X = as_float_matrix(X, "X")
    D = as_float_matrix(D, "D")
    check_same_shape({"X": X, "D": D})
    n, p = X.shape
    r = check_rank(rank, p)
    values = sharing_grid(r) if grid is None else sorted({int(v) for v in grid})
    if not values or values[0] < 0 or values[-1] > r:
        raise ValueError(f"grid: expected values of s in [0, {r}], got {list(grid or [])!r}")
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or not 2 <= folds <= n:
        raise ValueError(f"folds: expected an integer in [2, n = {n}], got {folds!r}")
    order = np.random.default_rng(np.random.SeedSequence(int(seed))).permutation(n)
    parts = np.array_split(order, int(folds))
    total = X.T @ D
    losses = np.empty((len(parts), len(values)))
    for k, part in enumerate(parts):
        held = X[part].T @ D[part]
        C_train = (total - held) / (n - part.size)
        M_k = held / part.size
        for j, s in enumerate(values):
            fit = partial_truncate(C_train, r, s, max_iter=max_iter, restarts=restarts)
            losses[k, j] = heldout_loss(fit.operator, M_k)
    mean = losses.mean(axis=0)
    se = losses.std(axis=0, ddof=1) / np.sqrt(losses.shape[0])
    best = values[int(np.argmin(mean))]
    return SharingChoice(_one_se_choice(values, mean, se), values, losses, mean, se, int(best), r, int(folds),
                         int(seed))


def _one_se_choice(values: Sequence[int], mean: np.ndarray, se: np.ndarray) -> int:
    """The smallest ``s`` whose mean loss is at most the best mean plus the best's standard error."""
    j = int(np.argmin(mean))
    return int(next(s for s, m in zip(values, mean, strict=True) if m <= mean[j] + se[j]))
