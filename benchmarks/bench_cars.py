"""CARS (eq. 7) on real and synthetic triples against the naive way.

Naive baseline (measured in the same run, same splits): for every split, both half
moments by BLAS matrix products, then a *full* SVD and a *full* symmetric
eigendecomposition of each half, explicit p x p residuals ``V = P_d(C) - P_s(C)``
and their Frobenius products.  The library's ``cars_score`` takes the top-r SVD of a
half from its thin factors (a (k, k) core from a pivoted Cholesky of sub-blocks of the
full-data Gram matrices) when the half has fewer than 3p/4 triples, the top-r eigenpairs
of the symmetric part (formed in float32 only, the second half by complement) by a
float32 tridiagonal reduction refined in float64, certifies every answer, and forms the
inner products from rank-2r factors.  The table counts which solver path answered.

Real triples: the MPNet (p = 768) and MiniLM (p = 384) SciFact training triples of
``asymgeo.data.load_triples`` from ``../shared`` (queries of ``qrels/train.tsv``, and
the adaptation train split).
"""

from __future__ import annotations

import os
import time
from functools import partial
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from asymgeo import cars_score, half_splits
from asymgeo.linalg.lowrank import path_counts, reset_path_counts

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"


def naive_cars(X, Y_pos, Y_neg, rank, splits):
    D = Y_pos - Y_neg

    def residual(C):
        U, s, Vt = np.linalg.svd(C)
        dual = (U[:, :rank] * s[:rank]) @ Vt[:rank]
        w, Q = np.linalg.eigh((C + C.T) / 2)
        idx = np.argsort(w)[::-1][:rank]
        keep = np.maximum(w[idx], 0.0)
        shared = (Q[:, idx] * keep) @ Q[:, idx].T
        return dual - shared

    terms = []
    for I1, I2 in splits:
        V1 = residual(X[I1].T @ D[I1] / len(I1))
        V2 = residual(X[I2].T @ D[I2] / len(I2))
        terms.append(np.sum(V1 * V2) - 0.25 * np.sum((V1 - V2) ** 2))
    return float(np.mean(terms))


def synthetic(n, p, signal_rank, seed, noise=1.0):
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n, signal_rank))
    Lq = rng.standard_normal((signal_rank, p)) / np.sqrt(p)
    Ld = Lq + 0.5 * rng.standard_normal((signal_rank, p)) / np.sqrt(p)  # partly asymmetric
    e = noise / np.sqrt(p)
    X = 3 * Z @ Lq + e * rng.standard_normal((n, p))
    Y_pos = 3 * Z @ Ld + e * rng.standard_normal((n, p))
    Y_neg = 3 * rng.standard_normal((n, signal_rank)) @ Ld + e * rng.standard_normal((n, p))
    return X, Y_pos, Y_neg


def real_triples(encoder: str, split: str, dataset: str = "scifact"):
    """Training triples of ``dataset`` from the shared embedding cache (float64)."""
    from asymgeo.data import load_beir, load_triples

    data = SHARED / "data" / dataset
    ids = load_beir(data).labelled_query_ids("train") if split == "qrels train" else "train"
    t = load_triples(data, encoder, ids, cache_dir=SHARED / "embeddings")
    return tuple(np.asarray(a, dtype=np.float64) for a in t.arrays())


