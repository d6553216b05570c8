r"""Noise-doubled bootstrap risk: Theorem 3's SURE comparison evaluated on the actual truncations (issue #37).

SURE (eq. 4) prices the dual-only directions by their noise, :math:`\|\Pi_{\mathcal A}Z\|_F^2 >
2\sigma^2 k`, but only where both truncations are locally linear (Theorem 2's tangent spaces at
a well-separated rank-r point).  Below the latent rank with tied singular values, at small n, or
with a strong rank-1 mean term the tangent spaces are not where the closed forms move.  This
kernel keeps the comparison and drops the linearisation: it simulates the noise of the moment
from the rows and measures both closed forms' risk against :math:`\widehat C` directly.

With :math:`W_i = x_i d_i^\top`, :math:`\widehat C = \bar W = X^\top D / n` and multipliers
:math:`g^{(b)} \sim N(0, I_n)`, each draw

.. math:: E_b = \frac{1}{\sqrt{n(n-1)}} \sum_i g^{(b)}_i (W_i - \bar W)

has covariance :math:`\widehat\Sigma / n`, the unbiased sampling covariance of :math:`\widehat C`
(:math:`\widehat\Sigma` the sample covariance of :math:`\mathrm{vec}\,W_i`: anisotropic, mean
term included, nothing formed at :math:`p^2 \times p^2`).  The score is

.. math::

    \hat\Delta = \frac{1}{2B\,\|\widehat C\|_F^2} \sum_{b=1}^{B} \sum_{\pm}
        \Big[\|\mathcal P_{s,r}(\widehat C \pm \sqrt t\,E_b) - \widehat C\|_F^2
           - \|\mathcal P_{d,r}(\widehat C \pm \sqrt t\,E_b) - \widehat C\|_F^2\Big],
    \qquad t = 2,

an estimate of the normalised population risk difference :math:`(R_s - R_d)`; dual iff
:math:`\hat\Delta > 0`.  The pairs :math:`\pm E_b` are antithetic (the odd part of each term,
pure simulation noise, cancels).

Why :math:`t = 2`: if both families were the linear projections :math:`\Pi_{T_s} \subset
\Pi_{T_d}` of Theorem 2 (:math:`\Pi_{\mathcal A} = \Pi_{T_d} - \Pi_{T_s}`), then
:math:`\mathbb E_g \|\Pi(\widehat C + \sqrt t E) - \widehat C\|^2 = \|(I - \Pi)\widehat C\|^2 +
t\,\mathrm{tr}(\Pi\widehat\Sigma)/n`, so the bracket averages to
:math:`\|\Pi_{\mathcal A}\widehat C\|_F^2 - t\,\mathrm{tr}(\Pi_{\mathcal A}\widehat\Sigma)/n`; over
the sample :math:`\mathbb E\|\Pi_{\mathcal A}\widehat C\|^2 = \delta^2/n + \mathrm{tr}(\Pi_{\mathcal
A}\Sigma)/n`, so :math:`t = 2` makes it unbiased for :math:`(\delta^2 - \mathrm{tr}(\Pi_{\mathcal
A}\Sigma))/n = R_s - R_d` (Corollary 1 with a general covariance).  It is then exactly the
anisotropic SURE statistic :math:`\|\Pi_{\mathcal A}Z\|^2 - 2\,\widehat{\mathrm{tr}}(\Pi_{\mathcal
A}\Sigma)` over n (and eq. 4's :math:`\|\Pi_{\mathcal A}Z\|^2 - 2\sigma^2 k` when
:math:`\Sigma = \sigma^2 I`): twice the noise, because one :math:`\mathrm{tr}` removes the noise
:math:`\widehat C` itself carries in :math:`\mathcal A` and the other is the boundary.

The standard error is the first-order (delta-method) sampling error of the score:
:math:`\hat\Delta \approx \|\Pi_{\mathcal A}\widehat C\|^2/\|\widehat C\|^2 + \text{const}`
moves by :math:`2\langle V, E\rangle / \|\widehat C\|^2` with
:math:`V = \mathcal P_{d,r}(\widehat C) - \mathcal P_{s,r}(\widehat C)`, whose variance is
:math:`\frac{1}{n(n-1)}\sum_i (a_i - \bar a)^2`, :math:`a_i = x_i^\top V d_i`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import as_float_matrix, check_int, check_positive, check_rank, check_same_shape
from .geometry import dual_truncate, shared_truncate

__all__ = ["BOOTSTRAP_PAIRS", "NOISE_INFLATION", "BootstrapRisk", "multiplier_draws", "noise_doubled_risk"]

#: Antithetic pairs of multiplier draws (2 x 32 truncations of each family).
BOOTSTRAP_PAIRS = 32

#: t, the noise inflation: 2 is Theorem 3's threshold (one noise removed, one the boundary).
NOISE_INFLATION = 2.0


@dataclass(frozen=True)
class BootstrapRisk:
    r"""Outcome of :func:`noise_doubled_risk`.

    Attributes
    ----------
    score : :math:`\hat\Delta`, the estimated normalised :math:`R_s - R_d` (> 0 favours dual).
    choice : ``"dual"`` iff ``score > 0`` (ties to shared).
    standard_error : first-order sampling standard error of ``score``.
    monte_carlo_error : standard error of ``score`` over the multiplier draws alone.
    plug_in : the training difference :math:`(\|\mathcal P_s - \widehat C\|^2 - \|\mathcal P_d -
        \widehat C\|^2) / \|\widehat C\|^2` (the score with no noise priced; always >= 0).
    terms : (B,) per-pair averages of the bracket, divided by :math:`\|\widehat C\|_F^2`.
    inflation : t.
    n, rank, seed : the inputs.
    """

    score: float
    choice: str
    standard_error: float
    monte_carlo_error: float
    plug_in: float
    terms: np.ndarray
    inflation: float
    n: int
    rank: int
    seed: int


def multiplier_draws(n: int, pairs: int, seed: int) -> np.ndarray:
    """``(pairs, n)`` standard normal multipliers: ``default_rng(SeedSequence(seed)).standard_normal``."""
    return np.random.default_rng(np.random.SeedSequence(int(seed))).standard_normal((int(pairs), int(n)))


def _family_gap(Y: np.ndarray, target: np.ndarray, rank: int, solver: str) -> float:
    """``||P_s(Y) - target||^2 - ||P_d(Y) - target||^2``."""
    Rs = shared_truncate(Y, rank, solver=solver) - target
    Rd = dual_truncate(Y, rank, solver=solver) - target
    return float(np.sum(Rs * Rs)) - float(np.sum(Rd * Rd))


def noise_doubled_risk(X: np.ndarray, D: np.ndarray, rank: int, *, pairs: int = BOOTSTRAP_PAIRS,
                       inflation: float = NOISE_INFLATION, seed: int = 0, solver: str = "auto") -> BootstrapRisk:
    r""":math:`\hat\Delta` of the module docstring, its standard errors and the plug-in difference.

    Parameters
    ----------
    X, D : (n, p) training queries and ``Y_pos - Y_neg``, n >= 2.
    rank : r, 1 <= r <= p.
    pairs : B, antithetic pairs of multiplier draws.
    inflation : t > 0, the multiple of the moment's noise added (2: Theorem 3).
    seed : seeds the multipliers (:func:`multiplier_draws`).
    solver : truncation solver of :func:`~asymgeo.kernels.geometry.dual_truncate` /
        :func:`~asymgeo.kernels.geometry.shared_truncate`.

    Raises
    ------
    ValueError
        Fewer than 2 triples, or a moment that is exactly zero (the normalisation is undefined).
    """
    X = as_float_matrix(X, "X")
    D = as_float_matrix(D, "D")
    check_same_shape({"X": X, "D": D})
    n, p = X.shape
    if n < 2:
        raise ValueError(f"X: the bootstrap risk needs at least 2 triples, got n = {n}")
    r = check_rank(rank, p)
    B = check_int(pairs, "pairs")
    t = check_positive(inflation, "inflation")
    C = X.T @ D / n
    norm = float(np.sum(C * C))
    if norm == 0.0:
        raise ValueError("X, D: the training moment X^T D / n is exactly zero; the normalised risk is undefined")
    G = multiplier_draws(n, B, seed)
    scale = np.sqrt(t / (n * (n - 1.0)))
    terms = np.empty(B)
    for b in range(B):
        h = (G[b] - G[b].mean()) * scale  # sum_i g_i (W_i - W_bar) = sum_i (g_i - g_bar) W_i
        E = (X * h[:, None]).T @ D
        terms[b] = 0.5 * (_family_gap(C + E, C, r, solver) + _family_gap(C - E, C, r, solver)) / norm
    Ps, Pd = shared_truncate(C, r, solver=solver), dual_truncate(C, r, solver=solver)
    plug_in = (float(np.sum((Ps - C) ** 2)) - float(np.sum((Pd - C) ** 2))) / norm
    a = np.einsum("ij,ij->i", X @ (Pd - Ps), D)  # x_i^T V d_i
    se = 2.0 * float(np.sqrt(np.sum((a - a.mean()) ** 2) / (n * (n - 1.0)))) / norm
    score = float(terms.mean())
    mc = float(terms.std(ddof=1) / np.sqrt(B)) if B > 1 else float("nan")
    return BootstrapRisk(score=score, choice="dual" if score > 0 else "shared", standard_error=se,
                         monte_carlo_error=mc, plug_in=plug_in, terms=terms, inflation=t, n=n, rank=r,
                         seed=int(seed))
