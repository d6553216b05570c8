"""Combined selector rules replayed on stored population cells (issue 37; not a registered selector).

    python tools/population_rule_replay.py [results/population/cells]

Reads the cell records of ``asymgeo reproduce population`` (each holds every registered rule's
choice and the exact population risks of both families) and scores, per variant, rules built from
them without refitting anything: ``bsure>cars@k`` (bootstrap SURE, deferring to CARS when its score
is within ``k`` standard errors of zero), ``bsure>cvp@1`` (deferring to ``cvp``) and ``vote3`` (the
majority of bsure, CARS and cvp).  Printed: regret over CARS's with a 95% seed-bootstrap interval
(1,000 draws, seed 0), accuracy, and accuracy at rank 4.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import numpy as np

RULES = ("cars", "bsure", "cvp", "bsure>cars@0.5", "bsure>cars@1", "bsure>cvp@1", "vote3")


def choice(rec: dict, rule: str) -> str:
    """The family ``rule`` picks on one cell record."""
    if ">" in rule:
        base, rest = rule.split(">")
        fallback, k = rest.split("@")
        s, se = rec[f"{base}_score"], rec[f"{base}_se"]
        return rec[f"{fallback}_choice"] if abs(s) < float(k) * se else rec[f"{base}_choice"]
    if rule == "vote3":
        return "dual" if sum(rec[f"{x}_choice"] == "dual" for x in ("bsure", "cars", "cvp")) >= 2 else "shared"
    return rec[f"{rule}_choice"]


def regret(rec: dict, family: str) -> float:
    """Population risk of ``family`` minus the lower of the two."""
    rs, rd = rec["risk_shared"], rec["risk_dual"]
    return (rs if family == "shared" else rd) - min(rs, rd)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0] if args else "results/population/cells")
    files = sorted(folder.glob("*.json"))
    if not files:
        print(f"population_rule_replay: {folder}: no cell records (run `asymgeo reproduce population`)",
              file=sys.stderr)
        return 2
    cells: dict[str, list] = collections.defaultdict(list)
    for f in files:
        try:
            r = json.loads(f.read_text())
            cells[r["config"]["variant"]].append((r["config"], r["record"]))
        except (ValueError, KeyError, TypeError) as exc:
            print(f"population_rule_replay: {f}: not a population cell record ({exc})", file=sys.stderr)
            return 2
    rng = np.random.default_rng(0)
    for variant, rows in sorted(cells.items()):
        seeds = sorted({c["seed_index"] for c, _ in rows})
        total = {r: collections.defaultdict(float) for r in RULES}
        right = dict.fromkeys(RULES, 0)
        rank4 = {r: [0, 0] for r in RULES}
        for c, rec in rows:
            for r in RULES:
                g = regret(rec, choice(rec, r))
                total[r][c["seed_index"]] += g
                right[r] += g == 0
                if c["rank"] == 4:
                    rank4[r][0] += g == 0
                    rank4[r][1] += 1
        cars = np.array([total["cars"][s] for s in seeds])
        print(f"{variant} ({len(rows)} cells, {len(seeds)} seeds)")
        for r in RULES:
            x = np.array([total[r][s] for s in seeds])
            draws = rng.integers(0, len(seeds), size=(1000, len(seeds)))
            ratio = x[draws].sum(axis=1) / cars[draws].sum(axis=1)
            lo, hi = np.percentile(ratio, [2.5, 97.5])
            r4 = rank4[r][0] / rank4[r][1] if rank4[r][1] else float("nan")
            print(f"  {r}: {x.sum() / cars.sum():.2f}x CARS [{lo:.2f}, {hi:.2f}], accuracy {right[r] / len(rows):.1%}, "
                  f"rank 4 {r4:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
