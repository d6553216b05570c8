"""How the joint deployment's guard is scored (issue 36): the numbers quoted in docs/adapters.md.

    OMP_NUM_THREADS=1 python tools/memory_guard_study.py scifact all-MiniLM-L6-v2 --seeds 0 1 2 --out study.jsonl
    python tools/memory_guard_study.py --summary study.jsonl

One ``fit_adapter`` per seed (the default: ``geometry="auto"``, ``memory="auto"``,
``candidates="joint"``, about a minute on one core); then every joint candidate's memory is
fitted twice on the same trained maps: scored against the training keys alone with the
document-disjoint validation queries protected (the default), and leave-one-out against the
keys the deployed memory holds (training plus the other validation queries;
``fit_memory(leave_one_out=True)``).  For each, :func:`~asymgeo.adapters.workflow.choose_deployment`
picks a candidate; every candidate's per-query test NDCG@10 (map plus extended memory) and
the strict unseen-document test queries (no relevant document is a training or validation
positive) are written, so any deployment rule can be replayed offline (``--summary``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/: run as a script or loaded by path
from study_records import read_jsonl_records  # noqa: E402

#: validation metrics at depth recorded per candidate (``val_deep``) for the guard replays of ``--deep``
DEEP_METRICS = ("ndcg@100", "ndcg@1000", "mrr@1000")
#: guard margins (paired standard errors) the ``--deep`` replays try
DEEP_MARGINS = (0.0, 0.25, 0.5, 0.75)


def _deep_values(queries: np.ndarray, table, corpus: np.ndarray, adapter, corpus_ids) -> dict[str, list[float]]:
    """Per-query :data:`DEEP_METRICS` of what ``adapter`` deploys (map plus memory; None: frozen)."""
    from asymgeo.retrieval.metrics import evaluate_indices
    from asymgeo.retrieval.search import exact_search, search_trec_order

    k = min(1000, corpus.shape[0])
    if adapter is None:
        idx = (search_trec_order(queries, corpus, k, corpus_ids).indices if corpus_ids is not None else
               exact_search(queries, corpus, k, progress=None).indices)
    else:
        _, idx = adapter.search(queries, corpus, k, corpus_ids=corpus_ids)
    res = evaluate_indices(idx, table, list(DEEP_METRICS)).per_query
    return {m: np.asarray(res[m], dtype=float).tolist() for m in DEEP_METRICS}


def study(dataset: str, encoder: str, seed: int, data_dir: str, cache_dir: str) -> dict:
    import torch

    from asymgeo.adapters import workflow as wf
    from asymgeo.retrieval.generalisation import seen_document_split, seen_documents

    torch.set_num_threads(1)
    kw = {"data_dir": data_dir, "cache_dir": cache_dir}
    t0 = time.time()
    rep = wf.fit_adapter(dataset, encoder, geometry="auto", seed=seed, memory="auto", candidates="joint",
                         report=False, guard_folds=1, **kw)  # the candidates; every guard is replayed below
    d = wf.load_adaptation_data(dataset, encoder, **kw)
    tr, cids = d.triples, d.corpus_ids or None
    frozen = wf._per_query_ndcg(d.T, d.test, d.corpus, None, cids)
    train_ids, val_ids = list(tr.query_ids), list(d.validation.query_ids)
    pos = {q: i for i, q in enumerate(d.test.query_ids)}
    unseen = seen_document_split({q: d.qrels[q] for q in d.test.query_ids},
                                 seen_documents(d.qrels, train_ids + val_ids)).unseen
    fv = wf._per_query_ndcg(d.V, d.validation, d.corpus, None, cids)
    val_rows = wf._relevant_rows(d, val_ids)
    out: dict = {"dataset": dataset, "encoder": encoder, "seed": seed, "frozen_val": fv.tolist(),
                 "frozen_val_deep": _deep_values(d.V, d.validation, d.corpus, None, cids),
                 "frozen_test": frozen.tolist(), "unseen_rows": sorted(pos[q] for q in unseen), "variants": {}}
    for loo in (False, True):
        mems = {n: wf.fit_memory(d, tr.query_ids, tr.X, d.relevant, a.operator_, corpus_ids=cids, extend=False,
                                 leave_one_out=loo) for n, a in rep.joint.items()}
        prot = next(iter(mems.values())).protected_
        choice = wf.choose_deployment({n: (rep.joint[n], mems[n]) for n in rep.joint}, fv, prot, seed=seed)
        cands = {}
        for n, a in rep.joint.items():
            m = mems[n]
            deep = None
            if not loo:  # what the guard sees: the memory on training keys only
                kept, a.memory_ = a.memory_, (m if m.active else None)
                deep = _deep_values(d.V, d.validation, d.corpus, a, cids)
                a.memory_ = kept
            if m.weight_ > 0:
                m.extend(d.V, val_rows)
            kept, a.memory_ = a.memory_, (m if m.active else None)
            v = wf._adapter_ndcg(d.T, d.test, d.corpus, a, cids)
            a.memory_ = kept
            cands[n] = {"val_values": m.validation_values_.tolist(), "test_values": v.tolist(),
                        "threshold": m.threshold_, "weight": m.weight_}
            if deep is not None:
                cands[n]["val_deep"] = deep
        out["variants"]["leave_one_out" if loo else "train_keys"] = {
            "choice": choice["choice"], "protected": [bool(x) for x in prot], "candidates": cands}
    out["seconds"] = time.time() - t0
    return out


def read_records(path: str) -> list[dict]:
    """The study's records, one JSON object per line; ``ValueError`` naming the file and line of a
    missing file, a damaged line or a record without the study's fields."""
    recs = read_jsonl_records(path, ("dataset", "encoder", "frozen_val", "frozen_test", "unseen_rows", "variants"))
    if not recs:
        raise ValueError(f"{path}: no study records")
    return recs


