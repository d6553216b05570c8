"""Exact search: blocked backends against brute force, ties, operators, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asymgeo.retrieval.search import (
    AdapterIndex,
    ExactIndex,
    SearchResult,
    available_backends,
    exact_search,
    transform_index,
)

BACKENDS = [b for b in ("numpy", "torch", "faiss") if b in available_backends()]


def brute_force(S: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Reference: full score matrix, stable order by (-score, index)."""
    idx = np.array([np.lexsort((np.arange(row.size), -row))[:k] for row in S])
    return np.take_along_axis(S, idx, axis=1), idx


def int_data(rng, n, N, p, lo=-2, hi=3):
    """Small integers: float32 products are exact, and ties are frequent."""
    return (
        rng.integers(lo, hi, size=(n, p)).astype(np.float32),
        rng.integers(lo, hi, size=(N, p)).astype(np.float32),
    )


# --------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("block_size", [1, 5, 64, None])
def test_blocked_equals_brute_force_with_ties(backend, dtype, block_size):
    rng = np.random.default_rng(3)
    if backend == "torch" and block_size is not None and block_size < 64:
        block_size += 37  # per-block torch overhead on CPU; tiny blocks are covered by numpy
    Q, C = int_data(rng, 23, 701, 6)
    S = Q.astype(np.float64) @ C.astype(np.float64).T
    for k in (1, 7, 100, 701):
        ref_s, ref_i = brute_force(S, k)
        res = exact_search(Q, C.astype(dtype), k, block_size=block_size, backend=backend, device="cpu")
        assert res.indices.dtype == np.int64 and res.scores.dtype == np.float32
        np.testing.assert_array_equal(res.indices, ref_i)
        np.testing.assert_array_equal(res.scores, ref_s.astype(np.float32))


def test_all_equal_scores_keep_lowest_indices():
    C = np.ones((50, 4), np.float32)
    Q = np.ones((3, 4), np.float32)
    for backend in BACKENDS:
        s, i = exact_search(Q, C, 10, block_size=7, backend=backend, device="cpu")
        np.testing.assert_array_equal(i, np.tile(np.arange(10), (3, 1)))
        np.testing.assert_array_equal(s, np.full((3, 10), 4.0, np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_data_matches_float64_reference(backend):
    rng = np.random.default_rng(11)
    Q = rng.standard_normal((40, 32)).astype(np.float32)
    C = rng.standard_normal((3000, 32)).astype(np.float32)
    S = Q.astype(np.float64) @ C.astype(np.float64).T
    k = 50
    ref_s, ref_i = brute_force(S, k)
    res = exact_search(Q, C, k, block_size=257, backend=backend, device="cpu")
    np.testing.assert_allclose(res.scores, ref_s, rtol=0, atol=1e-4)
    # every returned index has the returned score, and the sets agree up to rounding
    true = np.take_along_axis(S, res.indices, axis=1)
    np.testing.assert_allclose(res.scores, true, atol=1e-4)
    gap = np.abs(np.diff(np.sort(S, axis=1)[:, ::-1][:, : k + 1], axis=1)).min(axis=1)
    clear = gap > 1e-3  # rows without near-ties in the top k+1
    assert clear.sum() > 10
    np.testing.assert_array_equal(res.indices[clear], ref_i[clear])


def test_backends_identical_on_float_data_without_near_ties():
    rng = np.random.default_rng(5)
    Q = rng.standard_normal((64, 48)).astype(np.float32)
    C = rng.standard_normal((5000, 48)).astype(np.float16)
    base = exact_search(Q, C, 20, backend="numpy")
    for backend in BACKENDS[1:]:
        other = exact_search(Q, C, 20, backend=backend, device="cpu")
        np.testing.assert_allclose(other.scores, base.scores, atol=1e-4)
        same = (other.indices == base.indices).all(axis=1).mean()
        assert same > 0.95


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 8),
    N=st.integers(1, 120),
    p=st.integers(1, 5),
    kfrac=st.floats(0, 1),
    block=st.integers(1, 130),
    seed=st.integers(0, 2**31 - 1),
)
def test_property_blocked_numpy(n, N, p, kfrac, block, seed):
    rng = np.random.default_rng(seed)
    Q, C = int_data(rng, n, N, p, -1, 2)
    k = 1 + int(kfrac * (N - 1))
    ref_s, ref_i = brute_force(Q.astype(np.float64) @ C.astype(np.float64).T, k)
    s, i = exact_search(Q, C, k, block_size=block, backend="numpy")
    np.testing.assert_array_equal(i, ref_i)
    np.testing.assert_array_equal(s, ref_s)