def _best_of(fn, repeats):
    best, out = np.inf, None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _paths(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def run(quick: bool = False) -> str:
    if quick:
        configs = [
            dict(name="SciFact MiniLM, adaptation train", real=("all-MiniLM-L6-v2", "train"), r=8, L=4),
            dict(name="synthetic", n=1024, p=256, r=8, L=4, noise=1.0),
        ]
        repeats = 1
    else:
        configs = [
            dict(name="SciFact MPNet, qrels train", real=("all-mpnet-base-v2", "qrels train"), r=16, L=20),
            dict(name="SciFact MPNet, adaptation train", real=("all-mpnet-base-v2", "train"), r=16, L=20),
            dict(name="synthetic", n=4096, p=768, r=16, L=20, noise=1.0),
            dict(name="NFCorpus MiniLM, qrels train (halves > 3p/4)", real=("all-MiniLM-L6-v2", "qrels train",
                                                                             "nfcorpus"), r=16, L=20),
            dict(name="NFCorpus MPNet, qrels train (halves > 3p/4)", real=("all-mpnet-base-v2", "qrels train",
                                                                            "nfcorpus"), r=16, L=20),
            dict(name="synthetic, no gap at r (noise std 0.8)", n=4096, p=768, r=16, L=20,
                 noise=0.8 * np.sqrt(768)),
            dict(name="synthetic", n=4096, p=768, r=64, L=20, noise=1.0),
        ]
        repeats = 3
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    rows = []
    for cfg in configs:
        if "real" in cfg:
            X, Yp, Yn = real_triples(*cfg["real"])
        else:
            X, Yp, Yn = synthetic(cfg["n"], cfg["p"], signal_rank=24, seed=7, noise=cfg["noise"])
        n, p = X.shape
        splits = half_splits(n, cfg["L"], 11)
        with threadpool_limits(limits=1, user_api="blas"):
            reset_path_counts()
            t_fast = t_naive = np.inf
            for _ in range(repeats):  # interleaved: load from other jobs hits both alike
                tf, res = _best_of(partial(cars_score, X, Yp, Yn, cfg["r"], splits=splits, n_jobs=1), 1)
                tn, naive = _best_of(partial(naive_cars, X, Yp, Yn, cfg["r"], splits), 1)
                t_fast, t_naive = min(t_fast, tf), min(t_naive, tn)
            counts = {k: v // repeats for k, v in path_counts().items()}
        # as a user runs both: cars_score with its default threads over splits, the naive way
        # with its default (multithreaded) BLAS on every core
        t_all = t_naive_all = np.inf
        for _ in range(repeats):
            t_all = min(t_all, _best_of(partial(cars_score, X, Yp, Yn, cfg["r"], splits=splits), 1)[0])
            t_naive_all = min(t_naive_all, _best_of(partial(naive_cars, X, Yp, Yn, cfg["r"], splits), 1)[0])
        rel = abs(res.score - naive) / max(abs(naive), 1e-300)
        naive_choice = "dual" if naive > 0 else "shared"
        rows.append((cfg, n, p, t_fast, t_naive, t_all, t_naive_all, res.score, rel, res.choice, naive_choice,
                     counts))
    lines = [
        "## CARS selector (eq. 7)",
        "",
        "Real SciFact training triples (`asymgeo.data.load_triples`, shared embedding caches) and "
        "synthetic ones (signal rank 24, partly asymmetric loadings); the same half-splits for both "
        "implementations. Naive = per split, both half moments by BLAS, full SVD + full "
        "eigendecomposition of each half, explicit p x p residuals. *One core*: both with "
        f"single-threaded BLAS (`cars_score(..., n_jobs=1)`), best of {repeats} interleaved run(s). "
        f"*All cores* ({cores} here), as a user runs them: `cars_score` with its default threads over "
        "splits, the naive way with its default multithreaded BLAS; best of "
        f"{repeats} interleaved run(s). Solver paths: how often each answered per `cars_score` call "
        "(`asymgeo.linalg.lowrank.path_counts`; `thin` = SVD from the (k, k) pivoted thin-factor core, "
        "`mixed` = float32 tridiagonal reduction (of sym(C), or of C^T C for singular triplets) refined and "
        "certified in float64, "
        "`subset` = LAPACK syevr on an index subset, `gram` = subset eigh of C^T C, "
        "`krylov` = certified block Krylov, `full` = full LAPACK decomposition).",
        "",
        "| triples | n | p | r | L | asymgeo, 1 core (s) | naive, 1 core (s) | speed-up, 1 core | "
        f"asymgeo, {cores} cores (s) | naive, {cores} cores (s) | speed-up, {cores} cores | score | rel. diff | "
        "choices | solver paths |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cfg, n, p, tf, tn, ta, tna, s, rel, c, cn, counts in rows:
        lines.append(
            f"| {cfg['name']} | {n} | {p} | {cfg['r']} | {cfg['L']} | {tf:.3f} | {tn:.3f} | "
            f"**{tn / tf:.1f}x** | {ta:.3f} | {tna:.3f} | **{tna / ta:.1f}x** | {s:.6g} | {rel:.1e} | {c} / {cn} | "
            f"{_paths(counts)} |"
        )
    # issue #22's cases, judged on the all-cores ratio ("on 2 cores, ratios from one run")
    goal = [(cfg["name"], tna / ta) for cfg, n, p, tf, tn, ta, tna, *_ in rows
            if (cfg["name"] == "synthetic" and n == 4096 and p == 768 and cfg["r"] == 16)
            or cfg["name"].startswith("NFCorpus")]
    met = bool(goal) and all(ratio >= 5.0 for _, ratio in goal)
    lines += [
        "",
        "Goal (issue #8): at least 5x the naive way on the real MPNet triples at r = 16, scores equal "
        f"to 1e-8 relative. Goal (issue #22, {'met' if met else 'not met'}): at least 5x on {cores} cores at "
        "n = 4,096, p = 768 and on the NFCorpus triples, whose halves exceed 3p/4 triples: "
        + ", ".join(f"{name} {ratio:.1f}x" for name, ratio in goal) + ". "
        "Those halves take the formed-moment route: the float64 moment of one half per split (the other by "
        "complement), then at p >= 512 the mixed-precision SVD (`singular:mixed`, float32 reduction of C^T C "
        "refined in float64) and eigensolver; at p = 384 mixed precision gains about 1.1x on the SVD "
        "(`--only lapack`), so the NFCorpus MiniLM halves keep the float64 Gram route.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
