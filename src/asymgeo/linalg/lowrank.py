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
from dataclasses import dataclass

import numpy as np

from . import lapack

__all__ = [
    "top_singular", "top_eigen", "top_sym_eigen", "mixed_top_eigen", "mixed_top_singular", "krylov_suits",
    "mixed_probe", "MixedProbe", "path_counts", "reset_path_counts",
]

_COUNTS: Counter[str] = Counter()
_COUNTS_LOCK = threading.Lock()


_INPUTS: Counter[str] = Counter()


def _count(path: str, times: int = 1) -> None:
    with _COUNTS_LOCK:
        _COUNTS[path] += times


def _count_input(what: str) -> None:
    with _COUNTS_LOCK:
        _INPUTS[what] += 1


def path_counts(*, inputs: bool = False) -> dict[str, int]:
    """How often each solver path answered since the last :func:`reset_path_counts`.

    Keys: ``"singular:<path>"`` and ``"eigen:<path>"`` with ``<path>`` one of ``thin``,
    ``krylov``, ``gram`` (certified subset eigh of ``C^T C``), ``mixed`` (:func:`mixed_top_eigen`,
    or for singular triplets :func:`mixed_top_singular`), ``subset``, ``full``
    (a full LAPACK decomposition, including every fallback) and, for Krylov attempts
    that did not certify, ``krylov_failed``.  The batched torch path of CARS
    (:mod:`.batched`) counts ``"batched:torch"`` once per truncated moment and
    ``"batched:singular_full"`` for each of those whose Gram-route SVD did not certify.
    ``inputs=True`` counts what the solvers were given instead of which path answered:
    ``"thin:grams_given"`` / ``"thin:grams_formed"`` (a thin-factor SVD
    attempt that used precomputed Gram blocks, or formed them) and ``"mixed:float32_given"`` /
    ``"mixed:float32_formed"`` (a mixed-precision eigensolve of a moment's factors with its
    float32 symmetric part passed in, or formed by ``ssyr2k``), and ``"thin:householder_retry"``
    (the pivoted-Cholesky core failed its certificate, so a full QR basis answered); CARS's
    second half of a pair (:mod:`.solver_choice`) counts ``"half:moment_by_complement"`` /
    ``"half:moment_formed"`` (its float64 moment from the full one, ``n C = m1 C1 + m2 C2``, when
    the halves cover the data, or formed from its rows) and ``"half:float32_by_complement"`` /
    ``"half:float32_formed"`` (the same for its float32 symmetric part): CARS's accelerations,
    which change the cost and never the answer, are proved to run by these.
    """
    with _COUNTS_LOCK:
        return dict(_INPUTS if inputs else _COUNTS)


def reset_path_counts() -> None:
    """Set every counter of :func:`path_counts` (both kinds) back to zero."""
    with _COUNTS_LOCK:
        _COUNTS.clear()
        _INPUTS.clear()

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
        w, Q = lapack.dsyevr_top(S, r)
        return w[::-1], Q[:, ::-1], "subset"
    w, Q = np.linalg.eigh(S)
    return w[::-1][:r], Q[:, ::-1][:, :r], "full"


