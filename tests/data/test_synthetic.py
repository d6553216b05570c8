"""The synthetic BEIR generator and the benchmark hash-projection encoder (issue #21)."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib

import numpy as np
import pytest

from asymgeo.data import encode_dataset, get_encoder, load_beir, load_embeddings, load_encoder
from asymgeo.data.synthetic import HASH_ENCODER_NAME, HashProjectionEncoder, make_synthetic_beir


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return make_synthetic_beir(tmp_path_factory.mktemp("syn") / "syn", 2000, n_train=120, n_dev=30, n_test=40, seed=3)


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_dataset_has_beir_layout_disjoint_splits_and_relevant_documents_sharing_tokens(small):
    ds = load_beir(small)
    assert len(ds.corpus_ids) == 2000 and len(ds.query_ids) == 190
    assert set(ds.splits) == {"train", "dev", "test"}
    q = {s: set(ds.qrels(s)) for s in ("train", "dev", "test")}
    assert [len(q[s]) for s in ("train", "dev", "test")] == [120, 30, 40]
    assert not (q["train"] & q["dev"]) and not (q["train"] & q["test"]) and not (q["dev"] & q["test"])
    docs = {d["_id"]: d["text"] for d in _jsonl(small / "corpus.jsonl")}
    texts = {d["_id"]: d["text"] for d in _jsonl(small / "queries.jsonl")}
    rel_docs = [d for s in ("train", "dev", "test") for qr in ds.qrels(s).values() for d in qr]
    assert len(rel_docs) == len(set(rel_docs))                 # no document is relevant to two queries
    for split in ("train", "dev", "test"):
        for qid, rel in ds.qrels(split).items():
            words = set(texts[qid].split())
            assert any(len(words & set(docs[d].split())) >= 2 for d in rel), qid  # its 2 rare words
    assert all(len(t.split()) == 12 for t in docs.values())
    meta = json.loads((small / "synthetic.json").read_text())
    assert meta["n_docs"] == 2000 and meta["seed"] == 3 and meta["encoder"] == HASH_ENCODER_NAME


def test_the_dataset_is_a_function_of_its_seed(tmp_path, small):
    a = make_synthetic_beir(tmp_path / "a", 2000, n_train=120, n_dev=30, n_test=40, seed=3)
    b = make_synthetic_beir(tmp_path / "b", 2000, n_train=120, n_dev=30, n_test=40, seed=4)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/train.tsv", "qrels/test.tsv"):
        assert (a / name).read_bytes() == (small / name).read_bytes()
    assert (b / "corpus.jsonl").read_bytes() != (a / "corpus.jsonl").read_bytes()


def test_generation_refuses_an_existing_folder_and_too_few_documents(tmp_path, small):
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty; pass overwrite=True"):
        make_synthetic_beir(keep, 500, n_train=50, n_dev=10, n_test=10)
    assert (keep / "notes.txt").read_text() == "mine"            # nothing removed
    with pytest.raises(ValueError, match="need n_docs >= 400"):
        make_synthetic_beir(tmp_path / "x", 300, n_train=100, n_dev=50, n_test=50)
    assert not (tmp_path / "x").exists()
    (tmp_path / "f").write_text("a file")
    with pytest.raises(NotADirectoryError, match="found a file"):
        make_synthetic_beir(tmp_path / "f", 500, n_train=50, n_dev=10, n_test=10)


def test_the_encoder_is_signed_feature_hashing_through_its_table():
    # independent: the definition, token by token, with zlib directly
    enc = HashProjectionEncoder(16, buckets=64, seed=5)
    texts = ["Alpha beta beta", "", "gamma"]
    want = np.zeros((3, 16))
    for i, t in enumerate(texts):
        for tok in t.lower().split():
            b = tok.encode()
            for h in (zlib.crc32(b), zlib.crc32(b, 0x9E3779B9)):
                want[i] += (1.0 if h >> 31 else -1.0) * enc.table[h % 64]
    np.testing.assert_allclose(enc.encode(texts), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(enc.table, np.random.default_rng(5).standard_normal((64, 16), dtype=np.float32))
    with pytest.raises(TypeError, match="one string"):
        enc.encode("alpha")


def test_the_encoder_is_the_same_in_another_process():
    # CRC-32, not Python's per-process salted hash(): another interpreter gives the same bytes
    code = ("import sys; sys.stdout.buffer.write(__import__('asymgeo.data.synthetic', fromlist=['x'])"
            ".HashProjectionEncoder(32, buckets=256, seed=1).encode(['r12 t3x4 what', 'b7']).tobytes())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout
    here = HashProjectionEncoder(32, buckets=256, seed=1).encode(["r12 t3x4 what", "b7"])
    assert out == here.tobytes()


def test_the_registered_encoder_builds_a_cache_that_finds_relevant_documents(tmp_path, small):
    spec = get_encoder(HASH_ENCODER_NAME)
    assert isinstance(load_encoder(spec), HashProjectionEncoder)
    cache = encode_dataset(small, HASH_ENCODER_NAME, cache_dir=tmp_path / "emb", progress=False, chunk_size=512)
    assert cache.corpus.shape == (2000, 768) and cache.corpus.dtype == np.float16
    np.testing.assert_allclose(np.linalg.norm(np.asarray(cache.corpus[:50], dtype=np.float64), axis=1), 1, atol=2e-3)
    emb = load_embeddings(small, HASH_ENCODER_NAME, cache_dir=tmp_path / "emb")
    ds = load_beir(small)
    # exact search by brute force: the relevant document is the frozen top-1 for most test queries
    qrels = ds.qrels("test")
    Q = np.asarray(emb.queries[emb.query_rows(list(qrels))], dtype=np.float64)
    top = np.argmax(Q @ np.asarray(emb.corpus, dtype=np.float64).T, axis=1)
    hit = np.mean([emb.corpus_ids[t] in qrels[q] for q, t in zip(qrels, top, strict=True)])
    assert 0.5 < hit < 1.0                                     # structure to find, not trivially solved
