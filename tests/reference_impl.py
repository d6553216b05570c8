"""Independent, deliberately naive reference implementations used by the tests.

Nothing here imports :mod:`asymgeo`.  Every quantity is computed the slow, obvious
way from the paper's definitions: explicit ``p x p`` matrices, a full SVD and a full
symmetric eigendecomposition per half-sample, and plain Python loops over triples
and splits.  The CARS benchmark imports :func:`naive_cars_score` as its baseline.

Conventions (paper, Sections 2 and 3.2): queries/documents are rows of ``(n, p)``
arrays; the relevance moment of a subset ``I`` is
``C_I = (1/|I|) sum_{i in I} x_i (y+_i - y-_i)^T``;
``V_I = P_{d,r}(C_I) - P_{s,r}(C_I)``; CARS eq. (7) averages
``<V_1, V_2>_F - ||V_1 - V_2||_F^2 / 4`` over the splits.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

__all__ = [
    "naive_moment",
    "naive_dual_truncate",
    "naive_shared_truncate",
    "naive_residual",
    "naive_frobenius_inner",
    "naive_cars_score",
    "naive_approximation_errors",
    "naive_tangent_blocks",
    "naive_pi_A_norm2",
    "orthonormal_complement",
    "random_orthonormal",
]


def naive_moment(X: np.ndarray, Y_pos: np.ndarray, Y_neg: np.ndarray, idx: Iterable[int] | None = None) -> np.ndarray:
    """``(1/|I|) sum_{i in I} x_i (y+_i - y-_i)^T`` by a loop of outer products (float64)."""
    X = np.asarray(X, dtype=np.float64)
    Y_pos = np.asarray(Y_pos, dtype=np.float64)
    Y_neg = np.asarray(Y_neg, dtype=np.float64)
    idx = range(X.shape[0]) if idx is None else list(idx)
    p = X.shape[1]
    C = np.zeros((p, p))
    count = 0
    for i in idx:
        d = Y_pos[i] - Y_neg[i]
        C += np.outer(X[i], d)
        count += 1
    return C / count


def naive_dual_truncate(C: np.ndarray, r: int) -> np.ndarray:
    """Rank-r SVD truncation from a *full* SVD: sum of the top-r rank-one terms."""
    U, s, Vt = np.linalg.svd(np.asarray(C, dtype=np.float64), full_matrices=True)
    out = np.zeros_like(C, dtype=np.float64)
    for j in range(r):
        out += s[j] * np.outer(U[:, j], Vt[j])
    return out


def naive_shared_truncate(C: np.ndarray, r: int) -> np.ndarray:
    """Keep the largest at most r *positive* eigenvalues of sym(C) (full eigendecomposition)."""
    C = np.asarray(C, dtype=np.float64)
    H = (C + C.T) / 2.0
    w, Q = np.linalg.eigh(H)
    order = np.argsort(w)[::-1]
    out = np.zeros_like(H)
    kept = 0
    for j in order:
        if kept >= r or w[j] <= 0:
            break
        out += w[j] * np.outer(Q[:, j], Q[:, j])
        kept += 1
    return out


def naive_residual(C: np.ndarray, r: int) -> np.ndarray:
    """``V(C) = P_{d,r}(C) - P_{s,r}(C)`` as an explicit p x p matrix."""
    return naive_dual_truncate(C, r) - naive_shared_truncate(C, r)


def naive_frobenius_inner(A: np.ndarray, B: np.ndarray) -> float:
    """``<A, B>_F = sum_i <A[i], B[i]>``, accumulated row by row in a plain loop."""
    total = 0.0
    for i in range(A.shape[0]):
        total += float(np.dot(A[i], B[i]))
    return total


def naive_cars_score(
    X: np.ndarray,
    Y_pos: np.ndarray,
    Y_neg: np.ndarray,
    rank: int,
    splits: Sequence[tuple[Sequence[int], Sequence[int]]],
) -> tuple[float, np.ndarray, np.ndarray]:
    """CARS (paper eq. 7) the slow way.

    For every split ``(I1, I2)``: both half moments from scratch by a loop over
    triples, full SVD and full eigendecomposition, explicit ``V_1``, ``V_2`` and
    entrywise-loop inner products.

    Returns
    -------
    (score, agreement, disagreement) where ``agreement[b] = <V_1, V_2>_F``,
    ``disagreement[b] = ||V_1 - V_2||_F^2`` and
    ``score = mean_b(agreement[b] - disagreement[b] / 4)``.
    """
    agreement = []
    disagreement = []
    for I1, I2 in splits:
        V1 = naive_residual(naive_moment(X, Y_pos, Y_neg, I1), rank)
        V2 = naive_residual(naive_moment(X, Y_pos, Y_neg, I2), rank)
        agreement.append(naive_frobenius_inner(V1, V2))
        diff = V1 - V2
        disagreement.append(naive_frobenius_inner(diff, diff))
    agreement = np.array(agreement)
    disagreement = np.array(disagreement)
    terms = [a - d / 4.0 for a, d in zip(agreement, disagreement)]
    score = sum(terms) / len(terms)
    return float(score), agreement, disagreement


def naive_approximation_errors(M: np.ndarray, r: int) -> dict[str, float]:
    """Theorem 1 terms from numpy's full decompositions (independent of asymgeo)."""
    M = np.asarray(M, dtype=np.float64)
    K = (M - M.T) / 2.0
    eta = np.sort(np.linalg.eigvalsh((M + M.T) / 2.0))[::-1]
    sigma = np.linalg.svd(M, compute_uv=False)
    skew_energy = float(np.sum(K ** 2))
    negative = float(sum(e * e for e in eta if e < 0))
    pos = [e for e in eta if e > 0]
    discarded = float(sum(e * e for e in pos[r:]))
    dual = float(np.sum(sigma[r:] ** 2))
    shared = skew_energy + negative + discarded
    return {
        "skew_energy": skew_energy,
        "negative_energy": negative,
        "discarded_energy": discarded,
        "shared_error": shared,
        "dual_error": dual,
        "gap": shared - dual,
    }


