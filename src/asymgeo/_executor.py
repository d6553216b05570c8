"""Run tasks in this process, on a local process pool or as Ray tasks; results come back in completion order.

The one executor layer of the package (experiment sweeps and embedding workers both use it).  A
:class:`Task` is a ``key`` (what the driver calls it) and the ``args`` of the task function; each
runner calls ``on_done(key, result)`` in the driver as a task finishes, in completion order, and
``on_error(key, exc, traceback_text)`` when one raises an :class:`Exception` (without ``on_error``
the exception is raised in the driver).  Any other :class:`BaseException` (``KeyboardInterrupt``)
stops the run: pending tasks are cancelled, the tasks already passed to ``on_done`` stay done.

* :func:`run_inline`: one after the other in this process.
* :class:`ProcessPool`: a local process pool (``fork`` on Linux, else ``spawn``) whose workers run a
  per-worker initializer (with :func:`worker_index`) and ignore Ctrl-C; a pool whose worker died is
  started afresh (at most ``max_restarts`` times) and the tasks lost with it are redone.
* :func:`ray_session` and :func:`run_ray`: Ray tasks, at most ``max_in_flight`` at a time; Ray is
  imported only there (the extra ``asymgeo[ray]``).

Knows no asymgeo concept; the standard library only.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = [
    "Task",
    "WorkersDied",
    "ProcessPool",
    "run_inline",
    "worker_index",
    "single_thread_env",
    "ray_module",
    "ray_session",
    "run_ray",
]

K = TypeVar("K")

#: ``on_done(key, result)``
OnDone = Callable[[K, Any], None]
#: ``on_error(key, exception, traceback text)``
OnError = Callable[[K, BaseException, str], None]

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
               "NUMEXPR_NUM_THREADS")


@dataclass(frozen=True)
class Task(Generic[K]):
    """One call ``fn(*args)``, reported to the driver's callbacks under ``key``."""

    key: K
    args: tuple[Any, ...] = ()


class WorkersDied(BrokenProcessPool):
    """A worker process died more often than the pool may be restarted.

    Attributes
    ----------
    lost : the tasks that were in flight (or about to be submitted) when the last pool broke,
        as the pool's ``reclaim`` left them; empty for :meth:`ProcessPool.call`.
    restarts : how many times the pool had been restarted.
    """

    def __init__(self, lost: Sequence[Task[Any]], restarts: int):
        self.lost = list(lost)
        self.restarts = restarts
        super().__init__(f"a worker process died (the pool was restarted {restarts} times); "
                         f"{len(self.lost)} task{'s' if len(self.lost) != 1 else ''} lost")


@contextlib.contextmanager
def single_thread_env() -> Iterator[None]:
    """Set the BLAS/OpenMP thread variables to 1 for the block (worker processes started in it inherit them)."""
    old = {k: os.environ.get(k) for k in THREAD_VARS}
    for k in THREAD_VARS:
        os.environ[k] = "1"
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _report(task: Task[K], exc: BaseException, text: str, on_error: OnError[K] | None) -> None:
    """Pass a task's :class:`Exception` to ``on_error``; raise it without one, and raise any other exception."""
    if on_error is None or not isinstance(exc, Exception):
        raise exc
    on_error(task.key, exc, text)


def run_inline(fn: Callable[..., Any], tasks: Iterable[Task[K]], on_done: OnDone[K],
               on_error: OnError[K] | None = None) -> None:
    """Run the tasks one after the other in this process.

    Parameters
    ----------
    fn : the task function, called as ``fn(*task.args)``.
    tasks : the tasks, consumed lazily.
    on_done : ``on_done(key, result)`` after each task.
    on_error : ``on_error(key, exc, traceback text)`` for a task raising an :class:`Exception`
        (the run goes on); without it the exception is raised.
    """
    for task in tasks:
        try:
            result = fn(*task.args)
        except Exception as exc:  # noqa: BLE001 - reported, the run goes on
            if on_error is None:
                raise
            on_error(task.key, exc, traceback.format_exc())
            continue
        on_done(task.key, result)


# --------------------------------------------------------------------------- local process pool
#: this process's index among the workers of its pool (set by the pool's initializer)
_WORKER_INDEX: int | None = None


