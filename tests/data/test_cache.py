"""Embedding cache: round trip, the shared caches as they are, atomicity and resume."""

from __future__ import annotations

import hashlib
import json

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
    assert not path.exists()  # the cache is built beside its final place
    parts = cache / "seven" / "fake-enc.partial" / ".partial"
    assert sorted(p.name for p in parts.glob("*.npy")) == ["queries-000000.npy", "queries-000001.npy"]
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


@pytest.mark.parametrize("change", ["query text", "document title", "encoder prefix"])
def test_resume_after_the_inputs_changed_encodes_everything_again(seven, tmp_path, change):
    """The saved chunks of an interrupted run are the old inputs' rows: once a query text, a
    document title or the encoder's prompt changed, the resumed run encodes every row again
    (the manifest's fingerprint no longer matches), and the cache holds the new inputs' rows."""
    import dataclasses

    cache = tmp_path / "cache"
    with pytest.raises(RuntimeError, match="simulated crash"):  # queries chunks 0 and 1 saved
        encode_dataset(seven, SPEC, cache_dir=cache, model=FakeEncoder(fail_on_call=3), chunk_size=2, progress=False)
    parts = cache / "seven" / "fake-enc.partial" / ".partial"
    assert sorted(p.name for p in parts.glob("*.npy")) == ["queries-000000.npy", "queries-000001.npy"]
    spec = SPEC
    q_texts = [f"Q: ask {i}" for i in range(5)]
    d_texts = [f"D: T text {i}" if i % 2 else f"D: text {i}" for i in range(7)]
    if change == "query text":
        (seven / "queries.jsonl").write_text((seven / "queries.jsonl").read_text().replace('"ask 1"', '"asked"'))
        q_texts[1] = "Q: asked"
    elif change == "document title":
        (seven / "corpus.jsonl").write_text((seven / "corpus.jsonl").read_text().replace('"title": "T"', '"title": "U"', 1))
        d_texts[1] = "D: U text 1"
    else:
        spec = dataclasses.replace(SPEC, query_prefix="query: ")
        q_texts = [f"query: ask {i}" for i in range(5)]
    resumed = FakeEncoder()
    emb = encode_dataset(seven, spec, cache_dir=cache, model=resumed, chunk_size=2, progress=False)
    assert sum(len(c) for c in resumed.calls) == 12, "every row encoded again"
    np.testing.assert_array_equal(emb.queries, expected_rows(q_texts))
    np.testing.assert_array_equal(emb.corpus, expected_rows(d_texts))


def _snapshot(path):
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


def test_overwrite_interrupted_keeps_the_old_cache(seven, tmp_path):
    cache = tmp_path / "cache"
    emb = encode_dataset(seven, SPEC, cache_dir=cache, model=FakeEncoder(), progress=False)
    before = _snapshot(emb.path)
    with pytest.raises(RuntimeError):
        encode_dataset(seven, SPEC, cache_dir=cache, model=FakeEncoder(fail_on_call=1), overwrite=True, progress=False)
    assert _snapshot(emb.path) == before
    np.testing.assert_array_equal(load_embeddings(load_beir(seven), SPEC, cache_dir=cache).corpus, _expected(seven)[1])


