"""Exact top-k search: asymgeo (numpy blocks) vs FAISS IndexFlatIP vs naive numpy.

Full mode: 1,000,000 x 384 float32 corpus, 1,000 queries, k = 100 (the issue's
setting).  Each method runs in its own subprocess so that its peak memory can be
measured (Linux VmHWM, reset with /proc/self/clear_refs after the corpus is loaded):
"working memory" is the peak resident memory during the search minus the resident
memory before it (corpus, queries and interpreter already loaded).  Methods are
interleaved and the best of the repeats is reported, since the machine may be
shared.  ``ExactIndex`` (a reusable index) runs beside ``exact_search`` in the batch
table, and a single-query table compares both with FAISS on a SciFact-sized 10,000 x 768
corpus (float16 and float32, in process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, os, sys, time
import numpy as np
sys.path.insert(0, {src!r})
method, corpus_path, query_path, k, out_path = sys.argv[1:6]
k = int(k)
C = np.load(corpus_path)
Q = np.load(query_path)
def status(key):
    for line in open('/proc/self/status'):
        if line.startswith(key + ':'):
            return int(line.split()[1]) * 1024
if method == 'faiss':
    import faiss
    index = faiss.IndexFlatIP(C.shape[1])
    index.add(C)
    index.search(Q[:2], k)
elif method == 'index':
    from asymgeo.retrieval.search import ExactIndex
    index = ExactIndex(C, backend='numpy')  # float32 corpus: used in place, no copy
    index.search(Q[:2], k)
else:
    from asymgeo.retrieval.search import exact_search
    exact_search(Q[:2], C[:50000], k, backend='numpy')
import gc; gc.collect()
base = status('VmRSS')
try:
    open('/proc/self/clear_refs', 'w').write('5')
    hwm_ok = True
except OSError:
    hwm_ok = False
t0 = time.perf_counter()
if method == 'asymgeo':
    from asymgeo.retrieval.search import exact_search
    D, I = exact_search(Q, C, k, backend='numpy')
elif method == 'index':
    D, I = index.search(Q, k)
elif method == 'faiss':
    D, I = index.search(Q, k)
elif method == 'naive':
    S = Q @ C.T
    part = np.argpartition(-S, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(S, part, axis=1)
    order = np.array([np.lexsort((p, -v)) for p, v in zip(part, vals)])
    I = np.take_along_axis(part, order, axis=1)
    D = np.take_along_axis(vals, order, axis=1)
    del S, part, vals
dt = time.perf_counter() - t0
peak = status('VmHWM') if hwm_ok else None
np.save(out_path, np.asarray(I, dtype=np.int64))
np.save(out_path.replace('.npy', '_scores.npy'), np.asarray(D, dtype=np.float32))
print(json.dumps(dict(seconds=dt, base=base, peak=peak, index_bytes=(C.nbytes if method == 'faiss' else 0))))
"""


def _sgemm_rate(p: int, reps: int = 5) -> dict[str, float]:
    rng = np.random.default_rng(0)
    out = {}
    for label, (m, n, kk) in {
        "square 2048^3": (2048, 2048, 2048),
        f"tile 1000x4096x{p}": (1000, 4096, p),
    }.items():
        a = rng.standard_normal((m, kk), dtype=np.float32)
        b = rng.standard_normal((kk, n), dtype=np.float32)
        c = np.empty((m, n), np.float32)
        np.matmul(a, b, out=c)
        best = np.inf
        for _ in range(reps):
            t = time.perf_counter()
            np.matmul(a, b, out=c)
            best = min(best, time.perf_counter() - t)
        out[label] = 2.0 * m * n * kk / best / 1e9
    return out


def _blas_kernel() -> str:
    try:
        from threadpoolctl import threadpool_info

        for info in threadpool_info():
            if info.get("user_api") == "blas" and "numpy" in info.get("filepath", ""):
                return f"{info.get('internal_api')} {info.get('version')} ({info.get('architecture')} kernel, {info.get('num_threads')} threads)"
    except Exception:  # pragma: no cover
        pass
    return "unknown"


def _run_child(method: str, cpath: str, qpath: str, k: int, tmp: str) -> dict:
    out = os.path.join(tmp, f"{method}.npy")
    code = _CHILD.format(src=str(ROOT / "src"))
    res = subprocess.run(
        [sys.executable, "-c", code, method, cpath, qpath, str(k), out],
        capture_output=True, text=True, check=False,
    )
    if res.returncode != 0:
        raise RuntimeError(f"benchmark child {method} failed:\n{res.stderr[-3000:]}")
    rec = json.loads(res.stdout.strip().splitlines()[-1])
    rec["indices"] = np.load(out)
    rec["scores"] = np.load(out.replace(".npy", "_scores.npy"))
    return rec


