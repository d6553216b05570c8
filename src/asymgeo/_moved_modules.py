"""The 0.1 module paths, kept for one release: ``asymgeo.selection`` is ``asymgeo.kernels.selection``.

Version 0.2 moved the flat modules into folders that show their layer (see
``docs/architecture.md``).  Importing an old path still works and gives the *same* module
object as the new path (so ``asymgeo.selection.cars_score is asymgeo.kernels.selection.cars_score``
and patching one patches the other); the first import of each old path in a process emits
one :class:`DeprecationWarning` naming the new path.  The old paths go in 0.3.

The redirect is a :pep:`451` meta-path finder installed by ``asymgeo/__init__.py``; it
answers only for the names in :data:`MOVED` and imports nothing until one is asked for.
"""

from __future__ import annotations

import importlib
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType

from ._deprecation import warn_deprecated

__all__ = ["MOVED", "install", "import_moved"]

#: old module path -> new module path (0.2 layout); removed in 0.3.
MOVED: dict[str, str] = {
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


def import_moved(old: str) -> ModuleType:
    """The module now at ``MOVED[old]``, after one deprecation warning naming it.

    Called from the finder (through the import system, whose frames :mod:`warnings` skips)
    or from ``asymgeo.__getattr__``: either way the warning names the caller's line.
    """
    new = MOVED[old]
    warn_deprecated(f"{old} moved to {new}; import it from there (or the name from asymgeo)", stacklevel=4)
    module = importlib.import_module(new)
    sys.modules.setdefault(old, module)  # a later ``import old`` finds it: one warning per process
    return module


class _MovedModuleFinder:
    """Finds the old paths in :data:`MOVED` and loads them as the modules at the new paths.

    A meta-path finder and loader by protocol (``find_spec``, ``create_module``,
    ``exec_module``); not derived from :mod:`importlib.abc`, whose import would cost
    ``import asymgeo`` about 10 ms.
    """

    def __init__(self) -> None:
        self._specs: dict[str, ModuleSpec | None] = {}

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return ModuleSpec(fullname, self)  # type: ignore[arg-type]  # a Loader by protocol

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = import_moved(spec.name)
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system has just set the alias's spec on the real module: give its own back.
        alias = module.__spec__.name if module.__spec__ is not None else module.__name__
        module.__spec__ = self._specs.pop(alias, module.__spec__)


_FINDER = _MovedModuleFinder()


def install() -> None:
    """Put the finder at the end of :data:`sys.meta_path` (once); the real modules are found first."""
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(_FINDER)
