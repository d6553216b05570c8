"""DocumentMemory: the gate chosen on validation, the guard on protected queries, save / load, and the
query-only family; expected values from dense brute-force scores and a hand-written NDCG."""

from __future__ import annotations

import numpy as np
import pytest

from asymgeo.adapters import Adapter, load_adapter, save_adapter
from asymgeo.adapters.memory import DocumentMemory
from asymgeo.retrieval.metrics import RelevanceTable


def _ndcg10(ranked: np.ndarray, relevant: set[int]) -> float:
    dcg = sum(1.0 / np.log2(i + 2) for i, d in enumerate(ranked[:10]) if int(d) in relevant)
    ideal = sum(1.0 / np.log2(i + 2) for i in range(min(10, len(relevant))))
    return dcg / ideal


def _unit(A):
    return (A / np.linalg.norm(A, axis=1, keepdims=True)).astype(np.float32)


def _world(seed=0, p=16, N=80, n=30):
    """Training queries are noisy copies of their positive; validation queries are near-duplicates of
    training queries: the first half want the same document (memory helps), the second half another
    document (memory hurts them: they are the protected ones)."""
    rng = np.random.default_rng(seed)
    C = _unit(rng.normal(size=(N, p)))
    pos = rng.choice(N, size=n, replace=False)
    X = _unit(C[pos] + 0.9 * rng.normal(size=(n, p)))
    V = _unit(X[:20] + 0.15 * rng.normal(size=(20, p)))
    other = [int(d) for d in rng.choice(np.setdiff1d(np.arange(N), pos), size=10, replace=False)]
    for i, d in enumerate(other):  # a protected query's own document, near it: frozen finds it
        C[d] = _unit((V[10 + i] + 0.6 * rng.normal(size=p))[None])[0]
    vrel = [{int(pos[i])} for i in range(10)] + [{other[i - 10]} for i in range(10, 20)]
    ids = [f"v{i}" for i in range(20)]
    table = RelevanceTable({f"v{i}": {f"d{d}": 1 for d in vrel[i]} for i in range(20)}, ids,
                           [f"d{j}" for j in range(N)])
    return C, X, [{int(d)} for d in pos], V, table, vrel


def _brute_ndcg(C, V, vrel, K, rel, tau, alpha):
    S = V.astype(np.float64) @ C.T.astype(np.float64)
    for d in range(C.shape[0]):
        finders = [j for j, r in enumerate(rel) if d in r]
        if finders and alpha > 0:
            S[:, d] += alpha * (np.maximum(V @ K[finders].T - tau, 0) / (1 - tau)).max(axis=1)
    order = np.lexsort((np.broadcast_to(np.arange(C.shape[0]), S.shape), -S), axis=-1)
    return np.array([_ndcg10(order[i], vrel[i]) for i in range(len(vrel))])


def test_unguarded_memory_takes_the_best_validation_gate():
    C, X, rel, V, table, vrel = _world()
    mem = DocumentMemory(min_protected=1).fit(X, rel, C, validation_queries=V, validation_relevance=table)
    assert mem.active
    got = _brute_ndcg(C, V, vrel, X, rel, mem.threshold_, mem.weight_).mean()
    assert got == pytest.approx(mem.validation_ndcg_, abs=1e-9)
    frozen = _brute_ndcg(C, V, vrel, X, rel, 0.5, 0.0).mean()
    assert mem.map_validation_ndcg_ == pytest.approx(frozen, abs=1e-9)
    # every grid point recomputed independently: none beats the choice
    best = max(_brute_ndcg(C, V, vrel, X, rel, h["threshold"], h["weight"]).mean() for h in mem.history_)
    assert mem.validation_ndcg_ == pytest.approx(best, abs=1e-9)
    assert mem.validation_ndcg_ > frozen