def _agreement(ref_i, ref_s, i, s) -> str:
    same_rows = (ref_i == i).all(axis=1)
    if same_rows.all():
        return "identical"
    diff = ~same_rows
    same_sets = np.array([set(a) == set(b) for a, b in zip(ref_i[diff], i[diff])])
    exact_scores = (ref_s[diff] == s[diff]).all(axis=1)
    ds = float(np.abs(ref_s[diff] - s[diff]).max())
    return (
        f"{same_rows.sum()} of {len(same_rows)} rows identical; the other {diff.sum()} "
        f"({same_sets.sum()} with the same set, {exact_scores.sum()} with bit-identical score lists) "
        f"differ only by swapping documents whose scores agree to {ds:.1e} (float32 rounding or exact ties)"
    )


def run(quick: bool = False) -> str:
    N, p, n, k = (50_000, 384, 200, 100) if quick else (1_000_000, 384, 1_000, 100)
    reps = 1 if quick else 2
    rng = np.random.default_rng(20260809)
    methods = ["asymgeo", "index", "faiss", "naive"]
    try:
        import faiss  # noqa: F401
    except ImportError:  # pragma: no cover
        methods.remove("faiss")
    rates = _sgemm_rate(p)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_search_") as tmp:
        cpath, qpath = os.path.join(tmp, "C.npy"), os.path.join(tmp, "Q.npy")
        mm = np.lib.format.open_memmap(cpath, mode="w+", dtype=np.float32, shape=(N, p))
        for s in range(0, N, 100_000):
            mm[s : s + 100_000] = rng.standard_normal((min(100_000, N - s), p), dtype=np.float32)
        mm.flush()
        del mm
        np.save(qpath, rng.standard_normal((n, p), dtype=np.float32))
        recs: dict[str, dict] = {}
        for r in range(reps):
            for m in methods:
                if m == "naive" and r > 0:
                    continue  # far slower; one run suffices
                rec = _run_child(m, cpath, qpath, k, tmp)
                if m not in recs or rec["seconds"] < recs[m]["seconds"]:
                    recs[m] = rec
    load_after = os.getloadavg()[0]
    # measure the SGEMM rate again after the runs and keep the best (a shared machine)
    rates = {lbl: max(v, v2) for (lbl, v), v2 in zip(rates.items(), _sgemm_rate(p).values())}
    corpus_bytes = N * p * 4
    flops = 2.0 * n * N * p
    ref = recs["asymgeo"]
    rows = []
    for m in methods:
        rec = recs[m]
        extra = None if rec["peak"] is None else rec["peak"] - rec["base"]
        mem = "n/a" if extra is None else f"{extra / 2**20:,.0f} MiB ({extra / corpus_bytes:.1%} of corpus)"
        if m == "faiss":
            mem += f" + index copy {rec['index_bytes'] / 2**20:,.0f} MiB"
        agree = "reference" if m == "asymgeo" else _agreement(ref["indices"], ref["scores"], rec["indices"], rec["scores"])
        rows.append(
            f"| {m} | {rec['seconds']:.2f} | {n / rec['seconds']:,.0f} | {flops / rec['seconds'] / 1e9:.1f} | "
            f"{rec['seconds'] / ref['seconds']:.2f}x | {mem} | {agree} |"
        )
    single_rows, single = _single_query(rng, quick)

    name = {
        "asymgeo": "asymgeo `exact_search` (numpy backend)",
        "index": "asymgeo `ExactIndex.search` (numpy backend)",
        "faiss": "FAISS `IndexFlatIP`",
        "naive": "naive numpy (full matrix + argpartition)",
    }
    rows = [r.replace(f"| {m} |", f"| {name[m]} |", 1) for r, m in zip(rows, methods)]
    a = recs["asymgeo"]["seconds"]
    lines = [
        "## Exact search (`asymgeo.retrieval.search.exact_search`)",
        "",
        f"Corpus {N:,} x {p} float32, {n:,} queries, k = {k}; exact inner product; best of {reps} "
        "interleaved runs, each method in its own process.",
        "",
        "| method | seconds | queries/s | GFLOP/s | time vs asymgeo | working memory (peak - before search) | results vs asymgeo |",
        "|---|---:|---:|---:|---:|---|---|",
        *rows,
        "",
        "Measured single-precision matrix multiply (numpy BLAS, best of before and after the runs): "
        + ", ".join(f"{lbl}: {v:.1f} GFLOP/s" for lbl, v in rates.items())
        + f".  asymgeo reaches {flops / a / 1e9 / rates['square 2048^3']:.0%} of the square-SGEMM rate.",
        "",
        "Ratios: "
        + (f"FAISS / asymgeo time = {recs['faiss']['seconds'] / a:.2f}; " if "faiss" in recs else "")
        + f"naive / asymgeo time = {recs['naive']['seconds'] / a:.2f}.",
        "",
        f"BLAS: {_blas_kernel()}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}. "
        f"1-minute load average {load:.1f} before and {load_after:.1f} after (the machine may be shared "
        "with other jobs; the ratios come from the same run).",
        "",
        "### Single queries (reusable index)",
        "",
        f"Corpus 10,000 x 768 (SciFact-sized), k = 10 and 100, one query per call; best of {single['reps']} "
        "interleaved calls per method, in process (index and FAISS built beforehand, not timed). "
        "`exact_search` on a float16 corpus converts the corpus on every call; `ExactIndex` converts "
        "it once.",
        "",
        "| method | corpus dtype | 1 query, k = 10 (ms) | 1 query, k = 100 (ms) | 300 queries, k = 100 (ms) |",
        "|---|---|---:|---:|---:|",
        *single_rows,
        "",
        f"Ratios (k = 100, one query): `ExactIndex` on float16 / `exact_search` on float32 = "
        f"{single['ratio_f32']:.2f} (goal <= 1.3); `ExactIndex` on float16 / FAISS = {single['ratio_faiss']:.2f} "
        "(goal < 1); `exact_search` on float16 / `ExactIndex` on float16 = "
        f"{single['ratio_old']:.1f}.",
    ]
    return "\n".join(lines)


