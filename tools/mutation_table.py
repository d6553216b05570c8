"""The per-module mutation table of docs/testing.md, from the records tools/mutation.py writes.

    python tools/mutation_table.py            # prints the markdown table of build/mutation/*.json

Each row is one recorded run (``build/mutation/<name>.json``; earlier runs kept as
``<name>_<label>.json``): mutants, killed, survived, no tests, timeouts, not run, the score with
timeouts counted as killed (mutmut's convention) and without, the commit and the wall time.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "mutation"


def row(path: Path) -> str:
    rec = json.loads(path.read_text())
    counts: dict[str, int] = {}
    for s in rec["mutants"].values():
        counts[s] = counts.get(s, 0) + 1
    k, sv, nt, to = (counts.get(s, 0) for s in ("killed", "survived", "no tests", "timeout"))
    unrun = counts.get("not checked", 0)
    judged = k + sv + nt + to
    score = 100 * (k + to) / judged if judged else float("nan")
    strict = 100 * k / judged if judged else float("nan")
    label = path.stem.partition("_")[2] or "latest"
    module = rec["module"].removeprefix("src/asymgeo/")
    return (f"| `{module}` ({label}) | {len(rec['mutants'])} | {k} | {sv} | {nt} | {to} | {unrun} | "
            f"{score:.0f}% | {strict:.0f}% | {rec['commit'][:7]} | {rec['wall_seconds'] / 60:.0f} min |")


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=OUT, help="folder of the run records (default build/mutation)")
    args = ap.parse_args(argv)
    paths = sorted(args.dir.glob("*.json"))
    if not paths:
        print(f"{args.dir}: no mutation run records (run tools/mutation.py first)", file=sys.stderr)
        return 2
    rows = ["| module (run) | mutants | killed | survived | no tests | timeout | not run | score | strict | commit "
            "| wall |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for p in paths:
        try:
            rows.append(row(p))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            print(f"{p}: not a mutation run record ({type(exc).__name__}: {exc})", file=sys.stderr)
            return 2
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
