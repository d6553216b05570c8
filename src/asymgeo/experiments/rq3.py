r"""RQ3: query rotation and rank x training-size grids with trained adapters (Figures 5 and 6).

Paper, Section 5.3 and Appendix F.1 ("Full-corpus query rotation", "Rank-by-data
retrieval").  One cell = (dataset, encoder, angle, rank, n, seed_index); both families
(shared and dual) are trained and tested inside the cell on paired data and seeds.

Data (per dataset and encoder, the same in every cell)
    * splits from :func:`asymgeo.data.adaptation_split`: NFCorpus official
      train/dev/test; SciFact the 647/162/300 adaptation split (its whole training pool
      is 647 queries, so "n = 1024" on SciFact is the full pool of 647 — recorded as
      ``n_used`` and ``n_capped``);
    * the rotation planes (:func:`asymgeo.kernels.rotation.relevance_planes`) from the relevance
      moment and the queries of the **full training pool** only (unrotated triples of
      :func:`asymgeo.data.load_triples`); validation and test never enter;
    * the rotation :math:`R(\theta)` applies to **every** query embedding (train,
      validation and test); documents, labels and splits are never changed.

Triples under rotation
    A training triple is (query, its first labelled positive, the highest-ranked
    unlabelled documents by exact search).  The hard negatives are mined again for the
    *rotated* training queries (:func:`asymgeo.data.mine_hard_negatives`, 8 per query):
    the triple definition applied to the data as a user would see them.  At 0 degrees
    they equal :func:`~asymgeo.data.load_triples`' negatives.

Seeds (:func:`~asymgeo.experiments.runner.cell_seed`, paired)
    * ``subset_seed = cell_seed(master, 1, seed_index)``: one permutation of the training
      pool per seed index; the training set of size n is its first n queries (nested
      across n; shared by both families, every rank and every angle);
    * ``train_seed = cell_seed(master, 2, seed_index, n)``: the adapter seed (epoch
      permutations and initialisation), the same for both families, ranks and angles;
    * ``cars_seed = cell_seed(master, 3, seed_index, n)``: CARS half-splits.

Evaluation
    Validation NDCG@10 (binary, the paper's) by exact full-corpus search picks each
    family's learning rate and checkpoint inside :class:`asymgeo.adapters.Adapter`; the
    test split is ranked by exact full-corpus search with the fitted operator
    (``exact_search(..., operator=M)``) and scored by binary NDCG@10 (the paper's) and
    graded NDCG@10 (trec_eval's ``ndcg_cut.10``; differs on NFCorpus' graded qrels).
    The frozen encoder on the rotated queries is recorded as a baseline.

Pool policy (``pool_policy``)
    ``"cap"``: n larger than the pool trains on the whole pool (rotation study).
    ``"first_cap"``: only the first size of a doubling grid past the pool runs (capped,
    ``n // 2 < pool``); larger sizes return ``status = "beyond_pool"`` without
    training, so the SciFact grid has one full-pool column instead of duplicates.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._markdown import interval_holds, plural, verdict
from ._markdown import md_table as _md_table
from .runner import cell_seed

logger = logging.getLogger(__name__)

__all__ = [
    "METRICS",
    "STARTS",
    "angle_changes",
    "generalisation_summary",
    "pooled_changes",
    "rank_contrasts",
    "t_interval",
    "PAPER_GRID",
    "PAPER_ROTATION",
    "cars_match_counts",
    "cell",
    "claims",
    "grid_summary",
    "make_adapter",
    "parse_learning_rates",
    "plot_grid",
    "plot_rotation",
    "report_section",
    "rotation_means",
    "rotation_summary",
]

#: Test metrics: the paper's binary NDCG@10 and trec_eval's graded one.
METRICS = ("ndcg@10", "ndcg_graded@10")

#: Paper, Section 5.3: mean Dual - Shared NDCG@10 over five datasets (BGE-base, GTE-base).
PAPER_ROTATION: dict[str, Any] = {"gap_0": 0.0032, "gap_90": 0.0146, "fold": 4.6, "datasets_increasing": "5 of 5"}
#: Paper, Section 5.3 / Figure 6: cell wins and rank-4 vs rank-32 mean absolute NDCG@10.
PAPER_GRID: dict[str, tuple[Any, Any]] = {
    "shared_wins_n32": (13, 16),
    "dual_wins_n1024_2048": (32, 32),
    "rank4_rank32_shared": (0.7242, 0.7257),
    "rank4_rank32_dual": (0.7282, 0.7289),
}


# --------------------------------------------------------------------------- adapters
def make_adapter(**kwargs: Any) -> Any:
    """A fresh :class:`asymgeo.adapters.Adapter` with ``kwargs`` (imported lazily).

    The single place RQ3 builds an adapter: tests substitute a stand-in here.

    Raises
    ------
    ImportError
        When ``asymgeo.adapters`` (or torch) is not importable, naming the extra.
    """
    try:
        from ..adapters import Adapter  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise ImportError(
            f"RQ3 trains adapters: asymgeo.adapters is needed (pip install 'asymgeo[train]'): {exc}"
        ) from exc
    return Adapter(**kwargs)


def parse_learning_rates(value: Any) -> tuple[float, ...]:
    """Learning rates from a config value: a number, or a string like ``"3e-4 1e-3 3e-3"``
    (TOML grid constants must be scalars; commas or spaces separate the values)."""
    if isinstance(value, bool):
        raise TypeError(f"learning_rates: expected positive numbers, got {value!r}")
    if isinstance(value, (int, float)):
        items: list[Any] = [value]
    elif isinstance(value, str):
        items = [v for v in value.replace(",", " ").split() if v]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise TypeError(f"learning_rates: expected a number or a string of numbers, got {value!r}")
    try:
        out = tuple(float(v) for v in items)
    except (TypeError, ValueError):
        raise ValueError(f"learning_rates: expected positive numbers, got {value!r}") from None
    if not out or any(not np.isfinite(v) or v <= 0 for v in out):
        raise ValueError(f"learning_rates: expected positive numbers, got {value!r}")
    return out


# --------------------------------------------------------------------------- data
@dataclass(frozen=True)
class _Split:
    Q: np.ndarray            # (m, p) float32 query embeddings, rows in table.query_ids order
    table: Any               # asymgeo.retrieval.metrics.RelevanceTable over the corpus rows


@dataclass(frozen=True)
class _Base:
    corpus: np.ndarray                # (N, p) float32
    X: np.ndarray                     # (n_pool, p) float32 unrotated training queries
    pos_rows: np.ndarray              # (n_pool,) first labelled positive
    labelled: tuple[frozenset, ...]   # corpus rows never used as negatives, per training query
    relevant: tuple[tuple[int, ...], ...]  # rows with grade >= 1, per training query
    hard_negative_rows: np.ndarray    # (n_pool, k) load_triples' (unrotated) negatives
    U: np.ndarray                     # (p, m) rotation planes
    W: np.ndarray
    validation: _Split
    test: _Split
    relevance_energy: float           # share of ||C||_F^2 in the planes' u directions
    w_query_energy: float             # share of tr(Sigma_x) along the w directions
    query_ids: tuple[str, ...]        # training pool query ids (rows of X)
    qrels: dict[str, dict[str, int]]  # all judgements (train, validation, test)
    corpus_ids: tuple[str, ...]


def _split_table(ds: Any, emb: Any, ids: Sequence[str], what: str) -> _Split:
    from ..retrieval.metrics import RelevanceTable

    labels = ds.all_qrels()
    qrels = {q: labels[q] for q in ids if labels.get(q)}
    if not qrels:
        raise ValueError(f"{ds.name}: the {what} split has no usable relevance judgements")
    table = RelevanceTable(qrels, list(qrels), emb.corpus_ids)
    Q = np.asarray(emb.queries[emb.query_rows(table.query_ids)], dtype=np.float32)
    return _Split(Q=Q, table=table)


@functools.lru_cache(maxsize=4)
def _load_base(dataset: str, encoder: str, data_dir: str, cache_dir: str, n_planes: int,
               query_energy: float, split_seed: int, n_negatives: int,
               plane_directions: str = "leading", plane_seed: int = 0) -> _Base:
    """Everything a cell of (dataset, encoder) shares; cached per worker process."""
    from ..data import adaptation_split, load_beir, load_embeddings, load_triples
    from ..kernels.geometry import relevance_moment
    from ..kernels.rotation import relevance_planes

    ds = load_beir(dataset, data_dir=data_dir)
    emb = load_embeddings(ds, encoder, cache_dir=cache_dir)
    split = adaptation_split(ds, split_seed)
    tr = load_triples(ds, encoder, "train", cache=emb, k=n_negatives, seed=split_seed)
    labels = ds.all_qrels()
    ident = ds.ignore_identical_ids
    labelled, relevant = [], []
    for q in tr.query_ids:
        docs = labels.get(q, {})
        ex = set(emb.corpus_rows(docs.keys()).tolist())
        if ident and emb.has_corpus_id(q):
            ex.add(int(emb.corpus_rows([q])[0]))
        labelled.append(frozenset(ex))
        rel = [d for d, g in docs.items() if g >= 1]
        relevant.append(tuple(int(r) for r in emb.corpus_rows(rel).tolist()))
    C = relevance_moment(tr.X, tr.Y_pos, tr.Y_neg)
    U, W = relevance_planes(C, tr.X, n_planes, query_energy=query_energy, directions=plane_directions,
                            seed=plane_seed)
    sigma = tr.X.astype(np.float64).T @ tr.X.astype(np.float64) / tr.n
    return _Base(
        corpus=np.asarray(emb.corpus, dtype=np.float32),
        X=tr.X,
        pos_rows=np.asarray(tr.pos_rows, dtype=np.int64),
        labelled=tuple(labelled),
        relevant=tuple(relevant),
        hard_negative_rows=np.asarray(tr.hard_negative_rows, dtype=np.int64),
        U=U,
        W=W,
        validation=_split_table(ds, emb, split["validation"], "validation"),
        test=_split_table(ds, emb, split["test"], "test"),
        relevance_energy=float(np.sum((U.T @ C) ** 2) / np.sum(C**2)),
        w_query_energy=float(np.trace(W.T @ sigma @ W) / np.trace(sigma)),
        query_ids=tuple(str(q) for q in tr.query_ids),
        qrels={str(q): {str(d): int(g) for d, g in docs.items()} for q, docs in labels.items()},
        corpus_ids=tuple(str(d) for d in emb.corpus_ids),
    )


def _evaluate(Q: np.ndarray, base: _Base, table: Any, operator: np.ndarray | None) -> Any:
    from ..retrieval.metrics import evaluate_indices
    from ..retrieval.search import exact_search

    res = exact_search(Q, base.corpus, 10, operator=operator, backend="numpy", device="cpu")
    return evaluate_indices(res.indices, table, list(METRICS))


def _set_torch_threads() -> None:
    try:
        import torch
    except ImportError as exc:
        raise ImportError("RQ3 trains adapters with PyTorch: pip install 'asymgeo[train]'") from exc
    torch.set_num_threads(1)


def _scalar(value: Any) -> Any:
    """A fitted attribute as a JSON scalar (numpy and torch scalars unwrapped; None kept)."""
    if value is None:
        return None
    item = getattr(value, "item", None)
    return item() if callable(item) else value


# --------------------------------------------------------------------------- cell
_REQUIRED = ("dataset", "encoder", "angle", "rank", "n", "seed_index", "master_seed")


def cell(config: dict[str, Any]) -> dict[str, Any]:
    """One RQ3 cell: train shared and dual adapters on rotated queries, test both.

    Config keys: ``dataset, encoder, angle`` (degrees), ``rank, n, seed_index,
    master_seed``; optional ``study`` ("rotation"/"grid", recorded), ``data_dir,
    cache_dir, form`` ("augmented"), ``init`` (adapter default when absent),
    ``learning_rates`` (number or "3e-4 1e-3 3e-3"), ``epochs`` (30), ``batch_size``
    (256), ``temperature`` (0.05), ``weight_decay`` (1e-5), ``grad_clip`` (5.0),
    ``device`` ("auto": CUDA when available), ``n_planes`` (8), ``query_energy`` (0.9),
    ``n_negatives`` (8), ``split_seed`` (20260809), ``pool_policy`` ("cap" or
    "first_cap"), ``cars_splits`` (20; 0 disables CARS).

    Returns
    -------
    dict
        ``status`` ("ok" or "beyond_pool"); per family ``ndcg_{shared,dual}`` (binary
        NDCG@10), ``ndcg_graded_{shared,dual}``, ``lr_*``, ``best_epoch_*``, ``val_ndcg_*``;
        ``ndcg_diff`` (dual - shared) and its per-query standard error; the frozen
        encoder's ``ndcg_frozen``; CARS (``cars_choice, cars_score, cars_se``),
        ``winner`` (ties to shared) and ``cars_match``; ``n_used, n_pool, n_capped``;
        the seeds; plane diagnostics.
    """
    missing = [k for k in _REQUIRED if k not in config]
    if missing:
        raise ValueError(f"config: missing key(s) {missing}")
    master = int(config["master_seed"])
    angle_deg = float(config["angle"])
    rank, n, s = int(config["rank"]), int(config["n"]), int(config["seed_index"])
    if n < 2 or rank < 1:
        raise ValueError(f"config: expected n >= 2 and rank >= 1, got n={n}, rank={rank}")
    policy = str(config.get("pool_policy", "cap"))
    if policy not in ("cap", "first_cap"):
        raise ValueError(f"config pool_policy: expected 'cap' or 'first_cap', got {policy!r}")
    lrs = parse_learning_rates(config.get("learning_rates", "3e-4 1e-3 3e-3"))
    _set_torch_threads()
    base = _load_base(str(config["dataset"]), str(config["encoder"]),
                      str(config.get("data_dir", "../shared/data")),
                      str(config.get("cache_dir", "../shared/embeddings")),
                      int(config.get("n_planes", 8)), float(config.get("query_energy", 0.9)),
                      int(config.get("split_seed", 20260809)), int(config.get("n_negatives", 8)),
                      str(config.get("plane_directions", "leading")), int(config.get("plane_seed", 0)))
    n_pool = int(base.X.shape[0])
    n_used = min(n, n_pool)
    subset_seed = cell_seed(master, 1, s)
    train_seed = cell_seed(master, 2, s, n_used)
    cars_seed = cell_seed(master, 3, s, n_used)
    out: dict[str, Any] = {
        "n_used": n_used, "n_pool": n_pool, "n_capped": n > n_pool,
        "subset_seed": subset_seed, "train_seed": train_seed,
        "relevance_energy": base.relevance_energy, "w_query_energy": base.w_query_energy,
    }
    if n > n_pool and policy == "first_cap" and n // 2 >= n_pool:
        out["status"] = "beyond_pool"
        return out

    from ..data import mine_hard_negatives
    from ..kernels.rotation import rotate_queries

    theta = float(np.deg2rad(angle_deg))
    idx = np.random.default_rng(subset_seed).permutation(n_pool)[:n_used]
    X = rotate_queries(base.X[idx], base.U, base.W, theta).astype(np.float32)
    k_hard = base.hard_negative_rows.shape[1]
    hard = mine_hard_negatives(X, base.corpus, [base.labelled[i] for i in idx], k_hard).indices
    pos = base.pos_rows[idx]
    Q_val = rotate_queries(base.validation.Q, base.U, base.W, theta).astype(np.float32)
    Q_test = rotate_queries(base.test.Q, base.U, base.W, theta).astype(np.float32)

    logger.debug("rq3 cell %s/%s angle %g rank %d n %d seed %d", config["dataset"], config["encoder"],
                 angle_deg, rank, n_used, s)
    device = config.get("device", "auto")
    common: dict[str, Any] = {
        "rank": rank, "form": str(config.get("form", "augmented")), "learning_rates": lrs,
        "epochs": int(config.get("epochs", 30)), "batch_size": int(config.get("batch_size", 256)),
        "temperature": float(config.get("temperature", 0.05)), "weight_decay": float(config.get("weight_decay", 1e-5)),
        "grad_clip": float(config.get("grad_clip", 5.0)), "seed": train_seed,
        "device": None if device in (None, "auto") else str(device), "progress": False,
    }
    if "init" in config:
        common["init"] = str(config["init"])
    per_query: dict[str, np.ndarray] = {}
    operators: dict[str, np.ndarray] = {}
    for family in ("shared", "dual"):
        ad = make_adapter(geometry=family, **common)
        out["init_used"] = str(getattr(ad, "init", common.get("init", "closed_form")))
        ad.fit(X, pos, base.corpus, hard_negative_rows=hard, relevant_rows=[base.relevant[i] for i in idx],
               validation_queries=Q_val, validation_relevance=base.validation.table)
        operators[family] = np.asarray(ad.operator_, dtype=np.float64)
        ev = _evaluate(Q_test, base, base.test.table, operators[family])
        per_query[family] = ev.per_query["ndcg@10"]
        out.update({
            f"ndcg_{family}": ev.mean["ndcg@10"],
            f"ndcg_graded_{family}": ev.mean["ndcg_graded@10"],
            f"lr_{family}": _scalar(ad.learning_rate_),
            f"best_epoch_{family}": _scalar(ad.best_epoch_),
            f"val_ndcg_{family}": _scalar(ad.validation_ndcg_),
        })
    frozen = _evaluate(Q_test, base, base.test.table, None)
    diff = per_query["dual"] - per_query["shared"]
    out.update(
        ndcg_diff=float(diff.mean()),
        ndcg_diff_se=float(diff.std(ddof=1) / np.sqrt(diff.size)) if diff.size > 1 else float("nan"),
        ndcg_graded_diff=out["ndcg_graded_dual"] - out["ndcg_graded_shared"],
        ndcg_frozen=frozen.mean["ndcg@10"],
        ndcg_graded_frozen=frozen.mean["ndcg_graded@10"],
        n_test_queries=len(diff),
        n_val_queries=len(base.validation.table),
        winner="dual" if out["ndcg_dual"] > out["ndcg_shared"] else "shared",
        plane_directions=str(config.get("plane_directions", "leading")),
        # per test query (base.test.table order): the paired intervals across angles use them
        pq_shared=[float(v) for v in per_query["shared"]],
        pq_dual=[float(v) for v in per_query["dual"]],
        pq_frozen=[float(v) for v in frozen.per_query["ndcg@10"]],
    )
    if bool(config.get("generalisation", True)):
        out.update(_generalisation(base, [base.query_ids[i] for i in idx], Q_val, Q_test, operators,
                                   int(config.get("generalisation_boot", 500)), train_seed))
    splits = int(config.get("cars_splits", 20))
    if splits > 0 and n_used >= 4:
        from ..kernels.selection import cars_score

        cars = cars_score(X, base.corpus[pos], base.corpus[hard[:, 0]], rank, n_splits=splits, seed=cars_seed,
                          n_jobs=1)
        out.update(cars_choice=cars.choice, cars_score=float(cars.score), cars_se=float(cars.standard_error),
                   cars_seed=cars_seed, cars_match=cars.choice == out["winner"])
    out["status"] = "ok"
    return out


def _generalisation(base: _Base, train_ids: Sequence[str], Q_val: np.ndarray, Q_test: np.ndarray,
                    operators: Mapping[str, np.ndarray], n_boot: int, seed: int) -> dict[str, Any]:
    """The cell's generalisation columns (issue 17): seen / unseen-document test NDCG@10 of
    frozen, the document prior and both families, each family against frozen.

    ``gen_<model>_<subset>_{ndcg,diff,ci_low,ci_high}`` for model in ``shared, dual, prior``
    (``frozen`` has ``ndcg`` only) and subset in ``all, seen, unseen, unseen_relevant``;
    ``gen_n_<subset>`` query counts; ``gen_prior_weight`` (beta, chosen on validation).
    """
    from types import SimpleNamespace

    from ..adapters.generalisation import SUBSETS, generalisation_report

    data = SimpleNamespace(
        T=Q_test, V=Q_val, corpus=base.corpus, qrels=base.qrels, corpus_ids=list(base.corpus_ids),
        test=SimpleNamespace(query_ids=list(base.test.table.query_ids)),
        validation=SimpleNamespace(query_ids=list(base.validation.table.query_ids)),
    )
    rep = generalisation_report(data, list(train_ids), dict(operators), focus="dual", n_boot=n_boot, seed=seed)
    prior = next(name for name in rep.rows if name.startswith("doc prior"))
    out: dict[str, Any] = {"gen_prior_weight": float(rep.prior_weight)}
    for subset in SUBSETS:
        out[f"gen_n_{subset}"] = int(rep.rows["frozen"][subset]["n"])
        out[f"gen_frozen_{subset}_ndcg"] = float(rep.rows["frozen"][subset].get("ndcg", float("nan")))
        for model, key in (("shared", "shared"), ("dual", "dual"), (prior, "prior")):
            c = rep.rows[model][subset]
            for stat in ("ndcg", "diff", "ci_low", "ci_high"):
                out[f"gen_{key}_{subset}_{stat}"] = float(c.get(stat, float("nan")))
    return out


# --------------------------------------------------------------------------- summaries
_ROTATION_COLS = ("dataset", "encoder", "angle", "seed_index", "ndcg_shared", "ndcg_dual", "ndcg_diff")
_GRID_COLS = (*_ROTATION_COLS, "rank", "n_used")

#: The two starts (issue 23), primary first.  Appendix F.1 prescribes no closed-form start, so
#: ``"random"`` (A = B = one small Gaussian draw) is the paper's protocol; ``"closed_form"``
#: (both families start at their closed-form operator I + c M / ||M||_2) is a labelled variant.
#: Records without an ``init`` column were run with the adapter's default, ``"closed_form"``.
STARTS = ("random", "closed_form")
START_LABELS = {"random": "random start (Appendix F.1; primary)",
                "closed_form": "closed-form start (variant)"}


def _finished(df: Any, columns: Sequence[str], what: str) -> Any:
    """Rows with ``status == "ok"`` (all rows when there is no status column), checked; the
    ``init`` column filled with ``"closed_form"`` where it is missing."""
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"{what}: expected a pandas DataFrame of RQ3 cell records, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing column(s) {missing} (is this an RQ3 results table?)")
    if "status" in df.columns:
        df = df[df["status"] == "ok"]
    if df.empty:
        raise ValueError(f"{what}: no finished cells (status 'ok')")
    df = df.copy()
    df["init"] = df["init"].fillna("closed_form").astype(str) if "init" in df.columns else "closed_form"
    bad = sorted(set(df["init"]) - set(STARTS))
    if bad:
        raise ValueError(f"{what}: unknown init value(s) {bad}; expected {list(STARTS)}")
    return df


def _starts(df: Any) -> list[str]:
    """The starts present in a (finished) table, primary first."""
    return [s for s in STARTS if (df["init"] == s).any()]


def _t_half_width(sd: Any, count: Any) -> Any:
    from scipy import stats

    count = np.asarray(count, dtype=float)
    q = np.where(count > 1, stats.t.ppf(0.975, np.maximum(count - 1, 1)), np.nan)
    return q * np.asarray(sd, dtype=float) / np.sqrt(count)


def t_interval(values: Any) -> tuple[float, float, float, float, int]:
    """``(mean, low, high, se, count)``: the 95% Student-t interval of the mean of ``values``
    (NaN bounds for fewer than two values)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0:
        return float("nan"), float("nan"), float("nan"), float("nan"), 0
    mean = float(v.mean())
    if v.size < 2:
        return mean, float("nan"), float("nan"), float("nan"), int(v.size)
    se = float(v.std(ddof=1) / np.sqrt(v.size))
    half = float(_t_half_width(v.std(ddof=1), v.size))
    return mean, mean - half, mean + half, se, int(v.size)


