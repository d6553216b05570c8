"""Local risks, the SURE rule and statistic, and optimal separation (paper, Section 3, Appendices C-D).

Pure kernels on arrays and scalars: Theorem 2's local risks (:func:`local_risks`), the
SURE rule of eq. (4) (:func:`sure_select`) with its selection probability and regret
(Theorem 3, eqs. 5-6), the SURE plug-in statistic computed from training triples
(:func:`sure_statistic`, with the noise estimate :func:`estimate_moment_noise`) and
Theorem 4's optimal separation.  ``scipy.stats`` is imported inside the functions that
use it, so ``import asymgeo`` stays fast.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from .._deprecation import warn_deprecated
from .._validation import as_float_matrix, check_int, check_positive, check_rank, check_square
from ..linalg.lowrank import top_eigen
from .geometry import sym, tangent_dims, tangent_projectors

__all__ = [
    "LocalRisks",
    "local_risks",
    "sure_select_probability",
    "sure_regret",
    "SureResult",
    "sure_select",
    "sure_statistic",
    "estimate_moment_noise",
    "AnisotropicSure",
    "skew_tangent_noise",
    "anisotropic_sure",
    "OptimalSeparation",
    "optimal_separation",
    "inverse_sqrt_psd",
]


@dataclass(frozen=True)
class LocalRisks:
    """Theorem 2 / Corollary 1 limits of the n-scaled risks.

    ``dual = sigma^2 dim T_d``, ``shared = delta^2 + sigma^2 dim T_s``,
    ``difference = shared - dual = delta^2 - sigma^2 k``; dual wins iff difference > 0.
    """

    dual: float
    shared: float
    difference: float
    delta2: float
    k: int
    dim_Td: int
    dim_Ts: int

    @property
    def better(self) -> str:
        return "dual" if self.difference > 0 else "shared"


def local_risks(H: np.ndarray, U: np.ndarray, sigma: float) -> LocalRisks:
    r"""Asymptotic local risks of Theorem 2 at ``S = U Lambda U^T``.

    .. math::
        n\mathbb E\|\widehat M_d - M_n\|_F^2 \to \sigma^2\dim T_d,\qquad
        n\mathbb E\|\widehat M_s - M_n\|_F^2 \to \|\Pi_{T_s^\perp} H\|_F^2 + \sigma^2\dim T_s,

    with :math:`\delta^2 = \|\Pi_{\mathcal A}H\|_F^2` (Corollary 1, eq. 3).

    Parameters
    ----------
    H : (p, p) local direction; its component outside :math:`T_d` is ignored (the
        theorem assumes :math:`H\in T_d`).
    U : (p, r) orthonormal columns of S.
    sigma : noise scale > 0.
    """
    H = as_float_matrix(H, "H")
    check_square(H, "H")
    sigma = check_positive(sigma, "sigma")
    proj = tangent_projectors(U)
    if H.shape[0] != proj.U.shape[0]:
        raise ValueError(f"H: shape {H.shape} does not match U with p = {proj.U.shape[0]}")
    p, r = proj.U.shape
    d_d, d_s, k = tangent_dims(p, r)
    delta2 = float(np.sum(proj.Pi_A(H) ** 2))
    s2 = sigma * sigma
    dual = s2 * d_d
    shared = delta2 + s2 * d_s
    return LocalRisks(dual=dual, shared=shared, difference=shared - dual,
                      delta2=delta2, k=k, dim_Td=d_d, dim_Ts=d_s)


def _check_k(k: object) -> int:
    return check_int(k, "k", note=" (number of dual-only directions)")


def sure_select_probability(k: int, lam: float | np.ndarray) -> float | np.ndarray:
    r"""Exact probability that SURE selects dual (Theorem 3, eq. 5).

    .. math:: \Pr(\widehat\pi = d) = \Pr\{\chi^2_k(\lambda) > 2k\},\quad \lambda = \delta^2/\sigma^2.

    Parameters
    ----------
    k : number of dual-only directions, ``r(2p-r-1)/2``.
    lam : noncentrality :math:`\delta^2/\sigma^2 \ge 0` (scalar or array).
    """
    from scipy import stats

    k = _check_k(k)
    lam_arr = np.asarray(lam, dtype=np.float64)
    if not np.all(np.isfinite(lam_arr)) or np.any(lam_arr < 0):
        raise ValueError(f"lam: expected finite values >= 0, got {lam!r}")
    central = stats.chi2.sf(2 * k, k)
    out = np.where(lam_arr == 0, central, stats.ncx2.sf(2 * k, k, np.where(lam_arr == 0, 1.0, lam_arr)))
    return float(out) if out.ndim == 0 else out


def _is_count(x: object) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def sure_regret(k: int, delta2: float | np.ndarray, sigma2: float) -> float | np.ndarray:
    r"""Expected model-choice regret of the SURE rule (Theorem 3, eq. 6).

    .. math::
        |\delta^2-\sigma^2k|\times
        \begin{cases}\Pr\{\chi^2_k(\lambda) > 2k\}, & \delta^2 < \sigma^2 k\\
        \Pr\{\chi^2_k(\lambda)\le 2k\}, & \delta^2 > \sigma^2 k\end{cases}

    and zero at :math:`\delta^2 = \sigma^2 k`.

    Parameters
    ----------
    k : number of dual-only directions, ``r(2p-r-1)/2`` (first, as in
        :func:`sure_select_probability`).
    delta2 : squared directional signal :math:`\delta^2 \ge 0` (scalar or array).
    sigma2 : noise variance :math:`\sigma^2 > 0`.

    Notes
    -----
    Before 0.2 the order was ``sure_regret(delta2, sigma2, k)``.  A call in that order
    whose first argument is not an integer (a float or an array) is still read that way,
    with a :class:`DeprecationWarning`, until 0.3; an all-integer call is read in the new
    order, so pass keywords when in doubt.
    """
    if not _is_count(k) and _is_count(sigma2):
        warn_deprecated("sure_regret(delta2, sigma2, k): the argument order is now sure_regret(k, delta2, sigma2)")
        k, delta2, sigma2 = sigma2, k, delta2  # type: ignore[assignment]
    k = _check_k(k)
    sigma2 = check_positive(sigma2, "sigma2")
    d2 = np.asarray(delta2, dtype=np.float64)
    if not np.all(np.isfinite(d2)) or np.any(d2 < 0):
        raise ValueError(f"delta2: expected finite values >= 0, got {delta2!r}")
    gap = d2 - sigma2 * k
    p_dual = np.asarray(sure_select_probability(k, d2 / sigma2))
    weight = np.where(gap < 0, p_dual, 1.0 - p_dual)
    out = np.where(gap == 0, 0.0, np.abs(gap) * weight)
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class SureResult:
    """Outcome of the SURE rule (eq. 4)."""

    choice: str
    statistic: float  # ||Pi_A Z||_F^2
    threshold: float  # 2 sigma^2 k
    risk_shared: float  # SURE estimate R_s
    risk_dual: float  # SURE estimate R_d
    k: int


def sure_select(Z: np.ndarray, U: np.ndarray, sigma: float) -> SureResult:
    r"""SURE geometry selection in the local Gaussian model (Section 3.1, eq. 4).

    .. math::
        \widehat R_j = \|Z - \Pi_{T_j}Z\|_F^2 + \sigma^2(2\dim T_j - \dim T_d),

    choose dual iff :math:`\widehat R_d < \widehat R_s`, i.e.
    :math:`\|\Pi_{\mathcal A}Z\|_F^2 > 2\sigma^2 k`; ties go to shared.

    Parameters
    ----------
    Z : (p, p) scaled observation :math:`\sqrt n\,\Pi_{T_d}(Y_n - S)`.
    U : (p, r) orthonormal columns of the shared point S.
    sigma : known noise scale > 0.
    """
    Z = as_float_matrix(Z, "Z")
    check_square(Z, "Z")
    sigma = check_positive(sigma, "sigma")
    proj = tangent_projectors(U)
    p, r = proj.U.shape
    if Z.shape[0] != p:
        raise ValueError(f"Z: shape {Z.shape} does not match U with p = {p}")
    d_d, d_s, k = tangent_dims(p, r)
    s2 = sigma * sigma
    risk_d = float(np.sum((Z - proj.Pi_Td(Z)) ** 2)) + s2 * d_d
    risk_s = float(np.sum((Z - proj.Pi_Ts(Z)) ** 2)) + s2 * (2 * d_s - d_d)
    stat = float(np.sum(proj.Pi_A(Z) ** 2))
    choice = "dual" if risk_d < risk_s else "shared"
    return SureResult(choice=choice, statistic=stat, threshold=2 * s2 * k,
                      risk_shared=risk_s, risk_dual=risk_d, k=k)


def estimate_moment_noise(X: np.ndarray, D: np.ndarray) -> float:
    r"""Isotropic plug-in noise scale :math:`\sigma` of the relevance moment (Section 3).

    Per-triple moments :math:`W_i = X_i D_i^\top` have entrywise variances
    :math:`v_{jk}`; the local Gaussian model of Section 3 takes
    :math:`\widehat C \approx C + (\sigma/\sqrt n) G`, so
    :math:`\widehat\sigma^2 = \mathrm{mean}_{jk}\, v_{jk}` (unbiased per entry).

    Parameters
    ----------
    X : (n, p) queries, n >= 2.
    D : (n, p) ``Y_pos - Y_neg``.
    """
    n = X.shape[0]
    if n < 2:
        raise ValueError(f"X: need at least 2 triples to estimate the noise scale, got {n}")
    mean_sq = (X * X).T @ (D * D) / n
    mean = X.T @ D / n
    var = (mean_sq - mean * mean) * n / (n - 1)
    return float(np.sqrt(max(float(var.mean()), 0.0)))


def sure_statistic(
    X: np.ndarray, D: np.ndarray, rank: int, *, sigma: float | None = None, solver: str = "auto",
    eigen: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[SureResult, float]:
    r"""The SURE rule (eq. 4) plugged in at training triples: returns ``(result, sigma)``.

    With :math:`\widehat C = X^\top D / n`, the shared point is
    :math:`S = \mathcal P_{s,r}(\widehat C)` (top-r eigenpairs of :math:`\mathrm{sym}(\widehat C)`,
    all positive) and the scaled observation :math:`Z = \sqrt n\,\Pi_{T_d}(\widehat C - S)`;
    :func:`sure_select` then compares :math:`\|\Pi_{\mathcal A}Z\|_F^2` with :math:`2\sigma^2 k`.
    ``sigma`` defaults to :func:`estimate_moment_noise` (an isotropic plug-in the
    paper's theorem does not cover).

    Parameters
    ----------
    X : (n, p) float64 queries.
    D : (n, p) float64 ``Y_pos - Y_neg``.
    rank : int, 1 <= rank <= p.
    sigma : known noise scale > 0, or None to estimate it.
    solver : {"auto", "dense", "krylov"} eigen-solver for :math:`\mathrm{sym}(\widehat C)`.
    eigen : ``(values, vectors)``, the top-r (or more, descending) eigenpairs of
        :math:`\mathrm{sym}(\widehat C)` when already known (``solver`` is then unused).

    Raises
    ------
    ValueError
        If the estimated noise is zero, or :math:`\mathrm{sym}(\widehat C)` has fewer than
        ``rank`` positive eigenvalues (SURE needs a rank-r PSD point).
    """
    n, p = X.shape
    rank = check_rank(rank, p)
    C = X.T @ D / n
    sigma = float(sigma) if sigma is not None else estimate_moment_noise(X, D)
    if sigma <= 0:
        raise ValueError("sigma: the moment has zero estimated noise; pass sigma explicitly")
    if eigen is not None:
        eta, U = np.asarray(eigen[0], dtype=np.float64), np.asarray(eigen[1], dtype=np.float64)
        if eta.ndim != 1 or U.shape != (p, eta.size) or eta.size < rank:
            raise ValueError(f"eigen: expected the top {rank} eigenpairs of a ({p}, {p}) moment, "
                             f"got values {eta.shape} and vectors {U.shape}")
        eta, U = eta[:rank], U[:, :rank]
    else:
        eta, U = top_eigen(sym(C), rank, method=solver)
    if np.any(eta <= 0):
        raise ValueError(
            f"rank: the symmetric moment has only {int(np.sum(eta > 0))} positive eigenvalues, "
            f"fewer than rank = {rank}; SURE needs a rank-r PSD point"
        )
    S = (U * eta) @ U.T
    Z = np.sqrt(n) * tangent_projectors(U).Pi_Td(C - S)
    return sure_select(Z, U, sigma), sigma


def _skew_tangent_norms(X: np.ndarray, D: np.ndarray, U: np.ndarray) -> np.ndarray:
    r""":math:`\|\Pi_{\mathcal A}(x_i d_i^\top)\|_F^2` of every row, in :math:`O(npr)`.

    :math:`\Pi_{\mathcal A} = \Pi_{T_d}\circ\mathrm{skew}` (because :math:`\Pi_{T_s} = \Pi_{T_d}\circ\mathrm{sym}`),
    and for the skew matrix :math:`K = (xd^\top - dx^\top)/2`,
    :math:`\|\Pi_{T_d}K\|^2 = \|K\|^2 - \|QKQ\|^2` with :math:`Q = I - UU^\top`;
    :math:`\|ab^\top - ba^\top\|_F^2 = 2(\|a\|^2\|b\|^2 - (a^\top b)^2)`.
    """
    xu, du = X @ U, D @ U
    xx, dd, xd = np.einsum("ij,ij->i", X, X), np.einsum("ij,ij->i", D, D), np.einsum("ij,ij->i", X, D)
    full = xx * dd - xd * xd
    xq, dq = xx - np.einsum("ij,ij->i", xu, xu), dd - np.einsum("ij,ij->i", du, du)
    xdq = xd - np.einsum("ij,ij->i", xu, du)
    return np.maximum((full - (xq * dq - xdq * xdq)) / 2.0, 0.0)


def skew_tangent_noise(X: np.ndarray, D: np.ndarray, U: np.ndarray) -> float:
    r"""Unbiased estimate of :math:`\mathrm{tr}(\Pi_{\mathcal A}\Sigma)`, the noise the dual-only
    directions carry, from the per-triple moments :math:`W_i = x_i d_i^\top` (Theorem 2 with a
    general covariance :math:`\Sigma = \mathrm{Cov}(\mathrm{vec}\,W_i)`; ``docs/selectors.md``).

    .. math::
        \widehat{\mathrm{tr}}(\Pi_{\mathcal A}\Sigma) = \frac{1}{n-1}\sum_i \|\Pi_{\mathcal A}(W_i - \bar W)\|_F^2
        = \frac{1}{n-1}\Big(\sum_i \|\Pi_{\mathcal A}W_i\|_F^2 - n\|\Pi_{\mathcal A}\bar W\|_F^2\Big),

    :math:`O(npr + p^2r)`: no :math:`p^2\times p^2` covariance is formed.  Isotropic
    :math:`\Sigma = \sigma^2 I` gives :math:`\sigma^2 k` (Corollary 1).

    Parameters
    ----------
    X, D : (n, p) queries and ``Y_pos - Y_neg``, n >= 2.
    U : (p, r) orthonormal columns of the shared point (the tangent spaces' base).
    """
    X = as_float_matrix(X, "X")
    D = as_float_matrix(D, "D")
    U = as_float_matrix(U, "U")
    n, p = X.shape
    if D.shape != X.shape or U.shape[0] != p:
        raise ValueError(f"X, D, U: expected (n, p), (n, p), (p, r); got {X.shape}, {D.shape}, {U.shape}")
    if n < 2:
        raise ValueError(f"X: need at least 2 triples to estimate the noise, got {n}")
    C = X.T @ D / n
    mean_part = float(np.sum(tangent_projectors(U).Pi_A(C) ** 2))
    return float(max((_skew_tangent_norms(X, D, U).sum() - n * mean_part) / (n - 1), 0.0))


@dataclass(frozen=True)
class AnisotropicSure:
    r"""The SURE rule with the dual-only directions priced by their own noise (:func:`anisotropic_sure`).

    Attributes
    ----------
    choice : ``"dual"`` iff ``statistic > threshold`` (ties to shared).
    statistic : :math:`\|\Pi_{\mathcal A}Z\|_F^2 = n\|\Pi_{\mathcal A}\widehat C\|_F^2`.
    threshold : :math:`2\,\widehat{\mathrm{tr}}(\Pi_{\mathcal A}\Sigma)`.
    isotropic_threshold : eq. 4's :math:`2\hat\sigma^2 k` with the isotropic plug-in, for comparison.
    score : ``(statistic - threshold) / n``: the estimated :math:`\|\Pi_{\mathcal A}\Delta\|^2 -
        \mathrm{tr}(\Pi_{\mathcal A}\Sigma)/n`, the local risk difference (> 0 favours dual).
    """

    choice: str
    statistic: float
    threshold: float
    isotropic_threshold: float
    score: float
    k: int
    n: int


def anisotropic_sure(
    X: np.ndarray, D: np.ndarray, rank: int, *, eigen: tuple[np.ndarray, np.ndarray] | None = None,
) -> AnisotropicSure:
    r"""SURE (eq. 4) with anisotropic variance pricing (issue 20; the paper's conclusion).

    In the local model :math:`\widehat C = C + G/\sqrt n` with :math:`\mathrm{vec}\,G \sim (0, \Sigma)`,
    Theorem 2's risks become :math:`n R_d \to \mathrm{tr}(\Pi_{T_d}\Sigma)` and
    :math:`n R_s \to \delta^2 + \mathrm{tr}(\Pi_{T_s}\Sigma)`, so dual wins iff
    :math:`\delta^2 > \mathrm{tr}(\Pi_{\mathcal A}\Sigma)`.  With
    :math:`Z = \sqrt n\,\Pi_{T_d}(\widehat C - S)`, :math:`\mathbb E\|\Pi_{\mathcal A}Z\|^2 = \delta^2 +
    \mathrm{tr}(\Pi_{\mathcal A}\Sigma)`; the rule picks dual iff

    .. math:: \|\Pi_{\mathcal A}Z\|_F^2 > 2\,\widehat{\mathrm{tr}}(\Pi_{\mathcal A}\Sigma)

    (:func:`skew_tangent_noise`), which is eq. 4 when :math:`\Sigma = \sigma^2 I`.  The tangent
    base ``U`` is the top-r eigenvectors of :math:`\mathrm{sym}(\widehat C)` (a plug-in, as in eq. 4).

    Parameters
    ----------
    X, D : (n, p) queries and ``Y_pos - Y_neg``.
    rank : r.
    eigen : the top-r (or more) eigenpairs of ``sym(X^T D / n)`` when known.
    """
    X = as_float_matrix(X, "X")
    D = as_float_matrix(D, "D")
    n, p = X.shape
    rank = check_rank(rank, p)
    C = X.T @ D / n
    if eigen is not None:
        U = np.asarray(eigen[1], dtype=np.float64)
        if U.ndim != 2 or U.shape[0] != p or U.shape[1] < rank:
            raise ValueError(f"eigen: expected at least {rank} eigenvectors of length {p}, got {U.shape}")
        U = U[:, :rank]
    else:
        U = top_eigen(sym(C), rank)[1]
    stat = n * float(np.sum(tangent_projectors(U).Pi_A(C) ** 2))
    noise = skew_tangent_noise(X, D, U)
    k = tangent_dims(p, rank)[2]
    sigma = estimate_moment_noise(X, D)
    thr = 2.0 * noise
    return AnisotropicSure(choice="dual" if stat > thr else "shared", statistic=stat, threshold=thr,
                           isotropic_threshold=2.0 * sigma * sigma * k, score=(stat - thr) / n, k=k, n=n)


def inverse_sqrt_psd(Sigma: np.ndarray, name: str = "Sigma") -> np.ndarray:
    """Symmetric inverse square root of a positive-definite covariance, or a clear error."""
    Sigma = as_float_matrix(Sigma, name)
    check_square(Sigma, name)
    if not np.allclose(Sigma, Sigma.T, rtol=1e-10, atol=1e-12 * max(1.0, float(np.abs(Sigma).max()))):
        raise ValueError(f"{name}: expected a symmetric covariance matrix")
    w, V = sla.eigh(sym(Sigma), check_finite=False)
    if w[0] <= 1e-12 * max(1.0, float(w[-1])):
        raise ValueError(
            f"{name}: expected a positive-definite covariance, smallest eigenvalue is {w[0]:.3g}"
        )
    return (V / np.sqrt(w)) @ V.T


@dataclass(frozen=True)
class OptimalSeparation:
    r"""Theorem 4: optimal rank-r positive-negative separation of both families.

    Attributes
    ----------
    dual : :math:`\mathfrak D_d^\star(r) = (\sum_{j\le r}\sigma_j(T)^2)^{1/2}` (eq. 11)
    shared : :math:`\mathfrak D_s^\star(r) = (\sum_{j\le r}(\eta_j^+)^2)^{1/2}` (eq. 12),
        computed in whitened coordinates.
    gap : ``dual**2 - shared**2`` (equals Theorem 1's gap with ``M = T``).
    T : (p, p) whitened moment :math:`\Sigma_x^{-1/2} C \Sigma_y^{-1/2}`.
    dual_operator, shared_operator : (p, p) maximisers in original coordinates,
        scaled to unit negative-score second moment (zero if the optimum is 0).
    """

    dual: float
    shared: float
    gap: float
    T: np.ndarray
    dual_operator: np.ndarray
    shared_operator: np.ndarray
    rank: int


def optimal_separation(
    C: np.ndarray,
    Sigma_x: np.ndarray | None,
    Sigma_y: np.ndarray | None,
    rank: int,
) -> OptimalSeparation:
    r"""Optimal rank-r separation of shared and dual operators (Theorem 4, Appendix D).

    .. math::
        \mathfrak D_j^\star(r) = \sup_{M\in\mathcal M_j(r),\ \mathbb E[(X^\top M Y^-)^2]\le1}
            \mathbb E[X^\top M (Y^+-Y^-)],\qquad T = \Sigma_x^{-1/2} C\Sigma_y^{-1/2}.

    Dual: eq. (11), optimum :math:`\propto\Sigma_x^{-1/2}T_r\Sigma_y^{-1/2}`.
    Shared: eq. (12) on the whitened views (the shared map acts on whitened
    coordinates, :math:`M = \Sigma_x^{-1/2} N \Sigma_y^{-1/2}` with N PSD); when
    :math:`\Sigma_x=\Sigma_y` this is exactly the PSD family in original coordinates.

    Parameters
    ----------
    C : (p, p) relevance moment :math:`\mathbb E[X(Y^+-Y^-)^\top]`
    Sigma_x, Sigma_y : (p, p) positive-definite covariances, or ``None`` for identity
        (already-whitened views).
    rank : int, 1 <= rank <= p
    """
    C = as_float_matrix(C, "C")
    check_square(C, "C")
    p = C.shape[0]
    rank = check_rank(rank, p)
    Wx = np.eye(p) if Sigma_x is None else inverse_sqrt_psd(Sigma_x, "Sigma_x")
    Wy = np.eye(p) if Sigma_y is None else inverse_sqrt_psd(Sigma_y, "Sigma_y")
    for name, W in (("Sigma_x", Wx), ("Sigma_y", Wy)):
        if W.shape != (p, p):
            raise ValueError(f"{name}: expected shape ({p}, {p}) to match C, got {W.shape}")
    T = Wx @ C @ Wy
    U, s, Vt = sla.svd(T, check_finite=False)
    dual2 = float(np.sum(s[:rank] ** 2))
    eta, Q = sla.eigh(sym(T), check_finite=False)
    eta, Q = eta[::-1], Q[:, ::-1]
    eta_plus = np.maximum(eta[:rank], 0.0)
    shared2 = float(np.sum(eta_plus ** 2))
    Tr = (U[:, :rank] * s[:rank]) @ Vt[:rank]
    Sr = (Q[:, :rank] * eta_plus) @ Q[:, :rank].T
    Nd = Tr / np.sqrt(dual2) if dual2 > 0 else np.zeros_like(T)
    Ns = Sr / np.sqrt(shared2) if shared2 > 0 else np.zeros_like(T)
    return OptimalSeparation(
        dual=float(np.sqrt(dual2)),
        shared=float(np.sqrt(shared2)),
        gap=dual2 - shared2,
        T=T,
        dual_operator=Wx @ Nd @ Wy,
        shared_operator=Wx @ Ns @ Wy,
        rank=rank,
    )
