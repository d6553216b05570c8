"""Approximate index (FAISS IVF / HNSW) for mining: checked against brute-force numpy top-k."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("faiss")

from asymgeo.retrieval import approximate as approx_mod  # noqa: E402
from asymgeo.retrieval.approximate import ApproximateIndex, ivf_parameters, recall_at_k  # noqa: E402
from asymgeo.retrieval.search import SearchResult  # noqa: E402


def brute_top(Q, C, k):
    """(scores, rows) of the exact top-k in float64, best first, ties to the lower row."""
    S = np.asarray(Q, np.float64) @ np.asarray(C, np.float64).T
    rows = np.argsort(-S, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(S, rows, 1), rows, S


def overlap(rows_a, rows_b):
    """Mean |a_i & b_i| / k, computed here with Python sets."""
    k = rows_b.shape[1]
    return float(np.mean([len(set(a.tolist()) & set(b.tolist())) / k for a, b in zip(rows_a, rows_b)]))


def clustered(n_docs, n_queries, p, n_clusters, noise, seed):
    """Unit vectors around random unit centres (documents and queries from the same centres)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_clusters, p))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)

    def draw(m):
        X = centres[rng.integers(0, n_clusters, m)] + rng.standard_normal((m, p)) * (noise / np.sqrt(p))
        return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)

    return draw(n_docs), draw(n_queries)


@pytest.fixture(scope="module")
def gaussian():
    rng = np.random.default_rng(11)
    return rng.standard_normal((1500, 24)).astype(np.float32), rng.standard_normal((40, 24)).astype(np.float32)


def test_ivf_scanning_every_list_is_exact_search(gaussian):
    C, Q = gaussian
    k = 10
    want_s, want_i, S = brute_top(Q, C, k)
    index = ApproximateIndex(C, kind="ivf", nlist=16, nprobe=16)
    res = index.search(Q, k)
    assert isinstance(res, SearchResult) and res.backend == "faiss-ivf"
    assert res.scores.dtype == np.float32 and res.indices.dtype == np.int64 and res.indices.shape == (40, k)
    # Gaussian data: the k-th and (k+1)-th scores are far apart, so the sets must agree
    gap = np.sort(S, axis=1)[:, ::-1]
    assert np.all(gap[:, k - 1] - gap[:, k] > 1e-4)
    assert [set(r) for r in res.indices.tolist()] == [set(r) for r in want_i.tolist()]
    np.testing.assert_allclose(res.scores, want_s, rtol=1e-5, atol=1e-5)
    assert np.all(res.scores[:, :-1] >= res.scores[:, 1:])


def test_hnsw_with_a_wide_search_finds_the_exact_top_k(gaussian):
    C, Q = gaussian
    _, want_i, _ = brute_top(Q, C, 5)
    index = ApproximateIndex(C, kind="hnsw", ef_search=400, hnsw_m=16)
    res = index.search(Q, 5)
    assert res.backend == "faiss-hnsw"
    assert overlap(res.indices, want_i) >= 0.99


def test_recall_on_clustered_data_is_high_with_moderate_nprobe_and_below_one_on_hard_data():
    C, Q = clustered(4000, 200, 32, n_clusters=40, noise=1.2, seed=3)
    _, want_i, _ = brute_top(Q, C, 8)
    index = ApproximateIndex(C, nlist=32, nprobe=8, seed=0)
    res = index.search(Q, 8)
    measured = overlap(res.indices, want_i)
    assert measured >= 0.95  # clustered data: 8 of 32 lists hold almost every neighbour (0.985 measured)
    assert recall_at_k(res, SearchResult(np.zeros(want_i.shape, np.float32), want_i)) == pytest.approx(measured)
    index.nprobe = 1
    assert 0.5 < overlap(index.search(Q, 8).indices, want_i) < 0.9  # one list misses some (0.82 measured)
    # isotropic Gaussian data in 64 dimensions has no cluster structure: one list misses most
    rng = np.random.default_rng(4)
    H, QH = rng.standard_normal((4000, 64)).astype(np.float32), rng.standard_normal((100, 64)).astype(np.float32)
    _, hard_i, _ = brute_top(QH, H, 8)
    hard = ApproximateIndex(H, nlist=32, nprobe=1).search(QH, 8)
    assert hard.backend == "faiss-ivf"
    assert 0.0 < overlap(hard.indices, hard_i) < 0.6  # an approximate path ran (0.14 measured)


