"""Pooled validation (issue #40): selection on a pool of frozen candidates, checked against brute force
over the whole corpus; training unchanged row for row; the approximation reported."""

from __future__ import annotations

import numpy as np
import pytest

from asymgeo.adapters.pooled_validation import (
    POOL_AUTO_MIN_DOCS,
    POOL_DEFAULT_K,
    candidate_pool,
    pool_coverage,
    pooled_adaptation_data,
    pooled_memory_to_corpus,
    resolve_pool_k,
)

ENC = "all-MiniLM-L6-v2"


def _hand_ndcg(ranked_docs: list[str], qrel: dict[str, int]) -> float:
    rel = {d: g for d, g in qrel.items() if g > 0}
    dcg = sum(1.0 / np.log2(i + 2) for i, d in enumerate(ranked_docs[:10]) if d in rel)  # binary (Appendix F)
    ideal = sum(1.0 / np.log2(i + 2) for i in range(min(10, len(rel))))
    return dcg / ideal


def _brute_top10(V: np.ndarray, C: np.ndarray, M: np.ndarray | None = None) -> np.ndarray:
    S = (V if M is None else V @ M) @ C.T
    return np.argsort(-S, axis=1, kind="stable")[:, :10]


def test_candidate_pool_by_hand():
    top = np.array([[7, 3], [3, -1]])
    got = candidate_pool(top, np.array([5, 3]), [{9, 0}, set()], np.array([[2, 7]]))
    np.testing.assert_array_equal(got, [0, 2, 3, 5, 7, 9])


def test_resolve_pool_k():
    assert resolve_pool_k("auto", POOL_AUTO_MIN_DOCS - 1) is None
    assert resolve_pool_k("auto", POOL_AUTO_MIN_DOCS) == POOL_DEFAULT_K
    assert resolve_pool_k(None, 10**9) is None and resolve_pool_k("none", 10**9) is None
    assert resolve_pool_k(10, 5) == 10 and resolve_pool_k(np.int64(250), 5) == 250
    for bad in (9, 0, True, 2.5, "many"):
        with pytest.raises(ValueError, match="validation_pool: expected 'auto', 'none' or an integer >= 10"):
            resolve_pool_k(bad, 10**6)


@pytest.fixture(scope="module")
def scifact_pooled(shared_dir):
    from asymgeo.adapters.workflow import load_adaptation_data, training_pool
    from asymgeo.data import load_beir

    kw = {"data_dir": shared_dir / "data", "cache_dir": shared_dir / "embeddings"}
    ids = training_pool(load_beir("scifact", data_dir=kw["data_dir"]))[:60]
    d = load_adaptation_data("scifact", ENC, train_ids=ids, **kw)
    dv, pool, record = pooled_adaptation_data(d, 20, _judged(d), max_share=1.0)
    return d, dv, pool, record


def _judged(d) -> list[set[int]]:
    """Corpus rows judged relevant (grade > 0) to each validation query, from the qrels by hand."""
    row = {c: i for i, c in enumerate(d.corpus_ids)}
    return [{row[x] for x, g in d.qrels[q].items() if g > 0 and x in row} for q in d.validation.query_ids]


def test_the_pool_is_the_union_of_frozen_candidates_judged_and_training_rows(scifact_pooled):
    d, dv, pool, record = scifact_pooled
    C = np.asarray(d.corpus, dtype=np.float32)
    S = d.V @ C.T
    want: set[int] = set()
    for row in S:  # each validation query's 20 best documents (no ties at the 20th in these data)
        want |= set(np.argsort(-row, kind="stable")[:20].tolist())
    cid_row = {c: i for i, c in enumerate(d.corpus_ids)}
    for q in d.validation.query_ids:
        want |= {cid_row[x] for x, g in d.qrels[q].items() if g > 0 and x in cid_row}
    tr = d.triples
    want |= set(tr.pos_rows.tolist()) | set(tr.neg_rows.tolist()) | set(tr.hard_negative_rows.ravel().tolist())
    for r in d.relevant:
        want |= r
    np.testing.assert_array_equal(pool, sorted(want))
    assert record == {"k": 20, "documents": len(want), "of": C.shape[0], "validation_queries": d.V.shape[0],
                      "pooled": True}


def test_pooled_data_is_the_corpus_restricted_row_for_row(scifact_pooled):
    d, dv, pool, _ = scifact_pooled
    np.testing.assert_array_equal(dv.corpus, np.asarray(d.corpus)[pool])
    assert [dv.corpus_ids[i] for i in range(len(pool))] == [d.corpus_ids[int(r)] for r in pool]
    tr, tv = d.triples, dv.triples
    for a, b in ((tr.pos_rows, tv.pos_rows), (tr.neg_rows, tv.neg_rows), (tr.hard_negative_rows, tv.hard_negative_rows)):
        np.testing.assert_array_equal(pool[b], a)
    assert [{int(pool[i]) for i in r} for r in dv.relevant] == d.relevant
    np.testing.assert_array_equal(tv.hard_negatives(), tr.hard_negatives())  # the same training rows are read
    assert dv.T.shape[0] == 0 and dv.test is None  # no test figure can come from the pool


