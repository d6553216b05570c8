"""The generalisation report: whether an adapter helps the queries it has not seen.

Every adapter asymgeo scores is reported on the test queries split by whether one of
their relevant documents was a training positive (:mod:`asymgeo.retrieval.generalisation`
defines "seen"), against the frozen model with a paired 95% bootstrap interval, beside the
*document prior* (frozen + ``beta`` for training positives, ``beta`` chosen on validation):
the simplest baseline that gains from memorised documents without any geometry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._ids import IdIndex

__all__ = ["GeneralisationReport", "generalisation_report", "ids_digest", "SUBSETS"]

#: Report columns: all test queries, seen-document queries, unseen-document queries, and
#: every query scored on its unseen relevant documents only.
SUBSETS = ("all", "seen", "unseen", "unseen_relevant")
_LABELS = {"all": "all", "seen": "seen-doc", "unseen": "unseen-doc", "unseen_relevant": "unseen-rel"}


def ids_digest(ids: Sequence[str]) -> str:
    """SHA-256 of the sorted ids, one per line (records which queries trained an adapter)."""
    return hashlib.sha256("\n".join(sorted(map(str, ids))).encode()).hexdigest()


@dataclass
class GeneralisationReport:
    """NDCG@k of several models on the test subsets, each against frozen.

    ``rows[name][subset]`` holds ``n`` (queries), ``ndcg`` (mean), and for every model but
    frozen ``diff`` (mean paired difference to frozen), ``ci_low``, ``ci_high`` (95%
    bootstrap); ``prior_weight`` the validation-chosen ``beta`` of the document prior;
    ``seen`` the subset sizes; ``headline`` one sentence on the model named ``focus``.
    """

    rows: dict[str, dict[str, dict[str, float]]]
    prior_weight: float
    prior_validation: dict[float, float]
    seen: dict[str, Any]
    focus: str
    k: int = 10
    headline: str = ""
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "prior_weight": self.prior_weight,
                "prior_validation_ndcg": {str(b): v for b, v in self.prior_validation.items()},
                "seen": self.seen, "focus": self.focus, "k": self.k, "headline": self.headline,
                "notes": list(self.notes)}

    def format_table(self) -> str:
        """A plain-text table: one row per model, ``NDCG (diff [lo, hi])`` per subset."""
        w = 31
        head = f"{'NDCG@' + str(self.k):<28}" + "".join(
            f"{_LABELS[s] + ' (' + str(self.rows['frozen'][s]['n']) + ')':>{w}}" for s in SUBSETS)
        lines = [head]
        for name, cells in self.rows.items():
            parts = []
            for s in SUBSETS:
                c = cells[s]
                if not c["n"]:
                    parts.append(f"{'-':>{w}}")
                elif "diff" in c:
                    parts.append(f"{c['ndcg']:.4f} {c['diff']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]".rjust(w))
                else:
                    parts.append(f"{c['ndcg']:>{w}.4f}")
            lines.append(f"{name:<28}" + "".join(parts))
        return "\n".join(lines)


def _per_query(indices: np.ndarray, query_ids: Sequence[str], qrels: Mapping[str, Mapping[str, int]],
               corpus_ids: Sequence[str], k: int) -> dict[str, float]:
    from ..retrieval.metrics import RelevanceTable, evaluate_indices

    wanted = {q: qrels[q] for q in query_ids if any(g > 0 for g in qrels[q].values())}
    if not wanted:
        return {}
    table = RelevanceTable(wanted, list(query_ids), corpus_ids, unknown_docs="ignore")
    res = evaluate_indices(indices[:, :k], table, [f"ndcg@{k}"])
    return dict(zip(res.query_ids, res.per_query[f"ndcg@{k}"].tolist()))


def _cell(values: dict[str, float], frozen: dict[str, float] | None, subset: Sequence[str],
          n_boot: int, seed: int) -> dict[str, float]:
    from ..retrieval.compare import paired_comparison

    qs = [q for q in subset if q in values]
    if not qs:
        return {"n": 0}
    out: dict[str, float] = {"n": len(qs), "ndcg": float(np.mean([values[q] for q in qs]))}
    if frozen is not None and len(qs) == 1:  # one query: a difference, no interval
        diff = values[qs[0]] - frozen[qs[0]]
        out.update(diff=diff, ci_low=float("nan"), ci_high=float("nan"))
    elif frozen is not None:
        cmp = paired_comparison([values[q] for q in qs], [frozen[q] for q in qs], n_boot=n_boot, seed=seed)
        out.update(diff=cmp.mean_diff, ci_low=cmp.ci_low, ci_high=cmp.ci_high)
    return out


def _search(Q: np.ndarray, corpus: np.ndarray, depth: int, operator: Any, corpus_ids: Sequence[str] | None = None):
    """Exact top-``depth``; exact ties in trec_eval's order when ``corpus_ids`` are given (as ``evaluate``)."""
    from ..retrieval.search import exact_search, search_trec_order

    depth = min(depth, corpus.shape[0])
    if corpus_ids is not None:
        return search_trec_order(Q, corpus, depth, corpus_ids, operator=operator)
    return exact_search(Q, corpus, depth, operator=operator, progress=None)


