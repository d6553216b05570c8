"""Dataset-level adapter workflows behind ``asymgeo fit`` and ``asymgeo evaluate --adapter``.

Glue between the data layer (splits, triples, the embedding cache), the adapter and
exact search: everything here takes a dataset and an encoder name and returns plain
results; the CLI only prints them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .adapter import Adapter

__all__ = ["AdaptationData", "load_adaptation_data", "FitReport", "fit_adapter", "evaluate_adapter",
           "adapter_seen_queries", "adapter_training_queries", "document_disjoint_validation", "ndcg_at_10",
           "SELECTIONS", "MIN_DISJOINT_VALIDATION", "choose_family"]


@dataclass
class AdaptationData:
    """Frozen embeddings of one dataset, ready for adapter training and evaluation.

    ``triples`` are the training triples (adaptation train split, ``k`` hard negatives);
    ``corpus`` the document embeddings as the cache stores them (a float16 memmap: every
    search upcasts it block by block, so no (N, p) float32 copy is made); ``V``/``validation`` and ``T``/``test``
    the validation and test query embeddings with their :class:`RelevanceTable`;
    ``relevant`` the corpus rows labelled relevant for each training query; ``overlap`` the
    :func:`~asymgeo.data.splits.split_overlap` of the split (queries in two parts, by id or
    text), ``queries`` the query texts it was computed from, ``qrels_dir`` the folder of the
    qrels files.
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
    qrels: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)
    corpus_ids: Sequence[str] = field(default_factory=list, repr=False)  # the cache's IdIndex
    overlap: Any = None
    queries: Mapping[str, str] = field(default_factory=dict, repr=False)
    qrels_dir: str = ""


def _num(x: float | None) -> float:
    return float("nan") if x is None else float(x)


def training_pool(ds: Any, seed: Any = None) -> list[str]:
    """The adaptation split's training queries that have a positive (grade >= 1): the queries
    :func:`fit_adapter` can train on, in split order (``n_train`` subsets are drawn from them)."""
    from ..data import DEFAULT_SPLIT_SEED, adaptation_split

    labels = ds.all_qrels()
    return [q for q in adaptation_split(ds, DEFAULT_SPLIT_SEED if seed is None else int(seed))["train"]
            if any(g >= 1 for g in labels.get(q, {}).values())]


def load_adaptation_data(dataset: Any, encoder: str, *, data_dir: str | os.PathLike | None = None,
                         cache_dir: str | os.PathLike | None = None, k: int = 8,
                         train_ids: Sequence[str] | None = None, mining: str = "exact",
                         max_validation: int | None = None,
                         split: Mapping[str, Sequence[str]] | None = None,
                         triples_cache: bool = True) -> AdaptationData:
    """Load the adaptation split (:func:`asymgeo.data.adaptation_split`) of ``dataset`` from
    the embedding cache of ``encoder``.

    ``train_ids``: only these training queries (e.g. an ``n_train`` subset), so that hard
    negatives are mined for them alone, not for every training query (issue #40); ``mining``:
    ``"exact"`` (default) or an approximate FAISS index, ``"ivf"`` / ``"hnsw"``
    (:func:`asymgeo.data.load_triples`).  ``max_validation``: keep a seeded subsample of at
    most that many validation queries (:func:`validation_subsample`; every epoch of training
    searches the whole corpus for each validation query, issue #40); ``split["validation_subsample"]``
    records it.  ``split``: ``{"train", "validation", "test"}`` query ids to use instead of the
    adaptation split (the cross-fitted guard's rotated blocks, :func:`guard_blocks`; recorded as
    ``split["override"]``); ``triples_cache``: False mines the training queries' hard negatives
    without caching them (a rotated block's id set is used once).
    """
    from ..data import adaptation_split, adaptation_split_source, load_beir, load_embeddings, load_triples
    from ..data.splits import split_overlap
    from ..retrieval.metrics import RelevanceTable

    ds = load_beir(dataset, data_dir=data_dir)
    emb = load_embeddings(ds, encoder, cache_dir=cache_dir)
    if split is not None:
        missing = [key for key in ("train", "validation", "test") if key not in split]
        if missing:
            raise ValueError(f"split: expected the parts train, validation and test, missing {', '.join(missing)}")
        split = {key: [str(q) for q in split[key]] for key in ("train", "validation", "test")}
        if train_ids is None:
            train_ids = split["train"]
    tr = load_triples(ds, encoder, "train" if train_ids is None else list(train_ids), cache=emb, k=k, require=True,
                      mining=mining, triples_cache=triples_cache)
    override = split is not None
    if split is None:
        split = adaptation_split(ds)
    qrels = ds.all_qrels()
    corpus = emb.corpus  # memory-mapped float16, read block by block (issue #21: bounded memory)

    def part(name: str) -> tuple[np.ndarray, Any]:
        ids = [q for q in split[name] if q in qrels]
        if not ids:
            raise ValueError(f"{ds.name}: the {name} split has no judged queries")
        Q = np.asarray(emb.queries[emb.query_rows(ids)], dtype=np.float32)
        return Q, RelevanceTable({q: qrels[q] for q in ids}, ids, emb.corpus_ids, unknown_docs="ignore")

    V, vt = part("validation")
    sub = None
    if max_validation is not None:
        keep = validation_subsample(len(vt), max_validation)
        if keep.size < len(vt):
            ids = [vt.query_ids[i] for i in keep]
            sub = {"n": int(keep.size), "of": len(vt), "seed": VALIDATION_SUBSAMPLE_SEED}
            V, vt = V[keep], RelevanceTable({q: qrels[q] for q in ids}, ids, emb.corpus_ids, unknown_docs="ignore")
    T, tt = part("test")
    relevant = [set(emb.corpus_rows([d for d in qrels[q] if emb.has_corpus_id(d)]).tolist()) for q in tr.query_ids]
    source = adaptation_split_source(ds)
    if override:
        source = {**source, "override": {key: len(split[key]) for key in ("train", "validation", "test")}}
    if sub is not None:
        source = {**source, "validation_subsample": sub}
    overlap = split_overlap(ds.queries, split)
    # only the queries trained on, validated and tested on are kept: at MS MARCO's 503k training queries
    # the texts and labels of the others would be memory that grows with queries never used (issue #40)
    used = dict.fromkeys([*tr.query_ids, *split["validation"], *split["test"]])
    texts = ds.queries
    return AdaptationData(ds.name, emb.path.name, tr, corpus, V, vt, T, tt, relevant,
                          split=source, qrels={q: qrels[q] for q in used if q in qrels}, corpus_ids=emb.corpus_ids,
                          overlap=overlap, queries={q: texts[q] for q in used if q in texts},
                          qrels_dir=str(ds.path / "qrels"))


#: seed of :func:`validation_subsample` (fixed: every fit on a dataset selects on the same queries)
VALIDATION_SUBSAMPLE_SEED = 20261204


def validation_subsample(n: int, max_queries: int, seed: int = VALIDATION_SUBSAMPLE_SEED) -> np.ndarray:
    """Sorted rows of a seeded subsample of at most ``max_queries`` of ``n`` validation queries.

    All ``n`` rows when ``n <= max_queries``.  The seed is fixed rather than the fit's, so
    that fits with different training seeds select on the same queries and stay comparable;
    a mean NDCG@10 over ``m`` sampled queries has standard error ``s / sqrt(m)`` (``s`` the
    per-query standard deviation), which ``fit_adapter`` records beside it.
    """
    if isinstance(max_queries, bool) or not isinstance(max_queries, (int, np.integer)) or max_queries < 1:
        raise ValueError(f"max_validation: expected a positive integer, got {max_queries!r}")
    if n <= max_queries:
        return np.arange(n, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(n, size=int(max_queries), replace=False)).astype(np.int64)


def validation_gain(d: AdaptationData, operator: np.ndarray, *, seed: int = 0, n_boot: int = 2000) -> dict[str, float]:
    """Paired NDCG@10 difference (operator minus frozen) on every validation query, with a 95% interval."""
    from ..retrieval.compare import paired_comparison

    ids = d.corpus_ids or None
    a = _per_query_ndcg(d.V, d.validation, d.corpus, operator, ids)
    b = _per_query_ndcg(d.V, d.validation, d.corpus, None, ids)
    cmp = paired_comparison(a, b, n_boot=n_boot, seed=seed)
    return {"n": int(cmp.n), "diff": cmp.mean_diff, "ci_low": cmp.ci_low, "ci_high": cmp.ci_high}


