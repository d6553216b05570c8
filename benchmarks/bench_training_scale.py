"""MS MARCO-sized training sets (issue #40): 200,000 training and 7,000 dev queries over millions of documents.

Full mode: a synthetic BEIR dataset (:func:`asymgeo.data.synthetic.make_synthetic_beir`) of
1,000,000 and 3,000,000 documents (``ASYMGEO_SCALE_SIZES`` overrides) with 200,000 training,
7,000 dev and 200 test queries, encoded by the benchmark encoder ``synthetic-hash-768``.
Quick mode (CI): 8,000 documents, 1,000 / 150 / 50 queries, ``--n-train 128 --max-validation 60``.

Stages, each the real command in its own process (wall time and peak resident memory, the
memory-mapped cache's pages included, against the cache's size + 1.5 GiB):

1. ``asymgeo fit --geometry auto --n-train 4096 --max-validation 500`` with every other
   setting at its default (30 epochs, three learning rates, the joint deployment: shared,
   dual and query-only maps with the document memory; ``--validation-pool auto``, so
   selection runs on each validation query's frozen top 100 at these sizes).  Only the 4,096
   queries it trains on are mined.  ``metrics["seconds"]`` of the adapter's card splits its
   time by stage.
2. ``asymgeo select --n-train 4096`` (CARS on the same subset; its mined negatives are cached).
3. ``asymgeo evaluate --adapter`` on the test queries (exact search of the whole corpus).

The page's projection to MS MARCO's 8.8M documents (docs/scaling.md) is fitted to the stage
times at the two sizes: time(N) = a + b N per stage.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import GIB, _run  # noqa: E402 - the sibling benchmark's child-process timer

FULL = {"n_train": 200_000, "n_dev": 7_000, "n_test": 200}
QUICK = {"n_train": 1_000, "n_dev": 150, "n_test": 50}
FIT_N_TRAIN = {"full": 4096, "quick": 128}
MAX_VALIDATION = {"full": 500, "quick": 60}
MSMARCO_DOCS = 8_841_823


def _dataset(work: Path, n_docs: int, queries: dict, py: str, log: Path) -> tuple[Path, dict | None]:
    name = f"synthetic-{n_docs}-q{queries['n_train']}"
    data = work / "data" / name
    want = {"n_docs": n_docs, "queries": {"train": queries["n_train"], "dev": queries["n_dev"],
                                         "test": queries["n_test"]}, "seed": 0}
    meta = data / "synthetic.json"
    have = json.loads(meta.read_text()) if meta.is_file() else None
    if have and all(have.get(k) == v for k, v in want.items()):
        return data, None
    code = ("from asymgeo.data.synthetic import make_synthetic_beir; "
            f"make_synthetic_beir({str(data)!r}, {n_docs}, n_train={queries['n_train']}, n_dev={queries['n_dev']}, "
            f"n_test={queries['n_test']}, seed=0, overwrite=True)")
    return data, {"stage": "generate dataset", **_run([py, "-c", code], log)}


def _rows(n_docs: int, work: Path, quick: bool) -> tuple[list[dict], dict]:
    py = sys.executable
    mode = "quick" if quick else "full"
    queries = QUICK if quick else FULL
    log = work / f"training-{n_docs}.log"
    data, gen = _dataset(work, n_docs, queries, py, log)
    cache = work / "emb"
    rows = [gen] if gen else []
    cli = [py, "-m", "asymgeo"]
    common = [str(data), "--encoder", "synthetic-hash-768", "--cache-dir", str(cache)]
    enc_dir = cache / data.name / "synthetic-hash-768"
    if gen is not None or not enc_dir.exists():  # a new dataset: encode it (else the cache is reused, untimed)
        shutil.rmtree(cache / data.name, ignore_errors=True)
        rows.append({"stage": "embed", **_run(cli + ["embed", *common, "--chunk-size", "65536"], log)})
    shutil.rmtree(enc_dir / "triples", ignore_errors=True)  # mine afresh: fit's time includes mining its queries
    adapter = work / f"training-{n_docs}-adapter"
    shutil.rmtree(adapter, ignore_errors=True)
    n_train, max_val = str(FIT_N_TRAIN[mode]), str(MAX_VALIDATION[mode])
    fit_args = ["fit", *common, "--geometry", "auto", "--n-train", n_train, "--max-validation", max_val,
                "--out", str(adapter), "--no-progress"]
    if quick:  # a small pool, so that CI runs the pooled path too
        fit_args += ["--epochs", "2", "--learning-rates", "1e-3", "--validation-pool", "20"]
    rows.append({"stage": f"fit --geometry auto --n-train {n_train} --max-validation {max_val}", **_run(cli + fit_args,
                                                                                                       log)})
    rows.append({"stage": f"select --n-train {n_train}", **_run(cli + ["select", *common, "--n-train", n_train], log)})
    rows.append({"stage": "evaluate --adapter", **_run(cli + ["evaluate", *common, "--adapter", str(adapter)], log)})
    card = json.loads((adapter / "adapter.json").read_text())
    cache_bytes = (n_docs + sum(queries.values())) * 768 * 2
    for r in rows:
        r["budget"] = cache_bytes + 1.5 * GIB
    return rows, {"seconds": card["metrics"].get("seconds", {}), "pool": card["metrics"].get("validation_pool"),
                  "cache_bytes": cache_bytes}


def _dataset_memory(data: Path, n_train: int) -> dict[str, float]:
    """Python heap (tracemalloc peak, MB) of what grows with the training queries before the cache is read:
    the dataset's queries and labels, and the seeded subset of ``n_train`` training queries."""
    import tracemalloc

    from asymgeo.adapters.workflow import training_pool
    from asymgeo.data import load_beir, nested_subsets

    tracemalloc.start()
    ds = load_beir(data)
    pool = training_pool(ds)
    subset = nested_subsets(pool, sizes=[n_train], seed=0)[n_train]
    _, peak = tracemalloc.get_traced_memory()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"queries": len(ds.queries), "train": len(pool), "subset": len(subset), "peak_mb": peak / 1e6,
            "held_mb": held / 1e6}


