"""The document memory's kernels against brute force: every score formed densely, sorted by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asymgeo.retrieval.memory import memory_boosts, memory_gate, memory_table
from asymgeo.retrieval.search import AdapterIndex, memory_search


def _unit(rng, n, p):
    A = rng.normal(size=(n, p)).astype(np.float32)
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def _dense_scores(Q, C, M, K, rel, tau, alpha):
    """Every document's score written out: x^T M y + alpha * max_{q in K_d} max(0, x.q - tau) / (1 - tau)."""
    S = (Q.astype(np.float64) @ (np.eye(Q.shape[1]) if M is None else M) @ C.T.astype(np.float64))
    for d in range(C.shape[0]):
        finders = [j for j, r in enumerate(rel) if d in r]
        if finders:
            g = np.maximum(Q.astype(np.float64) @ K[finders].T.astype(np.float64) - tau, 0.0) / (1 - tau)
            S[:, d] += alpha * g.max(axis=1)
    return S


def test_boost_by_hand():
    # two keys on the axes; document 3 found by both, document 5 by the second only
    K = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    mem = memory_table(K, [{3}, {3, 5}], n_docs=8)
    x = np.array([[0.8, 0.6]], dtype=np.float32)  # x.k1 = 0.8, x.k2 = 0.6
    b = memory_boosts(x, mem, 0.5, 2.0)
    assert mem.documents.tolist() == [3, 5]
    # doc 3: 2 * max(0.3, 0.1) / 0.5 = 1.2; doc 5: 2 * 0.1 / 0.5 = 0.4
    np.testing.assert_allclose(b, [[1.2, 0.4]], rtol=1e-6)
    # below the gate nothing is remembered
    assert memory_boosts(np.array([[0.4, 0.3]], dtype=np.float32), mem, 0.5, 2.0).tolist() == [[0.0, 0.0]]
    np.testing.assert_allclose(memory_gate(np.array([0.5, 0.75, 1.0]), 0.5), [0.0, 0.5, 1.0])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), tau=st.floats(-0.5, 0.9), alpha=st.floats(0.0, 3.0),
       with_operator=st.booleans())
def test_memory_search_is_the_brute_force_top_k(seed, tau, alpha, with_operator):
    rng = np.random.default_rng(seed)
    p, N, n_keys, m, k = 6, 40, 7, 9, 5
    C, K, Q = _unit(rng, N, p), _unit(rng, n_keys, p), _unit(rng, m, p)
    rel = [set(rng.choice(N, size=int(rng.integers(0, 3)), replace=False).tolist()) for _ in range(n_keys)]
    M = (np.eye(p) + 0.3 * rng.normal(size=(p, p))) if with_operator else None
    mem = memory_table(K, rel, n_docs=N)
    s, i = memory_search(Q, C, k, memory=mem, threshold=tau, weight=alpha, operator=M)
    S = _dense_scores(Q, C, M, K, rel, tau, alpha)
    want = np.lexsort((np.broadcast_to(np.arange(N), S.shape), -S), axis=-1)[:, :k]
    # scores agree to float32 rounding; the documents agree wherever no two scores are that close
    np.testing.assert_allclose(s, np.take_along_axis(S, want, 1), atol=1e-5)
    got = np.take_along_axis(S, i, 1)
    np.testing.assert_allclose(got, np.take_along_axis(S, want, 1), atol=1e-5)


