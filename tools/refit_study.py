"""Refit on training + validation queries: does it move the frontier of issue 36? (docs/adapters.md)

    OMP_NUM_THREADS=1 python tools/refit_study.py scifact all-mpnet-base-v2 --seeds 0 1 2 --out refit.jsonl
    python tools/refit_study.py --summary refit.jsonl

scikit-learn's ``GridSearchCV(refit=True)`` refits the chosen settings on every labelled row.
Here: one default ``fit_adapter`` per seed (``geometry="auto"``, ``memory="auto"``,
``candidates="joint"``), then the deployed query-only map is trained again on the training
*and* validation queries (their hard negatives mined the same way) with the learning rate and
the number of epochs validation chose (:func:`refit_plan`: a blend is refitted as a blend of its
two refitted ends; epoch 0, the identity, stays the identity), and deployed with the same
memory.  Nothing is left to check the refitted map on, which is the point of the study: its
test NDCG@10 on all queries and on the strict unseen-document queries (no relevant document is a
training or validation positive) is written beside the default's, per query, for
:func:`summarise`.  A shared or dual choice is not refitted (its closed-form start and scale are
chosen on validation); its record says so and repeats the default's figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/: run as a script or loaded by path
from study_records import read_jsonl_records  # noqa: E402


def refit_plan(choice: str, maps: Mapping[str, Any]) -> tuple[list[str], float | None] | None:
    """Which trained query maps a refit of the joint candidate ``choice`` retrains, and the blend.

    ``(["query (document_disjoint)"], None)`` for a plain query map; for ``"query (blend L)"``
    the two ends of the blend, the map chosen on the selection queries and ``"query (all)"``,
    with ``L``; ``None`` for a shared or dual choice (not refitted).  ``ValueError`` when a
    name is not a joint candidate of ``maps``.
    """
    if choice not in maps:
        raise ValueError(f"choice: {choice!r} is not one of the joint candidates ({', '.join(maps)})")
    if not choice.startswith("query ("):
        return None
    if not choice.startswith("query (blend "):
        return [choice], None
    lam = float(choice[len("query (blend "):].rstrip(")"))
    ends = [n for n in maps if n.startswith("query (") and not n.startswith("query (blend ") and n != "query (all)"]
    if len(ends) != 1 or "query (all)" not in maps:
        raise ValueError(f"choice: {choice!r} needs one selection query map and 'query (all)', got {list(maps)}")
    return [ends[0], "query (all)"], lam


def study(dataset: str, encoder: str, seed: int, data_dir: str, cache_dir: str) -> dict:
    import torch

    from asymgeo.adapters import workflow as wf
    from asymgeo.adapters.adapter import Adapter
    from asymgeo.data import adaptation_split, load_beir, load_embeddings, load_triples
    from asymgeo.retrieval.generalisation import seen_document_split, seen_documents

    torch.set_num_threads(1)
    kw = {"data_dir": data_dir, "cache_dir": cache_dir}
    t0 = time.time()
    rep = wf.fit_adapter(dataset, encoder, seed=seed, report=False, **kw)
    d = wf.load_adaptation_data(dataset, encoder, **kw)
    cids = d.corpus_ids or None
    frozen = wf._per_query_ndcg(d.T, d.test, d.corpus, None, cids)
    deployed = wf._adapter_ndcg(d.T, d.test, d.corpus, rep.adapter, cids)
    train_ids, val_ids = list(d.triples.query_ids), list(d.validation.query_ids)
    pos = {q: i for i, q in enumerate(d.test.query_ids)}
    unseen = seen_document_split({q: d.qrels[q] for q in d.test.query_ids},
                                 seen_documents(d.qrels, train_ids + val_ids)).unseen
    choice = rep.metrics["joint"]["choice"]
    out: dict = {"dataset": dataset, "encoder": encoder, "seed": seed, "choice": choice,
                 "frozen_test": frozen.tolist(), "deployed_test": deployed.tolist(),
                 "unseen_rows": sorted(pos[q] for q in unseen), "refitted": False}
    plan = refit_plan(choice, rep.joint)
    if plan is not None:
        ds = load_beir(dataset, data_dir=data_dir)
        emb = load_embeddings(ds, encoder, cache_dir=cache_dir)
        qrels = ds.all_qrels()
        ids = train_ids + [q for q in adaptation_split(ds)["validation"] if q in qrels]
        tv = load_triples(ds, encoder, ids, cache=emb, k=8, require=True)
        rel = [set(emb.corpus_rows([x for x in qrels[q] if emb.has_corpus_id(x)]).tolist()) for q in tv.query_ids]

        def refit(a: Any) -> Any:
            if not a.best_epoch_:  # the identity was chosen: nothing to retrain
                return a
            b = Adapter(geometry="query", rank=a.rank, form="augmented", learning_rates=(a.learning_rate_,),
                        epochs=int(a.best_epoch_), seed=seed)
            return b.fit(tv.X, tv.pos_rows, d.corpus, hard_negative_rows=tv.hard_negative_rows, relevant_rows=rel)

        names, lam = plan
        maps = [refit(rep.joint[n]) for n in names]
        new = maps[0] if lam is None else wf._blend_query_maps(maps[0], maps[1], lam)
        new.memory_ = rep.adapter.memory_
        out["refit_test"] = wf._adapter_ndcg(d.T, d.test, d.corpus, new, cids).tolist()
        out["refitted"] = True
        out["refit"] = {n: {"learning_rate": rep.joint[n].learning_rate_, "epochs": rep.joint[n].best_epoch_}
                        for n in names}
        out["n_refit_queries"] = len(tv)
    out["seconds"] = time.time() - t0
    return out


def _unseen_mean(x: np.ndarray, rows: np.ndarray) -> float:
    """Mean over the unseen-document rows; nan when there are none (NFCorpus has none)."""
    return float(x[rows].mean()) if rows.size else float("nan")


def summarise(records: list[dict]) -> list[dict]:
    """Per dataset x encoder: mean test gain over frozen (all queries, unseen-document queries) of
    the default and of the refit, over the seeds; a record not refitted counts with the default's values."""
    by: dict[tuple[str, str], list[tuple[float, float, float, float]]] = {}
    for r in records:
        f, dep = np.asarray(r["frozen_test"], dtype=float), np.asarray(r["deployed_test"], dtype=float)
        ref = np.asarray(r["refit_test"], dtype=float) if r.get("refitted") else dep
        if not (f.shape == dep.shape == ref.shape):
            raise ValueError(f"{r['encoder']} seed {r['seed']}: per-query values of different lengths")
        u = np.asarray(r["unseen_rows"], dtype=np.int64)
        by.setdefault((r["dataset"], r["encoder"]), []).append(
            ((dep - f).mean(), _unseen_mean(dep - f, u), (ref - f).mean(), _unseen_mean(ref - f, u)))
    rows = []
    for (ds, enc), v in sorted(by.items()):
        a = np.asarray(v)
        rows.append({"dataset": ds, "encoder": enc, "seeds": len(v), "default_all": a[:, 0].mean(),
                     "default_unseen": a[:, 1].mean(), "refit_all": a[:, 2].mean(), "refit_unseen": a[:, 3].mean()})
    return rows


