"""Closed-form shared and dual projections and the geometry selector (scikit-learn contract).

Parameters are explicit keywords of ``__init__``; ``fit`` returns ``self``; fitted
attributes end in ``_``.  ``get_params``/``set_params`` follow scikit-learn, so
``sklearn.base.clone`` works without scikit-learn being a dependency.

Every fitted projection exposes the same surface as the trained adapters:
``transform_queries(X) = X @ query_map_.T``, ``transform_documents(Y) = Y @ doc_map_.T``
and ``similarity(X, Y) = X @ operator_ @ Y.T`` (queries rows, documents columns).
``score`` is a deprecated alias of ``similarity`` (scikit-learn's ``score`` means a
goodness-of-fit number; removed in 0.3).  The SURE statistic used by
``GeometrySelector(selector="sure")`` lives in :mod:`asymgeo.kernels.theory`.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from .._deprecation import renamed_argument, warn_deprecated
from .._validation import as_float_matrix, check_rank, check_same_shape, check_triples_informative
from ..kernels.geometry import dual_factors, relevance_moment, shared_factors
from ..kernels.theory import estimate_moment_noise
from ..selectors.registry import SelectionContext, get_rule, rule_names

__all__ = ["SharedProjection", "DualProjection", "GeometrySelector", "NotFittedError", "estimate_moment_noise"]


class NotFittedError(ValueError, AttributeError):
    """Raised when a method needing a fitted estimator is called before ``fit``."""


class _Params:
    """Minimal scikit-learn parameter protocol (``get_params``/``set_params``/repr)."""

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values() if p.name != "self" and p.kind != p.VAR_KEYWORD]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any):
        valid = set(self._param_names())
        for key, value in params.items():
            if key not in valid:
                raise ValueError(
                    f"Invalid parameter {key!r} for estimator {type(self).__name__}. "
                    f"Valid parameters are: {sorted(valid)!r}."
                )
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def __sklearn_tags__(self):  # pragma: no cover - only used when sklearn inspects us
        from sklearn.utils import Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=False))


def _check_triples(X, Y_pos, Y_neg) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    X = as_float_matrix(X, "X", dtype=None)
    Y_pos = as_float_matrix(Y_pos, "Y_pos", dtype=None)
    arrays = {"X": X, "Y_pos": Y_pos}
    if Y_neg is not None:
        Y_neg = as_float_matrix(Y_neg, "Y_neg", dtype=None)
        arrays["Y_neg"] = Y_neg
    check_same_shape(arrays)
    return X, Y_pos, Y_neg


def _moment(X, Y_pos, Y_neg) -> np.ndarray:
    C = _raw_moment(X, Y_pos, Y_neg)
    if not np.any(C):
        check_triples_informative(
            np.asarray(X), np.asarray(Y_pos) - (0 if Y_neg is None else np.asarray(Y_neg))
        )
        raise ValueError("X, Y_pos, Y_neg: the relevance moment is exactly zero; nothing to fit")
    return C


def _raw_moment(X, Y_pos, Y_neg) -> np.ndarray:
    if Y_neg is None:
        # E[X (Y+ - Y-)^T] = E[X Y+^T] for centred negatives independent of X (Section 2).
        Y_neg = np.zeros((1, X.shape[1]))
        Y_neg = np.broadcast_to(Y_neg, X.shape)
    return relevance_moment(X, Y_pos, Y_neg)


class _Projection(_Params):
    """Shared surface of the fitted projections."""

    solver: str
    method: str | None

    def _check_fitted(self) -> None:
        if not hasattr(self, "operator_"):
            raise NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet; call fit(X, Y_pos, Y_neg) first."
            )

    def _check_input(self, A, name: str) -> np.ndarray:
        self._check_fitted()
        A = as_float_matrix(A, name)
        if A.shape[1] != self.n_features_in_:
            raise ValueError(
                f"{name}: has {A.shape[1]} features per row, but {type(self).__name__} "
                f"was fitted with {self.n_features_in_}"
            )
        return A

    def transform_queries(self, X: np.ndarray) -> np.ndarray:
        """Project queries: ``X @ query_map_.T`` -> (n, rank)."""
        return self._check_input(X, "X") @ self.query_map_.T

    def transform_documents(self, Y: np.ndarray) -> np.ndarray:
        """Project documents: ``Y @ doc_map_.T`` -> (m, rank)."""
        return self._check_input(Y, "Y") @ self.doc_map_.T

    def similarity(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """Bilinear scores ``X @ operator_ @ Y.T`` -> (n, m): queries rows, documents columns."""
        return self._check_input(X, "X") @ self.operator_ @ self._check_input(Y, "Y").T

    def score(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """Deprecated alias of :meth:`similarity` (removed in 0.3)."""
        warn_deprecated(f"{type(self).__name__}.score(X, Y) is renamed to similarity(X, Y)")
        return self.similarity(X, Y)

    def _solver(self) -> str:
        return renamed_argument(type(self).__name__, "method", "solver", self.method, self.solver, "auto",
                                stacklevel=5)

    def _set_fitted(self, C: np.ndarray, query_map: np.ndarray, doc_map: np.ndarray, n: int) -> None:
        self.moment_ = C
        self.query_map_ = query_map
        self.doc_map_ = doc_map
        self.operator_ = query_map.T @ doc_map
        self.n_features_in_ = C.shape[0]
        self.n_triples_ = n


class SharedProjection(_Projection):
    r"""Closed-form shared projection: one map P for queries and documents.

    ``fit`` computes the relevance moment :math:`\widehat C` and its positive
    eigen-truncation :math:`\mathcal P_{s,r}(\widehat C) = P^\top P` (Theorem 1), the
    Frobenius-nearest PSD operator of rank at most r.

    Parameters
    ----------
    rank : int
        Rank r of the projection (1 <= r <= p).
    solver : {"auto", "dense", "krylov"}
        Eigen-solver (see :func:`asymgeo.shared_truncate`).
    method : deprecated alias of ``solver`` (removed in 0.3).

    Attributes
    ----------
    operator_ : (p, p) PSD operator ``P^T P``
    query_map_, doc_map_ : (rank, p) the same map P
    moment_ : (p, p) training relevance moment
    n_features_in_ : int
    n_triples_ : int
    """

    family = "shared"

    def __init__(self, rank: int = 16, solver: str = "auto", method: str | None = None):
        self.rank = rank
        self.solver = solver
        self.method = method

    def fit(self, X: np.ndarray, Y_pos: np.ndarray, Y_neg: np.ndarray | None = None) -> SharedProjection:
        """Fit from triples ``X, Y_pos, Y_neg`` (each (n, p)); ``Y_neg=None`` uses E[X Y+^T]."""
        X, Y_pos, Y_neg = _check_triples(X, Y_pos, Y_neg)
        rank = check_rank(self.rank, X.shape[1])
        C = _moment(X, Y_pos, Y_neg)
        P = shared_factors(C, rank, solver=self._solver())
        self._set_fitted(C, P, P, X.shape[0])
        return self


class DualProjection(_Projection):
    r"""Closed-form dual projection: maps A (queries) and B (documents).

    ``fit`` computes the relevance moment and its rank-r SVD truncation
    :math:`\mathcal P_{d,r}(\widehat C) = A^\top B` (Theorem 1), with balanced factors
    :math:`A = \Sigma^{1/2}U^\top`, :math:`B = \Sigma^{1/2}V^\top`.

    Parameters
    ----------
    rank : int
    solver : {"auto", "dense", "krylov"}
    method : deprecated alias of ``solver`` (removed in 0.3).

    Attributes
    ----------
    operator_ : (p, p) operator ``A^T B``
    query_map_ : (rank, p) A
    doc_map_ : (rank, p) B
    moment_, n_features_in_, n_triples_ : as for :class:`SharedProjection`
    """

    family = "dual"

    def __init__(self, rank: int = 16, solver: str = "auto", method: str | None = None):
        self.rank = rank
        self.solver = solver
        self.method = method

    def fit(self, X: np.ndarray, Y_pos: np.ndarray, Y_neg: np.ndarray | None = None) -> DualProjection:
        """Fit from triples ``X, Y_pos, Y_neg`` (each (n, p)); ``Y_neg=None`` uses E[X Y+^T]."""
        X, Y_pos, Y_neg = _check_triples(X, Y_pos, Y_neg)
        rank = check_rank(self.rank, X.shape[1])
        C = _moment(X, Y_pos, Y_neg)
        A, B = dual_factors(C, rank, solver=self._solver())
        self._set_fitted(C, A, B, X.shape[0])
        return self


class GeometrySelector(_Params):
    r"""Choose shared or dual geometry from training triples, then fit the winner.

    Parameters
    ----------
    rank : int
        Rank r of both candidate families.
    selector : str
        A rule of the selector registry (:mod:`asymgeo.selectors`) that decides from the
        triples alone (``asymgeo.selectors.rule_names(triples_only=True)``); among them
        ``"cars"``: the cross-fitted selector of eq. (7) (no noise model needed).
        ``"anisotropic"``: SURE with the dual-only directions priced by their own noise,
        :math:`\|\Pi_{\mathcal A}Z\|^2 > 2\,\widehat{\mathrm{tr}}(\Pi_{\mathcal A}\Sigma)`
        (:func:`asymgeo.kernels.theory.anisotropic_sure`; Theorem 2 with a general covariance).
        ``"sure"``: the SURE rule of eq. (4) in the local Gaussian model
        (:func:`asymgeo.kernels.theory.sure_statistic`), at ``S = P_{s,r}(C)`` with
        ``Z = sqrt(n) Pi_{T_d}(C - S)`` and noise ``sigma`` (estimated by
        :func:`~asymgeo.kernels.theory.estimate_moment_noise` when ``sigma`` is None; the
        isotropic plug-in is an approximation the paper's theorem does not cover).
        ``"cv"``, ``"cv0"``: the cross-validated operator risk; ``"pairwise"``: held-out
        pairwise accuracy.  Rules needing a corpus (``"ranking"``) or trained adapters
        (``"validation"``) are refused, naming what they need.
    n_splits : int
        CARS half-splits L (paper: 20).
    seed : int
        Seed of the CARS splits and selector projection.
    selector_dim : int or None
        CARS random projection dimension (paper: 256), or None for none.
    sigma : float or None
        Known noise scale for ``selector="sure"``.
    solver : {"auto", "dense", "krylov"}
        Truncation solver.
    method : deprecated alias of ``selector`` (removed in 0.3).

    Attributes
    ----------
    choice_ : "shared" or "dual"
    score_ : float
        The rule's score (``decision_.score``): CARS :math:`\widehat\Gamma_{\rm CARS}`, SURE
        :math:`\widehat R_s - \widehat R_d` in n-scaled units, ...  Positive favours dual.
    decision_ : :class:`asymgeo.selectors.Decision` (choice, score, standard error, evidence)
    result_ : the rule's native result (``decision_.result``: CarsResult, SureResult, ...)
    sigma_ : the noise scale used (SURE only)
    estimator_ : fitted SharedProjection or DualProjection of the chosen family
    """

    def __init__(
        self,
        rank: int = 16,
        selector: str = "cars",
        n_splits: int = 20,
        seed: int = 0,
        selector_dim: int | None = None,
        sigma: float | None = None,
        solver: str = "auto",
        method: str | None = None,
    ):
        self.rank = rank
        self.selector = selector
        self.n_splits = n_splits
        self.seed = seed
        self.selector_dim = selector_dim
        self.sigma = sigma
        self.solver = solver
        self.method = method

    def fit(self, X: np.ndarray, Y_pos: np.ndarray, Y_neg: np.ndarray) -> GeometrySelector:
        """Select the geometry on triples ``X, Y_pos, Y_neg`` and fit it on all of them."""
        selector = renamed_argument("GeometrySelector", "method", "selector", self.method, self.selector, "cars")
        argument = "method" if self.method is not None else "selector"
        rule = get_rule(selector, argument=argument)
        if not rule.triples_only:
            raise ValueError(f"{argument}: {rule.name!r} needs {' and '.join(sorted(rule.needs))} beyond the training "
                             f"triples (asymgeo select / fit --geometry auto give it); GeometrySelector decides from "
                             f"triples alone: one of {', '.join(map(repr, rule_names(triples_only=True)))}")
        X, Y_pos, Y_neg_checked = _check_triples(X, Y_pos, Y_neg)
        if Y_neg_checked is None:  # pragma: no cover - signature requires it
            raise ValueError("Y_neg: required for geometry selection")
        Y_neg = Y_neg_checked
        rank = check_rank(self.rank, X.shape[1])
        D = as_float_matrix(Y_pos, "Y_pos") - as_float_matrix(Y_neg, "Y_neg")
        context = SelectionContext(n_splits=self.n_splits, selector_dim=self.selector_dim, sigma=self.sigma,
                                   solver=self.solver)
        decision = rule.decide(as_float_matrix(X, "X"), D, rank, seed=self.seed, context=context)
        self.decision_ = decision
        self.result_ = decision.result
        self.score_ = decision.score
        if "sigma" in decision.evidence:  # the noise scale a SURE-type rule used
            self.sigma_ = float(decision.evidence["sigma"])
        self.choice_ = decision.choice
        cls = DualProjection if decision.choice == "dual" else SharedProjection
        self.estimator_ = cls(rank=rank, solver=self.solver).fit(X, Y_pos, Y_neg)
        return self

    def _check_fitted(self):
        if not hasattr(self, "estimator_"):
            raise NotFittedError("This GeometrySelector instance is not fitted yet; call fit first.")

    def transform_queries(self, X: np.ndarray) -> np.ndarray:
        """Project queries with the fitted geometry's query map -> (n, rank)."""
        self._check_fitted()
        return self.estimator_.transform_queries(X)

    def transform_documents(self, Y: np.ndarray) -> np.ndarray:
        """Project documents with the fitted geometry's document map -> (m, rank)."""
        self._check_fitted()
        return self.estimator_.transform_documents(Y)

    def similarity(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """Bilinear scores of the fitted geometry, ``X @ operator_ @ Y.T`` -> (n, m)."""
        self._check_fitted()
        return self.estimator_.similarity(X, Y)

    def score(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """Deprecated alias of :meth:`similarity` (removed in 0.3)."""
        warn_deprecated("GeometrySelector.score(X, Y) is renamed to similarity(X, Y)")
        return self.similarity(X, Y)

    @property
    def operator_(self) -> np.ndarray:
        self._check_fitted()
        return self.estimator_.operator_
