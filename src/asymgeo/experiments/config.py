"""Experiment configs: the TOML layout, its validation, grid expansion, cell ids and seeds.

An *experiment* is a grid of *cells*.  Each cell is a pure function of its config
(a flat ``dict`` of JSON scalars, including the master seed) returning a flat
``dict`` record.  The paper's configs ship with the package
(``asymgeo/experiments/configs/*.toml``), so a wheel install finds them.

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

A config of a packaged cell must set every key that cell reads as ``config["key"]`` and
that all its packaged configs set (:func:`required_keys`): a file cut short that still
parses is refused once, naming the file and the keys, before any cell runs.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.util
import itertools
import json
import math
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._validation import check_int

__all__ = [
    "Experiment",
    "parse_experiment",
    "load_experiment",
    "default_config_dir",
    "packaged_config_dir",
    "expand_grid",
    "cell_id",
    "cell_seed",
    "import_cell",
    "required_keys",
    "check_required_keys",
]

_SCALAR = (bool, int, float, str)

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
        return import_cell(self.cell)




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


def _check_meta(source: str, meta: dict) -> tuple[str, str, int]:
    """``(name, cell, master_seed)`` of the ``[experiment]`` table, or a ValueError naming the key."""
    for key in ("name", "cell", "master_seed"):
        if key not in meta:
            raise _err(source, f"[experiment] is missing key {key!r}")
    name, cell = meta["name"], meta["cell"]
    if not isinstance(name, str) or not name or any(c in name for c in "/\\ "):
        raise _err(source, f"[experiment] name: expected a plain folder name, got {name!r}")
    if not isinstance(cell, str) or ":" not in cell:
        raise _err(source, f"[experiment] cell: expected 'module:function', got {cell!r}")
    try:
        seed = check_int(meta["master_seed"], "[experiment] master_seed", min_value=0)
    except ValueError as exc:
        raise _err(source, str(exc)) from None
    return name, cell, seed


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
    name, cell, seed = _check_meta(source, meta)
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
    check_required_keys(source, cell, [*grid, *fixed])
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



@functools.lru_cache(maxsize=1)
def _packaged_keys() -> dict[str, list[tuple[str, list[str]]]]:
    """Each packaged config by its cell spec: ``(file name, [grid] and [fixed] keys in file order)``."""
    out: dict[str, list[tuple[str, list[str]]]] = {}
    for path in sorted(packaged_config_dir().glob("*.toml")):
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
            cell = data["experiment"]["cell"]
            keys = [*data.get("grid", {}), *data.get("fixed", {})]
        except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, AttributeError):
            continue  # a broken packaged file is reported when it is loaded itself
        out.setdefault(str(cell), []).append((path.name, keys))
    return out


@functools.cache
def _subscripted_keys(module: str) -> frozenset[str]:
    """The string keys a module reads as ``config["key"]`` (from its source: nothing is imported)."""
    try:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec is not None else None
        if not origin or not origin.endswith(".py"):
            return frozenset()
        tree = ast.parse(Path(origin).read_text(encoding="utf-8"))
    except (ImportError, ValueError, OSError, SyntaxError):
        return frozenset()
    return frozenset(node.slice.value for node in ast.walk(tree)
                     if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                     and isinstance(node.value, ast.Name) and node.value.id == "config"
                     and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str))


def required_keys(cell: str) -> tuple[list[str], list[str]]:
    """``(keys, files)``: the config keys a config of the packaged cell ``cell`` must set.

    A key is required when every packaged config of that cell sets it (under ``[grid]`` or
    ``[fixed]``) and the cell's module reads it as ``config["key"]`` (a key read with
    ``config.get`` has a default and stays optional).  ``files`` are those packaged configs;
    both are empty for a cell no packaged config runs (a user's own cell is not checked).
    """
    entries = _packaged_keys().get(cell, [])
    if not entries:
        return [], []
    read = _subscripted_keys(cell.partition(":")[0])
    common = set.intersection(*(set(keys) for _, keys in entries))
    return [k for k in entries[0][1] if k in common and k in read], [name for name, _ in entries]


def check_required_keys(source: str, cell: str, keys: Sequence[str]) -> None:
    """Refuse a config of a packaged cell that lacks a key its cell reads (:func:`required_keys`):
    one ``ValueError`` naming ``source`` and every missing key, before any cell runs (a config
    cut short that still parses would otherwise fail in every cell with a bare ``KeyError``)."""
    need, files = required_keys(cell)
    have = set(keys) | {"master_seed"}
    missing = [k for k in need if k not in have]
    if missing:
        word = "key" if len(missing) == 1 else "keys"
        raise _err(source, f"missing {word} {', '.join(map(repr, missing))} under [grid] or [fixed]: the cell "
                           f"{cell} reads {'it' if len(missing) == 1 else 'them'} (set in the packaged "
                           f"{' and '.join(files)}); was the file cut short?")


def packaged_config_dir() -> Path:
    """The folder of the configs shipped with the package (``asymgeo/experiments/configs``)."""
    return Path(__file__).resolve().parent / "configs"


def default_config_dir() -> Path:
    """``./experiments`` if it holds ``*.toml`` files (a checkout's own configs), else the packaged configs.

    :func:`load_experiment` looks a name up in ``./experiments`` first and then in the packaged
    configs, so a checkout's own configs never hide the paper's.
    """
    here = Path("experiments")
    if here.is_dir() and any(here.glob("*.toml")):
        return here
    return packaged_config_dir()


def load_experiment(name_or_path: str | os.PathLike, *, quick: bool = False,
                    config_dir: str | os.PathLike | None = None) -> Experiment:
    """Load ``<config_dir>/<name>.toml`` (or an explicit ``.toml`` path).

    Raises
    ------
    FileNotFoundError
        If the file does not exist (the message lists the available names).
    ValueError
        On TOML syntax errors or invalid keys, naming the file (and line / key).
    """
    path = Path(name_or_path)
    searched = []
    if path.suffix != ".toml":
        # an explicit folder, else the checkout's ./experiments first, then the packaged configs
        folders = [Path(config_dir)] if config_dir is not None else [Path("experiments"), packaged_config_dir()]
        searched = [d for d in folders if d.is_dir()]
        path = next((d / f"{name_or_path}.toml" for d in searched if (d / f"{name_or_path}.toml").is_file()),
                    folders[0] / f"{name_or_path}.toml")
    if not path.is_file():
        dirs = searched or ([path.parent] if path.parent.is_dir() else [])
        available = sorted({p.stem for d in dirs for p in d.glob("*.toml")})
        raise FileNotFoundError(f"{path}: no such experiment config (available: {available or 'none'})")
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: invalid TOML: {exc}") from exc
    return parse_experiment(data, str(path), quick=quick)


def expand_grid(grid: Mapping[str, Sequence], fixed: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
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



def import_cell(spec: str) -> Callable[[dict], dict]:
    """Import the cell function named ``"module:function"``; ``ValueError`` naming the spec if it fails."""
    module, _, attr = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cell {spec!r}: cannot import ({exc})") from exc
    if not callable(fn):
        raise ValueError(f"cell {spec!r}: not callable")
    return fn

