"""The argument contract of ``prepare_training`` (what ``Adapter.fit`` checks before any training).

Each case is decided by hand: the argument a bad input is blamed on (the message's first word),
the inclusive and exclusive ends of every row range, the smallest accepted training set, and
the dtypes the loop relies on.  Written against the surviving mutants of
``python tools/mutation.py training`` (issue #41); no torch needed.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from asymgeo.adapters.training import MIN_TRAIN_QUERIES, prepare_training
from asymgeo.retrieval.metrics import RelevanceTable

N_DOCS, P = 7, 4


def _data(n: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, P))
    corpus = rng.standard_normal((N_DOCS, P)).astype(np.float32)
    return X, np.arange(n) % N_DOCS, corpus


def _table(m_ids: int, judged_row: int) -> RelevanceTable:
    ids = [f"v{i}" for i in range(m_ids)]
    return RelevanceTable({ids[judged_row]: {"d0": 1}}, ids, [f"d{j}" for j in range(N_DOCS)])


def test_the_queries_are_blamed_by_name_and_converted_to_float32():
    X, pos, C = _data()
    with pytest.raises(ValueError, match=r"^X: expected a 2-d array"):
        prepare_training(X[0], pos[:1], C)
    with pytest.raises(TypeError, match=r"^X: expected a numeric array"):
        prepare_training(np.array([["a"] * P] * 3), pos, C)
    data = prepare_training(X, pos, C)  # float64 in, float32 out: the loop's tensors
    assert data.X_np.dtype == np.float32 and data.Y_pos_np.dtype == np.float32
    np.testing.assert_array_equal(data.X_np, X.astype(np.float32))


def test_too_few_queries_name_the_minimum_and_an_empty_set_is_no_shape_error():
    X, pos, C = _data(n=MIN_TRAIN_QUERIES)
    assert prepare_training(X, pos, C).n == MIN_TRAIN_QUERIES  # the smallest training set is accepted
    want = re.escape(f"X: need at least {MIN_TRAIN_QUERIES} training queries")
    with pytest.raises(ValueError, match=want + r".*got 1$"):
        prepare_training(X[:1], pos[:1], C)
    with pytest.raises(ValueError, match=want + r".*got 0$"):  # (0, p): the count, not "non-empty array"
        prepare_training(np.zeros((0, P)), np.zeros(0, dtype=np.int64), C)


def test_row_ranges_include_zero_and_exclude_the_corpus_size():
    X, pos, C = _data()
    ok = prepare_training(X, np.array([0, N_DOCS - 1, 1]), C, relevant_rows=[[0], [N_DOCS - 1], []],
                          negative_rows=np.array([N_DOCS - 1, 0, 2]))
    np.testing.assert_array_equal(ok.positive_rows, [0, N_DOCS - 1, 1])
    with pytest.raises(ValueError, match=rf"^positive_rows: rows must lie in \[0, {N_DOCS}\).*\[0, {N_DOCS}\]"):
        prepare_training(X, np.array([0, N_DOCS, 1]), C)
    with pytest.raises(ValueError, match=rf"^relevant_rows\[1\]: rows must lie in \[0, {N_DOCS}\), got \[{N_DOCS}, "):
        prepare_training(X, pos, C, relevant_rows=[[0], [N_DOCS], []])
    with pytest.raises(ValueError, match=r"^relevant_rows\[2\]: rows must lie .*got \[-1, -1\]"):
        prepare_training(X, pos, C, relevant_rows=[[0], [1], [-1]])
    with pytest.raises(ValueError, match=rf"^negative_rows: rows must lie .*got \[0, {N_DOCS}\]"):
        prepare_training(X, pos, C, negative_rows=np.array([0, N_DOCS, 1]))


def test_a_wrong_shape_of_rows_is_named_with_the_shape_wanted():
    X, pos, C = _data()
    with pytest.raises(ValueError, match=re.escape("positive_rows: expected shape (3,), got (2,)")):
        prepare_training(X, pos[:2], C)
    with pytest.raises(ValueError, match=re.escape("hard_negative_rows: expected shape (3, k), got (2, 2)")):
        prepare_training(X, pos, C, hard_negative_rows=np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match=re.escape("hard_negative_rows: expected shape (3, k), got (3,)")):
        prepare_training(X, pos, C, hard_negative_rows=np.zeros(3, dtype=np.int64))


def test_relevant_rows_of_the_wrong_length_report_the_length_or_the_value():
    X, pos, C = _data()
    with pytest.raises(ValueError, match=r"^relevant_rows: expected 3 collections .*got 2$"):
        prepare_training(X, pos, C, relevant_rows=[[0], [1]])
    with pytest.raises(ValueError, match=r"^relevant_rows: expected 3 collections .*got 'abc'$"):
        prepare_training(X, pos, C, relevant_rows="abc")  # a string of n characters is no list of rows
    with pytest.raises(ValueError, match=r"^relevant_rows: expected 3 collections .*got 5$"):
        prepare_training(X, pos, C, relevant_rows=5)  # not a sequence: named, not a bare len() TypeError


def test_validation_arguments_are_refused_in_full_words():
    X, pos, C = _data()
    V = np.zeros((2, P))
    with pytest.raises(ValueError, match=r"^validation_queries: required with validation_relevance$"):
        prepare_training(X, pos, C, validation_relevance=_table(2, 0))
    with pytest.raises(ValueError, match=re.escape("validation_relevance: required with validation_queries "
                                                   "(a RelevanceTable)") + "$"):
        prepare_training(X, pos, C, validation_queries=V)
    with pytest.raises(TypeError, match=re.escape("validation_relevance: expected an "
                                                  "asymgeo.retrieval.metrics.RelevanceTable, got dict") + "$"):
        prepare_training(X, pos, C, validation_queries=V, validation_relevance={})
    with pytest.raises(ValueError, match=re.escape("validation_queries: the validation split is empty (no judged "
                                                   "queries); pass validation_queries=None to train without "
                                                   "validation") + "$"):
        prepare_training(X, pos, C, validation_queries=np.zeros((0, P)), validation_relevance=_table(2, 0))
    with pytest.raises(ValueError, match=r"^validation_queries: expected a 2-d array"):
        prepare_training(X, pos, C, validation_queries=np.zeros(P), validation_relevance=_table(2, 0))


def test_the_validation_queries_are_float32_and_their_last_row_may_be_judged():
    X, pos, C = _data()
    V = np.random.default_rng(1).standard_normal((2, P))
    data = prepare_training(X, pos, C, validation_queries=V, validation_relevance=_table(2, 1))
    assert data.validation_queries.dtype == np.float32
    np.testing.assert_array_equal(data.validation_queries, V.astype(np.float32))
    # the table knows a third query that the queries lack: row 2 is refused
    with pytest.raises(ValueError, match=r"^validation_relevance: refers to query row 2, but validation_queries "
                                         r"has 2 rows$"):
        prepare_training(X, pos, C, validation_queries=V, validation_relevance=_table(3, 2))
