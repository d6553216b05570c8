r"""The ranking-aware rule (issue 20): decide by validation retrieval, not by operator loss.

For each family :math:`g` the closed-form augmented operator of the training moment,

.. math:: M_g(c) = I + c\,\frac{\mathcal P_{g,r}(\widehat C)}{\|\mathcal P_{g,r}(\widehat C)\|_2},

(Theorem 1's truncations; the closed-form baseline of :mod:`asymgeo.adapters.baseline`) is
scored by per-query NDCG@10 of judged validation queries, searched over the full corpus
through ``context.score_operator`` (built by the retrieval layer:
:func:`asymgeo.retrieval.ranking_selector.ranking_context`); each family keeps its best
:math:`c` on a small grid (``c = 0`` is the frozen model, the same for both; ties keep the
smaller ``c``).  The per-query difference dual - shared of the two best operators has mean
``diff`` and standard error ``se``; dual iff ``diff > se`` (one standard error toward shared).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import check_rank
from ..kernels.geometry import dual_truncate, shared_truncate
from .registry import Decision, Rule, SelectionContext, paired_difference

__all__ = ["RankingChoice", "RANKING_SCALES", "decide_ranking"]

#: The grid of ``c`` (the closed-form baseline's, :data:`asymgeo.adapters.training.DEFAULT_SCALES`).
RANKING_SCALES: tuple[float, ...] = (0.0, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0)


@dataclass(frozen=True)
class RankingChoice:
    """Outcome of the ranking-aware rule (``Decision.result`` of rule ``"ranking"``).

    Attributes
    ----------
    choice : ``"dual"`` iff ``diff > standard_error``.
    diff, standard_error : mean and standard error of the per-query NDCG@10 difference
        dual - shared at each family's best ``c``.
    ndcg : ``{"shared": v, "dual": v}`` mean validation NDCG@10 at the best ``c``.
    scale : ``{"shared": c, "dual": c}`` the chosen ``c``.
    n_validation : validation queries with a relevant document.
    """

    choice: str
    diff: float
    standard_error: float
    ndcg: dict[str, float]
    scale: dict[str, float]
    n_validation: int

    @property
    def score(self) -> float:
        """``diff``: > 0 favours dual."""
        return self.diff


def decide_ranking(X: np.ndarray, D: np.ndarray, rank: int, seed: int, context: SelectionContext) -> Decision:
    """The family whose closed-form augmented operator ranks the validation queries better."""
    score = context.score_operator
    if score is None:  # pragma: no cover - Rule.decide checks the need first
        raise ValueError("selector 'ranking' needs context.score_operator")
    grid = [float(c) for c in (RANKING_SCALES if context.scales is None else context.scales)]
    if not grid or any(not np.isfinite(c) or c < 0 for c in grid):
        raise ValueError(f"scales: expected non-negative values of c, got {grid!r}")
    p = X.shape[1]
    rank = check_rank(rank, p)
    C = X.T @ D / X.shape[0]
    best: dict[str, tuple[float, float, np.ndarray]] = {}
    frozen: np.ndarray | None = None
    for family, trunc in (("shared", shared_truncate), ("dual", dual_truncate)):
        M = trunc(C, rank)
        norm = float(np.linalg.norm(M, 2))
        for c in grid:
            if c == 0.0 or norm == 0.0:
                if frozen is None:
                    frozen = np.asarray(score(None), dtype=np.float64)
                per = frozen
            else:
                per = np.asarray(score(np.eye(p) + (c / norm) * M), dtype=np.float64)
            if family not in best or per.mean() > best[family][1] + 1e-12:  # ties keep the smaller c
                best[family] = (c, float(per.mean()), per)
    diff, se = paired_difference(best["dual"][2], best["shared"][2])
    rc = RankingChoice(choice="dual" if diff > se else "shared", diff=diff, standard_error=se,
                       ndcg={g: best[g][1] for g in best}, scale={g: best[g][0] for g in best},
                       n_validation=int(best["dual"][2].size))
    return Decision(rule="ranking", choice=rc.choice, score=diff, standard_error=se,
                    evidence={"validation_shared": rc.ndcg["shared"], "validation_dual": rc.ndcg["dual"],
                              "n_validation": rc.n_validation, "scale": dict(rc.scale)},
                    result=rc)


def describe_ranking(decision: Decision) -> str:
    """Both families' validation NDCG@10 at their best ``c`` and the paired difference."""
    e = decision.evidence
    return (f"validation NDCG@10 shared {e['validation_shared']:.4f} (c = {e['scale']['shared']:g}), dual "
            f"{e['validation_dual']:.4f} (c = {e['scale']['dual']:g}), dual - shared {decision.score:+.4f} +/- "
            f"{decision.standard_error:.4f} over {e['n_validation']} held-out queries")


RULE = Rule(
    name="ranking", label="ranking-aware", function=decide_ranking, describe=describe_ranking,
    needs=frozenset({"retrieval"}),
    sees_projection=False, min_triples=2,
    summary="validation NDCG@10 of each family's closed-form I + cM by exact search, one SE toward shared",
)
