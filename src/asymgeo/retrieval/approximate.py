"""Approximate inner-product search (FAISS IVF or HNSW), for mining hard negatives only.

Exact search (:mod:`.search`) scores every document: ``n N p`` multiply-adds for ``n``
queries over ``N`` documents of dimension ``p``.  For corpora of millions of documents and
hundreds of thousands of training queries that is the cost of mining frozen hard
negatives, and an approximate index trades a little recall of the true top-k for a large
part of it.  **Approximate results are for mining only**: reported retrieval metrics always
come from exact search, and nothing in the package uses this module for them.

Indexes
-------
``kind="ivf"``: ``faiss.IndexIVFFlat`` with ``faiss.METRIC_INNER_PRODUCT`` over an
``IndexFlatIP`` coarse quantizer.  Spherical k-means (FAISS's default for inner product)
splits the corpus into ``nlist`` lists; a query scores the ``nlist`` centroids, then every
document of its ``nprobe`` best lists, exactly.  Cost per query about
``(nlist + nprobe N / nlist) p``; with ``nprobe = nlist`` every list is scanned and the
result is the exact top-k (up to float32 rounding and tie order).

``kind="hnsw"``: ``faiss.IndexHNSWFlat`` (``hnsw_m`` links per node, inner product),
searched with ``efSearch = max(ef_search, k)``.  No training; the graph is built on ``add``.

Defaults (IVF)
--------------
* ``nlist = clip(round(4 sqrt(N)), 1, max(1, N // 39))``: FAISS's rule of thumb of
  ``4 sqrt(N)`` lists (lists of about ``sqrt(N) / 4`` documents; the ``nlist`` centroid
  products per query stay a small part of the scan).  Coarser lists were much worse for
  mining: with ``sqrt(N)`` lists and the same scanned fraction, recall@8 fell from 0.93 to
  0.31-0.41 in the benchmark below.  The upper clip leaves FAISS's k-means at least 39
  training points per centroid.
* ``nprobe = min(nlist, max(8, nlist // 128))``: a query scans about 1/128 of the corpus on a
  large one.  Not the 1/16 often quoted for serving: FAISS scans the lists one query at a
  time, bound by memory bandwidth, about 30-40 times slower per (query, document) pair than
  the blocked matrix products of exact search (measured with 2,000 queries over 200,000 x
  768 documents, ``benchmarks/bench_mining.py``), so scanning 1/16 of the corpus was *slower*
  than exact mining there, for recall@8 0.947 against 0.927 at 1/128.  At least 8 lists, so
  that small corpora (where search is cheap anyway) keep a useful recall.
* ``train_size = min(N, 64 nlist)`` training rows, a sample drawn with
  ``numpy.random.default_rng(seed)``; FAISS's k-means (10 iterations) is seeded with ``seed``
  too (``index.cp.seed``), so the same corpus and seed give the same index and results.

Building costs about ``10 train_size nlist p`` multiply-adds (k-means) plus ``N nlist p``
(assigning every document), as many as exact search of ``640 (nlist / sqrt N)^2 + nlist``
queries, about 12,000 with the defaults at ``N = 200,000``; measured, the build took as long
as exact mining of 17,000-19,000 queries there.  The index pays only when many more queries
than that are mined (``benchmarks/bench_mining.py``).

Memory: both indexes store a float32 copy of the corpus (``4 N p`` bytes; HNSW adds about
``8 hnsw_m N`` bytes of links).  A float16 corpus (e.g. a memmap of the embedding cache) is
converted and added in blocks of 65,536 rows, so beyond FAISS's own copy only one block and
the ``train_size x p`` float32 training sample exist in float32 at a time.

Reproducibility: IVF training and search are deterministic for a given seed.  HNSW levels
are drawn from a generator seeded with ``seed``; FAISS >= 1.15 builds the graph
deterministically with any number of threads; with an older FAISS the graph is built on one
thread here so that it is reproducible too (slower).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .._validation import check_int
from .search import SearchResult, _check_finite_rows, _check_k, _check_matrix

__all__ = [
    "ApproximateIndex",
    "recall_at_k",
    "ivf_parameters",
    "approximate_settings",
    "faiss_version",
    "APPROXIMATE_KINDS",
]

logger = logging.getLogger(__name__)

#: Index kinds of :class:`ApproximateIndex`.
APPROXIMATE_KINDS = ("ivf", "hnsw")

_ADD_BLOCK = 65536
_DEFAULT_EF_SEARCH = 64
_FAISS_MIN_POINTS = 39  # FAISS's k-means warns below 39 training points per centroid
_NPROBE_FRACTION = 128  # default nprobe: 1/128 of the lists (module docstring) ...
_MIN_NPROBE = 8  # ... but at least 8 of them


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "approximate search needs FAISS: pip install 'asymgeo[faiss]'"
        ) from exc
    return faiss


def faiss_version() -> str:
    """The installed FAISS version (ImportError naming the extra when FAISS is missing)."""
    return str(getattr(_faiss(), "__version__", "unknown"))


def _opt_int(value: Any, name: str, low: int = 1) -> int | None:
    if value is None:
        return None
    v = check_int(value, name, min_value=None, type_error=True)
    if v < low:
        raise ValueError(f"{name}: expected {name} >= {low}, got {v}")
    return v


def ivf_parameters(
    n_docs: int, nlist: int | None = None, nprobe: int | None = None, train_size: int | None = None
) -> tuple[int, int, int]:
    """``(nlist, nprobe, train_size)`` of an IVF index over ``n_docs`` documents, defaults filled in.

    Parameters
    ----------
    n_docs : corpus size ``N``.
    nlist : number of lists; default ``clip(round(4 sqrt(N)), 1, max(1, N // 39))``.
    nprobe : lists scanned per query; default ``min(nlist, max(8, nlist // 128))``.
    train_size : k-means training rows; default ``min(N, 64 nlist)``.

    Raises
    ------
    ValueError
        ``nlist > N``, ``nprobe > nlist``, ``train_size`` below ``nlist`` or above ``N``,
        or a value below 1.
    """
    N = check_int(n_docs, "n_docs")
    nl = _opt_int(nlist, "nlist")
    if nl is None:
        nl = int(min(max(round(4.0 * math.sqrt(N)), 1), max(1, N // _FAISS_MIN_POINTS)))
    elif nl > N:
        raise ValueError(f"nlist: {nl} lists for a corpus of {N} documents; expected nlist <= {N}")
    npb = _opt_int(nprobe, "nprobe")
    if npb is None:
        npb = min(nl, max(_MIN_NPROBE, nl // _NPROBE_FRACTION))
    elif npb > nl:
        raise ValueError(f"nprobe: {npb} exceeds nlist = {nl}; nprobe = nlist already scans every list")
    ts = _opt_int(train_size, "train_size")
    if ts is None:
        ts = min(N, 64 * nl)
    elif not nl <= ts <= N:
        raise ValueError(f"train_size: expected nlist ({nl}) <= train_size <= N ({N}), got {ts}")
    return nl, npb, ts


def approximate_settings(
    kind: str,
    n_docs: int,
    *,
    nlist: int | None = None,
    nprobe: int | None = None,
    train_size: int | None = None,
    hnsw_m: int = 32,
    ef_search: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """The settings that determine an :class:`ApproximateIndex`'s results, defaults filled in.

    Parameters are those of :class:`ApproximateIndex` (``n_docs`` is the corpus size ``N``);
    options of the other kind must be None.  Nothing is built: this is what a cache key of
    approximately mined results records (it includes the FAISS version, since k-means and
    graph construction may change between releases).

    Returns
    -------
    dict
        JSON-ready: ``{"index": "ivf", "nlist", "nprobe", "train_size", "seed", "faiss"}`` or
        ``{"index": "hnsw", "hnsw_m", "ef_search", "seed", "faiss"}``.
    """
    if kind not in APPROXIMATE_KINDS:
        raise ValueError(f"kind: expected one of {', '.join(map(repr, APPROXIMATE_KINDS))}, got {kind!r}")
    seed = check_int(seed, "seed", min_value=0)
    out: dict[str, Any] = {"index": kind, "seed": seed}
    if kind == "ivf":
        if ef_search is not None:
            raise ValueError("ef_search: an HNSW setting; for kind='ivf' set nprobe")
        nl, npb, ts = ivf_parameters(n_docs, nlist, nprobe, train_size)
        out.update(nlist=nl, nprobe=npb, train_size=ts)
    else:
        for name, value in (("nlist", nlist), ("nprobe", nprobe), ("train_size", train_size)):
            if value is not None:
                raise ValueError(f"{name}: an IVF setting; for kind='hnsw' set ef_search or hnsw_m")
        m = check_int(hnsw_m, "hnsw_m", min_value=None, type_error=True)
        if m < 2:
            raise ValueError(f"hnsw_m: expected hnsw_m >= 2, got {m}")
        out.update(hnsw_m=m, ef_search=_opt_int(ef_search, "ef_search") or _DEFAULT_EF_SEARCH)
    out["faiss"] = faiss_version()
    return out


@contextmanager
def _faiss_threads(faiss: Any, n: int | None) -> Iterator[None]:
    """FAISS's OpenMP threads set to ``n`` inside the block (unchanged for None)."""
    if n is None:
        yield
        return
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


class ApproximateIndex:
    """FAISS IVF or HNSW inner-product index over a corpus, for mining hard negatives.

    Parameters
    ----------
    corpus : (N, p) array (float16/float32/float64; a float16 memmap is read block by block).
        Every row must be finite.
    kind : ``"ivf"`` (``IndexIVFFlat``) or ``"hnsw"`` (``IndexHNSWFlat``), inner product.
    nlist, nprobe, train_size : IVF lists, lists scanned per query, k-means training rows;
        defaults in the module docstring (see :func:`ivf_parameters`).  IVF only.
    hnsw_m : links per node of the HNSW graph (default 32).  HNSW only.
    ef_search : HNSW search breadth (default 64; ``max(ef_search, k)`` is used).  HNSW only.
    seed : seeds the training sample (``numpy.random.default_rng(seed)``), FAISS's k-means
        (``cp.seed``) and the HNSW level generator.

    Attributes
    ----------
    kind, n_docs, dim, nlist, nprobe, train_size, ef_search, hnsw_m, seed : the settings in use
        (``nprobe`` and ``ef_search`` may be changed between searches).
    backend : ``"faiss-ivf"`` or ``"faiss-hnsw"``, the ``backend`` of every result.
    index : the FAISS index (holds a float32 copy of the corpus).

    Raises
    ------
    ImportError
        Without FAISS (``pip install 'asymgeo[faiss]'``).
    ValueError
        A bad kind, an empty or non-2-d corpus, a row with NaN or infinite values (the first
        such row is named), or settings out of range (``nlist > N``, ``nprobe > nlist``, ...).
    """

    def __init__(
        self,
        corpus: Any,
        *,
        kind: str = "ivf",
        nlist: int | None = None,
        nprobe: int | None = None,
        hnsw_m: int = 32,
        ef_search: int | None = None,
        seed: int = 0,
        train_size: int | None = None,
    ) -> None:
        if kind not in APPROXIMATE_KINDS:
            raise ValueError(f"kind: expected one of {', '.join(map(repr, APPROXIMATE_KINDS))}, got {kind!r}")
        C = _check_matrix(corpus, "corpus", "(N, p)")  # np.asarray: a memmap stays on disk
        self.n_docs, self.dim = int(C.shape[0]), int(C.shape[1])
        opts = approximate_settings(kind, self.n_docs, nlist=nlist, nprobe=nprobe, train_size=train_size,
                                    hnsw_m=hnsw_m, ef_search=ef_search, seed=seed)
        self.kind = kind
        self.seed = int(opts["seed"])
        self.hnsw_m = int(opts.get("hnsw_m", hnsw_m))
        self.nlist = int(opts.get("nlist", 0))
        self._nprobe = int(opts.get("nprobe", 0))
        self.train_size = int(opts.get("train_size", 0))
        self._ef_search = int(opts.get("ef_search", _DEFAULT_EF_SEARCH))
        self.backend = f"faiss-{kind}"
        faiss = _faiss()
        self.index: Any = self._build_ivf(faiss, C) if kind == "ivf" else self._build_hnsw(faiss, C)

    # ------------------------------------------------------------------ building
    def _blocks(self, C: np.ndarray) -> Iterator[np.ndarray]:
        """Contiguous float32 blocks of ``C``, each checked finite (first bad row named)."""
        for d0 in range(0, self.n_docs, _ADD_BLOCK):
            block = np.ascontiguousarray(C[d0 : d0 + _ADD_BLOCK], dtype=np.float32)
            _check_finite_rows(block, "corpus", d0)
            yield block

    def _build_ivf(self, faiss: Any, C: np.ndarray) -> Any:
        quantizer = faiss.IndexFlatIP(self.dim)
        index = faiss.IndexIVFFlat(quantizer, self.dim, self.nlist, faiss.METRIC_INNER_PRODUCT)
        self._quantizer = quantizer  # the IVF index refers to it: keep it alive
        index.cp.seed = self.seed
        if 1 < self.nlist and self.train_size < _FAISS_MIN_POINTS * self.nlist:
            logger.warning("IVF: %d training rows for %d lists (FAISS advises at least %d per list); "
                           "lower nlist for better lists", self.train_size, self.nlist, _FAISS_MIN_POINTS)
        index.cp.min_points_per_centroid = 1  # warned above, in Python, instead of on stderr
        rng = np.random.default_rng(self.seed)
        if self.train_size < self.n_docs:
            rows = np.sort(rng.choice(self.n_docs, size=self.train_size, replace=False))
        else:
            rows = np.arange(self.n_docs)
        # the finiteness of every row is checked while adding; the sample is checked first so
        # that a bad row in it is named as such instead of failing inside k-means
        sample = np.ascontiguousarray(C[rows], dtype=np.float32)
        finite = np.isfinite(sample).all(axis=1)
        if not finite.all():
            raise ValueError(f"corpus: row {int(rows[np.flatnonzero(~finite)[0]])} contains NaN or infinite values")
        index.train(sample)
        del sample
        for block in self._blocks(C):
            index.add(block)
        index.nprobe = self._nprobe
        return index

    def _build_hnsw(self, faiss: Any, C: np.ndarray) -> Any:
        index = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.rng = faiss.RandomGenerator(self.seed)
        # FAISS >= 1.15 builds the graph deterministically on any number of threads
        threads = None if hasattr(faiss, "hnsw_add_vertices_deterministic") else 1
        with _faiss_threads(faiss, threads):
            for block in self._blocks(C):
                index.add(block)
        return index

    # ------------------------------------------------------------------ settings
    @property
    def nprobe(self) -> int:
        return self._nprobe

    @nprobe.setter
    def nprobe(self, value: int) -> None:
        if self.kind != "ivf":
            raise ValueError("nprobe: an IVF setting; this index is HNSW (set ef_search)")
        _, npb, _ = ivf_parameters(self.n_docs, self.nlist, value, self.train_size)
        self._nprobe = npb
        self.index.nprobe = npb

    @property
    def ef_search(self) -> int:
        return self._ef_search

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        if self.kind != "hnsw":
            raise ValueError("ef_search: an HNSW setting; this index is IVF (set nprobe)")
        v = _opt_int(value, "ef_search")
        self._ef_search = v if v is not None else _DEFAULT_EF_SEARCH

    def settings(self) -> dict[str, Any]:
        """The settings that determine the results (JSON-ready), e.g. for a cache key."""
        if self.kind == "ivf":
            return approximate_settings("ivf", self.n_docs, nlist=self.nlist, nprobe=self.nprobe,
                                        train_size=self.train_size, seed=self.seed)
        return approximate_settings("hnsw", self.n_docs, hnsw_m=self.hnsw_m, ef_search=self.ef_search,
                                    seed=self.seed)

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v}" for k, v in self.settings().items() if k not in ("index", "faiss"))
        return f"ApproximateIndex(kind={self.kind!r}, N={self.n_docs}, p={self.dim}, {opts})"

    # ------------------------------------------------------------------ search
    def search(self, queries: Any, k: int) -> SearchResult:
        """Approximate top-``k`` documents by inner product.

        Parameters
        ----------
        queries : (n, p) query embeddings (any float dtype; converted to float32).
        k : results per query, ``1 <= k <= N``.

        Returns
        -------
        SearchResult
            ``scores`` (n, k) float32 and ``indices`` (n, k) int64, best first, equal scores
            ordered by lower row; ``backend`` ``"faiss-ivf"`` / ``"faiss-hnsw"``.  Where the
            index finds fewer than ``k`` documents (IVF lists scanned holding fewer than ``k``
            documents) the missing places have index ``-1`` and score ``-inf``.
        """
        Q = _check_matrix(queries, "queries", "(n, p)")
        if Q.shape[1] != self.dim:
            raise ValueError(f"queries: expected shape (n, {self.dim}), got {Q.shape}")
        k = _check_k(k, self.n_docs)
        Q = np.ascontiguousarray(Q, dtype=np.float32)
        _check_finite_rows(Q, "queries")
        if self.kind == "hnsw":
            self.index.hnsw.efSearch = max(self._ef_search, k)
        D, I = self.index.search(Q, k)
        I = np.asarray(I, dtype=np.int64)
        D = np.where(I < 0, np.float32(-np.inf), np.asarray(D, dtype=np.float32))
        # the package's tie rule: descending score, equal scores by lower row (missing last)
        key_i = np.where(I < 0, np.iinfo(np.int64).max, I)
        order = np.lexsort((key_i, -D), axis=-1) if D.size else np.zeros(D.shape, dtype=np.int64)
        D = np.ascontiguousarray(np.take_along_axis(D, order, axis=1))
        I = np.ascontiguousarray(np.take_along_axis(I, order, axis=1))
        return SearchResult(D, I, self.backend)


def recall_at_k(approx: SearchResult, exact: SearchResult) -> float:
    r"""Mean overlap of approximate and exact top-k lists.

    .. math::

        \mathrm{recall@}k = \frac{1}{n} \sum_{i=1}^{n}
            \frac{|A_i \cap E_i|}{k}

    where ``A_i`` and ``E_i`` are the index sets of row ``i`` of ``approx`` and ``exact``
    (missing results, index ``-1``, never count).

    Parameters
    ----------
    approx, exact : results of the same ``n`` queries with the same ``k``.

    Returns
    -------
    float
        In ``[0, 1]``; 1 when every approximate list holds the exact documents (in any order).
    """
    A, E = np.asarray(approx.indices), np.asarray(exact.indices)
    if A.ndim != 2 or A.shape != E.shape:
        raise ValueError(f"recall_at_k: approx has shape {A.shape}, exact {E.shape}; expected the same (n, k)")
    n, k = E.shape
    if n == 0 or k == 0:
        raise ValueError("recall_at_k: no results to compare (n = 0 or k = 0)")
    hits = sum(len(set(a[a >= 0].tolist()) & set(e.tolist())) for a, e in zip(A, E))
    return float(hits / (n * k))
