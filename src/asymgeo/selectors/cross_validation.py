r"""The cross-validated operator risk, one-standard-error rule (issue 20).

K folds inside the training triples; :math:`\Delta_k = L_s - L_d` of fold k's held-out moment
against the truncations of the other folds' moment
(:func:`asymgeo.kernels.operator_risk.cross_validated_risk`); dual iff
:math:`\bar\Delta > \mathrm{SE}`.
"""

from __future__ import annotations

import numpy as np

from ..kernels.operator_risk import CrossValidatedRisk, cross_validated_risk
from .registry import Decision, Rule, SelectionContext


def cross_validated(X: np.ndarray, D: np.ndarray, rank: int, seed: int,
                    context: SelectionContext) -> CrossValidatedRisk:
    """The kernel's result with ``min(context.cv_folds, n)`` folds, seeded by ``seed``."""
    return cross_validated_risk(X, D, np.zeros_like(D), rank, folds=min(int(context.cv_folds), X.shape[0]), seed=seed)


def cv_evidence(cv: CrossValidatedRisk) -> dict[str, object]:
    """Small evidence mapping of a cross-validated risk."""
    return {"folds": cv.folds, "differences": [float(v) for v in cv.differences], "seed": cv.seed}


def decide_cv(X: np.ndarray, D: np.ndarray, rank: int, seed: int, context: SelectionContext) -> Decision:
    """Dual iff the mean held-out ``L_s - L_d`` exceeds its standard error."""
    cv = cross_validated(X, D, rank, seed, context)
    return Decision(rule="cv", choice=cv.choice, score=cv.score, standard_error=cv.standard_error,
                    evidence=cv_evidence(cv), result=cv)


def describe_cv(decision: Decision) -> str:
    """``held-out L_s - L_d <score> +/- <se> over <folds> folds``."""
    return (f"held-out L_s - L_d {decision.score:.4g} +/- {decision.standard_error:.2g} over "
            f"{decision.evidence['folds']} folds")


RULE = Rule(
    name="cv", label="cross-validated risk", function=decide_cv, describe=describe_cv, sees_projection=False,
    basis_invariant=True,
    validated_by_default=False, min_triples=2,
    summary="cross-validated operator risk, folds inside the training triples, dual only when it wins by "
            "more than one standard error",
)
