"""The batched torch path of CARS (paper eq. 7): :mod:`asymgeo.linalg.batched`.

Run here with ``device="torch-cpu"`` (the same code as on CUDA, on the CPU device); every
result must equal the numpy path's (``device="cpu"``) to 1e-8 relative, and a naive numpy
implementation written below (full SVD and full eigendecomposition per half, explicit
p x p residuals).  ``tests/test_cuda.py`` repeats the comparison on a GPU.
"""

from __future__ import annotations

import glob
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asymgeo import cars_score, half_splits
from asymgeo.linalg.batched import batched_cars_terms, resolve_device, splits_per_chunk
from asymgeo.linalg.lowrank import path_counts, reset_path_counts

torch = pytest.importorskip("torch")

SRC = Path(__file__).resolve().parents[2] / "src"
RTOL = 1e-8


# --------------------------------------------------------------------------- helpers
def _triples(rng, n, p, asym=0.8, noise=1.0):
    """Triples with a non-PSD relevance moment (so V is not trivially 0)."""
    X = rng.standard_normal((n, p))
    A = np.eye(p) + asym * rng.standard_normal((p, p))
    return X, X @ A + noise * rng.standard_normal((n, p)), noise * rng.standard_normal((n, p))


def _gapped_triples(rng, n, p, r):
    """A strong rank-r non-symmetric signal over weak noise: a clear spectral gap at r."""
    X = rng.standard_normal((n, p))
    A = 3.0 * rng.standard_normal((p, r)) @ rng.standard_normal((r, p)) / np.sqrt(p)
    return X, X @ A + 0.1 * rng.standard_normal((n, p)), 0.1 * rng.standard_normal((n, p))


def _isotropic_triples(rng, n, p):
    """Documents independent of the queries: the moment is pure noise, no gap at any r."""
    return rng.standard_normal((n, p)), rng.standard_normal((n, p)), rng.standard_normal((n, p))


def _assert_same(res, ref, rtol=RTOL):
    """Every number of two CarsResults equal to ``rtol`` relative (of the largest term)."""
    scale = max(np.abs(ref.agreement).max(), np.abs(ref.disagreement).max(), 1e-300)
    np.testing.assert_allclose(res.agreement, ref.agreement, rtol=rtol, atol=rtol * scale)
    np.testing.assert_allclose(res.disagreement, ref.disagreement, rtol=rtol, atol=rtol * scale)
    np.testing.assert_allclose(res.terms, ref.terms, rtol=rtol, atol=rtol * scale)
    assert res.score == pytest.approx(ref.score, rel=rtol, abs=rtol * scale)
    assert res.corrected_distance == pytest.approx(ref.corrected_distance, rel=rtol, abs=rtol * scale)
    assert res.raw_distance == pytest.approx(ref.raw_distance, rel=rtol)
    if ref.n_splits > 1:
        assert res.standard_error == pytest.approx(ref.standard_error, rel=1e-6, abs=rtol * scale)
    if abs(ref.score) > 1e-6 * scale:
        assert res.choice == ref.choice
    assert (res.n, res.rank, res.n_splits, res.selector_dim, res.seed) == (
        ref.n, ref.rank, ref.n_splits, ref.selector_dim, ref.seed)


def _both(X, Yp, Yn, r, **kw):
    """(batched on the CPU device, numpy path), with the batched path's counts."""
    reset_path_counts()
    batched = cars_score(X, Yp, Yn, r, device="torch-cpu", **kw)
    counts = path_counts()
    return batched, cars_score(X, Yp, Yn, r, device="cpu", **kw), counts


def _naive_residual(C, r):
    """``P_d,r(C) - P_s,r(C)`` explicitly: full SVD, full eigh of sym(C), positive part."""
    U, s, Vt = np.linalg.svd(C)
    dual = (U[:, :r] * s[:r]) @ Vt[:r]
    w, Q = np.linalg.eigh((C + C.T) / 2)
    w, Q = w[::-1][:r], Q[:, ::-1][:, :r]
    shared = (Q * np.maximum(w, 0.0)) @ Q.T
    return dual - shared


def _naive_cars(X, Yp, Yn, r, splits):
    D = Yp - Yn
    agree, disagree = [], []
    for I1, I2 in splits:
        V1 = _naive_residual(X[I1].T @ D[I1] / len(I1), r)
        V2 = _naive_residual(X[I2].T @ D[I2] / len(I2), r)
        agree.append(np.sum(V1 * V2))
        disagree.append(np.sum((V1 - V2) ** 2))
    agree, disagree = np.array(agree), np.array(disagree)
    raw = np.sum(_naive_residual(X.T @ D / X.shape[0], r) ** 2)
    return agree, disagree, raw


