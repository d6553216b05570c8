r"""Retrieval for the ranking-aware geometry selector (issue 20): decide by retrieval, not by operator loss.

The rule itself lives in the selector registry (:mod:`asymgeo.selectors.ranking`): for each
family the closed-form augmented operator :math:`I + c\,\mathcal P_{g,r}(\widehat C)/\|\cdot\|_2`
is scored by per-query NDCG@10 of held-out validation queries, each family keeping its best
``c``; dual iff the paired difference exceeds one standard error.  This module gives it what
it needs from this layer: :func:`ranking_scorer` (exact full-corpus search of judged
validation queries through an operator) and :func:`pool_validation` (a seeded fifth of a
labelled pool's queries held out as those validation queries); :func:`ranking_choice` and
:func:`ranking_choice_on_pool` run the registry's rule on them.  :func:`heldout_retrieval` is
``select --validate --retrieval``: both closed forms scored on the held-out folds of the
operator-loss check, so a verdict about operator loss can be read beside one about retrieval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .._validation import as_float_matrix, check_same_shape
from ..selectors.ranking import RANKING_SCALES, RankingChoice
from ..selectors.registry import SelectionContext, get_rule
from .metrics import RelevanceTable, evaluate_indices
from .search import exact_search

__all__ = ["RankingChoice", "ranking_choice", "ranking_choice_on_pool", "ranking_scorer", "pool_validation",
           "RANKING_SCALES", "HeldoutRetrieval", "heldout_retrieval"]


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


@dataclass(frozen=True)
class HeldoutRetrieval:
    """Outcome of :func:`heldout_retrieval`.

    Attributes
    ----------
    ndcg : ``{"frozen", "shared", "dual"}`` mean held-out NDCG@k over every held-out query.
    diff, standard_error : mean and paired standard error of the per-query difference dual - shared.
    per_fold : per fold: held-out queries, the chosen ``c`` of each family and the fold's mean NDCG@k.
    n_queries, n_folds, rank, k, centred : the protocol.
    """

    ndcg: dict[str, float]
    diff: float
    standard_error: float
    per_fold: list[dict]
    n_queries: int
    n_folds: int
    rank: int
    k: int
    centred: bool

    def as_dict(self) -> dict:
        return {"ndcg": dict(self.ndcg), "diff": self.diff, "standard_error": self.standard_error,
                "per_fold": [dict(f) for f in self.per_fold], "n_queries": self.n_queries, "n_folds": self.n_folds,
                "rank": self.rank, "k": self.k, "centred": self.centred}


def heldout_retrieval(
    X: np.ndarray,
    D: np.ndarray,
    query_ids: Sequence[str],
    qrels: dict[str, dict[str, int]],
    corpus: np.ndarray,
    corpus_ids: Sequence[str],
    rank: int,
    *,
    folds: int = 5,
    seed: int = 0,
    centred: bool = False,
    scales: Sequence[float] = RANKING_SCALES,
    k: int = 10,
) -> HeldoutRetrieval:
    r"""Retrieval beside the operator-loss check: both closed forms on the held-out folds of
    :func:`~asymgeo.estimators.validation.validate_selection` (``select --validate --retrieval``).

    For each fold :math:`f` (the same query folds, :data:`~asymgeo.kernels.folds.FOLD_SEED`), with
    the training pool's moment :math:`\widehat C_f = X_f^	op D_f / n_f` (centred by the pool's
    means when ``centred``), each family's closed-form augmented operator

    .. math:: M_g(c_g) = I + c_g\,rac{\mathcal P_{g,r}(\widehat C_f)}{\|\mathcal P_{g,r}(\widehat C_f)\|_2}

    keeps the :math:`c_g` of ``scales`` that the ``ranking`` rule picks on a seeded fifth of the
    pool (:func:`pool_validation`; a single scale is used as given), and the fold's held-out
    queries (each query's first row) are searched over the full ``corpus`` through
    :math:`M_s`, :math:`M_d` and :math:`I` (frozen).  Per-query NDCG@``k`` of every held-out query
    is pooled over folds; ``diff`` and ``standard_error`` are the mean and paired standard error of
    :math:`\mathrm{NDCG}_d - \mathrm{NDCG}_s`.

    Parameters
    ----------
    X, D : (n, p) triples' queries and ``Y_pos - Y_neg``; row i belongs to ``query_ids[i]``.
    qrels : judgements of (at least) the pool's queries.
    corpus, corpus_ids : the documents searched and their ids.
    rank : r.
    folds : held-out folds (``select --folds``).
    seed : seed of the inner fifth that chooses ``c``.
    centred : fit on the pool-centred moment (the directional part, as ``--centred``).
    scales : the grid of ``c``.
    k : NDCG cut-off.
    """
    from ..kernels.folds import FOLD_SEED, fold_split, query_folds
    from ..kernels.geometry import dual_truncate, shared_truncate
    from ..kernels.operator_risk import centre

    X = as_float_matrix(X, "X")
    D = as_float_matrix(D, "D")
    check_same_shape({"X": X, "D": D})
    ids = [str(q) for q in query_ids]
    if len(ids) != X.shape[0]:
        raise ValueError(f"query_ids: expected {X.shape[0]} ids (one per row), got {len(ids)}")
    grid = [float(c) for c in scales]
    if not grid or any(not np.isfinite(c) or c < 0 for c in grid):
        raise ValueError(f"scales: expected non-negative values of c, got {grid!r}")
    p = X.shape[1]
    C_docs = np.asarray(corpus)
    rows_of: dict[str, list[int]] = {}
    for i, q in enumerate(ids):
        rows_of.setdefault(q, []).append(i)
    fold_ids = query_folds(sorted(rows_of), folds, FOLD_SEED)
    per_query: dict[str, list[np.ndarray]] = {"frozen": [], "shared": [], "dual": []}
    per_fold = []
    for f in range(folds):
        pool, held = fold_split(fold_ids, f)
        rows = np.array([i for q in pool for i in rows_of[q]])
        Xp, Dp = X[rows], D[rows]
        if centred:
            Xp, Dp = centre(Xp, Dp, Xp.mean(axis=0), Dp.mean(axis=0))
        if len(grid) == 1:
            chosen = {"shared": grid[0], "dual": grid[0]}
        else:
            chosen = ranking_choice_on_pool(Xp, Dp, [ids[i] for i in rows], qrels, C_docs, corpus_ids, rank,
                                            seed=seed, scales=grid).scale
        held_ids = sorted(held)
        missing = [q for q in held_ids if q not in qrels]
        if missing:
            raise ValueError(f"qrels: no judgements for held-out query {missing[0]!r} ({len(missing)} missing)")
        table = RelevanceTable({q: qrels[q] for q in held_ids}, held_ids, corpus_ids, unknown_docs="ignore")
        V = X[[rows_of[q][0] for q in held_ids]]
        C_hat = Xp.T @ Dp / Xp.shape[0]
        fold_row: dict = {"fold": f, "queries": len(held_ids), "scale": dict(chosen)}
        frozen = _per_query(V, C_docs, table, None, k)
        per_query["frozen"].append(frozen)
        fold_row["frozen"] = float(frozen.mean())
        for family, trunc in (("shared", shared_truncate), ("dual", dual_truncate)):
            M = trunc(C_hat, rank)
            norm = float(np.linalg.norm(M, 2))
            c = chosen[family]
            per = frozen if c == 0.0 or norm == 0.0 else _per_query(V, C_docs, table, np.eye(p) + (c / norm) * M, k)
            per_query[family].append(per)
            fold_row[family] = float(per.mean())
        per_fold.append(fold_row)
    pooled = {g: np.concatenate(v) for g, v in per_query.items()}
    d = pooled["dual"] - pooled["shared"]
    se = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else float("inf")
    return HeldoutRetrieval(ndcg={g: float(v.mean()) for g, v in pooled.items()}, diff=float(d.mean()),
                            standard_error=se, per_fold=per_fold, n_queries=int(d.size), n_folds=int(folds),
                            rank=int(rank), k=int(k), centred=bool(centred))
