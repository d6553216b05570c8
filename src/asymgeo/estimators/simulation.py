"""The paper's two-view retrieval simulation (Appendix F, RQ1) and the local Gaussian model.

Two-view model
--------------
A latent ``z ~ N(0, I_k)`` generates a query and its relevant document::

    x  = C_q z + eps_q,    eps_q ~ N(0, s^2 I_p)
    y+ = C_d z + eps_d,    eps_d ~ N(0, s^2 I_p)

and negatives are independent documents ``y- = C_d z' + eps``.  ``C_q = Q_1`` (p, k)
has orthonormal columns drawn from the model seed; the document loading is the query
loading rotated by ``angle`` in k disjoint planes of R^p, each spanned by a query
loading direction and a fresh orthogonal direction (``Q_2``, also from the seed)::

    C_d = cos(angle) Q_1 + sin(angle) Q_2        (requires 2k <= p)

The population relevance moment ``C = E[x (y+ - y-)^T] = C_q C_d^T`` then has all k
singular values equal to 1 at every angle, while its symmetric part has, in each
plane, eigenvalues ``(cos(angle) + 1)/2 > 0`` and ``(cos(angle) - 1)/2 <= 0``: at
``angle = 0`` the target is PSD (shared suffices); as the angle grows, directional
signal moves into skew and negative directions that only dual can represent
(Theorem 1; Appendix D's planar-rotation example embedded k times).

Two harder variants (issue #37; both off by default, the paper's model unchanged draw for draw):

* ``query_noise_decay = d > 0``: the query noise is anisotropic,
  ``eps_q = s L g`` with ``g ~ N(0, I_p)`` and ``L = B diag(sqrt(lam))``, ``lam_j`` proportional to
  ``exp(-d j / (p - 1))`` scaled to mean 1 (the same total noise), ``B`` a seeded orthogonal basis.
  The population moment is unchanged (the noise is independent of the documents).
* ``mean_share = m in (0, 1)``: queries carry a common mean ``mu_x`` and positives differ from
  negatives by a common offset ``delta = mu_+ - mu_-`` (``mu_- = 0``), random directions with
  ``||mu_x|| = ||delta||`` and ``||mu_x delta^T||_F^2 = m / (1 - m) ||C_q C_d^T||_F^2``: the
  rank-1 mean term then carries about the share ``m`` of the moment's energy, as the real
  encoders' moments do (``docs/selectors.md``), and ``C = C_q C_d^T + mu_x delta^T``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import as_float_matrix, check_int, check_positive, check_rank, check_seed, check_square

__all__ = [
    "TwoViewModel",
    "two_view_model",
    "TwoViewTriples",
    "CandidateTest",
    "candidate_ndcg",
    "local_gaussian_point",
    "check_memory",
    "available_memory",
]


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux ``MemAvailable``), or ``None`` if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import os

        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(nbytes: int, what: str, *, available: int | None = None) -> None:
    """Refuse up front, with the figures, a draw that needs more memory than is available.

    Raises
    ------
    ValueError
        ``"<what> need about X GiB of memory, more than the Y GiB available"``.
    """
    avail = available_memory() if available is None else available
    if avail is not None and nbytes > avail:
        raise ValueError(f"{what} need about {nbytes / 2**30:.1f} GiB of memory, "
                         f"more than the {avail / 2**30:.1f} GiB available; use a smaller size")


@dataclass(frozen=True)
class TwoViewTriples:
    """Training triples from :meth:`TwoViewModel.sample_triples` (each (n, p))."""

    X: np.ndarray
    Y_pos: np.ndarray
    Y_neg: np.ndarray


@dataclass(frozen=True)
class CandidateTest:
    """Held-out queries, each with one positive and ``n_negatives`` independent negatives.

    ``X`` (m, p), ``Y_pos`` (m, p), ``Y_neg`` (m, n_negatives, p).
    """

    X: np.ndarray
    Y_pos: np.ndarray
    Y_neg: np.ndarray


@dataclass(frozen=True)
class TwoViewModel:
    """Loadings and noise of the two-view simulation; see the module docstring."""

    p: int
    latent_rank: int
    noise_sd: float
    angle: float
    C_q: np.ndarray  # (p, k)
    C_d: np.ndarray  # (p, k)
    query_noise: np.ndarray | None = None  # (p, p) L: eps_q = s L g; None: isotropic
    x_mean: np.ndarray | None = None  # (p,) common query mean
    pos_offset: np.ndarray | None = None  # (p,) mean of positives minus mean of negatives

    def population_moment(self) -> np.ndarray:
        """``C = E[x (y+ - y-)^T] = C_q C_d^T`` (p, p), plus ``mu_x delta^T`` with a mean offset."""
        C = self.C_q @ self.C_d.T
        if self.x_mean is not None and self.pos_offset is not None:
            C = C + np.outer(self.x_mean, self.pos_offset)
        return C

    def covariances(self) -> tuple[np.ndarray, np.ndarray]:
        """``(Sigma_x, Sigma_y) = (C_q C_q^T + s^2 L L^T, C_d C_d^T + s^2 I)`` (``L = I`` when isotropic)."""
        s2 = self.noise_sd ** 2
        eye = np.eye(self.p)
        noise_x = eye if self.query_noise is None else self.query_noise @ self.query_noise.T
        return self.C_q @ self.C_q.T + s2 * noise_x, self.C_d @ self.C_d.T + s2 * eye

    def _draw(self, rng: np.random.Generator, n: int, loading: np.ndarray, z: np.ndarray | None = None,
              noise: np.ndarray | None = None, mean: np.ndarray | None = None):
        if z is None:
            z = rng.standard_normal((n, self.latent_rank))
        g = rng.standard_normal((n, self.p))
        out = z @ loading.T + self.noise_sd * (g if noise is None else g @ noise.T)
        return (out if mean is None else out + mean), z

    def _draw_queries(self, rng: np.random.Generator, n: int):
        return self._draw(rng, n, self.C_q, noise=self.query_noise, mean=self.x_mean)

    def sample_triples(self, n: int, seed: int | np.random.Generator) -> TwoViewTriples:
        """``n`` training triples (query, relevant document, independent negative)."""
        if n < 1:
            raise ValueError(f"n: expected a positive number of triples, got {n}")
        # X, Y_pos, Y_neg kept, plus one (n, p) noise draw and z while drawing (float64)
        check_memory(8 * (4 * n * self.p + 2 * n * self.latent_rank), f"n: {n:,} training triples (p = {self.p})")
        rng = check_seed(seed)
        X, z = self._draw_queries(rng, n)
        Y_pos, _ = self._draw(rng, n, self.C_d, z, mean=self.pos_offset)
        Y_neg, _ = self._draw(rng, n, self.C_d)
        return TwoViewTriples(X, Y_pos, Y_neg)

    def sample_test(self, n_queries: int, n_negatives: int, seed: int | np.random.Generator) -> CandidateTest:
        """Test queries, each with its positive and ``n_negatives`` independent negatives."""
        if n_queries < 1 or n_negatives < 1:
            raise ValueError(
                f"n_queries, n_negatives: expected positive counts, got {n_queries}, {n_negatives}"
            )
        n_neg = n_queries * n_negatives
        check_memory(8 * (3 * n_queries * self.p + 2 * n_neg * self.p + n_neg * self.latent_rank),
                     f"n_queries: {n_queries:,} test queries x {n_negatives} negatives (p = {self.p})")
        rng = check_seed(seed)
        X, z = self._draw_queries(rng, n_queries)
        Y_pos, _ = self._draw(rng, n_queries, self.C_d, z, mean=self.pos_offset)
        Y_neg, _ = self._draw(rng, n_neg, self.C_d)
        return CandidateTest(X, Y_pos, Y_neg.reshape(n_queries, n_negatives, self.p))


def two_view_model(
    p: int = 32,
    latent_rank: int = 8,
    noise_sd: float = 0.6,
    angle: float = 0.0,
    seed: int | np.random.Generator = 20260809,
    *,
    query_noise_decay: float = 0.0,
    mean_share: float = 0.0,
) -> TwoViewModel:
    """Build the two-view model of Appendix F (defaults: the paper's RQ1 setting).

    Parameters
    ----------
    p : ambient dimension (paper: 32).
    latent_rank : k, latent dimension (paper: 8); ``2k <= p``.
    noise_sd : query and document noise standard deviation (paper: 0.6).
    angle : rotation of the document loading in radians (paper: 0 to 1.2).
    seed : seed for the query loading (the same seed gives the same loading at every
        angle, so angles are paired).
    query_noise_decay : d >= 0, the anisotropic query noise of the module docstring (0: the paper's).
    mean_share : m in [0, 1), the mean term's share of the moment (0: the paper's, no mean offset).
    """
    p = check_int(p, "p", min_value=2)
    latent_rank = check_int(latent_rank, "latent_rank", max_value=p, max_label=f"p={p}")
    noise_sd = check_positive(noise_sd, "noise_sd", allow_zero=True)
    angle = float(angle)
    if not np.isfinite(angle):
        raise ValueError(f"angle: expected a finite number of radians, got {angle!r}")
    if 2 * latent_rank > p:
        raise ValueError(f"latent_rank: the rotation needs 2 * latent_rank <= p, got latent_rank={latent_rank}, p={p}")
    rng = check_seed(seed)
    G = rng.standard_normal((p, 2 * latent_rank))
    Q, R = np.linalg.qr(G)
    Q = Q * np.sign(np.diag(R))
    Q1, Q2 = Q[:, :latent_rank], Q[:, latent_rank:]
    C_q = Q1
    C_d = np.cos(angle) * Q1 + np.sin(angle) * Q2
    decay = check_positive(query_noise_decay, "query_noise_decay", allow_zero=True)
    share = float(mean_share)
    if not 0.0 <= share < 1.0:
        raise ValueError(f"mean_share: expected a share in [0, 1), got {mean_share!r}")
    noise = x_mean = offset = None
    if decay > 0:  # drawn after the loadings: the paper's loadings are the same with or without it
        B, Rb = np.linalg.qr(rng.standard_normal((p, p)))
        B = B * np.sign(np.diag(Rb))
        lam = np.exp(-decay * np.arange(p) / max(p - 1, 1))
        noise = B * np.sqrt(lam / lam.mean())
    if share > 0:
        u, v = rng.standard_normal(p), rng.standard_normal(p)
        scale = (share / (1.0 - share) * float(np.sum((C_q @ C_d.T) ** 2))) ** 0.25
        x_mean, offset = scale * u / np.linalg.norm(u), scale * v / np.linalg.norm(v)
    return TwoViewModel(p=int(p), latent_rank=int(latent_rank), noise_sd=noise_sd, angle=angle, C_q=C_q, C_d=C_d,
                        query_noise=noise, x_mean=x_mean, pos_offset=offset)


def candidate_ndcg(M: np.ndarray, test: CandidateTest, k: int = 10) -> np.ndarray:
    """Per-query NDCG@k of ranking each positive among its own negatives by ``x^T M y``.

    With one relevant document (R_q = 1) the paper's Appendix F formula reduces to
    ``1 / log2(rank + 1)`` if ``rank <= k`` else 0.  Ties count against the positive
    (it is ranked after every negative with an equal score).

    Returns
    -------
    (m,) float64 array.
    """
    M = as_float_matrix(M, "M")
    check_square(M, "M")
    if M.shape[0] != test.X.shape[1]:
        p = test.X.shape[1]
        raise ValueError(f"M: expected shape ({p}, {p}) to match the test queries, got {M.shape}")
    q = test.X @ M  # (m, p): rows are M^T x
    s_pos = np.einsum("ij,ij->i", q, test.Y_pos)
    s_neg = np.einsum("ij,inj->in", q, test.Y_neg)
    rank = 1 + np.sum(s_neg >= s_pos[:, None], axis=1)
    return np.where(rank <= k, 1.0 / np.log2(rank + 1.0), 0.0)


def local_gaussian_point(p: int, rank: int, seed: int | np.random.Generator, *, eigenvalues: np.ndarray | None = None):
    """A rank-r PSD point ``S = U diag(lam) U^T`` for the local Gaussian model (Section 3).

    Returns ``(S, U)`` with U (p, r) Haar-orthonormal; eigenvalues default to
    ``linspace(2, 1, r)`` (well separated from zero).
    """
    rank = check_rank(rank, p)
    rng = check_seed(seed)
    G = rng.standard_normal((p, rank))
    Q, R = np.linalg.qr(G)
    U = Q * np.sign(np.diag(R))
    lam = np.linspace(2.0, 1.0, rank) if eigenvalues is None else np.asarray(eigenvalues, float)
    return (U * lam) @ U.T, U
