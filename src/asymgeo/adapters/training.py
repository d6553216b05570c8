r"""The training loop of :class:`~asymgeo.adapters.Adapter` (PyTorch; extra ``train``).

Protocol (paper, Appendix F.1): InfoNCE with temperature ``tau`` over the logits

.. math::
    \ell_i = -\log \frac{\exp(s(x_i, y_i^+)/\tau)}
        {\sum_{j \in B,\, j \notin R_i} \exp(s(x_i, y_j^+)/\tau) + \sum_{h=1}^{k} \exp(s(x_i, y_{ih}^-)/\tau)}

(in-batch positives ``y_j^+`` of the other rows, minus the columns ``R_i`` relevant to query
``i``, plus ``k`` frozen hard negatives), AdamW, gradient-norm clipping, and per-epoch
validation NDCG@10 by exact full-corpus search that selects the learning rate and the
checkpoint.  Paired seeds: the epoch permutations depend only on ``seed`` and the epoch,
so the shared and dual families (and every learning rate) see the same batches.

Speed and memory: the loss reads only the training positives and hard negatives (gathered
once as float32 rows on the device); validation streams the corpus in blocks
(:class:`CorpusBlocks`: no (N, p) float32 host copy); hard negatives are gathered by
index; validation is one (m x N) matmul plus ``topk`` per epoch; no Python loop runs per
example.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._validation import as_float_matrix, finite_checked, mark_finite

__all__ = ["TrainingData", "TrainResult", "prepare_training", "train_family", "import_torch", "resolve_device",
           "ValidationScorer", "epoch_permutation", "MIN_TRAIN_QUERIES"]

logger = logging.getLogger(__name__)

#: fewest training queries: one batch needs another row for in-batch negatives
MIN_TRAIN_QUERIES = 2
#: a loss above this multiple of the first batch's loss counts as exploding
EXPLODE_FACTOR = 1e3
#: validation NDCG cut-off (the paper's metric)
VALIDATION_K = 10
#: closed-form scale used to initialise the augmented form when validation picks c = 0
MIN_INIT_SCALE = 0.125
#: largest n for the dense (n, n) in-batch relevance mask
_DENSE_MASK_MAX = 8192


def import_torch():
    """``import torch`` with a clear message naming the extra when it is missing."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is installed in the dev env
        raise ImportError("training adapters needs PyTorch: pip install asymgeo[train]") from exc
    return torch


def resolve_device(device: str | None) -> str:
    """``None`` -> ``"cuda"`` when available, else ``"cpu"``."""
    torch = import_torch()
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(device)


def epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    """The training-order permutation of one epoch: depends only on ``seed`` and ``epoch``
    (paired seeds: identical for both families and every learning rate)."""
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(2, int(epoch)))).permutation(n)