def _query_matrix(g: Any, column: str) -> np.ndarray | None:
    """The per-query values of ``column`` as a (seeds, queries) array, seeds in
    ``seed_index`` order; None when the column is absent or the rows disagree in length."""
    if column not in g.columns:
        return None
    rows = []
    for v in g.sort_values("seed_index")[column]:
        if v is None or isinstance(v, float) or np.ndim(v) != 1:
            return None
        rows.append(np.asarray(v, dtype=np.float64))
    if not rows or len({r.size for r in rows}) != 1:
        return None
    return np.vstack(rows)


def _query_gap(g: Any) -> np.ndarray | None:
    """(seeds, queries) Dual − Shared test NDCG@10 per query, or None without per-query columns."""
    dual, shared = _query_matrix(g, "pq_dual"), _query_matrix(g, "pq_shared")
    if dual is None or shared is None or dual.shape != shared.shape:
        return None
    return dual - shared


def rotation_summary(df: Any) -> Any:
    """Per (dataset, encoder, init, angle): mean Dual − Shared test NDCG@10 over paired seeds.

    Columns: ``diff_mean, diff_sd, seeds, ci_low, ci_high`` (95% t interval over seeds),
    ``q_ci_low, q_ci_high, queries`` (95% t interval over test queries of the per-query gap
    averaged over seeds, when the cells recorded per-query NDCG), ``graded_diff_mean``,
    ``ndcg_shared, ndcg_dual`` and ``ndcg_frozen`` means.  Raises ``ValueError`` on a table
    without the RQ3 columns or finished cells.
    """
    d = _finished(df, _ROTATION_COLS, "rotation results")
    keys = ["dataset", "encoder", "init", "angle"]
    agg: dict[str, Any] = {"diff_mean": ("ndcg_diff", "mean"), "diff_sd": ("ndcg_diff", "std"),
                           "seeds": ("ndcg_diff", "size"), "ndcg_shared": ("ndcg_shared", "mean"),
                           "ndcg_dual": ("ndcg_dual", "mean")}
    if "ndcg_graded_diff" in d:
        agg["graded_diff_mean"] = ("ndcg_graded_diff", "mean")
    if "ndcg_frozen" in d:
        agg["ndcg_frozen"] = ("ndcg_frozen", "mean")
    out = d.groupby(keys).agg(**agg).reset_index().sort_values(keys, ignore_index=True)
    half = _t_half_width(out["diff_sd"], out["seeds"])
    out["ci_low"] = out["diff_mean"] - half
    out["ci_high"] = out["diff_mean"] + half
    q_lo, q_hi, nq = [], [], []
    groups = dict(iter(d.groupby(keys)))
    for r in out[keys].itertuples(index=False):
        D = _query_gap(groups[tuple(r)])
        _m, lo, hi, _se, n = t_interval(D.mean(axis=0)) if D is not None else (0, np.nan, np.nan, 0, 0)
        q_lo.append(lo)
        q_hi.append(hi)
        nq.append(n)
    out["q_ci_low"], out["q_ci_high"], out["queries"] = q_lo, q_hi, nq
    return out


