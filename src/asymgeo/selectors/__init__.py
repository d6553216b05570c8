"""Layer 3, selectors: the rules that choose shared or dual geometry; imports the foundation, linalg, kernels.

One module per rule (:mod:`.cars` eq. 7, :mod:`.sure` eq. 4, :mod:`.anisotropic`,
:mod:`.cross_validation` and :mod:`.cross_validation_sign`, :mod:`.extrapolated_cv`,
:mod:`.pooled_cv`, :mod:`.bootstrap_sure`, :mod:`.pairwise`, :mod:`.ranking`
and :mod:`.validation`, which receive retrieval scores through their context), all with the
signature and result of :mod:`.registry`: ``decide(X, D, rank, *, seed, context) -> Decision``;
:mod:`.catalogue` lists the built-in names (one line per rule).  Callers look rules up by name
(:func:`get_rule`, :func:`rules`); no caller names a rule.  Names are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {name: "registry" for name in (
    "NEEDS", "Decision", "Rule", "RuleNotApplicable", "SelectionContext", "decide", "describe_rules", "get_rule",
    "register", "rule_names", "rules", "unregister")}
_EXPORTS.update({"BUILTIN_RULES": "catalogue", "DEFAULT_SELECTOR": "catalogue"})

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from .catalogue import BUILTIN_RULES, DEFAULT_SELECTOR
    from .registry import (
        NEEDS,
        Decision,
        Rule,
        RuleNotApplicable,
        SelectionContext,
        decide,
        describe_rules,
        get_rule,
        register,
        rule_names,
        rules,
        unregister,
    )
