"""Tests of asymgeo.adapters.baseline: the closed-form augmented baseline I + c M / ||M||_2."""

from __future__ import annotations

import numpy as np
import pytest
from adapter_reference import binary_ndcg10, truncations

from asymgeo.adapters import DEFAULT_SCALES, closed_form_adapter


def _relevant(problem):
    N = problem.corpus.shape[0]
    g = problem.table.grades(np.tile(np.arange(N), (len(problem.table), 1)))
    return [set(np.flatnonzero(row).tolist()) for row in g]


@pytest.mark.parametrize("geometry", ["shared", "dual"])
def test_operator_and_choice_of_c_match_brute_force(problem, geometry):
    ad = closed_form_adapter(problem.X, problem.pos, problem.corpus, geometry=geometry, rank=4,
                             hard_negative_rows=problem.hard, validation_queries=problem.V,
                             validation_relevance=problem.table)
    X = problem.X.astype(np.float64)
    C = X.T @ (problem.corpus[problem.pos] - problem.corpus[problem.hard[:, 0]]).astype(np.float64) / len(X)
    shared, dual = truncations(C, 4)
    M = shared if geometry == "shared" else dual
    Mn = M / np.linalg.norm(M, 2)
    rel = _relevant(problem)
    scores = {c: binary_ndcg10(problem.V @ (np.eye(len(M)) + c * Mn) @ problem.corpus.T, rel) for c in DEFAULT_SCALES}
    best = max(scores, key=lambda c: (scores[c], -c))
    assert ad.init_scale_ == best
    assert ad.validation_ndcg_ == pytest.approx(scores[best], abs=1e-6)
    np.testing.assert_allclose(ad.operator_, np.eye(len(M)) + best * Mn, atol=1e-8)
    assert [h["validation_ndcg"] for h in ad.history_] == pytest.approx([scores[c] for c in sorted(scores)], abs=1e-6)


def test_c_zero_is_the_frozen_model(problem):
    ad = closed_form_adapter(problem.X, problem.pos, problem.corpus, geometry="dual", rank=4,
                             hard_negative_rows=problem.hard, validation_queries=problem.V,
                             validation_relevance=problem.table, scales=(0.0,))
    np.testing.assert_array_equal(ad.operator_, np.eye(problem.X.shape[1]))


def test_needs_validation_and_a_known_geometry(problem):
    with pytest.raises(ValueError, match="validation_queries"):
        closed_form_adapter(problem.X, problem.pos, problem.corpus, geometry="dual", rank=4,
                            validation_queries=None, validation_relevance=None)
    with pytest.raises(ValueError, match="geometry"):
        closed_form_adapter(problem.X, problem.pos, problem.corpus, geometry="auto", rank=4,
                            validation_queries=problem.V, validation_relevance=problem.table)
