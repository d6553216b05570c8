"""The LAPACK calls on CARS' hot path: what the mixed-precision and GIL-free choices buy.

Three measurements on one half moment of the real MPNet SciFact training triples
(``sym(C_I)``, p = 768, half of the adaptation train split), each a ratio within this run:

1. the tridiagonal reduction in float32 (``ssytrd``) against float64 (``dsytrd``);
2. :func:`asymgeo.linalg.lowrank.mixed_top_eigen` (float32 reduction, float64 refinement,
   certified) against LAPACK ``dsyevr`` on an index subset, r = 16, with the number of
   refinement steps it took and the largest eigenvalue difference;
3. two threads each running ``ssytrd`` against the same calls one after the other, through
   SciPy's f2py wrapper (``scipy.linalg.lapack``) and through ``asymgeo.linalg.lapack``
   (SciPy's Cython API via ctypes);
4. the top-16 singular triplets of a formed half moment of more than 3p/4 NFCorpus training
   triples (MiniLM, p = 384, and MPNet, p = 768): :func:`asymgeo.linalg.lowrank.mixed_top_singular`
   (float32 reduction of ``C^T C``, refined and certified in float64) against the float64 Gram
   route (subset ``dsyevr`` of ``C^T C``), with the largest singular-value difference.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from scipy.linalg import lapack
from threadpoolctl import threadpool_limits

from asymgeo.linalg import lapack as _nogil
from asymgeo.linalg.lowrank import _dense_singular, _Tridiagonal, mixed_top_eigen, mixed_top_singular

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"


def _half_moment() -> np.ndarray:
    from asymgeo.data import load_triples

    t = load_triples(SHARED / "data" / "scifact", "all-mpnet-base-v2", "train", cache_dir=SHARED / "embeddings")
    X, Yp, Yn = (np.asarray(a, dtype=np.float64) for a in t.arrays())
    idx = np.random.default_rng(0).permutation(X.shape[0])[: X.shape[0] // 2]
    C = X[idx].T @ (Yp - Yn)[idx] / idx.size
    return (C + C.T) / 2


def _large_half_moment(encoder: str) -> tuple[np.ndarray, int]:
    """One half of the NFCorpus training triples (more than 3p/4 rows) and its size."""
    from asymgeo.data import load_triples

    t = load_triples(SHARED / "data" / "nfcorpus", encoder, "train", cache_dir=SHARED / "embeddings")
    X, Yp, Yn = (np.asarray(a, dtype=np.float64) for a in t.arrays())
    idx = np.random.default_rng(0).permutation(X.shape[0])[: X.shape[0] // 2]
    return X[idx].T @ (Yp - Yn)[idx] / idx.size, int(idx.size)


def _best(fn, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def run(quick: bool = False) -> str:
    repeats = 3 if quick else 7
    calls = 4 if quick else 20
    S = _half_moment()
    p, r = S.shape[0], 16
    S32 = np.asfortranarray(S.astype(np.float32))
    lw32 = int(lapack.ssytrd_lwork(p, lower=1)[0])
    lw64 = int(lapack.dsytrd_lwork(p, lower=1)[0])
    rows = []
    with threadpool_limits(limits=1, user_api="blas"):
        t32 = _best(lambda: lapack.ssytrd(S32, lower=1, lwork=lw32), repeats)
        t64 = _best(lambda: lapack.dsytrd(S, lower=1, lwork=lw64), repeats)
        rows.append(("tridiagonal reduction: `ssytrd` (float32) vs `dsytrd` (float64)", t32, t64, ""))

        steps: list[int] = []
        solve = _Tridiagonal.solve_shifted

        def counted(self, R, shifts):
            steps.append(1)
            return solve(self, R, shifts)

        _Tridiagonal.solve_shifted = counted  # type: ignore[method-assign]
        try:
            out = mixed_top_eigen(S32, lambda W: S @ W, r)
        finally:
            _Tridiagonal.solve_shifted = solve  # type: ignore[method-assign]
        assert out is not None, "the mixed solver declined the real half moment"
        w_ref, _ = _nogil.dsyevr_top(S, r)
        diff = float(np.abs(out[0] - w_ref[::-1]).max() / np.abs(w_ref).max())
        tm = _best(lambda: mixed_top_eigen(S32, lambda W: S @ W, r), repeats)
        td = _best(lambda: _nogil.dsyevr_top(S, r), repeats)
        rows.append((f"top-{r} eigenpairs: `mixed_top_eigen` vs `dsyevr` subset", tm, td,
                     f"{len(steps)} refinement step(s); eigenvalues equal to {diff:.1e} relative"))

        for encoder in ("all-MiniLM-L6-v2", "all-mpnet-base-v2"):
            C, m = _large_half_moment(encoder)
            found = mixed_top_singular(C.astype(np.float32), C, r)
            assert found is not None, f"the mixed SVD declined the real {encoder} half moment"
            ref = _dense_singular(C, r, 1e-10)
            diff = float(np.abs(found[1] - ref[1]).max() / ref[1][0])
            tm = _best(lambda C=C: mixed_top_singular(C.astype(np.float32), C, r), repeats)
            td = _best(lambda C=C: _dense_singular(C, r, 1e-10), repeats)
            rows.append((f"top-{r} singular triplets, NFCorpus {encoder} half (p = {C.shape[0]}, "
                         f"{m} triples): `mixed_top_singular` vs float64 Gram route", tm, td,
                         f"singular values equal to {diff:.1e} relative"))

        def two_threads(fn) -> tuple[float, float]:
            def job(_):
                for _ in range(calls):
                    fn()

            serial = _best(lambda: (job(0), job(1)), repeats)
            with ThreadPoolExecutor(2) as pool:
                threaded = _best(lambda: list(pool.map(job, [0, 1])), repeats)
            return threaded, serial

        rows.append((f"two threads x {calls} `ssytrd`, SciPy f2py wrapper: threads vs one after the other",
                     *two_threads(lambda: lapack.ssytrd(S32, lower=1, lwork=lw32)), ""))
        if _nogil.available():
            rows.append((f"two threads x {calls} `ssytrd`, `asymgeo.linalg.lapack`: threads vs one after the other",
                         *two_threads(lambda: _nogil.ssytrd(S32.copy(order="F"))), ""))
    lines = [
        "## LAPACK on CARS' hot path",
        "",
        f"One half moment `sym(C_I)` of the real MPNet SciFact training triples (p = {p}; the singular "
        "rows: half of the NFCorpus training triples, more than 3p/4 of them); BLAS "
        f"single-threaded; best of {repeats}. Speed-up = reference time / measured time "
        "(for the thread rows: one after the other / on two threads, so 2x is perfect scaling; "
        "it needs two free cores).",
        "",
        "| measured | time (ms) | reference (ms) | speed-up | note |",
        "|---|---|---|---|---|",
    ]
    for name, t, ref, note in rows:
        lines.append(f"| {name} | {t * 1e3:.1f} | {ref * 1e3:.1f} | **{ref / t:.2f}x** | {note} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