def test_overwrite_with_a_truncated_corpus_line_touches_nothing(seven, tmp_path):
    cache = tmp_path / "cache"
    emb = encode_dataset(seven, SPEC, cache_dir=cache, model=FakeEncoder(), progress=False)
    before = _snapshot(emb.path)
    lines = (seven / "corpus.jsonl").read_text().splitlines()
    lines[4] = lines[4][: len(lines[4]) // 2]  # a truncated JSON line
    (seven / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    enc = FakeEncoder()
    with pytest.raises(ValueError, match=r"corpus.jsonl, line 5: invalid JSON"):
        encode_dataset(seven, SPEC, cache_dir=cache, model=enc, overwrite=True, progress=False)
    assert enc.calls == [] and _snapshot(emb.path) == before
    assert not (cache / "seven" / "fake-enc.partial").exists()


def test_overwrite_with_a_bad_device_touches_nothing(seven, tmp_path):
    cache = tmp_path / "cache"
    emb = encode_dataset(seven, SPEC, cache_dir=cache, model=FakeEncoder(), progress=False)
    before = _snapshot(emb.path)
    with pytest.raises(ValueError, match="device: 'bogus' is not a torch device"):
        encode_dataset(seven, SPEC, cache_dir=cache, device="bogus", overwrite=True, progress=False)
    assert _snapshot(emb.path) == before
    assert not (cache / "seven" / "fake-enc.partial").exists()


def test_overwrite_replaces_the_cache_when_complete(seven, tmp_path):
    cache = tmp_path / "cache"
    encode_dataset(seven, SPEC, cache_dir=cache, model=FakeEncoder(), progress=False)
    rows = (seven / "corpus.jsonl").read_text().replace('"text 3"', '"text three"')
    (seven / "corpus.jsonl").write_text(rows)
    emb = encode_dataset(seven, SPEC, cache_dir=cache, model=FakeEncoder(), overwrite=True, progress=False)
    want = expected_rows(["D: T text three"])[0]
    np.testing.assert_array_equal(emb.corpus[3], want)
    assert sorted(p.name for p in (cache / "seven").iterdir()) == ["fake-enc"]  # no leftovers


def test_replacement_interrupted_between_renames_puts_the_old_cache_back(seven, tmp_path, monkeypatch):
    import asymgeo.data.cache as cache_mod

    cache = tmp_path / "cache"
    emb = encode_dataset(seven, SPEC, cache_dir=cache, model=FakeEncoder(), progress=False)
    before = _snapshot(emb.path)
    real = cache_mod.os.replace

    def crash_on_second(src, dst):
        if str(src).endswith("fake-enc.partial"):
            raise KeyboardInterrupt  # Ctrl-C after the old cache was moved aside
        return real(src, dst)

    monkeypatch.setattr(cache_mod.os, "replace", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        encode_dataset(seven, SPEC, cache_dir=cache, model=FakeEncoder(), overwrite=True, progress=False)
    monkeypatch.setattr(cache_mod.os, "replace", real)
    assert _snapshot(emb.path) == before, "rolled back: the old cache is where it was"
    assert load_embeddings("seven", SPEC, cache_dir=cache).path == emb.path
    assert not list((cache / "seven").glob(".fake-enc.old-*"))


def test_a_killed_replacement_points_at_the_old_cache(seven, tmp_path):
    """A process killed between the renames (no rollback runs) leaves the old cache aside: named."""
    cache = tmp_path / "cache"
    emb = encode_dataset(seven, SPEC, cache_dir=cache, model=FakeEncoder(), progress=False)
    before = _snapshot(emb.path)
    aside = emb.path.with_name(f".{emb.path.name}.old-4242")
    emb.path.rename(aside)
    with pytest.raises(FileNotFoundError, match=r"the previous one is intact in .*\.fake-enc\.old-4242"):
        load_embeddings("seven", SPEC, cache_dir=cache)
    assert _snapshot(aside) == before


def test_cache_dir_that_is_a_file_is_refused(seven, tmp_path):
    f = tmp_path / "file"
    f.write_text("not a folder")
    with pytest.raises(NotADirectoryError, match="expected a folder"):
        encode_dataset(seven, SPEC, cache_dir=f, model=FakeEncoder(), progress=False)
    with pytest.raises(NotADirectoryError, match="expected a folder"):
        load_embeddings("seven", SPEC, cache_dir=f)
    assert f.read_text() == "not a folder"


# --------------------------------------------------------------------------- stale caches
def test_fingerprint_recorded_in_meta(seven, tmp_path):
    emb = encode_dataset(seven, SPEC, cache_dir=tmp_path, model=FakeEncoder(), progress=False)
    fp = emb.meta["fingerprint"]
    assert fp["dataset"]["n_corpus"] == 7 and fp["dataset"]["n_queries"] == 5
    assert fp["encoder"]["prefixes"] == {"query": "Q: ", "document": "D: "}
    ids_bytes = "".join(f"d{i}\n" for i in range(7)).encode()
    assert fp["files"]["corpus_ids.txt"] == hashlib.sha256(ids_bytes).hexdigest()
    assert fp["dataset"]["corpus_ids_sha256"] == hashlib.sha256(ids_bytes).hexdigest()


def test_stale_cache_after_text_change_is_refused_and_not_reported_done(seven, tmp_path):
    encode_dataset(seven, SPEC, cache_dir=tmp_path, model=FakeEncoder(), progress=False)
    (seven / "corpus.jsonl").write_text((seven / "corpus.jsonl").read_text().replace('"text 2"', '"changed"'))
    ds = load_beir(seven)
    with pytest.raises(ValueError, match=r"stale cache, the document texts .*--overwrite"):
        load_embeddings(ds, SPEC, cache_dir=tmp_path)
    with pytest.raises(ValueError, match=r"stale cache.*asymgeo embed .* --encoder fake-enc --overwrite"):
        encode_dataset(seven, SPEC, cache_dir=tmp_path, model=FakeEncoder(), progress=False)


def test_cache_of_a_larger_corpus_is_refused(seven, tmp_path):
    encode_dataset(seven, SPEC, cache_dir=tmp_path, model=FakeEncoder(), progress=False)
    lines = (seven / "corpus.jsonl").read_text().splitlines()[:3]
    (seven / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"number of documents .*\(7 in the cache, 3 now\)"):
        load_embeddings(load_beir(seven), SPEC, cache_dir=tmp_path)


def test_swapped_id_lines_are_refused(seven, tmp_path):
    emb = encode_dataset(seven, SPEC, cache_dir=tmp_path, model=FakeEncoder(), progress=False)
    f = emb.path / "corpus_ids.txt"
    ids = f.read_text().splitlines()
    ids[1], ids[2] = ids[2], ids[1]
    f.write_text("\n".join(ids) + "\n")
    with pytest.raises(ValueError, match=r"corpus_ids.txt: changed since the cache was written"):
        load_embeddings(load_beir(seven), SPEC, cache_dir=tmp_path)


def test_legacy_cache_without_fingerprint_is_checked_by_ids(seven, tmp_path):
    emb = encode_dataset(seven, SPEC, cache_dir=tmp_path, model=FakeEncoder(), progress=False)
    meta = json.loads((emb.path / "meta.json").read_text())
    del meta["fingerprint"]
    (emb.path / "meta.json").write_text(json.dumps(meta))
    ds = load_beir(seven)
    assert load_embeddings(ds, SPEC, cache_dir=tmp_path).corpus.shape == (7, 6)
    f = emb.path / "corpus_ids.txt"
    ids = f.read_text().splitlines()
    ids[1], ids[2] = ids[2], ids[1]
    f.write_text("\n".join(ids) + "\n")
    with pytest.raises(ValueError, match=r"corpus_ids.txt, line 2: id 'd2' but .*corpus.jsonl has 'd1'"):
        load_embeddings(load_beir(seven), SPEC, cache_dir=tmp_path)


def test_shared_legacy_caches_verify_against_their_datasets(shared_dir):
    for name in ("scifact", "nfcorpus"):
        ds = load_beir(shared_dir / "data" / name)
        for enc in ("all-MiniLM-L6-v2", "all-mpnet-base-v2"):
            emb = load_embeddings(ds, enc, cache_dir=shared_dir / "embeddings")
            assert "fingerprint" not in emb.meta and emb.corpus_ids == ds.corpus_ids


# --------------------------------------------------------------------------- row validation
def _unit_cache(tmp_path, corpus=None, queries=None):
    C = np.eye(4, dtype=np.float32) if corpus is None else corpus
    Q = np.eye(4, dtype=np.float32)[:2] if queries is None else queries
    return write_embeddings(tmp_path / "ds" / "enc", C, [f"c{i}" for i in range(len(C))], Q,
                            [f"q{i}" for i in range(len(Q))], {"normalised": True})


@pytest.mark.parametrize(
    "which, row, value, message",
    [
        ("corpus", 2, 0.0, r"corpus.npy, row 2 \(id 'c2'\): an all-zero vector; 1 bad row in all"),
        ("corpus", 3, np.nan, r"corpus.npy, row 3 \(id 'c3'\): non-finite"),
        ("queries", 1, 0.0, r"queries.npy, row 1 \(id 'q1'\): an all-zero vector"),
        ("corpus", 1, 1000.0, r"corpus.npy, row 1 \(id 'c1'\): norm far from 1 .*norm 1000"),
    ],
)
def test_degenerate_rows_are_refused_naming_row_and_id(tmp_path, which, row, value, message):
    C = np.eye(4, dtype=np.float32)
    Q = np.eye(4, dtype=np.float32)[:2].copy()
    arr = C if which == "corpus" else Q
    arr[row] = 0.0
    arr[row, 0] = value
    _unit_cache(tmp_path, C, Q)
    with pytest.raises(ValueError, match=message):
        load_embeddings("ds", "enc", cache_dir=tmp_path)
    assert load_embeddings("ds", "enc", cache_dir=tmp_path, validate=False).corpus.shape == (4, 4)


def test_all_zero_queries_counted(tmp_path):
    _unit_cache(tmp_path, queries=np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match=r"row 0 \(id 'q0'\): an all-zero vector; 3 bad rows in all"):
        load_embeddings("ds", "enc", cache_dir=tmp_path)


def test_empty_npy_file_is_a_clear_error(tmp_path):
    path = _unit_cache(tmp_path)
    (path / "corpus.npy").write_bytes(b"")
    with pytest.raises(ValueError, match=r"corpus.npy: not a readable .npy array \(empty or truncated file\)"):
        load_embeddings("ds", "enc", cache_dir=tmp_path)


def test_encoder_returning_wrong_shape_is_named(seven, tmp_path):
    class Bad:
        def encode(self, texts):
            return np.zeros((len(texts) + 1, 3))

    with pytest.raises(ValueError, match=r"encoder 'fake-enc': returned shape \(3, 3\) for 2 texts"):
        encode_dataset(seven, SPEC, cache_dir=tmp_path, model=Bad(), chunk_size=2, progress=False)


def test_arrays_narrower_than_meta_dimension_are_named(tmp_path):
    rng = np.random.default_rng(0)
    C = rng.standard_normal((6, 4)).astype(np.float32)
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    path = cache_path("ds", "enc", tmp_path)
    write_embeddings(path, C, [f"c{i}" for i in range(6)], C[:3], ["a", "b", "c"], {"normalised": True})
    meta = json.loads((path / "meta.json").read_text())
    assert meta["dimension"] == 4
    meta["dimension"] = 8
    meta.pop("shapes", None)
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"corpus.npy: 4 columns but meta.json says dimension 8"):
        load_embeddings("ds", "enc", cache_dir=tmp_path)


def test_missing_dataset_suggests_the_command_line_way(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"asymgeo embed NAME --download"):
        load_beir("nowhere", data_dir=tmp_path)


def test_embed_progress_moves_per_batch(seven, tmp_path, monkeypatch):
    """With a progress bar the chunk is encoded batch by batch and the bar moves per batch; the
    cache holds the same vectors."""
    import tqdm.auto

    updates = []

    class Bar:
        def __init__(self, *a, **k):
            pass

        def update(self, n):
            updates.append(n)

        def close(self):
            pass

    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    enc = FakeEncoder()
    enc.batch_size = 2
    emb = encode_dataset(seven, SPEC, cache_dir=tmp_path / "cache", model=enc, chunk_size=3, progress=True)
    Qe, Ce = _expected(seven)
    np.testing.assert_array_equal(emb.corpus, Ce)
    np.testing.assert_array_equal(emb.queries, Qe)
    assert max(len(c) for c in enc.calls) == 2 and sum(updates) == 7 + 5
    assert updates == [len(c) for c in enc.calls]


def test_stale_cache_after_a_query_text_change_is_refused(seven, tmp_path):
    """The query texts are fingerprinted too (a fault that drops their digest passes the corpus test)."""
    encode_dataset(seven, SPEC, cache_dir=tmp_path, model=FakeEncoder(), progress=False)
    (seven / "queries.jsonl").write_text((seven / "queries.jsonl").read_text().replace('"ask 3"', '"asked"'))
    with pytest.raises(ValueError, match=r"stale cache.*quer.*--overwrite"):
        load_embeddings(load_beir(seven), SPEC, cache_dir=tmp_path)


@pytest.mark.parametrize("change", [dict(query_prefix="query: "), dict(document_prefix="passage: "),
                                    dict(max_tokens=128), dict(normalize=False), dict(dtype="float32")])
def test_cache_of_other_encoder_settings_is_refused(seven, tmp_path, change):
    import dataclasses

    encode_dataset(seven, SPEC, cache_dir=tmp_path, model=FakeEncoder(), progress=False)
    other = dataclasses.replace(SPEC, **change)
    with pytest.raises(ValueError, match=r"stale cache|encoder"):
        load_embeddings(load_beir(seven), other, cache_dir=tmp_path)
    load_embeddings(load_beir(seven), SPEC, cache_dir=tmp_path)  # the settings it was built with pass


class InfoEncoder(FakeEncoder):
    """A FakeEncoder that describes itself as sentence-transformers encoders do (``info()``)."""

    def info(self):
        return {"package_version": "9.9.9", "model_path": "/models/fake", "dimension": 99, "device": "cpu (test)",
                "batch_size": 4}


def test_meta_json_has_the_published_layout(seven, tmp_path, shared_dir):
    # the independent reference: the shipped caches' meta.json (written outside asymgeo, see
    # ../shared/embeddings/*/*/meta.json): every field both record has the same name and type
    shipped = json.loads((shared_dir / "embeddings" / "scifact" / "all-MiniLM-L6-v2" / "meta.json").read_text())
    emb = encode_dataset(seven, SPEC, cache_dir=tmp_path, model=InfoEncoder(), progress=False, command="embed x")
    meta = json.loads((emb.path / "meta.json").read_text())
    common = {"model_name", "source", "dimension", "prefixes", "document_text", "max_tokens", "normalised", "dtype",
              "shapes", "row_order", "python_version", "numpy_version", "date", "encode_wall_seconds"}
    assert common <= set(shipped) and common <= set(meta)
    for key in common:
        assert type(meta[key]) is type(shipped[key]), key
    assert set(meta["source"]) == set(shipped["source"]) == {"package", "version", "model_path"}
    assert set(meta["prefixes"]) == {"query", "document"} and set(meta["shapes"]) == {"corpus", "queries"}
    assert meta["row_order"] == shipped["row_order"] and meta["dtype"] == shipped["dtype"] == "float16"
    # the values of this cache, by hand
    assert meta["format"] == "asymgeo-embeddings/1"          # the format name readers check
    assert meta["model_name"] == "fake/model" and meta["encoder"] == "fake-enc"
    assert meta["source"] == {"package": SPEC.package, "version": "9.9.9", "model_path": "/models/fake"}
    assert meta["dimension"] == 6 and meta["shapes"] == {"corpus": [7, 6], "queries": [5, 6]}
    assert meta["prefixes"] == {"query": "Q: ", "document": "D: "}
    assert meta["document_text"] == 'document_prefix + title + " " + text if title non-empty else document_prefix + text'
    assert meta["max_tokens"] == 256 and meta["normalised"] is True and meta["chunk_size"] == 2048
    assert meta["dataset"] == {"name": "seven", "path": str(seven.resolve())}
    assert set(meta["encode_wall_seconds"]) == {"queries", "corpus"}
    assert meta["command"] == "embed x"
    assert meta["device"] == "cpu (test)" and meta["batch_size"] == 4   # the encoder's own facts are kept
    import sys as _sys

    assert meta["python_version"] == _sys.version.split()[0] and meta["numpy_version"] == np.__version__
    assert meta["date"][:4].isdigit() and meta["date"].endswith("+00:00")
    assert set(meta["fingerprint"]["files"]) == {"corpus_ids.txt", "query_ids.txt"}


def _edit_lines(path, edit):
    lines = path.read_text().splitlines()
    edit(lines)
    path.write_text("\n".join(lines) + "\n")


def _swap12(lines):
    lines[1], lines[2] = lines[2], lines[1]


def _drop_fingerprint(emb):
    meta = json.loads((emb.path / "meta.json").read_text())
    del meta["fingerprint"]
    (emb.path / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("case", ["n_queries", "doc_order", "query_order", "doc_text", "doc_title", "query_text",
                                  "query_id_file", "legacy_query_line", "legacy_query_count", "prefix"])
def test_every_refusal_names_what_changed_and_how_to_rebuild(seven, tmp_path, case):
    # the whole message, written out by hand for each difference verify_cache looks for
    import dataclasses

    from asymgeo.data import verify_cache

    emb = encode_dataset(seven, SPEC, cache_dir=tmp_path, model=FakeEncoder(), progress=False)
    hint = f"rebuild it with `asymgeo embed {seven} --encoder fake-enc --overwrite`"
    stale = f"{emb.path}: stale cache, the {{}} of {seven} changed since it was encoded"
    spec = SPEC
    if case == "n_queries":
        _edit_lines(seven / "queries.jsonl", lambda ls: ls.pop())
        want = stale.format("number of queries") + f" (5 in the cache, 4 now); {hint}"
    elif case == "doc_order":
        _edit_lines(seven / "corpus.jsonl", _swap12)
        want = stale.format("document ids or their order") + f"; {hint}"
    elif case == "query_order":
        _edit_lines(seven / "queries.jsonl", _swap12)
        want = stale.format("query ids or their order") + f"; {hint}"
    elif case == "doc_text":
        (seven / "corpus.jsonl").write_text((seven / "corpus.jsonl").read_text().replace('"text 2"', '"other"'))
        want = stale.format("document texts") + f"; {hint}"
    elif case == "doc_title":  # a title is encoded with its text ("D: T text 1"): the ids and texts stay
        (seven / "corpus.jsonl").write_text((seven / "corpus.jsonl").read_text().replace('"title": "T"', '"title": "U"', 1))
        want = stale.format("document texts") + f"; {hint}"
    elif case == "query_text":
        (seven / "queries.jsonl").write_text((seven / "queries.jsonl").read_text().replace('"ask 3"', '"asked"'))
        want = stale.format("query texts") + f"; {hint}"
    elif case == "query_id_file":
        _edit_lines(emb.path / "query_ids.txt", _swap12)
        want = f"{emb.path / 'query_ids.txt'}: changed since the cache was written (checksum differs); {hint}"
    elif case == "legacy_query_line":
        _drop_fingerprint(emb)
        _edit_lines(emb.path / "query_ids.txt", _swap12)
        want = (f"{emb.path / 'query_ids.txt'}, line 2: id 'q2' but {seven / 'queries.jsonl'} has 'q1' there "
                f"(rows would be scored as the wrong queries); {hint}")
    elif case == "legacy_query_count":
        _drop_fingerprint(emb)
        _edit_lines(seven / "queries.jsonl", lambda ls: ls.pop())
        want = f"{emb.path / 'query_ids.txt'}: 5 ids but {seven / 'queries.jsonl'} has 4 queries; the cache is stale, {hint}"
    else:
        spec = dataclasses.replace(SPEC, query_prefix="query: ")
        want = (f"{emb.path}: encoded with encoder setting prefixes = {{'query': 'Q: ', 'document': 'D: '}}, "
                f"but fake-enc now has {{'query': 'query: ', 'document': 'D: '}}; {hint}")
    with pytest.raises(ValueError) as err:
        load_embeddings(load_beir(seven), spec, cache_dir=tmp_path)
    assert str(err.value) == want
    cache = load_embeddings(load_beir(seven), spec, cache_dir=tmp_path, verify=False)
    with pytest.raises(ValueError) as err2:  # verify_cache says the same when called directly
        verify_cache(cache, load_beir(seven), spec)
    assert str(err2.value) == want


def test_write_embeddings_checks_shapes_builds_beside_and_refreshes_the_id_digests(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    C, Q = rng.standard_normal((4, 3)), rng.standard_normal((2, 3))
    dest = tmp_path / "deep" / "er" / "enc"                       # parents are created
    cases = [
        (C[0], ["a", "b", "c", "d"], Q, "corpus: expected shape (4, p), got (3,)"),
        (C, ["a", "b", "c"], Q, "corpus: expected shape (3, p), got (4, 3)"),
        (C, ["a", "b", "c", "d"], Q[0], "queries: expected shape (2, 3), got (3,)"),
        (C, ["a", "b", "c", "d"], Q[:, :2], "queries: expected shape (2, 3), got (2, 2)"),
    ]
    for corpus, cids, queries, message in cases:
        with pytest.raises(ValueError) as err:
            write_embeddings(dest, corpus, cids, queries, ["q1", "q2"], {})
        assert str(err.value) == message
    assert not (tmp_path / "deep").exists()                      # nothing written on bad input
    builds: list = []
    import tempfile as _tempfile

    real = _tempfile.mkdtemp
    monkeypatch.setattr(_tempfile, "mkdtemp", lambda **kw: builds.append(kw) or real(**kw))
    stale_fp = {"dataset": {"n_corpus": 4}, "files": {"corpus_ids.txt": "old", "query_ids.txt": "old"}}
    out = write_embeddings(dest, C, ["a", "b", "c", "d"], Q, ["q1", "q2"], {"fingerprint": stale_fp})
    assert out == dest and builds and builds[0]["dir"] == dest.parent   # built beside it: one rename away
    assert sorted(p.name for p in dest.parent.iterdir()) == ["enc"]     # and the build folder is gone
    meta = json.loads((dest / "meta.json").read_text())
    assert meta["format"] == "asymgeo-embeddings/1" and meta["dtype"] == "float16" and meta["dimension"] == 3
    assert meta["shapes"] == {"corpus": [4, 3], "queries": [2, 3]}
    assert meta["fingerprint"]["dataset"] == {"n_corpus": 4}
    assert meta["fingerprint"]["files"] == {                    # digests of the files as written
        "corpus_ids.txt": hashlib.sha256(b"a\nb\nc\nd\n").hexdigest(),
        "query_ids.txt": hashlib.sha256(b"q1\nq2\n").hexdigest()}
    kept = write_embeddings(tmp_path / "k", C, list("abcd"), Q, ["q1", "q2"], {"format": "custom/9"})
    assert json.loads((kept / "meta.json").read_text())["format"] == "custom/9"   # a caller's format is kept
    assert "fingerprint" not in json.loads((kept / "meta.json").read_text())


class NaNEncoder(FakeEncoder):
    """Returns a non-finite vector for one text, or switches dimension after the first call."""

    def __init__(self, bad_text=None, shrink=False):
        super().__init__()
        self.bad_text, self.shrink = bad_text, shrink

    def encode(self, texts):
        out = super().encode(texts)
        if self.bad_text in texts:
            out[texts.index(self.bad_text), 2] = np.nan
        if self.shrink and len(self.calls) > 1:
            out = out[:, :5]
        return out


def test_encoder_faults_are_named_with_the_row(seven, tmp_path):
    # chunk_size 3: "D: text 4" is corpus row 4, the second row of the second chunk
    with pytest.raises(ValueError) as err:
        encode_dataset(seven, SPEC, cache_dir=tmp_path, model=NaNEncoder(bad_text="D: text 4"), chunk_size=3,
                       progress=False)
    assert str(err.value) == "encoder 'fake-enc': non-finite embedding for corpus row 4"
    with pytest.raises(ValueError) as err:
        encode_dataset(seven, SPEC, cache_dir=tmp_path / "b", model=NaNEncoder(shrink=True), chunk_size=3,
                       progress=False)
    assert str(err.value) == "encoder 'fake-enc': dimension changed from 6 to 5"


@pytest.mark.parametrize("damage", ["meta_list", "short_queries", "short_corpus", "int_arrays", "meta_shapes"])
def test_damaged_cache_folder_is_refused_with_the_exact_reason(seven, tmp_path, damage):
    emb = encode_dataset(seven, SPEC, cache_dir=tmp_path, model=FakeEncoder(), progress=False)
    p = emb.path
    if damage == "meta_list":
        (p / "meta.json").write_text("[]")
        want = f"{p / 'meta.json'}: expected a JSON object"
    elif damage == "short_queries":
        np.save(p / "queries.npy", np.load(p / "queries.npy")[:4])
        want = f"{p / 'queries.npy'}: 4 rows but query_ids.txt has 5 ids"
    elif damage == "short_corpus":
        np.save(p / "corpus.npy", np.load(p / "corpus.npy")[:6])
        want = f"{p / 'corpus.npy'}: 6 rows but corpus_ids.txt has 7 ids"
    elif damage == "int_arrays":
        np.save(p / "queries.npy", np.ones((5, 6), dtype=np.int64))
        want = f"{p}: expected floating arrays, got float16 / int64"
    else:
        meta = json.loads((p / "meta.json").read_text())
        meta["shapes"]["corpus"] = [8, 6]
        (p / "meta.json").write_text(json.dumps(meta))
        want = f"{p / 'meta.json'}: shapes.corpus = [8, 6] but corpus.npy has shape [7, 6]"
    for mmap in (True, False):
        with pytest.raises(ValueError) as err:
            load_embeddings(load_beir(seven), SPEC, cache_dir=tmp_path, mmap=mmap)
        assert str(err.value) == want


# --------------------------------------------------------------------------- rarely taken refusals (issue #19)
def _interrupted_build(seven, tmp_path):
    """A cache folder whose encoding crashed on its third chunk (chunks of 2): queries 0-3 done."""
    cache = tmp_path / "cache"
    with pytest.raises(RuntimeError):
        encode_dataset(seven, SPEC, cache_dir=cache, model=FakeEncoder(fail_on_call=3), chunk_size=2, progress=False)
    return cache


def test_an_empty_id_line_is_refused_with_its_line_number(tmp_path):
    path = _unit_cache(tmp_path)
    (path / "corpus_ids.txt").write_text("c0\n\nc2\nc3\n")
    with pytest.raises(ValueError, match=r"corpus_ids.txt, line 2: empty id"):
        load_embeddings("ds", "enc", cache_dir=tmp_path, validate=False)


def test_rows_of_a_single_string_id_are_refused(tmp_path):
    _unit_cache(tmp_path)
    emb = load_embeddings("ds", "enc", cache_dir=tmp_path)
    with pytest.raises(TypeError, match="document ids: expected a sequence of ids, got a single string 'c1'"):
        emb.corpus_rows("c1")
    with pytest.raises(TypeError, match="query ids: expected a sequence"):
        emb.query_rows("q0")
    assert emb.corpus_rows(["c1"]).tolist() == [1]


def test_a_one_dimensional_array_is_refused(tmp_path):
    path = _unit_cache(tmp_path)
    np.save(path / "queries.npy", np.ones(4, np.float16))
    with pytest.raises(ValueError, match=r"queries.npy: expected a 2-d \(rows, p\) array, got shape \(4,\)"):
        load_embeddings("ds", "enc", cache_dir=tmp_path)


def test_a_cache_with_no_query_rows_is_refused(tmp_path):
    # written complete but empty: every check of shapes passes, the row validation refuses it
    write_embeddings(tmp_path / "ds" / "enc", np.eye(4), [f"c{i}" for i in range(4)], np.zeros((0, 4)), [], {})
    with pytest.raises(ValueError, match=r"queries.npy: no rows \(rebuild the cache with `asymgeo embed"):
        load_embeddings("ds", "enc", cache_dir=tmp_path)


def test_an_id_with_a_line_break_is_refused_and_nothing_is_written(tmp_path):
    with pytest.raises(ValueError, match=r"corpus_ids.txt: id 'c\\n1' contains a line break"):
        write_embeddings(tmp_path / "ds" / "enc", np.eye(2), ["c0", "c\n1"], np.eye(2), ["a", "b"], {})
    assert not (tmp_path / "ds" / "enc").exists()
    assert list((tmp_path / "ds").iterdir()) == []  # the build folder is removed too


def test_assembling_fewer_rows_than_planned_is_refused_before_the_file_exists(tmp_path):
    from asymgeo.data.encoding import _assemble

    parts = []
    for i in range(2):
        parts.append(tmp_path / f"p{i}.npy")
        np.save(parts[-1], np.ones((3, 2), np.float16))
    dest = tmp_path / "out.npy"
    with pytest.raises(ValueError, match=f"{dest}: assembled 6 rows, expected 7"):
        _assemble(parts, dest, 7, 2)
    assert not dest.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["p0.npy", "p1.npy"]
    _assemble(parts, dest, 6, 2)
    np.testing.assert_array_equal(np.load(dest), np.ones((6, 2), np.float16))


def test_a_damaged_chunk_is_encoded_again_on_resume(seven, tmp_path):
    cache = _interrupted_build(seven, tmp_path)
    parts = cache / "seven" / "fake-enc.partial" / ".partial"
    (parts / "queries-000001.npy").write_bytes(b"\x93NUMPY garbage")  # a chunk cut short by a crash
    resumed = FakeEncoder()
    emb = encode_dataset(seven, SPEC, cache_dir=cache, model=resumed, chunk_size=2, progress=False)
    assert resumed.calls[0] == ["Q: ask 2", "Q: ask 3"], "the damaged chunk is redone first"
    assert sum(len(c) for c in resumed.calls) == 12 - 2  # chunk 0 is kept
    Qe, Ce = _expected(seven)
    np.testing.assert_array_equal(emb.queries, Qe)
    np.testing.assert_array_equal(emb.corpus, Ce)


def test_a_damaged_manifest_starts_the_build_afresh(seven, tmp_path):
    cache = _interrupted_build(seven, tmp_path)
    (cache / "seven" / "fake-enc.partial" / ".partial" / "manifest.json").write_text("{not json")
    fresh = FakeEncoder()
    emb = encode_dataset(seven, SPEC, cache_dir=cache, model=fresh, chunk_size=2, progress=False)
    assert sum(len(c) for c in fresh.calls) == 12, "no chunk of an unknown build is trusted"
    np.testing.assert_array_equal(emb.corpus, _expected(seven)[1])


@pytest.mark.parametrize("empty", ["corpus", "queries"])
def test_nothing_to_encode_is_refused_naming_the_file(tmp_path, empty):
    docs = [] if empty == "corpus" else [doc("d0")]
    qs = [] if empty == "queries" else [query("q0")]
    root = write_beir(tmp_path / "empty", docs, qs, {"test": []})
    name = "corpus.jsonl" if empty == "corpus" else "queries.jsonl"
    what = "documents" if empty == "corpus" else "queries"
    with pytest.raises(ValueError, match=f"{name}: no {what} to encode"):
        encode_dataset(root, SPEC, cache_dir=tmp_path / "cache", model=FakeEncoder(), progress=False)
    assert not (tmp_path / "cache").exists()


def test_a_file_where_the_build_folder_goes_is_refused(seven, tmp_path):
    build = tmp_path / "cache" / "seven" / "fake-enc.partial"
    build.parent.mkdir(parents=True)
    build.write_text("a user's file")
    with pytest.raises(NotADirectoryError, match="fake-enc.partial: expected a folder for the cache being built"):
        encode_dataset(seven, SPEC, cache_dir=tmp_path / "cache", model=FakeEncoder(), progress=False)
    assert build.read_text() == "a user's file"


# --------------------------------------------------------------------------- survivors of mutation testing (issue #19)
def test_has_corpus_id_and_query_rows_of_a_wrong_count(tmp_path):
    path = _unit_cache(tmp_path)
    emb = load_embeddings("ds", "enc", cache_dir=tmp_path)
    assert emb.has_corpus_id("c1") and not emb.has_corpus_id("zz")
    assert emb.corpus_rows(["c3", "c1"]).dtype == np.int64
    with pytest.raises(ValueError, match=r"queries: expected shape \(3, 4\), got \(2, 4\)"):
        write_embeddings(path, np.eye(4), [f"c{i}" for i in range(4)], np.eye(4)[:2], ["a", "b", "c"], {})


@pytest.mark.parametrize("damage", ["float32", "short"])
def test_a_part_of_the_wrong_type_or_length_is_encoded_again(seven, tmp_path, damage):
    cache = _interrupted_build(seven, tmp_path)
    part = cache / "seven" / "fake-enc.partial" / ".partial" / "queries-000000.npy"
    good = np.load(part)
    np.save(part, good.astype(np.float32) if damage == "float32" else good[:1])
    resumed = FakeEncoder()
    emb = encode_dataset(seven, SPEC, cache_dir=cache, model=resumed, chunk_size=2, progress=False)
    assert resumed.calls[0] == ["Q: ask 0", "Q: ask 1"], "the damaged chunk is redone"
    np.testing.assert_array_equal(emb.queries, _expected(seven)[0])


@pytest.mark.parametrize("kw, name", [(dict(chunk_size=0), "chunk_size"), (dict(batch_size=0), "batch_size")])
def test_encode_sizes_are_checked_by_name(seven, tmp_path, kw, name):
    with pytest.raises(ValueError, match=f"^{name}: "):
        encode_dataset(seven, SPEC, cache_dir=tmp_path / "cache", model=FakeEncoder(), progress=False, **kw)
    assert not (tmp_path / "cache").exists()


def test_recorded_encoding_times_are_durations(seven, tmp_path):
    import time

    t0 = time.perf_counter()
    emb = encode_dataset(seven, SPEC, cache_dir=tmp_path / "cache", model=FakeEncoder(), progress=False)
    wall = time.perf_counter() - t0
    times = emb.meta["encode_wall_seconds"]
    assert set(times) == {"queries", "corpus"} and all(0 <= v <= wall + 0.01 for v in times.values())


def test_an_encoder_returning_one_dimensional_rows_is_named(seven, tmp_path):
    class Flat(FakeEncoder):
        def encode(self, texts):
            return np.ones(len(texts))

    with pytest.raises(ValueError) as e:
        encode_dataset(seven, SPEC, cache_dir=tmp_path / "cache", model=Flat(), progress=False)
    assert str(e.value) == "encoder 'fake-enc': returned shape (5,) for 5 texts"


def test_us_spelling_of_normalised_is_honoured(tmp_path):
    C = np.eye(4, dtype=np.float32)
    C[2, 0] = 1000.0
    write_embeddings(tmp_path / "ds" / "enc", C, [f"c{i}" for i in range(4)], np.eye(4)[:2], ["q0", "q1"],
                     {"normalized": True})
    with pytest.raises(ValueError, match=r"corpus.npy, row 2 \(id 'c2'\): norm far from 1"):
        load_embeddings("ds", "enc", cache_dir=tmp_path)


def test_rows_past_the_dimension_are_validated_block_by_block(tmp_path):
    from asymgeo.data.cache import validate_embeddings

    C = np.eye(4, dtype=np.float32)[[0, 1, 2, 3, 0, 1, 2, 3, 0]]  # 9 rows of dimension 4
    C[7] = np.nan
    write_embeddings(tmp_path / "ds" / "enc", C, [f"c{i}" for i in range(9)], np.eye(4)[:1], ["q0"],
                     {"normalised": True})
    emb = load_embeddings("ds", "enc", cache_dir=tmp_path, validate=False)
    with pytest.raises(ValueError) as e:
        validate_embeddings(emb, block_rows=2)
    assert str(e.value).startswith(f"{emb.path / 'corpus.npy'}, row 7 (id 'c7'): non-finite values (NaN or inf)")


def test_id_files_duplicates_and_a_missing_final_newline(tmp_path):
    path = _unit_cache(tmp_path)
    (path / "query_ids.txt").write_text("q0\nq1")  # no trailing newline: still two ids
    assert load_embeddings("ds", "enc", cache_dir=tmp_path).query_ids == ["q0", "q1"]
    (path / "corpus_ids.txt").write_text("c0\nc1\nc0\nc3\n")
    with pytest.raises(ValueError) as e:
        load_embeddings("ds", "enc", cache_dir=tmp_path)
    assert str(e.value) == f"{path / 'corpus_ids.txt'}: duplicate corpus id 'c0' on lines 1 and 3"


def test_memory_mapping_follows_the_argument_and_object_arrays_are_refused(tmp_path):
    path = _unit_cache(tmp_path)
    mm = load_embeddings("ds", "enc", cache_dir=tmp_path)
    assert isinstance(mm.corpus, np.memmap) and isinstance(mm.queries, np.memmap)
    ram = load_embeddings("ds", "enc", cache_dir=tmp_path, mmap=False)
    assert not isinstance(ram.corpus, np.memmap) and not isinstance(ram.queries, np.memmap)
    np.save(path / "queries.npy", np.array([[1, "a"]], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match=r"queries.npy: not a readable .npy array \(Object arrays cannot be loaded"):
        load_embeddings("ds", "enc", cache_dir=tmp_path, mmap=False)


def test_folder_damage_messages_in_full(tmp_path):
    path = write_embeddings(tmp_path / "ds" / "enc", np.eye(3)[:2], ["a", "b"], np.eye(3)[:1], ["q"], {})
    np.save(path / "corpus.npy", np.eye(3, dtype=np.float16))  # 3 rows of dimension 3
    with pytest.raises(ValueError) as e:
        load_embeddings("ds", "enc", cache_dir=tmp_path)
    assert str(e.value) == f"{path / 'corpus.npy'}: 3 rows but corpus_ids.txt has 2 ids"
    path = write_embeddings(tmp_path / "ds" / "enc", np.eye(3)[:2], ["a", "b"], np.eye(3)[:1], ["q"], {})
    np.save(path / "corpus.npy", np.ones((2, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="expected floating arrays, got int64 / float16"):
        load_embeddings("ds", "enc", cache_dir=tmp_path)
    path = write_embeddings(tmp_path / "ds" / "enc", np.eye(3)[:2], ["a", "b"], np.eye(3)[:1], ["q"], {})
    meta = json.loads((path / "meta.json").read_text())
    meta["shapes"]["queries"] = [2, 3]
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError) as e:
        load_embeddings("ds", "enc", cache_dir=tmp_path)
    assert str(e.value) == f"{path / 'meta.json'}: shapes.queries = [2, 3] but queries.npy has shape [1, 3]"
    meta["shapes"]["queries"] = [1, 3]
    meta["dimension"] = 5
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError) as e:
        load_embeddings("ds", "enc", cache_dir=tmp_path)
    assert str(e.value).endswith("(a damaged or mixed-up cache); rebuild it with asymgeo embed --overwrite")


def test_a_legacy_in_folder_partial_build_is_named(tmp_path):
    path = tmp_path / "ds" / "enc"
    (path / ".partial").mkdir(parents=True)
    with pytest.raises(FileNotFoundError) as e:
        load_embeddings("ds", "enc", cache_dir=tmp_path)
    assert str(e.value) == (f"{path / 'meta.json'}: missing, the cache is incomplete (an interrupted encoding: "
                            "rerun `asymgeo embed` to resume)")


def test_fingerprints_without_encoder_or_file_records_still_verify(seven, tmp_path):
    emb = encode_dataset(seven, SPEC, cache_dir=tmp_path, model=FakeEncoder(), progress=False)
    meta = json.loads((emb.path / "meta.json").read_text())
    del meta["fingerprint"]["encoder"]
    meta["fingerprint"]["files"] = []
    (emb.path / "meta.json").write_text(json.dumps(meta))
    again = load_embeddings(load_beir(seven), SPEC, cache_dir=tmp_path)
    assert again.corpus_ids == emb.corpus_ids


def test_an_id_mismatch_names_the_line_the_file_and_the_rebuild(seven, tmp_path):
    emb = encode_dataset(seven, SPEC, cache_dir=tmp_path, model=FakeEncoder(), progress=False)
    meta = json.loads((emb.path / "meta.json").read_text())
    del meta["fingerprint"]  # a legacy cache: checked by its ids
    (emb.path / "meta.json").write_text(json.dumps(meta))
    ids = (emb.path / "corpus_ids.txt").read_text().splitlines()
    ids[1], ids[2] = ids[2], ids[1]
    (emb.path / "corpus_ids.txt").write_text("".join(f"{i}\n" for i in ids))
    ds = load_beir(seven)
    with pytest.raises(ValueError) as e:
        load_embeddings(ds, SPEC, cache_dir=tmp_path)
    assert str(e.value) == (f"{emb.path / 'corpus_ids.txt'}, line 2: id 'd2' but {ds.corpus_file} has 'd1' there "
                            f"(rows would be scored as the wrong documents); rebuild it with `asymgeo embed "
                            f"{ds.path} --encoder fake-enc --overwrite`")