def _prior_rankings(Q: np.ndarray, corpus: np.ndarray, seen_rows: np.ndarray, is_seen: np.ndarray,
                    k: int, betas: Sequence[float]) -> dict[float, np.ndarray]:
    from ..retrieval.generalisation import document_prior_topk

    fro = _search(Q, corpus, k, None)
    if seen_rows.size == 0:
        return {b: fro.indices[:, :k] for b in betas}
    pri = _search(Q, corpus[seen_rows], k, None)
    p_idx = seen_rows[pri.indices]
    return {b: document_prior_topk(fro.scores, fro.indices, pri.scores, p_idx, is_seen, b, k) for b in betas}


def generalisation_report(  # noqa: C901 - one table, built subset by subset
    data: Any,
    train_query_ids: Sequence[str],
    operators: Mapping[str, Any],
    *,
    focus: str | None = None,
    k: int = 10,
    n_boot: int = 2000,
    seed: int = 0,
    seen_query_ids: Sequence[str] | None = None,
) -> GeneralisationReport:
    """The generalisation table of ``operators`` (``{name: (p, p) operator}``) on ``data``'s test split.

    Parameters
    ----------
    data : :class:`~asymgeo.adapters.workflow.AdaptationData` (test and validation queries,
        the corpus, the merged qrels and corpus ids).
    train_query_ids : the queries that trained the adapters: their positives are "seen".
    operators : models to report besides frozen and the document prior: a (p, p) operator,
        or anything with ``search(queries, corpus, k, corpus_ids=...) -> (scores, indices)``
        (an :class:`~asymgeo.adapters.Adapter` with a document memory).
    focus : the model the headline sentence is about (default: the last one).
    seen_query_ids : the queries whose relevant documents count as *seen* for the test split
        (default ``train_query_ids``; an adapter whose memory also holds the validation
        queries passes both).  The document prior always boosts the training positives only
        (its ``beta`` is chosen on validation).  With a wider definition, ``seen`` also records
        the split by ``train_query_ids`` alone (``by_train_queries``).
    """
    from ..retrieval.generalisation import PRIOR_WEIGHTS, choose_prior_weight, seen_document_split, seen_documents

    qrels, corpus_ids = data.qrels, data.corpus_ids
    prior_seen = seen_documents(qrels, train_query_ids)
    seen_ids = prior_seen if seen_query_ids is None else seen_documents(qrels, seen_query_ids)
    if isinstance(corpus_ids, IdIndex):  # look up the seen documents only (no dict of every id)
        found = corpus_ids.lookup(sorted(prior_seen))
        seen_rows = np.sort(found[found >= 0]).astype(np.int64)
    else:
        row_of = {d: i for i, d in enumerate(corpus_ids)}
        seen_rows = np.array(sorted(row_of[d] for d in prior_seen if d in row_of), dtype=np.int64)
    is_seen = np.zeros(len(corpus_ids), dtype=bool)
    is_seen[seen_rows] = True
    test_ids = list(data.test.query_ids)
    test_qrels = {q: qrels[q] for q in test_ids}
    split = seen_document_split(test_qrels, seen_ids)
    depth = k + max([split.n_seen_relevant.get(q, 0) for q in test_ids] + [0])

    # the document prior: beta on validation only
    val_ids = list(data.validation.query_ids)
    val_rank = _prior_rankings(data.V, data.corpus, seen_rows, is_seen, k, PRIOR_WEIGHTS)
    val_ndcg: dict[float, float] = {}
    for b, idx in val_rank.items():
        val_per = _per_query(idx, val_ids, qrels, corpus_ids, k)
        val_ndcg[b] = float(np.mean(list(val_per.values()))) if val_per else float("nan")
    beta = choose_prior_weight(val_ndcg)

    from ..retrieval.generalisation import unseen_relevant_ranking

    def subsets_of(indices: np.ndarray) -> tuple[dict[str, float], dict[str, float]]:
        full = _per_query(indices, test_ids, qrels, corpus_ids, k)
        idx_u, kept, q_u = unseen_relevant_ranking(indices, test_ids, test_qrels, corpus_ids, seen_ids, k)
        unseen_rel = _per_query(idx_u, kept, q_u, corpus_ids, k) if kept else {}
        return full, unseen_rel

    rankings: dict[str, np.ndarray] = {"frozen": _search(data.T, data.corpus, depth, None, corpus_ids).indices}
    prior_name = f"doc prior (beta={beta:g})"
    rankings[prior_name] = _prior_rankings(data.T, data.corpus, seen_rows, is_seen, depth, [beta])[beta]
    for name, M in operators.items():
        if hasattr(M, "search"):
            rankings[name] = M.search(data.T, data.corpus, depth, corpus_ids=corpus_ids)[1]
        else:
            rankings[name] = _search(data.T, data.corpus, depth, M, corpus_ids).indices
    per = {name: subsets_of(idx) for name, idx in rankings.items()}
    frozen_full, frozen_u = per["frozen"]
    groups = {"all": test_ids, "seen": split.seen, "unseen": split.unseen}
    rows: dict[str, dict[str, dict[str, float]]] = {}
    for name, (full, unseen_rel) in per.items():
        ref_full = None if name == "frozen" else frozen_full
        ref_u = None if name == "frozen" else frozen_u
        rows[name] = {s: _cell(full, ref_full, groups[s], n_boot, seed) for s in ("all", "seen", "unseen")}
        rows[name]["unseen_relevant"] = _cell(unseen_rel, ref_u, list(frozen_u), n_boot, seed)
    focus = focus if focus is not None else (list(operators)[-1] if operators else prior_name)
    seen_record: dict[str, Any] = {**split.as_dict(),
                                   "n_seen_documents": int(seen_rows.size) if seen_query_ids is None else len(seen_ids),
                                   "n_train_queries": len(train_query_ids),
                                   "defined_by": "train queries" if seen_query_ids is None
                                   else f"{len(seen_query_ids)} train + validation queries"}
    if seen_query_ids is not None:
        by_train = seen_document_split(test_qrels, prior_seen)
        seen_record["by_train_queries"] = {"n_seen": len(by_train.seen), "n_unseen": len(by_train.unseen)}
    report = GeneralisationReport(rows, beta, val_ndcg, seen_record, focus, k)
    report.headline = _headline(report, prior_name)
    if not split.unseen:
        report.notes.append("every test query has a relevant document that was a training positive: the "
                            "unseen-doc column is empty; unseen-rel scores each query on its other relevant "
                            "documents")
    if not split.seen:
        report.notes.append("no test query shares a relevant document with the training queries: only the "
                            "unseen part exists")
    return report


