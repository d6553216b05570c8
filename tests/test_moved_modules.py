"""The 0.1 module paths still import for one release, as the same module, with one warning each.

The expected table is written out here (issue #24's move), not read from
``asymgeo._moved_modules.MOVED``; each old path is imported in a fresh interpreter so that
nothing earlier in the session has loaded it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import asymgeo

PACKAGE = Path(asymgeo.__file__).resolve().parent
SRC = str(PACKAGE.parent)

OLD_TO_NEW = {
    "asymgeo.geometry": "asymgeo.kernels.geometry",
    "asymgeo.theory": "asymgeo.kernels.theory",
    "asymgeo.selection": "asymgeo.kernels.selection",
    "asymgeo.operator_risk": "asymgeo.kernels.operator_risk",
    "asymgeo.rotation": "asymgeo.kernels.rotation",
    "asymgeo.folds": "asymgeo.kernels.folds",
    "asymgeo.search": "asymgeo.retrieval.search",
    "asymgeo.metrics": "asymgeo.retrieval.metrics",
    "asymgeo.compare": "asymgeo.retrieval.compare",
    "asymgeo.simulation": "asymgeo.estimators.simulation",
    "asymgeo.fold_validation": "asymgeo.estimators.validation",
    "asymgeo.evaluation": "asymgeo.data.evaluate",
}

PROBE = r'''
import importlib, json, sys, warnings
old, new = sys.argv[1], sys.argv[2]
with warnings.catch_warnings(record=True) as first:
    warnings.simplefilter("always")
    exec(f"import {old} as m")
with warnings.catch_warnings(record=True) as second:
    warnings.simplefilter("always")
    exec(f"import {old} as m2")
    exec(f"from {old} import __name__ as _n")
real = importlib.import_module(new)
print(json.dumps({
    "same": m is real and m2 is real,
    "first": [(w.category.__name__, str(w.message), w.filename) for w in first],
    "second": [str(w.message) for w in second],
    "spec": real.__spec__.name, "name": real.__name__,
    "attr": getattr(sys.modules["asymgeo"], old.split(".", 1)[1]) is real,
}))
'''


def _run(code: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("old", sorted(OLD_TO_NEW))
def test_old_path_is_the_new_module_with_one_warning(old):
    new = OLD_TO_NEW[old]
    got = _run(PROBE, old, new)
    assert got["same"], f"import {old} did not give {new}"
    assert len(got["first"]) == 1, got["first"]
    category, message, filename = got["first"][0]
    assert category == "DeprecationWarning" and new in message and "0.3" in message
    assert filename == "<string>", "the warning names the importing line, not importlib"
    assert got["second"] == [], "warned more than once"
    assert got["spec"] == new and got["name"] == new, "the real module kept its own spec and name"
    assert got["attr"], f"asymgeo.{old.split('.', 1)[1]} is not bound to the module"


def test_old_paths_have_no_files_left():
    """The redirect, not a stale module file, answers each old path; each new path is a file."""
    for old, new in OLD_TO_NEW.items():
        assert not (PACKAGE / f"{old.split('.', 1)[1]}.py").exists(), old
        assert (PACKAGE.parent / (new.replace(".", "/") + ".py")).is_file(), new


def test_attribute_without_import_warns_once():
    got = _run(r'''
import json, warnings
import asymgeo
with warnings.catch_warnings(record=True) as rec:
    warnings.simplefilter("always")
    f1 = asymgeo.selection.cars_score
    f2 = asymgeo.selection.cars_score
    import asymgeo.selection
print(json.dumps({"same": f1 is f2 is asymgeo.cars_score, "n": len(rec),
                  "msg": [str(w.message) for w in rec], "file": [w.filename for w in rec]}))
''')
    assert got["same"] and got["n"] == 1 and "asymgeo.kernels.selection" in got["msg"][0], got
    assert got["file"] == ["<string>"]


def test_unknown_names_still_raise():
    with pytest.raises(AttributeError, match="no attribute 'selectionx'"):
        asymgeo.selectionx  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        __import__("asymgeo.not_a_module")


def test_estimators_package_keeps_the_old_module_names():
    """``asymgeo.estimators`` was a module: its public names import quietly, the rest with a warning."""
    got = _run(r'''
import json, warnings
with warnings.catch_warnings(record=True) as quiet:
    warnings.simplefilter("always")
    from asymgeo.estimators import DualProjection, GeometrySelector, NotFittedError, SharedProjection
    from asymgeo.estimators import estimate_moment_noise
with warnings.catch_warnings(record=True) as loud:
    warnings.simplefilter("always")
    from asymgeo.estimators import _Params
    from asymgeo.estimators import _Params as again
import asymgeo.estimators.projections as pr
import asymgeo.kernels.theory as th
print(json.dumps({"quiet": len(quiet), "loud": [str(w.message) for w in loud],
                  "same": SharedProjection is pr.SharedProjection and _Params is pr._Params
                          and estimate_moment_noise is th.estimate_moment_noise}))
''')
    assert got["quiet"] == 0 and got["same"], got
    assert len(got["loud"]) == 1 and "asymgeo.estimators.projections._Params" in got["loud"][0]
    import asymgeo.estimators

    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        asymgeo.estimators.not_a_name  # noqa: B018


def test_evaluation_alias_serves_both_of_its_old_names():
    got = _run(r'''
import json, warnings
warnings.simplefilter("ignore")
import asymgeo.evaluation as old
import asymgeo.data as data
print(json.dumps({"frozen": old.evaluate_frozen is data.evaluate_frozen,
                  "metrics": old.default_metrics(10), "metrics5": old.default_metrics(100)}))
''')
    assert got["frozen"]
    assert got["metrics"] == ["ndcg@10", "ndcg_graded@10", "recall@10", "recall@100", "precision@10",
                              "mrr@10", "map@10"]
    assert got["metrics5"] == ["ndcg@100", "ndcg_graded@100", "recall@100", "precision@100", "mrr@100",
                               "map@100"]
