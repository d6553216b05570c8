"""The resumable encoding job: a dataset's texts encoded in chunks into a new embedding cache.

:func:`encode_dataset` checks its inputs, keeps a complete cache that is still valid, and
builds a new one in ``<encoder>.partial/`` beside the cache folder: chunks of ``chunk_size``
rows saved as part files under ``.partial/`` with a manifest fingerprinting the inputs, so
an interrupted run resumes from the chunks already saved; then the parts are assembled,
``meta.json`` is written last and the folder replaces the old cache (the format, reading and
writing: :mod:`asymgeo.data.cache`).  The chunks are encoded here or on workers
(:mod:`asymgeo.data.encode_workers`: local processes or Ray), byte for byte the same.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import atomic_path
from .._validation import check_int
from .beir import BeirDataset, load_beir
from .cache import (
    CACHE_FORMAT,
    EmbeddingCache,
    _atomic_save_npy,
    _atomic_write_bytes,
    _build_dir,
    _check_cache_dirs,
    _id_file_digests,
    _open_folder,
    _replace_dir,
    _write_ids,
    _write_meta,
    cache_fingerprint,
    cache_path,
    load_embeddings,
    validate_embeddings,
    verify_cache,
)
from .encode_workers import (
    MAX_WORKER_RESTARTS,
    MKL_CBWR_MODE,
    Chunk,
    _check_worker_args,
    _checked_part,
    _declared_dimension,
    _encode_batches,
    _encode_on_pool,
    _encode_on_ray,
    _encoder_info,
    _reproducible_cpu_math,
)
from .encoders import EncoderSpec, TextEncoder, check_device, get_encoder, load_encoder

__all__ = ["encode_dataset", "MAX_WORKER_RESTARTS", "MKL_CBWR_MODE"]


# --------------------------------------------------------------------------- the plan
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


# --------------------------------------------------------------------------- progress
def _progress_bar(plan: _EncodePlan, done: set[tuple[str, int]], progress: bool) -> Any:
    if not progress:
        return None
    from tqdm.auto import tqdm

    total = sum(n for _k, n in plan.kinds())
    return tqdm(total=total, initial=total - _missing_rows(plan, done), unit="text",
                desc=f"embed {plan.ds.name} / {plan.spec.name}", file=sys.stderr)


# --------------------------------------------------------------------------- in this process
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
class _EncodeRun:
    """One run of an encoding job on workers: the plan, the chunks done, the progress bar and the clocks.

    The :class:`~asymgeo.data.encode_workers.ChunkJob` that the worker runners drive.
    """

    def __init__(self, plan: _EncodePlan, done: set[tuple[str, int]], progress: bool):
        self.plan, self.done, self.progress = plan, set(done), progress
        self.spec, self.chunk_size = plan.spec, plan.chunk_size
        self.missing_rows = _missing_rows(plan, self.done)  # as the run starts: what the disk must hold
        self.bar: Any = None
        self._started: dict[str, float] = {}
        self._finished: dict[str, float] = {}

    def todo(self) -> Iterator[Chunk]:
        for chunk in _todo(self.plan, self.done):
            self._started.setdefault(chunk[0], time.perf_counter())
            yield chunk

    def part_file(self, kind: str, i: int) -> Path:
        return self.plan.part_file(kind, i)

    def chunk_name(self, chunk: Chunk) -> str:
        return _chunk_name(self.plan, chunk[0], chunk[1], len(chunk[2]))

    def parts_dimension(self) -> int:
        return _parts_dimension(self.plan)

    def start_build(self, dim: int) -> None:
        _start_build(self.plan, dim, self.missing_rows)

    def open_progress(self) -> None:
        if self.bar is None:
            self.bar = _progress_bar(self.plan, self.done, self.progress)

    def save(self, chunk: Chunk, E: np.ndarray) -> None:
        _atomic_save_npy(self.plan.part_file(chunk[0], chunk[1]), E)
        self.done.add((chunk[0], chunk[1]))
        self.finished(chunk)

    def finished(self, chunk: Chunk) -> None:
        self._finished[chunk[0]] = time.perf_counter()
        if self.bar is not None:
            self.bar.update(len(chunk[2]))

    def unfinished(self, chunks: list[Chunk]) -> list[Chunk]:
        sizes = dict(self.plan.kinds())
        order = {kind: k for k, (kind, _n) in enumerate(self.plan.kinds())}
        out = []
        for chunk in sorted(chunks, key=lambda c: (order[c[0]], c[1])):
            if self.plan.part_ok(chunk[0], chunk[1], sizes[chunk[0]]):
                self.finished(chunk)
            else:
                out.append(chunk)
        return out

    def timings(self) -> dict[str, float]:
        """Seconds per kind, from its first chunk's submission to its last chunk's part."""
        return {kind: round(self._finished.get(kind, t0) - t0, 2) if (t0 := self._started.get(kind)) else 0.0
                for kind, _n in self.plan.kinds()}

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# --------------------------------------------------------------------------- the cache
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
        run = _EncodeRun(plan, done, progress)
        run_on = _encode_on_ray if wk.executor == "ray" else _encode_on_pool
        try:
            info = run_on(run, wk, model, device, batch_size)
        finally:
            run.close()
        timings = run.timings()
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
