"""First look at partial sharing (issue 20): the numbers quoted in docs/selectors.md.

    python tools/partial_sharing_probe.py            # both parts, about 2 minutes on one core
    python tools/partial_sharing_probe.py --part alternation

Part "real": for each dataset x encoder cache in ../shared, one seeded 80/20 split of the
training triples' *rows* (rows of one query may fall on both sides), the normalised held-out
operator loss of ``partial_truncate`` at rank 16 and s = 0, 4, 8, 12, 16, and the s chosen by
``cross_fitted_sharing`` on the 80%.  One split: no interval.

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
    parser.add_argument("--part", choices=("real", "alternation", "all"), default="all")
    args = parser.parse_args()
    if args.part in ("alternation", "all"):
        alternation()
    if args.part in ("real", "all"):
        real()


if __name__ == "__main__":
    main()
