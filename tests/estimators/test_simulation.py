"""Two-view simulation (Appendix F, RQ1), candidate NDCG and the local Gaussian point."""

from __future__ import annotations

import numpy as np
import pytest

from asymgeo import approximation_gap, candidate_ndcg, relevance_moment, two_view_model
from asymgeo.estimators.simulation import CandidateTest, local_gaussian_point


@pytest.mark.parametrize("angle", [0.0, 0.4, 1.2, np.pi / 2])
def test_population_moment_spectrum_by_hand(angle):
    """C = C_q C_d^T: k singular values 1; sym(C) eigenvalues (cos +- 1)/2, k times each."""
    p, k = 12, 4
    m = two_view_model(p=p, latent_rank=k, noise_sd=0.6, angle=angle, seed=1)
    C = m.population_moment()
    np.testing.assert_allclose(C, m.C_q @ m.C_d.T)
    sv = np.linalg.svd(C, compute_uv=False)
    np.testing.assert_allclose(sv[:k], 1.0, atol=1e-12)
    np.testing.assert_allclose(sv[k:], 0.0, atol=1e-12)
    eta = np.sort(np.linalg.eigvalsh((C + C.T) / 2))
    c = np.cos(angle)
    expected = np.sort(np.r_[np.full(k, (c + 1) / 2), np.full(k, (c - 1) / 2), np.zeros(p - 2 * k)])
    np.testing.assert_allclose(eta, expected, atol=1e-12)
    # Theorem 1 at rank k by hand: dual error 0; shared error = ||K||^2 + k((c-1)/2)^2,
    # with ||K||^2 = ||C||^2 - ||sym C||^2 = k - k(c^2+1)/2 = k sin^2/2.
    gap = approximation_gap(C, k)
    assert gap.dual_error == pytest.approx(0.0, abs=1e-20)
    assert gap.skew_energy == pytest.approx(k * np.sin(angle) ** 2 / 2, abs=1e-12)
    assert gap.gap == pytest.approx(k * np.sin(angle) ** 2 / 2 + k * ((c - 1) / 2) ** 2, abs=1e-12)


def test_loadings_orthonormal_and_paired_across_angles():
    a = two_view_model(p=10, latent_rank=3, angle=0.0, seed=5)
    b = two_view_model(p=10, latent_rank=3, angle=1.0, seed=5)
    np.testing.assert_array_equal(a.C_q, b.C_q)  # same seed -> same query loading
    np.testing.assert_allclose(a.C_q, a.C_d)  # angle 0: matched views
    for m in (a, b):
        np.testing.assert_allclose(m.C_q.T @ m.C_q, np.eye(3), atol=1e-12)
        np.testing.assert_allclose(m.C_d.T @ m.C_d, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(np.diag(b.C_q.T @ b.C_d), np.cos(1.0), atol=1e-12)
    s2 = 0.6 ** 2
    Sx, Sy = b.covariances()
    np.testing.assert_allclose(Sx, b.C_q @ b.C_q.T + s2 * np.eye(10))
    np.testing.assert_allclose(Sy, b.C_d @ b.C_d.T + s2 * np.eye(10))


def test_paper_defaults():
    m = two_view_model()
    assert (m.p, m.latent_rank, m.noise_sd, m.angle) == (32, 8, 0.6, 0.0)


def test_sample_moment_converges_to_population():
    """Law of large numbers: every entry within 5 standard errors (SE from per-triple moments)."""
    m = two_view_model(p=8, latent_rank=2, noise_sd=0.6, angle=0.9, seed=2)
    n = 40_000
    tr = m.sample_triples(n, seed=3)
    C_hat = relevance_moment(tr.X, tr.Y_pos, tr.Y_neg)
    W = tr.X[:, :, None] * (tr.Y_pos - tr.Y_neg)[:, None, :]
    se = W.std(axis=0, ddof=1) / np.sqrt(n)
    z = (C_hat - m.population_moment()) / se
    assert np.abs(z).max() < 5
    # Covariances too (queries and documents), and negatives independent of queries.
    Sx, Sy = m.covariances()
    np.testing.assert_allclose(tr.X.T @ tr.X / n, Sx, atol=0.05)
    np.testing.assert_allclose(tr.Y_neg.T @ tr.Y_neg / n, Sy, atol=0.05)
    np.testing.assert_allclose(tr.X.T @ tr.Y_neg / n, 0.0, atol=0.05)


def test_sampling_is_seeded():
    m = two_view_model(p=6, latent_rank=2, seed=0)
    a, b = m.sample_triples(10, 4), m.sample_triples(10, 4)
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.Y_neg, b.Y_neg)
    assert not np.array_equal(a.X, m.sample_triples(10, 5).X)
    t = m.sample_test(5, 7, seed=1)
    assert t.X.shape == (5, 6) and t.Y_pos.shape == (5, 6) and t.Y_neg.shape == (5, 7, 6)