def _single_query(rng: np.random.Generator, quick: bool) -> tuple[list[str], dict]:
    """Single-query latency on a 10,000 x 768 corpus: exact_search, ExactIndex, FAISS."""
    from asymgeo.retrieval.search import ExactIndex, exact_search

    C16 = rng.standard_normal((10_000, 768)).astype(np.float16)
    C32 = C16.astype(np.float32)
    Q = rng.standard_normal((300, 768)).astype(np.float32)
    methods = {
        ("asymgeo `exact_search`", "float16"): lambda q, k: exact_search(q, C16, k),
        ("asymgeo `exact_search`", "float32"): lambda q, k: exact_search(q, C32, k),
        ("asymgeo `ExactIndex.search`", "float16"): (lambda ix: lambda q, k: ix.search(q, k))(ExactIndex(C16)),
        ("asymgeo `ExactIndex.search`", "float32"): (lambda ix: lambda q, k: ix.search(q, k))(ExactIndex(C32)),
    }
    try:
        import faiss

        fx = faiss.IndexFlatIP(768)
        fx.add(C32)
        methods[("FAISS `IndexFlatIP`", "float32")] = lambda q, k: fx.search(q, k)
    except ImportError:  # pragma: no cover
        pass
    reps = 5 if quick else 30
    cases = [(1, 10), (1, 100), (300, 100)]
    best = {(m, c): np.inf for m in methods for c in cases}
    for fn in methods.values():
        fn(Q[:1], 10)  # warm-up
    for c in cases:
        nq, k = c
        for r in range(reps if nq == 1 else max(2, reps // 10)):
            for m, fn in methods.items():  # interleaved: a shared machine slows all alike
                q = Q[r % 300 : r % 300 + 1] if nq == 1 else Q
                t = time.perf_counter()
                fn(q, k)
                best[(m, c)] = min(best[(m, c)], time.perf_counter() - t)
    rows = [
        f"| {m[0]} | {m[1]} | " + " | ".join(f"{best[(m, c)] * 1e3:.2f}" for c in cases) + " |" for m in methods
    ]
    f16 = best[(("asymgeo `ExactIndex.search`", "float16"), (1, 100))]
    faiss_key = (("FAISS `IndexFlatIP`", "float32"), (1, 100))
    info = dict(
        reps=reps,
        ratio_f32=f16 / best[(("asymgeo `exact_search`", "float32"), (1, 100))],
        ratio_faiss=f16 / best[faiss_key] if faiss_key in best else float("nan"),
        ratio_old=best[(("asymgeo `exact_search`", "float16"), (1, 100))] / f16,
    )
    return rows, info


if __name__ == "__main__":  # pragma: no cover
    print(run(quick="--quick" in sys.argv))
