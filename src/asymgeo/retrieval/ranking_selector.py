r"""The ranking-aware geometry selector (issue 20): decide by retrieval, not by operator loss.

For each family :math:`g` the closed-form augmented operator of the training moment,

.. math:: M_g(c) = I + c\,\frac{\mathcal P_{g,r}(\widehat C)}{\|\mathcal P_{g,r}(\widehat C)\|_2},

(Theorem 1's truncations, the closed-form baseline of :mod:`asymgeo.adapters.baseline`) is
scored by NDCG@10 of exact full-corpus search for held-out validation queries; each family
keeps its best :math:`c` on a small grid (``c = 0`` is the frozen model, the same for both).
The per-query difference dual - shared of the two best operators has mean ``diff`` and
standard error ``se``; the rule picks dual iff ``diff > se`` (one standard error toward
shared, the family with fewer free directions).  Pure functions on arrays and a
:class:`~asymgeo.retrieval.metrics.RelevanceTable`; no training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._validation import as_float_matrix, check_rank, check_same_shape
from ..kernels.geometry import dual_truncate, shared_truncate
from .metrics import RelevanceTable, evaluate_indices
from .search import exact_search

__all__ = ["RankingChoice", "ranking_choice", "ranking_choice_on_pool", "RANKING_SCALES"]

#: The grid of ``c`` (the closed-form baseline's, :data:`asymgeo.adapters.training.DEFAULT_SCALES`).
RANKING_SCALES: tuple[float, ...] = (0.0, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0)


@dataclass(frozen=True)
class RankingChoice:
    """Outcome of :func:`ranking_choice`.

    Attributes
    ----------
    choice : ``"dual"`` iff ``diff > standard_error``.
    diff, standard_error : mean and standard error of the per-query NDCG@10 difference
        dual - shared at each family's best ``c``.
    ndcg : ``{"shared": v, "dual": v}`` mean validation NDCG@10 at the best ``c``.
    scale : ``{"shared": c, "dual": c}`` the chosen ``c``.
    n_validation : validation queries with a relevant document.
    """

    choice: str
    diff: float
    standard_error: float
    ndcg: dict[str, float]
    scale: dict[str, float]
    n_validation: int

    @property
    def score(self) -> float:
        """``diff``: > 0 favours dual."""
        return self.diff


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
    validation queries better (NDCG@``k``, exact search), one standard error toward shared.

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
    V = np.asarray(validation_queries)
    p = X.shape[1]
    if V.ndim != 2 or V.shape[1] != p or np.asarray(corpus).ndim != 2 or np.asarray(corpus).shape[1] != p:
        raise ValueError(f"validation_queries, corpus: expected (m, {p}) and (N, {p}) arrays, got "
                         f"{V.shape} and {np.asarray(corpus).shape}")
    grid = [float(c) for c in scales]
    if not grid or any(not np.isfinite(c) or c < 0 for c in grid):
        raise ValueError(f"scales: expected non-negative values of c, got {list(scales)!r}")
    rank = check_rank(rank, p)
    C = X.T @ D / X.shape[0]
    best: dict[str, tuple[float, float, np.ndarray]] = {}
    frozen: np.ndarray | None = None
    for family, trunc in (("shared", shared_truncate), ("dual", dual_truncate)):
        M = trunc(C, rank)
        norm = float(np.linalg.norm(M, 2))
        for c in grid:
            if c == 0.0 or norm == 0.0:
                if frozen is None:
                    frozen = _per_query(V, corpus, validation_table, None, k)
                per = frozen
            else:
                per = _per_query(V, corpus, validation_table, np.eye(p) + (c / norm) * M, k)
            if family not in best or per.mean() > best[family][1] + 1e-12:  # ties keep the smaller c
                best[family] = (c, float(per.mean()), per)
    d = best["dual"][2] - best["shared"][2]
    diff = float(d.mean())
    se = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else float("inf")
    return RankingChoice(choice="dual" if diff > se else "shared", diff=diff, standard_error=se,
                         ndcg={g: best[g][1] for g in best}, scale={g: best[g][0] for g in best},
                         n_validation=int(d.size))


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
    """:func:`ranking_choice` inside one labelled pool: a seeded ``validation_fraction`` of its
    *queries* (all rows of a query with several positives go to the same side) are held out with
    their ``qrels``; the other rows give the moment.

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
    return ranking_choice(np.asarray(X)[fit], np.asarray(D)[fit], V, table, corpus, rank, scales=scales)
