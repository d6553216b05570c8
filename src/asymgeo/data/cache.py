"""The float16 embedding cache: memory-mapped reads, atomic writes, resumable encoding.

Layout per (dataset, encoder), ``<cache_dir>/<dataset>/<encoder>/``::

    corpus.npy       (N, p) float16, rows in corpus.jsonl order
    corpus_ids.txt   N lines
    queries.npy      (Q, p) float16, rows in queries.jsonl order
    query_ids.txt    Q lines
    meta.json        model, versions, prefixes, max tokens, normalisation, dtype, command

``meta.json`` is written last (atomically), so a folder with a ``meta.json`` is complete;
every other file is also written to a temporary name and renamed.  Encoding proceeds in
chunks saved as part files under ``.partial/`` with a manifest fingerprinting the inputs;
an interrupted run resumes from the chunks already saved.  The caches in
``../shared/embeddings/<dataset>/<encoder>/`` have this layout and load as they are.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import hashlib
import json
import os
import pickle
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import atomic_path, atomic_write_bytes
from .._ids import IdIndex
from .._runtime import available_cpus, json_default
from .._validation import check_int, mark_finite
from .beir import BeirDataset, load_beir
from .encoders import (
    EncoderSpec,
    TextEncoder,
    check_device,
    get_encoder,
    l2_normalize,
    load_encoder,
)
from .paths import cache_root

__all__ = [
    "EmbeddingCache",
    "cache_root",
    "cache_path",
    "load_embeddings",
    "write_embeddings",
    "encode_dataset",
    "cache_fingerprint",
    "verify_cache",
    "validate_embeddings",
    "CACHE_FORMAT",
]

CACHE_FORMAT = "asymgeo-embeddings/1"
_FILES = ("corpus.npy", "corpus_ids.txt", "queries.npy", "query_ids.txt", "meta.json")


def _dataset_name(dataset: str | os.PathLike | BeirDataset) -> str:
    if isinstance(dataset, BeirDataset):
        return dataset.name
    p = Path(dataset)
    return p.name if p.is_dir() else str(dataset)


def cache_path(
    dataset: str | os.PathLike | BeirDataset, encoder: str | EncoderSpec, cache_dir: str | os.PathLike | None = None
) -> Path:
    """``<cache_dir>/<dataset name>/<encoder name>``."""
    return cache_root(cache_dir) / _dataset_name(dataset) / get_encoder(encoder).name


# --------------------------------------------------------------------------- reading
def _read_ids(path: Path, what: str = "id") -> IdIndex:
    """The ids of ``path``, one per line, as a compact :class:`~asymgeo._ids.IdIndex`
    (``ValueError`` naming the line of an empty or repeated id)."""
    return IdIndex.from_file(path, what=what)


@dataclass
class EmbeddingCache:
    """Frozen embeddings of one dataset under one encoder.

    Attributes
    ----------
    path : the cache folder.
    corpus : (N, p) float16, memory-mapped, rows in ``corpus_ids`` order.
    queries : (Q, p) float16, memory-mapped, rows in ``query_ids`` order.
    corpus_ids, query_ids : the ids in row order, a read-only ``Sequence[str]``
        (:class:`asymgeo._ids.IdIndex`: UTF-8 bytes in one numpy array, about ``w + 8`` bytes
        per id for ids of at most ``w`` bytes, instead of a Python string and a dict entry
        each: 8.8M document ids fit in well under 200 MB).  Lists given here are converted.
    meta : dict read from ``meta.json``.
    """

    path: Path
    corpus: np.ndarray
    queries: np.ndarray
    corpus_ids: Sequence[str]
    query_ids: Sequence[str]
    meta: dict[str, Any]

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if not isinstance(self.corpus_ids, IdIndex):
            self.corpus_ids = IdIndex(self.corpus_ids, what="corpus", source=self.path / "corpus_ids.txt")
        if not isinstance(self.query_ids, IdIndex):
            self.query_ids = IdIndex(self.query_ids, what="query", source=self.path / "query_ids.txt")
        self._corpus_index = self.corpus_ids
        self._query_index = self.query_ids

    @property
    def dim(self) -> int:
        return int(self.corpus.shape[1])

    def _rows(self, ids: Iterable[str], index: IdIndex, what: str) -> np.ndarray:
        if isinstance(ids, str):
            raise TypeError(f"{what} ids: expected a sequence of ids, got a single string {ids!r}")
        ids = list(ids)
        for s in ids:
            if not isinstance(s, str):
                raise KeyError(f"{self.path}: no {what} with id {s!r} in the cache")
        out = index.lookup(ids)
        if out.size and out.min() < 0:
            raise KeyError(f"{self.path}: no {what} with id {ids[int(np.flatnonzero(out < 0)[0])]!r} in the cache")
        return out

    def corpus_rows(self, ids: Iterable[str]) -> np.ndarray:
        """Row numbers of the given document ids (KeyError naming the first unknown id)."""
        return self._rows(ids, self._corpus_index, "document")

    def query_rows(self, ids: Iterable[str]) -> np.ndarray:
        """Row numbers of the given query ids."""
        return self._rows(ids, self._query_index, "query")

    def has_corpus_id(self, doc_id: str) -> bool:
        return isinstance(doc_id, str) and doc_id in self._corpus_index


def _load_npy(path: Path, mmap: bool) -> np.ndarray:
    try:
        arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        why = "empty or truncated file" if isinstance(exc, EOFError) else (str(exc) or type(exc).__name__)
        raise ValueError(f"{path}: not a readable .npy array ({why})") from None
    if arr.ndim != 2:
        raise ValueError(f"{path}: expected a 2-d (rows, p) array, got shape {arr.shape}")
    return arr


def load_embeddings(
    dataset: str | os.PathLike | BeirDataset,
    encoder: str | EncoderSpec,
    *,
    cache_dir: str | os.PathLike | None = None,
    mmap: bool = True,
    verify: bool = True,
    validate: bool = True,
) -> EmbeddingCache:
    """Open the cache ``<cache_dir>/<dataset>/<encoder>/`` (memory-mapped by default).

    Parameters
    ----------
    dataset : dataset name, BEIR folder or :class:`~asymgeo.data.BeirDataset` (its name is used).
        With a :class:`~asymgeo.data.BeirDataset` the cache is verified
        against it (see :func:`verify_cache`).
    encoder : registry name, alias or model id (see :func:`~asymgeo.data.get_encoder`).
    cache_dir : default ``$ASYMGEO_CACHE_DIR``, then ``~/.cache/asymgeo/embeddings``.
    verify : check the cache belongs to ``dataset`` (when a dataset, not a bare name, is given).
    validate : check every embedding row (see :func:`validate_embeddings`).

    Raises
    ------
    FileNotFoundError
        No cache there, or an incomplete one (an interrupted encoding; rerun to resume).
    ValueError
        Files disagree (row counts vs ids, dimensions, dtype), the cache was built from
        other data than ``dataset``, or a row is zero, non-finite or not normalised.
    """
    path = cache_path(dataset, encoder, cache_dir)
    _check_cache_dirs(path)
    if not path.is_dir():
        previous = sorted(path.parent.glob(f".{path.name}.old-*")) if path.parent.is_dir() else []
        if previous:  # a replacement was interrupted between its two renames
            raise FileNotFoundError(
                f"{path}: no embedding cache, but the previous one is intact in {previous[-1]} "
                f"(an interrupted replacement: rename it back to {path.name}, or rerun `asymgeo embed`)"
            )
        partial = _build_dir(path)
        if partial.is_dir():
            raise FileNotFoundError(
                f"{path}: no complete embedding cache (an interrupted encoding is in {partial}: "
                f"rerun `asymgeo embed {_dataset_name(dataset)} --encoder {get_encoder(encoder).name}` to resume)"
            )
        raise FileNotFoundError(
            f"{path}: no embedding cache (run `asymgeo embed {_dataset_name(dataset)} "
            f"--encoder {get_encoder(encoder).name}` or pass --cache-dir)"
        )
    if not (path / "meta.json").is_file():
        hint = " (an interrupted encoding: rerun `asymgeo embed` to resume)" if (path / ".partial").is_dir() else ""
        raise FileNotFoundError(f"{path / 'meta.json'}: missing, the cache is incomplete{hint}")
    cache = _open_folder(path, mmap)
    if verify and isinstance(dataset, BeirDataset):
        verify_cache(cache, dataset, encoder)
    if validate:
        validate_embeddings(cache)
    return cache


def _check_meta_dimension(path: Path, meta: dict, corpus: np.ndarray) -> None:
    dim = meta.get("dimension")
    if isinstance(dim, int) and not isinstance(dim, bool) and corpus.shape[1] != dim:
        raise ValueError(f"{path / 'corpus.npy'}: {corpus.shape[1]} columns but meta.json says dimension {dim} "
                         "(a damaged or mixed-up cache); rebuild it with asymgeo embed --overwrite")


def _open_folder(path: Path, mmap: bool) -> EmbeddingCache:
    """Read a cache folder's files and check they agree with each other."""
    for f in _FILES:
        if not (path / f).is_file():
            raise FileNotFoundError(f"{path / f}: missing from the embedding cache")
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path / 'meta.json'}, line {exc.lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{path / 'meta.json'}: expected a JSON object")
    corpus = _load_npy(path / "corpus.npy", mmap)
    queries = _load_npy(path / "queries.npy", mmap)
    corpus_ids = _read_ids(path / "corpus_ids.txt", "corpus")
    query_ids = _read_ids(path / "query_ids.txt", "query")
    if corpus.shape[0] != len(corpus_ids):
        raise ValueError(f"{path / 'corpus.npy'}: {corpus.shape[0]} rows but corpus_ids.txt has {len(corpus_ids)} ids")
    if queries.shape[0] != len(query_ids):
        raise ValueError(f"{path / 'queries.npy'}: {queries.shape[0]} rows but query_ids.txt has {len(query_ids)} ids")
    if corpus.shape[1] != queries.shape[1]:
        raise ValueError(f"{path}: corpus dimension {corpus.shape[1]} != query dimension {queries.shape[1]}")
    if not np.issubdtype(corpus.dtype, np.floating) or not np.issubdtype(queries.dtype, np.floating):
        raise ValueError(f"{path}: expected floating arrays, got {corpus.dtype} / {queries.dtype}")
    _check_meta_dimension(path, meta, corpus)
    shapes = meta.get("shapes")
    if isinstance(shapes, dict):
        for key, arr in (("corpus", corpus), ("queries", queries)):
            if key in shapes and list(shapes[key]) != list(arr.shape):
                raise ValueError(
                    f"{path / 'meta.json'}: shapes.{key} = {shapes[key]} but {key}.npy has shape {list(arr.shape)}"
                )
    return EmbeddingCache(
        path=path, corpus=corpus, queries=queries, corpus_ids=corpus_ids, query_ids=query_ids, meta=meta
    )


def _check_cache_dirs(path: Path) -> None:
    """Every existing component of ``path`` must be a folder (a file there is named)."""
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            raise NotADirectoryError(f"{p}: expected a folder for embedding caches, found a file")


def _rebuild_hint(cache: EmbeddingCache, dataset: BeirDataset, encoder: str | EncoderSpec | None) -> str:
    name = get_encoder(encoder).name if encoder is not None else cache.path.name
    return f"rebuild it with `asymgeo embed {dataset.path} --encoder {name} --overwrite`"


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cache_fingerprint(dataset: BeirDataset, encoder: str | EncoderSpec) -> dict[str, Any]:
    """What a cache of ``dataset`` under ``encoder`` is built from (recorded in ``meta.json``).

    ``{"dataset": dataset.fingerprint(), "encoder": spec.describe()}``: dataset sizes and
    digests of ids and texts, the encoder's name, model and settings (prefixes, maximum
    tokens, normalisation, dtype, weights package).
    """
    return {"dataset": dataset.fingerprint(), "encoder": get_encoder(encoder).describe()}


def _check_encoder_name(cache: EmbeddingCache, dataset: BeirDataset, encoder: str | EncoderSpec) -> None:
    """The embeddings of one encoder never stand in for another's: the encoder the cache records
    (``meta["encoder"]``, else its folder name) must be ``encoder`` or one of its aliases."""
    want = get_encoder(encoder).name
    recorded = str(cache.meta.get("encoder") or cache.path.name)
    if recorded != want and get_encoder(recorded).name != want:
        raise ValueError(f"{cache.path}: embeddings of encoder {recorded!r}, not {want!r}; pass the {want} "
                         f"cache (asymgeo embed {dataset.name} --encoder {want})")


def verify_cache(cache: EmbeddingCache, dataset: BeirDataset, encoder: str | EncoderSpec | None = None) -> None:
    """Refuse a cache that was not built from ``dataset`` (and ``encoder``) as they are now.

    A cache written by this version carries ``meta["fingerprint"]``: its dataset digests
    (ids and texts of corpus and queries), the encoder settings and the SHA-256 of its
    two id files; each is compared with the dataset, the encoder and the files on disk.
    An older cache without a fingerprint (such as ``../shared/embeddings``) is checked by
    its ids: ``corpus_ids.txt`` and ``query_ids.txt`` must list the dataset's ids in file
    order, which catches a cache of another corpus version or with reordered rows.

    Raises
    ------
    ValueError
        Naming the first difference and how to rebuild the cache.
    """
    hint = _rebuild_hint(cache, dataset, encoder)
    if encoder is not None:
        _check_encoder_name(cache, dataset, encoder)
    fp = cache.meta.get("fingerprint")
    if isinstance(fp, dict):
        files = fp.get("files", {})
        for fname in ("corpus_ids.txt", "query_ids.txt"):
            want = files.get(fname) if isinstance(files, dict) else None
            if want is not None and file_sha256(cache.path / fname) != want:
                raise ValueError(
                    f"{cache.path / fname}: changed since the cache was written (checksum differs); {hint}"
                )
        now = dataset.fingerprint()
        was = fp.get("dataset", {})
        for key, what in (
            ("n_corpus", "number of documents"),
            ("n_queries", "number of queries"),
            ("corpus_ids_sha256", "document ids or their order"),
            ("query_ids_sha256", "query ids or their order"),
            ("corpus_sha256", "document texts"),
            ("queries_sha256", "query texts"),
        ):
            if was.get(key) != now[key]:
                extra = f" ({was.get(key)} in the cache, {now[key]} now)" if key.startswith("n_") else ""
                raise ValueError(
                    f"{cache.path}: stale cache, the {what} of {dataset.path} changed since it was encoded"
                    f"{extra}; {hint}"
                )
        if encoder is not None and isinstance(fp.get("encoder"), dict):
            spec = get_encoder(encoder).describe()
            for key, value in fp["encoder"].items():
                if spec.get(key) != value:
                    raise ValueError(
                        f"{cache.path}: encoded with encoder setting {key} = {value!r}, "
                        f"but {spec['name']} now has {spec.get(key)!r}; {hint}"
                    )
    if cache.corpus_ids != dataset.corpus_ids:
        raise ValueError(_id_mismatch(cache.path / "corpus_ids.txt", cache.corpus_ids, dataset.corpus_ids,
                                      dataset.corpus_file, "documents", hint))
    if cache.query_ids != dataset.query_ids:
        raise ValueError(_id_mismatch(cache.path / "query_ids.txt", cache.query_ids, dataset.query_ids,
                                      dataset.queries_file, "queries", hint))


def _id_mismatch(path: Path, got: Sequence[str], want: Sequence[str], source: Path, what: str, hint: str) -> str:
    if len(got) != len(want):
        return f"{path}: {len(got)} ids but {source} has {len(want)} {what}; the cache is stale, {hint}"
    i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
    return (f"{path}, line {i + 1}: id {got[i]!r} but {source} has {want[i]!r} there "
            f"(rows would be scored as the wrong {what}); {hint}")


#: Largest accepted | ||row|| - 1 | in a cache whose ``meta.json`` says ``normalised``:
#: float16 storage alone moves a unit norm by about 1e-3.
NORM_TOLERANCE = 0.02


def validate_embeddings(cache: EmbeddingCache, *, block_rows: int = 16384) -> None:
    """Check every row of a cache: finite, non-zero, unit norm when ``meta["normalised"]``.

    Read block by block (a memory-mapped corpus is never loaded whole; at p = 768 a block's
    float32 temporaries are about 110 MB).  The check every
    command relies on before scoring: a zero or non-finite vector would score as a
    silent constant, and a row of norm 1000 in a normalised cache would dominate every
    ranking it enters.  A row is bad when it has a NaN or inf, when ``||row|| = 0``, or
    (normalised caches) when ``| ||row|| - 1 | >`` :data:`NORM_TOLERANCE`.

    Raises
    ------
    ValueError
        Naming the file, the first bad row, its id and how many rows are bad.
    """
    normalised = bool(cache.meta.get("normalised", cache.meta.get("normalized", False)))
    whats = {
        1: "non-finite values (NaN or inf)",
        2: "an all-zero vector",
        3: f"norm far from 1 though meta.json says normalised (tolerance {NORM_TOLERANCE})",
    }
    parts = (("queries.npy", cache.queries, cache.query_ids), ("corpus.npy", cache.corpus, cache.corpus_ids))
    for name, arr, ids in parts:
        if arr.shape[0] == 0:
            raise ValueError(f"{cache.path / name}: no rows (rebuild the cache with `asymgeo embed ... --overwrite`)")
        first: tuple[int, int, float] | None = None
        n_bad = 0
        for start in range(0, arr.shape[0], block_rows):
            block = np.asarray(arr[start : start + block_rows], dtype=np.float32)
            finite = np.isfinite(block)
            clean = np.where(finite, block, 0.0)
            norms = np.sqrt(np.einsum("ij,ij->i", clean, clean, dtype=np.float64))
            code = np.zeros(block.shape[0], dtype=np.int8)
            if normalised:
                code[np.abs(norms - 1.0) > NORM_TOLERANCE] = 3
            code[norms == 0] = 2
            code[~finite.all(axis=1)] = 1
            bad = np.flatnonzero(code)
            n_bad += bad.size
            if bad.size and first is None:
                i = int(bad[0])
                first = (start + i, int(code[i]), float(norms[i]))
        if first is not None:
            row, c, norm = first
            shown = f", norm {norm:.4g}" if c == 3 else ""
            raise ValueError(
                f"{cache.path / name}, row {row} (id {ids[row]!r}): {whats[c]}{shown}; {n_bad} bad "
                f"row{'s' if n_bad != 1 else ''} in all; rebuild the cache with `asymgeo embed ... --overwrite`"
            )
        mark_finite(arr)  # a read-only memmap checked here is not scanned again by training


# --------------------------------------------------------------------------- writing
def _atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write_bytes(path, data)


def _atomic_save_npy(path: Path, arr: np.ndarray) -> None:
    with atomic_path(path, suffix=".tmp.npy") as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, arr, allow_pickle=False)


