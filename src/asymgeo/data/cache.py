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

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import atomic_path, atomic_write_bytes
from .._runtime import json_default
from .._validation import check_int
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
def _read_ids(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        ids = fh.read().split("\n")
    if ids and ids[-1] == "":
        ids.pop()
    for i, s in enumerate(ids, 1):
        if not s.strip():
            raise ValueError(f"{path}, line {i}: empty id")
    return ids


def _index(ids: Sequence[str], what: str, path: Path) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, s in enumerate(ids):
        if s in index:
            raise ValueError(f"{path}: duplicate {what} id {s!r} on lines {index[s] + 1} and {i + 1}")
        index[s] = i
    return index


@dataclass
class EmbeddingCache:
    """Frozen embeddings of one dataset under one encoder.

    Attributes
    ----------
    path : the cache folder.
    corpus : (N, p) float16, memory-mapped, rows in ``corpus_ids`` order.
    queries : (Q, p) float16, memory-mapped, rows in ``query_ids`` order.
    corpus_ids, query_ids : list[str]
    meta : dict read from ``meta.json``.
    """

    path: Path
    corpus: np.ndarray
    queries: np.ndarray
    corpus_ids: list[str]
    query_ids: list[str]
    meta: dict[str, Any]

    def __post_init__(self) -> None:
        self._corpus_index = _index(self.corpus_ids, "corpus", self.path / "corpus_ids.txt")
        self._query_index = _index(self.query_ids, "query", self.path / "query_ids.txt")

    @property
    def dim(self) -> int:
        return int(self.corpus.shape[1])

    def _rows(self, ids: Iterable[str], index: dict[str, int], what: str) -> np.ndarray:
        if isinstance(ids, str):
            raise TypeError(f"{what} ids: expected a sequence of ids, got a single string {ids!r}")
        out = []
        for s in ids:
            try:
                out.append(index[s])
            except KeyError:
                raise KeyError(f"{self.path}: no {what} with id {s!r} in the cache") from None
        return np.asarray(out, dtype=np.int64)

    def corpus_rows(self, ids: Iterable[str]) -> np.ndarray:
        """Row numbers of the given document ids (KeyError naming the first unknown id)."""
        return self._rows(ids, self._corpus_index, "document")

    def query_rows(self, ids: Iterable[str]) -> np.ndarray:
        """Row numbers of the given query ids."""
        return self._rows(ids, self._query_index, "query")

    def has_corpus_id(self, doc_id: str) -> bool:
        return doc_id in self._corpus_index


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
    corpus_ids = _read_ids(path / "corpus_ids.txt")
    query_ids = _read_ids(path / "query_ids.txt")
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


def _id_mismatch(path: Path, got: list[str], want: list[str], source: Path, what: str, hint: str) -> str:
    if len(got) != len(want):
        return f"{path}: {len(got)} ids but {source} has {len(want)} {what}; the cache is stale, {hint}"
    i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
    return (f"{path}, line {i + 1}: id {got[i]!r} but {source} has {want[i]!r} there "
            f"(rows would be scored as the wrong {what}); {hint}")


#: Largest accepted | ||row|| - 1 | in a cache whose ``meta.json`` says ``normalised``:
#: float16 storage alone moves a unit norm by about 1e-3.
NORM_TOLERANCE = 0.02


def validate_embeddings(cache: EmbeddingCache, *, block_rows: int = 65536) -> None:
    """Check every row of a cache: finite, non-zero, unit norm when ``meta["normalised"]``.

    Read block by block (a memory-mapped corpus is never loaded whole).  The check every
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


def _prepare_build_dir(plan: _EncodePlan) -> None:
    """Step 3: the build folder beside the cache; chunks of an identical earlier run are kept."""
    mf = plan.parts_dir / "manifest.json"
    if plan.build.is_dir():
        try:
            old = json.loads(mf.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            old = None
        if old != json.loads(json.dumps(plan.manifest())):
            shutil.rmtree(plan.build)
    plan.parts_dir.mkdir(parents=True, exist_ok=True)
    if not mf.is_file():
        _atomic_write_bytes(mf, json.dumps(plan.manifest(), indent=2).encode("utf-8"))


def _encode_batches(encoder_obj: Any, chunk: list[str], bar: Any) -> np.ndarray:
    """Encode one chunk batch by batch (the encoder's ``batch_size``), moving the bar per batch."""
    size = int(getattr(encoder_obj, "batch_size", 0) or len(chunk)) or 1
    if bar is None or size >= len(chunk):
        E = np.asarray(encoder_obj.encode(chunk))
        if bar is not None:
            bar.update(len(chunk))
        return E
    parts = []
    for j in range(0, len(chunk), size):
        parts.append(np.asarray(encoder_obj.encode(chunk[j:j + size])))
        bar.update(len(chunk[j:j + size]))
    bad = next((p for p in parts if p.ndim != 2), None)
    return bad if bad is not None else np.concatenate(parts, axis=0)  # a bad shape is reported by the caller


def _encode_chunks(plan: _EncodePlan, encoder_obj: Any, progress: bool) -> dict[str, float]:
    """Step 4: encode every missing chunk into a part file; return seconds per kind."""
    spec = plan.spec
    done_rows = sum(
        min(plan.chunk_size, n - i * plan.chunk_size)
        for kind, n in plan.kinds() for i in range(plan.n_chunks(n)) if plan.part_ok(kind, i, n)
    )
    total = sum(n for _k, n in plan.kinds())
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, initial=done_rows, unit="text", desc=f"embed {plan.ds.name} / {spec.name}",
                   file=sys.stderr)
    timings: dict[str, float] = {}
    dim: int | None = None
    try:
        for kind, n in plan.kinds():
            t0 = time.perf_counter()
            for i, chunk in enumerate(_chunks(plan.texts(kind), plan.chunk_size)):
                if plan.part_ok(kind, i, n):
                    continue
                E = _encode_batches(encoder_obj, chunk, bar)
                if E.ndim != 2 or E.shape[0] != len(chunk):
                    raise ValueError(f"encoder {spec.name!r}: returned shape {E.shape} for {len(chunk)} texts")
                if dim is not None and E.shape[1] != dim:
                    raise ValueError(f"encoder {spec.name!r}: dimension changed from {dim} to {E.shape[1]}")
                if not np.isfinite(E).all():
                    bad = int(np.flatnonzero(~np.isfinite(E).all(axis=1))[0])
                    row = i * plan.chunk_size + bad
                    raise ValueError(f"encoder {spec.name!r}: non-finite embedding for {kind} row {row}")
                dim = E.shape[1]
                if spec.normalize:
                    E = l2_normalize(E)
                _atomic_save_npy(plan.part_file(kind, i), E.astype(np.float16))
            timings[kind] = round(time.perf_counter() - t0, 2)
    finally:
        if bar is not None:
            bar.close()
    return timings


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
    plan: _EncodePlan, dim: int, encoder_obj: Any, timings: dict[str, float], command: str | None
) -> dict[str, Any]:
    """Step 6: ``meta.json``: model, versions, conventions, shapes, fingerprint, command."""
    spec, ds = plan.spec, plan.ds
    info: dict[str, Any] = dict(encoder_obj.info()) if hasattr(encoder_obj, "info") else {}
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
) -> EmbeddingCache:
    """Encode a dataset's queries and corpus into the cache, resuming an interrupted run.

    Texts follow the encoder's conventions (:class:`~asymgeo.data.EncoderSpec`): the
    query prefix, ``document_prefix + title + " " + text`` for documents, truncation at
    ``max_tokens``; embeddings are L2-normalised and stored as float16.

    Steps: (1) check every input before touching the disk: the dataset parses
    completely, the cache path is made of folders, the device exists and the encoder
    loads; (2) a complete cache already there is verified against the dataset and
    returned (a stale one raises, saying to pass ``overwrite``); (3) the new cache is
    built in ``<encoder>.partial/`` beside the cache folder, in chunks of ``chunk_size``
    rows, so a rerun after an interruption re-encodes only the missing chunks (a
    changed dataset, encoder or chunk size starts afresh); (4) the complete folder is
    verified and only then replaces the old cache (two renames).  A failing run never
    damages an existing cache.

    Parameters
    ----------
    dataset : name, BEIR folder or :class:`~asymgeo.data.BeirDataset`.
    encoder : registry name or model id/path (see :func:`~asymgeo.data.get_encoder`).
    model : any object with ``encode(texts) -> (n, p) array``; default the
        sentence-transformers model of ``encoder`` opened offline on ``device``.
    overwrite : re-encode even when a complete cache exists (it stays in place until
        the new one is complete).
    command : recorded in ``meta.json`` (default: this process's command line).

    Returns
    -------
    EmbeddingCache
        The finished cache, memory-mapped.
    """
    plan = _check_encode_inputs(dataset, encoder, data_dir, cache_dir, chunk_size, batch_size)
    if not overwrite:
        existing = _existing_cache(plan, cache_dir)
        if existing is not None:
            return existing
    encoder_obj: Any = model
    if encoder_obj is None:
        check_device(device)
        encoder_obj = load_encoder(plan.spec, device=device, batch_size=batch_size)
    _prepare_build_dir(plan)
    timings = _encode_chunks(plan, encoder_obj, progress)
    dim = _assemble_cache(plan)
    _write_meta(plan.build, _cache_meta(plan, dim, encoder_obj, timings, command))
    built = _open_folder(plan.build, mmap=True)
    verify_cache(built, plan.ds, plan.spec)
    validate_embeddings(built)
    del built
    _replace_dir(plan.build, plan.path)
    shutil.rmtree(plan.path / ".partial", ignore_errors=True)  # the chunks, kept until the swap for a resume
    return load_embeddings(plan.ds, plan.spec, cache_dir=cache_dir)
