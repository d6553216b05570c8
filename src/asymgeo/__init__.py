"""asymgeo: when does dense retrieval need asymmetric geometry? Shared or dual projections.

Low-level kernels (pure functions on arrays) are re-exported here together with the
estimators, search, metrics and data loaders.  Convention: queries and documents are
rows; an operator ``M`` scores ``x^T M y`` (score matrix ``X @ M @ Y.T``).

The names are imported on first use (PEP 562 module ``__getattr__``), so
``import asymgeo`` and the command line start fast; ``from asymgeo import X`` and
``asymgeo.X`` work as for eager imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

#: public name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    # geometry kernels
    "relevance_moment": "geometry",
    "sym": "geometry",
    "skew": "geometry",
    "dual_truncate": "geometry",
    "shared_truncate": "geometry",
    "dual_factors": "geometry",
    "shared_factors": "geometry",
    "psd_distance": "geometry",
    "approximation_gap": "geometry",
    "ApproximationGap": "geometry",
    "tangent_dims": "geometry",
    "tangent_projectors": "geometry",
    "TangentProjectors": "geometry",
    # theory kernels
    "local_risks": "theory",
    "LocalRisks": "theory",
    "sure_select_probability": "theory",
    "sure_regret": "theory",
    "sure_select": "theory",
    "sure_statistic": "theory",
    "estimate_moment_noise": "theory",
    "SureResult": "theory",
    "optimal_separation": "theory",
    "OptimalSeparation": "theory",
    # estimators
    "SharedProjection": "estimators",
    "DualProjection": "estimators",
    "GeometrySelector": "estimators",
    # simulation
    "two_view_model": "simulation",
    "TwoViewModel": "simulation",
    "candidate_ndcg": "simulation",
    # selection
    "cars_score": "selection",
    "CarsResult": "selection",
    "half_splits": "selection",
    "selector_projection": "selection",
    # held-out operator risk (RQ4) and five-fold validation of the decision (Table 1)
    "heldout_loss": "operator_risk",
    "truncation_losses": "operator_risk",
    "prefix_moments": "operator_risk",
    "mean_term": "operator_risk",
    "validate_selection": "fold_validation",
    "SelectionValidation": "fold_validation",
    # retrieval: exact search and metrics
    "exact_search": "search",
    "ExactIndex": "search",
    "SearchResult": "search",
    "AdapterIndex": "search",
    "transform_index": "search",
    "evaluate_run": "metrics",
    "evaluate_indices": "metrics",
    "RelevanceTable": "metrics",
    "EvalResult": "metrics",
    "paired_comparison": "compare",
    "PairedComparison": "compare",
    # data: BEIR datasets, embedding cache, splits, triples
    "load_beir": "data",
    "BeirDataset": "data",
    "load_embeddings": "data",
    "EmbeddingCache": "data",
    "encode_dataset": "data",
    "adaptation_split": "data",
    "split_queries": "data",
    "query_folds": "data",
    "nested_subsets": "data",
    "load_triples": "data",
    "Triples": "data",
    # trained adapters (training needs the `train` extra; torch is imported only when used)
    "Adapter": "adapters",
    "save_adapter": "adapters",
    "load_adapter": "adapters",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'asymgeo' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # static type checkers and IDEs see the eager imports
    from .adapters import Adapter, load_adapter, save_adapter
    from .compare import PairedComparison, paired_comparison
    from .data import (
        BeirDataset,
        EmbeddingCache,
        Triples,
        adaptation_split,
        encode_dataset,
        load_beir,
        load_embeddings,
        load_triples,
        nested_subsets,
        query_folds,
        split_queries,
    )
    from .estimators import DualProjection, GeometrySelector, SharedProjection
    from .fold_validation import SelectionValidation, validate_selection
    from .geometry import (
        ApproximationGap,
        TangentProjectors,
        approximation_gap,
        dual_factors,
        dual_truncate,
        psd_distance,
        relevance_moment,
        shared_factors,
        shared_truncate,
        skew,
        sym,
        tangent_dims,
        tangent_projectors,
    )
    from .metrics import EvalResult, RelevanceTable, evaluate_indices, evaluate_run
    from .operator_risk import heldout_loss, mean_term, prefix_moments, truncation_losses
    from .search import AdapterIndex, ExactIndex, SearchResult, exact_search, transform_index
    from .selection import CarsResult, cars_score, half_splits, selector_projection
    from .simulation import TwoViewModel, candidate_ndcg, two_view_model
    from .theory import (
        LocalRisks,
        OptimalSeparation,
        SureResult,
        estimate_moment_noise,
        local_risks,
        optimal_separation,
        sure_regret,
        sure_select,
        sure_select_probability,
        sure_statistic,
    )
