"""Cross-fitted Asymmetry Risk Selector (CARS, paper eq. 7); the SURE plug-in is in :mod:`asymgeo.kernels.theory`.

The kernel :func:`cars_score` is a pure function on arrays; the estimator
:class:`GeometrySelector` lives in :mod:`asymgeo.estimators`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .._deprecation import renamed_argument
from .._runtime import available_cpus
from .._validation import (
    as_float_matrix,
    check_int,
    check_rank,
    check_same_shape,
    check_seed,
    check_triples_informative,
)
from ..linalg.batched import batched_cars_terms, resolve_device
from ..linalg.solver_choice import HalfMomentSolver, TopSpectra, check_solver, single_threaded_blas, top_spectra

__all__ = [
    "CarsResult",
    "cars_score",
    "half_splits",
    "selector_projection",
    "residual_factors",
    "MIN_CARS_TRIPLES",
]

MIN_CARS_TRIPLES = 4


@dataclass(frozen=True)
class CarsResult:
    r"""Outcome of :func:`cars_score`.

    Attributes
    ----------
    score : :math:`\widehat\Gamma_{\rm CARS}` (eq. 7); > 0 selects dual.
    choice : ``"dual"`` if ``score > 0`` else ``"shared"`` (ties to shared).
    agreement : (L,) cross-half inner products :math:`\langle V_{I_1}, V_{I_2}\rangle_F`.
    disagreement : (L,) :math:`\|V_{I_1}-V_{I_2}\|_F^2` (the score charges a quarter of it).
    terms : (L,) per-split terms ``agreement - disagreement / 4``.
    standard_error : standard deviation of ``terms`` over splits / sqrt(L) (NaN if L = 1).
    raw_distance : plug-in :math:`\|V_{\rm all}\|_F^2` of the full training moment
        (the inflated "raw asymmetry" of RQ2).
    corrected_distance : mean agreement, an estimate of :math:`\|\Delta\|_F^2` whose
        noise bias is removed by cross-fitting (Appendix C.1).
    """

    score: float
    choice: str
    agreement: np.ndarray
    disagreement: np.ndarray
    terms: np.ndarray
    standard_error: float
    raw_distance: float
    corrected_distance: float
    n: int
    rank: int
    n_splits: int
    selector_dim: int | None
    seed: int | None = field(default=None)

    def as_dict(self) -> dict:
        return {
            "score": self.score,
            "choice": self.choice,
            "standard_error": self.standard_error,
            "raw_distance": self.raw_distance,
            "corrected_distance": self.corrected_distance,
            "n": self.n,
            "rank": self.rank,
            "n_splits": self.n_splits,
            "selector_dim": self.selector_dim,
            "seed": self.seed,
            "agreement": self.agreement.tolist(),
            "disagreement": self.disagreement.tolist(),
        }


def half_splits(n: int, n_splits: int, seed: int | np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n_splits`` random disjoint half-splits of ``range(n)``.

    Each split permutes the indices and takes the first ``n // 2`` as ``I1`` and the
    rest as ``I2`` (so ``I2`` has one more element when n is odd).
    """
    rng = check_seed(seed)
    if n < 2:
        raise ValueError(f"n: need at least 2 items to split, got {n}")
    m = n // 2
    out = []
    for _ in range(int(n_splits)):
        perm = rng.permutation(n)
        out.append((np.sort(perm[:m]), np.sort(perm[m:])))
    return out


def selector_projection(p: int, dim: int, seed: int | np.random.Generator) -> np.ndarray:
    """Fixed random orthonormal projection ``R`` (p, dim), Haar-distributed.

    Used by CARS with ``selector_dim``: ``X -> X R``, ``D -> D R``, so the selector
    works on the moment ``R^T C R`` (the paper's fixed 256-dimensional projection).
    """
    rng = check_seed(seed)
    G = rng.standard_normal((p, dim))
    Q, Rr = np.linalg.qr(G)
    return Q * np.sign(np.diag(Rr))  # sign fix makes Q Haar-distributed


