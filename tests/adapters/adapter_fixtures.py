"""A small synthetic retrieval problem with planted asymmetry, for the adapter tests."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asymgeo.retrieval.metrics import RelevanceTable


@dataclass
class Problem:
    X: np.ndarray
    pos: np.ndarray
    hard: np.ndarray
    corpus: np.ndarray
    V: np.ndarray
    table: RelevanceTable
    relevant: list


def make_problem(n: int = 48, m: int = 24, N: int = 120, p: int = 12, k: int = 3, seed: int = 0,
                 angle: float = 1.2) -> Problem:
    """Documents are random unit vectors; a query is its positive document rotated by
    ``angle`` in 3 planes plus noise, so the frozen dot product is a poor ranker and a
    (dual) low-rank correction helps."""
    rng = np.random.default_rng(seed)
    corpus = rng.normal(size=(N, p))
    corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
    R = np.eye(p)
    c, s = np.cos(angle), np.sin(angle)
    for j in range(3):
        a, b = 2 * j, 2 * j + 1
        G = np.eye(p)
        G[a, a], G[a, b], G[b, a], G[b, b] = c, -s, s, c
        R = R @ G

    def queries(rows):
        Q = corpus[rows] @ R.T + 0.15 * rng.normal(size=(len(rows), p))
        return Q / np.linalg.norm(Q, axis=1, keepdims=True)

    pos = rng.integers(0, N, size=n)
    X = queries(pos)
    S = X @ corpus.T
    S[np.arange(n), pos] = -np.inf
    hard = np.argsort(-S, axis=1)[:, :k]
    vpos = rng.integers(0, N, size=m)
    V = queries(vpos)
    ids = [f"v{i}" for i in range(m)]
    table = RelevanceTable({f"v{i}": {f"d{vpos[i]}": 1} for i in range(m)}, ids, [f"d{j}" for j in range(N)])
    relevant = [{int(r)} for r in pos]
    return Problem(X.astype(np.float32), pos, hard, corpus.astype(np.float32), V.astype(np.float32), table, relevant)
