"""Bad input: every public kernel and estimator raises a clear error naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

from asymgeo import (
    DualProjection,
    GeometrySelector,
    SharedProjection,
    approximation_gap,
    cars_score,
    dual_factors,
    dual_truncate,
    half_splits,
    local_risks,
    optimal_separation,
    psd_distance,
    relevance_moment,
    shared_factors,
    shared_truncate,
    sure_regret,
    sure_select,
    sure_select_probability,
    tangent_dims,
    tangent_projectors,
    two_view_model,
)
from asymgeo._validation import as_float_matrix, check_positive, check_rank, check_seed

RNG = np.random.default_rng(0)
X10 = RNG.standard_normal((10, 4))
Y10 = RNG.standard_normal((10, 4))
N10 = RNG.standard_normal((10, 4))
M4 = RNG.standard_normal((4, 4))
U4 = np.linalg.qr(RNG.standard_normal((4, 2)))[0]


def _with(value, i=0, j=0, arr=X10):
    out = arr.copy()
    out[i, j] = value
    return out


# --------------------------------------------------------------------------- operators
OPERATOR_FUNCS = [dual_truncate, shared_truncate, dual_factors, shared_factors, approximation_gap, psd_distance]


@pytest.mark.parametrize("fn", OPERATOR_FUNCS)
@pytest.mark.parametrize("rank,pattern", [(0, r"rank: expected 1 <= rank <= p = 4, got 0"),
                                          (5, r"rank: expected 1 <= rank <= p = 4, got 5"),
                                          (-1, r"rank: expected 1 <= rank")])
def test_rank_out_of_range(fn, rank, pattern):
    with pytest.raises(ValueError, match=pattern):
        fn(M4, rank)


@pytest.mark.parametrize("fn", OPERATOR_FUNCS)
@pytest.mark.parametrize("rank", [1.5, "2", True, None])
def test_rank_wrong_type(fn, rank):
    with pytest.raises(TypeError, match="rank: expected an integer"):
        fn(M4, rank)


@pytest.mark.parametrize("fn", OPERATOR_FUNCS)
def test_rank_numpy_integer_accepted(fn):
    def values(x):
        if hasattr(x, "as_dict"):
            x = x.as_dict()
        if isinstance(x, dict):
            return [values(v) for _k, v in sorted(x.items())]
        if isinstance(x, (tuple, list)):
            return [values(v) for v in x]
        return np.asarray(x, dtype=float)

    got, want = values(fn(M4, np.int64(2))), values(fn(M4, 2))
    np.testing.assert_equal(got, want)  # a numpy integer rank means the same rank
    if fn is dual_truncate:  # and that rank is 2 (numpy's SVD, independently)
        U, s, Vt = np.linalg.svd(M4)
        np.testing.assert_allclose(fn(M4, np.int64(2)), (U[:, :2] * s[:2]) @ Vt[:2], atol=1e-12)


@pytest.mark.parametrize("fn", OPERATOR_FUNCS)
@pytest.mark.parametrize("bad,pattern", [
    (np.ones((3, 4)), r"expected a square \(p, p\) matrix, got shape \(3, 4\)"),
    (np.ones(4), r"expected a 2-d array of shape \(n, p\), got shape \(4,\)"),
    (np.ones((2, 2, 2)), r"expected a 2-d array"),
    (np.ones((0, 0)), r"expected a non-empty array"),
    (_with(np.nan, arr=M4), r"contains NaN or infinite values \(first at index \[0, 0\]\)"),
    (_with(np.inf, 1, 2, arr=M4), r"contains NaN or infinite values \(first at index \[1, 2\]\)"),
])
def test_operator_shape_and_finiteness(fn, bad, pattern):
    with pytest.raises(ValueError, match=pattern) as exc:
        fn(bad, 1)
    assert str(exc.value).split(":")[0] in ("C", "M")  # names the argument


@pytest.mark.parametrize("bad,exc_type,pattern", [
    (np.array([["a", "b"], ["c", "d"]]), TypeError, "expected a numeric array"),
    (np.eye(2) * (1 + 1j), TypeError, "complex values are not supported"),
    (np.array([[None, 1], [1, 1]], dtype=object), TypeError, "expected a numeric array"),
])
def test_non_numeric_operator(bad, exc_type, pattern):
    with pytest.raises(exc_type, match=pattern):
        dual_truncate(bad, 1)


# --------------------------------------------------------------------------- relevance moment
@pytest.mark.parametrize("args,pattern", [
    ((X10, Y10[:9], N10), r"Y_pos: shape \(9, 4\) does not match X shape \(10, 4\)"),
    ((X10, Y10, N10[:, :3]), r"Y_neg: shape \(10, 3\) does not match X shape \(10, 4\)"),
    ((X10[0], Y10[0], N10[0]), r"X: expected a 2-d array of shape \(n, p\)"),
    ((X10[:0], Y10[:0], N10[:0]), r"X: expected at least one triple"),
    ((_with(np.nan), Y10, N10), r"X: contains NaN or infinite"),
    ((X10, _with(np.inf, arr=Y10), N10), r"Y_pos: contains NaN or infinite"),
    ((X10, Y10, _with(-np.inf, arr=N10)), r"Y_neg: contains NaN or infinite"),
])
def test_relevance_moment_bad_input(args, pattern):
    with pytest.raises(ValueError, match=pattern):
        relevance_moment(*args)


# --------------------------------------------------------------------------- tangent spaces / theory
def test_tangent_projector_bad_U():
    with pytest.raises(ValueError, match="U: columns must be orthonormal"):
        tangent_projectors(np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"U: expected shape \(p, r\) with r <= p"):
        tangent_projectors(np.ones((2, 4)))
    with pytest.raises(ValueError, match="U: contains NaN"):
        tangent_projectors(_with(np.nan, arr=U4))
    Pi_Td, Pi_Ts, Pi_A = tangent_projectors(U4)
    for Pi in (Pi_Td, Pi_Ts, Pi_A):
        with pytest.raises(ValueError, match=r"Z: expected shape \(\.\.\., 4, 4\)"):
            Pi(np.ones((3, 3)))


@pytest.mark.parametrize("p,rank,exc,pattern", [
    (0, 1, ValueError, "p: expected a positive integer"),
    (2.5, 1, ValueError, "p: expected a positive integer"),
    (3, 4, ValueError, "rank: expected 1 <= rank <= p = 3"),
    (3, 0, ValueError, "rank: expected 1 <= rank"),
])
def test_tangent_dims_bad(p, rank, exc, pattern):
    with pytest.raises(exc, match=pattern):
        tangent_dims(p, rank)


@pytest.mark.parametrize("sigma", [0, -1.0, np.nan, np.inf])
def test_local_risks_and_sure_bad_sigma(sigma):
    with pytest.raises(ValueError, match="sigma: expected a finite number > 0"):
        local_risks(M4, U4, sigma)
    with pytest.raises(ValueError, match="sigma: expected a finite number > 0"):
        sure_select(M4, U4, sigma)


def test_local_risks_and_sure_shape_mismatch():
    with pytest.raises(ValueError, match=r"H: shape \(5, 5\) does not match U with p = 4"):
        local_risks(np.ones((5, 5)), U4, 1.0)
    with pytest.raises(ValueError, match=r"Z: shape \(5, 5\) does not match U with p = 4"):
        sure_select(np.ones((5, 5)), U4, 1.0)
    with pytest.raises(ValueError, match="H: expected a square"):
        local_risks(np.ones((4, 3)), U4, 1.0)
    with pytest.raises(ValueError, match="Z: contains NaN"):
        sure_select(_with(np.nan, arr=M4), U4, 1.0)


@pytest.mark.parametrize("k", [0, -2, 1.5, True, "3"])
def test_sure_bad_k(k):
    with pytest.raises(ValueError, match="k: expected a positive integer"):
        sure_select_probability(k, 1.0)
    with pytest.raises(ValueError, match="k: expected a positive integer"):
        sure_regret(k, 1.0, 1.0)


@pytest.mark.parametrize("lam", [-1.0, np.nan, np.inf, [1.0, -0.5]])
def test_sure_bad_lambda_and_delta(lam):
    with pytest.raises(ValueError, match="lam: expected finite values >= 0"):
        sure_select_probability(3, lam)
    with pytest.raises(ValueError, match="delta2: expected finite values >= 0"):
        sure_regret(3, lam, 1.0)


@pytest.mark.parametrize("s2", [0.0, -1.0, np.nan])
def test_sure_regret_bad_sigma2(s2):
    with pytest.raises(ValueError, match="sigma2: expected a finite number > 0"):
        sure_regret(3, 1.0, s2)


def test_optimal_separation_bad_covariances():
    with pytest.raises(ValueError, match="Sigma_x: expected a symmetric covariance"):
        optimal_separation(M4, M4, None, 1)
    with pytest.raises(ValueError, match="Sigma_y: expected a positive-definite covariance"):
        optimal_separation(M4, None, np.diag([1.0, 1.0, 0.0, 1.0]), 1)
    with pytest.raises(ValueError, match="Sigma_x: expected a square"):
        optimal_separation(M4, np.ones((4, 3)), None, 1)
    with pytest.raises(ValueError, match=r"Sigma_y: expected shape \(4, 4\) to match C"):
        optimal_separation(M4, None, np.eye(3), 1)
    with pytest.raises(ValueError, match="rank: expected 1 <= rank <= p = 4, got 5"):
        optimal_separation(M4, None, None, 5)
    with pytest.raises(ValueError, match="C: contains NaN"):
        optimal_separation(_with(np.nan, arr=M4), None, None, 1)


# --------------------------------------------------------------------------- CARS
@pytest.mark.parametrize("n", [1, 2, 3])
def test_cars_fewer_than_four_triples(n):
    with pytest.raises(ValueError, match=f"X: CARS needs at least 4 triples, got n = {n}"):
        cars_score(X10[:n], Y10[:n], N10[:n], 1)


def test_cars_empty_input():
    with pytest.raises(ValueError, match=r"X: expected a non-empty array, got shape \(0, 4\)"):
        cars_score(np.ones((0, 4)), np.ones((0, 4)), np.ones((0, 4)), 1)


@pytest.mark.parametrize("kwargs,exc,pattern", [
    (dict(rank=0), ValueError, "rank: expected 1 <= rank <= p = 4, got 0"),
    (dict(rank=5), ValueError, "rank: expected 1 <= rank <= p = 4, got 5"),
    (dict(rank=1, n_splits=0), ValueError, "n_splits: expected a positive integer"),
    (dict(rank=1, n_splits=2.5), ValueError, "n_splits: expected a positive integer"),
    (dict(rank=1, seed=None), TypeError, "seed: expected an int seed or numpy.random.Generator"),
    (dict(rank=1, seed=-3), ValueError, "seed: expected a non-negative int"),
    (dict(rank=1, selector_dim=0), ValueError, "selector_dim: expected a positive integer"),
    (dict(rank=1, splits=[]), ValueError, "splits: expected at least one"),
    (dict(rank=1, splits=[([0, 1], [1, 2])]), ValueError, r"splits\[0\]: I1 and I2 must be disjoint"),
    (dict(rank=1, splits=[([0, 10], [1, 2])]), ValueError, r"splits\[0\]\.I1: indices must lie in \[0, 10\)"),
    (dict(rank=1, splits=[([0, 1], [-1, 2])]), ValueError, r"splits\[0\]\.I2: indices must lie in"),
    (dict(rank=1, splits=[([0, 0], [1, 2])]), ValueError, r"splits\[0\]\.I1: contains repeated indices"),
    (dict(rank=1, splits=[([], [1, 2])]), ValueError, r"splits\[0\]\.I1: expected a non-empty 1-d index array"),
    (dict(rank=1, splits=[([0], [1], [2])]), ValueError, r"splits\[0\]: expected a pair"),
])
def test_cars_bad_arguments(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        cars_score(X10, Y10, N10, **kwargs)


@pytest.mark.parametrize("args,pattern", [
    ((X10, Y10[:9], N10), r"Y_pos: shape \(9, 4\) does not match X shape \(10, 4\)"),
    ((X10, Y10, N10[:, :2]), r"Y_neg: shape \(10, 2\) does not match X"),
    ((_with(np.nan), Y10, N10), r"X: contains NaN or infinite values \(first at index \[0, 0\]\)"),
    ((X10, _with(np.inf, 3, 1, arr=Y10), N10), r"Y_pos: contains NaN or infinite values \(first at index \[3, 1\]\)"),
    ((X10, Y10, _with(np.nan, arr=N10)), r"Y_neg: contains NaN"),
    ((X10[:, 0], Y10, N10), r"X: expected a 2-d array"),
])
def test_cars_bad_arrays(args, pattern):
    with pytest.raises(ValueError, match=pattern):
        cars_score(*args, 1)


def test_half_splits_too_few():
    with pytest.raises(ValueError, match="n: need at least 2"):
        half_splits(1, 3, 0)


# --------------------------------------------------------------------------- estimators
@pytest.mark.parametrize("Est", [SharedProjection, DualProjection, GeometrySelector])
@pytest.mark.parametrize("rank,exc,pattern", [
    (0, ValueError, "rank: expected 1 <= rank <= p = 4, got 0"),
    (5, ValueError, "rank: expected 1 <= rank <= p = 4, got 5"),
    (2.0, TypeError, "rank: expected an integer"),
])
def test_estimator_bad_rank(Est, rank, exc, pattern):
    with pytest.raises(exc, match=pattern):
        Est(rank=rank).fit(X10, Y10, N10)


@pytest.mark.parametrize("Est", [SharedProjection, DualProjection, GeometrySelector])
@pytest.mark.parametrize("args,pattern", [
    ((X10, Y10[:, :3], N10), r"Y_pos: shape \(10, 3\) does not match X shape \(10, 4\)"),
    ((X10, Y10, N10[:5]), r"Y_neg: shape \(5, 4\) does not match X"),
    ((_with(np.nan), Y10, N10), r"X: contains NaN or infinite"),
    ((X10, _with(np.inf, arr=Y10), N10), r"Y_pos: contains NaN or infinite"),
    ((X10, Y10, _with(np.nan, arr=N10)), r"Y_neg: contains NaN or infinite"),
    ((X10.ravel(), Y10, N10), r"X: expected a 2-d array"),
    ((np.ones((0, 4)), np.ones((0, 4)), np.ones((0, 4))), r"X: expected a non-empty array"),
])
def test_estimator_bad_arrays(Est, args, pattern):
    with pytest.raises(ValueError, match=pattern):
        Est(rank=1).fit(*args)


@pytest.mark.parametrize("Est", [SharedProjection, DualProjection, GeometrySelector])
def test_estimator_bad_transform_input(Est):
    est = Est(rank=2).fit(X10, Y10, N10)
    with pytest.raises(ValueError, match="X: has 3 features per row, but .* was fitted with 4"):
        est.transform_queries(np.ones((2, 3)))
    with pytest.raises(ValueError, match="Y: has 5 features per row"):
        est.transform_documents(np.ones((2, 5)))
    with pytest.raises(ValueError, match="Y: contains NaN"):
        est.similarity(np.ones((2, 4)), _with(np.nan, arr=np.ones((2, 4))))


def test_geometry_selector_cars_needs_four_triples():
    with pytest.raises(ValueError, match="X: CARS needs at least 4 triples, got n = 3"):
        GeometrySelector(rank=1).fit(X10[:3], Y10[:3], N10[:3])


def test_geometry_selector_sure_zero_variance_names_sigma():
    X = np.ones((10, 4))
    with pytest.raises(ValueError, match="sigma: the moment has zero estimated noise"):
        GeometrySelector(rank=1, selector="sure").fit(X, X, np.zeros_like(X))


# --------------------------------------------------------------------------- simulation
@pytest.mark.parametrize("kwargs,pattern", [
    (dict(p=1), "p: expected an integer >= 2"),
    (dict(p=8, latent_rank=5), "latent_rank: the rotation needs 2 \\* latent_rank <= p"),
    (dict(p=8, latent_rank=0), "latent_rank: expected an integer in \\[1, p=8\\]"),
    (dict(noise_sd=-0.1), "noise_sd: expected a finite number >= 0"),
    (dict(noise_sd=np.nan), "noise_sd: expected a finite number >= 0"),
    (dict(angle=np.inf), "angle: expected a finite number of radians"),
    (dict(seed=-1), "seed: expected a non-negative int"),
])
def test_two_view_model_bad(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        two_view_model(**kwargs)


def test_two_view_sampling_bad_counts():
    m = two_view_model(p=6, latent_rank=2)
    with pytest.raises(ValueError, match="n: expected a positive number of triples"):
        m.sample_triples(0, 1)
    with pytest.raises(ValueError, match="n_queries, n_negatives: expected positive counts"):
        m.sample_test(3, 0, 1)


# --------------------------------------------------------------------------- helpers
def test_validation_helpers_directly():
    with pytest.raises(ValueError, match=r"A: expected a 1-d array of shape \(n,\)"):
        as_float_matrix(np.ones((2, 2)), "A", ndim=1)
    assert as_float_matrix(np.ones((2, 2), dtype=np.float16), "A").dtype == np.float64
    assert as_float_matrix(np.ones((2, 2), dtype=bool), "A").dtype == np.float64
    assert check_rank(np.int32(3), 5) == 3
    with pytest.raises(ValueError, match="k: expected 1 <= k <= p = 2, got 3"):
        check_rank(3, 2, "k")
    assert check_positive(0, "x", allow_zero=True) == 0.0
    with pytest.raises(TypeError, match="x: expected a number"):
        check_positive("abc", "x")
    g = np.random.default_rng(1)
    assert check_seed(g) is g
    assert isinstance(check_seed(np.random.SeedSequence(3)), np.random.Generator)
    with pytest.raises(TypeError, match="seed: expected an int seed"):
        check_seed(1.5)


def test_candidate_ndcg_bad_operator():
    from asymgeo import candidate_ndcg

    test = two_view_model(p=6, latent_rank=2).sample_test(3, 4, 0)
    with pytest.raises(ValueError, match=r"M: expected shape \(6, 6\) to match the test queries, got \(5, 5\)"):
        candidate_ndcg(np.eye(5), test)
    with pytest.raises(ValueError, match="M: expected a square"):
        candidate_ndcg(np.ones((6, 5)), test)
    # A NaN operator used to rank every positive first (all comparisons False): NDCG 1.
    with pytest.raises(ValueError, match="M: contains NaN"):
        candidate_ndcg(np.full((6, 6), np.nan), test)


def test_local_gaussian_point_bad_rank():
    from asymgeo.estimators.simulation import local_gaussian_point

    with pytest.raises(ValueError, match="rank: expected 1 <= rank <= p = 3, got 5"):
        local_gaussian_point(3, 5, 0)


@pytest.mark.parametrize("X,Yp,Yn,pattern", [
    (np.zeros((8, 3)), np.ones((8, 3)), np.zeros((8, 3)), "X: every query vector is zero"),
    (np.tile([1.0, 2.0, 3.0], (8, 1)), X10[:8, :3], N10[:8, :3], "X: zero variance, every query row is identical"),
    (X10[:8, :3], N10[:8, :3], N10[:8, :3], "Y_pos, Y_neg: zero variance in Y_pos - Y_neg"),
])
def test_zero_variance_triples_refused(X, Yp, Yn, pattern):
    with pytest.raises(ValueError, match=pattern):
        cars_score(X, Yp, Yn, 1)
    with pytest.raises(ValueError, match=pattern):
        GeometrySelector(rank=1).fit(X, Yp, Yn)


# ------------------------------------------------------------------ check_int
from asymgeo._validation import check_int  # noqa: E402


@pytest.mark.parametrize("value, kwargs, expected", [
    (3, {}, 3),
    (np.int64(5), {}, 5),
    (0, {"min_value": 0}, 0),
    (8, {"max_value": 8}, 8),
    (-4, {"min_value": None}, -4),
])
def test_check_int_accepts(value, kwargs, expected):
    out = check_int(value, "n", **kwargs)
    assert out == expected and type(out) is int


@pytest.mark.parametrize("value, kwargs, exc, match", [
    (0, {}, ValueError, "n: expected a positive integer, got 0"),
    (True, {}, ValueError, "n: expected a positive integer, got True"),
    (2.0, {}, ValueError, "n: expected a positive integer, got 2.0"),
    ("3", {}, ValueError, "n: expected a positive integer, got '3'"),
    (-1, {"min_value": 0}, ValueError, "n: expected a non-negative integer, got -1"),
    (1, {"min_value": 2}, ValueError, "n: expected an integer >= 2, got 1"),
    (9, {"max_value": 8, "max_label": "p=8"}, ValueError, r"n: expected an integer in \[1, p=8\], got 9"),
    (2.5, {"type_error": True}, TypeError, "n: expected an integer, got float 2.5"),
    (False, {"type_error": True}, TypeError, "n: expected an integer, got bool False"),
    (0, {"note": " (dual-only directions)"}, ValueError, r"positive integer \(dual-only directions\), got 0"),
])
def test_check_int_refuses(value, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        check_int(value, "n", **kwargs)


from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@given(value=st.integers(-10**6, 10**6), lo=st.integers(-5, 5), span=st.integers(0, 10))
def test_check_int_property_range(value, lo, span):
    hi = lo + span
    if lo <= value <= hi:
        assert check_int(value, "v", min_value=lo, max_value=hi) == value
        assert check_int(np.int32(value) if abs(value) < 2**31 else value, "v", min_value=lo, max_value=hi) == value
    else:
        with pytest.raises(ValueError, match=r"^v: expected an integer in \["):
            check_int(value, "v", min_value=lo, max_value=hi)


@given(value=st.floats(allow_nan=True) | st.booleans() | st.text(max_size=3) | st.none())
def test_check_int_property_refuses_non_integers(value):
    with pytest.raises(ValueError, match="^x: expected a positive integer"):
        check_int(value, "x")
    with pytest.raises(TypeError, match="^x: expected an integer, got"):
        check_int(value, "x", type_error=True)
