"""Top-r spectral solvers: dense LAPACK and a certified block-Krylov fast path.

The closed forms of the paper need only the leading ``r`` singular triplets of the
relevance moment (dual, rank-r SVD truncation) and the leading ``r`` algebraic
eigenpairs of its symmetric part (shared, positive eigen-truncation).  For
``r << p`` a block Krylov subspace with Rayleigh-Ritz extraction gives them for a
few matrix products.  Every Krylov answer is *certified* by its residual
``||C^T u - s v|| <= tol * s_1`` (resp. ``||S q - t q|| <= tol * ||S||``); when the
certificate fails the solver falls back to the dense LAPACK routine, so the fast
path never returns an unconverged truncation.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["top_singular", "top_eigen"]

# Krylov pays off only when the operator is large and the wanted block small
# (measured in benchmarks/bench_cars.py); otherwise LAPACK with an index subset wins.
_KRYLOV_MIN_DIM = 512
_KRYLOV_MAX_FRACTION = 1.0 / 16.0


def _use_krylov(method: str, r: int, p: int) -> bool:
    if method == "dense":
        return False
    if 4 * r + 16 > p:  # the Krylov basis would not fit in p/2 columns
        return False
    if method == "krylov":
        return True
    if method != "auto":
        raise ValueError(f"method: expected 'auto', 'dense' or 'krylov', got {method!r}")
    return p >= _KRYLOV_MIN_DIM and r <= p * _KRYLOV_MAX_FRACTION


def _full_singular(C: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    U, s, Vt = np.linalg.svd(C, full_matrices=False)
    return U[:, :r], s[:r], Vt[:r].T


def _dense_singular(C: np.ndarray, r: int, tol: float = 1e-11) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-r SVD from the top-r eigenpairs of the Gram matrix ``C^T C`` (LAPACK syevd).

    Certified like the Krylov path (``||C^T u - s v|| <= tol * s_1``, ``s_r > 1e-6 s_1``);
    otherwise the full gesdd SVD is used.
    """
    p, q = C.shape
    if r == min(p, q) or q > 2 * p:
        return _full_singular(C, r)
    theta, V = np.linalg.eigh(C.T @ C)
    theta, V = theta[::-1][:r], V[:, ::-1][:, :r]
    s = np.sqrt(np.maximum(theta, 0.0))
    if s[0] == 0 or s[-1] <= 1e-6 * s[0]:
        return _full_singular(C, r)
    U = (C @ V) / s
    resid = np.linalg.norm(C.T @ U - V * s, axis=0)
    if np.all(resid <= tol * s[0]):
        return U, s, V
    return _full_singular(C, r)


def _dense_eigen(S: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
    # numpy's full syevd, not scipy's index-subset syevr: scipy ships its own OpenBLAS,
    # and alternating two BLAS thread pools in the CARS loop costs more than the subset saves.
    w, Q = np.linalg.eigh(S)
    return w[::-1][:r], Q[:, ::-1][:, :r]


def _orth_against(Q: np.ndarray | None, W: np.ndarray) -> np.ndarray:
    """Orthonormalise the columns of W against Q and among themselves.

    Two rounds of block Gram-Schmidt against Q, then CholeskyQR2 (two Cholesky
    factorisations of the small Gram matrix, far cheaper than Householder QR for tall
    blocks); rank-deficient blocks fall back to Householder QR and drop dependent columns.
    """
    for _ in range(2):
        if Q is not None and Q.shape[1]:
            W = W - Q @ (Q.T @ W)
    try:
        for _ in range(2):
            L = np.linalg.cholesky(W.T @ W)  # W^T W = L L^T, so W L^{-T} is orthonormal
            # numpy only: scipy ships its own OpenBLAS, and alternating the two thread
            # pools in a tight loop makes them spin against each other.
            W = W @ np.linalg.inv(L).T
        if Q is not None and Q.shape[1] and np.abs(Q.T @ W).max() > 1e-10:
            raise np.linalg.LinAlgError("lost orthogonality")
        return W
    except np.linalg.LinAlgError:
        pass
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
    tol: float = 1e-10,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Leading ``r`` singular triplets of ``C`` (p, q): ``U (p, r), s (r,), V (q, r)``.

    ``method``: ``"dense"`` (LAPACK syevd of ``C^T C``, certified, else gesdd),
    ``"krylov"`` (certified block Lanczos on ``C^T C``, falling back to dense) or
    ``"auto"`` (Krylov when ``p >= 512`` and ``r <= p/16``).
    ``start`` (q, b) seeds the right Krylov block (e.g. the full-data right singular
    vectors when truncating many perturbed copies of one matrix).  The Krylov answer
    is accepted only if ``||C^T u - s v|| <= tol * s_1`` for every triplet
    (``C v = s u`` holds by construction), and only if ``s_r > 1e-6 s_1``.
    """
    p, q = C.shape
    if not _use_krylov(method, r, min(p, q)):
        return _dense_singular(C, r, tol)
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
    return _dense_singular(C, r, tol)


def top_eigen(
    S: np.ndarray,
    r: int,
    *,
    start: np.ndarray | None = None,
    method: str = "auto",
    tol: float = 1e-10,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``r`` algebraically largest eigenpairs of symmetric ``S`` (p, p), descending.

    Same ``method``/``start`` conventions as :func:`top_singular`; the Krylov answer is
    accepted only if ``||S x - t x|| <= tol * ||S||_2`` for every pair.
    """
    p = S.shape[0]
    if not _use_krylov(method, r, p):
        return _dense_eigen(S, r)
    rng = rng if rng is not None else np.random.default_rng(1)
    def allowed(w: np.ndarray, scale: float) -> np.ndarray:
        return np.full_like(w, tol * scale)

    out = _block_lanczos(lambda W: S @ W, p, r, start, allowed, rng)
    return out if out is not None else _dense_eigen(S, r)
