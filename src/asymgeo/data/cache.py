"""The float16 embedding cache: its format, memory-mapped reads, verification, atomic writes.

Layout per (dataset, encoder), ``<cache_dir>/<dataset>/<encoder>/``::

    corpus.npy       (N, p) float16, rows in corpus.jsonl order
    corpus_ids.txt   N lines
    queries.npy      (Q, p) float16, rows in queries.jsonl order
    query_ids.txt    Q lines
    meta.json        model, versions, prefixes, max tokens, normalisation, dtype, command

``meta.json`` is written last (atomically), so a folder with a ``meta.json`` is complete;
every other file is also written to a temporary name and renamed.  A cache is built in
``<encoder>.partial/`` beside its folder (:func:`_build_dir`) by the resumable encoding job,
:mod:`asymgeo.data.encoding`, whose chunks are encoded here or on workers
(:mod:`asymgeo.data.encode_workers`).  The caches in ``../shared/embeddings/<dataset>/<encoder>/``
have this layout and load as they are.

The encoding names this module held until 0.2 (``encode_dataset``, ``EXECUTORS``,
``MAX_WORKER_RESTARTS``, ...) still resolve here for one release, with a :class:`DeprecationWarning`
naming their new module.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import atomic_path, atomic_write_bytes
from .._deprecation import warn_deprecated
from .._ids import IdIndex
from .._runtime import json_default
from .._validation import mark_finite
from .beir import BeirDataset
from .encoders import EncoderSpec, get_encoder
from .paths import cache_root

__all__ = [
    "EmbeddingCache",
    "cache_root",
    "cache_path",
    "load_embeddings",
    "write_embeddings",
    "cache_fingerprint",
    "verify_cache",
    "check_cache_encoder",
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
    verify : check the cache was made by ``encoder`` (:func:`check_cache_encoder`: the encoder,
        model and conventions its ``meta.json`` records) and belongs to ``dataset`` (when a
        dataset, not a bare name, is given).
    validate : check every embedding row (see :func:`validate_embeddings`).

    Raises
    ------
    FileNotFoundError
        No cache there, or an incomplete one (an interrupted encoding; rerun to resume).
    ValueError
        Files disagree (row counts vs ids, dimensions, dtype), the cache was made by another
        encoder or built from other data than ``dataset``, or a row is zero, non-finite or not normalised.
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
        if not hint:
            hint = (f" (meta.json is written last and marks a complete cache: for embeddings computed elsewhere "
                    f"run `asymgeo import {_dataset_name(dataset)} --encoder {get_encoder(encoder).name} "
                    "--corpus-embeddings C.npy --corpus-ids C.txt --query-embeddings Q.npy --query-ids Q.txt`, "
                    "which checks the arrays against the dataset and writes it; or encode with `asymgeo embed`)")
        raise FileNotFoundError(f"{path / 'meta.json'}: missing, the cache is incomplete{hint}")
    cache = _open_folder(path, mmap)
    if verify and isinstance(dataset, BeirDataset):
        verify_cache(cache, dataset, encoder)
    elif verify:  # no dataset to compare with: still the encoder the cache was made by
        check_cache_encoder(cache, encoder, _dataset_name(dataset))
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


def _check_encoder_name(cache: EmbeddingCache, dataset: BeirDataset | str, encoder: str | EncoderSpec) -> None:
    """The embeddings of one encoder never stand in for another's: the encoder the cache records
    (``meta["encoder"]``, else its folder name) must be ``encoder`` or one of its aliases."""
    want = get_encoder(encoder).name
    recorded = str(cache.meta.get("encoder") or cache.path.name)
    if recorded != want and get_encoder(recorded).name != want:
        name = dataset.name if isinstance(dataset, BeirDataset) else dataset
        raise ValueError(f"{cache.path}: embeddings of encoder {recorded!r}, not {want!r}; pass the {want} "
                         f"cache (asymgeo embed {name} --encoder {want})")


def _registered(spec: EncoderSpec) -> bool:
    from .encoders import ENCODERS

    return ENCODERS.get(spec.name) == spec


def _same_model(recorded: str, spec: EncoderSpec) -> bool:
    """Whether the model id a cache records is ``spec``'s: equal ids, or both resolving to one
    encoder name; two ids outside the registry that differ only in their folder (a local path
    and its folder name) count as the same, since only the folder names the cache."""
    if recorded == spec.model or recorded == spec.name:
        return True
    other = get_encoder(recorded)
    if other.name == spec.name:
        return True
    return not (_registered(other) or _registered(spec))


def _reembed_hint(dataset: str, spec: EncoderSpec) -> str:
    return (f"re-embed with `asymgeo embed {dataset} --encoder {spec.name}` or point --encoder at the right "
            "folder")


def _recorded_dimension(cache: EmbeddingCache) -> int:
    dim = cache.meta.get("dimension")
    return dim if isinstance(dim, int) and not isinstance(dim, bool) else cache.dim


def _check_recorded_model(cache: EmbeddingCache, dataset: str, encoder: str | EncoderSpec) -> None:
    """The model ``meta.json`` records (``model_name``) is ``encoder``'s: a cache folder copied
    under another encoder's name is refused naming both models and their dimensions.  Only
    what the cache records is compared (a legacy cache naming no model passes); a cache of the
    same model with another width (an encoder object passed to ``encode_dataset`` under a
    registry name) is the user's own and passes too."""
    spec = get_encoder(encoder)
    model = cache.meta.get("model_name")
    if not isinstance(model, str) or not model.strip() or _same_model(model, spec):
        return
    dim = _recorded_dimension(cache)
    want = f"{spec.name} (dim {spec.dimension})" if spec.dimension is not None else spec.name
    raise ValueError(f"{cache.path / 'meta.json'}: made by {model} (dim {dim}), not {want}: "
                     f"{_reembed_hint(dataset, spec)}")


