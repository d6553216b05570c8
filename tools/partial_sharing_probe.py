"""First look at partial sharing (issue 20): the numbers quoted in docs/selectors.md.

    python tools/partial_sharing_probe.py            # both parts, about 2 minutes on one core
    python tools/partial_sharing_probe.py --part alternation

Part "real": for each dataset x encoder cache in ../shared, one seeded 80/20 split of the
training triples' *rows* (rows of one query may fall on both sides), the normalised held-out
operator loss of ``partial_truncate`` at rank 16 and s = 0, 4, 8, 12, 16, and the s chosen by
``cross_fitted_sharing`` on the 80%.  One split: no interval.

Part "settings": the experiment's cheap fits (``restarts=0, max_iter=200``, as in
``asymgeo reproduce partial_sharing``) against ``partial_truncate``'s defaults (four random
restarts, 2000 iterations) on the Table 1 fold-0 moments at n = 256 and the full pool, s = 4, 8, 12:
the largest excess training loss (relative to ``||C||_F^2``) and held-out loss change.

Part "alternation": alternating exact block minimisation alone (100 steps from the sequential
start) against brute force (best of 12 random L-BFGS starts over the factors) on 30 random 6 x 6
moments, r = 3: the worst relative excess.
"""

from __future__ import annotations

import argparse

import numpy as np


def real(rank: int = 16) -> None:
    from asymgeo.experiments.real_pool import pool_triples
    from asymgeo.kernels.operator_risk import heldout_loss
    from asymgeo.kernels.partial_sharing import cross_fitted_sharing, partial_truncate, sharing_grid

    grid = sharing_grid(rank)
    print("| dataset / encoder | " + " | ".join(f"s = {s}" for s in grid) + " | cross-fitted s | its loss |")
    print("|---" * (len(grid) + 3) + "|")
    for ds in ("scifact", "nfcorpus"):
        for enc in ("all-MiniLM-L6-v2", "all-mpnet-base-v2"):
            pool = pool_triples(ds, enc, "../shared/data", "../shared/embeddings", "train")
            X, D = pool.X.astype(float), pool.D.astype(float)
            perm = np.random.default_rng(0).permutation(len(X))
            te, tr = perm[: len(X) // 5], perm[len(X) // 5:]
            C = X[tr].T @ D[tr] / tr.size
            T = X[te].T @ D[te] / te.size
            losses = [heldout_loss(partial_truncate(C, rank, s).operator, T) for s in grid]
            cv = cross_fitted_sharing(X[tr], D[tr], rank)
            chosen = losses[grid.index(cv.asymmetric)]
            print(f"| {ds} / {enc} | " + " | ".join(f"{v:.4f}" for v in losses) + f" | {cv.asymmetric} | {chosen:.4f} |",
                  flush=True)


def settings(rank: int = 16) -> None:
    import time

    from asymgeo._runtime import limit_blas_threads
    from asymgeo.experiments.real_pool import fold_arrays, fold_design, pool_triples
    from asymgeo.kernels.operator_risk import heldout_loss
    from asymgeo.kernels.partial_sharing import partial_truncate

    print("| dataset / encoder | n | worst excess training loss / ||C||^2 | worst held-out change | "
          "CPU s per fit (cheap / default) |")
    print("|---|---|---|---|---|")
    with limit_blas_threads(1, user_api=None):
        for ds in ("scifact", "nfcorpus"):
            for enc in ("all-MiniLM-L6-v2", "all-mpnet-base-v2"):
                pool = pool_triples(ds, enc, "../shared/data", "../shared/embeddings", "train")
                design = fold_design(pool.ids, 0)
                X, D = fold_arrays(pool, design, "raw")
                T = X[design.test_rows].T @ D[design.test_rows] / design.test_rows.size
                for m in (256, max(design.sizes)):
                    rows = design.train_order[:m]
                    C = X[rows].T @ D[rows] / m
                    c2 = float(np.sum(C * C))
                    excess, change, cpu = 0.0, 0.0, [0.0, 0.0]
                    for s in (4, 8, 12):
                        fits = []
                        for j, kw in enumerate(({"restarts": 0, "max_iter": 200}, {})):
                            t0 = time.process_time()
                            fits.append(partial_truncate(C, rank, s, **kw))
                            cpu[j] += (time.process_time() - t0) / 3
                        excess = max(excess, (fits[0].loss - fits[1].loss) / c2)
                        change = max(change, abs(heldout_loss(fits[0].operator, T) - heldout_loss(fits[1].operator, T)))
                    print(f"| {ds} / {enc} | {m} | {excess:+.1e} | {change:.1e} | {cpu[0]:.2f} / {cpu[1]:.2f} |",
                          flush=True)


def alternation(trials: int = 30) -> None:
    import scipy.optimize as so

    from asymgeo.kernels.partial_sharing import _alternate, _loss

    rng = np.random.default_rng(1)
    worst = 0.0
    for trial in range(trials):
        p, r = 6, 3
        s = int(rng.integers(1, 3))
        a = r - s
        C = rng.standard_normal((p, p))
        if trial % 3 == 0:
            C = C @ C.T / 3 + 0.5 * (C - C.T)
        alt = _loss(C, *_alternate(C, a, s, "psd", 100)[:3])

        def f(z, C=C, a=a, s=s, p=p):
            P, A, B = z[: a * p].reshape(a, p), z[a * p: (a + s) * p].reshape(s, p), z[(a + s) * p:].reshape(s, p)
            R = P.T @ P + A.T @ B - C
            return float(np.sum(R * R)), np.concatenate([(2 * P @ (R + R.T)).ravel(), (2 * B @ R.T).ravel(),
                                                         (2 * A @ R).ravel()])

        starts = np.random.default_rng(trial)
        brute = min(so.minimize(f, 0.5 * starts.standard_normal((r + s) * p), jac=True, method="L-BFGS-B",
                                options={"maxiter": 5000, "gtol": 1e-12, "ftol": 1e-15}).fun for _ in range(12))
        worst = max(worst, (alt - brute) / brute)
    print(f"alternation alone, 100 steps: worst relative excess over brute force {100 * worst:.1f}% "
          f"({trials} random 6 x 6 moments, r = 3)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("real", "alternation", "settings", "all"), default="all")
    args = parser.parse_args()
    if args.part in ("alternation", "all"):
        alternation()
    if args.part in ("real", "all"):
        real()
    if args.part in ("settings", "all"):
        settings()


if __name__ == "__main__":
    main()
