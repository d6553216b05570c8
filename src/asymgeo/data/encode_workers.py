"""Where chunks of an encoding job are encoded: this process, local worker processes or Ray tasks.

:mod:`asymgeo.data.encoding` runs the resumable job (chunks, part files, assembly); this module
holds what runs on the workers and the driver loops that feed them, on the package's executor
layer :mod:`asymgeo._executor`:

* one chunk, encoded and checked by the same code wherever it runs (:func:`_encode_batches`,
  :func:`_checked_part`), which keeps a cache byte-identical to a one-process run's;
* the worker arguments (:func:`_check_worker_args`, :data:`EXECUTORS`, :data:`MAX_WORKER_RESTARTS`);
* a local process pool (``spawn``) whose workers open their encoder once, a dead worker's
  chunks redone on a fresh pool (:func:`_encode_on_pool`);
* Ray tasks returning their arrays to the driver, which saves them (:func:`_encode_on_ray`).

The job is seen through :class:`ChunkJob`, which :class:`asymgeo.data.encoding._EncodeRun` implements.
"""

from __future__ import annotations

import os
import pickle
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .._executor import ProcessPool, Task, WorkersDied, ray_module, ray_session, run_ray, worker_index
from .._runtime import available_cpus, limit_blas_threads
from .._validation import check_int
from .cache import _atomic_save_npy
from .encoders import EncoderSpec, check_device, l2_normalize, load_encoder

__all__ = ["EXECUTORS", "MAX_WORKER_RESTARTS", "MKL_CBWR_MODE", "ChunkJob"]

#: ``(kind, chunk index, texts)``: one chunk of an encoding job
Chunk = tuple[str, int, list[str]]


class ChunkJob(Protocol):
    """What the worker runners need of an encoding job (implemented by ``encoding._EncodeRun``)."""

    spec: EncoderSpec
    chunk_size: int

    @property
    def missing_rows(self) -> int:
        """Rows of the chunks without a saved part."""
        ...

    def todo(self) -> Iterator[Chunk]:
        """The chunks still to encode, queries first, in file order (lazily; each starts its kind's clock)."""
        ...

    def part_file(self, kind: str, i: int) -> Path:
        """Where chunk ``i`` of ``kind`` is saved."""
        ...

    def chunk_name(self, chunk: Chunk) -> str:
        """The chunk's part file and rows, for error messages."""
        ...

    def parts_dimension(self) -> int:
        """The dimension of the parts saved already."""
        ...

    def start_build(self, dim: int) -> None:
        """Check the disk space for ``dim`` columns, then prepare the build folder."""
        ...

    def open_progress(self) -> None:
        """Start the progress bar (when asked for)."""
        ...

    def save(self, chunk: Chunk, E: np.ndarray) -> None:
        """Save a chunk's checked float16 array as its part; it counts as finished."""
        ...

    def finished(self, chunk: Chunk) -> None:
        """A chunk's part was saved (by a worker): move the progress bar and the kind's clock."""
        ...

    def unfinished(self, chunks: list[Chunk]) -> list[Chunk]:
        """The chunks without a saved part, in file order; those saved count as finished."""
        ...


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


# --------------------------------------------------------------------------- reproducible CPU math
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


# --------------------------------------------------------------------------- worker arguments
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


