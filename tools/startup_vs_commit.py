"""``import asymgeo`` start-up against an earlier commit, interleaved in one run (issue #24's
"within 0.05 s of today's").

Usage: ``python tools/startup_vs_commit.py REV [REPEATS]``: checks ``REV`` out into a temporary
git worktree, times fresh interpreters importing each tree alternately (best of ``REPEATS``,
default 20), prints the differences and removes the worktree.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODES = {"import asymgeo": "import asymgeo",
         "asymgeo.GeometrySelector": "import asymgeo; asymgeo.GeometrySelector",
         "asymgeo.cars_score + exact_search": "import asymgeo; asymgeo.cars_score; asymgeo.exact_search"}


def main(rev: str, repeats: int = 20) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(old), rev], check=True)
        try:
            trees = {"before": old / "src", "after": ROOT / "src"}
            best = {(t, c): float("inf") for t in trees for c in CODES}
            for _ in range(repeats):
                for name, code in CODES.items():
                    for t, src in trees.items():
                        env = {**os.environ, "PYTHONPATH": str(src)}
                        t0 = time.perf_counter()
                        subprocess.run([sys.executable, "-c", code], env=env, check=True)
                        best[(t, name)] = min(best[(t, name)], time.perf_counter() - t0)
            for name in CODES:
                b, a = best[("before", name)], best[("after", name)]
                print(f"{name}: {rev[:10]} {b:.4f} s, this tree {a:.4f} s, change {a - b:+.4f} s")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20))
