"""Mutation testing of the modules that decide results, with mutmut (issue #19).

    python tools/mutation.py                       # every module below, one after another
    python tools/mutation.py metrics selection     # some of them (by short name)
    python tools/mutation.py --report              # rebuild the summary from earlier runs only
    python tools/mutation.py --survivors metrics   # print each surviving mutant's diff

Each module runs in its own scratch clone of the committed checkout (``build/mutation/<name>/main``,
with ``shared`` linked to ``../shared`` so the tests find the data as they do here), with
``[tool.mutmut]`` naming the module and the test files meant to cover it.  mutmut's coverage
run picks, per mutant, the tests that execute the mutated function.  Results go to
``build/mutation/<name>.json`` (every mutant and its status) and the summary table to
``build/mutation/summary.md``, which docs/testing.md quotes.  Not run in CI: 5 to 20 minutes
per module on one core.  Needs ``pip install mutmut`` (3.x).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "mutation"

#: short name -> (module under src/, the test files meant to catch its faults)
MODULES: dict[str, tuple[str, list[str]]] = {
    "selection": ("src/asymgeo/kernels/selection.py", ["tests/kernels/test_selection.py"]),
    "validation": ("src/asymgeo/estimators/validation.py", ["tests/estimators/test_validation.py",
                                                            "tests/estimators/test_validation_contract.py",
                                                            "tests/test_select_truth.py"]),
    "metrics": ("src/asymgeo/retrieval/metrics.py", ["tests/retrieval/test_metrics.py", "tests/data/test_evaluate.py"]),
    "evaluate": ("src/asymgeo/data/evaluate.py", ["tests/data/test_evaluate.py"]),
    "triples": ("src/asymgeo/data/triples.py", ["tests/data/test_triples.py"]),
    "cache": ("src/asymgeo/data/cache.py", ["tests/data/test_cache.py", "tests/data/test_cache_encoder_identity.py",
                                            "tests/data/test_import_cache.py", "tests/test_ids.py"]),
    "training": ("src/asymgeo/adapters/training.py", ["tests/adapters/test_training.py", "tests/adapters/test_adapter.py",
                                                        "tests/adapters/test_planted_faults.py",
                                                        "tests/adapters/test_anchor_range.py"]),
    "workflow": ("src/asymgeo/adapters/workflow.py", ["tests/adapters/test_workflow.py",
                                                        "tests/adapters/test_planted_faults.py",
                                                        "tests/adapters/test_joint_deployment.py",
                                                        "tests/adapters/test_document_memory.py",
                                                        "tests/adapters/test_max_validation.py",
                                                        "tests/adapters/test_fit_messages.py",
                                                        "tests/adapters/test_fit_memory_wiring.py",
                                                        "tests/adapters/test_n_train_mining.py",
                                                        "tests/data/test_given_negatives.py"]),
}

STATUSES = ("killed", "survived", "no tests", "timeout", "suspicious", "skipped", "segfault", "not checked")


def _mutmut() -> str:
    exe = Path(sys.executable).with_name("mutmut")
    if not exe.exists():
        raise SystemExit("mutmut is not installed: pip install 'mutmut>=3,<4'")
    return str(exe)


def _workspace(name: str) -> Path:
    module, tests = MODULES[name]
    base = OUT / name
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    main = base / "main"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(main)], check=True)
    shared = (ROOT / ".." / "shared").resolve()
    (main / "shared").symlink_to(shared)  # mutants/ lives in main/: ../shared from it is main/shared
    with (main / "pyproject.toml").open("a") as fh:
        fh.write(f"\n[tool.mutmut]\nsource_paths = [{module!r}]\n"
                 f"pytest_add_cli_args = [\"-n\", \"0\"]\n"
                 f"pytest_add_cli_args_test_selection = {tests!r}\nalso_copy = [\"src\", \"tests\"]\n")
    return main


def _results(main: Path) -> dict[str, str]:
    out = subprocess.run([_mutmut(), "results", "--all", "true"], cwd=main, capture_output=True, text=True)
    status: dict[str, str] = {}
    for line in out.stdout.splitlines():
        key, _, value = line.strip().rpartition(": ")
        if key:
            status[key] = value.strip()
    return status


def run(name: str, children: int) -> dict[str, object]:
    main = _workspace(name)
    t0 = time.perf_counter()
    # one native thread everywhere: an OpenMP pool started before mutmut forks deadlocks the children
    # (tests/conftest.py keeps torch on one thread when ASYMGEO_MUTATION is set)
    env = {**os.environ, "ASYMGEO_MUTATION": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run([_mutmut(), "run", "--max-children", str(children)], cwd=main, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return _record(name, main, time.perf_counter() - t0, proc.returncode)


def collect(name: str) -> dict[str, object]:
    """The record of an interrupted run, from its workspace (unrun mutants are "not checked")."""
    main = OUT / name / "main"
    if not (main / "mutants").is_dir():
        raise SystemExit(f"{main}: no mutmut workspace to collect")
    started = (main / "mutants").stat().st_mtime
    return _record(name, main, time.time() - started, None)


def _record(name: str, main: Path, wall: float, returncode: int | None) -> dict[str, object]:
    import tomllib

    status = _results(main)
    # the test files of the run itself (the workspace's [tool.mutmut]), not today's list in MODULES
    tests = tomllib.loads((main / "pyproject.toml").read_text()).get("tool", {}).get("mutmut", {}).get(
        "pytest_add_cli_args_test_selection", MODULES[name][1])
    rec = {"module": MODULES[name][0], "tests": tests, "wall_seconds": round(wall, 1),
           "returncode": returncode, "mutants": status,
           # the commit the scratch clone was made from (the code and tests that were mutated)
           "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=main, capture_output=True,
                                    text=True).stdout.strip()}
    (OUT / f"{name}.json").write_text(json.dumps(rec, indent=1))
    return rec


def summary() -> str:
    rows = ["| module | test files | mutants | killed | survived | no tests | timeout | not run | score | wall |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for name in MODULES:
        path = OUT / f"{name}.json"
        if not path.exists():
            continue
        rec = json.loads(path.read_text())
        counts = {s: 0 for s in STATUSES}
        for s in rec["mutants"].values():
            counts[s] = counts.get(s, 0) + 1
        total = sum(counts.values())
        judged = counts["killed"] + counts["survived"] + counts["no tests"] + counts["timeout"]
        score = (counts["killed"] + counts["timeout"]) / judged if judged else float("nan")
        rows.append(f"| `{rec['module'].removeprefix('src/asymgeo/')}` | {', '.join(rec['tests'])} | {total} | "
                    f"{counts['killed']} | {counts['survived']} | {counts['no tests']} | {counts['timeout']} | "
                    f"{counts['not checked']} | {100 * score:.0f}% | {rec['wall_seconds'] / 60:.1f} min |")
    text = "\n".join(rows) + "\n"
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "summary.md").write_text(text)
    return text


def survivors(name: str) -> None:
    main = OUT / name / "main"
    rec = json.loads((OUT / f"{name}.json").read_text())
    for key, s in rec["mutants"].items():
        if s in ("survived", "no tests"):
            diff = subprocess.run([_mutmut(), "show", key], cwd=main, capture_output=True, text=True).stdout
            print(f"## {key} ({s})")
            print("\n".join(ln for ln in diff.splitlines() if ln.startswith(("-", "+")) and not ln.startswith(("---", "+++"))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"modules (default: all): {', '.join(MODULES)}")
    parser.add_argument("--report", action="store_true", help="only rebuild the summary")
    parser.add_argument("--survivors", metavar="NAME", help="print the surviving mutants of one module")
    parser.add_argument("--children", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--collect", metavar="NAME", help="record an interrupted module's results")
    args = parser.parse_args(argv)
    if args.collect:
        collect(args.collect)
        print(summary())
        return 0
    if args.survivors:
        survivors(args.survivors)
        return 0
    unknown = sorted(set(args.names) - set(MODULES))
    if unknown:
        parser.error(f"unknown module(s) {unknown}; choose from {', '.join(MODULES)}")
    if not args.report:
        for name in args.names or list(MODULES):
            rec = run(name, args.children)
            print(f"{name}: {len(rec['mutants'])} mutants in {rec['wall_seconds'] / 60:.1f} min", flush=True)
    print(summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
