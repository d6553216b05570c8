"""Relevance triples and frozen hard negatives (Appendix F).

For each query of a split: ``X`` is its embedding, ``Y_pos`` the embedding of its first
labelled positive (file order in qrels, grade >= ``min_grade``) and ``Y_neg`` the
embedding of the highest-ranked *unlabelled* document under the frozen encoder, found by
exact full-corpus inner-product search (or, on request, by an approximate FAISS index:
``mining="ivf"`` / ``"hnsw"``, see :func:`mine_hard_negatives`; for mining only, never for
reported metrics).  "Unlabelled" means absent from every qrels row
of that query (any grade, any split); with ``ignore_identical_ids`` the document whose id
equals the query id is excluded as well.  The ``k`` best unlabelled documents are the
query's frozen hard negatives for adapter training (the first of them is ``Y_neg``).
Hard negatives the dataset gives (``negatives.tsv``, written from a user's
``(query, positive, negative)`` pairs: :meth:`~asymgeo.data.BeirDataset.given_negatives`) come
first, in their order (at most ``k``, a labelled document of the query left out), and the mined
ones fill the remaining columns; ``given_negatives=False`` mines all ``k``.

Mined negatives are cached (see :func:`load_triples`, ``triples_cache``): in the folder
given (``triples_cache=DIR``, the CLI's ``--triples-dir``), else in ``$ASYMGEO_TRIPLES_DIR``
when it is set, else beside the embeddings in ``<cache>/triples/<key>.npz``, or, when that
folder is read-only (no write permission bits, as the shared caches), in
``~/.cache/asymgeo/triples``.  Files already cached beside the embeddings are still read
when the variable is set; new ones are written only where the user pointed.  The key hashes the embedding cache's identity (the bytes of
its ``meta.json``, ``corpus_ids.txt`` and ``query_ids.txt``) and the mining settings (the
queries, their excluded documents, ``k``, ``min_grade``, ``ignore_identical_ids``, and for
approximate mining its index settings and FAISS version); a file
is written atomically, and one that is unreadable or does not match is ignored and
rebuilt.  Any failure to cache only costs the search again: results are the same.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import atomic_path
from .._validation import check_int
from ..retrieval.approximate import APPROXIMATE_KINDS, ApproximateIndex, approximate_settings, recall_at_k
from ..retrieval.search import SearchResult, exact_search
from .beir import BeirDataset, load_beir, warn_faults
from .cache import EmbeddingCache, load_embeddings, verify_cache
from .encoders import EncoderSpec
from .splits import DEFAULT_SPLIT_SEED, adaptation_split

__all__ = ["Triples", "load_triples", "mine_hard_negatives", "mining_recall", "ADAPTATION_SPLITS", "MINING_INDEXES"]

ADAPTATION_SPLITS = ("train", "validation", "test")

logger = logging.getLogger(__name__)

#: Version of the triple-cache file layout (part of the key).
_TRIPLE_CACHE_FORMAT = 1

#: Ways of mining hard negatives: exact search, or an approximate FAISS index.
MINING_INDEXES = ("exact", *APPROXIMATE_KINDS)

#: Extra results asked of an approximate index beyond ``k + max |exclude|``, so that documents
#: tying with the last kept one are ordered by lower row as exact mining orders them.
_TIE_MARGIN = 8

#: ``mining_options`` keys of :func:`load_triples`, per index.
_MINING_OPTIONS = {"exact": (), "ivf": ("nlist", "nprobe", "seed"), "hnsw": ("ef_search", "seed")}


def _drop_excluded(
    top_s: np.ndarray, top_i: np.ndarray, exclude: Sequence[Collection[int]], k: int
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """The first ``k`` results of each row not in ``exclude[i]`` (missing results, row -1,
    skipped), and the ``(query, found)`` pairs of rows left with fewer than ``k``."""
    n = top_i.shape[0]
    rows = np.empty((n, k), dtype=np.int64)
    scores = np.empty((n, k), dtype=np.float32)
    short: list[tuple[int, int]] = []
    for i in range(n):
        ex = exclude[i]
        keep = [j for j in range(top_i.shape[1]) if int(top_i[i, j]) >= 0 and int(top_i[i, j]) not in ex][:k]
        if len(keep) < k:
            short.append((i, len(keep)))
            keep = keep + [keep[-1] if keep else 0] * (k - len(keep))  # filler; the caller raises
        rows[i] = top_i[i, keep]
        scores[i] = top_s[i, keep]
    return rows, scores, short


def _approximate_index(
    corpus: np.ndarray,
    index: str | ApproximateIndex,
    nlist: int | None,
    nprobe: int | None,
    ef_search: int | None,
    seed: int,
) -> ApproximateIndex:
    """The index to mine with: ``index`` itself when already built (then it must index a
    corpus of this shape and no options may be given), else a new one of that kind."""
    if isinstance(index, ApproximateIndex):
        given = [name for name, v in (("nlist", nlist), ("nprobe", nprobe), ("ef_search", ef_search)) if v is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: set them on the ApproximateIndex passed as index, not here")
        if (index.n_docs, index.dim) != tuple(corpus.shape):
            raise ValueError(f"index: an ApproximateIndex of {index.n_docs} x {index.dim} documents, "
                             f"but the corpus has shape {corpus.shape}")
        return index
    return ApproximateIndex(corpus, kind=index, nlist=nlist, nprobe=nprobe, ef_search=ef_search, seed=seed)


def _check_index_arg(index: Any, nlist: Any, nprobe: Any, ef_search: Any) -> None:
    if isinstance(index, ApproximateIndex):
        return
    if not isinstance(index, str) or index not in MINING_INDEXES:
        raise ValueError(f"index: expected one of {', '.join(map(repr, MINING_INDEXES))} or an ApproximateIndex, "
                         f"got {index!r}")
    if index == "exact":
        given = [name for name, v in (("nlist", nlist), ("nprobe", nprobe), ("ef_search", ef_search)) if v is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: settings of an approximate index; exact mining (index='exact') "
                             "takes none (pass index='ivf' or 'hnsw')")


def mine_hard_negatives(
    queries: np.ndarray,
    corpus: np.ndarray,
    exclude: Sequence[Collection[int]],
    k: int = 8,
    *,
    index: str | ApproximateIndex = "exact",
    nlist: int | None = None,
    nprobe: int | None = None,
    ef_search: int | None = None,
    seed: int = 0,
) -> SearchResult:
    """The ``k`` highest-scoring corpus rows per query that are not in ``exclude[i]``.

    Parameters
    ----------
    queries : (n, p) query embeddings.
    corpus : (N, p) document embeddings (float16 memmaps are upcast block by block).
    exclude : n collections of corpus rows never to return for that query
        (its labelled documents).
    k : negatives per query; needs ``k <= N - max |exclude[i]|``.
    index : ``"exact"`` (default: exact search of the whole corpus), ``"ivf"`` or ``"hnsw"``
        (an :class:`~asymgeo.retrieval.approximate.ApproximateIndex` built over the corpus for
        this call), or an ``ApproximateIndex`` already built over ``corpus``.  Approximate
        mining is for training negatives only, never for reported metrics.
    nlist, nprobe : IVF lists and lists scanned per query (defaults ``~4 sqrt(N)`` and
        ``max(8, nlist // 128)``, see :func:`~asymgeo.retrieval.approximate.ivf_parameters`).
    ef_search : HNSW search breadth (default 64).
    seed : seeds the approximate index (training sample, k-means, HNSW levels).

    Returns
    -------
    SearchResult
        ``scores`` (n, k) float32 inner products and ``indices`` (n, k) int64 corpus rows,
        best first, exact score ties to the lower row; unpacks as
        ``scores, rows = mine_hard_negatives(...)`` like :func:`asymgeo.exact_search`.
        ``backend`` is the exact search's, or ``"faiss-ivf"`` / ``"faiss-hnsw"``.

    Raises
    ------
    ValueError
        Bad shapes or ``k``; an unknown ``index`` or options that do not belong to it; an
        approximate index that returns fewer than ``k`` unlabelled documents for a query
        (IVF scans only ``nprobe`` lists: raise ``nprobe``; HNSW: raise ``ef_search``).

    Notes
    -----
    Approximate mining asks the index for ``min(N, k + max |exclude[i]| + 8)`` documents, so
    that after dropping the labelled ones ``k`` remain, and documents tying with the last
    kept one are ordered by lower row as in exact mining.
    """
    Q = np.asarray(queries)
    if Q.ndim != 2:
        raise ValueError(f"queries: expected a 2-d (n, p) array, got shape {Q.shape}")
    if corpus.ndim != 2 or corpus.shape[1] != Q.shape[1]:
        raise ValueError(f"corpus: expected shape (N, {Q.shape[1]}), got {corpus.shape}")
    if len(exclude) != Q.shape[0]:
        raise ValueError(f"exclude: expected {Q.shape[0]} collections (one per query), got {len(exclude)}")
    k = check_int(k, "k")
    _check_index_arg(index, nlist, nprobe, ef_search)
    n, N = Q.shape[0], corpus.shape[0]
    max_ex = max((len(e) for e in exclude), default=0)
    if k + max_ex > N:
        raise ValueError(f"k: {k} negatives plus up to {max_ex} labelled documents exceed the corpus ({N} documents)")
    if n == 0:  # nothing to search: no index is built
        backend = index.backend if isinstance(index, ApproximateIndex) else (
            "numpy" if index == "exact" else f"faiss-{index}")
        return SearchResult(np.empty((0, k), dtype=np.float32), np.empty((0, k), dtype=np.int64), backend)
    approx: ApproximateIndex | None = None
    if isinstance(index, str) and index == "exact":
        res = exact_search(np.asarray(Q, dtype=np.float32), corpus, k + max_ex, progress=None)
    else:
        approx = _approximate_index(corpus, index, nlist, nprobe, ef_search, seed)
        res = approx.search(Q, min(N, k + max_ex + _TIE_MARGIN))
    rows, scores, short = _drop_excluded(np.asarray(res.scores), np.asarray(res.indices), exclude, k)
    if short:
        i, found = short[0]
        assert approx is not None, "exact search always finds k + max |exclude| documents"
        advice = (f"raise nprobe (now {approx.nprobe} of {approx.nlist} lists)" if approx.kind == "ivf"
                  else f"raise ef_search (now {approx.ef_search})")
        raise ValueError(f"index={approx.kind!r}: {len(short)} of {n} queries got fewer than {k} unlabelled documents "
                         f"from the approximate index (first: query {i}, {found} found); {advice}")
    return SearchResult(scores, rows, res.backend)


def mining_recall(
    queries: np.ndarray,
    corpus: np.ndarray,
    exclude: Sequence[Collection[int]],
    k: int = 8,
    index: str | ApproximateIndex = "ivf",
    *,
    nlist: int | None = None,
    nprobe: int | None = None,
    ef_search: int | None = None,
    sample: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    r"""What approximate mining trades: recall of its negatives against exact mining, and timings.

    Mines the same (seeded) sample of queries with :func:`mine_hard_negatives` both ways and
    compares the two negative sets,

    .. math::

        \mathrm{recall@}k = \frac{1}{m} \sum_{i \in S} \frac{|A_i \cap E_i|}{k},

    ``A_i`` the approximate and ``E_i`` the exact hard negatives of query ``i``, ``S`` the
    sample of ``m`` queries (:func:`~asymgeo.retrieval.approximate.recall_at_k`).

    Parameters
    ----------
    queries, corpus, exclude, k : as :func:`mine_hard_negatives`.
    index : ``"ivf"`` (default), ``"hnsw"`` or an ``ApproximateIndex`` built over ``corpus``.
    nlist, nprobe, ef_search : settings of a new index (see :func:`mine_hard_negatives`).
    sample : number of queries compared (default: all), drawn without replacement with
        ``numpy.random.default_rng(seed)``.
    seed : seeds the sample and the index.

    Returns
    -------
    dict
        ``recall`` (recall@k of the negatives), ``first_agreement`` (share of queries whose
        first negative, ``Y_neg`` of the triples, is the exact one), ``n_queries``, ``k``,
        ``settings`` (the index's, see ``ApproximateIndex.settings``), ``build_seconds``
        (0.0 for an index passed in), ``approx_seconds`` and ``exact_seconds`` (mining the
        sample each way, wall time).  Exact mining of all ``n`` queries takes about
        ``exact_seconds * n / n_queries``; approximate, ``build_seconds`` plus
        ``approx_seconds * n / n_queries``.
    """
    Q = np.asarray(queries)
    if Q.ndim != 2:
        raise ValueError(f"queries: expected a 2-d (n, p) array, got shape {Q.shape}")
    if len(exclude) != Q.shape[0]:
        raise ValueError(f"exclude: expected {Q.shape[0]} collections (one per query), got {len(exclude)}")
    if isinstance(index, str) and index == "exact":
        raise ValueError("index: 'exact' is the reference; compare 'ivf', 'hnsw' or an ApproximateIndex")
    _check_index_arg(index, nlist, nprobe, ef_search)
    n = Q.shape[0]
    m = n if sample is None else min(check_int(sample, "sample"), n)
    if m == n:
        rows = np.arange(n)
    else:
        rows = np.sort(np.random.default_rng(seed).choice(n, size=m, replace=False))
    if rows.size == 0:
        raise ValueError("queries: no query to compare")
    Qs = np.asarray(Q[rows], dtype=np.float32)
    ex = [exclude[int(i)] for i in rows]
    t0 = time.perf_counter()
    approx = _approximate_index(corpus, index, nlist, nprobe, ef_search, seed)
    build = 0.0 if approx is index else time.perf_counter() - t0
    t0 = time.perf_counter()
    got = mine_hard_negatives(Qs, corpus, ex, k, index=approx)
    t_approx = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = mine_hard_negatives(Qs, corpus, ex, k)
    t_exact = time.perf_counter() - t0
    return {
        "recall": recall_at_k(got, ref),
        "first_agreement": float(np.mean(got.indices[:, 0] == ref.indices[:, 0])),
        "n_queries": int(rows.size),
        "k": int(k),
        "settings": approx.settings(),
        "build_seconds": float(build),
        "approx_seconds": float(t_approx),
        "exact_seconds": float(t_exact),
    }


# --------------------------------------------------------------------------- triple cache
_IDENTITY_FILES = ("meta.json", "corpus_ids.txt", "query_ids.txt")
_ARRAY_FILES = ("corpus.npy", "queries.npy")


def _user_triples_dir() -> Path:
    """``$ASYMGEO_TRIPLES_DIR``, else ``~/.cache/asymgeo/triples``."""
    env = os.environ.get("ASYMGEO_TRIPLES_DIR")
    return Path(env) if env else Path.home() / ".cache" / "asymgeo" / "triples"


def _writable(folder: Path) -> bool:
    """Whether to write into ``folder``: it exists, the OS allows it, and its permission
    bits are not all read-only (respected even by root: shared caches are marked so)."""
    try:
        mode = folder.stat().st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) and os.access(folder, os.W_OK)


def triples_cache_key(
    cache: EmbeddingCache,
    query_ids: Sequence[str],
    excludes: Sequence[Collection[int]],
    k: int,
    min_grade: int,
    ignore_identical_ids: bool,
    mining: Mapping[str, Any] | None = None,
) -> str | None:
    """Key of mined hard negatives: the cache's identity plus the mining settings.

    SHA-256 over the bytes of ``meta.json``, ``corpus_ids.txt`` and ``query_ids.txt`` of
    the embedding cache (and the size and modification time of its arrays), the query ids,
    the documents excluded per query (from the qrels), ``k``, ``min_grade`` and
    ``ignore_identical_ids``.  None when the cache has no such files (nothing to key on).

    ``mining`` : the settings of an approximate index (as
    :func:`~asymgeo.retrieval.approximate.approximate_settings` returns them, defaults filled
    in); they enter the key, so approximate and exact negatives never share a file.  None or
    ``{"index": "exact"}``: exact mining, whose key is the one of releases before approximate
    mining existed (their caches stay valid).
    """
    ident: dict[str, Any] = {}
    try:
        for name in _IDENTITY_FILES:
            ident[name] = hashlib.sha256((cache.path / name).read_bytes()).hexdigest()
        for name in _ARRAY_FILES:
            st_ = (cache.path / name).stat()
            ident[name] = [st_.st_size, st_.st_mtime_ns]
    except OSError:
        return None
    settings = {
        "format": _TRIPLE_CACHE_FORMAT,
        "k": int(k),
        "min_grade": int(min_grade),
        "ignore_identical_ids": bool(ignore_identical_ids),
        "query_ids": list(query_ids),
        "exclude": [sorted(int(r) for r in e) for e in excludes],
        "corpus_shape": list(cache.corpus.shape),
    }
    if mining is not None and mining.get("index", "exact") != "exact":
        settings["mining"] = {str(name): value for name, value in mining.items()}
    blob = json.dumps({"cache": ident, "settings": settings}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def _read_negatives(
    path: Path, key: str, excludes: Sequence[Collection[int]], k: int, n_docs: int
) -> SearchResult | None:
    """The cached negatives in ``path`` if the file is intact and matches ``key``, else None."""
    import zipfile

    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"][()]))
            rows = np.asarray(z["rows"])
            scores = np.asarray(z["scores"])
    except (FileNotFoundError, NotADirectoryError):  # no file there (a folder under a file holds none)
        return None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        logger.warning("%s: unreadable triple cache, rebuilding it (%s)", path, exc)
        return None
    n = len(excludes)
    ok = (
        isinstance(meta, dict) and meta.get("key") == key
        and rows.shape == (n, k) and scores.shape == (n, k)
        and rows.dtype == np.int64 and scores.dtype == np.float32
        and bool(np.isfinite(scores).all())
        and (n == 0 or (int(rows.min()) >= 0 and int(rows.max()) < n_docs))
        and not any(int(r) in ex for row, ex in zip(rows, excludes, strict=True) for r in row)
        and bool(np.all(scores[:, :-1] >= scores[:, 1:]))
    )
    if not ok:
        logger.warning("%s: triple cache does not match its key or is damaged; rebuilding it", path)
        return None
    return SearchResult(scores, rows, str(meta.get("backend", "numpy")))


def _write_negatives(folders: Sequence[Path], name: str, key: str, res: SearchResult,
                     chosen: str | None = None) -> Path | None:
    """Write atomically into the first folder that takes it; None if none does.

    ``chosen`` names where a single folder came from (``"ASYMGEO_TRIPLES_DIR"``, ``"triples_cache"``):
    the user asked for it, so a failure to write there is a warning, and no other folder is tried."""
    meta = json.dumps({"key": key, "backend": res.backend, "format": _TRIPLE_CACHE_FORMAT})
    for folder in folders:
        why = "not writable"
        try:
            if not folder.exists():
                ancestor = folder.parent
                while not ancestor.exists() and ancestor != ancestor.parent:
                    ancestor = ancestor.parent
                if not _writable(ancestor) or not ancestor.is_dir():  # never create folders inside a read-only one
                    raise OSError(f"{ancestor} is not a writable folder")
                folder.mkdir(parents=True, exist_ok=True)
            if not _writable(folder):
                raise OSError("not a writable folder")
            with atomic_path(folder / name) as tmp, open(tmp, "wb") as fh:
                np.savez(fh, rows=res.indices, scores=res.scores, meta=np.array(meta))
            return folder / name
        except OSError as exc:
            why = exc.strerror or str(exc)
            logger.debug("%s: cannot write the triple cache there (%s)", folder, why)
        if chosen is not None:
            logger.warning("%s (%s): cannot write the mined hard negatives there (%s); they were mined but not "
                           "cached", folder, chosen, why)
    return None


def _triple_folders(cache: EmbeddingCache, triples_cache: bool | str | os.PathLike) -> tuple[
        list[Path], list[Path], str | None]:
    """Folders read for a cached file, folders written (first that takes it), and what chose them:
    a ``triples_cache`` folder, else ``$ASYMGEO_TRIPLES_DIR``, else beside the embeddings, falling
    back to ``~/.cache/asymgeo/triples`` when that folder is read-only."""
    beside = cache.path / "triples"
    if not isinstance(triples_cache, bool):  # (False never gets here: nothing is cached then)
        chosen = Path(triples_cache).expanduser()
        return [chosen], [chosen], "triples_cache"
    env = os.environ.get("ASYMGEO_TRIPLES_DIR")
    if env:
        chosen = Path(env).expanduser()
        return [chosen, beside], [chosen], "ASYMGEO_TRIPLES_DIR"
    folders = [beside, _user_triples_dir()]
    return folders, folders, None


def _mining_settings(mining: Mapping[str, Any], n_docs: int) -> dict[str, Any] | None:
    """The key-ready settings of ``mine_hard_negatives(**mining)``; None for exact mining."""
    kind = mining.get("index", "exact")
    if kind == "exact":
        return None
    return approximate_settings(kind, n_docs, nlist=mining.get("nlist"), nprobe=mining.get("nprobe"),
                                ef_search=mining.get("ef_search"), seed=mining.get("seed", 0))


def _cached_hard_negatives(
    cache: EmbeddingCache,
    X: np.ndarray,
    query_ids: Sequence[str],
    excludes: Sequence[Collection[int]],
    k: int,
    min_grade: int,
    ignore_identical_ids: bool,
    triples_cache: bool | str | os.PathLike,
    mining: Mapping[str, Any] | None = None,
) -> SearchResult:
    """:func:`mine_hard_negatives` (with keyword arguments ``mining``, e.g. ``{"index": "ivf",
    "nprobe": 64}``), read from / written to the triple cache when possible."""
    opts = dict(mining or {})

    def mine() -> SearchResult:
        return mine_hard_negatives(X, cache.corpus, excludes, k, **opts)

    if triples_cache is False:
        return mine()
    settings = _mining_settings(opts, int(cache.corpus.shape[0]))
    key = triples_cache_key(cache, query_ids, excludes, k, min_grade, ignore_identical_ids, settings)
    if key is None:
        return mine()
    read, write, chosen = _triple_folders(cache, triples_cache)
    name = f"{cache.path.parent.name}-{cache.path.name}-{key[:32]}.npz"
    for folder in read:
        hit = _read_negatives(folder / name, key, excludes, k, int(cache.corpus.shape[0]))
        if hit is not None:
            logger.info("%s: hard negatives from the triple cache", folder / name)
            return hit
    res = mine()
    written = _write_negatives(write, name, key, res, chosen)
    if written is not None:  # a notice: the CLI shows it as one "asymgeo CMD: note: ..." line
        logger.info("mined hard negatives cached in %s", written, extra={"notice": True})
    return res


def _check_mining(mining: Any, mining_options: Any) -> dict[str, Any]:
    """``load_triples``' ``mining`` / ``mining_options`` as keyword arguments of
    :func:`mine_hard_negatives` (``{}`` for exact mining), or a clear error."""
    if not isinstance(mining, str) or mining not in MINING_INDEXES:
        raise ValueError(f"mining: expected one of {', '.join(map(repr, MINING_INDEXES))}, got {mining!r}")
    if mining_options is None:
        mining_options = {}
    if not isinstance(mining_options, Mapping):
        raise TypeError(f"mining_options: expected a mapping such as {{'nprobe': 64}}, "
                        f"got {type(mining_options).__name__}")
    allowed = _MINING_OPTIONS[mining]
    unknown = sorted(str(name) for name in mining_options if name not in allowed)
    if unknown:
        if not allowed:
            raise ValueError(f"mining_options: exact mining takes no options, got {', '.join(unknown)} "
                             "(pass mining='ivf' or 'hnsw')")
        raise ValueError(f"mining_options: {', '.join(unknown)} not an option of mining={mining!r} "
                         f"(expected some of {', '.join(allowed)})")
    if mining == "exact":
        return {}
    return {"index": mining, **{str(name): value for name, value in mining_options.items()}}


@dataclass
class Triples:
    """Training triples ``(X, Y_pos, Y_neg)`` with the ids behind them.

    Attributes
    ----------
    X, Y_pos, Y_neg : (n, p) float32 (upcast from the float16 cache), ready for
        :func:`asymgeo.cars_score` and the estimators.
    query_ids, pos_ids, neg_ids : list[str], length n.
    query_rows, pos_rows, neg_rows : (n,) int64 rows in the cache.
    hard_negative_rows : (n, k) int64 corpus rows of the k frozen hard negatives
        (best first; column 0 is ``neg_rows``).
    hard_negative_ids : list of n lists of k document ids.
    skipped : dict of counts of requested queries left out, by reason.
    given_counts : (n,) int64: how many of each query's leading hard negatives the dataset
        gave (``negatives.tsv``); the rest were mined.  ``None`` reads as all zeros.
    """

    X: np.ndarray
    Y_pos: np.ndarray
    Y_neg: np.ndarray
    query_ids: list[str]
    pos_ids: list[str]
    neg_ids: list[str]
    query_rows: np.ndarray
    pos_rows: np.ndarray
    neg_rows: np.ndarray
    hard_negative_rows: np.ndarray
    hard_negative_ids: list[list[str]]
    dataset: str = ""
    encoder: str = ""
    split: str = ""
    skipped: dict[str, int] = field(default_factory=dict)
    given_counts: np.ndarray | None = None
    _corpus: Any = field(default=None, repr=False)

    def __len__(self) -> int:
        return int(self.X.shape[0])

    @property
    def n(self) -> int:
        return len(self)

    @property
    def dim(self) -> int:
        return int(self.X.shape[1])

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(X, Y_pos, Y_neg)``."""
        return self.X, self.Y_pos, self.Y_neg

    def hard_negatives(self) -> np.ndarray:
        """(n, k, p) float32 embeddings of the frozen hard negatives (gathered on demand)."""
        if self._corpus is None:
            raise ValueError("hard_negatives: these triples carry no corpus reference")
        flat = self.hard_negative_rows.reshape(-1)
        uniq, inv = np.unique(flat, return_inverse=True)
        E = np.asarray(self._corpus[uniq], dtype=np.float32).reshape(len(uniq), self.dim)
        return E[inv.reshape(-1)].reshape(*self.hard_negative_rows.shape, self.dim)

    def subset(self, ids: Sequence[str]) -> Triples:
        """Triples of the given query ids, in that order (KeyError on an unknown id)."""
        where = {q: i for i, q in enumerate(self.query_ids)}
        try:
            idx = np.asarray([where[q] for q in ids], dtype=np.int64)
        except KeyError as exc:
            raise KeyError(f"subset: query {exc.args[0]!r} has no triple") from None
        return Triples(
            X=self.X[idx],
            Y_pos=self.Y_pos[idx],
            Y_neg=self.Y_neg[idx],
            query_ids=[self.query_ids[i] for i in idx],
            pos_ids=[self.pos_ids[i] for i in idx],
            neg_ids=[self.neg_ids[i] for i in idx],
            query_rows=self.query_rows[idx],
            pos_rows=self.pos_rows[idx],
            neg_rows=self.neg_rows[idx],
            hard_negative_rows=self.hard_negative_rows[idx],
            hard_negative_ids=[self.hard_negative_ids[i] for i in idx],
            dataset=self.dataset,
            encoder=self.encoder,
            split=self.split,
            skipped=dict(self.skipped),
            given_counts=None if self.given_counts is None else self.given_counts[idx],
            _corpus=self._corpus,
        )


def load_triples(
    dataset: str | os.PathLike | BeirDataset,
    encoder: str | EncoderSpec,
    split: str | Sequence[str] = "train",
    *,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    k: int = 8,
    seed: int = DEFAULT_SPLIT_SEED,
    min_grade: int = 1,
    ignore_identical_ids: bool | None = None,
    cache: EmbeddingCache | None = None,
    triples_cache: bool | str | os.PathLike = True,
    require: bool = False,
    mining: str = "exact",
    mining_options: Mapping[str, Any] | None = None,
    given_negatives: bool = True,
) -> Triples:
    """Relevance triples of one split from the frozen embedding cache.

    Parameters
    ----------
    dataset : name, BEIR folder or :class:`~asymgeo.data.BeirDataset`.
    encoder : encoder name (cache folder), see :func:`~asymgeo.data.get_encoder`.
    split : ``"train"``, ``"validation"`` or ``"test"`` of :func:`~asymgeo.data.adaptation_split`
        (with ``seed``), the name of a qrels file (e.g. ``"dev"``), or an explicit
        sequence of query ids.
    k : frozen hard negatives per query (default 8).
    min_grade : smallest grade that counts as a positive.
    ignore_identical_ids : exclude the document whose id equals the query id from the
        negatives (default: the dataset's own setting).
    cache : an already opened :class:`~asymgeo.data.EmbeddingCache` (skips the lookup).
    triples_cache : where mined hard negatives are cached (module docstring): True (default)
        in ``$ASYMGEO_TRIPLES_DIR`` when it is set, else beside the embeddings, or in
        ``~/.cache/asymgeo/triples`` when that folder is read-only; a folder (it wins over
        both); or False (always mine by exact search).  A new file is announced by an INFO
        record of ``asymgeo.data.triples`` (``extra`` ``notice=True``) naming its path.
    require : raise ``ValueError`` naming the qrels file when the split yields no triple
        (an empty or header-only qrels file), instead of returning empty triples.
    mining : how hard negatives are mined: ``"exact"`` (default, exact full-corpus search) or
        an approximate FAISS index, ``"ivf"`` or ``"hnsw"``, for corpora too large to search
        exactly (see :func:`mine_hard_negatives`; approximate negatives are training data
        only: no reported metric uses an approximate index).  Its settings are part of the
        triple cache's key, so exact and approximate negatives never share a cache file.
    mining_options : settings of the approximate index: ``nlist``, ``nprobe``, ``seed`` for
        ``"ivf"``; ``ef_search``, ``seed`` for ``"hnsw"``; none for ``"exact"``.
    given_negatives : put the dataset's given hard negatives (``negatives.tsv``, module
        docstring) first in ``hard_negative_rows`` (default True); False: all ``k`` mined.

    Returns
    -------
    Triples
        In the split's query order; queries without a positive are skipped and counted
        in ``skipped["no_positive"]``.

    Raises
    ------
    ValueError
        If the cache was not built from this dataset (see :func:`~asymgeo.data.verify_cache`)
        or has degenerate rows (see :func:`~asymgeo.data.validate_embeddings`); an unknown
        ``mining`` or an option it does not take; an approximate index that finds fewer than
        ``k`` unlabelled documents for a query (raise ``nprobe`` / ``ef_search``).
    """
    mining_kw = _check_mining(mining, mining_options)
    ds = load_beir(dataset, data_dir=data_dir)
    warn_faults(ds)
    if cache is not None:
        verify_cache(cache, ds, encoder)
        emb = cache
    else:
        emb = load_embeddings(ds, encoder, cache_dir=cache_dir)
    if isinstance(split, str):
        split_name = split
        if split in ADAPTATION_SPLITS:
            ids = adaptation_split(ds, seed)[split]
        elif split in ds.splits:
            ids = ds.labelled_query_ids(split)
        else:
            raise ValueError(
                f"split {split!r}: expected one of {', '.join(ADAPTATION_SPLITS)} "
                f"or a qrels split of {ds.name} ({', '.join(ds.splits)})"
            )
    else:
        split_name = "custom"
        ids = [str(q) for q in split]
    ident = ds.ignore_identical_ids if ignore_identical_ids is None else bool(ignore_identical_ids)
    labels = ds.all_qrels()
    kept, pos_ids, excludes = [], [], []
    skipped = {"no_positive": 0}
    for q in ids:
        docs = labels.get(q, {})
        pos = next((d for d, g in docs.items() if g >= min_grade), None)
        if pos is None:
            skipped["no_positive"] += 1
            continue
        ex = set(emb.corpus_rows(docs.keys()).tolist())
        if ident and emb.has_corpus_id(q):
            ex.add(int(emb.corpus_rows([q])[0]))
        kept.append(q)
        pos_ids.append(pos)
        excludes.append(ex)
    if not kept and require:
        source = {"train": "train.tsv", "validation": "train.tsv"}.get(split_name, f"{split_name}.tsv")
        if split_name in ADAPTATION_SPLITS and "train" not in ds.splits:
            source = "test.tsv"
        raise ValueError(f"{ds.path / 'qrels' / source}: split {split_name!r} has no usable relevance judgements "
                         f"(no query with a relevant document among {len(ids)} requested)")
    q_rows = emb.query_rows(kept)
    p_rows = emb.corpus_rows(pos_ids)
    X = np.asarray(emb.queries[q_rows], dtype=np.float32)
    hard = _cached_hard_negatives(emb, X, kept, excludes, k, min_grade, ident, triples_cache, mining_kw)
    hard_rows = hard.indices
    given = ds.given_negatives if given_negatives else {}
    counts = np.zeros(len(kept), dtype=np.int64)
    if given:
        hard_rows, counts = _put_given_first(hard_rows, kept, given, excludes, emb, k)
    n_rows = hard_rows[:, 0].copy()
    cids = emb.corpus_ids
    return Triples(
        X=X,
        Y_pos=np.asarray(emb.corpus[p_rows], dtype=np.float32),
        Y_neg=np.asarray(emb.corpus[n_rows], dtype=np.float32),
        query_ids=kept,
        pos_ids=pos_ids,
        neg_ids=[cids[i] for i in n_rows],
        query_rows=q_rows,
        pos_rows=p_rows,
        neg_rows=n_rows,
        hard_negative_rows=hard_rows,
        hard_negative_ids=[[cids[i] for i in row] for row in hard_rows],
        dataset=ds.name,
        encoder=emb.path.name,
        split=split_name,
        skipped={k_: v for k_, v in skipped.items()},
        given_counts=counts,
        _corpus=emb.corpus,
    )


def _put_given_first(hard_rows: np.ndarray, kept: Sequence[str], given: Mapping[str, Sequence[str]],
                     excludes: Sequence[Collection[int]], emb: EmbeddingCache, k: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Each query's given negatives (not labelled for it; at most ``k``) in its first columns,
    then its mined ones not among them: ``(rows, given counts)``."""
    out = np.array(hard_rows, dtype=np.int64, copy=True)
    counts = np.zeros(len(kept), dtype=np.int64)
    for i, q in enumerate(kept):
        docs = given.get(q)
        if not docs:
            continue
        first = [r for r in dict.fromkeys(int(j) for j in emb.corpus_rows(docs)) if r not in excludes[i]][:k]
        if not first:
            continue
        rest = [int(r) for r in hard_rows[i] if int(r) not in first]
        out[i] = (first + rest)[:k]
        counts[i] = len(first)
    return out, counts