def rotation_means(summary: Any) -> Any:
    """Per (init, angle): mean over dataset–encoder pairs of the seed-mean gap (the paper's
    Figure 5 average) with the spread across pairs (``pairs_sd``, ``pairs_min``, ``pairs_max``)."""
    s = summary if "init" in summary.columns else summary.assign(init="closed_form")
    g = s.groupby(["init", "angle"])["diff_mean"]
    return g.agg(mean="mean", pairs_sd="std", pairs_min="min", pairs_max="max", pairs="size").reset_index()


def angle_changes(df: Any, a0: float = 0.0, a1: float = 90.0) -> Any:
    """Per (dataset, encoder, init): the change of the Dual − Shared gap from ``a0`` to ``a1``
    degrees, paired twice over: the same seeds (training subset, adapter seed) and the same
    test queries at both angles.

    Columns: ``gap_a0, gap_a1, change`` (means); ``ci_low, ci_high, se, queries``: 95% t
    interval over test queries of the per-query change averaged over seeds (the unit a new
    query is drawn from; NaN without per-query columns); ``gap_a0_low/high``,
    ``gap_a1_low/high`` the same for each angle's gap; ``seeds``, ``seed_changes`` (list) and
    ``seed_ci_low, seed_ci_high`` (t over seeds, a secondary line).
    """
    import pandas as pd

    d = _finished(df, _ROTATION_COLS, "rotation results")
    rows = []
    for (ds, enc, init), g in d.groupby(["dataset", "encoder", "init"], sort=True):
        g0 = g[g["angle"] == a0].drop_duplicates("seed_index").set_index("seed_index", drop=False)
        g1 = g[g["angle"] == a1].drop_duplicates("seed_index").set_index("seed_index", drop=False)
        seeds = sorted(set(g0.index) & set(g1.index))
        if not seeds:
            continue
        b0, b1 = g0.loc[seeds].reset_index(drop=True), g1.loc[seeds].reset_index(drop=True)
        seed_changes = b1["ndcg_diff"].to_numpy(float) - b0["ndcg_diff"].to_numpy(float)
        _m, s_lo, s_hi, _se, _n = t_interval(seed_changes)
        row: dict[str, Any] = {"dataset": ds, "encoder": enc, "init": init, "seeds": len(seeds),
                               "gap_a0": float(b0["ndcg_diff"].mean()), "gap_a1": float(b1["ndcg_diff"].mean()),
                               "change": float(seed_changes.mean()), "seed_changes": seed_changes.tolist(),
                               "seed_ci_low": s_lo, "seed_ci_high": s_hi}
        D0, D1 = _query_gap(b0), _query_gap(b1)
        if D0 is not None and D1 is not None and D0.shape == D1.shape:
            m, lo, hi, se, nq = t_interval((D1 - D0).mean(axis=0))
            row.update(change=m, ci_low=lo, ci_high=hi, se=se, queries=nq)
            for name, D in (("gap_a0", D0), ("gap_a1", D1)):
                _gm, glo, ghi, gse, _gn = t_interval(D.mean(axis=0))
                row.update({f"{name}_low": glo, f"{name}_high": ghi, f"{name}_se": gse})
        else:
            row.update(ci_low=float("nan"), ci_high=float("nan"), se=float("nan"), queries=0)
        rows.append(row)
    return pd.DataFrame(rows)


