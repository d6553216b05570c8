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

from ._markdown import md_table as _md_table
from ._markdown import verdict
from .runner import cell_seed

logger = logging.getLogger(__name__)

__all__ = [
    "METRICS",
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
               query_energy: float, split_seed: int, n_negatives: int) -> _Base:
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
    U, W = relevance_planes(C, tr.X, n_planes, query_energy=query_energy)
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
                      int(config.get("split_seed", 20260809)), int(config.get("n_negatives", 8)))
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
    for family in ("shared", "dual"):
        ad = make_adapter(geometry=family, **common)
        ad.fit(X, pos, base.corpus, hard_negative_rows=hard, relevant_rows=[base.relevant[i] for i in idx],
               validation_queries=Q_val, validation_relevance=base.validation.table)
        ev = _evaluate(Q_test, base, base.test.table, np.asarray(ad.operator_, dtype=np.float64))
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
    )
    splits = int(config.get("cars_splits", 20))
    if splits > 0 and n_used >= 4:
        from ..kernels.selection import cars_score

        cars = cars_score(X, base.corpus[pos], base.corpus[hard[:, 0]], rank, n_splits=splits, seed=cars_seed,
                          n_jobs=1)
        out.update(cars_choice=cars.choice, cars_score=float(cars.score), cars_se=float(cars.standard_error),
                   cars_seed=cars_seed, cars_match=cars.choice == out["winner"])
    out["status"] = "ok"
    return out


# --------------------------------------------------------------------------- summaries
_ROTATION_COLS = ("dataset", "encoder", "angle", "seed_index", "ndcg_shared", "ndcg_dual", "ndcg_diff")
_GRID_COLS = (*_ROTATION_COLS, "rank", "n_used")


def _finished(df: Any, columns: Sequence[str], what: str) -> Any:
    """Rows with ``status == "ok"`` (all rows when there is no status column), checked."""
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
    return df


def _t_half_width(sd: Any, count: Any) -> Any:
    from scipy import stats

    count = np.asarray(count, dtype=float)
    q = np.where(count > 1, stats.t.ppf(0.975, np.maximum(count - 1, 1)), np.nan)
    return q * np.asarray(sd, dtype=float) / np.sqrt(count)


def rotation_summary(df: Any) -> Any:
    """Per (dataset, encoder, angle): mean Dual − Shared test NDCG@10 over paired seeds.

    Columns: ``diff_mean, diff_sd, seeds, ci_low, ci_high`` (95% t interval over seeds),
    ``graded_diff_mean`` (when recorded), ``ndcg_shared, ndcg_dual`` and ``ndcg_frozen``
    means.  Raises ``ValueError`` on a table without the RQ3 columns or finished cells.
    """
    d = _finished(df, _ROTATION_COLS, "rotation results")
    keys = ["dataset", "encoder", "angle"]
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
    return out


def rotation_means(summary: Any) -> Any:
    """Per angle: mean over dataset–encoder pairs of the seed-mean gap (the paper's Figure 5
    average) with the spread across pairs (``pairs_sd``, ``pairs_min``, ``pairs_max``)."""
    g = summary.groupby("angle")["diff_mean"]
    return g.agg(mean="mean", pairs_sd="std", pairs_min="min", pairs_max="max", pairs="size").reset_index()


def grid_summary(df: Any) -> Any:
    """Per (dataset, encoder, angle, rank, n_used): the mean gap over paired seeds, the
    winner (``"dual"`` iff the mean gap is > 0; ties to shared), and CARS beside it.

    CARS columns (when recorded): ``cars_dual_seeds`` (seeds whose training triples
    CARS sent to dual), ``cars_choice`` (majority over seeds; ties to shared),
    ``cars_match`` (majority choice equals the cell's winner) and ``cars_seed_matches``
    (seeds whose CARS choice equals that seed's own winner).
    """
    d = _finished(df, _GRID_COLS, "grid results")
    keys = ["dataset", "encoder", "angle", "rank", "n_used"]
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
    """Per (dataset, encoder, angle) of a :func:`grid_summary`: cells, cells where CARS'
    majority choice matched the winner, and seed-level matches out of all seeds."""
    if "cars_match" not in summary:
        raise ValueError("summary: no CARS columns (the cells ran with cars_splits = 0)")
    g = summary.groupby(["dataset", "encoder", "angle"])
    return g.agg(cells=("cars_match", "size"), cell_matches=("cars_match", "sum"),
                 seed_matches=("cars_seed_matches", "sum"), seeds=("seeds", "sum")).reset_index()


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


