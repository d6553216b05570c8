"""The pooled cross-validated risk rule ``cvp`` (issue #37), checked against a hand computation."""

from __future__ import annotations

import numpy as np
import pytest

from asymgeo.selectors.registry import get_rule


def _hand(X, D, r, K, seed):
    """sum_k n_k (||P_s,-k - M_k||^2 - ||P_d,-k - M_k||^2) / (n ||C_hat||^2), truncations by eigh / svd."""
    n = X.shape[0]
    parts = np.array_split(np.random.default_rng(np.random.SeedSequence(seed)).permutation(n), K)
    C_hat = X.T @ D / n
    total = 0.0
    for part in parts:
        rest = np.setdiff1d(np.arange(n), part)
        C = X[rest].T @ D[rest] / rest.size
        M = X[part].T @ D[part] / part.size
        w, U = np.linalg.eigh((C + C.T) / 2)
        top = [j for j in np.argsort(-w)[:r] if w[j] > 0]
        Ps = (U[:, top] * w[top]) @ U[:, top].T
        u, s, vt = np.linalg.svd(C)
        Pd = (u[:, :r] * s[:r]) @ vt[:r]
        total += part.size * (np.sum((Ps - M) ** 2) - np.sum((Pd - M) ** 2))
    return total / (n * np.sum(C_hat ** 2))


@pytest.mark.parametrize("n, r", [(47, 2), (8, 3)])
def test_pooled_cv_matches_the_per_fold_losses_by_hand(n, r):
    rng = np.random.default_rng(n)
    X = rng.standard_normal((n, 6))
    D = X @ rng.standard_normal((6, 6)) * 0.5 + rng.standard_normal((n, 6))
    d = get_rule("cvp").decide(X, D, r, seed=11)
    K = min(20, n)
    assert d.evidence["folds"] == K
    assert d.score == pytest.approx(_hand(X, D, r, K, 11), rel=1e-9, abs=1e-12)
    assert d.choice == ("dual" if d.score > 0 else "shared")


def test_pooled_cv_tracks_the_population_risk_on_a_clear_cell():
    """A skew population moment (dual wins by far) and a symmetric PSD one (shared wins)."""
    rng = np.random.default_rng(3)
    p, n = 8, 400
    A = rng.standard_normal((p, p))
    for C, want in ((A - A.T, "dual"), (A @ A.T / p, "shared")):
        X = rng.standard_normal((n, p))
        D = X @ C + 0.3 * rng.standard_normal((n, p))  # E[X^T D / n] = C
        assert get_rule("cvp").decide(X, D, 2).choice == want