def _full_singular(C: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    _count("singular:full")
    U, s, Vt = np.linalg.svd(C, full_matrices=False)
    return U[:, :r], s[:r], Vt[:r].T


def _dense_singular(
    C: np.ndarray, r: int, tol: float = 1e-11, mixed: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-r SVD from the top-r eigenpairs of the Gram matrix ``C^T C`` (LAPACK, index subset;
    with ``mixed`` and ``min(p, q) >= 512`` first :func:`mixed_top_singular`).

    Certified like the other paths (``||C^T u - s v|| <= tol * s_1``, ``s_r > 1e-6 s_1``);
    otherwise the full gesdd SVD is used.
    """
    p, q = C.shape
    if r == min(p, q) or q > 2 * p:
        return _full_singular(C, r)
    if mixed and min(p, q) >= MIXED_SVD_MIN_DIM:
        found = mixed_top_singular(C.astype(np.float32), C, r, tol=tol)
        if found is not None:
            return found
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


def _pivoted_basis(G: np.ndarray) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Pivoted Cholesky ``G[piv][:, piv] = L L^T`` (LAPACK pstrf) of a Gram matrix.

    Returns ``(L (m, k), piv, k)`` with ``k`` the numerical rank, or None on failure.
    Exact duplicate rows (a query with several positives) make ``G`` singular: pivoting
    finds the independent rows instead of failing as a plain Cholesky does.
    """
    try:
        c, piv, k = lapack.dpstrf(G)
    except np.linalg.LinAlgError:
        return None
    if k < 1:
        return None
    return np.tril(c[:, :k]), piv - 1, int(k)


def _thin_core(
    A: np.ndarray, B: np.ndarray, scale: float, r: int,
    grams: tuple[np.ndarray, np.ndarray] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Uncertified top-r SVD of ``scale * A^T B`` from a pivoted-Cholesky basis of A's rows."""
    from scipy.linalg import solve_triangular

    _count_input("thin:grams_given" if grams is not None else "thin:grams_formed")
    basis = _pivoted_basis(A @ A.T if grams is None else grams[0])
    if basis is None or basis[2] <= r:
        return None
    L, piv, k = basis
    # A[piv] = L W with W = L1^{-1} A[piv[:k]] (k, p) orthonormal rows, so
    # C = scale * W^T (L^T B[piv]) and the core is K K^T, K = scale * L^T B[piv].
    if grams is None:
        K = scale * (L.T @ B[piv])
        core = K @ K.T
    else:
        core = _congruence(L, grams[1][np.ix_(piv, piv)], scale**2)
    theta, Y, _ = _top_eigh(core, r)
    s = np.sqrt(np.maximum(theta, 0.0))
    if not np.all(np.isfinite(s)) or s[0] == 0 or s[-1] <= 1e-6 * s[0]:
        return None
    # u = W^T y = A[piv[:k]]^T L1^{-T} y and v = scale B[piv]^T L y / s, written as products
    # with A and B themselves (coefficients scattered back to row order: no row copies)
    coef = np.zeros((A.shape[0], r))
    coef[piv[:k]] = solve_triangular(L[:k], Y, trans="T", lower=True, check_finite=False)
    U = A.T @ coef
    coef[piv] = L @ Y
    V = (scale * (B.T @ coef)) / s
    return U, s, V


def _congruence(L: np.ndarray, H: np.ndarray, c: float) -> np.ndarray:
    """``c L^T H L`` for lower-trapezoidal ``L`` (m, k) and symmetric ``H`` (m, m), using the
    triangular block ``L[:k]`` (BLAS trmm: half the flops of general products)."""
    k = L.shape[1]
    L1 = np.asfortranarray(L[:k])
    M = lapack.dtrmm(1.0, L1, H[:, :k], right=True, transpose=False)  # H[:, :k] L1
    if k < L.shape[0]:
        M += H[:, k:] @ L[k:]
    out = lapack.dtrmm(c, L1, M[:k], right=False, transpose=True)  # c L1^T M[:k]
    if k < L.shape[0]:
        out += c * (L[k:].T @ M[k:])
    return (out + out.T) / 2.0


def _thin_singular(
    A: np.ndarray, B: np.ndarray, scale: float, r: int, tol: float,
    grams: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Top-r SVD of ``C = scale * A^T B`` (A (m, p), B (m, q), m small) from an (k, k) core.

    With a pivoted Cholesky factorisation ``(A A^T)[piv] = L L^T`` of rank ``k`` the rows
    ``W = L_1^{-1} A[piv[:k]]`` are orthonormal and ``A[piv] = L W``, so
    ``C = W^T K`` with ``K = scale * L^T B[piv]``; the top eigenpairs ``(s^2, y)`` of
    ``K K^T = scale^2 L^T (B B^T)[piv] L`` give ``u = W^T y`` and ``v = K^T y / s``.  The
    basis is built on whichever of ``A`` and ``B`` has the lower rank (``C^T`` swaps
    their roles), so repeated rows (several positives per query, a positive and
    negative shared by several queries) shrink the core.  With the Gram matrices
    ``grams = (A A^T, B B^T)`` given (e.g. sub-blocks of the full-data ones) every
    factorisation is (m, m) work.  When pivoting fails its certificate, a Householder QR
    of ``A^T`` is tried.  Returns None (caller goes dense) unless both residuals
    ``||C v - s u||`` and ``||C^T u - s v||`` are at most ``tol * s_1``, both bases are
    orthonormal to 1e-9 and ``s_r > 1e-6 s_1``.
    """
    eye = np.eye(r)

    def certified(out: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> bool:
        if out is None:
            return False
        U, s, V = out
        if max(np.abs(U.T @ U - eye).max(), np.abs(V.T @ V - eye).max()) > 1e-9:
            return False
        right = np.linalg.norm(scale * (A.T @ (B @ V)) - U * s, axis=0)
        left = np.linalg.norm(scale * (B.T @ (A @ U)) - V * s, axis=0)
        return bool(np.all(right <= tol * s[0]) and np.all(left <= tol * s[0]))

    # the side of lower rank: distinct rows are a cheap proxy (exact duplicates are the
    # common cause of rank loss in real triples)
    swap = _distinct_rows(B) < _distinct_rows(A)
    if swap:
        out = _thin_core(B, A, scale, r, None if grams is None else (grams[1], grams[0]))
        out = None if out is None else (out[2], out[1], out[0])
    else:
        out = _thin_core(A, B, scale, r, grams)
    if certified(out):
        return out
    _count_input("thin:householder_retry")  # the pivoted-Cholesky core failed: a full QR basis instead
    Qh, Rh = np.linalg.qr(A.T)
    K = scale * (Rh @ B)
    theta, Y, _ = _top_eigh(K @ K.T, r)
    s = np.sqrt(np.maximum(theta, 0.0))
    if not np.all(np.isfinite(s)) or s[0] == 0 or s[-1] <= 1e-6 * s[0]:
        return None
    out = (Qh @ Y, s, (K.T @ Y) / s)
    return out if certified(out) else None


def _distinct_rows(A: np.ndarray) -> int:
    """Number of distinct rows of A, counted by a fixed random projection of each row.

    Only a hint for choosing the cheaper side of the thin-factor SVD (whose answer is
    certified either way): equal rows always agree; distinct rows collide with
    probability zero.
    """
    if A.shape[0] < 2:
        return A.shape[0]
    w = np.random.default_rng(0x5EED).standard_normal(A.shape[1])
    return int(np.unique(A @ w).size)


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
    C: np.ndarray | None,
    r: int,
    *,
    start: np.ndarray | None = None,
    method: str = "auto",
    tol: float = 1e-10,
    rng: np.random.Generator | None = None,
    factors: tuple[np.ndarray, np.ndarray, float] | None = None,
    grams: tuple[np.ndarray, np.ndarray] | None = None,
    mixed: bool = False,
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
    ``C=None`` with ``factors`` given: ``C`` is formed only if a dense path needs it.
    ``mixed=True`` (dense path, ``min(p, q) >= 512``): :func:`mixed_top_singular` is tried
    before the float64 subset eigh of ``C^T C`` (counted ``singular:mixed``).
    """
    if C is None:
        if factors is None:
            raise ValueError("top_singular: C=None needs factors=(A, B, c)")
        A, B, c = factors
        p, q = A.shape[1], B.shape[1]
        if _use_krylov(method, r, min(p, q)) or not _thin_suits(A.shape[0], p, q, r):
            C = float(c) * (A.T @ B)
            return top_singular(C, r, start=start, method=method, tol=tol, rng=rng, factors=factors, grams=grams,
                                mixed=mixed)
    p, q = C.shape if C is not None else (factors[0].shape[1], factors[1].shape[1])  # type: ignore[index]
    if C is not None and _use_krylov(method, r, min(p, q)):
        out = _krylov_singular(C, r, start, tol, rng)
        if out is not None:
            return out
    elif factors is not None:
        A, B, c = factors
        if A.shape != (A.shape[0], p) or B.shape != (A.shape[0], q):
            raise ValueError(f"factors: shapes {A.shape}, {B.shape} do not factor C of shape {(p, q)}")
        if _thin_suits(A.shape[0], p, q, r):
            thin = _thin_singular(A, B, float(c), r, tol, grams)
            if thin is not None:
                _count("singular:thin")
                return thin
        if C is None:
            C = float(c) * (A.T @ B)
    assert C is not None
    return _dense_singular(C, r, tol, mixed)


def _thin_suits(m: int, p: int, q: int, r: int) -> bool:
    """Whether a moment of m triples takes the thin-factor SVD (m < 3/4 min(p, q), r < m)."""
    return 4 * m <= 3 * min(p, q) and r < m


def top_eigen(
    S: np.ndarray,
    r: int,
    *,
    start: np.ndarray | None = None,
    method: str = "auto",
    tol: float = 1e-10,
    rng: np.random.Generator | None = None,
    mixed: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``r`` algebraically largest eigenpairs of symmetric ``S`` (p, p), descending.

    ``method``: ``"auto"``/``"dense"`` (LAPACK syevr on an index subset when
    ``r < p/3``, certified by ``||S x - t x|| <= tol * ||S||_F``, else full syevd) or
    ``"krylov"`` (block Lanczos seeded with ``start``; accepted only if
    ``||S x - t x|| <= tol * ||S||_2`` for every pair, else dense).  ``mixed=True``
    (dense methods, p >= 256): first :func:`mixed_top_eigen` on a float32 copy, refined
    with ``S`` itself (counted ``eigen:mixed``).
    """
    p = S.shape[0]
    if _use_krylov(method, r, p):
        out = _krylov_eigen(S, r, start, tol, rng)
        if out is not None:
            return out
    elif mixed and p >= MIXED_MIN_DIM:
        found = mixed_top_eigen(_float32_fortran(S), lambda W: S @ W, r, tol=tol, overwrite=True)
        if found is not None:
            _count("eigen:mixed")
            return found
    return _dense_eigen(S, r)


@dataclass(frozen=True)
class MixedProbe:
    """What :func:`mixed_probe` learnt: the top-r eigenpairs of ``sym(C)`` (descending) and
    ``krylov_gap = (t_r - t_{b+1}) / (t_{b+1} - t_min)`` with ``b = max(2r, r+8)`` the block
    size of the Krylov solver (eigenvalues of the float32 tridiagonal form)."""

    values: np.ndarray
    vectors: np.ndarray
    krylov_gap: float


# Certified block Krylov within the probe's 7 blocks needs T_6(1 + 2 gap) >= 1e10, i.e. a
# gap ratio of about 11 (Chebyshev bound); below half of that its probe is not worth running.
KRYLOV_MIN_GAP = 5.0


def mixed_probe(C: np.ndarray, r: int) -> MixedProbe | None:
    """Top-r eigenpairs of ``sym(C)`` by :func:`mixed_top_eigen` (counted ``eigen:mixed``), or None.

    A probe for many truncations of perturbed copies of ``C`` (CARS' half moments) that is
    also the full-data answer: real embedding moments pass; spectra with a cluster across
    the truncation edge (where float32 rounding mixes the wanted subspace with the rest)
    fail, and the copies then go to float64 LAPACK at once instead of after a failed
    attempt each.  Its tridiagonal form also gives, by bisection, the eigenvalues that decide
    whether block Krylov could converge (:attr:`MixedProbe.krylov_gap`).  None when
    ``p < 256``.
    """
    p = C.shape[0]
    if C.shape != (p, p) or p < MIXED_MIN_DIM:
        return None
    S = (C + C.T) / 2.0
    forms: list[_Tridiagonal] = []
    found = mixed_top_eigen(_float32_fortran(S), lambda W: S @ W, r, overwrite=True, keep=forms)
    if found is None:
        return None
    _count("eigen:mixed")
    b = max(2 * r, r + 8)
    gap = 0.0
    if b + 1 < p and forms:
        tri = forms[0]
        try:
            low, _, _ = lapack.dstebz_index(tri.d, tri.e, 1, 1, 0.0)
            edge, _, _ = lapack.dstebz_index(tri.d, tri.e, p - b, p - b, 0.0)
            spread = float(edge[0] - low[0])
            gap = float((found[0][-1] - edge[0]) / spread) if spread > 0 else np.inf
        except np.linalg.LinAlgError:
            gap = np.inf  # unknown: let the Krylov probe decide
    return MixedProbe(found[0], found[1], gap)


def top_sym_eigen(
    A: np.ndarray,
    B: np.ndarray,
    c: float,
    r: int,
    *,
    S32: np.ndarray | None = None,
    overwrite: bool = False,
    tol: float = 1e-10,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``r`` algebraically largest eigenpairs of ``S = c/2 (A^T B + B^T A)``, descending.

    ``S`` is the symmetric part of a moment ``C = c A^T B`` of ``m`` triples
    (A, B of shape (m, p)).  For ``p >= 256`` (:data:`MIXED_MIN_DIM`) the answer comes from
    :func:`mixed_top_eigen`: a float32 tridiagonal reduction of ``S32`` (its lower triangle
    is read; formed from the factors by BLAS ``ssyr2k`` when not given; ``overwrite``
    lets the solver destroy it), refined with exact float64 products
    ``S W = c/2 (A^T (B W) + B^T (A W))``, certified by ``||S x - t x|| <= tol ||S||_F``.
    Otherwise, or when that certificate fails, ``S`` is formed in float64 and solved by
    :func:`top_eigen` (counted ``eigen:subset``/``eigen:full``).
    """
    p = A.shape[1]
    if p >= MIXED_MIN_DIM and r + _MIXED_EXTRA < p:
        if S32 is None:
            S32 = lapack.ssyr2k_lower(c / 2.0, A.astype(np.float32), B.astype(np.float32))
            overwrite = True
            _count_input("mixed:float32_formed")
        else:
            _count_input("mixed:float32_given")

        def apply(W: np.ndarray) -> np.ndarray:
            out = A.T @ (B @ W)
            out += B.T @ (A @ W)
            out *= c / 2.0
            return out

        found = mixed_top_eigen(S32, apply, r, tol=tol, overwrite=overwrite)
        if found is not None:
            _count("eigen:mixed")
            return found
    S = c * (A.T @ B)
    S += S.T
    S *= 0.5
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


# --------------------------------------------------------------------------------------
# Mixed precision: a float32 tridiagonal reduction, refined and certified in float64.
# --------------------------------------------------------------------------------------

# Reflectors are applied in compact-WY blocks of this many columns.
_WY_BLOCK = 64
# Extra Ritz pairs kept beyond r (absorbs near-degenerate pairs at the truncation edge).
_MIXED_EXTRA = 4
# The mixed solver gives up when the wanted eigenvalues are this close (relative) to the rest.
_MIXED_MIN_GAP = 1e-4
# Below this dimension the float64 subset solver is as fast: no mixed precision.
MIXED_MIN_DIM = 256
# The same for the singular triplets (the Gram matrix C^T C): on real NFCorpus half moments mixed
# precision is about 1.1x the float64 subset eigh at p = 384 (within run-to-run noise) and 1.3x
# at p = 768 (benchmarks/bench_lapack.py).
MIXED_SVD_MIN_DIM = 512


def _wy_blocks(c: np.ndarray, tau: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Compact-WY blocks ``(first row, V, T^{-1})`` of ``Q = H_1 ... H_{p-1}`` from ``ssytrd``.

    A block of consecutive reflectors ``H_i = I - tau_i v_i v_i^T`` is ``I - V T V^T``
    with ``T^{-1} = striu(V^T V) + diag(1/tau)`` (Puglisi's identity; holds for any
    non-zero tau).
    """
    p = c.shape[0]
    blocks = []
    for j0 in range(0, p - 1, _WY_BLOCK):
        j1 = min(j0 + _WY_BLOCK, p - 1)
        k = j1 - j0
        V = np.tril(c[j0 + 1 :, j0:j1], -1)  # rows j0+1.., unit diagonal implicit
        V[np.arange(k), np.arange(k)] = 1.0
        t = tau[j0:j1]
        keep = t != 0  # tau = 0: the reflector is the identity
        if not keep.all():
            V, t = V[:, keep], t[keep]
        if t.size == 0:
            continue
        T_inv = np.triu(V.T @ V, 1)
        T_inv[np.diag_indices_from(T_inv)] = 1.0 / t
        blocks.append((j0 + 1, V, T_inv))
    return blocks


class _Tridiagonal:
    """``S32 = Q T Q^T`` from LAPACK ``ssytrd`` (float32); ``Q`` is applied by ``sormtr``
    (or, without SciPy's Cython LAPACK, by compact-WY blocks: :func:`_wy_blocks`)."""

    def __init__(self, S32: np.ndarray) -> None:
        c, d, e, tau = lapack.ssytrd(S32)
        self.d = d.astype(np.float64)
        self.e = e.astype(np.float64)
        self._reflectors, self._tau = c, tau
        # without SciPy's Cython LAPACK (no sormtr there): compact-WY blocks, applied by numpy
        self._sormtr = lapack.available()
        self.blocks = [] if self._sormtr else _wy_blocks(c, tau)

    def apply_q(self, Z: np.ndarray, transpose: bool = False) -> np.ndarray:
        """``Q @ Z`` (or ``Q.T @ Z``) in float32 (LAPACK ``sormtr``, else the WY blocks)."""
        if self._sormtr:
            return lapack.sormtr(self._reflectors, self._tau, Z, transpose)
        from scipy.linalg import solve_triangular

        Z = np.array(Z, dtype=np.float32, order="C")
        for row0, V, T_inv in self.blocks if transpose else self.blocks[::-1]:
            tail = Z[row0:]
            W = solve_triangular(T_inv, V.T @ tail, lower=False, trans="T" if transpose else "N",
                                 check_finite=False)
            tail -= V @ W
        return Z

    def top_eigenvectors(self, b: int, r: int) -> np.ndarray | None:
        """The top-b eigenvectors of ``T`` (float64, descending), or None.

        Eigenvalues by bisection (LAPACK ``stebz``, to 1e-6 of ``||T||``: they only seed
        the refinement), vectors by inverse iteration (``stein``): O(p b) work.  None also
        when the r-th eigenvalue is within ``1e-4 ||T||`` of the (b+1)-th: float32 rounding
        then mixes the wanted subspace with the rest faster than a few refinement steps can
        separate them (a cluster across the truncation edge), and float64 LAPACK should answer.
        """
        p = self.d.size
        norm = float(np.abs(self.d).max() + 2.0 * np.abs(self.e).max(initial=0.0))  # >= ||T||_2
        try:
            w, block, split = lapack.dstebz_index(self.d, self.e, p - b, p, 1e-6 * norm)
            if w.size != b + 1 or w[-r] - w[0] < _MIXED_MIN_GAP * norm:
                return None
            # drop the (b+1)-th value; iblock keeps LAPACK's length n (entries follow w)
            return lapack.dstein(self.d, self.e, w[1:], np.roll(block, -1), split)[:, ::-1]
        except np.linalg.LinAlgError:
            return None

    def solve_shifted(self, R: np.ndarray, shifts: np.ndarray) -> np.ndarray | None:
        """Columns ``(T - shifts[i] I)^{-1} R[:, i]`` (LAPACK gtsv), or None if singular."""
        from scipy.linalg import lapack as scipy_lapack

        out = np.empty(R.shape, dtype=np.float64)
        for i, theta in enumerate(shifts):
            x, info = scipy_lapack.dgtsv(self.e, self.d - theta, self.e, R[:, i : i + 1].astype(np.float64))[3:]
            if info != 0:
                return None
            out[:, i] = x[:, 0]
        return out


def _orthonormal_pair(B: np.ndarray, AB: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """CholeskyQR2 of B, carrying ``A B`` along (``A`` linear); None if B is rank deficient
    or ``A B`` is not finite (a non-finite matrix: the caller goes dense)."""
    if not np.all(np.isfinite(AB)):
        return None
    try:
        for _ in range(2):
            L_inv_T = np.linalg.inv(np.linalg.cholesky(B.T @ B)).T
            B, AB = B @ L_inv_T, AB @ L_inv_T
    except np.linalg.LinAlgError:
        return None
    return B, AB


def _float32_fortran(S: np.ndarray) -> np.ndarray:
    """A float32 copy of S in Fortran order (what ``ssytrd`` reduces in place), in one pass."""
    return np.array(S, dtype=np.float32, order="F")


def mixed_top_eigen(
    S32: np.ndarray,
    apply: Callable[[np.ndarray], np.ndarray],
    r: int,
    scale: float | None = None,
    *,
    tol: float = 1e-10,
    max_iter: int = 3,
    overwrite: bool = False,
    keep: list[_Tridiagonal] | None = None,
    allowed: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Top-r algebraic eigenpairs of a symmetric ``S`` (float64, given by ``apply(B) = S @ B``)
    from a float32 copy ``S32``, certified in float64.

    1. ``S32 = Q T Q^T`` by LAPACK ``ssytrd`` (the tridiagonal reduction dominates the
       cost of a subset eigensolver and, being memory bound, runs much faster in
       float32: ``benchmarks/bench_lapack.py``); the top ``b = r + 4`` eigenvectors ``y``
       of ``T`` (``stebz`` + ``stein``) give the start ``X = Q y`` (accurate to about
       float32 precision).
    2. Davidson refinement in float64: Rayleigh-Ritz of ``S`` on the basis, residuals
       ``R = S X - X Theta``, corrections ``Q (T - theta_i I)^{-1} Q^T r_i`` (the float32
       factorisation as an inverse-iteration preconditioner: each step shrinks the
       residual by about ``||S - S32|| / gap``; one step reaches the certificate on real
       embedding moments, see ``tests/linalg/test_lowrank.py``), basis ``[X, corrections]``, Rayleigh-Ritz again.
    3. Accepted only when every wanted pair has ``||S x - t x|| <= tol * scale``
       (``scale >= ||S||_2``; default ``||T||_F = ||S32||_F``, the Frobenius norm of ``S``
       to float32 accuracy); otherwise None after ``max_iter`` steps (the caller goes
       dense).

    Only the lower triangle of ``S32`` is read; ``overwrite=True`` lets the reduction
    work in place when ``S32`` is a Fortran-ordered float32 array; ``keep`` (a list)
    receives the tridiagonal form for further use.  ``allowed(theta)`` (the r Ritz values)
    replaces the acceptance bound ``tol * scale`` by per-pair bounds (used by
    :func:`mixed_top_singular`, whose certificate is on the singular triplets).
    """
    p = S32.shape[0]
    b = r + _MIXED_EXTRA
    if b + 1 >= p or r < 1:
        return None
    try:
        tri = _Tridiagonal(np.asfortranarray(S32, dtype=np.float32) if overwrite
                           else np.array(S32, dtype=np.float32, order="F"))
    except np.linalg.LinAlgError:
        return None
    if keep is not None:
        keep.append(tri)
    if scale is None:
        scale = float(np.sqrt(np.sum(tri.d**2) + 2.0 * np.sum(tri.e**2)))
    Y = tri.top_eigenvectors(b, r)
    if Y is None:
        return None
    B = tri.apply_q(Y).astype(np.float64)
    SB = apply(B)
    for _ in range(max_iter):
        pair = _orthonormal_pair(B, SB)
        if pair is None:
            return None
        B, SB = pair
        G = B.T @ SB
        theta, Z = np.linalg.eigh((G + G.T) / 2.0)
        theta, Z = theta[::-1][:b], Z[:, ::-1][:, :b]
        X, SX = B @ Z, SB @ Z
        R = SX[:, :r] - X[:, :r] * theta[:r]
        resid = np.linalg.norm(R, axis=0)
        if not np.all(np.isfinite(resid)):
            return None
        limit = tol * scale if allowed is None else allowed(theta[:r])
        if np.all(resid <= limit):
            return theta[:r], X[:, :r]
        corr = tri.solve_shifted(tri.apply_q(R, transpose=True), theta[:r])
        if corr is None:
            return None
        corr = tri.apply_q(corr).astype(np.float64)
        for _ in range(2):  # against the current Ritz basis
            corr -= X @ (X.T @ corr)
        corr /= np.maximum(np.linalg.norm(corr, axis=0), 1e-300)
        B = np.concatenate([X, corr], axis=1)
        SB = np.concatenate([SX, apply(corr)], axis=1)
    return None


def mixed_top_singular(
    C32: np.ndarray, C: np.ndarray, r: int, *, tol: float = 1e-10,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    r"""Leading ``r`` singular triplets of ``C`` (p, q) from its float32 copy ``C32``, certified
    in float64; None when the certificate fails (the caller goes to float64 LAPACK).

    The right singular vectors are the top eigenvectors of the Gram matrix
    :math:`G = C^\top C`: :func:`mixed_top_eigen` reduces ``G32 = C32^T C32`` in float32 and
    refines with exact float64 products :math:`G W = C^\top (C W)`, until every Ritz pair
    :math:`(\theta, v)` has :math:`\|G v - \theta v\| \le \tau\, s\, s_1/4`
    (:math:`s = \sqrt\theta`).  Then :math:`u = C v / s` satisfies :math:`C v = s u` exactly,
    and the answer is accepted, as on every other path (:func:`top_singular`), only when
    :math:`\|C^\top u - s v\| \le \tau s_1` (in float64) and ``U`` is orthonormal to 1e-9
    (counted ``singular:mixed``).  Used for CARS' half moments
    of more than ``3p/4`` triples (where the thin-factor core is no smaller than ``C``), the
    validation losses and the cross-validated risk, at ``p >= 512``
    (:data:`MIXED_SVD_MIN_DIM`).
    """
    q = C32.shape[1]
    if C.shape != C32.shape or r + _MIXED_EXTRA + 1 >= q or q < MIXED_MIN_DIM:
        return None
    G32 = C32.T @ C32  # symmetric: its C-order buffer is its own Fortran-order transpose
    G32 = G32.T

    def allowed(theta: np.ndarray) -> np.ndarray:
        # (theta, v) of G = C^T C gives u = C v / s with ||C^T u - s v|| = ||G v - theta v|| / s:
        # this bound leaves the certificate a margin of four
        s = np.sqrt(np.maximum(theta, 0.0))
        return 0.25 * tol * s * s[0]

    found = mixed_top_eigen(G32, lambda W: C.T @ (C @ W), r, tol=tol, overwrite=True, allowed=allowed)
    if found is None:
        return None
    theta, V = found
    # the eigensolver's gap test (t_r - t_{b+1} >= 1e-4 ||G||) already implies s_r >= ~1e-2 s_1;
    # a zero s_r would make U infinite, and the checks below refuse it
    s = np.sqrt(np.maximum(theta, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        U = (C @ V) / s
        resid = np.linalg.norm(C.T @ U - V * s, axis=0)
    eye = np.eye(r)
    # implied by the per-pair bound when the eigensolver is right; checked as on every other path
    # (with zero residuals, an orthonormal U = C V diag(1/s) forces V^T V = I)
    with np.errstate(invalid="ignore"):
        if not (np.all(resid <= tol * s[0]) and np.abs(U.T @ U - eye).max() <= 1e-9):
            return None
    _count("singular:mixed")
    return U, s, V
