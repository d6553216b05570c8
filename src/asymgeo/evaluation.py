"""Default metric lists for evaluating retrieval runs.

The dataset-aware :func:`evaluate_frozen` moved to :mod:`asymgeo.data.evaluate` (it reads
files, so it belongs to the data layer, which sits above retrieval);
``asymgeo.evaluation.evaluate_frozen`` still works for one release and warns.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

__all__ = ["default_metrics"]


def default_metrics(k: int = 10) -> list[str]:
    """``ndcg@k`` (the paper's), graded NDCG, recall@k and @100, precision, MRR, MAP at k."""
    out = [f"ndcg@{k}", f"ndcg_graded@{k}", f"recall@{k}", f"precision@{k}", f"mrr@{k}", f"map@{k}"]
    if k != 100:
        out.insert(3, "recall@100")
    return out


def __getattr__(name: str) -> Any:
    # Deprecated alias, resolved at run time only (no import of the data layer from here).
    if name == "evaluate_frozen":
        warnings.warn(
            "asymgeo.evaluation.evaluate_frozen moved to asymgeo.data.evaluate_frozen; "
            "the old path will be removed in 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module("asymgeo.data.evaluate").evaluate_frozen
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
