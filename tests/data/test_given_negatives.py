"""The negatives of a user's (query, positive, negative) pairs are hard negatives in training (issue #38):
written to negatives.tsv, read by BeirDataset.given_negatives, put first by load_triples, and the rows
the trainer receives; the frozen model's mined negatives fill the other columns."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from beir_fixtures import doc, query, write_beir

from asymgeo.data import import_embeddings, load_beir, load_triples
from asymgeo.data.pairs import pairs_dataset


def _pid(text: str) -> str:
    return "p-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def _qid(text: str) -> str:
    return "q-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def test_pairs_write_their_negatives_in_order_and_drop_a_positive(tmp_path):
    corpus = {"d1": "first document", "d2": "second document", "d3": "third document"}
    pairs = [("what is one", "first document", "third document", "a fresh negative"),
             {"query": "what is one", "positive": "second document", "negative": "first document"},  # d1 is a positive
             ("what is two", "second document")]
    ds = pairs_dataset(pairs, corpus=corpus, eval_pairs=[("held out", "third document", "first document")],
                       data_dir=tmp_path)
    text = (ds.path / "negatives.tsv").read_text(encoding="utf-8").splitlines()
    q1, q3 = _qid("what is one"), _qid("held out")
    assert text == ["query-id\tcorpus-id", f"{q1}\td3", f"{q1}\t{_pid('a fresh negative')}", f"{q3}\td1"]
    assert load_beir(ds.path).given_negatives == {q1: ["d3", _pid("a fresh negative")], q3: ["d1"]}
    no_negs = pairs_dataset([p[:2] if isinstance(p, tuple) else (p["query"], p["positive"]) for p in pairs],
                            corpus={**corpus, _pid("a fresh negative"): "a fresh negative"},
                            eval_pairs=[("held out", "third document")], data_dir=tmp_path)
    assert no_negs.path != ds.path and not (no_negs.path / "negatives.tsv").exists()


@pytest.mark.parametrize("line, match", [
    ("q0\n", r"negatives.tsv, line 2: expected 'query-id<TAB>corpus-id'"),
    ("nobody\t1\n", r"negatives.tsv, line 2: query-id 'nobody' is not in"),
    ("q0\tnothing\n", r"negatives.tsv, line 2: corpus-id 'nothing' is not in"),
])
def test_a_bad_negatives_file_names_its_line(tmp_path, line, match):
    root = write_beir(tmp_path / "d", [doc(i) for i in range(3)], [query("q0")], {"test": [("q0", "0", 1)]})
    (root / "negatives.tsv").write_text("query-id\tcorpus-id\n" + line, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        load_beir(root).given_negatives


@pytest.fixture
def synthetic(tmp_path):
    """24 training queries (a fifth of them become validation), 6 evaluation queries, 60 documents,
    random unit embeddings imported as the cache; queries 0-9 give two negatives each."""
    rng = np.random.default_rng(3)
    docs = [f"document number {i}" for i in range(60)]
    train = [(f"train question {i}", docs[i], *( [docs[30 + i], docs[50 - i]] if i < 10 else [])) for i in range(24)]
    evals = [(f"test question {i}", docs[24 + i]) for i in range(6)]
    ds = load_beir(pairs_dataset(train, corpus=docs, eval_pairs=evals, data_dir=tmp_path / "data").path)
    C = rng.normal(size=(len(ds.corpus_ids), 16))
    Q = rng.normal(size=(len(ds.query_ids), 16))
    import_embeddings(ds, "toy", corpus=C, corpus_ids=list(ds.corpus_ids), queries=Q, query_ids=ds.query_ids,
                      normalize=True, cache_dir=tmp_path / "cache")
    return ds, train, tmp_path


def _mined(emb, q: str, labelled: set[str], k: int) -> list[int]:
    """The k best unlabelled rows by inner product, ties to the lower row (written here, by sorting)."""
    s = emb.corpus.astype(np.float32) @ emb.queries[emb.query_rows([q])[0]].astype(np.float32)
    order = [int(j) for j in np.lexsort((np.arange(s.size), -s)) if emb.corpus_ids[j] not in labelled]
    return order[:k]


def test_given_negatives_come_first_and_mined_ones_fill_the_rest(synthetic):
    from asymgeo.data import load_embeddings

    ds, train, root = synthetic
    emb = load_embeddings(ds, "toy", cache_dir=root / "cache")
    ids = [_qid(t[0]) for t in train]
    tr = load_triples(ds, "toy", ids, cache=emb, k=4, triples_cache=False)
    plain = load_triples(ds, "toy", ids, cache=emb, k=4, triples_cache=False, given_negatives=False)
    row = {d: i for i, d in enumerate(emb.corpus_ids)}
    for i, (qtext, pos, *negs) in enumerate(train):
        q = _qid(qtext)
        mined = _mined(emb, q, {"d" + str(int(pos.split()[-1]))}, 4)
        assert plain.hard_negative_rows[i].tolist() == mined, qtext
        given = [row["d" + n.split()[-1]] for n in negs]
        want = (given + [r for r in mined if r not in given])[:4]
        assert tr.hard_negative_rows[i].tolist() == want, qtext
        assert tr.neg_rows[i] == want[0] and tr.given_counts[i] == len(given)
        np.testing.assert_array_equal(tr.Y_neg[i], emb.corpus[want[0]].astype(np.float32))
    assert tr.subset(ids[8:12]).given_counts.tolist() == [2, 2, 0, 0]


def test_fit_trains_on_the_given_negatives_and_says_so(synthetic, monkeypatch, capsys):
    from asymgeo.adapters import adapter as adapter_module
    from asymgeo.adapters.workflow import fit_adapter, load_adaptation_data

    ds, train, root = synthetic
    seen = {}
    real_fit = adapter_module.Adapter.fit

    def spy(self, X, pos_rows, corpus, **kw):
        seen["hard"] = np.asarray(kw["hard_negative_rows"])
        seen["X"] = np.asarray(X)
        return real_fit(self, X, pos_rows, corpus, **kw)

    monkeypatch.setattr(adapter_module.Adapter, "fit", spy)
    rep = fit_adapter(ds.path, "toy", geometry="shared", rank=2, epochs=1, learning_rates=(1e-3,), memory="none",
                      selection="all", cache_dir=root / "cache", device="cpu")
    d = load_adaptation_data(ds.path, "toy", cache_dir=root / "cache")
    row = {d_: i for i, d_ in enumerate(d.corpus_ids)}
    by_text = {_qid(t[0]): ["d" + n.split()[-1] for n in t[2:]] for t in train}
    n_given = 0
    for i, q in enumerate(d.triples.query_ids):
        given = [row[x] for x in by_text[q]]
        assert seen["hard"][i, :len(given)].tolist() == given, q
        n_given += len(given)
    assert seen["X"].shape[0] == len(d.triples.query_ids)
    g = rep.metrics["mining"]["given"]
    assert g["negatives"] == n_given and g["queries"] == n_given // 2 and g["k"] == 8