def test_many_query_blocks(monkeypatch):
    import asymgeo.retrieval.search as search

    monkeypatch.setattr(search, "_QUERY_BLOCK", 7)
    rng = np.random.default_rng(0)
    Q, C = int_data(rng, 30, 300, 5)
    ref_s, ref_i = brute_force(Q.astype(np.float64) @ C.T.astype(np.float64), 12)
    s, i = exact_search(Q, C, 12, block_size=40, backend="numpy")
    np.testing.assert_array_equal(i, ref_i)


def test_memmap_float16_corpus(tmp_path):
    rng = np.random.default_rng(1)
    Q, C = int_data(rng, 5, 1000, 8)
    mm = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float16, shape=C.shape)
    mm[:] = C
    mm.flush()
    C16 = np.load(tmp_path / "c.npy", mmap_mode="r")
    ref_s, ref_i = brute_force(Q.astype(np.float64) @ C.T.astype(np.float64), 9)
    s, i = exact_search(Q, C16, 9, block_size=128)
    np.testing.assert_array_equal(i, ref_i)


def test_result_unpacks_and_converts_to_run():
    C = np.eye(4, dtype=np.float32)
    Q = np.array([[0.0, 2.0, 1.0, 0.0]], np.float32)
    res = exact_search(Q, C, 2)
    assert isinstance(res, SearchResult)
    scores, indices = res
    np.testing.assert_array_equal(indices, [[1, 2]])
    np.testing.assert_array_equal(scores, [[2.0, 1.0]])
    assert res.backend == ("torch:cuda" if _cuda_available() else "numpy")
    assert res.to_run(["q"], ["a", "b", "c", "d"]) == {"q": {"b": 2.0, "c": 1.0}}


# --------------------------------------------------------------------------- operators
def test_operator_search_equals_direct_bilinear_ranking():
    rng = np.random.default_rng(7)
    X, Y = int_data(rng, 17, 400, 6)
    M = rng.integers(-2, 3, size=(6, 6)).astype(np.float32)
    S = X.astype(np.float64) @ M @ Y.T.astype(np.float64)  # x^T M y
    ref_s, ref_i = brute_force(S, 15)
    for backend in BACKENDS:
        s, i = exact_search(X, Y, 15, operator=M, backend=backend, device="cpu", block_size=33)
        np.testing.assert_array_equal(i, ref_i)
        np.testing.assert_array_equal(s, ref_s.astype(np.float32))


def test_rectangular_operator():
    rng = np.random.default_rng(8)
    X = rng.integers(-2, 3, size=(9, 5)).astype(np.float32)
    Y = rng.integers(-2, 3, size=(200, 3)).astype(np.float32)
    M = rng.integers(-2, 3, size=(5, 3)).astype(np.float32)
    ref_s, ref_i = brute_force(X.astype(np.float64) @ M @ Y.T, 10)
    s, i = exact_search(X, Y, 10, operator=M)
    np.testing.assert_array_equal(i, ref_i)