# --------------------------------------------------------------------------- agreement
def test_gapped_synthetic_equals_the_numpy_path():
    rng = np.random.default_rng(0)
    n, p, r = 300, 48, 4
    X, Yp, Yn = _gapped_triples(rng, n, p, r)
    s = np.linalg.svd(X.T @ (Yp - Yn) / n, compute_uv=False)
    assert s[r - 1] > 5 * s[r]  # the case really has a gap at r
    batched, ref, counts = _both(X, Yp, Yn, r, n_splits=6, seed=1)
    _assert_same(batched, ref)
    assert batched.choice == "dual"
    assert counts == {"batched:torch": 2 * 6 + 1}  # every half and the full moment, all certified


def test_isotropic_noise_without_a_gap_equals_the_numpy_path():
    rng = np.random.default_rng(1)
    n, p, r = 400, 64, 8
    X, Yp, Yn = _isotropic_triples(rng, n, p)
    s = np.linalg.svd(X.T @ (Yp - Yn) / n, compute_uv=False)
    assert s[r - 1] < 1.1 * s[r]  # no gap at r
    batched, ref, counts = _both(X, Yp, Yn, r, n_splits=5, seed=2)
    _assert_same(batched, ref)
    assert counts.get("batched:torch") == 2 * 5 + 1


def test_real_scifact_minilm_triples_equal_the_numpy_path(shared_dir):
    """200 real SciFact MiniLM triples (p = 384, halves thinner than p: the numpy path takes
    its thin-factor SVD and mixed-precision eigensolver, the batched path dense float64)."""
    from asymgeo.data import load_triples

    t = load_triples("scifact", "all-MiniLM-L6-v2", data_dir=shared_dir / "data",
                     cache_dir=shared_dir / "embeddings")
    X, Yp, Yn = (np.asarray(a, dtype=np.float64)[:200] for a in t.arrays())
    batched, ref, counts = _both(X, Yp, Yn, 8, n_splits=4, seed=3)
    _assert_same(batched, ref)
    assert counts.get("batched:torch") == 2 * 4 + 1


def test_batched_equals_a_naive_numpy_implementation():
    rng = np.random.default_rng(2)
    n, p, r = 41, 12, 3
    X, Yp, Yn = _triples(rng, n, p)
    splits = half_splits(n, 4, 5)
    res = cars_score(X, Yp, Yn, r, splits=splits, device="torch-cpu")
    agree, disagree, raw = _naive_cars(X, Yp, Yn, r, splits)
    scale = max(np.abs(agree).max(), disagree.max())
    np.testing.assert_allclose(res.agreement, agree, rtol=RTOL, atol=RTOL * scale)
    np.testing.assert_allclose(res.disagreement, disagree, rtol=RTOL, atol=RTOL * scale)
    assert res.raw_distance == pytest.approx(raw, rel=RTOL)
    assert res.score == pytest.approx(np.mean(agree - disagree / 4), rel=RTOL, abs=RTOL * scale)
    assert res.corrected_distance == pytest.approx(agree.mean(), rel=RTOL, abs=RTOL * scale)


def test_numpy_path_does_not_count_the_batched_path():
    rng = np.random.default_rng(3)
    X, Yp, Yn = _triples(rng, 60, 10)
    reset_path_counts()
    cars_score(X, Yp, Yn, 2, n_splits=3, device="cpu")
    assert not any(k.startswith("batched:") for k in path_counts())


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto means CUDA here")
def test_auto_without_cuda_takes_the_numpy_path():
    rng = np.random.default_rng(4)
    X, Yp, Yn = _triples(rng, 60, 10)
    reset_path_counts()
    auto = cars_score(X, Yp, Yn, 2, n_splits=3, device="auto")
    assert not any(k.startswith("batched:") for k in path_counts())
    cpu = cars_score(X, Yp, Yn, 2, n_splits=3, device="cpu")
    np.testing.assert_array_equal(auto.terms, cpu.terms)


def test_selector_projection_and_explicit_splits_mean_the_same_on_both_paths():
    rng = np.random.default_rng(5)
    n, p = 120, 40
    X, Yp, Yn = _triples(rng, n, p)
    batched, ref, _ = _both(X, Yp, Yn, 3, n_splits=4, seed=7, selector_dim=16)
    _assert_same(batched, ref)
    assert batched.selector_dim == 16
    splits = [(np.arange(0, 50), np.arange(50, 120)), (np.arange(1, 120, 2), np.arange(0, 120, 2))]
    batched, ref, _ = _both(X, Yp, Yn, 3, splits=splits, selector_dim=16, seed=7)
    _assert_same(batched, ref)