def _write_ids(path: Path, ids: Sequence[str]) -> None:
    for s in ids:
        if "\n" in s or "\r" in s:
            raise ValueError(f"{path.name}: id {s!r} contains a line break")
    _atomic_write_bytes(path, ("".join(f"{s}\n" for s in ids)).encode("utf-8"))


def _write_meta(path: Path, meta: dict[str, Any]) -> None:
    _atomic_write_bytes(path / "meta.json", (json.dumps(meta, indent=2, default=json_default) + "\n").encode("utf-8"))




def write_embeddings(
    path: str | os.PathLike,
    corpus: np.ndarray,
    corpus_ids: Sequence[str],
    queries: np.ndarray,
    query_ids: Sequence[str],
    meta: dict[str, Any],
) -> Path:
    """Write a complete cache folder atomically (``meta.json`` last); arrays stored as float16."""
    path = Path(path)
    corpus = np.asarray(corpus)
    queries = np.asarray(queries)
    if corpus.ndim != 2 or corpus.shape[0] != len(corpus_ids):
        raise ValueError(f"corpus: expected shape ({len(corpus_ids)}, p), got {corpus.shape}")
    if queries.ndim != 2 or queries.shape[0] != len(query_ids) or queries.shape[1] != corpus.shape[1]:
        raise ValueError(f"queries: expected shape ({len(query_ids)}, {corpus.shape[1]}), got {queries.shape}")
    _check_cache_dirs(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".write", dir=path.parent))
    try:
        _atomic_save_npy(build / "corpus.npy", corpus.astype(np.float16))
        _write_ids(build / "corpus_ids.txt", list(corpus_ids))
        _atomic_save_npy(build / "queries.npy", queries.astype(np.float16))
        _write_ids(build / "query_ids.txt", list(query_ids))
        meta = dict(meta)
        meta.setdefault("format", CACHE_FORMAT)
        meta["dtype"] = "float16"
        meta["dimension"] = int(corpus.shape[1])
        meta["shapes"] = {"corpus": list(corpus.shape), "queries": list(queries.shape)}
        fp = meta.get("fingerprint")
        if isinstance(fp, dict):
            meta["fingerprint"] = {**fp, "files": _id_file_digests(build)}
        _write_meta(build, meta)
        _replace_dir(build, path)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return path


