r"""Trained-adapter validation (``fit --geometry auto``'s default): the family whose trained
adapter has the higher validation NDCG@10; within one standard error, a tie.

Both families are scored on the same validation queries (``context.validation_scores``: their
per-query NDCG@10); the paired difference ``dual - shared`` has mean ``diff`` and standard error
``se``.  ``|diff| > se``: the better family.  A tie is broken by ``context.tie_break``:
``"shared"`` (the one-standard-error rule: the family with fewer free directions, Corollary 1's
lower-variance choice) or ``"cars"`` (CARS's decision, ``context.cars``, when its score is more
than one of its standard errors from 0, else shared).
"""

from __future__ import annotations

import numpy as np

from .registry import Decision, Rule, SelectionContext, paired_difference


def validation_choice(diff: float, standard_error: float, tie_break: str = "shared",
                      cars: Decision | None = None) -> tuple[str, str]:
    """``(choice, outcome)`` from the paired validation difference ``diff = dual - shared`` and its
    standard error: the better family beyond one standard error (``"validation"``), else the tie
    rule (``"tie: CARS"`` when ``tie_break="cars"`` and CARS is clear, else ``"tie: shared"``)."""
    if abs(diff) > standard_error:
        return ("dual" if diff > 0 else "shared"), "validation"
    if tie_break == "cars" and cars is not None and cars.clear:
        return cars.choice, "tie: CARS"
    return "shared", "tie: shared"


def decide_validation(X: np.ndarray, D: np.ndarray, rank: int, seed: int, context: SelectionContext) -> Decision:
    """Decide from the trained families' per-query validation NDCG@10."""
    if context.tie_break not in ("shared", "cars"):
        raise ValueError(f"tie_break: expected 'shared' or 'cars', got {context.tie_break!r}")
    scores = context.validation_scores or {}
    missing = [g for g in ("shared", "dual") if g not in scores]
    if missing:
        raise ValueError(f"context.validation_scores: missing the {' and '.join(missing)} family")
    shared, dual = (np.asarray(scores[g], dtype=np.float64) for g in ("shared", "dual"))
    if shared.shape != dual.shape or shared.ndim != 1:
        raise ValueError(f"context.validation_scores: expected two (m,) arrays over the same queries, got "
                         f"{shared.shape} and {dual.shape}")
    diff, se = paired_difference(dual, shared)
    choice, outcome = validation_choice(diff, se, context.tie_break, context.cars)
    return Decision(rule="validation", choice=choice, score=diff, standard_error=se,
                    evidence={"outcome": outcome, "validation_shared": float(shared.mean()),
                              "validation_dual": float(dual.mean()), "n_validation": int(dual.size)})


def describe_validation(decision: Decision) -> str:
    """Both trained families' validation NDCG@10 and the paired difference."""
    e = decision.evidence
    return (f"validation NDCG@10 shared {e['validation_shared']:.4f}, dual {e['validation_dual']:.4f}, dual - shared "
            f"{decision.score:+.4f} +/- {decision.standard_error:.4f} over {e['n_validation']} queries "
            f"({e['outcome']})")


RULE = Rule(
    name="validation", label="trained validation", function=decide_validation, describe=describe_validation,
    needs=frozenset({"trained"}),
    sees_projection=False, min_triples=1,
    summary="train both families, keep the better on validation NDCG@10 (within one SE: shared)",
)