def worker_index() -> int | None:
    """In a :class:`ProcessPool` worker: its index (0, 1, ... in start order; a restarted pool counts from 0
    again); ``None`` elsewhere."""
    return _WORKER_INDEX


def _init_worker(counter: Any, ignore_sigint: bool, initializer: Callable[..., Any] | None,
                 initargs: tuple[Any, ...]) -> None:
    """Pool initializer: ignore Ctrl-C (the driver handles it), take an index, run the caller's initializer."""
    global _WORKER_INDEX
    if ignore_sigint:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    with counter.get_lock():
        _WORKER_INDEX = int(counter.value)
        counter.value += 1
    if initializer is not None:
        initializer(*initargs)


class ProcessPool:
    """A local process pool, started afresh (at most ``max_restarts`` times) when a worker process dies.

    Parameters
    ----------
    workers : number of worker processes.
    initializer, initargs : run once in every worker process, after it ignores Ctrl-C
        (``ignore_sigint``) and takes its :func:`worker_index`.
    start_method : ``"fork"``, ``"spawn"`` or ``"forkserver"``; default ``fork`` on Linux, else ``spawn``.
    ignore_sigint : workers ignore Ctrl-C, so only the driver reacts to it.
    single_thread_env : set the BLAS/OpenMP thread variables to 1 while tasks are submitted
        (worker processes start then and inherit them).
    max_restarts : fresh pools started after a worker died; one more death raises :class:`WorkersDied`.

    Use it as a context manager: leaving the block normally shuts the pool down; leaving it by
    an exception (or Ctrl-C) first terminates the workers.
    """

    def __init__(self, workers: int, *, initializer: Callable[..., Any] | None = None,
                 initargs: tuple[Any, ...] = (), start_method: str | None = None, ignore_sigint: bool = True,
                 single_thread_env: bool = False, max_restarts: int = 0):
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers: expected a positive integer, got {workers!r}")
        self.workers = workers
        self.max_restarts = int(max_restarts)
        self.restarts = 0
        self.start_method = start_method or ("fork" if sys.platform.startswith("linux") else "spawn")
        self._init = (ignore_sigint, initializer, tuple(initargs))
        self._single_thread = single_thread_env
        self._pool = self._start()

    def _start(self) -> cf.ProcessPoolExecutor:
        import multiprocessing

        ctx = multiprocessing.get_context(self.start_method)
        return cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, initializer=_init_worker,
                                      initargs=(ctx.Value("i", 0), *self._init))

    def _submit(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> cf.Future:
        with single_thread_env() if self._single_thread else contextlib.nullcontext():
            return self._pool.submit(fn, *args)

    def restart(self, lost: Sequence[Task[Any]] = ()) -> None:
        """Replace the broken pool by a fresh one; after ``max_restarts`` raise :class:`WorkersDied` with ``lost``."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.restarts += 1
        if self.restarts > self.max_restarts:
            raise WorkersDied(lost, self.restarts - 1)
        self._pool = self._start()

    def call(self, fn: Callable[..., Any], *args: Any, copies: int = 1) -> Any:
        """``fn(*args)`` on a worker (``copies`` times at once) and its first result, redone on a fresh pool
        if a worker dies.  The pool starts a process per task submitted while none is idle, so
        ``copies=workers`` starts (and initialises) every worker together."""
        while True:
            try:
                futures = [self._submit(fn, args) for _ in range(copies)]
                return [f.result() for f in futures][0]
            except BrokenProcessPool:
                self.restart()

    def run(self, fn: Callable[..., Any], tasks: Iterable[Task[K]], on_done: OnDone[K],
            on_error: OnError[K] | None = None, *, max_in_flight: int | None = None,
            reclaim: Callable[[list[Task[K]]], list[Task[K]]] | None = None) -> None:
        """Run ``fn(*task.args)`` for every task on the pool; call back in the driver in completion order.

        Parameters
        ----------
        fn : the task function (picklable: module level).
        tasks : consumed lazily, a task when there is room for it (``max_in_flight``; default all at once).
        on_done : ``on_done(key, result)``.
        on_error : ``on_error(key, exc, traceback text)`` for a task raising an :class:`Exception`;
            without it the exception is raised here.
        reclaim : when a worker dies, the tasks in flight are lost; ``reclaim(lost)`` returns those to
            redo (in the order to redo them; default all, as they were submitted).  They go first on
            the fresh pool, or in :attr:`WorkersDied.lost` once the restarts are used up.
        """
        limit = max_in_flight if max_in_flight is not None else sys.maxsize
        source = iter(tasks)
        redo: list[Task[K]] = []
        in_flight: dict[cf.Future, Task[K]] = {}
        while True:
            broken = False
            while len(in_flight) < limit:
                task = redo.pop(0) if redo else next(source, None)
                if task is None:
                    break
                try:
                    fut = self._submit(fn, task.args)
                except BrokenProcessPool:
                    redo.insert(0, task)
                    broken = True
                    break
                in_flight[fut] = task
            if not in_flight and not broken:
                return
            if not broken:
                for fut in cf.wait(in_flight, return_when=cf.FIRST_COMPLETED).done:
                    task = in_flight.pop(fut)
                    exc = fut.exception()
                    if isinstance(exc, BrokenProcessPool):
                        redo.append(task)
                        broken = True
                    elif exc is not None:
                        _report(task, exc, "".join(traceback.format_exception(exc)), on_error)
                    else:
                        on_done(task.key, fut.result())
            if broken:
                lost = [*redo, *in_flight.values()]
                in_flight.clear()
                redo = reclaim(lost) if reclaim is not None else lost
                self.restart(redo)

    def close(self, ok: bool = True) -> None:
        """Shut the pool down; unless ``ok`` (an error or Ctrl-C), terminate the workers first."""
        if not ok:
            for proc in list((getattr(self._pool, "_processes", None) or {}).values()):
                with contextlib.suppress(Exception):
                    proc.terminate()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> ProcessPool:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.close(ok=exc_type is None)


# --------------------------------------------------------------------------- Ray
def ray_module(what: str = "the Ray executor") -> Any:
    """``import ray``, or an :class:`ImportError` saying ``what`` needs the extra ``asymgeo[ray]``."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(f"{what} needs the optional dependency ray: pip install 'asymgeo[ray]'") from exc
    return ray


@contextlib.contextmanager
def ray_session(workers: int, address: str | None = None, *, what: str = "the Ray executor") -> Iterator[Any]:
    """The ``ray`` module, connected: to ``address``, else to the Ray already initialised, else to a local
    instance of ``workers`` CPUs; a connection made here is shut down when the block ends."""
    ray = ray_module(what)
    started_here = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(num_cpus=workers, **kwargs)
        started_here = True
    try:
        yield ray
    finally:
        if started_here:
            ray.shutdown()


def _ray_cause(ray: Any, exc: Exception) -> BaseException:
    """A failed task's own exception (``RayTaskError.cause``); other Ray errors (a dead worker) as they are."""
    cause = getattr(exc, "cause", None)
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, Exception):
        return cause
    return exc


