"""Documents with an empty title and text are warned about, once per dataset load, naming how
many there are and the first id (issue #39, round 3)."""

from __future__ import annotations

import logging

import numpy as np
from beir_fixtures import doc, query, write_beir

from asymgeo.cli import main
from asymgeo.data import load_beir, write_embeddings


def _dataset(tmp_path, n_docs=8):
    docs = [doc(f"d{i}", "", f"text {i}") for i in range(n_docs)]
    docs[3] = doc("d3", "", "")
    docs[6] = doc("d6", "  ", " \n ")  # blank is empty too
    qs = [query(f"q{i}", f"ask {i}") for i in range(4)]
    return write_beir(tmp_path / "data" / "holes", docs, qs, {"test": [(f"q{i}", f"d{i}", 1) for i in range(4)]})


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("asymgeo")]


WANT = ("holes: 2 documents with an empty title and text (first: 'd3', line 4 of corpus.jsonl); each is embedded "
        "as the empty string and still searched: fill in or remove them")


def test_loading_a_corpus_with_empty_documents_warns_once(tmp_path, caplog):
    root = _dataset(tmp_path)
    with caplog.at_level(logging.WARNING, logger="asymgeo"):
        ds = load_beir(root)
        assert len(ds.corpus_ids) == 8
        list(ds.iter_corpus())
        list(ds.iter_documents())
        ds.fingerprint()
    assert _warnings(caplog) == [WANT]
    assert ds.report.empty_documents == 2 and ds.report.examples["empty_documents"] == ["d3", "d6"]
    assert ds.report.faults()["empty_documents"] == 2


def test_a_corpus_without_empty_documents_is_quiet(tiny_beir, caplog):
    with caplog.at_level(logging.WARNING, logger="asymgeo"):
        ds = load_beir(tiny_beir)  # d2 and d4 have no title but a text
        assert len(ds.corpus_ids) == 4
    assert _warnings(caplog) == [] and "empty_documents" not in ds.report.faults()


def test_embed_warns_once_not_per_batch(tmp_path, monkeypatch, capsys):
    class Fake:
        def encode(self, texts):
            return np.array([[len(t), 1.0, 0.0] for t in texts])

    monkeypatch.setattr("asymgeo.data.encoding.load_encoder", lambda spec, **kw: Fake())
    for module in ("encoding", "encode_workers"):  # no torch import: this test is about the warning
        monkeypatch.setattr(f"asymgeo.data.{module}.check_device", lambda device: "cpu")
    _dataset(tmp_path)
    code = main(["embed", "holes", "--encoder", "gte-base", "--data-dir", str(tmp_path / "data"),
                 "--cache-dir", str(tmp_path / "c"), "--chunk-size", "2", "--batch-size", "1"])
    out, err = capsys.readouterr()
    assert code == 0 and "corpus (8, 3)" in out
    assert [x for x in err.splitlines() if "warning" in x] == [f"asymgeo embed: warning: {WANT}"]


def test_evaluate_warns_about_empty_documents(tmp_path, capsys):
    _dataset(tmp_path)
    rng = np.random.default_rng(0)
    C, Q = rng.standard_normal((8, 4)), rng.standard_normal((4, 4))
    write_embeddings(tmp_path / "c" / "holes" / "enc", C / np.linalg.norm(C, axis=1, keepdims=True),
                     [f"d{i}" for i in range(8)], Q / np.linalg.norm(Q, axis=1, keepdims=True),
                     [f"q{i}" for i in range(4)], {"normalised": True})
    code = main(["evaluate", "holes", "--encoder", "enc", "--data-dir", str(tmp_path / "data"),
                 "--cache-dir", str(tmp_path / "c")])
    out, err = capsys.readouterr()
    assert code == 0 and "ndcg@10" in out
    assert err.strip().splitlines() == [f"asymgeo evaluate: warning: {WANT}"]
