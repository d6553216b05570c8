"""``asymgeo demo``: the shared-to-dual crossover on the paper's two-view simulation.

For each training size n the demo runs one RQ1 cell (:func:`asymgeo.experiments.rq1.cell`,
Appendix F): n triples from the two-view model, CARS on them, Theorem 1's gap of the
training moment, both closed-form projections and their held-out NDCG@10 (each test
positive ranked against 299 independent negatives).  The seeds are the RQ1 experiment's
(``cell_seed(seed, ...)`` with seed index 0), so the demo is one column of Figure 3's grid.
Small n favours shared; large n and large angles favour dual (Corollary 1).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from .._validation import check_int
from . import rq1

__all__ = ["run_demo", "format_demo"]


def run_demo(
    angle: float = 1.2,
    rank: int = 8,
    sizes: Sequence[int] = (32, 128, 512, 2048),
    seed: int = 20260809,
    n_test: int = 1000,
    n_negatives: int = 299,
    p: int = 32,
    latent_rank: int = 8,
    noise_sd: float = 0.6,
    n_splits: int = 20,
) -> dict[str, Any]:
    """Run the demo and return a JSON-serialisable record (config, seeds, rows).

    Each row is one :func:`asymgeo.experiments.rq1.cell` at ``(angle, n, rank, seed_index=0)``
    with master seed ``seed``; ``population`` holds the population moment's Theorem 1 gap
    and its distance ``G_PSD`` to the shared family.
    """
    if not sizes:
        raise ValueError("sizes: expected at least one training size")
    seed = check_int(seed, "seed", min_value=0)
    n_test = check_int(n_test, "n_test", min_value=2)  # a mean and its comparison need two queries
    for n in sizes:
        if n < 4:
            raise ValueError(f"n: every training size must be >= 4 (CARS needs 4 triples), got {n}")
    t0 = time.perf_counter()
    rows = []
    population: dict[str, float] = {}
    for n in sizes:
        rec = rq1.cell({"angle": angle, "n": int(n), "rank": rank, "seed_index": 0, "p": p,
                        "latent_rank": latent_rank, "noise_sd": noise_sd, "n_test": n_test,
                        "n_negatives": n_negatives, "master_seed": seed, "cars_splits": n_splits})
        population = {"gap": rec["population_gap"], "psd_distance": rec["population_gpsd"]}
        rows.append({
            "n": int(n),
            "cars_choice": rec["cars_choice"],
            "cars_score": rec["cars_score"],
            "cars_se": rec["cars_se"],
            "train_gap": rec["train_gap"],
            "ndcg10_shared": rec["ndcg_shared"],
            "ndcg10_dual": rec["ndcg_dual"],
            "ndcg10_dual_minus_shared": rec["ndcg_diff"],
            "better_on_test": ("dual" if rec["ndcg_dual"] > rec["ndcg_shared"] else
                               "shared" if rec["ndcg_shared"] > rec["ndcg_dual"] else "tie"),
            "seeds": {k: rec[k] for k in ("model_seed", "test_seed", "train_seed", "cars_seed")},
        })
    return {
        "config": {"angle": angle, "rank": rank, "sizes": [int(n) for n in sizes], "seed": seed,
                   "n_test": n_test, "n_negatives": n_negatives, "p": p, "latent_rank": latent_rank,
                   "noise_sd": noise_sd, "n_splits": n_splits},
        "population": population,
        "rows": rows,
        "seconds": time.perf_counter() - t0,
    }


def format_demo(result: dict) -> str:
    """Human-readable table for :func:`run_demo` output."""
    cfg = result["config"]
    lines = [
        f"Two-view simulation (paper RQ1): p={cfg['p']}, latent rank {cfg['latent_rank']}, noise sd "
        f"{cfg['noise_sd']}, angle {cfg['angle']:.2f} rad, fitted rank {cfg['rank']}, seed {cfg['seed']}",
        f"Population: Theorem 1 gap {result['population']['gap']:.4f}, "
        f"distance to shared family {result['population']['psd_distance']:.4f}",
        f"Test: {cfg['n_test']} queries, each positive against {cfg['n_negatives']} independent negatives",
        "",
        f"{'n':>6}  {'CARS':>6}  {'score':>10}  {'+/- se':>9}  {'train gap':>9}  "
        f"{'NDCG shared':>11}  {'NDCG dual':>9}  {'dual-shared':>11}  {'test favours':>12}",
    ]
    for r in result["rows"]:
        lines.append(
            f"{r['n']:>6}  {r['cars_choice']:>6}  {r['cars_score']:>10.4f}  {r['cars_se']:>9.4f}  "
            f"{r['train_gap']:>9.4f}  {r['ndcg10_shared']:>11.4f}  {r['ndcg10_dual']:>9.4f}  "
            f"{r['ndcg10_dual_minus_shared']:>+11.4f}  {r['better_on_test']:>12}"
        )
    agree = sum(r["cars_choice"] == r["better_on_test"] for r in result["rows"])
    lines += ["", f"CARS agreed with the held-out winner in {agree} of {len(result['rows'])} sizes "
              f"({result['seconds']:.1f} s)."]
    return "\n".join(lines)
