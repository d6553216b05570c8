r"""The selector registry: one home for the decision between shared and dual geometry.

Every rule that chooses a family is a :class:`Rule` registered under one name, with one
signature,

.. code-block:: python

    rule.decide(X, D, rank, *, seed=0, context=None) -> Decision

where ``X`` (n, p) are the training queries and ``D = Y_pos - Y_neg`` (n, p) (centre both
first for the directional part), ``rank`` the fitted rank r, ``seed`` the rule's random
choices and ``context`` a :class:`SelectionContext` (the rule's settings, shared work such
as known eigenpairs, and what a rule that is not decided by triples alone needs: a scorer of
validation retrieval, or trained adapters' validation scores).  Every rule returns a
:class:`Decision`: ``choice``, ``score`` (> 0 favours dual), ``standard_error`` (or None),
the rule's ``name`` and a small ``evidence`` mapping.

Rules that need more than triples *declare* it (:attr:`Rule.needs`): ``"retrieval"`` (a
corpus and judged validation queries, given as ``context.score_operator``, a callable the
retrieval layer builds) or ``"trained"`` (``context.validation_scores``, per-query validation
NDCG@10 of each trained family).  The estimator layer therefore never imports search.

Adding a rule: one module defining ``RULE = Rule(...)`` and one line in
:data:`asymgeo.selectors.catalogue.BUILTIN_RULES`
(or :func:`register` at run time); it is then available to
:class:`~asymgeo.estimators.projections.GeometrySelector`, ``asymgeo select --selector``,
``fit --geometry auto --selector``, :func:`~asymgeo.estimators.validation.validate_selection`
and the experiments, none of which name rules.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .catalogue import ALIASES as _ALIASES
from .catalogue import BUILTIN_RULES

__all__ = [
    "Decision",
    "SelectionContext",
    "paired_difference",
    "Rule",
    "RuleNotApplicable",
    "NEEDS",
    "BUILTIN_RULES",
    "register",
    "unregister",
    "get_rule",
    "rule_names",
    "rules",
    "decide",
    "describe_rules",
]

#: What a rule may need beyond its triples (:attr:`Rule.needs`).
NEEDS = ("retrieval", "trained")

class RuleNotApplicable(ValueError):
    """A rule cannot decide on these triples (e.g. SURE without a rank-r PSD point).

    :func:`~asymgeo.estimators.validation.validate_selection` and the experiments record
    ``("shared", nan)`` for such a cell; :class:`GeometrySelector` raises it.
    """


@dataclass(frozen=True)
class Decision:
    """One rule's decision between shared and dual.

    Attributes
    ----------
    rule : the registered name of the rule.
    choice : ``"shared"`` or ``"dual"``.
    score : the rule's statistic, > 0 favours dual (NaN when the rule did not apply).
    standard_error : its standard error, or None when the rule has none.
    evidence : small mapping of what the decision rests on (JSON-able numbers and strings).
    result : the rule's native result object (``CarsResult``, ``SureResult``, ...), or None.
    """

    rule: str
    choice: str
    score: float
    standard_error: float | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    result: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.choice not in ("shared", "dual"):
            raise ValueError(f"Decision of rule {self.rule!r}: choice must be 'shared' or 'dual', got {self.choice!r}")
        object.__setattr__(self, "score", float(self.score))
        if self.standard_error is not None:
            object.__setattr__(self, "standard_error", float(self.standard_error))
        object.__setattr__(self, "evidence", dict(self.evidence))  # a copy: the caller's mapping stays theirs

    @property
    def clear(self) -> bool:
        """Whether the score is more than one standard error from 0 (False without a standard error)."""
        se = self.standard_error
        return se is not None and math.isfinite(self.score) and abs(self.score) > se

    def cell(self) -> dict[str, Any]:
        """The columns of a validation cell: ``<rule>_choice``, ``<rule>_score`` and, with a
        standard error, ``<rule>_se``."""
        out: dict[str, Any] = {f"{self.rule}_score": self.score}
        if self.standard_error is not None:
            out[f"{self.rule}_se"] = self.standard_error
        out[f"{self.rule}_choice"] = self.choice
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-able ``{"rule", "choice", "score", "standard_error", "evidence"}``."""
        return {"rule": self.rule, "choice": self.choice, "score": self.score,
                "standard_error": self.standard_error, "evidence": _plain(dict(self.evidence))}


