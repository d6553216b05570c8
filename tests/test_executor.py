"""The one executor layer (asymgeo._executor): in-process, process pool (a dead worker's task redone),
errors to the callback, Ctrl-C cancels what is pending, Ray when it is installed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from asymgeo._executor import (
    THREAD_VARS,
    ProcessPool,
    Task,
    WorkersDied,
    ray_module,
    run_inline,
    single_thread_env,
    worker_index,
)


# --------------------------------------------------------------------------- task functions (module level: picklable)
def square(x: int) -> int:
    if x < 0:
        raise ValueError(f"negative: {x}")
    return x * x


def interrupt(x: int) -> int:
    if x == 2:
        raise KeyboardInterrupt
    return x


def die_once(x: int, marker: str) -> int:
    """Ends its worker process (as an out-of-memory kill would) the first time it sees x == 1."""
    if x == 1 and not os.path.exists(marker):
        Path(marker).touch()
        os._exit(1)
    return x * 10


def die_always(x: int) -> int:
    os._exit(1)


_STATE: dict[str, object] = {}


def remember(value: str) -> None:
    _STATE["value"] = value


def whoami(_x: int) -> tuple[int | None, object, str | None]:
    return worker_index(), _STATE.get("value"), os.environ.get("OMP_NUM_THREADS")


def _collect():
    done: dict = {}
    errors: dict = {}
    return done, errors, (lambda k, r: done.__setitem__(k, r)), (lambda k, e, tb: errors.__setitem__(k, (e, tb)))


# --------------------------------------------------------------------------- in this process
def test_inline_runs_in_order_and_reports_errors():
    done, errors, on_done, on_error = _collect()
    run_inline(square, [Task(f"t{x}", (x,)) for x in (1, -2, 3)], on_done, on_error)
    assert done == {"t1": 1, "t3": 9}
    exc, tb = errors["t-2"]
    assert isinstance(exc, ValueError) and "negative: -2" in tb and "Traceback" in tb


def test_inline_without_on_error_raises_and_an_interrupt_propagates():
    with pytest.raises(ValueError, match="negative"):
        run_inline(square, [Task(0, (-1,))], lambda k, r: None)
    seen = []
    with pytest.raises(KeyboardInterrupt):
        run_inline(interrupt, [Task(x, (x,)) for x in range(5)], lambda k, r: seen.append(k), lambda *a: None)
    assert seen == [0, 1]


# --------------------------------------------------------------------------- process pool
def test_pool_delivers_every_result_and_error_in_the_driver():
    done, errors, on_done, on_error = _collect()
    with ProcessPool(2) as pool:
        pool.run(square, (Task(x, (x,)) for x in [*range(6), -1]), on_done, on_error, max_in_flight=3)
    assert done == {x: x * x for x in range(6)}
    assert list(errors) == [-1] and isinstance(errors[-1][0], ValueError) and "negative: -1" in errors[-1][1]


def test_pool_without_on_error_raises_the_task_error():
    with ProcessPool(1) as pool, pytest.raises(ValueError, match="negative: -3"):
        pool.run(square, [Task(0, (-3,))], lambda k, r: None)


def test_workers_run_the_initializer_take_an_index_and_one_blas_thread(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    with ProcessPool(2, initializer=remember, initargs=("hello",), single_thread_env=True) as pool:
        got = pool.call(whoami, 0, copies=2)
    index, value, omp = got
    assert index in (0, 1) and value == "hello"
    assert "OMP_NUM_THREADS" not in os.environ  # restored in the driver
    if pool.start_method != "fork":  # forked workers copy the driver's environment at start only
        assert omp == "1"


def test_single_thread_env_sets_and_restores(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    with single_thread_env():
        assert all(os.environ[k] == "1" for k in THREAD_VARS)
    assert os.environ["OMP_NUM_THREADS"] == "8" and "MKL_NUM_THREADS" not in os.environ


def test_a_killed_worker_restarts_the_pool_and_its_task_is_redone(tmp_path):
    marker = str(tmp_path / "died")
    done: dict = {}
    reclaimed: list = []

    def reclaim(lost):
        reclaimed.append(sorted(t.key for t in lost))
        return sorted(lost, key=lambda t: t.key)

    with ProcessPool(1, max_restarts=1) as pool:
        pool.run(die_once, [Task(x, (x, marker)) for x in range(4)], done.__setitem__, max_in_flight=2,
                 reclaim=reclaim)
        assert pool.restarts == 1
    assert os.path.exists(marker), "the worker did die"
    assert done == {x: x * 10 for x in range(4)}
    assert reclaimed and 1 in reclaimed[0]


def test_a_worker_that_keeps_dying_raises_after_the_restarts(tmp_path):
    with ProcessPool(1, max_restarts=1) as pool, pytest.raises(WorkersDied) as err:
        pool.run(die_always, [Task("only", (0,))], lambda k, r: None)
    assert [t.key for t in err.value.lost] == ["only"] and err.value.restarts == 1
    with ProcessPool(1) as pool, pytest.raises(WorkersDied):  # call() too; no restart allowed
        pool.call(die_always, 0)


def test_an_interrupt_in_the_driver_cancels_the_pending_tasks():
    pulled = []

    def tasks():
        for x in range(50):
            pulled.append(x)
            yield Task(x, (x,))

    def on_done(key, result):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), ProcessPool(1) as pool:
        pool.run(square, tasks(), on_done, max_in_flight=2)
    assert len(pulled) <= 3  # two in flight (and the one that found no room), not the 50


def test_an_interrupt_raised_in_a_task_propagates():
    with pytest.raises(KeyboardInterrupt), ProcessPool(2) as pool:
        pool.run(interrupt, [Task(x, (x,)) for x in range(4)], lambda k, r: None, lambda *a: None)


def test_workers_must_be_positive():
    with pytest.raises(ValueError, match="workers: expected a positive integer"):
        ProcessPool(0)


# --------------------------------------------------------------------------- Ray
def test_ray_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"^the Ray executor needs the optional dependency ray: pip install 'asymgeo\[ray\]'$"):
        ray_module()


@pytest.mark.xdist_group("ray")  # one Ray cluster at a time under xdist
@pytest.mark.slow
def test_ray_tasks_report_results_and_the_task_error(monkeypatch):
    pytest.importorskip("ray")
    from asymgeo._executor import ray_session, run_ray

    # the Ray workers import this module (the task function) from the same folders as this process
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in sys.path if p))
    done, errors, on_done, on_error = _collect()
    with ray_session(1) as ray:
        run_ray(ray, square, [Task(x, (x,)) for x in (2, -1, 3)], on_done, on_error,
                options={"num_cpus": 1, "max_retries": 0}, max_in_flight=2)
    assert not ray.is_initialized(), "a cluster started by ray_session is shut down"
    assert done == {2: 4, 3: 9}
    assert isinstance(errors[-1][0], ValueError) and "negative: -1" in str(errors[-1][0])
