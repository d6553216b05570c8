"""Estimators: scikit-learn parameter contract and closed-form fits checked against numpy."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.utils import estimator_checks as ec

from asymgeo import DualProjection, GeometrySelector, SharedProjection, cars_score, sure_select, tangent_dims
from asymgeo.estimators.projections import NotFittedError
from asymgeo.kernels.theory import estimate_moment_noise
from reference_impl import naive_dual_truncate, naive_moment, naive_shared_truncate

ESTIMATORS = [SharedProjection, DualProjection, GeometrySelector]


def _triples(seed=0, n=200, p=8, asym=0.7):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    A = np.eye(p) + asym * rng.standard_normal((p, p))
    Y_pos = X @ A + 0.5 * rng.standard_normal((n, p))
    Y_neg = rng.standard_normal((n, p))
    return X, Y_pos, Y_neg


# --------------------------------------------------------------------------- sklearn contract
SKLEARN_CHECKS = [
    name
    for name in (
        "check_get_params_invariance",
        "check_set_params",
        "check_parameters_default_constructible",
        "check_no_attributes_set_in_init",
        "check_estimator_repr",
        "check_estimator_cloneable",
        "check_do_not_raise_errors_in_init_or_set_params",
        "check_estimator_tags_renamed",
        "check_valid_tag_types",
    )
    if hasattr(ec, name)
]


@pytest.mark.parametrize("check", SKLEARN_CHECKS)
@pytest.mark.parametrize("Est", ESTIMATORS)
def test_sklearn_estimator_checks(Est, check):
    getattr(ec, check)(Est.__name__, Est())


@pytest.mark.parametrize("Est", ESTIMATORS)
def test_get_set_params_and_clone(Est):
    est = Est(rank=3)
    params = est.get_params()
    assert params["rank"] == 3
    assert set(params) == set(Est().get_params())
    assert est.set_params(rank=5) is est and est.rank == 5
    with pytest.raises(ValueError, match="Invalid parameter 'nope'"):
        est.set_params(nope=1)
    X, Yp, Yn = _triples(1, n=40, p=6)
    est.fit(X, Yp, Yn)
    c = clone(est)
    assert c.get_params() == est.get_params()
    assert not hasattr(c, "operator_") and not hasattr(c, "choice_")
    assert repr(est).startswith(f"{Est.__name__}(rank=5")
    # Round-trip through pickle keeps the fitted operator.
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(back.operator_, est.operator_)


@pytest.mark.parametrize("Est", ESTIMATORS)
def test_fit_returns_self_and_does_not_touch_params(Est):
    X, Yp, Yn = _triples(2, n=60, p=6)
    est = Est(rank=np.int64(2))
    before = dict(est.get_params())
    assert est.fit(X, Yp, Yn) is est
    after = est.get_params()
    assert after.keys() == before.keys()
    for k in before:
        assert after[k] is before[k]


@pytest.mark.parametrize("Est", ESTIMATORS)
def test_not_fitted_errors(Est):
    est = Est(rank=2)
    X = np.ones((3, 4))
    for call in (lambda: est.transform_queries(X), lambda: est.transform_documents(X), lambda: est.similarity(X, X)):
        with pytest.raises(NotFittedError, match="not fitted"):
            call()
    with pytest.raises(ValueError):
        est.transform_queries(X)
    with pytest.raises(AttributeError):
        est.operator_


# --------------------------------------------------------------------------- closed forms
@pytest.mark.parametrize("method", ["auto", "dense", "krylov"])
@pytest.mark.parametrize("p,r", [(8, 3), (48, 4)])
def test_projections_equal_independent_truncations(method, p, r):
    X, Yp, Yn = _triples(3, n=400, p=p)
    C = naive_moment(X, Yp, Yn)
    sh = SharedProjection(rank=r, solver=method).fit(X, Yp, Yn)
    du = DualProjection(rank=r, solver=method).fit(X, Yp, Yn)
    np.testing.assert_allclose(sh.moment_, C, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sh.operator_, naive_shared_truncate(C, r), atol=1e-9)
    np.testing.assert_allclose(du.operator_, naive_dual_truncate(C, r), atol=1e-9)
    for est in (sh, du):
        assert est.query_map_.shape == est.doc_map_.shape == (r, p)
        np.testing.assert_allclose(est.operator_, est.query_map_.T @ est.doc_map_, atol=1e-14)
        assert est.n_features_in_ == p and est.n_triples_ == 400
    np.testing.assert_array_equal(sh.query_map_, sh.doc_map_)
    w = np.linalg.eigvalsh(sh.operator_)
    assert w.min() > -1e-10


def test_y_neg_none_uses_positive_moment():
    X, Yp, _ = _triples(4, n=50, p=5)
    for Est in (SharedProjection, DualProjection):
        est = Est(rank=2).fit(X, Yp)
        np.testing.assert_allclose(est.moment_, X.T @ Yp / 50, rtol=1e-12)


@pytest.mark.parametrize("Est", [SharedProjection, DualProjection, GeometrySelector])
def test_transform_and_score_are_consistent(Est):
    X, Yp, Yn = _triples(5, n=120, p=7)
    est = Est(rank=3).fit(X, Yp, Yn)
    rng = np.random.default_rng(0)
    Q, Dc = rng.standard_normal((9, 7)), rng.standard_normal((11, 7))
    S = est.similarity(Q, Dc)
    assert S.shape == (9, 11)
    np.testing.assert_allclose(est.transform_queries(Q) @ est.transform_documents(Dc).T, S, atol=1e-12)
    np.testing.assert_allclose(S, Q @ est.operator_ @ Dc.T, atol=1e-12)
    with pytest.raises(ValueError, match="features"):
        est.transform_queries(rng.standard_normal((2, 6)))
    with pytest.raises(ValueError, match="features"):
        est.similarity(Q, rng.standard_normal((2, 8)))


def test_float16_inputs_accumulate_in_float64():
    X, Yp, Yn = (a.astype(np.float16) for a in _triples(6, n=3000, p=6))
    C64 = naive_moment(X.astype(np.float64), Yp.astype(np.float64), Yn.astype(np.float64))
    for Est in (SharedProjection, DualProjection):
        est = Est(rank=2).fit(X, Yp, Yn)
        assert est.moment_.dtype == np.float64 and est.operator_.dtype == np.float64
        np.testing.assert_allclose(est.moment_, C64, rtol=1e-12, atol=1e-13)
        assert est.transform_queries(X[:3]).dtype == np.float64
    sel = GeometrySelector(rank=2, n_splits=5).fit(X, Yp, Yn)
    ref = cars_score(X.astype(np.float64), Yp.astype(np.float64), Yn.astype(np.float64), 2, n_splits=5, seed=0)
    assert sel.score_ == pytest.approx(ref.score, rel=1e-10)


def test_refit_is_idempotent_and_resets_shape():
    X, Yp, Yn = _triples(7, n=80, p=6)
    est = DualProjection(rank=2).fit(X, Yp, Yn)
    op = est.operator_.copy()
    est.fit(X, Yp, Yn)
    np.testing.assert_array_equal(est.operator_, op)
    X2, Yp2, Yn2 = _triples(8, n=30, p=4)
    est.fit(X2, Yp2, Yn2)
    assert est.n_features_in_ == 4 and est.operator_.shape == (4, 4)


# --------------------------------------------------------------------------- selector
@pytest.mark.parametrize("asym,n", [(0.0, 16), (1.5, 2000)])
def test_geometry_selector_cars_matches_kernel(asym, n):
    X, Yp, Yn = _triples(9, n=n, p=6, asym=asym)
    sel = GeometrySelector(rank=2, n_splits=7, seed=3).fit(X, Yp, Yn)
    ref = cars_score(X, Yp, Yn, 2, n_splits=7, seed=3)
    assert sel.choice_ == ref.choice
    assert sel.score_ == ref.score
    np.testing.assert_array_equal(sel.result_.terms, ref.terms)
    Expected = DualProjection if ref.choice == "dual" else SharedProjection
    assert type(sel.estimator_) is Expected
    np.testing.assert_allclose(sel.operator_, Expected(rank=2).fit(X, Yp, Yn).operator_, atol=1e-12)


def test_geometry_selector_cars_both_outcomes_occur():
    choices = {
        GeometrySelector(rank=2, n_splits=7).fit(*_triples(9, n=n, p=6, asym=a)).choice_
        for a, n in ((0.0, 16), (1.5, 2000))
    }
    assert choices == {"shared", "dual"}


def test_geometry_selector_cars_selector_dim():
    X, Yp, Yn = _triples(10, n=100, p=20)
    sel = GeometrySelector(rank=2, n_splits=4, seed=1, selector_dim=8).fit(X, Yp, Yn)
    ref = cars_score(X, Yp, Yn, 2, n_splits=4, seed=1, selector_dim=8)
    assert sel.score_ == ref.score and sel.result_.selector_dim == 8
    assert sel.estimator_.n_features_in_ == 20  # the winner is fitted in full dimension


def _hand_sure(X, Yp, Yn, r, sigma):
    n = X.shape[0]
    C = naive_moment(X, Yp, Yn)
    w, Q = np.linalg.eigh((C + C.T) / 2)
    U = Q[:, ::-1][:, :r]
    S = (U * w[::-1][:r]) @ U.T
    P = U @ U.T

    def td(Z):
        return P @ Z + Z @ P - P @ Z @ P

    def ts(Z):
        Zs = (Z + Z.T) / 2
        return P @ Zs + Zs @ P - P @ Zs @ P

    Z = np.sqrt(n) * td(C - S)
    d_d, d_s, _ = tangent_dims(X.shape[1], r)
    R_d = np.sum((Z - td(Z)) ** 2) + sigma ** 2 * d_d
    R_s = np.sum((Z - ts(Z)) ** 2) + sigma ** 2 * (2 * d_s - d_d)
    return R_s, R_d


@pytest.mark.parametrize("sigma", [0.3, 3.0, None])
def test_geometry_selector_sure_matches_hand_computation(sigma):
    X, Yp, Yn = _triples(11, n=300, p=6, asym=0.4)
    sel = GeometrySelector(rank=2, selector="sure", sigma=sigma).fit(X, Yp, Yn)
    if sigma is None:
        W = X[:, :, None] * (Yp - Yn)[:, None, :]  # per-triple moments W_i = x_i d_i^T
        sigma_hand = float(np.sqrt(np.var(W, axis=0, ddof=1).mean()))
        assert sel.sigma_ == pytest.approx(sigma_hand, rel=1e-10)
        assert estimate_moment_noise(X, Yp - Yn) == pytest.approx(sigma_hand, rel=1e-10)
        sigma = sigma_hand
    R_s, R_d = _hand_sure(X, Yp, Yn, 2, sigma)
    assert sel.result_.risk_shared == pytest.approx(R_s, rel=1e-8)
    assert sel.result_.risk_dual == pytest.approx(R_d, rel=1e-8)
    assert sel.score_ == pytest.approx(R_s - R_d, rel=1e-8, abs=1e-8)
    assert sel.choice_ == ("dual" if R_d < R_s else "shared")
    assert isinstance(sel.estimator_, DualProjection if sel.choice_ == "dual" else SharedProjection)


def test_geometry_selector_sure_choice_flips_with_sigma():
    X, Yp, Yn = _triples(11, n=300, p=6, asym=0.4)
    assert GeometrySelector(rank=2, selector="sure", sigma=0.01).fit(X, Yp, Yn).choice_ == "dual"
    assert GeometrySelector(rank=2, selector="sure", sigma=100.0).fit(X, Yp, Yn).choice_ == "shared"


def test_geometry_selector_sure_needs_positive_eigenvalues():
    rng = np.random.default_rng(12)
    X = rng.standard_normal((100, 4))
    with pytest.raises(ValueError, match="rank"):
        GeometrySelector(rank=2, selector="sure", sigma=1.0).fit(X, -X, np.zeros_like(X))


def test_geometry_selector_sure_zero_variance_data():
    X = np.ones((10, 3))
    Z = np.zeros((10, 3))
    with pytest.raises(ValueError, match="sigma"):
        GeometrySelector(rank=1, selector="sure").fit(X, Z + 1.0, Z)


def test_geometry_selector_bad_selector():
    X, Yp, Yn = _triples(13, n=20, p=4)
    with pytest.raises(ValueError, match="selector"):
        GeometrySelector(rank=2, selector="magic").fit(X, Yp, Yn)


def test_sure_kernel_consistent_with_selector():
    """The selector's SureResult is what sure_select returns on the same Z and U."""
    X, Yp, Yn = _triples(14, n=200, p=5)
    sel = GeometrySelector(rank=2, selector="sure", sigma=1.0).fit(X, Yp, Yn)
    C = naive_moment(X, Yp, Yn)
    w, Q = np.linalg.eigh((C + C.T) / 2)
    U = Q[:, ::-1][:, :2]
    S = (U * w[::-1][:2]) @ U.T
    P = U @ U.T
    Z = np.sqrt(200) * (P @ (C - S) + (C - S) @ P - P @ (C - S) @ P)
    res = sure_select(Z, U, 1.0)
    assert res.choice == sel.choice_
    assert res.statistic == pytest.approx(sel.result_.statistic, rel=1e-8)