def _check_recorded_settings(cache: EmbeddingCache, dataset: str, encoder: str | EncoderSpec | None) -> None:
    """The conventions ``meta.json`` records (``normalised``, ``prefixes``, ``max_tokens``) are
    ``encoder``'s; a setting the cache does not record is not compared, nor any when the
    conventions are unknown (no ``encoder``, or a bare name outside the registry)."""
    if encoder is None:
        return
    spec = get_encoder(encoder)
    if not (isinstance(encoder, EncoderSpec) or _registered(spec)):
        return
    meta = cache.meta
    checks: list[tuple[str, Any, Any]] = []
    norm = meta.get("normalised", meta.get("normalized"))
    if isinstance(norm, bool):
        checks.append(("normalised", norm, spec.normalize))
    prefixes = meta.get("prefixes")
    if isinstance(prefixes, dict):
        own = {"query": spec.query_prefix, "document": spec.document_prefix}
        if any(key in prefixes and prefixes[key] != own[key] for key in own):
            checks.append(("prefixes", prefixes, own))
    tokens = meta.get("max_tokens")
    if isinstance(tokens, int) and not isinstance(tokens, bool):
        checks.append(("max_tokens", tokens, spec.max_tokens))
    for key, was, now in checks:
        if was != now:
            raise ValueError(f"{cache.path / 'meta.json'}: made with {key} = {was!r}, but {spec.name} has "
                             f"{key} = {now!r}: {_reembed_hint(dataset, spec)}")


def check_cache_encoder(cache: EmbeddingCache, encoder: str | EncoderSpec, dataset: BeirDataset | str) -> None:
    """Refuse a cache that was not made by ``encoder``: the encoder it records (``meta["encoder"]``,
    else its folder name), its model (``model_name``; the refusal names both models' widths),
    and its conventions (normalisation, prefixes, maximum tokens), each compared when
    ``meta.json`` records it.

    Raises
    ------
    ValueError
        Naming ``meta.json`` (or the folder), what the cache was made by and ``encoder``.
    """
    name = dataset.name if isinstance(dataset, BeirDataset) else str(dataset)
    _check_encoder_name(cache, name, encoder)
    _check_recorded_model(cache, name, encoder)
    _check_recorded_settings(cache, name, encoder)


def verify_cache(cache: EmbeddingCache, dataset: BeirDataset, encoder: str | EncoderSpec | None = None) -> None:
    """Refuse a cache that was not built from ``dataset`` (and ``encoder``) as they are now.

    A cache written by this version carries ``meta["fingerprint"]``: its dataset digests
    (ids and texts of corpus and queries), the encoder settings and the SHA-256 of its
    two id files; each is compared with the dataset, the encoder and the files on disk.
    An older cache without a fingerprint (such as ``../shared/embeddings``) is checked by
    its ids: ``corpus_ids.txt`` and ``query_ids.txt`` must list the dataset's ids in file
    order, which catches a cache of another corpus version or with reordered rows.
    With ``encoder``, the cache must also have been made by it (:func:`check_cache_encoder`).

    Raises
    ------
    ValueError
        Naming the first difference and how to rebuild the cache.
    """
    hint = _rebuild_hint(cache, dataset, encoder)
    if encoder is not None:
        _check_encoder_name(cache, dataset, encoder)
        _check_recorded_model(cache, dataset.name, encoder)
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
    _check_recorded_settings(cache, dataset.name, encoder)  # a legacy cache's (a fingerprint's are named above)
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


def _build_dir(path: Path) -> Path:
    """Where a cache is built before it replaces ``path``: ``<encoder>.partial`` beside it."""
    return path.with_name(path.name + ".partial")


# --------------------------------------------------------------------------- moved in 0.2
#: the encoding names this module held until 0.2, by the module that holds them now; removed in 0.3
_MOVED: dict[str, tuple[str, ...]] = {
    "asymgeo.data.encoding": (
        "encode_dataset", "_EncodePlan", "_assemble", "_assemble_cache", "_build_reusable", "_cache_meta",
        "_check_disk_space", "_check_encode_inputs", "_chunk_name", "_chunks", "_done_chunks", "_encode_chunks",
        "_existing_cache", "_folder_bytes", "_format_bytes", "_missing_rows", "_parts_dimension",
        "_prepare_build_dir", "_progress_bar", "_start_build", "_todo", "_torch_threads",
    ),
    "asymgeo.data.encode_workers": (
        "EXECUTORS", "MAX_WORKER_RESTARTS", "MKL_CBWR_MODE", "_RAY_ENCODERS", "_WORKER", "_WorkerPlan",
        "_check_worker_args", "_checked_part", "_declared_dimension", "_encode_batches", "_encode_on_pool",
        "_encode_on_ray", "_encoder_info", "_open_worker_encoder", "_ray_encode", "_ray_encoder", "_ray_get",
        "_ray_info", "_ray_options", "_reproducible_cpu_math", "_set_threads", "_worker_devices", "_worker_encode",
        "_worker_encoder", "_worker_info", "_worker_init", "_worker_payload",
    ),
}
_MOVED_TO = {name: module for module, names in _MOVED.items() for name in names}


def __getattr__(name: str) -> Any:
    """``asymgeo.data.cache.encode_dataset`` and the other moved names: the object from its new module,
    after one :class:`DeprecationWarning` per name (it is then cached here)."""
    module = _MOVED_TO.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warn_deprecated(f"{__name__}.{name} moved to {module}.{name}; import it from there")
    # looked up by name, as asymgeo._moved_modules does: the new modules import this one, not the reverse
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
