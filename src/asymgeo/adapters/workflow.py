"""Dataset-level adapter workflows behind ``asymgeo fit`` and ``asymgeo evaluate --adapter``.

Glue between the data layer (splits, triples, the embedding cache), the adapter and
exact search: everything here takes a dataset and an encoder name and returns plain
results; the CLI only prints them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .adapter import Adapter

__all__ = ["AdaptationData", "load_adaptation_data", "FitReport", "fit_adapter", "evaluate_adapter",
           "adapter_seen_queries", "ndcg_at_10"]


@dataclass
class AdaptationData:
    """Frozen embeddings of one dataset, ready for adapter training and evaluation.

    ``triples`` are the training triples (adaptation train split, ``k`` hard negatives);
    ``corpus`` the float32 document embeddings; ``V``/``validation`` and ``T``/``test``
    the validation and test query embeddings with their :class:`RelevanceTable`;
    ``relevant`` the corpus rows labelled relevant for each training query.
    """

    dataset: str
    encoder: str
    triples: Any
    corpus: np.ndarray
    V: np.ndarray
    validation: Any
    T: np.ndarray
    test: Any
    relevant: list[set[int]] = field(repr=False)
    split: dict[str, Any] = field(default_factory=dict)


def _num(x: float | None) -> float:
    return float("nan") if x is None else float(x)


def load_adaptation_data(dataset: Any, encoder: str, *, data_dir: str | os.PathLike | None = None,
                         cache_dir: str | os.PathLike | None = None, k: int = 8) -> AdaptationData:
    """Load the adaptation split (:func:`asymgeo.data.adaptation_split`) of ``dataset`` from
    the embedding cache of ``encoder``."""
    from ..data import adaptation_split, adaptation_split_source, load_beir, load_embeddings, load_triples
    from ..retrieval.metrics import RelevanceTable

    ds = load_beir(dataset, data_dir=data_dir)
    emb = load_embeddings(ds, encoder, cache_dir=cache_dir)
    tr = load_triples(ds, encoder, "train", cache=emb, k=k)
    split = adaptation_split(ds)
    qrels = ds.all_qrels()
    corpus = np.asarray(emb.corpus, dtype=np.float32)

    def part(name: str) -> tuple[np.ndarray, Any]:
        ids = [q for q in split[name] if q in qrels]
        if not ids:
            raise ValueError(f"{ds.name}: the {name} split has no judged queries")
        Q = np.asarray(emb.queries[emb.query_rows(ids)], dtype=np.float32)
        return Q, RelevanceTable({q: qrels[q] for q in ids}, ids, emb.corpus_ids, unknown_docs="ignore")

    V, vt = part("validation")
    T, tt = part("test")
    relevant = [set(emb.corpus_rows([d for d in qrels[q] if emb.has_corpus_id(d)]).tolist()) for q in tr.query_ids]
    return AdaptationData(ds.name, emb.path.name, tr, corpus, V, vt, T, tt, relevant,
                          split=adaptation_split_source(ds))


def ndcg_at_10(queries: np.ndarray, table: Any, corpus: np.ndarray, operator: np.ndarray | None = None) -> float:
    """Mean NDCG@10 (Appendix F, binary) by exact full-corpus search, optionally through ``operator``."""
    from ..retrieval.metrics import evaluate_indices
    from ..retrieval.search import exact_search

    res = exact_search(queries, corpus, min(10, corpus.shape[0]), operator=operator)
    return float(evaluate_indices(res.indices, table, ["ndcg@10"]).mean["ndcg@10"])


@dataclass
class FitReport:
    """Outcome of :func:`fit_adapter`: the adapter, its closed-form baseline and the metrics table."""

    adapter: Adapter
    baseline: Adapter
    metrics: dict[str, Any]
    n_train: int
    dataset: str
    encoder: str
    versions: dict[str, str] = field(default_factory=dict)
    split: dict[str, Any] = field(default_factory=dict)


def fit_adapter(
    dataset: Any,
    encoder: str,
    *,
    geometry: str = "shared",
    rank: int = 16,
    form: str = "augmented",
    init: str = "closed_form",
    n_train: int | None = None,
    seed: int = 0,
    learning_rates: Sequence[float] = (3e-4, 1e-3, 3e-3),
    epochs: int = 30,
    early_stopping: int | None = None,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    device: str | None = None,
    progress: bool = False,
) -> FitReport:
    """Train an adapter with the paper's protocol on a dataset's adaptation split.

    ``n_train`` takes a seeded prefix (``seed``) of the training queries (all by default).
    Returns the trained adapter, the closed-form baseline of the same geometry and the
    validation / test NDCG@10 of frozen, baseline and trained.
    """
    from ..data import nested_subsets
    from .baseline import closed_form_adapter

    d = load_adaptation_data(dataset, encoder, data_dir=data_dir, cache_dir=cache_dir)
    tr = d.triples
    relevant = d.relevant
    if n_train is not None:
        if isinstance(n_train, bool) or not isinstance(n_train, (int, np.integer)) or n_train < 1:
            raise ValueError(f"n_train: expected a positive integer, got {n_train!r}")
        if n_train > len(tr):
            raise ValueError(f"n_train: {n_train} exceeds the {len(tr)} training queries of {d.dataset}")
        ids = nested_subsets(tr.query_ids, sizes=[int(n_train)], seed=int(seed))[int(n_train)]
        where = {q: i for i, q in enumerate(tr.query_ids)}
        relevant = [relevant[where[q]] for q in ids]
        tr = tr.subset(ids)
    ad = Adapter(geometry=geometry, rank=rank, form=form, init=init, learning_rates=tuple(learning_rates),
                 epochs=epochs, early_stopping=early_stopping, seed=seed, device=device, progress=progress)
    ad.fit(tr.X, tr.pos_rows, d.corpus, hard_negative_rows=tr.hard_negative_rows, relevant_rows=relevant,
           validation_queries=d.V, validation_relevance=d.validation)
    base = closed_form_adapter(tr.X, tr.pos_rows, d.corpus, geometry=ad.geometry_, rank=rank,
                               hard_negative_rows=tr.hard_negative_rows, validation_queries=d.V,
                               validation_relevance=d.validation, device=device)
    metrics = {
        "frozen": {"validation_ndcg@10": ndcg_at_10(d.V, d.validation, d.corpus),
                   "test_ndcg@10": ndcg_at_10(d.T, d.test, d.corpus)},
        "closed_form": {"validation_ndcg@10": _num(base.validation_ndcg_),
                        "test_ndcg@10": ndcg_at_10(d.T, d.test, d.corpus, base.operator_),
                        "c": _num(base.init_scale_)},
        "trained": {"validation_ndcg@10": ndcg_at_10(d.V, d.validation, d.corpus, ad.operator_),
                    "test_ndcg@10": ndcg_at_10(d.T, d.test, d.corpus, ad.operator_),
                    "learning_rate": ad.learning_rate_, "best_epoch": ad.best_epoch_},
        "n_train": len(tr), "n_validation": len(d.validation), "n_test": len(d.test),
        "geometry": ad.geometry_, "form": form, "rank": rank, "seed": seed,
    }
    if ad.selection_ is not None:
        metrics["cars"] = {"choice": ad.selection_.choice, "score": ad.selection_.score,
                           "standard_error": ad.selection_.standard_error}
    import torch

    from .._runtime import package_versions

    versions = {**package_versions(), "torch": torch.__version__}
    return FitReport(ad, base, metrics, len(tr), d.dataset, d.encoder, versions, split=d.split)


def adapter_seen_queries(adapter: Adapter, dataset: Any, *, data_dir: str | os.PathLike | None = None) -> set[str]:
    """Query ids of ``dataset`` that trained or validated ``adapter`` (its adaptation split).

    Known only when the adapter records the dataset it was fitted on (``adapter.json``'s
    ``dataset``) and that is ``dataset``: then the adaptation split is rebuilt with the seed
    recorded at fit time (``extra.split.seed``, default the split's default seed) and its train
    and validation ids are returned.  Otherwise the empty set.
    """
    from ..data import DEFAULT_SPLIT_SEED, adaptation_split, load_beir

    ds = load_beir(dataset, data_dir=data_dir)
    meta = getattr(adapter, "metadata_", None) or {}
    if meta.get("dataset") != ds.name:
        return set()
    seed = ((meta.get("extra") or {}).get("split") or {}).get("seed", DEFAULT_SPLIT_SEED)
    parts = adaptation_split(ds, int(seed))
    return set(parts["train"]) | set(parts["validation"])


def evaluate_adapter(dataset: Any, encoder: str, adapter_dir: str | os.PathLike, *, split: str = "test",
                     k: int = 10, data_dir: str | os.PathLike | None = None,
                     cache_dir: str | os.PathLike | None = None, backend: str = "auto",
                     ties: str = "trec_eval"):
    """:func:`asymgeo.data.evaluate_frozen` through a saved adapter (exact search with its
    operator), on the queries the adapter never saw; refuses an adapter trained for another
    dimension or encoder.

    Queries that trained or validated the adapter (:func:`adapter_seen_queries`: on a dataset
    without train qrels the adaptation split is carved from the test split) are left out of
    the score; ``extra["n_excluded"]`` counts them and ``extra["notes"]`` says so in words,
    as it does when the dataset is not the one the adapter was fitted on.
    """
    from ..data import evaluate_frozen, load_beir, load_embeddings
    from .io import check_compatible, load_adapter

    if str(adapter_dir).strip() == "":
        raise ValueError("adapter: empty path (an unset shell variable?); name the folder written by asymgeo fit")
    ad = load_adapter(adapter_dir)
    ds = load_beir(dataset, data_dir=data_dir)
    emb = load_embeddings(ds, encoder, cache_dir=cache_dir)
    check_compatible(ad, int(emb.corpus.shape[1]), encoder=emb.path.name, source=adapter_dir)
    seen = adapter_seen_queries(ad, ds)
    res = evaluate_frozen(ds, encoder, split=split, k=k, data_dir=data_dir, cache_dir=cache_dir,
                          operator=ad.operator_, backend=backend, ties=ties, exclude_queries=seen)
    notes = []
    trained_on = (ad.metadata_ or {}).get("dataset")
    if trained_on is not None and trained_on != ds.name:
        notes.append(f"the adapter was fitted on {trained_on!r}, not {ds.name!r}: a transfer evaluation")
    elif trained_on is None:
        notes.append("the adapter does not record its dataset: its training queries cannot be left out")
    n_ex, n_all = res.extra["n_excluded"], res.extra["n_judged"]
    if n_ex:
        notes.append(f"scored {n_all - n_ex:,} of the {n_all:,} judged {split} queries: the other {n_ex:,} "
                     f"trained or validated this adapter")
    res.extra.update(adapter=str(adapter_dir), geometry=ad.geometry_, form=ad.form,
                     rank=int(ad.query_map_.shape[0]), notes=notes)
    return res
