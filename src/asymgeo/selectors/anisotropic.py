r"""SURE with the dual-only directions priced by their own noise (Theorem 2 with a general covariance).

Dual iff :math:`\|\Pi_{\mathcal A}Z\|_F^2 > 2\,\widehat{\mathrm{tr}}(\Pi_{\mathcal A}\Sigma)`
(:func:`asymgeo.kernels.theory.anisotropic_sure`); score
:math:`(\|\Pi_{\mathcal A}Z\|^2 - 2\,\widehat{\mathrm{tr}}(\Pi_{\mathcal A}\Sigma))/n`.
"""

from __future__ import annotations

import numpy as np

from ..kernels.theory import anisotropic_sure
from .registry import Decision, Rule, SelectionContext


def decide_anisotropic(X: np.ndarray, D: np.ndarray, rank: int, seed: int, context: SelectionContext) -> Decision:
    """Anisotropic SURE on ``X`` and ``D`` (``context.eigen``: known top eigenpairs of sym(C))."""
    an = anisotropic_sure(X, D, rank, eigen=context.eigen)
    return Decision(rule="anisotropic", choice=an.choice, score=an.score, standard_error=None,
                    evidence={"statistic": an.statistic, "threshold": an.threshold,
                              "isotropic_threshold": an.isotropic_threshold, "k": an.k, "n": an.n},
                    result=an)


def describe_anisotropic(decision: Decision) -> str:
    """The statistic against its anisotropic and isotropic thresholds."""
    e = decision.evidence
    return (f"||Pi_A Z||^2 = {e['statistic']:.4g} vs 2 tr(Pi_A Sigma) = {e['threshold']:.4g}; "
            f"isotropic 2 sigma^2 k = {e['isotropic_threshold']:.4g}")


RULE = Rule(
    name="anisotropic", label="anisotropic SURE", function=decide_anisotropic, describe=describe_anisotropic,
    min_triples=2,
    summary="SURE with the dual-only directions priced by their own noise",
)
