"""Run every benchmark and write docs/benchmarks.md.

Usage::

    python benchmarks/run.py            # full sizes
    python benchmarks/run.py --quick    # small sizes (CI)
    python benchmarks/run.py --only cars search

Each ``benchmarks/bench_<name>.py`` exposes ``run(quick: bool) -> str`` returning a
markdown section (figures measured in this run, with ratios against a reference
measured in the same run).  Sections are written atomically into
``docs/benchmarks.md``; a section that is not re-run keeps its previous text.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import os
import platform
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = ROOT / "docs" / "benchmarks.md"
_SECTION = re.compile(r"<!-- bench:(?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /bench:(?P=name) -->\n", re.S)


def _load(name: str):
    path = HERE / f"bench_{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def _existing_sections() -> dict[str, str]:
    if not OUT.exists():
        return {}
    return {m["name"]: m["body"] for m in _SECTION.finditer(OUT.read_text())}


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def main(argv=None) -> int:
    names = sorted(p.stem[len("bench_"):] for p in HERE.glob("bench_*.py"))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, for CI")
    ap.add_argument("--only", nargs="+", choices=names, help="run only these benchmarks")
    ap.add_argument("--no-write", action="store_true", help="print, do not write docs/benchmarks.md")
    args = ap.parse_args(argv)
    selected = args.only or names
    sections = _existing_sections()
    cmd = "python benchmarks/run.py" + (" --quick" if args.quick else "") + (
        " --only " + " ".join(args.only) if args.only else "")
    for name in selected:
        print(f"== benchmark {name}", flush=True)
        body = _load(name).run(quick=args.quick)
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        body = body.rstrip() + f"\n\n_Made by `{cmd}` on {stamp}; {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}._\n"
        print(body, flush=True)
        sections[name] = body
    if args.no_write:
        return 0
    head = (
        "# Benchmarks\n\n"
        "Regenerate with `python benchmarks/run.py` (all) or `python benchmarks/run.py --only NAME`.\n"
        "Every speed figure is a ratio against a reference measured in the same run.\n\n"
    )
    text = head + "".join(
        f"<!-- bench:{n} -->\n{sections[n].rstrip()}\n<!-- /bench:{n} -->\n\n" for n in sorted(sections)
    )
    _atomic_write(OUT, text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
