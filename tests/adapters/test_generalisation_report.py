"""The generalisation report on SciFact MiniLM, against brute force from the BEIR files and pytrec_eval."""

from __future__ import annotations

import numpy as np
import pytest
import pytrec_eval

from asymgeo.adapters.generalisation import generalisation_report
from asymgeo.adapters.workflow import load_adaptation_data
from asymgeo.retrieval.generalisation import PRIOR_WEIGHTS


@pytest.fixture(scope="module")
def scifact(shared_dir):
    return load_adaptation_data("scifact", "all-MiniLM-L6-v2", data_dir=shared_dir / "data",
                                cache_dir=shared_dir / "embeddings")


def _tsv(path):
    out: dict[str, dict[str, int]] = {}
    for line in path.read_text().splitlines()[1:]:
        q, d, g = line.split("\t")
        out.setdefault(q, {})[d] = int(g)
    return out


def _brute_ndcg(Q, corpus, qrels, qids, corpus_ids, boost):
    S = Q.astype(np.float64) @ corpus.astype(np.float64).T + boost[None, :]
    run = {}
    for i, q in enumerate(qids):
        top = np.argsort(-S[i])[:100]
        run[q] = {corpus_ids[j]: float(S[i, j]) for j in top}
    ev = pytrec_eval.RelevanceEvaluator({q: qrels[q] for q in qids}, {"ndcg_cut.10"}).evaluate(run)
    return float(np.mean([ev[q]["ndcg_cut_10"] for q in qids]))


def _positive_at_row_zero(d, train_ids, ids_as):
    """``d`` with its corpus rows 0 and r swapped, r the first training positive: in the cached
    order row 0 is never a training positive, so a seen-row lookup that drops row 0 (``found > 0``)
    would change nothing there.  ``ids_as``: the corpus ids as an IdIndex or as a plain list (the
    report's two lookup paths)."""
    import dataclasses

    from asymgeo._ids import IdIndex

    seen = {doc for q in train_ids for doc, g in d.qrels[q].items() if g > 0}
    ids = list(d.corpus_ids)
    r = next(i for i, doc in enumerate(ids) if doc in seen)
    assert r > 0 and ids[0] not in seen  # the cached order: the branch the swap makes reachable
    order = np.arange(len(ids))
    order[[0, r]] = order[[r, 0]]
    ids = [ids[i] for i in order]
    return dataclasses.replace(d, corpus=np.asarray(d.corpus)[order],
                               corpus_ids=IdIndex(ids, what="corpus") if ids_as == "IdIndex" else ids)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["cached", "positive at row 0, IdIndex", "positive at row 0, list"])
def test_report_split_prior_and_identity_against_brute_force(scifact, shared_dir, layout):
    d = scifact
    train_ids = list(d.triples.query_ids)
    if layout != "cached":
        d = _positive_at_row_zero(d, train_ids, layout.rsplit(", ", 1)[1])
        assert d.corpus_ids[0] in {doc for q in train_ids for doc, g in d.qrels[q].items() if g > 0}
    rep = generalisation_report(d, train_ids, {"identity": np.eye(d.corpus.shape[1])}, n_boot=200)
    files = shared_dir / "data" / "scifact" / "qrels"
    train, test = _tsv(files / "train.tsv"), _tsv(files / "test.tsv")
    seen = {doc for q in train_ids for doc, g in train[q].items() if g > 0}
    test_ids = list(d.test.query_ids)
    n_seen = sum(any(g > 0 and doc in seen for doc, g in test[q].items()) for q in test_ids)
    assert (rep.rows["frozen"]["seen"]["n"], rep.rows["frozen"]["unseen"]["n"]) == (n_seen, 300 - n_seen)
    assert n_seen == 164  # the count, from the files
    assert rep.seen["n_seen_documents"] == len(seen & set(d.corpus_ids))
    # the identity operator is the frozen model: zero difference in every subset
    for s, c in rep.rows["identity"].items():
        if c["n"]:
            assert c["diff"] == pytest.approx(0.0, abs=1e-12) and c["ndcg"] == pytest.approx(
                rep.rows["frozen"][s]["ndcg"], abs=1e-12), s
    # the document prior: beta chosen on validation by brute force, and its test NDCG@10
    boost_of = {b: b * np.array([c in seen for c in d.corpus_ids], dtype=np.float64) for b in PRIOR_WEIGHTS}
    val_ids = list(d.validation.query_ids)
    val = {b: _brute_ndcg(d.V, d.corpus, d.qrels, val_ids, d.corpus_ids, boost_of[b]) for b in PRIOR_WEIGHTS}
    best = max(val.values())
    beta = min(b for b, v in val.items() if v >= best - 1e-9)
    assert rep.prior_weight == beta
    prior_row = next(v for k, v in rep.rows.items() if k.startswith("doc prior"))
    want = _brute_ndcg(d.T, d.corpus, d.qrels, test_ids, d.corpus_ids, boost_of[beta])
    assert prior_row["all"]["ndcg"] == pytest.approx(want, abs=1e-6)
    assert "identity" in rep.headline and "document prior" in rep.headline