def choose_family(V: np.ndarray, table: Any, corpus: np.ndarray, shared_operator: np.ndarray,
                  dual_operator: np.ndarray, cars: Any, *, seed: int = 0,
                  corpus_ids: Sequence[str] | None = None, tie_break: str = "shared") -> dict[str, Any]:
    """``geometry="auto"``: the family with the higher validation NDCG@10; within one standard error, shared.

    Both families are scored on the same validation queries (those that selected their
    checkpoints) and the registry's rule ``"validation"`` (:mod:`asymgeo.selectors.validation`)
    decides: the paired per-query difference ``dual - shared`` has mean ``diff`` and standard
    error ``se``; ``|diff| > se``: the better family (rule ``"validation"``).  Otherwise it is
    a tie, broken by ``tie_break``: ``"shared"`` (default; the one-standard-error rule) or
    ``"cars"`` (CARS's decision when its score is more than one of its standard errors from 0,
    else shared).  CARS's decision, score and standard error are reported either way.
    Returns the ``metrics["auto"]`` record (:func:`auto_record`).
    """
    if tie_break not in ("shared", "cars"):
        raise ValueError(f"tie_break: expected 'shared' or 'cars', got {tie_break!r}")
    from ..selectors.registry import SelectionContext, get_rule

    scores = {name: _per_query_ndcg(V, table, corpus, M, corpus_ids)
              for name, M in (("shared", shared_operator), ("dual", dual_operator))}
    context = SelectionContext(validation_scores=scores, tie_break=tie_break, cars=_cars_decision(cars))
    p = np.asarray(V).shape[1]
    decision = get_rule("validation").decide(np.zeros((1, p)), np.zeros((1, p)), 1, seed=seed, context=context)
    return auto_record(decision, cars)


def _cars_decision(cars: Any) -> Any:
    """A CARS result (or anything with ``choice, score, standard_error``) as a registry Decision."""
    from ..selectors.cars import cars_decision
    from ..selectors.registry import Decision

    if isinstance(cars, Decision):
        return cars
    if hasattr(cars, "raw_distance"):  # a CarsResult
        return cars_decision(cars)
    return Decision(rule="cars", choice=cars.choice, score=float(cars.score),
                    standard_error=float(cars.standard_error))


def auto_record(decision: Any, cars: Any) -> dict[str, Any]:
    """The ``metrics["auto"]`` record of a registry :class:`~asymgeo.selectors.Decision`:
    ``choice``, ``rule`` (the rule's name, or the validation rule's outcome: ``"validation"``,
    ``"tie: shared"``, ``"tie: CARS"``), ``selector`` (the rule's name), ``diff`` (its score,
    > 0 favours dual), ``standard_error`` (when it has one), its evidence, and CARS's
    ``cars_choice``, ``cars_score``, ``cars_standard_error``."""
    evidence = {k: v for k, v in decision.as_dict()["evidence"].items() if k != "outcome"}
    out: dict[str, Any] = {"choice": decision.choice, "rule": decision.evidence.get("outcome", decision.rule),
                           "selector": decision.rule, "diff": float(decision.score)}
    if decision.standard_error is not None:
        out["standard_error"] = float(decision.standard_error)
    out.update(evidence)
    out.update(cars_choice=cars.choice, cars_score=float(cars.score), cars_standard_error=float(cars.standard_error))
    return out


def auto_phrase(auto: dict[str, Any]) -> str:
    """``auto``'s decision in words, each fact once (``metrics["auto"]``, :func:`auto_record`):
    ``"dual, the higher validation NDCG@10 beyond one standard error"``, ``"shared, a tie within one
    standard error kept by the one-SE rule"``, ``"dual, a tie within one standard error broken by
    CARS"``, or ``"dual by sure"`` for a rule that decides from the training triples."""
    choice, outcome = auto.get("choice"), str(auto.get("rule", ""))
    phrase = _AUTO_OUTCOME_PHRASES.get(outcome)
    return f"{choice}, {phrase}" if phrase else f"{choice} by {outcome}"


#: the validation rule's outcomes (``metrics["auto"]["rule"]``) in words, for :func:`auto_phrase`
_AUTO_OUTCOME_PHRASES = {"validation": "the higher validation NDCG@10 beyond one standard error",
                         "tie: shared": "a tie within one standard error kept by the one-SE rule",
                         "tie: CARS": "a tie within one standard error broken by CARS"}


def decide_family(selector: str, tr: Any, V: np.ndarray, table: Any, corpus: np.ndarray, rank: int, cars: Any, *,
                  seed: int = 0, corpus_ids: Sequence[str] | None = None) -> dict[str, Any]:
    """The family the registered rule ``selector`` picks before any training
    (``fit --geometry auto --selector NAME``), on the training triples ``tr``.

    A rule needing ``"retrieval"`` (``"ranking"``) scores the validation queries ``V`` with
    ``table`` over ``corpus`` by exact search (:func:`~asymgeo.retrieval.ranking_selector.ranking_scorer`);
    rules needing trained adapters are refused (``fit_adapter`` trains both for them).
    ``cars``: CARS on the same triples, reported beside the decision (and reused by rule ``"cars"``).
    Returns the ``metrics["auto"]`` record (:func:`auto_record`).
    """
    from ..selectors.registry import SelectionContext, get_rule

    rule = get_rule(selector)
    if "trained" in rule.needs:
        raise ValueError(f"selector: {rule.name!r} decides after training both families (fit_adapter does it)")
    X = np.asarray(tr.X, dtype=np.float64)
    D = np.asarray(tr.Y_pos, dtype=np.float64) - np.asarray(tr.Y_neg, dtype=np.float64)
    context = SelectionContext(cv_folds=5, cars=_cars_decision(cars))
    if "retrieval" in rule.needs:
        from ..retrieval.ranking_selector import ranking_scorer

        context = context.with_(score_operator=ranking_scorer(V, table, corpus))
    return auto_record(rule.decide(X, D, rank, seed=seed, context=context), cars)


#: The rule that decides ``fit_adapter(geometry="auto")``'s family unless ``selector`` names another.
DEFAULT_AUTO_SELECTOR = "validation"

#: training queries on which approximate mining's recall is measured against exact mining
MINING_RECALL_SAMPLE = 200

#: ``memory`` choices of :func:`fit_adapter`.
MEMORY_CHOICES = ("auto", "none")


def _relevant_rows(d: AdaptationData, query_ids: Sequence[str]) -> list[set[int]]:
    """Corpus rows labelled relevant (grade > 0) to each of ``query_ids`` (unknown ids skipped)."""
    from .._ids import IdIndex

    ids = d.corpus_ids
    out: list[set[int]] = []
    row_of = None if isinstance(ids, IdIndex) else {c: i for i, c in enumerate(ids)}
    for q in query_ids:
        docs = [str(x) for x, g in (d.qrels.get(q) or {}).items() if g > 0]
        if isinstance(ids, IdIndex):
            rows = ids.lookup(docs) if docs else np.zeros(0, dtype=np.int64)
            out.append({int(r) for r in rows if r >= 0})
        else:
            assert row_of is not None
            out.append({row_of[x] for x in docs if x in row_of})
    return out


def protected_validation(d: AdaptationData, train_query_ids: Sequence[str]) -> np.ndarray:
    """Boolean mask over ``d``'s validation queries: those none of whose relevant documents is a
    positive of ``train_query_ids`` (the document-disjoint validation queries)."""
    from ..retrieval.generalisation import seen_document_split, seen_documents

    val_ids = list(d.validation.query_ids)
    seen = seen_documents(d.qrels, train_query_ids)
    unseen = set(seen_document_split({q: d.qrels[q] for q in val_ids}, seen).unseen)
    return np.array([q in unseen for q in val_ids], dtype=bool)


