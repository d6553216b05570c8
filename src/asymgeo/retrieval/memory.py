r"""The document memory: exact search under a map's score plus a gated boost of remembered documents.

A *memory* is a list of **keys** (frozen embeddings of queries whose relevant documents are
known: the training queries, and after selection the validation queries) and, for each key,
the corpus rows relevant to it.  A new query ``x`` raises a remembered document ``d`` by

.. math::
    b_d(x) = \alpha \, \max_{q \in K_d} \frac{\max(0,\; x^\top q - \tau)}{1 - \tau},

where :math:`K_d` are the keys that found ``d``, :math:`\tau` the gate (a query-to-query
similarity below which nothing is remembered) and :math:`\alpha` the weight, so the full
score is :math:`s(x, y_d) = x^\top M y_d + b_d(x)` (``M = I`` for the frozen model).  The
boost is zero for every document that is not remembered, and for every query farther than
``tau`` from all keys: queries unlike the training queries are ranked by the map alone.

Search stays exact without touching the corpus index: the top ``k`` under ``s`` lies in the
union of the top ``k`` under ``x^T M y`` and the documents boosted for ``x`` (a document
outside both has score ``x^T M y``, beaten by ``k`` documents whose score can only have
grown), so :func:`asymgeo.retrieval.search.memory_search` runs the map's search once and rescores that union.
Documents are never re-encoded and no row of an index changes; the memory itself is a
(keys x p) matrix and a list of row sets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MemoryTable", "MemoryCandidates", "memory_table", "memory_table_from_pairs", "memory_gate",
           "memory_similarity", "memory_boosts", "memory_rerank", "RERANK_PATHS", "QUERY_BLOCK", "TIE_DEPTH"]

#: how often :func:`memory_rerank` sorted whole rows (``"full"``) or only each row's top (``"partial"``)
RERANK_PATHS: Counter[str] = Counter()

#: queries scored against the keys at once (bounds the (queries x pairs) block)
QUERY_BLOCK = 1024


@dataclass(frozen=True)
class MemoryTable:
    """Keys and what they remember, as flat arrays.

    ``keys`` (n_keys, p) float32; ``pair_key`` / ``pair_document`` (n_pairs,): key row and
    corpus row of each (key, relevant document) pair; ``documents``: the distinct remembered
    corpus rows, sorted; ``pair_slot``: each pair's position in ``documents``.
    """

    keys: np.ndarray
    pair_key: np.ndarray
    pair_document: np.ndarray
    documents: np.ndarray
    pair_slot: np.ndarray

    @property
    def n_keys(self) -> int:
        return int(self.keys.shape[0])

    @property
    def n_documents(self) -> int:
        return int(self.documents.size)

    def extended(self, keys: Any, relevant_rows: Sequence[Any]) -> MemoryTable:
        """The memory with more keys and their relevant rows appended."""
        more = memory_table(keys, relevant_rows, n_docs=None)
        if more.keys.shape[1] != self.keys.shape[1]:
            raise ValueError(f"keys: dimension {more.keys.shape[1]} does not match the memory's {self.keys.shape[1]}")
        return memory_table_from_pairs(np.vstack([self.keys, more.keys]),
                      np.concatenate([self.pair_key, more.pair_key + self.n_keys]),
                      np.concatenate([self.pair_document, more.pair_document]))


def memory_table_from_pairs(keys: np.ndarray, pair_key: np.ndarray, pair_document: np.ndarray) -> MemoryTable:
    """A :class:`MemoryTable` from keys and flat (key row, corpus row) pair arrays."""
    documents, slot = np.unique(pair_document, return_inverse=True)
    return MemoryTable(np.ascontiguousarray(keys, dtype=np.float32), pair_key.astype(np.int64),
                       pair_document.astype(np.int64), documents.astype(np.int64), slot.astype(np.int64))


def memory_table(keys: Any, relevant_rows: Sequence[Any], *, n_docs: int | None = None) -> MemoryTable:
    """A :class:`MemoryTable` from key embeddings ``keys`` (n, p) and, per key, its relevant corpus rows.

    ``relevant_rows[i]`` is an iterable of corpus rows (ints) relevant to key ``i``; keys with
    none are kept (they remember nothing).  ``n_docs``: when given, every row must be below it.
    """
    K = np.asarray(keys)
    if K.ndim != 2:
        raise ValueError(f"keys: expected a 2-d (n, p) array, got shape {K.shape}")
    if len(relevant_rows) != K.shape[0]:
        raise ValueError(f"relevant_rows: {len(relevant_rows)} row sets for {K.shape[0]} keys")
    if not np.all(np.isfinite(K)):
        bad = int(np.flatnonzero(~np.all(np.isfinite(K), axis=1))[0])
        raise ValueError(f"keys: row {bad} is not finite")
    pk: list[int] = []
    pd: list[int] = []
    for i, rows in enumerate(relevant_rows):
        for r in sorted({int(v) for v in rows}):
            if r < 0 or (n_docs is not None and r >= n_docs):
                raise ValueError(f"relevant_rows[{i}]: corpus row {r} is outside 0..{(n_docs or 1) - 1}")
            pk.append(i)
            pd.append(r)
    return memory_table_from_pairs(K, np.asarray(pk, dtype=np.int64), np.asarray(pd, dtype=np.int64))


def memory_gate(similarity: np.ndarray, threshold: float) -> np.ndarray:
    r""":math:`\max(0, s - \tau) / (1 - \tau)`: 0 at or below the gate, 1 at ``s = 1``."""
    if not -1.0 <= threshold < 1.0:
        raise ValueError(f"threshold: expected a value in [-1, 1), got {threshold!r}")
    return np.maximum(np.asarray(similarity, dtype=np.float32) - np.float32(threshold), 0.0) / np.float32(1 - threshold)


def _check_queries(queries: Any, memory: MemoryTable) -> np.ndarray:
    Q = np.asarray(queries, dtype=np.float32)
    if Q.ndim != 2 or Q.shape[1] != memory.keys.shape[1]:
        raise ValueError(f"queries: expected shape (m, {memory.keys.shape[1]}), got {Q.shape}")
    return Q


def memory_similarity(queries: Any, memory: MemoryTable, *, exclude_keys: Any = None) -> np.ndarray:
    r""":math:`\max_{q \in K_d} x^\top q` for every query ``x`` and remembered document ``d``, (m, n_documents).

    Column ``j`` is corpus row ``memory.documents[j]``.  The gate is non-decreasing, so
    :math:`\max_q g(x^\top q) = g(\max_q x^\top q)`: one pass over the (key, document) pairs
    serves every gate ``tau`` (:func:`memory_boosts`, and the grid of
    :meth:`asymgeo.adapters.memory.DocumentMemory.fit`).  The per-document maximum is one
    ``np.maximum.reduceat`` over the pairs sorted by document.

    ``exclude_keys`` (m,) ints: for query ``i`` the key row ``exclude_keys[i]`` is left out of
    every maximum (``-1``: none), so a document that only that key remembers gets
    :math:`-\infty` (no boost at any gate).  With the validation queries appended as keys and
    each excluded from its own row, this is the leave-one-out view of the deployed memory
    (:meth:`asymgeo.adapters.memory.DocumentMemory.fit` with ``validation_rows``).
    """
    Q = _check_queries(queries, memory)
    excl = None
    if exclude_keys is not None:
        excl = np.asarray(exclude_keys)
        if excl.shape != (Q.shape[0],) or not np.issubdtype(excl.dtype, np.integer):
            raise ValueError(f"exclude_keys: expected {Q.shape[0]} integer key rows (-1: none), "
                             f"got shape {excl.shape} of {excl.dtype}")
        if excl.size and (excl.min() < -1 or excl.max() >= memory.n_keys):
            raise ValueError(f"exclude_keys: key rows must lie in -1..{memory.n_keys - 1}")
    out = np.zeros((Q.shape[0], memory.n_documents), dtype=np.float32)
    if memory.pair_key.size == 0:
        return out
    order = np.argsort(memory.pair_slot, kind="stable")
    slots = memory.pair_slot[order]
    starts = np.flatnonzero(np.r_[True, slots[1:] != slots[:-1]])  # every document has >= 1 pair
    keys_by_pair = memory.pair_key[order]
    for q0 in range(0, Q.shape[0], QUERY_BLOCK):
        S = Q[q0:q0 + QUERY_BLOCK] @ memory.keys.T  # (b, n_keys)
        if excl is not None:
            e = excl[q0:q0 + QUERY_BLOCK]
            rows = np.flatnonzero(e >= 0)
            S[rows, e[rows]] = -np.inf
        out[q0:q0 + QUERY_BLOCK] = np.maximum.reduceat(S[:, keys_by_pair], starts, axis=1)
    return out


def memory_boosts(queries: Any, memory: MemoryTable, threshold: float, weight: float, *,
                  similarity: np.ndarray | None = None) -> np.ndarray:
    r"""Boosts :math:`b_d(x)` (module docstring) of every remembered document, (m, n_documents).

    Column ``j`` is corpus row ``memory.documents[j]``; each entry is the largest gated
    similarity over the keys that found that document, times ``weight``:
    ``weight * memory_gate(memory_similarity(queries, memory), threshold)``.
    ``similarity``: that (m, n_documents) maximum when already computed.
    """
    if not (np.isfinite(weight) and weight >= 0):
        raise ValueError(f"weight: expected a finite number >= 0, got {weight!r}")
    Q = _check_queries(queries, memory)
    if memory.pair_key.size == 0 or weight == 0:
        return np.zeros((Q.shape[0], memory.n_documents), dtype=np.float32)
    S = memory_similarity(Q, memory) if similarity is None else similarity
    if S.shape != (Q.shape[0], memory.n_documents):
        raise ValueError(f"similarity: expected shape {(Q.shape[0], memory.n_documents)}, got {S.shape}")
    out = memory_gate(S, threshold)
    out *= np.float32(weight)
    return out


@dataclass(frozen=True)
class MemoryCandidates:
    """What :func:`memory_rerank` needs for one batch of queries, computed once per map
    (:func:`asymgeo.retrieval.search.memory_candidates`).

    ``scores`` / ``indices`` (m, K): the map's own top K (K >= k); ``remembered`` (m,
    n_documents): the map's exact scores ``x^T M y_d`` of every remembered document.
    """

    scores: np.ndarray
    indices: np.ndarray
    remembered: np.ndarray


#: extra depth searched beyond k, so a tie group at rank k is seen whole when reordered by id
TIE_DEPTH = 16


def _top_by_score_then_row(sc: np.ndarray, cand: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's first ``t`` entries ordered by score descending, then candidate row ascending.

    The same as ``np.lexsort((cand, -sc))[:, :t]`` without sorting whole rows: every entry
    of a row's first ``t`` scores at least the row's ``t``-th largest score, so the ``C``
    largest per row (``C`` the most entries any row has at or above its own ``t``-th largest,
    ties included) hold them all, and only those ``C`` columns are sorted.
    """
    width = sc.shape[1]
    if width <= 4 * t:  # short rows (t >= width among them): the whole-row sort
        RERANK_PATHS["full"] += 1
        order = np.lexsort((cand, -sc), axis=-1)[:, :t]
    else:
        RERANK_PATHS["partial"] += 1
        kth = np.partition(sc, width - t, axis=1)[:, width - t]
        c = int((sc >= kth[:, None]).sum(axis=1).max()) if sc.shape[0] else t
        part = np.argpartition(-sc, c - 1, axis=1)[:, :c]
        psc, pcand = np.take_along_axis(sc, part, axis=1), np.take_along_axis(cand, part, axis=1)
        order = np.take_along_axis(part, np.lexsort((pcand, -psc), axis=-1)[:, :t], axis=1)
    return np.take_along_axis(sc, order, axis=1), np.take_along_axis(cand, order, axis=1)