def paired_difference(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of the paired per-item difference ``a - b`` (SE infinite for one item):
    the one-SE rules (``ranking``, ``validation``, ``pairwise``) compare their families with it."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    se = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else float("inf")
    return float(d.mean()), se


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


#: ``f(M) -> (m,)`` per-query NDCG@10 of judged validation queries searched through ``M`` (None: frozen).
Scorer = Callable[[np.ndarray | None], np.ndarray]


@dataclass(frozen=True)
class SelectionContext:
    """Settings, shared work and extra inputs of a decision (all optional).

    Attributes
    ----------
    n_splits : CARS half-splits L (paper: 20).
    selector_dim : CARS random projection dimension (paper: 256), or None.
    solver : truncation solver (``"auto"``, ``"dense"``, ``"krylov"``).
    n_jobs : threads a rule may use (CARS over splits; None: its default).
    sigma : known noise scale for SURE (None: the isotropic plug-in).
    cv_folds : inner folds of the cross-validated risk (capped at n).
    eigen : ``(values, vectors)``, the top-r (or more) eigenpairs of ``sym(X^T D / n)`` when
        already computed (SURE and anisotropic SURE then skip their eigensolver).
    score_operator : for rules needing ``"retrieval"``: ``f(M) -> (m,)`` per-query NDCG@10 of
        judged validation queries searched through the operator ``M`` (None: frozen).
    scales : rule ``"ranking"``: the grid of ``c`` (None: its default grid).
    validation_scores : for rules needing ``"trained"``: ``{"shared": (m,), "dual": (m,)}``
        per-query validation NDCG@10 of the two trained adapters on the same queries.
    tie_break : rule ``"validation"``: ``"shared"`` (default) or ``"cars"``.
    cars : a CARS :class:`Decision` already computed on the same triples (reported beside
        the rule's own; reused by ``tie_break="cars"`` and by the ``"cars"`` rule).
    """

    n_splits: int = 20
    selector_dim: int | None = None
    solver: str = "auto"
    n_jobs: int | None = None
    sigma: float | None = None
    cv_folds: int = 5
    eigen: tuple[np.ndarray, np.ndarray] | None = None
    score_operator: Scorer | None = None
    scales: tuple[float, ...] | None = None
    validation_scores: Mapping[str, np.ndarray] | None = None
    tie_break: str = "shared"
    cars: Decision | None = None

    def with_(self, **changes: Any) -> SelectionContext:
        """A copy with ``changes`` applied."""
        from dataclasses import replace

        return replace(self, **changes)


DecideFunction = Callable[[np.ndarray, np.ndarray, int, int, SelectionContext], Decision]


@dataclass(frozen=True)
class Rule:
    """A registered geometry selector.

    Attributes
    ----------
    name : the registry name (``select --selector NAME``); unique.
    label : how reports name it (``"CARS"``).
    summary : one line for ``--help`` and the docs.
    function : ``f(X, D, rank, seed, context) -> Decision`` (``X, D`` float64).
    needs : subset of :data:`NEEDS`; empty for rules decided by the triples alone.
    sees_projection : whether the rule is given the selector projection's view (``X R, D R``)
        when a caller uses one (CARS and SURE do; the cross-validated risk scores the
        full-space operators).
    basis_invariant : whether the decision is unchanged when the triples are expressed in an
        orthonormal basis of their row space (``X Q, D Q``): callers may then pass the smaller
        arrays (exact; CARS and the cross-validated risk, not SURE, whose dimensions depend on p).
    validated_by_default : scored by :func:`validate_selection` unless ``rules=`` says otherwise
        (the expensive ones only when asked).
    min_triples : fewest triples the rule decides on.
    cell_columns : evidence keys that validation cells also carry as columns of their own
        (CARS: ``raw_distance``, ``corrected_distance``, the RQ2 distances).
    describe : ``f(decision) -> str``, one line on what the decision rests on (reports); None:
        the score and its standard error.
    """

    name: str
    label: str
    summary: str
    function: DecideFunction
    needs: frozenset[str] = frozenset()
    sees_projection: bool = True
    basis_invariant: bool = False
    validated_by_default: bool = True
    min_triples: int = 2
    cell_columns: tuple[str, ...] = ()
    describe: Callable[[Decision], str] | None = None

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name in ("shared", "dual", "oracle", "selector"):
            raise ValueError(f"Rule name {self.name!r}: expected an identifier other than shared, dual, oracle, "
                             "selector (those name fixed rules and report columns)")
        bad = set(self.needs) - set(NEEDS)
        if bad:
            raise ValueError(f"Rule {self.name!r}: needs {sorted(bad)} unknown; expected a subset of {NEEDS}")
        object.__setattr__(self, "needs", frozenset(self.needs))

    def explain(self, decision: Decision) -> str:
        """One line on what ``decision`` rests on (the rule's ``describe``, else its score)."""
        if self.describe is not None:
            return self.describe(decision)
        se = decision.standard_error
        return f"score {decision.score:.4g}" + (f" +/- {se:.2g}" if se is not None else "")

    @property
    def triples_only(self) -> bool:
        """Whether the rule decides from the training triples alone."""
        return not self.needs

    def decide(self, X: np.ndarray, D: np.ndarray, rank: int, *, seed: int = 0,
               context: SelectionContext | None = None) -> Decision:
        """Decide on queries ``X`` and ``D = Y_pos - Y_neg`` (each (n, p)) at ``rank``."""
        from .._validation import as_float_matrix, check_same_shape

        ctx = context if context is not None else SelectionContext()
        missing = [need for need in sorted(self.needs) if _provided(ctx, need) is None]
        if missing:
            raise ValueError(f"selector {self.name!r} needs {' and '.join(_NEED_TEXT[m] for m in missing)} "
                             "(not given in its context)")
        Xf = as_float_matrix(X, "X")
        Df = as_float_matrix(D, "D")
        check_same_shape({"X": Xf, "D": Df})
        if Xf.shape[0] < self.min_triples:
            raise ValueError(f"X: {self.label} needs at least {self.min_triples} triples, got n = {Xf.shape[0]}")
        out = self.function(Xf, Df, int(rank), int(seed), ctx)
        if not isinstance(out, Decision) or out.rule != self.name:
            raise TypeError(f"selector {self.name!r}: expected a Decision of rule {self.name!r}, got {out!r}")
        return out


_NEED_TEXT = {"retrieval": "a corpus and judged validation queries (context.score_operator)",
              "trained": "both families trained (context.validation_scores)"}


def _provided(ctx: SelectionContext, need: str) -> Any:
    return ctx.score_operator if need == "retrieval" else ctx.validation_scores


_REGISTRY: dict[str, Rule] = {}
_LOADED = False


def _load_builtins() -> None:
    global _LOADED
    if _LOADED:
        return
    for name, module in BUILTIN_RULES.items():
        if name not in _REGISTRY:
            rule = importlib.import_module(module).RULE
            if rule.name != name:
                raise RuntimeError(f"{module}: RULE is named {rule.name!r}, registered as {name!r}")
            _REGISTRY[name] = rule
    _LOADED = True


def register(rule: Rule, *, replace: bool = False) -> Rule:
    """Add ``rule`` to the registry (``replace=True`` to overwrite a rule of the same name)."""
    if not isinstance(rule, Rule):
        raise TypeError(f"rule: expected a Rule, got {type(rule).__name__}")
    _load_builtins()
    if rule.name in _REGISTRY and not replace:
        raise ValueError(f"a selector named {rule.name!r} is already registered (two algorithms never share "
                         "a name; pass replace=True to overwrite it)")
    _REGISTRY[rule.name] = rule
    return rule


def unregister(name: str) -> None:
    """Remove a rule registered at run time (the built-in rules cannot be removed)."""
    _load_builtins()
    if name in BUILTIN_RULES:
        raise ValueError(f"{name!r} is a built-in selector; it cannot be unregistered")
    if name not in _REGISTRY:
        raise KeyError(name)
    del _REGISTRY[name]


def rules(*, triples_only: bool | None = None, needs: Iterable[str] | None = None) -> list[Rule]:
    """Registered rules in listing order; ``triples_only=True`` keeps those decided by the
    triples alone; ``needs`` keeps those whose needs are within it."""
    _load_builtins()
    out = list(_REGISTRY.values())
    if triples_only is not None:
        out = [r for r in out if r.triples_only == triples_only]
    if needs is not None:
        allowed = set(needs)
        out = [r for r in out if r.needs <= allowed]
    return out


def rule_names(*, triples_only: bool | None = None, needs: Iterable[str] | None = None) -> list[str]:
    """Names of :func:`rules` (same filters)."""
    return [r.name for r in rules(triples_only=triples_only, needs=needs)]


def get_rule(name: str, *, argument: str = "selector") -> Rule:
    """The rule registered as ``name``; ValueError naming ``argument`` and the choices otherwise."""
    _load_builtins()
    if not isinstance(name, str):
        raise TypeError(f"{argument}: expected a selector name, got {type(name).__name__}")
    if name in _ALIASES and name not in _REGISTRY:
        from .._deprecation import warn_deprecated

        warn_deprecated(f"{argument}={name!r} is renamed to {_ALIASES[name]!r}", stacklevel=3)
        name = _ALIASES[name]
    rule = _REGISTRY.get(name)
    if rule is None:
        raise ValueError(f"{argument}: expected one of {', '.join(map(repr, _REGISTRY))}, got {name!r}")
    return rule


def decide(name: str, X: np.ndarray, D: np.ndarray, rank: int, *, seed: int = 0,
           context: SelectionContext | None = None) -> Decision:
    """``get_rule(name).decide(X, D, rank, seed=seed, context=context)``."""
    return get_rule(name).decide(X, D, rank, seed=seed, context=context)


def describe_rules(names: Iterable[str] | None = None) -> str:
    """``"name: summary; ..."`` of the rules (``--help`` text)."""
    chosen = rules() if names is None else [get_rule(n) for n in names]
    return "; ".join(f"{r.name}: {r.summary}" + (f" (needs {', '.join(sorted(r.needs))})" if r.needs else "")
                     for r in chosen)
