"""Embedding cache: round trip, the shared caches as they are, atomicity and resume."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from beir_fixtures import doc, query, write_beir

from asymgeo.data import EncoderSpec, cache_path, encode_dataset, load_beir, load_embeddings, write_embeddings


class FakeEncoder:
    """Deterministic text -> vector map (seeded by the text's sha256); records calls."""

    def __init__(self, dim=6, fail_on_call=None):
        self.dim, self.fail_on_call = dim, fail_on_call
        self.calls: list[list[str]] = []

    @staticmethod
    def vector(text, dim=6):
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(dim) * 3.0

    def encode(self, texts):
        if self.fail_on_call is not None and len(self.calls) + 1 == self.fail_on_call:
            raise RuntimeError("simulated crash")
        self.calls.append(list(texts))
        return np.stack([self.vector(t, self.dim) for t in texts])


SPEC = EncoderSpec("fake-enc", "fake/model", query_prefix="Q: ", document_prefix="D: ")


def expected_rows(texts):
    V = np.stack([FakeEncoder.vector(t) for t in texts])
    return (V / np.linalg.norm(V, axis=1, keepdims=True)).astype(np.float16)


@pytest.fixture
def seven(tmp_path):
    docs = [doc(f"d{i}", "T" if i % 2 else "", f"text {i}") for i in range(7)]
    qs = [query(f"q{i}", f"ask {i}") for i in range(5)]
    return write_beir(tmp_path / "seven", docs, qs, {"test": [("q0", "d0", 1)]})


def _expected(seven):
    q_texts = [f"Q: ask {i}" for i in range(5)]
    d_texts = [f"D: T text {i}" if i % 2 else f"D: text {i}" for i in range(7)]
    return expected_rows(q_texts), expected_rows(d_texts)


# --------------------------------------------------------------------------- round trip
def test_write_and_load_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    C, Q = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    path = cache_path("ds", "some/encoder", tmp_path)
    assert path == tmp_path / "ds" / "encoder"
    write_embeddings(path, C, [f"c{i}" for i in range(6)], Q, ["a", "b", "c"], {"model_name": "m", "command": "x"})
    emb = load_embeddings("ds", "some/encoder", cache_dir=tmp_path)
    assert isinstance(emb.corpus, np.memmap) and emb.corpus.dtype == np.float16
    np.testing.assert_array_equal(emb.corpus, C.astype(np.float16))
    np.testing.assert_array_equal(emb.queries, Q.astype(np.float16))
    assert emb.corpus_ids == [f"c{i}" for i in range(6)] and emb.query_ids == ["a", "b", "c"]
    assert emb.meta["shapes"] == {"corpus": [6, 4], "queries": [3, 4]} and emb.meta["dtype"] == "float16"
    assert emb.meta["command"] == "x"
    assert emb.corpus_rows(["c5", "c0"]).tolist() == [5, 0] and emb.query_rows(["b"]).tolist() == [1]
    with pytest.raises(KeyError, match="'zz'"):
        emb.corpus_rows(["zz"])
    assert sorted(p.name for p in path.iterdir()) == ["corpus.npy", "corpus_ids.txt", "meta.json", "queries.npy", "query_ids.txt"]


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    write_embeddings(tmp_path / "ds" / "enc", np.eye(2), ["a", "b"], np.eye(2), ["q", "r"], {})
    monkeypatch.setenv("ASYMGEO_CACHE_DIR", str(tmp_path))
    assert load_embeddings("ds", "enc").corpus.shape == (2, 2)


def test_shared_caches_load_as_they_are(shared_dir):
    root = shared_dir / "embeddings"
    for enc, p in (("all-MiniLM-L6-v2", 384), ("all-mpnet-base-v2", 768)):
        emb = load_embeddings("scifact", enc, cache_dir=root)
        assert emb.corpus.shape == (5183, p) and emb.queries.shape == (1109, p)
        assert emb.corpus.dtype == np.float16 and isinstance(emb.corpus, np.memmap)
        ids = (root / "scifact" / enc / "corpus_ids.txt").read_text().split()
        assert emb.corpus_rows([ids[0], ids[-1]]).tolist() == [0, 5182]
        assert emb.meta["prefixes"] == {"query": "", "document": ""}
        norms = np.linalg.norm(np.asarray(emb.corpus[:50], dtype=np.float32), axis=1)
        np.testing.assert_allclose(norms, 1.0, atol=2e-3)
    # a dataset object resolves by its name
    assert load_embeddings(load_beir(shared_dir / "data" / "scifact"), "minilm", cache_dir=root).dim == 384


@pytest.mark.parametrize(
    "damage, error, message",
    [
        (lambda p: (p / "meta.json").unlink(), FileNotFoundError, "meta.json: missing"),
        (lambda p: (p / "corpus_ids.txt").write_text("a\nb\nc\n"), ValueError, "2 rows but corpus_ids.txt has 3"),
        (lambda p: (p / "query_ids.txt").write_text("q\nq\n"), ValueError, "duplicate query id 'q'"),
        (lambda p: (p / "meta.json").write_text("{oops"), ValueError, "meta.json, line 1: invalid JSON"),
        (lambda p: np.save(p / "queries.npy", np.zeros((2, 3), np.float16)), ValueError, "corpus dimension 2 != query dimension 3"),
        (lambda p: (p / "corpus.npy").unlink(), FileNotFoundError, "corpus.npy"),
    ],
)
def test_damaged_cache_is_refused_with_the_file_named(tmp_path, damage, error, message):
    path = write_embeddings(tmp_path / "ds" / "enc", np.eye(2), ["a", "b"], np.eye(2), ["q", "r"], {})
    damage(path)
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_embeddings("ds", "enc", cache_dir=tmp_path)


def test_missing_cache_says_how_to_build_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="asymgeo embed ds --encoder all-MiniLM-L6-v2"):
        load_embeddings("ds", "minilm", cache_dir=tmp_path)


