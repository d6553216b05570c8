"""fit_adapter's memory wiring (issue #41, survivors of the deadlock-free workflow mutation run):
which validation queries are protected, which corpus rows a query's labels name, and that
``fit_memory`` hands the guard its mask.  The world is built by hand so that the answer is
known: half the validation queries want a training query's document (the memory helps), the
other half a document no training query found (the memory can only hurt: protected)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from asymgeo._ids import IdIndex
from asymgeo.adapters.memory import DocumentMemory
from asymgeo.adapters.workflow import _relevant_rows, fit_memory, protected_validation
from asymgeo.retrieval.metrics import RelevanceTable


def _unit(A):
    return (A / np.linalg.norm(A, axis=1, keepdims=True)).astype(np.float32)


def _world(seed=0, p=16, N=200, n=60, half=40, pairs=False):
    """``n`` training queries (noisy copies of their positive); ``2 * half`` validation queries, each a
    near-duplicate of a training query: the first ``half`` want that query's document, the others a
    document of their own placed near them (frozen finds it; the memory pulls the other one up).
    ``pairs``: the first half come two by two from the same training query (so they want the same
    document, and each remembers the other's once the validation queries are keys)."""
    rng = np.random.default_rng(seed)
    C = _unit(rng.normal(size=(N, p)))
    pos = rng.choice(N, size=n, replace=False)
    X = _unit(C[pos] + 0.9 * rng.normal(size=(n, p)))
    first = np.arange(half) // 2 if pairs else np.arange(half)
    src = np.concatenate([first, np.arange(half)]) % n
    V = _unit(X[src] + 0.15 * rng.normal(size=(2 * half, p)))
    own = [int(d) for d in rng.choice(np.setdiff1d(np.arange(N), pos), size=half, replace=False)]
    for i, d in enumerate(own):
        C[d] = _unit((V[half + i] + 0.6 * rng.normal(size=p))[None])[0]
    vrel = [{int(pos[src[i]])} for i in range(half)] + [{own[i]} for i in range(half)]
    cids = [f"d{j}" for j in range(N)]
    train_ids = [f"t{i}" for i in range(n)]
    val_ids = [f"v{i}" for i in range(2 * half)]
    qrels = {t: {f"d{int(pos[i])}": 1} for i, t in enumerate(train_ids)}
    qrels.update({v: {f"d{d}": 1 for d in vrel[i]} for i, v in enumerate(val_ids)})
    table = RelevanceTable({v: qrels[v] for v in val_ids}, val_ids, cids)
    d = SimpleNamespace(corpus=C, V=V, validation=table, qrels=qrels, corpus_ids=cids)
    mask = np.arange(2 * half) >= half  # by construction: the second half's documents no training query found
    return d, train_ids, X, [{int(p_)} for p_ in pos], mask


def test_protected_validation_is_the_queries_whose_documents_no_training_query_found():
    d, train_ids, _, _, mask = _world()
    got = protected_validation(d, train_ids)
    assert got.dtype == bool
    np.testing.assert_array_equal(got, mask)
    # every validation query is protected against an empty training set, none against every query
    assert protected_validation(d, []).all()
    assert not protected_validation(d, train_ids + list(d.validation.query_ids)).any()


def test_fit_memory_guards_the_document_disjoint_validation_queries():
    d, train_ids, X, rel, mask = _world()
    mem = fit_memory(d, train_ids, X, rel, None, corpus_ids=d.corpus_ids, extend=False)
    want = DocumentMemory().fit(X, rel, d.corpus, validation_queries=d.V, validation_relevance=d.validation,
                                protected=mask, corpus_ids=d.corpus_ids)
    assert (mem.threshold_, mem.weight_) == (want.threshold_, want.weight_)
    assert mem.n_protected_ == int(mask.sum()) == 40 and mem.protected_diff_ >= 0
    # the mask matters here: unguarded, or guarding the other half, another gate is chosen
    free = DocumentMemory().fit(X, rel, d.corpus, validation_queries=d.V, validation_relevance=d.validation,
                                corpus_ids=d.corpus_ids)
    other = DocumentMemory().fit(X, rel, d.corpus, validation_queries=d.V, validation_relevance=d.validation,
                                 protected=~mask, corpus_ids=d.corpus_ids)
    assert (free.threshold_, free.weight_) != (mem.threshold_, mem.weight_)
    assert (other.threshold_, other.weight_) != (mem.threshold_, mem.weight_)
    assert mem.table_.n_keys == len(train_ids)  # extend=False: the training keys alone


def test_fit_memory_scores_on_top_of_the_map_it_is_given():
    d, train_ids, X, rel, mask = _world()
    R = np.random.default_rng(9).normal(size=(16, 4))
    M = np.eye(16) + 0.5 * R @ R.T  # a map that reorders the frozen ranking
    mem = fit_memory(d, train_ids, X, rel, M, corpus_ids=d.corpus_ids, extend=False)
    want = DocumentMemory().fit(X, rel, d.corpus, validation_queries=d.V, validation_relevance=d.validation,
                                protected=mask, operator=M, corpus_ids=d.corpus_ids)
    frozen = DocumentMemory().fit(X, rel, d.corpus, validation_queries=d.V, validation_relevance=d.validation,
                                  protected=mask, corpus_ids=d.corpus_ids)
    assert mem.map_validation_ndcg_ == want.map_validation_ndcg_ != frozen.map_validation_ndcg_
    assert (mem.threshold_, mem.weight_, mem.validation_ndcg_) == (want.threshold_, want.weight_,
                                                                     want.validation_ndcg_)


def test_fit_memory_extends_its_keys_with_the_validation_queries_when_it_is_kept():
    d, train_ids, X, rel, _ = _world()
    mem = fit_memory(d, train_ids, X, rel, None, corpus_ids=d.corpus_ids)
    assert mem.weight_ > 0
    assert mem.table_.n_keys == len(train_ids) + d.V.shape[0]
    np.testing.assert_array_equal(mem.table_.keys[len(train_ids):], d.V)


@pytest.mark.parametrize("index", [False, True], ids=["list", "IdIndex"])
def test_relevant_rows_keeps_grades_above_zero_and_corpus_row_zero(index):
    cids = [f"d{j}" for j in range(6)]
    qrels = {"a": {"d0": 1, "d5": 2, "d3": 0, "gone": 1}, "zero": {"d2": 0}, "empty": {}}
    d = SimpleNamespace(corpus_ids=IdIndex(cids) if index else cids, qrels=qrels)
    # by hand: row 0 is a document like any other; grade 0 is not relevant; unknown ids are skipped;
    # a query without any (or without a listed) label names no row
    assert _relevant_rows(d, ["a", "zero", "empty", "unlisted"]) == [{0, 5}, set(), set(), set()]


def test_fit_memory_leave_one_out_scores_against_the_keys_the_deployed_memory_holds():
    d, train_ids, X, rel, mask = _world(pairs=True)
    R = np.random.default_rng(4).normal(size=(16, 3))
    M = np.eye(16) + 0.3 * R @ R.T
    mem = fit_memory(d, train_ids, X, rel, M, corpus_ids=d.corpus_ids, extend=False, leave_one_out=True)
    val_rows = [{int(r[1:]) for r in d.qrels[v]} for v in d.validation.query_ids]  # "d17" -> row 17, by hand
    want = DocumentMemory().fit(X, rel, d.corpus, validation_queries=d.V, validation_relevance=d.validation,
                                validation_rows=val_rows, operator=M, corpus_ids=d.corpus_ids)
    assert mem.leave_one_out_ and want.leave_one_out_
    assert (mem.threshold_, mem.weight_, mem.validation_ndcg_, mem.map_validation_ndcg_) == (
        want.threshold_, want.weight_, want.validation_ndcg_, want.map_validation_ndcg_)
    np.testing.assert_array_equal(mem.protected_, want.protected_)
    assert mem.table_.n_keys == len(train_ids)
    # paired validation queries remember each other's document once both are keys: scored that way,
    # the same grid gives another answer than the default's (training keys alone)
    default = fit_memory(d, train_ids, X, rel, M, corpus_ids=d.corpus_ids, extend=False)
    assert not default.leave_one_out_
    assert (default.threshold_, default.validation_ndcg_) != (mem.threshold_, mem.validation_ndcg_)


def _ndcg10(ranked, relevant):
    dcg = sum(1.0 / np.log2(i + 2) for i, doc in enumerate(ranked[:10]) if int(doc) in relevant)
    return dcg / sum(1.0 / np.log2(i + 2) for i in range(min(10, len(relevant))))


@pytest.mark.parametrize("remembers", [False, True], ids=["map", "map+memory"])
def test_adapter_ndcg_scores_what_the_adapter_deploys_by_brute_force(remembers):
    from asymgeo.adapters import Adapter
    from asymgeo.adapters.workflow import _adapter_ndcg

    d, train_ids, X, rel, mask = _world(p=8)  # p < 10: the search depth is the corpus size's, not p's
    rng = np.random.default_rng(2)
    A, B = 0.3 * rng.normal(size=(2, 8)), 0.3 * rng.normal(size=(2, 8))
    ad = Adapter.from_maps(A, B, form="augmented")
    M = np.eye(8) + A.T @ B
    S = d.V.astype(np.float64) @ M @ d.corpus.T.astype(np.float64)
    if remembers:
        ad.memory_ = fit_memory(d, train_ids, X, rel, ad.operator_, corpus_ids=d.corpus_ids, extend=False)
        assert ad.memory_.active
        tau, alpha = ad.memory_.threshold_, ad.memory_.weight_
        for doc in {r for rs in rel for r in rs}:  # the boost, written out: alpha max(0, x.q - tau) / (1 - tau)
            finders = [j for j, rs in enumerate(rel) if doc in rs]
            S[:, doc] += alpha * (np.maximum(d.V @ X[finders].T - tau, 0) / (1 - tau)).max(axis=1)
    order = np.lexsort((np.broadcast_to(np.arange(S.shape[1]), S.shape), -S), axis=-1)
    vrel = [{int(x[1:]) for x in d.qrels[v]} for v in d.validation.query_ids]
    want = np.array([_ndcg10(order[i], vrel[i]) for i in range(len(vrel))])
    got = _adapter_ndcg(d.V, d.validation, d.corpus, ad, d.corpus_ids)
    np.testing.assert_allclose(got, want, atol=1e-9)


def test_a_missing_figure_is_recorded_as_nan():
    from asymgeo.adapters.workflow import _num

    assert np.isnan(_num(None)) and _num(2) == 2.0 and isinstance(_num(np.float32(0.5)), float)
