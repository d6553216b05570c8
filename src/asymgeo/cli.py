"""Command-line interface: a thin layer over the library.

Each subcommand is a pair ``_add_<name>(subparsers)`` / ``_run_<name>(args)``; the
``_run_`` function does argument plumbing and printing only, calling one or two
library functions.  Errors the library raises (``ValueError``, ``FileNotFoundError``,
``ImportError`` for a missing extra) become one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Sequence

from ._version import __version__

_EPILOG_TEMPLATE = "example:\n  {example}"

_COMMANDS: list[tuple[str, Callable[[argparse._SubParsersAction], argparse.ArgumentParser]]] = []


def _command(name: str):
    """Register an ``_add_<name>`` function that builds the subparser."""

    def deco(fn):
        _COMMANDS.append((name, fn))
        return fn

    return deco


def _subparser(sub: argparse._SubParsersAction, name: str, help_text: str, example: str) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        help=help_text,
        description=help_text,
        epilog=_EPILOG_TEMPLATE.format(example=example),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=_json_default)
    sys.stdout.write("\n")


def _json_default(o):
    import numpy as np

    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


# --------------------------------------------------------------------------- demo
@_command("demo")
def _add_demo(sub):
    p = _subparser(
        sub,
        "demo",
        "Run the paper's two-view simulation (Appendix F, RQ1) and show the shared-to-dual crossover.",
        "asymgeo demo --angle 1.2 --rank 8 --n 32 128 512 --seed 1 --json",
    )
    p.add_argument("--angle", type=float, default=1.2, help="document-loading rotation in radians (default 1.2)")
    p.add_argument("--rank", type=int, default=8, help="fitted rank r (default 8)")
    p.add_argument("--n", type=int, nargs="+", default=[32, 128, 512, 2048], help="training sizes (default 32 128 512 2048)")
    p.add_argument("--seed", type=int, default=20260809, help="master seed (default 20260809, the paper's)")
    p.add_argument("--n-test", type=int, default=1000, help="held-out test queries (default 1000)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=_run_demo)
    return p


def _run_demo(args) -> int:
    from .experiments.demo import run_demo, format_demo

    result = run_demo(angle=args.angle, rank=args.rank, sizes=args.n, seed=args.seed, n_test=args.n_test)
    if args.json:
        _print_json(result)
    else:
        print(format_demo(result))
    return 0


# --------------------------------------------------------------------------- reproduce
@_command("reproduce")
def _add_reproduce(sub):
    p = _subparser(
        sub,
        "reproduce",
        "Run a paper experiment grid from experiments/NAME.toml (resumable; local pool or Ray), "
        "or rebuild docs/reproduction.md from the results with NAME = report.",
        "asymgeo reproduce rq1 --quick && asymgeo reproduce report --quick",
    )
    p.add_argument("name", help="rq1, table2, rq2, all, or report (or any experiments/NAME.toml)")
    p.add_argument("--quick", action="store_true", help="the small CI variant ([quick] overrides; results in NAME-quick)")
    p.add_argument("--executor", choices=["local", "ray"], default="local", help="local process pool (default) or Ray")
    p.add_argument("--address", default=None, help="Ray cluster address, e.g. auto or ray://head:10001 (with --executor ray)")
    p.add_argument("--workers", type=int, default=None, help="local processes / local Ray CPUs (default: all cores)")
    p.add_argument("--results-dir", default="results", help="results root (default results/)")
    p.add_argument("--config-dir", default=None, help="folder of NAME.toml files (default experiments/)")
    p.add_argument("--docs-dir", default="docs", help="where report writes reproduction.md and figures/ (default docs/)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=_run_reproduce)
    return p


def _run_reproduce(args) -> int:
    from .experiments.report import reproduce
    from .experiments.runner import SweepError

    command = " ".join(["asymgeo", *sys.argv[1:]]) if sys.argv and sys.argv[0] else None
    try:
        out = reproduce(args.name, quick=args.quick, executor=args.executor, address=args.address,
                        workers=args.workers, results_dir=args.results_dir, config_dir=args.config_dir,
                        docs_dir=args.docs_dir, progress=not args.no_progress, command=command)
    except SweepError as exc:
        print(f"asymgeo reproduce: error: {exc}", file=sys.stderr)
        return 1
    if args.name == "report":
        print(f"wrote {out}")
        return 0
    for r in out:
        print(f"{r.name}: {r.n_run} cells run, {r.n_skipped} already done, {r.n_total} total, "
              f"{r.wall_seconds:.1f} s -> {r.table}")
    return 0


# --------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="asymgeo",
        description=(
            "Should queries and documents share one projection, or get two? "
            "Theory, selectors (CARS, SURE), exact search and experiments for "
            "shared vs dual adapters on frozen embeddings."
        ),
        epilog=_EPILOG_TEMPLATE.format(example="asymgeo demo"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"asymgeo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for _, add in _COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, ImportError, TypeError, KeyError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"asymgeo {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"asymgeo {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