def test_memory_search_ties_follow_trec_eval_order():
    # every document scores 0 under the map; documents 1 and 4 get the same boost: trec_eval keeps
    # the larger id first ("d4" > "d1"), then the zero-score tie group by id descending
    C = np.zeros((6, 2), dtype=np.float32)
    C[:, 0] = 0.0
    K = np.array([[1.0, 0.0]], dtype=np.float32)
    mem = memory_table(K, [{1, 4}], n_docs=6)
    Q = np.array([[1.0, 0.0]], dtype=np.float32)
    ids = ["d0", "d1", "d2", "d3", "d4", "d5"]
    _, idx = memory_search(Q, C, 4, memory=mem, threshold=0.0, weight=1.0, corpus_ids=ids)
    assert [ids[j] for j in idx[0]] == ["d4", "d1", "d5", "d3"]
    _, idx = memory_search(Q, C, 4, memory=mem, threshold=0.0, weight=1.0)
    assert idx[0].tolist() == [1, 4, 0, 2]  # without ids: lower row first


@pytest.mark.parametrize("form", ["augmented", "projection"])
def test_adapter_index_with_memory_is_the_same_search(form, rng):
    p, r, N = 6, 2, 30
    C, K, Q = _unit(rng, N, p), _unit(rng, 4, p), _unit(rng, 8, p)
    A, B = rng.normal(size=(r, p)), rng.normal(size=(r, p))
    M = A.T @ B + (np.eye(p) if form == "augmented" else 0)
    mem = memory_table(K, [{0, 3}, {7}, set(), {29}], n_docs=N)
    idx = AdapterIndex(C, A, B, form=form, memory=(mem, 0.1, 0.7))
    res = idx.search(Q, 5)
    S = _dense_scores(Q, C, M, K, [{0, 3}, {7}, set(), {29}], 0.1, 0.7)
    np.testing.assert_allclose(res.scores, np.sort(S, axis=1)[:, ::-1][:, :5], atol=1e-5)


def test_memory_table_errors_name_the_input():
    K = np.ones((2, 3), dtype=np.float32)
    with pytest.raises(ValueError, match=r"relevant_rows: 1 row sets for 2 keys"):
        memory_table(K, [{1}])
    with pytest.raises(ValueError, match=r"relevant_rows\[1\]: corpus row 9 is outside 0..4"):
        memory_table(K, [{1}, {9}], n_docs=5)
    bad = K.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="keys: row 1 is not finite"):
        memory_table(bad, [{1}, {2}])
    with pytest.raises(ValueError, match=r"threshold: expected a value in \[-1, 1\)"):
        memory_gate(np.zeros(2), 1.0)
    with pytest.raises(ValueError, match=r"queries: expected shape \(m, 3\)"):
        memory_boosts(np.zeros((2, 4)), memory_table(K, [{1}, {2}]), 0.0, 1.0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), levels=st.integers(1, 6), t=st.integers(1, 12), extra=st.integers(1, 60))
def test_partial_top_equals_the_full_lexsort_under_heavy_ties(seed, levels, t, extra):
    # scores from a few levels (ties everywhere, -inf among them): the partial sort must keep
    # exactly the lexsort's first t entries (score descending, then candidate row ascending)
    from asymgeo.retrieval.memory import RERANK_PATHS, _top_by_score_then_row

    rng = np.random.default_rng(seed)
    m, width = 7, 4 * t + extra
    sc = rng.integers(0, levels, size=(m, width)).astype(np.float32)
    sc[rng.random((m, width)) < 0.1] = -np.inf
    cand = np.stack([rng.permutation(width * 3)[:width] for _ in range(m)]).astype(np.int64)
    before = RERANK_PATHS["partial"]
    s, i = _top_by_score_then_row(sc, cand, t)
    assert RERANK_PATHS["partial"] == before + 1  # the fast path ran, not the whole-row sort
    # the reference: every row sorted by hand with Python's sort on (-score, row)
    for r in range(m):
        want = sorted(range(width), key=lambda j: (-float(sc[r, j]), int(cand[r, j])))[:t]
        assert i[r].tolist() == [int(cand[r, j]) for j in want]
        assert s[r].tolist() == [float(sc[r, j]) for j in want]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), tau=st.floats(-0.9, 0.9))