def orthonormal_complement(U: np.ndarray) -> np.ndarray:
    """An orthonormal basis ``U_perp`` (p, p - r) of the orthogonal complement of range(U)."""
    p, r = U.shape
    Q, _ = np.linalg.qr(np.concatenate([U, np.eye(p)], axis=1))
    # The first r columns of Q span range(U); the next p - r complete the basis.
    full, _ = np.linalg.qr(np.concatenate([U, Q[:, r:p]], axis=1))
    return full[:, r:p]


def naive_tangent_blocks(Z: np.ndarray, U: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Blocks of Z in the basis [U, U_perp] (Appendix B.1): ``A = U^T Z U``,
    ``B = U_perp^T Z U``, ``C = U^T Z U_perp``; also returns ``U_perp``."""
    Up = orthonormal_complement(U)
    return U.T @ Z @ U, Up.T @ Z @ U, U.T @ Z @ Up, Up


def naive_pi_A_norm2(Z: np.ndarray, U: np.ndarray) -> float:
    """``||Pi_A Z||_F^2 = ||skew(A)||^2 + 1/2 ||B - C^T||^2`` (Appendix B.1 block formula)."""
    A, B, C, _ = naive_tangent_blocks(Z, U)
    skewA = (A - A.T) / 2.0
    return float(np.sum(skewA ** 2) + 0.5 * np.sum((B - C.T) ** 2))


def random_orthonormal(rng: np.random.Generator, p: int, r: int) -> np.ndarray:
    """A Haar-random (p, r) matrix with orthonormal columns."""
    Q, R = np.linalg.qr(rng.standard_normal((p, r)))
    return Q * np.sign(np.diag(R))
