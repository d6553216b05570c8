"""Metrics: hand calculations, trec_eval (pytrec_eval) agreement, paired comparison."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asymgeo.retrieval.compare import paired_comparison
from asymgeo.retrieval.metrics import (
    RelevanceTable,
    evaluate_indices,
    evaluate_run,
    format_metrics,
    parse_metric,
)


# --------------------------------------------------------------------------- hand calculations
def test_hand_calculation_binary():
    # ranking x, a, y, b ; relevant a, b, c (c never retrieved) -> R = 3
    run = {"q": {"x": 4.0, "a": 3.0, "y": 2.0, "b": 1.0}}
    qrels = {"q": {"a": 1, "b": 1, "c": 1, "x": 0}}
    res = evaluate_run(run, qrels, ["ndcg@3", "ndcg@10", "recall@2", "recall@4", "precision@4", "mrr@1", "mrr@10", "map@4"])
    m = res.mean
    ideal3 = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert m["ndcg@3"] == pytest.approx((1 / math.log2(3)) / ideal3, abs=1e-15)
    assert m["ndcg@10"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(5)) / ideal3, abs=1e-15)
    assert m["recall@2"] == pytest.approx(1 / 3)
    assert m["recall@4"] == pytest.approx(2 / 3)
    assert m["precision@4"] == pytest.approx(0.5)
    assert m["mrr@1"] == 0.0
    assert m["mrr@10"] == pytest.approx(0.5)
    assert m["map@4"] == pytest.approx((1 / 2 + 2 / 4) / 3)


def test_ndcg_ideal_uses_min_k_and_R():
    # one relevant doc at rank 2: NDCG@10 = (1/log2 3) / 1
    res = evaluate_run({"q": {"a": 2.0, "b": 1.0}}, {"q": {"b": 1}}, "ndcg@10")
    assert res.mean["ndcg@10"] == pytest.approx(1 / math.log2(3))


def test_graded_ndcg_hand():
    run = {"q": {"a": 3.0, "b": 2.0, "c": 1.0}}
    qrels = {"q": {"a": 1, "b": 0, "c": 2, "d": 3}}
    res = evaluate_run(run, qrels, ["ndcg_graded@3", "ndcg@3"])
    dcg = 1 + 0 + 2 / math.log2(4)
    idcg = 3 + 2 / math.log2(3) + 1 / math.log2(4)
    assert res.mean["ndcg_graded@3"] == pytest.approx(dcg / idcg)
    # binary: a, c relevant (grade >= 1); R = 3
    bdcg = 1 + 1 / math.log2(4)
    bidcg = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert res.mean["ndcg@3"] == pytest.approx(bdcg / bidcg)


def test_precision_divides_by_k_with_short_run():
    res = evaluate_run({"q": {"a": 1.0}}, {"q": {"a": 1}}, ["precision@5", "recall@5"])
    assert res.mean["precision@5"] == pytest.approx(0.2)
    assert res.mean["recall@5"] == 1.0


def test_ties_ordered_by_docid_descending_like_trec_eval():
    # equal scores: trec_eval ranks "c" before "b" before "a"
    res = evaluate_run({"q": {"a": 1.0, "b": 1.0, "c": 1.0}}, {"q": {"a": 1}}, "mrr@10")
    assert res.mean["mrr@10"] == pytest.approx(1 / 3)


def test_queries_without_relevant_documents_are_excluded_and_counted():
    run = {"q1": {"a": 1.0}, "q2": {"a": 1.0}, "q3": {"z": 1.0}}
    qrels = {"q1": {"a": 1}, "q2": {"a": 0}}
    res = evaluate_run(run, qrels, "ndcg@10")
    assert res.query_ids == ["q1"]
    assert res.n_no_relevant == 1
    assert res.n_unjudged == 1
    assert res.mean["ndcg@10"] == 1.0
    assert res.by_query("ndcg@10") == {"q1": 1.0}
    assert "excluded" in format_metrics(res)


def test_missing_run_query_is_an_error_or_zero():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    with pytest.raises(ValueError, match=r"missing from the run \(first: 'q2'\)"):
        evaluate_run({"q1": {"a": 1.0}}, qrels, "ndcg@10")
    res = evaluate_run({"q1": {"a": 1.0}}, qrels, "ndcg@10", missing="zero")
    assert res.n_missing == 1 and res.mean["ndcg@10"] == 0.5


def test_id_mismatch_errors():
    with pytest.raises(ValueError, match="share no query id"):
        evaluate_run({"x": {"a": 1.0}}, {"q": {"a": 1}}, "ndcg@10")
    with pytest.raises(ValueError, match="run: empty"):
        evaluate_run({}, {"q": {"a": 1}}, "ndcg@10")
    with pytest.raises(ValueError, match="qrels: empty"):
        evaluate_run({"q": {"a": 1.0}}, {}, "ndcg@10")
    with pytest.raises(ValueError, match="document 'zz' is not in corpus_ids"):
        RelevanceTable({"q": {"zz": 1}}, ["q"], ["a", "b"])
    with pytest.raises(ValueError, match="not among query_ids"):
        RelevanceTable({"q9": {"a": 1}}, ["q"], ["a", "b"])
    with pytest.raises(ValueError, match=r"run\['q'\]\['a'\]: score is NaN"):
        evaluate_run({"q": {"a": float("nan")}}, {"q": {"a": 1}}, "ndcg@10")


def test_bad_metric_names():
    assert parse_metric("NDCG@10") == ("ndcg", 10)
    assert parse_metric("P@5") == ("precision", 5)
    with pytest.raises(ValueError, match="unknown metric 'foo'"):
        parse_metric("foo@10")
    with pytest.raises(ValueError, match="cannot parse"):
        parse_metric("ndcg10")


def test_index_path_equals_dict_path():
    rng = np.random.default_rng(0)
    n, N, K = 50, 300, 20
    corpus_ids = [f"d{j}" for j in range(N)]
    query_ids = [f"q{i}" for i in range(n)]
    qrels = {}
    for i in range(0, n, 2):  # half the queries judged
        docs = rng.choice(N, size=rng.integers(1, 6), replace=False)
        qrels[query_ids[i]] = {corpus_ids[d]: int(rng.integers(0, 3)) for d in docs}
    indices = np.array([rng.permutation(N)[:K] for _ in range(n)])
    run = {query_ids[i]: {corpus_ids[d]: float(K - r) for r, d in enumerate(indices[i])} for i in range(n)}
    metrics = ["ndcg@10", "ndcg_graded@5", "recall@20", "precision@3", "mrr@10", "map@10"]
    a = evaluate_indices(indices, RelevanceTable(qrels, query_ids, corpus_ids), metrics)
    b = evaluate_run({q: run[q] for q in qrels}, qrels, metrics)
    assert a.query_ids == b.query_ids
    for m in metrics:
        np.testing.assert_allclose(a.per_query[m], b.per_query[m], rtol=0, atol=1e-15)


def test_unknown_docs_ignore_keeps_R():
    t = RelevanceTable({"q": {"a": 1, "zz": 1}}, ["q"], ["a", "b"], unknown_docs="ignore")
    res = evaluate_indices(np.array([[0, 1]]), t, ["recall@2"])
    assert res.mean["recall@2"] == 0.5


# --------------------------------------------------------------------------- trec_eval agreement
def _random_trec_data(seed: int, n_queries: int):
    """Random runs with many score ties and graded qrels with unretrieved relevant docs."""
    rng = np.random.default_rng(seed)
    pool = [f"d{j}" for j in range(60)]  # d1 < d10 < d11 ... in string order
    run, qrels = {}, {}
    for i in range(n_queries):
        q = f"q{i}"
        n_ret = int(rng.integers(1, 25))
        docs = rng.choice(len(pool), size=n_ret, replace=False)
        scores = rng.integers(0, 5, size=n_ret).astype(float) / 2.0  # few values -> ties
        run[q] = {pool[d]: float(s) for d, s in zip(docs, scores)}
        n_judged = int(rng.integers(1, 12))
        jd = rng.choice(len(pool), size=n_judged, replace=False)
        grades = rng.integers(0, 4, size=n_judged)
        if rng.random() < 0.05:
            grades[:] = 0  # a query without relevant documents
        qrels[q] = {pool[d]: int(g) for d, g in zip(jd, grades)}
    return run, qrels


def test_agrees_with_pytrec_eval_on_10000_queries_with_ties():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run, qrels = _random_trec_data(20260809, 10_000)
    cuts = (1, 3, 5, 10, 20)
    measures = {"ndcg_cut." + ",".join(map(str, cuts)), "P." + ",".join(map(str, cuts)),
                "recall." + ",".join(map(str, cuts)), "map_cut." + ",".join(map(str, cuts)), "recip_rank"}
    ref = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    ours = evaluate_run(
        run, qrels,
        [f"{m}@{k}" for m in ("ndcg_graded", "precision", "recall", "map") for k in cuts] + ["mrr@1000"],
    )
    # queries with relevant documents only (see the documented choice)
    have_rel = [q for q in qrels if any(g >= 1 for g in qrels[q].values())]
    assert ours.query_ids == have_rel
    assert ours.n_no_relevant == len(qrels) - len(have_rel) > 100
    pos = {q: i for i, q in enumerate(ours.query_ids)}
    names = {"ndcg_graded": "ndcg_cut", "precision": "P", "recall": "recall", "map": "map_cut"}
    worst = 0.0
    for ours_name, trec_name in names.items():
        for k in cuts:
            mine = ours.per_query[f"{ours_name}@{k}"]
            theirs = np.array([ref[q][f"{trec_name}_{k}"] for q in ours.query_ids])
            worst = max(worst, float(np.abs(mine - theirs).max()))
            np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-9, err_msg=f"{ours_name}@{k}")
    rr = np.array([ref[q]["recip_rank"] for q in ours.query_ids])
    np.testing.assert_allclose(ours.per_query["mrr@1000"], rr, rtol=0, atol=1e-9)
    assert worst < 1e-9 and pos


def test_binary_ndcg_agrees_with_pytrec_on_binarised_qrels():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run, qrels = _random_trec_data(7, 10_000)
    binary = {q: {d: int(g >= 1) for d, g in docs.items()} for q, docs in qrels.items()}
    ref = pytrec_eval.RelevanceEvaluator(binary, {"ndcg_cut.5,10"}).evaluate(run)
    ours = evaluate_run(run, qrels, ["ndcg@5", "ndcg@10"])  # binary by definition
    for k in (5, 10):
        theirs = np.array([ref[q][f"ndcg_cut_{k}"] for q in ours.query_ids])
        np.testing.assert_allclose(ours.per_query[f"ndcg@{k}"], theirs, rtol=0, atol=1e-9)


# --------------------------------------------------------------------------- paired comparison
def test_paired_comparison_matches_scipy_ttest_rel():
    from scipy import stats

    rng = np.random.default_rng(1)
    a = rng.random(300)
    b = a - 0.02 + 0.1 * rng.standard_normal(300)
    res = paired_comparison(a, b, n_boot=2000, seed=3)
    ref = stats.ttest_rel(a, b)
    assert res.t_statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert res.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    assert res.mean_diff == pytest.approx(np.mean(a - b), abs=1e-15)
    assert res.ci_low < res.mean_diff < res.ci_high
    # bootstrap CI close to the normal-theory interval for the mean difference
    se = np.std(a - b, ddof=1) / np.sqrt(300)
    assert res.ci_low == pytest.approx(res.mean_diff - 1.96 * se, abs=0.3 * se)
    assert res.ci_high == pytest.approx(res.mean_diff + 1.96 * se, abs=0.3 * se)
    # deterministic given the seed
    assert paired_comparison(a, b, n_boot=2000, seed=3) == res


def test_paired_comparison_dicts_and_errors():
    res = paired_comparison({"q1": 1.0, "q2": 0.5, "q3": 0.0}, {"q3": 0.0, "q2": 0.5, "q1": 1.0}, n_boot=10)
    assert res.mean_diff == 0.0 and res.t_statistic == 0.0 and res.p_value == 1.0
    res = paired_comparison([1.0, 2.0, 3.0], [0.0, 1.0, 2.0], n_boot=10)
    assert res.t_statistic == np.inf and res.p_value == 0.0
    with pytest.raises(ValueError, match="query 'q2' is not scored in the other run"):
        paired_comparison({"q1": 1.0, "q2": 0.5}, {"q1": 1.0, "q3": 0.5})
    with pytest.raises(ValueError, match="b: 2 queries, but a has 3"):
        paired_comparison([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="NaN"):
        paired_comparison([1.0, np.nan], [1.0, 2.0])


# --------------------------------------------------------------------------- NaN, grades, ties
def test_every_grade_is_checked_not_only_the_first():
    qrels = {"q": {"a": 1, "b": float("nan")}}
    with pytest.raises(ValueError, match=r"qrels\['q'\]\['b'\]: grade must be a finite number"):
        evaluate_run({"q": {"a": 1.0}}, qrels, "ndcg@10")
    with pytest.raises(ValueError, match=r"qrels\['q'\]\['b'\]"):
        RelevanceTable(qrels, ["q"], ["a", "b"])


def test_no_evaluable_query_is_an_error_not_nan():
    qrels = {"q1": {"a": -1, "b": -2}, "q2": {"a": 0}}
    with pytest.raises(ValueError, match=r"none of the 2 judged queries has a relevant document"):
        evaluate_run({"q1": {"a": 1.0}, "q2": {"b": 1.0}}, qrels, "ndcg@10")
    table = RelevanceTable(qrels, ["q1", "q2"], ["a", "b"])
    with pytest.raises(ValueError, match="no metric can be computed"):
        evaluate_indices(np.array([[0, 1], [1, 0]]), table, "ndcg@2")


def test_order_ties_by_id_against_sorted():
    from asymgeo.retrieval.metrics import order_ties_by_id

    ids = ["d3", "d10", "d2", "x", "d1"]
    scores = np.array([[3.0, 2.0, 2.0, 2.0, 1.0]])
    idx = np.array([[4, 0, 1, 2, 3]])
    # independent: Python's sort on (score desc, id desc) of the same pairs
    pairs = sorted(zip(idx[0].tolist(), scores[0].tolist()), key=lambda t: ids[t[0]], reverse=True)
    want = [i for i, _ in sorted(pairs, key=lambda t: -t[1])]  # stable: id descending within a score
    got = order_ties_by_id(scores, idx, ids)
    assert got[0].tolist() == want == [4, 0, 2, 1, 3]  # 'd3' > 'd2' > 'd10' in strcmp order
    assert order_ties_by_id(scores, idx, ids, descending=False)[0].tolist() == [4, 1, 2, 0, 3]


@settings(max_examples=60, deadline=None)
@given(
    scores=st.lists(st.integers(0, 3), min_size=1, max_size=12),
    ids=st.lists(st.text(alphabet="ab19Z", min_size=1, max_size=3), min_size=12, max_size=12, unique=True),
)
def test_order_ties_by_id_property(scores, ids):
    """Any ranking with integer (hence often tied) scores: equals the trec_eval two-pass sort."""
    from asymgeo.retrieval.metrics import order_ties_by_id

    n = len(scores)
    S = np.sort(np.asarray(scores, dtype=np.float32))[::-1][None, :]
    idx = np.arange(n)[None, :]  # lower-row order within ties, as exact_search returns it
    by_id = sorted(range(n), key=lambda j: ids[j], reverse=True)
    want = sorted(by_id, key=lambda j: -S[0, j])  # stable: id descending within a score
    assert order_ties_by_id(S, idx, ids[:n])[0].tolist() == want


def _trec_reference(S, qids, cids, qrels, depth):
    """pytrec_eval on a run of every document scoring at least the depth-th score (ties kept whole)."""
    import pytrec_eval

    run = {}
    for i, q in enumerate(qids):
        row = S[i]
        thr = np.partition(row, -depth)[-depth]
        keep = np.flatnonzero(row >= thr)
        run[q] = {cids[j]: float(row[j]) for j in keep}
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"})
    res = ev.evaluate(run)
    return float(np.mean([res[q]["ndcg_cut_10"] for q in qrels]))


@pytest.mark.slow
def test_nfcorpus_tied_documents_reproduce_pytrec_eval(shared_dir):
    """NFCorpus has documents with identical embeddings: trec_eval order by default."""
    from asymgeo.data import evaluate_frozen, load_beir, load_embeddings

    ds = load_beir(shared_dir / "data" / "nfcorpus")
    emb = load_embeddings(ds, "all-MiniLM-L6-v2", cache_dir=shared_dir / "embeddings")
    qrels = ds.qrels("test")
    qids = list(qrels)
    Q = np.asarray(emb.queries[emb.query_rows(qids)], dtype=np.float32)
    C = np.asarray(emb.corpus, dtype=np.float32)
    S = Q @ C.T  # float32 scores, the same numbers trec_eval is given
    # the data really has exact ties inside the top 10 (else this test could not fail)
    top = -np.sort(-S, axis=1)[:, :11]
    assert (top[:, :-1] == top[:, 1:]).any()
    graded_ref = _trec_reference(S, qids, emb.corpus_ids, qrels, 100)
    binary = {q: {d: int(g >= 1) for d, g in docs.items()} for q, docs in qrels.items()}
    binary_ref = _trec_reference(S, qids, emb.corpus_ids, binary, 100)
    assert round(graded_ref, 4) == 0.3159 and round(binary_ref, 4) == 0.3177  # the published MTEB figure

    res = evaluate_frozen(ds, "all-MiniLM-L6-v2", cache_dir=shared_dir / "embeddings",
                          metrics=["ndcg@10", "ndcg_graded@10"])
    assert res.extra["ties"] == "trec_eval"
    assert res.mean["ndcg_graded@10"] == pytest.approx(graded_ref, abs=1e-9)
    assert res.mean["ndcg@10"] == pytest.approx(binary_ref, abs=1e-9)
    lower = evaluate_frozen(ds, "all-MiniLM-L6-v2", cache_dir=shared_dir / "embeddings",
                            metrics=["ndcg@10", "ndcg_graded@10"], ties="index")
    assert lower.mean["ndcg_graded@10"] != pytest.approx(graded_ref, abs=1e-5)  # the other order differs here
    # the row order, recomputed here: a stable argsort of the same float32 scores and NDCG@10
    # with trec_eval's linear gains (independent of asymgeo's search and metrics)
    def ndcg_row_order(judged):
        out = []
        for i, q in enumerate(qids):
            top = np.argsort(-S[i], kind="stable")[:10]
            gains = np.array([judged[q].get(emb.corpus_ids[j], 0) for j in top], dtype=float)
            gains = np.maximum(gains, 0)
            ideal = np.sort(np.maximum(np.array(list(judged[q].values()), float), 0))[::-1][:10]
            disc = 1 / np.log2(np.arange(2, 12))
            out.append((gains * disc[: gains.size]).sum() / (ideal * disc[: ideal.size]).sum())
        return float(np.mean(out))

    assert lower.mean["ndcg_graded@10"] == pytest.approx(ndcg_row_order(qrels), abs=1e-9)
    assert lower.mean["ndcg@10"] == pytest.approx(ndcg_row_order(binary), abs=1e-9)


# --------------------------------------------------------------------------- SciFact
def test_scifact_minilm_ndcg_matches_published_check(shared_dir):
    import csv

    from asymgeo.retrieval.search import exact_search

    emb = shared_dir / "embeddings" / "scifact" / "all-MiniLM-L6-v2"
    C = np.load(emb / "corpus.npy", mmap_mode="r")
    Q = np.load(emb / "queries.npy")
    cids = (emb / "corpus_ids.txt").read_text().split()
    qids = (emb / "query_ids.txt").read_text().split()
    qrels: dict[str, dict[str, int]] = {}
    with open(shared_dir / "data" / "scifact" / "qrels" / "test.tsv") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    _, idx = exact_search(Q, C, 100)
    res = evaluate_indices(idx, RelevanceTable(qrels, qids, cids), ["ndcg@10", "recall@100"])
    # figures from shared/embeddings/.../meta.json (computed independently with pytrec_eval)
    assert len(res.query_ids) == 300
    assert res.mean["ndcg@10"] == pytest.approx(0.6451, abs=5e-5)
    assert res.mean["recall@100"] == pytest.approx(0.925, abs=1e-9)


def test_cli_evaluate_scifact(capsys, shared_dir):
    import json

    from asymgeo.cli import main

    args = ["evaluate", "scifact", "--encoder", "all-MiniLM-L6-v2", "--data-dir", str(shared_dir / "data"),
            "--cache-dir", str(shared_dir / "embeddings")]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_queries"] == 300 and out["n_docs"] == 5183
    assert out["mean"]["ndcg@10"] == pytest.approx(0.6451, abs=5e-5)
    assert main(args) == 0
    assert "ndcg@10         0.6451" in capsys.readouterr().out
    assert main(args + ["--split", "nosuch"]) == 2
    assert "nosuch" in capsys.readouterr().err


def test_eval_result_repr_shows_means_not_arrays():
    from asymgeo.retrieval.metrics import EvalResult

    res = EvalResult(["q1", "q2"], {"ndcg@10": np.array([0.5, 1.0])}, {"ndcg@10": 0.75})
    assert repr(res) == "EvalResult(2 queries: ndcg@10=0.7500)"


def test_index_rankings_shorter_than_the_cut_off_match_pytrec_eval():
    """A ranking of K = 3 documents scored at @10 (the padding branch of the index path), every
    metric against pytrec_eval on the same run (mutation survivors of tools/mutation.py metrics)."""
    import pytrec_eval

    from asymgeo.retrieval.metrics import RelevanceTable, evaluate_indices

    corpus = [f"d{i}" for i in range(12)]
    qrels = {"q0": {"d1": 1, "d5": 2, "d7": 1}, "q1": {"d0": 1}, "q2": {"d3": 2, "d4": 1, "d8": 1, "d9": 1}}
    idx = np.array([[5, 2, 1], [3, 0, 11], [9, 3, 6]])
    table = RelevanceTable(qrels, ["q0", "q1", "q2"], corpus)
    metrics = ["ndcg@10", "ndcg_graded@10", "recall@10", "precision@10", "map@10", "mrr@10"]
    res = evaluate_indices(idx, table, metrics)
    run = {q: {corpus[j]: float(10 - r) for r, j in enumerate(row)} for q, row in zip(["q0", "q1", "q2"], idx)}
    binary = {q: {d: int(g >= 1) for d, g in v.items()} for q, v in qrels.items()}
    ev_b = pytrec_eval.RelevanceEvaluator(binary, {"ndcg_cut.10", "recall.10", "P.10", "map_cut.10",
                                                   "recip_rank"}).evaluate(run)
    ev_g = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    for i, q in enumerate(["q0", "q1", "q2"]):
        assert res.per_query["ndcg@10"][i] == pytest.approx(ev_b[q]["ndcg_cut_10"], abs=1e-12)
        assert res.per_query["ndcg_graded@10"][i] == pytest.approx(ev_g[q]["ndcg_cut_10"], abs=1e-12)
        assert res.per_query["recall@10"][i] == pytest.approx(ev_b[q]["recall_10"], abs=1e-12)
        assert res.per_query["precision@10"][i] == pytest.approx(ev_b[q]["P_10"], abs=1e-12)
        assert res.per_query["map@10"][i] == pytest.approx(ev_b[q]["map_cut_10"], abs=1e-12)
        assert res.per_query["mrr@10"][i] == pytest.approx(ev_b[q]["recip_rank"], abs=1e-12)


# --------------------------------------------------------------------------- every refusal names its argument (issue #19)
def _table():
    return RelevanceTable({"q0": {"a": 1}, "q1": {"b": 2}}, ["q0", "q1"], ["a", "b", "c"])


@pytest.mark.parametrize("call, exc, message", [
    (lambda: parse_metric(10), TypeError, "metrics: expected strings like 'ndcg@10', got 10"),
    (lambda: parse_metric("ndcg@0"), ValueError, r"metrics: cut-off must be >= 1 in 'ndcg@0'"),
    (lambda: evaluate_run({"q": {"a": 1}}, {"q": {"a": 1.0}}, []), ValueError,
     "metrics: expected at least one metric"),
    (lambda: evaluate_run({"q": {"a": 1.0}}, [("q", "a", 1)], ["ndcg@10"]), TypeError,
     r"qrels: expected a dict \{qid: \{docid: grade\}\}, got list"),
    (lambda: evaluate_run({"q": {"a": 1.0}}, {"q": ["a"]}, ["ndcg@10"]), TypeError,
     r"qrels\['q'\]: expected a dict \{docid: grade\}, got list"),
    (lambda: evaluate_run({"q": ["a"]}, {"q": {"a": 1}}, ["ndcg@10"]), TypeError,
     r"run\['q'\]: expected a dict \{docid: score\}, got list"),
    (lambda: evaluate_run({"q": {"a": 1}}, {"q": {"a": 1.0}}, ["ndcg@10"], missing="skip"), ValueError,
     "missing: expected 'error' or 'zero', got 'skip'"),
    (lambda: evaluate_run([("q", "a", 1.0)], {"q": {"a": 1}}, ["ndcg@10"]), TypeError,
     r"run: expected a dict \{qid: \{docid: score\}\}, got list"),
    (lambda: RelevanceTable({"q0": {"a": 1}}, ["q0"], ["a"], unknown_docs="drop"), ValueError,
     "unknown_docs: expected 'error' or 'ignore', got 'drop'"),
    (lambda: RelevanceTable({"q0": {"a": 1}}, ["q0", "q0"], ["a"]), ValueError, "query_ids: contains duplicate ids"),
    (lambda: RelevanceTable({"q0": {"a": 1}}, ["q0"], ["a", "a"]), ValueError, "corpus_ids: contains duplicate ids"),
    (lambda: _table().grades(np.zeros((3, 2), int)), ValueError, r"indices: expected shape \(2, K\), got \(3, 2\)"),
    (lambda: _table().grades(np.full((2, 2), 3)), ValueError, r"indices: values must lie in \[0, 3\), got \[3, 3\]"),
    (lambda: evaluate_indices(np.zeros(2, int), _table(), ["ndcg@10"]), ValueError,
     r"indices: expected a 2-d \(n_queries, K\) array, got shape \(2,\)"),
    (lambda: evaluate_indices(np.zeros((1, 2), int), _table(), ["ndcg@10"]), ValueError,
     "indices: 1 rows, but the relevance table refers to query row 1"),
])
def test_every_refusal_names_the_argument(call, exc, message):
    with pytest.raises(exc, match=message):
        call()


def test_order_ties_by_id_refusals_and_the_empty_ranking():
    from asymgeo.retrieval.metrics import order_ties_by_id

    with pytest.raises(ValueError, match=r"scores, indices: expected equal 2-d shapes, got \(1, 2\) and \(1, 3\)"):
        order_ties_by_id(np.zeros((1, 2)), np.zeros((1, 3), int), ["a", "b", "c"])
    with pytest.raises(ValueError, match=r"indices: values must lie in \[0, 3\), got \[0, 5\]"):
        order_ties_by_id(np.zeros((1, 2)), np.array([[0, 5]]), ["a", "b", "c"])
    out = order_ties_by_id(np.zeros((2, 0)), np.zeros((2, 0), int), ["a"])
    assert out.shape == (2, 0) and out.dtype == np.int64


def test_eval_result_query_returns_that_querys_values():
    # hand calculation: q0 ranks its relevant a first (NDCG 1), q1 ranks b second (1 / log2 3)
    res = evaluate_indices(np.array([[0, 1], [0, 1]]), _table(), ["ndcg@10", "recall@1"])
    assert res.query("q0") == {"ndcg@10": 1.0, "recall@1": 1.0}
    assert res.query("q1") == pytest.approx({"ndcg@10": 1 / math.log2(3), "recall@1": 0.0})
    with pytest.raises(ValueError):
        res.query("zz")


# --------------------------------------------------------------------------- survivors of mutation testing (issue #19)
def test_result_repr_dict_and_table_in_full():
    res = evaluate_run({"q1": {"a": 2.0, "b": 1.0}, "q2": {"b": 1.0}, "q3": {"c": 1.0}, "zz": {"a": 1.0}},
                       {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 0}}, ["ndcg@10", "recall@1"])
    assert repr(res) == "EvalResult(2 queries: ndcg@10=1.0000, recall@1=1.0000)"
    d = res.as_dict()
    assert (d["n_no_relevant"], d["n_unjudged"], d["n_missing"]) == (1, 1, 0)
    assert format_metrics(res) == ("ndcg@10   1.0000\nrecall@1  1.0000\n"
                                   "queries   2  (1 without relevant documents excluded)")
    assert format_metrics(res, title="T").splitlines()[0] == "T"
    idx = evaluate_indices(np.array([[0], [1]]), _table(), ["ndcg@10"])
    assert (idx.n_unjudged, idx.n_missing, idx.n_no_relevant) == (0, 0, 0)
    assert format_metrics(idx).splitlines()[-1] == "queries  2"


def test_messages_in_full():
    with pytest.raises(ValueError) as e:
        evaluate_run({}, {"q": {"a": 1}})
    assert str(e.value) == "run: empty; no query was retrieved"
    for absent, word in ((["q2"], "query"), (["q2", "q3"], "queries")):
        qrels = {"q1": {"a": 1}, **{q: {"a": 1} for q in absent}}
        with pytest.raises(ValueError) as e:
            evaluate_run({"q1": {"a": 1.0}}, qrels)
        assert str(e.value).startswith(f"run: {len(absent)} qrels {word} with relevant documents missing from the run")
        with pytest.raises(ValueError) as e:
            RelevanceTable(qrels, ["q1"], ["a"])
        assert str(e.value).startswith(f"qrels: {len(absent)} {word} not among query_ids (first: 'q2')")
    with pytest.raises(ValueError) as e:
        RelevanceTable({"q": {"zz": 1}}, ["q"], ["a"])
    assert str(e.value) == "qrels['q']: document 'zz' is not in corpus_ids; pass unknown_docs='ignore' to skip such judgements"
    for qids, cids, what in ((["q", "q"], ["a"], "query_ids"), (["q"], ["a", "a"], "corpus_ids")):
        with pytest.raises(ValueError) as e:
            RelevanceTable({"q": {"a": 1}}, qids, cids)
        assert str(e.value) == f"{what}: contains duplicate ids"


def test_an_empty_ranking_does_not_stop_the_queries_after_it():
    # hand calculation: q1 retrieved nothing (0), q2 ranks its relevant b first (1)
    res = evaluate_run({"q1": {}, "q2": {"b": 1.0}}, {"q1": {"a": 1}, "q2": {"b": 1}}, ["ndcg@10"])
    assert res.by_query("ndcg@10") == {"q1": 0.0, "q2": 1.0}


def test_an_unknown_document_does_not_hide_the_judgements_after_it():
    t = RelevanceTable({"q": {"zz": 1, "a": 2, "b": 1}}, ["q"], ["a", "b"], unknown_docs="ignore")
    np.testing.assert_array_equal(t.grades(np.array([[1, 0]])), [[1.0, 2.0]])
    assert t.n_rel.tolist() == [3]  # zz still counts toward the ideal ranking, as in trec_eval


def test_a_table_whose_judgements_are_all_outside_the_corpus_grades_zero():
    t = RelevanceTable({"q": {"zz": 1}, "r": {"yy": 2}}, ["q", "r"], ["a", "b"], unknown_docs="ignore")
    out = t.grades(np.array([[0, 1], [1, 0]]))
    assert out.tolist() == [[0.0, 0.0], [0.0, 0.0]] and out.dtype == np.float64


def test_order_ties_by_id_by_hand_over_several_rows():
    from asymgeo.retrieval.metrics import order_ties_by_id

    ids = ["b", "a", "d", "c"]
    S = np.array([[3.0, 2.0, 2.0, 2.0], [1.0, 1.0, 0.0, 0.0]])
    idx = np.array([[2, 0, 1, 3], [1, 0, 3, 2]])
    # trec_eval: score descending, then id descending: row 0 -> d | c, b, a; row 1 -> b, a | d, c
    assert order_ties_by_id(S, idx, ids).tolist() == [[2, 3, 0, 1], [0, 1, 2, 3]]
    assert order_ties_by_id(S, idx, ids, descending=False).tolist() == [[2, 1, 0, 3], [1, 0, 3, 2]]
    with pytest.raises(ValueError, match=r"indices: values must lie in \[0, 4\), got \[0, 4\]"):
        order_ties_by_id(S, np.array([[0, 1, 2, 4], [0, 1, 2, 3]]), ids)


def test_more_messages_in_full_and_grades_that_are_not_numbers():
    from asymgeo.retrieval.metrics import METRICS

    with pytest.raises(ValueError) as e:
        parse_metric("bleu@10")
    assert str(e.value) == f"metrics: unknown metric 'bleu' in 'bleu@10'; known: {', '.join(METRICS)}"
    with pytest.raises(ValueError) as e:
        evaluate_run({"q": {"a": 1.0}}, {}, ["ndcg@10"])
    assert str(e.value) == "qrels: empty; no query has relevance judgements"
    with pytest.raises(ValueError) as e:
        evaluate_indices(np.zeros((1, 1), int), RelevanceTable({"q": {"a": 1}}, ["q"], ["a"]), [])
    assert str(e.value) == "metrics: expected at least one metric, e.g. 'ndcg@10'"
    for qrels, word in (({"q": {"a": 0}}, "query"), ({"q": {"a": 0}, "r": {"a": 0}}, "queries")):
        with pytest.raises(ValueError) as e:
            evaluate_run({"q": {"a": 1.0}, "r": {"a": 1.0}}, qrels, ["ndcg@10"])
        assert str(e.value).startswith(f"qrels: none of the {len(qrels)} judged {word} has a relevant")
    for grade in ("1", True, float("inf")):
        with pytest.raises(ValueError, match=r"qrels\['q'\]\['a'\]: grade must be a finite number, got"):
            evaluate_run({"q": {"a": 1.0}}, {"q": {"a": grade}}, ["ndcg@10"])
