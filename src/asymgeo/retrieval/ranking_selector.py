r"""Retrieval for the ranking-aware geometry selector (issue 20): decide by retrieval, not by operator loss.

The rule itself lives in the selector registry (:mod:`asymgeo.selectors.ranking`): for each
family the closed-form augmented operator :math:`I + c\,\mathcal P_{g,r}(\widehat C)/\|\cdot\|_2`
is scored by per-query NDCG@10 of held-out validation queries, each family keeping its best
``c``; dual iff the paired difference exceeds one standard error.  This module gives it what
it needs from this layer: :func:`ranking_scorer` (exact full-corpus search of judged
validation queries through an operator) and :func:`pool_validation` (a seeded fifth of a
labelled pool's queries held out as those validation queries); :func:`ranking_choice` and
:func:`ranking_choice_on_pool` run the registry's rule on them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .._validation import as_float_matrix, check_same_shape
from ..selectors.ranking import RANKING_SCALES, RankingChoice
from ..selectors.registry import SelectionContext, get_rule
from .metrics import RelevanceTable, evaluate_indices
from .search import exact_search

__all__ = ["RankingChoice", "ranking_choice", "ranking_choice_on_pool", "ranking_scorer", "pool_validation",
           "RANKING_SCALES"]


def ranking_scorer(validation_queries: np.ndarray, validation_table: RelevanceTable, corpus: np.ndarray,
                   k: int = 10) -> Callable[[np.ndarray | None], np.ndarray]:
    """``f(M) -> (m,)``: per-query NDCG@``k`` of ``validation_queries`` (rows in ``validation_table``'s
    query order) by exact search of ``corpus`` through the operator ``M`` (None: frozen)."""
    V = np.asarray(validation_queries)
    C = np.asarray(corpus)
    if V.ndim != 2 or C.ndim != 2 or V.shape[1] != C.shape[1]:
        raise ValueError(f"validation_queries, corpus: expected (m, p) and (N, p) arrays, got {V.shape} and {C.shape}")

    def score(operator: np.ndarray | None) -> np.ndarray:
        return _per_query(V, corpus, validation_table, operator, k)

    return score


def _per_query(queries: np.ndarray, corpus: np.ndarray, table: RelevanceTable, operator: np.ndarray | None,
               k: int) -> np.ndarray:
    idx = exact_search(queries, corpus, min(k, corpus.shape[0]), operator=operator, progress=None).indices
    return evaluate_indices(idx, table, [f"ndcg@{k}"]).per_query[f"ndcg@{k}"]


def ranking_choice(
    X: np.ndarray,
    D: np.ndarray,
    validation_queries: np.ndarray,
    validation_table: RelevanceTable,
    corpus: np.ndarray,
    rank: int,
    *,
    scales: Sequence[float] = RANKING_SCALES,
    k: int = 10,
) -> RankingChoice:
    r"""The family whose closed-form augmented operator :math:`I + c\,M_g/\|M_g\|_2` ranks the
    validation queries better (NDCG@``k``, exact search), one standard error toward shared:
    the registry's rule ``"ranking"`` with :func:`ranking_scorer`.

    Parameters
    ----------
    X, D : (n, p) training queries and ``Y_pos - Y_neg`` (the moment :math:`\widehat C = X^\top D/n`;
        centre them first for the directional part).
    validation_queries : (m, p) held-out queries, rows in ``validation_table``'s query order.
    validation_table : their relevance judgements over ``corpus``'s rows.
    corpus : (N, p) document embeddings.
    rank : r.
    scales : the grid of ``c`` (each >= 0).
    k : NDCG cut-off.
    """
    X = as_float_matrix(X, "X")
    D = as_float_matrix(D, "D")
    check_same_shape({"X": X, "D": D})
    p = X.shape[1]
    V = np.asarray(validation_queries)
    if V.ndim != 2 or V.shape[1] != p or np.asarray(corpus).ndim != 2 or np.asarray(corpus).shape[1] != p:
        raise ValueError(f"validation_queries, corpus: expected (m, {p}) and (N, {p}) arrays, got "
                         f"{V.shape} and {np.asarray(corpus).shape}")
    context = SelectionContext(score_operator=ranking_scorer(V, validation_table, corpus, k),
                               scales=tuple(float(c) for c in scales))
    return get_rule("ranking").decide(X, D, rank, context=context).result


def pool_validation(
    X: np.ndarray,
    D: np.ndarray,
    query_ids: Sequence[str],
    qrels: dict[str, dict[str, int]],
    corpus: np.ndarray,
    corpus_ids: Sequence[str],
    *,
    validation_fraction: float = 0.2,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, RelevanceTable]:
    """Hold out a seeded ``validation_fraction`` of a labelled pool's *queries* (all rows of a query
    with several positives go to the same side) with their ``qrels``: returns the other rows'
    ``(X, D)``, the held-out queries' embeddings (their first row) and their :class:`RelevanceTable`
    over ``corpus_ids`` (give both to :func:`ranking_scorer`).

    Parameters
    ----------
    X, D : (n, p) triples' queries and ``Y_pos - Y_neg``; row i belongs to ``query_ids[i]``.
    qrels : judgements of (at least) the pool's queries, ``{qid: {docid: grade}}``.
    corpus, corpus_ids : the documents searched and their ids (row order).
    """
    ids = [str(q) for q in query_ids]
    if len(ids) != np.asarray(X).shape[0]:
        raise ValueError(f"query_ids: expected {np.asarray(X).shape[0]} ids (one per row), got {len(ids)}")
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(f"validation_fraction: expected a value in (0, 1), got {validation_fraction!r}")
    unique = sorted(set(ids))
    if len(unique) < 4:
        raise ValueError(f"query_ids: {len(unique)} distinct queries; the ranking selector needs at least 4")
    perm = np.random.default_rng(np.random.SeedSequence(int(seed))).permutation(len(unique))
    n_val = max(2, int(round(validation_fraction * len(unique))))
    held = {unique[i] for i in perm[:n_val]}
    fit = np.array([i for i, q in enumerate(ids) if q not in held])
    first: dict[str, int] = {}
    for i, q in enumerate(ids):
        if q in held:
            first.setdefault(q, i)
    val_ids = sorted(first)
    missing = [q for q in val_ids if q not in qrels]
    if missing:
        raise ValueError(f"qrels: no judgements for validation query {missing[0]!r} ({len(missing)} missing)")
    table = RelevanceTable({q: qrels[q] for q in val_ids}, val_ids, corpus_ids, unknown_docs="ignore")
    V = np.asarray(X)[[first[q] for q in val_ids]]
    return np.asarray(X)[fit], np.asarray(D)[fit], V, table


def ranking_choice_on_pool(
    X: np.ndarray,
    D: np.ndarray,
    query_ids: Sequence[str],
    qrels: dict[str, dict[str, int]],
    corpus: np.ndarray,
    corpus_ids: Sequence[str],
    rank: int,
    *,
    validation_fraction: float = 0.2,
    seed: int = 0,
    scales: Sequence[float] = RANKING_SCALES,
) -> RankingChoice:
    """:func:`ranking_choice` inside one labelled pool (:func:`pool_validation`'s split)."""
    Xf, Df, V, table = pool_validation(X, D, query_ids, qrels, corpus, corpus_ids,
                                       validation_fraction=validation_fraction, seed=seed)
    return ranking_choice(Xf, Df, V, table, corpus, rank, scales=scales)
