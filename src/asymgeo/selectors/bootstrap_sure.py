r"""Bootstrap SURE: Theorem 3's noise-priced comparison on the actual truncations (issue #37).

.. math::

    \hat\Delta = \frac{1}{2B\,\|\widehat C\|_F^2} \sum_{b=1}^{B} \sum_{\pm}
        \Big[\|\mathcal P_{s,r}(\widehat C \pm \sqrt 2\,E_b) - \widehat C\|_F^2
           - \|\mathcal P_{d,r}(\widehat C \pm \sqrt 2\,E_b) - \widehat C\|_F^2\Big],

with :math:`\widehat C = X^\top D / n` and :math:`E_b = \sum_i g^{(b)}_i (x_i d_i^\top - \widehat C)
/ \sqrt{n(n-1)}`, :math:`g^{(b)} \sim N(0, I_n)` (a draw of the moment's own sampling noise,
anisotropic and mean term included); :math:`B` = 32 antithetic pairs.  Dual iff
:math:`\hat\Delta > 0`.  Where the truncations are locally linear its expectation is
:math:`\|\Pi_{\mathcal A}\widehat C\|^2 - 2\,\mathrm{tr}(\Pi_{\mathcal A}\widehat\Sigma)/n`, the
anisotropic form of eq. 4 (Theorem 3's threshold :math:`2\sigma^2 k`); elsewhere (tied spectra
below the latent rank, small n) it measures the closed forms themselves
(:func:`asymgeo.kernels.bootstrap_risk.noise_doubled_risk`).  The standard error is the
first-order sampling error :math:`2\,\mathrm{sd}(x_i^\top V d_i)/\sqrt n / \|\widehat C\|^2`,
:math:`V = \mathcal P_{d,r}(\widehat C) - \mathcal P_{s,r}(\widehat C)`.
"""

from __future__ import annotations

import numpy as np

from ..kernels.bootstrap_risk import noise_doubled_risk
from .registry import Decision, Rule, SelectionContext

__all__ = ["decide_bootstrap_sure", "describe_bootstrap_sure", "RULE"]


def decide_bootstrap_sure(X: np.ndarray, D: np.ndarray, rank: int, seed: int, context: SelectionContext) -> Decision:
    """Dual iff the noise-doubled bootstrap risk difference is positive (multipliers seeded by ``seed``)."""
    res = noise_doubled_risk(X, D, rank, seed=seed, solver=context.solver)
    return Decision(rule="bsure", choice=res.choice, score=res.score, standard_error=res.standard_error,
                    evidence={"plug_in": res.plug_in, "monte_carlo_error": res.monte_carlo_error,
                              "pairs": int(res.terms.size), "inflation": res.inflation, "seed": res.seed},
                    result=res)


def describe_bootstrap_sure(decision: Decision) -> str:
    """The score beside the plug-in difference it corrects."""
    e = decision.evidence
    return (f"bootstrap R_s - R_d = {decision.score:+.4g} +/- {decision.standard_error:.2g} "
            f"(plug-in {e['plug_in']:.4g}; {e['pairs']} antithetic pairs at {e['inflation']:g}x the moment's noise)")


RULE = Rule(
    name="bsure", label="bootstrap SURE", function=decide_bootstrap_sure, describe=describe_bootstrap_sure,
    sees_projection=False, basis_invariant=True, validated_by_default=False, min_triples=2,
    summary="SURE's doubled noise price on the actual truncations: the risk difference against the training "
            "moment under twice its bootstrapped noise; dual iff positive",
)