def _worker_payload(spec: EncoderSpec, model: Any, device: str | None, batch_size: int, workers: int) -> bytes:
    """What every worker needs to open its encoder: the spec, device and batch size, or the pickled ``model``."""
    try:
        return pickle.dumps({"spec": spec, "model": model, "device": device, "batch_size": batch_size},
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


def _worker_init(payload: bytes, threads: int, devices: list[str | None]) -> None:
    """Process-pool initializer: open this worker's encoder once, on device ``devices[w % len]``.

    Ctrl-C is left to the parent (the pool's workers ignore it).  An error opening the encoder
    is kept and raised by the worker's first task, so the parent reports it with its message.
    """
    _reproducible_cpu_math()
    index = worker_index() or 0
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
    """Task: encode one chunk as ``encoding._encode_chunks`` does and save it to ``part`` (atomically);
    return its dimension, or the float16 array itself when ``part`` is ``None``."""
    encoder_obj, spec = _worker_encoder()
    E = _checked_part(_encode_batches(encoder_obj, texts, None), spec, kind, i, chunk_size, len(texts), dim, declared)
    if part is None:
        return E
    _atomic_save_npy(Path(part), E)
    return int(E.shape[1])


# --------------------------------------------------------------------------- on Ray
#: who needs Ray, in the ImportError naming the extra
_RAY_USER = "executor='ray'"

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
    """Ray task: one chunk encoded and checked as ``encoding._encode_chunks`` does; the float16 array
    comes back and the driver saves it (no shared file system needed)."""
    encoder_obj, spec = _ray_encoder(payload, threads, device, token)
    return _checked_part(_encode_batches(encoder_obj, texts, None), spec, kind, i, chunk_size, len(texts), dim,
                         declared)


def _ray_error(ray: Any, exc: BaseException, what: str) -> BaseException:
    """The error to raise for a failed Ray task: the task's own exception (its message), or a one-line
    error for a worker that died ``MAX_WORKER_RESTARTS + 1`` times."""
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = getattr(exc, "cause", None)
        return cause if isinstance(cause, Exception) else exc
    if isinstance(exc, ray.exceptions.RayError):
        return RuntimeError(f"{what}: the Ray task failed {MAX_WORKER_RESTARTS + 1} times "
                            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); the chunks "
                            "saved so far are kept, rerun to resume")
    return exc


def _ray_get(ray: Any, ref: Any, what: str) -> Any:
    """``ray.get`` with the task's own exception (its message) and a one-line error for a dead worker."""
    try:
        return ray.get(ref)
    except Exception as exc:  # noqa: BLE001 - translated
        err = _ray_error(ray, exc, what)
        if err is exc:
            raise
        raise err from None


def _ray_options(ray: Any, wk: _WorkerPlan, model: Any, device: str | None) -> dict[str, Any]:
    """Resources of one task: a CPU, and a share of the cluster's GPUs when the encoder is opened by name
    without a ``device`` (Ray then shows each task its GPU as ``cuda``)."""
    opts: dict[str, Any] = {"num_cpus": 1, "max_retries": MAX_WORKER_RESTARTS}
    gpus = float(ray.cluster_resources().get("GPU", 0)) if model is None and device is None else 0.0
    if gpus > 0:
        opts["num_gpus"] = min(1.0, gpus / wk.workers)
    return opts


def _encode_on_ray(job: ChunkJob, wk: _WorkerPlan, model: Any, device: str | None, batch_size: int) -> dict[str, Any]:
    """Step 4 as one Ray task per missing chunk, at most ``2 * workers`` in flight; the driver saves the parts.

    Return the encoder's ``info()``.
    """
    ray_module(_RAY_USER)
    payload = _worker_payload(job.spec, model, device, batch_size, wk.workers)
    if model is None:
        check_device(device)
    with ray_session(wk.workers, wk.address, what=_RAY_USER) as ray:
        opts = _ray_options(ray, wk, model, device)
        args = (ray.put(payload), wk.threads, device, uuid.uuid4().hex)
        if model is None:
            got = _ray_get(ray, ray.remote(**opts)(_ray_info).remote(*args), f"encoder {job.spec.name!r} (opening it)")
            info, dim = got["info"], got["dimension"]
        else:
            info, dim = _encoder_info(model), _declared_dimension(model)
        _ray_chunks(ray, job, wk, opts, args, dim)
    return info


def _ray_chunks(ray: Any, job: ChunkJob, wk: _WorkerPlan, opts: dict[str, Any], args: tuple, dim: int | None) -> None:
    """Submit the missing chunks as :func:`_ray_encode` tasks (at most ``2 * workers`` in flight), save each
    result as it comes; the disk space is checked before the first save."""
    declared = dim is not None
    if dim is None and not job.missing_rows:
        dim = job.parts_dimension()
    building = dim is not None
    if dim is not None:
        job.start_build(dim)
    job.open_progress()

    def tasks() -> Iterator[Task[Chunk]]:
        for chunk in job.todo():  # ``dim`` as known when the chunk is submitted
            yield Task(chunk, (*args, *chunk, job.chunk_size, dim, declared))

    def on_done(chunk: Chunk, E: np.ndarray) -> None:
        nonlocal dim, building
        if dim is not None and E.shape[1] != dim:  # a task submitted before the dimension was known
            raise ValueError(f"encoder {job.spec.name!r}: dimension changed from {dim} to {E.shape[1]}")
        if not building:
            dim = int(E.shape[1])
            job.start_build(dim)
            building = True
        job.save(chunk, E)

    def on_error(chunk: Chunk, exc: BaseException, _text: str) -> None:
        raise _ray_error(ray, exc, job.chunk_name(chunk)) from None

    run_ray(ray, _ray_encode, tasks(), on_done, on_error, options=opts, max_in_flight=2 * wk.workers)


