r"""Ranking metrics that agree with trec_eval, per query and averaged.

Two entry points share one vectorised kernel:

* :func:`evaluate_run` takes trec-style dicts, a run ``{qid: {docid: score}}`` and
  qrels ``{qid: {docid: grade}}``;
* :func:`evaluate_indices` takes the ``(n, k)`` index matrix of
  :func:`asymgeo.retrieval.search.exact_search` and a :class:`RelevanceTable` (fast path for
  experiments: no dicts, no strings).

Definitions (``rank`` counts from 1; ``z_j = 1`` when the document at rank ``j``
has grade ``>= 1``; ``R_q`` = number of documents with grade ``>= 1`` in the qrels):

``ndcg@k``
    The paper's Appendix F metric, binary gains:
    :math:`\sum_{j\le k} z_j/\log_2(j+1) \,/\, \sum_{j\le\min(k,R_q)} 1/\log_2(j+1)`.
``ndcg_graded@k``
    trec_eval's ``ndcg_cut.k``: gain = grade (linear), ideal DCG from all judged
    grades sorted in decreasing order.  Equal to ``ndcg@k`` on binary qrels.
``recall@k``
    :math:`\sum_{j\le k} z_j / R_q` (trec_eval ``recall.k``).
``precision@k``
    :math:`\sum_{j\le k} z_j / k` (trec_eval ``P.k``; divides by k even when fewer
    documents were retrieved).
``mrr@k``
    ``1 / rank`` of the first relevant document within the first k, else 0
    (trec_eval ``recip_rank`` on the run truncated to k).
``map@k``
    :math:`\sum_{j\le k} z_j\,\mathrm{P@}j / R_q` (trec_eval ``map_cut.k``; divides
    by R_q, not by min(k, R_q)).

Grades below 1 are not relevant; negative grades are treated as 0.

Ordering of a dict run (as trec_eval does it)
    Documents are ranked by score descending; equal scores are ordered by document
    id in *descending* string order (trec_eval compares ids with ``strcmp``; checked
    empirically against pytrec_eval).  An index matrix from :func:`exact_search`
    is used in its given order (ties there are by lower corpus index); reorder it with
    :func:`order_ties_by_id` to reproduce trec_eval (what
    :func:`asymgeo.data.evaluate_frozen` does by default).

Queries without relevant documents (``R_q = 0``)
    Every metric above divides by ``R_q`` or is meaningless without a relevant
    document, and the paper averages over queries with ``R_q > 0``.  Such queries are
    **excluded** from the averages; their number is reported as
    ``EvalResult.n_no_relevant``.  (trec_eval would score them 0 and include them.)
    When no query has a relevant document the evaluation raises ``ValueError``: no
    metric is ever NaN.  Every grade of every query must be a finite number.

Id mismatches
    A query that has relevant documents in the qrels but is absent from the run
    raises ``ValueError`` naming it (``missing="zero"`` scores it 0 instead, which
    is trec_eval's ``-c`` option).  Run queries absent from the qrels are ignored
    and counted in ``EvalResult.n_unjudged``; a run sharing no query with the qrels
    is an error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._ids import IdIndex

__all__ = [
    "METRICS",
    "EvalResult",
    "RelevanceTable",
    "parse_metric",
    "evaluate_run",
    "evaluate_indices",
    "ranked_grades",
    "order_ties_by_id",
    "format_metrics",
]

METRICS = ("ndcg", "ndcg_graded", "recall", "precision", "mrr", "map")
_ALIASES = {"p": "precision", "recip_rank": "mrr", "ndcg_cut": "ndcg_graded", "map_cut": "map"}
_METRIC_RE = re.compile(r"^\s*([a-zA-Z_]+)\s*@\s*(\d+)\s*$")
DEFAULT_METRICS = ("ndcg@10", "ndcg_graded@10", "recall@10", "recall@100", "precision@10", "mrr@10", "map@10")


def parse_metric(spec: str) -> tuple[str, int]:
    """``"ndcg@10"`` -> ``("ndcg", 10)``; raise naming the bad spec."""
    if not isinstance(spec, str):
        raise TypeError(f"metrics: expected strings like 'ndcg@10', got {spec!r}")
    m = _METRIC_RE.match(spec)
    if not m:
        raise ValueError(f"metrics: cannot parse {spec!r}; expected NAME@K, e.g. 'ndcg@10'")
    name = m.group(1).lower()
    name = _ALIASES.get(name, name)
    k = int(m.group(2))
    if name not in METRICS:
        raise ValueError(f"metrics: unknown metric {m.group(1)!r} in {spec!r}; known: {', '.join(METRICS)}")
    if k < 1:
        raise ValueError(f"metrics: cut-off must be >= 1 in {spec!r}")
    return name, k


@dataclass(frozen=True)
class EvalResult:
    """Per-query and mean metrics.

    Attributes
    ----------
    query_ids : list of str
        Evaluated queries (those with ``R_q > 0``), in the order of ``per_query`` rows.
    per_query : dict metric -> (n,) float64 array
    mean : dict metric -> float
        Mean over ``query_ids`` (never NaN: no evaluable query is an error).
    n_no_relevant : int
        Queries excluded because they have no relevant document in the qrels.
    n_unjudged : int
        Run queries ignored because the qrels do not mention them.
    n_missing : int
        Qrels queries (with relevant documents) absent from the run, scored 0
        (only with ``missing="zero"``).
    """

    query_ids: list[str]
    per_query: dict[str, np.ndarray]
    mean: dict[str, float]
    n_no_relevant: int = 0
    n_unjudged: int = 0
    n_missing: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:  # the means and counts, never the per-query arrays
        means = ", ".join(f"{m}={v:.4f}" for m, v in self.mean.items())
        return f"EvalResult({len(self.query_ids)} queries: {means})"

    def by_query(self, metric: str) -> dict[str, float]:
        """``{qid: value}`` for one metric (input for :func:`asymgeo.retrieval.compare.paired_comparison`)."""
        return {q: float(v) for q, v in zip(self.query_ids, self.per_query[metric])}

    def query(self, qid: str) -> dict[str, float]:
        i = self.query_ids.index(qid)
        return {m: float(v[i]) for m, v in self.per_query.items()}

    def as_dict(self) -> dict[str, Any]:
        return {
            "mean": dict(self.mean),
            "n_queries": len(self.query_ids),
            "n_no_relevant": self.n_no_relevant,
            "n_unjudged": self.n_unjudged,
            "n_missing": self.n_missing,
        }


# --------------------------------------------------------------------------- kernel
def _discounts(k: int) -> np.ndarray:
    return 1.0 / np.log2(np.arange(2, k + 2, dtype=np.float64))


def _compute(
    grades: np.ndarray, n_rel: np.ndarray, ideal: np.ndarray, metrics: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], np.ndarray]:
    """Kernel: ``grades`` (n, K) ranked grades (0 beyond the run), ``n_rel`` (n,) R_q,
    ``ideal`` (n, K') grades sorted decreasingly (0-padded)."""
    n, K = grades.shape
    kmax = max([k for _, k in metrics] + [1])
    if K < kmax:
        grades = np.pad(grades, ((0, 0), (0, kmax - K)))
    if ideal.shape[1] < kmax:
        ideal = np.pad(ideal, ((0, 0), (0, kmax - ideal.shape[1])))
    g = np.maximum(grades[:, :kmax].astype(np.float64), 0.0)
    z = (g >= 1).astype(np.float64)
    disc = _discounts(kmax)
    cum_disc = np.cumsum(disc)
    R = n_rel.astype(np.float64)
    Rsafe = np.where(R > 0, R, 1.0)
    cz = np.cumsum(z, axis=1)
    out: dict[tuple[str, int], np.ndarray] = {}
    for name, k in metrics:
        if name == "ndcg":
            dcg = z[:, :k] @ disc[:k]
            m = np.minimum(k, n_rel).astype(np.int64)
            idcg = np.where(m > 0, cum_disc[np.maximum(m, 1) - 1], 1.0)
            v = dcg / idcg
        elif name == "ndcg_graded":
            dcg = g[:, :k] @ disc[:k]
            idcg = np.maximum(ideal[:, :k].astype(np.float64), 0.0) @ disc[:k]
            v = np.divide(dcg, idcg, out=np.zeros(n), where=idcg > 0)
        elif name == "recall":
            v = cz[:, k - 1] / Rsafe
        elif name == "precision":
            v = cz[:, k - 1] / k
        elif name == "mrr":
            hit = z[:, :k] > 0
            first = hit.argmax(axis=1)
            v = np.where(hit.any(axis=1), 1.0 / (first + 1.0), 0.0)
        elif name == "map":
            prec = cz[:, :k] / np.arange(1, k + 1)
            v = (prec * z[:, :k]).sum(axis=1) / Rsafe
        else:  # pragma: no cover - parse_metric guards this
            raise ValueError(name)
        out[(name, k)] = np.where(R > 0, v, 0.0)
    return out


def _finish(
    specs: Sequence[str],
    parsed: Sequence[tuple[str, int]],
    qids: list[str],
    grades: np.ndarray,
    n_rel: np.ndarray,
    ideal: np.ndarray,
    *,
    n_unjudged: int,
    n_missing: int,
) -> EvalResult:
    keep = n_rel > 0
    n_no_rel = int((~keep).sum())
    if not keep.any():
        raise ValueError(
            f"qrels: none of the {len(qids)} judged quer{'y' if len(qids) == 1 else 'ies'} has a relevant "
            "document (grade >= 1); no metric can be computed"
        )
    qids = [q for q, kp in zip(qids, keep) if kp]
    vals = _compute(grades[keep], n_rel[keep], ideal[keep], parsed)
    per_query = {s: vals[p] for s, p in zip(specs, parsed)}
    mean = {s: float(v.mean()) for s, v in per_query.items()}
    return EvalResult(qids, per_query, mean, n_no_rel, n_unjudged, n_missing)


def _parse_all(metrics: Iterable[str] | str) -> tuple[list[str], list[tuple[str, int]]]:
    if isinstance(metrics, str):
        metrics = [metrics]
    specs = list(metrics)
    if not specs:
        raise ValueError("metrics: expected at least one metric, e.g. 'ndcg@10'")
    return specs, [parse_metric(s) for s in specs]


def _check_qrels(qrels: Any) -> Mapping[str, Mapping[str, int]]:
    if not isinstance(qrels, Mapping):
        raise TypeError(f"qrels: expected a dict {{qid: {{docid: grade}}}}, got {type(qrels).__name__}")
    if not qrels:
        raise ValueError("qrels: empty; no query has relevance judgements")
    for qid, docs in qrels.items():
        if not isinstance(docs, Mapping):
            raise TypeError(f"qrels[{qid!r}]: expected a dict {{docid: grade}}, got {type(docs).__name__}")
        for d, gr in docs.items():
            if isinstance(gr, bool) or not isinstance(gr, (int, np.integer, float, np.floating)) or not math.isfinite(gr):
                raise ValueError(f"qrels[{qid!r}][{d!r}]: grade must be a finite number, got {gr!r}")
    return qrels


def _rel_stats(docs: Mapping[str, Any]) -> tuple[int, np.ndarray]:
    gr = np.fromiter((float(v) for v in docs.values()), dtype=np.float64, count=len(docs))
    return int((gr >= 1).sum()), np.sort(np.maximum(gr, 0.0))[::-1]


# --------------------------------------------------------------------------- dict path
def evaluate_run(
    run: Mapping[str, Mapping[str, float]],
    qrels: Mapping[str, Mapping[str, int]],
    metrics: Iterable[str] | str = DEFAULT_METRICS,
    *,
    missing: str = "error",
) -> EvalResult:
    """Evaluate a trec-style run against qrels (see module docstring for definitions).

    Parameters
    ----------
    run : {qid: {docid: score}}
        Higher score = better; ties ordered by docid descending (trec_eval).
    qrels : {qid: {docid: grade}}
        Integer (or real) grades; ``>= 1`` is relevant.
    metrics : iterable of "NAME@K"
        NAME in ``ndcg, ndcg_graded, recall, precision, mrr, map``.
    missing : {"error", "zero"}
        What to do with a qrels query (with relevant documents) absent from the run.
    """
    specs, parsed = _parse_all(metrics)
    if missing not in ("error", "zero"):
        raise ValueError(f"missing: expected 'error' or 'zero', got {missing!r}")
    if not isinstance(run, Mapping):
        raise TypeError(f"run: expected a dict {{qid: {{docid: score}}}}, got {type(run).__name__}")
    if not run:
        raise ValueError("run: empty; no query was retrieved")
    qrels = _check_qrels(qrels)
    common = [q for q in run if q in qrels]
    if not common:
        raise ValueError(
            f"run and qrels share no query id (run has e.g. {next(iter(run))!r}, "
            f"qrels has e.g. {next(iter(qrels))!r})"
        )
    n_unjudged = len(run) - len(common)
    absent = [q for q, d in qrels.items() if q not in run and any(float(g) >= 1 for g in d.values())]
    if absent and missing == "error":
        raise ValueError(
            f"run: {len(absent)} qrels quer{'y' if len(absent) == 1 else 'ies'} with relevant "
            f"documents missing from the run (first: {absent[0]!r}); pass missing='zero' to score them 0"
        )
    qids = common + absent
    kmax = max(k for _, k in parsed)
    n = len(qids)
    grades = np.zeros((n, kmax), dtype=np.float64)
    n_rel = np.zeros(n, dtype=np.int64)
    ideal = np.zeros((n, kmax), dtype=np.float64)
    for i, q in enumerate(qids):
        rel = qrels[q]
        R, ideal_q = _rel_stats(rel)
        n_rel[i] = R
        ideal[i, : min(kmax, ideal_q.size)] = ideal_q[:kmax]
        docs = run.get(q)
        if docs is not None and not isinstance(docs, Mapping):
            raise TypeError(f"run[{q!r}]: expected a dict {{docid: score}}, got {type(docs).__name__}")
        if not docs:
            continue
        # trec_eval order: score descending, then docid descending (strcmp)
        items = sorted(docs.items(), key=lambda kv: kv[0], reverse=True)
        items.sort(key=lambda kv: kv[1], reverse=True)
        for j, (d, s) in enumerate(items[:kmax]):
            if s != s:  # NaN (float or numpy scalar)
                raise ValueError(f"run[{q!r}][{d!r}]: score is NaN")
            gr = rel.get(d)
            if gr is not None:
                grades[i, j] = gr
    return _finish(specs, parsed, qids, grades, n_rel, ideal, n_unjudged=n_unjudged, n_missing=len(absent))


# --------------------------------------------------------------------------- array path
class RelevanceTable:
    """Qrels as arrays over corpus and query row indices, for :func:`evaluate_indices`.

    Parameters
    ----------
    qrels : {qid: {docid: grade}}
    query_ids : sequence of str
        Row order of the queries that were searched (e.g. the embedding cache's).
    corpus_ids : sequence of str
        Row order of the corpus.
    unknown_docs : {"error", "ignore"}
        A judged document id that is not in ``corpus_ids`` raises by default; with
        ``"ignore"`` it can never be retrieved but still counts in ``R_q`` (as in
        trec_eval).

    Only queries that appear in ``qrels`` *and* ``query_ids`` are kept; qrels queries
    absent from ``query_ids`` raise (they could not have been searched).
    """

    def __init__(
        self,
        qrels: Mapping[str, Mapping[str, int]],
        query_ids: Sequence[str],
        corpus_ids: Sequence[str],
        *,
        unknown_docs: str = "error",
    ):
        qrels = _check_qrels(qrels)
        if unknown_docs not in ("error", "ignore"):
            raise ValueError(f"unknown_docs: expected 'error' or 'ignore', got {unknown_docs!r}")
        qpos = {str(q): i for i, q in enumerate(query_ids)}
        if len(qpos) != len(query_ids):
            raise ValueError("query_ids: contains duplicate ids")
        if isinstance(corpus_ids, IdIndex):  # unique by construction; looked up without a dict of every id
            judged = sorted({str(d) for q in qrels if q in qpos for d in qrels[q]})
            dpos = {d: int(j) for d, j in zip(judged, corpus_ids.lookup(judged), strict=True) if j >= 0}
        else:
            dpos = {str(d): i for i, d in enumerate(corpus_ids)}
            if len(dpos) != len(corpus_ids):
                raise ValueError("corpus_ids: contains duplicate ids")
        absent = [q for q in qrels if q not in qpos]
        if absent:
            raise ValueError(
                f"qrels: {len(absent)} quer{'y' if len(absent) == 1 else 'ies'} not among query_ids "
                f"(first: {absent[0]!r}); the qrels and the searched queries do not match"
            )
        self.query_ids = [str(q) for q in qrels]
        self.rows = np.array([qpos[q] for q in self.query_ids], dtype=np.int64)
        self.n_docs = len(corpus_ids)
        keys, vals = [], []
        n_rel = np.zeros(len(self.query_ids), dtype=np.int64)
        ideals = []
        for i, q in enumerate(self.query_ids):
            docs = qrels[q]
            n_rel[i], ideal = _rel_stats(docs)
            ideals.append(ideal)
            for d, g in docs.items():
                j = dpos.get(str(d))
                if j is None:
                    if unknown_docs == "error":
                        raise ValueError(
                            f"qrels[{q!r}]: document {d!r} is not in corpus_ids; "
                            "pass unknown_docs='ignore' to skip such judgements"
                        )
                    continue
                keys.append(i * self.n_docs + j)
                vals.append(float(g))
        order = np.argsort(np.asarray(keys, dtype=np.int64), kind="stable")
        self._keys = np.asarray(keys, dtype=np.int64)[order]
        self._vals = np.asarray(vals, dtype=np.float64)[order]
        self.n_rel = n_rel
        width = max([a.size for a in ideals] + [1])
        self.ideal = np.zeros((len(ideals), width))
        for i, a in enumerate(ideals):
            self.ideal[i, : a.size] = a

    def __len__(self) -> int:
        return len(self.query_ids)

    def grades(self, indices: np.ndarray) -> np.ndarray:
        """Grades of ranked documents: ``indices`` (len(self), K) -> (len(self), K) float64."""
        idx = np.asarray(indices)
        if idx.ndim != 2 or idx.shape[0] != len(self):
            raise ValueError(f"indices: expected shape ({len(self)}, K), got {idx.shape}")
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_docs):
            raise ValueError(f"indices: values must lie in [0, {self.n_docs}), got [{idx.min()}, {idx.max()}]")
        key = np.arange(len(self), dtype=np.int64)[:, None] * self.n_docs + idx.astype(np.int64)
        pos = np.searchsorted(self._keys, key)
        pos = np.minimum(pos, max(self._keys.size - 1, 0))
        hit = self._keys[pos] == key if self._keys.size else np.zeros(key.shape, bool)
        return np.where(hit, self._vals[pos] if self._vals.size else 0.0, 0.0)


