"""Executors: run cell functions in-process, on a local process pool, or on a Ray cluster.

:func:`run_cells` calls ``on_done(config, record, seconds)`` in the driver as each cell
finishes (completion order) and ``on_error`` when one raises; the orchestration in
:mod:`asymgeo.experiments.runner` writes the records.  The machinery is the package's one
executor layer, :mod:`asymgeo._executor`; this module adds what is particular to cells.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from .._executor import ProcessPool, Task, ray_session, run_inline, run_ray
from .._runtime import available_cpus, limit_blas_threads
from .._validation import check_int
from .config import import_cell

__all__ = ["EXECUTORS", "run_cells"]

EXECUTORS = ("local", "ray")


def _thread_limit():
    """One BLAS and OpenMP thread per cell (in-process and in pool workers)."""
    return limit_blas_threads(1, user_api=None)


def _execute(cell: str, config: dict) -> tuple[dict, float]:
    """Run one cell in a worker: import the function, time it, return (record, seconds)."""
    fn = import_cell(cell)
    t0 = time.perf_counter()
    with _thread_limit():
        record = fn(dict(config))
    if not isinstance(record, dict):
        raise TypeError(f"cell {cell}: expected a dict record, got {type(record).__name__}")
    return record, time.perf_counter() - t0


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
    of ``workers`` (default: CPU count; ``fork`` on Linux, BLAS threads at 1, workers ignore
    Ctrl-C).  ``executor="ray"`` submits Ray tasks (at most ``4 * cluster CPUs`` in flight)
    to the cluster at ``address`` (or a local instance, or the one already initialised).  A
    ``KeyboardInterrupt`` cancels pending cells and propagates; cells already finished have
    been passed to ``on_done``.  A worker process that dies ends the sweep
    (:class:`concurrent.futures.process.BrokenProcessPool`).
    """
    if executor not in EXECUTORS:
        raise ValueError(f"executor: expected one of {EXECUTORS}, got {executor!r}")
    workers = check_int(workers, "workers") if workers else available_cpus()

    def done(cfg: dict, result: tuple[dict, float]) -> None:
        on_done(cfg, *result)

    tasks = (Task(cfg, (cell, cfg)) for cfg in configs)
    if executor == "ray":
        with ray_session(workers, address) as ray:
            cpus = int(ray.cluster_resources().get("CPU", workers)) or workers
            run_ray(ray, _execute, tasks, done, on_error, options={"num_cpus": 1, "max_retries": 0},
                    max_in_flight=max(1, 4 * cpus))
        return
    if address is not None:
        raise ValueError("address: only meaningful with executor='ray'")
    if workers == 1:
        run_inline(_execute, tasks, done, on_error)
        return
    # Linux: fork (cheap start; each cell caps BLAS at one thread via threadpoolctl).
    # Elsewhere: spawn, with the thread variables set to 1 while the workers start.
    with ProcessPool(workers, single_thread_env=True) as pool:
        pool.run(_execute, tasks, done, on_error)

