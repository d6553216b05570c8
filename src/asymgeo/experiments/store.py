"""The results store: one atomic JSON file per finished cell, and the consolidated table.

Every finished cell is written **atomically** to ``<results>/<name>/cells/<cell_id>.json``
(``cell_id`` a stable hash of the cell config), so a crash or Ctrl-C loses at most the
cells in flight and a rerun skips the finished ones.  :func:`consolidate` gathers them
into ``<results>/<name>/results.parquet`` (CSV when pyarrow is missing) with the config
columns, the record, the package versions and the cell's wall time.

Each cell file carries the SHA-256 of its record (``record_sha256``), so a file that is
valid JSON but does not hold what the cell function returned (an emptied or edited
record, a list instead of an object) is treated as missing, recomputed, and named in a
warning, like a truncated one.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from .._atomic import atomic_path, atomic_write_text
from .._runtime import json_default, package_versions
from .config import Experiment, cell_id

logger = logging.getLogger(__name__)

__all__ = [
    "results_path",
    "write_cell",
    "load_records",
    "consolidate",
    "read_results",
    "package_versions",
]



def results_path(results_dir: str | os.PathLike, name: str) -> Path:
    """``<results_dir>/<name>``."""
    return Path(results_dir) / name


def write_cell(cells_dir: Path, cid: str, config: dict, record: dict, seconds: float,
               versions: dict[str, str]) -> None:
    """Write one finished cell to ``<cells_dir>/<cid>.json`` atomically (config, record, seconds, versions)."""
    record = json.loads(json.dumps(record, default=json_default, allow_nan=True))  # as it will be read back
    payload = {
        "cell_id": cid,
        "config": config,
        "record": record,
        "record_sha256": _record_digest(record),
        "seconds": seconds,
        "versions": versions,
        "finished_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    atomic_write_text(cells_dir / f"{cid}.json", json.dumps(payload, default=json_default, allow_nan=True))



def _record_digest(record: Any) -> str:
    return hashlib.sha256(json.dumps(record, allow_nan=True, sort_keys=True).encode()).hexdigest()


def _cell_problem(payload: Any, cid: str) -> str | None:
    """Why a parsed cell file is not a finished cell ``cid`` (None when it is one)."""
    if not isinstance(payload, dict):
        return f"holds a JSON {type(payload).__name__}, not a cell record"
    if payload.get("cell_id") != cid:
        return f"names cell {payload.get('cell_id')!r}"
    if not isinstance(payload.get("config"), dict):
        return "has no config object"
    record = payload.get("record")
    if not isinstance(record, dict) or not record:
        return "has an empty or missing record"
    digest = payload.get("record_sha256")
    if digest is not None and digest != _record_digest(record):
        return "record does not match its recorded digest (edited or damaged)"
    return None


def load_records(results_dir: str | os.PathLike, name: str,
                 ids: Iterable[str] | None = None) -> dict[str, dict]:
    """Finished cells of experiment ``name``: ``{cell_id: payload}`` (only ``ids`` if given).

    Temporary files (``.*.tmp``) are never read; an unreadable cell file, or one that does not
    hold a complete record of its cell (see the module docstring), is treated as missing (it
    will be recomputed) and named in a warning.
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
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            logger.warning("%s: unreadable cell file (%s); the cell will be recomputed", path, exc)
            continue
        problem = _cell_problem(payload, cid)
        if problem is not None:
            logger.warning("%s: %s; the cell will be recomputed", path, problem)
            continue
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


def write_page(module: str, argv: Sequence[str],
               render: Callable[[Any, Path, Path, str], str]) -> int:
    """``python -m asymgeo.experiments.MODULE RESULTS_DIR OUT.md``: a sweep's results to its page.

    ``render(table, results_dir, out, command)`` returns the page's text (``command`` is the
    line that made it, for the page to quote); the page is written atomically.  Exit 2 with
    one line on stderr for a wrong argument count or a folder without sweep results.
    """
    import sys

    if len(argv) != 2:
        print(f"usage: python -m asymgeo.experiments.{module} RESULTS_DIR OUT.md", file=sys.stderr)
        return 2
    results, out = Path(argv[0]), Path(argv[1])
    if not (results / "cells").is_dir():
        print(f"{results}: no sweep results here (run asymgeo reproduce {results.name} first)", file=sys.stderr)
        return 2
    table = read_results(results.parent, results.name)
    text = render(table, results, out, f"python -m asymgeo.experiments.{module} {argv[0]} {argv[1]}")
    atomic_write_text(out, text)
    print(f"wrote {out}")
    return 0
