"""Does a larger protected sample move the deployment guard's frontier? (issue 36)

    OMP_NUM_THREADS=1 python tools/crossfit_guard_study.py scifact all-MiniLM-L6-v2 --seeds 0 1 2 --out cf.jsonl
    python tools/crossfit_guard_study.py --summary cf.jsonl

docs/adapters.md ("Where the frontier lies") traces the default's remaining miss to the noise of
its guard: about 60 document-disjoint ("protected") validation queries decide whether a
memorising candidate may be deployed.  This study gives the guard five times as many without
touching the test queries: the labelled adaptation queries (training and validation, 809 on
SciFact) are cut into ``FOLDS`` blocks, block 0 the split's own validation queries and blocks 1
to 4 a seeded partition (:data:`BLOCK_SEED`) of its training queries; for each block ``k`` the
default ``fit_adapter`` (joint candidates) runs with block ``k`` as validation and the rest as
training, and every joint candidate's memory is fitted on top of its map as the default does
(training keys, document-disjoint validation queries protected).  Each record holds, per block,
every candidate's per-query validation NDCG@10, frozen's and the protected mask; for block 0
(the deployed fit) also every candidate's per-query test NDCG@10 (map plus the memory extended
by the validation queries) and the strict unseen-document test rows.

``--summary`` replays the cross-fitted guard: a candidate *recipe* (its name, e.g.
``query (blend 0.5)``) passes when its protected gain over frozen, pooled over the blocks, is
at least ``margin`` paired standard errors; among those passing, block 0's highest validation
NDCG@10 (``select=deployed``) or the highest pooled validation NDCG@10 (``select=pooled``) is
deployed as block 0 trained it.  Block 0 alone with margin 0.5 is the shipped default.
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

#: blocks of the labelled adaptation queries (block 0: the split's validation queries)
FOLDS = 5
#: seed of the partition of the split's training queries into blocks 1 .. FOLDS - 1
BLOCK_SEED = 20261205
#: guard margins (paired standard errors of the pooled protected gain) the summary replays
MARGINS = (0.0, 0.25, 0.5, 0.75, 1.0)


def blocks(train: list[str], validation: list[str], folds: int = FOLDS, seed: int = BLOCK_SEED) -> list[list[str]]:
    """``[validation, *the training queries cut into folds - 1 seeded parts]`` (disjoint, covering both)."""
    from asymgeo.kernels.folds import query_folds

    return [list(validation), *query_folds(list(train), folds - 1, seed)]


def _run_block(dataset: str, encoder: str, seed: int, parts: list[list[str]], original_train: list[str], k: int,
               data_dir: str, cache_dir: str, with_test: bool) -> dict:
    """One block as validation: the default fit and every joint candidate's memory (training keys)."""
    import asymgeo.data as data
    import asymgeo.data.triples as triples_module
    from asymgeo.adapters import workflow as wf
    from asymgeo.retrieval.generalisation import seen_document_split, seen_documents

    original = data.adaptation_split
    validation = parts[k]
    held = set(validation)  # block 0: the split itself, training queries in the split's order
    train = [q for q in original_train if q not in held] + ([] if k == 0 else list(parts[0]))

    def rotated(ds, seed=data.DEFAULT_SPLIT_SEED, **kw):  # noqa: ANN001 - the library's signature
        split = original(ds, seed, **kw)
        return {"train": list(train), "validation": list(validation), "test": split["test"]}

    data.adaptation_split = triples_module.adaptation_split = rotated
    try:
        kw = {"data_dir": data_dir, "cache_dir": cache_dir}
        rep = wf.fit_adapter(dataset, encoder, geometry="auto", seed=seed, memory="auto", candidates="joint",
                             report=False, guard_folds=1, **kw)  # each block is one fit: no guard blocks of its own
        d = wf.load_adaptation_data(dataset, encoder, train_ids=list(rep.adapter_train_ids), **kw)
        tr, cids = d.triples, d.corpus_ids or None
        fv = wf._per_query_ndcg(d.V, d.validation, d.corpus, None, cids)
        mems = {n: wf.fit_memory(d, tr.query_ids, tr.X, d.relevant, a.operator_, corpus_ids=cids, extend=False)
                for n, a in rep.joint.items()}
    finally:
        data.adaptation_split = triples_module.adaptation_split = original
    if set(d.validation.query_ids) - set(validation) or set(tr.query_ids) & set(validation) \
            or set(rep.adapter_train_ids) & set(validation):
        raise RuntimeError(f"block {k}: the fit did not hold out the block's queries")
    prot = next(iter(mems.values())).protected_
    out: dict = {"block": k, "n_train": len(tr.query_ids), "frozen_val": fv.tolist(),
                 "protected": [bool(x) for x in prot],
                 "candidates": {n: {"val_values": m.validation_values_.tolist()} for n, m in mems.items()}}
    if with_test:
        ids = list(tr.query_ids) + list(d.validation.query_ids)
        pos = {q: i for i, q in enumerate(d.test.query_ids)}
        unseen = seen_document_split({q: d.qrels[q] for q in d.test.query_ids}, seen_documents(d.qrels, ids)).unseen
        out["frozen_test"] = wf._per_query_ndcg(d.T, d.test, d.corpus, None, cids).tolist()
        out["unseen_rows"] = sorted(pos[q] for q in unseen)
        val_rows = wf._relevant_rows(d, list(d.validation.query_ids))
        for n, a in rep.joint.items():
            m = mems[n]
            if m.weight_ > 0:
                m.extend(d.V, val_rows)
            kept, a.memory_ = a.memory_, (m if m.active else None)
            out["candidates"][n]["test_values"] = wf._adapter_ndcg(d.T, d.test, d.corpus, a, cids).tolist()
            a.memory_ = kept
    return out