def residual_factors(
    C: np.ndarray,
    rank: int,
    *,
    method: str = "auto",
    start_right: np.ndarray | None = None,
    start_eig: np.ndarray | None = None,
    factors: tuple[np.ndarray, np.ndarray, float] | None = None,
    grams: tuple[np.ndarray, np.ndarray] | None = None,
    mixed: bool = False,
    eigen: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Factors ``(L, R)`` (each (p, 2r)) with ``L @ R.T == V(C)``, where

    .. math:: V(C) = \mathcal P_{d,r}(C) - \mathcal P_{s,r}(C)

    is the dual-shared fit difference of Section 3.2.  Inner products of two such
    residuals cost :math:`O(pr^2)` instead of :math:`O(p^2)`.  ``factors = (X, D, c)``
    with ``C == c X^T D`` let the SVD run on the thin factors, ``grams = (X X^T, D D^T)``
    skip their Gram products (see :func:`asymgeo.linalg.lowrank.top_singular`); ``start_*`` seed
    ``method="krylov"``; ``mixed`` tries the mixed-precision solvers first (the eigensolver, and
    for p >= 512 the SVD of a formed moment); ``eigen``
    passes the top-r eigenpairs of ``sym(C)`` when already known.  The solvers are
    :func:`asymgeo.linalg.solver_choice.top_spectra`'s.
    """
    return _residual_of(top_spectra(C, rank, method=method, start_right=start_right, start_eig=start_eig,
                                    factors=factors, grams=grams, mixed=mixed, eigen=eigen))


def _residual_of(spectra: TopSpectra) -> tuple[np.ndarray, np.ndarray]:
    r"""Factors ``(L, R)`` of :math:`V(C) = U_r \mathrm{diag}(s_r) V_r^\top - Q_r \mathrm{diag}(\eta_r^+) Q_r^\top`
    from the top-r spectra of ``C``: the dual truncation minus the positive eigen-truncation."""
    eta = np.maximum(spectra.eigenvalues, 0.0)
    Q = spectra.eigenvectors
    L = np.concatenate([spectra.left * spectra.singular_values, -(Q * eta)], axis=1)
    R = np.concatenate([spectra.right, Q], axis=1)
    return L, R


def _inner(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """Frobenius inner product <La Ra^T, Lb Rb^T> = sum((La^T Lb) * (Ra^T Rb))."""
    return float(np.sum((a[0].T @ b[0]) * (a[1].T @ b[1])))


def _resolve_jobs(n_jobs: int | None, n_tasks: int, p: int) -> int:
    if n_jobs is None and p < 256:
        return 1  # small operators: thread start-up costs more than it saves
    if n_jobs is None:
        n_jobs = available_cpus()
    return max(1, min(check_int(n_jobs, "n_jobs", note=" or None"), n_tasks))


def _seed_streams(seed: int | np.random.Generator) -> tuple[np.random.Generator, np.random.Generator, int | None]:
    """Generators for the selector projection and the splits, and the integer seed (if any)."""
    if isinstance(seed, np.random.Generator):
        return seed, seed, None
    check_seed(seed)
    ss = np.random.SeedSequence(int(seed))
    rng_proj, rng_split = (np.random.default_rng(s) for s in ss.spawn(2))
    return rng_proj, rng_split, int(seed)


def _check_splits(splits: Sequence[tuple[Sequence[int], Sequence[int]]], n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Validate explicit ``[(I1, I2), ...]``: non-empty, in range, no repeats, disjoint."""
    split_list = []
    for b, pair in enumerate(splits):
        if len(pair) != 2:
            raise ValueError(f"splits[{b}]: expected a pair (I1, I2) of index arrays")
        I1 = np.asarray(pair[0], dtype=np.int64)
        I2 = np.asarray(pair[1], dtype=np.int64)
        for nm, idx in (("I1", I1), ("I2", I2)):
            if idx.ndim != 1 or idx.size == 0:
                raise ValueError(f"splits[{b}].{nm}: expected a non-empty 1-d index array")
            if idx.min() < 0 or idx.max() >= n:
                raise ValueError(
                    f"splits[{b}].{nm}: indices must lie in [0, {n}), got range [{idx.min()}, {idx.max()}]"
                )
            if np.unique(idx).size != idx.size:
                raise ValueError(f"splits[{b}].{nm}: contains repeated indices")
        if np.intersect1d(I1, I2).size:
            raise ValueError(f"splits[{b}]: I1 and I2 must be disjoint")
        split_list.append((I1, I2))
    if not split_list:
        raise ValueError("splits: expected at least one (I1, I2) pair")
    return split_list


def _split_term(solver: HalfMomentSolver, pair: tuple[np.ndarray, np.ndarray]) -> tuple[float, float]:
    """``(<V_I1, V_I2>_F, ||V_I1 - V_I2||_F^2)`` of one half-split; ``solver`` truncates the halves."""
    f1, f2 = (_residual_of(spectra) for spectra in solver.half_spectra(*pair))
    a = _inner(f1, f2)
    n1, n2 = _inner(f1, f1), _inner(f2, f2)
    return a, max(n1 + n2 - 2.0 * a, 0.0)


def _map_splits(
    fn: Callable[[tuple[np.ndarray, np.ndarray]], tuple[float, float]],
    split_list: list[tuple[np.ndarray, np.ndarray]],
    n_jobs: int | None,
    p: int,
) -> list[tuple[float, float]]:
    """``[fn(pair) for pair in split_list]``, on ``n_jobs`` threads if useful (the caller
    holds BLAS single-threaded).

    Splits are independent; the many small factorisations scale better on threads than
    with multithreaded BLAS on each.  Results are gathered in split order: deterministic.
    """
    workers = _resolve_jobs(n_jobs, len(split_list), p)
    if workers == 1:
        return [fn(pair) for pair in split_list]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, split_list))