def _id_file_digests(folder: Path) -> dict[str, str]:
    return {f: file_sha256(folder / f) for f in ("corpus_ids.txt", "query_ids.txt")}


def _replace_dir(new: Path, dest: Path) -> None:
    """Put the complete folder ``new`` at ``dest`` (:func:`asymgeo._atomic.replace_folder`:
    an old ``dest`` is moved aside, then removed only once ``new`` is in place; any failure
    between the renames puts it back)."""
    from .._atomic import replace_folder

    replace_folder(new, dest)


# --------------------------------------------------------------------------- encoding
def _build_dir(path: Path) -> Path:
    """Where a cache is built before it replaces ``path``: ``<encoder>.partial`` beside it."""
    return path.with_name(path.name + ".partial")


def _chunks(items: Iterator[str], size: int) -> Iterator[list[str]]:
    buf: list[str] = []
    for it in items:
        buf.append(it)
        if len(buf) == size:
            yield buf
            buf = []
    if buf:
        yield buf


def _assemble(parts: list[Path], dest: Path, n_rows: int, dim: int) -> None:
    """Concatenate part files into ``dest`` (float16) without holding them all in memory."""
    with atomic_path(dest, suffix=".tmp.npy") as tmp:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=(n_rows, dim))
        row = 0
        for part in parts:
            a = np.load(part, mmap_mode="r")
            out[row : row + a.shape[0]] = a
            row += a.shape[0]
        if row != n_rows:
            raise ValueError(f"{dest}: assembled {row} rows, expected {n_rows}")
        out.flush()
        del out


@dataclass
class _EncodePlan:
    """One encoding job: its inputs, its fingerprint and where its chunks go."""

    ds: BeirDataset
    spec: EncoderSpec
    path: Path
    build: Path
    chunk_size: int
    fingerprint: dict[str, Any]

    @property
    def parts_dir(self) -> Path:
        return self.build / ".partial"

    def kinds(self) -> list[tuple[str, int]]:
        return [("queries", len(self.ds.query_ids)), ("corpus", len(self.ds.corpus_ids))]

    def texts(self, kind: str) -> Iterator[str]:
        ds, spec = self.ds, self.spec
        if kind == "queries":
            return (spec.format_query(ds.queries[q]) for q in ds.query_ids)
        return (spec.format_document(t, x) for _i, t, x in ds.iter_corpus())

    def n_chunks(self, n: int) -> int:
        return (n + self.chunk_size - 1) // self.chunk_size

    def part_file(self, kind: str, i: int) -> Path:
        return self.parts_dir / f"{kind}-{i:06d}.npy"

    def part_ok(self, kind: str, i: int, n: int) -> bool:
        f = self.part_file(kind, i)
        if not f.is_file():
            return False
        try:
            a = np.load(f, mmap_mode="r")
        except (ValueError, OSError, EOFError):
            return False
        want = min(self.chunk_size, n - i * self.chunk_size)
        return a.ndim == 2 and a.shape[0] == want and a.dtype == np.float16

    def manifest(self) -> dict[str, Any]:
        return {"format": CACHE_FORMAT, "chunk_size": self.chunk_size, "fingerprint": self.fingerprint}


