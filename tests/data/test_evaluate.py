"""evaluate_frozen: the dataset-aware evaluation, checked against pytrec_eval and by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import pytrec_eval
from beir_fixtures import doc, query, write_beir

from asymgeo.data import evaluate_frozen, load_beir, load_embeddings, write_embeddings
from asymgeo.data.evaluate import default_metrics


def _pytrec_ndcg10(S, qids, cids, qrels):
    run = {}
    for i, q in enumerate(qids):
        top = np.argsort(-S[i], kind="stable")[:200]
        run[q] = {cids[j]: float(S[i, j]) for j in top}
    res = pytrec_eval.RelevanceEvaluator({q: {d: int(g >= 1) for d, g in v.items()} for q, v in qrels.items()},
                                         {"ndcg_cut.10"}).evaluate(run)
    return float(np.mean([res[q]["ndcg_cut_10"] for q in qrels]))


@pytest.mark.slow
def test_scifact_with_and_without_an_operator_match_pytrec_eval(shared_dir):
    ds = load_beir(shared_dir / "data" / "scifact")
    cache = shared_dir / "embeddings"
    emb = load_embeddings(ds, "all-MiniLM-L6-v2", cache_dir=cache)
    qrels = ds.qrels("test")
    qids = list(qrels)
    Q = np.asarray(emb.queries[emb.query_rows(qids)], dtype=np.float32)
    C = np.asarray(emb.corpus, dtype=np.float32)
    rng = np.random.default_rng(7)
    A = rng.standard_normal((16, emb.dim)).astype(np.float32)
    B = rng.standard_normal((16, emb.dim)).astype(np.float32)
    M = A.T @ B  # a dual operator, rank 16: the ranking changes a lot
    for operator, S in ((None, Q @ C.T), (M, (Q @ M) @ C.T)):
        want = _pytrec_ndcg10(S, qids, emb.corpus_ids, qrels)
        res = evaluate_frozen(ds, "all-MiniLM-L6-v2", cache_dir=cache, operator=operator, metrics=["ndcg@10"])
        assert res.mean["ndcg@10"] == pytest.approx(want, abs=2e-4)
        assert len(res.query_ids) == 300 and res.extra["n_docs"] == 5183
    assert want < 0.3  # the random operator really was applied (frozen: 0.6451)


@pytest.fixture
def hand(tmp_path):
    """Three documents in a plane, two queries: scores known by hand."""
    root = write_beir(tmp_path / "hand", [doc("a"), doc("b"), doc("c")], [query("q1"), query("q2")],
                      {"test": [("q1", "b", 1), ("q2", "c", 2), ("q2", "a", 1)]})
    s = 1 / math.sqrt(2)
    C = np.array([[1, 0], [0, 1], [s, s]], dtype=np.float32)
    Q = np.array([[1, 0], [0, 1]], dtype=np.float32)
    write_embeddings(tmp_path / "cache" / "hand" / "enc", C, ["a", "b", "c"], Q, ["q1", "q2"], {"normalised": True})
    return root, tmp_path / "cache"


def test_hand_example_and_operator(hand):
    root, cache = hand
    # identity: q1 ranks a (1), c (.707), b (0): relevant b at rank 3 -> 1/log2(4) = 0.5
    # q2 ranks b (1), c (.707), a (0): relevant c rank 2, a rank 3 -> (1/log2 3 + 1/2) / (1 + 1/log2 3)
    res = evaluate_frozen(root, "enc", cache_dir=cache, metrics=["ndcg@3"])
    q2 = (1 / math.log2(3) + 0.5) / (1 + 1 / math.log2(3))
    assert res.by_query("ndcg@3") == pytest.approx({"q1": 0.5, "q2": q2})
    # operator swapping the two axes: q1 ranks b first, q2 ranks a first
    swap = np.array([[0.0, 1.0], [1.0, 0.0]])
    res = evaluate_frozen(root, "enc", cache_dir=cache, metrics=["ndcg@3"], operator=swap)
    q2 = (1 + 1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert res.by_query("ndcg@3") == pytest.approx({"q1": 1.0, "q2": q2})


def test_all_negative_grades_are_an_error(tmp_path, hand):
    root, cache = hand
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tb\t-1\nq2\tc\t-2\n")
    with pytest.raises(ValueError, match="has a relevant document"):
        evaluate_frozen(root, "enc", cache_dir=cache)


def test_unknown_tie_order(hand):
    root, cache = hand
    with pytest.raises(ValueError, match="ties: expected one of"):
        evaluate_frozen(root, "enc", cache_dir=cache, ties="random")


def test_ties_straddling_the_cut_follow_trec_eval(tmp_path):
    """Five identical documents, cut-off 2: trec_eval keeps the two largest ids (d5, d4)."""
    ids = ["d1", "d2", "d3", "d4", "d5"]
    root = write_beir(tmp_path / "t", [doc(i) for i in ids], [query("q")], {"test": [("q", "d5", 1)]})
    C = np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (5, 1))
    write_embeddings(tmp_path / "c" / "t" / "enc", C, ids, np.array([[1.0, 0.0]]), ["q"], {"normalised": True})
    run = {"q": {d: 1.0 for d in ids}}
    want = pytrec_eval.RelevanceEvaluator({"q": {"d5": 1}}, {"ndcg_cut.2"}).evaluate(run)["q"]["ndcg_cut_2"]
    assert want == 1.0
    res = evaluate_frozen(root, "enc", cache_dir=tmp_path / "c", metrics=["ndcg@2"])
    assert res.mean["ndcg@2"] == want
    low = evaluate_frozen(root, "enc", cache_dir=tmp_path / "c", metrics=["ndcg@2"], ties="index")
    assert low.mean["ndcg@2"] == 0.0  # lower rows d1, d2 kept at the cut


# ------------------------------------------------ mutation survivors (tools/mutation.py evaluate)
def test_default_metrics_exact_list():
    assert default_metrics() == ["ndcg@10", "ndcg_graded@10", "recall@10", "recall@100", "precision@10", "mrr@10",
                                 "map@10"]
    assert default_metrics(100) == ["ndcg@100", "ndcg_graded@100", "recall@100", "precision@100", "mrr@100",
                                    "map@100"]
    assert default_metrics(5)[3] == "recall@100"


def test_result_records_what_was_scored(hand):
    root, cache = hand
    res = evaluate_frozen(root, "enc", cache_dir=cache, metrics=["ndcg@2"])
    e = res.extra
    assert (e["dataset"], e["encoder"], e["split"], e["n_docs"], e["dim"]) == ("hand", "enc", "test", 3, 2)
    assert (e["search_depth"], e["ties"], e["n_judged"], e["n_excluded"]) == (2, "trec_eval", 2, 0)
    assert e["backend"] in ("numpy", "faiss", "torch")
    # the default metrics and cut-off (k = 10 capped by the 3 documents)
    res = evaluate_frozen(root, "enc", cache_dir=cache)
    assert list(res.mean) == default_metrics(10) and res.extra["search_depth"] == 3


def test_excluded_queries_are_not_scored(hand):
    root, cache = hand
    res = evaluate_frozen(root, "enc", cache_dir=cache, metrics=["ndcg@3"], exclude_queries=["q1"])
    assert list(res.query_ids) == ["q2"] and res.extra["n_excluded"] == 1 and res.extra["n_judged"] == 2
    q2 = (1 / math.log2(3) + 0.5) / (1 + 1 / math.log2(3))
    assert res.mean["ndcg@3"] == pytest.approx(q2)
    with pytest.raises(ValueError, match=r"split 'test': every one of its 2 judged queries is excluded"):
        evaluate_frozen(root, "enc", cache_dir=cache, exclude_queries=["q1", "q2"])


def test_operator_reaches_both_tie_orders(hand):
    root, cache = hand
    swap = np.array([[0.0, 1.0], [1.0, 0.0]])
    for ties in ("trec_eval", "index"):
        res = evaluate_frozen(root, "enc", cache_dir=cache, metrics=["ndcg@3"], operator=swap, ties=ties)
        assert res.by_query("ndcg@3")["q1"] == pytest.approx(1.0), ties
        assert res.extra["ties"] == ties


def test_a_split_without_judgements_names_its_qrels_file(hand):
    root, cache = hand
    (root / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n")
    with pytest.raises(ValueError) as err:
        evaluate_frozen(root, "enc", cache_dir=cache, split="dev")
    assert str(err.value).startswith(f"{root / 'qrels' / 'dev.tsv'}: split 'dev' has no usable relevance judgements")


def test_data_dir_resolves_a_dataset_by_name(hand):
    root, cache = hand
    res = evaluate_frozen("hand", "enc", data_dir=root.parent, cache_dir=cache, metrics=["ndcg@3"])
    assert res.extra["dataset"] == "hand"


def test_an_open_cache_is_reused_and_checked_against_the_dataset(hand, shared_dir):
    root, cache = hand
    emb = load_embeddings(root, "enc", cache_dir=cache)
    q2 = (1 / math.log2(3) + 0.5) / (1 + 1 / math.log2(3))     # the hand values above
    res = evaluate_frozen(root, "enc", cache_dir="/nonexistent", metrics=["ndcg@3"], cache=emb)
    assert res.by_query("ndcg@3") == pytest.approx({"q1": 0.5, "q2": q2})
    other = load_embeddings(shared_dir / "data" / "scifact", "all-MiniLM-L6-v2", cache_dir=shared_dir / "embeddings")
    with pytest.raises(ValueError, match="scifact|corpus|ids"):
        evaluate_frozen(root, "enc", metrics=["ndcg@3"], cache=other)
