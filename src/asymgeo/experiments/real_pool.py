"""The labelled pool of the real-embedding experiments (RQ4, Table 1, RQ2 on real data).

A pool is one dataset's labelled official training queries (``qrels/<pool>.tsv``; SciFact
809, NFCorpus 2,590) turned into triples by :func:`asymgeo.data.load_triples` (first labelled
positive, highest-ranked unlabelled document as the negative).  Mining happens once per
worker process (:func:`pool_triples` is cached).  :func:`fold_design` applies the Table 1
protocol: ids sorted and permuted with seed 20260923 into balanced held-out folds; the
other folds, permuted with seed ``20260924 + fold``, give nested training prefixes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..data.splits import FOLD_SEED, NESTED_SIZES, fold_seed, fold_split, nested_subsets, query_folds
from ..kernels.operator_risk import centre

__all__ = ["Pool", "pool_triples", "FoldDesign", "fold_design", "fold_arrays", "CENTRINGS"]

#: ``raw``: the paper's protocol; ``centred``: queries and ``Y+ - Y-`` centred with the
#: fold's training-pool means (the rank-1 mean term left out of both geometries).
CENTRINGS = ("raw", "centred")


@dataclass(frozen=True)
class Pool:
    """Triples of a dataset's labelled training pool: ``X`` and ``D = Y_pos - Y_neg`` (float64)."""

    dataset: str
    encoder: str
    ids: tuple[str, ...]
    X: np.ndarray
    D: np.ndarray

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def p(self) -> int:
        return int(self.X.shape[1])


@functools.lru_cache(maxsize=4)
def pool_triples(dataset: str, encoder: str, data_dir: str | None, cache_dir: str | None,
                 pool: str = "train") -> Pool:
    """Triples of every labelled query of ``qrels/<pool>.tsv`` (cached per process)."""
    from ..data import load_beir, load_triples

    ds = load_beir(dataset, data_dir=data_dir)
    if pool not in ds.splits:
        raise ValueError(f"pool: {ds.name} has no qrels/{pool}.tsv (splits: {', '.join(ds.splits)})")
    tr = load_triples(ds, encoder, ds.labelled_query_ids(pool), cache_dir=cache_dir)
    X = np.asarray(tr.X, dtype=np.float64)
    D = np.asarray(tr.Y_pos, dtype=np.float64) - np.asarray(tr.Y_neg, dtype=np.float64)
    X.setflags(write=False)
    D.setflags(write=False)
    return Pool(dataset=tr.dataset, encoder=tr.encoder, ids=tuple(tr.query_ids), X=X, D=D)


@dataclass(frozen=True)
class FoldDesign:
    """One held-out fold: training rows in nested order (the largest nested sample), all
    training-pool rows, held-out rows, nested sizes."""

    fold: int
    train_order: np.ndarray
    test_rows: np.ndarray
    sizes: tuple[int, ...]
    pool_rows: np.ndarray


def fold_design(ids: tuple[str, ...] | list[str], fold: int, folds: int = 5,
                sizes: tuple[int, ...] = NESTED_SIZES) -> FoldDesign:
    """Rows of fold ``fold`` (Table 1 protocol, seeds 20260923 and 20260924 + fold)."""
    row_of = {q: i for i, q in enumerate(ids)}
    pool, held = fold_split(query_folds(list(ids), folds, FOLD_SEED), fold)
    nested = nested_subsets(pool, sizes, seed=fold_seed(fold))
    order = np.asarray([row_of[q] for q in nested[max(nested)]], dtype=np.int64)
    return FoldDesign(fold=int(fold), train_order=order,
                      test_rows=np.asarray([row_of[q] for q in held], dtype=np.int64),
                      sizes=tuple(sorted(nested)),
                      pool_rows=np.asarray([row_of[q] for q in pool], dtype=np.int64))


def fold_arrays(pool: Pool, design: FoldDesign, centring: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, D)`` of the pool, raw or centred with the fold's training-pool means."""
    if centring not in CENTRINGS:
        raise ValueError(f"centring: expected one of {CENTRINGS}, got {centring!r}")
    if centring == "raw":
        return pool.X, pool.D
    tr = design.pool_rows
    return centre(pool.X, pool.D, pool.X[tr].mean(axis=0), pool.D[tr].mean(axis=0))