def _check_encode_inputs(
    dataset: str | os.PathLike | BeirDataset,
    encoder: str | EncoderSpec,
    data_dir: str | os.PathLike | None,
    cache_dir: str | os.PathLike | None,
    chunk_size: int,
    batch_size: int,
) -> _EncodePlan:
    """Step 1: every check of the inputs, before anything on disk is touched.

    Reads the whole dataset (a malformed line raises here, naming it), checks the sizes
    and that every existing component of the cache path is a folder.
    """
    chunk_size = check_int(chunk_size, "chunk_size")
    batch_size = check_int(batch_size, "batch_size")
    ds = load_beir(dataset, data_dir=data_dir)
    spec = get_encoder(encoder)
    fingerprint = cache_fingerprint(ds, spec)  # parses corpus.jsonl and queries.jsonl completely
    if fingerprint["dataset"]["n_corpus"] == 0:
        raise ValueError(f"{ds.corpus_file}: no documents to encode")
    if fingerprint["dataset"]["n_queries"] == 0:
        raise ValueError(f"{ds.queries_file}: no queries to encode")
    path = cache_path(ds, spec, cache_dir)
    _check_cache_dirs(path)
    build = _build_dir(path)
    if build.exists() and not build.is_dir():
        raise NotADirectoryError(f"{build}: expected a folder for the cache being built, found a file")
    return _EncodePlan(ds, spec, path, build, int(chunk_size), fingerprint)


def _existing_cache(plan: _EncodePlan, cache_dir: str | os.PathLike | None) -> EmbeddingCache | None:
    """Step 2: a complete cache already there, verified against the dataset; ``None`` if absent.

    A stale cache (another dataset version, reordered ids, other encoder settings) raises
    the verification error, which says to rebuild with ``--overwrite``.
    """
    if not (plan.path / "meta.json").is_file():
        return None
    return load_embeddings(plan.ds, plan.spec, cache_dir=cache_dir)


