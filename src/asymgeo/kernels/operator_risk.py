r"""Held-out operator risk (paper Section 4, RQ4; Appendix F.1): kernels on arrays.

For geometry ``g`` in {shared, dual} and a training moment ``C``, the normalised held-out loss is

.. math:: L_g = \frac{\|\widehat M_g - M_{\rm test}\|_F^2}{\|M_{\rm test}\|_F^2},

with :math:`\widehat M_d = \mathcal P_{d,r}(C)` (rank-r SVD truncation) and
:math:`\widehat M_s = \mathcal P_{s,r}(C)` (positive eigen-truncation of ``sym(C)``, Theorem 1);
positive ``L_s - L_d`` favours dual.  The moment of any subset is a sum of per-query outer
products :math:`X_i D_i^\top` (``D = Y^+ - Y^-``), so nested training sizes are prefix sums
over one permutation (:func:`prefix_moments`), each block computed as ``X_I^T D_I`` by BLAS.

Centring (:func:`mean_term`, :func:`centre`): with means :math:`\bar x` and :math:`\bar d`,

.. math:: \frac1n\sum_i X_i D_i^\top = \frac1n\sum_i (X_i-\bar x)(D_i-\bar d)^\top + \bar x\,\bar d^\top,

so the relevance moment is a centred (directional) part plus a rank-1 *mean term*; the share
of the moment's energy held by the mean term says whether a dual advantage could be a
common-mean offset rather than directional structure.

No I/O and no state: the experiment cells (:mod:`asymgeo.experiments.rq4`,
:mod:`asymgeo.experiments.table1`) and :func:`asymgeo.validate_selection` compose these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._validation import as_float_matrix, check_rank, check_same_shape, check_square
from ..linalg.lowrank import top_eigen, top_singular
from .geometry import sym

__all__ = [
    "heldout_loss",
    "TruncationLosses",
    "truncation_losses",
    "TruncationSpectra",
    "truncation_spectra",
    "resampled_losses",
    "prefix_moments",
    "MeanTerm",
    "mean_term",
    "centre",
    "log2_slope",
    "CrossValidatedRisk",
    "cross_validated_risk",
    "ExtrapolatedRisk",
    "extrapolated_cross_validated_risk",
]


def _check_target(M_test: np.ndarray, name: str = "M_test") -> tuple[np.ndarray, float]:
    T = as_float_matrix(M_test, name)
    check_square(T, name)
    norm2 = float(np.sum(T * T))
    if norm2 == 0.0:
        raise ValueError(f"{name}: the held-out moment is exactly zero; the normalised loss is undefined")
    return T, norm2


def heldout_loss(M_hat: np.ndarray, M_test: np.ndarray) -> float:
    r"""Normalised held-out operator loss (paper Section 4, RQ4).

    .. math:: L = \|\widehat M - M_{\rm test}\|_F^2 / \|M_{\rm test}\|_F^2

    Parameters
    ----------
    M_hat : (p, p) fitted operator.
    M_test : (p, p) held-out relevance moment (not all zero).
    """
    T, norm2 = _check_target(M_test)
    M = as_float_matrix(M_hat, "M_hat")
    check_same_shape({"M_test": T, "M_hat": M})
    R = M - T
    return float(np.sum(R * R)) / norm2


@dataclass(frozen=True)
class TruncationLosses:
    """Held-out losses of both truncations of one training moment at several ranks.

    Attributes
    ----------
    ranks : (k,) int ranks, in the order asked.
    shared, dual : (k,) normalised losses ``L_s`` and ``L_d``.
    advantage : (k,) ``L_s - L_d`` (positive favours dual).
    """

    ranks: np.ndarray
    shared: np.ndarray
    dual: np.ndarray

    @property
    def advantage(self) -> np.ndarray:
        return self.shared - self.dual


@dataclass(frozen=True)
class TruncationSpectra:
    r"""The leading spectra both truncations of one moment ``C`` need, up to rank ``r``.

    Attributes
    ----------
    eigenvalues, eigenvectors : (r,), (p, r) the r algebraically largest eigenpairs of
        :math:`\mathrm{sym}(C)`, descending (the shared truncation keeps their positive part).
    singular_values, left, right : (r,), (p, r), (p, r) the top-r singular triplets of ``C``.
    """

    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    singular_values: np.ndarray
    left: np.ndarray
    right: np.ndarray

    @property
    def rank(self) -> int:
        return int(min(self.eigenvalues.size, self.singular_values.size))


def truncation_spectra(
    C: np.ndarray, rank: int, *, factors: tuple[np.ndarray, np.ndarray, float] | None = None
) -> TruncationSpectra:
    r"""Top-``rank`` eigenpairs of :math:`\mathrm{sym}(C)` and singular triplets of ``C``, computed
    once for every rank up to ``rank`` (Theorem 1's truncations are nested in r).

    Certified solvers of :mod:`asymgeo.linalg.lowrank` (subset LAPACK; mixed precision for the
    eigenpairs at p >= 256 and for the singular triplets of a formed moment at p >= 512; each
    answer checked to ``1e-10`` of the spectral scale, else full LAPACK);
    ``factors = (X, D, c)`` with ``C == c X^T D`` lets the SVD run on the thin factors.
    """
    C = as_float_matrix(C, "C")
    check_square(C, "C")
    r = check_rank(rank, C.shape[0])
    eta, Q = top_eigen(sym(C), r, method="dense", mixed=True)
    U, s, V = top_singular(C, r, method="dense", factors=factors, mixed=True)
    return TruncationSpectra(eigenvalues=eta, eigenvectors=Q, singular_values=s, left=U, right=V)


def truncation_losses(
    C: np.ndarray, M_test: np.ndarray, ranks: Sequence[int], *, spectra: TruncationSpectra | None = None
) -> TruncationLosses:
    r"""``L_s`` and ``L_d`` of the rank-r truncations of ``C`` for every rank, from one
    top-r eigendecomposition and one top-r SVD (r = the largest rank asked).

    With :math:`\mathrm{sym}(C) = \sum_j \eta_j q_j q_j^\top` (descending) and
    :math:`C = \sum_j s_j u_j v_j^\top`,

    .. math::
        \|\mathcal P_{s,r}(C) - T\|_F^2 = \sum_{j\le r}(\eta_j^+)^2 - 2\sum_{j\le r}\eta_j^+ q_j^\top T q_j + \|T\|_F^2,
        \qquad
        \|\mathcal P_{d,r}(C) - T\|_F^2 = \sum_{j\le r}s_j^2 - 2\sum_{j\le r}s_j u_j^\top T v_j + \|T\|_F^2,

    each divided by :math:`\|T\|_F^2` (the RQ4 loss; Theorem 1's truncations).

    Parameters
    ----------
    C : (p, p) training relevance moment.
    M_test : (p, p) held-out target moment.
    ranks : ranks r, each in [1, p].
    spectra : :func:`truncation_spectra` of ``C`` (at least the largest rank), when known.
    """
    C = as_float_matrix(C, "C")
    check_square(C, "C")
    T, t2 = _check_target(M_test)
    check_same_shape({"C": C, "M_test": T})
    p = C.shape[0]
    rs = np.asarray([check_rank(r, p) for r in ranks], dtype=np.int64)
    if rs.size == 0:
        raise ValueError("ranks: expected at least one rank")
    top = int(rs.max())
    if spectra is None:
        spectra = truncation_spectra(C, top)
    elif spectra.rank < top or spectra.eigenvectors.shape[0] != p:
        raise ValueError(f"spectra: expected the top {top} pairs of a ({p}, {p}) moment, got rank {spectra.rank}")
    eta, Q = spectra.eigenvalues[:top], spectra.eigenvectors[:, :top]
    s, U, V = spectra.singular_values[:top], spectra.left[:, :top], spectra.right[:, :top]
    eta_plus = np.maximum(eta, 0.0)
    qTq = np.einsum("ij,ij->j", Q, T @ Q)  # q^T T q = q^T sym(T) q
    uTv = np.einsum("ij,ij->j", U, T @ V)
    cum_s = np.concatenate([[0.0], np.cumsum(eta_plus**2 - 2.0 * eta_plus * qTq)])
    cum_d = np.concatenate([[0.0], np.cumsum(s**2 - 2.0 * s * uTv)])
    shared = (cum_s[rs] + t2) / t2
    dual = (cum_d[rs] + t2) / t2
    # Guard the round-off of the expansion: a loss is a squared norm.
    return TruncationLosses(ranks=rs, shared=np.maximum(shared, 0.0), dual=np.maximum(dual, 0.0))


def resampled_losses(
    spectra: TruncationSpectra,
    X: np.ndarray,
    D: np.ndarray,
    ranks: Sequence[int],
    weights: np.ndarray,
    *,
    gram: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""``L_s`` and ``L_d`` of the truncations in ``spectra`` against reweighted held-out targets.

    Each row ``w`` of ``weights`` (non-negative, summing to one) defines the target
    :math:`M_w = \sum_i w_i x_i d_i^\top` over the held-out rows ``X, D``: ``1/|A|`` on a subset
    ``A`` is that subset's moment, multinomial counts ``/ n`` a bootstrap resample, uniform
    weights the held-out moment itself.  With the per-query fits :math:`h_{g,i} = x_i^\top
    \widehat M_g d_i` and :math:`G = (X X^\top) \circ (D D^\top)` (so
    :math:`\|M_w\|_F^2 = w^\top G w`),

    .. math::
        L_g(w) = \frac{\|\widehat M_g\|_F^2 - 2\sum_i w_i h_{g,i} + w^\top G w}{w^\top G w},

    the loss of :func:`truncation_losses` for every target at once, in :math:`O(n p r + K n^2)`
    instead of :math:`O(K n p^2)`.  The fits are cumulative over the eigenpairs and triplets
    (:math:`h_{s,i} = \sum_{j\le r}\eta_j^+ (x_i^\top q_j)(d_i^\top q_j)`,
    :math:`h_{d,i} = \sum_{j\le r} s_j (x_i^\top u_j)(d_i^\top v_j)`), so every rank costs one pass.

    Parameters
    ----------
    spectra : :func:`truncation_spectra` of the training moment (at least the largest rank).
    X, D : (n, p) held-out queries and ``Y_pos - Y_neg``.
    ranks : ranks r, each in [1, spectra.rank].
    weights : (K, n) target weights.
    gram : ``(X X^T) * (D D^T)`` when already formed (the same held-out rows scored against many
        training moments: form it once).

    Returns
    -------
    ``(shared, dual)``, each (K, len(ranks)).
    """
    X = as_float_matrix(X, "X")
    D = as_float_matrix(D, "D")
    check_same_shape({"X": X, "D": D})
    n, p = X.shape
    if spectra.eigenvectors.shape[0] != p:
        raise ValueError(f"X: expected {spectra.eigenvectors.shape[0]} columns (the moment's dimension), got {p}")
    W = as_float_matrix(weights, "weights")
    if W.shape[1] != n:
        raise ValueError(f"weights: expected shape (K, {n}) (one weight per held-out row), got {W.shape}")
    if W.min() < 0 or not np.allclose(W.sum(axis=1), 1.0, rtol=0, atol=1e-9):
        raise ValueError("weights: expected non-negative rows that sum to one")
    rs = np.asarray([check_rank(r, spectra.rank) for r in ranks], dtype=np.int64)
    if rs.size == 0:
        raise ValueError("ranks: expected at least one rank")
    top = int(rs.max())
    eta = np.maximum(spectra.eigenvalues[:top], 0.0)
    Q, s = spectra.eigenvectors[:, :top], spectra.singular_values[:top]
    h_s = np.cumsum((X @ Q) * (D @ Q) * eta, axis=1)[:, rs - 1]  # (n, R)
    h_d = np.cumsum((X @ spectra.left[:, :top]) * (D @ spectra.right[:, :top]) * s, axis=1)[:, rs - 1]
    norm_s, norm_d = np.cumsum(eta**2)[rs - 1], np.cumsum(s**2)[rs - 1]
    if gram is None:
        G = (X @ X.T) * (D @ D.T)
    else:
        G = as_float_matrix(gram, "gram")
        if G.shape != (n, n):
            raise ValueError(f"gram: expected shape ({n}, {n}) ((X X^T) * (D D^T) of the held-out rows), got {G.shape}")
    t2 = np.einsum("ki,ki->k", W @ G, W)
    if not np.all(t2 > 0):
        raise ValueError("weights: a target moment M_w is zero (its loss is undefined)")
    shared = (norm_s[None, :] - 2.0 * (W @ h_s) + t2[:, None]) / t2[:, None]
    dual = (norm_d[None, :] - 2.0 * (W @ h_d) + t2[:, None]) / t2[:, None]
    return np.maximum(shared, 0.0), np.maximum(dual, 0.0)


def prefix_moments(X: np.ndarray, D: np.ndarray, sizes: Sequence[int]) -> dict[int, np.ndarray]:
    r"""Moments :math:`\widehat C_m = \frac1m\sum_{i<m} X_i D_i^\top` of the first ``m`` rows,
    for every ``m`` in ``sizes`` (Section 3.2's :math:`\widehat C_I` for nested prefixes I).

    Running sums: each block between consecutive sizes is added once as ``X_blk^T D_blk``
    (BLAS), so all nested moments cost one pass over the rows.

    Parameters
    ----------
    X, D : (n, p) queries and ``Y_pos - Y_neg``, rows already in nested (permutation) order.
    sizes : prefix lengths, each in [1, n].
    """
    X = as_float_matrix(X, "X")
    D = as_float_matrix(D, "D")
    check_same_shape({"X": X, "D": D})
    n, p = X.shape
    wanted = sorted({int(m) for m in sizes})
    if not wanted:
        raise ValueError("sizes: expected at least one prefix length")
    if wanted[0] < 1 or wanted[-1] > n:
        raise ValueError(f"sizes: prefix lengths must lie in [1, {n}], got {list(sizes)}")
    out: dict[int, np.ndarray] = {}
    S = np.zeros((p, p))
    start = 0
    for m in wanted:
        S += X[start:m].T @ D[start:m]
        start = m
        out[m] = S / m
    return out


@dataclass(frozen=True)
class MeanTerm:
    r"""The rank-1 mean term :math:`\bar x\,\bar d^\top` of a relevance moment.

    Attributes
    ----------
    x_mean, d_mean : (p,) mean query and mean of ``Y_pos - Y_neg``.
    share : :math:`\|\bar x\bar d^\top\|_F^2 / \|C\|_F^2` (may exceed 1: the two parts are not
        orthogonal).
    centred_share : :math:`\|C - \bar x\bar d^\top\|_F^2 / \|C\|_F^2`, the directional part.
    cosine : :math:`\langle C, \bar x\bar d^\top\rangle_F / (\|C\|_F\,\|\bar x\bar d^\top\|_F)`.
    """

    x_mean: np.ndarray
    d_mean: np.ndarray
    share: float
    centred_share: float
    cosine: float

    def as_dict(self) -> dict[str, float]:
        return {"share": self.share, "centred_share": self.centred_share, "cosine": self.cosine}


def mean_term(X: np.ndarray, D: np.ndarray) -> MeanTerm:
    r"""Share of the relevance moment held by its rank-1 mean term.

    .. math:: C = \frac1n\sum_i X_i D_i^\top = C_c + \bar x\,\bar d^\top,\qquad
              C_c = \frac1n\sum_i (X_i-\bar x)(D_i-\bar d)^\top

    Parameters
    ----------
    X, D : (n, p) queries and ``Y_pos - Y_neg`` (the moment is accumulated in float64).
    """
    X = as_float_matrix(X, "X")
    D = as_float_matrix(D, "D")
    check_same_shape({"X": X, "D": D})
    n = X.shape[0]
    C = X.T @ D / n
    xm, dm = X.mean(axis=0), D.mean(axis=0)
    c2 = float(np.sum(C * C))
    if c2 == 0.0:
        raise ValueError("X, D: the relevance moment is exactly zero; the mean-term share is undefined")
    m2 = float(xm @ xm) * float(dm @ dm)
    inner = float(xm @ C @ dm)
    Cc = C - np.outer(xm, dm)
    return MeanTerm(
        x_mean=xm,
        d_mean=dm,
        share=m2 / c2,
        centred_share=float(np.sum(Cc * Cc)) / c2,
        cosine=inner / np.sqrt(c2 * m2) if m2 > 0 else 0.0,
    )


def centre(X: np.ndarray, D: np.ndarray, x_mean: np.ndarray, d_mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(X - x_mean, D - d_mean)`` in float64: queries and differences centred with given
    (training) means, so held-out rows are shifted by the training means, never their own."""
    X = as_float_matrix(X, "X")
    D = as_float_matrix(D, "D")
    check_same_shape({"X": X, "D": D})
    p = X.shape[1]
    xm = as_float_matrix(x_mean, "x_mean", ndim=1)
    dm = as_float_matrix(d_mean, "d_mean", ndim=1)
    for name, v in (("x_mean", xm), ("d_mean", dm)):
        if v.shape != (p,):
            raise ValueError(f"{name}: expected shape ({p},) to match X, got {v.shape}")
    return X - xm, D - dm


def log2_slope(sizes: Sequence[float], values: Sequence[float]) -> float:
    r"""Least-squares slope of ``values`` against :math:`\log_2 n` (RQ4's trajectory slope).

    Parameters
    ----------
    sizes : training sizes n (> 0), at least two distinct.
    values : the trajectory, e.g. ``L_s - L_d`` at each size.
    """
    n = np.asarray(sizes, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    if n.ndim != 1 or y.shape != n.shape:
        raise ValueError(f"values: expected shape {n.shape} to match sizes, got {y.shape}")
    if np.any(n <= 0):
        raise ValueError(f"sizes: expected positive sizes, got {n.tolist()}")
    if np.unique(n).size < 2:
        raise ValueError(f"sizes: need at least two distinct sizes for a slope, got {n.tolist()}")
    x = np.log2(n)
    xc = x - x.mean()
    return float(xc @ (y - y.mean()) / (xc @ xc))


@dataclass(frozen=True)
class CrossValidatedRisk:
    """Outcome of :func:`cross_validated_risk`.

    Attributes
    ----------
    choice : ``"dual"`` when the mean held-out ``L_s - L_d`` exceeds one standard error, else
        ``"shared"`` (ties within noise go to the family with fewer parameters).
    score : mean over folds of ``L_s - L_d`` (positive favours dual).
    standard_error : standard deviation of the fold differences over ``sqrt(folds)``.
    differences : (folds,) the per-fold ``L_s - L_d``.
    rank, folds, seed : the settings.
    """

    choice: str
    score: float
    standard_error: float
    differences: np.ndarray
    rank: int
    folds: int
    seed: int

    def as_dict(self) -> dict[str, object]:
        return {"choice": self.choice, "score": self.score, "standard_error": self.standard_error,
                "differences": [float(v) for v in self.differences], "rank": self.rank, "folds": self.folds,
                "seed": self.seed}


def cross_validated_risk(X: np.ndarray, Y_pos: np.ndarray, Y_neg: np.ndarray, rank: int, *, folds: int = 5,
                         seed: int = 0) -> CrossValidatedRisk:
    r"""Cross-validated operator risk (issue 20): each family's held-out operator loss, K-fold
    within the training pool.

    Rows are permuted with ``seed`` and cut into ``folds`` near-equal folds. For fold k,
    :math:`\hat C_{-k}` is the relevance moment of the other folds and :math:`M_k` that of fold k;
    :math:`\Delta_k = L_s - L_d` with
    :math:`L_g = \|\mathcal P_{g,r}(\hat C_{-k}) - M_k\|_F^2 / \|M_k\|_F^2` (the RQ4 loss, computed by
    :func:`truncation_losses`). Score :math:`\bar\Delta`, standard error
    :math:`s_\Delta/\sqrt K`; dual iff :math:`\bar\Delta > \mathrm{SE}` (one-SE rule toward shared).

    Parameters
    ----------
    X, Y_pos, Y_neg : (n, p) training triples (the moment uses ``D = Y_pos - Y_neg``).
    rank : fitted rank r.
    folds : K, 2 <= K <= n.
    seed : seeds the row permutation.
    """
    X = as_float_matrix(X, "X")
    Yp = as_float_matrix(Y_pos, "Y_pos")
    Yn = as_float_matrix(Y_neg, "Y_neg")
    check_same_shape({"X": X, "Y_pos": Yp, "Y_neg": Yn})
    n, p = X.shape
    r = check_rank(rank, p)
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or not 2 <= folds <= n:
        raise ValueError(f"folds: expected an integer in [2, n = {n}], got {folds!r}")
    D = Yp - Yn
    order = np.random.default_rng(np.random.SeedSequence(int(seed))).permutation(n)
    parts = np.array_split(order, int(folds))
    total = X.T @ D
    diffs = []
    for part in parts:
        held = X[part].T @ D[part]
        C_train = (total - held) / (n - part.size)
        loss = truncation_losses(C_train, held / part.size, [r])
        diffs.append(float(loss.shared[0] - loss.dual[0]))
    d = np.asarray(diffs)
    score = float(d.mean())
    se = float(d.std(ddof=1) / np.sqrt(d.size))
    return CrossValidatedRisk("dual" if score > se else "shared", score, se, d, r, int(folds), int(seed))


@dataclass(frozen=True)
class ExtrapolatedRisk:
    """Outcome of :func:`extrapolated_cross_validated_risk`.

    Attributes
    ----------
    choice : ``"dual"`` when ``score > 0`` (ties to shared).
    score : mean over folds of the held-out ``L_s - L_d`` extrapolated to the full size n.
    standard_error : standard deviation of the per-fold extrapolations over ``sqrt(folds)``.
    extrapolated : (folds,) per-fold extrapolations; ``at_train`` and ``at_smaller`` (folds,) the
        differences with the other folds' moment (``n - n_k`` rows) and without one more fold.
    rank, folds, seed : the settings.
    """

    choice: str
    score: float
    standard_error: float
    extrapolated: np.ndarray
    at_train: np.ndarray
    at_smaller: np.ndarray
    rank: int
    folds: int
    seed: int


def extrapolated_cross_validated_risk(X: np.ndarray, D: np.ndarray, rank: int, *, folds: int = 5,
                                      seed: int = 0) -> ExtrapolatedRisk:
    r"""Cross-validated ``L_s - L_d`` corrected for the training size (issue #37).

    K-fold cross-validation scores truncations of moments of :math:`m_1 = n - n_k` rows, not n, and
    at smaller n shared looks better (Corollary 1: the local risk difference is
    :math:`\Delta(m) = \delta^2 - \sigma^2 k / m`, linear in :math:`1/m`).  For each fold k (the same
    permuted folds as :func:`cross_validated_risk` with the same seed) the held-out difference is
    measured twice against fold k's moment: with the other folds' moment (:math:`\Delta_1`, m_1
    rows) and without fold k+1 as well (:math:`\Delta_2`, :math:`m_2 = m_1 - n_{k+1}` rows); the line
    in :math:`1/m` through both is read at n:

    .. math:: \hat\Delta_k(n) = \Delta_1 + (\Delta_1 - \Delta_2)\,\frac{1/m_1 - 1/n}{1/m_2 - 1/m_1}.

    Score :math:`\overline{\hat\Delta(n)}`; dual iff it is positive.

    Parameters
    ----------
    X, D : (n, p) training queries and ``Y_pos - Y_neg``.
    rank : fitted rank r.
    folds : K, 3 <= K <= n.
    seed : seeds the row permutation.
    """
    X = as_float_matrix(X, "X")
    D = as_float_matrix(D, "D")
    check_same_shape({"X": X, "D": D})
    n, p = X.shape
    r = check_rank(rank, p)
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or not 3 <= folds <= n:
        raise ValueError(f"folds: expected an integer in [3, n = {n}], got {folds!r}")
    order = np.random.default_rng(np.random.SeedSequence(int(seed))).permutation(n)
    parts = np.array_split(order, int(folds))
    blocks = [X[part].T @ D[part] for part in parts]
    total = sum(blocks)
    at1, at2, ext = [], [], []
    for k, part in enumerate(parts):
        nxt = (k + 1) % len(parts)
        m1 = n - part.size
        m2 = m1 - parts[nxt].size
        target = blocks[k] / part.size
        l1 = truncation_losses((total - blocks[k]) / m1, target, [r])
        l2 = truncation_losses((total - blocks[k] - blocks[nxt]) / m2, target, [r])
        d1, d2 = float(l1.shared[0] - l1.dual[0]), float(l2.shared[0] - l2.dual[0])
        at1.append(d1)
        at2.append(d2)
        ext.append(d1 + (d1 - d2) * (1.0 / m1 - 1.0 / n) / (1.0 / m2 - 1.0 / m1))
    e = np.asarray(ext)
    score = float(e.mean())
    se = float(e.std(ddof=1) / np.sqrt(e.size))
    return ExtrapolatedRisk("dual" if score > 0 else "shared", score, se, e, np.asarray(at1), np.asarray(at2), r,
                            int(folds), int(seed))
