r"""The cross-validated risk extrapolated to the full training size (issue #37).

K-fold cross-validation judges moments of fewer rows than the rule will fit, which biases it
toward shared exactly where :math:`L_s - L_d` rises with n.  Corollary 1's local risk difference
is linear in :math:`1/m`, so each fold's held-out difference is measured at two training sizes
and the line through them is read at n
(:func:`asymgeo.kernels.operator_risk.extrapolated_cross_validated_risk`); dual iff positive.
"""

from __future__ import annotations

import numpy as np

from ..kernels.operator_risk import extrapolated_cross_validated_risk
from .registry import Decision, Rule, SelectionContext


def decide_extrapolated_cv(X: np.ndarray, D: np.ndarray, rank: int, seed: int,
                           context: SelectionContext) -> Decision:
    """Dual iff the size-extrapolated mean held-out ``L_s - L_d`` is positive."""
    folds = max(3, min(int(context.cv_folds), X.shape[0]))
    res = extrapolated_cross_validated_risk(X, D, rank, folds=folds, seed=seed)
    return Decision(rule="cvx", choice=res.choice, score=res.score, standard_error=res.standard_error,
                    evidence={"folds": res.folds, "seed": res.seed, "at_train": float(res.at_train.mean()),
                              "at_smaller": float(res.at_smaller.mean())},
                    result=res)


def describe_extrapolated_cv(decision: Decision) -> str:
    """The extrapolated difference beside the two it was read from."""
    e = decision.evidence
    return (f"held-out L_s - L_d extrapolated to n: {decision.score:.4g} +/- {decision.standard_error:.2g} "
            f"(at the folds' size {e['at_train']:.4g}, one fold fewer {e['at_smaller']:.4g}; {e['folds']} folds)")


RULE = Rule(
    name="cvx", label="size-extrapolated cross-validated risk", function=decide_extrapolated_cv,
    describe=describe_extrapolated_cv, sees_projection=False, basis_invariant=True, validated_by_default=False,
    min_triples=6,
    summary="cross-validated operator risk at two training sizes, extrapolated in 1/n to the full size; dual iff "
            "positive",
)
