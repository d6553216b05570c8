r"""Five-fold validation of the geometry decision (paper Table 1 protocol, Appendix F.1).

:func:`validate_selection` answers "how far can I trust CARS's shared/dual decision on my
own labelled queries?".  It runs the protocol of Table 1 at one rank: query ids sorted,
permuted with seed 20260923 and cut into balanced held-out folds; each fold's held-out
queries define the target moment :math:`M_{\rm test}`; the other folds, permuted with seed
20260924 + fold, give nested training prefixes of 32, 64, ..., 4096 queries (plus the whole
training pool when it has at most 4096).  In every (fold, size) cell

* both truncations of the training moment are scored by the held-out loss
  :math:`L_g = \|\widehat M_g - M_{\rm test}\|_F^2/\|M_{\rm test}\|_F^2`
  (:func:`asymgeo.kernels.operator_risk.truncation_losses`);
* CARS (eq. 7) and the SURE rule with its plug-in :math:`\sigma` (eq. 4) choose a geometry
  from the training prefix alone;
* the regret of a rule is :math:`L_{\hat g} - \min(L_s, L_d)`; a choice is correct when it
  names the lower-loss geometry (ties to shared).

Regret and accuracy are averaged over the cells of a fold, then over folds (Section 4).
Training moments of all sizes are prefix sums of per-query outer products
(:func:`asymgeo.kernels.operator_risk.prefix_moments`), never recomputed per size.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._runtime import available_cpus, limit_blas_threads
from .._validation import as_float_matrix, check_rank, check_same_shape, check_seed
from ..kernels.folds import FOLD_SEED, NESTED_SIZES, fold_seed, fold_split, nested_subsets, query_folds
from ..kernels.operator_risk import centre, prefix_moments, resampled_losses, truncation_losses, truncation_spectra
from ..kernels.selection import MIN_CARS_TRIPLES, selector_projection
from ..selectors.catalogue import LEGACY_CV_RULE, LEGACY_SURE_RULES, REFERENCE_RULE
from ..selectors.registry import Rule, RuleNotApplicable, SelectionContext, get_rule
from ..selectors.registry import rules as registered_rules

__all__ = [
    "SelectionValidation",
    "validate_selection",
    "fold_cells",
    "row_space_basis",
    "fixed_projection",
    "summarise_cells",
    "validation_rules",
    "FIXED_RULES",
]

logger = logging.getLogger(__name__)

#: The fixed rules scored beside the registered selectors in every cell.
FIXED_RULES = ("shared", "dual")


def __getattr__(name: str) -> Any:
    if name == "RULES":  # 0.2.0's fixed tuple; the registry now says which rules a validation scores
        from .._deprecation import warn_deprecated

        warn_deprecated("asymgeo.estimators.validation.RULES is replaced by validation_rules() and the selector "
                        "registry (asymgeo.selectors.rule_names())")
        return (REFERENCE_RULE, *FIXED_RULES, *(r.name for r in validation_rules() if r.name != REFERENCE_RULE))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def validation_rules(names: Sequence[str] | None = None, *, sure: bool = True, cv_folds: int = 0) -> list[Rule]:
    """The registered rules a validation scores (CARS first: Table 1's rule).

    ``names``: those rules (each must decide from triples alone).  None: every triples-only
    rule marked ``validated_by_default`` (CARS, SURE, anisotropic SURE and any rule registered
    so); ``sure=False`` leaves out the SURE family (rules ``sure`` and ``anisotropic``) and
    ``cv_folds >= 2`` adds the cross-validated risk (``cv``), as in 0.2.0.
    """
    if names is None:
        chosen = [r for r in registered_rules(triples_only=True) if r.validated_by_default]
        if not sure:
            chosen = [r for r in chosen if r.name not in LEGACY_SURE_RULES]
        if cv_folds >= 2 and all(r.name != LEGACY_CV_RULE for r in chosen):
            chosen.append(get_rule(LEGACY_CV_RULE))
    else:
        chosen = []
        for name in dict.fromkeys(names):
            rule = get_rule(name, argument="rules")
            if not rule.triples_only:
                raise ValueError(f"rules: {rule.name!r} needs {' and '.join(sorted(rule.needs))}; a validation "
                                 "scores rules that decide from the training triples alone")
            chosen.append(rule)
    if all(r.name != REFERENCE_RULE for r in chosen):
        chosen.insert(0, get_rule(REFERENCE_RULE))
    return sorted(chosen, key=lambda r: r.name != REFERENCE_RULE)


#: ``spawn_key = (fold, BOOTSTRAP_KEY)`` seeds the held-out bootstrap of a fold (apart from CARS's (fold, m)).
BOOTSTRAP_KEY = 2_000_000


def _derived_seed(seed: int, *coords: int) -> int:
    ss = np.random.SeedSequence(int(seed), spawn_key=tuple(int(c) for c in coords))
    return int(ss.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))


def row_space_basis(X: np.ndarray, D: np.ndarray, min_dim: int = 1) -> np.ndarray | None:
    r"""Orthonormal basis ``Q`` (p, k) of the span of the rows of ``X`` and ``D``, widened to
    at least ``min_dim`` columns; None when ``k`` would not be below p.

    CARS is exact in this basis: every half moment :math:`\widehat C_I = Q (Q^\top \widehat C_I Q) Q^\top`,
    both truncations commute with the embedding ``Q``, and Frobenius inner products are
    preserved, so ``cars_score(X Q, D Q, ...) == cars_score(X, D, ...)`` (same splits) at a cost
    in ``k <= 2m`` instead of p dimensions.  (SURE is not invariant: its tangent dimensions
    depend on p.)
    """
    m, p = X.shape
    k = max(2 * m, int(min_dim))
    if k >= p:
        return None
    Q, _ = np.linalg.qr(np.concatenate([X, D], axis=0).T)  # (p, 2m)
    if Q.shape[1] < k:  # widen with directions orthogonal to the data (zero moment there)
        extra = np.random.default_rng(0).standard_normal((p, k - Q.shape[1]))
        extra -= Q @ (Q.T @ extra)
        Q = np.concatenate([Q, np.linalg.qr(extra)[0]], axis=1)
    return Q


def fold_cells(
    X: np.ndarray,
    D: np.ndarray,
    train_order: Sequence[int],
    test_rows: Sequence[int],
    sizes: Sequence[int],
    ranks: Sequence[int],
    *,
    fold: int = 0,
    n_splits: int = 20,
    seed: int = 0,
    projection: np.ndarray | None = None,
    sure: bool = True,
    n_jobs: int | None = None,
    reduce: bool = True,
    cv_folds: int = 0,
    bootstrap: int = 0,
    rules: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    r"""Every (size, rank) cell of one held-out fold.

    Parameters
    ----------
    X, D : (n, p) queries and ``Y_pos - Y_neg`` of all labelled queries (centre them first
        if wanted, with training means).
    train_order : rows of the training pool in nested order (prefix ``m`` = size ``m``).
    test_rows : rows of the held-out fold (its moment is :math:`M_{\rm test}`).
    sizes : training prefix lengths (each <= len(train_order), >= 4).
    ranks : fitted ranks.
    fold : fold index (enters the CARS split seeds).
    n_splits : CARS half-splits L.
    seed : base seed; CARS at size m uses ``SeedSequence(seed, spawn_key=(fold, m))``,
        the same splits for every rank.
    projection : (p, q) fixed selector projection ``R``: CARS and SURE see ``X R, D R``
        (the losses are always of the full-space operators).  None: no projection.
    sure : also run the SURE rule and its anisotropic variant
        (:func:`asymgeo.kernels.theory.anisotropic_sure`: keys ``aniso_choice, aniso_score``).
    n_jobs : threads over the training sizes (None: every usable core when p >= 256, else 1).
        Each size runs with single-threaded BLAS and CARS on one thread, so the cells are the
        same for every ``n_jobs``.
    reduce : run CARS in the row space of the training prefix when ``2 m`` is below the
        dimension (:func:`row_space_basis`; exact, same splits, much faster at small m).
    cv_folds : when >= 2, also run the cross-validated operator-risk selector
        (:func:`asymgeo.kernels.operator_risk.cross_validated_risk`, that many folds inside the
        training prefix, full space (computed in the prefix's row space when ``reduce`` applies
        and there is no projection: the same losses), seeded like CARS): keys
        ``cv_choice, cv_score, cv_se``.
    bootstrap : when >= 2, that many resamples of the held-out queries (with replacement, seeded
        ``SeedSequence(seed, spawn_key=(fold, 2_000_000))``, the same for every size and rank)
        give the standard error of the held-out ``L_s - L_d`` (key ``heldout_se``;
        :func:`asymgeo.kernels.operator_risk.resampled_losses`, no moment formed per resample).
    rules : registered selectors to score (:func:`validation_rules`; None: the default set,
        with ``sure`` and ``cv_folds`` as above).  Each rule sees the selector projection's view
        when it is marked ``sees_projection``, the prefix's row-space basis when it is
        ``basis_invariant`` (exact), and the training moment's known eigenpairs otherwise.

    Returns
    -------
    list of dicts with keys ``fold, size, rank, loss_shared, loss_dual``, then per rule
    ``<rule>_score, <rule>_se`` (with a standard error), ``<rule>_choice`` (CARS also
    ``raw_distance, corrected_distance``; a rule that does not apply: ``shared`` and NaN).

    Notes
    -----
    Work shared between cells: the nested training moments are running sums
    (:func:`asymgeo.kernels.operator_risk.prefix_moments`); at each size one certified top-r
    eigendecomposition of :math:`\mathrm{sym}(\widehat C_m)` and one top-r SVD of
    :math:`\widehat C_m` (r = the largest rank asked;
    :func:`asymgeo.kernels.operator_risk.truncation_spectra`) serve the losses of every rank
    and the SURE rule's shared point.
    """
    tasks = _fold_tasks(X, D, train_order, test_rows, sizes, ranks, fold=fold, n_splits=n_splits, seed=seed,
                        projection=projection, rules=validation_rules(rules, sure=sure, cv_folds=cv_folds),
                        reduce=reduce, cv_folds=cv_folds, bootstrap=bootstrap)
    p = np.asarray(X).shape[1]
    return _run_tasks(tasks, _cell_workers(n_jobs, len(tasks), p))


def _cell_workers(n_jobs: int | None, n_tasks: int, p: int) -> int:
    if n_jobs is None:
        n_jobs = available_cpus() if p >= 256 else 1
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, (int, np.integer)) or n_jobs < 1:
        raise ValueError(f"n_jobs: expected a positive integer or None, got {n_jobs!r}")
    return max(1, min(int(n_jobs), n_tasks))


def _run_tasks(tasks: list[Any], workers: int, on_done: Any = None) -> list[dict[str, Any]]:
    """Run cell tasks (largest first when threaded), rows returned in task order."""
    out: list[list[dict[str, Any]] | None] = [None] * len(tasks)
    with limit_blas_threads(1):
        if workers == 1:
            for i, task in enumerate(tasks):
                rows = task()
                out[i] = rows
                if on_done is not None:
                    on_done(len(rows))
        else:
            from concurrent.futures import ThreadPoolExecutor, as_completed

            order = sorted(range(len(tasks)), key=lambda i: -tasks[i].cost)
            with ThreadPoolExecutor(workers) as pool:
                futures = {pool.submit(tasks[i]): i for i in order}
                for fut in as_completed(futures):
                    rows = fut.result()
                    out[futures[fut]] = rows
                    if on_done is not None:
                        on_done(len(rows))
    return [row for rows in out for row in rows]  # type: ignore[union-attr]


#: Seconds between two progress lines of :class:`LineProgress` (piped ``select --validate``).
PIPED_PROGRESS_INTERVAL = 5.0


class LineProgress:
    """Progress as plain lines on a stream that is not a terminal (a log, a pipe, CI).

    One line when it starts, then ``"<desc>: done/total <unit> (pct%), E s elapsed, about T s
    left"`` at most every ``interval`` seconds, and a last line when it closes; where
    ``T = E (total - done) / done``.  A heartbeat thread repeats the current line every
    ``interval`` seconds while nothing finishes, so a slow step is never silent.

    Parameters
    ----------
    total : steps expected.
    desc : what runs (the line's prefix, after ``asymgeo:``).
    unit : the steps' name.
    interval : seconds between lines (default :data:`PIPED_PROGRESS_INTERVAL`, read when created).
    stream : where the lines go (default ``sys.stderr``).
    """

    def __init__(self, total: int, desc: str, *, unit: str = "steps", interval: float | None = None,
                 stream: Any = None):
        import sys
        import threading
        import time

        self.total, self.desc, self.unit = int(total), str(desc), unit
        self.interval = float(PIPED_PROGRESS_INTERVAL if interval is None else interval)
        self.stream = sys.stderr if stream is None else stream
        self._clock = time.monotonic
        self.done = 0
        self._start = self._last = self._clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._write(f"asymgeo: {self.desc}: 0/{self.total} {self.unit}, started")
        self._heart = threading.Thread(target=self._beat, daemon=True)
        self._heart.start()

    def _write(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def _line(self) -> str:
        elapsed = self._clock() - self._start
        pct = 100.0 * self.done / self.total if self.total else 100.0
        left = (f", about {elapsed * (self.total - self.done) / self.done:.0f} s left" if 0 < self.done < self.total
                else "")
        return f"asymgeo: {self.desc}: {self.done}/{self.total} {self.unit} ({pct:.0f}%), {elapsed:.0f} s elapsed{left}"

    def _beat(self) -> None:
        while not self._stop.wait(max(self.interval, 0.05)):
            with self._lock:
                if self._clock() - self._last >= self.interval:
                    self._last = self._clock()
                    self._write(self._line())

    def update(self, k: int = 1) -> None:
        with self._lock:
            self.done += int(k)
            if self._clock() - self._last >= self.interval and self.done < self.total:
                self._last = self._clock()
                self._write(self._line())

    def close(self) -> None:
        self._stop.set()
        self._heart.join()
        with self._lock:
            self._write(self._line().replace(" elapsed", " in all") if self.done >= self.total else
                        self._line() + " (stopped)")


@dataclass
class _SizeTask:
    """One training size of one fold: every rank's cell (callable, for the thread pool)."""

    run: Any
    cost: float

    def __call__(self) -> list[dict[str, Any]]:
        return self.run()


def _check_fold_inputs(X, D, train_order, test_rows, sizes, projection):
    X = as_float_matrix(X, "X")
    D = as_float_matrix(D, "D")
    check_same_shape({"X": X, "D": D})
    train = np.asarray(train_order, dtype=np.int64)
    test = np.asarray(test_rows, dtype=np.int64)
    for name, idx in (("train_order", train), ("test_rows", test)):
        if idx.ndim != 1 or (idx.size and (idx.min() < 0 or idx.max() >= X.shape[0])):
            raise ValueError(f"{name}: expected row numbers in [0, {X.shape[0]})")
    if projection is not None and (projection.ndim != 2 or projection.shape[0] != X.shape[1]):
        raise ValueError(f"projection: expected shape ({X.shape[1]}, q), got {projection.shape}")
    if test.size == 0:
        raise ValueError("test_rows: the held-out fold is empty")
    if np.intersect1d(train, test).size:
        raise ValueError("test_rows: held-out rows overlap the training pool")
    sizes = sorted({int(m) for m in sizes})
    if sizes and (sizes[0] < MIN_CARS_TRIPLES or sizes[-1] > train.size):
        raise ValueError(f"sizes: expected sizes in [{MIN_CARS_TRIPLES}, {train.size}], got {sizes}")
    return X, D, train, test, sizes


def _fold_tasks(
    X: np.ndarray,
    D: np.ndarray,
    train_order: Sequence[int],
    test_rows: Sequence[int],
    sizes: Sequence[int],
    ranks: Sequence[int],
    *,
    fold: int,
    n_splits: int,
    seed: int,
    projection: np.ndarray | None,
    rules: Sequence[Rule],
    reduce: bool,
    cv_folds: int,
    bootstrap: int = 0,
) -> list[_SizeTask]:
    """Check one fold's inputs and return one task per training size (see :func:`fold_cells`)."""
    X, D, train, test, sizes = _check_fold_inputs(X, D, train_order, test_rows, sizes, projection)
    p = X.shape[1]
    rank_list = [check_rank(r, p) for r in ranks]
    if not rank_list:
        raise ValueError("ranks: expected at least one rank")
    Xt, Dt = X[test], D[test]
    M_test = Xt.T @ Dt / test.size
    Xtr, Dtr = X[train], D[train]
    moments = prefix_moments(Xtr, Dtr, sizes) if sizes else {}
    if projection is not None:
        Xs, Ds = Xtr @ projection, Dtr @ projection
    else:
        Xs, Ds = Xtr, Dtr
    top = max(rank_list)
    context = SelectionContext(n_splits=n_splits, n_jobs=1, cv_folds=max(int(cv_folds), 2) if cv_folds else 5)
    resamples = None
    if bootstrap:
        if isinstance(bootstrap, bool) or not isinstance(bootstrap, (int, np.integer)) or bootstrap < 2:
            raise ValueError(f"bootstrap: expected 0 or an integer >= 2, got {bootstrap!r}")
        rng = np.random.default_rng(_derived_seed(seed, fold, BOOTSTRAP_KEY))
        resamples = rng.multinomial(test.size, np.full(test.size, 1.0 / test.size), size=int(bootstrap)) / test.size
        gram = (Xt @ Xt.T) * (Dt @ Dt.T)  # one per fold: every size and rank scores the same resamples

    def cells_at(m: int) -> list[dict[str, Any]]:
        spectra = truncation_spectra(moments[m], top, factors=(Xtr[:m], Dtr[:m], 1.0 / m))
        losses = truncation_losses(moments[m], M_test, rank_list, spectra=spectra)
        heldout_se = None
        if resamples is not None:
            ls_b, ld_b = resampled_losses(spectra, Xt, Dt, [int(r) for r in losses.ranks], resamples, gram=gram)
            heldout_se = np.std(ls_b - ld_b, axis=0, ddof=1)
        split_seed = _derived_seed(seed, fold, m)
        Xm, Dm = Xs[:m], Ds[:m]
        Q = row_space_basis(Xm, Dm, top) if reduce else None
        reduced = (Xm, Dm) if Q is None else (Xm @ Q, Dm @ Q)
        # the training moment's top eigenpairs are known already, unless the selector sees a projection
        known = (spectra.eigenvalues, spectra.eigenvectors)
        views = {rule.name: _rule_view(rule, (Xm, Dm), (Xtr[:m], Dtr[:m]), reduced if Q is not None else None,
                                       projection is not None, known) for rule in rules}
        rows: list[dict[str, Any]] = []
        for j, r in enumerate(losses.ranks):
            row: dict[str, Any] = {
                "fold": int(fold),
                "size": int(m),
                "rank": int(r),
                "loss_shared": float(losses.shared[j]),
                "loss_dual": float(losses.dual[j]),
            }
            for rule in rules:
                Xr, Dr, eigen = views[rule.name]
                row.update(_rule_cell(rule, Xr, Dr, int(r), split_seed, context.with_(eigen=eigen)))
            if heldout_se is not None:
                row["heldout_se"] = float(heldout_se[j])
            rows.append(row)
        return rows

    # cost model for scheduling only: CARS halves of min(m, p) rows in min(2m, p) dimensions
    return [_SizeTask(run=(lambda m=m: cells_at(m)), cost=float(min(2 * m, p)) ** 2 * min(m, p) * len(rank_list))
            for m in sizes]


def _rule_view(rule: Rule, selector_view: tuple[np.ndarray, np.ndarray], full: tuple[np.ndarray, np.ndarray],
               reduced: tuple[np.ndarray, np.ndarray] | None, projected: bool,
               eigen: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, Any]:
    """The arrays a rule decides on in a cell: the selector projection's view if it sees it (else
    the full space), in the prefix's row-space basis when the rule is basis-invariant (and that
    basis is of the view it gets), with the known eigenpairs when the view is the full space."""
    if rule.sees_projection or not projected:
        if rule.basis_invariant and reduced is not None:
            return reduced[0], reduced[1], None
        return selector_view[0], selector_view[1], (None if projected else eigen)
    return full[0], full[1], eigen


def _rule_cell(rule: Rule, X: np.ndarray, D: np.ndarray, rank: int, seed: int,
               context: SelectionContext) -> dict[str, Any]:
    """One rule's cell columns; a rule that does not apply to the prefix picks shared with score NaN."""
    try:
        decision = rule.decide(X, D, rank, seed=seed, context=context)
    except RuleNotApplicable:
        return {f"{rule.name}_score": float("nan"), f"{rule.name}_choice": "shared"}
    out = decision.cell()
    out.update({key: decision.evidence[key] for key in rule.cell_columns})
    return out


def _cell_regrets(row: dict[str, Any], rules: Sequence[str]) -> dict[str, float]:
    ls, ld = row["loss_shared"], row["loss_dual"]
    best = min(ls, ld)
    return {g: (ld if _rule_choice(row, g) == "dual" else ls) - best for g in rules}


def _scored_rules(rows: Sequence[dict[str, Any]]) -> list[str]:
    """``cars``, the fixed rules, then every other rule whose choice every cell carries
    (registered rules in registry order, then any others in the cells' column order)."""
    named: list[str] = []
    for row in rows[:1]:
        named = [k[: -len("_choice")] for k in row if k.endswith("_choice")]
    order = {name: i for i, name in enumerate(r.name for r in registered_rules())}
    others = sorted((g for g in named if g != REFERENCE_RULE and all(row.get(f"{g}_choice") for row in rows)),
                    key=lambda g: (order.get(g, len(order)), named.index(g)))
    return [REFERENCE_RULE, *FIXED_RULES, *others]


def _winner(row: dict[str, Any]) -> str:
    return "dual" if row["loss_dual"] < row["loss_shared"] else "shared"  # ties to shared


def _rule_choice(row: dict[str, Any], rule: str) -> str:
    """The family a rule picks in a cell (the fixed rules pick themselves)."""
    return rule if rule in ("shared", "dual") else str(row[f"{rule}_choice"])


def summarise_cells(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Table 1 aggregates of the cells of several folds (one dataset, encoder, variant).

    Accuracy and regret are averaged over cells within each fold, then over folds.
    Returns ``cars_accuracy``, ``accuracy`` (per rule: the fraction of cells whose choice names
    the lower held-out loss, ties to shared; the fixed rules' included), ``regret`` (per rule),
    ``reduction`` (1 - CARS regret / the better fixed rule's regret; NaN when that is 0),
    ``fold_wins`` (folds where CARS's mean
    regret is strictly below both fixed rules'), ``folds`` (per-fold figures) and
    ``per_size`` (per training size: how many folds chose dual, how many held-out winners
    were dual, accuracy and mean regrets, and, when every cell has ``heldout_se``, ``decided``:
    the cells whose held-out winner leads by more than two bootstrap standard errors).
    """
    if not rows:
        raise ValueError("rows: no cells to summarise")
    scored = _scored_rules(rows)
    by_fold: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_fold.setdefault(int(row["fold"]), []).append(row)
    folds: list[dict[str, Any]] = []
    fold_regret: list[dict[str, float]] = []
    fold_accuracy: list[dict[str, float]] = []
    for f in sorted(by_fold):
        cells = by_fold[f]
        regs = [_cell_regrets(c, scored) for c in cells]
        reg = {g: float(np.mean([r[g] for r in regs])) for g in scored}
        fold_regret.append(reg)
        fold_accuracy.append({g: float(np.mean([_rule_choice(c, g) == _winner(c) for c in cells]))
                              for g in scored})
        folds.append({
            "fold": f,
            "cells": len(cells),
            "accuracy": fold_accuracy[-1]["cars"],
            "regret": reg,
            "cars_wins": bool(reg["cars"] < reg["shared"] and reg["cars"] < reg["dual"]),
        })
    regret = {g: float(np.mean([reg[g] for reg in fold_regret])) for g in scored}
    accuracy = {g: float(np.mean([acc[g] for acc in fold_accuracy])) for g in scored}
    better_fixed = min(regret["shared"], regret["dual"])
    per_size = []
    for m in sorted({int(r["size"]) for r in rows}):
        cells = [r for r in rows if int(r["size"]) == m]
        regs = [_cell_regrets(c, scored) for c in cells]
        per_size.append({
            "size": m,
            "cells": len(cells),
            "cars_dual": int(sum(c["cars_choice"] == "dual" for c in cells)),
            "heldout_dual": int(sum(_winner(c) == "dual" for c in cells)),
            "accuracy": float(np.mean([c["cars_choice"] == _winner(c) for c in cells])),
            "mean_advantage": float(np.mean([c["loss_shared"] - c["loss_dual"] for c in cells])),
            "regret": {g: float(np.mean([r[g] for r in regs])) for g in scored},
            **({"decided": int(sum(abs(c["loss_shared"] - c["loss_dual"]) > 2.0 * c["heldout_se"] for c in cells))}
               if all("heldout_se" in c for c in cells) else {}),
        })
    return {
        "cars_accuracy": float(np.mean([fd["accuracy"] for fd in folds])),
        "accuracy": accuracy,
        "regret": regret,
        "reduction": float(1.0 - regret["cars"] / better_fixed) if better_fixed > 0 else float("nan"),
        "fold_wins": int(sum(bool(fd["cars_wins"]) for fd in folds)),
        "folds": folds,
        "per_size": per_size,
    }


@dataclass(frozen=True)
class SelectionValidation:
    """Outcome of :func:`validate_selection` (attributes as in :func:`summarise_cells`).

    Attributes
    ----------
    cars_accuracy : fraction of (fold, size) cells where CARS chose the lower held-out loss.
    accuracy : the same fraction for every rule scored (``cars``, ``shared``, ``dual``, then each
        registered selector by its name: ``sure``, ``anisotropic``, ``cv``, ...).
    regret : mean regret per rule (the same keys).
    reduction : 1 - CARS regret / better fixed rule's regret; ``None`` when the better fixed rule
        has zero regret (nothing to reduce: the quotient is undefined).
    fold_wins : folds where CARS beat both fixed rules strictly.
    folds, per_size : per-fold and per-size figures.
    cells : every (fold, size) cell (losses, scores, choices).
    rank, n, n_folds, n_splits, selector_dim, centred, seed : the protocol used.
    rules : the registered selectors scored (CARS first).
    """

    cars_accuracy: float
    regret: dict[str, float]
    reduction: float | None
    accuracy: dict[str, float]
    fold_wins: int
    folds: list[dict[str, Any]]
    per_size: list[dict[str, Any]]
    cells: list[dict[str, Any]] = field(repr=False)
    rank: int
    n: int
    n_folds: int
    n_splits: int
    selector_dim: int | None
    centred: bool
    seed: int
    rules: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "cars_accuracy": self.cars_accuracy,
            "accuracy": dict(self.accuracy),
            "regret": dict(self.regret),
            "reduction": self.reduction,
            "fold_wins": self.fold_wins,
            "folds": self.folds,
            "per_size": self.per_size,
            "rank": self.rank,
            "n": self.n,
            "n_folds": self.n_folds,
            "n_splits": self.n_splits,
            "selector_dim": self.selector_dim,
            "centred": self.centred,
            "seed": self.seed,
            "rules": list(self.rules),
        }


def fixed_projection(p: int, selector_dim: int | None, seed: int) -> np.ndarray | None:
    """The fixed selector projection of a validation run: ``selector_projection(p, dim)``
    from ``SeedSequence(seed, spawn_key=(1_000_000,))``; None when ``selector_dim`` is None
    or >= p (identity)."""
    if selector_dim is None:
        return None
    dim = check_rank(selector_dim, 10**12, "selector_dim")
    if dim >= p:
        return None
    return selector_projection(p, dim, _derived_seed(seed, 1_000_000))


def validate_selection(
    X: np.ndarray,
    Y_pos: np.ndarray,
    Y_neg: np.ndarray,
    rank: int,
    *,
    folds: int = 5,
    n_splits: int = 20,
    selector_dim: int | None = None,
    seed: int = 0,
    query_ids: Sequence[str] | None = None,
    sizes: Sequence[int] = NESTED_SIZES,
    centred: bool = False,
    sure: bool = True,
    n_jobs: int | None = None,
    progress: bool | None = False,
    cv_folds: int = 0,
    bootstrap: int = 200,
    rules: Sequence[str] | None = None,
) -> SelectionValidation:
    r"""Five-fold held-out check of the CARS geometry decision at one rank (Table 1 protocol).

    For each held-out fold and nested training size: held-out losses
    :math:`L_g = \|\widehat M_g - M_{\rm test}\|_F^2/\|M_{\rm test}\|_F^2` of both truncations,
    CARS (eq. 7) and SURE (eq. 4, plug-in :math:`\sigma`) choices from the training prefix,
    and the regret :math:`L_{\hat g} - \min(L_s, L_d)` of CARS, always-shared, always-dual
    and SURE.

    Parameters
    ----------
    X, Y_pos, Y_neg : (n, p) labelled triples, one per query (the pool that the decision uses).
    rank : fitted rank r.
    folds : number of held-out folds (paper: 5).
    n_splits : CARS half-splits L (paper: 20).
    selector_dim : fixed random selector projection dimension (paper: 256), or None.
    seed : base seed of the CARS splits and the projection.
    query_ids : ids of the rows (fold assignment sorts and permutes them with seed 20260923);
        default the row numbers, zero-padded.
    sizes : nested training sizes (sizes above the pool are dropped; the full pool is added
        when it has at most ``max(sizes)`` queries).
    centred : centre queries and ``Y_pos - Y_neg`` with each fold's training-pool means
        (held-out rows shifted by the same means); the rank-1 mean term is left out of both
        geometries.
    sure : also evaluate the SURE rule.
    n_jobs : threads over the (fold, size) cells (None: every usable core when p >= 256,
        else 1); every cell runs with single-threaded BLAS, so the result does not depend on it.
    progress : a tqdm bar over the (fold, size) cells (done / total, elapsed, time left); ``None``:
        only on a terminal.  When stderr is not a terminal, ``True`` writes plain lines instead
        (:class:`LineProgress`, at most every :data:`PIPED_PROGRESS_INTERVAL` seconds).
    cv_folds : when >= 2, also validate the cross-validated operator-risk selector with that
        many inner folds (regret ``"cv"``, cell keys ``cv_choice``).
    bootstrap : resamples of each held-out fold for the standard error of its ``L_s - L_d``
        (cell key ``heldout_se``; ``per_size[...]["decided"]`` counts the cells whose held-out
        winner is more than two standard errors ahead); 0 turns it off.
    rules : registered selectors to score beside CARS and the fixed rules (each decides from
        triples alone; :func:`validation_rules`); None: every rule marked ``validated_by_default``
        (CARS, SURE, anisotropic SURE, and any so registered), with ``sure`` and ``cv_folds``
        as in 0.2.0.  Every rule's accuracy and regret are keyed by its registry name.
    """
    chosen = validation_rules(rules, sure=sure, cv_folds=cv_folds)
    X = as_float_matrix(X, "X")
    Yp = as_float_matrix(Y_pos, "Y_pos")
    Yn = as_float_matrix(Y_neg, "Y_neg")
    check_same_shape({"X": X, "Y_pos": Yp, "Y_neg": Yn})
    D = Yp - Yn
    del Yp, Yn
    n, p = X.shape
    if selector_dim is not None:  # named before the rank it bounds
        selector_dim = check_rank(selector_dim, 10**12, "selector_dim")
    rank = check_rank(rank, p if selector_dim is None else min(p, int(selector_dim)))
    check_seed(seed)
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 2:
        raise ValueError(f"folds: expected an integer >= 2, got {folds!r}")
    if query_ids is None:
        width = len(str(max(n - 1, 0)))
        ids = [f"{i:0{width}d}" for i in range(n)]
    else:
        ids = [str(q) for q in query_ids]
        if len(ids) != n:
            raise ValueError(f"query_ids: expected {n} ids (one per row of X), got {len(ids)}")
    min_pool = n - -(-n // folds)
    if min_pool < MIN_CARS_TRIPLES:
        raise ValueError(
            f"X: {n} queries leave {min_pool} training queries per fold with folds = {folds}; "
            f"CARS needs at least {MIN_CARS_TRIPLES}"
        )
    row_of = {q: i for i, q in enumerate(ids)}
    fold_ids = query_folds(ids, folds, FOLD_SEED)
    projection = fixed_projection(p, selector_dim, seed)
    tasks: list[_SizeTask] = []
    for f in range(folds):
        pool, held = fold_split(fold_ids, f)
        nested = nested_subsets(pool, sizes, seed=fold_seed(f))
        order = [row_of[q] for q in nested[max(nested)]]
        test = [row_of[q] for q in held]
        Xf, Df = X, D
        if centred:
            rows = [row_of[q] for q in pool]  # the whole training pool, never held-out rows
            Xf, Df = centre(X, D, X[rows].mean(axis=0), D[rows].mean(axis=0))
        fs = [m for m in nested if m >= MIN_CARS_TRIPLES]
        logger.info("fold %d: %d training / %d held-out queries, sizes %s", f, len(order), len(test), fs)
        tasks += _fold_tasks(Xf, Df, order, test, fs, [rank], fold=f, n_splits=n_splits, seed=seed,
                             projection=projection, rules=chosen, reduce=True, cv_folds=cv_folds,
                             bootstrap=bootstrap)
    import sys

    # on a terminal a tqdm bar redraws in place; piped (a log, CI) plain lines, at most every
    # PIPED_PROGRESS_INTERVAL seconds and also while a slow cell keeps the count still
    piped = not getattr(sys.stderr, "isatty", lambda: False)()
    bar: Any
    if progress and piped:
        bar = LineProgress(len(tasks), f"validate rank {rank}", unit="cells")
    else:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(tasks), desc=f"validate rank {rank}", unit="cell", disable=False if progress else
                   (None if progress is None else True), leave=False, mininterval=0.1)
    try:
        cells = _run_tasks(tasks, _cell_workers(n_jobs, len(tasks), p), on_done=lambda _k: bar.update(1))
    finally:
        bar.close()
    s = summarise_cells(cells)
    return SelectionValidation(
        cars_accuracy=s["cars_accuracy"],
        regret=s["regret"],
        reduction=float(s["reduction"]) if np.isfinite(s["reduction"]) else None,
        accuracy=s["accuracy"],
        fold_wins=s["fold_wins"],
        folds=s["folds"],
        per_size=s["per_size"],
        cells=cells,
        rank=rank,
        n=n,
        n_folds=int(folds),
        n_splits=int(n_splits),
        selector_dim=None if selector_dim is None else int(selector_dim),
        centred=bool(centred),
        seed=int(seed),
        rules=tuple(r.name for r in chosen),
    )
