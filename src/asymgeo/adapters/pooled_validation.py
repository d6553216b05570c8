r"""Pooled validation: select on a frozen candidate pool instead of the whole corpus (issue #40).

Every validation pass of :func:`~asymgeo.adapters.workflow.fit_adapter` (the closed-form
scale grid, each epoch of each learning rate of each trained map, the memory's gate grid,
the joint choice) searches the corpus for every validation query: :math:`2 m N p` flop.
With ``fit --geometry auto`` that is a few hundred passes, so at MS MARCO's 8.8M documents
selection, not training, sets the time (docs/scaling.md).

A pooled fit runs all of that on a sub-corpus :math:`\mathcal P`, the union of

* each validation query's frozen top-``k`` documents (one exact search, done once),
* the documents judged for the validation queries,
* every document the training loss reads (the training queries' positives, hard negatives
  and relevant documents: training is unchanged, row for row).

Validation NDCG@10 on the pool equals the full-corpus figure for every query whose top 10
under the candidate map lies inside :math:`\mathcal P` (exactly so for frozen, whose top
``k >= 10`` is in it; ties keep their document-id order, as the pool keeps the ids).  The
approximation is made visible: after the fit, one exact full-corpus search of the
validation queries gives the share of the deployed adapter's top 10 inside the pool
(``coverage@10``) and its exact validation NDCG@10 beside the pooled one.  Test figures
and the generalisation report always search the whole corpus.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

__all__ = [
    "POOL_AUTO_MIN_DOCS", "POOL_DEFAULT_K", "POOL_MAX_SHARE", "resolve_pool_k", "candidate_pool",
    "pooled_adaptation_data", "pooled_memory_to_corpus", "pool_coverage",
]

#: ``validation_pool="auto"`` pools from this many corpus documents on (below, exact selection).
POOL_AUTO_MIN_DOCS = 200_000
#: frozen candidates per validation query of ``validation_pool="auto"``.
POOL_DEFAULT_K = 100
#: a pool holding more than this share of the corpus saves too little: the fit selects exactly.
POOL_MAX_SHARE = 0.5


def resolve_pool_k(validation_pool: int | str | None, n_docs: int) -> int | None:
    """Frozen candidates per validation query, or None for exact full-corpus selection.

    ``validation_pool``: a positive integer ``k`` (at least 10), ``"auto"`` (:data:`POOL_DEFAULT_K`
    when the corpus has at least :data:`POOL_AUTO_MIN_DOCS` documents, else None), or
    ``None`` / ``"none"`` (exact).
    """
    if validation_pool is None or validation_pool == "none":
        return None
    if validation_pool == "auto":
        return POOL_DEFAULT_K if n_docs >= POOL_AUTO_MIN_DOCS else None
    if isinstance(validation_pool, bool) or not isinstance(validation_pool, (int, np.integer)) or validation_pool < 10:
        raise ValueError(f"validation_pool: expected 'auto', 'none' or an integer >= 10 (candidates per validation "
                         f"query; NDCG@10 needs the top 10), got {validation_pool!r}")
    return int(validation_pool)


def candidate_pool(top_rows: np.ndarray, *row_groups: Any) -> np.ndarray:
    """Sorted distinct corpus rows: ``top_rows`` (any shape, negatives ignored: padding) and every
    row of ``row_groups`` (arrays, or sequences of row collections)."""
    parts = [np.asarray(top_rows, dtype=np.int64).reshape(-1)]
    for group in row_groups:
        if isinstance(group, np.ndarray):
            parts.append(group.astype(np.int64, copy=False).reshape(-1))
        else:
            parts.append(np.fromiter((int(r) for rows in group for r in rows), dtype=np.int64))
    rows = np.unique(np.concatenate(parts))
    return rows[rows >= 0]


def _remap(rows: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """Positions in ``pool`` of ``rows`` (each must be in it)."""
    rows = np.asarray(rows, dtype=np.int64)
    pos = np.searchsorted(pool, rows)
    if rows.size and (pos.max() >= pool.size or not np.array_equal(pool[np.minimum(pos, pool.size - 1)], rows)):
        raise AssertionError("pooled validation: a training or validation row is missing from the pool")
    return pos


def pooled_adaptation_data(d: Any, k: int, judged: Sequence[Collection[int]], *, max_share: float | None = None,
                           ) -> tuple[Any, np.ndarray | None, dict[str, Any]]:
    """The adaptation data on the candidate pool (module docstring).

    ``judged``: the corpus rows judged relevant to each validation query (they join the pool,
    so that every validation table entry is a pool position).

    Returns ``(dv, pool, record)``: ``dv`` an :class:`~asymgeo.adapters.workflow.AdaptationData`
    whose corpus is the pool's rows (copied, in the cache's dtype), whose triples, training
    relevance and validation table address pool positions, and whose test part is empty (test
    figures must come from the whole corpus); ``pool`` the sorted corpus rows
    (``dv.corpus[i] == d.corpus[pool[i]]``); ``record`` the pool's settings and size.  When
    the pool would hold more than ``max_share`` of the corpus (default :data:`POOL_MAX_SHARE`), ``(d, None, record)``
    with ``record["pooled"] = False``: selection stays exact, nothing is copied.  The
    document-disjoint selection queries are validation queries, so their judged documents are
    in the pool already.
    """
    from .._ids import IdIndex
    from ..retrieval.metrics import RelevanceTable
    from ..retrieval.search import exact_search

    n_docs, p = (int(s) for s in d.corpus.shape)
    kk = min(int(k), n_docs)
    top = exact_search(d.V, d.corpus, kk, progress=None).indices
    tr = d.triples
    pool = candidate_pool(top, tr.pos_rows, tr.neg_rows, tr.hard_negative_rows, d.relevant, judged)
    record: dict[str, Any] = {"k": kk, "documents": int(pool.size), "of": n_docs,
                              "validation_queries": int(d.V.shape[0]), "pooled": True}
    if pool.size > (POOL_MAX_SHARE if max_share is None else max_share) * n_docs:
        return d, None, {**record, "pooled": False}
    sub = np.asarray(d.corpus[pool])
    ids = d.corpus_ids
    pool_ids: Any = IdIndex(ids.take(pool)) if isinstance(ids, IdIndex) else [ids[int(i)] for i in pool]
    triples = dataclasses.replace(tr, pos_rows=_remap(tr.pos_rows, pool), neg_rows=_remap(tr.neg_rows, pool),
                                  hard_negative_rows=_remap(tr.hard_negative_rows, pool), _corpus=sub)
    relevant = [set(_remap(np.fromiter(sorted(r), dtype=np.int64), pool).tolist()) for r in d.relevant]
    vids = list(d.validation.query_ids)
    vtable = RelevanceTable({q: d.qrels[q] for q in vids}, vids, pool_ids, unknown_docs="ignore")
    dv = dataclasses.replace(d, triples=triples, corpus=sub, validation=vtable, T=np.zeros((0, p), dtype=np.float32),
                             test=None, relevant=relevant, corpus_ids=pool_ids)
    return dv, pool, record


def pooled_memory_to_corpus(memory: Any, pool: np.ndarray) -> Any:
    """``memory`` (a fitted :class:`~asymgeo.adapters.memory.DocumentMemory` on pool positions)
    with its remembered documents as corpus rows (in place; returned)."""
    from ..retrieval.memory import memory_table_from_pairs

    t = memory.table_
    memory.table_ = memory_table_from_pairs(t.keys, t.pair_key, pool[t.pair_document])
    return memory


def pool_coverage(d: Any, operator: Any, pool: np.ndarray) -> dict[str, float]:
    """Share of the map ``operator``'s full-corpus top 10 (``d``'s validation queries, the whole
    corpus) inside ``pool``, and its exact validation NDCG@10: one exact search.

    The map alone: a document memory raises training positives only, which are in the pool,
    so it can never bring a document from outside the pool into a top 10.
    """
    from ..retrieval.metrics import evaluate_indices
    from ..retrieval.search import exact_search, search_trec_order

    ids = d.corpus_ids or None
    k = min(10, int(d.corpus.shape[0]))
    if ids is not None:
        idx = search_trec_order(d.V, d.corpus, k, ids, operator=operator).indices
    else:
        idx = exact_search(d.V, d.corpus, k, operator=operator, progress=None).indices
    idx = np.asarray(idx)
    inside = np.isin(idx, pool) | (idx < 0)
    ndcg = evaluate_indices(idx, d.validation, ["ndcg@10"]).per_query["ndcg@10"]
    return {"coverage@10": float(inside.mean()) if idx.size else 1.0, "validation_ndcg@10_exact": float(ndcg.mean())}