def test_candidate_ndcg_hand_example():
    M = np.eye(2)
    X = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    Y_pos = np.array([[0.5, 0.0], [0.5, 0.0], [0.0, 3.0], [0.1, 0.0]])
    Y_neg = np.array([
        [[1.0, 0.0], [0.2, 0.0], [0.0, 5.0]],  # one negative above: rank 2
        [[0.5, 0.0], [0.2, 0.0], [0.0, 5.0]],  # tie counts against: rank 2
        [[0.0, 1.0], [5.0, 2.0], [0.0, -1.0]],  # none above: rank 1
        [[0.2, 0.0], [0.3, 0.0], [0.4, 0.0]],  # all above: rank 4
    ])
    test = CandidateTest(X, Y_pos, Y_neg)
    np.testing.assert_allclose(
        candidate_ndcg(M, test), [1 / np.log2(3), 1 / np.log2(3), 1.0, 1 / np.log2(5)]
    )
    np.testing.assert_allclose(candidate_ndcg(M, test, k=3), [1 / np.log2(3), 1 / np.log2(3), 1.0, 0.0])
    # An asymmetric operator: score x^T M y, not y^T M x.
    Ma = np.array([[0.0, 1.0], [0.0, 0.0]])  # x^T M y = x_0 y_1
    t2 = CandidateTest(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]), np.array([[[1.0, 0.0]]]))
    assert candidate_ndcg(Ma, t2)[0] == 1.0
    assert candidate_ndcg(Ma.T, t2)[0] == pytest.approx(1 / np.log2(3))  # tie 0 vs 0 -> rank 2


def test_local_gaussian_point():
    S, U = local_gaussian_point(7, 3, seed=0)
    np.testing.assert_allclose(U.T @ U, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(S))[::-1][:3], [2.0, 1.5, 1.0], atol=1e-12)
    np.testing.assert_allclose(S, S.T)
    S2, U2 = local_gaussian_point(7, 2, seed=0, eigenvalues=np.array([5.0, 4.0]))
    np.testing.assert_allclose(S2 @ U2, U2 * [5.0, 4.0], atol=1e-12)


def test_the_paper_model_is_unchanged_draw_for_draw_by_the_variants_code():
    """The harder variants (issue #37) are off by default: the paper's triples are the draws of a
    plain two-view sampler written here (z, then noise, in this order)."""
    m = two_view_model(p=10, latent_rank=3, noise_sd=0.5, angle=0.7, seed=4)
    tr = m.sample_triples(7, 11)
    rng = np.random.default_rng(11)
    z = rng.standard_normal((7, 3))
    X = z @ m.C_q.T + 0.5 * rng.standard_normal((7, 10))
    Yp = z @ m.C_d.T + 0.5 * rng.standard_normal((7, 10))
    Yn = rng.standard_normal((7, 3)) @ m.C_d.T + 0.5 * rng.standard_normal((7, 10))
    np.testing.assert_array_equal(tr.X, X)
    np.testing.assert_array_equal(tr.Y_pos, Yp)
    np.testing.assert_array_equal(tr.Y_neg, Yn)
    assert m.query_noise is None and m.x_mean is None and m.pos_offset is None


def test_anisotropic_query_noise_keeps_the_moment_and_its_total():
    base = two_view_model(p=12, latent_rank=3, noise_sd=0.6, angle=0.5, seed=2)
    m = two_view_model(p=12, latent_rank=3, noise_sd=0.6, angle=0.5, seed=2, query_noise_decay=3.0)
    np.testing.assert_array_equal(m.C_q, base.C_q)                    # the same loadings
    np.testing.assert_allclose(m.population_moment(), base.population_moment())
    L = m.query_noise
    lam = np.sort(np.linalg.eigvalsh(L @ L.T))[::-1]
    want = np.exp(-3.0 * np.arange(12) / 11)
    np.testing.assert_allclose(lam, want / want.mean(), rtol=1e-10)   # decaying spectrum, mean 1
    tr = m.sample_triples(200_000, 5)          # Sigma_x = C_q C_q^T + s^2 L L^T, by sampling
    np.testing.assert_allclose(np.cov(tr.X.T), m.C_q @ m.C_q.T + 0.36 * L @ L.T, atol=0.03)
    np.testing.assert_allclose(m.covariances()[0], m.C_q @ m.C_q.T + 0.36 * L @ L.T)
    C_hat = relevance_moment(tr.X, tr.Y_pos, tr.Y_neg)
    np.testing.assert_allclose(C_hat, m.population_moment(), atol=0.03)


def test_a_mean_offset_carries_its_share_of_the_population_moment():
    m = two_view_model(p=16, latent_rank=4, noise_sd=0.6, angle=0.6, seed=3, mean_share=0.46)
    C0 = m.C_q @ m.C_d.T
    mean_part = np.outer(m.x_mean, m.pos_offset)
    np.testing.assert_allclose(m.population_moment(), C0 + mean_part)
    assert np.sum(mean_part ** 2) / (np.sum(mean_part ** 2) + np.sum(C0 ** 2)) == pytest.approx(0.46)
    assert np.linalg.norm(m.x_mean) == pytest.approx(np.linalg.norm(m.pos_offset))
    tr = m.sample_triples(200_000, 8)
    np.testing.assert_allclose(relevance_moment(tr.X, tr.Y_pos, tr.Y_neg), m.population_moment(), atol=0.03)
    np.testing.assert_allclose(tr.X.mean(axis=0), m.x_mean, atol=0.01)
    with pytest.raises(ValueError, match=r"mean_share: expected a share in \[0, 1\)"):
        two_view_model(p=16, latent_rank=4, mean_share=1.0)