# --------------------------------------------------------------------------- encoding
def test_encode_applies_conventions(seven, tmp_path):
    enc = FakeEncoder()
    emb = encode_dataset(seven, SPEC, cache_dir=tmp_path / "cache", model=enc, chunk_size=3, progress=False, command="test")
    Qe, Ce = _expected(seven)
    np.testing.assert_array_equal(emb.queries, Qe)
    np.testing.assert_array_equal(emb.corpus, Ce)
    assert emb.corpus_ids == [f"d{i}" for i in range(7)] and emb.query_ids == [f"q{i}" for i in range(5)]
    assert emb.path == tmp_path / "cache" / "seven" / "fake-enc"
    assert emb.meta["prefixes"] == {"query": "Q: ", "document": "D: "}
    assert emb.meta["normalised"] is True and emb.meta["max_tokens"] == 256 and emb.meta["command"] == "test"
    assert not (emb.path / ".partial").exists()
    # a complete cache is reused, not re-encoded
    again = FakeEncoder()
    encode_dataset(seven, SPEC, cache_dir=tmp_path / "cache", model=again, progress=False)
    assert again.calls == []


def test_interrupted_encoding_resumes(seven, tmp_path):
    cache = tmp_path / "cache"
    crashing = FakeEncoder(fail_on_call=3)  # chunks of 2: queries [2, 2, 1], corpus [2, 2, 2, 1]
    with pytest.raises(RuntimeError, match="simulated crash"):
        encode_dataset(seven, SPEC, cache_dir=cache, model=crashing, chunk_size=2, progress=False)
    path = cache / "seven" / "fake-enc"
    assert not (path / "meta.json").exists()
    assert sorted(p.name for p in (path / ".partial").glob("*.npy")) == ["queries-000000.npy", "queries-000001.npy"]
    with pytest.raises(FileNotFoundError, match="interrupted encoding"):
        load_embeddings("seven", SPEC, cache_dir=cache)

    resumed = FakeEncoder()
    emb = encode_dataset(seven, SPEC, cache_dir=cache, model=resumed, chunk_size=2, progress=False)
    assert resumed.calls == [["Q: ask 4"], ["D: text 0", "D: T text 1"], ["D: text 2", "D: T text 3"], ["D: text 4", "D: T text 5"], ["D: text 6"]]
    Qe, Ce = _expected(seven)
    np.testing.assert_array_equal(emb.queries, Qe)
    np.testing.assert_array_equal(emb.corpus, Ce)


def test_resume_with_a_different_chunk_size_starts_afresh(seven, tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(RuntimeError):
        encode_dataset(seven, SPEC, cache_dir=cache, model=FakeEncoder(fail_on_call=3), chunk_size=2, progress=False)
    fresh = FakeEncoder()
    emb = encode_dataset(seven, SPEC, cache_dir=cache, model=fresh, chunk_size=4, progress=False)
    assert sum(len(c) for c in fresh.calls) == 12
    np.testing.assert_array_equal(emb.corpus, _expected(seven)[1])


def test_overwrite_interrupted_never_leaves_an_old_complete_looking_cache(seven, tmp_path):
    cache = tmp_path / "cache"
    encode_dataset(seven, SPEC, cache_dir=cache, model=FakeEncoder(), progress=False)
    with pytest.raises(RuntimeError):
        encode_dataset(seven, SPEC, cache_dir=cache, model=FakeEncoder(fail_on_call=1), overwrite=True, progress=False)
    with pytest.raises(FileNotFoundError, match="incomplete"):
        load_embeddings("seven", SPEC, cache_dir=cache)


def test_encoder_returning_wrong_shape_is_named(seven, tmp_path):
    class Bad:
        def encode(self, texts):
            return np.zeros((len(texts) + 1, 3))

    with pytest.raises(ValueError, match=r"encoder 'fake-enc': returned shape \(3, 3\) for 2 texts"):
        encode_dataset(seven, SPEC, cache_dir=tmp_path, model=Bad(), chunk_size=2, progress=False)