@pytest.mark.parametrize("cls", [SharedProjection, DualProjection])
def test_fit_refuses_zero_moment(cls):
    rng = np.random.default_rng(0)
    Y = rng.standard_normal((10, 5))
    with pytest.raises(ValueError, match="X: every query vector is zero"):
        cls(rank=2).fit(np.zeros((10, 5)), Y, rng.standard_normal((10, 5)))
    with pytest.raises(ValueError, match="positive equals the negative"):
        cls(rank=2).fit(rng.standard_normal((10, 5)), Y, Y)


# ------------------------------------------------------------------ 0.2 renames, deprecated one release
def _small_triples(seed=0, n=60, p=6):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    return X, X @ rng.standard_normal((p, p)) + 0.1 * rng.standard_normal((n, p)), rng.standard_normal((n, p))


@pytest.mark.parametrize("cls", [SharedProjection, DualProjection])
def test_method_keyword_is_a_deprecated_alias_of_solver(cls):
    X, Yp, Yn = _small_triples()
    new = cls(rank=2, solver="dense").fit(X, Yp, Yn)
    old = cls(rank=2, method="dense")
    assert old.get_params()["method"] == "dense"  # stored unchanged (scikit-learn contract)
    with pytest.warns(DeprecationWarning, match="method= is renamed to solver="):
        old.fit(X, Yp, Yn)
    np.testing.assert_array_equal(old.operator_, new.operator_)
    with pytest.raises(TypeError, match="both method= .* and solver="):
        cls(rank=2, solver="dense", method="krylov").fit(X, Yp, Yn)