@pytest.mark.parametrize("shared", [False, True])
def test_adapter_index_equals_direct_scoring(shared):
    rng = np.random.default_rng(9)
    X, Y = int_data(rng, 12, 500, 8)
    A = rng.integers(-1, 2, size=(3, 8)).astype(np.float64)
    B = A if shared else rng.integers(-1, 2, size=(3, 8)).astype(np.float64)
    M = A.T @ B
    ref_s, ref_i = brute_force(X.astype(np.float64) @ M @ Y.T.astype(np.float64), 20)
    index = AdapterIndex(Y, A, None if shared else B, form="projection")
    assert index.documents.shape == (500, 3) and index.rank == 3 and len(index) == 500
    s, i = index.search(X, 20, block_size=64)
    np.testing.assert_array_equal(i, ref_i)
    np.testing.assert_array_equal(s, ref_s.astype(np.float32))
    # same ranking as the full operator applied to the unchanged corpus
    s2, i2 = exact_search(X, Y, 20, operator=M)
    np.testing.assert_array_equal(i2, i)


def test_adapter_index_float_data_matches_operator():
    rng = np.random.default_rng(10)
    X = rng.standard_normal((30, 16))
    Y = rng.standard_normal((2000, 16)).astype(np.float16)
    A = rng.standard_normal((4, 16))
    B = rng.standard_normal((4, 16))
    S = X @ A.T @ B @ Y.astype(np.float64).T
    ref_s, _ = brute_force(S, 10)
    s, i = AdapterIndex(Y, A, B, form="projection").search(X, 10)
    np.testing.assert_allclose(s, ref_s, rtol=1e-4, atol=1e-3)
    s2, _ = exact_search(X, Y, 10, operator=A.T @ B)
    np.testing.assert_allclose(s2, ref_s, rtol=1e-4, atol=1e-3)


def test_transform_index_float16_storage():
    rng = np.random.default_rng(2)
    Y = rng.standard_normal((100, 6))
    B = rng.standard_normal((2, 6))
    T = transform_index(Y, B, dtype=np.float16, block_size=7)
    assert T.dtype == np.float16 and T.shape == (100, 2)
    np.testing.assert_allclose(T, Y @ B.T, rtol=2e-3, atol=2e-3)