def test_pooled_ndcg_equals_the_whole_corpus_wherever_the_top_10_lies_in_the_pool(scifact_pooled):
    from asymgeo.adapters.workflow import _per_query_ndcg

    d, dv, pool, _ = scifact_pooled
    C = np.asarray(d.corpus, dtype=np.float32)
    ids = list(d.validation.query_ids)
    rng = np.random.default_rng(3)
    G = rng.standard_normal((C.shape[1], C.shape[1])).astype(np.float32) * 0.05
    for M in (None, np.eye(C.shape[1], dtype=np.float32) + G):
        top = _brute_top10(d.V, C, M)
        hand = np.array([_hand_ndcg([d.corpus_ids[int(j)] for j in r], d.qrels[q]) for q, r in zip(ids, top,
                                                                                                   strict=True)])
        inside = np.isin(top, pool).all(axis=1)
        pooled = _per_query_ndcg(dv.V, dv.validation, dv.corpus, M, dv.corpus_ids)
        np.testing.assert_allclose(pooled[inside], hand[inside], atol=1e-6)
        if M is None:
            assert inside.all()  # frozen's top 10 is in its own top 20
        else:
            assert 0 < inside.sum() < inside.size  # the random map leaves the pool for some queries
            assert np.any(np.abs(pooled[~inside] - hand[~inside]) > 1e-6)
            cov = pool_coverage(d, M, pool)
            assert cov["coverage@10"] == pytest.approx(np.isin(top, pool).mean())
            assert cov["validation_ndcg@10_exact"] == pytest.approx(hand.mean(), abs=1e-6)


def test_a_pool_too_large_selects_on_the_whole_corpus(scifact_pooled):
    d = scifact_pooled[0]
    same, pool, record = pooled_adaptation_data(d, 20, _judged(d), max_share=0.01)
    assert same is d and pool is None and record["pooled"] is False and record["documents"] > 0.01 * record["of"]


def test_a_pooled_memory_remembers_corpus_rows(scifact_pooled):
    from asymgeo.adapters.memory import DocumentMemory
    from asymgeo.retrieval.memory import memory_table

    d, dv, pool, _ = scifact_pooled
    tr = dv.triples
    mem = DocumentMemory().fit(tr.X, dv.relevant, dv.corpus, validation_queries=dv.V,
                               validation_relevance=dv.validation)
    pooled_memory_to_corpus(mem, pool)
    want = memory_table(tr.X, d.relevant, n_docs=d.corpus.shape[0])  # the same keys, corpus rows
    np.testing.assert_array_equal(mem.table_.pair_key, want.pair_key)
    np.testing.assert_array_equal(mem.table_.pair_document, want.pair_document)
    np.testing.assert_array_equal(mem.table_.documents, want.documents)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    from asymgeo.data import encode_dataset
    from asymgeo.data.synthetic import make_synthetic_beir

    root = tmp_path_factory.mktemp("pooled")
    make_synthetic_beir(root / "data" / "syn", 4000, n_train=150, n_dev=40, n_test=40, seed=1)
    dirs = {"data_dir": root / "data", "cache_dir": root / "emb"}
    encode_dataset("syn", "synthetic-hash-768", progress=False, **dirs)
    return dirs


def test_a_pooled_fit_trains_the_same_adapter_and_tests_on_the_whole_corpus(synthetic, monkeypatch):
    import asymgeo.adapters.adapter as adapter_mod
    from asymgeo.adapters.workflow import fit_adapter

    corpora: list[int] = []
    real_fit = adapter_mod.Adapter.fit

    def spying_fit(self, X, positive_rows, corpus, **k):
        corpora.append(int(np.asarray(corpus).shape[0]))
        return real_fit(self, X, positive_rows, corpus, **k)

    monkeypatch.setattr(adapter_mod.Adapter, "fit", spying_fit)
    kw = {"geometry": "shared", "rank": 8, "epochs": 2, "learning_rates": (1e-3, 3e-3), "seed": 0, **synthetic}
    exact = fit_adapter("syn", "synthetic-hash-768", validation_pool="none", **kw)
    pooled = fit_adapter("syn", "synthetic-hash-768", validation_pool=20, **kw)
    vp = pooled.metrics["validation_pool"]
    assert corpora[0] == 4000 and corpora[-1] == vp["documents"] < 4000  # the pooled fit trained on the pool
    assert "validation_pool" not in exact.metrics
    assert vp["pooled"] and vp["k"] == 20 and vp["of"] == 4000 and vp["validation_queries"] == 40
    assert vp["coverage@10"] == 1.0  # in these data: so every selection figure was exact, and
    np.testing.assert_array_equal(pooled.adapter.operator_, exact.adapter.operator_)  # the same choices and adapter
    assert vp["validation_ndcg@10_pooled"] == pytest.approx(vp["validation_ndcg@10_exact"], abs=1e-9)
    assert pooled.metrics["trained"]["validation_ndcg@10"] == exact.metrics["trained"]["validation_ndcg@10"]
    assert pooled.metrics["trained"]["learning_rate"] == exact.metrics["trained"]["learning_rate"]
    # test figures come from the whole corpus: brute force over all 4,000 documents
    from asymgeo.data import load_beir, load_embeddings

    ds = load_beir("syn", data_dir=synthetic["data_dir"])
    emb = load_embeddings(ds, "synthetic-hash-768", cache_dir=synthetic["cache_dir"])
    qrels = ds.all_qrels()
    test_ids = [q for q in ds.labelled_query_ids("test") if q in qrels]
    T = np.asarray(emb.queries[emb.query_rows(test_ids)], dtype=np.float32)
    C = np.asarray(emb.corpus, dtype=np.float32)
    for rep in (exact, pooled):
        top = _brute_top10(T, C, rep.adapter.operator_)
        hand = np.mean([_hand_ndcg([emb.corpus_ids[int(j)] for j in r], qrels[q]) for q, r in zip(test_ids, top,
                                                                                                strict=True)])
        assert rep.metrics["trained"]["test_ndcg@10"] == pytest.approx(hand, abs=1e-6)


