r"""The cross-validated operator risk, sign rule: dual iff :math:`\bar\Delta > 0` (no SE margin).

Same folds and losses as :mod:`.cross_validation`.
"""

from __future__ import annotations

import numpy as np

from .cross_validation import cross_validated, cv_evidence, describe_cv
from .registry import Decision, Rule, SelectionContext


def decide_cv0(X: np.ndarray, D: np.ndarray, rank: int, seed: int, context: SelectionContext) -> Decision:
    """Dual iff the mean held-out ``L_s - L_d`` is positive."""
    cv = cross_validated(X, D, rank, seed, context)
    return Decision(rule="cv0", choice="dual" if cv.score > 0 else "shared", score=cv.score,
                    standard_error=cv.standard_error, evidence=cv_evidence(cv), result=cv)


RULE = Rule(
    name="cv0", label="cross-validated risk (sign)", function=decide_cv0, describe=describe_cv, sees_projection=False,
    basis_invariant=True, validated_by_default=False, min_triples=2,
    summary="cross-validated operator risk, dual iff its mean is positive",
)
