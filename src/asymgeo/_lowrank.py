"""Top-r spectral solvers: thin factors, subset LAPACK and a certified block-Krylov path.

The closed forms of the paper need only the leading ``r`` singular triplets of the
relevance moment (dual, rank-r SVD truncation) and the leading ``r`` algebraic
eigenpairs of its symmetric part (shared, positive eigen-truncation).  Three fast
paths use that structure; each answer is *certified* by its residual
``||C^T u - s v|| <= tol * s_1`` (resp. ``||S q - t q|| <= tol * ||S||``), and when a
certificate fails the solver falls back to a full LAPACK decomposition, so no fast
path ever returns an unconverged truncation.

``thin`` (singular values)
    A moment of ``m`` triples, ``C = c X^T D`` with ``X, D`` of shape (m, p), has rank
    at most ``m``.  With the Cholesky factor ``X X^T = L L^T`` the columns of
    ``Q = X^T L^{-T}`` are orthonormal and ``C = Q (c L^T D)``, so the top-r SVD of ``C``
    follows from the top-r eigenpairs of the (m, m) core ``c^2 L^T (D D^T) L``: a few
    (m, m) factorisations instead of (p, p) ones when ``m < p`` (half-splits of a few
    hundred real triples at p = 768).
``subset`` (LAPACK with an index range)
    ``scipy.linalg.eigh(subset_by_index=...)`` (syevr) computes only the wanted ``r``
    eigenvectors after the tridiagonal reduction: about a third of a full syevd at
    p = 768, r = 16.  Used for ``sym(C)`` and for the Gram matrix ``C^T C``.
``krylov``
    Block Lanczos with Rayleigh-Ritz extraction and warm starts.  Fast when the
    spectrum has a clear gap at ``r`` (it converges in a few blocks); on spectra
    without one (real embeddings) it would need more than p/2 basis columns, so
    ``method="auto"`` here does not use it: only ``method="krylov"`` does, and CARS
    chooses it after a probe on the full-data moment (:func:`krylov_suits`).

:func:`path_counts` reports how often each path answered (for benchmarks and tests).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import numpy as np

__all__ = ["top_singular", "top_eigen", "krylov_suits", "path_counts", "reset_path_counts"]

_COUNTS: Counter[str] = Counter()
_COUNTS_LOCK = threading.Lock()


def _count(path: str) -> None:
    with _COUNTS_LOCK:
        _COUNTS[path] += 1


def path_counts() -> dict[str, int]:
    """How often each solver path answered since the last :func:`reset_path_counts`.

    Keys: ``"singular:<path>"`` and ``"eigen:<path>"`` with ``<path>`` one of ``thin``,
    ``krylov``, ``gram`` (certified subset eigh of ``C^T C``), ``subset``, ``full``
    (a full LAPACK decomposition, including every fallback) and, for Krylov attempts
    that did not certify, ``krylov_failed``.
    """
    with _COUNTS_LOCK:
        return dict(_COUNTS)


def reset_path_counts() -> None:
    """Set every counter of :func:`path_counts` back to zero."""
    with _COUNTS_LOCK:
        _COUNTS.clear()

# A subset eigensolver computes r of p eigenvectors; above about p/3 a full syevd is as cheap.
_SUBSET_MAX_FRACTION = 1.0 / 3.0


def _use_krylov(method: str, r: int, p: int) -> bool:
    if method not in ("auto", "dense", "krylov"):
        raise ValueError(f"method: expected 'auto', 'dense' or 'krylov', got {method!r}")
    # only on request: without a spectral gap at r (real embeddings) the basis outgrows p/2
    # and the attempt costs more than the dense answer it falls back to
    return method == "krylov" and 4 * r + 16 <= p


def _top_eigh(S: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray, str]:
    """The r largest eigenpairs of symmetric S (descending) and the path that ran."""
    p = S.shape[0]
    if r < p * _SUBSET_MAX_FRACTION:
        from scipy.linalg import eigh

        w, Q = eigh(S, subset_by_index=[p - r, p - 1], driver="evr", check_finite=False)
        return w[::-1], Q[:, ::-1], "subset"
    w, Q = np.linalg.eigh(S)
    return w[::-1][:r], Q[:, ::-1][:, :r], "full"


def _full_singular(C: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    _count("singular:full")
    U, s, Vt = np.linalg.svd(C, full_matrices=False)
    return U[:, :r], s[:r], Vt[:r].T


def _dense_singular(C: np.ndarray, r: int, tol: float = 1e-11) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-r SVD from the top-r eigenpairs of the Gram matrix ``C^T C`` (LAPACK, index subset).

    Certified like the other paths (``||C^T u - s v|| <= tol * s_1``, ``s_r > 1e-6 s_1``);
    otherwise the full gesdd SVD is used.
    """
    p, q = C.shape
    if r == min(p, q) or q > 2 * p:
        return _full_singular(C, r)
    theta, V, _ = _top_eigh(C.T @ C, r)
    s = np.sqrt(np.maximum(theta, 0.0))
    if s[0] == 0 or s[-1] <= 1e-6 * s[0]:
        return _full_singular(C, r)
    U = (C @ V) / s
    resid = np.linalg.norm(C.T @ U - V * s, axis=0)
    if np.all(resid <= tol * s[0]):
        _count("singular:gram")
        return U, s, V
    return _full_singular(C, r)


