"""CUDA code paths: exact search, adapter training and the batched CARS selector on the GPU.

These need a CUDA GPU and are skipped without one (the CI machines have none; the paths are
checked on a lent GPU machine, see docs/gpu.md).  Expected values come from numpy on the CPU:
brute-force float64 ranking for search, the CPU training run for the adapter, and the numpy
path of ``cars_score(device="cpu")`` for CARS.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from asymgeo import exact_search  # noqa: E402
from asymgeo.retrieval.search import AdapterIndex  # noqa: E402


def _brute_force(Q: np.ndarray, C: np.ndarray, k: int) -> np.ndarray:
    S = Q.astype(np.float64) @ C.astype(np.float64).T
    # descending score, ties to the lower document row (a stable sort of -S)
    return np.argsort(-S, axis=1, kind="stable")[:, :k]


def test_auto_backend_is_cuda_and_exact_on_integer_data():
    # small integers: every product is exact in float32, so ranks (ties included) must match
    rng = np.random.default_rng(0)
    corpus = rng.integers(-3, 4, size=(50_000, 32)).astype(np.float32)
    Q = rng.integers(-3, 4, size=(64, 32)).astype(np.float32)
    res = exact_search(Q, corpus, k=20)
    assert res.backend == "torch:cuda"
    np.testing.assert_array_equal(np.asarray(res.indices), _brute_force(Q, corpus, 20))
    ref = np.take_along_axis(Q @ corpus.T, _brute_force(Q, corpus, 20), axis=1)
    np.testing.assert_array_equal(np.asarray(res.scores), ref)


def test_cuda_matches_numpy_backend_on_float16_corpus_with_operator():
    rng = np.random.default_rng(1)
    corpus = rng.standard_normal((30_000, 48)).astype(np.float16)
    Q = rng.standard_normal((16, 48)).astype(np.float32)
    M = np.eye(48) + 0.1 * rng.standard_normal((48, 48))
    gpu = exact_search(Q, corpus, k=10, operator=M, backend="torch")
    cpu = exact_search(Q, corpus, k=10, operator=M, backend="numpy")
    assert gpu.backend == "torch:cuda"
    np.testing.assert_allclose(np.asarray(gpu.scores), np.asarray(cpu.scores), rtol=1e-5, atol=1e-4)
    same = (np.asarray(gpu.indices) == np.asarray(cpu.indices)).mean()
    assert same > 0.99  # only near-ties (float32 rounding) may swap


def test_adapter_index_on_cuda():
    rng = np.random.default_rng(2)
    corpus = rng.standard_normal((5_000, 24)).astype(np.float32)
    A = rng.standard_normal((4, 24))
    B = rng.standard_normal((4, 24))
    Q = rng.standard_normal((8, 24)).astype(np.float32)
    res = AdapterIndex(corpus, A, B, form="projection").search(Q, k=5, backend="torch")
    assert res.backend == "torch:cuda"
    S = (Q @ A.T) @ (corpus @ B.T).T
    np.testing.assert_array_equal(np.asarray(res.indices), np.argsort(-S, axis=1, kind="stable")[:, :5])


def test_adapter_trains_on_cuda_by_default_and_agrees_with_cpu():
    import sys
    from pathlib import Path

    from asymgeo.adapters import Adapter

    sys.path.insert(0, str(Path(__file__).resolve().parent / "adapters"))
    from adapter_fixtures import make_problem

    pb = make_problem(n=96, m=32, N=400, p=16, k=3, seed=3)
    kw = dict(geometry="dual", rank=4, learning_rates=(1e-2,), epochs=5, batch_size=32, seed=0)
    fit_args = (pb.X, pb.pos, pb.corpus)
    fit_kw = dict(hard_negative_rows=pb.hard, relevant_rows=pb.relevant,
                  validation_queries=pb.V, validation_relevance=pb.table)
    gpu = Adapter(**kw).fit(*fit_args, **fit_kw)
    cpu = Adapter(**kw, device="cpu").fit(*fit_args, **fit_kw)
    assert gpu.device_.startswith("cuda")
    assert cpu.device_ == "cpu"
    assert np.all(np.isfinite(gpu.operator_))
    # same data, same permutations: the two devices differ only by float rounding
    losses_gpu = [h["loss"] for h in gpu.history_ if h.get("loss") is not None]
    losses_cpu = [h["loss"] for h in cpu.history_ if h.get("loss") is not None]
    np.testing.assert_allclose(losses_gpu, losses_cpu, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gpu.operator_, cpu.operator_, rtol=1e-3, atol=1e-3)


def _assert_cars_equal(res, ref, rtol=1e-8):
    scale = max(np.abs(ref.agreement).max(), np.abs(ref.disagreement).max())
    np.testing.assert_allclose(res.agreement, ref.agreement, rtol=rtol, atol=rtol * scale)
    np.testing.assert_allclose(res.disagreement, ref.disagreement, rtol=rtol, atol=rtol * scale)
    assert res.score == pytest.approx(ref.score, rel=rtol, abs=rtol * scale)
    assert res.corrected_distance == pytest.approx(ref.corrected_distance, rel=rtol, abs=rtol * scale)
    assert res.raw_distance == pytest.approx(ref.raw_distance, rel=rtol)
    assert res.choice == ref.choice


def test_cars_auto_takes_the_batched_gpu_path_on_real_nfcorpus_mpnet(shared_dir, record_property):
    """``cars_score(device="auto")`` on CUDA: the batched float64 torch path answers (every
    half and the full moment counted ``batched:torch``) and equals the numpy path to 1e-8
    relative on the NFCorpus MPNet training triples (p = 768, r = 16, L = 20).  Prints both
    times (run with ``-s``; also recorded as junit properties)."""
    import time

    from asymgeo import cars_score
    from asymgeo.data import load_triples
    from asymgeo.linalg.lowrank import path_counts, reset_path_counts

    t = load_triples("nfcorpus", "all-mpnet-base-v2", data_dir=shared_dir / "data",
                     cache_dir=shared_dir / "embeddings")
    X, Yp, Yn = (np.asarray(a, dtype=np.float64) for a in t.arrays())
    kw = dict(rank=16, n_splits=20, seed=0)
    times = {}
    for label in ("gpu_first", "gpu"):  # the first call pays CUDA and cuSOLVER start-up
        reset_path_counts()
        start = time.perf_counter()
        gpu = cars_score(X, Yp, Yn, device="auto", **kw)
        times[label] = time.perf_counter() - start
        assert path_counts().get("batched:torch") == 2 * 20 + 1
    reset_path_counts()
    start = time.perf_counter()
    cpu = cars_score(X, Yp, Yn, device="cpu", **kw)
    times["cpu"] = time.perf_counter() - start
    assert not any(k.startswith("batched:") for k in path_counts())
    _assert_cars_equal(gpu, cpu)
    print(f"\nCARS NFCorpus MPNet n={X.shape[0]} p={X.shape[1]} r=16 L=20 on {torch.cuda.get_device_name()}: "
          f"GPU {times['gpu']:.3f} s (first call {times['gpu_first']:.3f} s), CPU path {times['cpu']:.3f} s")
    for label, seconds in times.items():
        record_property(f"cars_seconds_{label}", round(seconds, 4))


def test_cars_on_cuda_with_ragged_splits_and_selector_equals_cpu():
    from asymgeo import cars_score

    rng = np.random.default_rng(4)
    n, p = 301, 96
    X = rng.standard_normal((n, p))
    Yp = X @ (np.eye(p) + 0.5 * rng.standard_normal((p, p))) + rng.standard_normal((n, p))
    Yn = rng.standard_normal((n, p))
    splits = [(np.arange(0, 100), np.arange(100, 301)), (np.arange(0, 150, 2), np.arange(1, 280, 2))]
    for kw in (dict(n_splits=6, seed=1), dict(splits=splits), dict(n_splits=4, seed=2, selector_dim=48)):
        _assert_cars_equal(cars_score(X, Yp, Yn, 6, device="cuda", **kw), cars_score(X, Yp, Yn, 6, device="cpu", **kw))


# --------------------------------------------------------------------------- issue #21: scale paths on the GPU
def test_corpus_blocks_keep_a_float16_corpus_on_the_device_or_stream_it(tmp_path):
    from asymgeo.adapters.training import CorpusBlocks

    rng = np.random.default_rng(5)
    C = rng.normal(size=(3000, 48)).astype(np.float16)
    np.save(tmp_path / "c.npy", C)
    mm = np.load(tmp_path / "c.npy", mmap_mode="r")
    held = CorpusBlocks(mm, "cuda")
    assert held._tensor is not None and held._tensor.dtype == torch.float16 and held._tensor.is_cuda
    streamed = CorpusBlocks(mm, "cuda", max_device_bytes=C.nbytes - 1)   # does not fit: blocks per use
    assert streamed._tensor is None
    for blocks in (held, streamed):
        got = blocks.block(1000, 2500)
        assert got.is_cuda and got.dtype == torch.float32
        np.testing.assert_array_equal(got.cpu().numpy(), C[1000:2500].astype(np.float32))


def test_validation_scores_on_cuda_equal_the_cpu_ones(tmp_path):
    from asymgeo.adapters.training import CorpusBlocks, ValidationScorer
    from asymgeo.retrieval.metrics import RelevanceTable

    rng = np.random.default_rng(6)
    N, p, m, r = 4000, 32, 40, 4
    C = rng.normal(size=(N, p))
    C = (C / np.linalg.norm(C, axis=1, keepdims=True)).astype(np.float16)
    np.save(tmp_path / "c.npy", C)
    mm = np.load(tmp_path / "c.npy", mmap_mode="r")
    rel = rng.choice(N, size=m, replace=False)
    V = C[rel].astype(np.float32) + 0.3 * rng.normal(size=(m, p)).astype(np.float32)
    table = RelevanceTable({f"q{i}": {f"d{rel[i]}": 1} for i in range(m)}, [f"q{i}" for i in range(m)],
                           [f"d{j}" for j in range(N)])
    A, B = rng.normal(size=(r, p)).astype(np.float32), rng.normal(size=(r, p)).astype(np.float32)
    scales = [0.0, 0.5, 2.0]
    cpu = ValidationScorer(V, table, CorpusBlocks(mm, "cpu")).ndcg_scaled(torch.from_numpy(A), torch.from_numpy(B),
                                                                          scales)
    gpu = ValidationScorer(V, table, CorpusBlocks(mm, "cuda")).ndcg_scaled(
        torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda(), scales)
    np.testing.assert_allclose(gpu, cpu, atol=1e-6)


def test_embed_workers_take_one_gpu_each():
    from asymgeo.data.encode_workers import _worker_devices

    assert _worker_devices(None, None) == [f"cuda:{k}" for k in range(torch.cuda.device_count())]
    assert _worker_devices(None, "cpu") == ["cpu"]


def test_a_pooled_fit_on_cuda_records_the_pool_and_tests_on_the_whole_corpus(tmp_path):
    """``fit_adapter(validation_pool=K)`` on the GPU (the device picked without a flag): the same pool as
    on the CPU (it comes from one exact frozen search), selection on it, and test figures equal to a
    float64 brute-force ranking of the whole corpus through the trained operator."""
    from asymgeo.adapters.workflow import fit_adapter
    from asymgeo.data import encode_dataset, load_beir, load_embeddings
    from asymgeo.data.synthetic import make_synthetic_beir

    make_synthetic_beir(tmp_path / "data" / "syn", 4000, n_train=150, n_dev=40, n_test=40, seed=1)
    dirs = {"data_dir": tmp_path / "data", "cache_dir": tmp_path / "emb"}
    encode_dataset("syn", "synthetic-hash-768", progress=False, **dirs)
    kw = {"geometry": "shared", "rank": 8, "epochs": 2, "learning_rates": (1e-3,), "seed": 0, "report": False, **dirs}
    gpu = fit_adapter("syn", "synthetic-hash-768", validation_pool=20, **kw)
    cpu = fit_adapter("syn", "synthetic-hash-768", validation_pool=20, device="cpu", **kw)
    assert gpu.metrics["validation_pool"]["documents"] == cpu.metrics["validation_pool"]["documents"] < 4000
    ds = load_beir("syn", data_dir=dirs["data_dir"])
    emb = load_embeddings(ds, "synthetic-hash-768", cache_dir=dirs["cache_dir"])
    qrels = ds.all_qrels()
    test_ids = [q for q in ds.labelled_query_ids("test") if q in qrels]
    T = np.asarray(emb.queries[emb.query_rows(test_ids)], dtype=np.float64)
    C = np.asarray(emb.corpus, dtype=np.float64)
    top = np.argsort(-(T @ np.asarray(gpu.adapter.operator_, dtype=np.float64) @ C.T), axis=1, kind="stable")[:, :10]
    ndcg = []
    for q, row in zip(test_ids, top, strict=True):
        rel = {d for d, g in qrels[q].items() if g > 0}
        dcg = sum(1.0 / np.log2(i + 2) for i, j in enumerate(row) if emb.corpus_ids[int(j)] in rel)
        ndcg.append(dcg / sum(1.0 / np.log2(i + 2) for i in range(min(10, len(rel)))))
    assert gpu.metrics["trained"]["test_ndcg@10"] == pytest.approx(np.mean(ndcg), abs=1e-4)