# --------------------------------------------------------------------------- bad input
def test_dimension_mismatch():
    with pytest.raises(ValueError, match=r"queries: dimension 3 does not match corpus dimension 4"):
        exact_search(np.ones((2, 3)), np.ones((5, 4)), 1)
    with pytest.raises(ValueError, match=r"operator: shape \(3, 3\)"):
        exact_search(np.ones((2, 3)), np.ones((5, 4)), 1, operator=np.eye(3))
    with pytest.raises(ValueError, match="doc_map"):
        transform_index(np.ones((5, 4)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="queries: dimension"):
        AdapterIndex(np.ones((5, 4)), np.ones((2, 4)), form="projection").search(np.ones((1, 3)), 1)


def test_k_out_of_range():
    with pytest.raises(ValueError, match=r"k = 6 is larger than the corpus \(5 documents\)"):
        exact_search(np.ones((2, 4)), np.ones((5, 4)), 6)
    with pytest.raises(ValueError, match="k >= 1"):
        exact_search(np.ones((2, 4)), np.ones((5, 4)), 0)
    with pytest.raises(TypeError, match="k: expected an integer"):
        exact_search(np.ones((2, 4)), np.ones((5, 4)), 2.5)


def test_empty_inputs():
    with pytest.raises(ValueError, match="queries: expected a non-empty"):
        exact_search(np.ones((0, 4)), np.ones((5, 4)), 1)
    with pytest.raises(ValueError, match="corpus: expected a non-empty"):
        exact_search(np.ones((2, 4)), np.ones((0, 4)), 1)
    with pytest.raises(ValueError, match="corpus: expected a 2-d"):
        exact_search(np.ones((2, 4)), np.ones(4), 1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_rows_named(backend, bad):
    C = np.ones((50, 4), np.float32)
    C[37, 2] = bad
    with pytest.raises(ValueError, match="corpus: row 37 contains NaN"):
        exact_search(np.ones((3, 4)), C, 2, block_size=8, backend=backend, device="cpu")
    Q = np.ones((3, 4))
    Q[1, 0] = bad
    with pytest.raises(ValueError, match="queries: row 1 contains NaN"):
        exact_search(Q, np.ones((5, 4)), 2, backend=backend, device="cpu")


def test_nonfinite_float16_overflow_row():
    C = np.ones((20, 3), np.float32)
    C[4] = 1e6  # not representable in float16 -> inf
    with pytest.raises(ValueError, match="corpus: row 4"):
        with np.errstate(over="ignore"):
            C16 = C.astype(np.float16)
        exact_search(np.ones((1, 3)), C16, 1)


def test_unknown_backend_and_device():
    with pytest.raises(ValueError, match="backend: expected one of"):
        exact_search(np.ones((1, 2)), np.ones((3, 2)), 1, backend="annoy")
    with pytest.raises(TypeError, match="numeric"):
        exact_search(np.array([["a", "b"]]), np.ones((3, 2)), 1)


def test_auto_backend_is_numpy_without_cuda():
    torch = pytest.importorskip("torch")
    res = exact_search(np.ones((1, 2)), np.ones((3, 2)), 1)
    assert res.backend == ("torch:cuda" if torch.cuda.is_available() else "numpy")


def test_signed_zero_scores_tie():
    C = np.array([[-0.0], [0.0], [-0.0], [1.0], [-1.0]], np.float32)
    for backend in BACKENDS:
        s, i = exact_search(np.ones((1, 1)), C, 5, block_size=1, backend=backend, device="cpu")
        np.testing.assert_array_equal(i, [[3, 0, 1, 2, 4]])


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_parallel_corpus_ranges_equal_brute_force_with_ties(monkeypatch, workers, dtype):
    """The threaded numpy path (corpus split into ranges, per-range top-k merged) keeps
    exact results and the lower-index tie rule, including ties across range borders."""
    import asymgeo.retrieval.search as search

    monkeypatch.setattr(search, "_PARALLEL_MIN_WORK", 1)
    monkeypatch.setattr(search, "_cpu_workers", lambda: workers)
    rng = np.random.default_rng(11)
    Q, C = int_data(rng, 37, 3001, 6)
    C = C.astype(dtype)
    for k in (1, 10, 200):
        res = exact_search(Q, C, k, block_size=257)
        exp_s, exp_i = brute_force(Q.astype(np.float64) @ C.astype(np.float64).T, k)
        np.testing.assert_array_equal(res.indices, exp_i)
        np.testing.assert_array_equal(res.scores, exp_s.astype(np.float32))


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_progress_bar_shown_only_when_asked(capsys, backend):
    rng = np.random.default_rng(2)
    Q, C = int_data(rng, 5, 1000, 4)
    plain = exact_search(Q, C, 3, block_size=128, backend=backend)
    assert "exact search" not in capsys.readouterr().err
    shown = exact_search(Q, C, 3, block_size=128, progress=True, backend=backend)
    np.testing.assert_array_equal(plain.indices, shown.indices)
    err = capsys.readouterr().err
    assert "exact search" in err and "/1.00k" in err


# --------------------------------------------------------------------------- ExactIndex
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_exact_index_equals_brute_force_with_ties(backend, dtype):
    rng = np.random.default_rng(21)
    Q, C = int_data(rng, 19, 503, 6)
    index = ExactIndex(C.astype(dtype), backend=backend, device="cpu", block_size=97)
    assert len(index) == 503 and index.dim_ == 6
    S = Q.astype(np.float64) @ C.astype(np.float64).T
    for k in (1, 8, 503):  # several searches on one prepared index
        ref_s, ref_i = brute_force(S, k)
        res = index.search(Q, k)
        np.testing.assert_array_equal(res.indices, ref_i)
        np.testing.assert_array_equal(res.scores, ref_s.astype(np.float32))
    one = index.search(Q[3:4], 5)  # a single query
    np.testing.assert_array_equal(one.indices, brute_force(S[3:4], 5)[1])


def test_exact_index_prepares_once_and_reuses(monkeypatch):
    """The float16 corpus is converted exactly once, at construction; searches read the
    prepared float32 copy (changing the original afterwards changes nothing), while the
    one-shot exact_search path reads the original every time."""
    import asymgeo.retrieval.search as search

    calls = []
    real_copy = search._float32_copy
    monkeypatch.setattr(search, "_float32_copy", lambda C: calls.append(C.shape) or real_copy(C))
    rng = np.random.default_rng(22)
    Q, C = int_data(rng, 7, 300, 5)
    C16 = C.astype(np.float16)
    index = ExactIndex(C16, backend="numpy")
    assert calls == [(300, 5)] and index.copied_ and index.corpus_.dtype == np.float32
    ref = brute_force(Q.astype(np.float64) @ C.astype(np.float64).T, 10)
    C16[:] = 0  # the caller reuses its buffer: the index keeps the data it prepared
    for _ in range(3):
        res = index.search(Q, 10)
        np.testing.assert_array_equal(res.indices, ref[1])
        np.testing.assert_array_equal(res.scores, ref[0].astype(np.float32))
    assert calls == [(300, 5)]  # not re-converted per call
    # without a copy the index reads the caller's array (so the check above can fail)
    uncopied = ExactIndex(C.astype(np.float16), backend="numpy", max_copy_bytes=0)
    assert not uncopied.copied_ and uncopied.corpus_.dtype == np.float16
    np.testing.assert_array_equal(uncopied.search(Q, 10).indices, ref[1])
    assert calls == [(300, 5)]


@pytest.mark.skipif("torch" not in BACKENDS, reason="PyTorch is not installed")
def test_exact_index_torch_keeps_corpus_on_device():
    """The torch backend moves the corpus once (a float32 tensor on the device) and reads
    only that tensor afterwards (on CPU here; on CUDA when present)."""
    import torch

    rng = np.random.default_rng(26)
    Q, C = int_data(rng, 9, 400, 6)
    C16 = C.astype(np.float16)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    index = ExactIndex(C16, backend="torch", device=device, block_size=128)
    assert index.copied_ and isinstance(index._device_corpus, torch.Tensor)
    assert index._device_corpus.dtype == torch.float32 and index._device_corpus.device.type == device
    ref_s, ref_i = brute_force(Q.astype(np.float64) @ C.astype(np.float64).T, 11)
    C16[:] = 0
    res = index.search(Q, 11)
    assert res.backend == f"torch:{device}"
    np.testing.assert_array_equal(res.indices, ref_i)
    np.testing.assert_array_equal(res.scores, ref_s.astype(np.float32))


def test_exact_index_memmaps(tmp_path):
    rng = np.random.default_rng(23)
    Q, C = int_data(rng, 6, 800, 8)
    ref_s, ref_i = brute_force(Q.astype(np.float64) @ C.astype(np.float64).T, 9)
    for dtype in (np.float16, np.float32):
        path = tmp_path / f"c_{np.dtype(dtype).name}.npy"
        mm = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=C.shape)
        mm[:] = C
        mm.flush()
        Cm = np.load(path, mmap_mode="r")
        index = ExactIndex(Cm, backend="numpy", block_size=100)
        if dtype == np.float32:  # used in place: no copy of a float32 memmap
            assert not index.copied_ and np.shares_memory(index.corpus_, Cm)
        else:
            assert index.copied_ and index.corpus_.dtype == np.float32
        res = index.search(Q, 9)
        np.testing.assert_array_equal(res.indices, ref_i)
        np.testing.assert_array_equal(res.scores, ref_s)
    # a float16 memmap larger than the copy budget stays a memmap (bounded memory)
    mm16 = np.load(tmp_path / "c_float16.npy", mmap_mode="r")
    big = ExactIndex(mm16, backend="numpy", max_copy_bytes=800 * 8 * 4 - 1)
    assert not big.copied_ and big.corpus_.dtype == np.float16 and np.shares_memory(big.corpus_, mm16)
    np.testing.assert_array_equal(big.search(Q, 9).indices, ref_i)


@pytest.mark.parametrize("backend", BACKENDS)
def test_exact_index_operator(backend):
    rng = np.random.default_rng(24)
    X = rng.integers(-2, 3, size=(11, 5)).astype(np.float32)
    Y = rng.integers(-2, 3, size=(250, 3)).astype(np.float16)
    M = rng.integers(-2, 3, size=(5, 3)).astype(np.float32)
    ref_s, ref_i = brute_force(X.astype(np.float64) @ M @ Y.T.astype(np.float64), 12)
    index = ExactIndex(Y, M, backend=backend, device="cpu")
    res = index.search(X, 12)
    np.testing.assert_array_equal(res.indices, ref_i)
    np.testing.assert_array_equal(res.scores, ref_s.astype(np.float32))
    with pytest.raises(ValueError, match=r"operator: shape \(5, 3\) does not act on queries of dimension 3"):
        index.search(Y[:2], 1)


def test_exact_index_matches_exact_search_on_float_data():
    rng = np.random.default_rng(25)
    Q = rng.standard_normal((30, 48)).astype(np.float32)
    C = rng.standard_normal((2000, 48)).astype(np.float16)
    a = ExactIndex(C).search(Q, 20)
    b = exact_search(Q, C, 20)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.scores, b.scores)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_exact_index_bad_input(dtype):
    C = np.ones((40, 4), dtype)
    C[29, 1] = np.inf
    with pytest.raises(ValueError, match="corpus: row 29 contains NaN or infinite"):
        ExactIndex(C)  # caught once, at construction
    with pytest.raises(ValueError, match="max_copy_bytes"):
        ExactIndex(np.ones((4, 2)), max_copy_bytes=-1)
    with pytest.raises(ValueError, match="block_size"):
        ExactIndex(np.ones((4, 2)), block_size=0)
    with pytest.raises(ValueError, match="queries: dimension 3 does not match corpus dimension 2"):
        ExactIndex(np.ones((4, 2))).search(np.ones((1, 3)), 1)
    with pytest.raises(ValueError, match=r"k = 5 is larger than the corpus \(4 documents\)"):
        ExactIndex(np.ones((4, 2))).search(np.ones((1, 2)), 5)