def pooled_changes(changes: Any) -> Any:
    """Per init: the mean over dataset–encoder pairs of :func:`angle_changes` (the paper's
    average over datasets), its 95% interval from the pairs' query-level standard errors
    (independent test sets: ``se = sqrt(sum se_i^2) / P``, normal quantile), the mean gaps at
    both angles with theirs, and the t interval over all pair-seeds (secondary)."""
    import pandas as pd

    rows = []
    for init, g in changes.groupby("init", sort=False):
        P = len(g)
        se = float(np.sqrt(np.sum(np.square(g["se"].to_numpy(float)))) / P)
        seed_vals = np.concatenate([np.asarray(v, dtype=float) for v in g["seed_changes"]])
        _m, s_lo, s_hi, _se, n_s = t_interval(seed_vals)
        row: dict[str, Any] = {"init": init, "pairs": P, "change": float(g["change"].mean()),
                               "ci_low": float(g["change"].mean() - 1.959964 * se),
                               "ci_high": float(g["change"].mean() + 1.959964 * se),
                               "gap_a0": float(g["gap_a0"].mean()), "gap_a1": float(g["gap_a1"].mean()),
                               "pair_seeds": n_s, "seed_ci_low": s_lo, "seed_ci_high": s_hi}
        for name in ("gap_a0", "gap_a1"):
            col = f"{name}_se"
            gse = float(np.sqrt(np.sum(np.square(g[col].to_numpy(float)))) / P) if col in g else float("nan")
            row[f"{name}_low"] = row[name] - 1.959964 * gse
            row[f"{name}_high"] = row[name] + 1.959964 * gse
        rows.append(row)
    return pd.DataFrame(rows)


#: Generalisation columns averaged over seeds by :func:`generalisation_summary`.
_GEN_STATS = ("gen_n_all", "gen_n_seen", "gen_n_unseen", "gen_n_unseen_relevant", "gen_prior_weight",
              "gen_frozen_all_ndcg", "gen_frozen_unseen_ndcg", "gen_frozen_unseen_relevant_ndcg",
              *(f"gen_{m}_{s}_diff" for m in ("prior", "shared", "dual")
                for s in ("all", "seen", "unseen", "unseen_relevant")))


def generalisation_summary(df: Any) -> Any:
    """Per (dataset, encoder, init, angle): the cells' generalisation columns (issue 17) averaged
    over seeds: query counts, frozen NDCG@10 and each model's difference to frozen on all,
    seen-document, unseen-document and unseen-relevant test queries (the document prior
    ``prior`` beside the two families).  Empty when the cells ran without ``generalisation``."""
    import pandas as pd

    d = _finished(df, _ROTATION_COLS, "rotation results")
    cols = [c for c in _GEN_STATS if c in d.columns]
    if "gen_dual_all_diff" not in cols:
        return pd.DataFrame()
    keys = ["dataset", "encoder", "init", "angle"]
    return d.groupby(keys)[cols].mean().reset_index().sort_values(keys, ignore_index=True)


def grid_summary(df: Any) -> Any:
    """Per (dataset, encoder, init, angle, rank, n_used): the mean gap over paired seeds, the
    winner (``"dual"`` iff the mean gap is > 0; ties to shared), and CARS beside it.

    CARS columns (when recorded): ``cars_dual_seeds`` (seeds whose training triples
    CARS sent to dual), ``cars_choice`` (majority over seeds; ties to shared),
    ``cars_match`` (majority choice equals the cell's winner) and ``cars_seed_matches``
    (seeds whose CARS choice equals that seed's own winner).
    """
    d = _finished(df, _GRID_COLS, "grid results")
    keys = ["dataset", "encoder", "init", "angle", "rank", "n_used"]
    out = d.groupby(keys).agg(diff_mean=("ndcg_diff", "mean"), diff_sd=("ndcg_diff", "std"),
                              seeds=("ndcg_diff", "size"), ndcg_shared=("ndcg_shared", "mean"),
                              ndcg_dual=("ndcg_dual", "mean")).reset_index()
    out["winner"] = np.where(out["diff_mean"] > 0, "dual", "shared")
    if "cars_choice" in d:
        seed_winner = np.where(d["ndcg_dual"] > d["ndcg_shared"], "dual", "shared")
        c = d.assign(_dual=(d["cars_choice"] == "dual").astype(int),
                     _seed_match=(d["cars_choice"] == seed_winner).astype(int))
        cc = c.groupby(keys).agg(cars_dual_seeds=("_dual", "sum"),
                                 cars_seed_matches=("_seed_match", "sum")).reset_index()
        out = out.merge(cc, on=keys, how="left")
        out["cars_choice"] = np.where(2 * out["cars_dual_seeds"] > out["seeds"], "dual", "shared")
        out["cars_match"] = out["cars_choice"] == out["winner"]
    return out.sort_values(keys, ignore_index=True)


def cars_match_counts(summary: Any) -> Any:
    """Per (dataset, encoder, init, angle) of a :func:`grid_summary`: cells, cells where CARS'
    majority choice matched the winner, and seed-level matches out of all seeds."""
    if "cars_match" not in summary:
        raise ValueError("summary: no CARS columns (the cells ran with cars_splits = 0)")
    keys = [k for k in ("dataset", "encoder", "init", "angle") if k in summary.columns]
    g = summary.groupby(keys)
    return g.agg(cells=("cars_match", "size"), cell_matches=("cars_match", "sum"),
                 seed_matches=("cars_seed_matches", "sum"), seeds=("seeds", "sum")).reset_index()


def rank_contrasts(df: Any, angle: float = 90.0, low: int = 4, high: int = 32) -> Any:
    """Rank ``high`` against rank ``low`` at ``angle``, paired over (n, seed) cells of the same
    dataset, encoder and start: per scope (each dataset–encoder pair, and ``"pooled"``) the mean
    absolute test NDCG@10 of each family at both ranks, the paired differences
    ``shared_gain, dual_gain`` (rank high − rank low) and ``advantage_change`` (the Dual − Shared
    gap at rank high minus at rank low), each with a 95% t interval over the paired cells."""
    import pandas as pd

    d = _finished(df, _GRID_COLS, "grid results")
    d = d[(d["angle"] == angle) & d["rank"].isin([low, high])]
    keys = ["dataset", "encoder", "init", "n_used", "seed_index"]
    lo_t = d[d["rank"] == low].set_index(keys)
    hi_t = d[d["rank"] == high].set_index(keys)
    common = lo_t.index.intersection(hi_t.index)
    rows: list[dict[str, Any]] = []
    if len(common) == 0:
        return pd.DataFrame(rows)
    a, b = lo_t.loc[common], hi_t.loc[common]
    paired = pd.DataFrame({
        "shared_low": a["ndcg_shared"].to_numpy(float), "shared_high": b["ndcg_shared"].to_numpy(float),
        "dual_low": a["ndcg_dual"].to_numpy(float), "dual_high": b["ndcg_dual"].to_numpy(float),
    }, index=common).reset_index()
    paired["shared_gain"] = paired["shared_high"] - paired["shared_low"]
    paired["dual_gain"] = paired["dual_high"] - paired["dual_low"]
    paired["advantage_change"] = ((paired["dual_high"] - paired["shared_high"])
                                  - (paired["dual_low"] - paired["shared_low"]))
    scopes = [((ds, enc, init), g) for (ds, enc, init), g in paired.groupby(["dataset", "encoder", "init"])]
    scopes += [(("pooled", "pooled", init), g) for init, g in paired.groupby("init")]
    for (ds, enc, init), g in scopes:
        row: dict[str, Any] = {"dataset": ds, "encoder": enc, "init": init, "cells": len(g)}
        for col in ("shared_low", "shared_high", "dual_low", "dual_high"):
            row[col] = float(g[col].mean())
        for col in ("shared_gain", "dual_gain", "advantage_change"):
            m, lo_, hi_, _se, _n = t_interval(g[col])
            row.update({col: m, f"{col}_low": lo_, f"{col}_high": hi_})
        rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- claims