def test_the_guard_keeps_protected_queries_at_the_map():
    C, X, rel, V, table, vrel = _world()
    protected = np.arange(10, 20)
    mem = DocumentMemory(min_protected=5).fit(X, rel, C, validation_queries=V, validation_relevance=table,
                                              protected=protected)
    per = _brute_ndcg(C, V, vrel, X, rel, mem.threshold_, mem.weight_)
    base = _brute_ndcg(C, V, vrel, X, rel, 0.5, 0.0)
    assert (per - base)[protected].mean() >= 0  # recomputed: the protected queries lose nothing
    assert mem.protected_diff_ is not None and mem.protected_diff_ >= 0
    # the unguarded choice hurts them here, so the guard changed the answer
    free = DocumentMemory(min_protected=1).fit(X, rel, C, validation_queries=V, validation_relevance=table)
    per_free = _brute_ndcg(C, V, vrel, X, rel, free.threshold_, free.weight_)
    assert (per_free - base)[protected].mean() < 0
    infeasible = [h for h in mem.history_ if not h["feasible"]]
    assert infeasible and all(h["protected_diff"] < 0 for h in infeasible)


def test_too_few_protected_queries_is_said():
    C, X, rel, V, table, vrel = _world()
    mem = DocumentMemory().fit(X, rel, C, validation_queries=V, validation_relevance=table, protected=[10, 11])
    assert any("only 2 validation queries" in n for n in mem.notes_)


def test_extend_adds_keys_and_keeps_the_gate():
    C, X, rel, V, table, vrel = _world()
    mem = DocumentMemory(min_protected=1).fit(X, rel, C, validation_queries=V, validation_relevance=table)
    tau, alpha, n = mem.threshold_, mem.weight_, mem.table_.n_keys
    mem.extend(V, vrel)
    assert (mem.threshold_, mem.weight_, mem.table_.n_keys) == (tau, alpha, n + 20)
    # each validation query now finds its own document first (it is its own key, similarity 1)
    _, idx = mem.search(V, C, 1)
    assert [int(i) for i in idx[:, 0]] == [next(iter(r)) for r in vrel]


def test_an_adapter_with_memory_saves_loads_and_searches_the_same(tmp_path, rng):
    C, X, rel, V, table, vrel = _world()
    p = C.shape[1]
    ad = Adapter.from_maps(0.1 * rng.normal(size=(2, p)), 0.1 * rng.normal(size=(2, p)), form="augmented")
    ad.memory_ = DocumentMemory(min_protected=1).fit(X, rel, C, validation_queries=V, validation_relevance=table,
                                                     operator=ad.operator_)
    assert ad.memory_.active
    s0, i0 = ad.search(V, C, 10)
    back = load_adapter(save_adapter(ad, tmp_path / "ad"))
    s1, i1 = back.search(V, C, 10)
    np.testing.assert_array_equal(i0, i1)
    np.testing.assert_allclose(s0, s1, atol=1e-6)
    # the index path: frozen documents, only the boost added
    res = back.index(C).search(V, 10)
    np.testing.assert_allclose(res.scores, s0, atol=1e-5)
    # the map alone would rank differently (the memory is what is saved, not a no-op)
    _, i_map = Adapter.from_maps(ad.query_map_, ad.doc_map_, form="augmented").search(V, C, 10)
    assert not np.array_equal(i_map, i0)