def claims(df: Any) -> Any:
    """The paper's RQ3 claims against ours: a DataFrame with ``claim, paper, ours, holds``.

    ``df`` holds RQ3 cell records (either study or both, told apart by the ``study``
    column).  ``holds`` is True/False, or None where our grid cannot test the claim.

    Rotation (Section 5.3): the mean gap rises from 0° to 90° (paper 0.0032 → 0.0146,
    over five datasets); every dataset's mean rises; the 90° gap is positive.
    Grid at 90° (Figure 6): Shared wins most cells at n = 32 (paper 13/16); Dual wins
    every cell at n = 1024 and 2048 (paper 32/32); rank 32 has higher absolute NDCG@10
    than rank 4 for both families (paper 0.7242 → 0.7257 shared, 0.7282 → 0.7289 dual).
    """
    import pandas as pd

    rot, grid = _split_studies(df)
    rows: list[dict[str, Any]] = []
    if rot is not None:
        s = rotation_summary(rot)
        m = rotation_means(s).set_index("angle")
        angles = sorted(m.index)
        lo, hi = angles[0], angles[-1]
        if lo == 0 and hi == 90:
            a, b = float(m.loc[0, "mean"]), float(m.loc[90, "mean"])
            ratio = f", {b / a:.1f}x" if a > 0 else ""
            rows.append({"claim": "RQ3 rotation: mean Dual − Shared NDCG@10 rises from 0° to 90°",
                             "paper": f"{PAPER_ROTATION['gap_0']:.4f} → {PAPER_ROTATION['gap_90']:.4f} "
                                   f"({PAPER_ROTATION['fold']}x, 5 datasets)",
                             "ours": f"{a:+.4f} → {b:+.4f}{ratio} ({int(m.loc[90, 'pairs'])} dataset–encoder pairs)",
                             "holds": b > a})
            per_ds = s.groupby(["dataset", "angle"])["diff_mean"].mean().unstack("angle")
            up = int((per_ds[90] > per_ds[0]).sum())
            rows.append({"claim": "RQ3 rotation: every dataset's mean gap increases from 0° to 90°",
                             "paper": f"{PAPER_ROTATION['datasets_increasing']} datasets",
                             "ours": f"{up} of {len(per_ds)} datasets", "holds": up == len(per_ds)})
            at90 = rot[rot["angle"] == 90]["ndcg_diff"]
            se = float(at90.std(ddof=1) / np.sqrt(len(at90))) if len(at90) > 1 else float("nan")
            rows.append({"claim": "RQ3 rotation: Dual beats Shared at 90°",
                             "paper": f"+{PAPER_ROTATION['gap_90']:.4f}",
                             "ours": f"{float(at90.mean()):+.4f} (SE {se:.4f} over {len(at90)} pair-seeds)",
                             "holds": float(at90.mean()) > 0})
        else:
            rows.append({"claim": "RQ3 rotation: mean gap rises from 0° to 90°",
                             "paper": f"{PAPER_ROTATION['gap_0']:.4f} → {PAPER_ROTATION['gap_90']:.4f}",
                             "ours": f"angles {angles[0]}°–{angles[-1]}° only", "holds": None})
    if grid is not None:
        g = grid_summary(grid)
        g90 = g[g["angle"] == 90]
        if g90.empty:
            rows.append({"claim": "RQ3 grid at 90°", "paper": "Figure 6", "ours": "no 90° cells", "holds": None})
        else:
            n32 = g90[g90["n_used"] == 32]
            sw = int((n32["winner"] == "shared").sum())
            p_sw, p_n = PAPER_GRID["shared_wins_n32"]
            rows.append({"claim": "RQ3 grid (90°): Shared wins most cells at n = 32",
                             "paper": f"{p_sw} of {p_n} cells",
                             "ours": f"{sw} of {len(n32)} cells" if len(n32) else "n = 32 not in grid",
                             "holds": (sw > len(n32) / 2) if len(n32) else None})
            big = g90[g90["n_used"].isin([1024, 2048])]
            dw = int((big["winner"] == "dual").sum())
            p_dw, p_dn = PAPER_GRID["dual_wins_n1024_2048"]
            rows.append({"claim": "RQ3 grid (90°): Dual wins every cell at n = 1024 and 2048",
                             "paper": f"{p_dw} of {p_dn} cells",
                             "ours": f"{dw} of {len(big)} cells" if len(big) else "n ≥ 1024 not in grid",
                             "holds": (dw == len(big)) if len(big) else None})
            ranks = g90.groupby("rank")[["ndcg_shared", "ndcg_dual"]].mean()
            if 4 in ranks.index and 32 in ranks.index:
                s4, s32 = float(ranks.loc[4, "ndcg_shared"]), float(ranks.loc[32, "ndcg_shared"])
                d4, d32 = float(ranks.loc[4, "ndcg_dual"]), float(ranks.loc[32, "ndcg_dual"])
                ps, pd_ = PAPER_GRID["rank4_rank32_shared"], PAPER_GRID["rank4_rank32_dual"]
                rows.append({"claim": "RQ3 grid (90°): rank 32 above rank 4 in mean NDCG@10, both families",
                                 "paper": f"shared {ps[0]:.4f} → {ps[1]:.4f}, dual {pd_[0]:.4f} → {pd_[1]:.4f}",
                                 "ours": f"shared {s4:.4f} → {s32:.4f}, dual {d4:.4f} → {d32:.4f}",
                                 "holds": s32 > s4 and d32 > d4})
    if not rows:
        raise ValueError("df: no RQ3 rows")
    return pd.DataFrame(rows, columns=["claim", "paper", "ours", "holds"])


