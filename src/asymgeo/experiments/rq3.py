r"""RQ3: query rotation and rank x training-size grids with trained adapters (Figures 5 and 6).

Paper, Section 5.3 and Appendix F.1 ("Full-corpus query rotation", "Rank-by-data
retrieval").  One cell = (dataset, encoder, angle, rank, n, seed_index); both families
(shared and dual) are trained and tested inside the cell on paired data and seeds.

Data (per dataset and encoder, the same in every cell)
    * splits from :func:`asymgeo.data.adaptation_split`: NFCorpus official
      train/dev/test; SciFact the 647/162/300 adaptation split (its whole training pool
      is 647 queries, so "n = 1024" on SciFact is the full pool of 647 — recorded as
      ``n_used`` and ``n_capped``);
    * the rotation planes (:func:`asymgeo.rotation.relevance_planes`) from the relevance
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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

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
    "rotation_summary",
]

#: Test metrics: the paper's binary NDCG@10 and trec_eval's graded one.
METRICS = ("ndcg@10", "ndcg_graded@10")

#: Paper, Section 5.3: mean Dual - Shared NDCG@10 over five datasets (BGE-base, GTE-base).
PAPER_ROTATION = {"gap_0": 0.0032, "gap_90": 0.0146, "fold": 4.6, "datasets_increasing": "5 of 5"}
#: Paper, Section 5.3 / Figure 6: cell wins and rank-4 vs rank-32 mean absolute NDCG@10.
PAPER_GRID = {
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
        raise ValueError(f"learning_rates: expected positive numbers, got {value!r}")
    if isinstance(value, (int, float)):
        items: list[Any] = [value]
    elif isinstance(value, str):
        items = [v for v in value.replace(",", " ").split() if v]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise ValueError(f"learning_rates: expected a number or a string of numbers, got {value!r}")
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
    table: Any               # asymgeo.metrics.RelevanceTable over the corpus rows


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
    from ..metrics import RelevanceTable

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
    from ..geometry import relevance_moment
    from ..rotation import relevance_planes

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
    from ..metrics import evaluate_indices
    from ..search import exact_search

    res = exact_search(Q, base.corpus, 10, operator=operator, backend="numpy", device="cpu")
    return evaluate_indices(res.indices, table, list(METRICS))


def _set_torch_threads() -> None:
    try:
        import torch
    except ImportError as exc:
        raise ImportError("RQ3 trains adapters with PyTorch: pip install 'asymgeo[train]'") from exc
    torch.set_num_threads(1)


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
    from ..rotation import rotate_queries

    theta = float(np.deg2rad(angle_deg))
    idx = np.random.default_rng(subset_seed).permutation(n_pool)[:n_used]
    X = rotate_queries(base.X[idx], base.U, base.W, theta).astype(np.float32)
    hard, _ = mine_hard_negatives(X, base.corpus, [base.labelled[i] for i in idx], base.hard_negative_rows.shape[1])
    pos = base.pos_rows[idx]
    Q_val = rotate_queries(base.validation.Q, base.U, base.W, theta).astype(np.float32)
    Q_test = rotate_queries(base.test.Q, base.U, base.W, theta).astype(np.float32)

    _set_torch_threads()
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
            f"lr_{family}": float(ad.learning_rate_),
            f"best_epoch_{family}": int(ad.best_epoch_),
            f"val_ndcg_{family}": float(ad.validation_ndcg_),
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
        from ..selection import cars_score

        cars = cars_score(X, base.corpus[pos], base.corpus[hard[:, 0]], rank, n_splits=splits, seed=cars_seed,
                          n_jobs=1)
        out.update(cars_choice=cars.choice, cars_score=float(cars.score), cars_se=float(cars.standard_error),
                   cars_seed=cars_seed, cars_match=cars.choice == out["winner"])
    out["status"] = "ok"
    return out