def test_report_table_and_dict_hold_every_subset(scifact):
    d = scifact
    rep = generalisation_report(d, list(d.triples.query_ids)[:50], {}, n_boot=50)
    out = rep.as_dict()
    assert set(out["rows"]["frozen"]) == {"all", "seen", "unseen", "unseen_relevant"}
    assert out["seen"]["n_train_queries"] == 50
    text = rep.format_table()
    assert text.splitlines()[0].split()[0] == "NDCG@10" and "unseen-doc" in text.splitlines()[0]


def test_a_bare_adapter_reports_on_data_the_caller_gives(scifact):
    """Adapter.generalisation_report: the table of the adapter's own operator, kept as
    generalisation_; an identity-operator adapter equals frozen in every subset."""
    from asymgeo.adapters import Adapter

    d = scifact
    p = d.corpus.shape[1]
    ad = Adapter.from_maps(np.zeros((2, p)), geometry="shared", form="augmented")
    assert ad.generalisation_ is None
    rep = ad.generalisation_report(d, d.triples.query_ids, n_boot=100)
    assert ad.generalisation_ is rep and rep.focus == "trained shared"
    for s, c in rep.rows["trained shared"].items():
        if c["n"]:
            assert c["diff"] == pytest.approx(0.0, abs=1e-12), s
    assert rep.rows["frozen"]["seen"]["n"] == 164


# ------------------------------------------------------------------ one-sided splits (issue #19)
def _test_qrels(shared_dir):
    return _tsv(shared_dir / "data" / "scifact" / "qrels" / "test.tsv")


def test_no_training_queries_leave_only_the_unseen_part(scifact, shared_dir):
    d = scifact
    p = d.corpus.shape[1]
    rep = generalisation_report(d, [], {"identity": np.eye(p)}, n_boot=50)
    assert rep.rows["frozen"]["seen"] == {"n": 0}
    assert rep.rows["frozen"]["unseen"]["n"] == len(_test_qrels(shared_dir)) == 300
    assert "no test query shares a relevant document with the training queries: only the unseen part exists" \
        in rep.notes
    assert rep.headline.startswith("identity: +0.000 [+0.000, +0.000] NDCG@10 on all 300 test queries "
                                   "(no clear change on them)")
    # frozen: all (0.6451, MTEB's published NDCG@10 of all-MiniLM-L6-v2 on SciFact), then the empty seen column
    assert rep.format_table().splitlines()[1].split()[1:3] == ["0.6451", "-"]


def test_training_on_the_test_queries_leaves_no_unseen_part(scifact, shared_dir):
    # every test query's relevant documents are training positives when the test queries train
    d = scifact
    p = d.corpus.shape[1]
    tq = sorted(_test_qrels(shared_dir))
    rep = generalisation_report(d, tq, {"identity": np.eye(p)}, n_boot=50)
    assert rep.rows["frozen"]["unseen"] == {"n": 0} and rep.rows["frozen"]["seen"]["n"] == 300
    assert any(n.startswith("every test query has a relevant document that was a training positive")
               for n in rep.notes)
    assert "every test query has a relevant training-positive document (100% of their relevant documents" \
        in rep.headline


def test_a_one_query_subset_has_a_difference_and_no_interval():
    from asymgeo.adapters.generalisation import _cell

    c = _cell({"a": 0.5, "b": 0.9}, {"a": 0.25, "b": 0.1}, ["a", "zz"], n_boot=10, seed=0)
    assert c["n"] == 1 and c["ndcg"] == 0.5 and c["diff"] == 0.25
    assert np.isnan(c["ci_low"]) and np.isnan(c["ci_high"])
    assert _cell({"a": 0.5}, None, ["a"], 10, 0) == {"n": 1, "ndcg": 0.5}


@pytest.mark.parametrize("defined_by, phrase", [("train queries", "include a training positive,"),
                                                ("809 train + validation queries",
                                                 "include a training or validation positive,")])
def test_the_headline_names_what_seen_means(defined_by, phrase):
    # with a memory the seen documents are the training and validation positives: the headline says so
    from asymgeo.adapters.generalisation import GeneralisationReport, _headline

    cell = {"n": 10, "mean": 0.5, "diff": 0.1, "ci_low": 0.05, "ci_high": 0.15}
    rows = {"m": {"all": cell, "seen": cell, "unseen": {**cell, "n": 4}, "unseen_relevant": cell},
            "doc prior (beta=0.1)": {"all": cell, "seen": cell, "unseen": cell, "unseen_relevant": cell}}
    rep = GeneralisationReport(rows, 0.1, {}, {"defined_by": defined_by}, "m", 10)
    text = _headline(rep, "doc prior (beta=0.1)")
    assert phrase in text and "on the other 4" in text