def held_after_load(data: Path, n_train: int, max_validation: int, cache: Path) -> dict[str, float]:
    """Python heap (``tracemalloc``, MB) that ``fit``'s data still hold once loaded for a seeded subset of
    ``n_train`` training queries (the dataset object dropped, as ``fit`` drops it), and the queries kept."""
    import gc
    import tracemalloc

    from asymgeo.adapters.workflow import load_adaptation_data, training_pool
    from asymgeo.data import load_beir, nested_subsets

    tracemalloc.start()
    ds = load_beir(data)
    subset = nested_subsets(training_pool(ds), sizes=[n_train], seed=0)[n_train]
    d = load_adaptation_data(ds, "synthetic-hash-768", cache_dir=cache, train_ids=subset, max_validation=max_validation)
    del ds
    gc.collect()
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"held_mb": held / 1e6, "peak_mb": peak / 1e6, "queries_kept": len(d.queries), "qrels_kept": len(d.qrels)}


#: fit's stages that search the whole corpus (mining, the pool's frozen search, test figures, coverage, report):
#: their time grows with the number of documents; the others work on the pool and the training rows
CORPUS_STAGES = ("load and mine", "split and pool", "figures and memory", "pool coverage", "generalisation report")


def _projection(sizes: list[int], stage_seconds: dict[int, dict[str, float]]) -> list[str]:
    """Each stage of ``fit`` at MS MARCO's corpus: a line through the two largest sizes (time = a + b N)
    for the stages that search the corpus, the larger of the two times for the others."""
    if len(sizes) < 2:
        return []
    n1, n2 = sizes[-2], sizes[-1]
    s1, s2 = stage_seconds[n1], stage_seconds[n2]
    lines = ["", f"Projection to MS MARCO ({MSMARCO_DOCS:,} documents), per stage of `fit`: for the stages that "
                 f"search the whole corpus ({', '.join(CORPUS_STAGES)}), a line through the times at {n1:,} and "
                 f"{n2:,} documents (time = a + b N); the others work on the pool (about the same size at every "
                 "N) and the training rows, so the larger of their two times stands.", "",
             f"| stage | {n1:,} (s) | {n2:,} (s) | growth per million documents (s) | projected at 8.8M (s) |",
             "|---|---|---|---|---|"]
    total = 0.0
    for stage in s2:
        t1, t2 = float(s1.get(stage, 0.0)), float(s2[stage])
        if stage in CORPUS_STAGES:
            b = (t2 - t1) / (n2 - n1)
            proj, growth = max(t2 + b * (MSMARCO_DOCS - n2), 0.0), f"{b * 1e6:+.1f}"
        else:
            proj, growth = max(t1, t2), "(none: not a corpus stage)"
        total += proj
        lines.append(f"| {stage} | {t1:.1f} | {t2:.1f} | {growth} | {proj:.0f} |")
    lines.append(f"| **all** | {sum(map(float, s1.values())):.1f} | {sum(map(float, s2.values())):.1f} | | "
                 f"**{total:.0f} ({total / 3600:.2f} h)** |")
    return lines


