"""A resumable sweep runner: grids of pure cells on a local process pool or on Ray.

The orchestration of the experiments layer; the parts live in their own modules and are
re-exported here:

* :mod:`~asymgeo.experiments.config`: the TOML layout, :func:`load_experiment`,
  :func:`expand_grid`, :func:`cell_id`, :func:`cell_seed`;
* :mod:`~asymgeo.experiments.store`: atomic per-cell records, :func:`consolidate`,
  :func:`read_results`;
* :mod:`~asymgeo.experiments.executors`: :func:`run_cells` (in-process, process pool, Ray).

:func:`run_sweep` skips cells whose record is already on disk (**resume**), runs the rest,
shows a tqdm progress bar (cells done, ETA), consolidates the results table and appends
a line per invocation to ``<results>/<name>/runs.jsonl`` (command, executor, wall time).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .._runtime import available_cpus
from .._validation import check_int
from .config import (
    Experiment,
    cell_id,
    cell_seed,
    check_required_keys,
    default_config_dir,
    expand_grid,
    import_cell,
    load_experiment,
    packaged_config_dir,
    parse_experiment,
)
from .executors import EXECUTORS, run_cells
from .store import consolidate, load_records, package_versions, read_results, results_path, write_cell

__all__ = [
    "Experiment",
    "SweepResult",
    "SweepError",
    "load_experiment",
    "parse_experiment",
    "expand_grid",
    "cell_id",
    "cell_seed",
    "import_cell",
    "package_versions",
    "portable_command",
    "run_sweep",
    "run_cells",
    "load_records",
    "consolidate",
    "read_results",
    "results_path",
    "default_config_dir",
    "packaged_config_dir",
    "EXECUTORS",
]

logger = logging.getLogger(__name__)


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



def _progress(total: int, initial: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="cell", disable=not enabled,
                dynamic_ncols=True, smoothing=0.1, file=sys.stderr)



def portable_command(command: str, root: str | os.PathLike | None = None) -> str:
    """``command`` with every absolute path made relative to ``root`` (default: the working
    folder) when it lies inside it, else replaced by ``<outside>/NAME``, so that the pages a
    run generates never print the folders of the machine that ran it.

    >>> portable_command("asymgeo reproduce x --results-dir /repo/results", "/repo")
    'asymgeo reproduce x --results-dir results'
    """
    base = Path(root if root is not None else os.getcwd()).resolve()
    out = []
    for token in command.split(" "):
        head, sep, value = token.partition("=") if token.startswith("--") else ("", "", token)
        if os.path.isabs(value):
            path = Path(value)
            try:
                value = path.resolve().relative_to(base).as_posix() or "."
            except ValueError:
                value = f"<outside>/{path.name}"
        out.append(f"{head}{sep}{value}")
    return " ".join(out)


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
    # a config missing a key its cell reads is refused once, before any folder or cell
    check_required_keys(experiment.source or experiment.name, experiment.cell,
                        [*experiment.grid, *experiment.fixed])
    t0 = time.perf_counter()
    started = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
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
    n_workers = check_int(workers, "workers") if workers else available_cpus()
    n_run = 0
    failures: list[tuple[dict, str]] = []
    bar = _progress(len(configs), len(done), experiment.name, progress)

    def on_done(cfg: dict, record: dict, secs: float) -> None:
        nonlocal n_run
        write_cell(cells_dir, cell_id(cfg), cfg, record, secs, versions)
        n_run += 1
        bar.update(1)

    def on_error(cfg: dict, exc: BaseException, tb: str) -> None:
        failures.append((cfg, tb))
        logger.warning("%s: cell %s failed: %s: %s", experiment.name, cell_id(cfg), type(exc).__name__, exc)

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
            "finished": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "command": portable_command(command if command is not None else " ".join(["asymgeo", *sys.argv[1:]])),
            "executor": executor,
            "workers": n_workers,
            "address": address,
            "cells_total": len(configs),
            "cells_skipped": len(done),
            "cells_run": n_run,
            "cells_failed": len(failures),
            "interrupted": interrupted,
            "wall_seconds": round(wall, 3),
            "machine": f"{platform.machine()} {os.cpu_count()} CPUs ({available_cpus()} usable), {platform.system()}",
            "versions": versions,
        }
        with open(base / "runs.jsonl", "a") as fh:
            fh.write(json.dumps(log) + "\n")
        if interrupted:
            logger.warning("%s: interrupted; %d of %d cells saved under %s (rerun to resume)",
                           experiment.name, len(done) + n_run, len(configs), cells_dir)
    result = SweepResult(
        name=experiment.name,
        n_total=len(configs),
        n_skipped=len(done),
        n_run=n_run,
        n_failed=len(failures),
        table=table,
        wall_seconds=wall,
        executor=executor,
        workers=n_workers,
        failures=failures,
    )
    if failures:
        cfg, tb = failures[0]
        last = tb.strip().splitlines()[-1] if tb.strip() else "error"
        raise SweepError(
            f"{experiment.name}: {len(failures)} of {len(pending)} cells failed "
            f"(first: {cfg} -> {last}); finished cells are saved, rerun to retry the rest",
            failures,
        )
    return result
