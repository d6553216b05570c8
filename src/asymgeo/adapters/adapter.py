"""The trained rank-r adapter: one estimator for both geometries and both forms.

An adapter scores a query ``x`` and a document ``y`` (frozen embeddings, rows) by

* ``form="augmented"`` (default): ``s(x, y) = x.y + (A x).(B y)``, operator ``M = I + A^T B``;
* ``form="projection"``: ``s(x, y) = (A x).(B y)``, operator ``M = A^T B``,

with ``A = B = P`` for the shared geometry and free ``A``, ``B`` for the dual geometry
(paper, Section 2 and Appendix F.1).  Training (:mod:`asymgeo.adapters.training`) needs
PyTorch (extra ``train``); a fitted or loaded adapter is plain numpy.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._validation import as_float_matrix, check_positive, check_rank
from ..estimators.projections import NotFittedError, _Params

__all__ = ["Adapter", "GEOMETRIES", "FORMS", "INITS", "MAX_ANCHOR", "check_anchor"]

logger = logging.getLogger(__name__)

GEOMETRIES = ("shared", "dual", "auto", "query")
FORMS = ("augmented", "projection")
INITS = ("closed_form", "random", "random_independent")

#: Largest ``anchor``.  The pull weighs a *relative* squared distance, ``||W - W_0||^2 / ||W_0||^2``,
#: against a contrastive loss of a few nats: at 1e6 moving a map by 0.1% of its norm already costs
#: 1 nat, so any larger weight only pins the adapter at its start (the closed-form baseline) while
#: the loss becomes the penalty alone (each AdamW step of about the learning rate then looks like a
#: divergence).  The generalisation study's strong anchors are 1 and 10.
MAX_ANCHOR = 1e6


def check_anchor(value: Any, name: str = "anchor") -> float:
    """``value`` as a float in ``[0, MAX_ANCHOR]``, or a one-line ``ValueError`` naming ``name``."""
    if isinstance(value, bool):
        raise TypeError(f"{name}: expected a number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}: expected a number, got {value!r}") from exc
    if not (np.isfinite(v) and 0.0 <= v <= MAX_ANCHOR):
        raise ValueError(f"{name}: expected a finite number in [0, {MAX_ANCHOR:g}], got {value!r} (the pull toward "
                         f"the start is relative: at {MAX_ANCHOR:g} moving a map by 0.1% of its norm costs 1 nat, so "
                         "a larger weight only pins the adapter at its start; 1 or 10 is already a strong pull)")
    return v


def operator_from_maps(query_map: np.ndarray, doc_map: np.ndarray, form: str) -> np.ndarray:
    """Full scoring operator: ``I + A^T B`` (augmented) or ``A^T B`` (projection), float64 (p, p)."""
    A = np.asarray(query_map, dtype=np.float64)
    B = np.asarray(doc_map, dtype=np.float64)
    M = A.T @ B
    if form == "augmented":
        M[np.diag_indices_from(M)] += 1.0
    return M


class Adapter(_Params):
    r"""Trained shared or dual rank-r adapter on frozen embeddings (scikit-learn contract).

    The score of query ``x`` and document ``y`` is :math:`x^\top M y` with

    * augmented form: :math:`M = I + A^\top B` (score :math:`x\cdot y + (Ax)\cdot(By)`);
    * projection form: :math:`M = A^\top B` (score :math:`(Ax)\cdot(By)`, the operator
      families :math:`\mathcal M_s(r)`, :math:`\mathcal M_d(r)` of Section 2),

    where ``A = B = P`` (shared) or ``A``, ``B`` free (dual).  Training follows Appendix F.1:
    InfoNCE (temperature 0.05) over in-batch negatives plus frozen hard negatives (in-batch
    columns relevant to the row's query are masked out), AdamW (weight decay 1e-5,
    gradient-norm clip 5), batch 256, 30 epochs; the learning rate and the checkpoint are
    chosen by validation NDCG@10 (Appendix F, binary) with exact full-corpus search.

    Parameters
    ----------
    geometry : {"shared", "dual", "auto", "query"}
        ``"auto"`` runs CARS (eq. 7) on the training triples and trains the family it picks.
        ``"query"``: the query-only peer (the linear adapter of LlamaIndex / ERA): a full
        p x p map on queries, started at the identity, documents untouched, ``x^T (I + W^T) y``;
        ``rank`` is then p and ``form`` must be ``"augmented"``.
    rank : int
        Rank r of the low-rank maps.
    form : {"augmented", "projection"}
    init : {"closed_form", "random", "random_independent"}
        ``"closed_form"`` (default) starts from the closed-form truncation of the training
        relevance moment (Theorem 1): for the augmented form at the closed-form baseline
        ``I + c M / ||M||_2`` with ``c`` chosen on validation, so epoch 0 *is* the baseline
        and the selected checkpoint is never worse on validation; for the projection form at
        ``M / ||M||_2``.  ``"random"``: ``A = B`` = one small Gaussian draw (std 0.01 for
        augmented, ``1/sqrt(r)`` for projection), the same draw for both families.
        ``"random_independent"``: the same, except that the dual family's ``B`` is a second,
        independent draw (``A`` stays the draw shared with the shared family's ``P``), so the
        dual start is not the tied ``A = B``, a symmetric operator (issue #37's RQ3 at 0 degrees).
        docs/adapters.md shows the measurement behind the default.
    learning_rates : sequence of float
        Grid searched on validation (paper: 3e-4, 1e-3, 3e-3).
    epochs, batch_size, temperature, weight_decay, grad_clip : training protocol.
    early_stopping : int or None
        Stop a learning rate's run after this many epochs without a validation gain.
    anchor : float
        Weight ``lambda`` of a pull toward the starting maps (L2-SP, Li et al. 2018): the loss
        adds ``lambda * sum_W ||W - W_0||_F^2 / ||W_0||_F^2`` over the maps, so training moves
        only as far from the closed-form start (or the random one) as the contrastive loss
        pays for.  0 (default) is the paper's protocol; at most :data:`MAX_ANCHOR` (1e6: beyond
        it the adapter is pinned at its start and the loss is the penalty alone).
    seed : int
        Seeds the epoch permutations (identical for both families: paired seeds), the
        random initialisation and CARS.
    device : str or None
        Torch device; None: CUDA when available, else CPU.
    progress : bool
        Show a tqdm bar (epoch, loss, validation NDCG@10).

    Attributes
    ----------
    geometry_ : "shared" or "dual"
    selection_ : CarsResult or None (CARS result when ``geometry="auto"``)
    operator_ : (p, p) float64 full scoring operator (with the identity when augmented)
    query_map_, doc_map_ : (r, p) float64 ``A`` and ``B`` (both ``P`` when shared)
    learning_rate_ : chosen learning rate (None when loaded from factors)
    best_epoch_ : chosen checkpoint's epoch (0 = the initialisation)
    validation_ndcg_ : validation NDCG@10 of the chosen checkpoint (None without validation)
    history_ : list of dicts ``learning_rate, epoch, loss, validation_ndcg``
    init_scale_ : the closed-form ``c`` used for the initialisation (None for random init)
    stopped_ : list of messages for learning-rate runs stopped early by a diverging loss
    device_ : the torch device the maps were trained on (``"cuda"`` when available by default)
    n_features_in_ : p
    memory_ : :class:`~asymgeo.adapters.memory.DocumentMemory` or None: the gated document memory
        :func:`asymgeo.adapters.fit_adapter` adds on top of the map (``memory="auto"``, the
        default), chosen on validation; scores are then ``x^T M y + b_d(x)`` and
        :meth:`search` / :meth:`index` apply it; ``operator_`` stays the map alone.
    generalisation_ : GeneralisationReport or None: set by :func:`asymgeo.adapters.fit_adapter`
        (seen / unseen-document test NDCG@10 against frozen and the document prior), or by
        :meth:`generalisation_report` on data the caller supplies; None after a bare ``fit``.
    """

    geometry_: str
    selection_: Any
    operator_: np.ndarray
    query_map_: np.ndarray
    doc_map_: np.ndarray
    learning_rate_: float | None
    best_epoch_: int | None
    validation_ndcg_: float | None
    history_: list[dict[str, Any]]
    init_scale_: float | None
    stopped_: list[str]
    n_features_in_: int
    metadata_: dict[str, Any]
    generalisation_: Any
    memory_: Any = None

    def __init__(
        self,
        geometry: str = "shared",
        rank: int = 16,
        form: str = "augmented",
        init: str = "closed_form",
        learning_rates: Sequence[float] = (3e-4, 1e-3, 3e-3),
        epochs: int = 30,
        batch_size: int = 256,
        temperature: float = 0.05,
        weight_decay: float = 1e-5,
        grad_clip: float = 5.0,
        early_stopping: int | None = None,
        anchor: float = 0.0,
        seed: int = 0,
        device: str | None = None,
        progress: bool = False,
    ):
        self.geometry = geometry
        self.rank = rank
        self.form = form
        self.init = init
        self.learning_rates = learning_rates
        self.epochs = epochs
        self.batch_size = batch_size
        self.temperature = temperature
        self.weight_decay = weight_decay
        self.grad_clip = grad_clip
        self.early_stopping = early_stopping
        self.anchor = anchor
        self.seed = seed
        self.device = device
        self.progress = progress

    # ------------------------------------------------------------------ checks
    def _check_params(self, p: int) -> None:
        if self.geometry not in GEOMETRIES:
            raise ValueError(f"geometry: expected one of {', '.join(GEOMETRIES)}, got {self.geometry!r}")
        if self.form not in FORMS:
            raise ValueError(f"form: expected one of {', '.join(FORMS)}, got {self.form!r}")
        if self.init not in INITS:
            raise ValueError(f"init: expected one of {', '.join(INITS)}, got {self.init!r}")
        if self.geometry == "query" and self.form != "augmented":
            raise ValueError("form: geometry='query' (a p x p map on queries from the identity) needs form='augmented'")
        if self.geometry != "query":
            check_rank(self.rank, p)
        lrs = list(self.learning_rates) if not isinstance(self.learning_rates, (int, float)) else [self.learning_rates]
        if not lrs:
            raise ValueError("learning_rates: expected at least one learning rate")
        for lr in lrs:
            check_positive(lr, "learning_rates")
        for name in ("epochs", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name}: expected a positive integer, got {v!r}")
        check_positive(self.temperature, "temperature")
        check_positive(self.weight_decay, "weight_decay", allow_zero=True)
        check_anchor(self.anchor)
        check_positive(self.grad_clip, "grad_clip")
        es = self.early_stopping
        if es is not None and (isinstance(es, bool) or not isinstance(es, (int, np.integer)) or es < 1):
            raise ValueError(f"early_stopping: expected None or a positive integer, got {es!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ValueError(f"seed: expected a non-negative integer, got {self.seed!r}")

    # ------------------------------------------------------------------ fit
    def fit(
        self,
        X: Any,
        positive_rows: Any,
        corpus: Any,
        *,
        hard_negative_rows: Any = None,
        relevant_rows: Sequence[Any] | None = None,
        validation_queries: Any = None,
        validation_relevance: Any = None,
        negative_rows: Any = None,
    ) -> Adapter:
        """Train on frozen embeddings.

        Parameters
        ----------
        X : (n, p) training query embeddings.
        positive_rows : (n,) int corpus rows of each query's positive.
        corpus : (N, p) document embeddings (float16/float32, memmap ok).
        hard_negative_rows : (n, k) int corpus rows of frozen hard negatives, optional.
        relevant_rows : n collections of corpus rows relevant to each query (masked out of
            the in-batch denominators), optional.
        validation_queries : (m, p) validation query embeddings, optional.
        validation_relevance : :class:`asymgeo.retrieval.metrics.RelevanceTable` over the validation
            query rows and the corpus rows (required with ``validation_queries``).
        negative_rows : (n,) int triple negatives for the closed-form moment and CARS
            (default ``hard_negative_rows[:, 0]``; without any negatives the moment is
            ``E[x y+^T]``).

        Returns
        -------
        self
        """
        from .training import prepare_training, resolve_device, train_family

        data = prepare_training(
            X, positive_rows, corpus, hard_negative_rows=hard_negative_rows, relevant_rows=relevant_rows,
            validation_queries=validation_queries, validation_relevance=validation_relevance,
            negative_rows=negative_rows,
        )
        self._check_params(data.p)
        self.selection_ = None
        geometry = self.geometry
        if geometry == "auto":
            from ..kernels.selection import cars_score

            if data.Y_neg is None:
                raise ValueError("negative_rows: geometry='auto' (CARS) needs triple negatives "
                                 "(pass negative_rows or hard_negative_rows)")
            res = cars_score(data.X_np, data.Y_pos_np, data.Y_neg, int(self.rank), n_splits=20, seed=int(self.seed))
            self.selection_ = res
            geometry = res.choice
            logger.info("CARS chose %s (score %.4g +/- %.2g)", geometry, res.score, res.standard_error)
        result = train_family(self, data, geometry)
        self.geometry_ = geometry
        self.query_map_ = result.query_map
        self.doc_map_ = result.doc_map
        self.operator_ = operator_from_maps(result.query_map, result.doc_map, self.form)
        self.learning_rate_ = result.learning_rate
        self.best_epoch_ = result.best_epoch
        self.validation_ndcg_ = result.validation_ndcg
        self.history_ = result.history
        self.init_scale_ = result.init_scale
        self.stopped_ = result.stopped
        self.generalisation_ = None
        self.device_ = resolve_device(self.device)  # the device the maps were trained on
        self.n_features_in_ = data.p
        if result.all_diverged and result.anchor_dominated:
            raise ValueError(
                "anchor: training diverged for every learning rate (" + "; ".join(result.stopped)
                + f"); the anchor ({float(self.anchor):g}) may be the cause: its pull toward the start makes up most "
                "of the diverging loss; lower the anchor (1 or 10 is a strong pull) or the learning rates"
            )
        if result.all_diverged:
            raise ValueError(
                "learning_rates: training diverged for every learning rate ("
                + "; ".join(result.stopped)
                + "); the fitted attributes hold the best checkpoint before it; lower the learning rates"
            )
        return self

    # ------------------------------------------------------------------ construction from factors
    @classmethod
    def from_maps(
        cls,
        query_map: Any,
        doc_map: Any | None = None,
        *,
        form: str = "augmented",
        geometry: str | None = None,
        **params: Any,
    ) -> Adapter:
        """A fitted adapter from given maps ``A`` (and ``B``; ``None`` means shared ``B = A``).

        ``geometry`` defaults to ``"shared"`` when ``doc_map`` is None or equal to
        ``query_map``, else ``"dual"``.
        """
        A = as_float_matrix(query_map, "query_map")
        B = A if doc_map is None else as_float_matrix(doc_map, "doc_map")
        if B.shape != A.shape:
            raise ValueError(f"doc_map: shape {B.shape} does not match query_map shape {A.shape}")
        if geometry is None:
            geometry = "shared" if doc_map is None or np.array_equal(A, B) else "dual"
        if geometry not in ("shared", "dual", "query"):
            raise ValueError(f"geometry: expected 'shared', 'dual' or 'query', got {geometry!r}")
        if geometry == "query" and not (A.shape[0] == A.shape[1] and np.array_equal(B, np.eye(A.shape[1]))):
            raise ValueError("doc_map: a query-only adapter has a (p, p) query map and the identity as doc_map")
        if geometry == "shared" and not np.array_equal(A, B):
            raise ValueError("doc_map: a shared adapter needs doc_map equal to query_map")
        if form not in FORMS:
            raise ValueError(f"form: expected one of {', '.join(FORMS)}, got {form!r}")
        ad = cls(geometry=geometry, rank=int(A.shape[0]), form=form, **params)
        ad.geometry_ = geometry
        ad.selection_ = None
        ad.query_map_ = A.copy()
        ad.doc_map_ = B.copy()
        ad.operator_ = operator_from_maps(A, B, form)
        ad.learning_rate_ = None
        ad.best_epoch_ = None
        ad.validation_ndcg_ = None
        ad.history_ = []
        ad.init_scale_ = None
        ad.stopped_ = []
        ad.generalisation_ = None
        ad.n_features_in_ = int(A.shape[1])
        return ad

    # ------------------------------------------------------------------ inference (numpy only)
    def _check_fitted(self) -> None:
        if not hasattr(self, "operator_"):
            raise NotFittedError(
                "This Adapter instance is not fitted yet; call fit(X, positive_rows, corpus, ...) first."
            )

    def _check_input(self, A: Any, name: str) -> np.ndarray:
        self._check_fitted()
        arr = as_float_matrix(A, name)
        if arr.shape[1] != self.n_features_in_:
            raise ValueError(
                f"{name}: has {arr.shape[1]} features per row, but the adapter was fitted with {self.n_features_in_}"
            )
        return arr

    def transform_queries(self, X: Any) -> np.ndarray:
        """Query embeddings whose dot product with :meth:`transform_documents` is the score.

        Projection form: ``X @ A.T`` (n, r).  Augmented form: ``[X, X @ A.T]`` (n, p + r),
        so that ``[x, Ax] . [y, By] = x.y + (Ax).(By)``.
        """
        Xf = self._check_input(X, "X")
        if self.geometry_ == "query":  # x + W x against the frozen documents
            return Xf + Xf @ self.query_map_.T
        low = Xf @ self.query_map_.T
        return low if self.form == "projection" else np.hstack([Xf, low])

    def transform_documents(self, Y: Any) -> np.ndarray:
        """Document embeddings: ``Y @ B.T`` (projection) or ``[Y, Y @ B.T]`` (augmented); the
        frozen ``Y`` itself for the query-only family (nothing to re-index)."""
        Yf = self._check_input(Y, "Y")
        if self.geometry_ == "query":
            return Yf
        low = Yf @ self.doc_map_.T
        return low if self.form == "projection" else np.hstack([Yf, low])

    def similarity(self, X: Any, Y: Any) -> np.ndarray:
        """Score matrix ``X @ operator_ @ Y.T`` (n, N): queries rows, documents columns."""
        return self._check_input(X, "X") @ self.operator_ @ self._check_input(Y, "Y").T

    def query_transform(self, X: Any) -> np.ndarray:
        """``X @ operator_`` (n, p): queries to search an *unchanged* index of the frozen
        document embeddings with (``query_transform(X) @ Y.T == similarity(X, Y)``); no
        re-indexing."""
        return self._check_input(X, "X") @ self.operator_

    def generalisation_report(self, data: Any, train_query_ids: Any, *, name: str | None = None,
                              k: int = 10, n_boot: int = 2000, seed: int = 0) -> Any:
        """The generalisation table of this adapter on ``data``'s test split (issue 17), kept as
        ``generalisation_``.

        ``data``: an :class:`~asymgeo.adapters.workflow.AdaptationData` (``load_adaptation_data``)
        or anything with its attributes (``T``, ``V``, ``corpus``, ``qrels``, ``corpus_ids``,
        ``test.query_ids``, ``validation.query_ids``); ``train_query_ids``: the queries whose
        positives trained this adapter (their documents are "seen").  The table gives NDCG@k on
        all, seen-document and unseen-document test queries, each against frozen with a paired
        95% bootstrap interval, beside the document prior (frozen + beta 1[training positive],
        beta on validation).  See :func:`asymgeo.adapters.generalisation.generalisation_report`.
        """
        from .generalisation import generalisation_report

        self._check_fitted()
        label = name or f"trained {self.geometry_}"
        rep = generalisation_report(data, list(train_query_ids), {label: self.operator_}, focus=label, k=k,
                                    n_boot=n_boot, seed=seed)
        self.generalisation_ = rep
        return rep

    def index(self, corpus: Any, *, dtype: Any = np.float32):
        """An exact :class:`asymgeo.retrieval.search.AdapterIndex` over ``corpus`` for this adapter's form:
        r-dimensional documents ``Y B^T`` (projection) or ``[Y, Y B^T]`` (augmented, p + r columns, the
        frozen embeddings first, so nothing is re-encoded); its scores equal :meth:`similarity`."""
        self._check_fitted()
        from ..retrieval.search import AdapterIndex

        mem = self.memory_
        memory = None if mem is None else (mem.table_, mem.threshold_, mem.weight_)
        if self.geometry_ == "query":  # documents as they are (p columns), queries x + W x
            p = self.n_features_in_
            return AdapterIndex(corpus, np.eye(p) + self.query_map_, np.eye(p), form="projection", dtype=dtype,
                                memory=memory)
        return AdapterIndex(corpus, self.query_map_, self.doc_map_, form=self.form, dtype=dtype, memory=memory)

    def search(self, queries: Any, corpus: Any, k: int = 10, *,
               corpus_ids: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-``k`` ``(scores, indices)`` of ``corpus`` for ``queries`` under this adapter:
        ``x^T M y`` plus the document memory's boost when there is one (:attr:`memory_`); with
        ``corpus_ids`` exact ties follow trec_eval's order."""
        self._check_fitted()
        from ..retrieval.search import exact_search, search_trec_order

        Q = self._check_input(queries, "queries")
        if self.memory_ is not None:
            return self.memory_.search(Q, corpus, k, operator=self.operator_, corpus_ids=corpus_ids)
        if corpus_ids is not None:
            res = search_trec_order(Q, corpus, k, corpus_ids, operator=self.operator_)
        else:
            res = exact_search(Q, corpus, k, operator=self.operator_, progress=None)
        return np.asarray(res.scores), np.asarray(res.indices)