def _thin_singular(
    A: np.ndarray, B: np.ndarray, scale: float, r: int, tol: float,
    grams: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Top-r SVD of ``C = scale * A^T B`` (A (m, p), B (m, q), m small) from an (m, m) core.

    With an orthonormal basis ``Q`` of the row space of ``A`` and ``A^T = Q R``,
    ``C = Q K`` with ``K = scale * R B`` (m, q); the top eigenpairs ``(s^2, y)`` of
    ``K K^T`` give ``u = Q y`` and ``v = K^T y / s``.  The basis comes from the Cholesky
    factor ``A A^T = L L^T`` (``Q = A^T L^{-T}``, ``R = L^T``: cheapest) and, when that
    fails its certificate (repeated or nearly dependent rows of ``A``), from a Householder
    QR of ``A^T`` (stable for any rank).  With the Gram matrices ``grams = (A A^T, B B^T)``
    given (e.g. sub-blocks of the full-data ones), the Cholesky core is
    ``scale^2 L^T (B B^T) L``: (m, m) work only.  Returns None (caller goes dense) unless both
    residuals ``||C v - s u||`` and ``||C^T u - s v||`` are at most ``tol * s_1``, both
    bases are orthonormal to 1e-9 and ``s_r > 1e-6 s_1``.
    """
    from scipy.linalg import solve_triangular

    for basis in ("cholesky", "householder"):
        if basis == "cholesky":
            try:
                L = np.linalg.cholesky(A @ A.T if grams is None else grams[0])
            except np.linalg.LinAlgError:
                continue
            if grams is None:
                K = scale * (L.T @ B)
                core = K @ K.T
            else:
                core = scale**2 * (L.T @ grams[1] @ L)
        else:
            Qh, Rh = np.linalg.qr(A.T)
            K = scale * (Rh @ B)
            core = K @ K.T
        theta, Y, _ = _top_eigh(core, r)
        s = np.sqrt(np.maximum(theta, 0.0))
        if not np.all(np.isfinite(s)) or s[0] == 0 or s[-1] <= 1e-6 * s[0]:
            return None
        if basis == "cholesky":
            V = (scale * (B.T @ (L @ Y))) / s  # K^T y = scale B^T L y
            U = A.T @ solve_triangular(L, Y, trans="T", lower=True, check_finite=False)
        else:
            V = (K.T @ Y) / s
            U = Qh @ Y
        eye = np.eye(r)
        if max(np.abs(U.T @ U - eye).max(), np.abs(V.T @ V - eye).max()) > 1e-9:
            continue
        right = np.linalg.norm(scale * (A.T @ (B @ V)) - U * s, axis=0)
        left = np.linalg.norm(scale * (B.T @ (A @ U)) - V * s, axis=0)
        if np.all(right <= tol * s[0]) and np.all(left <= tol * s[0]):
            return U, s, V
    return None


def _dense_eigen(S: np.ndarray, r: int, tol: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """Top-r eigenpairs by LAPACK (index subset when r is small), certified by the residual.

    The subset answer is accepted when ``||S q - t q|| <= tol * ||S||_F`` for every pair
    (``||S||_F >= ||S||_2``); otherwise the full syevd is used.
    """
    w, Q, path = _top_eigh(S, r)
    if path == "subset":
        resid = np.linalg.norm(S @ Q - Q * w, axis=0)
        scale = max(float(np.linalg.norm(S)), 1e-300)  # ||S||_F >= ||S||_2
        if np.all(np.isfinite(resid)) and np.all(resid <= tol * scale):
            _count("eigen:subset")
            return w, Q
        w_all, Q_all = np.linalg.eigh(S)
        w, Q = w_all[::-1][:r], Q_all[:, ::-1][:, :r]
    _count("eigen:full")
    return w, Q


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
    max_dim: int | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Top-r algebraic eigenpairs of the symmetric operator ``apply`` on R^p.

    Block Krylov space ``[W, AW, A^2 W, ...]`` (fully re-orthogonalised), with
    Rayleigh-Ritz extraction.  The answer is accepted when every Ritz residual
    ``||A x - t x||`` is at most ``allowed(ritz_values, spectral_scale)``.  Rayleigh-Ritz
    is only done at checkpoints, placed by extrapolating the observed convergence
    rate, and always once more on the largest basis allowed.  Returns None when the
    basis would exceed ``max_dim`` (at most p/2) columns (the caller goes dense).
    """
    b = max(2 * r, r + 8)
    omega = rng.standard_normal((p, b))
    if start is not None:
        omega = np.concatenate([start, omega[:, : max(b - start.shape[1], 4)]], axis=1)
    Q = _orth_against(None, omega)
    A_last = apply(Q)
    AQ = A_last  # kept alongside Q: each Krylov step costs one application of the operator
    max_dim = p // 2 if max_dim is None else min(max_dim, p // 2)
    history: list[tuple[int, float]] = []  # (steps taken, worst residual ratio)
    steps = 0
    next_check = 0
    at_cap = False
    while True:
        if steps >= next_check or at_cap:
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
            if at_cap:  # checked at the largest basis allowed: give up (caller goes dense)
                return None
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
            if steps == history[-1][0]:  # the current basis was just checked
                return None
            at_cap = True  # one last Rayleigh-Ritz check of the basis built so far
            continue
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
    factors: tuple[np.ndarray, np.ndarray, float] | None = None,
    grams: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Leading ``r`` singular triplets of ``C`` (p, q): ``U (p, r), s (r,), V (q, r)``.

    ``method``: ``"auto"`` or ``"dense"`` (the thin-factor core when ``factors`` are
    given and have fewer than ``3/4 min(p, q)`` rows, else the subset eigh of ``C^T C``;
    both certified, else a full gesdd SVD), or ``"krylov"`` (certified block Lanczos on
    ``C^T C``, falling back to dense).
    ``factors = (A, B, c)`` with ``C == c * A^T B`` (A (m, p), B (m, q)) describe a
    moment of m triples; ``grams = (A A^T, B B^T)`` may pass their Gram matrices when
    already known (they are then trusted: the answer is still certified against ``C``).
    ``start`` (q, b) seeds the right Krylov block (e.g. the full-data right singular
    vectors when truncating many perturbed copies of one matrix).  An answer is
    accepted only if ``||C^T u - s v|| <= tol * s_1`` for every triplet
    (``C v = s u`` holds by construction), and only if ``s_r > 1e-6 s_1``.
    """
    p, q = C.shape
    if _use_krylov(method, r, min(p, q)):
        out = _krylov_singular(C, r, start, tol, rng)
        if out is not None:
            return out
    elif factors is not None:
        A, B, c = factors
        if A.shape != (A.shape[0], p) or B.shape != (A.shape[0], q):
            raise ValueError(f"factors: shapes {A.shape}, {B.shape} do not factor C of shape {C.shape}")
        if 4 * A.shape[0] <= 3 * min(p, q) and r < A.shape[0]:
            thin = _thin_singular(A, B, float(c), r, tol, grams)
            if thin is not None:
                _count("singular:thin")
                return thin
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

    ``method``: ``"auto"``/``"dense"`` (LAPACK syevr on an index subset when
    ``r < p/3``, certified by ``||S x - t x|| <= tol * ||S||_F``, else full syevd) or
    ``"krylov"`` (block Lanczos seeded with ``start``; accepted only if
    ``||S x - t x|| <= tol * ||S||_2`` for every pair, else dense).
    """
    p = S.shape[0]
    if _use_krylov(method, r, p):
        out = _krylov_eigen(S, r, start, tol, rng)
        if out is not None:
            return out
    return _dense_eigen(S, r)


def _krylov_singular(
    C: np.ndarray, r: int, start: np.ndarray | None, tol: float, rng: np.random.Generator | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Certified block Lanczos on ``C^T C``; None (counted) when it does not certify."""
    rng = rng if rng is not None else np.random.default_rng(0)

    # For a Ritz pair (theta, v) with s = sqrt(theta) and u = C v / s, C v = s u holds
    # exactly and ||C^T u - s v|| = ||C^T C v - theta v|| / s: certify that.
    def allowed(theta: np.ndarray, scale: float) -> np.ndarray:
        s = np.sqrt(np.maximum(theta, 0.0))
        return tol * s * np.sqrt(scale)

    out = _block_lanczos(lambda W: C.T @ (C @ W), C.shape[1], r, start, allowed, rng)
    if out is not None:
        theta, V = out
        s = np.sqrt(np.maximum(theta, 0.0))
        if s[-1] > 1e-6 * s[0]:
            _count("singular:krylov")
            return (C @ V) / s, s, V
    _count("singular:krylov_failed")
    return None


def _krylov_eigen(
    S: np.ndarray, r: int, start: np.ndarray | None, tol: float, rng: np.random.Generator | None,
    max_dim: int | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Certified block Lanczos for the top-r algebraic eigenpairs; None (counted) if not certified."""
    rng = rng if rng is not None else np.random.default_rng(1)

    def allowed(w: np.ndarray, scale: float) -> np.ndarray:
        return np.full_like(w, tol * scale)

    out = _block_lanczos(lambda W: S @ W, S.shape[0], r, start, allowed, rng, max_dim)
    if out is not None:
        _count("eigen:krylov")
        return out
    _count("eigen:krylov_failed")
    return None


# A Krylov probe is worth its cost only for large operators and small wanted blocks.
_KRYLOV_MIN_DIM = 512
_KRYLOV_MAX_FRACTION = 1.0 / 16.0
_PROBE_BLOCKS = 7


def krylov_suits(C: np.ndarray, r: int, tol: float = 1e-10) -> bool:
    """Whether the certified block-Krylov solver answers for ``C`` at rank ``r``.

    A probe for many truncations of perturbed copies of ``C`` (CARS' half moments): runs
    Krylov, without a warm start, for the top-r eigenpairs of ``sym(C)`` (the harder
    problem for it: the spectrum has two ends, and the SVD of the copies gets warm starts);
    True if that certifies within a basis of 7 blocks (a cheap probe; a gap of 100x at r
    needs about 6).  Spectra with a clear gap at ``r``
    pass (then Krylov beats LAPACK); real embedding moments, without one, fail and should
    go dense.  False at once when ``p < 512`` or ``r > p/16``.
    """
    p = min(C.shape)
    if C.shape[0] != C.shape[1] or p < _KRYLOV_MIN_DIM or r > p * _KRYLOV_MAX_FRACTION or 4 * r + 16 > p:
        return False
    block = max(2 * r, r + 8)  # _block_lanczos' block size
    return _krylov_eigen((C + C.T) / 2.0, r, None, tol, None, max_dim=_PROBE_BLOCKS * block) is not None
