"""Evaluate frozen embeddings (optionally through an operator) on a BEIR split.

The dataset-aware glue over retrieval (:mod:`asymgeo.retrieval.search`, :mod:`asymgeo.retrieval.metrics`):
open the dataset and its verified embedding cache, rank the whole corpus by exact inner
product for the split's judged queries, order exact ties as trec_eval does, score the
ranking.  It lives in the data layer because it reads files; it imports only from the
layers below.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from ..retrieval.metrics import EvalResult, RelevanceTable, evaluate_indices, parse_metric
from ..retrieval.search import exact_search, search_trec_order
from .beir import BeirDataset, load_beir, warn_faults
from .cache import load_embeddings
from .encoders import EncoderSpec, get_encoder

__all__ = ["evaluate_frozen", "default_metrics", "TIE_ORDERS"]

logger = logging.getLogger(__name__)

#: ``"trec_eval"``: exact score ties by document id descending (trec_eval, pytrec_eval, MTEB);
#: ``"index"``: by lower corpus row (the order of :func:`asymgeo.retrieval.search.exact_search`).
TIE_ORDERS = ("trec_eval", "index")


def default_metrics(k: int = 10) -> list[str]:
    """``ndcg@k`` (the paper's), graded NDCG, recall@k and @100, precision, MRR, MAP at k."""
    out = [f"ndcg@{k}", f"ndcg_graded@{k}", f"recall@{k}", f"precision@{k}", f"mrr@{k}", f"map@{k}"]
    if k != 100:
        out.insert(3, "recall@100")
    return out


def evaluate_frozen(
    dataset: str | os.PathLike | BeirDataset,
    encoder: str | EncoderSpec,
    *,
    split: str = "test",
    k: int = 10,
    metrics: Sequence[str] | None = None,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    operator: Any = None,
    backend: str = "auto",
    ties: str = "trec_eval",
    exclude_queries: Collection[str] | None = None,
    cache: Any = None,
    memory: Any = None,
) -> EvalResult:
    """NDCG@k and friends of a frozen encoder on one split (full-corpus exact search).

    Each judged query ``x`` ranks every document ``y`` by ``s(x, y) = x^T M y`` with
    ``M = I`` (or ``operator``), the paper's Appendix F protocol; the ranking is scored by
    :func:`asymgeo.retrieval.metrics.evaluate_indices` (NDCG@k of Appendix F and friends).

    Parameters
    ----------
    dataset : name under ``data_dir``, a BEIR folder or a :class:`~asymgeo.data.BeirDataset`.
    encoder : embedding-cache encoder name (see :func:`asymgeo.data.load_embeddings`); the
        cache is verified against the dataset and its rows validated before scoring.
    split : qrels split, default ``"test"``.
    k : cut-off of the default metrics.
    metrics : explicit ``NAME@K`` list (overrides ``k``).
    operator : optional (p, p) operator ``M``: rank by ``x^T M y``.
    backend : search backend (see :func:`asymgeo.retrieval.search.exact_search`).
    ties : ``"trec_eval"`` (default) orders exactly equal scores by document id
        descending, as trec_eval does, so published figures reproduce; ``"index"`` keeps
        the lower-corpus-row order of :func:`~asymgeo.retrieval.search.exact_search`.
    exclude_queries : query ids left out of the scored set (an adapter's training and
        validation queries, when its adaptation split was carved from this split).
    cache : an :class:`~asymgeo.data.EmbeddingCache` already open for this dataset and
        encoder (checked against both), so that several evaluations share one memory map
        of the corpus instead of mapping (and reading) it once each.
    memory : ``(MemoryTable, threshold, weight)`` of an adapter's document memory
        (:mod:`asymgeo.retrieval.memory`): the ranking adds its gated boosts, exactly
        (:func:`~asymgeo.retrieval.search.memory_search`).

    Returns
    -------
    EvalResult with ``extra`` holding dataset, encoder, split, corpus size, backend, tie order,
    ``n_judged`` (judged queries of the split) and ``n_excluded`` (of those, left out).

    Raises
    ------
    ValueError
        Unknown ``ties``, a split without judged queries, no query with a relevant
        document, a stale or degenerate cache.
    """
    if ties not in TIE_ORDERS:
        raise ValueError(f"ties: expected one of {', '.join(map(repr, TIE_ORDERS))}, got {ties!r}")
    ds = load_beir(dataset, data_dir=data_dir)
    warn_faults(ds)
    qrels = ds.qrels(split)
    if not qrels:
        raise ValueError(f"{ds.path / 'qrels' / (split + '.tsv')}: split {split!r} has no usable relevance judgements")
    if cache is None:
        emb = load_embeddings(ds, encoder, cache_dir=cache_dir)
    else:
        from .cache import verify_cache

        verify_cache(cache, ds, encoder)
        emb = cache
    metrics = list(metrics) if metrics is not None else default_metrics(k)
    n_docs = int(emb.corpus.shape[0])
    depth = min(max(parse_metric(m)[1] for m in metrics), n_docs)
    n_judged = len(qrels)
    if exclude_queries is not None:
        drop = set(exclude_queries)
        qrels = {q: v for q, v in qrels.items() if q not in drop}
        if not qrels:
            raise ValueError(f"split {split!r}: every one of its {n_judged:,} judged queries is excluded "
                             "(they trained or validated the adapter); nothing is left to score")
    table = RelevanceTable(qrels, list(qrels), emb.corpus_ids)
    q_rows = emb.query_rows(table.query_ids)
    Q = np.asarray(emb.queries[q_rows], dtype=np.float32)
    if memory is not None:
        from ..retrieval.search import SearchResult, memory_search

        table_m, threshold, weight = memory
        s_m, i_m = memory_search(Q, emb.corpus, depth, memory=table_m, threshold=threshold, weight=weight,
                                 operator=operator, backend=backend,
                                 corpus_ids=emb.corpus_ids if ties == "trec_eval" else None)
        res = SearchResult(s_m, i_m, backend)
        indices = res.indices
    elif ties == "trec_eval":
        res = search_trec_order(Q, emb.corpus, depth, emb.corpus_ids, operator=operator, backend=backend)
        indices = res.indices
    else:
        res = exact_search(Q, emb.corpus, depth, operator=operator, backend=backend, progress=None)
        indices = res.indices
    out = evaluate_indices(indices, table, metrics)
    out.extra.update(
        dataset=ds.name,
        encoder=get_encoder(encoder).name,
        split=split,
        n_docs=n_docs,
        dim=int(emb.corpus.shape[1]),
        search_depth=int(depth),
        backend=res.backend,
        ties=ties,
        n_judged=n_judged,
        n_excluded=n_judged - len(qrels),
    )
    return out