def _se(a: np.ndarray, b: np.ndarray) -> float:
    d = a - b
    return float(d.std(ddof=1) / np.sqrt(d.size))


def _guarded(vals: dict[str, np.ndarray], fz: np.ndarray, prot: np.ndarray, margin: float) -> list[str]:
    """Candidates whose mean protected gain over frozen is at least ``margin`` standard errors
    (``margin`` 0: the earlier guard; 0.5: the default); none passing: the one with the largest protected gain."""
    ok = []
    for n, x in vals.items():
        d = (x - fz)[prot]
        se = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else 0.0
        if float(d.mean()) >= margin * se:
            ok.append(n)
    return ok or [max(vals, key=lambda n: float((vals[n] - fz)[prot].mean()))]


def replay(rec: dict, variant: str, rule: str, margin: float = 0.0) -> str:
    """A deployment rule replayed on one seed's record: ``max`` (highest
    validation NDCG@10 among the candidates that lose nothing on average on the protected
    queries (``margin`` 0, the earlier rule); with ``margin`` k > 0, among those whose protected gain
    is at least k paired standard errors (k = 0.5: the library's default,
    :data:`asymgeo.adapters.workflow.GUARD_MARGIN`)) or ``one_se`` (among those within one paired standard error of it, the
    largest protected gain)."""
    v = rec["variants"][variant]
    fz, prot = np.asarray(rec["frozen_val"]), np.asarray(v["protected"], dtype=bool)
    vals = {n: np.asarray(c["val_values"]) for n, c in v["candidates"].items()}
    gain = {n: float((x - fz)[prot].mean()) for n, x in vals.items()}
    feasible = _guarded(vals, fz, prot, margin)
    best = max(feasible, key=lambda n: vals[n].mean())
    if rule == "max":
        return best
    tied = [n for n in feasible if vals[best].mean() - vals[n].mean() <= _se(vals[best], vals[n])]
    return max(tied, key=lambda n: gain[n])


def candidates(path: str) -> None:
    """Each joint candidate (training-key memories), mean over seeds: test gain over frozen on all and on
    unseen-document queries, and the validation gain on the protected queries the guard reads."""
    recs = read_records(path)
    by: dict[tuple[str, str, str], list[tuple[float, float, float]]] = {}
    for r in recs:
        v = r["variants"]["train_keys"]
        f, fv = np.asarray(r["frozen_test"]), np.asarray(r["frozen_val"])
        u, prot = np.asarray(r["unseen_rows"], dtype=np.int64), np.asarray(v["protected"], dtype=bool)
        for n, c in v["candidates"].items():
            t, x = np.asarray(c["test_values"]), np.asarray(c["val_values"])
            by.setdefault((r["dataset"], r["encoder"], n), []).append(
                ((t - f).mean(), (t - f)[u].mean(), (x - fv)[prot].mean()))
    for (ds, enc, n), rows in sorted(by.items()):
        a = np.asarray(rows)
        print(f"candidate {ds} {enc} {n}: test all {a[:, 0].mean():+.4f}, unseen-doc {a[:, 1].mean():+.4f}; "
              f"protected validation {a[:, 2].mean():+.4f} over {len(rows)} seeds")


