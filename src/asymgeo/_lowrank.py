"""Top-r spectral solvers: dense LAPACK and a certified block-Krylov fast path.

The closed forms of the paper need only the leading ``r`` singular triplets of the
relevance moment (dual, rank-r SVD truncation) and the leading ``r`` algebraic
eigenpairs of its symmetric part (shared, positive eigen-truncation).  For
``r << p`` a block Krylov subspace with Rayleigh-Ritz extraction gives them for a
few matrix products.  Every Krylov answer is *certified* by its residual
``||C v - s u|| <= tol * s_1`` (resp. ``||S q - t q|| <= tol * ||S||``); when the
certificate fails the solver falls back to the dense LAPACK routine, so the fast
path never returns an unconverged truncation.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

__all__ = ["top_singular", "top_eigen"]

_DENSE_SWITCH = 0.25  # use dense LAPACK when r > p * _DENSE_SWITCH


def _dense_singular(C: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    U, s, Vt = sla.svd(C, full_matrices=False, check_finite=False, lapack_driver="gesdd")
    return U[:, :r], s[:r], Vt[:r].T


def _dense_eigen(S: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
    p = S.shape[0]
    w, Q = sla.eigh(S, subset_by_index=[p - r, p - 1], check_finite=False)
    return w[::-1], Q[:, ::-1]


def _orth_against(Q: np.ndarray | None, W: np.ndarray) -> np.ndarray:
    """Orthonormalise the columns of W against Q (twice, for stability) and themselves."""
    for _ in range(2):
        if Q is not None and Q.shape[1]:
            W = W - Q @ (Q.T @ W)
    Wq, R = np.linalg.qr(W)
    keep = np.abs(np.diag(R)) > 1e-12 * max(1.0, float(np.abs(R).max(initial=0.0)))
    return Wq[:, keep]


def top_singular(
    C: np.ndarray,
    r: int,
    *,
    start: np.ndarray | None = None,
    method: str = "auto",
    tol: float = 1e-11,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Leading ``r`` singular triplets of ``C`` (p, q): ``U (p, r), s (r,), V (q, r)``.

    ``method``: ``"dense"`` (LAPACK gesdd), ``"krylov"`` (certified block Krylov,
    falling back to dense) or ``"auto"`` (Krylov when ``r <= p/4``).
    ``start`` (q, b) seeds the right Krylov block (e.g. the full-data singular
    vectors when truncating many perturbed copies of one matrix).
    """
    p, q = C.shape
    if method == "dense" or (method == "auto" and r > min(p, q) * _DENSE_SWITCH):
        return _dense_singular(C, r)
    if 2 * (r + 8) > min(p, q):
        return _dense_singular(C, r)
    rng = rng if rng is not None else np.random.default_rng(0)
    b = r + 8
    omega = rng.standard_normal((q, b))
    if start is not None:
        omega = np.concatenate([start, omega[:, : max(b - start.shape[1], 4)]], axis=1)
    Q = _orth_against(None, C @ omega)
    block = Q
    max_dim = min(p, q) // 2
    while True:
        B = Q.T @ C  # (k, q)
        Ub, s, Vbt = np.linalg.svd(B, full_matrices=False)
        U = Q @ Ub[:, :r]
        V = Vbt[:r].T
        s = s[:r]
        if s.size == r and s[0] > 0:
            resid = np.linalg.norm(C @ V - U * s, axis=0)
            if np.all(resid <= tol * s[0]):
                return U, s, V
        elif s.size == r and s[0] == 0:
            return U, s, V
        if Q.shape[1] + block.shape[1] > max_dim or block.shape[1] == 0:
            return _dense_singular(C, r)
        block = _orth_against(Q, C @ (C.T @ block))
        Q = np.concatenate([Q, block], axis=1)


def top_eigen(
    S: np.ndarray,
    r: int,
    *,
    start: np.ndarray | None = None,
    method: str = "auto",
    tol: float = 1e-11,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``r`` algebraically largest eigenpairs of symmetric ``S`` (p, p), descending.

    Same ``method``/``start`` conventions as :func:`top_singular`.
    """
    p = S.shape[0]
    if method == "dense" or (method == "auto" and r > p * _DENSE_SWITCH):
        return _dense_eigen(S, r)
    if 2 * (r + 8) > p:
        return _dense_eigen(S, r)
    rng = rng if rng is not None else np.random.default_rng(1)
    b = r + 8
    omega = rng.standard_normal((p, b))
    if start is not None:
        omega = np.concatenate([start, omega[:, : max(b - start.shape[1], 4)]], axis=1)
    Q = _orth_against(None, omega)
    block = Q
    max_dim = p // 2
    while True:
        block = _orth_against(Q, S @ block)
        Q = np.concatenate([Q, block], axis=1)
        T = Q.T @ S @ Q
        w_all, Z_all = np.linalg.eigh((T + T.T) / 2)
        scale = max(abs(float(w_all[0])), abs(float(w_all[-1])))
        w, Z = w_all[::-1][:r], Z_all[:, ::-1][:, :r]
        X = Q @ Z
        if scale == 0:
            return w, X
        resid = np.linalg.norm(S @ X - X * w, axis=0)
        if np.all(resid <= tol * scale):
            return w, X
        if Q.shape[1] + block.shape[1] > max_dim or block.shape[1] == 0:
            return _dense_eigen(S, r)