def cars_score(
    X: np.ndarray,
    Y_pos: np.ndarray,
    Y_neg: np.ndarray,
    rank: int,
    n_splits: int = 20,
    seed: int | np.random.Generator = 0,
    splits: Sequence[tuple[Sequence[int], Sequence[int]]] | None = None,
    selector_dim: int | None = None,
    *,
    solver: str = "auto",
    n_jobs: int | None = None,
    method: str | None = None,
    device: str = "auto",
) -> CarsResult:
    r"""Cross-fitted Asymmetry Risk Selector (paper, Section 3.2, eq. 7).

    .. math::
        \widehat\Gamma_{\rm CARS} = \frac1L\sum_{b=1}^L\Big[\langle V_{I_{b,1}},V_{I_{b,2}}\rangle_F
            - \tfrac14\|V_{I_{b,1}}-V_{I_{b,2}}\|_F^2\Big],\qquad
        V_I = \mathcal P_{d,r}(\widehat C_I) - \mathcal P_{s,r}(\widehat C_I),

    selecting dual iff :math:`\widehat\Gamma > 0`.  Under the independent-half model
    :math:`\mathbb E\widehat\Gamma = \|\Delta\|_F^2 - \mathrm{tr}(\Sigma)/n` (Appendix C.1).

    Parameters
    ----------
    X, Y_pos, Y_neg : (n, p) training triples, n >= 4 (float16 is accumulated in float64).
    rank : int, 1 <= rank <= p (or <= selector_dim).
    n_splits : L, number of random half-splits (ignored when ``splits`` is given).
    seed : int or Generator for the splits and the selector projection.
    splits : explicit ``[(I1, I2), ...]`` disjoint index pairs; overrides ``n_splits``.
    selector_dim : if set (< p), first project queries and documents by a fixed random
        orthonormal ``R`` (p, selector_dim) drawn from ``seed``.
    n_jobs : threads over splits (None: all cores when p >= 256, else 1; 1: sequential, one
        core).  BLAS runs single-threaded inside ``cars_score``; ``n_jobs`` changes the
        result only by BLAS rounding (summation order), and a fixed ``n_jobs`` is
        deterministic.
    solver : truncation solver: ``"dense"`` (LAPACK on the thin factors of each half
        moment and on index subsets, certified), ``"krylov"`` (certified block Krylov
        warm-started from the full-data subspaces, falling back to dense) or ``"auto"``
        (``"krylov"`` when p >= 512, rank <= p/16 and Krylov certifies on the full-data
        moment, else ``"dense"``), chosen once per call by
        :class:`asymgeo.linalg.solver_choice.HalfMomentSolver`; see :mod:`asymgeo.linalg.lowrank`.
    method : deprecated alias of ``solver`` (removed in 0.3).
    device : where the half-split truncations run.  ``"auto"`` (default): the batched torch
        path on CUDA when torch imports and ``torch.cuda.is_available()`` (on Linux torch is
        not imported without a ``/dev/nvidia*`` device), else the numpy path; ``"cpu"``: the
        numpy path (torch is never imported); ``"cuda"`` / ``"cuda:N"``: the batched path on
        that GPU (ValueError without CUDA); ``"torch-cpu"``: the batched path on the CPU (for
        testing it without a GPU).  The batched path (:mod:`asymgeo.linalg.batched`) forms and
        truncates all half moments in float64 in memory-bounded chunks of splits, with batched
        ``torch.linalg.eigh`` (the Gram-route SVD certified as on the numpy path, else a full
        SVD); its result equals the numpy path's to rounding (tested to 1e-8 relative).
        ``solver`` and ``n_jobs`` apply to the numpy path only; ``splits``, ``seed`` and
        ``selector_dim`` mean the same on both.
    """
    method = renamed_argument("cars_score", "method", "solver", method, solver, "auto")
    torch_device = resolve_device(device)
    X = as_float_matrix(X, "X")
    Y_pos = as_float_matrix(Y_pos, "Y_pos")
    Y_neg = as_float_matrix(Y_neg, "Y_neg")
    check_same_shape({"X": X, "Y_pos": Y_pos, "Y_neg": Y_neg})
    n, p = X.shape
    if n < MIN_CARS_TRIPLES:
        raise ValueError(f"X: CARS needs at least {MIN_CARS_TRIPLES} triples, got n = {n}")
    rng_proj, rng_split, seed_value = _seed_streams(seed)
    D = Y_pos - Y_neg
    del Y_pos, Y_neg
    check_triples_informative(X, D)
    if selector_dim is not None:
        if isinstance(selector_dim, bool) or not isinstance(selector_dim, (int, np.integer)) or selector_dim < 1:
            raise ValueError(f"selector_dim: expected a positive integer (a projection dimension; >= p means "
                             f"no projection), got {selector_dim!r}")
        selector_dim = int(selector_dim)
        if selector_dim < p:
            R = selector_projection(p, selector_dim, rng_proj)
            X = X @ R
            D = D @ R
            p = selector_dim
    rank = check_rank(rank, p)
    if splits is None:
        split_list = half_splits(n, check_int(n_splits, "n_splits"), rng_split)
    else:
        split_list = _check_splits(splits, n)

    if torch_device is not None:
        check_solver(method)
        terms = batched_cars_terms(X, D, split_list, rank, torch_device)
        return _summarise(terms.pairs, terms.raw_distance, n=n, rank=rank, selector_dim=selector_dim,
                          seed=seed_value)

    # Single-threaded BLAS throughout (parallelism comes from threads over splits): the
    # solvers alternate numpy's and scipy's OpenBLAS, and two multithreaded pools taking
    # turns spin against each other (measured 20x slower on a loaded 2-core machine).
    with single_threaded_blas():
        C_all = X.T @ D / n
        # linalg chooses the solver paths once, from the full moment (mixed-precision probe,
        # Krylov or dense, thin factors or formed halves), and truncates every half
        half_solver = HalfMomentSolver(X, D, C_all, rank, method)
        full = _residual_of(half_solver.full)
        pairs = _map_splits(lambda pair: _split_term(half_solver, pair), split_list, n_jobs, p)
    return _summarise(pairs, _inner(full, full), n=n, rank=rank, selector_dim=selector_dim, seed=seed_value)


def _summarise(
    pairs: list[tuple[float, float]], raw_distance: float, *, n: int, rank: int,
    selector_dim: int | None, seed: int | None,
) -> CarsResult:
    """Per-split (agreement, disagreement) -> the CARS score, its standard error and the result."""
    L = len(pairs)
    agreement = np.array([a for a, _ in pairs], dtype=np.float64)
    disagreement = np.array([d for _, d in pairs], dtype=np.float64)
    terms = agreement - disagreement / 4.0
    score = float(terms.mean())
    se = float(terms.std(ddof=1) / np.sqrt(L)) if L > 1 else float("nan")
    return CarsResult(
        score=score,
        choice="dual" if score > 0 else "shared",
        agreement=agreement,
        disagreement=disagreement,
        terms=terms,
        standard_error=se,
        raw_distance=raw_distance,
        corrected_distance=float(agreement.mean()),
        n=n,
        rank=rank,
        n_splits=L,
        selector_dim=selector_dim,
        seed=seed,
    )