# --------------------------------------------------------------------------- figures
def _pair_label(dataset: str, encoder: str) -> str:
    return f"{dataset} / {encoder.replace('all-', '').replace('-v2', '')}"


def plot_rotation(summary: Any, path: str | Path) -> None:
    """Figure 5: bars of mean Dual − Shared NDCG@10 per angle, one bar per dataset–encoder
    pair (error bars: 95% t interval over seeds), and the mean over pairs as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = list(dict.fromkeys(zip(summary["dataset"], summary["encoder"])))
    angles = sorted(summary["angle"].unique())
    width = 0.8 / max(1, len(pairs))
    fig, ax = plt.subplots(figsize=(9, 4))
    x = np.arange(len(angles))
    for j, (ds, enc) in enumerate(pairs):
        sub = summary[(summary["dataset"] == ds) & (summary["encoder"] == enc)].set_index("angle").reindex(angles)
        err = np.vstack([sub["diff_mean"] - sub["ci_low"], sub["ci_high"] - sub["diff_mean"]])
        ax.bar(x - 0.4 + width * (j + 0.5), sub["diff_mean"], width, yerr=np.nan_to_num(err), capsize=2,
               label=_pair_label(ds, enc))
    means = rotation_means(summary).set_index("angle").reindex(angles)["mean"]
    ax.plot(x, means, "k-o", ms=4, label="mean over pairs")
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks(x, [f"{a:g}°" for a in angles])
    ax.set_xlabel("query rotation angle")
    ax.set_ylabel("Dual − Shared test NDCG@10")
    ax.set_title("Figure 5: full-corpus Dual − Shared under query rotation (95% t over seeds)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def plot_grid(summary: Any, path: str | Path, angle: float) -> None:
    """Figure 6: one heatmap per dataset–encoder pair of mean Dual − Shared NDCG@10 in
    units of 1e-4 over rank x n (red favours Dual, blue Shared); a cell's CARS majority
    choice is marked "D"/"S", underlined by "*" where it matched the winner."""
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
    fig.suptitle("Figure 6: Dual − Shared test NDCG@10 (x1e-4); CARS majority D/S, * = matched winner",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


# --------------------------------------------------------------------------- report
def _verdict(ok: Any) -> str:
    """``**yes**`` / ``**no**``; ``n/a`` for None or NaN (a claim without the data to judge it)."""
    return verdict(None if ok is None or (isinstance(ok, float) and np.isnan(ok)) else bool(ok))


def report_section(results: Mapping[str, Any], fig_dir: str | Path, fig_rel: str = "figures",
                   suffix: str = "") -> tuple[str, list[list[str]], list[Path]]:
    """Markdown, claim rows and figures for the RQ3 part of ``docs/reproduction.md``.

    Parameters
    ----------
    results : ``{"rq3_rotation": DataFrame, "rq3_grid": DataFrame}`` (either may be absent).
    fig_dir : folder the PNG figures are written to.
    fig_rel : how the markdown refers to ``fig_dir``.
    suffix : appended to the figure names (``"-quick"`` for the quick variant).

    Returns
    -------
    (markdown, claim rows ``[claim, paper, ours, verdict, figure]``, figure paths)
    """
    fig_dir = Path(fig_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)
    unknown = sorted(set(results) - {"rq3_rotation", "rq3_grid"})
    if unknown:
        raise ValueError(f"results: unknown experiment(s) {unknown}; expected rq3_rotation and/or rq3_grid")
    parts, claim_rows, figures = [], [], []
    rot = results.get("rq3_rotation")
    if rot is not None:
        s = rotation_summary(rot)
        name = f"rq3_figure5{suffix}.png"
        plot_rotation(s, fig_dir / name)
        figures.append(fig_dir / name)
        m = rotation_means(s)
        rows = [[_pair_label(r.dataset, r.encoder), f"{r.angle:g}°", f"{r.diff_mean:+.4f}",
                 f"[{r.ci_low:+.4f}, {r.ci_high:+.4f}]", int(r.seeds), f"{r.ndcg_shared:.4f}", f"{r.ndcg_dual:.4f}",
                 f"{getattr(r, 'ndcg_frozen', float('nan')):.4f}",
                 f"{getattr(r, 'graded_diff_mean', float('nan')):+.4f}"]
                for r in s.itertuples()]
        mrows = [[f"{r.angle:g}°", f"{r.mean:+.4f}", f"{r.pairs_sd:.4f}" if r.pairs > 1 else "–",
                  f"{r.pairs_min:+.4f} … {r.pairs_max:+.4f}", int(r.pairs)] for r in m.itertuples()]
        n_info = ", ".join(sorted({f"{d}: n = {int(n)}" for d, n in zip(rot["dataset"], rot["n_used"])
                                   if isinstance(n, (int, float, np.integer, np.floating)) and np.isfinite(n)}))
        parts.append(f"""## RQ3: query rotation with trained adapters (Figure 5)