def study(dataset: str, encoder: str, seed: int, data_dir: str, cache_dir: str, folds: int = FOLDS) -> dict:
    import torch

    from asymgeo.data import adaptation_split, load_beir

    torch.set_num_threads(1)
    t0 = time.time()
    ds = load_beir(dataset, data_dir=data_dir)
    split = adaptation_split(ds)
    labels = ds.all_qrels()
    train = [q for q in split["train"] if any(g >= 1 for g in labels.get(q, {}).values())]
    parts = blocks(train, split["validation"], folds)
    recs = [_run_block(dataset, encoder, seed, parts, train, k, data_dir, cache_dir, with_test=(k == 0))
            for k in range(folds)]
    return {"dataset": dataset, "encoder": encoder, "seed": seed, "folds": folds, "blocks": recs,
            "seconds": time.time() - t0}


def read_records(path: str) -> list[dict]:
    """The study's records (one JSON object per line); ``ValueError`` naming the file and line."""
    recs = read_jsonl_records(path, ("dataset", "encoder", "seed", "blocks"))
    if not recs:
        raise ValueError(f"{path}: no study records")
    return recs


def pooled_protected(rec: dict, name: str, blocks_used: int | None = None) -> np.ndarray:
    """The paired protected differences ``v - f`` of candidate ``name``, pooled over the first
    ``blocks_used`` blocks (all by default) that trained it."""
    out = []
    for b in rec["blocks"][:blocks_used]:
        c = b["candidates"].get(name)
        if c is None:
            continue
        prot = np.asarray(b["protected"], dtype=bool)
        out.append((np.asarray(c["val_values"]) - np.asarray(b["frozen_val"]))[prot])
    return np.concatenate(out) if out else np.zeros(0)


def replay(rec: dict, margin: float, select: str = "deployed", blocks_used: int | None = None) -> str:
    """The cross-fitted guard on one seed's record: the candidate deployed (a name of block 0's).

    Passing: pooled protected gain ``mean >= margin * se`` (paired, over the first ``blocks_used``
    blocks).  Among those, the highest block-0 validation NDCG@10 (``select="deployed"``) or the
    highest validation NDCG@10 pooled over the same blocks (``"pooled"``); none passing: the largest
    pooled protected gain.  ``blocks_used=1`` with margin 0.5 is the shipped default.
    """
    names = list(rec["blocks"][0]["candidates"])
    diffs = {n: pooled_protected(rec, n, blocks_used) for n in names}

    def passes(d: np.ndarray) -> bool:
        se = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else 0.0
        return bool(d.size) and float(d.mean()) >= margin * se

    ok = [n for n in names if passes(diffs[n])]
    if not ok:
        return max(names, key=lambda n: float(diffs[n].mean()) if diffs[n].size else -np.inf)

    def score(n: str) -> float:
        if select == "deployed":
            return float(np.mean(rec["blocks"][0]["candidates"][n]["val_values"]))
        vals = [np.asarray(b["candidates"][n]["val_values"]) for b in rec["blocks"][:blocks_used]
                if n in b["candidates"]]
        return float(np.concatenate(vals).mean())

    return max(ok, key=lambda n: (score(n), -names.index(n)))


def summary(path: str) -> None:
    recs = read_records(path)
    rules = [("default (block 0 only)", 0.5, "deployed", 1)] + [
        (f"cross-fitted {m:g} SE, select {s}", m, s, None) for s in ("deployed", "pooled") for m in MARGINS]
    for label, margin, select, used in rules:
        by: dict[tuple[str, str], list] = {}
        for i, r in enumerate(recs, 1):
            try:
                b0 = r["blocks"][0]
                n = replay(r, margin, select, used)
                t, f = np.asarray(b0["candidates"][n]["test_values"]), np.asarray(b0["frozen_test"])
                u = np.asarray(b0["unseen_rows"], dtype=np.int64)
            except (KeyError, IndexError, TypeError) as exc:
                raise ValueError(f"{path}: record {i}: not a complete study record ({type(exc).__name__}: {exc})") from None
            by.setdefault((r["dataset"], r["encoder"]), []).append((n, (t - f).mean(), (t - f)[u].mean()))
        for (ds, enc), rows in sorted(by.items()):
            print(f"{label:34s} {ds} {enc}: all {np.mean([x[1] for x in rows]):+.4f}, unseen-doc "
                  f"{np.mean([x[2] for x in rows]):+.4f} over {len(rows)} seeds; chosen: {', '.join(x[0] for x in rows)}")
    for r in recs[:1]:
        sizes = [int(np.sum(b["protected"])) for b in r["blocks"]]
        print(f"protected queries per block ({r['dataset']} {r['encoder']}): {sizes}, pooled {sum(sizes)}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", nargs="?")
    ap.add_argument("encoder", nargs="?")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="crossfit_guard_study.jsonl")
    ap.add_argument("--summary", metavar="JSONL")
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--cache-dir", default="../shared/embeddings")
    a = ap.parse_args(argv)
    if a.summary:
        try:
            summary(a.summary)
        except ValueError as exc:
            print(f"crossfit_guard_study: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        return
    if not (a.dataset and a.encoder):
        ap.error("dataset and encoder are required unless --summary is given")
    for s in a.seeds:
        rec = study(a.dataset, a.encoder, s, a.data_dir, a.cache_dir)
        with open(a.out, "a", encoding="utf-8") as fh:  # one complete line per seed, written once computed
            fh.write(json.dumps(rec) + "\n")
        print(f"seed {s} written to {a.out} ({rec['seconds']:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