def test_similarity_once_then_gate_equals_the_gate_of_every_pair(seed, tau):
    # the gate is applied after the per-document maximum: the same boosts as gating every
    # (key, document) pair first, checked with a Python loop over the pairs
    from asymgeo.retrieval.memory import memory_similarity

    rng = np.random.default_rng(seed)
    p, N, n_keys, m = 5, 30, 9, 6
    K, Q = _unit(rng, n_keys, p), _unit(rng, m, p)
    rel = [set(rng.choice(N, size=int(rng.integers(0, 4)), replace=False).tolist()) for _ in range(n_keys)]
    mem = memory_table(K, rel, n_docs=N)
    sim = memory_similarity(Q, mem)
    b = memory_boosts(Q, mem, tau, 1.5, similarity=sim)
    for j, d in enumerate(mem.documents.tolist()):
        finders = [i for i, r in enumerate(rel) if d in r]
        S = Q.astype(np.float64) @ K[finders].T.astype(np.float64)
        np.testing.assert_allclose(sim[:, j], S.max(axis=1), atol=1e-6)
        np.testing.assert_allclose(b[:, j], 1.5 * (np.maximum(S - tau, 0) / (1 - tau)).max(axis=1), atol=1e-5)
    np.testing.assert_array_equal(b, memory_boosts(Q, mem, tau, 1.5))