def test_a_damaged_memory_record_is_refused(tmp_path, rng):
    import json

    C, X, rel, V, table, vrel = _world()
    ad = Adapter.from_maps(0.1 * rng.normal(size=(2, C.shape[1])), form="augmented")
    ad.memory_ = DocumentMemory(min_protected=1).fit(X, rel, C, validation_queries=V, validation_relevance=table)
    out = save_adapter(ad, tmp_path / "ad")
    cfg = json.loads((out / "adapter.json").read_text())
    cfg["memory"]["threshold"] = 1.5
    (out / "adapter.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"memory: threshold 1.5 outside \[-1, 1\)"):
        load_adapter(out)
    cfg["memory"] = None  # the tensors are still there: a memory record removed by hand
    (out / "adapter.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="without a memory"):
        load_adapter(out)


def test_query_only_family_maps_queries_and_leaves_documents(problem, tmp_path):
    ad = Adapter(geometry="query", epochs=3, learning_rates=(1e-3,), seed=0).fit(
        problem.X, problem.pos, problem.corpus, hard_negative_rows=problem.hard, relevant_rows=problem.relevant,
        validation_queries=problem.V, validation_relevance=problem.table)
    p = problem.X.shape[1]
    assert ad.geometry_ == "query" and ad.query_map_.shape == (p, p)
    np.testing.assert_array_equal(ad.doc_map_, np.eye(p))
    np.testing.assert_array_equal(ad.transform_documents(problem.corpus[:3]), problem.corpus[:3].astype(np.float64))
    np.testing.assert_allclose(ad.operator_, np.eye(p) + ad.query_map_.T, atol=1e-12)
    # trained: the map moved away from the identity start and the validation score did not drop
    assert np.abs(ad.query_map_).max() > 0
    assert ad.validation_ndcg_ >= ad.history_[0]["validation_ndcg"]
    S = ad.transform_queries(problem.V) @ ad.transform_documents(problem.corpus).T
    np.testing.assert_allclose(S, problem.V.astype(np.float64) @ ad.operator_ @ problem.corpus.T.astype(np.float64),
                               atol=1e-5)
    res = ad.index(problem.corpus).search(problem.V, 5)
    assert ad.index(problem.corpus).documents.shape == problem.corpus.shape  # the frozen index, as it is
    np.testing.assert_allclose(res.scores, np.sort(S, axis=1)[:, ::-1][:, :5], atol=1e-5)
    back = load_adapter(save_adapter(ad, tmp_path / "q"))
    np.testing.assert_array_equal(back.operator_, ad.operator_)
    with pytest.raises(ValueError, match="needs form='augmented'"):
        Adapter(geometry="query", form="projection").fit(problem.X, problem.pos, problem.corpus)


def test_fit_adapter_deploys_map_plus_memory_and_scores_it_by_hand(shared_dir):
    """On SciFact: the deployed test NDCG@10 recomputed from the dense score matrix and the qrels."""
    from asymgeo.adapters.workflow import fit_adapter, load_adaptation_data

    kw = dict(data_dir=shared_dir / "data", cache_dir=shared_dir / "embeddings")
    rep = fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="shared", rank=4, n_train=200, epochs=1,
                      learning_rates=(1e-3,), report=False, **kw)
    ad, m = rep.adapter, rep.metrics
    assert ad.memory_ is not None and m["memory"]["kept"]
    # the deployed memory holds the 200 training queries and then the 162 validation queries
    assert ad.memory_.table_.n_keys == 200 + 162
    d = load_adaptation_data("scifact", "all-MiniLM-L6-v2", **kw)
    C = np.asarray(d.corpus, dtype=np.float64)
    T = d.T.astype(np.float64)
    S = T @ ad.operator_ @ C.T
    t = ad.memory_.table_
    G = np.maximum(T @ t.keys.T.astype(np.float64) - ad.memory_.threshold_, 0) / (1 - ad.memory_.threshold_)
    boost = np.zeros_like(S)
    for key, row in zip(t.pair_key, t.pair_document, strict=True):
        boost[:, row] = np.maximum(boost[:, row], ad.memory_.weight_ * G[:, key])
    S += boost
    ids = list(d.corpus_ids)
    row_of = {x: j for j, x in enumerate(ids)}
    want = []
    for i, q in enumerate(d.test.query_ids):
        rel = {row_of[x] for x, g in d.qrels[q].items() if g > 0 and x in row_of}
        want.append(_ndcg10(np.argsort(-S[i], kind="stable"), rel))
    assert m["deployed"]["test_ndcg@10"] == pytest.approx(float(np.mean(want)), abs=2e-3)
    # and it is what the memory is for: above the map alone on the test queries
    assert m["deployed"]["test_ndcg@10"] > m["trained"]["test_ndcg@10"] + 0.05


def _brute_loo_ndcg(C, V, vrel, K, rel, tau, alpha):
    """Each validation query scored against the training keys plus every *other* validation
    query as a key (its own left out), one dense score matrix per query."""
    out = []
    for i in range(V.shape[0]):
        keys = np.vstack([K] + [V[j:j + 1] for j in range(V.shape[0]) if j != i])
        krel = list(rel) + [vrel[j] for j in range(V.shape[0]) if j != i]
        out.append(_brute_ndcg(C, V[i:i + 1], [vrel[i]], keys, krel, tau, alpha)[0])
    return np.array(out)


def test_leave_one_out_scores_each_validation_query_against_the_deployed_keys():
    C, X, rel, V, _, vrel = _world()
    vrel = list(vrel)
    vrel[19] = set(vrel[18])  # two validation queries share a document: neither is protected
    ids = [f"v{i}" for i in range(20)]
    table = RelevanceTable({f"v{i}": {f"d{d}": 1 for d in vrel[i]} for i in range(20)}, ids,
                           [f"d{j}" for j in range(C.shape[0])])
    mem = DocumentMemory(min_protected=5).fit(X, rel, C, validation_queries=V, validation_relevance=table,
                                              validation_rows=vrel)
    assert mem.leave_one_out_
    # protected by hand: no relevant document is a training positive or another validation query's
    train_docs = set().union(*rel)
    want = [not (vrel[i] & train_docs) and not any(vrel[i] & vrel[j] for j in range(20) if j != i)
            for i in range(20)]
    assert mem.protected_.tolist() == want and want[10] and not want[18] and not want[19]
    # every grid point and the choice recomputed with per-query key sets
    for h in mem.history_:
        got = _brute_loo_ndcg(C, V, vrel, X, rel, h["threshold"], h["weight"])
        assert h["validation_ndcg"] == pytest.approx(got.mean(), abs=1e-9)
    np.testing.assert_allclose(mem.validation_values_,
                               _brute_loo_ndcg(C, V, vrel, X, rel, mem.threshold_, mem.weight_), atol=1e-9)
    base = _brute_loo_ndcg(C, V, vrel, X, rel, 0.5, 0.0)
    assert (mem.validation_values_ - base)[mem.protected_].mean() >= 0
    # the table keeps the training keys only: extend adds the validation queries afterwards
    assert mem.table_.n_keys == X.shape[0]


def test_leave_one_out_needs_one_row_set_per_validation_query():
    C, X, rel, V, table, vrel = _world()
    with pytest.raises(ValueError, match="validation_rows: 19 row sets for 20 validation queries"):
        DocumentMemory().fit(X, rel, C, validation_queries=V, validation_relevance=table, validation_rows=vrel[:19])


# ---------------------------------------------------------------- #41: data that reach both sides of each branch
def _table_of(vrel, n_docs):
    ids = [f"v{i}" for i in range(len(vrel))]
    return RelevanceTable({q: {f"d{d}": 1 for d in r} for q, r in zip(ids, vrel, strict=True)}, ids,
                          [f"d{j}" for j in range(n_docs)])


def _brute_gates(nearest, quantiles):
    """The gate grid written out: each quantile of the nearest-key similarity, capped below 1."""
    return sorted({min(float(np.quantile(nearest, q)), 0.999) for q in quantiles})


def _brute_scale(C, V):
    """Median gap between each query's first and tenth frozen score (its last with fewer documents)."""
    S = np.sort(V.astype(np.float64) @ C.T.astype(np.float64), axis=1)[:, ::-1]
    return float(np.median(S[:, 0] - S[:, min(10, S.shape[1]) - 1]))


def test_leave_one_out_protection_needs_every_relevant_document_unremembered():
    # the fixture's validation queries each have one relevant document, where "any remembered" and
    # "all remembered" agree; here query 10 has a remembered document (a training positive no other
    # validation query wants) beside an unremembered one, query 11 two unremembered ones
    C, X, rel, V, _, vrel = _world()
    vrel = list(vrel)
    train_docs = set().union(*rel)
    used = set().union(*vrel)
    spare_positive = next(d for d in sorted(train_docs) if d not in used)
    spare_other = next(d for d in range(C.shape[0]) if d not in train_docs and d not in used)
    vrel[10] = vrel[10] | {spare_positive}
    vrel[11] = vrel[11] | {spare_other}
    mem = DocumentMemory(min_protected=1, gate_quantiles=(0.5,), weight_multiples=(1.0,)).fit(
        X, rel, C, validation_queries=V, validation_relevance=_table_of(vrel, C.shape[0]), validation_rows=vrel)
    want = [False] * 10 + [False] + [True] * 9  # by hand: 0-9 want training positives, 10 has one
    assert mem.protected_.tolist() == want and mem.n_protected_ == 9


def test_a_boolean_protected_mask_is_read_as_a_mask():
    C, X, rel, V, table, _ = _world()
    mask = np.arange(20) >= 10
    mem = DocumentMemory(min_protected=1, gate_quantiles=(0.5,), weight_multiples=(1.0,)).fit(
        X, rel, C, validation_queries=V, validation_relevance=table, protected=mask)
    assert mem.protected_.tolist() == mask.tolist() and mem.n_protected_ == 10  # not rows 0 and 1
    with pytest.raises(ValueError, match=r"protected: a mask of shape \(20,\) expected, got \(19,\)"):
        DocumentMemory().fit(X, rel, C, validation_queries=V, validation_relevance=table, protected=mask[:19])


def test_the_guard_applies_with_exactly_min_protected_queries():
    # 10 protected queries and min_protected=10: the guard is on (the boundary the other tests miss)
    C, X, rel, V, table, vrel = _world()
    protected = np.arange(10, 20)
    mem = DocumentMemory(min_protected=10).fit(X, rel, C, validation_queries=V, validation_relevance=table,
                                               protected=protected)
    assert mem.notes_ == []
    per = _brute_ndcg(C, V, vrel, X, rel, mem.threshold_, mem.weight_)
    base = _brute_ndcg(C, V, vrel, X, rel, 0.5, 0.0)
    assert (per - base)[protected].mean() >= 0  # the unguarded choice loses here (test above)


def test_ties_keep_the_strictest_gate_then_the_smallest_weight_in_any_grid_order():
    # the grid recomputed by brute force: several gates and several weights reach the best NDCG@10;
    # the weights are given largest first, so "the first that ties" is not "the smallest"
    C, X, rel, V, table, vrel = _world(seed=2)
    multiples = (12.0, 10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0)
    mem = DocumentMemory(min_protected=1, weight_multiples=multiples).fit(
        X, rel, C, validation_queries=V, validation_relevance=table)
    nearest = (V.astype(np.float64) @ X.T.astype(np.float64)).max(axis=1)
    taus = _brute_gates(nearest, mem.gate_quantiles)
    np.testing.assert_allclose(sorted({h["threshold"] for h in mem.history_}), taus, atol=1e-6)
    scale = _brute_scale(C, V)
    grid = [(tau, w * scale, _brute_ndcg(C, V, vrel, X, rel, tau, w * scale).mean()) for tau in taus for w in multiples]
    best = max(g[2] for g in grid)
    assert best > _brute_ndcg(C, V, vrel, X, rel, 0.5, 0.0).mean()
    tied = [(tau, alpha) for tau, alpha, v in grid if v >= best - 1e-12]
    tau_want = max(t for t, _ in tied)
    alpha_want = min(a for t, a in tied if t == tau_want)
    # the data reach the tie-breaks: a looser gate and a larger weight tie too
    assert len({t for t, _ in tied}) >= 2 and len([a for t, a in tied if t == tau_want]) >= 2
    assert mem.threshold_ == pytest.approx(tau_want, abs=1e-6)
    assert mem.weight_ == pytest.approx(alpha_want, rel=1e-5)


def test_gates_are_quantiles_of_the_nearest_other_key_under_leave_one_out():
    # each validation query's nearest key among the training keys and the *other* validation
    # queries (itself left out: its own similarity 1 would put every gate at the cap)
    C, X, rel, V, table, vrel = _world()
    mem = DocumentMemory(min_protected=1).fit(X, rel, C, validation_queries=V, validation_relevance=table,
                                              validation_rows=vrel)
    V64, X64 = V.astype(np.float64), X.astype(np.float64)
    nearest = [max((X64 @ V64[i]).max(), max(V64[j] @ V64[i] for j in range(20) if j != i)) for i in range(20)]
    np.testing.assert_allclose(sorted({h["threshold"] for h in mem.history_}),
                               _brute_gates(np.array(nearest), mem.gate_quantiles), atol=1e-6)


def test_a_validation_query_equal_to_a_key_caps_the_gate_below_one():
    # two validation queries repeat training queries exactly: the top quantile of the nearest-key
    # similarity is 1, a gate the formula cannot take; the grid stops at 0.999
    C, X, rel, V, table, vrel = _world()
    p = X.shape[1]
    X, V = X.copy(), V.copy()
    X[0], X[1] = np.eye(p, dtype=np.float32)[0], np.eye(p, dtype=np.float32)[1]
    V[0], V[1] = X[0], X[1]
    mem = DocumentMemory(min_protected=1, gate_quantiles=(0.5, 0.95), weight_multiples=(1.0,)).fit(
        X, rel, C, validation_queries=V, validation_relevance=table)
    nearest = (V.astype(np.float64) @ X.T.astype(np.float64)).max(axis=1)
    assert np.quantile(nearest, 0.95) == 1.0
    assert max(h["threshold"] for h in mem.history_) == 0.999


def test_a_corpus_smaller_than_ten_spreads_to_its_last_score():
    rng = np.random.default_rng(4)
    C, X, V = _unit(rng.normal(size=(6, 8))), _unit(rng.normal(size=(5, 8))), _unit(rng.normal(size=(4, 8)))
    vrel = [{0}, {1}, {2}, {3}]
    mem = DocumentMemory(min_protected=1).fit(X, [{0}, {1}, {2}, {3}, {4}], C, validation_queries=V,
                                              validation_relevance=_table_of(vrel, 6))
    assert mem.scale_ == pytest.approx(_brute_scale(C, V), rel=1e-5)


def test_a_memory_with_no_keys_keeps_the_map():
    C, X, rel, V, table, vrel = _world()
    mem = DocumentMemory(min_protected=1).fit(np.zeros((0, X.shape[1]), dtype=np.float32), [], C,
                                              validation_queries=V, validation_relevance=table)
    assert mem.weight_ == 0.0 and not mem.active
    assert mem.validation_ndcg_ == pytest.approx(_brute_ndcg(C, V, vrel, X, rel, 0.5, 0.0).mean(), abs=1e-9)


def test_grids_accept_their_bounds_and_refuse_what_lies_outside():
    C, X, rel, V, table, _ = _world()
    kw = dict(validation_queries=V, validation_relevance=table)
    DocumentMemory(min_protected=1, gate_quantiles=(0.0, 1.0), weight_multiples=(1.0,)).fit(X, rel, C, **kw)
    for q in ((), (-0.01,), (1.01,)):
        with pytest.raises(ValueError, match="gate_quantiles: expected values in"):
            DocumentMemory(gate_quantiles=q).fit(X, rel, C, **kw)
    for w in ((), (0.0,), (-1.0,), (np.inf,)):
        with pytest.raises(ValueError, match="weight_multiples: expected positive numbers"):
            DocumentMemory(weight_multiples=w).fit(X, rel, C, **kw)
    with pytest.raises(ValueError, match=r"validation_queries: expected shape \(m, 16\)"):
        DocumentMemory().fit(X, rel, C, validation_queries=V[:, :5], validation_relevance=table)