def _build_reusable(plan: _EncodePlan) -> bool:
    """An earlier build of the same inputs is in the build folder: its chunks count as done."""
    if not plan.build.is_dir():
        return False
    try:
        old = json.loads((plan.parts_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing, unreadable, not UTF-8 or not JSON
        return False
    return bool(old == json.loads(json.dumps(plan.manifest())))


def _done_chunks(plan: _EncodePlan) -> set[tuple[str, int]]:
    """The ``(kind, chunk)`` parts an identical earlier run saved intact (none if the build is stale)."""
    if not _build_reusable(plan):
        return set()
    return {(kind, i) for kind, n in plan.kinds() for i in range(plan.n_chunks(n)) if plan.part_ok(kind, i, n)}


def _missing_rows(plan: _EncodePlan, done: set[tuple[str, int]]) -> int:
    rows = sum(n for _kind, n in plan.kinds())
    return rows - sum(min(plan.chunk_size, n - i * plan.chunk_size)
                      for kind, n in plan.kinds() for i in range(plan.n_chunks(n)) if (kind, i) in done)


def _todo(plan: _EncodePlan, done: set[tuple[str, int]]) -> Iterator[tuple[str, int, list[str]]]:
    """``(kind, chunk index, texts)`` of every chunk still to encode, queries first, in file order."""
    for kind, _n in plan.kinds():
        for i, chunk in enumerate(_chunks(plan.texts(kind), plan.chunk_size)):
            if (kind, i) not in done:
                yield kind, i, chunk


def _chunk_name(plan: _EncodePlan, kind: str, i: int, n_texts: int) -> str:
    first = i * plan.chunk_size
    return f"{plan.part_file(kind, i)} ({kind} rows {first}-{first + n_texts - 1})"


def _parts_dimension(plan: _EncodePlan) -> int:
    return int(np.load(plan.part_file("queries", 0), mmap_mode="r").shape[1])


def _prepare_build_dir(plan: _EncodePlan) -> None:
    """Step 3: the build folder beside the cache; chunks of an identical earlier run are kept."""
    mf = plan.parts_dir / "manifest.json"
    if plan.build.is_dir() and not _build_reusable(plan):
        shutil.rmtree(plan.build)
    plan.parts_dir.mkdir(parents=True, exist_ok=True)
    for tmp in plan.parts_dir.glob(".*.tmp.npy"):  # a part being written when a worker was killed
        tmp.unlink(missing_ok=True)
    if not mf.is_file():
        _atomic_write_bytes(mf, json.dumps(plan.manifest(), indent=2).encode("utf-8"))


# --------------------------------------------------------------------------- disk space
def _format_bytes(n: int) -> str:
    """``9.2 GB``, ``3.1 MB``, ``4.0 kB`` or ``288 bytes`` (powers of 1000)."""
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def _folder_bytes(folder: Path) -> int:
    total = 0
    for f in folder.rglob("*"):
        try:
            total += f.stat().st_size if f.is_file() else 0
        except OSError:
            pass
    return total


def _check_disk_space(plan: _EncodePlan, dim: int, missing_rows: int) -> int:
    """Refuse a build the disk cannot hold, before its first part is written; return the bytes needed.

    The build needs the parts still missing plus both assembled arrays (float16, ``dim``
    columns): ``(rows of the dataset + rows still to encode) * dim * 2`` bytes, against the
    free space of the build folder's file system (plus a stale build, which is removed).
    The old cache, if any, stays in place until the new one is complete, so it counts as used.
    """
    need = (sum(n for _kind, n in plan.kinds()) + missing_rows) * int(dim) * 2
    where = next((p for p in (plan.build, *plan.build.parents) if p.is_dir()), Path.cwd())
    free = int(shutil.disk_usage(where).free)
    if plan.build.is_dir() and not _build_reusable(plan):
        free += _folder_bytes(plan.build)
    if need > free:
        raise ValueError(f"{plan.path}: the cache needs {_format_bytes(need)} (parts and assembled arrays), "
                         f"{_format_bytes(free)} free")
    return need


def _start_build(plan: _EncodePlan, dim: int, missing_rows: int) -> None:
    """Check the disk space, then prepare the build folder (the first write of a build)."""
    _check_disk_space(plan, dim, missing_rows)
    _prepare_build_dir(plan)


# --------------------------------------------------------------------------- one chunk
def _declared_dimension(encoder_obj: Any) -> int | None:
    """The dimension an encoder states without encoding: ``_dimension()``, else a ``dimension`` attribute."""
    getter = getattr(encoder_obj, "_dimension", None)
    value = getter() if callable(getter) else getattr(encoder_obj, "dimension", None)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value > 0:
        return int(value)
    return None


def _encode_batches(encoder_obj: Any, chunk: list[str], bar: Any) -> np.ndarray:
    """Encode one chunk batch by batch (the encoder's ``batch_size``), moving the bar per batch.

    The batches do not depend on the bar or on where the chunk is encoded (this process, a
    worker process, a Ray task): sentence-transformers pads each call's texts to a common
    length, and a different grouping changes float32 results in the last bit (about one
    float16 row in eight on SciFact), so the same grouping everywhere keeps caches identical.
    """
    size = int(getattr(encoder_obj, "batch_size", 0) or len(chunk)) or 1
    if size >= len(chunk):
        E = np.asarray(encoder_obj.encode(chunk))
        if bar is not None:
            bar.update(len(chunk))
        return E
    parts = []
    for j in range(0, len(chunk), size):
        parts.append(np.asarray(encoder_obj.encode(chunk[j:j + size])))
        if bar is not None:
            bar.update(len(chunk[j:j + size]))
    bad = next((p for p in parts if p.ndim != 2), None)
    return bad if bad is not None else np.concatenate(parts, axis=0)  # a bad shape is reported by the caller


def _checked_part(E: np.ndarray, spec: EncoderSpec, kind: str, i: int, chunk_size: int, n_texts: int,
                  dim: int | None, declared: bool) -> np.ndarray:
    """One chunk's embeddings checked (shape, dimension, finite), normalised per the spec, as float16.

    ``dim`` is the dimension every chunk must have (``declared``: stated by the encoder,
    else found in an earlier chunk); ``None`` before the first chunk of an undeclared encoder.
    """
    if E.ndim != 2 or E.shape[0] != n_texts:
        raise ValueError(f"encoder {spec.name!r}: returned shape {E.shape} for {n_texts} texts")
    if dim is not None and E.shape[1] != dim:
        if declared:
            raise ValueError(f"encoder {spec.name!r}: returned {E.shape[1]} columns but declares dimension {dim}")
        raise ValueError(f"encoder {spec.name!r}: dimension changed from {dim} to {E.shape[1]}")
    if not np.isfinite(E).all():
        bad = int(np.flatnonzero(~np.isfinite(E).all(axis=1))[0])
        row = i * chunk_size + bad
        raise ValueError(f"encoder {spec.name!r}: non-finite embedding for {kind} row {row}")
    if spec.normalize:
        E = l2_normalize(E)
    return E.astype(np.float16)


def _progress_bar(plan: _EncodePlan, done: set[tuple[str, int]], progress: bool) -> Any:
    if not progress:
        return None
    from tqdm.auto import tqdm

    total = sum(n for _k, n in plan.kinds())
    return tqdm(total=total, initial=total - _missing_rows(plan, done), unit="text",
                desc=f"embed {plan.ds.name} / {plan.spec.name}", file=sys.stderr)


# --------------------------------------------------------------------------- in this process
#: MKL's conditional numerical reproducibility for encoding on the CPU: ``STRICT`` makes its
#: matrix products independent of the thread count.  Without it, torch's CPU linear layers give
#: last-bit differences between 1 and 2 threads for products of 5-7 or 9-11 rows (measured, torch
#: 2.13 / MKL 2024.2), i.e. a batch of one short text, enough to change float16 rows.
MKL_CBWR_MODE = "AUTO,STRICT"


def _reproducible_cpu_math() -> str:
    """Ask MKL for thread-count-independent results (``MKL_CBWR``, unless the user set it); return the mode.

    MKL reads the variable at its first computation in a process: worker processes
    (started afresh) always get it, and so does this process unless it ran MKL math before.
    """
    return os.environ.setdefault("MKL_CBWR", MKL_CBWR_MODE)


@contextlib.contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    """Set torch's intra-op threads to ``threads`` for the block (no-op for ``None`` or without torch)."""
    torch = sys.modules.get("torch")
    if threads is None or torch is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _encode_chunks(plan: _EncodePlan, encoder_obj: Any, done: set[tuple[str, int]], progress: bool) -> dict[str, float]:
    """Step 4: encode every missing chunk into a part file, here; return seconds per kind.

    The disk space is checked before the first part is written: at once when the encoder
    declares its dimension, else after the first chunk is encoded (in memory).
    """
    missing_rows = _missing_rows(plan, done)
    dim = _declared_dimension(encoder_obj)
    declared = dim is not None
    started = dim is not None or missing_rows == 0
    if started:
        _start_build(plan, dim if dim is not None else _parts_dimension(plan), missing_rows)
    bar = _progress_bar(plan, done, progress)
    timings: dict[str, float] = {}
    try:
        for kind, _n in plan.kinds():
            t0 = time.perf_counter()
            for i, chunk in enumerate(_chunks(plan.texts(kind), plan.chunk_size)):
                if (kind, i) in done:
                    continue
                E = _checked_part(_encode_batches(encoder_obj, chunk, bar), plan.spec, kind, i, plan.chunk_size,
                                  len(chunk), dim, declared)
                dim, declared = int(E.shape[1]), False
                if not started:
                    _start_build(plan, dim, missing_rows)
                    started = True
                _atomic_save_npy(plan.part_file(kind, i), E)
            timings[kind] = round(time.perf_counter() - t0, 2)
    finally:
        if bar is not None:
            bar.close()
    return timings


# --------------------------------------------------------------------------- on workers
EXECUTORS = ("local", "ray")
#: fresh process pools started in one run after a worker process died (then the run stops);
#: also Ray's ``max_retries`` of a chunk's task
MAX_WORKER_RESTARTS = 2


@dataclass(frozen=True)
class _WorkerPlan:
    """Where the chunks are encoded: ``workers`` processes or Ray tasks, ``threads`` torch threads each."""

    workers: int
    executor: str
    address: str | None
    threads: int | None  # None: the encoder's own default (one process, threads_per_worker not given)

    @property
    def in_process(self) -> bool:
        return self.executor == "local" and self.workers == 1

    def record(self, info: dict[str, Any]) -> dict[str, Any]:
        """``meta.json["encode"]``: how this cache was encoded (not part of its fingerprint)."""
        out: dict[str, Any] = {"workers": self.workers, "executor": self.executor,
                               "threads_per_worker": self.threads if self.threads is not None
                               else info.get("torch_threads")}
        if self.executor == "ray":
            out["address"] = self.address
        return out


def _check_worker_args(workers: Any, executor: Any, address: Any, threads_per_worker: Any) -> _WorkerPlan:
    """Validate ``workers``, ``executor``, ``address`` and ``threads_per_worker`` (before anything else)."""
    workers = check_int(workers, "workers", note=" (encoding processes or Ray tasks at a time)")
    if not isinstance(executor, str) or executor not in EXECUTORS:
        raise ValueError(f"executor: expected one of {', '.join(map(repr, EXECUTORS))}, got {executor!r}")
    if address is not None:
        if executor != "ray":
            raise ValueError(f"address: only meaningful with executor='ray' (got address={address!r} "
                             f"with executor={executor!r})")
        if not isinstance(address, str) or not address.strip():
            raise ValueError(f"address: expected a Ray cluster address such as 'auto' or 'ray://head:10001', "
                             f"got {address!r}")
    threads = None if threads_per_worker is None else check_int(threads_per_worker, "threads_per_worker")
    if threads is None and not (executor == "local" and workers == 1):
        threads = max(1, available_cpus() // workers)
    return _WorkerPlan(workers, executor, address, threads)


def _worker_payload(plan: _EncodePlan, model: Any, device: str | None, batch_size: int, workers: int) -> bytes:
    """What every worker needs to open its encoder: the spec, device and batch size, or the pickled ``model``."""
    try:
        return pickle.dumps({"spec": plan.spec, "model": model, "device": device, "batch_size": batch_size},
                            protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - PicklingError, TypeError, AttributeError: all mean the same here
        raise ValueError(
            f"model: the {type(model).__name__} object cannot be pickled ({exc}), so it cannot be sent to "
            f"{workers} workers; use workers=1, an encoder class defined at module level, or no model "
            "(each worker then loads the encoder by name)") from None


def _worker_devices(model: Any, device: str | None) -> list[str | None]:
    """Devices of the workers, worker ``w`` taking entry ``w % len``: every CUDA device when the
    user named none and CUDA is there, else the one device (``None`` with a ``model`` object)."""
    if model is not None:
        return [device]
    resolved = check_device(device)
    if device is None and resolved == "cuda":
        import torch

        return [f"cuda:{k}" for k in range(torch.cuda.device_count())] or ["cuda"]
    return [resolved]


def _encoder_info(encoder_obj: Any) -> dict[str, Any]:
    return dict(encoder_obj.info()) if hasattr(encoder_obj, "info") else {}


def _set_threads(threads: int) -> Any:
    """Limit torch (if loaded) and the BLAS/OpenMP pools of this worker process to ``threads``."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
    from .._runtime import limit_blas_threads

    return limit_blas_threads(threads, user_api=None)  # applied on creation; kept by the caller


def _open_worker_encoder(payload: bytes, threads: int, device: str | None) -> tuple[Any, EncoderSpec]:
    """In a worker: unpickle the payload and open the encoder (the ``model`` object, or ``load_encoder``)."""
    cfg = pickle.loads(payload)
    encoder_obj = cfg["model"]
    if encoder_obj is None:
        encoder_obj = load_encoder(cfg["spec"], device=device, batch_size=cfg["batch_size"])
    return encoder_obj, cfg["spec"]


#: the encoder of this worker process (process pool), or the error that opening it raised
_WORKER: dict[str, Any] = {}


def _worker_init(payload: bytes, threads: int, devices: list[str | None], counter: Any) -> None:
    """Process-pool initializer: open this worker's encoder once, on device ``devices[w % len]``.

    Ctrl-C is left to the parent.  An error opening the encoder is kept and raised by the
    worker's first task, so the parent reports it with its message.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _reproducible_cpu_math()
    with counter.get_lock():
        index = int(counter.value)
        counter.value += 1
    _WORKER.clear()
    device = devices[index % len(devices)]
    try:
        _WORKER["encoder"], _WORKER["spec"] = _open_worker_encoder(payload, threads, device)
        _WORKER["limits"] = _set_threads(threads)  # after loading: the encoder sets torch's threads itself
        _WORKER["device"] = device
    except Exception as exc:  # noqa: BLE001 - raised again by every task of this worker
        _WORKER["error"] = exc


def _worker_encoder() -> tuple[Any, EncoderSpec]:
    if "error" in _WORKER:
        raise _WORKER["error"]
    return _WORKER["encoder"], _WORKER["spec"]


def _worker_info() -> dict[str, Any]:
    """Task: the worker encoder's ``info()`` and declared dimension."""
    encoder_obj, _spec = _worker_encoder()
    return {"info": _encoder_info(encoder_obj), "dimension": _declared_dimension(encoder_obj)}


def _worker_encode(kind: str, i: int, texts: list[str], part: str | None, chunk_size: int, dim: int | None,
                   declared: bool) -> Any:
    """Task: encode one chunk as :func:`_encode_chunks` does and save it to ``part`` (atomically);
    return its dimension, or the float16 array itself when ``part`` is ``None``."""
    encoder_obj, spec = _worker_encoder()
    E = _checked_part(_encode_batches(encoder_obj, texts, None), spec, kind, i, chunk_size, len(texts), dim, declared)
    if part is None:
        return E
    _atomic_save_npy(Path(part), E)
    return int(E.shape[1])


class _WorkerPool:
    """A spawn-context process pool of encoding workers, started afresh when a worker process dies."""

    def __init__(self, workers: int, payload: bytes, threads: int, devices: list[str | None]):
        self.workers = workers
        self.restarts = 0
        self._initargs = (payload, threads, devices)
        self.pool = self._start()

    def _start(self) -> cf.ProcessPoolExecutor:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        return cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, initializer=_worker_init,
                                      initargs=(*self._initargs, ctx.Value("i", 0)))

    def restart(self, failed: str) -> None:
        """A worker died: a fresh pool, or (after :data:`MAX_WORKER_RESTARTS`) a one-line error naming ``failed``."""
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.restarts += 1
        if self.restarts > MAX_WORKER_RESTARTS:
            raise RuntimeError(
                f"{failed}: a worker process died while encoding it, the pool was restarted "
                f"{MAX_WORKER_RESTARTS} times and a worker died again (killed, out of memory or a crash in the "
                "encoder); the chunks saved so far are kept, rerun to resume (fewer workers or a smaller batch "
                "size need less memory)")
        self.pool = self._start()

    def call(self, what: str, fn: Callable[..., Any], *args: Any, copies: int = 1) -> Any:
        """Run a task (``copies`` times at once) and return its first result, redone on a fresh pool
        if a worker dies.  The pool starts a process per task submitted while none is idle, so
        ``copies=workers`` starts (and loads) every worker together."""
        while True:
            try:
                futures = [self.pool.submit(fn, *args) for _ in range(copies)]
                return [f.result() for f in futures][0]
            except BrokenProcessPool:
                self.restart(what)

    def close(self, ok: bool) -> None:
        """Shut the pool down; after an error or Ctrl-C, end the workers first (their parts are atomic)."""
        if not ok:
            for proc in list((getattr(self.pool, "_processes", None) or {}).values()):
                with contextlib.suppress(Exception):
                    proc.terminate()
        self.pool.shutdown(wait=True, cancel_futures=True)


def _pool_chunks(plan: _EncodePlan, pool: _WorkerPool, done: set[tuple[str, int]], dim: int, declared: bool,
                 bar: Any, started: dict[str, float], finished: dict[str, float]) -> dict[str, float]:
    """Encode every chunk not in ``done`` on the pool, at most ``2 * workers`` in flight; return seconds per kind.

    When a worker dies, every unfinished chunk is redone on a fresh pool; a chunk whose part
    was saved before the crash is kept.
    """
    sizes = dict(plan.kinds())
    source = _todo(plan, done)
    redo: list[tuple[str, int, list[str]]] = []
    in_flight: dict[cf.Future, tuple[str, int, list[str]]] = {}
    while True:
        broken = False
        while len(in_flight) < 2 * pool.workers and not broken:
            item = redo.pop(0) if redo else next(source, None)
            if item is None:
                break
            kind, i, texts = item
            if plan.part_ok(kind, i, sizes[kind]):  # saved by a worker before the pool broke
                _chunk_finished(bar, finished, kind, len(texts))
                continue
            try:
                fut = pool.pool.submit(_worker_encode, kind, i, texts, str(plan.part_file(kind, i)), plan.chunk_size,
                                       dim, declared)
            except BrokenProcessPool:
                redo.insert(0, item)
                broken = True
                break
            started.setdefault(kind, time.perf_counter())
            in_flight[fut] = item
        if not in_flight and not broken:
            break
        if not broken:
            for fut in cf.wait(in_flight, return_when=cf.FIRST_COMPLETED).done:
                item = in_flight.pop(fut)
                if isinstance(fut.exception(), BrokenProcessPool):
                    redo.append(item)
                    broken = True
                    continue
                fut.result()  # an encoder error: raised with its message
                _chunk_finished(bar, finished, item[0], len(item[2]))
        if broken:
            redo = _unfinished(plan, [*redo, *in_flight.values()], bar, finished)
            in_flight.clear()
            failed = "a chunk" if not redo else _chunk_name(plan, redo[0][0], redo[0][1], len(redo[0][2]))
            if len(redo) > 1:
                failed += f" (or one of the {len(redo) - 1} other chunk{'s' if len(redo) > 2 else ''} in flight)"
            pool.restart(failed)
    return {kind: round(finished.get(kind, t0) - t0, 2) if (t0 := started.get(kind)) else 0.0 for kind in sizes}


def _unfinished(plan: _EncodePlan, items: list[tuple[str, int, list[str]]], bar: Any,
                finished: dict[str, float]) -> list[tuple[str, int, list[str]]]:
    """The chunks of ``items`` without a saved part, in file order (those saved count as finished)."""
    sizes = dict(plan.kinds())
    order = {kind: k for k, (kind, _n) in enumerate(plan.kinds())}
    out = []
    for kind, i, texts in sorted(items, key=lambda it: (order[it[0]], it[1])):
        if plan.part_ok(kind, i, sizes[kind]):
            _chunk_finished(bar, finished, kind, len(texts))
        else:
            out.append((kind, i, texts))
    return out


def _chunk_finished(bar: Any, finished: dict[str, float], kind: str, rows: int) -> None:
    finished[kind] = time.perf_counter()
    if bar is not None:
        bar.update(rows)


def _encode_on_pool(plan: _EncodePlan, wk: _WorkerPlan, model: Any, device: str | None, batch_size: int,
                    done: set[tuple[str, int]], progress: bool) -> tuple[dict[str, float], dict[str, Any]]:
    """Step 4 on ``wk.workers`` local processes; return (seconds per kind, the encoder's info)."""
    payload = _worker_payload(plan, model, device, batch_size, wk.workers)
    devices = _worker_devices(model, device)
    assert wk.threads is not None
    missing_rows = _missing_rows(plan, done)
    pool = _WorkerPool(wk.workers, payload, wk.threads, devices)
    ok, bar = False, None
    started: dict[str, float] = {}
    finished: dict[str, float] = {}
    try:
        if model is None:
            got = pool.call(f"encoder {plan.spec.name!r} (opening it)", _worker_info, copies=wk.workers)
            info, dim = got["info"], got["dimension"]
        else:
            info, dim = _encoder_info(model), _declared_dimension(model)
        declared = dim is not None
        first = None
        if dim is None and missing_rows:  # an encoder that does not state its dimension: one chunk first
            kind, i, texts = first = next(_todo(plan, done))
            started[kind] = time.perf_counter()
            E = pool.call(_chunk_name(plan, kind, i, len(texts)), _worker_encode, kind, i, texts, None,
                          plan.chunk_size, None, False)
            dim = int(E.shape[1])
        elif dim is None:  # nothing left to encode
            dim = _parts_dimension(plan)
        _start_build(plan, dim, missing_rows)
        bar = _progress_bar(plan, done, progress)
        if first is not None:
            _atomic_save_npy(plan.part_file(first[0], first[1]), E)
            done = done | {(first[0], first[1])}
            _chunk_finished(bar, finished, first[0], len(first[2]))
        timings = _pool_chunks(plan, pool, done, dim, declared, bar, started, finished)
        ok = True
    finally:
        if bar is not None:
            bar.close()
        pool.close(ok)
    return timings, info


# --------------------------------------------------------------------------- on Ray
def _ray_module() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ImportError("executor='ray' needs the optional dependency ray: pip install 'asymgeo[ray]'") from exc
    return ray


#: encoders opened by Ray tasks in this worker process, by run token (a worker runs many tasks)
_RAY_ENCODERS: dict[str, tuple[Any, EncoderSpec]] = {}


def _ray_encoder(payload: bytes, threads: int, device: str | None, token: str) -> tuple[Any, EncoderSpec]:
    if token not in _RAY_ENCODERS:
        _reproducible_cpu_math()
        _RAY_ENCODERS.clear()  # one run's encoder at a time
        _RAY_ENCODERS[token] = _open_worker_encoder(payload, threads, device)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
    return _RAY_ENCODERS[token]


def _ray_info(payload: bytes, threads: int, device: str | None, token: str) -> dict[str, Any]:
    """Ray task: the encoder's ``info()`` and declared dimension."""
    encoder_obj, _spec = _ray_encoder(payload, threads, device, token)
    return {"info": _encoder_info(encoder_obj), "dimension": _declared_dimension(encoder_obj)}


def _ray_encode(payload: bytes, threads: int, device: str | None, token: str, kind: str, i: int, texts: list[str],
                chunk_size: int, dim: int | None, declared: bool) -> np.ndarray:
    """Ray task: one chunk encoded and checked as :func:`_encode_chunks` does; the float16 array
    comes back and the driver saves it (no shared file system needed)."""
    encoder_obj, spec = _ray_encoder(payload, threads, device, token)
    return _checked_part(_encode_batches(encoder_obj, texts, None), spec, kind, i, chunk_size, len(texts), dim,
                         declared)


def _ray_get(ray: Any, ref: Any, what: str) -> Any:
    """``ray.get`` with the task's own exception (its message) and a one-line error for a dead worker."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, Exception):
            raise cause from None
        raise
    except ray.exceptions.RayError as exc:
        raise RuntimeError(f"{what}: the Ray task failed {MAX_WORKER_RESTARTS + 1} times "
                           f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); the chunks "
                           "saved so far are kept, rerun to resume") from None


def _ray_init(ray: Any, wk: _WorkerPlan) -> bool:
    """Connect to ``wk.address`` (or start a local cluster of ``wk.workers`` CPUs) unless Ray is
    initialised already; return whether this call started it."""
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if wk.address:
        ray.init(address=wk.address, **kwargs)
    else:
        ray.init(num_cpus=wk.workers, **kwargs)
    return True


def _ray_options(ray: Any, wk: _WorkerPlan, model: Any, device: str | None) -> dict[str, Any]:
    """Resources of one task: a CPU, and a share of the cluster's GPUs when the encoder is opened by name
    without a ``device`` (Ray then shows each task its GPU as ``cuda``)."""
    opts: dict[str, Any] = {"num_cpus": 1, "max_retries": MAX_WORKER_RESTARTS}
    gpus = float(ray.cluster_resources().get("GPU", 0)) if model is None and device is None else 0.0
    if gpus > 0:
        opts["num_gpus"] = min(1.0, gpus / wk.workers)
    return opts


def _encode_on_ray(plan: _EncodePlan, wk: _WorkerPlan, model: Any, device: str | None, batch_size: int,
                   done: set[tuple[str, int]], progress: bool) -> tuple[dict[str, float], dict[str, Any]]:
    """Step 4 as one Ray task per missing chunk, at most ``2 * workers`` in flight; the driver saves the parts."""
    ray = _ray_module()
    payload = _worker_payload(plan, model, device, batch_size, wk.workers)
    if model is None:
        check_device(device)
    started_here = _ray_init(ray, wk)
    try:
        opts = _ray_options(ray, wk, model, device)
        args = (ray.put(payload), wk.threads, device, uuid.uuid4().hex)
        if model is None:
            got = _ray_get(ray, ray.remote(**opts)(_ray_info).remote(*args), f"encoder {plan.spec.name!r} (opening it)")
            info, dim = got["info"], got["dimension"]
        else:
            info, dim = _encoder_info(model), _declared_dimension(model)
        timings = _ray_chunks(ray, plan, wk, ray.remote(**opts)(_ray_encode), args, done, dim, progress)
    finally:
        if started_here:
            ray.shutdown()
    return timings, info


def _ray_chunks(ray: Any, plan: _EncodePlan, wk: _WorkerPlan, task: Any, args: tuple, done: set[tuple[str, int]],
                dim: int | None, progress: bool) -> dict[str, float]:
    """Submit the missing chunks as ``task`` (at most ``2 * workers`` in flight), save each result as it
    comes; the disk space is checked before the first save.  Return seconds per kind."""
    declared = dim is not None
    missing_rows = _missing_rows(plan, done)
    if dim is None and not missing_rows:
        dim = _parts_dimension(plan)
    building = dim is not None
    if dim is not None:
        _start_build(plan, dim, missing_rows)
    bar = _progress_bar(plan, done, progress)
    source = _todo(plan, done)
    in_flight: dict[Any, tuple[str, int, list[str]]] = {}
    started: dict[str, float] = {}
    finished: dict[str, float] = {}
    try:
        while True:
            while len(in_flight) < 2 * wk.workers and (item := next(source, None)) is not None:
                started.setdefault(item[0], time.perf_counter())
                in_flight[task.remote(*args, item[0], item[1], item[2], plan.chunk_size, dim, declared)] = item
            if not in_flight:
                break
            (ref,), _ = ray.wait(list(in_flight), num_returns=1)
            kind, i, texts = in_flight.pop(ref)
            E = _ray_get(ray, ref, _chunk_name(plan, kind, i, len(texts)))
            if dim is not None and E.shape[1] != dim:  # a task submitted before the dimension was known
                raise ValueError(f"encoder {plan.spec.name!r}: dimension changed from {dim} to {E.shape[1]}")
            if not building:
                dim = int(E.shape[1])
                _start_build(plan, dim, missing_rows)
                building = True
            _atomic_save_npy(plan.part_file(kind, i), E)
            _chunk_finished(bar, finished, kind, len(texts))
    except BaseException:
        for ref in in_flight:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise
    finally:
        if bar is not None:
            bar.close()
    return {kind: round(finished.get(kind, t0) - t0, 2) if (t0 := started.get(kind)) else 0.0
            for kind, _n in plan.kinds()}


def _assemble_cache(plan: _EncodePlan) -> int:
    """Step 5: check every part, concatenate them into the build folder with the id files; return p."""
    for kind, n in plan.kinds():
        for i in range(plan.n_chunks(n)):
            if not plan.part_ok(kind, i, n):
                raise ValueError(f"{plan.part_file(kind, i)}: missing or malformed after encoding")
    dims = {np.load(plan.part_file(k, 0), mmap_mode="r").shape[1] for k, n in plan.kinds() if n}
    if len(dims) != 1:
        raise ValueError(f"{plan.parts_dir}: parts have different dimensions {sorted(dims)}")
    dim = dims.pop()
    for kind, n in plan.kinds():
        _assemble([plan.part_file(kind, i) for i in range(plan.n_chunks(n))], plan.build / f"{kind}.npy", n, dim)
    _write_ids(plan.build / "corpus_ids.txt", plan.ds.corpus_ids)
    _write_ids(plan.build / "query_ids.txt", plan.ds.query_ids)
    return dim


def _cache_meta(
    plan: _EncodePlan, dim: int, info: dict[str, Any], timings: dict[str, float], command: str | None
) -> dict[str, Any]:
    """Step 6: ``meta.json``: model, versions, conventions, shapes, fingerprint, command.

    ``info`` is the encoder's ``info()`` (versions, device, ...), merged in last.
    """
    spec, ds = plan.spec, plan.ds
    info = dict(info)
    meta: dict[str, Any] = {
        "format": CACHE_FORMAT,
        "model_name": spec.model,
        "encoder": spec.name,
        "source": {
            "package": spec.package,
            "version": info.pop("package_version", None),
            "model_path": info.pop("model_path", None),
        },
        "dimension": dim,
        "prefixes": {"query": spec.query_prefix, "document": spec.document_prefix},
        "document_text": 'document_prefix + title + " " + text if title non-empty else document_prefix + text',
        "max_tokens": spec.max_tokens,
        "normalised": spec.normalize,
        "dtype": "float16",
        "shapes": {"corpus": [len(ds.corpus_ids), dim], "queries": [len(ds.query_ids), dim]},
        "row_order": "corpus.jsonl / queries.jsonl file order (ids in corpus_ids.txt / query_ids.txt)",
        "chunk_size": plan.chunk_size,
        "dataset": {"name": ds.name, "path": str(ds.path.resolve())},
        "fingerprint": {**plan.fingerprint, "files": _id_file_digests(plan.build)},
        "encode_wall_seconds": timings,
        "python_version": sys.version.split()[0],
        "numpy_version": np.__version__,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command if command is not None else " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
    }
    info.pop("dimension", None)
    meta.update(info)
    return meta


def encode_dataset(
    dataset: str | os.PathLike | BeirDataset,
    encoder: str | EncoderSpec = "all-MiniLM-L6-v2",
    *,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    model: TextEncoder | None = None,
    device: str | None = None,
    batch_size: int = 32,
    chunk_size: int = 2048,
    overwrite: bool = False,
    progress: bool = True,
    command: str | None = None,
    workers: int = 1,
    executor: str = "local",
    address: str | None = None,
    threads_per_worker: int | None = None,
) -> EmbeddingCache:
    """Encode a dataset's queries and corpus into the cache, resuming an interrupted run.

    Texts follow the encoder's conventions (:class:`~asymgeo.data.EncoderSpec`): the
    query prefix, ``document_prefix + title + " " + text`` for documents, truncation at
    ``max_tokens``; embeddings are L2-normalised and stored as float16.

    Steps: (1) check every input before touching the disk: the arguments, the dataset
    parses completely, the cache path is made of folders, the device exists and the
    encoder loads; (2) a complete cache already there is verified against the dataset and
    returned (a stale one raises, saying to pass ``overwrite``); (3) the disk must hold
    the parts still missing and both assembled arrays (else a one-line ``ValueError``
    naming both sizes, before anything is written); (4) the new cache is built in
    ``<encoder>.partial/`` beside the cache folder, in chunks of ``chunk_size`` rows, so a
    rerun after an interruption re-encodes only the missing chunks (a changed dataset,
    encoder or chunk size starts afresh); (5) the complete folder is verified and only
    then replaces the old cache (two renames).  A failing run never damages an existing
    cache.

    With ``workers > 1`` (or ``executor="ray"``) the chunks are encoded in parallel and
    the cache is byte-identical to a one-process run's: every chunk is split into the same
    batches and checked and normalised by the same code, wherever it runs, and on the CPU
    MKL is asked for results independent of the thread count (``MKL_CBWR=AUTO,STRICT``
    unless set, :data:`MKL_CBWR_MODE`; it takes effect in a process that has not run MKL
    math before the call, as the CLI and every worker).  ``"local"``
    starts ``workers`` processes (``spawn``), each opening its own encoder (on
    ``cuda:{w % n_gpus}`` when CUDA is there and ``device`` is not given) and saving its
    chunks' parts; at most ``2 * workers`` chunks are in flight.  If a worker process dies,
    a fresh pool redoes every unfinished chunk (parts already saved are kept), at most
    :data:`MAX_WORKER_RESTARTS` times.  ``"ray"`` runs one task per chunk on the cluster
    at ``address`` (or the Ray already initialised, or a local one of ``workers`` CPUs,
    shut down afterwards); tasks return their arrays and this process saves them; a task
    whose worker dies is retried (``max_retries``).  Worker processes are started with
    ``spawn``, which re-imports the calling script: call this under
    ``if __name__ == "__main__":`` there (the CLI and notebooks need nothing).

    Parameters
    ----------
    dataset : name, BEIR folder or :class:`~asymgeo.data.BeirDataset`.
    encoder : registry name or model id/path (see :func:`~asymgeo.data.get_encoder`).
    model : any object with ``encode(texts) -> (n, p) array``; default the
        sentence-transformers model of ``encoder`` opened offline on ``device``.  With
        several workers it must be picklable (each worker gets a copy); with none, each
        worker opens the encoder by name.
    overwrite : re-encode even when a complete cache exists (it stays in place until
        the new one is complete).
    command : recorded in ``meta.json`` (default: this process's command line).
    workers : processes (``"local"``) or Ray tasks at a time; 1 encodes in this process.
    executor : ``"local"`` or ``"ray"`` (the extra ``asymgeo[ray]``).
    address : Ray cluster address (``"auto"``, ``"ray://head:10001"``); only with ``"ray"``.
    threads_per_worker : torch threads of each worker; default ``available_cpus() // workers``
        (at least 1), or the encoder's default in a one-process run.

    Returns
    -------
    EmbeddingCache
        The finished cache, memory-mapped.  ``meta.json["encode"]`` records ``workers``,
        ``executor`` and ``threads_per_worker`` (not part of the fingerprint).

    Raises
    ------
    ValueError
        Bad arguments, a ``model`` that cannot be pickled for the workers, too little
        disk space, an encoder returning a wrong shape or non-finite values.
    RuntimeError
        Worker processes kept dying (the error names the chunk); rerun to resume.
    """
    wk = _check_worker_args(workers, executor, address, threads_per_worker)
    plan = _check_encode_inputs(dataset, encoder, data_dir, cache_dir, chunk_size, batch_size)
    if not overwrite:
        existing = _existing_cache(plan, cache_dir)
        if existing is not None:
            return existing
    done = _done_chunks(plan)
    mkl_mode = _reproducible_cpu_math()  # before the encoder loads here, and inherited by worker processes
    if wk.in_process:
        encoder_obj: Any = model
        if encoder_obj is None:
            check_device(device)
            encoder_obj = load_encoder(plan.spec, device=device, batch_size=batch_size)
        with _torch_threads(wk.threads):
            timings = _encode_chunks(plan, encoder_obj, done, progress)
            info = _encoder_info(encoder_obj)
    else:
        run_on = _encode_on_ray if wk.executor == "ray" else _encode_on_pool
        timings, info = run_on(plan, wk, model, device, batch_size, done, progress)
    dim = _assemble_cache(plan)
    meta = _cache_meta(plan, dim, info, timings, command)
    meta["encode"] = {**wk.record(info), "mkl_cbwr": mkl_mode}
    _write_meta(plan.build, meta)
    built = _open_folder(plan.build, mmap=True)
    verify_cache(built, plan.ds, plan.spec)
    validate_embeddings(built)
    del built
    _replace_dir(plan.build, plan.path)
    shutil.rmtree(plan.path / ".partial", ignore_errors=True)  # the chunks, kept until the swap for a resume
    return load_embeddings(plan.ds, plan.spec, cache_dir=cache_dir)
