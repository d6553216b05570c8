r"""CARS, the cross-fitted asymmetry risk selector (paper, Section 3.2, eq. 7).

.. math::
    \widehat\Gamma_{\rm CARS} = \frac1L\sum_{b=1}^L\Big[\langle V_{I_{b,1}},V_{I_{b,2}}\rangle_F
        - \tfrac14\|V_{I_{b,1}}-V_{I_{b,2}}\|_F^2\Big],\qquad
    V_I = \mathcal P_{d,r}(\widehat C_I) - \mathcal P_{s,r}(\widehat C_I);

dual iff :math:`\widehat\Gamma > 0`.  The kernel is :func:`asymgeo.kernels.selection.cars_score`.
"""

from __future__ import annotations

import numpy as np

from ..kernels.selection import cars_score
from .registry import Decision, Rule, SelectionContext


def decide_cars(X: np.ndarray, D: np.ndarray, rank: int, seed: int, context: SelectionContext) -> Decision:
    r"""CARS (eq. 7) on ``X`` and ``D = Y_pos - Y_neg``: score :math:`\widehat\Gamma`, its standard
    error over the ``context.n_splits`` half-splits, ``context.selector_dim`` projection."""
    if context.cars is not None:  # already computed on these triples by the caller
        return context.cars
    res = cars_score(X, D, np.zeros_like(D), rank, n_splits=context.n_splits, seed=seed,
                     selector_dim=context.selector_dim, solver=context.solver, n_jobs=context.n_jobs)
    return cars_decision(res)


def cars_decision(res) -> Decision:
    """The :class:`Decision` of a :class:`~asymgeo.kernels.selection.CarsResult`."""
    return Decision(rule="cars", choice=res.choice, score=res.score, standard_error=res.standard_error,
                    evidence={"raw_distance": float(res.raw_distance),
                              "corrected_distance": float(res.corrected_distance), "n": int(res.n),
                              "n_splits": int(res.n_splits), "selector_dim": res.selector_dim, "seed": res.seed},
                    result=res)


RULE = Rule(
    name="cars", label="CARS", function=decide_cars, basis_invariant=True, min_triples=4,
    cell_columns=("raw_distance", "corrected_distance"),
    summary="cross-fitted asymmetry risk (eq. 7): dual iff the half-split score is positive",
)
