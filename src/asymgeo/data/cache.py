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
from .encoders import EncoderSpec, TextEncoder, get_encoder, l2_normalize, load_encoder

__all__ = [
    "EmbeddingCache",
    "cache_root",
    "cache_path",
    "load_embeddings",
    "write_embeddings",
    "encode_dataset",
    "CACHE_FORMAT",
]

CACHE_FORMAT = "asymgeo-embeddings/1"
_FILES = ("corpus.npy", "corpus_ids.txt", "queries.npy", "query_ids.txt", "meta.json")


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """``cache_dir``, else ``$ASYMGEO_CACHE_DIR``, else ``~/.cache/asymgeo/embeddings``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("ASYMGEO_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "asymgeo" / "embeddings"


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
    except (ValueError, OSError) as exc:
        raise ValueError(f"{path}: not a readable .npy array ({exc})") from None
    if arr.ndim != 2:
        raise ValueError(f"{path}: expected a 2-d (rows, p) array, got shape {arr.shape}")
    return arr


def load_embeddings(  # noqa: C901 - data layer, reliability branch
    dataset: str | os.PathLike | BeirDataset,
    encoder: str | EncoderSpec,
    *,
    cache_dir: str | os.PathLike | None = None,
    mmap: bool = True,
) -> EmbeddingCache:
    """Open the cache ``<cache_dir>/<dataset>/<encoder>/`` (memory-mapped by default).

    Parameters
    ----------
    dataset : dataset name, BEIR folder or :class:`~asymgeo.data.BeirDataset` (its name is used).
    encoder : registry name, alias or model id (see :func:`~asymgeo.data.get_encoder`).
    cache_dir : default ``$ASYMGEO_CACHE_DIR``, then ``~/.cache/asymgeo/embeddings``.

    Raises
    ------
    FileNotFoundError
        No cache there, or an incomplete one (an interrupted encoding; rerun to resume).
    ValueError
        Files disagree (row counts vs ids, dimensions, dtype).
    """
    path = cache_path(dataset, encoder, cache_dir)
    if not path.is_dir():
        raise FileNotFoundError(
            f"{path}: no embedding cache (run `asymgeo embed {_dataset_name(dataset)} "
            f"--encoder {get_encoder(encoder).name}` or pass --cache-dir)"
        )
    if not (path / "meta.json").is_file():
        hint = " (an interrupted encoding: rerun `asymgeo embed` to resume)" if (path / ".partial").is_dir() else ""
        raise FileNotFoundError(f"{path / 'meta.json'}: missing, the cache is incomplete{hint}")
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
    shapes = meta.get("shapes")
    if isinstance(shapes, dict):
        for key, arr in (("corpus", corpus), ("queries", queries)):
            if key in shapes and list(shapes[key]) != list(arr.shape):
                raise ValueError(f"{path / 'meta.json'}: shapes.{key} = {shapes[key]} but {key}.npy has shape {list(arr.shape)}")
    return EmbeddingCache(path=path, corpus=corpus, queries=queries, corpus_ids=corpus_ids, query_ids=query_ids, meta=meta)


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
    path.mkdir(parents=True, exist_ok=True)
    (path / "meta.json").unlink(missing_ok=True)  # the folder stops looking complete first
    _atomic_save_npy(path / "corpus.npy", corpus.astype(np.float16))
    _write_ids(path / "corpus_ids.txt", list(corpus_ids))
    _atomic_save_npy(path / "queries.npy", queries.astype(np.float16))
    _write_ids(path / "query_ids.txt", list(query_ids))
    meta = dict(meta)
    meta.setdefault("format", CACHE_FORMAT)
    meta["dtype"] = "float16"
    meta["dimension"] = int(corpus.shape[1])
    meta["shapes"] = {"corpus": list(corpus.shape), "queries": list(queries.shape)}
    _write_meta(path, meta)
    return path


# --------------------------------------------------------------------------- encoding
def _ids_digest(ids: Sequence[str]) -> str:
    h = hashlib.sha256()
    for s in ids:
        h.update(s.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


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


def encode_dataset(  # noqa: C901 - split into named steps (issue #8) in the data branch
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
    ``max_tokens``; embeddings are L2-normalised and stored as float16.  Work is saved in
    chunks of ``chunk_size`` rows under ``.partial/``; rerunning after an interruption
    re-encodes only the missing chunks (a changed dataset, encoder or chunk size starts
    afresh).  ``meta.json`` is written last.

    Parameters
    ----------
    dataset : name, BEIR folder or :class:`~asymgeo.data.BeirDataset`.
    encoder : registry name or model id/path (see :func:`~asymgeo.data.get_encoder`).
    model : any object with ``encode(texts) -> (n, p) array``; default the
        sentence-transformers model of ``encoder`` opened offline.
    overwrite : re-encode even when a complete cache exists.
    command : recorded in ``meta.json`` (default: this process's command line).

    Returns
    -------
    EmbeddingCache
        The finished cache, memory-mapped.
    """
    ds = load_beir(dataset, data_dir=data_dir)
    spec = get_encoder(encoder)
    chunk_size = check_int(chunk_size, "chunk_size")
    path = cache_path(ds, spec, cache_dir)
    if (path / "meta.json").is_file() and not overwrite:
        return load_embeddings(ds, spec, cache_dir=cache_dir)
    path.mkdir(parents=True, exist_ok=True)
    (path / "meta.json").unlink(missing_ok=True)
    corpus_ids = ds.corpus_ids
    query_ids = ds.query_ids
    parts_dir = path / ".partial"
    manifest = {
        "format": CACHE_FORMAT,
        "encoder": spec.describe(),
        "chunk_size": chunk_size,
        "n_corpus": len(corpus_ids),
        "n_queries": len(query_ids),
        "corpus_ids_sha256": _ids_digest(corpus_ids),
        "query_ids_sha256": _ids_digest(query_ids),
    }
    mf = parts_dir / "manifest.json"
    if parts_dir.is_dir():
        try:
            old = json.loads(mf.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            old = None
        if old != manifest:
            shutil.rmtree(parts_dir)
    parts_dir.mkdir(parents=True, exist_ok=True)
    if not mf.is_file():
        _atomic_write_bytes(mf, json.dumps(manifest, indent=2).encode("utf-8"))

    plan = [
        ("queries", len(query_ids), lambda: (spec.format_query(ds.queries[q]) for q in query_ids)),
        ("corpus", len(corpus_ids), lambda: (spec.format_document(t, x) for _i, t, x in ds.iter_corpus())),
    ]
    n_chunks = {kind: (n + chunk_size - 1) // chunk_size for kind, n, _ in plan}

    def part_file(kind: str, i: int) -> Path:
        return parts_dir / f"{kind}-{i:06d}.npy"

    def part_ok(kind: str, i: int, n: int) -> bool:
        f = part_file(kind, i)
        if not f.is_file():
            return False
        try:
            a = np.load(f, mmap_mode="r")
        except (ValueError, OSError):
            return False
        want = min(chunk_size, n - i * chunk_size)
        return a.ndim == 2 and a.shape[0] == want and a.dtype == np.float16

    done_rows = sum(
        min(chunk_size, n - i * chunk_size) for kind, n, _ in plan for i in range(n_chunks[kind]) if part_ok(kind, i, n)
    )
    total = len(query_ids) + len(corpus_ids)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, initial=done_rows, unit="text", desc=f"embed {ds.name} / {spec.name}", file=sys.stderr)
    encoder_obj: Any = model
    info: dict[str, Any] = {}
    timings: dict[str, float] = {}
    dim: int | None = None
    try:
        for kind, n, texts in plan:
            t0 = time.perf_counter()
            for i, chunk in enumerate(_chunks(texts(), chunk_size)):
                if part_ok(kind, i, n):
                    continue
                if encoder_obj is None:
                    encoder_obj = load_encoder(spec, device=device, batch_size=batch_size)
                E = np.asarray(encoder_obj.encode(chunk))
                if E.ndim != 2 or E.shape[0] != len(chunk):
                    raise ValueError(f"encoder {spec.name!r}: returned shape {E.shape} for {len(chunk)} texts")
                if dim is not None and E.shape[1] != dim:
                    raise ValueError(f"encoder {spec.name!r}: dimension changed from {dim} to {E.shape[1]}")
                dim = E.shape[1]
                if spec.normalize:
                    E = l2_normalize(E)
                _atomic_save_npy(part_file(kind, i), E.astype(np.float16))
                if bar is not None:
                    bar.update(len(chunk))
            timings[kind] = round(time.perf_counter() - t0, 2)
    finally:
        if bar is not None:
            bar.close()
    for kind, n, _ in plan:
        for i in range(n_chunks[kind]):
            if not part_ok(kind, i, n):
                raise ValueError(f"{part_file(kind, i)}: missing or malformed after encoding")
    dims = {np.load(part_file(k, 0), mmap_mode="r").shape[1] for k, n, _ in plan if n_chunks[k]}
    if len(dims) != 1:
        raise ValueError(f"{parts_dir}: parts have different dimensions {sorted(dims)}")
    dim = dims.pop()
    for kind, n, _ in plan:
        _assemble([part_file(kind, i) for i in range(n_chunks[kind])], path / f"{kind}.npy", n, dim)
    _write_ids(path / "corpus_ids.txt", corpus_ids)
    _write_ids(path / "query_ids.txt", query_ids)
    if encoder_obj is not None and hasattr(encoder_obj, "info"):
        info = dict(encoder_obj.info())
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
        "shapes": {"corpus": [len(corpus_ids), dim], "queries": [len(query_ids), dim]},
        "row_order": "corpus.jsonl / queries.jsonl file order (ids in corpus_ids.txt / query_ids.txt)",
        "chunk_size": chunk_size,
        "dataset": {"name": ds.name, "path": str(ds.path.resolve())},
        "encode_wall_seconds": timings,
        "python_version": sys.version.split()[0],
        "numpy_version": np.__version__,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command if command is not None else " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
    }
    info.pop("dimension", None)
    meta.update(info)
    _write_meta(path, meta)
    shutil.rmtree(parts_dir, ignore_errors=True)
    return load_embeddings(ds, spec, cache_dir=cache_dir)