def test_memory_search_takes_the_partial_sort_on_a_large_memory_and_is_still_brute_force():
    from asymgeo.retrieval.memory import RERANK_PATHS

    rng = np.random.default_rng(11)
    p, N, n_keys, m, k = 6, 400, 80, 12, 5
    C, K, Q = _unit(rng, N, p), _unit(rng, n_keys, p), _unit(rng, m, p)
    rel = [set(rng.choice(N, size=3, replace=False).tolist()) for _ in range(n_keys)]
    mem = memory_table(K, rel, n_docs=N)
    before = RERANK_PATHS["partial"]
    s, i = memory_search(Q, C, k, memory=mem, threshold=-0.5, weight=0.7)
    assert RERANK_PATHS["partial"] > before
    S = _dense_scores(Q, C, None, K, rel, -0.5, 0.7)
    want = np.lexsort((np.broadcast_to(np.arange(N), S.shape), -S), axis=-1)[:, :k]
    np.testing.assert_allclose(s, np.take_along_axis(S, want, 1), atol=1e-5)
    np.testing.assert_allclose(np.take_along_axis(S, i, 1), np.take_along_axis(S, want, 1), atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_similarity_leaving_one_key_out_per_query_is_the_maximum_over_the_other_keys(seed):
    # exclude_keys: the brute-force maximum over the keys that found each document, the query's
    # excluded key dropped (-inf where no other key found it), by a Python loop
    from asymgeo.retrieval.memory import memory_similarity

    rng = np.random.default_rng(seed)
    p, N, n_keys, m = 5, 12, 8, 6
    K, Q = _unit(rng, n_keys, p), _unit(rng, m, p)
    rel = [set(rng.choice(N, size=int(rng.integers(1, 4)), replace=False).tolist()) for _ in range(n_keys)]
    mem = memory_table(K, rel, n_docs=N)
    excl = rng.integers(-1, n_keys, size=m)
    sim = memory_similarity(Q, mem, exclude_keys=excl)
    for i in range(m):
        for j, d in enumerate(mem.documents.tolist()):
            finders = [k for k, r in enumerate(rel) if d in r and k != excl[i]]
            want = max((float(Q[i].astype(np.float64) @ K[k].astype(np.float64)) for k in finders), default=-np.inf)
            if np.isinf(want):
                assert sim[i, j] == -np.inf
            else:
                assert sim[i, j] == pytest.approx(want, abs=1e-6)
    # the gate of a document only the excluded key found is zero at any threshold
    b = memory_boosts(Q, mem, -0.99, 1.0, similarity=sim)
    assert np.all(b[np.isinf(sim)] == 0)


def test_similarity_exclude_keys_refuses_bad_rows():
    from asymgeo.retrieval.memory import memory_similarity

    rng = np.random.default_rng(0)
    mem = memory_table(_unit(rng, 3, 4), [{0}, {1}, {2}], n_docs=5)
    Q = _unit(rng, 2, 4)
    with pytest.raises(ValueError, match="exclude_keys: expected 2 integer key rows"):
        memory_similarity(Q, mem, exclude_keys=np.array([0]))
    with pytest.raises(ValueError, match=r"exclude_keys: key rows must lie in -1..2"):
        memory_similarity(Q, mem, exclude_keys=np.array([0, 3]))


# ---------------------------------------------------------------- #41: data that reach both sides of each branch
def test_memory_table_refuses_rows_just_outside_the_corpus():
    # the boundary rows: n_docs - 1 is the last row, n_docs and -1 are outside (9 of 5 misses the boundary)
    K = np.ones((2, 3), dtype=np.float32)
    assert memory_table(K, [{0}, {4}], n_docs=5).documents.tolist() == [0, 4]
    with pytest.raises(ValueError, match=r"relevant_rows\[1\]: corpus row 5 is outside 0..4"):
        memory_table(K, [{0}, {5}], n_docs=5)
    with pytest.raises(ValueError, match=r"relevant_rows\[0\]: corpus row -1 is outside"):
        memory_table(K, [{-1}, {2}], n_docs=5)
    with pytest.raises(ValueError, match=r"relevant_rows\[0\]: corpus row -1 is outside"):
        memory_table(K, [{-1}, {2}])  # no corpus size given: a negative row is still refused


def test_similarity_exclude_keys_refuses_rows_below_minus_one_and_non_integers():
    from asymgeo.retrieval.memory import memory_similarity

    rng = np.random.default_rng(0)
    mem = memory_table(_unit(rng, 3, 4), [{0}, {1}, {2}], n_docs=5)
    Q = _unit(rng, 2, 4)
    with pytest.raises(ValueError, match=r"exclude_keys: key rows must lie in -1..2"):
        memory_similarity(Q, mem, exclude_keys=np.array([-2, 0]))  # would wrap to key 1
    with pytest.raises(ValueError, match="exclude_keys: expected 2 integer key rows"):
        memory_similarity(Q, mem, exclude_keys=np.array([0.0, 1.0]))


def test_similarity_over_more_queries_than_one_block_keeps_each_querys_exclusion():
    # QUERY_BLOCK + 7 queries: the second block must use its own rows of exclude_keys, checked
    # against a maximum over the keys that found each document written out per query
    from asymgeo.retrieval.memory import QUERY_BLOCK, memory_similarity

    rng = np.random.default_rng(8)
    p, n_keys, m = 4, 5, QUERY_BLOCK + 7
    K, Q = _unit(rng, n_keys, p), _unit(rng, m, p)
    rel = [{0, 1}, {1}, {2}, {0, 2}, {1, 2}]
    mem = memory_table(K, rel, n_docs=3)
    excl = rng.integers(0, n_keys, size=m)
    excl[QUERY_BLOCK::2] = -1  # the second block's pattern of "none" differs from the first's
    sim = memory_similarity(Q, mem, exclude_keys=excl)
    S = Q.astype(np.float64) @ K.T.astype(np.float64)
    S[np.flatnonzero(excl >= 0), excl[excl >= 0]] = -np.inf
    for d in range(3):
        finders = [k for k, r in enumerate(rel) if d in r]
        np.testing.assert_allclose(sim[:, d], S[:, finders].max(axis=1), atol=1e-6)
    # and without exclusions, block by block
    np.testing.assert_allclose(memory_similarity(Q[::-1], mem)[:, 1],
                               (Q[::-1].astype(np.float64) @ K[[0, 1, 4]].T.astype(np.float64)).max(axis=1),
                               atol=1e-6)
