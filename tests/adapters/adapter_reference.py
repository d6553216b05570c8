"""Independent reference computations for the adapter tests (numpy, written from the paper)."""

from __future__ import annotations

import numpy as np


def binary_ndcg10(scores: np.ndarray, relevant: list[set[int]]) -> float:
    """Mean NDCG@10 (Appendix F) by a full argsort of each score row."""
    out = []
    for s, rel in zip(scores, relevant, strict=True):
        order = np.argsort(-s, kind="stable")[:10]
        dcg = sum(1.0 / np.log2(j + 2) for j, d in enumerate(order) if d in rel)
        ideal = sum(1.0 / np.log2(j + 2) for j in range(min(10, len(rel))))
        out.append(dcg / ideal)
    return float(np.mean(out))


def truncations(C: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Shared (positive eigen-truncation of sym(C)) and dual (rank-r SVD) truncations (Theorem 1)."""
    S = (C + C.T) / 2
    w, U = np.linalg.eigh(S)
    keep = np.argsort(-w)[:r]
    keep = keep[w[keep] > 0]
    shared = (U[:, keep] * w[keep]) @ U[:, keep].T
    Uu, s, Vt = np.linalg.svd(C)
    dual = (Uu[:, :r] * s[:r]) @ Vt[:r]
    return shared, dual


def info_nce(M: np.ndarray, X: np.ndarray, pos: np.ndarray, hard: np.ndarray, corpus: np.ndarray,
             relevant: list[set[int]], tau: float) -> float:
    """Mean InfoNCE over one batch (all rows), looping over examples."""
    losses = []
    n = len(X)
    for i in range(n):
        logits, target = [], None
        for j in range(n):
            if j != i and int(pos[j]) in relevant[i] | {int(pos[i])}:
                continue
            if j == i:
                target = len(logits)
            logits.append(X[i] @ M @ corpus[pos[j]] / tau)
        for h in hard[i]:
            if int(h) in relevant[i] | {int(pos[i])}:
                continue
            logits.append(X[i] @ M @ corpus[h] / tau)
        logits = np.asarray(logits, dtype=np.float64)
        mx = logits.max()
        losses.append(-(logits[target] - mx - np.log(np.exp(logits - mx).sum())))
    return float(np.mean(losses))