def test_explicit_cpu_backend_with_auto_device_runs_on_the_cpu(monkeypatch):
    """On a CUDA machine, backend='numpy' (or 'faiss') with the default device='auto' must run
    on the CPU, not refuse (found on a GPU machine): simulated by reporting CUDA as present."""
    torch = pytest.importorskip("torch")
    from asymgeo.retrieval.search import _resolve

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert _resolve("numpy", "auto") == ("numpy", "cpu")
    assert _resolve("faiss", "auto") == ("faiss", "cpu")
    assert _resolve("auto", "auto") == ("torch", "cuda")
    assert _resolve("torch", "auto") == ("torch", "cuda")
    with pytest.raises(ValueError, match="CPU only"):
        _resolve("numpy", "cuda")


@pytest.mark.parametrize("form", ["augmented", "projection"])
@pytest.mark.parametrize("shared", [True, False])
def test_adapter_index_of_either_form_scores_as_the_adapter(form, shared):
    """adapter.index(corpus) ranks by adapter.similarity: x^T (I + A^T B) y or x^T A^T B y."""
    from asymgeo.adapters import Adapter

    rng = np.random.default_rng(3)
    A = rng.normal(0, 0.3, size=(3, 8))
    B = A if shared else rng.normal(0, 0.3, size=(3, 8))
    ad = Adapter.from_maps(A, None if shared else B, form=form)
    Y, X = rng.normal(size=(40, 8)), rng.normal(size=(5, 8))
    index = ad.index(Y)
    assert index.documents.shape == ((40, 11) if form == "augmented" else (40, 3))
    got = index.search(X, 40)
    S = ad.similarity(X, Y)  # the adapter's own scores, x^T M y
    np.testing.assert_allclose(got.scores, -np.sort(-S, axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got.indices[:, :5], np.argsort(-S, axis=1)[:, :5])


def test_adapter_index_refuses_maps_of_unknown_form():
    with pytest.raises(ValueError, match="form: expected 'projection'.*must be given"):
        AdapterIndex(np.ones((5, 4)), np.ones((2, 4)))


def test_search_trec_order_widens_past_a_tie_group_larger_than_its_margin():
    """40 identical documents (more than the 16-row margin) tie at the cut: trec_eval keeps the
    largest ids; the search must widen until the whole group is seen."""
    from asymgeo.retrieval.search import TIE_MARGIN, search_trec_order

    n_tied, n_distinct = 40, 40
    assert n_tied > TIE_MARGIN + 10
    # rows 0..39 tie for the first query; rows 40..79 score distinct values for the second, whose
    # cut never ties: with two queries "some query ties at the cut" and "every query does"
    # differ (with one query they agree, and a widening that waits for every row passed)
    corpus = np.vstack([np.tile([1.0, 0.0], (n_tied, 1)),
                        np.c_[np.zeros(n_distinct), np.linspace(2.0, 1.0, n_distinct)]]).astype(np.float32)
    ids = [f"d{i:03d}" for i in range(corpus.shape[0])]
    queries = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    for rows in ([0], [0, 1], [1, 0]):
        got = search_trec_order(queries[rows], corpus, 10, ids)
        S = queries[rows].astype(np.float64) @ corpus.T.astype(np.float64)
        for i, row in enumerate(S):  # trec_eval: score descending, then id descending
            want = sorted(range(len(ids)), key=lambda j: (-row[j], [-ord(c) for c in ids[j]]))[:10]
            assert got.indices[i].tolist() == want, (rows, i)
            np.testing.assert_array_equal(got.scores[i], row[want].astype(np.float32))
        assert got.indices.shape == (len(rows), 10)
    assert sorted(range(n_tied), key=lambda i: ids[i], reverse=True)[:10] == list(range(39, 29, -1))


def test_auto_backend_skips_importing_torch_without_an_nvidia_device(monkeypatch):
    # no /dev/nvidia* node on Linux and torch not imported: CUDA is ruled out without the
    # ~1 s torch import; with a device node, or torch already imported, torch is asked
    import glob
    import sys

    from asymgeo.retrieval import search

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(glob, "glob", lambda pattern: [])
    assert search._cuda_device_present() is False
    assert search._resolve("auto", "auto") == ("numpy", "cpu")
    assert "torch" not in sys.modules
    monkeypatch.setattr(glob, "glob", lambda pattern: ["/dev/nvidia0"] if pattern == "/dev/nvidia*" else [])
    assert search._cuda_device_present() is True


# --------------------------------------------------------------------------- rare branches (issue #19)
def test_search_result_is_a_pair_and_to_run_refuses_wrong_ids():
    res = exact_search(np.array([[0.0, 2.0, 1.0]], np.float32), np.eye(3, dtype=np.float32), 2, backend="numpy")
    assert len(res) == 2 and res.k == 2
    assert res[0] is res.scores and res[1] is res.indices
    with pytest.raises(ValueError, match="query_ids: got 2 ids for 1 result rows"):
        res.to_run(["a", "b"], ["x", "y", "z"])
    with pytest.raises(ValueError, match="corpus_ids: got 1 ids but results index document 2"):
        res.to_run(["a"], ["x"])


def test_available_backends_without_torch_or_faiss(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    monkeypatch.setitem(sys.modules, "faiss", None)
    assert available_backends() == ["numpy"]
    with pytest.raises(ImportError, match="backend='torch' / device='cuda' needs PyTorch: pip install torch"):
        exact_search(np.ones((1, 2)), np.ones((3, 2)), 1, backend="torch")


def test_torch_tensors_are_accepted_and_complex_values_refused():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(40)
    Q, C = int_data(rng, 5, 40, 6)
    want = brute_force(Q.astype(np.float64) @ C.T.astype(np.float64), 4)[1]
    res = exact_search(torch.from_numpy(Q), torch.from_numpy(C), 4, backend="numpy")
    np.testing.assert_array_equal(res.indices, want)
    with pytest.raises(TypeError, match="queries: complex values are not supported"):
        exact_search(Q.astype(np.complex64), C, 4)


@pytest.mark.parametrize("backend", [b for b in ("numpy", "torch") if b in BACKENDS])
def test_scores_that_overflow_float32_are_refused_naming_the_rows(backend):
    C = np.ones((30, 4), np.float32)
    C[17] = 3e38  # finite, but its product with the query is not
    with pytest.raises(ValueError, match=r"corpus: scores overflow float32 near rows"):
        exact_search(np.full((1, 4), 10.0, np.float32), C, 3, backend=backend, device="cpu", block_size=10)


def test_top_k_merging_after_every_tile_equals_brute_force(monkeypatch):
    """The running top-k merges its candidates when the buffer fills: force a buffer of one
    candidate (a merge after every tile, tiles with no candidate at all) against brute force."""
    import asymgeo.retrieval.search as search

    real_init = search._TopK.__init__

    def tiny_buffer(self, n, k):
        real_init(self, n, k)
        self._merge_at = 1

    monkeypatch.setattr(search._TopK, "__init__", tiny_buffer)
    rng = np.random.default_rng(41)
    Q, C = int_data(rng, 7, 300, 5)
    C[150:] = np.minimum(C[150:], -2)  # the second half never beats the first: tiles with no candidate
    res = exact_search(Q, C, 9, backend="numpy", block_size=16)
    ref_s, ref_i = brute_force(Q.astype(np.float64) @ C.T.astype(np.float64), 9)
    np.testing.assert_array_equal(res.indices, ref_i)
    np.testing.assert_array_equal(res.scores, ref_s.astype(np.float32))


def test_torch_backend_on_a_read_only_memmap(tmp_path):
    pytest.importorskip("torch")
    rng = np.random.default_rng(42)
    Q, C = int_data(rng, 4, 90, 6)
    np.save(tmp_path / "c.npy", C.astype(np.float16))
    mm = np.load(tmp_path / "c.npy", mmap_mode="r")
    assert not mm.flags.writeable
    res = exact_search(Q, mm, 5, backend="torch", device="cpu", block_size=32)
    assert res.backend == "torch:cpu"
    np.testing.assert_array_equal(res.indices, brute_force(Q.astype(np.float64) @ C.T.astype(np.float64), 5)[1])


def test_device_must_be_a_string_and_cuda_must_exist():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="device: expected a string such as 'auto', 'cpu' or 'cuda', got 0"):
        exact_search(np.ones((1, 2)), np.ones((3, 2)), 1, device=0)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"device: 'cuda' requested but torch.cuda.is_available\(\) is False"):
            exact_search(np.ones((1, 2)), np.ones((3, 2)), 1, device="cuda")


def test_an_overflow_for_a_later_query_only_is_refused_too():
    # row 0 of the queries is harmless; the second query's product with row 5 overflows
    C = np.ones((12, 3), np.float32)
    C[5] = 3e38
    Q = np.array([[1e-30, 0.0, 0.0], [10.0, 10.0, 10.0]], np.float32)
    with pytest.raises(ValueError, match=r"corpus: scores overflow float32 near rows 5\.\.5"):
        exact_search(Q, C, 2, backend="numpy")


def test_adapter_index_refuses_maps_of_different_ranks():
    with pytest.raises(ValueError, match="doc_map: rank 3 does not match query_map rank 2"):
        AdapterIndex(np.ones((5, 4)), np.ones((2, 4)), np.ones((3, 4)), form="augmented")
