r"""The SURE rule (paper, Section 3.1, eq. 4) with the isotropic plug-in noise scale.

.. math:: \widehat R_j = \|Z - \Pi_{T_j}Z\|_F^2 + \sigma^2(2\dim T_j - \dim T_d),

dual iff :math:`\widehat R_d < \widehat R_s`, i.e. :math:`\|\Pi_{\mathcal A}Z\|_F^2 > 2\sigma^2 k`
(:func:`asymgeo.kernels.theory.sure_statistic`).  Score :math:`\widehat R_s - \widehat R_d`.
"""

from __future__ import annotations

import numpy as np

from .._validation import check_rank
from ..kernels.theory import sure_statistic
from .registry import Decision, Rule, RuleNotApplicable, SelectionContext


def decide_sure(X: np.ndarray, D: np.ndarray, rank: int, seed: int, context: SelectionContext) -> Decision:
    """SURE (eq. 4) at the shared point of the training moment; ``context.sigma`` or the plug-in.

    Raises :class:`RuleNotApplicable` when the moment has no rank-r PSD point or zero noise."""
    rank = check_rank(rank, X.shape[1])
    try:
        res, sigma = sure_statistic(X, D, rank, sigma=context.sigma, solver=context.solver, eigen=context.eigen)
    except ValueError as exc:
        raise RuleNotApplicable(str(exc)) from exc
    return Decision(rule="sure", choice=res.choice, score=res.risk_shared - res.risk_dual, standard_error=None,
                    evidence={"statistic": res.statistic, "threshold": res.threshold, "risk_shared": res.risk_shared,
                              "risk_dual": res.risk_dual, "k": res.k, "sigma": float(sigma)},
                    result=res)


def describe_sure(decision: Decision) -> str:
    """The statistic against eq. 4's threshold."""
    e = decision.evidence
    return (f"||Pi_A Z||^2 = {e['statistic']:.4g} vs 2 sigma^2 k = {e['threshold']:.4g} "
            f"(sigma = {e['sigma']:.3g}, k = {e['k']})")


RULE = Rule(
    name="sure", label="SURE", function=decide_sure, describe=describe_sure, min_triples=2,
    summary="Stein's unbiased risk estimate (eq. 4), isotropic plug-in noise",
)
