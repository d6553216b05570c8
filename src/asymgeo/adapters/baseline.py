r"""The closed-form baseline with no training: :math:`M_c = I + c\,M/\|M\|_2`.

``M`` is the shared or dual rank-r truncation of the training relevance moment
(Theorem 1: :math:`\mathcal P_{s,r}(\widehat C)` or :math:`\mathcal P_{d,r}(\widehat C)`),
and ``c`` is chosen from a small grid by validation NDCG@10 (exact full-corpus search).
``c = 0`` is the frozen model, so the baseline is never below it on validation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .adapter import Adapter
from .training import (
    DEFAULT_SCALES,
    CorpusBlocks,
    ScaleChoice,
    ValidationScorer,
    choose_scale,
    closed_form_factors,
    prepare_training,
    resolve_device,
)

__all__ = ["DEFAULT_SCALES", "ScaleChoice", "choose_scale", "closed_form_adapter"]

def closed_form_adapter(
    X: Any,
    positive_rows: Any,
    corpus: Any,
    *,
    geometry: str,
    rank: int,
    validation_queries: Any,
    validation_relevance: Any,
    hard_negative_rows: Any = None,
    negative_rows: Any = None,
    scales: Sequence[float] = DEFAULT_SCALES,
    device: str | None = None,
) -> Adapter:
    r"""The closed-form augmented baseline :math:`I + c\,M/\|M\|_2` as a fitted :class:`Adapter`.

    Parameters are those of :meth:`Adapter.fit`; ``geometry`` is ``"shared"`` or ``"dual"``.
    The returned adapter has ``init_scale_ = c``, ``validation_ndcg_`` and ``history_`` (one
    entry ``{"scale": c, "validation_ndcg": v}`` per grid value).
    """
    if geometry not in ("shared", "dual"):
        raise ValueError(f"geometry: expected 'shared' or 'dual', got {geometry!r}")
    if not scales:
        raise ValueError("scales: expected at least one value of c")
    if validation_queries is None:
        raise ValueError("validation_queries: the closed-form baseline chooses c on validation; pass them")
    data = prepare_training(X, positive_rows, corpus, hard_negative_rows=hard_negative_rows,
                            validation_queries=validation_queries, validation_relevance=validation_relevance,
                            negative_rows=negative_rows)
    A, B, norm = closed_form_factors(data, geometry, rank)
    assert data.validation_queries is not None  # checked by prepare_training
    scorer = ValidationScorer(data.validation_queries, data.validation_relevance,
                              CorpusBlocks(data.corpus, resolve_device(device)))
    choice = choose_scale(A, B, norm, scorer, scales)
    s = math.sqrt(choice.scale / norm) if norm > 0 else 0.0
    ad = Adapter.from_maps(A * s, B * s, form="augmented", geometry=geometry)
    ad.init_scale_ = choice.scale
    ad.validation_ndcg_ = choice.validation_ndcg
    ad.history_ = [{"scale": c, "validation_ndcg": v} for c, v in choice.scores.items()]
    return ad