def test_recall_at_k_by_hand():
    a = SearchResult(np.zeros((2, 3), np.float32), np.array([[1, 2, 3], [4, 5, -1]]))
    e = SearchResult(np.zeros((2, 3), np.float32), np.array([[3, 2, 9], [4, 6, 7]]))
    assert recall_at_k(a, e) == pytest.approx((2 + 1) / 6)
    assert recall_at_k(e, e) == 1.0
    with pytest.raises(ValueError, match=r"approx has shape \(2, 3\), exact \(2, 2\)"):
        recall_at_k(a, SearchResult(np.zeros((2, 2), np.float32), np.zeros((2, 2), np.int64)))


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_the_same_seed_gives_the_same_results(kind):
    C, Q = clustered(3000, 60, 16, n_clusters=30, noise=1.5, seed=5)
    opts = dict(nlist=30, nprobe=2) if kind == "ivf" else dict(ef_search=16, hnsw_m=8)
    a = ApproximateIndex(C, kind=kind, seed=7, **opts).search(Q, 6)
    b = ApproximateIndex(C, kind=kind, seed=7, **opts).search(Q, 6)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.scores, b.scores)


def test_the_seed_reaches_the_training_sample_and_kmeans():
    C, _ = clustered(3000, 1, 16, n_clusters=30, noise=1.5, seed=5)

    def centroids(seed):
        ix = ApproximateIndex(C, nlist=20, nprobe=2, seed=seed, train_size=1000)
        return ix.index.quantizer.reconstruct_n(0, 20)

    np.testing.assert_array_equal(centroids(1), centroids(1))
    assert not np.allclose(centroids(1), centroids(2))


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_a_float16_memmap_gives_the_result_of_its_float32_copy(kind, tmp_path, monkeypatch):
    monkeypatch.setattr(approx_mod, "_ADD_BLOCK", 256)  # several blocks on a small corpus
    C, Q = clustered(1000, 30, 16, n_clusters=10, noise=1.0, seed=8)
    mm = np.lib.format.open_memmap(tmp_path / "corpus.npy", mode="w+", dtype=np.float16, shape=C.shape)
    mm[:] = C
    mm.flush()
    mm = np.load(tmp_path / "corpus.npy", mmap_mode="r")
    opts = dict(nlist=10, nprobe=3) if kind == "ivf" else dict(ef_search=32)
    got = ApproximateIndex(mm, kind=kind, **opts).search(Q, 7)
    ref = ApproximateIndex(np.asarray(mm, dtype=np.float32), kind=kind, **opts).search(Q, 7)
    np.testing.assert_array_equal(got.indices, ref.indices)
    np.testing.assert_array_equal(got.scores, ref.scores)
    assert got.indices.max() >= 256  # documents of later blocks are found


def test_missing_results_are_minus_one_with_minus_infinity_last():
    # two far-apart groups of 30 documents; one list scanned cannot return 50 documents
    rng = np.random.default_rng(2)
    C = np.vstack([np.array([5.0, 0, 0]) + rng.standard_normal((30, 3)) * 0.1,
                   np.array([-5.0, 0, 0]) + rng.standard_normal((30, 3)) * 0.1]).astype(np.float32)
    res = ApproximateIndex(C, nlist=2, nprobe=1).search(np.array([[1.0, 0, 0]]), 50)
    found = res.indices[0] >= 0
    assert found.sum() == 30 and set(res.indices[0, found].tolist()) == set(range(30))
    assert np.all(res.indices[0, 30:] == -1) and np.all(np.isneginf(res.scores[0, 30:]))


def test_exact_ties_are_ordered_by_lower_row():
    C = np.array([[1.0, 0], [0, 1], [1, 0], [1, 0], [0.5, 0]], dtype=np.float32)
    for kind in ("ivf", "hnsw"):
        res = ApproximateIndex(C, kind=kind).search(np.array([[1.0, 0.0]]), 4)
        assert res.indices.tolist() == [[0, 2, 3, 4]], kind