def run(quick: bool) -> str:
    env = os.environ.get("ASYMGEO_SCALE_SIZES")
    sizes = [8_000] if quick else [int(s) for s in (env or "1000000,3000000").split(",")]
    work = Path(os.environ.get("ASYMGEO_SCALE_DIR", ROOT / "build" / ("scale-quick" if quick else "scale")))
    work.mkdir(parents=True, exist_ok=True)
    q = QUICK if quick else FULL
    mode = "quick" if quick else "full"
    lines = [
        "## Many training queries (MS MARCO-sized training sets)",
        "",
        f"Synthetic BEIR dataset with {q['n_train']:,} training, {q['n_dev']:,} dev and {q['n_test']:,} test queries "
        "(`make_synthetic_beir`, encoder `synthetic-hash-768`). `fit --geometry auto --n-train "
        f"{FIT_N_TRAIN[mode]} --max-validation {MAX_VALIDATION[mode]}"
        + (" --epochs 2 --learning-rates 1e-3 --validation-pool 20`" if quick else "`, every other setting at its "
           "default (30 epochs, three learning rates, the joint deployment, `--validation-pool auto`)")
        + "; it mines only the queries it trains on. Each stage is the real command in its own process; peak "
        "memory is its `ru_maxrss` against the float16 cache's size + 1.5 GiB.",
        "",
        "| documents | stage | wall (s) | peak memory (GiB) | budget (GiB) | within budget |",
        "|---|---|---|---|---|---|",
    ]
    per_stage: dict[int, dict[str, float]] = {}
    pools: list[str] = []
    heaps: list[str] = []
    for n in sizes:
        rows, info = _rows(n, work, quick)
        for r in rows:
            ok = r["peak_rss"] <= r["budget"]
            lines.append(f"| {n:,} | {r['stage']} | {r['seconds']:.1f} | {r['peak_rss'] / GIB:.2f} | "
                         f"{r['budget'] / GIB:.2f} | {'yes' if ok else '**no**'} |")
        per_stage[n] = info["seconds"]
        mem = _dataset_memory(work / "data" / f"synthetic-{n}-q{q['n_train']}", FIT_N_TRAIN[mode])
        heaps.append(f"{n:,} documents: {mem['queries']:,} queries ({mem['train']:,} training), the subset of "
                     f"{mem['subset']:,}: {mem['peak_mb']:.0f} MB at the peak, {mem['held_mb']:.0f} MB held")
        vp = info["pool"]
        if vp and vp.get("pooled"):
            pools.append(f"{n:,} documents: a pool of {vp['documents']:,} (frozen top {vp['k']} of "
                         f"{vp['validation_queries']} validation queries, judged and training documents); the chosen "
                         f"map's top 10 lay {100 * vp['coverage@10']:.1f}% inside it; validation NDCG@10 "
                         f"{vp['validation_ndcg@10_pooled']:.4f} pooled, {vp['validation_ndcg@10_exact']:.4f} exact")
        elif vp:
            pools.append(f"{n:,} documents: not pooled (the pool would hold {vp['documents']:,} of {vp['of']:,})")
        else:
            pools.append(f"{n:,} documents: selection on the whole corpus (below the pool's size threshold)")
    lines += ["", "Validation pool: " + "; ".join(pools) + ".", "",
              "Reading the dataset's queries and labels and drawing the training subset (Python heap, `tracemalloc`, "
              "before any embedding is read; the embeddings of the queries not trained on are never read): "
              + "; ".join(heaps) + ".", "",
              "Where `fit`'s time goes (`metrics[\"seconds\"]` of the adapter's card):", "",
              "| documents | " + " | ".join(per_stage[sizes[0]]) + " |",
              "|---|" + "---|" * len(per_stage[sizes[0]])]
    for n in sizes:
        lines.append(f"| {n:,} | " + " | ".join(f"{per_stage[n].get(s, 0.0):.1f}" for s in per_stage[sizes[0]]) + " |")
    lines += _projection(sizes, per_stage)
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    if "--held" in sys.argv:  # python benchmarks/bench_training_scale.py --held DATA_DIR CACHE_DIR
        where = sys.argv[sys.argv.index("--held") + 1:]
        print(held_after_load(Path(where[0]), FIT_N_TRAIN["full"], MAX_VALIDATION["full"], Path(where[1])))
    else:
        print(run(quick="--quick" in sys.argv))
