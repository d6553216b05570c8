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

from typing import Callable

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


def _block_lanczos(
    apply: Callable[[np.ndarray], np.ndarray],
    p: int,
    r: int,
    start: np.ndarray | None,
    allowed: Callable[[np.ndarray, float], np.ndarray],
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Top-r algebraic eigenpairs of the symmetric operator ``apply`` on R^p.

    Block Krylov space ``[W, AW, A^2 W, ...]`` (fully re-orthogonalised), with
    Rayleigh-Ritz extraction.  The answer is accepted when every Ritz residual
    ``||A x - t x||`` is at most ``allowed(ritz_values, spectral_scale)``.  Rayleigh-Ritz
    is only done at checkpoints, placed by extrapolating the observed convergence
    rate.  Returns None when the basis would exceed p/2 columns (the caller goes dense).
    """
    b = max(2 * r, r + 8)
    omega = rng.standard_normal((p, b))
    if start is not None:
        omega = np.concatenate([start, omega[:, : max(b - start.shape[1], 4)]], axis=1)
    Q = _orth_against(None, omega)
    A_last = apply(Q)
    AQ = A_last  # kept alongside Q: each Krylov step costs one application of the operator
    max_dim = p // 2
    history: list[tuple[int, float]] = []  # (steps taken, worst residual ratio)
    steps = 0
    next_check = 0
    while True:
        if steps >= next_check:
            T = Q.T @ AQ
            w_all, Z_all = np.linalg.eigh((T + T.T) / 2)
            scale = max(abs(float(w_all[0])), abs(float(w_all[-1])))
            w, Z = w_all[::-1][:r], Z_all[:, ::-1][:, :r]
            X = Q @ Z
            if scale == 0:
                return w, X
            resid = np.linalg.norm(AQ @ Z - X * w, axis=0)
            ratio = float(np.max(resid / np.maximum(allowed(w, scale), 1e-300)))
            if ratio <= 1.0:
                return w, X
            history.append((steps, ratio))
            jump = 1
            if len(history) >= 2:
                (s0, r0), (s1, r1) = history[-2], history[-1]
                if 0 < r1 < r0:
                    rate = (r1 / r0) ** (1.0 / max(s1 - s0, 1))
                    jump = int(np.clip(np.ceil(np.log(r1) / -np.log(rate)), 1, 4))
            next_check = steps + jump
        W = _orth_against(Q, A_last)
        if W.shape[1] == 0 or Q.shape[1] + W.shape[1] > max_dim:
            return None
        A_last = apply(W)
        Q = np.concatenate([Q, W], axis=1)
        AQ = np.concatenate([AQ, A_last], axis=1)
        steps += 1


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

    ``method``: ``"dense"`` (LAPACK gesdd), ``"krylov"`` (certified block Lanczos on
    ``C^T C``, falling back to dense) or ``"auto"`` (Krylov when ``r <= p/4``).
    ``start`` (q, b) seeds the right Krylov block (e.g. the full-data right singular
    vectors when truncating many perturbed copies of one matrix).  The Krylov answer
    is accepted only if ``||C^T u - s v|| <= tol * s_1`` for every triplet
    (``C v = s u`` holds by construction), and only if ``s_r > 1e-6 s_1``.
    """
    p, q = C.shape
    if method == "dense" or (method == "auto" and r > min(p, q) * _DENSE_SWITCH) or 4 * r + 16 > min(p, q):
        return _dense_singular(C, r)
    rng = rng if rng is not None else np.random.default_rng(0)
    # Lanczos on C^T C.  For a Ritz pair (theta, v) with s = sqrt(theta) and u = C v / s,
    # C v = s u holds exactly and ||C^T u - s v|| = ||C^T C v - theta v|| / s: certify that.
    def allowed(theta: np.ndarray, scale: float) -> np.ndarray:
        s = np.sqrt(np.maximum(theta, 0.0))
        return tol * s * np.sqrt(scale)

    out = _block_lanczos(lambda W: C.T @ (C @ W), q, r, start, allowed, rng)
    if out is not None:
        theta, V = out
        s = np.sqrt(np.maximum(theta, 0.0))
        if s[-1] > 1e-6 * s[0]:
            return (C @ V) / s, s, V
    return _dense_singular(C, r)


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

    Same ``method``/``start`` conventions as :func:`top_singular`; the Krylov answer is
    accepted only if ``||S x - t x|| <= tol * ||S||_2`` for every pair.
    """
    p = S.shape[0]
    if method == "dense" or (method == "auto" and r > p * _DENSE_SWITCH) or 4 * r + 16 > p:
        return _dense_eigen(S, r)
    rng = rng if rng is not None else np.random.default_rng(1)
    def allowed(w: np.ndarray, scale: float) -> np.ndarray:
        return np.full_like(w, tol * scale)

    out = _block_lanczos(lambda W: S @ W, p, r, start, allowed, rng)
    return out if out is not None else _dense_eigen(S, r)