# --------------------------------------------------------------------------- on a local process pool
def _worker_died(failed: str) -> RuntimeError:
    return RuntimeError(
        f"{failed}: a worker process died while encoding it, the pool was restarted "
        f"{MAX_WORKER_RESTARTS} times and a worker died again (killed, out of memory or a crash in the "
        "encoder); the chunks saved so far are kept, rerun to resume (fewer workers or a smaller batch "
        "size need less memory)")


def _pool_call(pool: ProcessPool, what: str, fn: Any, *args: Any, copies: int = 1) -> Any:
    """``pool.call``, the restarts used up reported as a one-line error naming ``what``."""
    try:
        return pool.call(fn, *args, copies=copies)
    except WorkersDied:
        raise _worker_died(what) from None


def _encode_on_pool(job: ChunkJob, wk: _WorkerPlan, model: Any, device: str | None, batch_size: int) -> dict[str, Any]:
    """Step 4 on ``wk.workers`` local processes (``spawn``); return the encoder's ``info()``.

    Each worker opens its encoder once and saves its chunks' parts; at most ``2 * workers`` chunks
    are in flight.  When a worker dies, every unfinished chunk is redone on a fresh pool (a chunk
    whose part was saved before the crash is kept), at most :data:`MAX_WORKER_RESTARTS` times.
    """
    payload = _worker_payload(job.spec, model, device, batch_size, wk.workers)
    devices = _worker_devices(model, device)
    assert wk.threads is not None
    missing_rows = job.missing_rows
    with ProcessPool(wk.workers, initializer=_worker_init, initargs=(payload, wk.threads, devices),
                     start_method="spawn", max_restarts=MAX_WORKER_RESTARTS) as pool:
        if model is None:
            got = _pool_call(pool, f"encoder {job.spec.name!r} (opening it)", _worker_info, copies=wk.workers)
            info, dim = got["info"], got["dimension"]
        else:
            info, dim = _encoder_info(model), _declared_dimension(model)
        declared = dim is not None
        first: tuple[Chunk, np.ndarray] | None = None
        if dim is None and missing_rows:  # an encoder that does not state its dimension: one chunk first
            chunk = next(job.todo())
            E = _pool_call(pool, job.chunk_name(chunk), _worker_encode, *chunk, None, job.chunk_size, None, False)
            first, dim = (chunk, E), int(E.shape[1])
        elif dim is None:  # nothing left to encode
            dim = job.parts_dimension()
        job.start_build(dim)
        job.open_progress()
        if first is not None:
            job.save(*first)
        tasks = (Task(chunk, (*chunk, str(job.part_file(chunk[0], chunk[1])), job.chunk_size, dim, declared))
                 for chunk in job.todo())

        def reclaim(lost: list[Task[Chunk]]) -> list[Task[Chunk]]:
            by_chunk = {task.key[:2]: task for task in lost}
            return [by_chunk[chunk[:2]] for chunk in job.unfinished([task.key for task in lost])]

        def failed(lost: list[Task[Chunk]]) -> str:
            if not lost:
                return "a chunk"
            name = job.chunk_name(lost[0].key)
            if len(lost) > 1:
                name += f" (or one of the {len(lost) - 1} other chunk{'s' if len(lost) > 2 else ''} in flight)"
            return name

        try:
            pool.run(_worker_encode, tasks, lambda chunk, _dim: job.finished(chunk), max_in_flight=2 * wk.workers,
                     reclaim=reclaim)
        except WorkersDied as exc:
            raise _worker_died(failed(exc.lost)) from None
    return info