def _int_rows(value: Any, name: str, shape: tuple, n_docs: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name}: expected integer corpus rows, got dtype {arr.dtype}")
    if arr.ndim != len(shape) or any(s is not None and a != s for a, s in zip(arr.shape, shape, strict=True)):
        want = "(" + ", ".join("k" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
        raise ValueError(f"{name}: expected shape {want}, got {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() >= n_docs):
        raise ValueError(f"{name}: rows must lie in [0, {n_docs}) (the corpus), got [{arr.min()}, {arr.max()}]")
    return arr.astype(np.int64)


@dataclass
class TrainingData:
    """Checked training inputs (numpy); built by :func:`prepare_training`."""

    X_np: np.ndarray  # (n, p) float32
    positive_rows: np.ndarray  # (n,)
    corpus: np.ndarray  # (N, p) as given (float16 memmaps stay memmaps; never copied whole)
    hard_negative_rows: np.ndarray | None  # (n, k)
    relevant_keys: np.ndarray  # sorted int64 keys i * N + row
    Y_pos_np: np.ndarray  # (n, p) float32
    Y_neg: np.ndarray | None  # (n, p) float32 triple negatives
    validation_queries: np.ndarray | None  # (m, p) float32
    validation_relevance: Any = None
    #: sorted corpus rows the loss reads (positives and hard negatives) and their float32 rows
    train_rows: np.ndarray | None = None
    train_corpus: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.X_np.shape[0])

    @property
    def p(self) -> int:
        return int(self.X_np.shape[1])

    @property
    def n_docs(self) -> int:
        return int(self.corpus.shape[0])


def prepare_training(  # noqa: C901 - one flat sequence of argument checks
    X: Any,
    positive_rows: Any,
    corpus: Any,
    *,
    hard_negative_rows: Any = None,
    relevant_rows: Sequence[Any] | None = None,
    validation_queries: Any = None,
    validation_relevance: Any = None,
    negative_rows: Any = None,
) -> TrainingData:
    """Check and convert the inputs of :meth:`Adapter.fit` (see there); ``ValueError`` /
    ``TypeError`` name the argument at fault."""
    Xf = as_float_matrix(X, "X", dtype=np.float32, allow_empty=True)
    n, p = Xf.shape
    if n < MIN_TRAIN_QUERIES:
        raise ValueError(
            f"X: need at least {MIN_TRAIN_QUERIES} training queries to form one batch with in-batch negatives, got {n}"
        )
    C = _check_corpus(corpus)
    if C.shape[1] != p:
        raise ValueError(f"corpus: dimension {C.shape[1]} does not match X dimension {p}")
    N = C.shape[0]
    pos = _int_rows(positive_rows, "positive_rows", (n,), N)
    hard = None if hard_negative_rows is None else _int_rows(hard_negative_rows, "hard_negative_rows", (n, None), N)
    if hard is not None and hard.shape[1] == 0:
        hard = None
    keys = [np.arange(n, dtype=np.int64) * N + pos]
    if relevant_rows is not None:
        sized = hasattr(relevant_rows, "__len__") and not isinstance(relevant_rows, (str, bytes))
        if not sized or len(relevant_rows) != n:
            raise ValueError(f"relevant_rows: expected {n} collections of corpus rows (one per query), "
                             f"got {len(relevant_rows) if sized else repr(relevant_rows)}")
        for i, rows in enumerate(relevant_rows):
            r = np.asarray(list(rows), dtype=np.int64)
            if r.size and (r.min() < 0 or r.max() >= N):
                raise ValueError(f"relevant_rows[{i}]: rows must lie in [0, {N}), got [{r.min()}, {r.max()}]")
            keys.append(i * N + r)
    rel_keys = np.unique(np.concatenate(keys))
    if negative_rows is not None:
        neg = _int_rows(negative_rows, "negative_rows", (n,), N)
    elif hard is not None:
        neg = hard[:, 0]
    else:
        neg = None
    Vq = None
    if validation_queries is not None or validation_relevance is not None:
        if validation_queries is None:
            raise ValueError("validation_queries: required with validation_relevance")
        if validation_relevance is None:
            raise ValueError("validation_relevance: required with validation_queries (a RelevanceTable)")
        for attr in ("rows", "n_docs", "grades"):
            if not hasattr(validation_relevance, attr):
                raise TypeError("validation_relevance: expected an asymgeo.retrieval.metrics.RelevanceTable, "
                                f"got {type(validation_relevance).__name__}")
        Vq = as_float_matrix(validation_queries, "validation_queries", dtype=np.float32, allow_empty=True)
        if Vq.shape[0] == 0 or len(validation_relevance) == 0:
            raise ValueError("validation_queries: the validation split is empty (no judged queries); "
                             "pass validation_queries=None to train without validation")
        if Vq.shape[1] != p:
            raise ValueError(f"validation_queries: dimension {Vq.shape[1]} does not match X dimension {p}")
        if validation_relevance.n_docs != N:
            raise ValueError(f"validation_relevance: built over {validation_relevance.n_docs} documents, "
                             f"but the corpus has {N} rows")
        if int(np.max(validation_relevance.rows)) >= Vq.shape[0]:
            raise ValueError(f"validation_relevance: refers to query row {int(np.max(validation_relevance.rows))}, "
                             f"but validation_queries has {Vq.shape[0]} rows")
    used = [pos] + ([] if hard is None else [hard.ravel()]) + ([] if neg is None else [neg])
    rows = np.unique(np.concatenate(used))
    Ct = gather_rows(C, rows)
    return TrainingData(
        X_np=Xf, positive_rows=pos, corpus=C, hard_negative_rows=hard, relevant_keys=rel_keys,
        Y_pos_np=Ct[np.searchsorted(rows, pos)], Y_neg=None if neg is None else Ct[np.searchsorted(rows, neg)],
        validation_queries=Vq, validation_relevance=validation_relevance, train_rows=rows, train_corpus=Ct,
    )


def _check_corpus(corpus: Any) -> np.ndarray:
    """The corpus as a 2-d float array without copying it (a float16 memmap stays one).

    Every row is checked finite block by block (``ValueError`` naming the first bad row),
    so no (N, p) float32 copy is ever made here (issue #21: bounded memory).  A read-only
    memory map already checked in this process (here or by
    :func:`asymgeo.data.validate_embeddings`) and unchanged on disk is not scanned again
    (:func:`asymgeo._validation.finite_checked`).
    """
    if hasattr(corpus, "detach") and hasattr(corpus, "cpu"):
        corpus = corpus.detach().cpu().numpy()
    C = corpus if isinstance(corpus, np.ndarray) else np.asarray(corpus)
    if C.dtype == object or not (np.issubdtype(C.dtype, np.number) or C.dtype == bool):
        raise TypeError(f"corpus: expected a numeric array, got dtype {C.dtype}")
    if np.iscomplexobj(C):
        raise TypeError("corpus: complex values are not supported")
    if C.ndim != 2:
        raise ValueError(f"corpus: expected a 2-d array of shape (n, p), got shape {C.shape}")
    if C.size == 0:
        raise ValueError(f"corpus: expected a non-empty array, got shape {C.shape}")
    if finite_checked(C):  # a read-only cache file already scanned in this process, unchanged since
        return C
    for d0 in range(0, C.shape[0], _CHECK_BLOCK):
        blk = np.asarray(C[d0 : d0 + _CHECK_BLOCK])
        ok = _finite_rows(blk)
        if not ok.all():
            bad = int(np.flatnonzero(~ok)[0])
            col = int(np.flatnonzero(~np.isfinite(blk[bad]))[0])
            raise ValueError(f"corpus: contains NaN or infinite values (first at index [{d0 + bad}, {col}])")
    mark_finite(C)
    return C


def _finite_rows(blk: np.ndarray) -> np.ndarray:
    """Rows of ``blk`` with only finite values; float16 by its exponent bits (no float conversion)."""
    if blk.dtype == np.float16:
        return ((blk.view(np.uint16) & np.uint16(0x7C00)) != np.uint16(0x7C00)).all(axis=1)
    return np.isfinite(blk).all(axis=1)


_CHECK_BLOCK = 65536
_BLOCK_BYTES = 64 << 20


def gather_rows(corpus: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``corpus[rows]`` as float32 (rows sorted; a memmap is read only at those rows)."""
    out = np.empty((rows.size, corpus.shape[1]), dtype=np.float32)
    for i0 in range(0, rows.size, _CHECK_BLOCK):
        out[i0 : i0 + _CHECK_BLOCK] = corpus[rows[i0 : i0 + _CHECK_BLOCK]]
    return out


class CorpusBlocks:
    """The corpus as float32 torch blocks on one device, without an (N, p) float32 host copy.

    * On CUDA: one device tensor in the corpus's own dtype (float16 caches stay float16, half
      the memory) when it needs at most ``max_device_bytes``; else blocks are moved per use.
    * On CPU: a float32 numpy corpus is viewed in place; any other (a float16 memmap) is
      converted block by block on every pass (bounded memory).

    ``block(d0, d1)`` returns rows ``d0:d1`` as a float32 tensor on ``device``.
    """

    def __init__(self, corpus: Any, device: Any, *, max_device_bytes: int | None = None):
        torch = import_torch()
        self.torch = torch
        if hasattr(corpus, "detach"):  # a tensor already (tests, callers with their own)
            self.device = corpus.device
            self._tensor = corpus
            self._numpy: np.ndarray | None = None
            self.shape = tuple(corpus.shape)
            return
        C = corpus
        self.shape = tuple(C.shape)
        self.device = torch.device(device) if not hasattr(device, "type") else device
        self._numpy = C
        self._tensor = None
        if self.device.type == "cuda":
            if max_device_bytes is None:
                free, _total = torch.cuda.mem_get_info(self.device)
                max_device_bytes = int(free * 0.5)
            if C.nbytes <= max_device_bytes:
                dt = torch.float16 if C.dtype == np.float16 else torch.float32
                t = torch.empty(C.shape, dtype=dt, device=self.device)
                for d0 in range(0, C.shape[0], _CHECK_BLOCK):
                    blk = np.ascontiguousarray(C[d0 : d0 + _CHECK_BLOCK], dtype=np.float16 if dt == torch.float16
                                               else np.float32)
                    t[d0 : d0 + blk.shape[0]] = torch.from_numpy(blk).to(self.device)
                self._tensor = t
        elif C.dtype == np.float32 and not isinstance(C, np.memmap):
            self._tensor = torch.from_numpy(np.ascontiguousarray(C))

    def block(self, d0: int, d1: int) -> Any:
        if self._tensor is not None:
            return self._tensor[d0:d1].float()
        assert self._numpy is not None  # one of the two is always set
        blk = np.ascontiguousarray(self._numpy[d0:d1], dtype=np.float32)
        return self.torch.from_numpy(blk).to(self.device)


def closed_form_factors(data: TrainingData, geometry: str, rank: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Closed-form maps of the training relevance moment (Theorem 1) and ``||M||_2``.

    ``C = mean_i x_i (y_i^+ - y_i^-)^T`` (or ``E[x y^+^T]`` without negatives); shared:
    ``P^T P = P_{s,r}(C)``; dual: ``A^T B = P_{d,r}(C)``.  Both factorisations are balanced,
    so ``||M||_2`` is the largest squared row norm of the query map.
    """
    from ..kernels.geometry import dual_factors, shared_factors

    X = data.X_np.astype(np.float64)
    D = data.Y_pos_np.astype(np.float64)
    if data.Y_neg is not None:
        D = D - data.Y_neg
    C = X.T @ D / X.shape[0]
    if geometry == "shared":
        A = shared_factors(C, rank)
        B = A
    else:
        A, B = dual_factors(C, rank)
    norm = float(np.max(np.sum(A * A, axis=1))) if A.size else 0.0
    return A, B, norm


@contextlib.contextmanager
def _all_cpu_threads(torch: Any, device: Any) -> Iterator[None]:
    """Every usable core for the scorer's large products on CPU, inside the training loop's
    one-thread setting (:func:`_deterministic`); restored afterwards."""
    if getattr(device, "type", str(device)) != "cpu":
        yield
        return
    from .._runtime import available_cpus

    before = torch.get_num_threads()
    torch.set_num_threads(max(before, available_cpus()))
    try:
        yield
    finally:
        torch.set_num_threads(before)


class ValidationScorer:
    """Validation NDCG@10 (binary, Appendix F) by exact full-corpus search on the training device.

    For an adapter the score matrix is ``V M C^T`` with ``M = I + A^T B`` (augmented) or
    ``A^T B`` (projection), computed as ``V C^T + (V A^T)(B C^T)`` (or the second term only):
    the frozen part ``V C^T`` is computed once, and each epoch costs ``O(r (m + p) N)``
    instead of ``O(m p N)``; then ``topk`` in corpus blocks.
    """

    def __init__(self, queries: np.ndarray, table: Any, corpus: Any, *, k: int = VALIDATION_K,
                 tile_elements: int = 1 << 25):
        torch = import_torch()
        self.torch = torch
        self.table = table
        src = corpus if isinstance(corpus, CorpusBlocks) else CorpusBlocks(corpus, "cpu")
        self.corpus = src
        self.device = src.device
        self.queries_t = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32)).to(src.device)
        m, N = self.queries_t.shape[0], src.shape[0]
        self.n_docs = N
        self.k = min(k, N)
        # a block's float32 rows stay below _BLOCK_BYTES too (p = 768: 21,845 documents)
        self.block = max(self.k, min(tile_elements // max(1, m), _BLOCK_BYTES // (4 * max(1, src.shape[1]))))
        # the frozen scores, kept when they fit in one tile
        self.base: Any = None
        if m * N <= tile_elements:  # block by block: never the whole corpus as float32 at once
            self.base = torch.cat([self.queries_t @ src.block(d0, min(N, d0 + self.block)).T
                                   for d0 in range(0, N, self.block)], dim=1)
        self.discount = 1.0 / np.log2(np.arange(2, self.k + 2))
        ideal = np.cumsum(self.discount)
        self.n_rel = np.asarray(table.n_rel)
        self.ideal = np.where(self.n_rel > 0, ideal[np.clip(np.minimum(self.n_rel, self.k) - 1, 0, None)], 0.0)

    def _merge(self, best: tuple[Any, Any] | None, S: Any, d0: int) -> tuple[Any, Any]:
        torch = self.torch
        s, i = torch.topk(S, min(self.k, S.shape[1]), dim=1)
        i = i + d0
        if best is None:
            return s, i
        cs, ci = torch.cat([best[0], s], 1), torch.cat([best[1], i], 1)
        s2, j = torch.topk(cs, self.k, dim=1)
        return s2, torch.gather(ci, 1, j)

    def top_indices_lowrank(self, A: Any, B: Any, augmented: bool) -> np.ndarray:
        """Top-k corpus rows under ``x^T M y`` for ``M = [I +] A^T B`` without forming ``V M``."""
        return self.top_indices_scaled(A, B, [1.0], augmented)[0]

    def top_indices_scaled(self, A: Any, B: Any, scales: Sequence[float], augmented: bool) -> list[np.ndarray]:
        """Top-k rows under ``M_c = [I +] c A^T B`` for every ``c`` in ``scales``, in one pass over the corpus.

        Each corpus block is read (and converted) once; its frozen scores ``V C^T`` and low-rank
        scores ``(V A^T)(B C^T)`` are computed once and combined for every ``c``.
        """
        with _all_cpu_threads(self.torch, self.device):
            return self._top_indices_scaled(A, B, scales, augmented)

    def _top_indices_scaled(self, A: Any, B: Any, scales: Sequence[float], augmented: bool) -> list[np.ndarray]:
        QA = self.queries_t @ A.T
        best: list[tuple[Any, Any] | None] = [None] * len(scales)
        for d0 in range(0, self.n_docs, self.block):
            d1 = min(self.n_docs, d0 + self.block)
            C = self.corpus.block(d0, d1)
            low = QA @ (B @ C.T)
            base = None
            if augmented:
                base = self.base[:, d0:d1] if self.base is not None else self.queries_t @ C.T
            for j, c in enumerate(scales):
                S = low if c == 1.0 else low * float(c)
                if base is not None:
                    S = S + base
                best[j] = self._merge(best[j], S, d0)
        return [b[1].cpu().numpy() for b in best if b is not None]

    def _ndcg(self, idx: np.ndarray) -> float:
        g = self.table.grades(idx[self.table.rows]) > 0
        dcg = (g * self.discount).sum(axis=1)
        keep = self.n_rel > 0
        if not keep.any():
            return 0.0
        return float(np.mean(dcg[keep] / self.ideal[keep]))

    def ndcg_lowrank(self, A: Any, B: Any, augmented: bool) -> float:
        """Mean binary NDCG@k under ``M = [I +] A^T B`` (see :meth:`top_indices_lowrank`)."""
        return self._ndcg(self.top_indices_lowrank(A, B, augmented))

    def ndcg_scaled(self, A: Any, B: Any, scales: Sequence[float], augmented: bool = True) -> list[float]:
        """Mean binary NDCG@k under ``[I +] c A^T B`` for each ``c`` (one corpus pass)."""
        return [self._ndcg(idx) for idx in self.top_indices_scaled(A, B, scales, augmented)]


@dataclass
class TrainResult:
    """One family's training outcome: the best checkpoint's maps, its learning rate and epoch, the history."""

    query_map: np.ndarray
    doc_map: np.ndarray
    learning_rate: float | None
    best_epoch: int
    validation_ndcg: float | None
    history: list[dict[str, Any]]
    init_scale: float | None
    stopped: list[str] = field(default_factory=list)
    all_diverged: bool = False
    #: some learning rate diverged with the anchor term (``Adapter(anchor=...)``) most of its loss
    anchor_dominated: bool = False


@contextlib.contextmanager
def _deterministic(torch: Any, device: str) -> Iterator[None]:
    """On CPU, for the duration of training: deterministic kernels, and one intra-op thread.

    The loop's operations are small (a batch of 256 rows); with several torch threads on a
    busy machine the threads spin against each other (measured on 2 shared cores: the same
    30-epoch run 6-10x slower with 2 threads than with 1, docs/benchmarks.md).  Both
    settings are restored afterwards.
    """
    if not device.startswith("cpu"):
        yield
        return
    before = torch.are_deterministic_algorithms_enabled()
    threads = torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)
        torch.set_num_threads(threads)


def _initial_maps(adapter: Any, data: TrainingData, geometry: str,
                  scorer: ValidationScorer | None) -> tuple[np.ndarray, np.ndarray, float | None]:
    rank, p = int(adapter.rank), data.p
    if geometry == "query":  # the query-only peer: x -> x + W x from W = 0 (the identity map), documents fixed
        return np.zeros((p, p)), np.eye(p), None
    if adapter.init in ("random", "random_independent"):
        rng = np.random.default_rng(np.random.SeedSequence(int(adapter.seed), spawn_key=(1,)))
        std = 0.01 if adapter.form == "augmented" else 1.0 / math.sqrt(rank)
        G = rng.normal(0.0, std, size=(rank, p))
        if adapter.init == "random_independent" and geometry == "dual":  # B: a second, independent draw
            other = np.random.default_rng(np.random.SeedSequence(int(adapter.seed), spawn_key=(2,)))
            return G, other.normal(0.0, std, size=(rank, p)), None
        return G, G.copy(), None
    A, B, norm = closed_form_factors(data, geometry, rank)
    if norm <= 0:
        raise ValueError("X: the training relevance moment has no positive part to start from; use init='random'")
    if adapter.form == "projection":
        s = 1.0 / math.sqrt(norm)
        return A * s, B * s, 1.0

    c = 1.0
    if scorer is not None:
        c = choose_scale(A, B, norm, scorer).scale
    c = max(c, MIN_INIT_SCALE)
    s = math.sqrt(c / norm)
    return A * s, B * s, c


def train_family(adapter: Any, data: TrainingData, geometry: str) -> TrainResult:  # noqa: C901 - lr grid x epochs loop
    """Train one family (``"shared"``, ``"dual"`` or the query-only ``"query"``) over the learning-rate
    grid; returns the checkpoint with the best validation NDCG@10 (ties: earlier learning rate, then
    earlier epoch)."""
    torch = import_torch()
    device = resolve_device(adapter.device)
    lrs = [float(adapter.learning_rates)] if isinstance(adapter.learning_rates, (int, float)) \
        else [float(v) for v in adapter.learning_rates]
    if adapter.early_stopping is not None and data.validation_queries is None:
        raise ValueError("early_stopping: needs validation_queries and validation_relevance")
    from tqdm.auto import tqdm

    n, N = data.n, data.n_docs
    bs = min(int(adapter.batch_size), n)
    tau = float(adapter.temperature)
    augmented = adapter.form == "augmented"
    shared = geometry == "shared"
    query_only = geometry == "query"
    if query_only and not augmented:
        raise ValueError("form: geometry='query' needs form='augmented' (x + W x against frozen documents)")
    with _deterministic(torch, device):
        # the loss reads only the positives and hard negatives: those rows, float32, on the device
        # (global rows stay the keys of the relevance masks); validation streams the whole corpus
        assert data.train_rows is not None and data.train_corpus is not None  # set by prepare_training
        rows = data.train_rows
        corpus_t = torch.from_numpy(data.train_corpus).to(device)
        X_t = torch.from_numpy(data.X_np).to(device)
        pos_t = torch.from_numpy(data.positive_rows).to(device)
        pos_local_t = torch.from_numpy(np.searchsorted(rows, data.positive_rows)).to(device)
        hard_t = None if data.hard_negative_rows is None else torch.from_numpy(data.hard_negative_rows).to(device)
        hard_local_t = None if data.hard_negative_rows is None else \
            torch.from_numpy(np.searchsorted(rows, data.hard_negative_rows)).to(device)
        keys_t = torch.from_numpy(data.relevant_keys).to(device)
        scorer = None
        if data.validation_queries is not None:
            scorer = ValidationScorer(data.validation_queries, data.validation_relevance,
                                      CorpusBlocks(data.corpus, device))
        A0, B0, init_scale = _initial_maps(adapter, data, geometry, scorer)

        def apply(Q: Any, A: Any, B: Any) -> Any:
            low = (Q @ A.T) @ B
            return Q + low if augmented else low

        def in_keys(k: Any) -> Any:
            pos_ = torch.searchsorted(keys_t, k).clamp_max(keys_t.numel() - 1)
            return keys_t[pos_] == k

        # relevance masks: in-batch column j is masked for row i when pos[j] is relevant to query i
        # (dense n x n table when small, else a sorted-key lookup per batch); hard negatives once
        pair_mask = None
        if n <= _DENSE_MASK_MAX:
            all_idx = torch.arange(n, device=device)
            pair_mask = in_keys(all_idx[:, None] * N + pos_t[None, :])
        hard_mask = None if hard_t is None else in_keys(torch.arange(n, device=device)[:, None] * N + hard_t)
        perms = [torch.from_numpy(epoch_permutation(adapter.seed, e, n)).to(device)
                 for e in range(1, int(adapter.epochs) + 1)]
        eye = torch.eye(bs, dtype=torch.bool, device=device)
        val0 = None
        if scorer is not None:
            with torch.no_grad():
                A0t = torch.from_numpy(A0.astype(np.float32)).to(device)
                B0t = torch.from_numpy(B0.astype(np.float32)).to(device)
                val0 = scorer.ndcg_lowrank(A0t, B0t, augmented)
        history: list[dict[str, Any]] = []
        best: tuple[float, float | None, int, np.ndarray, np.ndarray] | None = None  # (score, lr, epoch, A, B)
        stopped: list[str] = []
        final_losses: list[tuple[float, float, int, np.ndarray, np.ndarray]] = []
        anchor_dominated = False
        bar = tqdm(total=len(lrs) * int(adapter.epochs), desc=f"train {geometry}", unit="epoch",
                   disable=not adapter.progress, leave=False)
        try:
            for lr in lrs:
                A = torch.tensor(A0, dtype=torch.float32, device=device, requires_grad=True)
                params = [A]
                if shared:
                    B = A
                elif query_only:  # documents untouched: B stays the identity, not trained
                    B = torch.tensor(B0, dtype=torch.float32, device=device)
                else:
                    B = torch.tensor(B0, dtype=torch.float32, device=device, requires_grad=True)
                    params.append(B)
                opt = torch.optim.AdamW(params, lr=lr, weight_decay=float(adapter.weight_decay))
                anchor = float(getattr(adapter, "anchor", 0.0))
                starts = [p_.detach().clone() for p_ in params]
                start_norms = [max(float((s_ * s_).sum()), 1e-12) for s_ in starts]
                history.append({"learning_rate": lr, "epoch": 0, "loss": None, "validation_ndcg": val0})
                run_best = -math.inf if val0 is None else val0
                if val0 is not None and (best is None or val0 > best[0]):
                    best = (val0, lr, 0, A0.copy(), B0.copy())
                since_gain, first_loss, diverged = 0, None, False
                last_loss, last_epoch = math.nan, 0
                for epoch, perm in enumerate(perms, start=1):
                    total, count = 0.0, 0
                    for b0 in range(0, n, bs):
                        idx = perm[b0 : b0 + bs]
                        b = idx.numel()
                        q = apply(X_t[idx], A, B)
                        prow = pos_t[idx]
                        S = q @ corpus_t[pos_local_t[idx]].T
                        if pair_mask is not None:
                            mask = pair_mask[idx][:, idx] & ~eye[:b, :b]
                        else:
                            mask = in_keys(idx[:, None] * N + prow[None, :]) & ~eye[:b, :b]
                        logits = S.masked_fill(mask, -math.inf)
                        if hard_local_t is not None and hard_mask is not None:
                            H = torch.einsum("bp,bkp->bk", q, corpus_t[hard_local_t[idx]])
                            H = H.masked_fill(hard_mask[idx], -math.inf)
                            logits = torch.cat([logits, H], dim=1)
                        loss = torch.nn.functional.cross_entropy(logits / tau, torch.arange(b, device=device))
                        penalty = None
                        if anchor > 0:  # L2-SP: a pull toward the starting maps, scale-free per map
                            penalty = anchor * sum(((w - w0) ** 2).sum() / nrm
                                                   for w, w0, nrm in zip(params, starts, start_norms))
                            loss = loss + penalty
                        value = float(loss.detach())
                        if first_loss is None:
                            first_loss = max(value, 1e-6)
                        if not math.isfinite(value) or value > EXPLODE_FACTOR * first_loss:
                            diverged = True
                            msg = f"lr={lr:g}: loss {value:.4g} at epoch {epoch}"
                            if penalty is not None:
                                pen = float(penalty.detach())
                                msg += f", anchor term {pen:.4g}"
                                anchor_dominated = anchor_dominated or not pen < 0.5 * value
                            stopped.append(msg)
                            logger.info("adapter training stopped: %s; keeping the best checkpoint", stopped[-1])
                            break
                        opt.zero_grad(set_to_none=True)
                        loss.backward()
                        torch.nn.utils.clip_grad_norm_(params, float(adapter.grad_clip))
                        opt.step()
                        total += value * b
                        count += b
                    if diverged:
                        break
                    last_loss, last_epoch = total / count, epoch
                    val = None
                    if scorer is not None:
                        with torch.no_grad():
                            val = scorer.ndcg_lowrank(A, B, augmented)
                    history.append({"learning_rate": lr, "epoch": epoch, "loss": last_loss, "validation_ndcg": val})
                    bar.update(1)
                    bar.set_postfix(lr=f"{lr:g}", loss=f"{last_loss:.4f}",
                                    ndcg="-" if val is None else f"{val:.4f}")
                    if val is not None:
                        if val > run_best:
                            run_best, since_gain = val, 0
                            if best is None or val > best[0]:
                                best = (val, lr, epoch, A.detach().cpu().double().numpy().copy(),
                                        B.detach().cpu().double().numpy().copy())
                        else:
                            since_gain += 1
                            if adapter.early_stopping is not None and since_gain >= int(adapter.early_stopping):
                                logger.info("lr=%g: early stop at epoch %d", lr, epoch)
                                break
                if scorer is None and last_epoch > 0:
                    final_losses.append((last_loss, lr, last_epoch, A.detach().cpu().double().numpy().copy(),
                                         B.detach().cpu().double().numpy().copy()))
        finally:
            bar.close()
    all_diverged = len(stopped) == len(lrs)
    if scorer is None:
        if final_losses:
            loss_, lr_, ep, Af, Bf = min(final_losses, key=lambda t: t[0])
            return TrainResult(Af, Bf, lr_, ep, None, history, init_scale, stopped, all_diverged,
                               anchor_dominated)
        return TrainResult(A0, B0, None, 0, None, history, init_scale, stopped, all_diverged, anchor_dominated)
    assert best is not None
    score, lr_b, ep_b, Ab, Bb = best
    return TrainResult(np.asarray(Ab, dtype=np.float64), np.asarray(Bb, dtype=np.float64), lr_b, ep_b, score,
                       history, init_scale, stopped, all_diverged, anchor_dominated)


#: grid of ``c`` (0 = the frozen model)
DEFAULT_SCALES: tuple[float, ...] = (0.0, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0)


@dataclass(frozen=True)
class ScaleChoice:
    """Chosen ``c`` and the validation NDCG@10 of every grid value."""

    scale: float
    validation_ndcg: float
    scores: dict[float, float]


def choose_scale(A: np.ndarray, B: np.ndarray, norm: float, scorer: ValidationScorer,
                 scales: Sequence[float] = DEFAULT_SCALES) -> ScaleChoice:
    r"""Pick ``c`` maximising validation NDCG@10 of :math:`I + c A^\top B/\|A^\top B\|_2`
    (ties: the smaller ``c``)."""
    torch = import_torch()
    dev = scorer.device
    At = torch.from_numpy(np.asarray(A, dtype=np.float32)).to(dev)
    Bt = torch.from_numpy(np.asarray(B, dtype=np.float32)).to(dev)
    scale = 1.0 / (norm if norm > 0 else 1.0)
    grid = sorted(float(c) for c in scales)
    with torch.no_grad():  # one corpus pass for the whole grid
        scores = dict(zip(grid, scorer.ndcg_scaled(At * scale, Bt, grid, True)))
    best = max(scores, key=lambda c: (scores[c], -c))
    return ScaleChoice(best, scores[best], scores)
