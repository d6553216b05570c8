"""Regenerate every generated page in docs/ from the repository's configs, and time each step.

    python tools/regenerate_docs.py --quick            # every experiment's [quick] grid -> build/regen-quick/
    python tools/regenerate_docs.py --full             # the full grids -> results/ and docs/ (hours on 2 cores)
    python tools/regenerate_docs.py --full --pages-only  # rebuild docs/ from results/ already there

``--quick`` never touches docs/: results go to ``build/regen-quick/results`` and the pages
(``reproduction-quick.md``, ``evidence-quick.md``, ``results/rq3-quick.md``, ...) to
``build/regen-quick/docs``, with ``timings.md`` listing each step's wall time.  The page list
and the full runs' wall times on the 2-core development machine are in experiments/README.md.
Every path printed is relative to the repository.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (experiment, results page builder) in run order; the RQ3 variants' configs live in experiments/.
SWEEPS = ("rq1", "table2", "rq2", "rq4", "table1", "selectors", "heldout_noise", "partial_sharing", "partial_sharing_retrieval",
          "rq1_selectors", "rq3_rotation", "rq3_grid", "rq3_grid_closed_form",
          "rq3_rotation_random_planes", "adapters", "generalisation", "auto_geometry", "population", "peers",
          "peers_crowded", "rq3_zero_angle")

#: the crowded stress encoders experiments/peers_crowded.toml reads, per dataset (full grid; the quick
#: grid: SciFact MiniLM)
CROWDED = ("all-MiniLM-L6-v2", "all-mpnet-base-v2")
CROWDED_DATASETS = ("scifact", "nfcorpus")


def _crowded_caches(quick: bool) -> None:
    """Write the stress encoders' caches (tools/crowded_encoder.py) that are not there yet."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("crowded_encoder", ROOT / "tools" / "crowded_encoder.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out = Path("results/crowded/embeddings")
    for dataset in CROWDED_DATASETS[:1] if quick else CROWDED_DATASETS:
        for enc in CROWDED[:1] if quick else CROWDED:
            if not (out / dataset / f"crowded-0.75-{enc}" / "meta.json").is_file():
                tool.main([dataset, enc, "--out", str(out)])


def _timed(label: str, fn: Callable[[], object], log: list[tuple[str, float]]) -> None:
    t0 = time.perf_counter()
    fn()
    secs = time.perf_counter() - t0
    log.append((label, secs))
    print(f"{label}: {secs:.1f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--quick", action="store_true", help="the [quick] grids, into build/regen-quick/")
    mode.add_argument("--full", action="store_true", help="the full grids, into results/ and docs/")
    parser.add_argument("--pages-only", action="store_true", help="rebuild the pages from existing results")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)

    os.chdir(ROOT)  # configs' data_dir / cache_dir are relative to the repository
    from asymgeo.experiments import auto_geometry, generalisation, population, rq3, rq3_zero_angle
    from asymgeo.experiments.adapters_scifact import main as adapters_main
    from asymgeo.experiments.evidence_report import build_evidence_report
    from asymgeo.experiments.report import build_report, reproduce
    from asymgeo.experiments.runner import read_results

    quick = bool(args.quick)
    base = Path("build/regen-quick") if quick else Path(".")
    results, docs = base / "results", (base / "docs" if quick else Path("docs"))
    suffix = "-quick" if quick else ""
    log: list[tuple[str, float]] = []
    if not args.pages_only:
        _timed("crowded stress encoders", lambda: _crowded_caches(quick), log)
        for name in SWEEPS:
            _timed(f"asymgeo reproduce {name}{' --quick' if quick else ''}",
                   lambda name=name: reproduce(name, quick=quick, results_dir=results, workers=args.workers,
                                               progress=False, command=f"asymgeo reproduce {name}"
                                               + (" --quick" if quick else "")), log)
    docs.mkdir(parents=True, exist_ok=True)
    _timed("reproduction page", lambda: build_report(results, docs, quick=quick), log)
    _timed("evidence page", lambda: build_evidence_report(results, docs, quick=quick), log)
    names = tuple(n + suffix for n in ("rq3_rotation", "rq3_grid", "rq3_grid_closed_form", "rq3_rotation_random_planes"))

    def rq3_page() -> None:
        page = rq3.write_results_page(results, docs, names=names)
        if quick:
            page.replace(page.with_name("rq3-quick.md"))

    _timed("RQ3 page", rq3_page, log)

    def summary_page(module: object, name: str, out: Path) -> None:
        table = read_results(results, name + suffix)
        text = module.format_summary(module.summarise(table),  # type: ignore[attr-defined]
                                     f"python -m {module.__name__} {results / (name + suffix)} {out}")
        from asymgeo._atomic import atomic_write_text

        atomic_write_text(out, text)

    _timed("generalisation page", lambda: summary_page(generalisation, "generalisation",
                                                       docs / f"generalisation{suffix}.md"), log)
    _timed("auto_geometry page", lambda: summary_page(auto_geometry, "auto_geometry",
                                                      docs / f"auto_geometry{suffix}.md"), log)
    _timed("population page", lambda: summary_page(population, "population", docs / f"population{suffix}.md"), log)
    (docs / "results").mkdir(parents=True, exist_ok=True)
    _timed("RQ3 at 0 degrees page", lambda: summary_page(rq3_zero_angle, "rq3_zero_angle",
                                                         docs / "results" / f"rq3_zero_angle{suffix}.md"), log)
    from asymgeo.experiments.peers import main as peers_main

    _timed("peers page", lambda: peers_main([str(results / f"peers{suffix}"), str(docs / f"peers{suffix}.md")]), log)
    _timed("crowded peers page", lambda: peers_main([str(results / f"peers_crowded{suffix}"),
                                                     str(docs / f"peers_crowded{suffix}.md")]), log)
    (docs / "results").mkdir(parents=True, exist_ok=True)
    _timed("adapters page", lambda: adapters_main([str(results / f"adapters{suffix}"), str(docs / "results")]), log)
    total = sum(s for _, s in log)
    lines = ["# Regenerated pages: wall time per step", "",
             f"`python tools/regenerate_docs.py {'--quick' if quick else '--full'}` on {os.cpu_count()} CPUs; "
             f"total {total / 60:.1f} min.", "", "| step | wall time |", "|---|---|"]
    lines += [f"| `{label}` | {secs:.1f} s |" for label, secs in log]
    (base / "timings.md").write_text("\n".join(lines) + "\n")
    print(f"total {total / 60:.1f} min; pages in {docs}; timings in {base / 'timings.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