def _split_studies(df: Any) -> tuple[Any, Any]:
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"df: expected a pandas DataFrame of RQ3 cell records, got {type(df).__name__}")
    if "study" not in df.columns:
        raise ValueError("df: missing column 'study' ('rotation' or 'grid', set in the rq3_*.toml configs)")
    bad = sorted(set(df["study"].astype(str)) - {"rotation", "grid"})
    if bad:
        raise ValueError(f"df: unknown study value(s) {bad}; expected 'rotation' or 'grid'")
    rot, grid = df[df["study"] == "rotation"], df[df["study"] == "grid"]
    return (rot if len(rot) else None), (grid if len(grid) else None)


def _ci(m: float, lo: float, hi: float) -> str:
    return f"{m:+.4f} [{lo:+.4f}, {hi:+.4f}]" if np.isfinite(lo) and np.isfinite(hi) else f"{m:+.4f}"


def _all_positive(intervals: Sequence[tuple[float, float]]) -> bool | str | None:
    """"Every one is positive": True when every interval lies above zero, False when one lies
    below, otherwise inconclusive."""
    verdicts = [interval_holds(lo, hi) for lo, hi in intervals]
    if not verdicts or any(v is None for v in verdicts):
        return None
    if all(v is True for v in verdicts):
        return True
    if any(v is False for v in verdicts):
        return False
    return "inconclusive"