def memory_rerank(cands: MemoryCandidates, memory: MemoryTable, boosts: np.ndarray, k: int, *,
                  corpus_ids: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` of ``x^T M y + b_d(x)`` from :func:`~asymgeo.retrieval.search.memory_candidates`
    and :func:`memory_boosts`.

    Candidates are the map's top K and every remembered document, each once; a remembered
    document's score is raised by its boost.  Returns ``(scores, indices)`` (m, k).
    """
    bi = cands.indices
    m, K = bi.shape
    k = min(int(k), K)
    n_docs = int(max(bi.max(initial=-1), memory.documents.max(initial=-1))) + 1
    slot_of = np.full(n_docs, -1, dtype=np.int64)
    slot_of[memory.documents] = np.arange(memory.n_documents)
    s = slot_of[bi]
    hit = s >= 0
    bs = cands.scores.copy()
    total = cands.remembered + boosts
    rows = np.nonzero(hit)[0]
    bs[hit] = total[rows, s[hit]]
    extra = total.copy()
    extra[rows, s[hit]] = -np.inf  # already among the map's top K
    # a remembered document outside the map's top K with no boost for any query of the batch
    # keeps its map score, which K documents already reach: only boosted columns can enter
    live = np.flatnonzero((boosts > 0).any(axis=0)) if boosts.size else np.zeros(0, dtype=np.int64)
    extra = extra[:, live]
    cand = np.concatenate([bi, np.broadcast_to(memory.documents[live], (m, live.size))], axis=1)
    sc = np.concatenate([bs, extra], axis=1)
    top_s, top_i = _top_by_score_then_row(sc, cand, min(cand.shape[1], k + TIE_DEPTH))
    if corpus_ids is not None:
        from .metrics import order_ties_by_id

        top_i = order_ties_by_id(top_s, top_i, corpus_ids)
    return np.ascontiguousarray(top_s[:, :k]), np.ascontiguousarray(top_i[:, :k])