def order_ties_by_id(
    scores: np.ndarray, indices: np.ndarray, corpus_ids: Sequence[str], *, descending: bool = True
) -> np.ndarray:
    """Reorder each ranked row so that exactly equal scores follow their document ids.

    trec_eval sorts a run by score descending and breaks exact ties by document id in
    descending ``strcmp`` order; :func:`asymgeo.retrieval.search.exact_search` breaks them by lower
    corpus index.  This kernel turns the second order into the first (``descending``,
    the default) or into ascending id order, so the metrics of an index matrix equal
    trec_eval's on the same float32 scores.  A tie group cut by the end of a row is
    sorted among its visible members only: search a little deeper than needed (as
    :func:`asymgeo.data.evaluate_frozen` does) so no group reaches the cut.

    Parameters
    ----------
    scores : (n, K) scores, descending along each row.
    indices : (n, K) corpus rows.
    corpus_ids : the ids of the corpus rows (Python string order = UTF-8 byte order = strcmp).

    Returns
    -------
    (n, K) int64 indices in trec_eval order.
    """
    S = np.asarray(scores)
    idx = np.asarray(indices, dtype=np.int64)
    if S.shape != idx.shape or S.ndim != 2:
        raise ValueError(f"scores, indices: expected equal 2-d shapes, got {S.shape} and {idx.shape}")
    if idx.size and (idx.min() < 0 or idx.max() >= len(corpus_ids)):
        raise ValueError(f"indices: values must lie in [0, {len(corpus_ids)}), got [{idx.min()}, {idx.max()}]")
    if idx.size == 0:
        return idx
    if isinstance(corpus_ids, IdIndex):
        rank = corpus_ids.sort_rank()
    else:
        rank = np.empty(len(corpus_ids), dtype=np.int64)
        rank[np.argsort(np.asarray(corpus_ids, dtype=object), kind="stable")] = np.arange(len(corpus_ids))
    id_key = -rank[idx] if descending else rank[idx]
    order = np.lexsort((id_key, -S.astype(np.float64)), axis=1)
    return np.take_along_axis(idx, order, axis=1)


