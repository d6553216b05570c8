r"""``DocumentMemory``: remember the documents past queries found, without bending the map.

A trained map generalises (it is chosen on document-disjoint validation), but it leaves on
the table what the training pairs say most directly: a new query close to a training query
probably wants that query's document.  Storing that in the low-rank map bends every other
query (the paper protocol's loss on unseen-document queries); storing it as a gated score
boost does not.  The score is

.. math::
    s(x, y_d) = x^\top M y_d + \alpha \max_{q \in K_d} \frac{\max(0, x^\top q - \tau)}{1 - \tau}

(:mod:`asymgeo.retrieval.memory`): ``M`` the map's operator, ``K_d`` the keys (frozen
query embeddings) whose relevant documents include ``d``.  ``tau`` and ``alpha`` are
chosen on validation: the highest NDCG@10 over all validation queries among the gates that
do not lower the map's NDCG@10 on the *protected* validation queries (those none of whose
relevant documents is remembered: the document-disjoint validation queries of
:func:`~asymgeo.adapters.workflow.document_disjoint_validation`), so queries about other
documents are ranked as the map ranks them.  ``tau`` is searched on quantiles of the
validation queries' nearest-key similarity (calibrated per encoder: encoders whose queries
sit close together get a stricter gate), ``alpha`` on multiples of the map's score spread
(the median gap between a validation query's first and tenth score).  ``alpha = 0`` (no
memory) is always a candidate, so on validation the memory never ranks below the map.

After selection :meth:`DocumentMemory.extend` adds the validation queries as keys (their
labels are known; the chosen gate stays), so the deployed memory holds every labelled
query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..retrieval.memory import MemoryTable, memory_boosts, memory_rerank, memory_similarity, memory_table
from ..retrieval.search import memory_candidates

__all__ = ["DocumentMemory", "GATE_QUANTILES", "WEIGHT_MULTIPLES", "MIN_PROTECTED"]

#: quantiles of the validation queries' nearest-key similarity tried as the gate ``tau``
GATE_QUANTILES: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(1, 20))
#: multiples of the map's score spread tried as the weight ``alpha``
WEIGHT_MULTIPLES: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
#: fewest protected validation queries for the guard to apply
MIN_PROTECTED = 32


class DocumentMemory:
    """A gated memory of labelled queries' documents, chosen on validation (module docstring).

    Parameters
    ----------
    gate_quantiles : quantiles of the validation nearest-key similarity tried as ``tau``.
    weight_multiples : multiples of the score spread tried as ``alpha``.
    min_protected : fewest protected validation queries for the guard; with fewer, the gate
        is chosen on all validation queries alone and ``notes_`` says so.

    Attributes (after :meth:`fit`)
    ------------------------------
    threshold_ : float, the gate ``tau``.  weight_ : float, ``alpha`` (0: no memory).
    scale_ : float, the score spread ``alpha`` is a multiple of.
    table_ : :class:`~asymgeo.retrieval.memory.MemoryTable`, the keys and their documents.
    validation_ndcg_ : validation NDCG@10 with the chosen memory (map alone: ``map_validation_ndcg_``).
    validation_values_ : (m,) the per-query NDCG@10 behind ``validation_ndcg_`` (before :meth:`extend`).
    protected_diff_ : mean NDCG@10 change on the protected validation queries (or None).
    n_protected_ : int.  history_ : one record per (tau, alpha) tried.  notes_ : list of str.
    """

    def __init__(self, *, gate_quantiles: Sequence[float] = GATE_QUANTILES,
                 weight_multiples: Sequence[float] = WEIGHT_MULTIPLES, min_protected: int = MIN_PROTECTED):
        self.gate_quantiles = gate_quantiles
        self.weight_multiples = weight_multiples
        self.min_protected = min_protected

    def fit(self, keys: Any, relevant_rows: Sequence[Any], corpus: Any, *,  # noqa: C901 - checks, then one grid
            validation_queries: Any,
            validation_relevance: Any, protected: Any = None, operator: Any = None,
            corpus_ids: Sequence[str] | None = None,
            validation_rows: Sequence[Any] | None = None) -> DocumentMemory:
        """Choose ``tau`` and ``alpha`` on validation.

        ``keys`` (n, p): frozen embeddings of the training queries; ``relevant_rows[i]``: corpus
        rows relevant to key ``i``; ``validation_relevance``: a
        :class:`~asymgeo.retrieval.metrics.RelevanceTable` of ``validation_queries``;
        ``protected``: indices (or a boolean mask) of the validation queries the memory must not
        hurt; ``operator``: the map's (p, p) operator (``None``: frozen).

        ``validation_rows`` (the corpus rows relevant to each validation query): score every
        gate as the *deployed* memory will meet a new query, after :meth:`extend` has added
        the validation queries as keys: each validation query ``i`` is scored against the
        training keys plus every other validation query (leave-one-out:
        :func:`~asymgeo.retrieval.memory.memory_similarity` with ``exclude_keys``), and the
        protected queries are those none of whose relevant documents any of those keys
        remembers (``protected`` is then ignored; the mask is ``protected_``).  Scored with
        the training keys alone, the guard saw fewer remembered documents than a test query
        meets, and unseen-document test queries lost what validation said they would not.
        ``table_`` holds the training keys only either way.
        """
        from ..retrieval.metrics import evaluate_indices

        qs = [float(v) for v in self.gate_quantiles]
        ws = [float(v) for v in self.weight_multiples]
        if not qs or any(not 0.0 <= v <= 1.0 for v in qs):
            raise ValueError(f"gate_quantiles: expected values in [0, 1], got {self.gate_quantiles!r}")
        if not ws or any(not (np.isfinite(v) and v > 0) for v in ws):
            raise ValueError(f"weight_multiples: expected positive numbers, got {self.weight_multiples!r}")
        n_docs = int(corpus.shape[0])
        table = memory_table(keys, relevant_rows, n_docs=n_docs)
        V = np.asarray(validation_queries, dtype=np.float32)
        if V.ndim != 2 or V.shape[1] != table.keys.shape[1]:
            raise ValueError(f"validation_queries: expected shape (m, {table.keys.shape[1]}), got {V.shape}")
        prot = np.zeros(V.shape[0], dtype=bool)
        scored, exclude = table, None  # the memory each validation query is scored against
        if validation_rows is not None:
            if len(validation_rows) != V.shape[0]:
                raise ValueError(f"validation_rows: {len(validation_rows)} row sets for {V.shape[0]} "
                                 "validation queries")
            val_sets = [{int(r) for r in rows} for rows in validation_rows]
            scored = table.extended(V, val_sets)
            exclude = table.n_keys + np.arange(V.shape[0], dtype=np.int64)
            train_docs = set(table.documents.tolist())
            holders: dict[int, int] = {}  # document -> how many validation queries hold it
            for rows in val_sets:
                for r in rows:
                    holders[r] = holders.get(r, 0) + 1
            # protected: no relevant document is a training positive or another validation query's
            prot = np.array([not any(r in train_docs or holders[r] > 1 for r in rows) for rows in val_sets],
                            dtype=bool)
        elif protected is not None:
            pa = np.asarray(protected)
            if pa.dtype == bool:
                if pa.shape != (V.shape[0],):
                    raise ValueError(f"protected: a mask of shape ({V.shape[0]},) expected, got {pa.shape}")
                prot = pa.copy()
            else:
                prot[pa.astype(np.int64)] = True
        self.notes_: list[str] = []
        self.protected_ = prot
        self.leave_one_out_ = validation_rows is not None
        self.n_protected_ = int(prot.sum())
        guard = self.n_protected_ >= int(self.min_protected)
        if not guard:
            self.notes_.append(f"memory: only {self.n_protected_} validation queries have no remembered relevant "
                               f"document (< {self.min_protected}): the gate is chosen on all validation "
                               "queries without the unseen-document guard")
        k = 10
        cands = memory_candidates(V, corpus, k, scored, operator=operator, corpus_ids=corpus_ids)

        def per_query(idx: np.ndarray) -> np.ndarray:
            return evaluate_indices(idx, validation_relevance, ["ndcg@10"]).per_query["ndcg@10"]

        base = per_query(cands.indices[:, :k])
        self.map_validation_ndcg_ = float(base.mean())
        spread = cands.scores[:, 0] - cands.scores[:, min(k, cands.scores.shape[1]) - 1]
        self.scale_ = float(np.median(spread)) if spread.size else 0.0
        sim = memory_similarity(V, scored, exclude_keys=exclude)  # one pass over the pairs serves every gate
        if not scored.n_keys:
            nearest = np.zeros(V.shape[0], dtype=np.float32)
        else:  # each validation query's most similar key (its own left out)
            S = V @ scored.keys.T
            if exclude is not None:
                S[np.arange(V.shape[0]), exclude] = -np.inf
            nearest = np.where(np.isfinite(S.max(axis=1)), S.max(axis=1), -1.0)
        taus = sorted({min(float(np.quantile(nearest, q)), 0.999) for q in qs})
        best = (self.map_validation_ndcg_, 1.0, 0.0, 0.0)  # (ndcg, tau, alpha, protected diff): no memory
        best_values = base
        self.history_: list[dict[str, float]] = []
        for tau in sorted(taus, reverse=True):  # strictest first: on a tie the stricter gate stays
            unit = memory_boosts(V, scored, tau, 1.0, similarity=sim)
            for w in sorted(ws):  # smallest first, whatever the order given: on a tie the smaller weight stays
                alpha = w * self.scale_
                if alpha <= 0:
                    continue
                v = per_query(memory_rerank(cands, scored, unit * np.float32(alpha), k, corpus_ids=corpus_ids)[1])
                d_prot = float((v - base)[prot].mean()) if prot.any() else 0.0
                ok = (not guard) or d_prot >= 0.0
                self.history_.append({"threshold": tau, "weight": alpha, "multiple": w,
                                      "validation_ndcg": float(v.mean()), "protected_diff": d_prot, "feasible": ok})
                # ties: the stricter gate, then the smaller weight
                if ok and (v.mean() > best[0] + 1e-12):
                    best = (float(v.mean()), tau, alpha, d_prot)
                    best_values = v
        self.validation_ndcg_, self.threshold_, self.weight_, d = best
        self.validation_values_ = np.asarray(best_values, dtype=np.float64)
        self.protected_diff_ = d if prot.any() else None
        self.table_ = table
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "table_"):
            raise ValueError("DocumentMemory: not fitted; call fit first")

    @property
    def active(self) -> bool:
        """Whether the chosen memory changes any score (``weight_ > 0`` and something remembered)."""
        self._check_fitted()
        return self.weight_ > 0 and self.table_.n_documents > 0

    def extend(self, keys: Any, relevant_rows: Sequence[Any]) -> DocumentMemory:
        """Add keys (e.g. the validation queries, once selection is done); the gate and weight stay."""
        self._check_fitted()
        self.table_ = self.table_.extended(keys, relevant_rows)
        return self

    def boosts(self, queries: Any) -> np.ndarray:
        """(m, n_documents) boosts of the remembered documents ``table_.documents``."""
        self._check_fitted()
        return memory_boosts(queries, self.table_, self.threshold_, self.weight_)

    def search(self, queries: Any, corpus: Any, k: int = 10, *, operator: Any = None,
               corpus_ids: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-``k`` ``(scores, indices)`` under the map's operator plus the memory."""
        self._check_fitted()
        cands = memory_candidates(queries, corpus, k, self.table_, operator=operator, corpus_ids=corpus_ids)
        return memory_rerank(cands, self.table_, self.boosts(queries), k, corpus_ids=corpus_ids)

    @classmethod
    def from_table(cls, table: MemoryTable, threshold: float, weight: float) -> DocumentMemory:
        """A fitted memory from saved parts (:func:`asymgeo.adapters.io.load_adapter`)."""
        m = cls()
        m.table_, m.threshold_, m.weight_ = table, float(threshold), float(weight)
        m.scale_, m.notes_, m.history_ = float("nan"), [], []
        m.validation_ndcg_ = m.map_validation_ndcg_ = float("nan")
        m.validation_values_ = np.zeros(0, dtype=np.float64)
        m.protected_diff_, m.n_protected_ = None, 0
        m.protected_, m.leave_one_out_ = np.zeros(0, dtype=bool), False
        return m

    def describe(self) -> dict[str, Any]:
        """A JSON-ready record: gate, weight, what is remembered, how it was chosen."""
        self._check_fitted()
        return {"threshold": self.threshold_, "weight": self.weight_, "scale": self.scale_,
                "n_keys": self.table_.n_keys, "n_documents": self.table_.n_documents,
                "n_pairs": int(self.table_.pair_key.size), "validation_ndcg@10": self.validation_ndcg_,
                "map_validation_ndcg@10": self.map_validation_ndcg_, "protected_diff": self.protected_diff_,
                "n_protected": self.n_protected_, "notes": list(self.notes_)}