def _auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """ROC AUC of ``scores`` for ``positive`` (Mann-Whitney, ties counted half)."""
    pos, neg = scores[positive], scores[~positive]
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (pos.size * neg.size))


def summary(path: str) -> None:
    recs = read_records(path)
    for variant in ("train_keys", "leave_one_out"):
        for rule, margin in (("max", 0.0), ("one_se", 0.0), ("max", 0.5), ("max", 0.75)):
            by: dict[tuple[str, str], list] = {}
            for r in recs:
                n = replay(r, variant, rule, margin)
                t, f = np.asarray(r["variants"][variant]["candidates"][n]["test_values"]), np.asarray(r["frozen_test"])
                u = np.asarray(r["unseen_rows"], dtype=np.int64)
                by.setdefault((r["dataset"], r["encoder"]), []).append((n, (t - f).mean(), (t - f)[u].mean()))
            for (ds, enc), rows in sorted(by.items()):
                print(f"{variant:13s} {rule if not margin else f'{margin:g} SE':6s} {ds} {enc}: all {np.mean([x[1] for x in rows]):+.4f}, "
                      f"unseen-doc {np.mean([x[2] for x in rows]):+.4f} over {len(rows)} seeds; "
                      f"chosen: {', '.join(x[0] for x in rows)}")


def replay_deep(rec: dict, metric: str, margin: float) -> str:
    """The default rule (training-key memories) with its guard read on ``metric``: the highest
    validation NDCG@10 among the candidates whose protected gain over frozen in ``metric`` is at
    least ``margin`` paired standard errors (``"ndcg@10"``: :func:`replay` with ``"max"``)."""
    v = rec["variants"]["train_keys"]
    prot = np.asarray(v["protected"], dtype=bool)
    if metric == "ndcg@10":
        guard = {n: np.asarray(c["val_values"]) for n, c in v["candidates"].items()}
        fz = np.asarray(rec["frozen_val"])
    else:
        guard = {n: np.asarray(c["val_deep"][metric]) for n, c in v["candidates"].items()}
        fz = np.asarray(rec["frozen_val_deep"][metric])
    feasible = _guarded(guard, fz, prot, margin)
    return max(feasible, key=lambda n: np.mean(v["candidates"][n]["val_values"]))


def deep_summary(path: str) -> None:
    """The guard read on each of :data:`DEEP_METRICS` (and NDCG@10) at each of :data:`DEEP_MARGINS`:
    test gain over frozen on all and on unseen-document queries, mean over the seeds."""
    recs = [r for r in read_records(path) if "frozen_val_deep" in r]
    if not recs:
        raise ValueError(f"{path}: no record carries the validation figures at depth (re-run the study)")
    by: dict[tuple[str, str, str, float], list] = {}
    for r in recs:
        f, u = np.asarray(r["frozen_test"]), np.asarray(r["unseen_rows"], dtype=np.int64)
        for metric in ("ndcg@10", *DEEP_METRICS):
            for margin in DEEP_MARGINS:
                n = replay_deep(r, metric, margin)
                t = np.asarray(r["variants"]["train_keys"]["candidates"][n]["test_values"])
                by.setdefault((r["dataset"], r["encoder"], metric, margin), []).append(
                    (n, (t - f).mean(), (t - f)[u].mean()))
    for (ds, enc, metric, margin), rows in sorted(by.items()):
        print(f"guard on {metric:9s} {margin:g} SE, {ds} {enc}: all {np.mean([x[1] for x in rows]):+.4f}, "
              f"unseen-doc {np.mean([x[2] for x in rows]):+.4f} over {len(rows)} seeds; "
              f"chosen: {', '.join(x[0] for x in rows)}")