def test_odd_n_and_ragged_non_covering_halves():
    """Odd n (I2 one longer), and halves that neither cover the data nor share a size:
    the zero padding row and the separately gathered second moments."""
    rng = np.random.default_rng(6)
    n, p, r = 51, 20, 3
    X, Yp, Yn = _triples(rng, n, p)
    batched, ref, _ = _both(X, Yp, Yn, r, n_splits=5, seed=8)
    _assert_same(batched, ref)
    splits = [(np.arange(0, 10), np.arange(10, 51)),  # covers, unequal
              (np.arange(0, 20), np.arange(30, 45)),  # does not cover
              (np.arange(5, 12), np.arange(12, 50))]  # does not cover
    batched, ref, _ = _both(X, Yp, Yn, r, splits=splits)
    _assert_same(batched, ref)
    agree, disagree, _ = _naive_cars(X, Yp, Yn, r, splits)
    np.testing.assert_allclose(batched.agreement, agree, rtol=RTOL, atol=RTOL * np.abs(agree).max())


def test_rank_deficient_halves_fall_back_to_the_full_svd():
    """Halves of 4 triples have rank <= 4 < r = 6: the Gram route cannot certify s_r > 0 and a
    full SVD answers those halves (counted); the result still equals the numpy path's."""
    rng = np.random.default_rng(7)
    X, Yp, Yn = _triples(rng, 8, 10)
    batched, ref, counts = _both(X, Yp, Yn, 6, n_splits=3, seed=9)
    _assert_same(batched, ref)
    assert counts.get("batched:singular_full") == 2 * 3


def test_gram_route_equals_the_full_svd():
    rng = np.random.default_rng(8)
    n, p, r = 150, 30, 5
    X, Yp, Yn = _triples(rng, n, p)
    D = Yp - Yn
    splits = half_splits(n, 4, 0)
    gram = batched_cars_terms(X, D, splits, r, "cpu")
    svd = batched_cars_terms(X, D, splits, r, "cpu", singular="svd")
    np.testing.assert_allclose(np.array(gram.pairs), np.array(svd.pairs), rtol=1e-10,
                               atol=1e-10 * np.abs(np.array(svd.pairs)).max())
    assert gram.raw_distance == pytest.approx(svd.raw_distance, rel=1e-10)


# --------------------------------------------------------------------------- memory chunks
def test_a_small_memory_budget_gives_several_chunks_and_the_same_answer():
    rng = np.random.default_rng(9)
    n, p, r, L = 200, 32, 3, 7
    X, Yp, Yn = _triples(rng, n, p)
    D = Yp - Yn
    splits = half_splits(n, L, 1)
    one = batched_cars_terms(X, D, splits, r, "cpu")
    per_split = 8 * (2 * n * p + 12 * p * p)
    resident = 8 * (2 * (n + 1) * p + 2 * p * p)
    small = batched_cars_terms(X, D, splits, r, "cpu", memory_bytes=resident + 2 * per_split)
    tiny = batched_cars_terms(X, D, splits, r, "cpu", memory_bytes=1)
    assert one.chunks == 1 and small.chunks == 4 and tiny.chunks == L
    for other in (small, tiny):
        np.testing.assert_allclose(np.array(other.pairs), np.array(one.pairs), rtol=1e-12)
        assert other.raw_distance == one.raw_distance
    ref = cars_score(X, Yp, Yn, r, splits=splits, device="cpu")
    np.testing.assert_allclose(np.array(tiny.pairs)[:, 0], ref.agreement, rtol=RTOL)


def test_splits_per_chunk():
    n, p = 4096, 768
    per_split = 8 * (2 * n * p + 12 * p * p)
    resident = 8 * (2 * (n + 1) * p + 2 * p * p)
    assert splits_per_chunk(n, p, n, resident + 3 * per_split) == 3
    assert splits_per_chunk(n, p, n, resident + 3 * per_split - 1) == 2
    assert splits_per_chunk(n, p, n, 1) == 1
    for bad in (0, -5, 1.5, True, "1"):
        with pytest.raises(ValueError, match="memory_bytes"):
            splits_per_chunk(n, p, n, bad)


