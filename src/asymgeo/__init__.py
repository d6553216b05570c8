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

from ._moved_modules import MOVED as _MOVED
from ._moved_modules import import_moved as _import_moved
from ._moved_modules import install as _install_moved_modules
from ._version import __version__

_install_moved_modules()  # the 0.1 module paths (asymgeo.selection, ...) for one release

#: public name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    # geometry kernels
    "relevance_moment": "kernels.geometry",
    "sym": "kernels.geometry",
    "skew": "kernels.geometry",
    "dual_truncate": "kernels.geometry",
    "shared_truncate": "kernels.geometry",
    "dual_factors": "kernels.geometry",
    "shared_factors": "kernels.geometry",
    "psd_distance": "kernels.geometry",
    "approximation_gap": "kernels.geometry",
    "ApproximationGap": "kernels.geometry",
    "tangent_dims": "kernels.geometry",
    "tangent_projectors": "kernels.geometry",
    "TangentProjectors": "kernels.geometry",
    # theory kernels
    "local_risks": "kernels.theory",
    "LocalRisks": "kernels.theory",
    "sure_select_probability": "kernels.theory",
    "sure_regret": "kernels.theory",
    "sure_select": "kernels.theory",
    "sure_statistic": "kernels.theory",
    "estimate_moment_noise": "kernels.theory",
    "SureResult": "kernels.theory",
    "optimal_separation": "kernels.theory",
    "OptimalSeparation": "kernels.theory",
    # estimators
    "SharedProjection": "estimators.projections",
    "DualProjection": "estimators.projections",
    "GeometrySelector": "estimators.projections",
    # simulation
    "two_view_model": "estimators.simulation",
    "TwoViewModel": "estimators.simulation",
    "candidate_ndcg": "estimators.simulation",
    # selection
    "cars_score": "kernels.selection",
    "CarsResult": "kernels.selection",
    "half_splits": "kernels.selection",
    "selector_projection": "kernels.selection",
    # held-out operator risk (RQ4) and five-fold validation of the decision (Table 1)
    "heldout_loss": "kernels.operator_risk",
    "truncation_losses": "kernels.operator_risk",
    "prefix_moments": "kernels.operator_risk",
    "mean_term": "kernels.operator_risk",
    "validate_selection": "estimators.validation",
    "SelectionValidation": "estimators.validation",
    # retrieval: exact search and metrics
    "exact_search": "retrieval.search",
    "ExactIndex": "retrieval.search",
    "SearchResult": "retrieval.search",
    "AdapterIndex": "retrieval.search",
    "transform_index": "retrieval.search",
    "evaluate_run": "retrieval.metrics",
    "evaluate_indices": "retrieval.metrics",
    "RelevanceTable": "retrieval.metrics",
    "EvalResult": "retrieval.metrics",
    "paired_comparison": "retrieval.compare",
    "PairedComparison": "retrieval.compare",
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
    # a sentence-transformers user's path: pairs and a corpus in, an adapter and its model out
    "fit": "adapters.from_pairs",
    "attach_adapter": "adapters.export",
    "import_embeddings": "data.import_cache",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        if f"{__name__}.{name}" in _MOVED:  # ``asymgeo.selection`` without importing it: 0.1 path
            globals()[name] = _import_moved(f"{__name__}.{name}")
            return globals()[name]
        raise AttributeError(f"module 'asymgeo' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # static type checkers and IDEs see the eager imports
    from .adapters import Adapter, load_adapter, save_adapter
    from .adapters.export import attach_adapter
    from .adapters.from_pairs import fit
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
    from .data.import_cache import import_embeddings
    from .estimators.projections import DualProjection, GeometrySelector, SharedProjection
    from .estimators.simulation import TwoViewModel, candidate_ndcg, two_view_model
    from .estimators.validation import SelectionValidation, validate_selection
    from .kernels.geometry import (
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
    from .kernels.operator_risk import heldout_loss, mean_term, prefix_moments, truncation_losses
    from .kernels.selection import CarsResult, cars_score, half_splits, selector_projection
    from .kernels.theory import (
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
    from .retrieval.compare import PairedComparison, paired_comparison
    from .retrieval.metrics import EvalResult, RelevanceTable, evaluate_indices, evaluate_run
    from .retrieval.search import AdapterIndex, ExactIndex, SearchResult, exact_search, transform_index
