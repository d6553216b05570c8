r"""Held-out pairwise accuracy (the RQ1 experiment's rule, issue 20).

A seeded fifth of the triples (at least 2) is held out; both truncations of the other rows'
moment rank each held-out positive against its negative (:math:`x^\top M d > 0`, ``d = y^+ - y^-``);
dual iff its accuracy is higher by more than one standard error of the paired per-triple difference.
Score: the mean difference (dual - shared).
"""

from __future__ import annotations

import numpy as np

from ..kernels.geometry import dual_truncate, shared_truncate
from .registry import Decision, Rule, SelectionContext, paired_difference


def decide_pairwise(X: np.ndarray, D: np.ndarray, rank: int, seed: int, context: SelectionContext) -> Decision:
    """Pairwise accuracy of both truncations on a held-out fifth of the triples."""
    n = X.shape[0]
    perm = np.random.default_rng(np.random.SeedSequence(seed)).permutation(n)
    val, fit = perm[: max(2, n // 5)], perm[max(2, n // 5):]
    C = X[fit].T @ D[fit] / fit.size
    right = {g: (np.einsum("ij,jk,ik->i", X[val], M, D[val]) > 0).astype(float)
             for g, M in (("shared", shared_truncate(C, rank)), ("dual", dual_truncate(C, rank)))}
    diff, se = paired_difference(right["dual"], right["shared"])
    return Decision(rule="pairwise", choice="dual" if diff > se else "shared", score=diff, standard_error=se,
                    evidence={"accuracy_shared": float(right["shared"].mean()),
                              "accuracy_dual": float(right["dual"].mean()), "n_validation": int(val.size)})


def describe_pairwise(decision: Decision) -> str:
    """Both families' held-out pairwise accuracy."""
    e = decision.evidence
    return (f"held-out pairwise accuracy shared {e['accuracy_shared']:.3f}, dual {e['accuracy_dual']:.3f} over "
            f"{e['n_validation']} triples")


RULE = Rule(
    name="pairwise", label="held-out pairwise accuracy", function=decide_pairwise, describe=describe_pairwise,
    sees_projection=False,
    validated_by_default=False, min_triples=4,
    summary="a fifth of the triples held out, each family's positive-over-negative accuracy, one SE toward shared",
)
