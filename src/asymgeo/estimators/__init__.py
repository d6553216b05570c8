"""Layer 4, estimators: scikit-learn-style estimators and protocols; imports layers 0-3 (selectors included).

:mod:`.projections` (``SharedProjection``, ``DualProjection``, ``GeometrySelector``),
:mod:`.simulation` (the two-view model of RQ1, the local Gaussian experiment),
:mod:`.validation` (``validate_selection``: the five-fold check of the decision, Table 1).
The estimator classes are importable from here too (``from asymgeo.estimators import
SharedProjection``), on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "SharedProjection": "projections",
    "DualProjection": "projections",
    "GeometrySelector": "projections",
    "NotFittedError": "projections",
    "estimate_moment_noise": "projections",  # re-exported from the kernels, as in 0.1
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        # 0.1's ``asymgeo.estimators`` was the module now at ``.projections``: its other
        # names still resolve here for one release, with a warning.
        projections = importlib.import_module(".projections", __name__)
        if name.startswith("__") or not hasattr(projections, name):
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from .._deprecation import warn_deprecated

        warn_deprecated(f"asymgeo.estimators.{name} moved to asymgeo.estimators.projections.{name}")
        globals()[name] = getattr(projections, name)  # one warning per name
        return globals()[name]
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from .projections import DualProjection, GeometrySelector, NotFittedError, SharedProjection, estimate_moment_noise
