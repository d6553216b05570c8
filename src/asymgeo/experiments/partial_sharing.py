r"""Beyond the paper: partial sharing against both pure families (issue 20).

The partially shared family at rank budget ``r`` with ``s`` asymmetric directions,

.. math::
    \mathcal M_{r,s} = \{S + K :\; S \succeq 0,\ \mathrm{rank}\,S \le r - s,\ \mathrm{rank}\,K \le s\},

holds the shared family at ``s = 0`` and the dual one at ``s = r``
(:mod:`asymgeo.kernels.partial_sharing`: :func:`~asymgeo.kernels.partial_sharing.partial_truncate`
fits it, :func:`~asymgeo.kernels.partial_sharing.cross_fitted_sharing` chooses ``s``).  Two
measurements, each a grid of pure cells run by :func:`asymgeo.experiments.runner.run_sweep`:

**Held-out operator loss on the Table 1 fold design** (:func:`cell`, ``asymgeo reproduce
partial_sharing``).  One cell = (centring, dataset, encoder, fold, rank): the fold's rows of
:func:`asymgeo.experiments.real_pool.fold_design` (seeds 20260923 and 20260924 + fold), raw or
centred with the fold's training-pool means (as Table 1 and ``validate_selection`` centre).  For
each nested training size ``m`` (the prefix :math:`I_m` of the fold's nested order),
:math:`\widehat C_m = \frac1m\sum_{i\in I_m} x_i d_i^\top` and every ``s`` of
:func:`~asymgeo.kernels.partial_sharing.sharing_grid` (r):

.. math:: L_s = \frac{\|\widehat M_{r,s}(\widehat C_m) - M_{\rm test}\|_F^2}{\|M_{\rm test}\|_F^2},
    \qquad M_{\rm test} = \frac1{|T|}\sum_{i\in T} x_i d_i^\top,

Table 1's normalised loss (``L_0 = L_s``, ``L_r = L_d`` of Table 1).  The cross-fitted ``s``
is chosen from the prefix alone: five folds *inside* :math:`I_m` (the seed Table 1's CARS and
the selectors' ``cv`` rule use at that (fold, size)), the smallest ``s`` within one standard
error of the best mean inner held-out loss; the held-out fold's rows are never read for it.

**Retrieval through the augmented closed form** (:func:`retrieval_cell`, ``asymgeo reproduce
partial_sharing_retrieval``).  One cell = (dataset, encoder): on the adaptation split's
training triples (``fit``'s, :func:`asymgeo.adapters.workflow.load_adaptation_data`), the
closed-form operators :math:`M_g` of shared (s = 0), dual (s = r) and partial (the cross-fitted
``s``, from the training triples only), each deployed as

.. math:: \mathcal A_g(c) = I + c\,\frac{M_g}{\|M_g\|_2},

``c`` chosen on the validation queries (``fit``'s document-disjoint selection by default) by
NDCG@10 of exact full-corpus search, ties to the smaller ``c`` (the closed-form baseline's rule,
:mod:`asymgeo.adapters.baseline`).  Test NDCG@10 by exact search (trec_eval tie order) for each,
and the paired bootstrap 95% interval of partial minus the better pure family on test
(:func:`asymgeo.retrieval.compare.paired_comparison`).  No test query fits ``M``, ``s`` or ``c``.

:func:`summarise`, :func:`retrieval_table` and :func:`report_section` build the evidence page's
"Partial sharing against both families" section, from the runs or from the committed tables
``docs/results/partial_sharing_cells.csv`` and ``docs/results/partial_sharing_retrieval.csv``
(:func:`section_from_committed`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import as_float_matrix, check_same_shape
from ..estimators.validation import _derived_seed
from ..kernels.operator_risk import centre, heldout_loss, prefix_moments
from ..kernels.partial_sharing import cross_fitted_sharing, partial_truncate, sharing_grid
from .real_pool import CENTRINGS, FoldDesign, fold_design, pool_triples
from .runner import cell_seed

__all__ = ["parse_sizes", "fold_losses", "cell", "explode", "summarise", "operator_scales", "augmented_retrieval",
           "retrieval_cell", "retrieval_table", "report_section", "section_from_committed", "read_table",
           "decisions", "versions_of", "save_runs", "read_runs", "CELL_COLUMNS", "RETRIEVAL_COLUMNS", "RUN_COLUMNS",
           "TITLE"]

_KEYS = ["centring", "dataset", "encoder", "fold", "rank"]
#: The per-(fold, size, s) table (``docs/results/partial_sharing_cells.csv``).
CELL_COLUMNS = (*_KEYS, "size", "full", "asymmetric", "loss", "train_loss", "cv_mean", "cv_se", "cv_choice", "cv_best",
                "cv_seed", "cv_folds", "restarts", "max_iter")
_SETTINGS = {"cv_folds": 5, "restarts": 0, "max_iter": 200}
_ENTRY_COLUMNS = ("size", "asymmetric", "loss", "train_loss", "cv_mean", "cv_se", "cv_choice", "cv_best", "cv_seed")
#: The per-(dataset, encoder) retrieval table (``docs/results/partial_sharing_retrieval.csv``).
RETRIEVAL_COLUMNS = ("dataset", "encoder", "rank", "asymmetric", "selection", "n_boot", "seed", "n_train",
                     "n_validation", "n_test",
                     "c_shared", "c_dual", "c_partial", "validation_shared", "validation_dual", "validation_partial",
                     "test_shared", "test_dual", "test_partial", "better", "diff_better", "ci_low_better",
                     "ci_high_better", "diff_shared", "ci_low_shared", "ci_high_shared", "diff_dual", "ci_low_dual",
                     "ci_high_dual")
#: The grid of ``c`` (the closed-form baseline's ``DEFAULT_SCALES``; ``c = 0`` is the frozen model).
SCALES: tuple[float, ...] = (0.0, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0)


# --------------------------------------------------------------------------- held-out operator loss
def parse_sizes(spec: str | Sequence[int | str], design_sizes: Sequence[int]) -> list[int]:
    """Training sizes of one fold from ``"256,full"``-style specs: integers that must be nested
    sizes of the design, and ``full`` for its largest (the whole training pool when it has at most
    4096 queries).  Sizes the pool does not reach are dropped (SciFact's pool has no 1024)."""
    items = [v.strip() for v in spec.split(",")] if isinstance(spec, str) else [str(v) for v in spec]
    available = sorted(int(m) for m in design_sizes)
    out: set[int] = set()
    for item in items:
        if item == "full":
            out.add(available[-1])
            continue
        try:
            m = int(item)
        except ValueError:
            raise ValueError(f"sizes: expected integers or 'full', got {item!r}") from None
        if m > available[-1]:
            continue
        if m not in available:
            raise ValueError(f"sizes: {m} is not a nested size of the fold design ({available})")
        out.add(m)
    if not out:
        raise ValueError(f"sizes: none of {items} is a nested size of the fold design ({available})")
    return sorted(out)


def fold_losses(
    X: np.ndarray,
    D: np.ndarray,
    design: FoldDesign,
    rank: int,
    *,
    centring: str = "raw",
    sizes: Sequence[int] | None = None,
    points: int = 5,
    cv_folds: int = 5,
    seed: int = 0,
    restarts: int = 0,
    max_iter: int = 200,
) -> dict[str, Any]:
    r"""Held-out losses of every ``s`` and the cross-fitted ``s`` for one fold of the design.

    Centring (``"centred"``): :math:`x_i - \bar x`, :math:`d_i - \bar d` with the means of the
    fold's training pool (``design.pool_rows``), held-out rows shifted by the same means.  For
    each ``m`` in ``sizes``: :math:`\widehat C_m` of the first ``m`` rows of ``design.train_order``,
    :math:`L_s` against the held-out moment for every ``s`` of ``sharing_grid(rank, points)``,
    the training loss :math:`\|\widehat M_{r,s} - \widehat C_m\|_F^2/\|\widehat C_m\|_F^2`, and
    :func:`~asymgeo.kernels.partial_sharing.cross_fitted_sharing` on those ``m`` rows only
    (``min(cv_folds, m)`` inner folds, seed ``_derived_seed(seed, fold, m)``).

    Parameters
    ----------
    X, D : (n, p) the pool's queries and ``Y_pos - Y_neg``, rows indexed by ``design``.
    design : the fold (:func:`asymgeo.experiments.real_pool.fold_design`).
    rank : r.
    centring : ``"raw"`` or ``"centred"``.
    sizes : nested sizes of the design (default: all of them).
    points : grid points of ``s`` (:func:`~asymgeo.kernels.partial_sharing.sharing_grid`).
    cv_folds : inner folds of the cross-fitted choice.
    seed : base seed of the inner folds.
    restarts, max_iter : random starts and L-BFGS iterations of every interior fit
        (:func:`~asymgeo.kernels.partial_sharing.partial_truncate`).

    Returns
    -------
    dict of equal-length lists, one entry per (size, s): ``size, asymmetric, loss, train_loss,
    cv_mean, cv_se`` (the inner mean loss and its standard error at that ``s``), ``cv_choice,
    cv_best`` (the size's cross-fitted ``s`` and the inner argmin), ``cv_seed``.
    """
    X = as_float_matrix(X, "X")
    D = as_float_matrix(D, "D")
    check_same_shape({"X": X, "D": D})
    if centring not in CENTRINGS:
        raise ValueError(f"centring: expected one of {CENTRINGS}, got {centring!r}")
    if centring == "centred":
        pool = design.pool_rows
        X, D = centre(X, D, X[pool].mean(axis=0), D[pool].mean(axis=0))
    train, test = design.train_order, design.test_rows
    wanted = sorted({int(m) for m in (design.sizes if sizes is None else sizes)})
    bad = [m for m in wanted if m not in design.sizes]
    if bad:
        raise ValueError(f"sizes: {bad} are not nested sizes of the fold design {list(design.sizes)}")
    Xtr, Dtr = X[train], D[train]
    M_test = X[test].T @ D[test] / test.size
    moments = prefix_moments(Xtr, Dtr, wanted)
    grid = sharing_grid(int(rank), int(points))
    out: dict[str, list[Any]] = {k: [] for k in _ENTRY_COLUMNS}
    for m in wanted:
        C = moments[m]
        c2 = float(np.sum(C * C))
        cv_seed = _derived_seed(int(seed), int(design.fold), int(m))
        cv = cross_fitted_sharing(Xtr[:m], Dtr[:m], int(rank), grid=grid, folds=min(int(cv_folds), m), seed=cv_seed,
                                  max_iter=int(max_iter), restarts=int(restarts))
        for j, s in enumerate(grid):
            fit = partial_truncate(C, int(rank), s, restarts=int(restarts), max_iter=int(max_iter))
            for key, value in (("size", int(m)), ("asymmetric", int(s)), ("loss", heldout_loss(fit.operator, M_test)),
                               ("train_loss", fit.loss / c2 if c2 > 0 else float("nan")),
                               ("cv_mean", float(cv.mean[j])), ("cv_se", float(cv.standard_error[j])),
                               ("cv_choice", int(cv.asymmetric)), ("cv_best", int(cv.best)), ("cv_seed", int(cv_seed))):
                out[key].append(value)
    return out


def cell(config: dict[str, Any]) -> dict[str, Any]:
    """One (centring, dataset, encoder, fold, rank) column of the held-out loss grid.  Config keys:
    ``centring, dataset, encoder, fold, rank, sizes`` (e.g. ``"256,full"``, :func:`parse_sizes`),
    ``folds, cv_folds, points, restarts, max_iter, data_dir, cache_dir, pool, master_seed`` (Table
    1's: the inner folds use the seed its CARS uses at each (fold, size))."""
    t0 = time.process_time()
    pool = pool_triples(str(config["dataset"]), str(config["encoder"]), config.get("data_dir") or None,
                        config.get("cache_dir") or None, str(config.get("pool", "train")))
    fold, rank = int(config["fold"]), int(config["rank"])
    design = fold_design(pool.ids, fold, int(config.get("folds", 5)))
    sizes = parse_sizes(str(config.get("sizes", "full")), design.sizes)
    out = fold_losses(pool.X, pool.D, design, rank, centring=str(config["centring"]), sizes=sizes,
                      points=int(config.get("points", 5)), cv_folds=int(config.get("cv_folds", 5)),
                      seed=cell_seed(int(config["master_seed"]), 1), restarts=int(config.get("restarts", 0)),
                      max_iter=int(config.get("max_iter", 200)))
    return {**out, "p": pool.p, "n_train": int(design.train_order.size), "n_test": int(design.test_rows.size),
            "cpu_seconds": time.process_time() - t0}


def explode(df):
    """One row per (centring, dataset, encoder, fold, rank, size, s) from the results table
    (:data:`CELL_COLUMNS`; ``full``: the size is the fold's whole training pool)."""
    import pandas as pd

    rows = []
    for r in df.itertuples(index=False):
        base = {key: getattr(r, key) for key in _KEYS}
        base.update({key: int(getattr(r, key, default)) for key, default in _SETTINGS.items()})
        cols = {key: list(getattr(r, key)) for key in _ENTRY_COLUMNS}
        n_train = getattr(r, "n_train", None)
        for j in range(len(cols["size"])):
            entry = {key: cols[key][j] for key in _ENTRY_COLUMNS}
            entry["full"] = bool(n_train is not None and int(cols["size"][j]) == int(n_train))
            rows.append({**base, **entry})
    return pd.DataFrame(rows, columns=list(CELL_COLUMNS))


def _size_label(size: int, full: bool) -> str:
    return "full" if full else str(int(size))


def summarise(cells):
    r"""Per (centring, dataset, encoder, rank, training size): the size is a nested size or
    ``"full"`` (each fold's whole training pool, whose size differs by one between folds).
    Over the folds' cells: mean held-out loss of shared (s = 0), dual (s = r), every interior
    ``s`` (``interior``, ``"s:loss;..."``), the best fixed interior ``s`` (an oracle: chosen by
    these held-out means, for scale) and the cross-fitted ``s``; ``gain_cv`` the mean of
    :math:`\min(L_0, L_r) - L_{\hat s}` per cell (positive: below the better pure family of the
    cell); strict fold wins (the fold's loss below both families'); how often each ``s`` was
    chosen.  Sizes are never pooled: the better family changes with n (shared at 256, dual on
    NFCorpus's full pool), so a pooled mean would credit the cross-fitted s with choosing between
    the families rather than with beating them."""
    import pandas as pd

    cells = cells.copy()
    for col in ("fold", "rank", "size", "asymmetric", "cv_choice"):
        cells[col] = cells[col].astype(int)
    full = cells["full"].astype(str).str.lower().isin(("true", "1")) if "full" in cells else False
    cells["size_label"] = [_size_label(m, f) for m, f in zip(cells["size"], np.broadcast_to(full, len(cells)))]
    rows = []
    for key, g in cells.groupby(["centring", "dataset", "encoder", "rank", "size_label"], sort=True):
        r = int(key[3])
        wide = g.pivot_table(index="fold", columns="asymmetric", values="loss", aggfunc="first")
        if 0 not in wide.columns or r not in wide.columns:
            raise ValueError(f"cells: {dict(zip(('centring', 'dataset', 'encoder', 'rank', 'size'), key, strict=True))}"
                             f" lack s = 0 or s = {r}")
        wide = wide.dropna()
        chosen = g.groupby("fold")["cv_choice"].first().loc[wide.index]
        cv = pd.Series([wide.loc[f, int(chosen.loc[f])] for f in wide.index], index=wide.index)
        better = wide[[0, r]].min(axis=1)
        interior = [int(s) for s in wide.columns if 0 < int(s) < r]
        means = {int(s): float(wide[s].mean()) for s in wide.columns}
        best_s = min(interior, key=lambda s: means[s]) if interior else None
        row: dict[str, Any] = dict(zip(("centring", "dataset", "encoder", "rank", "size"), key, strict=True))
        row.update({
            "sizes": ";".join(str(int(m)) for m in sorted(g["size"].unique())), "folds": int(wide.shape[0]),
            "loss_shared": means[0], "loss_dual": means[r],
            "interior": ";".join(f"{s}:{means[s]:.6g}" for s in interior),
            "best_fixed": best_s if best_s is not None else -1,
            "loss_best_fixed": means[best_s] if best_s is not None else float("nan"),
            "loss_cv": float(cv.mean()), "gain_cv": float((better - cv).mean()),
            "gain_best_fixed": float((better - wide[best_s]).mean()) if best_s is not None else float("nan"),
            "fold_wins_cv": int((cv < better).sum()),
            "fold_wins_best_fixed": int((wide[best_s] < better).sum()) if best_s is not None else 0,
            "cv_interior": int(((chosen > 0) & (chosen < r)).sum()),
            "cv_choices": ";".join(f"{s}:{int(n)}" for s, n in sorted(chosen.value_counts().items())),
        })
        row["cv_beats_both"] = bool(row["loss_cv"] < min(row["loss_shared"], row["loss_dual"]))
        rows.append(row)
    out = pd.DataFrame(rows)
    if len(out):  # nested sizes ascending, then the full pool
        order = out["size"].map(lambda v: (v == "full", int(v) if v != "full" else 0))
        out = out.assign(_o=order).sort_values(["centring", "dataset", "encoder", "rank", "_o"]).drop(columns="_o")
    return out.reset_index(drop=True)


# --------------------------------------------------------------------------- retrieval, augmented closed form
def _per_query_ndcg(queries: np.ndarray, table: Any, corpus: np.ndarray, operator: np.ndarray | None,
                    corpus_ids: Sequence[str] | None, k: int = 10) -> np.ndarray:
    """Per-query binary NDCG@k (Appendix F) by exact full-corpus search through ``operator``;
    exact ties in trec_eval's order when ``corpus_ids`` is given, else by lower corpus row."""
    from ..retrieval.metrics import evaluate_indices
    from ..retrieval.search import exact_search, search_trec_order

    depth = min(k, corpus.shape[0])
    if corpus_ids is not None:
        idx = search_trec_order(queries, corpus, depth, list(corpus_ids), operator=operator).indices
    else:
        idx = exact_search(queries, corpus, depth, operator=operator, progress=None).indices
    return evaluate_indices(idx, table, [f"ndcg@{k}"]).per_query[f"ndcg@{k}"]


def operator_scales(M: np.ndarray, queries: np.ndarray, table: Any, corpus: np.ndarray, *,
                    scales: Sequence[float] = SCALES, corpus_ids: Sequence[str] | None = None,
                    k: int = 10) -> tuple[float, dict[float, float]]:
    r"""The ``c`` of :math:`I + c\,M/\|M\|_2` with the highest mean NDCG@k on ``queries`` (ties:
    the smaller ``c``; ``c = 0``, or ``M = 0``, is the frozen model) and every grid value's mean."""
    p = M.shape[0]
    norm = float(np.linalg.norm(M, 2))
    scores: dict[float, float] = {}
    for c in sorted(float(v) for v in scales):
        op = None if c == 0.0 or norm == 0.0 else np.eye(p) + (c / norm) * M
        scores[c] = float(_per_query_ndcg(queries, table, corpus, op, corpus_ids, k).mean())
    best = max(scores, key=lambda c: (scores[c], -c))
    return best, scores


def augmented_retrieval(
    X: np.ndarray,
    D: np.ndarray,
    validation_queries: np.ndarray,
    validation_table: Any,
    test_queries: np.ndarray,
    test_table: Any,
    corpus: np.ndarray,
    rank: int,
    *,
    corpus_ids: Sequence[str] | None = None,
    scales: Sequence[float] = SCALES,
    points: int = 5,
    cv_folds: int = 5,
    seed: int = 0,
    restarts: int = 0,
    max_iter: int = 200,
    final_restarts: int = 4,
    final_max_iter: int = 2000,
    n_boot: int = 10_000,
    k: int = 10,
) -> dict[str, Any]:
    r"""Shared, dual and cross-fitted partial closed forms through :math:`I + c\,M/\|M\|_2`.

    ``s`` comes from :func:`~asymgeo.kernels.partial_sharing.cross_fitted_sharing` on ``(X, D)``
    (``cv_folds`` folds, ``seed``, ``restarts`` / ``max_iter`` per fit); the three operators are
    :func:`~asymgeo.kernels.partial_sharing.partial_truncate` of :math:`\widehat C = X^\top D/n`
    at s = 0, r and the chosen ``s`` (``final_restarts`` / ``final_max_iter``); each one's ``c``
    maximises validation NDCG@k (:func:`operator_scales`).  Only then are the test queries
    searched: per-query test NDCG@k of each, and paired bootstrap intervals (``n_boot``, seed
    ``seed``) of partial minus shared, minus dual, and minus the better of the two on test.

    Parameters
    ----------
    X, D : (n, p) training queries and ``Y_pos - Y_neg``.
    validation_queries, validation_table : the queries that choose ``c`` and their judgements.
    test_queries, test_table : the queries scored at the end.
    corpus : (N, p) documents searched; ``corpus_ids``: their ids (trec_eval tie order).
    rank : r.

    Returns
    -------
    dict: the scalar columns of :data:`RETRIEVAL_COLUMNS` (less dataset and encoder),
    ``cv_grid``, ``cv_mean``, ``cv_se``, ``cv_best``, the per-query test NDCG lists
    ``per_query_{shared,dual,partial}`` and each family's validation means over the ``c`` grid.
    """
    from ..retrieval.compare import paired_comparison

    X = as_float_matrix(X, "X")
    D = as_float_matrix(D, "D")
    check_same_shape({"X": X, "D": D})
    r = int(rank)
    grid = sharing_grid(r, int(points))
    choice = cross_fitted_sharing(X, D, r, grid=grid, folds=min(int(cv_folds), X.shape[0]), seed=int(seed),
                                  max_iter=int(max_iter), restarts=int(restarts))
    C = X.T @ D / X.shape[0]
    s_of = {"shared": 0, "dual": r, "partial": int(choice.asymmetric)}
    ops = {g: partial_truncate(C, r, s, restarts=int(final_restarts), max_iter=int(final_max_iter)).operator
           for g, s in s_of.items()}
    out: dict[str, Any] = {"rank": r, "asymmetric": s_of["partial"], "n_train": int(X.shape[0]),
                           "cv_grid": list(grid), "cv_mean": [float(v) for v in choice.mean],
                           "cv_se": [float(v) for v in choice.standard_error], "cv_best": int(choice.best)}
    chosen: dict[str, float] = {}
    for g, M in ops.items():  # c from the validation queries alone
        c, scores = operator_scales(M, validation_queries, validation_table, corpus, scales=scales,
                                    corpus_ids=corpus_ids, k=k)
        chosen[g] = c
        out[f"c_{g}"] = c
        out[f"validation_{g}"] = scores[c]
        out[f"validation_grid_{g}"] = [scores[v] for v in sorted(scores)]
    p = C.shape[0]
    per = {}
    for g, M in ops.items():  # then, once, the test queries
        norm = float(np.linalg.norm(M, 2))
        op = None if chosen[g] == 0.0 or norm == 0.0 else np.eye(p) + (chosen[g] / norm) * M
        per[g] = _per_query_ndcg(test_queries, test_table, corpus, op, corpus_ids, k)
        out[f"test_{g}"] = float(per[g].mean())
        out[f"per_query_{g}"] = [float(v) for v in per[g]]
    out["n_validation"] = int(len(validation_table))
    out["n_test"] = int(per["shared"].size)
    better = "shared" if out["test_shared"] >= out["test_dual"] else "dual"
    out["better"] = better
    for name, ref in (("shared", "shared"), ("dual", "dual"), ("better", better)):
        cmp = paired_comparison(per["partial"], per[ref], n_boot=int(n_boot), seed=int(seed))
        out[f"diff_{name}"], out[f"ci_low_{name}"], out[f"ci_high_{name}"] = cmp.mean_diff, cmp.ci_low, cmp.ci_high
    return out


def retrieval_cell(config: dict[str, Any]) -> dict[str, Any]:
    """One (dataset, encoder) retrieval cell.  Config keys: ``dataset, encoder, rank, selection``
    (``"document_disjoint"``, ``fit``'s default, or ``"all"``), ``points, cv_folds, restarts,
    max_iter, final_restarts, final_max_iter, n_boot, data_dir, cache_dir, master_seed``.

    The adaptation split's training triples fit ``M`` and choose ``s``; its validation queries
    choose ``c``; its test queries are only scored.  The three query sets are checked disjoint."""
    from ..adapters.workflow import document_disjoint_validation, load_adaptation_data

    t0 = time.process_time()
    d = load_adaptation_data(str(config["dataset"]), str(config["encoder"]), data_dir=config.get("data_dir") or None,
                             cache_dir=config.get("cache_dir") or None)
    tr = d.triples
    selection = str(config.get("selection", "document_disjoint"))
    if selection == "document_disjoint":
        V, vtable, note = document_disjoint_validation(d, tr.query_ids)
    elif selection == "all":
        V, vtable, note = d.V, d.validation, ""
    else:
        raise ValueError(f"selection: expected 'document_disjoint' or 'all', got {selection!r}")
    train_ids, val_ids, test_ids = set(tr.query_ids), set(vtable.query_ids), set(d.test.query_ids)
    if train_ids & test_ids or val_ids & test_ids or train_ids & val_ids:
        raise ValueError(f"{d.dataset}: the adaptation split's training, validation and test queries overlap")
    X = np.asarray(tr.X, dtype=np.float64)
    D = np.asarray(tr.Y_pos, dtype=np.float64) - np.asarray(tr.Y_neg, dtype=np.float64)
    master = int(config["master_seed"])
    out = augmented_retrieval(X, D, V, vtable, d.T, d.test, d.corpus, int(config["rank"]),
                              corpus_ids=d.corpus_ids or None, points=int(config.get("points", 5)),
                              cv_folds=int(config.get("cv_folds", 5)), seed=cell_seed(master, 2),
                              restarts=int(config.get("restarts", 0)), max_iter=int(config.get("max_iter", 200)),
                              final_restarts=int(config.get("final_restarts", 4)),
                              final_max_iter=int(config.get("final_max_iter", 2000)),
                              n_boot=int(config.get("n_boot", 10_000)))
    return {**out, "selection_note": note, "p": int(X.shape[1]), "n_corpus": int(d.corpus.shape[0]),
            "seed": cell_seed(master, 2), "cpu_seconds": time.process_time() - t0}


def retrieval_table(df):
    """The :data:`RETRIEVAL_COLUMNS` of the retrieval results table, sorted by dataset, encoder."""
    return df[list(RETRIEVAL_COLUMNS)].sort_values(["dataset", "encoder", "rank"]).reset_index(drop=True)


# --------------------------------------------------------------------------- the evidence page section
def decisions(summary, retrieval) -> list[dict[str, Any]]:
    """Per dataset x encoder (at the retrieval cell's rank): does cross-fitted partial beat both
    families in held-out loss (raw, at some training size: its mean below both families' means
    and strict fold wins in a majority of folds) and in retrieval (the 95% interval of partial
    minus the better family above zero)?  ``earns`` when both hold; ``fit --geometry partial``
    needs one such pair.  ``sizes``: the sizes where the loss criterion holds."""
    out = []
    for r in retrieval.to_dict("records"):
        sub = summary[(summary["dataset"] == r["dataset"]) & (summary["encoder"] == r["encoder"])
                      & (summary["centring"] == "raw") & (summary["rank"].astype(int) == int(r["rank"]))]
        wins = [str(s["size"]) for s in sub.to_dict("records")
                if bool(s["cv_beats_both"]) and 2 * int(s["fold_wins_cv"]) > int(s["folds"])]
        loss_ok: bool | None = bool(wins) if len(sub) else None
        retrieval_ok = bool(float(r["ci_low_better"]) > 0)
        out.append({"dataset": r["dataset"], "encoder": r["encoder"], "rank": int(r["rank"]), "loss": loss_ok,
                    "sizes": wins, "retrieval": retrieval_ok, "earns": bool(loss_ok and retrieval_ok)})
    return out


def _f(x: Any, digits: int = 4) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    return f"{v:.{digits}f}" if np.isfinite(v) else "–"


def _interval(r: dict[str, Any], name: str = "better") -> str:
    return (f"{float(r[f'diff_{name}']):+.4f} [{float(r[f'ci_low_{name}']):+.4f}, "
            f"{float(r[f'ci_high_{name}']):+.4f}]")


def _settings(cells) -> str:
    """The fits' settings, from the cells' recorded config (one line)."""
    parts = []
    for key, label in (("cv_folds", "inner folds"), ("restarts", "random restarts per fit"),
                       ("max_iter", "L-BFGS iterations per start")):
        values = sorted({int(v) for v in cells[key]}) if key in cells else []
        parts.append(f"{label} {', '.join(map(str, values)) or '–'}")
    return "; ".join(parts)


def _loss_part(cells, summary) -> tuple[list[str], list[list[str]]]:
    """The held-out loss table (one row per training size) and its claim rows."""
    from ._markdown import md_table, verdict

    rows, claims = [], []
    for r in summary.itertuples():
        interior = " / ".join(f"{s.split(':')[0]}: {_f(s.split(':')[1])}" for s in str(r.interior).split(";") if s)
        chosen = ", ".join(f"{c.split(':')[0]} x{c.split(':')[1]}" for c in str(r.cv_choices).split(";") if c)
        size = f"full ({str(r.sizes).replace(';', '/')})" if r.size == "full" else str(r.size)
        rows.append([r.dataset, r.encoder, r.centring, int(r.rank), size, int(r.folds), _f(r.loss_shared),
                     _f(r.loss_dual), interior,
                     f"{_f(r.loss_best_fixed)} (s = {int(r.best_fixed)})" if int(r.best_fixed) >= 0 else "–",
                     f"{_f(r.loss_cv)} (s = {chosen})", f"{float(r.gain_cv):+.4f}",
                     f"{int(r.fold_wins_cv)}/{int(r.folds)}", f"{int(r.fold_wins_best_fixed)}/{int(r.folds)}"])
        claims.append([f"Beyond: cross-fitted partial sharing below both families' held-out loss ({r.dataset} / "
                       f"{r.encoder}, {r.centring}, r = {int(r.rank)}, n = {size})", "issue 20",
                       f"{_f(r.loss_cv)} vs shared {_f(r.loss_shared)}, dual {_f(r.loss_dual)}; fold wins "
                       f"{int(r.fold_wins_cv)}/{int(r.folds)}",
                       verdict(bool(r.cv_beats_both) and 2 * int(r.fold_wins_cv) > int(r.folds))])
    head = ["dataset", "encoder", "centring", "rank", "n", "folds", "shared (s = 0)", "dual (s = r)",
            "interior s: loss", "best fixed interior s (oracle)", "cross-fitted s (choices)",
            "cross-fitted: better family − it, per cell", "folds: cross-fitted beats both",
            "folds: best fixed s beats both"]
    text = [
        "The family M_{r,s} = {S + K : S PSD of rank <= r - s, rank K <= s} (s = 0 shared, s = r dual; "
        "`asymgeo.kernels.partial_sharing`, docs/selectors.md). Held-out operator loss on Table 1's fold design: "
        "for each fold, nested training size n and rank, Table 1's normalised loss ||M_{r,s} - M_test||_F^2 / "
        "||M_test||_F^2 (lower is better; 1 is the zero operator's) of every s on the grid, and of the s "
        "cross-fitted inside the training prefix (inner folds of the prefix, the smallest s within one standard "
        "error of the best inner loss; the held-out fold is never read). Centred: queries and Y+ - Y- centred "
        "with each fold's training-pool means. Means over the folds; n = full is each fold's whole training "
        "pool. A fold win needs the cross-fitted (or best fixed) loss below both families' losses in that fold; "
        "sizes are not pooled (the better family changes with n, and a pooled mean would credit the cross-fitted "
        "s with choosing between the families, not with beating them). The best fixed interior s is chosen by "
        "these held-out means (an oracle, for scale). Built by `asymgeo.experiments.partial_sharing` "
        f"({_settings(cells)}; the three closed-form starts of `partial_truncate`).",
        "",
        md_table(head, rows),
        "",
    ]
    return text, claims


def _retrieval_part(summary, retrieval, suffix: str) -> tuple[list[str], list[list[str]]]:
    """The retrieval table, the `fit --geometry partial` decision and their claim rows."""
    from ._markdown import interval_holds, md_table, verdict

    if retrieval is None:
        return ["Retrieval through the augmented closed form: not run (`asymgeo reproduce partial_sharing_retrieval"
                f"{' --quick' if suffix else ''}`).", ""], []
    rows, claims = [], []
    recs = retrieval.sort_values(["dataset", "encoder", "rank"]).to_dict("records")
    for r in recs:
        rows.append([r["dataset"], r["encoder"], int(r["rank"]), int(r["asymmetric"]),
                     f"{_f(r['c_shared'], 3)} / {_f(r['c_dual'], 3)} / {_f(r['c_partial'], 3)}",
                     _f(r["test_shared"]), _f(r["test_dual"]), _f(r["test_partial"]), r["better"], _interval(r),
                     _interval(r, "shared"), _interval(r, "dual"), f"{int(r['n_validation'])} ({r['selection']})",
                     int(r["n_test"])])
        claims.append([f"Beyond: partial sharing's closed form retrieves better than the better pure family "
                       f"({r['dataset']} / {r['encoder']}, r = {int(r['rank'])}, test NDCG@10)", "issue 20",
                       f"{_interval(r)} vs {r['better']}",
                       verdict(interval_holds(float(r["ci_low_better"]), float(r["ci_high_better"])))])
    dec = decisions(summary, retrieval)
    def loss_word(d: dict[str, Any]) -> str:
        if d["loss"] is None:
            return "not run"
        return f"beats both at n = {', '.join(d['sizes'])}" if d["loss"] else "beats both at no size"

    lines = [f"- {d['dataset']} / {d['encoder']} (r = {d['rank']}): held-out loss {loss_word(d)}; "
             f"retrieval {'beats the better family' if d['retrieval'] else 'interval not above zero'}"
             for d in dec]
    earned = ", ".join(f"{d['dataset']} / {d['encoder']}" for d in dec if d["earns"])
    boots = ", ".join(f"{v:,}" for v in sorted({int(v) for v in retrieval["n_boot"]}))
    text = [
        "Retrieval through the augmented closed form I + c M/||M||_2 (`fit`'s adaptation split): M fitted on the "
        "training triples (partial: the s cross-fitted on those triples alone), c chosen on the validation "
        "queries (`fit`'s selection) by NDCG@10 of exact full-corpus search (ties to the smaller c; c = 0 is the "
        "frozen model), then test NDCG@10 by exact search. Differences are partial minus a family on the test "
        f"queries, paired bootstrap 95% intervals ({boots} resamples); the better family is the one with the "
        "higher test NDCG@10. A cross-fitted s of 0 or r is that family itself (difference 0).",
        "",
        md_table(["dataset", "encoder", "rank", "cross-fitted s", "c shared / dual / partial", "test shared",
                  "test dual", "test partial", "better family", "partial − better [95% CI]",
                  "partial − shared", "partial − dual", "validation queries", "test queries"], rows),
        "",
        "`fit --geometry partial` is offered only if partial sharing beats both families in held-out loss (raw, "
        "at some training size: cross-fitted mean below both, fold wins in a majority of folds) and in retrieval "
        "(interval above zero) on at least one dataset x encoder:",
        "",
        *lines,
        "",
        f"Verdict: {'earned on ' + earned if earned else 'not earned; `fit --geometry partial` is not offered'}.",
        "",
    ]
    return text, claims


def report_section(cells, retrieval, out_dir: str | Path | None = None,
                   suffix: str = "") -> tuple[str, list[list[str]]]:
    """The evidence page's "Partial sharing against both families" section and its claim rows.

    ``cells``: the :data:`CELL_COLUMNS` table (:func:`explode`); ``retrieval``: the
    :data:`RETRIEVAL_COLUMNS` table (:func:`retrieval_table`), or None when that run is absent.
    With ``out_dir``, writes ``partial_sharing_cells{suffix}.csv``, ``partial_sharing_summary{suffix}.csv``
    and (with ``retrieval``) ``partial_sharing_retrieval{suffix}.csv`` there, each atomically."""
    from .._atomic import atomic_write_text

    summary = summarise(cells)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        frames = [("cells", cells[list(CELL_COLUMNS)]), ("summary", summary)]
        if retrieval is not None:
            frames.append(("retrieval", retrieval[list(RETRIEVAL_COLUMNS)]))
        for name, frame in frames:
            atomic_write_text(out / f"partial_sharing_{name}{suffix}.csv", frame.to_csv(index=False,
                                                                                       float_format="%.6g"))
    loss_text, loss_claims = _loss_part(cells, summary)
    ret_text, ret_claims = _retrieval_part(summary, retrieval, suffix)
    text = "\n".join([
        TITLE,
        "",
        *loss_text,
        *ret_text,
        f"Tables: `docs/results/partial_sharing_cells{suffix}.csv` (every fold x size x rank x s, with the inner "
        f"folds' seed `cv_seed`, Table 1's per-(fold, size) seed), `docs/results/partial_sharing_summary{suffix}.csv`, "
        f"`docs/results/partial_sharing_retrieval{suffix}.csv` (with its cross-fitting and bootstrap `seed`); "
        f"commands, wall times and package versions in `docs/results/partial_sharing_runs{suffix}.csv`. Configs: "
        "`src/asymgeo/experiments/configs/partial_sharing.toml`, `partial_sharing_retrieval.toml` (master seed "
        "20260809, Table 1's).",
        "",
    ])
    return text, loss_claims + ret_claims


#: The run-log table beside the committed tables (the evidence page's runs-table columns, then versions).
RUN_COLUMNS = ("experiment", "size", "wall time", "cell time", "machine", "commands", "versions")


def versions_of(df) -> str:
    """``"asymgeo 0.2.0.dev0, numpy 2.x, ..."``: the package versions the cells recorded."""
    cols = sorted(c for c in df.columns if c.startswith("version_"))
    return ", ".join(f"{c.removeprefix('version_')} {v}" for c in cols
                     for v in sorted({str(x) for x in df[c].dropna()}))


def save_runs(path: str | Path, rows: Sequence[Sequence[Any]]) -> None:
    """Write the run-log rows (:data:`RUN_COLUMNS`) as a CSV, atomically."""
    import csv
    import io

    from .._atomic import atomic_write_text

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(RUN_COLUMNS)
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def read_runs(path: str | Path) -> list[list[str]]:
    """The committed run-log rows, the evidence page's six columns; a damaged file raises
    ``ValueError`` in one line naming it."""
    import csv

    with open(path, newline="") as fh:
        recs = list(csv.DictReader(fh))
    if recs and any(c not in recs[0] for c in RUN_COLUMNS[:6]):
        raise ValueError(f"{path}: not a partial-sharing run log (columns {list(recs[0])}); rerun "
                         "`asymgeo reproduce partial_sharing` and rebuild the page")
    return [[rec[c] or "–" for c in RUN_COLUMNS[:6]] for rec in recs]


#: The section's heading.
TITLE = "## Beyond the paper: partial sharing against both families"
_NUMERIC = {"fold", "rank", "size", "asymmetric", "loss", "train_loss", "cv_mean", "cv_se", "cv_choice", "cv_best",
            "cv_folds", "restarts", "max_iter", "n_train", "n_validation", "n_test", "n_boot", "c_shared", "c_dual",
            "c_partial", "validation_shared", "validation_dual", "validation_partial", "test_shared", "test_dual",
            "test_partial", "diff_better", "ci_low_better", "ci_high_better", "diff_shared", "ci_low_shared",
            "ci_high_shared", "diff_dual", "ci_low_dual", "ci_high_dual"}


def read_table(path: str | Path, kind: str):
    """A committed table, ``kind`` ``"cells"`` (:data:`CELL_COLUMNS`) or ``"retrieval"``
    (:data:`RETRIEVAL_COLUMNS`), checked; a damaged one raises ``ValueError`` in one line naming
    the file and the command that rewrites it."""
    import pandas as pd

    columns = CELL_COLUMNS if kind == "cells" else RETRIEVAL_COLUMNS
    rerun = "asymgeo reproduce partial_sharing" + ("" if kind == "cells" else "_retrieval")
    try:
        df = pd.read_csv(path)
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise ValueError(f"missing column(s) {missing}")
        if df.empty:
            raise ValueError("no rows")
        for col in columns:
            if col in _NUMERIC:
                df[col] = pd.to_numeric(df[col], errors="raise")
        if kind == "cells":
            summarise(df)
    except (ValueError, KeyError, TypeError, pd.errors.ParserError) as exc:
        msg = " ".join(str(exc).split())
        raise ValueError(f"{path}: not a partial-sharing {kind} table ({msg}); rerun `{rerun}`") from None
    return df


def section_from_committed(docs: str | Path, suffix: str = "") -> tuple[str, list[list[str]]] | None:
    """The section from the committed ``docs/results/partial_sharing_cells{suffix}.csv`` (and
    ``partial_sharing_retrieval{suffix}.csv`` when present); None when the cells table is absent.
    A damaged table raises ``ValueError`` in one line naming the file (:func:`read_table`)."""
    folder = Path(docs) / "results"
    cells_csv = folder / f"partial_sharing_cells{suffix}.csv"
    if not cells_csv.is_file():
        return None
    cells = read_table(cells_csv, "cells")
    ret_csv = folder / f"partial_sharing_retrieval{suffix}.csv"
    retrieval = read_table(ret_csv, "retrieval") if ret_csv.is_file() else None
    text, claims = report_section(cells, retrieval, None, suffix)
    tables = f"`docs/results/partial_sharing_cells{suffix}.csv`" + (
        f" and `docs/results/partial_sharing_retrieval{suffix}.csv`" if retrieval is not None else "")
    text = text.replace(f"{TITLE}\n", f"{TITLE}\n\nRebuilt from the committed tables {tables} (6 significant "
                        "digits); `asymgeo reproduce partial_sharing` and `asymgeo reproduce "
                        "partial_sharing_retrieval` recompute them.\n", 1)
    return text, claims