def read_records(paths: list[str]) -> list[dict]:
    """The study's records (one JSON object per line); ``ValueError`` naming the file and line of a
    file that cannot be read, a damaged line, or a record without the fields :func:`summarise` reads."""
    need = ("dataset", "encoder", "seed", "frozen_test", "deployed_test", "unseen_rows")
    recs = [r for path in paths for r in read_jsonl_records(path, need, "refit study record")]
    if not recs:
        raise ValueError(f"{', '.join(paths)}: no study records")
    return recs


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", nargs="?")
    ap.add_argument("encoder", nargs="?")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="refit.jsonl")
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--cache-dir", default="../shared/embeddings")
    ap.add_argument("--summary", nargs="+", metavar="FILE")
    a = ap.parse_args(argv)
    if a.summary:
        try:
            rows = summarise(read_records(a.summary))
        except ValueError as exc:
            print(f"refit_study: {exc}", file=sys.stderr)
            return 2
        for r in rows:
            print(f"{r['dataset']} {r['encoder']} ({r['seeds']} seeds): default {r['default_all']:+.4f} / "
                  f"{r['default_unseen']:+.4f}, refit {r['refit_all']:+.4f} / {r['refit_unseen']:+.4f} "
                  "(all / unseen-document test queries, gain over frozen)")
        return 0
    if not (a.dataset and a.encoder):
        ap.error("give DATASET ENCODER, or --summary FILE")
    try:
        for s in a.seeds:  # each record appended once computed: records already there are kept
            line = json.dumps(study(a.dataset, a.encoder, s, a.data_dir, a.cache_dir)) + "\n"
            with open(a.out, "a", encoding="utf-8") as fh:
                fh.write(line)
    except (ValueError, FileNotFoundError, OSError) as exc:
        print(f"refit_study: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main())