def _rotation_claims(rot: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    angles = sorted(rot["angle"].unique())
    if not (0 in angles and 90 in angles):
        return [{"claim": "RQ3 rotation: mean gap rises from 0° to 90°", "start": "–", "scope": "pooled",
                 "paper": f"{PAPER_ROTATION['gap_0']:.4f} → {PAPER_ROTATION['gap_90']:.4f}",
                 "ours": f"angles {angles[0]}°–{angles[-1]}° only", "holds": None}]
    ch = angle_changes(rot)
    pooled = pooled_changes(ch).set_index("init")
    paper_pair = (f"every dataset rises (5 of 5; mean {PAPER_ROTATION['gap_0']:.4f} → "
                  f"{PAPER_ROTATION['gap_90']:.4f})")
    for init in [s for s in STARTS if s in set(ch["init"])]:
        sub = ch[ch["init"] == init]
        level = "test queries × seeds, paired by query" if (sub["queries"] > 0).all() else "seeds"
        for r in sub.itertuples():
            scope = _pair_label(r.dataset, r.encoder)
            n_info = f"{int(r.queries)} queries × {int(r.seeds)} seeds" if r.queries else f"{int(r.seeds)} seeds"
            rows.append({"claim": f"RQ3 rotation, {scope}: Dual − Shared rises from 0° to 90°", "start": init,
                         "scope": scope, "paper": paper_pair,
                         "ours": f"{r.gap_a0:+.4f} → {r.gap_a1:+.4f}; change {_ci(r.change, r.ci_low, r.ci_high)} "
                                 f"({n_info})", "holds": interval_holds(r.ci_low, r.ci_high)})
            lo1, hi1 = getattr(r, "gap_a1_low", np.nan), getattr(r, "gap_a1_high", np.nan)
            rows.append({"claim": f"RQ3 rotation, {scope}: Dual beats Shared at 90°", "start": init, "scope": scope,
                         "paper": f"+{PAPER_ROTATION['gap_90']:.4f} (mean over datasets)",
                         "ours": f"{_ci(r.gap_a1, lo1, hi1)} ({n_info})", "holds": interval_holds(lo1, hi1)})
        p = pooled.loc[init]
        ratio = f", {p.gap_a1 / p.gap_a0:.1f}x" if p.gap_a0 > 0 else ""
        rows.append({"claim": "RQ3 rotation, mean over pairs: Dual − Shared rises from 0° to 90°", "start": init,
                     "scope": "pooled",
                     "paper": f"{PAPER_ROTATION['gap_0']:.4f} → {PAPER_ROTATION['gap_90']:.4f} "
                              f"({PAPER_ROTATION['fold']}x, 5 datasets)",
                     "ours": f"{p.gap_a0:+.4f} → {p.gap_a1:+.4f}{ratio}; change "
                             f"{_ci(p.change, p.ci_low, p.ci_high)} over {plural(int(p.pairs), 'pair')} ({level}); "
                             f"over {plural(int(p.pair_seeds), 'pair-seed')} "
                             f"{_ci(p.change, p.seed_ci_low, p.seed_ci_high)}",
                     "holds": interval_holds(p.ci_low, p.ci_high)})
        up = int((sub["change"] > 0).sum())
        sig = int((sub["ci_low"] > 0).sum())
        rows.append({"claim": "RQ3 rotation: every dataset–encoder pair's gap increases from 0° to 90°",
                     "start": init, "scope": "pooled", "paper": f"{PAPER_ROTATION['datasets_increasing']} datasets",
                     "ours": f"{up} of {plural(len(sub), 'pair')} rise{'s' if len(sub) == 1 else ''}, {sig} with "
                             "the interval above zero",
                     "holds": _all_positive(list(zip(sub["ci_low"], sub["ci_high"], strict=True)))})
        rows.append({"claim": "RQ3 rotation, mean over pairs: Dual beats Shared at 90°", "start": init,
                     "scope": "pooled", "paper": f"+{PAPER_ROTATION['gap_90']:.4f}",
                     "ours": f"{_ci(p.gap_a1, p.gap_a1_low, p.gap_a1_high)} over {plural(int(p.pairs), 'pair')}",
                     "holds": interval_holds(p.gap_a1_low, p.gap_a1_high)})
    return rows


def _negate(v: bool | str | None) -> bool | str | None:
    """The verdict of the opposite claim: True and False swap; inconclusive and None stay."""
    return (not v) if isinstance(v, bool) else v


def _grid_claims(grid: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    g = grid_summary(grid)
    g90 = g[g["angle"] == 90]
    if g90.empty:
        return [{"claim": "RQ3 grid at 90°", "start": "–", "scope": "pooled", "paper": "Figure 6",
                 "ours": "no 90° cells", "holds": None}]
    rc = rank_contrasts(grid)
    p_sw, p_n = PAPER_GRID["shared_wins_n32"]
    p_dw, p_dn = PAPER_GRID["dual_wins_n1024_2048"]
    ps, pd_ = PAPER_GRID["rank4_rank32_shared"], PAPER_GRID["rank4_rank32_dual"]
    for init in _starts(g90):
        gi = g90[g90["init"] == init]
        scopes = [(_pair_label(ds, enc), sub) for (ds, enc), sub in gi.groupby(["dataset", "encoder"])]
        scopes.append(("pooled", gi))
        for scope, sub in scopes:
            n32 = sub[sub["n_used"] == 32]
            sw = int((n32["winner"] == "shared").sum())
            rows.append({"claim": f"RQ3 grid (90°), {scope}: Shared wins most cells at n = 32", "start": init,
                         "scope": scope if scope == "pooled" else "pair", "paper": f"{p_sw} of {p_n} cells",
                         "ours": f"{sw} of {len(n32)} cells" if len(n32) else "n = 32 not in grid",
                         "holds": (sw > len(n32) / 2) if len(n32) else None})
            big = sub[sub["n_used"].isin([1024, 2048])]
            dw = int((big["winner"] == "dual").sum())
            rows.append({"claim": f"RQ3 grid (90°), {scope}: Dual wins every cell at n = 1024 and 2048",
                         "start": init, "scope": scope if scope == "pooled" else "pair",
                         "paper": f"{p_dw} of {p_dn} cells",
                         "ours": f"{dw} of {len(big)} cells" if len(big) else "n ≥ 1024 not in this pool",
                         "holds": (dw == len(big)) if len(big) else None})
        if rc.empty:
            continue
        for r in rc[rc["init"] == init].itertuples():
            scope = "pooled" if r.dataset == "pooled" else _pair_label(r.dataset, r.encoder)
            both = _all_positive([(r.shared_gain_low, r.shared_gain_high), (r.dual_gain_low, r.dual_gain_high)])
            rows.append({"claim": f"RQ3 grid (90°), {scope}: rank 32 above rank 4 in NDCG@10, both families",
                         "start": init, "scope": "pooled" if scope == "pooled" else "pair",
                         "paper": f"shared {ps[0]:.4f} → {ps[1]:.4f}, dual {pd_[0]:.4f} → {pd_[1]:.4f}",
                         "ours": f"shared {r.shared_low:.4f} → {r.shared_high:.4f} "
                                 f"({_ci(r.shared_gain, r.shared_gain_low, r.shared_gain_high)}), dual "
                                 f"{r.dual_low:.4f} → {r.dual_high:.4f} "
                                 f"({_ci(r.dual_gain, r.dual_gain_low, r.dual_gain_high)}); {r.cells} paired cells",
                         "holds": both})
            enlarged = interval_holds(r.advantage_change_low, r.advantage_change_high)
            rows.append({"claim": f"RQ3 grid (90°), {scope}: rank 32 does not enlarge Dual's advantage over rank 4",
                         "start": init, "scope": "pooled" if scope == "pooled" else "pair",
                         "paper": f"{pd_[0] - ps[0]:+.4f} → {pd_[1] - ps[1]:+.4f}",
                         "ours": f"change of Dual − Shared "
                                 f"{_ci(r.advantage_change, r.advantage_change_low, r.advantage_change_high)}",
                         # "not enlarged" holds when the change is below zero, fails when above
                         "holds": _negate(enlarged)})
    return rows


def claims(df: Any) -> Any:
    """The paper's RQ3 claims against ours: a DataFrame with ``claim, start, scope, paper, ours, holds``.

    ``df`` holds RQ3 cell records (either study or both, told apart by the ``study``
    column); each start (``init``) is judged on its own.  ``holds`` is True, False,
    ``"inconclusive"`` (the 95% interval contains zero) or None (the grid cannot test it).
    Claims are judged per dataset–encoder pair (``scope`` names it) and, as a secondary
    line, over the pairs (``scope = "pooled"``).

    Rotation (Section 5.3): the gap rises from 0° to 90° (paper 0.0032 → 0.0146 over five
    datasets, every dataset rising); the 90° gap is positive.  Intervals are paired by seed
    and by test query.
    Grid at 90° (Figure 6): Shared wins most cells at n = 32 (paper 13/16); Dual wins
    every cell at n = 1024 and 2048 (paper 32/32); rank 32 has higher absolute NDCG@10
    than rank 4 for both families (paper 0.7242 → 0.7257 shared, 0.7282 → 0.7289 dual)
    "without enlarging Dual's relative advantage" (judged as its own claim).
    """
    import pandas as pd

    rot, grid = _split_studies(df)
    rows: list[dict[str, Any]] = []
    if rot is not None:
        rows += _rotation_claims(_finished(rot, _ROTATION_COLS, "rotation results"))
    if grid is not None:
        rows += _grid_claims(grid)
    if not rows:
        raise ValueError("df: no RQ3 rows")
    return pd.DataFrame(rows, columns=["claim", "start", "scope", "paper", "ours", "holds"])


# --------------------------------------------------------------------------- figures
def _pair_label(dataset: str, encoder: str) -> str:
    return f"{dataset} / {encoder.replace('all-', '').replace('-v2', '')}"


def _start_tag(init: str) -> str:
    """File-name tag of a start: none for the primary (random) start."""
    return "" if init == "random" else f"_{init}"


def plot_rotation(summary: Any, path: str | Path, title: str = "") -> None:
    """Figure 5: bars of mean Dual − Shared NDCG@10 per angle, one bar per dataset–encoder
    pair (error bars: the 95% interval over test queries when recorded, else the t interval
    over seeds), and the mean over pairs as a line.  ``summary`` holds one start."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = list(dict.fromkeys(zip(summary["dataset"], summary["encoder"])))
    angles = sorted(summary["angle"].unique())
    width = 0.8 / max(1, len(pairs))
    fig, ax = plt.subplots(figsize=(9, 4))
    x = np.arange(len(angles))
    by_query = "q_ci_low" in summary and bool(np.isfinite(summary["q_ci_low"]).all())
    lo_col, hi_col = ("q_ci_low", "q_ci_high") if by_query else ("ci_low", "ci_high")
    for j, (ds, enc) in enumerate(pairs):
        sub = summary[(summary["dataset"] == ds) & (summary["encoder"] == enc)].set_index("angle").reindex(angles)
        err = np.vstack([sub["diff_mean"] - sub[lo_col], sub[hi_col] - sub["diff_mean"]])
        ax.bar(x - 0.4 + width * (j + 0.5), sub["diff_mean"], width, yerr=np.nan_to_num(err), capsize=2,
               label=_pair_label(ds, enc))
    means = summary.groupby("angle")["diff_mean"].mean().reindex(angles)
    ax.plot(x, means, "k-o", ms=4, label="mean over pairs")
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks(x, [f"{a:g}°" for a in angles])
    ax.set_xlabel("query rotation angle")
    ax.set_ylabel("Dual − Shared test NDCG@10")
    what = "95% over test queries" if by_query else "95% t over seeds"
    ax.set_title(f"Figure 5{': ' + title if title else ''} ({what})", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def plot_grid(summary: Any, path: str | Path, angle: float, title: str = "") -> None:
    """Figure 6: one heatmap per dataset–encoder pair of mean Dual − Shared NDCG@10 in
    units of 1e-4 over rank x n (red favours Dual, blue Shared); a cell's CARS majority
    choice is marked "D"/"S", underlined by "*" where it matched the winner.  ``summary``
    holds one start."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    sub = summary[summary["angle"] == angle]
    if sub.empty:
        raise ValueError(f"angle: no grid cells at {angle}°")
    pairs = list(dict.fromkeys(zip(sub["dataset"], sub["encoder"])))
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.6 * len(pairs), 3.6), squeeze=False)
    lim = float(np.nanmax(np.abs(sub["diff_mean"]))) * 1e4 or 1.0
    for ax, (ds, enc) in zip(axes[0], pairs):
        cell_tab = sub[(sub["dataset"] == ds) & (sub["encoder"] == enc)]
        piv = cell_tab.pivot(index="rank", columns="n_used", values="diff_mean").sort_index() * 1e4
        im = ax.imshow(piv.to_numpy(), origin="lower", aspect="auto", cmap="RdBu_r",
                       norm=TwoSlopeNorm(vmin=-lim, vcenter=0.0, vmax=lim))
        for (i, r), (j, n) in ((a, b) for a in enumerate(piv.index) for b in enumerate(piv.columns)):
            v = piv.loc[r, n]
            if not np.isfinite(v):
                continue
            mark = ""
            if "cars_choice" in cell_tab:
                row = cell_tab[(cell_tab["rank"] == r) & (cell_tab["n_used"] == n)].iloc[0]
                mark = ("\nD" if row["cars_choice"] == "dual" else "\nS") + ("*" if row["cars_match"] else "")
            ax.text(j, i, f"{v:.0f}{mark}", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(piv.columns)), [str(int(c)) for c in piv.columns])
        ax.set_yticks(range(len(piv.index)), [str(int(r)) for r in piv.index])
        ax.set_xlabel("training queries n")
        ax.set_ylabel("rank")
        ax.set_title(f"{_pair_label(ds, enc)}, {angle:g}°", fontsize=9)
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle("Figure 6" + (f" ({title})" if title else "")
                 + ": Dual − Shared test NDCG@10 (x1e-4); CARS majority D/S, * = matched winner", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


# --------------------------------------------------------------------------- report
def _verdict(ok: Any) -> str:
    """``**yes**`` / ``**no**`` / ``**inconclusive**``; ``n/a`` for None or NaN."""
    if isinstance(ok, str):
        return verdict(ok)
    return verdict(None if ok is None or (isinstance(ok, float) and np.isnan(ok)) else bool(ok))


def _fmt_gap(m: float, lo: float, hi: float) -> str:
    return f"[{lo:+.4f}, {hi:+.4f}]" if np.isfinite(lo) and np.isfinite(hi) else "–"


def _rotation_markdown(rot: Any, fig_dir: Path, fig_rel: str, suffix: str, figures: list[Path]) -> str:
    s = rotation_summary(rot)
    ch = angle_changes(rot) if {0, 90} <= set(rot["angle"]) else None
    n_info = ", ".join(sorted({f"{d}: n = {int(n)}" for d, n in zip(rot["dataset"], rot["n_used"])
                               if isinstance(n, (int, float, np.integer, np.floating)) and np.isfinite(n)}))
    text = [f"""## RQ3: query rotation with trained adapters (Figure 5)

Rank-16 augmented shared and dual adapters trained on the same rotated training queries with
paired seeds ({n_info}; SciFact's whole adaptation pool is 647 queries); learning rate and
checkpoint by validation NDCG@10; test NDCG@10 by exact full-corpus search. Queries are rotated
in eight planes span(u_i, w_i) of the training relevance moment (see docs/rq3.md); documents,
labels and splits are unchanged.

**Starts.** Appendix F.1 prescribes no closed-form start, so the primary result uses the
*random start* (`init = "random"`: A = B = one small Gaussian draw, std 0.01, the same draw for
both families). The *closed-form start* (`init = "closed_form"`: each family starts at its
closed-form operator I + c·M/‖M‖₂, c on validation, the adapter's default for users) is a
labelled variant: it hands Dual the asymmetric closed form before any training, so its 0° gap
is a head start rather than an effect of rotation. Every figure and table below names its start.

Intervals are 95% and paired: the same seeds (training subset, adapter seed) and the same test
queries at every angle; "over queries" is the t interval across test queries of the per-query
gap averaged over seeds, "over seeds" the t interval across the three seeds (2 degrees of freedom).
"""]
    for init in _starts(s):
        si = s[s["init"] == init]
        name = f"rq3_figure5{_start_tag(init)}{suffix}.png"
        plot_rotation(si, fig_dir / name, START_LABELS[init])
        figures.append(fig_dir / name)
        text.append(f"### {START_LABELS[init][0].upper()}{START_LABELS[init][1:]}\n\n![Figure 5, {START_LABELS[init]}]"
                    f"({fig_rel}/{name})\n")
        if ch is not None and (ch["init"] == init).any():
            c_rows = [[_pair_label(r.dataset, r.encoder), f"{r.gap_a0:+.4f}",
                       _fmt_gap(r.gap_a0, getattr(r, "gap_a0_low", np.nan), getattr(r, "gap_a0_high", np.nan)),
                       f"{r.gap_a1:+.4f}",
                       _fmt_gap(r.gap_a1, getattr(r, "gap_a1_low", np.nan), getattr(r, "gap_a1_high", np.nan)),
                       f"{r.change:+.4f}", _fmt_gap(r.change, r.ci_low, r.ci_high),
                       _fmt_gap(r.change, r.seed_ci_low, r.seed_ci_high), _verdict(interval_holds(r.ci_low, r.ci_high))]
                      for r in ch[ch["init"] == init].itertuples()]
            p = pooled_changes(ch[ch["init"] == init]).iloc[0]
            c_rows.append(["mean over pairs", f"{p.gap_a0:+.4f}", _fmt_gap(0, p.gap_a0_low, p.gap_a0_high),
                           f"{p.gap_a1:+.4f}", _fmt_gap(0, p.gap_a1_low, p.gap_a1_high), f"{p.change:+.4f}",
                           _fmt_gap(0, p.ci_low, p.ci_high), _fmt_gap(0, p.seed_ci_low, p.seed_ci_high),
                           _verdict(interval_holds(p.ci_low, p.ci_high))])
            text.append("From 0° to 90° (the claim: does the gap rise?):\n")
            text.append(_md_table(["dataset / encoder", "gap 0°", "95% over queries", "gap 90°", "95% over queries",
                                   "change", "95% over queries", "95% over seeds", "rises?"], c_rows) + "\n")
        m = rotation_means(si)
        text.append("Mean over dataset–encoder pairs per angle (spread across pairs):\n")
        text.append(_md_table(["angle", "mean Dual − Shared", "sd over pairs", "range", "pairs"],
                              [[f"{r.angle:g}°", f"{r.mean:+.4f}", f"{r.pairs_sd:.4f}" if r.pairs > 1 else "–",
                                f"{r.pairs_min:+.4f} … {r.pairs_max:+.4f}", int(r.pairs)] for r in m.itertuples()])
                    + "\n")
        rows = [[_pair_label(r.dataset, r.encoder), f"{r.angle:g}°", f"{r.diff_mean:+.4f}",
                 _fmt_gap(0, r.q_ci_low, r.q_ci_high), _fmt_gap(0, r.ci_low, r.ci_high), int(r.seeds),
                 f"{r.ndcg_shared:.4f}", f"{r.ndcg_dual:.4f}", f"{getattr(r, 'ndcg_frozen', float('nan')):.4f}",
                 f"{getattr(r, 'graded_diff_mean', float('nan')):+.4f}"] for r in si.itertuples()]
        text.append("Per dataset, encoder and angle (\"frozen\": the encoder without adapter on the rotated "
                    "queries; \"graded\": Dual − Shared in trec_eval's graded NDCG@10):\n")
        text.append(_md_table(["dataset / encoder", "angle", "Dual − Shared", "95% over queries", "95% over seeds",
                               "seeds", "shared", "dual", "frozen", "graded gap"], rows) + "\n")
    if len(_starts(s)) == 2 and ch is not None:
        piv = ch.pivot_table(index=["dataset", "encoder"], columns="init", values=["gap_a0", "gap_a1", "change"])
        rows = [[_pair_label(ds, enc), *(f"{piv.loc[(ds, enc), (v, i)]:+.4f}" for v in ("gap_a0", "gap_a1", "change")
                                         for i in STARTS)] for ds, enc in piv.index]
        text.append("### Start against start\n\nThe same cells with each start (Dual − Shared test NDCG@10):\n")
        text.append(_md_table(["dataset / encoder", "0° random", "0° closed form", "90° random", "90° closed form",
                               "change random", "change closed form"], rows) + "\n")
    gen = generalisation_summary(rot)
    if not gen.empty:
        gen = gen[gen["angle"].isin([0, 90])]
        rows = []
        for r in gen.itertuples():
            unseen = "unseen" if r.gen_n_unseen > 0 else "unseen_relevant"
            rows.append([_pair_label(r.dataset, r.encoder), "random" if r.init == "random" else "closed form",
                         f"{r.angle:g}°", f"{int(r.gen_n_seen)}/{int(r.gen_n_unseen)}", f"{r.gen_frozen_all_ndcg:.4f}",
                         f"{r.gen_prior_all_diff:+.4f}", f"{r.gen_shared_all_diff:+.4f}", f"{r.gen_dual_all_diff:+.4f}",
                         "unseen-doc" if unseen == "unseen" else "unseen-rel",
                         f"{getattr(r, f'gen_prior_{unseen}_diff'):+.4f}",
                         f"{getattr(r, f'gen_shared_{unseen}_diff'):+.4f}",
                         f"{getattr(r, f'gen_dual_{unseen}_diff'):+.4f}"])
        text.append("""### Who the gain reaches (seen and unseen documents)

Each family and the document prior (frozen + β·1[training positive], β on validation) against
frozen, on all test queries and on the queries like no training query ("unseen-doc": no
relevant document is a positive of the cell's training queries; where no such query exists, as
on NFCorpus, "unseen-rel": every query scored on its unseen relevant documents only; see
docs/generalisation.md). Means over seeds; per-seed intervals are in the per-cell table.
""")
        text.append(_md_table(["dataset / encoder", "start", "angle", "seen/unseen queries", "frozen (all)",
                               "prior − frozen", "shared − frozen", "dual − frozen", "subset", "prior − frozen",
                               "shared − frozen", "dual − frozen"], rows) + "\n")
    return "\n".join(text)


def _planes_markdown(var: Any, primary: Any | None, fig_dir: Path, fig_rel: str, suffix: str,
                     figures: list[Path]) -> str:
    s = rotation_summary(var)
    name = f"rq3_figure5_random_planes{suffix}.png"
    plot_rotation(s, fig_dir / name, "variant planes: random w_i orthogonal to U, random start")
    figures.append(fig_dir / name)
    ref = None
    if primary is not None:
        ps = rotation_summary(primary)
        ref = ps[ps["init"] == "random"].set_index(["dataset", "encoder", "angle"])
    rows = []
    for r in s[s["init"] == "random"].itertuples():
        key = (r.dataset, r.encoder, r.angle)
        lead = ref.loc[key] if ref is not None and key in ref.index else None
        rows.append([_pair_label(r.dataset, r.encoder), f"{r.angle:g}°", f"{r.diff_mean:+.4f}",
                     _fmt_gap(0, r.q_ci_low, r.q_ci_high), f"{getattr(r, 'ndcg_frozen', float('nan')):.4f}",
                     f"{lead['diff_mean']:+.4f}" if lead is not None else "–",
                     f"{lead['ndcg_frozen']:.4f}" if lead is not None and "ndcg_frozen" in lead else "–"])
    energy_rows = []
    for (ds, enc), g in var.groupby(["dataset", "encoder"]):
        lead_e = "–"
        if primary is not None and "w_query_energy" in primary:
            pg = primary[(primary["dataset"] == ds) & (primary["encoder"] == enc)]
            lead_e = f"{pg['w_query_energy'].mean():.4f}" if len(pg) else "–"
        energy_rows.append([_pair_label(ds, enc), f"{g['w_query_energy'].mean():.4f}" if "w_query_energy" in g
                            else "–", lead_e])
    ch = angle_changes(var) if {0, 90} <= set(var["angle"]) else None
    ch_rows = [[_pair_label(r.dataset, r.encoder), f"{r.change:+.4f}", _fmt_gap(0, r.ci_low, r.ci_high),
                _verdict(interval_holds(r.ci_low, r.ci_high))] for r in ch.itertuples()] if ch is not None else []
    return f"""## RQ3 variant: random rotation planes

The planes' second directions `w_i` drawn at random (Gaussian, orthonormalised against `U` only:
`relevance_planes(..., directions="random")`) instead of the leading query-covariance directions
outside the 90% query subspace; random start; angles 0°, 45° and 90°. A random direction is not
kept out of the leading query subspace, but in p = 384 or 768 dimensions eight of them carry about
8/p of the query energy ("w query energy" below), close to the leading construction's: the two
constructions probe the same kind of mismatch, and the comparison shows how much the figures depend
on the choice of `w_i`.

{_md_table(["dataset / encoder", "w query energy (random)", "w query energy (leading)"], energy_rows)}

![Figure 5, random planes]({fig_rel}/{name})

{_md_table(["dataset / encoder", "angle", "Dual − Shared", "95% over queries", "frozen",
            "leading planes: Dual − Shared", "leading planes: frozen"], rows)}

{_md_table(["dataset / encoder", "change 0° → 90°", "95% over queries", "rises?"], ch_rows) if ch_rows else ""}
"""


def _grid_markdown(grid: Any, fig_dir: Path, fig_rel: str, suffix: str, figures: list[Path], heading: str) -> str:
    g = grid_summary(grid)
    text = [heading]
    rc = rank_contrasts(grid)
    starts = _starts(g)
    for init in starts:
        gi = g[g["init"] == init]
        text.append(f"### {START_LABELS[init][0].upper()}{START_LABELS[init][1:]}\n")
        for angle in sorted(gi["angle"].unique(), reverse=True):
            name = f"rq3_figure6_{angle:g}deg{_start_tag(init)}{suffix}.png"
            plot_grid(gi, fig_dir / name, angle, START_LABELS[init])
            figures.append(fig_dir / name)
            text.append(f"![Figure 6 at {angle:g}°, {START_LABELS[init]}]({fig_rel}/{name})\n")
        if "cars_match" in gi:
            cm = cars_match_counts(gi)
            text.append(_md_table(["dataset / encoder", "angle", "cells", "CARS = winner (cells)",
                                   "CARS = winner (seeds)"],
                                  [[_pair_label(r.dataset, r.encoder), f"{r.angle:g}°", int(r.cells),
                                    int(r.cell_matches), f"{int(r.seed_matches)}/{int(r.seeds)}"]
                                   for r in cm.itertuples()]) + "\n")
        if not rc.empty and (rc["init"] == init).any():
            text.append("Rank 32 against rank 4 at 90°, paired over (n, seed) cells (95% t over cells):\n")
            text.append(_md_table(
                ["scope", "cells", "shared 4 → 32", "gain", "dual 4 → 32", "gain", "Dual − Shared change"],
                [["mean over pairs" if r.dataset == "pooled" else _pair_label(r.dataset, r.encoder), int(r.cells),
                  f"{r.shared_low:.4f} → {r.shared_high:.4f}",
                  _ci(r.shared_gain, r.shared_gain_low, r.shared_gain_high),
                  f"{r.dual_low:.4f} → {r.dual_high:.4f}", _ci(r.dual_gain, r.dual_gain_low, r.dual_gain_high),
                  _ci(r.advantage_change, r.advantage_change_low, r.advantage_change_high)]
                 for r in rc[rc["init"] == init].itertuples()]) + "\n")
        if init == starts[0]:
            has_cars = "cars_choice" in gi
            rows = [[_pair_label(r.dataset, r.encoder), f"{r.angle:g}°", int(r.rank), int(r.n_used),
                     f"{1e4 * r.diff_mean:+.1f}", int(r.seeds), f"{r.ndcg_shared:.4f}", f"{r.ndcg_dual:.4f}", r.winner]
                    + ([r.cars_choice, f"{int(r.cars_dual_seeds)}/{int(r.seeds)}", "yes" if r.cars_match else "no"]
                       if has_cars else [])
                    for r in gi.itertuples()]
            header = ["dataset / encoder", "angle", "rank", "n", "Dual − Shared (1e-4)", "seeds", "shared", "dual",
                      "winner"] + (["CARS", "CARS dual seeds", "CARS = winner"] if has_cars else [])
            text.append(_md_table(header, rows) + "\n")
    return "\n".join(text)


_KNOWN = ("rq3_rotation", "rq3_grid", "rq3_grid_closed_form", "rq3_rotation_random_planes")


def report_section(results: Mapping[str, Any], fig_dir: str | Path, fig_rel: str = "figures",
                   suffix: str = "") -> tuple[str, list[list[str]], list[Path]]:
    """Markdown, claim rows and figures for the RQ3 part of ``docs/reproduction.md``.

    Parameters
    ----------
    results : ``{"rq3_rotation": DataFrame, "rq3_grid": DataFrame}`` and optionally the
        variants ``"rq3_grid_closed_form"`` and ``"rq3_rotation_random_planes"``.
    fig_dir : folder the PNG figures are written to.
    fig_rel : how the markdown refers to ``fig_dir``.
    suffix : appended to the figure names (``"-quick"`` for the quick variant).

    Returns
    -------
    (markdown, claim rows ``[claim, paper, ours, verdict, figure]``, figure paths); each
    claim names its start and scope.
    """
    import pandas as pd

    fig_dir = Path(fig_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)
    unknown = sorted(set(results) - set(_KNOWN))
    if unknown:
        raise ValueError(f"results: unknown experiment(s) {unknown}; expected some of {list(_KNOWN)}")
    parts: list[str] = []
    claim_rows: list[list[str]] = []
    figures: list[Path] = []

    def add_claims(df: Any, study: str, fig_of: Any) -> None:
        for c in claims(df.assign(study=study)).itertuples():
            claim_rows.append([f"{c.claim} — {START_LABELS.get(c.start, c.start)}", c.paper, c.ours,
                               _verdict(c.holds), fig_of(c.start)])

    rot = results.get("rq3_rotation")
    if rot is not None:
        parts.append(_rotation_markdown(rot, fig_dir, fig_rel, suffix, figures))
        add_claims(rot, "rotation", lambda init: f"[rq3]({fig_rel}/rq3_figure5{_start_tag(init)}{suffix}.png)")
    planes = results.get("rq3_rotation_random_planes")
    if planes is not None:
        parts.append(_planes_markdown(planes, rot, fig_dir, fig_rel, suffix, figures))
    grid_parts = [results[k] for k in ("rq3_grid", "rq3_grid_closed_form") if results.get(k) is not None]
    if grid_parts:
        grid = pd.concat(grid_parts, ignore_index=True)
        parts.append(_grid_markdown(grid, fig_dir, fig_rel, suffix, figures,
                                    "## RQ3: rank × training-size grids with trained adapters (Figure 6)\n\n"
                                    "Learning rate 3e-4, checkpoint by validation; cells are means over paired "
                                    "seeds. CARS runs on each cell's (rotated) training triples; its majority "
                                    "choice over seeds is compared with the cell's winner (ties to Shared). "
                                    "SciFact's n = 1024 column is its full pool of 647. The table of every cell "
                                    "is given for the primary start; the variant's cells are in its CSV.\n"))
        add_claims(grid, "grid", lambda init: f"[rq3]({fig_rel}/rq3_figure6_90deg{_start_tag(init)}{suffix}.png)")
    if not parts:
        raise ValueError("results: none of rq3_rotation, rq3_grid or their variants given")
    return "\n".join(parts), claim_rows, figures


def write_results_page(results_dir: str | Path, docs_dir: str | Path = "docs",
                       names: Sequence[str] = _KNOWN) -> Path:
    """Write ``docs/results/rq3.md`` (sections, claim rows, wall times), the per-cell tables
    ``docs/results/<name>.csv`` (without the per-query columns) and the figures
    ``docs/figures/rq3_*.png`` from finished runs.

    Used when the other experiments' results are not at hand (``asymgeo reproduce report``
    rebuilds the whole of ``docs/reproduction.md``, RQ3 included, when they are).
    """
    import json

    from .._atomic import atomic_write_text
    from .runner import portable_command, read_results, results_path

    docs = Path(docs_dir)
    out_dir = docs / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    results, runs = {}, []
    for name in names:
        if not (results_path(results_dir, name) / "results.parquet").exists():
            continue
        df = read_results(results_dir, name)
        results[name.removesuffix("-quick")] = df
        keep = [c for c in df.columns if not c.startswith(("version_", "pq_")) and c not in ("data_dir", "cache_dir")]
        atomic_write_text(out_dir / f"{name}.csv", df[keep].to_csv(index=False))
        log = results_path(results_dir, name) / "runs.jsonl"
        for line in log.read_text().splitlines() if log.exists() else []:
            r = json.loads(line)
            if r.get("cells_run", 0) > 0:
                runs.append([name, r["started"][:16].replace("T", " "), str(r["cells_run"]),
                             f"{r['wall_seconds'] / 60:.1f} min", r.get("machine", ""),
                             f"`{portable_command(r.get('command', ''))}`"])
    if not results:
        raise FileNotFoundError(f"{results_dir}: no finished rq3_rotation or rq3_grid results")
    md, claim_rows, _ = report_section(results, docs / "figures", fig_rel="../figures")
    parts = [
        "# RQ3 with trained adapters: results on this machine\n",
        "Generated by `python -m asymgeo.experiments.rq3 results docs` from the sweep results; "
        "protocol and plane construction: [docs/rq3.md](../rq3.md). Per-cell tables: "
        + ", ".join(f"[{n}.csv]({n}.csv)" for n in names if (out_dir / f"{n}.csv").exists()) + ".\n",
        "## Claims\n",
        "Each claim is judged per dataset–encoder pair and, as a secondary line, over the pairs; a "
        "claim whose 95% interval contains zero reads *inconclusive*.\n",
        _md_table(["claim", "paper", "ours", "holds?", "figure"], claim_rows),
        "\n## Runs and wall times\n",
        _md_table(["experiment", "started (UTC)", "cells run", "wall time", "machine", "command"], runs),
        "\n" + md,
    ]
    page = out_dir / "rq3.md"
    atomic_write_text(page, "\n".join(parts) + "\n")
    return page


if __name__ == "__main__":  # pragma: no cover - thin command-line entry
    import sys

    print(write_results_page(sys.argv[1] if len(sys.argv) > 1 else "results",
                             sys.argv[2] if len(sys.argv) > 2 else "docs"))
