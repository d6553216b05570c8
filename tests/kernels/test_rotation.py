"""Relevance-informed query rotations (asymgeo.kernels.rotation): independent checks.

The reference rotation is built a different way: a full orthonormal basis
``Q = [u1, w1, u2, w2, ..., rest]`` and a block-diagonal matrix of 2x2 Givens blocks,
``R_ref = Q G Q^T``.  Plane geometry is checked with angles measured by arccos.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asymgeo.kernels.geometry import relevance_moment
from asymgeo.kernels.rotation import query_rotation, relevance_planes, rotate_queries


def _random_planes(rng, p, m):
    Q, _ = np.linalg.qr(rng.standard_normal((p, 2 * m)))
    return Q[:, :m], Q[:, m:]


def _reference_rotation(U, W, angle):
    p, m = U.shape
    B = np.empty((p, 2 * m))
    B[:, 0::2], B[:, 1::2] = U, W
    # complete the basis: orthonormal complement from a full QR of B
    Qfull, _ = np.linalg.qr(np.hstack([B, np.eye(p)]))
    Qfull[:, : 2 * m] = B
    G = np.eye(p)
    c, s = np.cos(angle), np.sin(angle)
    for i in range(m):
        G[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, -s], [s, c]]
    return Qfull @ G @ Qfull.T


def _triples(rng, n=300, p=24):
    X = rng.standard_normal((n, p)) * np.linspace(2.0, 0.2, p)
    T = rng.standard_normal((p, p)) / np.sqrt(p)
    Y_pos = X @ T + 0.3 * rng.standard_normal((n, p))
    Y_neg = rng.standard_normal((n, p))
    return X, Y_pos, Y_neg


def test_matches_givens_reference(rng):
    U, W = _random_planes(rng, 20, 4)
    for angle in (0.0, 0.3, np.pi / 2, 2.5):
        np.testing.assert_allclose(query_rotation(U, W, angle), _reference_rotation(U, W, angle), atol=1e-12)


def test_identity_at_zero_and_orthogonal(rng):
    U, W = _random_planes(rng, 16, 8)
    np.testing.assert_allclose(query_rotation(U, W, 0.0), np.eye(16), atol=1e-15)
    R = query_rotation(U, W, np.deg2rad(75))
    np.testing.assert_allclose(R.T @ R, np.eye(16), atol=1e-12)
    assert np.linalg.det(R) == pytest.approx(1.0)


def test_rotates_by_exactly_the_angle_inside_each_plane(rng):
    U, W = _random_planes(rng, 30, 8)
    for deg in (15, 45, 90):
        R = query_rotation(U, W, np.deg2rad(deg))
        for i in range(8):
            a, b = rng.standard_normal(2)
            v = a * U[:, i] + b * W[:, i]
            Rv = R @ v
            measured = np.degrees(np.arccos(np.clip(v @ Rv / (v @ v), -1, 1)))
            assert measured == pytest.approx(deg, abs=1e-6)
            # stays in the plane, and the sense is u -> w
            plane = np.stack([U[:, i], W[:, i]], axis=1)
            np.testing.assert_allclose(plane @ (plane.T @ Rv), Rv, atol=1e-12)
        np.testing.assert_allclose(R @ U[:, 0], np.cos(np.deg2rad(deg)) * U[:, 0] + np.sin(np.deg2rad(deg)) * W[:, 0],
                                   atol=1e-12)


def test_fixes_the_orthogonal_complement(rng):
    U, W = _random_planes(rng, 25, 5)
    z = rng.standard_normal(25)
    B = np.hstack([U, W])
    z -= B @ (B.T @ z)
    np.testing.assert_allclose(query_rotation(U, W, 1.1) @ z, z, atol=1e-12)


def test_moves_queries_only_moment_becomes_R_C(rng):
    """Rotating the queries (documents fixed) turns the relevance moment into R C."""
    X, Yp, Yn = _triples(rng)
    C = relevance_moment(X, Yp, Yn)
    U, W = relevance_planes(C, X, 4)
    R = query_rotation(U, W, np.deg2rad(60))
    Xr = rotate_queries(X, U, W, np.deg2rad(60))
    np.testing.assert_allclose(Xr, X @ R.T, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(Xr, axis=1), np.linalg.norm(X, axis=1), rtol=1e-12)
    np.testing.assert_allclose(relevance_moment(Xr, Yp, Yn), R @ C, atol=1e-12)
    # the documents never enter: the same planes rotate any query set identically
    np.testing.assert_allclose(rotate_queries(X[:5], U, W, 0.0), X[:5], atol=1e-15)


def test_planes_u_are_leading_left_singular_directions(rng):
    X, Yp, Yn = _triples(rng)
    C = relevance_moment(X, Yp, Yn)
    U, W = relevance_planes(C, X, 3)
    # independent: eigenvectors of C C^T (not an SVD of C)
    _vals, vecs = np.linalg.eigh(C @ C.T)
    top = vecs[:, ::-1][:, :3]
    np.testing.assert_allclose(np.abs(np.sum(U * top, axis=0)), 1.0, atol=1e-8)
    B = np.hstack([U, W])
    np.testing.assert_allclose(B.T @ B, np.eye(6), atol=1e-12)


def test_planes_w_avoid_the_leading_query_subspace(rng):
    X, Yp, Yn = _triples(rng)
    C = relevance_moment(X, Yp, Yn)
    energy = 0.8
    U, W = relevance_planes(C, X, 3, query_energy=energy)
    # independent: leading right singular vectors of X holding 80% of ||X||_F^2
    _, s, vt = np.linalg.svd(X, full_matrices=False)
    q = int(np.argmax(np.cumsum(s**2) / np.sum(s**2) >= energy)) + 1
    lead = vt[:q].T
    assert np.abs(lead.T @ W).max() < 1e-10
    assert np.abs(U.T @ W).max() < 1e-10
    # W spans the top-3 eigenspace of Sigma_x compressed to the complement of S
    S, _ = np.linalg.qr(np.hstack([U, lead]))
    P = np.eye(X.shape[1]) - S @ S.T
    sigma = X.T @ X / X.shape[0]
    top3 = np.sort(np.linalg.eigvalsh(P @ sigma @ P))[::-1][:3]
    assert np.trace(W.T @ sigma @ W) == pytest.approx(top3.sum(), rel=1e-9)
    # deterministic
    U2, W2 = relevance_planes(C, X, 3, query_energy=energy)
    np.testing.assert_array_equal(U, U2)
    np.testing.assert_array_equal(W, W2)


def test_planes_when_queries_fill_the_space_and_n_below_p(rng):
    X, Yp, Yn = _triples(rng, n=10, p=24)  # n < p: Sigma_x is singular
    U, W = relevance_planes(relevance_moment(X, Yp, Yn), X, 8, query_energy=0.99)
    B = np.hstack([U, W])
    np.testing.assert_allclose(B.T @ B, np.eye(16), atol=1e-10)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"C": np.zeros((4, 4)), "X": np.ones((3, 4)), "n_planes": 1}, "zero"),
        ({"C": np.eye(4), "X": np.ones((3, 5)), "n_planes": 1}, "X: expected shape"),
        ({"C": np.ones((4, 3)), "X": np.ones((3, 4)), "n_planes": 1}, "C: expected a square"),
        ({"C": np.eye(4), "X": np.ones((3, 4)), "n_planes": 3}, "n_planes"),
        ({"C": np.eye(4), "X": np.ones((3, 4)), "n_planes": 0}, "n_planes"),
        ({"C": np.eye(4), "X": np.ones((3, 4)), "n_planes": 1, "query_energy": 1.0}, "query_energy"),
        ({"C": np.full((4, 4), np.nan), "X": np.ones((3, 4)), "n_planes": 1}, "C"),
    ],
)
def test_relevance_planes_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        relevance_planes(**kwargs)


def test_rotation_bad_input(rng):
    U, W = _random_planes(rng, 8, 2)
    with pytest.raises(ValueError, match="orthonormal"):
        query_rotation(U, U, 0.1)
    with pytest.raises(ValueError, match="same"):
        query_rotation(U, W[:, :1], 0.1)
    with pytest.raises(ValueError, match="angle"):
        query_rotation(U, W, float("nan"))
    with pytest.raises(ValueError, match="angle"):
        query_rotation(U, W, "90")
    with pytest.raises(ValueError, match=r"X: expected shape \(n, 8\)"):
        rotate_queries(np.ones((3, 7)), U, W, 0.1)


@settings(max_examples=40, deadline=None)
@given(
    p=st.integers(2, 24),
    m_frac=st.floats(0.0, 1.0),
    a=st.floats(-7.0, 7.0),
    b=st.floats(-7.0, 7.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_rotation_properties(p, m_frac, a, b, seed):
    rng = np.random.default_rng(seed)
    m = 1 + int(m_frac * (p // 2 - 1))
    U, W = _random_planes(rng, p, m)
    Ra, Rb = query_rotation(U, W, a), query_rotation(U, W, b)
    np.testing.assert_allclose(Ra.T @ Ra, np.eye(p), atol=1e-11)
    np.testing.assert_allclose(Ra @ Rb, query_rotation(U, W, a + b), atol=1e-11)
    np.testing.assert_allclose(Ra @ query_rotation(U, W, -a), np.eye(p), atol=1e-11)
    np.testing.assert_allclose(Ra, _reference_rotation(U, W, a), atol=1e-11)
    X = rng.standard_normal((5, p))
    np.testing.assert_allclose(rotate_queries(X, U, W, a), X @ Ra.T, atol=1e-11)


def test_random_directions_are_orthonormal_orthogonal_to_u_and_seeded():
    from asymgeo.kernels.rotation import relevance_planes

    rng = np.random.default_rng(3)
    p, n, m = 24, 60, 3
    X = rng.standard_normal((n, p))
    C = X.T @ rng.standard_normal((n, p)) / n
    U0, W0 = relevance_planes(C, X, m)
    U, W = relevance_planes(C, X, m, directions="random", seed=11)
    np.testing.assert_allclose(U, U0)  # the relevance directions do not depend on the variant
    np.testing.assert_allclose(W.T @ W, np.eye(m), atol=1e-12)
    np.testing.assert_allclose(U.T @ W, 0.0, atol=1e-12)
    _, W_again = relevance_planes(C, X, m, directions="random", seed=11)
    _, W_other = relevance_planes(C, X, m, directions="random", seed=12)
    np.testing.assert_array_equal(W, W_again)
    assert not np.allclose(np.abs(W.T @ W_other), np.eye(m), atol=1e-3)
    # independent: the span of W is the span of (I - U U^T) G for the same Gaussian draw
    G = np.random.default_rng(np.random.SeedSequence(11)).standard_normal((p, m))
    G = G - U @ (U.T @ G)
    Qg, _ = np.linalg.qr(G)
    np.testing.assert_allclose(W @ W.T, Qg @ Qg.T, atol=1e-10)
    with pytest.raises(ValueError, match="directions"):
        relevance_planes(C, X, m, directions="trailing")
