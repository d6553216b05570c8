"""Evaluate frozen embeddings (optionally through an operator) on a BEIR split.

Glue between the data layer (:mod:`asymgeo.data`) and retrieval
(:mod:`asymgeo.search`, :mod:`asymgeo.metrics`): rank the whole corpus by exact
inner product for the split's judged queries, then score the ranking.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .metrics import EvalResult, RelevanceTable, evaluate_indices
from .search import exact_search

__all__ = ["default_metrics", "evaluate_frozen"]


def default_metrics(k: int = 10) -> list[str]:
    """``ndcg@k`` (the paper's), graded NDCG, recall@k and @100, precision, MRR, MAP at k."""
    out = [f"ndcg@{k}", f"ndcg_graded@{k}", f"recall@{k}", f"precision@{k}", f"mrr@{k}", f"map@{k}"]
    if k != 100:
        out.insert(3, "recall@100")
    return out


def evaluate_frozen(
    dataset: Any,
    encoder: str,
    *,
    split: str = "test",
    k: int = 10,
    metrics: Sequence[str] | None = None,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    operator: Any = None,
    backend: str = "auto",
) -> EvalResult:
    """NDCG@k and friends of a frozen encoder on one split (full-corpus exact search).

    Parameters
    ----------
    dataset : name under ``data_dir`` or a BEIR folder (see :func:`asymgeo.data.load_beir`).
    encoder : embedding-cache encoder name (see :func:`asymgeo.data.load_embeddings`).
    split : qrels split, default ``"test"``.
    k : cut-off of the default metrics.
    metrics : explicit ``NAME@K`` list (overrides ``k``).
    operator : optional (p, p) operator ``M``: rank by ``x^T M y``.

    Returns
    -------
    EvalResult with ``extra`` holding dataset, encoder, split, corpus size and backend.
    """
    from .data import load_beir, load_embeddings

    ds = load_beir(dataset, data_dir=data_dir)
    qrels = ds.qrels(split)
    if not qrels:
        raise ValueError(f"{dataset}: split {split!r} has no usable relevance judgements")
    emb = load_embeddings(ds, encoder, cache_dir=cache_dir)
    metrics = list(metrics) if metrics is not None else default_metrics(k)
    from .metrics import parse_metric

    depth = min(max(parse_metric(m)[1] for m in metrics), emb.corpus.shape[0])
    table = RelevanceTable(qrels, list(qrels), emb.corpus_ids)
    q_rows = emb.query_rows(table.query_ids)
    Q = np.asarray(emb.queries[q_rows], dtype=np.float32)
    res = exact_search(Q, emb.corpus, depth, operator=operator, backend=backend, progress=None)
    out = evaluate_indices(res.indices, table, metrics)
    out.extra.update(
        dataset=getattr(ds, "name", str(dataset)),
        encoder=encoder,
        split=split,
        n_docs=int(emb.corpus.shape[0]),
        dim=int(emb.corpus.shape[1]),
        search_depth=int(depth),
        backend=res.backend,
    )
    return out
