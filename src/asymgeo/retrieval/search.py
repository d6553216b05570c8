"""Exact top-k inner-product search over a whole corpus.

Convention (the project's): queries and documents are rows; an operator ``M``
scores ``x^T M y`` and the score matrix is ``X @ M @ Y.T``.

Guarantees
----------
* **Exact.**  Every document is scored; there is no approximation.  Scores are
  computed in float32 (float16 and float64 corpora are converted to float32 one
  block at a time, so a float16 corpus never exists in float32 as a whole).
* **Bounded memory.**  The corpus is processed in blocks; the largest temporary is
  one ``(query block) x (corpus block)`` float32 score tile (about 32 MiB on CPU by
  default), never the full ``queries x corpus`` matrix.
* **Deterministic tie-breaking.**  Results are ordered by score descending; documents
  whose float32 scores are *exactly equal* are ordered by their row index in the
  corpus, lowest first.  This applies at the k-th position too: if several documents
  tie for the last place, those with the lowest indices are kept.  Every backend
  (``numpy``, ``torch``, ``faiss``) applies this rule, so when they compute the same
  float32 scores they return identical indices.  (Different BLAS libraries may round
  a dot product differently in the last bit; two documents whose scores differ only
  by such rounding can then swap between backends.  With exactly representable data,
  e.g. small integers, all backends agree bit for bit.)

Reusable index
--------------
:class:`ExactIndex` prepares a corpus once (a float32 copy of a float16/float64 corpus
within ``max_copy_bytes``, the corpus on the GPU for ``torch``, one FAISS index) and then
answers many searches with the same results; :func:`exact_search` is the one-shot form
(no copy: a float16 corpus is converted block by block during the search).

Backends
--------
``numpy`` (default on CPU)
    Blocked SGEMM through numpy's multithreaded BLAS, then a threshold filter: a
    document can only enter a query's top-k if it beats that query's current k-th
    score, so after the first block only a tiny fraction of scores is looked at
    again.  Candidates are merged with an exact lexicographic sort on
    ``(query, -score, index)``.  For large searches (>= 2^30 multiply-adds) the
    corpus is split into one contiguous range per core, each searched on its own
    thread with single-threaded BLAS (so the filtering no longer idles a core), and
    the per-range lists are merged by the same sort.
``torch`` (default when CUDA is available)
    The same blocking on the GPU with ``torch.topk`` per block and a stable merge.
    Chosen automatically when ``torch.cuda.is_available()``; no flag needed.
``faiss`` (extra ``asymgeo[faiss]``)
    ``faiss.IndexFlatIP``, post-processed to the same tie rule (rows whose k-th and
    (k+1)-th scores tie are recomputed with the numpy backend).  The index holds a
    float32 copy of the corpus, so this backend needs the corpus' memory twice
    (float32) or three times (float16 input).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._runtime import available_cpus, limit_blas_threads
from .._validation import check_int
from .memory import TIE_DEPTH, MemoryCandidates, MemoryTable, memory_boosts, memory_rerank

__all__ = [
    "SearchResult",
    "ExactIndex",
    "exact_search",
    "search_trec_order",
    "transform_index",
    "AdapterIndex",
    "available_backends",
    "memory_candidates",
    "memory_search",
]

_BACKENDS = ("auto", "numpy", "torch", "faiss")
_CPU_TILE_BYTES = 32 << 20  # score tile about the size of a server L3 cache (measured best here)
_GPU_TILE_BYTES = 512 << 20
_MIN_BLOCK = 1024
_MAX_BLOCK = 1 << 16
_QUERY_BLOCK = 2048


# --------------------------------------------------------------------------- result
@dataclass(frozen=True)
class SearchResult:
    """Top-k documents for every query.

    Attributes
    ----------
    scores : (n, k) float32
        Scores in descending order along each row.
    indices : (n, k) int64
        Row indices into the corpus; exact score ties are ordered by lower index.
    backend : str
        The backend that ran (``"numpy"``, ``"torch:cuda"``, ``"torch:cpu"``, ``"faiss"``).

    The result unpacks like a tuple: ``scores, indices = exact_search(...)``.
    """

    scores: np.ndarray
    indices: np.ndarray
    backend: str = field(default="numpy")

    def __iter__(self) -> Iterator[np.ndarray]:
        yield self.scores
        yield self.indices

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> np.ndarray:
        return (self.scores, self.indices)[i]

    @property
    def k(self) -> int:
        return int(self.indices.shape[1])

    def to_run(
        self, query_ids: Sequence[str], corpus_ids: Sequence[str]
    ) -> dict[str, dict[str, float]]:
        """Return a trec-style run ``{qid: {docid: score}}`` for :mod:`asymgeo.retrieval.metrics`."""
        n = self.indices.shape[0]
        if len(query_ids) != n:
            raise ValueError(
                f"query_ids: got {len(query_ids)} ids for {n} result rows"
            )
        if self.indices.size and int(self.indices.max()) >= len(corpus_ids):
            raise ValueError(
                f"corpus_ids: got {len(corpus_ids)} ids but results index document "
                f"{int(self.indices.max())}"
            )
        # only the retrieved rows' ids are looked up (corpus_ids may be a compact IdIndex of millions)
        used, inverse = np.unique(self.indices, return_inverse=True)
        names = np.asarray([str(corpus_ids[int(j)]) for j in used], dtype=object)[inverse.reshape(self.indices.shape)]
        run: dict[str, dict[str, float]] = {}
        for qid, row_d, row_s in zip(query_ids, names, self.scores):
            run[str(qid)] = {str(d): float(s) for d, s in zip(row_d, row_s)}
        return run


def available_backends() -> list[str]:
    """Backends usable in this environment (``numpy`` always)."""
    out = ["numpy"]
    try:
        import torch  # noqa: F401

        out.append("torch")
    except ImportError:
        pass
    try:
        import faiss  # noqa: F401

        out.append("faiss")
    except ImportError:
        pass
    return out


# --------------------------------------------------------------------------- checks
def _check_k(k: Any, n_docs: int) -> int:
    k = check_int(k, "k", min_value=None, type_error=True)
    if k < 1:
        raise ValueError(f"k: expected k >= 1, got {k}")
    if k > n_docs:
        raise ValueError(
            f"k: k = {k} is larger than the corpus ({n_docs} documents)"
        )
    return k


def _check_matrix(value: Any, name: str, shape_word: str) -> np.ndarray:
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch tensor
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"{name}: expected a numeric array, got dtype {arr.dtype}")
    if np.iscomplexobj(arr):
        raise TypeError(f"{name}: complex values are not supported")
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected a 2-d array {shape_word}, got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name}: expected a non-empty array {shape_word}, got shape {arr.shape}")
    return arr


def _check_finite_rows(arr: np.ndarray, name: str, offset: int = 0) -> None:
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0]) + offset
        raise ValueError(f"{name}: row {row} contains NaN or infinite values")


def _block_size(n_queries: int, n_docs: int, k: int, tile_bytes: int, block_size: Any) -> int:
    if block_size is None:
        b = tile_bytes // (4 * max(1, n_queries))
        b = int(min(max(b, _MIN_BLOCK), _MAX_BLOCK))
    else:
        b = check_int(block_size, "block_size", min_value=None, type_error=True)
        if b < 1:
            raise ValueError(f"block_size: expected block_size >= 1, got {b}")
    return int(min(max(b, k), n_docs))


def _raise_nonfinite_scores(block: np.ndarray, start: int, name: str = "corpus") -> None:
    bad = ~np.isfinite(block).all(axis=1)
    if bad.any():
        row = int(np.flatnonzero(bad)[0]) + start
        raise ValueError(f"{name}: row {row} contains NaN or infinite values")
    raise ValueError(
        f"{name}: scores overflow float32 near rows {start}..{start + len(block) - 1}; "
        "rescale the embeddings"
    )


# --------------------------------------------------------------------------- numpy backend
class _TopK:
    """Running exact top-k for ``n`` queries with threshold filtering."""

    def __init__(self, n: int, k: int):
        self.n, self.k = n, k
        self.scores = np.full((n, k), -np.inf, dtype=np.float32)
        self.indices = np.full((n, k), -1, dtype=np.int64)
        self.full = np.zeros(n, dtype=bool)
        # strict threshold: a document enters only if its score is > thr
        self.thr = np.full(n, -np.inf, dtype=np.float32)
        self._rows: list[np.ndarray] = []
        self._docs: list[np.ndarray] = []
        self._vals: list[np.ndarray] = []
        self._pending = 0
        # merge when pending candidates reach 4 n k (at most 8M entries, ~160 MiB)
        self._merge_at = min(max(4 * n * k, 1 << 18), 1 << 23)

    def offer(self, S: np.ndarray, q0: int, d0: int, mask: np.ndarray) -> None:
        """Add candidates from score tile ``S`` (rows q0.., docs d0..)."""
        nb, B = S.shape
        thr = self.thr[q0 : q0 + nb]
        if not self.full[q0 : q0 + nb].all():
            thr = thr.copy()
            need = ~self.full[q0 : q0 + nb]
            kk = min(self.k, B)
            # kk-th largest of the tile, per row; ">= v" == "> nextafter(v, -inf)"
            v = np.partition(S[need], B - kk, axis=1)[:, B - kk]
            thr[need] = np.nextafter(v, np.float32(-np.inf))
        m = mask[:nb, :B]
        np.greater(S, thr[:, None], out=m)
        flat = np.flatnonzero(m)
        if flat.size == 0:
            return
        r, c = np.divmod(flat, B)
        self._rows.append(r + q0)
        self._docs.append(c + d0)
        self._vals.append(S.ravel()[flat])
        self._pending += flat.size
        if self._pending >= self._merge_at:
            self.merge()

    def merge(self) -> None:
        if not self._rows:
            return
        rows = np.concatenate(self._rows)
        docs = np.concatenate(self._docs)
        vals = np.concatenate(self._vals)
        self._rows, self._docs, self._vals, self._pending = [], [], [], 0
        touched = np.unique(rows)
        old_s = self.scores[touched]
        old_i = self.indices[touched]
        keep = old_i >= 0
        old_r = np.broadcast_to(touched[:, None], old_i.shape)[keep]
        rows = np.concatenate([old_r, rows])
        docs = np.concatenate([old_i[keep], docs])
        vals = np.concatenate([old_s[keep], vals])
        # Exact order: query, then score descending, then document index ascending.
        # One stable sort on a 64-bit key (query, order-preserving bits of -score)
        # suffices: within a query, equal scores already appear in ascending document
        # order here (kept entries come from earlier blocks and are themselves ordered
        # that way; pending candidates arrive block by block, row-major).
        order = np.argsort(_desc_key(rows, vals), kind="stable")
        rows, docs, vals = rows[order], docs[order], vals[order]
        starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
        lengths = np.diff(np.r_[starts, rows.size])
        pos = np.arange(rows.size) - np.repeat(starts, lengths)
        sel = pos < self.k
        rows, docs, vals, pos = rows[sel], docs[sel], vals[sel], pos[sel]
        self.scores[rows, pos] = vals
        self.indices[rows, pos] = docs
        full_rows = touched[np.minimum(lengths, self.k) >= self.k]
        self.full[full_rows] = True
        self.thr[full_rows] = self.scores[full_rows, self.k - 1]


def _desc_key(rows: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """uint64 keys increasing in (row, -score); -0.0 and +0.0 compare equal."""
    v = np.asarray(vals, dtype=np.float32) + np.float32(0.0)  # -0.0 -> +0.0
    u = v.view(np.uint32)
    neg = (u >> np.uint32(31)).astype(bool)
    asc = np.where(neg, ~u, u | np.uint32(0x80000000))  # ascending with the float value
    desc = ~asc
    return (rows.astype(np.uint64) << np.uint64(32)) | desc.astype(np.uint64)


def _search_numpy(Q: np.ndarray, corpus: np.ndarray, k: int, block: int, bar: Any = None) -> SearchResult:
    n = Q.shape[0]
    N = corpus.shape[0]
    qb = min(n, _QUERY_BLOCK)
    top = _TopK(n, k)
    tile = np.empty((qb, block), dtype=np.float32)
    mask = np.empty((qb, block), dtype=bool)
    conv = None if corpus.dtype == np.float32 else np.empty((block, corpus.shape[1]), np.float32)
    for d0 in range(0, N, block):
        d1 = min(N, d0 + block)
        B = d1 - d0
        C = corpus[d0:d1]
        if conv is not None:
            C = conv[:B]
            C[...] = corpus[d0:d1]
        CT = C.T
        for q0 in range(0, n, qb):
            q1 = min(n, q0 + qb)
            S = tile[: q1 - q0, :B]
            if S.base is not None and not S.flags.c_contiguous:
                S = np.empty((q1 - q0, B), dtype=np.float32)
            with np.errstate(over="ignore", invalid="ignore"):  # non-finite scores are checked below
                np.matmul(Q[q0:q1], CT, out=S)
            # any NaN/inf document yields a non-finite score for every query
            if q0 == 0 and not np.isfinite(S[0]).all():
                _raise_nonfinite_scores(np.asarray(corpus[d0:d1], dtype=np.float32), d0)
            top.offer(S, q0, d0, mask)
        if bar is not None:
            bar.update(B)
    top.merge()
    # a product that overflowed for a later query only (finite documents, huge query) reaches
    # the top k as +inf: refuse it rather than rank by it
    bad = ~np.isfinite(top.scores) & (top.indices >= 0)
    if bad.any():
        row = int(top.indices[bad][0])
        _raise_nonfinite_scores(np.asarray(corpus[row : row + 1], dtype=np.float32), row)
    return SearchResult(top.scores, top.indices, "numpy")


def _cpu_workers() -> int:
    return available_cpus()


# Below this many multiply-adds (queries x documents x dim) threads cost more than they save.
_PARALLEL_MIN_WORK = 1 << 30


def _search_numpy_parallel(
    Q: np.ndarray, corpus: np.ndarray, k: int, block: int, workers: int, bar: Any = None
) -> SearchResult:
    """The numpy backend on ``workers`` threads, each over a contiguous corpus range.

    Each thread runs single-threaded BLAS for its matrix products *and* its top-k
    filtering, so both cores stay busy (with multithreaded BLAS the filtering runs on
    one core while the other waits).  The per-range top-k lists are merged by one stable
    sort on (query, -score); ranges are in document order, so equal scores still come
    out by lower document index.
    """
    from concurrent.futures import ThreadPoolExecutor

    N = corpus.shape[0]
    bounds = np.linspace(0, N, workers + 1).astype(int)

    def part(w: int) -> SearchResult:
        lo, hi = int(bounds[w]), int(bounds[w + 1])
        res = _search_numpy(Q, corpus[lo:hi], min(k, hi - lo), block, bar)
        return SearchResult(res.scores, res.indices + lo, "numpy")

    with limit_blas_threads(1), ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(part, range(workers)))
    n = Q.shape[0]
    vals = np.concatenate([p_.scores for p_ in parts], axis=1)
    idx = np.concatenate([p_.indices for p_ in parts], axis=1)
    rows = np.repeat(np.arange(n), vals.shape[1])
    order = np.argsort(_desc_key(rows, vals.ravel()), kind="stable").reshape(n, -1)[:, :k]
    return SearchResult(
        np.take_along_axis(vals, order - np.arange(n)[:, None] * vals.shape[1], axis=1),
        np.take_along_axis(idx, order - np.arange(n)[:, None] * vals.shape[1], axis=1),
        "numpy",
    )


# --------------------------------------------------------------------------- torch backend
def _search_torch(
    Q: np.ndarray, corpus: np.ndarray, k: int, block: int | None, device: str, prepared: Any = None,
    bar: Any = None,
) -> SearchResult:
    """The torch backend; ``prepared`` is the whole corpus as a float32 tensor on ``device``
    (checked finite once, by :class:`ExactIndex`), else blocks are moved per call."""
    import torch

    dev = torch.device(device)
    n, N = Q.shape[0], corpus.shape[0]
    tile_bytes = _GPU_TILE_BYTES if dev.type == "cuda" else _CPU_TILE_BYTES
    block = _block_size(n, N, k, tile_bytes, block)
    qb = min(n, max(1, tile_bytes // (4 * block)))
    prev_tf32 = None
    if dev.type == "cuda":
        prev_tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False  # exact float32 products
    try:
        Qt = torch.from_numpy(Q).to(dev)
        top_s = torch.full((n, k), -float("inf"), dtype=torch.float32, device=dev)
        top_i = torch.full((n, k), -1, dtype=torch.int64, device=dev)
        for d0 in range(0, N, block):
            d1 = min(N, d0 + block)
            if prepared is not None:
                C = prepared[d0:d1]
            else:
                part = np.ascontiguousarray(corpus[d0:d1])
                if not part.flags.writeable:  # read-only memmaps: torch wants a writable buffer
                    part = part.copy()
                C = torch.from_numpy(part).to(dev).float()
                bad = ~torch.isfinite(C).all(dim=1)
                if bool(bad.any()):
                    row = int(torch.nonzero(bad)[0, 0]) + d0
                    raise ValueError(f"corpus: row {row} contains NaN or infinite values")
            B = d1 - d0
            kk = min(k, B)
            for q0 in range(0, n, qb):
                q1 = min(n, q0 + qb)
                S = Qt[q0:q1] @ C.T
                if not bool(torch.isfinite(S).all()):
                    _raise_nonfinite_scores(C.cpu().numpy(), d0)
                vals, idx = torch.topk(S, kk, dim=1, largest=True, sorted=False)
                # exact tie rule at the cut: rows where more than kk scores reach the
                # kk-th value are resolved with a stable full sort (lower index first)
                kth = vals.min(dim=1, keepdim=True).values
                amb = (S >= kth).sum(dim=1) > kk
                if bool(amb.any()):
                    rows = torch.nonzero(amb)[:, 0]
                    sv, si = torch.sort(S[rows], dim=1, descending=True, stable=True)
                    vals[rows] = sv[:, :kk]
                    idx[rows] = si[:, :kk]
                cs = torch.cat([top_s[q0:q1], vals], dim=1)
                ci = torch.cat([top_i[q0:q1], idx + d0], dim=1)
                # placeholders (-1) sort last among -inf by giving them a huge index
                key_i = torch.where(ci < 0, torch.full_like(ci, N), ci)
                o1 = torch.argsort(key_i, dim=1, stable=True)
                cs, ci = cs.gather(1, o1), ci.gather(1, o1)
                o2 = torch.argsort(cs, dim=1, descending=True, stable=True)[:, :k]
                top_s[q0:q1] = cs.gather(1, o2)
                top_i[q0:q1] = ci.gather(1, o2)
            if bar is not None:
                bar.update(B)
        scores = top_s.cpu().numpy()
        indices = top_i.cpu().numpy()
    finally:
        if prev_tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    return SearchResult(scores, indices, f"torch:{dev.type}")


# --------------------------------------------------------------------------- faiss backend
def _faiss_index(corpus: np.ndarray) -> Any:
    """``faiss.IndexFlatIP`` holding a float32 copy of the corpus (rows checked finite)."""
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "backend='faiss' needs FAISS: pip install 'asymgeo[faiss]'"
        ) from exc
    N, p = corpus.shape
    index = faiss.IndexFlatIP(p)
    for d0 in range(0, N, 65536):
        C = np.ascontiguousarray(corpus[d0 : d0 + 65536], dtype=np.float32)
        _check_finite_rows(C, "corpus", d0)
        index.add(C)
    return index


def _search_faiss(Q: np.ndarray, corpus: np.ndarray, k: int, index: Any) -> SearchResult:
    N = corpus.shape[0]
    kq = min(k + 1, N)
    D, I = index.search(Q, kq)
    D = D.astype(np.float32, copy=False)
    I = I.astype(np.int64, copy=False)
    if kq > k:
        redo = D[:, k - 1] == D[:, k]  # a tie straddles the cut: exact recomputation
        D, I = D[:, :k].copy(), I[:, :k].copy()
    else:
        redo = np.zeros(Q.shape[0], dtype=bool)
    # within the top-k, order exact ties by lower index
    o1 = np.argsort(I, axis=1, kind="stable")
    D, I = np.take_along_axis(D, o1, 1), np.take_along_axis(I, o1, 1)
    o2 = np.argsort(-D, axis=1, kind="stable")
    D, I = np.take_along_axis(D, o2, 1), np.take_along_axis(I, o2, 1)
    if redo.any():
        rows = np.flatnonzero(redo)
        sub = _search_numpy(Q[rows], corpus, k, _block_size(rows.size, N, k, _CPU_TILE_BYTES, None))
        D[rows], I[rows] = sub.scores, sub.indices
    return SearchResult(np.ascontiguousarray(D), np.ascontiguousarray(I), "faiss")


# --------------------------------------------------------------------------- public
def _cuda_device_present() -> bool:
    """False only when CUDA certainly is not there: on Linux, no ``/dev/nvidia*`` device node
    (torch not imported yet).  Elsewhere, or with torch already imported, True: ask torch."""
    import sys

    if "torch" in sys.modules or not sys.platform.startswith("linux"):
        return True
    import glob

    return bool(glob.glob("/dev/nvidia*"))


def _resolve(backend: str, device: str) -> tuple[str, str]:
    if backend not in _BACKENDS:
        raise ValueError(f"backend: expected one of {_BACKENDS}, got {backend!r}")
    if not isinstance(device, str):
        raise TypeError(f"device: expected a string such as 'auto', 'cpu' or 'cuda', got {device!r}")
    cuda = False
    if backend == "auto" and device == "auto" and not _cuda_device_present():
        pass  # no NVIDIA device node: CUDA cannot be available, and importing torch costs ~1 s
    elif device == "auto" or device.startswith("cuda") or backend in ("auto", "torch"):
        try:
            import torch

            cuda = torch.cuda.is_available()
        except ImportError:
            if backend == "torch" or device.startswith("cuda"):
                raise ImportError(
                    "backend='torch' / device='cuda' needs PyTorch: pip install torch"
                ) from None
    if device == "auto":  # a CPU-only backend named explicitly runs on the CPU
        device = "cuda" if cuda and backend in ("auto", "torch") else "cpu"
    if device.startswith("cuda") and not cuda:
        raise ValueError(f"device: {device!r} requested but torch.cuda.is_available() is False")
    if backend == "auto":
        backend = "torch" if device.startswith("cuda") else "numpy"
    if backend in ("numpy", "faiss") and device != "cpu":
        raise ValueError(f"backend: {backend!r} runs on the CPU only, got device={device!r}")
    return backend, device


def exact_search(
    queries: Any,
    corpus: Any,
    k: int,
    *,
    operator: Any = None,
    block_size: int | None = None,
    device: str = "auto",
    backend: str = "auto",
    progress: bool | None = False,
) -> SearchResult:
    """Exact top-``k`` documents by inner product, for every query.

    Parameters
    ----------
    queries : (n, p) array
        Query embeddings, one per row (any float dtype; searched in float32).
    corpus : (N, p') array
        Document embeddings, one per row; float32, float16 (upcast block by block)
        or float64.  A ``numpy.memmap`` is read block by block, once.
    k : int
        Results per query, ``1 <= k <= N``.
    operator : (p, p') array, optional
        Bilinear operator ``M``: documents are ranked by ``x^T M y``.  Queries are
        transformed once to ``x^T M`` (i.e. ``M^T x``) and searched against the
        unchanged corpus.  Without it, ``p' = p`` and the score is ``x . y``.
    block_size : int, optional
        Documents per block.  By default chosen so that one float32 score tile is
        about 32 MiB on CPU (512 MiB on GPU).
    device : {"auto", "cpu", "cuda", "cuda:N"}
        ``"auto"`` uses CUDA when ``torch.cuda.is_available()``.
    backend : {"auto", "numpy", "torch", "faiss"}
        ``"auto"``: ``torch`` on a CUDA device, otherwise ``numpy`` (level with
        ``faiss.IndexFlatIP`` on the benchmark machine, without its float32 copy of
        the corpus; see docs/benchmarks.md).
    progress : bool or None
        Show a progress bar over corpus documents (numpy and torch backends): True always,
        False never (default), None only when stderr is a terminal.

    Returns
    -------
    SearchResult
        ``scores`` (n, k) float32 descending and ``indices`` (n, k) int64; exact
        score ties are ordered by lower document index (see module docstring).
        Unpacks as ``scores, indices = exact_search(...)``.
    """
    # One search: no float32 copy and no separate pass over the corpus (its rows are
    # checked through their scores); the search itself is ExactIndex.search.
    index = ExactIndex.__new__(ExactIndex)
    index.corpus, index.operator, index.backend, index.device = corpus, operator, backend, device
    index.block_size, index.max_copy_bytes = block_size, 0
    index._prepare(check_corpus=False)
    return index.search(queries, k, progress=progress)


# Corpora up to this size (as float32) are copied once by ExactIndex; larger ones are
# converted block by block on every search, as exact_search does.
_DEFAULT_COPY_BYTES = 1 << 30


class ExactIndex:
    """A reusable exact index: the corpus is prepared once, then searched many times.

    Same results, tie rule and backends as :func:`exact_search` (which is this index
    built without a copy and searched once): documents are ranked by ``x . y`` or, with
    ``operator`` ``M``, by ``x^T M y`` (queries are transformed to ``x^T M``).

    Preparation, once:

    * ``numpy``: a corpus that is not float32 (float16 caches, float64) is converted to
      one float32 copy when that copy needs at most ``max_copy_bytes`` (default 1 GiB);
      a float32 corpus (a memmap too) is used in place, never copied.  A larger
      non-float32 corpus stays as it is and is converted block by block during each
      search (bounded memory, as :func:`exact_search`).
    * ``torch``: the corpus as one float32 tensor on the device when it fits
      ``max_copy_bytes``; else blocks are moved on every search.
    * ``faiss``: one ``faiss.IndexFlatIP`` (it always holds a float32 copy).
    * Every row is checked finite once (a clear ``ValueError`` names the first bad row).

    Parameters
    ----------
    corpus : (N, p') array
        Document embeddings, any float dtype; ``numpy.memmap`` welcome.  Kept by
        reference: do not modify it while the index is in use.
    operator : (p, p') array, optional
        Bilinear operator ``M``; then queries have dimension ``p``.
    backend, device, block_size
        As for :func:`exact_search`.
    max_copy_bytes : int
        Largest float32 copy of the corpus the index may make (0: never copy).

    Attributes
    ----------
    corpus_ : (N, p') array
        What the numpy kernel reads: the float32 copy, or ``corpus`` itself.
    operator_ : (p, p') float64 array or None
    backend_, device_ : str
        The resolved backend and device.
    copied_ : bool
        Whether a float32 copy (host or device) was made.
    n_documents_, dim_ : int

    Examples
    --------
    >>> index = ExactIndex(corpus_float16)          # doctest: +SKIP
    >>> scores, rows = index.search(query[None], 10)  # doctest: +SKIP
    """

    corpus_: np.ndarray
    operator_: np.ndarray | None
    backend_: str
    device_: str
    copied_: bool
    n_documents_: int
    dim_: int

    def __init__(
        self,
        corpus: Any,
        operator: Any = None,
        *,
        backend: str = "auto",
        device: str = "auto",
        block_size: int | None = None,
        max_copy_bytes: int = _DEFAULT_COPY_BYTES,
    ) -> None:
        self.corpus = corpus
        self.operator = operator
        self.backend = backend
        self.device = device
        self.block_size = block_size
        self.max_copy_bytes = max_copy_bytes
        self._prepare(check_corpus=True)

    def _prepare(self, check_corpus: bool) -> None:
        C = _check_matrix(self.corpus, "corpus", "(N, p)")
        check_int(self.max_copy_bytes, "max_copy_bytes", min_value=0)
        backend, device = _resolve(self.backend, self.device)
        if self.block_size is not None:
            _block_size(1, C.shape[0], 1, _CPU_TILE_BYTES, self.block_size)  # validates it
        M = None
        if self.operator is not None:
            M = _check_matrix(self.operator, "operator", "(p, p')")
            if M.shape[1] != C.shape[1]:
                raise ValueError(
                    f"operator: shape {M.shape} does not match corpus dimension "
                    f"{C.shape[1]} (expected (p, {C.shape[1]}))"
                )
            _check_finite_rows(np.asarray(M), "operator")
            M = np.asarray(M, dtype=np.float64)
        self.operator_ = M
        self.backend_, self.device_ = backend, device
        self.n_documents_, self.dim_ = int(C.shape[0]), int(C.shape[1])
        fits = C.shape[0] * C.shape[1] * 4 <= self.max_copy_bytes
        self.corpus_ = C
        self.copied_ = False
        self._device_corpus: Any = None
        self._faiss: Any = None
        if backend == "faiss":
            self._faiss = _faiss_index(C)  # checks every row
            self.copied_ = True
            return
        if backend == "numpy" and fits and C.dtype != np.float32:
            self.corpus_ = _float32_copy(C)  # checks every row
            self.copied_ = True
        elif backend == "torch" and fits:
            self._device_corpus = _device_copy(C, device)  # checks every row
            self.copied_ = True
        elif check_corpus:
            _check_finite_blocks(C)

    def __len__(self) -> int:
        return self.n_documents_

    def _transform_queries(self, queries: Any) -> np.ndarray:
        Q = _check_matrix(queries, "queries", "(n, p)")
        M = self.operator_
        if M is not None:
            if M.shape[0] != Q.shape[1]:
                raise ValueError(
                    f"operator: shape {M.shape} does not act on queries of dimension "
                    f"{Q.shape[1]} (expected ({Q.shape[1]}, {self.dim_}))"
                )
            _check_finite_rows(Q, "queries")
            # Rows: (M^T x)^T = x^T M; computed in float64 then rounded once.
            Q = np.asarray(Q, dtype=np.float64) @ M
        elif Q.shape[1] != self.dim_:
            raise ValueError(
                f"queries: dimension {Q.shape[1]} does not match corpus dimension {self.dim_} "
                f"(queries shape {Q.shape}, corpus shape {(self.n_documents_, self.dim_)})"
            )
        Q = np.ascontiguousarray(Q, dtype=np.float32)
        _check_finite_rows(Q, "queries" if M is None else "queries @ operator")
        return Q

    def search(self, queries: Any, k: int, *, progress: bool | None = False) -> SearchResult:
        """Exact top-``k`` documents for every query (see :func:`exact_search`).

        Parameters
        ----------
        queries : (n, p) array
        k : int, ``1 <= k <= N``
        progress : bool or None
            Progress bar over corpus documents (numpy and torch backends), as in :func:`exact_search`.

        Returns
        -------
        SearchResult
        """
        Q = self._transform_queries(queries)
        C = self.corpus_
        k = _check_k(k, C.shape[0])
        if self.backend_ == "torch":
            from tqdm.auto import tqdm

            with tqdm(total=C.shape[0], unit="doc", unit_scale=True, desc="exact search",
                      disable=None if progress is None else not progress, leave=False) as bar:
                return _search_torch(Q, C, k, self.block_size, self.device_, self._device_corpus, bar)
        if self.backend_ == "faiss":
            return _search_faiss(Q, C, k, self._faiss)
        block = _block_size(Q.shape[0], C.shape[0], k, _CPU_TILE_BYTES, self.block_size)
        workers = min(_cpu_workers(), C.shape[0] // max(k, 1))
        from tqdm.auto import tqdm

        # progress=None: a bar only on a terminal (tqdm's own rule); updates are per corpus block.
        with tqdm(total=C.shape[0], unit="doc", unit_scale=True, desc="exact search",
                  disable=None if progress is None else not progress, leave=False) as bar:
            if workers > 1 and Q.shape[0] * C.shape[0] * C.shape[1] >= _PARALLEL_MIN_WORK:
                # the tile budget is shared between the threads (measured best here)
                block = _block_size(Q.shape[0], C.shape[0], k, _CPU_TILE_BYTES // workers, self.block_size)
                return _search_numpy_parallel(Q, C, k, block, workers, bar)
            return _search_numpy(Q, C, k, block, bar)


_PREPARE_BLOCK = 65536


def _check_finite_blocks(C: np.ndarray) -> None:
    for d0 in range(0, C.shape[0], _PREPARE_BLOCK):
        _check_finite_rows(np.asarray(C[d0 : d0 + _PREPARE_BLOCK], dtype=np.float32), "corpus", d0)


def _float32_copy(C: np.ndarray) -> np.ndarray:
    """One float32 copy of ``C``, converted and checked block by block."""
    out = np.empty(C.shape, dtype=np.float32)
    for d0 in range(0, C.shape[0], _PREPARE_BLOCK):
        blk = out[d0 : d0 + _PREPARE_BLOCK]
        with np.errstate(over="ignore"):
            blk[...] = C[d0 : d0 + _PREPARE_BLOCK]
        _check_finite_rows(blk, "corpus", d0)
    return out


def _device_copy(C: np.ndarray, device: str) -> Any:
    """The corpus as one float32 tensor on ``device``, moved and checked block by block."""
    import torch

    out = torch.empty(C.shape, dtype=torch.float32, device=torch.device(device))
    for d0 in range(0, C.shape[0], _PREPARE_BLOCK):
        blk = np.ascontiguousarray(C[d0 : d0 + _PREPARE_BLOCK], dtype=np.float32)
        _check_finite_rows(blk, "corpus", d0)
        out[d0 : d0 + blk.shape[0]] = torch.from_numpy(blk).to(out.device)
    return out


# --------------------------------------------------------------------------- adapters
def transform_index(
    corpus: Any, doc_map: Any, *, dtype: Any = np.float32, block_size: int = 65536
) -> np.ndarray:
    """Documents mapped by a rank-r map: ``Y @ B.T``, built block by block.

    Parameters
    ----------
    corpus : (N, p) array
        Document embeddings (any float dtype, memmaps welcome).
    doc_map : (r, p) array
        The document map ``B`` of a rank-r operator ``M = A^T B``.
    dtype : numpy dtype
        Storage dtype of the r-dimensional index (float32 or float16).

    Returns
    -------
    (N, r) array of ``dtype``.
    """
    C = _check_matrix(corpus, "corpus", "(N, p)")
    Bm = _check_matrix(doc_map, "doc_map", "(r, p)")
    if Bm.shape[1] != C.shape[1]:
        raise ValueError(
            f"doc_map: shape {Bm.shape} does not match corpus dimension {C.shape[1]} "
            f"(expected (r, {C.shape[1]}))"
        )
    _check_finite_rows(Bm, "doc_map")
    BT = np.ascontiguousarray(Bm.T, dtype=np.float32)
    out = np.empty((C.shape[0], Bm.shape[0]), dtype=dtype)
    for d0 in range(0, C.shape[0], block_size):
        blk = np.asarray(C[d0 : d0 + block_size], dtype=np.float32)
        out[d0 : d0 + block_size] = blk @ BT
    return out


class AdapterIndex:
    """An exact index for a rank-r adapter, of either form, built once over the corpus.

    * ``form="projection"`` (``M = A^T B``): documents are stored once as ``Y @ B.T`` (N, r),
      queries searched as ``X @ A.T``; ``(A x) . (B y) = x^T M y``, at r/p of the cost.
    * ``form="augmented"`` (``M = I + A^T B``): documents as ``[Y, Y @ B.T]`` (N, p + r),
      queries as ``[X, X @ A.T]``; ``x . y + (A x) . (B y) = x^T (I + A^T B) y``.  The frozen
      embeddings are the first p columns, so no document is re-encoded.

    The same maps score differently in the two forms, so ``form`` must be given (an
    augmented adapter's maps searched as a projection rank nearly at random).  For a
    shared map pass ``doc_map=None`` (``B = A``).  :meth:`asymgeo.adapters.Adapter.index`
    builds one from a fitted adapter.

    Parameters
    ----------
    corpus : (N, p) array
    query_map : (r, p) array  -- ``A``
    doc_map : (r, p) array, optional  -- ``B`` (defaults to ``A``)
    form : ``"projection"`` or ``"augmented"`` (required)
    dtype : storage dtype of the transformed documents (float32 or float16)
    memory : ``(MemoryTable, threshold, weight)`` of a document memory
        (:mod:`asymgeo.retrieval.memory`), optional: :meth:`search` then adds each remembered
        document's gated boost, exactly (the transformed documents are the same; only the
        remembered documents are rescored).
    """

    def __init__(self, corpus: Any, query_map: Any, doc_map: Any = None, *, form: str | None = None,
                 dtype: Any = np.float32, memory: Any = None):
        if form not in ("projection", "augmented"):
            raise ValueError(f"form: expected 'projection' (M = A^T B) or 'augmented' (M = I + A^T B), "
                             f"got {form!r}; the same maps score differently in the two, so the form must be given "
                             "(or build the index with Adapter.index(corpus))")
        A = _check_matrix(query_map, "query_map", "(r, p)")
        Bm = A if doc_map is None else _check_matrix(doc_map, "doc_map", "(r, p)")
        if Bm.shape[0] != A.shape[0]:
            raise ValueError(
                f"doc_map: rank {Bm.shape[0]} does not match query_map rank {A.shape[0]}"
            )
        _check_finite_rows(A, "query_map")
        self.form = form
        self.memory = memory
        self.query_map = np.asarray(A, dtype=np.float64)
        self.doc_map = np.asarray(Bm, dtype=np.float64)
        low = transform_index(corpus, Bm, dtype=dtype)
        if form == "augmented":
            Y = _check_matrix(corpus, "corpus", "(N, p)")
            self.documents = np.concatenate([np.asarray(Y, dtype=low.dtype), low], axis=1)
        else:
            self.documents = low

    @property
    def rank(self) -> int:
        return int(self.query_map.shape[0])

    def __len__(self) -> int:
        return int(self.documents.shape[0])

    def transform_queries(self, queries: Any) -> np.ndarray:
        """(n, p) queries -> ``X @ A.T`` (n, r), or ``[X, X @ A.T]`` (n, p + r) when augmented."""
        Q = _check_matrix(queries, "queries", "(n, p)")
        if Q.shape[1] != self.query_map.shape[1]:
            raise ValueError(
                f"queries: dimension {Q.shape[1]} does not match query_map shape "
                f"{self.query_map.shape}"
            )
        _check_finite_rows(Q, "queries")
        Q64 = np.asarray(Q, dtype=np.float64)
        low = Q64 @ self.query_map.T
        return (np.concatenate([Q64, low], axis=1) if self.form == "augmented" else low).astype(np.float32)

    def search(self, queries: Any, k: int, **kwargs: Any) -> SearchResult:
        """Exact top-k under ``x^T M y`` (``M = A^T B``, or ``I + A^T B`` when augmented).

        Keyword arguments go to :func:`exact_search`.  With a ``memory``, remembered documents
        get their gated boost (:func:`asymgeo.retrieval.memory.memory_rerank`).
        """
        Qt = self.transform_queries(queries)
        if self.memory is None:
            return exact_search(Qt, self.documents, k, **kwargs)
        table, threshold, weight = self.memory
        k = min(int(k), len(self))
        base = exact_search(Qt, self.documents, min(len(self), k + TIE_DEPTH), **kwargs)
        rem = Qt @ np.asarray(self.documents[table.documents], dtype=np.float32).T
        cands = MemoryCandidates(np.asarray(base.scores, dtype=np.float32), np.asarray(base.indices, dtype=np.int64),
                                 rem)
        Q = _check_matrix(queries, "queries", "(n, p)")
        s, i = memory_rerank(cands, table, memory_boosts(Q, table, threshold, weight), k)
        return SearchResult(s, i, base.backend)


#: extra depth :func:`search_trec_order` first searches beyond ``k`` (doubled until the tie group at the cut ends)
TIE_MARGIN = 16


def search_trec_order(queries: Any, corpus: Any, k: int, corpus_ids: Sequence[str], *, operator: Any = None,
                      backend: str = "auto") -> SearchResult:
    """Exact top-``k`` with exactly equal scores ordered as trec_eval orders them (document id descending).

    :func:`exact_search` breaks ties by lower corpus row; trec_eval (and pytrec_eval, MTEB) by
    document id, so a tie group cut at rank ``k`` keeps different documents.  This searches
    ``k + TIE_MARGIN`` deep, doubles the depth until the group tying with rank ``k`` ends
    inside it, reorders each row with :func:`asymgeo.retrieval.metrics.order_ties_by_id` and
    cuts at ``k``: every figure asymgeo prints uses this one order.
    """
    from .metrics import order_ties_by_id

    n_docs = int(corpus.shape[0])
    k = min(int(k), n_docs)
    depth = min(n_docs, k + TIE_MARGIN)
    while True:
        res = exact_search(queries, corpus, depth, operator=operator, backend=backend, progress=None)
        if depth >= n_docs or not np.any(res.scores[:, k - 1] == res.scores[:, depth - 1]):
            break
        depth = min(n_docs, 2 * depth)
    indices = order_ties_by_id(res.scores, res.indices, corpus_ids)[:, :k]
    return SearchResult(res.scores[:, :k], np.ascontiguousarray(indices), res.backend)


def memory_candidates(queries: Any, corpus: Any, k: int, memory: MemoryTable, *, operator: Any = None,
                      corpus_ids: Sequence[str] | None = None, backend: str = "auto") -> MemoryCandidates:
    """The map's top ``k`` (trec_eval's tie order with ``corpus_ids``) and its scores of the remembered documents."""
    Q = np.asarray(queries, dtype=np.float32)
    n_docs = int(corpus.shape[0])
    k = min(int(k), n_docs)
    if memory.n_documents and int(memory.documents.max()) >= n_docs:
        raise ValueError(f"memory: corpus row {int(memory.documents.max())} is outside a corpus of {n_docs} documents")
    depth = min(n_docs, k + TIE_DEPTH)
    if corpus_ids is not None:
        base = search_trec_order(Q, corpus, depth, corpus_ids, operator=operator, backend=backend)
    else:
        base = exact_search(Q, corpus, depth, operator=operator, backend=backend, progress=None)
    Qm = Q if operator is None else Q @ np.asarray(operator, dtype=np.float32)
    Yr = np.asarray(corpus[memory.documents], dtype=np.float32).reshape(memory.n_documents, Q.shape[1])
    return MemoryCandidates(np.asarray(base.scores, dtype=np.float32), np.asarray(base.indices, dtype=np.int64),
                            Qm @ Yr.T)


def memory_search(queries: Any, corpus: Any, k: int, *, memory: MemoryTable, threshold: float, weight: float,
                  operator: Any = None, corpus_ids: Sequence[str] | None = None,
                  backend: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` under ``x^T M y + b_d(x)`` (module docstring); returns ``(scores, indices)``.

    The map's own search runs once (:func:`~asymgeo.retrieval.search.search_trec_order` with
    ``corpus_ids``, else :func:`~asymgeo.retrieval.search.exact_search`), ``TIE_DEPTH``
    deeper than ``k``; the remembered documents are rescored exactly and merged
    (:func:`memory_rerank`).  Ties: document id descending with ``corpus_ids`` (trec_eval's
    order), else lower corpus row.
    """
    cands = memory_candidates(queries, corpus, k, memory, operator=operator, corpus_ids=corpus_ids, backend=backend)
    return memory_rerank(cands, memory, memory_boosts(queries, memory, threshold, weight), k, corpus_ids=corpus_ids)