def test_selector_method_keyword_is_deprecated():
    X, Yp, Yn = _small_triples()
    new = GeometrySelector(rank=2, selector="sure", sigma=1.0).fit(X, Yp, Yn)
    with pytest.warns(DeprecationWarning, match="method= is renamed to selector="):
        old = GeometrySelector(rank=2, method="sure", sigma=1.0).fit(X, Yp, Yn)
    assert old.choice_ == new.choice_ and old.score_ == new.score_
    with pytest.raises(ValueError, match="method: expected one of 'cars', 'sure', 'anisotropic'"), pytest.warns(DeprecationWarning):
        GeometrySelector(rank=2, method="magic").fit(X, Yp, Yn)


@pytest.mark.parametrize("make", [
    lambda: SharedProjection(rank=2), lambda: DualProjection(rank=2),
    lambda: GeometrySelector(rank=2, n_splits=4),
])
def test_score_is_a_deprecated_alias_of_similarity(make):
    X, Yp, Yn = _small_triples()
    est = make().fit(X, Yp, Yn)
    expected = X @ est.operator_ @ Yp.T  # the bilinear form, computed here
    np.testing.assert_allclose(est.similarity(X, Yp), expected, rtol=1e-12, atol=1e-12)
    with pytest.warns(DeprecationWarning, match=r"score\(X, Y\) is renamed to similarity\(X, Y\)"):
        np.testing.assert_array_equal(est.score(X, Yp), est.similarity(X, Yp))


def test_old_estimate_moment_noise_import_still_works():
    from asymgeo.estimators.projections import estimate_moment_noise as old
    from asymgeo.kernels.theory import estimate_moment_noise as new

    assert old is new


def test_geometry_selector_anisotropic_equals_the_kernel():
    from asymgeo.kernels.theory import anisotropic_sure

    rng = np.random.default_rng(21)
    X = rng.standard_normal((150, 12))
    Yp = X @ (np.eye(12) + 0.5 * rng.standard_normal((12, 12))) + rng.standard_normal((150, 12))
    Yn = rng.standard_normal((150, 12))
    sel = GeometrySelector(rank=3, selector="anisotropic").fit(X, Yp, Yn)
    want = anisotropic_sure(X, Yp - Yn, 3)
    assert sel.choice_ == want.choice and sel.score_ == pytest.approx(want.score, rel=1e-12)
    assert type(sel.estimator_).__name__ == ("DualProjection" if want.choice == "dual" else "SharedProjection")