def fit_memory(d: AdaptationData, train_query_ids: Sequence[str], X: Any, relevant: Sequence[set[int]],
               operator: Any, *, corpus_ids: Sequence[str] | None = None, extend: bool = True,
               leave_one_out: bool = False) -> Any:
    """The :class:`~asymgeo.adapters.memory.DocumentMemory` of ``fit_adapter(memory="auto")``.

    Keys: the training queries ``X`` with their relevant rows; the gate and weight are chosen
    on all of ``d``'s validation queries; then (``extend``) the validation queries join the
    keys.  By default every validation query is scored against the training keys alone,
    protecting the document-disjoint validation queries.  ``leave_one_out``: scored against
    the memory it would meet once deployed, the training keys plus every *other* validation
    query, protecting those none of whose relevant documents any of those keys remembers
    (:meth:`~asymgeo.adapters.memory.DocumentMemory.fit` with ``validation_rows``).  It removes
    the optimism of the default's guard but chose worse deployments on SciFact (MiniLM:
    unseen-document test queries -0.020 where the default gives -0.003; MPNet: all queries
    +0.137 against +0.156; three seeds, ``tools/memory_guard_study.py``), so it is not the default.
    """
    from .memory import DocumentMemory

    val_ids = list(d.validation.query_ids)
    val_rows = _relevant_rows(d, val_ids)
    if leave_one_out:
        mem = DocumentMemory().fit(np.asarray(X, dtype=np.float32), list(relevant), d.corpus,
                                   validation_queries=d.V, validation_relevance=d.validation,
                                   validation_rows=val_rows, operator=operator, corpus_ids=corpus_ids)
    else:
        mem = DocumentMemory().fit(np.asarray(X, dtype=np.float32), list(relevant), d.corpus,
                                   validation_queries=d.V, validation_relevance=d.validation,
                                   protected=protected_validation(d, train_query_ids),
                                   operator=operator, corpus_ids=corpus_ids)
    if extend and mem.weight_ > 0:
        mem.extend(d.V, val_rows)
    return mem


#: ``candidates`` choices of :func:`fit_adapter`.
CANDIDATE_SETS = ("joint", "family")
#: confidence of the unseen-document guard's recorded interval (:func:`choose_deployment`)
GUARD_CONFIDENCE = 0.95
#: the unseen-document guard of :func:`choose_deployment`: a candidate is deployable when its mean
#: protected gain over frozen is at least this many paired standard errors (0: "loses nothing on
#: average", the earlier rule).  Chosen by the replays of docs/adapters.md ("Where the frontier lies"):
#: with 0 the memorising candidates slipped through on MiniLM (unseen-document test queries -0.003 on
#: seeds 0-2, -0.012 on seeds 3-5) and on a crowded stress encoder (-0.007); with 0.5 every one of
#: those eight seed sets kept its unseen-document queries above frozen.
GUARD_MARGIN = 0.5


#: blends ``(1 - lam) W_sel + lam W_all`` of the two query-only maps that join the joint candidates
JOINT_BLENDS = (0.25, 0.5, 0.75)

#: blocks of the cross-fitted guard (:func:`fit_adapter`'s ``guard_folds``): the validation queries and
#: ``GUARD_FOLDS - 1`` blocks of training queries, each in turn the validation queries of a fit on the rest.
#: Chosen by ``tools/crossfit_guard_study.py`` (docs/adapters.md, "The cross-fitted guard"); 1 is the
#: guard on the validation queries alone (0.2's rule).
GUARD_FOLDS = 5
#: seed of the training queries' partition into the cross-fitted guard's blocks (:func:`guard_blocks`)
GUARD_BLOCK_SEED = 20261205


def guard_blocks(train_ids: Sequence[str], n_validation: int, folds: int = GUARD_FOLDS,
                 seed: int = GUARD_BLOCK_SEED) -> list[list[str]]:
    """The cross-fitted guard's extra validation blocks: the training queries cut into ``folds - 1``
    balanced parts (:func:`~asymgeo.data.query_folds`: ids sorted, permuted with ``seed``), each
    cut to its first ``n_validation`` queries (so that on a large training set a block costs no
    more to validate than the validation queries do).  ``[]`` when ``folds`` is 1 or there are
    fewer training queries than blocks."""
    from ..data import query_folds, split_queries

    if folds <= 1 or len(train_ids) < folds - 1:
        return []
    # one block (folds = 2): the whole training set, permuted the same way
    parts = query_folds(list(train_ids), folds - 1, seed) if folds > 2 else split_queries(list(train_ids), (1,), seed)
    return [part[: max(int(n_validation), 1)] for part in parts]


