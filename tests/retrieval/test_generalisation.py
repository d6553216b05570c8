"""asymgeo.retrieval.generalisation against brute force: the seen split, the document prior, unseen-relevant rankings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asymgeo.retrieval.generalisation import (
    choose_prior_weight,
    document_prior_topk,
    seen_document_split,
    seen_documents,
    unseen_relevant_ranking,
)


def _random_qrels(rng, n_q, n_d, prefix="q"):
    out = {}
    for i in range(n_q):
        docs = rng.choice(n_d, size=rng.integers(1, 5), replace=False)
        out[f"{prefix}{i}"] = {f"d{j}": int(rng.integers(0, 3)) for j in docs}
    return out


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000))
def test_seen_split_matches_a_loop(seed):
    rng = np.random.default_rng(seed)
    train = _random_qrels(rng, 15, 30, "t")
    test = _random_qrels(rng, 20, 30)
    seen = seen_documents(train, list(train))
    want_seen = {d for q in train for d, g in train[q].items() if g >= 1}
    assert seen == want_seen
    sp = seen_document_split(test, seen)
    for q, docs in test.items():
        rel = [d for d, g in docs.items() if g >= 1]
        if not rel:
            assert q not in sp.seen and q not in sp.unseen
            continue
        hits = [d for d in rel if d in want_seen]
        assert (q in sp.seen) == bool(hits) and (q in sp.unseen) == (not hits)
        assert sp.seen_share[q] == pytest.approx(len(hits) / len(rel))
    assert len(set(sp.seen) | set(sp.unseen)) == len(sp.seen) + len(sp.unseen)


def test_seen_documents_ignores_grade_zero_and_other_queries():
    qrels = {"a": {"d1": 1, "d2": 0}, "b": {"d3": 2}}
    assert seen_documents(qrels, ["a"]) == {"d1"}
    assert seen_documents(qrels, ["a", "b", "missing"]) == {"d1", "d3"}


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([0.0, 0.01, 0.05, 0.2, 1.0]), st.integers(1, 12))
def test_document_prior_equals_brute_force(seed, beta, k):
    rng = np.random.default_rng(seed)
    Q, C = rng.normal(size=(6, 5)), rng.normal(size=(40, 5))
    is_seen = rng.random(40) < 0.3
    S = Q @ C.T
    top = np.argsort(-S, axis=1, kind="stable")[:, :k]
    seen_rows = np.flatnonzero(is_seen)
    if seen_rows.size:
        Sp = S[:, seen_rows]
        kp = min(k, seen_rows.size)
        order = np.argsort(-Sp, axis=1, kind="stable")[:, :kp]
        p_idx, p_sc = seen_rows[order], np.take_along_axis(Sp, order, 1)
    else:
        p_idx, p_sc = np.zeros((6, 0), int), np.zeros((6, 0))
    got = document_prior_topk(np.take_along_axis(S, top, 1), top, p_sc, p_idx, is_seen, beta, k)
    want = np.argsort(-(S + beta * is_seen), axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(got, want)


def test_document_prior_rejects_a_negative_weight():
    z = np.zeros((1, 1))
    with pytest.raises(ValueError, match="beta: expected a finite number >= 0"):
        document_prior_topk(z, z.astype(int), z, z.astype(int), np.zeros(1, bool), -0.1, 1)


def test_unseen_relevant_ranking_by_hand():
    corpus = ["a", "b", "c", "d", "e"]
    indices = np.array([[0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 0, 1, 3, 4]])
    qrels = {"q1": {"a": 1, "c": 1}, "q2": {"a": 1}, "q3": {"b": 1, "e": 0}}
    seen = {"a", "e"}
    idx, kept, q = unseen_relevant_ranking(indices, ["q1", "q2", "q3"], qrels, corpus, seen, 3)
    # q1: drop 'a' (seen and relevant) -> b, c, d; q2: only 'a' relevant, which is seen -> left out;
    # q3: 'e' is seen but not relevant: it stays (a miss)
    assert kept == ["q1", "q3"]
    np.testing.assert_array_equal(idx, [[1, 2, 3], [2, 0, 1]])
    assert q == {"q1": {"c": 1}, "q3": {"b": 1, "e": 0}}
    with pytest.raises(ValueError, match="search deeper"):
        unseen_relevant_ranking(indices[:, :3], ["q1", "q2", "q3"], qrels, corpus, seen, 3)
    # the same from a compact IdIndex of the corpus ids (what an embedding cache holds)
    from asymgeo._ids import IdIndex

    idx2, kept2, q2 = unseen_relevant_ranking(indices, ["q1", "q2", "q3"], qrels, IdIndex(corpus), seen, 3)
    assert kept2 == kept and q2 == q
    np.testing.assert_array_equal(idx2, idx)


def test_prior_weight_ties_go_to_the_smallest():
    assert choose_prior_weight({0.0: 0.5, 0.1: 0.6, 0.2: 0.6}) == 0.1
    assert choose_prior_weight({0.0: 0.7, 0.1: 0.6}) == 0.0


def test_unseen_relevant_ranking_refuses_a_ranking_of_the_wrong_shape():
    import numpy as np
    import pytest

    from asymgeo.retrieval.generalisation import unseen_relevant_ranking

    with pytest.raises(ValueError, match=r"indices: expected shape \(2, K\), got \(1, 3\)"):
        unseen_relevant_ranking(np.zeros((1, 3), int), ["q0", "q1"], {"q0": {"a": 1}}, ["a", "b", "c"], set(), 2)
