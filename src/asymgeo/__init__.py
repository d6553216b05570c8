"""asymgeo: when does dense retrieval need asymmetric geometry?

Low-level kernels (pure functions on arrays) are re-exported here together with the
estimators.  Convention: queries and documents are rows; an operator ``M`` scores
``x^T M y`` (score matrix ``X @ M @ Y.T``).
"""

from ._version import __version__
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
from .compare import PairedComparison, paired_comparison
from .estimators import DualProjection, GeometrySelector, SharedProjection
from .selection import CarsResult, cars_score, half_splits, selector_projection
from .operator_risk import heldout_loss, mean_term, prefix_moments, truncation_losses
from .fold_validation import SelectionValidation, validate_selection
from .search import AdapterIndex, SearchResult, exact_search, transform_index
from .metrics import EvalResult, RelevanceTable, evaluate_indices, evaluate_run
from .simulation import TwoViewModel, candidate_ndcg, two_view_model
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
from .theory import (
    LocalRisks,
    OptimalSeparation,
    SureResult,
    local_risks,
    optimal_separation,
    sure_regret,
    sure_select,
    sure_select_probability,
)

__all__ = [
    "__version__",
    # geometry kernels
    "relevance_moment",
    "sym",
    "skew",
    "dual_truncate",
    "shared_truncate",
    "dual_factors",
    "shared_factors",
    "psd_distance",
    "approximation_gap",
    "ApproximationGap",
    "tangent_dims",
    "tangent_projectors",
    "TangentProjectors",
    # theory kernels
    "local_risks",
    "LocalRisks",
    "sure_select_probability",
    "sure_regret",
    "sure_select",
    "SureResult",
    "optimal_separation",
    "OptimalSeparation",
    # estimators
    "SharedProjection",
    "DualProjection",
    "GeometrySelector",
    # simulation
    "two_view_model",
    "TwoViewModel",
    "candidate_ndcg",
    # selection
    "cars_score",
    "CarsResult",
    "half_splits",
    "selector_projection",
    # held-out operator risk (RQ4) and five-fold validation of the decision (Table 1)
    "heldout_loss",
    "truncation_losses",
    "prefix_moments",
    "mean_term",
    "validate_selection",
    "SelectionValidation",
    # retrieval: exact search and metrics
    "exact_search",
    "SearchResult",
    "AdapterIndex",
    "transform_index",
    "evaluate_run",
    "evaluate_indices",
    "RelevanceTable",
    "EvalResult",
    "paired_comparison",
    "PairedComparison",
    # data: BEIR datasets, embedding cache, splits, triples
    "load_beir",
    "BeirDataset",
    "load_embeddings",
    "EmbeddingCache",
    "encode_dataset",
    "adaptation_split",
    "split_queries",
    "query_folds",
    "nested_subsets",
    "load_triples",
    "Triples",
]