![Figure 5]({fig_rel}/{name})

Rank-16 augmented shared and dual adapters trained on the same rotated training queries with
paired seeds ({n_info}; SciFact's whole adaptation pool is 647 queries); learning rate and
checkpoint by validation NDCG@10; test NDCG@10 by exact full-corpus search. Queries are rotated
in eight planes span(u_i, w_i) of the training relevance moment (see docs/rq3.md); documents,
labels and splits are unchanged. Mean over dataset–encoder pairs (spread across pairs):

{_md_table(["angle", "mean Dual − Shared", "sd over pairs", "range", "pairs"], mrows)}

Per dataset and encoder (95% t interval over seeds; "frozen": the encoder without adapter on the
rotated queries; "graded": Dual − Shared in trec_eval's graded NDCG@10):

{_md_table(["dataset / encoder", "angle", "Dual − Shared", "95% t", "seeds", "shared", "dual", "frozen",
            "graded gap"], rows)}
""")
        for c in claims(rot.assign(study="rotation")).itertuples():
            claim_rows.append([c.claim, c.paper, c.ours, _verdict(c.holds), f"[rq3]({fig_rel}/{name})"])
    grid = results.get("rq3_grid")
    if grid is not None:
        g = grid_summary(grid)
        text = ["## RQ3: rank × training-size grids with trained adapters (Figure 6)\n"]
        for angle in sorted(g["angle"].unique(), reverse=True):
            name = f"rq3_figure6_{angle:g}deg{suffix}.png"
            plot_grid(g, fig_dir / name, angle)
            figures.append(fig_dir / name)
            text.append(f"![Figure 6 at {angle:g}°]({fig_rel}/{name})\n")
        has_cars = "cars_choice" in g
        rows = [[_pair_label(r.dataset, r.encoder), f"{r.angle:g}°", int(r.rank), int(r.n_used),
                 f"{1e4 * r.diff_mean:+.1f}", int(r.seeds), f"{r.ndcg_shared:.4f}", f"{r.ndcg_dual:.4f}", r.winner]
                + ([r.cars_choice, f"{int(r.cars_dual_seeds)}/{int(r.seeds)}", "yes" if r.cars_match else "no"]
                   if has_cars else [])
                for r in g.itertuples()]
        header = ["dataset / encoder", "angle", "rank", "n", "Dual − Shared (1e-4)", "seeds", "shared", "dual",
                  "winner"] + (["CARS", "CARS dual seeds", "CARS = winner"] if has_cars else [])
        text.append("Learning rate 3e-4, checkpoint by validation; cells are means over paired seeds. CARS runs on "
                    "each cell's (rotated) training triples; its majority choice over seeds is compared with the "
                    "cell's winner (ties to Shared). SciFact's n = 1024 column is its full pool of 647.\n")
        if has_cars:
            cm = cars_match_counts(g)
            text.append(_md_table(["dataset / encoder", "angle", "cells", "CARS = winner (cells)",
                                   "CARS = winner (seeds)"],
                                  [[_pair_label(r.dataset, r.encoder), f"{r.angle:g}°", int(r.cells),
                                    int(r.cell_matches), f"{int(r.seed_matches)}/{int(r.seeds)}"]
                                   for r in cm.itertuples()]) + "\n")
        text.append(_md_table(header, rows) + "\n")
        parts.append("\n".join(text))
        fig_link = f"[rq3]({fig_rel}/rq3_figure6_90deg{suffix}.png)"
        for c in claims(grid.assign(study="grid")).itertuples():
            claim_rows.append([c.claim, c.paper, c.ours, _verdict(c.holds), fig_link])
    if not parts:
        raise ValueError("results: neither rq3_rotation nor rq3_grid given")
    return "\n".join(parts), claim_rows, figures


def write_results_page(results_dir: str | Path, docs_dir: str | Path = "docs",
                       names: Sequence[str] = ("rq3_rotation", "rq3_grid")) -> Path:
    """Write ``docs/results/rq3.md`` (sections, claim rows, wall times), the per-cell tables
    ``docs/results/<name>.csv`` and the figures ``docs/figures/rq3_*.png`` from finished runs.

    Used when the other experiments' results are not at hand (``asymgeo reproduce report``
    rebuilds the whole of ``docs/reproduction.md``, RQ3 included, when they are).
    """
    import json

    from .._atomic import atomic_write_text
    from .runner import read_results, results_path

    docs = Path(docs_dir)
    out_dir = docs / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    results, runs = {}, []
    for name in names:
        if not (results_path(results_dir, name) / "results.parquet").exists():
            continue
        df = read_results(results_dir, name)
        results[name.removesuffix("-quick")] = df
        keep = [c for c in df.columns if not c.startswith("version_") and c not in ("data_dir", "cache_dir")]
        atomic_write_text(out_dir / f"{name}.csv", df[keep].to_csv(index=False))
        log = results_path(results_dir, name) / "runs.jsonl"
        for line in log.read_text().splitlines() if log.exists() else []:
            r = json.loads(line)
            if r.get("cells_run", 0) > 0:
                runs.append([name, r["started"][:16].replace("T", " "), str(r["cells_run"]),
                             f"{r['wall_seconds'] / 60:.1f} min", r.get("machine", ""), f"`{r.get('command', '')}`"])
    if not results:
        raise FileNotFoundError(f"{results_dir}: no finished rq3_rotation or rq3_grid results")
    md, claim_rows, _ = report_section(results, docs / "figures", fig_rel="../figures")
    parts = [
        "# RQ3 with trained adapters: results on this machine\n",
        "Generated by `python -m asymgeo.experiments.rq3 RESULTS_DIR` from the sweep results; "
        "protocol and plane construction: [docs/rq3.md](../rq3.md). Per-cell tables: "
        + ", ".join(f"[{n}.csv]({n}.csv)" for n in names if (out_dir / f"{n}.csv").exists()) + ".\n",
        "## Claims\n",
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