#: guard margins (paired standard errors of the protected gain) the routed replay tries
ROUTING_MARGINS = (0.0, 0.25, 0.75)


def routing(path: str, data_dir: str, cache_dir: str) -> None:
    """Replay a *routed* query map offline: each query takes the map chosen on all validation
    queries (with its memory) when its nearest training query is at least ``t`` similar, else the
    document-disjoint map (with its memory); ``t`` a quantile of the validation queries' nearest
    training-query similarity.  Routed on training keys only, at validation and test alike; the
    guarded rule (highest validation NDCG@10 among the candidates that lose nothing on the
    protected queries, or at least ``ROUTING_MARGINS`` standard errors above it) then chooses
    among the joint candidates and three routed ones."""
    from asymgeo.adapters import workflow as wf

    recs = read_records(path)
    sims: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
    by: dict[tuple[str, str], list] = {}
    for r in recs:
        key = (r["dataset"], r["encoder"])
        if key not in sims:
            d = wf.load_adaptation_data(*key, data_dir=data_dir, cache_dir=cache_dir)
            K = np.asarray(d.triples.X, dtype=np.float32)
            sims[key] = ((d.V @ K.T).max(axis=1), (d.T @ K.T).max(axis=1))
            seen = np.ones(d.T.shape[0], dtype=bool)
            seen[np.asarray(r["unseen_rows"], dtype=np.int64)] = False
            print(f"nearest-training-query similarity, seen- against unseen-document test queries, {key[0]} "
                  f"{key[1]}: ROC AUC {_auc(sims[key][1], seen):.3f}")
        sv, st = sims[key]
        v = r["variants"]["train_keys"]
        fv, prot = np.asarray(r["frozen_val"]), np.asarray(v["protected"], dtype=bool)
        f, u = np.asarray(r["frozen_test"]), np.asarray(r["unseen_rows"], dtype=np.int64)
        cands = {n: (np.asarray(c["val_values"]), np.asarray(c["test_values"])) for n, c in v["candidates"].items()}
        a, b = cands["query (all)"], cands["query (document_disjoint)"]
        for q in (0.25, 0.5, 0.75):
            t = float(np.quantile(sv, q))
            cands[f"routed at q{q:g}"] = (np.where(sv >= t, a[0], b[0]), np.where(st >= t, a[1], b[1]))
        for margin in ROUTING_MARGINS:
            feasible = _guarded({n: x for n, (x, _) in cands.items()}, fv, prot, margin)
            best = max(feasible, key=lambda n: cands[n][0].mean())
            t_best = cands[best][1]
            by.setdefault((*key, margin), []).append((best, (t_best - f).mean(), (t_best - f)[u].mean()))
    for (ds, enc, margin), rows in sorted(by.items()):
        print(f"routed candidates added, guard margin {margin:g} SE, {ds} {enc}: all {np.mean([x[1] for x in rows]):+.4f}, unseen-doc "
              f"{np.mean([x[2] for x in rows]):+.4f} over {len(rows)} seeds; chosen: {', '.join(x[0] for x in rows)}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", nargs="?")
    ap.add_argument("encoder", nargs="?")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="memory_guard_study.jsonl")
    ap.add_argument("--summary", metavar="JSONL")
    ap.add_argument("--routing", action="store_true", help="with --summary: also replay routed query maps")
    ap.add_argument("--deep", action="store_true",
                    help="with --summary: only replay the guard read on the validation figures at depth")
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--cache-dir", default="../shared/embeddings")
    a = ap.parse_args(argv)
    if a.summary:
        try:  # a bad file is one line and exit 2, before anything is printed
            read_records(a.summary)
            if a.deep:
                deep_summary(a.summary)
                return
        except ValueError as exc:
            print(f"memory_guard_study: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        summary(a.summary)
        candidates(a.summary)
        if a.routing:
            routing(a.summary, a.data_dir, a.cache_dir)
        return
    if not (a.dataset and a.encoder):
        ap.error("dataset and encoder are required unless --summary is given")
    with open(a.out, "a", encoding="utf-8") as fh:
        for s in a.seeds:
            fh.write(json.dumps(study(a.dataset, a.encoder, s, a.data_dir, a.cache_dir)) + "\n")
            fh.flush()
            print(f"seed {s} written to {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