def test_fit_reports_the_pool(synthetic, tmp_path, capsys):
    from asymgeo.cli import main

    args = ["fit", "syn", "--encoder", "synthetic-hash-768", "--data-dir", str(synthetic["data_dir"]), "--cache-dir",
            str(synthetic["cache_dir"]), "--geometry", "shared", "--rank", "4", "--epochs", "1",
            "--learning-rates", "1e-3", "--memory", "none", "--no-progress"]
    assert main([*args, "--validation-pool", "20", "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "validation: selected on a pool of " in out
    assert "of the 4,000 documents (each validation query's frozen top 20" in out
    assert main([*args, "--validation-pool", "1000", "--out", str(tmp_path / "b")]) == 0
    assert "too many to save time: selected on the whole corpus" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*args, "--validation-pool", "5", "--out", str(tmp_path / "c")])
    assert "expected at least 10 candidates per query" in capsys.readouterr().err


def test_a_pooled_fit_remembers_the_corpus_documents_of_the_labelled_queries(shared_dir, monkeypatch):
    """SciFact, where the memory is kept: the deployed memory names, as corpus rows, exactly the
    relevant documents of the training and validation queries (read from the qrels files)."""
    import asymgeo.adapters.pooled_validation as pv
    from asymgeo.adapters.workflow import fit_adapter
    from asymgeo.data import load_beir

    monkeypatch.setattr(pv, "POOL_MAX_SHARE", 1.0)  # SciFact is small: pool it anyway
    kw = {"data_dir": shared_dir / "data", "cache_dir": shared_dir / "embeddings"}
    rep = fit_adapter("scifact", ENC, geometry="shared", rank=4, n_train=120, epochs=1, learning_rates=(1e-3,),
                      validation_pool=30, report=False, **kw)
    vp = rep.metrics["validation_pool"]
    assert vp["pooled"] and vp["documents"] < vp["of"] == 5183
    mem = rep.adapter.memory_
    assert mem is not None  # kept on these data: the branch under test runs
    ds = load_beir("scifact", data_dir=kw["data_dir"])
    qrels = ds.all_qrels()
    import json

    corpus_ids = [json.loads(line)["_id"] for line in
                  (kw["data_dir"] / "scifact" / "corpus.jsonl").read_text().splitlines() if line.strip()]
    in_corpus = set(corpus_ids)
    from asymgeo.data import adaptation_split

    labelled = list(rep.adapter_train_ids) + [q for q in adaptation_split(ds)["validation"] if q in qrels]
    want = {x for q in labelled for x, g in qrels[q].items() if g > 0 and x in in_corpus}
    assert {corpus_ids[int(r)] for r in mem.table_.documents} == want


def test_the_adaptation_data_keep_only_the_queries_they_use(shared_dir):
    """Texts and labels of training queries outside the subset are dropped at load (at MS MARCO's
    503k training queries they would be memory that grows with queries never trained on)."""
    import csv

    from asymgeo.adapters.workflow import load_adaptation_data, training_pool
    from asymgeo.data import adaptation_split, load_beir

    kw = {"data_dir": shared_dir / "data", "cache_dir": shared_dir / "embeddings"}
    ds = load_beir("scifact", data_dir=kw["data_dir"])
    ids = training_pool(ds)[:40]
    d = load_adaptation_data("scifact", ENC, train_ids=ids, **kw)
    split = adaptation_split(ds)
    judged: set[str] = set()
    for name in ("train", "test"):  # the qrels files read directly
        with open(kw["data_dir"] / "scifact" / "qrels" / f"{name}.tsv") as fh:
            judged |= {row[0] for row in csv.reader(fh, delimiter="\t")} - {"query-id"}
    want = (set(ids) | set(split["validation"]) | set(split["test"])) & judged
    assert set(d.qrels) == want and len(want) == 40 + 162 + 300
    assert set(d.queries) == set(ids) | set(split["validation"]) | set(split["test"])
    assert len(ds.queries) > len(d.queries)  # the dataset has more: they were not kept