def _fmt(c: Mapping[str, float]) -> str:
    return f"{c['diff']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]"


def _verdict(c: Mapping[str, float]) -> str:
    if c["ci_high"] < 0:
        return "hurts"
    if c["ci_low"] > 0:
        return "helps"
    return "no clear change on"


def _headline(rep: GeneralisationReport, prior_name: str) -> str:
    """One sentence a person can act on, about ``rep.focus`` against frozen."""
    f = rep.rows.get(rep.focus)
    if f is None or "diff" not in f["all"]:
        return ""
    k = rep.k
    pr = rep.rows[prior_name]["all"]
    prior = f"; the document prior alone (no geometry) gives {_fmt(pr)} on all queries."
    if f["seen"]["n"] and f["unseen"]["n"]:
        u = f["unseen"]
        whose = ("a training or validation positive" if "validation" in str(rep.seen.get("defined_by", ""))
                 else "a training positive")
        return (f"{rep.focus}: {_fmt(f['seen'])} NDCG@{k} on the {f['seen']['n']} test queries whose relevant "
                f"documents include {whose}, {_fmt(u)} on the other {u['n']} "
                f"({_verdict(u)} queries unlike the training set)" + prior)
    a = f["all"]
    text = f"{rep.focus}: {_fmt(a)} NDCG@{k} on all {a['n']} test queries ({_verdict(a)} them)"
    if not f["unseen"]["n"]:
        share = rep.seen.get("mean_seen_share", float("nan"))
        text += (f"; every test query has a relevant training-positive document ({100 * share:.0f}% of their "
                 f"relevant documents on average), so a document split cannot tell memorised documents from "
                 f"transfer here")
    return text + prior
