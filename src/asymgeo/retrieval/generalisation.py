"""Whether a gain carries over to new queries: seen / unseen-document subsets, the document prior.

An adapter trained on labelled (query, positive document) pairs can raise NDCG@10 on test
queries just by pulling *the training positives* up for everyone.  Where a test query's
relevant documents are themselves training positives that helps; elsewhere it hurts.  This
module separates the two, on rankings already computed (no files, no training):

* A document is **seen** when it is a labelled positive (grade > 0) of at least one of the
  queries that trained the adapter.  A test query is a **seen-document query** when at
  least one of its relevant documents (grade > 0 in the test qrels) is seen, else an
  **unseen-document query** (:func:`seen_document_split`).
* On datasets with dense qrels (NFCorpus: every test query has a seen relevant document)
  the per-query split is empty on one side; :func:`unseen_relevant_ranking` scores each
  query on its *unseen* relevant documents only: its seen relevant documents are removed
  from both the ranking and the judgements (so ranking them high neither helps nor hurts),
  seen documents that are not relevant to it stay in the ranking and count as misses.
  Queries with no unseen relevant document are left out.
* The **document prior** (:func:`document_prior_topk`) is the non-geometric baseline:
  ``s(x, y) = x^T y + beta * 1[y is seen]`` on the frozen embeddings, exact top-k;
  ``beta`` is chosen on validation queries (:func:`choose_prior_weight`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .._ids import IdIndex

__all__ = [
    "SeenSplit",
    "seen_documents",
    "seen_document_split",
    "unseen_relevant_ranking",
    "document_prior_topk",
    "choose_prior_weight",
    "PRIOR_WEIGHTS",
]

#: The grid of prior weights ``beta`` tried on validation (cosine scores lie in [-1, 1]).
PRIOR_WEIGHTS: tuple[float, ...] = (0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3)


def seen_documents(train_qrels: Mapping[str, Mapping[str, int]], train_queries: Collection[str]) -> set[str]:
    """Ids of the documents labelled positive (grade > 0) for at least one of ``train_queries``."""
    out: set[str] = set()
    for q in train_queries:
        for d, g in (train_qrels.get(q) or {}).items():
            if g > 0:
                out.add(str(d))
    return out


@dataclass(frozen=True)
class SeenSplit:
    """Test queries split by whether a relevant document was a training positive.

    ``seen`` / ``unseen``: query ids (in qrels order); ``seen_share[q]``: the fraction of
    ``q``'s relevant documents that are seen; ``n_seen_relevant[q]``: how many.
    """

    seen: list[str]
    unseen: list[str]
    seen_share: dict[str, float]
    n_seen_relevant: dict[str, int]

    def as_dict(self) -> dict[str, object]:
        shares = np.array(list(self.seen_share.values()), dtype=np.float64)
        return {"n_seen": len(self.seen), "n_unseen": len(self.unseen),
                "mean_seen_share": float(shares.mean()) if shares.size else float("nan")}


def seen_document_split(qrels: Mapping[str, Mapping[str, int]], seen: Collection[str]) -> SeenSplit:
    """Split the queries of ``qrels`` (test judgements) by ``seen`` documents (see the module docstring).

    Queries with no relevant document (grade > 0) are left out of both sides.
    """
    seen = set(seen)
    yes: list[str] = []
    no: list[str] = []
    share: dict[str, float] = {}
    count: dict[str, int] = {}
    for q, docs in qrels.items():
        rel = [str(d) for d, g in docs.items() if g > 0]
        if not rel:
            continue
        k = sum(d in seen for d in rel)
        count[q], share[q] = k, k / len(rel)
        (yes if k else no).append(q)
    return SeenSplit(yes, no, share, count)


def unseen_relevant_ranking(
    indices: np.ndarray,
    query_ids: Sequence[str],
    qrels: Mapping[str, Mapping[str, int]],
    corpus_ids: Sequence[str],
    seen: Collection[str],
    k: int,
) -> tuple[np.ndarray, list[str], dict[str, dict[str, int]]]:
    """Rankings and judgements restricted to unseen relevant documents.

    ``indices`` (n, K) ranks corpus rows for ``query_ids``; K must exceed ``k`` by at least
    each query's number of seen relevant documents (``ValueError`` otherwise).
    Returns ``(indices (m, k), kept query ids, qrels)``: for each query with at least one
    unseen relevant document, its ranking with its seen relevant documents removed, and its
    judgements without them.
    """
    seen = set(seen)
    idx = np.asarray(indices)
    if idx.ndim != 2 or idx.shape[0] != len(query_ids):
        raise ValueError(f"indices: expected shape ({len(query_ids)}, K), got {idx.shape}")
    if isinstance(corpus_ids, IdIndex):  # only the seen judged documents are looked up (no dict of every id)
        wanted = sorted({str(d) for q in query_ids for d, g in (qrels.get(q) or {}).items() if g > 0
                         and str(d) in seen})
        row_of = {d: int(j) for d, j in zip(wanted, corpus_ids.lookup(wanted), strict=True) if j >= 0}
    else:
        row_of = {str(d): i for i, d in enumerate(corpus_ids)}
    out_rows: list[np.ndarray] = []
    kept: list[str] = []
    new_qrels: dict[str, dict[str, int]] = {}
    for i, q in enumerate(query_ids):
        docs = qrels.get(q) or {}
        unseen_rel = {d: g for d, g in docs.items() if g > 0 and str(d) not in seen}
        if not unseen_rel:
            continue
        drop = {row_of[str(d)] for d, g in docs.items() if g > 0 and str(d) in seen and str(d) in row_of}
        ranked = [r for r in idx[i].tolist() if r not in drop][:k]
        if len(ranked) < k:
            raise ValueError(f"indices: {idx.shape[1]} ranked documents are too few to leave {k} after removing "
                             f"query {q!r}'s {len(drop)} seen relevant documents; search deeper")
        out_rows.append(np.asarray(ranked, dtype=np.int64))
        kept.append(str(q))
        new_qrels[str(q)] = {d: g for d, g in docs.items() if str(d) not in seen or g <= 0}
    arr = np.vstack(out_rows) if out_rows else np.zeros((0, k), dtype=np.int64)
    return arr, kept, new_qrels


def document_prior_topk(
    frozen_scores: np.ndarray,
    frozen_indices: np.ndarray,
    prior_scores: np.ndarray,
    prior_indices: np.ndarray,
    is_seen: np.ndarray,
    beta: float,
    k: int,
) -> np.ndarray:
    """Exact top-``k`` rows under ``x^T y + beta * 1[y seen]`` from two frozen top-k searches.

    ``frozen_*``: top-k (or deeper) of every document by ``x^T y``; ``prior_*``: top-k of
    the *seen* documents only (corpus row numbers); ``is_seen``: boolean per corpus row.
    The top k under the boosted score lies in the union of the two lists (a document
    outside both is beaten by k documents of its own kind), so merging them is exact.
    Ties keep the lower corpus row first.
    """
    if beta < 0 or not np.isfinite(beta):
        raise ValueError(f"beta: expected a finite number >= 0, got {beta!r}")
    n = frozen_indices.shape[0]
    out = np.empty((n, k), dtype=np.int64)
    for i in range(n):
        rows = np.concatenate([frozen_indices[i], prior_indices[i]])
        scores = np.concatenate([frozen_scores[i], prior_scores[i]]).astype(np.float64)
        scores = scores + beta * is_seen[rows]
        rows, first = np.unique(rows, return_index=True)  # sorted rows, one score each
        scores = scores[first]
        order = np.lexsort((rows, -scores))[:k]
        out[i] = rows[order]
    return out


def choose_prior_weight(ndcg_of_beta: Mapping[float, float]) -> float:
    """The ``beta`` with the highest validation NDCG; ties go to the smallest ``beta``."""
    best = max(ndcg_of_beta.values())
    return min(b for b, v in ndcg_of_beta.items() if v >= best - 1e-12)