def test_defaults_of_the_ivf_parameters():
    # by hand: nlist = clip(round(4 sqrt N), 1, N // 39), nprobe = min(nlist, max(8, nlist // 128)),
    # train = min(N, 64 nlist)
    assert ivf_parameters(200_000) == (1789, 13, 114_496)  # 4 * 447.21 = 1788.9; 1789 // 128 = 13
    assert ivf_parameters(10_000_000) == (12649, 98, 809_536)  # 4 * 3162.28 = 12649.1
    assert ivf_parameters(1000) == (25, 8, 1000)  # 4 * 31.6 = 126 > 1000 // 39 = 25
    assert ivf_parameters(200) == (5, 5, 200)  # 200 // 39 = 5 lists, all scanned
    assert ivf_parameters(30) == (1, 1, 30)
    assert ivf_parameters(100_000, nlist=100, nprobe=7, train_size=500) == (100, 7, 500)
    ix = ApproximateIndex(np.eye(40, dtype=np.float32))
    assert (ix.nlist, ix.nprobe, ix.train_size, ix.backend) == (1, 1, 40, "faiss-ivf")
    settings = ix.settings()
    assert settings["index"] == "ivf" and settings["nlist"] == 1 and "faiss" in settings


def test_bad_inputs_give_clear_errors(monkeypatch):
    monkeypatch.setattr(approx_mod, "_ADD_BLOCK", 256)
    C = np.random.default_rng(0).standard_normal((600, 8)).astype(np.float32)
    bad = C.copy()
    bad[300, 2] = np.nan
    with pytest.raises(ValueError, match="^corpus: row 300 contains NaN or infinite values$"):
        ApproximateIndex(bad, nlist=4, train_size=200)  # row 300 is outside the training sample's first block
    bad_train = C.copy()
    bad_train[5, 0] = np.inf
    with pytest.raises(ValueError, match="^corpus: row 5 contains NaN or infinite values$"):
        ApproximateIndex(bad_train, nlist=4)
    with pytest.raises(ValueError, match="^corpus: row 5 "):
        ApproximateIndex(bad_train, kind="hnsw")
    with pytest.raises(ValueError, match="kind: expected one of 'ivf', 'hnsw', got 'flat'"):
        ApproximateIndex(C, kind="flat")
    with pytest.raises(ValueError, match="nlist: 601 lists for a corpus of 600 documents"):
        ApproximateIndex(C, nlist=601)
    with pytest.raises(ValueError, match="nprobe: 9 exceeds nlist = 8"):
        ApproximateIndex(C, nlist=8, nprobe=9)
    with pytest.raises(ValueError, match=r"train_size: expected nlist \(8\) <= train_size <= N \(600\), got 4"):
        ApproximateIndex(C, nlist=8, train_size=4)
    with pytest.raises(ValueError, match="ef_search: an HNSW setting"):
        ApproximateIndex(C, ef_search=10)
    with pytest.raises(ValueError, match="nprobe: an IVF setting"):
        ApproximateIndex(C, kind="hnsw", nprobe=2)
    with pytest.raises(ValueError, match="nlist: expected nlist >= 1, got 0"):
        ApproximateIndex(C, nlist=0)
    with pytest.raises(ValueError, match="expected a 2-d array"):
        ApproximateIndex(C[0])
    ix = ApproximateIndex(C, nlist=4)
    with pytest.raises(ValueError, match=r"k: k = 601 is larger than the corpus \(600 documents\)"):
        ix.search(C[:2], 601)
    with pytest.raises(ValueError, match="k: expected k >= 1"):
        ix.search(C[:2], 0)
    with pytest.raises(ValueError, match=r"queries: expected shape \(n, 8\), got \(2, 3\)"):
        ix.search(np.ones((2, 3)), 1)
    with pytest.raises(ValueError, match="queries: row 1 contains NaN"):
        ix.search(np.vstack([C[:1], np.full((1, 8), np.nan)]), 1)
    with pytest.raises(ValueError, match="nprobe: 5 exceeds nlist = 4"):
        ix.nprobe = 5
    with pytest.raises(ValueError, match="ef_search: an HNSW setting"):
        ix.ef_search = 5
    ix.nprobe = 4
    assert ix.index.nprobe == 4


def test_without_faiss_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss -> ImportError
    with pytest.raises(ImportError, match=r"pip install 'asymgeo\[faiss\]'"):
        ApproximateIndex(np.eye(4, dtype=np.float32))