# --------------------------------------------------------------------------- devices
@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_cuda_without_cuda_is_a_value_error(device):
    rng = np.random.default_rng(10)
    X, Yp, Yn = _triples(rng, 20, 4)
    with pytest.raises(ValueError, match="device: 'cuda.*CUDA is not available"):
        cars_score(X, Yp, Yn, 1, device=device)


def test_bad_device_names_the_argument():
    rng = np.random.default_rng(11)
    X, Yp, Yn = _triples(rng, 20, 4)
    for bad in ("gpu", "cuda:", "cuda:x", "CPU", ""):
        with pytest.raises(ValueError, match="device: expected"):
            cars_score(X, Yp, Yn, 1, device=bad)
    with pytest.raises(TypeError, match="device"):
        cars_score(X, Yp, Yn, 1, device=None)
    with pytest.raises(ValueError, match="solver"):
        cars_score(X, Yp, Yn, 1, device="torch-cpu", solver="lanczos")
    with pytest.raises(ValueError, match="singular"):
        batched_cars_terms(X, Yp - Yn, half_splits(20, 2, 0), 1, "cpu", singular="qr")


def test_missing_torch_is_an_import_error_naming_pip(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    for device in ("torch-cpu", "cuda"):
        with pytest.raises(ImportError, match="pip install torch"):
            resolve_device(device)
    assert resolve_device("auto") is None
    assert resolve_device("cpu") is None


def _run(code: str) -> None:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert out.returncode == 0, out.stderr


def test_device_cpu_never_imports_torch():
    _run("import sys; import numpy as np; import asymgeo.kernels.selection as s\n"
         f"assert s.__file__.startswith({str(SRC)!r}), s.__file__\n"
         "rng = np.random.default_rng(0); X = rng.standard_normal((30, 5))\n"
         "s.cars_score(X, X @ rng.standard_normal((5, 5)), rng.standard_normal((30, 5)), 2, n_splits=2,"
         " device='cpu')\n"
         "assert 'torch' not in sys.modules, 'torch was imported'")


@pytest.mark.skipif(not sys.platform.startswith("linux") or bool(glob.glob("/dev/nvidia*")),
                    reason="needs Linux without an NVIDIA device")
def test_auto_without_an_nvidia_device_does_not_import_torch():
    _run("import sys; import numpy as np; import asymgeo.kernels.selection as s\n"
         f"assert s.__file__.startswith({str(SRC)!r}), s.__file__\n"
         "rng = np.random.default_rng(0); X = rng.standard_normal((30, 5))\n"
         "s.cars_score(X, X @ rng.standard_normal((5, 5)), rng.standard_normal((30, 5)), 2, n_splits=2)\n"
         "assert 'torch' not in sys.modules, 'torch was imported'")


# --------------------------------------------------------------------------- property
@settings(max_examples=12, deadline=None)
@given(n=st.integers(4, 40), p=st.integers(2, 9), r_frac=st.floats(0.0, 1.0),
       L=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_batched_equals_the_numpy_path_on_random_shapes(n, p, r_frac, L, seed):
    rng = np.random.default_rng(seed)
    r = 1 + int(r_frac * (p - 1))
    X, Yp, Yn = _triples(rng, n, p)
    batched = cars_score(X, Yp, Yn, r, n_splits=L, seed=seed, device="torch-cpu")
    ref = cars_score(X, Yp, Yn, r, n_splits=L, seed=seed, device="cpu")
    _assert_same(batched, ref)


def test_batched_terms_refuse_bad_inputs_naming_them():
    X = np.ones((6, 3))
    splits = [(np.arange(3), np.arange(3, 6))]
    with pytest.raises(ValueError, match=r"X, D: expected two \(n, p\) arrays of one shape, got \(6, 3\) and \(6, 2\)"):
        batched_cars_terms(X, np.ones((6, 2)), splits, 1, "cpu")
    with pytest.raises(ValueError, match=r"rank: expected an integer in \[1, 3\], got 4"):
        batched_cars_terms(X, X, splits, 4, "cpu")
    with pytest.raises(ValueError, match=r"rank: expected an integer in \[1, 3\], got True"):
        batched_cars_terms(X, X, splits, True, "cpu")
    with pytest.raises(ValueError, match=r"splits: expected at least one \(I1, I2\) pair"):
        batched_cars_terms(X, X, [], 1, "cpu")
    with pytest.raises(ValueError, match="singular: expected 'gram' or 'svd', got 'qr'"):
        batched_cars_terms(X, X, splits, 1, "cpu", singular="qr")