def ranked_grades(indices: np.ndarray, table: RelevanceTable) -> np.ndarray:
    """Grades of the ranked documents for the table's queries (rows ``table.rows``)."""
    return table.grades(np.asarray(indices)[table.rows])


def evaluate_indices(
    indices: np.ndarray,
    table: RelevanceTable,
    metrics: Iterable[str] | str = DEFAULT_METRICS,
) -> EvalResult:
    """Evaluate an ``(n_queries, K)`` index matrix (rows in ``table``'s ``query_ids``
    order, ranked best first, e.g. from :func:`asymgeo.retrieval.search.exact_search`).

    Ranks are taken as given (exact_search orders ties by lower corpus index).
    """
    specs, parsed = _parse_all(metrics)
    idx = np.asarray(indices)
    if idx.ndim != 2:
        raise ValueError(f"indices: expected a 2-d (n_queries, K) array, got shape {idx.shape}")
    if table.rows.size and idx.shape[0] <= int(table.rows.max()):
        raise ValueError(
            f"indices: {idx.shape[0]} rows, but the relevance table refers to query row {int(table.rows.max())}"
        )
    g = ranked_grades(idx, table)
    return _finish(specs, parsed, list(table.query_ids), g, table.n_rel, table.ideal, n_unjudged=0, n_missing=0)


def format_metrics(result: EvalResult, *, title: str | None = None) -> str:
    """A small plain-text table of the mean metrics."""
    lines = [] if title is None else [title]
    width = max(len(m) for m in result.mean)
    for m, v in result.mean.items():
        lines.append(f"{m:<{width}}  {v:.4f}")
    lines.append(
        f"{'queries':<{width}}  {len(result.query_ids)}"
        + (f"  ({result.n_no_relevant} without relevant documents excluded)" if result.n_no_relevant else "")
    )
    return "\n".join(lines)
