"""Encoding across workers (issue #21): local process pools and Ray give the one-process cache byte for
byte; a dead worker's chunks are redone; an interrupted run resumes; the disk is checked first.

The shipped MiniLM on two workers against a one-process run: tests/data/test_data_cli.py."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
from beir_fixtures import doc, query, write_beir

import asymgeo.data.encoding as encoding_mod
from asymgeo.data import EncoderSpec, encode_dataset

SPEC = EncoderSpec("fake-enc", "fake/model", query_prefix="Q: ", document_prefix="D: ")
N_DOCS, N_QUERIES = 9, 5


# --------------------------------------------------------------------------- picklable fake encoders
class SeededEncoder:
    """Text -> vector seeded by the text's sha256 (module level, so worker processes can unpickle it).

    Each encode call is logged, one line per text, to ``<log_dir>/<pid>.log`` when ``log_dir`` is set.
    """

    batch_size = 2

    def __init__(self, dim=6, log_dir=None):
        self.dim, self.log_dir = dim, log_dir

    @staticmethod
    def vector(text, dim=6):
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(dim) * 3.0

    def encode(self, texts):
        if self.log_dir is not None:
            with open(Path(self.log_dir) / f"{os.getpid()}.log", "a", encoding="utf-8") as fh:
                fh.write("".join(t + "\n" for t in texts))
        return np.stack([self.vector(t, self.dim) for t in texts])


class DeclaredEncoder(SeededEncoder):
    """A SeededEncoder that states its dimension (as SentenceTransformerEncoder does)."""

    def __init__(self, dim=6, log_dir=None):
        super().__init__(dim, log_dir)
        self.dimension = dim


class CrashingEncoder(SeededEncoder):
    """Ends its process (``os._exit(1)``, as an out-of-memory kill would) on the chunk holding ``text``:
    once (a marker file records it) or every time; before that it waits until ``wait_for`` is saved."""

    def __init__(self, text, marker, wait_for=None, always=False, log_dir=None):
        super().__init__(log_dir=log_dir)
        self.text, self.marker, self.wait_for, self.always = text, str(marker), wait_for, always

    def encode(self, texts):
        out = super().encode(texts)
        if self.text in texts and (self.always or not os.path.exists(self.marker)):
            _wait_for(self.wait_for)
            Path(self.marker).touch()
            os._exit(1)
        return out


class RaisingEncoder(SeededEncoder):
    """Raises on the chunk holding ``text`` once ``wait_for`` is saved (an ordinary encoder error)."""

    def __init__(self, text, wait_for):
        super().__init__()
        self.text, self.wait_for = text, wait_for

    def encode(self, texts):
        if self.text in texts:
            _wait_for(self.wait_for)
            raise RuntimeError("simulated encoder failure")
        return super().encode(texts)


def _wait_for(path, timeout=20.0):
    t0 = time.monotonic()
    while path is not None and not os.path.exists(path) and time.monotonic() - t0 < timeout:
        time.sleep(0.02)


# --------------------------------------------------------------------------- helpers
@pytest.fixture
def nine(tmp_path):
    docs = [doc(f"d{i}", "T" if i % 2 else "", f"text {i}") for i in range(N_DOCS)]
    qs = [query(f"q{i}", f"ask {i}") for i in range(N_QUERIES)]
    return write_beir(tmp_path / "nine", docs, qs, {"test": [("q0", "d0", 1)]})


def _closed_form():
    """The rows by hand: the seeded vectors of the formatted texts, normalised, float16."""
    def rows(texts):
        V = np.stack([SeededEncoder.vector(t) for t in texts])
        return (V / np.linalg.norm(V, axis=1, keepdims=True)).astype(np.float16)

    return (rows([f"Q: ask {i}" for i in range(N_QUERIES)]),
            rows([f"D: T text {i}" if i % 2 else f"D: text {i}" for i in range(N_DOCS)]))


def _files(path):
    return {f: (path / f).read_bytes() for f in ("corpus.npy", "queries.npy", "corpus_ids.txt", "query_ids.txt")}


def _one_process(dataset, tmp_path, encoder=SPEC, **kw):
    """The reference: the same dataset encoded in this process (workers=1; SeededEncoder unless a model is given)."""
    if encoder is SPEC:
        kw.setdefault("model", SeededEncoder())
    emb = encode_dataset(dataset, encoder, cache_dir=tmp_path / "reference", progress=False, **kw)
    return _files(emb.path), emb.meta


def _logged(log_dir):
    lines = []
    for f in sorted(Path(log_dir).glob("*.log")):
        lines += f.read_text(encoding="utf-8").splitlines()
    return lines


def _parts(cache):
    return sorted(p.name for p in (cache / "nine" / "fake-enc.partial" / ".partial").glob("*.npy"))


# --------------------------------------------------------------------------- local process pool
def test_two_local_workers_give_the_one_process_cache_byte_for_byte(nine, tmp_path):
    want, want_meta = _one_process(nine, tmp_path, chunk_size=2)
    emb = encode_dataset(nine, SPEC, cache_dir=tmp_path / "c", model=SeededEncoder(), chunk_size=2,
                         workers=2, threads_per_worker=1, progress=False)
    assert _files(emb.path) == want
    assert emb.meta["fingerprint"] == want_meta["fingerprint"]
    assert emb.meta["encode"] == {"workers": 2, "executor": "local", "threads_per_worker": 1, "mkl_cbwr": "AUTO,STRICT"}
    assert want_meta["encode"] == {"workers": 1, "executor": "local", "threads_per_worker": None,
                                   "mkl_cbwr": "AUTO,STRICT"}
    Qe, Ce = _closed_form()
    np.testing.assert_array_equal(emb.queries, Qe)
    np.testing.assert_array_equal(emb.corpus, Ce)
    assert set(emb.meta["encode_wall_seconds"]) == {"queries", "corpus"}
    assert not (emb.path / ".partial").exists() and not (tmp_path / "c" / "nine" / "fake-enc.partial").exists()


def test_a_dead_worker_is_replaced_and_its_chunks_redone(nine, tmp_path):
    want, _ = _one_process(nine, tmp_path, chunk_size=2)
    cache, logs = tmp_path / "c", tmp_path / "logs"
    logs.mkdir()
    first_part = cache / "nine" / "fake-enc.partial" / ".partial" / "queries-000000.npy"
    enc = CrashingEncoder("D: T text 7", tmp_path / "crashed", wait_for=str(first_part), log_dir=logs)
    emb = encode_dataset(nine, SPEC, cache_dir=cache, model=enc, chunk_size=2, workers=2, threads_per_worker=1,
                         progress=False)
    assert (tmp_path / "crashed").exists(), "the worker did die"
    assert _files(emb.path) == want
    encoded = _logged(logs)
    assert encoded.count("D: T text 7") == 2                  # the chunk being encoded when it died, redone
    assert encoded.count("Q: ask 0") == 1                     # a chunk saved before the crash is kept
    assert set(encoded) == {f"Q: ask {i}" for i in range(N_QUERIES)} | {
        f"D: T text {i}" if i % 2 else f"D: text {i}" for i in range(N_DOCS)}


def test_workers_that_keep_dying_stop_after_two_restarts_naming_the_chunk(nine, tmp_path):
    cache = tmp_path / "c"
    other = cache / "nine" / "fake-enc.partial" / ".partial" / "corpus-000003.npy"   # the chunk before it
    enc = CrashingEncoder("D: text 8", tmp_path / "crashed", wait_for=str(other), always=True)
    with pytest.raises(RuntimeError) as err:
        encode_dataset(nine, SPEC, cache_dir=cache, model=enc, chunk_size=2, workers=2, threads_per_worker=1,
                       progress=False)
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert message.startswith(f"{cache / 'nine' / 'fake-enc.partial' / '.partial' / 'corpus-000004.npy'} "
                              "(corpus rows 8-8): a worker process died while encoding it, the pool was restarted "
                              "2 times and a worker died again")
    assert "rerun to resume" in message
    assert "queries-000000.npy" in _parts(cache) and not (cache / "nine" / "fake-enc").exists()


def test_an_interrupted_multi_worker_run_resumes_from_its_parts(nine, tmp_path):
    want, _ = _one_process(nine, tmp_path, chunk_size=2)
    cache = tmp_path / "c"
    first_part = cache / "nine" / "fake-enc.partial" / ".partial" / "queries-000000.npy"
    with pytest.raises(RuntimeError, match="simulated encoder failure"):
        encode_dataset(nine, SPEC, cache_dir=cache, model=RaisingEncoder("D: text 4", str(first_part)),
                       chunk_size=2, workers=2, threads_per_worker=1, progress=False)
    kept = _parts(cache)
    assert "queries-000000.npy" in kept and "corpus-000002.npy" not in kept
    saved = {name: (cache / "nine" / "fake-enc.partial" / ".partial" / name).read_bytes() for name in kept}
    logs = tmp_path / "logs"
    logs.mkdir()
    emb = encode_dataset(nine, SPEC, cache_dir=cache, model=SeededEncoder(log_dir=logs), chunk_size=2, workers=2,
                         threads_per_worker=1, progress=False)
    assert _files(emb.path) == want
    # exactly the chunks without a part were encoded again
    texts = {"queries": [f"Q: ask {i}" for i in range(N_QUERIES)],
             "corpus": [f"D: T text {i}" if i % 2 else f"D: text {i}" for i in range(N_DOCS)]}
    redone = sorted(t for kind, ts in texts.items() for j, t in enumerate(ts)
                    if f"{kind}-{j // 2:06d}.npy" not in kept)
    assert sorted(_logged(logs)) == redone
    assert len(saved) >= 1


def test_progress_moves_per_finished_chunk(nine, tmp_path, monkeypatch):
    import tqdm.auto

    updates = []

    class Bar:
        def __init__(self, *a, **k):
            updates.append(("initial", k.get("initial"), k.get("total")))

        def update(self, n):
            updates.append(n)

        def close(self):
            pass

    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    encode_dataset(nine, SPEC, cache_dir=tmp_path / "c", model=DeclaredEncoder(), chunk_size=2, workers=2,
                   threads_per_worker=1, progress=True)
    assert updates[0] == ("initial", 0, N_DOCS + N_QUERIES)
    assert sorted(updates[1:]) == sorted([2, 2, 1] + [2, 2, 2, 2, 1])   # one update per chunk


def test_an_unpicklable_model_is_refused_for_workers(nine, tmp_path):
    enc = SeededEncoder()
    enc.hook = lambda texts: texts  # a lambda cannot be pickled
    with pytest.raises(ValueError) as err:
        encode_dataset(nine, SPEC, cache_dir=tmp_path / "c", model=enc, workers=2, progress=False)
    assert str(err.value).startswith("model: the SeededEncoder object cannot be pickled (")
    assert "so it cannot be sent to 2 workers; use workers=1" in str(err.value)
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"workers": 0}, "workers: expected a positive integer"),
        ({"workers": 2.0}, "workers: "),
        ({"workers": True}, "workers: "),
        ({"executor": "dask"}, "executor: expected one of 'local', 'ray', got 'dask'"),
        ({"address": "auto"}, "address: only meaningful with executor='ray' (got address='auto' with executor='local')"),
        ({"executor": "ray", "address": " "}, "address: expected a Ray cluster address"),
        ({"threads_per_worker": 0}, "threads_per_worker: expected a positive integer"),
        ({"workers": 2, "threads_per_worker": "2"}, "threads_per_worker: "),
    ],
)
def test_bad_worker_arguments_are_refused_before_anything_is_read(tmp_path, kw, message):
    with pytest.raises((ValueError, TypeError)) as err:
        encode_dataset(tmp_path / "no-such-dataset", SPEC, cache_dir=tmp_path / "c", model=SeededEncoder(),
                       progress=False, **kw)
    assert str(err.value).startswith(message)
    assert not (tmp_path / "c").exists()


# --------------------------------------------------------------------------- disk space
Usage = namedtuple("Usage", "total used free")


def _free(monkeypatch, free):
    seen = []

    def fake(path):
        seen.append(Path(path))
        return Usage(10**12, 10**12 - free, free)

    monkeypatch.setattr(encoding_mod.shutil, "disk_usage", fake)
    return seen


@pytest.mark.parametrize("workers", [1, 2])
def test_too_little_disk_is_refused_naming_both_sizes_before_any_chunk(nine, tmp_path, monkeypatch, workers):
    seen = _free(monkeypatch, 100)
    enc = DeclaredEncoder(log_dir=tmp_path)
    with pytest.raises(ValueError) as err:
        encode_dataset(nine, SPEC, cache_dir=tmp_path / "c", model=enc, chunk_size=2, workers=workers,
                       progress=False)
    # (9 + 5 rows) x 6 columns x 2 bytes, once as parts and once assembled
    need = (N_DOCS + N_QUERIES) * 6 * 2 * 2
    assert str(err.value) == (f"{tmp_path / 'c' / 'nine' / 'fake-enc'}: the cache needs {need} bytes "
                              "(parts and assembled arrays), 100 bytes free")
    assert not (tmp_path / "c").exists() and _logged(tmp_path) == []   # nothing written, nothing encoded
    assert seen == [tmp_path]   # the nearest existing folder on the cache's file system


def test_an_encoder_without_a_stated_dimension_is_measured_on_its_first_chunk(nine, tmp_path, monkeypatch):
    _free(monkeypatch, 335)
    with pytest.raises(ValueError, match=r": the cache needs 336 bytes \(parts and assembled arrays\), 335 bytes free$"):
        encode_dataset(nine, SPEC, cache_dir=tmp_path / "c", model=SeededEncoder(), chunk_size=2, progress=False)
    assert not (tmp_path / "c").exists()
    _free(monkeypatch, 336)   # exactly enough
    emb = encode_dataset(nine, SPEC, cache_dir=tmp_path / "c", model=SeededEncoder(), chunk_size=2, progress=False)
    np.testing.assert_array_equal(emb.corpus, _closed_form()[1])


def test_parts_already_saved_are_not_counted_again(nine, tmp_path, monkeypatch):
    cache = tmp_path / "c"
    first_part = cache / "nine" / "fake-enc.partial" / ".partial" / "queries-000000.npy"
    with pytest.raises(RuntimeError):
        encode_dataset(nine, SPEC, cache_dir=cache, model=RaisingEncoder("Q: ask 2", str(first_part)),
                       chunk_size=2, progress=False)
    assert _parts(cache) == ["queries-000000.npy"]
    _free(monkeypatch, 10)
    with pytest.raises(ValueError) as err:
        encode_dataset(nine, SPEC, cache_dir=cache, model=DeclaredEncoder(), chunk_size=2, progress=False)
    need = ((N_DOCS + N_QUERIES) + (N_DOCS + N_QUERIES - 2)) * 6 * 2   # assembled + the 12 rows still missing
    assert f"the cache needs {need} bytes" in str(err.value)
    assert _parts(cache) == ["queries-000000.npy"]


def test_sizes_are_written_in_the_largest_unit():
    assert [encoding_mod._format_bytes(n) for n in (288, 4_000, 3_100_000, 9_200_000_000)] == [
        "288 bytes", "4.0 kB", "3.1 MB", "9.2 GB"]


# --------------------------------------------------------------------------- Ray
@pytest.mark.xdist_group("ray")  # one Ray cluster at a time under xdist
@pytest.mark.slow
def test_ray_executor_gives_the_one_process_cache(nine, tmp_path, monkeypatch):
    pytest.importorskip("ray")
    want, want_meta = _one_process(nine, tmp_path, chunk_size=3)
    # the Ray workers import this module (the encoder's class) from the same folders as this process
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in sys.path if p))
    import ray

    assert not ray.is_initialized()
    emb = encode_dataset(nine, SPEC, cache_dir=tmp_path / "c", model=SeededEncoder(), chunk_size=3,
                         executor="ray", workers=2, threads_per_worker=1, progress=False)
    assert not ray.is_initialized(), "a cluster started by encode_dataset is shut down"
    assert _files(emb.path) == want and emb.meta["fingerprint"] == want_meta["fingerprint"]
    assert emb.meta["encode"] == {"workers": 2, "executor": "ray", "threads_per_worker": 1, "address": None,
                                  "mkl_cbwr": "AUTO,STRICT"}


def test_ray_missing_names_the_extra(nine, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install 'asymgeo\[ray\]'"):
        encode_dataset(nine, SPEC, cache_dir=tmp_path / "c", model=SeededEncoder(), executor="ray", progress=False)
    assert not (tmp_path / "c").exists()