def run_ray(ray: Any, fn: Callable[..., Any], tasks: Iterable[Task[K]], on_done: OnDone[K],
            on_error: OnError[K] | None = None, *, options: dict[str, Any], max_in_flight: int) -> None:
    """Run ``fn(*task.args)`` as Ray tasks (``ray.remote(**options)``), at most ``max_in_flight`` at a time.

    ``ray`` is the module (from :func:`ray_session`).  Results come back to ``on_done(key, result)`` in
    completion order; a failed task goes to ``on_error(key, exc, text)``, ``exc`` being the task's own
    exception (or the Ray error, such as a dead worker's, when there is none) and ``text`` Ray's report;
    without ``on_error`` it is raised.  Any exception here (Ctrl-C, a callback's) cancels the tasks in flight.
    """
    remote = ray.remote(**options)(fn)
    source = iter(tasks)
    in_flight: dict[Any, Task[K]] = {}
    try:
        while True:
            while len(in_flight) < max(1, max_in_flight) and (task := next(source, None)) is not None:
                in_flight[remote.remote(*task.args)] = task
            if not in_flight:
                return
            done, _ = ray.wait(list(in_flight), num_returns=1)
            for ref in done:
                task = in_flight.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - reported
                    _report(task, _ray_cause(ray, exc), str(exc), on_error)
                    continue
                on_done(task.key, result)
    except BaseException:
        for ref in in_flight:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise
