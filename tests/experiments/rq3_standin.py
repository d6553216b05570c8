"""A closed-form stand-in for ``asymgeo.adapters.Adapter`` (TEST ONLY).

It follows the adapter API contract closely enough for the RQ3 cells: the operator is
``I + c M / ||M||_2`` (augmented form) with ``M`` the closed-form shared or dual
truncation of the training moment, and the "learning rate" ``lr`` picks the scale
``c = 1000 lr`` by validation NDCG@10 (exact full-corpus search), as the real adapter
picks its learning rate.  Every fitted instance is appended to ``FITTED``.
"""

from __future__ import annotations

import numpy as np

from asymgeo.estimators.projections import DualProjection, SharedProjection
from asymgeo.retrieval.metrics import evaluate_indices
from asymgeo.retrieval.search import exact_search

FITTED: list[StandInAdapter] = []


class StandInAdapter:
    def __init__(self, geometry="shared", rank=16, form="augmented", init="closed_form",
                 learning_rates=(3e-4, 1e-3, 3e-3), epochs=30, batch_size=256, temperature=0.05,
                 weight_decay=1e-5, grad_clip=5.0, early_stopping=None, seed=0, device=None, progress=False):
        self.geometry, self.rank, self.form, self.init = geometry, rank, form, init
        self.learning_rates, self.epochs, self.batch_size = learning_rates, epochs, batch_size
        self.temperature, self.weight_decay, self.grad_clip = temperature, weight_decay, grad_clip
        self.early_stopping, self.seed, self.device, self.progress = early_stopping, seed, device, progress

    def fit(self, X, positive_rows, corpus, *, hard_negative_rows=None, relevant_rows=None,
            validation_queries=None, validation_relevance=None, negative_rows=None):
        self.fit_args_ = {"X": np.array(X), "positive_rows": np.array(positive_rows), "corpus": corpus,
                              "hard_negative_rows": np.array(hard_negative_rows), "relevant_rows": relevant_rows,
                              "validation_queries": np.array(validation_queries),
                              "validation_relevance": validation_relevance}
        C = np.asarray(corpus, dtype=np.float64)
        neg = hard_negative_rows[:, 0] if negative_rows is None else negative_rows
        est = SharedProjection(self.rank) if self.geometry == "shared" else DualProjection(self.rank)
        est.fit(X, C[positive_rows], C[neg])
        M = est.operator_ / np.linalg.norm(est.operator_, 2)
        self.history_ = []
        best = (-1.0, None, None)
        for lr in self.learning_rates:
            op = np.eye(M.shape[0]) + 1000.0 * lr * M
            res = exact_search(validation_queries, corpus, 10, operator=op)
            nd = evaluate_indices(res.indices, validation_relevance, ["ndcg@10"]).mean["ndcg@10"]
            self.history_.append({"learning_rate": lr, "epoch": 0, "loss": 0.0, "validation_ndcg": nd})
            if nd > best[0]:
                best = (nd, lr, op)
        self.validation_ndcg_, self.learning_rate_, self.operator_ = best
        self.best_epoch_ = 0
        self.geometry_ = self.geometry
        self.selection_ = None
        FITTED.append(self)
        return self
