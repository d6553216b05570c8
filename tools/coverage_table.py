"""Branch coverage per module, as the table docs/testing.md quotes (issue #19).

    python tools/coverage_table.py             # runs the suite under pytest-cov, then prints the table
    python tools/coverage_table.py --from-json build/coverage.json   # only format an earlier run

The suite runs once with ``--cov=asymgeo --cov-branch``; the JSON report goes to
``build/coverage.json`` and the markdown table to ``build/coverage.md``.  Not run in CI (the
coverage tracer makes the suite about half again as slow).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build"


def table(report: dict) -> str:
    rows = ["| module | statements | missed | branches | partial | coverage |", "|---|---|---|---|---|---|"]
    files = report["files"]
    for name in sorted(files):
        s = files[name]["summary"]
        rel = Path(name).as_posix().split("src/asymgeo/")[-1]
        rows.append(f"| `{rel}` | {s['num_statements']} | {s['missing_lines']} | {s.get('num_branches', 0)} | "
                    f"{s.get('num_partial_branches', 0)} | {s['percent_covered']:.0f}% |")
    t = report["totals"]
    rows.append(f"| **total** | {t['num_statements']} | {t['missing_lines']} | {t.get('num_branches', 0)} | "
                f"{t.get('num_partial_branches', 0)} | {t['percent_covered']:.0f}% |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-json", type=Path, default=None)
    args = parser.parse_args(argv)
    OUT.mkdir(exist_ok=True)
    path = args.from_json
    if path is None:
        path = OUT / "coverage.json"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--cov=asymgeo", "--cov-branch",
               f"--cov-report=json:{path}", "--cov-report="]
        rc = subprocess.run(cmd, cwd=ROOT).returncode
        if rc != 0:
            print(f"the suite failed (exit {rc}); coverage not reported", file=sys.stderr)
            return rc
    try:
        report = json.loads(path.read_text())
        text = table(report)
    except (OSError, ValueError, KeyError) as exc:
        print(f"{path}: not a readable coverage JSON report ({exc.__class__.__name__}: {exc})", file=sys.stderr)
        return 2

    (OUT / "coverage.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
