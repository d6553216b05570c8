"""A resumable sweep runner: grids of pure cells on a local process pool or on Ray.

An *experiment* is a grid of *cells*.  Each cell is a pure function of its config
(a flat ``dict`` of JSON scalars, including the master seed) returning a flat
``dict`` record.  The runner

* expands the grid from an ``experiments/<name>.toml`` file (:func:`load_experiment`),
* skips cells whose record is already on disk (**resume**),
* executes the rest on a local :class:`~concurrent.futures.ProcessPoolExecutor`
  (default) or on a Ray cluster (``executor="ray"``, optional extra),
* writes every finished cell **atomically** (temporary file + :func:`os.replace`) to
  ``<results>/<name>/cells/<cell_id>.json``, where ``cell_id`` is a stable hash of
  the cell config, so a crash or Ctrl-C loses at most the cells in flight,
* consolidates the finished cells into ``<results>/<name>/results.parquet`` (CSV
  when pyarrow is missing) with the config columns, the record, the package
  versions and the cell's wall time,
* shows a tqdm progress bar (cells done, ETA) and appends a line per invocation to
  ``<results>/<name>/runs.jsonl`` (command, executor, wall time) for the report.

TOML layout
-----------
::

    [experiment]
    name = "rq1"
    cell = "asymgeo.experiments.rq1:cell"   # module:function
    description = "..."
    master_seed = 20260809

    [grid]          # Cartesian product, in this key order
    angle = [0.0, 0.6, 1.2]
    n = [32, 2048]

    [fixed]         # constants added to every cell config
    p = 32

    [quick.grid]    # --quick: replaces the named grid axes
    angle = [0.0, 1.2]
    [quick.fixed]   # --quick: updates the constants
    n_test = 200
"""

from __future__ import annotations

import concurrent.futures as cf
import datetime as _dt
import hashlib
import importlib
import itertools
import json
import math
import os
import platform
import sys
import time
import tomllib
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .._atomic import atomic_path, atomic_write_text

__all__ = [
    "Experiment",
    "SweepResult",
    "SweepError",
    "load_experiment",
    "parse_experiment",
    "expand_grid",
    "cell_id",
    "cell_seed",
    "package_versions",
    "run_sweep",
    "run_cells",
    "load_records",
    "consolidate",
    "read_results",
    "results_path",
    "default_config_dir",
    "toy_cell",
    "EXECUTORS",
]

EXECUTORS = ("local", "ray")
_SCALAR = (bool, int, float, str)


# --------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class Experiment:
    """A parsed experiment: its grid and constants (quick overrides already applied).

    Attributes
    ----------
    name : results folder name (``"rq1"``; ``"rq1-quick"`` for the quick variant).
    cell : ``"module:function"`` of the pure cell function.
    grid : ordered mapping axis -> list of values (Cartesian product).
    fixed : constants merged into every cell config.
    master_seed : recorded in every config as ``master_seed``.
    description : one line for the report.
    source : the TOML file it came from.
    quick : whether the ``[quick]`` overrides were applied.
    """

    name: str
    cell: str
    grid: dict[str, list]
    fixed: dict[str, Any]
    master_seed: int
    description: str = ""
    source: str = ""
    quick: bool = False

    def configs(self) -> list[dict[str, Any]]:
        """Every cell config (grid point + constants + ``master_seed``), in grid order."""
        return expand_grid(self.grid, {**self.fixed, "master_seed": self.master_seed})

    def cell_function(self) -> Callable[[dict], dict]:
        """Import and return the cell function."""
        return _import_cell(self.cell)


def _err(source: str, msg: str) -> ValueError:
    return ValueError(f"{source}: {msg}")


def _check_scalar(source: str, key: str, value: Any) -> Any:
    if isinstance(value, _SCALAR):
        if isinstance(value, float) and not math.isfinite(value):
            raise _err(source, f"{key}: expected a finite number, got {value!r}")
        return value
    raise _err(source, f"{key}: expected a number, string or boolean, got {type(value).__name__} {value!r}")


def _check_table(source: str, data: dict, key: str, required: bool) -> dict:
    value = data.get(key, None)
    if value is None:
        if required:
            raise _err(source, f"missing table [{key}]")
        return {}
    if not isinstance(value, dict):
        raise _err(source, f"[{key}] must be a table, got {type(value).__name__}")
    return value


