"""The package namespace: every public name resolves, and importing stays light.

Import cost is checked by *which modules get imported* (in a fresh interpreter), never
by timing: the ratios are in benchmarks/bench_startup.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import asymgeo

SRC = str(Path(asymgeo.__file__).resolve().parents[1])
HEAVY = ("scipy.stats", "torch", "pandas", "matplotlib", "sentence_transformers", "faiss")


def _loaded_after(code: str) -> set[str]:
    """Run ``code`` in a fresh interpreter with this source tree first on the path; return sys.modules."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, env=env, check=True, timeout=120,
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_asymgeo_imports_no_heavy_dependency():
    loaded = _loaded_after("import asymgeo")
    assert "asymgeo" in loaded
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_every_public_name_resolves_without_heavy_dependencies():
    loaded = _loaded_after("import asymgeo\nfor n in asymgeo.__all__: getattr(asymgeo, n)")
    assert {"asymgeo.kernels.geometry", "asymgeo.kernels.theory", "asymgeo.retrieval.search", "asymgeo.data"} <= loaded  # really imported
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_cli_version_and_help_import_neither_numpy_nor_subcommands():
    code = ("from asymgeo.cli import main\n"
            "for argv in (['--version'], ['--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass")
    loaded = _loaded_after(code)
    assert "asymgeo.cli" in loaded
    assert not {"numpy", "scipy", "asymgeo.experiments.demo", "asymgeo.data"} & loaded


def test_public_names_match_their_modules():
    import importlib

    for name in asymgeo.__all__:
        if name == "__version__":
            continue
        module = importlib.import_module(f"asymgeo.{asymgeo._EXPORTS[name]}")
        assert getattr(asymgeo, name) is getattr(module, name), name
    assert set(asymgeo.__all__) <= set(dir(asymgeo))


def test_unknown_attribute_raises_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        asymgeo.not_a_name  # noqa: B018


def test_star_import_gives_every_public_name():
    ns: dict = {}
    exec("from asymgeo import *", ns)
    assert set(asymgeo.__all__) <= set(ns)