def _check_guard_folds(value: Any) -> int:
    """``guard_folds`` as an int, or ``ValueError`` naming it (an integer >= 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"guard_folds: expected an integer >= 1 (1: the validation queries alone), got {value!r}")
    return int(value)


def _blend_query_maps(a: Adapter, b: Adapter, lam: float) -> Adapter:
    r"""The query-only adapter :math:`x \mapsto x + ((1-\lambda) W_a + \lambda W_b) x`.

    Its operator is the same blend of the two operators (the score is linear in ``W``): the
    straight path from ``a`` (checkpoint chosen on document-disjoint validation queries) to
    ``b`` (chosen on all of them), each point a candidate of :func:`choose_deployment`.
    """
    W = (1.0 - lam) * np.asarray(a.query_map_, dtype=np.float64) + lam * np.asarray(b.query_map_, dtype=np.float64)
    out = Adapter.from_maps(W, np.eye(W.shape[1]), geometry="query", form=a.form, seed=a.seed,
                            device=a.device)
    out.learning_rate_, out.best_epoch_ = a.learning_rate_, a.best_epoch_
    out.history_ = list(getattr(a, "history_", []) or [])
    return out


def choose_deployment(candidates: dict[str, Any], frozen_values: np.ndarray, protected: np.ndarray, *,
                      seed: int = 0, min_protected: int | None = None,
                      guard_margin: float = GUARD_MARGIN,
                      guard_differences: Mapping[str, np.ndarray] | None = None) -> dict[str, Any]:
    r"""``fit_adapter(candidates="joint")``: which map + memory to deploy, decided on validation.

    ``candidates`` maps a name to ``(adapter, memory)``: a trained map and the
    :class:`~asymgeo.adapters.memory.DocumentMemory` fitted on top of it (before
    :meth:`~asymgeo.adapters.memory.DocumentMemory.extend`).  Each is scored by its memory's
    per-query validation NDCG@10 ``v_c`` (``memory.validation_values_``: map plus memory on
    every validation query).  The *guard*: on the ``protected`` validation queries (none of
    whose relevant documents is a training positive) the paired differences
    :math:`d_i = v_{c,i} - f_i` must show a gain of at least ``guard_margin`` standard errors,

    .. math:: \bar d \ge k\, s_d / \sqrt{m}, \qquad k = \texttt{guard\_margin}\ (0.5),

    over the ``m`` protected queries (``s_d`` their sample standard deviation); ``k = 0`` is
    "loses nothing on average", the memory's own gate rule
    (:meth:`~asymgeo.adapters.memory.DocumentMemory.fit`) and the earlier default.  With ``k = 0``
    the candidates that memorise (blends toward the query map chosen on all validation
    queries) passed on noise and lost on unseen-document test queries (docs/adapters.md,
    "Where the frontier lies").  The 95% bootstrap interval
    (:func:`~asymgeo.retrieval.compare.paired_comparison`) is recorded beside it; a guard on the
    interval alone ("not below frozen beyond noise") let a map that loses 0.017 on the
    protected validation queries through, and it lost 0.039 on unseen-document test queries
    (SciFact, MiniLM, seed 1).  Among the candidates that pass, the one with the highest mean
    :math:`\bar v_c` is deployed (ties: the first listed).  With fewer than ``min_protected``
    protected queries the guard is not applied and ``note`` says so; when no candidate
    passes, the one with the highest protected mean is deployed (``note`` says so).
    ``guard_margin`` must be a finite number >= 0.

    ``guard_differences`` (the cross-fitted guard, :func:`fit_adapter`'s ``guard_folds``): each
    candidate's paired protected differences pooled over the guard's blocks (this split's
    protected queries first, then those of the fits that held out a block of training queries);
    the guard, its interval and the fallback read them instead of this split's alone, and the
    choice among the candidates that pass is still this split's validation NDCG@10.  A record
    then also gives ``protected_diff_split`` (this split's mean) and ``n_guard`` (the pooled count).

    Returns ``{"choice", "rule", "note", "n_protected", "guard_margin", "candidates": {name: record}}``
    (a record: ``geometry``, ``validation_ndcg@10``, ``map_validation_ndcg@10``, ``memory_weight``,
    ``protected_diff``, with the guard ``protected_se``, ``protected_ci_low``, ``protected_ci_high``,
    and ``feasible``).
    """
    from ..retrieval.compare import paired_comparison

    if not candidates:
        raise ValueError("candidates: expected at least one (adapter, memory) pair")
    guard_margin = _check_guard_margin(guard_margin)
    if min_protected is None:
        min_protected = MIN_DISJOINT_VALIDATION
    prot = np.asarray(protected, dtype=bool)
    fz = np.asarray(frozen_values, dtype=np.float64)
    guard = int(prot.sum()) >= max(int(min_protected), 2)  # a paired interval needs two queries
    records: dict[str, dict[str, Any]] = {}
    for name, (ad, mem) in candidates.items():
        v = np.asarray(mem.validation_values_, dtype=np.float64)
        if v.shape != fz.shape or prot.shape != fz.shape:
            raise ValueError(f"candidates[{name!r}]: validation values of shape {v.shape}, frozen {fz.shape}, "
                             f"protected {prot.shape}: expected one value per validation query")
        rec: dict[str, Any] = {"geometry": ad.geometry_, "validation_ndcg@10": float(v.mean()),
                               "map_validation_ndcg@10": float(mem.map_validation_ndcg_),
                               "memory_weight": float(mem.weight_)}
        d = (v - fz)[prot]  # the paired differences on the protected queries
        if guard and guard_differences is not None:  # pooled over the cross-fitted blocks
            d = _pooled_differences(name, d, guard_differences, rec)
        if d.size:
            rec["protected_diff"] = float(d.mean())
        if guard:
            rec["protected_se"] = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else 0.0
            cmp = paired_comparison(d, np.zeros_like(d), n_boot=2000, confidence=GUARD_CONFIDENCE, seed=seed)
            rec.update(protected_ci_low=cmp.ci_low, protected_ci_high=cmp.ci_high)
        rec["feasible"] = bool((not guard) or rec["protected_diff"] >= guard_margin * rec["protected_se"])
        records[name] = rec
    feasible = [n for n, r in records.items() if r["feasible"]]
    note = ""
    rule = (f"highest validation NDCG@10 among the candidates whose protected gain is at least {guard_margin:g} "
            "standard errors" if guard_margin > 0 else "highest validation NDCG@10 among the guarded candidates")
    if not guard:
        note = (f"deployment: only {int(prot.sum())} validation queries have no training-positive document "
                f"(< {max(int(min_protected), 2)}): the map is chosen on all validation queries without the "
                "unseen-document guard")
        rule = "highest validation NDCG@10 (no guard)"
    if not feasible:
        choice = max(records, key=lambda n: records[n].get("protected_diff", 0.0))
        if records[choice].get("protected_diff", 0.0) >= 0:  # gains, but none by guard_margin SE
            note = (f"deployment: no candidate gains at least {guard_margin:g} standard errors over frozen on the "
                    f"document-disjoint validation queries; deploying {choice!r}, the largest gain there")
        else:
            note = ("deployment: every candidate is below frozen on average on the document-disjoint validation "
                    f"queries; deploying {choice!r}, the least harmful there")
        rule = "least harm on protected validation queries"
    else:
        choice = max(feasible, key=lambda n: (records[n]["validation_ndcg@10"], -list(records).index(n)))
    return {"choice": choice, "rule": rule, "note": note, "n_protected": int(prot.sum()), "guard_margin": guard_margin,
            "candidates": records}


def _pooled_differences(name: str, split_diffs: np.ndarray, guard_differences: Mapping[str, np.ndarray],
                        rec: dict[str, Any]) -> np.ndarray:
    """Candidate ``name``'s pooled protected differences (:func:`choose_deployment`), recording this
    split's own mean (``protected_diff_split``) and the pooled count (``n_guard``) in ``rec``."""
    if name not in guard_differences:
        raise ValueError(f"guard_differences: no pooled protected differences for candidate {name!r}")
    if split_diffs.size:
        rec["protected_diff_split"] = float(split_diffs.mean())
    d = np.asarray(guard_differences[name], dtype=np.float64).ravel()
    rec["n_guard"] = int(d.size)
    return d


def _check_guard_margin(value: Any) -> float:
    """``guard_margin`` as a float, or ``ValueError`` naming it (a finite number >= 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"guard_margin: expected a number of standard errors >= 0, got {value!r}")
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"guard_margin: expected a finite number of standard errors >= 0, got {value!r}")
    return float(value)


def _adapter_ndcg(queries: np.ndarray, table: Any, corpus: np.ndarray, adapter: Adapter,
                  corpus_ids: Sequence[str] | None) -> np.ndarray:
    """Per-query NDCG@10 of what ``adapter`` deploys (its map, plus its memory when it has one)."""
    from ..retrieval.metrics import evaluate_indices

    if adapter.memory_ is None:
        return _per_query_ndcg(queries, table, corpus, adapter.operator_, corpus_ids)
    _, idx = adapter.search(queries, corpus, min(10, corpus.shape[0]), corpus_ids=corpus_ids)
    return evaluate_indices(idx, table, ["ndcg@10"]).per_query["ndcg@10"]


#: Validation choices of :func:`fit_adapter`.
SELECTIONS = ("all", "document_disjoint")
#: Fewest document-disjoint validation queries :func:`fit_adapter` selects on.
MIN_DISJOINT_VALIDATION = 32


def selection_phrase(metrics: dict[str, Any]) -> str:
    """The validation queries that chose the checkpoint, in words: ``"67 document-disjoint validation
    queries"``, ``"all 162 validation queries"``, or, when ``document_disjoint`` fell back (too few
    such queries), ``"all 324 validation queries (too few document-disjoint ones: the fallback of
    selection document_disjoint)"``.  A record with neither count (``n_selection``, ``n_validation``)
    names the queries without one (``"all validation queries"``)."""
    n = metrics.get("n_selection", metrics.get("n_validation"))
    count = "" if n is None else f"{n} "
    sel = metrics.get("selection", "all")
    if metrics.get("selection_fallback"):
        return (f"all {count}validation queries (too few document-disjoint ones: the fallback of selection "
                f"{sel})")
    if sel == "document_disjoint":
        return f"{count}document-disjoint validation queries (no relevant document is a training positive)"
    if n is None or n == metrics.get("n_validation"):
        return f"all {count}validation queries"
    of = f" of the {metrics['n_validation']}" if metrics.get("n_validation") is not None else ""
    return f"{n}{of} validation queries ({sel})"


def document_disjoint_validation(d: AdaptationData, train_query_ids: Sequence[str]) -> tuple[np.ndarray, Any, str]:
    """Validation queries none of whose relevant documents is a positive of ``train_query_ids``.

    Returns ``(V, table, note)``: their embeddings and :class:`RelevanceTable`, and ``""``;
    or, with fewer than :data:`MIN_DISJOINT_VALIDATION` such queries, all validation queries
    and a one-line note naming the fallback.
    """
    from ..retrieval.generalisation import seen_document_split, seen_documents
    from ..retrieval.metrics import RelevanceTable

    seen = seen_documents(d.qrels, train_query_ids)
    ids = list(d.validation.query_ids)
    split = seen_document_split({q: d.qrels[q] for q in ids}, seen)
    keep = set(split.unseen)
    if len(keep) < MIN_DISJOINT_VALIDATION:
        return d.V, d.validation, (f"selection: only {len(keep)} of {len(ids)} validation queries have no relevant "
                                   f"training-positive document (< {MIN_DISJOINT_VALIDATION}); selecting on all "
                                   f"{len(ids)} validation queries instead")
    rows = [i for i, q in enumerate(ids) if q in keep]
    sub = [ids[i] for i in rows]
    table = RelevanceTable({q: d.qrels[q] for q in sub}, sub, d.corpus_ids, unknown_docs="ignore")
    return d.V[rows], table, ""


def ndcg_at_10(queries: np.ndarray, table: Any, corpus: np.ndarray, operator: np.ndarray | None = None, *,
               corpus_ids: Sequence[str] | None = None) -> float:
    """Mean NDCG@10 (Appendix F, binary) by exact full-corpus search, optionally through ``operator``.

    With ``corpus_ids`` exact score ties are ordered as trec_eval orders them
    (:func:`~asymgeo.retrieval.search.search_trec_order`), as ``asymgeo evaluate`` does, so
    ``fit`` and ``evaluate`` print the same figure; without, by lower corpus row.
    """
    return float(np.mean(_per_query_ndcg(queries, table, corpus, operator, corpus_ids)))


def _per_query_ndcg(queries: np.ndarray, table: Any, corpus: np.ndarray, operator: Any,
                    corpus_ids: Sequence[str] | None) -> np.ndarray:
    from ..retrieval.metrics import evaluate_indices
    from ..retrieval.search import exact_search, search_trec_order

    k = min(10, corpus.shape[0])
    if corpus_ids is not None:
        idx = search_trec_order(queries, corpus, k, corpus_ids, operator=operator).indices
    else:
        idx = exact_search(queries, corpus, k, operator=operator, progress=None).indices
    return evaluate_indices(idx, table, ["ndcg@10"]).per_query["ndcg@10"]


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
    adapter_train_ids: list[str] = field(default_factory=list, repr=False)
    candidates: dict[str, Adapter] = field(default_factory=dict, repr=False)
    joint: dict[str, Adapter] = field(default_factory=dict, repr=False)


def fit_adapter(  # noqa: C901 - one flat sequence: data, selection, training, report
    dataset: Any,
    encoder: str,
    *,
    geometry: str = "auto",
    rank: int = 16,
    form: str = "augmented",
    init: str = "closed_form",
    n_train: int | None = None,
    seed: int = 0,
    learning_rates: Sequence[float] = (3e-4, 1e-3, 3e-3),
    epochs: int = 30,
    early_stopping: int | None = None,
    selection: str = "document_disjoint",
    anchor: float = 0.0,
    selector: str = DEFAULT_AUTO_SELECTOR,
    memory: str = "auto",
    candidates: str = "joint",
    guard_margin: float = GUARD_MARGIN,
    guard_folds: int = GUARD_FOLDS,
    mining: str = "exact",
    max_validation: int | None = None,
    validation_pool: int | str | None = "auto",
    report: bool = True,
    allow_test_overlap: bool = False,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    device: str | None = None,
    progress: bool = False,
) -> FitReport:
    """Train an adapter on a dataset's adaptation split; every default is ``asymgeo fit``'s.

    ``geometry``: ``"auto"`` (default, as the CLI: both families trained, ``selector``
    decides, and with ``memory="auto"`` and ``candidates="joint"`` the deployed whole is
    chosen among map + memory candidates), ``"shared"``, ``"dual"`` or ``"query"`` (a map on
    queries only, documents untouched).  The paper's protocol is ``geometry="dual"`` (or
    ``"shared"``), ``selection="all"``, ``memory="none"``.
    ``n_train`` takes a seeded prefix (``seed``) of the training queries (all by default).
    ``selection`` names the validation queries that choose the learning rate, the checkpoint
    and the closed-form scale: ``"all"`` (the paper's protocol) or ``"document_disjoint"``
    (the default, chosen on validation by the generalisation study, docs/generalisation.md):
    only validation queries none of whose relevant documents is a training positive, so that
    selection rewards geometry that transfers to new documents (fewer than
    :data:`MIN_DISJOINT_VALIDATION` such queries: all of them, with a warning recorded in
    ``metrics["warnings"]``).  ``anchor`` is :class:`Adapter`'s pull toward the start.
    ``selector`` (``geometry="auto"`` only): a rule of the selector registry
    (:mod:`asymgeo.selectors`) that decides the family: ``"validation"`` (default:
    train both, keep the better on validation NDCG@10, :func:`choose_family`); ``"ranking"``
    (the closed-form augmented operators' validation NDCG@10,
    :func:`asymgeo.retrieval.ranking_selector.ranking_choice`, then train only that family);
    ``"cars"``, ``"cv"`` or ``"anisotropic"`` (from the training triples alone: eq. 7, the
    cross-validated operator risk, SURE with anisotropic pricing; then train that family).
    ``mining``: how the training queries' hard negatives are found: ``"exact"`` (default) or
    ``"ivf"`` / ``"hnsw"`` (FAISS; its recall@8 against exact mining on a seeded sample of
    :data:`MINING_RECALL_SAMPLE` training queries is recorded in ``metrics["mining"]``).
    ``max_validation``: select on a seeded subsample of at most that many validation queries
    (:func:`validation_subsample`; at MS MARCO's 6,980 dev queries each epoch's validation
    search is the slowest stage); ``metrics["validation_subsample"]`` records its size and the
    frozen validation NDCG@10's standard error on it.
    ``validation_pool``: select (scale grid, checkpoints, learning rates, memory gate, joint
    choice) on a pool of frozen candidates instead of the whole corpus
    (:mod:`~asymgeo.adapters.pooled_validation`): an integer ``k`` (each validation query's
    frozen top ``k``, their judged documents and every training row), ``"auto"`` (default:
    ``k =`` :data:`~asymgeo.adapters.pooled_validation.POOL_DEFAULT_K` from
    :data:`~asymgeo.adapters.pooled_validation.POOL_AUTO_MIN_DOCS` documents on, else exact)
    or ``None`` / ``"none"`` (exact); ``metrics["validation_pool"]`` records the pool and the
    share of the deployed adapter's top 10 inside it, beside its exact validation NDCG@10.
    Test figures always search the whole corpus.
    ``memory``: ``"auto"`` (default) adds a gated document memory on top of the chosen map
    (:class:`~asymgeo.adapters.memory.DocumentMemory`: training positives raised for new
    queries close to the training queries that found them; gate and weight chosen on all
    validation queries so long as the document-disjoint validation queries lose nothing to
    the map alone; then the validation queries join its keys), kept as ``adapter.memory_``
    when it helps on validation; ``"none"``: the map alone.  ``metrics["memory"]`` records it
    and ``metrics["deployed"]`` scores what the adapter does (map plus memory).
    ``candidates`` (``geometry="auto"`` with ``memory="auto"`` and the default ``selector``; a
    named selector decides the family alone): ``"joint"`` (default) decides
    the deployed whole, map plus memory: the family the selector picked, the query-only map
    with its checkpoint chosen on the selection queries, the query-only map chosen on all
    validation queries and three blends of those two query maps (``JOINT_BLENDS``) each get a
    memory, and :func:`choose_deployment` keeps the one with the highest validation NDCG@10
    among those whose mean gain over frozen on the document-disjoint validation queries is at
    least ``guard_margin`` paired standard errors (default :data:`GUARD_MARGIN` = 0.5; 0: loses
    nothing on average, the earlier rule) (``metrics["joint"]``, ``FitReport.joint``);
    ``"family"``: the selector's family alone carries the memory.
    Returns the trained adapter, the closed-form baseline of the same geometry, the
    validation / test NDCG@10 of frozen, baseline and trained, and (``report``) the
    generalisation table (:func:`~asymgeo.adapters.generalisation.generalisation_report`) in
    ``metrics["generalisation"]``.

    Before training, the training queries (the ``n_train`` subset when asked), the
    validation and the test queries are checked for queries in two of them
    (:func:`~asymgeo.data.splits.split_overlap`: the same id, e.g. a ``qrels/train.tsv``
    that copies ``test.tsv``, or beyond 5% of a scored part the same text under another id):
    refused with the counts unless ``allow_test_overlap``, and then ``metrics["warnings"]``
    says the scores are not held out.  Identical texts within the limit are kept and named
    in ``metrics["warnings"]``; ``metrics["split_overlap"]`` records the counts.
    """
    if selection not in SELECTIONS:
        raise ValueError(f"selection: expected one of {', '.join(map(repr, SELECTIONS))}, got {selection!r}")
    if memory not in MEMORY_CHOICES:
        raise ValueError(f"memory: expected one of {', '.join(map(repr, MEMORY_CHOICES))}, got {memory!r}")
    if candidates not in CANDIDATE_SETS:
        raise ValueError(f"candidates: expected one of {', '.join(map(repr, CANDIDATE_SETS))}, got {candidates!r}")
    guard_margin = _check_guard_margin(guard_margin)
    guard_folds = _check_guard_folds(guard_folds)
    if geometry == "query" and form != "augmented":  # before any data is loaded or mined
        raise ValueError("form: geometry='query' (a p x p map on queries from the identity) needs form='augmented'")
    from .adapter import check_anchor

    anchor = check_anchor(anchor)  # before any data is loaded (``fit --anchor 1e30``)
    from ..selectors.registry import get_rule

    selector = get_rule(selector).name
    if selector != DEFAULT_AUTO_SELECTOR and geometry != "auto":
        raise ValueError(f"selector: {selector!r} decides the family of geometry='auto' only, "
                         f"got geometry={geometry!r}")
    from ..data import nested_subsets
    from ..data.splits import split_overlap
    from .baseline import closed_form_adapter

    source_dataset = dataset  # as given (a name, a folder or a BeirDataset): the guard blocks reload it
    subset = None
    if n_train is not None:  # drawn before loading, so only the queries trained on are mined
        if isinstance(n_train, bool) or not isinstance(n_train, (int, np.integer)) or n_train < 1:
            raise ValueError(f"n_train: expected a positive integer, got {n_train!r}")
        from ..data import load_beir

        ds = load_beir(dataset, data_dir=data_dir)
        pool = training_pool(ds)
        if n_train > len(pool):
            raise ValueError(f"n_train: {n_train} exceeds the {len(pool)} training queries of {ds.name}")
        subset = nested_subsets(pool, sizes=[int(n_train)], seed=int(seed))[int(n_train)]
        dataset = ds
    if max_validation is not None:  # refused before any data is loaded
        validation_subsample(0, max_validation)
    from .pooled_validation import pool_coverage, pooled_adaptation_data, pooled_memory_to_corpus, resolve_pool_k

    resolve_pool_k(validation_pool, 0)  # refused before any data is loaded
    seconds: dict[str, float] = {}  # wall time by stage: metrics["seconds"]
    mark = [time.perf_counter()]

    def lap(stage: str) -> None:
        """Charge the time since the last lap to ``stage``."""
        now = time.perf_counter()
        seconds[stage] = seconds.get(stage, 0.0) + now - mark[0]
        mark[0] = now

    d = load_adaptation_data(dataset, encoder, data_dir=data_dir, cache_dir=cache_dir, train_ids=subset, mining=mining,
                             max_validation=max_validation)
    if subset is not None:  # drop the dataset (its texts and labels of every query): d keeps what it uses
        del ds, pool
        dataset = d.dataset
    lap("load and mine")
    tr = d.triples
    relevant = d.relevant
    mining_record: dict[str, Any] = {"index": mining}
    if tr.given_counts is not None and tr.given_counts.any():  # the user's negatives, first in each row
        mining_record["given"] = {"queries": int((tr.given_counts > 0).sum()), "negatives": int(tr.given_counts.sum()),
                                  "k": int(tr.hard_negative_rows.shape[1])}
    if mining != "exact":  # what the approximation costs, measured on a seeded sample of the training queries
        from ..data.triples import mining_recall

        excl = [set(r) for r in relevant]
        rec = mining_recall(tr.X, d.corpus, excl, 8, index=mining, sample=min(MINING_RECALL_SAMPLE, len(tr)),
                            seed=seed)
        mining_record.update(recall=rec["recall"], n_queries=rec["n_queries"], k=rec["k"], settings=rec["settings"])
    warnings_: list[str] = []
    overlap = split_overlap(d.queries, {"train": tr.query_ids, "validation": d.validation.query_ids,
                                        "test": d.test.query_ids})
    if overlap.refused and not allow_test_overlap:
        raise ValueError(f"{d.qrels_dir or d.dataset}: " + "; ".join(overlap.messages)
                         + "; trained or selected on, their scores would not be held out: fix the qrels files, or "
                           "pass --allow-test-overlap (allow_test_overlap=True) to train on them anyway")
    if overlap.refused:
        warnings_.append("test overlap allowed (allow_test_overlap): " + "; ".join(overlap.messages)
                         + ": the validation and test scores are not held out")
    else:
        warnings_.extend(overlap.warnings)
    # selection (scale grid, checkpoints, memory gate, joint choice) runs on ``dsel``: the whole
    # corpus, or the pool of frozen candidates (its rows copied; the same triples, row for row)
    dsel, pool_rows, pool_record = d, None, None
    pool_k = resolve_pool_k(validation_pool, int(d.corpus.shape[0]))
    if pool_k is not None:
        dsel, pool_rows, pool_record = pooled_adaptation_data(d, pool_k,
                                                              _relevant_rows(d, list(d.validation.query_ids)))
        tr, relevant = dsel.triples, dsel.relevant
    V, vtable = dsel.V, dsel.validation
    fallback = False
    if selection == "document_disjoint":
        V, vtable, note = document_disjoint_validation(dsel, tr.query_ids)
        if note:
            warnings_.append(note)
            fallback = True

    lap("split and pool")

    def train(family: str, sel_V: np.ndarray | None = None, sel_table: Any = None, *, on: Any = None,
              stage: str = "train") -> Adapter:
        """Train ``family`` on ``on`` = (triples, selection data, relevant rows, V, table) (default: this split)."""
        tr_, ds_, rel_, V_, vt_ = (tr, dsel, relevant, V, vtable) if on is None else on
        lap("selection")  # what ran since the last stage: CARS, the family, memory and joint choices
        a = Adapter(geometry=family, rank=rank, form=form, init=init, learning_rates=tuple(learning_rates),
                    epochs=epochs, early_stopping=early_stopping, anchor=anchor, seed=seed, device=device,
                    progress=progress)
        fitted = a.fit(tr_.X, tr_.pos_rows, ds_.corpus, hard_negative_rows=tr_.hard_negative_rows,
                       relevant_rows=rel_, validation_queries=V_ if sel_V is None else sel_V,
                       validation_relevance=vt_ if sel_table is None else sel_table)
        lap(f"{stage} {family}")
        return fitted

    def query_candidates(q_sel: Adapter, q_all: Adapter) -> dict[str, Adapter]:
        """The query-only maps chosen on the selection and on all validation queries, and their blends."""
        out = {f"query ({selection})": q_sel, "query (all)": q_all}
        for lam in JOINT_BLENDS:  # the path from the map that transfers to the one that memorises
            out[f"query (blend {lam:g})"] = _blend_query_maps(q_sel, q_all, lam)
        return out

    def guard_block(block: list[str], family_name: str) -> tuple[dict[str, np.ndarray], int]:
        """One block of the cross-fitted guard: the joint candidates refitted with ``block`` as the
        validation queries and the other labelled queries as training queries; each candidate's
        paired protected differences (map + memory minus frozen; ``family_name``: the family the
        selector picks there, under this split's name) and the block's protected count."""
        held = set(block)
        train_k = [q for q in tr.query_ids if q not in held] + list(d.validation.query_ids)
        dk = load_adaptation_data(source_dataset, encoder, data_dir=data_dir, cache_dir=cache_dir, train_ids=train_k,
                                  mining=mining, triples_cache=False,
                                  split={"train": train_k, "validation": block, "test": list(d.test.query_ids)})
        dks = dk
        if pool_k is not None:
            dks, _, _ = pooled_adaptation_data(dk, pool_k, _relevant_rows(dk, list(dk.validation.query_ids)))
        trk, relk = dks.triples, dks.relevant
        Vk, vtk, _ = document_disjoint_validation(dks, trk.query_ids)
        on = (trk, dks, relk, Vk, vtk)
        fams = {fam: train(fam, on=on, stage="guard block") for fam in ("shared", "dual")}
        cars_k = cars_score(trk.X, trk.Y_pos, trk.Y_neg, rank, seed=seed)
        ck = dks.corpus_ids or None
        fam_k = choose_family(Vk, vtk, dks.corpus, fams["shared"].operator_, fams["dual"].operator_, cars_k,
                              seed=seed, corpus_ids=ck)["choice"]
        maps = {family_name: fams[fam_k],
                **query_candidates(train("query", on=on, stage="guard block"),
                                   train("query", dks.V, dks.validation, on=on, stage="guard block"))}
        fz = _per_query_ndcg(dks.V, dks.validation, dks.corpus, None, ck)
        mems_k = {name: fit_memory(dks, trk.query_ids, trk.X, relk, a.operator_, corpus_ids=ck, extend=False)
                  for name, a in maps.items()}
        prot = next(iter(mems_k.values())).protected_  # as on this split: the memory's protected queries
        diffs = {name: (np.asarray(m.validation_values_, dtype=np.float64) - fz)[prot] for name, m in mems_k.items()}
        lap("guard blocks")
        return diffs, int(prot.sum())

    auto = None
    fitted: dict[str, Adapter] = {}
    if geometry == "auto":  # both families on the same paired batches, chosen by validation retrieval
        from ..kernels.selection import cars_score

        cars = cars_score(tr.X, tr.Y_pos, tr.Y_neg, rank, seed=seed)
        if "trained" in get_rule(selector).needs:  # train both on the same paired batches, then decide
            fitted = {fam: train(fam) for fam in ("shared", "dual")}
            auto = choose_family(V, vtable, dsel.corpus, fitted["shared"].operator_, fitted["dual"].operator_, cars,
                                 seed=seed, corpus_ids=dsel.corpus_ids or None)
            ad = fitted[auto["choice"]]
        else:
            auto = decide_family(selector, tr, V, vtable, dsel.corpus, rank, cars, seed=seed)
            ad = train(auto["choice"])
        ad.selection_ = cars
    else:
        ad = train(geometry)
    scids = dsel.corpus_ids or None  # the selection corpus's ids (the pool's, when pooled)
    joint = None
    mem = None
    joint_maps: dict[str, Adapter] = {}
    if memory == "auto" and geometry == "auto" and candidates == "joint" and selector == DEFAULT_AUTO_SELECTOR:
        # the deployed whole is map + memory: the query-only family joins as a candidate map, its
        # checkpoint chosen on the selection queries and (the paper's protocol) on all validation queries
        family_name = f"{ad.geometry_} ({selection})"
        joint_maps = {family_name: ad, f"query ({selection})": train("query")}
        if selection != "all":
            joint_maps.update(query_candidates(joint_maps[f"query ({selection})"],
                                               train("query", dsel.V, dsel.validation)))
        mems = {name: fit_memory(dsel, tr.query_ids, tr.X, relevant, a.operator_, corpus_ids=scids, extend=False)
                for name, a in joint_maps.items()}
        fz_val = _per_query_ndcg(dsel.V, dsel.validation, dsel.corpus, None, scids)
        prot = next(iter(mems.values())).protected_
        pooled: dict[str, np.ndarray] | None = None
        by_block = [int(np.sum(prot))]
        if selection != "all" and guard_folds > 1 and by_block[0] >= MIN_DISJOINT_VALIDATION:
            # the cross-fitted guard: every candidate's protected gain also on blocks of training queries
            pooled = {n: (np.asarray(m.validation_values_, dtype=np.float64) - fz_val)[prot] for n, m in mems.items()}
            for block in guard_blocks(tr.query_ids, len(d.validation), guard_folds):
                diffs, n_block = guard_block(block, family_name)
                by_block.append(n_block)
                pooled = {n: np.concatenate([pooled[n], diffs[n]]) for n in pooled}
        joint = choose_deployment({n: (joint_maps[n], mems[n]) for n in joint_maps}, fz_val, prot, seed=seed,
                                  guard_margin=guard_margin, guard_differences=pooled)
        joint.update(guard_folds=len(by_block), n_protected_by_block=by_block)
        if joint["note"]:
            warnings_.append(joint["note"])
        ad, mem = joint_maps[joint["choice"]], mems[joint["choice"]]
        ad.selection_ = cars
        if mem.weight_ > 0:
            mem.extend(dsel.V, _relevant_rows(dsel, list(dsel.validation.query_ids)))
    lap("selection")
    base_geometry = "dual" if ad.geometry_ == "query" else ad.geometry_  # query-only: the dual closed form
    base = closed_form_adapter(tr.X, tr.pos_rows, dsel.corpus, geometry=base_geometry, rank=rank,
                               hard_negative_rows=tr.hard_negative_rows, validation_queries=V,
                               validation_relevance=vtable, device=device)
    lap("closed form")
    cids = d.corpus_ids or None
    # validation figures on the selection corpus (exact, or the pool: see metrics["validation_pool"]); test on all
    metrics: dict[str, Any] = {
        "frozen": {"validation_ndcg@10": ndcg_at_10(dsel.V, dsel.validation, dsel.corpus, corpus_ids=scids),
                   "selection_ndcg@10": ndcg_at_10(V, vtable, dsel.corpus, corpus_ids=scids),
                   "test_ndcg@10": ndcg_at_10(d.T, d.test, d.corpus, corpus_ids=cids)},
        "closed_form": {"validation_ndcg@10": ndcg_at_10(dsel.V, dsel.validation, dsel.corpus, base.operator_,
                                                         corpus_ids=scids),
                        "selection_ndcg@10": _num(base.validation_ndcg_),
                        "test_ndcg@10": ndcg_at_10(d.T, d.test, d.corpus, base.operator_, corpus_ids=cids),
                        "c": _num(base.init_scale_)},
        "trained": {"validation_ndcg@10": ndcg_at_10(dsel.V, dsel.validation, dsel.corpus, ad.operator_,
                                                     corpus_ids=scids),
                    "test_ndcg@10": ndcg_at_10(d.T, d.test, d.corpus, ad.operator_, corpus_ids=cids),
                    "learning_rate": ad.learning_rate_, "best_epoch": ad.best_epoch_},
        "n_train": len(tr), "n_validation": len(d.validation), "n_test": len(d.test),
        "geometry": ad.geometry_, "form": form, "rank": rank, "seed": seed,
        "selection": selection, "n_selection": len(vtable), "selection_fallback": fallback, "anchor": anchor,
        "warnings": warnings_,
        "split_overlap": {**overlap.as_dict(), "allowed": bool(overlap.refused and allow_test_overlap)},
        "mining": mining_record,
    }
    if "validation_subsample" in d.split:
        fz = _per_query_ndcg(dsel.V, dsel.validation, dsel.corpus, None, scids)
        metrics["validation_subsample"] = {**d.split["validation_subsample"],
                                           "frozen_ndcg@10_se": float(fz.std(ddof=1) / np.sqrt(fz.size))
                                           if fz.size > 1 else float("nan")}
    if memory == "auto":
        if mem is None:
            mem = fit_memory(dsel, tr.query_ids, tr.X, relevant, ad.operator_, corpus_ids=scids)
        if pool_rows is not None:  # remembered documents as corpus rows, before anything searches the corpus
            pooled_memory_to_corpus(mem, pool_rows)  # (the memory raises training positives: all in the pool)
        ad.memory_ = mem if mem.active else None
        metrics["memory"] = {**mem.describe(), "kept": ad.memory_ is not None}
        warnings_.extend(mem.notes_)
    lap("figures and memory")
    if pool_record is not None:
        if pool_rows is not None:  # the deployed map's top 10 over the whole corpus: how much lay in the pool
            pool_record.update(pool_coverage(d, ad.operator_, pool_rows),
                               **{"validation_ndcg@10_pooled": metrics["trained"]["validation_ndcg@10"]})
        metrics["validation_pool"] = pool_record
        lap("pool coverage")
    seen_ids = list(tr.query_ids) + (list(d.validation.query_ids) if ad.memory_ is not None else [])
    deployed = (metrics["trained"]["test_ndcg@10"] if ad.memory_ is None  # the map alone: scored above already
                else float(np.mean(_adapter_ndcg(d.T, d.test, d.corpus, ad, cids))))
    metrics["deployed"] = {"test_ndcg@10": deployed,
                           "memory": ad.memory_ is not None,
                           "seen_documents_from": "train + validation queries" if ad.memory_ is not None
                           else "train queries"}
    v = validation_gain(dsel, ad.operator_, seed=seed)
    metrics["validation_vs_frozen"] = v
    if not v["ci_low"] > 0:
        who = "the adapter" if ad.memory_ is None else "the adapter's map (before its memory)"
        warnings_.append(f"{who} is not better than frozen on validation beyond noise: "
                         f"{v['diff']:+.4f} [{v['ci_low']:+.4f}, {v['ci_high']:+.4f}] NDCG@10 over {v['n']} queries")
    lap("figures and memory")
    if report:
        from .generalisation import generalisation_report

        models: dict[str, Any] = {"closed-form": base.operator_, f"trained {ad.geometry_}": ad.operator_}
        if ad.memory_ is not None:
            models[f"trained {ad.geometry_} + memory"] = ad
        gen = generalisation_report(d, tr.query_ids, models, seed=seed, seen_query_ids=seen_ids)
        metrics["generalisation"] = gen.as_dict()
        ad.generalisation_ = gen
        lap("generalisation report")
    if ad.selection_ is not None:
        metrics["cars"] = {"choice": ad.selection_.choice, "score": ad.selection_.score,
                           "standard_error": ad.selection_.standard_error}
    if auto is not None:
        metrics["auto"] = auto
    if joint is not None:
        metrics["joint"] = joint
    metrics["seconds"] = {k: round(v, 3) for k, v in seconds.items()}
    import torch

    from .._runtime import package_versions

    versions = {**package_versions(), "torch": torch.__version__}
    from .generalisation import ids_digest

    split = {**d.split, "n_train": len(tr), "train_ids_sha256": ids_digest(tr.query_ids),
             "n_train_requested": n_train, "subset_seed": seed}
    return FitReport(ad, base, metrics, len(tr), d.dataset, d.encoder, versions, split=split,
                     adapter_train_ids=list(tr.query_ids), candidates=fitted if auto is not None else {},
                     joint=joint_maps)


def _split_record(adapter: Adapter) -> dict[str, Any]:
    """``adapter.json``'s ``extra.split`` (as written by ``asymgeo fit``), checked; ``{}`` when absent."""
    meta = getattr(adapter, "metadata_", None) or {}
    extra = meta.get("extra") or {}
    split = extra.get("split") if isinstance(extra, dict) else None
    if split is None:
        return {}
    where = "adapter.json: extra.split"
    if not isinstance(split, dict):
        raise ValueError(f"{where}: expected an object, got {type(split).__name__} (edited or damaged); "
                         "the queries that trained the adapter cannot be known: re-fit it")
    for key in ("seed", "n_train_requested", "subset_seed"):
        v = split.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise ValueError(f"{where}.{key}: expected an integer, got {v!r} (edited or damaged); re-fit the adapter")
    return split


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
    seed = _split_record(adapter).get("seed", DEFAULT_SPLIT_SEED)
    parts = adaptation_split(ds, int(seed))
    return set(parts["train"]) | set(parts["validation"])


def adapter_training_queries(adapter: Adapter, dataset: Any, *,
                             data_dir: str | os.PathLike | None = None) -> list[str] | None:
    """The query ids that trained ``adapter`` on ``dataset``, rebuilt from its ``adapter.json``.

    :func:`fit_adapter` trains on the adaptation split's labelled train queries (a seeded
    ``n_train`` subset when asked) and records their digest; the ids are rebuilt the same
    way and returned only when the digest agrees, else ``None`` (another dataset, an adapter
    not written by ``asymgeo fit``, or different data).
    """
    from ..data import DEFAULT_SPLIT_SEED, load_beir, nested_subsets
    from .generalisation import ids_digest

    ds = load_beir(dataset, data_dir=data_dir)
    meta = getattr(adapter, "metadata_", None) or {}
    split = _split_record(adapter)
    if meta.get("dataset") != ds.name or "train_ids_sha256" not in split:
        return None
    ids = training_pool(ds, split.get("seed", DEFAULT_SPLIT_SEED))
    n = split.get("n_train_requested")
    if n is not None:
        ids = nested_subsets(ids, sizes=[int(n)], seed=int(split.get("subset_seed", 0)))[int(n)]
    return ids if ids_digest(ids) == split["train_ids_sha256"] else None


def _against_frozen(res: Any, frozen: Any, seed: int = 0) -> dict[str, dict[str, float]]:
    """Per metric: frozen mean and the paired difference (adapter - frozen) with a 95% interval."""
    from ..retrieval.compare import paired_comparison

    out = {}
    pos = {q: i for i, q in enumerate(frozen.query_ids)}
    rows = [pos[q] for q in res.query_ids]
    for m, vals in res.per_query.items():
        base = frozen.per_query[m][rows]
        cmp = paired_comparison(vals, base, n_boot=2000, seed=seed)
        out[m] = {"adapter": float(vals.mean()), "frozen": float(base.mean()), "diff": cmp.mean_diff,
                  "ci_low": cmp.ci_low, "ci_high": cmp.ci_high}
    return out


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
    try:
        seen = adapter_seen_queries(ad, ds)
        train_ids = adapter_training_queries(ad, ds)
    except ValueError as exc:  # a damaged split record: name the folder it came from
        raise ValueError(f"{Path(adapter_dir) / str(exc)}") from None
    # one memory map of the corpus for both evaluations (each mapping of a fully read cache
    # counts its pages again in the process's resident memory)
    mem = None if ad.memory_ is None else (ad.memory_.table_, ad.memory_.threshold_, ad.memory_.weight_)
    if mem is not None and mem[0].n_documents and int(mem[0].documents.max()) >= int(emb.corpus.shape[0]):
        raise ValueError(f"{adapter_dir}: the adapter's memory names corpus row {int(mem[0].documents.max())}, "
                         f"beyond the {int(emb.corpus.shape[0]):,} documents of {ds.name}: another corpus")
    res = evaluate_frozen(ds, encoder, split=split, k=k, data_dir=data_dir, cache_dir=cache_dir,
                          operator=ad.operator_, backend=backend, ties=ties, exclude_queries=seen, cache=emb,
                          memory=mem)
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
    frozen = evaluate_frozen(ds, encoder, split=split, k=k, data_dir=data_dir, cache_dir=cache_dir,
                             backend=backend, ties=ties, exclude_queries=seen, cache=emb)
    vs = _against_frozen(res, frozen)
    generalisation = None
    if train_ids is None:
        notes.append("the training queries cannot be rebuilt from adapter.json: no seen / unseen-document split")
    else:
        from ..retrieval.compare import paired_comparison
        from ..retrieval.generalisation import seen_document_split, seen_documents

        qrels = ds.all_qrels()
        # a memory holds the validation queries too: their documents are seen as well
        seen_docs = seen_documents(qrels, sorted(seen) if ad.memory_ is not None else train_ids)
        sp = seen_document_split({q: ds.qrels(split)[q] for q in res.query_ids}, seen_docs)
        metric = f"ndcg@{k}"  # always among evaluate_frozen's default metrics
        a_of = dict(zip(res.query_ids, res.per_query[metric].tolist()))
        f_of = dict(zip(frozen.query_ids, frozen.per_query[metric].tolist()))
        generalisation = {"metric": metric, "n_seen_documents": len(seen_docs)}
        for name, ids in (("seen", sp.seen), ("unseen", sp.unseen)):
            if ids:
                cmp = paired_comparison([a_of[q] for q in ids], [f_of[q] for q in ids], n_boot=2000, seed=0)
                generalisation[name] = {"n": len(ids), "adapter": cmp.mean_a, "frozen": cmp.mean_b,
                                        "diff": cmp.mean_diff, "ci_low": cmp.ci_low, "ci_high": cmp.ci_high}
            else:
                generalisation[name] = {"n": 0}
    res.extra.update(adapter=str(adapter_dir), geometry=ad.geometry_, form=ad.form,
                     rank=int(ad.query_map_.shape[0]), notes=notes, vs_frozen=vs, generalisation=generalisation)
    return res