def _check_grid(source: str, table: dict, prefix: str) -> dict[str, list]:
    grid: dict[str, list] = {}
    for axis, values in table.items():
        key = f"[{prefix}] {axis}"
        if not isinstance(values, list) or not values:
            raise _err(source, f"{key}: expected a non-empty list of values, got {values!r}")
        grid[axis] = [_check_scalar(source, key, v) for v in values]
        if len(set(map(json.dumps, grid[axis]))) != len(grid[axis]):
            raise _err(source, f"{key}: contains repeated values {values!r}")
    return grid


def _check_fixed(source: str, table: dict, prefix: str) -> dict[str, Any]:
    return {k: _check_scalar(source, f"[{prefix}] {k}", v) for k, v in table.items()}


def parse_experiment(data: dict, source: str = "<config>", *, quick: bool = False) -> Experiment:
    """Validate a TOML document (as a dict) and build an :class:`Experiment`.

    Raises
    ------
    ValueError
        Naming ``source`` and the table/key at fault.
    """
    known = {"experiment", "grid", "fixed", "quick"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise _err(source, f"unknown top-level table(s) {unknown}; expected {sorted(known)}")
    meta = _check_table(source, data, "experiment", True)
    for key in ("name", "cell", "master_seed"):
        if key not in meta:
            raise _err(source, f"[experiment] is missing key {key!r}")
    name, cell = meta["name"], meta["cell"]
    if not isinstance(name, str) or not name or any(c in name for c in "/\\ "):
        raise _err(source, f"[experiment] name: expected a plain folder name, got {name!r}")
    if not isinstance(cell, str) or ":" not in cell:
        raise _err(source, f"[experiment] cell: expected 'module:function', got {cell!r}")
    seed = meta["master_seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise _err(source, f"[experiment] master_seed: expected a non-negative integer, got {seed!r}")
    grid = _check_grid(source, _check_table(source, data, "grid", True), "grid")
    if not grid:
        raise _err(source, "[grid] has no axes")
    fixed = _check_fixed(source, _check_table(source, data, "fixed", False), "fixed")
    overlap = sorted(set(grid) & set(fixed))
    if overlap:
        raise _err(source, f"keys {overlap} appear in both [grid] and [fixed]")
    q = _check_table(source, data, "quick", False)
    bad = sorted(set(q) - {"grid", "fixed"})
    if bad:
        raise _err(source, f"[quick] may only contain [quick.grid] and [quick.fixed], got {bad}")
    qgrid = _check_grid(source, _check_table(source, q, "grid", False), "quick.grid")
    qfixed = _check_fixed(source, _check_table(source, q, "fixed", False), "quick.fixed")
    for axis in qgrid:
        if axis not in grid:
            raise _err(source, f"[quick.grid] {axis}: not an axis of [grid] (axes: {list(grid)})")
    for key in qfixed:
        if key not in fixed:
            raise _err(source, f"[quick.fixed] {key}: not a key of [fixed] (keys: {list(fixed)})")
    if quick:
        grid = {axis: qgrid.get(axis, values) for axis, values in grid.items()}
        fixed = {**fixed, **qfixed}
        name = f"{name}-quick"
    return Experiment(
        name=name,
        cell=cell,
        grid=grid,
        fixed=fixed,
        master_seed=int(seed),
        description=str(meta.get("description", "")),
        source=source,
        quick=quick,
    )


def default_config_dir() -> Path:
    """``./experiments`` if it exists, else the ``experiments/`` folder of the source checkout."""
    here = Path("experiments")
    if here.is_dir():
        return here
    return Path(__file__).resolve().parents[3] / "experiments"


def load_experiment(name_or_path: str | os.PathLike, *, quick: bool = False,
                    config_dir: str | os.PathLike | None = None) -> Experiment:
    """Load ``experiments/<name>.toml`` (or an explicit ``.toml`` path).

    Raises
    ------
    FileNotFoundError
        If the file does not exist (the message lists the available names).
    ValueError
        On TOML syntax errors or invalid keys, naming the file (and line / key).
    """
    path = Path(name_or_path)
    if path.suffix != ".toml":
        cdir = Path(config_dir) if config_dir is not None else default_config_dir()
        path = cdir / f"{name_or_path}.toml"
    if not path.is_file():
        available = sorted(p.stem for p in path.parent.glob("*.toml")) if path.parent.is_dir() else []
        raise FileNotFoundError(f"{path}: no such experiment config (available: {available or 'none'})")
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: invalid TOML: {exc}") from exc
    return parse_experiment(data, str(path), quick=quick)


def expand_grid(grid: dict[str, Sequence], fixed: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Cartesian product of ``grid`` axes (first axis slowest), each merged with ``fixed``."""
    fixed = dict(fixed or {})
    axes = list(grid)
    out = []
    for values in itertools.product(*(grid[a] for a in axes)):
        cfg = dict(fixed)
        cfg.update(zip(axes, values))
        out.append(cfg)
    return out


def _canonical(config: dict[str, Any]) -> str:
    def norm(v):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return v
        # 1 and 1.0 hash alike; floats keep full repr precision.
        return float(v)

    return json.dumps({k: norm(v) for k, v in config.items()}, sort_keys=True, separators=(",", ":"))


def cell_id(config: dict[str, Any]) -> str:
    """Stable 16-hex-digit id of a cell config (SHA-256 of its canonical JSON)."""
    return hashlib.sha256(_canonical(config).encode()).hexdigest()[:16]


def cell_seed(master_seed: int, *coords: int) -> int:
    """A deterministic 63-bit seed from the master seed and integer coordinates.

    ``numpy.random.SeedSequence(master_seed, spawn_key=coords)``: cells sharing
    coordinates share seeds, which is how experiments pair their draws (e.g. the same
    training sample for shared and dual, or across rotation angles).
    """
    import numpy as np

    coords = tuple(int(c) for c in coords)
    if any(c < 0 for c in coords):
        raise ValueError(f"coords: expected non-negative integers, got {coords}")
    ss = np.random.SeedSequence(int(master_seed), spawn_key=coords)
    return int(ss.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))


def package_versions() -> dict[str, str]:
    """Versions recorded with every cell: python, asymgeo, numpy, scipy."""
    import numpy
    import scipy

    from .._version import __version__

    return {
        "python": platform.python_version(),
        "asymgeo": __version__,
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
    }


def _import_cell(spec: str) -> Callable[[dict], dict]:
    module, _, attr = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cell {spec!r}: cannot import ({exc})") from exc
    if not callable(fn):
        raise ValueError(f"cell {spec!r}: not callable")
    return fn


def toy_cell(config: dict) -> dict:
    """A tiny deterministic cell for smoke tests and examples.

    Draws ``size`` normals from ``cell_seed(master_seed, x)`` and returns their mean
    and ``x**2``; raises ``RuntimeError`` when ``config["fail"]`` is true.
    """
    import numpy as np

    if config.get("fail", False):
        raise RuntimeError(f"toy_cell: asked to fail at x = {config.get('x')}")
    x = int(config["x"])
    seed = cell_seed(int(config.get("master_seed", 0)), x)
    draws = np.random.default_rng(seed).standard_normal(int(config.get("size", 10)))
    return {"seed": seed, "mean": float(draws.mean()), "square": x * x}


# --------------------------------------------------------------------------- storage
def results_path(results_dir: str | os.PathLike, name: str) -> Path:
    """``<results_dir>/<name>``."""
    return Path(results_dir) / name


def _atomic_write_text(path: Path, text: str) -> None:
    atomic_write_text(path, text)


def _json_default(o):
    import numpy as np

    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.floating, np.integer, np.bool_)):
        return o.item()
    raise TypeError(f"record value of type {type(o).__name__} is not JSON serialisable")


def _write_cell(cells_dir: Path, cid: str, config: dict, record: dict, seconds: float,
                versions: dict[str, str]) -> None:
    payload = {
        "cell_id": cid,
        "config": config,
        "record": record,
        "seconds": seconds,
        "versions": versions,
        "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    _atomic_write_text(cells_dir / f"{cid}.json", json.dumps(payload, default=_json_default, allow_nan=True))


def load_records(results_dir: str | os.PathLike, name: str,
                 ids: Iterable[str] | None = None) -> dict[str, dict]:
    """Finished cells of experiment ``name``: ``{cell_id: payload}`` (only ``ids`` if given).

    Temporary files (``.*.tmp``) are never read; an unreadable cell file is treated
    as missing (it will be recomputed).
    """
    cells_dir = results_path(results_dir, name) / "cells"
    out: dict[str, dict] = {}
    if not cells_dir.is_dir():
        return out
    wanted = set(ids) if ids is not None else None
    for path in cells_dir.glob("*.json"):
        cid = path.stem
        if wanted is not None and cid not in wanted:
            continue
        try:
            payload = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if payload.get("cell_id") == cid:
            out[cid] = payload
    return out


def _flatten(payload: dict) -> dict[str, Any]:
    row: dict[str, Any] = {"cell_id": payload["cell_id"]}
    row.update(payload["config"])
    for key, value in payload["record"].items():
        row[f"result_{key}" if key in payload["config"] or key == "cell_id" else key] = value
    row["cell_seconds"] = payload.get("seconds")
    for pkg, ver in payload.get("versions", {}).items():
        row[f"version_{pkg}"] = ver
    row["finished_at"] = payload.get("finished_at")
    return row


def _pandas():
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - pandas is in the experiments extra
        raise ImportError("the results tables need pandas: pip install 'asymgeo[experiments]'") from exc
    return pd


def consolidate(results_dir: str | os.PathLike, experiment: Experiment, *, fmt: str = "auto") -> Path:
    """Write the finished cells of ``experiment`` (in grid order) to one results table.

    ``fmt``: ``"parquet"``, ``"csv"`` or ``"auto"`` (Parquet when pyarrow imports).
    The table is written to a temporary file and renamed into place.  Returns its path.
    """
    pd = _pandas()

    configs = experiment.configs()
    ids = [cell_id(c) for c in configs]
    payloads = load_records(results_dir, experiment.name, ids)
    rows = [_flatten(payloads[i]) for i in ids if i in payloads]
    df = pd.DataFrame(rows)
    if fmt == "auto":
        try:
            import pyarrow  # noqa: F401

            fmt = "parquet"
        except ImportError:  # pragma: no cover - pyarrow is in the experiments extra
            fmt = "csv"
    if fmt not in ("parquet", "csv"):
        raise ValueError(f"fmt: expected 'parquet', 'csv' or 'auto', got {fmt!r}")
    out = results_path(results_dir, experiment.name) / f"results.{fmt}"
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out, suffix=f".{fmt}.tmp") as tmp:
        if fmt == "parquet":
            df.to_parquet(tmp, index=False)
        else:
            df.to_csv(tmp, index=False)
    other = out.with_suffix(".csv" if fmt == "parquet" else ".parquet")
    if other.exists():
        other.unlink()
    return out


def read_results(results_dir: str | os.PathLike, name: str):
    """Read ``<results_dir>/<name>/results.parquet`` (or ``.csv``) into a DataFrame."""
    pd = _pandas()

    base = results_path(results_dir, name)
    if (base / "results.parquet").is_file():
        return pd.read_parquet(base / "results.parquet")
    if (base / "results.csv").is_file():
        return pd.read_csv(base / "results.csv")
    raise FileNotFoundError(
        f"{base}: no results table; run `asymgeo reproduce {name.removesuffix('-quick')}"
        f"{' --quick' if name.endswith('-quick') else ''}` first"
    )


# --------------------------------------------------------------------------- execution
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
    """``threadpoolctl.threadpool_limits(1)`` when available (in-process runs), else a no-op."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(limits=1)


def _worker_init() -> None:
    """Pool workers ignore Ctrl-C: the driver handles it (cancels pending cells, keeps
    finished ones) instead of every worker printing a traceback."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _execute(cell: str, config: dict) -> tuple[dict, float]:
    """Run one cell in a worker: import the function, time it, return (record, seconds)."""
    fn = _import_cell(cell)
    t0 = time.perf_counter()
    with _thread_limit():
        record = fn(dict(config))
    if not isinstance(record, dict):
        raise TypeError(f"cell {cell}: expected a dict record, got {type(record).__name__}")
    return record, time.perf_counter() - t0


class SweepError(RuntimeError):
    """Some cells raised; the finished ones were saved.  ``failures`` lists (config, traceback)."""

    def __init__(self, message: str, failures: list[tuple[dict, str]]):
        super().__init__(message)
        self.failures = failures


@dataclass
class SweepResult:
    """Outcome of :func:`run_sweep`.

    ``n_total`` cells in the grid, ``n_skipped`` already finished before this call,
    ``n_run`` finished by this call, ``n_failed`` raised; ``table`` is the results
    table path; ``wall_seconds`` this call's wall time.
    """

    name: str
    n_total: int
    n_skipped: int
    n_run: int
    n_failed: int
    table: Path | None
    wall_seconds: float
    executor: str
    workers: int
    failures: list[tuple[dict, str]] = field(default_factory=list)


def _ray_module():
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "the Ray executor needs the optional dependency ray: pip install 'asymgeo[ray]'"
        ) from exc
    return ray


def _progress(total: int, initial: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="cell", disable=not enabled,
                dynamic_ncols=True, smoothing=0.1, file=sys.stderr)


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
    workers = int(workers) if workers else (os.cpu_count() or 1)
    if workers < 1:
        raise ValueError(f"workers: expected a positive integer, got {workers}")
    if executor == "ray":
        _run_ray(cell, configs, on_done, on_error, workers=workers, address=address)
        return
    if address is not None:
        raise ValueError("address: only meaningful with executor='ray'")
    if workers == 1:
        for cfg in configs:
            try:
                record, secs = _execute(cell, cfg)
            except Exception as exc:  # noqa: BLE001 - reported, sweep goes on
                on_error(cfg, exc, traceback.format_exc())
                continue
            on_done(cfg, record, secs)
        return
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


def run_sweep(
    experiment: Experiment,
    *,
    results_dir: str | os.PathLike = "results",
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    progress: bool = True,
    command: str | None = None,
    limit: int | None = None,
) -> SweepResult:
    """Run every unfinished cell of ``experiment`` and consolidate the results table.

    Parameters
    ----------
    experiment : from :func:`load_experiment`.
    results_dir : root folder; cells go to ``<results_dir>/<name>/cells/``.
    executor : ``"local"`` (process pool) or ``"ray"``.
    workers : local pool size (default CPU count; 1 runs in-process) or the CPU count
        of a locally started Ray instance.
    address : Ray cluster address (``"auto"``, ``"ray://host:10001"``...).
    progress : show the tqdm bar (cells done, rate, ETA).
    command : recorded in ``runs.jsonl`` (default: ``sys.argv``).
    limit : run at most this many of the pending cells (for smoke tests).

    Raises
    ------
    SweepError
        After all other cells finished, if any cell raised; the finished cells and the
        results table are saved, and rerunning retries only the missing cells.
    KeyboardInterrupt
        Re-raised after saving the table; finished cells are kept.
    """
    t0 = time.perf_counter()
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    base = results_path(results_dir, experiment.name)
    cells_dir = base / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    configs = experiment.configs()
    ids = [cell_id(c) for c in configs]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{experiment.source}: the grid contains duplicate cells")
    done = load_records(results_dir, experiment.name, ids)
    pending = [c for c, i in zip(configs, ids) if i not in done]
    if limit is not None:
        pending = pending[: int(limit)]
    versions = package_versions()
    experiment.cell_function()  # fail early on a bad import
    n_workers = int(workers) if workers else (os.cpu_count() or 1)
    state = {"run": 0, "failures": []}
    bar = _progress(len(configs), len(done), experiment.name, progress)

    def on_done(cfg: dict, record: dict, secs: float) -> None:
        _write_cell(cells_dir, cell_id(cfg), cfg, record, secs, versions)
        state["run"] += 1
        bar.update(1)

    def on_error(cfg: dict, exc: BaseException, tb: str) -> None:
        state["failures"].append((cfg, tb))
        bar.write(f"{experiment.name}: cell {cell_id(cfg)} failed: {type(exc).__name__}: {exc}")

    interrupted = False
    try:
        if pending:
            run_cells(experiment.cell, pending, on_done, on_error, executor=executor,
                      workers=n_workers, address=address)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        bar.close()
        table = consolidate(results_dir, experiment)
        wall = time.perf_counter() - t0
        log = {
            "started": started,
            "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": command if command is not None else " ".join(["asymgeo", *sys.argv[1:]]),
            "executor": executor,
            "workers": n_workers,
            "address": address,
            "cells_total": len(configs),
            "cells_skipped": len(done),
            "cells_run": state["run"],
            "cells_failed": len(state["failures"]),
            "interrupted": interrupted,
            "wall_seconds": round(wall, 3),
            "machine": f"{platform.machine()} {os.cpu_count()} CPUs, {platform.system()}",
            "versions": versions,
        }
        with open(base / "runs.jsonl", "a") as fh:
            fh.write(json.dumps(log) + "\n")
        if interrupted:
            print(f"{experiment.name}: interrupted; {len(done) + state['run']} of {len(configs)} cells "
                  f"saved under {cells_dir} (rerun to resume)", file=sys.stderr)
    result = SweepResult(
        name=experiment.name,
        n_total=len(configs),
        n_skipped=len(done),
        n_run=state["run"],
        n_failed=len(state["failures"]),
        table=table,
        wall_seconds=wall,
        executor=executor,
        workers=n_workers,
        failures=state["failures"],
    )
    if state["failures"]:
        cfg, tb = state["failures"][0]
        last = tb.strip().splitlines()[-1] if tb.strip() else "error"
        raise SweepError(
            f"{experiment.name}: {len(state['failures'])} of {len(pending)} cells failed "
            f"(first: {cfg} -> {last}); finished cells are saved, rerun to retry the rest",
            state["failures"],
        )
    return result
