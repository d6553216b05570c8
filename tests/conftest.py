"""Shared test configuration for the asymgeo suite."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Thread use, made explicit before numpy, scipy or torch load (README "Tests on a shared
# machine"): where pytest-xdist runs tests in parallel (pyproject's ``-n auto``), each worker
# gets one BLAS / OpenMP thread, so N workers use N cores instead of N x cores contending
# threads.  The variables reach the CLI subprocesses the tests start too.  A serial run
# (``-n 0``) keeps the machine's defaults; ASYMGEO_TEST_THREADS overrides the per-worker count.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def worker_threads() -> int | None:
    """BLAS threads per test process: 1 under xdist with more than one worker, else None (defaults)."""
    if "ASYMGEO_TEST_THREADS" in os.environ:
        return max(1, int(os.environ["ASYMGEO_TEST_THREADS"]))
    return 1 if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1 else None


_THREADS = worker_threads()
if _THREADS is not None:
    for _var in THREAD_VARS:
        os.environ[_var] = str(_THREADS)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

if _THREADS is not None:
    # numpy may have loaded before this file (a plugin): cap its BLAS pools as they stand too.
    from threadpoolctl import threadpool_limits  # noqa: E402

    threadpool_limits(limits=_THREADS)

# Make the independent reference implementations importable as ``reference_impl``
# (the CARS benchmark imports the same module).
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

# tqdm's default write lock holds a multiprocessing semaphore shared by every forked process: a
# test process killed while holding it (mutmut forks one per mutant and kills those that time
# out) leaves it locked, and every later process hangs creating a progress bar.  A per-process
# thread lock is enough for the suite (tools/mutation.py; docs/testing.md).
import threading  # noqa: E402

from tqdm import tqdm as _tqdm  # noqa: E402

_tqdm.set_lock(threading.RLock())


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread_under_mutation():
    """Under ``tools/mutation.py`` (``ASYMGEO_MUTATION`` set), torch never leaves one thread.

    mutmut runs the tests once, then forks one process per mutant.  The validation scorer
    (``adapters/training.py``, ``_all_cpu_threads``) and the encoders set torch to every usable
    core; MKL's OpenMP pool, once started, does not survive ``fork``, and every mutant of
    ``adapters/training.py`` deadlocked in its first matmul until mutmut's time limit
    (``py-spy dump --native``: idle in libgomp under ``mkl_blas_sgemm``).  With one usable core
    (and ``OMP_NUM_THREADS=1``, which the tool sets) no pool is ever started.  Plain test runs are
    untouched.

    Session-scoped, so that it is in force before any module- or session-scoped fixture runs:
    as a function-scoped fixture it missed ``tests/adapters/test_workflow.py``'s module fixtures
    (a whole ``asymgeo fit`` each), and every ``fit_adapter`` mutant deadlocked there (2026-12-05).
    """
    if not os.environ.get("ASYMGEO_MUTATION"):
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("asymgeo._runtime.available_cpus", lambda: 1)
        mp.setattr("asymgeo.data.encoders._cpu_cores", lambda: 1)
        yield


def pytest_xdist_auto_num_workers(config) -> int | None:
    """``-n auto``: the CPUs this process may use (affinity mask and cgroup quota), at most 8;
    PYTEST_XDIST_AUTO_NUM_WORKERS, when set, decides instead (README)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    from asymgeo._runtime import available_cpus

    return min(8, available_cpus())


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh, fixed-seed generator per test."""
    return np.random.default_rng(12345)


#: ``../shared`` beside the checkout: read-only data, embeddings and the paper.
SHARED_DIR = Path(__file__).resolve().parents[1] / ".." / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The ``../shared`` folder (fails, never skips, when it is missing)."""
    if not SHARED_DIR.is_dir():
        pytest.fail(f"{SHARED_DIR.resolve()}: the shared data folder is missing")
    return SHARED_DIR.resolve()


@pytest.fixture(autouse=True, scope="session")
def _triples_cache_in_tmp(tmp_path_factory):
    """Hard negatives mined from read-only caches (../shared) are cached in a temporary
    folder, never in the user's ~/.cache (asymgeo.data.triples falls back there)."""
    import asymgeo.data.triples as triples

    old = os.environ.get("ASYMGEO_TRIPLES_DIR")
    os.environ["ASYMGEO_TRIPLES_DIR"] = str(tmp_path_factory.mktemp("triples-cache"))
    old_scans = os.environ.get("ASYMGEO_SCAN_DIR")  # remembered corpus scans: never the user's ~/.cache
    os.environ["ASYMGEO_SCAN_DIR"] = str(tmp_path_factory.mktemp("scan-memo"))
    # Tests write only under their temp folders: ../shared is never written, even where its
    # permission bits would allow it (the library writes the triple cache beside a writable cache).
    shared = SHARED_DIR.resolve()
    real_writable = triples._writable

    def writable_outside_shared(folder):
        folder = Path(folder).resolve()
        return False if folder == shared or shared in folder.parents else real_writable(folder)

    triples._writable = writable_outside_shared
    yield
    triples._writable = real_writable
    if old_scans is None:
        os.environ.pop("ASYMGEO_SCAN_DIR", None)
    else:
        os.environ["ASYMGEO_SCAN_DIR"] = old_scans
    if old is None:
        os.environ.pop("ASYMGEO_TRIPLES_DIR", None)
    else:
        os.environ["ASYMGEO_TRIPLES_DIR"] = old
