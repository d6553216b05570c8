"""Executors: run cell functions in-process, on a local process pool, or on a Ray cluster.

:func:`run_cells` calls ``on_done(config, record, seconds)`` in the driver as each cell
finishes (completion order) and ``on_error`` when one raises; the orchestration in
:mod:`asymgeo.experiments.runner` writes the records.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from .._runtime import available_cpus, limit_blas_threads
from .._validation import check_int
from .config import import_cell

__all__ = ["EXECUTORS", "run_cells"]

EXECUTORS = ("local", "ray")

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


class _single_thread_env:
    """Set the BLAS/OpenMP thread variables to 1 while worker processes are spawned.

    Cells are small; one BLAS thread per worker process avoids oversubscribing the
    cores (with ``workers`` processes each starting a BLAS thread per core, a 2-core
    machine ran the RQ1 cells 4x slower).
    """

    def __enter__(self):
        self._old = {k: os.environ.get(k) for k in _THREAD_VARS}
        for k in _THREAD_VARS:
            os.environ[k] = "1"
        return self

    def __exit__(self, *exc):
        for k, v in self._old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        return False


def _thread_limit():
    """One BLAS and OpenMP thread per cell (in-process and in pool workers)."""
    return limit_blas_threads(1, user_api=None)


def _worker_init() -> None:
    """Pool workers ignore Ctrl-C: the driver handles it (cancels pending cells, keeps
    finished ones) instead of every worker printing a traceback."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _execute(cell: str, config: dict) -> tuple[dict, float]:
    """Run one cell in a worker: import the function, time it, return (record, seconds)."""
    fn = import_cell(cell)
    t0 = time.perf_counter()
    with _thread_limit():
        record = fn(dict(config))
    if not isinstance(record, dict):
        raise TypeError(f"cell {cell}: expected a dict record, got {type(record).__name__}")
    return record, time.perf_counter() - t0



def _ray_module():
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "the Ray executor needs the optional dependency ray: pip install 'asymgeo[ray]'"
        ) from exc
    return ray



def run_cells(
    cell: str,
    configs: Sequence[dict],
    on_done: Callable[[dict, dict, float], None],
    on_error: Callable[[dict, BaseException, str], None],
    *,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
) -> None:
    """Execute ``configs`` with ``cell``; call ``on_done(config, record, seconds)`` in the
    driver as each finishes (in completion order) and ``on_error`` when one raises.

    ``executor="local"`` with ``workers == 1`` runs in-process; otherwise a process pool
    of ``workers`` (default: CPU count).  ``executor="ray"`` submits Ray tasks (at most
    ``4 * cluster CPUs`` in flight) to the cluster at ``address`` (or a local instance,
    or the one already initialised).  A ``KeyboardInterrupt`` cancels pending cells and
    propagates; cells already finished have been passed to ``on_done``.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"executor: expected one of {EXECUTORS}, got {executor!r}")
    workers = check_int(workers, "workers") if workers else available_cpus()
    if executor == "ray":
        _run_ray(cell, configs, on_done, on_error, workers=workers, address=address)
        return
    if address is not None:
        raise ValueError("address: only meaningful with executor='ray'")
    if workers == 1:
        _run_in_process(cell, configs, on_done, on_error)
    else:
        _run_pool(cell, configs, on_done, on_error, workers)


def _run_in_process(cell: str, configs: Sequence[dict], on_done: Callable[[dict, dict, float], None],
                    on_error: Callable[[dict, BaseException, str], None]) -> None:
    """Run the cells one after the other in this process."""
    for cfg in configs:
        try:
            record, secs = _execute(cell, cfg)
        except Exception as exc:  # noqa: BLE001 - reported, sweep goes on
            on_error(cfg, exc, traceback.format_exc())
            continue
        on_done(cfg, record, secs)


def _run_pool(cell: str, configs: Sequence[dict], on_done: Callable[[dict, dict, float], None],
              on_error: Callable[[dict, BaseException, str], None], workers: int) -> None:
    """Run the cells on a local process pool of ``workers`` processes."""
    import multiprocessing

    # Linux: fork (cheap start; each cell caps BLAS at one thread via threadpoolctl).
    # Elsewhere: spawn, with the thread variables set to 1 while the workers start.
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method),
                                  initializer=_worker_init)
    try:
        with _single_thread_env():
            futures = {pool.submit(_execute, cell, cfg): cfg for cfg in configs}
        for fut in cf.as_completed(futures):
            cfg = futures[fut]
            try:
                record, secs = fut.result()
            except cf.process.BrokenProcessPool:
                raise
            except Exception as exc:  # noqa: BLE001
                on_error(cfg, exc, "".join(traceback.format_exception(exc)))
                continue
            on_done(cfg, record, secs)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    else:
        pool.shutdown(wait=True)


def _run_ray(cell, configs, on_done, on_error, *, workers: int, address: str | None) -> None:
    ray = _ray_module()
    started_here = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(num_cpus=workers, **kwargs)
        started_here = True
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_execute)
        cpus = int(ray.cluster_resources().get("CPU", workers)) or workers
        limit = max(1, 4 * cpus)
        pending = list(configs)[::-1]
        in_flight: dict[Any, dict] = {}
        try:
            while pending or in_flight:
                while pending and len(in_flight) < limit:
                    cfg = pending.pop()
                    in_flight[remote.remote(cell, cfg)] = cfg
                done, _ = ray.wait(list(in_flight), num_returns=1)
                for ref in done:
                    cfg = in_flight.pop(ref)
                    try:
                        record, secs = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001
                        cause = getattr(exc, "cause", None) or exc
                        on_error(cfg, cause, str(exc))
                        continue
                    on_done(cfg, record, secs)
        except BaseException:
            for ref in in_flight:
                ray.cancel(ref, force=True)
            raise
    finally:
        if started_here:
            ray.shutdown()

