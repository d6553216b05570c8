"""Build ``docs/reproduction.md`` and ``docs/figures/*.png`` from the results tables.

``asymgeo reproduce report`` (or :func:`build_report`) reads
``results/<name>/results.parquet`` and ``results/<name>/runs.jsonl`` for the three
theory experiments, draws the figures with matplotlib and writes one markdown page:
a claims table (claim, the paper's figure, ours, whether it holds), one section per
experiment, and the commands and wall times of the runs.  :func:`reproduce` is the
single entry point of the CLI.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import atomic_write_text
from . import rq1, rq2, rq3, rq4, table1, table2
from ._markdown import md_table as _table
from ._markdown import verdict as _verdict
from .runner import SweepResult, load_experiment, portable_command, read_results, results_path, run_sweep

__all__ = ["EXPERIMENTS", "build_report", "reproduce", "run_log"]

#: Reproducible experiments, in report order.
logger = logging.getLogger(__name__)

EXPERIMENTS = ("rq1", "table2", "rq2", "rq4", "table1")
FIGURES = {"rq1": "rq1_figure3.png", "table2": "table2_calibration.png", "rq2": "rq2_figure4a.png",
           "rq4": "rq4_trajectories.png", "table1": "rq2_real_figure4b.png"}
#: Trained-adapter experiments (RQ3): in the report, but run by name only (not by ``all``).
RQ3_EXPERIMENTS = ("rq3_rotation", "rq3_grid")
#: Their labelled variants (configs in the repository's experiments/ folder), reported when run.
RQ3_VARIANTS = ("rq3_grid_closed_form", "rq3_rotation_random_planes")


# --------------------------------------------------------------------------- helpers
def run_log(results_dir: str | os.PathLike, name: str) -> list[dict]:
    """The invocations recorded in ``<results>/<name>/runs.jsonl`` (oldest first)."""
    path = results_path(results_dir, name) / "runs.jsonl"
    if not path.is_file():
        return []
    out = []
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            logger.warning("%s:%d: not a JSON record (%s); line skipped", path, i, exc.msg)
            continue
        if not isinstance(rec, dict):
            logger.warning("%s:%d: a JSON %s, not a run record; line skipped", path, i, type(rec).__name__)
            continue
        out.append(rec)
    return out


def _timing(results_dir, name: str) -> dict[str, Any]:
    runs = [r for r in run_log(results_dir, name) if r.get("cells_run", 0) > 0]
    if not runs:
        return {"wall": None, "cells": 0, "commands": [], "machine": "", "executor": ""}
    return {
        "wall": sum(float(r["wall_seconds"]) for r in runs),
        "cells": sum(int(r["cells_run"]) for r in runs),
        "commands": list(dict.fromkeys(r["command"] for r in runs)),
        "machine": runs[-1].get("machine", ""),
        "executor": f"{runs[-1].get('executor')} x{runs[-1].get('workers')}",
        "invocations": len(runs),
    }


def _fmt_seconds(s: float | None) -> str:
    if s is None:
        return "not run"
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


# --------------------------------------------------------------------------- sections
def _rq1_section(df, fig_path: Path, fig_rel: str) -> tuple[str, list[list[str]]]:
    summary = rq1.summarise(df)
    ranks = sorted(summary["rank"].unique())
    rank = 8 if 8 in ranks else ranks[0]
    rq1.plot(summary, fig_path, rank=rank)
    first = {r: rq1.first_positive(summary, r) for r in ranks}
    c = rq1.claims(summary, rank)
    claims: list[list[str]] = []
    for e in c["paper_first_positive"]:
        if e["ours"] == "not in grid":
            claims.append([f"RQ1: first positive rank-{rank} mean Dual-Shared at {e['angle']} rad",
                           f"n = {e['paper_n']}", "angle not in this grid", _verdict(None)])
            continue
        claims.append([f"RQ1: first positive rank-{rank} mean Dual-Shared NDCG@10 at {e['angle']} rad",
                       f"n = {e['paper_n']}", f"n = {e['ours']}", _verdict(e["holds"])])
    signif = c["first_significant"]
    for e in c["significant"]:
        claims.append([f"RQ1 (stricter reading, ours): first rank-{rank} n whose 95% interval is above 0 "
                       f"at {e['angle']} rad", f"n = {e['paper_n']} (first positive mean)", f"n = {e['ours']}",
                       _verdict(e["holds"])])
    sub = summary[summary["rank"] == rank]
    claims.append(["RQ1: the zero contour splits the grid (neither geometry dominates)",
                   "Figure 3A", f"{c['positive_cells']} of {c['cells']} (angle, n) means positive",
                   _verdict(c["both_signs"])])
    claims.append(["RQ1: stronger mismatch needs fewer pairs (first positive n at 1.2 rad <= at 0.8 rad)",
                   "64 <= 256", f"{c['first_positive_12']} <= {c['first_positive_08']}", _verdict(c["order_holds"])])
    claims.append(["RQ1: at the largest n the Dual advantage grows with G_PSD",
                   "Figure 3B", f"corr(G_PSD, gap) = {c['gpsd_trend_corr']:.3f} at n = {c['largest_n']}",
                   _verdict(c["trend_holds"])])

    pivot = sub.pivot(index="angle", columns="n", values="diff_mean").sort_index()
    rows = [[f"{a:.1f}", f"{float(sub[sub['angle'] == a]['population_gpsd'].iloc[0]):.3f}",
             *[f"{v:+.4f}" for v in pivot.loc[a]]] for a in pivot.index]
    grid_tab = _table(["angle", "G_PSD", *[f"n={int(n)}" for n in pivot.columns]], rows)
    fp_rows = [[f"{a:.1f}", *[str(first[r].get(round(float(a), 6))) for r in ranks]]
               for a in sorted(summary["angle"].unique())]
    fp_tab = _table(["angle", *[f"rank {r}" for r in ranks]], fp_rows)
    seeds = int(sub["seeds"].max())
    notes = []
    for angle, paper_n in rq1.PAPER_FIRST_POSITIVE.items():
        ours = first[rank].get(round(angle, 6))
        if ours == paper_n or round(angle, 6) not in first[rank]:
            continue
        g = sub[np.isclose(sub["angle"], angle)].sort_values("n")
        cells = ", ".join(f"n={int(r.n)}: {r.diff_mean:+.4f} [{r.ci_low:+.4f}, {r.ci_high:+.4f}]"
                          for r in g.itertuples())
        straddle = [int(r.n) for r in g.itertuples() if r.ci_low <= 0 <= r.ci_high]
        notes.append(
            f"- At {angle} rad the first positive mean is n = {ours}, the paper's is n = {paper_n}. "
            f"Means with 95% normal intervals over {seeds} seeds: {cells}. "
            + (f"The intervals at n = {straddle} contain zero, so the crossing size is not resolved "
               f"by {seeds} seeds at these sizes; " if straddle else "")
            + f"the first size whose interval is above zero is n = {signif.get(round(angle, 6))}. "
            + "Our crossing is one grid step (a factor of 2 in n) earlier; "
            + "the paper does not specify how its loadings are drawn or how many test queries it "
              "uses, and the crossing size of a given angle depends on that draw (our document "
              "loading rotates each query direction into its own orthogonal plane, "
              "`asymgeo.estimators.simulation`).")
    note_text = ("\n### Where we differ\n\n" + "\n".join(notes) + "\n") if notes else ""
    text = f"""## RQ1: the boundary in two-view retrieval (Figure 3)

![Figure 3]({fig_rel})

Mean over {seeds} paired seeds of Dual − Shared NDCG@10 at rank {rank} (positive favours Dual);
`G_PSD` is the population distance `||P_d,r(C) − P_s,r(C)||²` of the population moment.

{grid_tab}

First training size with a positive mean, per angle and fitted rank ("None": never in the grid):

{fp_tab}
{note_text}"""
    return text, claims


def _table2_section(df, fig_path: Path, fig_rel: str) -> tuple[str, list[list[str]]]:
    s = table2.summarise(df)
    table2.plot(s, fig_path)
    n_max = int(s["n"].max())
    top = s[s["n"] == n_max]
    rows = []
    for _, r in top.iterrows():
        rows.append([f"{r['level']:g}", f"{r['delta2']:.1f}",
                     f"{r['risk_dual']:.3f} / {r['risk_dual_theory']:.0f}", f"{100 * r['rel_err_dual']:+.3f}%",
                     f"{r['risk_shared']:.3f} / {r['risk_shared_theory']:.0f}", f"{100 * r['rel_err_shared']:+.3f}%",
                     f"{r['sure_prob']:.5f} / {r['sure_prob_theory']:.5f}", f"{r['abs_err_sure']:+.5f}",
                     f"{r['sure_prob_se']:.5f}"])
    main = _table(["δ²/(σ²k)", "δ²", "dual risk sim/theory", "rel. err", "shared risk sim/theory", "rel. err",
                   "Pr(SURE→dual) sim/exact", "abs. err", "MC SE"], rows)
    conv_rows = [[int(r["n"]), f"{r['level']:g}", f"{100 * r['rel_err_dual']:+.2f}%",
                  f"{100 * r['rel_err_shared']:+.2f}%", f"{100 * r['rel_se_dual']:.2f}%",
                  f"{r['risk_diff']:+.2f} / {r['risk_diff_theory']:+.0f}",
                  f"{r['sure_prob_finite_n']:.4f}"] for _, r in s.iterrows()]
    conv = _table(["n", "δ²/(σ²k)", "dual rel. err", "shared rel. err", "MC rel. SE (dual)",
                   "shared − dual sim/theory", "finite-n SURE freq."], conv_rows)
    c = table2.claims(s)
    max_rel, max_rel_se, max_z = c["max_rel_err"], c["max_rel_se"], c["max_abs_z"]
    max_abs, max_se, max_zs = c["max_abs_err_sure"], c["max_sure_se"], c["max_abs_z_sure"]
    draws, sdraws = int(df["risk_draws"].iloc[0]), int(df["sure_draws"].iloc[0])
    claims = [
        [f"Table 2: Theorem 2 risks within 0.25% at n = {n_max}", "≤ 0.25%",
         f"max {100 * max_rel:.3f}% (MC rel. SE ≤ {100 * max_rel_se:.3f}%, max |z| = {max_z:.1f})",
         _verdict(c["risks_hold"])],
        [f"Table 2: SURE probabilities within 0.001 at n = {n_max}", "≤ 0.001",
         f"max {max_abs:.5f} (MC SE ≤ {max_se:.5f}, max |z| = {max_zs:.1f})",
         _verdict(c["sure_holds"])],
    ]
    notes = []
    if max_rel > table2.PAPER_RISK_REL_TOL:
        notes.append(
            f"- Risks: the largest relative error at n = {n_max} is {100 * max_rel:.3f}% against the paper's "
            f"0.25%, with Monte-Carlo relative SE up to {100 * max_rel_se:.3f}% and |z| up to {max_z:.1f}. "
            + ("A |z| below ~3 means the excess is Monte-Carlo noise: 20,000 draws cannot certify 0.25% "
               "reliably." if max_z < 3 else
               "A |z| this large is not Monte-Carlo noise: it is the finite-n (O(n^-1/2)) remainder of "
               "the local expansion at this design (eigenvalues of S from 2 to 1)."))
    if max_abs > table2.PAPER_SURE_ABS_TOL:
        notes.append(
            f"- SURE: the largest absolute error is {max_abs:.5f} against the paper's 0.001, with binomial "
            f"SE up to {max_se:.5f} and |z| up to {max_zs:.1f}: "
            + ("consistent with Monte-Carlo noise; with this many draws an error of 0.001 is about "
               f"{table2.PAPER_SURE_ABS_TOL / max_se:.1f} SE, so a 'within 0.001' match is partly luck."
               if max_zs < 3 else "larger than Monte-Carlo noise explains."))
    lvl0 = s[s["level"] == s["level"].min()].sort_values("n")
    errs = lvl0["rel_err_dual"].to_numpy()
    if len(errs) > 1 and np.all(errs[1:] != 0):
        ratios = errs[:-1] / errs[1:]
        steps = np.log2(lvl0["n"].to_numpy()[1:] / lvl0["n"].to_numpy()[:-1])
        notes.append(
            "- Finite-n bias: the dual relative error falls "
            + " → ".join(f"{100 * e:+.2f}%" for e in errs)
            + f" as n grows (ratios {', '.join(f'{r:.1f}' for r in ratios)} per "
            f"{', '.join(f'{2 ** st:.0f}x' for st in steps)} n), "
            "the O(1/n) remainder of the local expansion; the dual risk draws are shared across signal "
            "levels, so the dual column's error is nearly the same in every row. At the largest n this "
            "deterministic remainder, not Monte-Carlo noise, is most of the deviation from the limit.")
    note_text = ("\n### Notes and differences\n\n" + "\n".join(notes) + "\n") if notes else ""
    text = f"""## Table 2: local-risk and SURE calibration

![Table 2 calibration]({fig_rel})

p = {int(df['p'].iloc[0])}, r = {int(df['rank'].iloc[0])}, σ = {df['sigma'].iloc[0]:g},
k = {int(df['k'].iloc[0])}, dim T_d = {int(df['dim_Td'].iloc[0])}, dim T_s = {int(df['dim_Ts'].iloc[0])};
{draws:,} nonlinear-projection draws per cell for the n-scaled risks (true nearest points:
SVD truncation and positive eigen-truncation of `Y_n = M_n + σ G/√n`, `M_n = P_d,r(S + H/√n)`),
{sdraws:,} Gaussian-sequence draws per cell for the SURE probability. Entries at n = {n_max}
(simulation / theory; the paper's Table 2 reports this n):

{main}

All n (risks scaled by n; the finite-n SURE column uses `Z_n = √n Π_Td(Y_n − S)` on the risk draws):

{conv}

Monte-Carlo precision: with {draws:,} draws the relative standard error of a risk is about
{100 * max_rel_se:.2f}%, so "within 0.25%" is a ~{table2.PAPER_RISK_REL_TOL / max_rel_se:.1f}-SE statement;
with {sdraws:,} draws the standard error of a probability near 1/2 is {np.sqrt(0.25 / sdraws):.5f}, so
"within 0.001" is at most a ~{table2.PAPER_SURE_ABS_TOL / np.sqrt(0.25 / sdraws):.1f}-SE statement there.
Matches at this precision are expected only up to Monte-Carlo luck; |z| (deviation over its
standard error) says whether a deviation is noise.
{note_text}"""
    return text, claims


def _rq2_section(df, fig_path: Path, fig_rel: str) -> tuple[str, list[list[str]]]:
    s = rq2.summarise(df)
    rq2.plot(s, fig_path)
    c = rq2.claims(s)
    rows = [[f"{r['angle']:.1f}", int(r["n"]), f"{r['population']:.3f}",
             f"{r['raw_mean']:.3f} [{r['raw_low']:.3f}, {r['raw_high']:.3f}]",
             f"{r['corrected_mean']:.3f} [{r['corrected_low']:.3f}, {r['corrected_high']:.3f}]",
             f"{r['cars_score_mean']:.3f}"] for _, r in s.iterrows()]
    tab = _table(["angle", "n", "population G_PSD", "raw (95% t)", "corrected (95% t)", "CARS score"], rows)
    missed = s[~((s["corrected_low"] <= s["population"]) & (s["population"] <= s["corrected_high"]))]
    missed_n = sorted({int(n) for n in missed["n"]})
    claims = [
        ["RQ2: raw plug-in distance exceeds the population value", "Figure 4A",
         f"raw 95% t interval above population in {'all' if c['raw_ci_above_population_everywhere'] else 'not all'}"
         f" {c['cells']} (angle, n) cells", _verdict(c["raw_ci_above_population_everywhere"])],
        ["RQ2: the raw inflation shrinks with n", "Figure 4A",
         "excess at largest n < at smallest n for every angle" if c["raw_excess_shrinks_with_n_every_angle"]
         else "not at every angle", _verdict(c["raw_excess_shrinks_with_n_every_angle"])],
        ["RQ2: the corrected estimate is closer to the population distance than the raw one", "Figure 4A",
         f"closer than raw in {c['corrected_closer_than_raw']}/{c['cells']} cells; median |error| "
         f"{c['median_abs_corrected_error']:.3f} vs raw {c['median_abs_raw_excess']:.3f}",
         _verdict(c["corrected_closer_than_raw"] >= 0.8 * c["cells"])],
        ["RQ2: the corrected estimate tracks the population distance (its 95% interval covers it)", "Figure 4A",
         f"covers the population in {c['corrected_ci_covers_population']}/{c['cells']} cells"
         + ("" if c["corrected_ci_covers_population"] == c["cells"] else
            f": closer than raw, biased where it misses (n = {', '.join(str(int(n)) for n in missed_n)})"),
         _verdict(c["corrected_ci_covers_population"] == c["cells"])],
    ]
    notes = []
    if not c["raw_ci_above_population_everywhere"]:
        bad = s[s["raw_low"] <= s["population"]]
        where = ", ".join(f"{r.angle:.1f} rad / n={int(r.n)} (mean {r.raw_mean:.3f}, lower bound "
                          f"{r.raw_low:.3f}, population {r.population:.3f})" for r in bad.itertuples())
        above = bool((bad["raw_mean"] > bad["population"]).all())
        notes.append(
            f"- The raw interval reaches down to the population value at {where}: at large n the "
            "noise inflation (order tr(Σ)/n) becomes comparable to the seed-to-seed spread"
            + (", so the mean is still above the population value but the 95% t interval is not."
               if above else "; there the raw mean is not above the population value either."))
    if c["corrected_ci_covers_population"] < c["cells"]:
        bad = s[(s["corrected_low"] > s["population"]) | (s["corrected_high"] < s["population"])]
        where = ", ".join(f"{r.angle:.1f} rad / n={int(r.n)} ({r.corrected_mean:.3f} vs {r.population:.3f})"
                          for r in bad.itertuples())
        notes.append(
            f"- The corrected interval misses the population value at {where}. The cross-half "
            "agreement is unbiased for ||E V_half||², the squared distance of the *expected half-sample* "
            "fit difference, which differs from the population distance at small n because the "
            "truncations are nonlinear; this is a residual bias, smaller than the raw inflation.")
    note_text = ("\n### Where we differ\n\n" + "\n".join(notes) + "\n") if notes else ""
    text = f"""## RQ2 (simulation): raw versus corrected asymmetry (Figure 4A)

![Figure 4A]({fig_rel})

Rank {int(df['rank'].iloc[0])}, {int(s['seeds'].max())} seeds per (angle, n), {int(df['cars_splits'].iloc[0])} CARS
half-splits. raw = `||P_d(Ĉ) − P_s(Ĉ)||²` of the training moment; corrected = mean cross-half
agreement `<V_I1, V_I2>` (CARS, eq. 7, without the variance charge); CARS score = corrected − ¼ disagreement.

{tab}
{note_text}"""
    return text, claims


_SECTIONS = {"rq1": _rq1_section, "table2": _table2_section, "rq2": _rq2_section,
             "rq4": rq4.report_section, "table1": table1.report_section}  # real embeddings: docs/evidence.md


# --------------------------------------------------------------------------- entry points
def build_report(results_dir: str | os.PathLike = "results", docs_dir: str | os.PathLike = "docs", *,
                 quick: bool = False, out_name: str = "reproduction.md") -> Path:
    """Write ``<docs_dir>/<out_name>`` and its figures from the finished results.

    Parameters
    ----------
    results_dir : root of the results tables (``asymgeo reproduce NAME`` output).
    docs_dir : where ``reproduction.md`` and ``figures/`` go.
    quick : read the ``--quick`` results (``<name>-quick``) instead of the full ones.

    Experiments without results are listed as not run.  Returns the markdown path.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:  # pragma: no cover - matplotlib is in the experiments extra
        raise ImportError("the report needs matplotlib: pip install 'asymgeo[experiments]'") from exc
    docs = Path(docs_dir)
    figs = docs / "figures"
    figs.mkdir(parents=True, exist_ok=True)
    claims: list[list[str]] = []
    sections: list[str] = []
    timing_rows = []
    suffix = "-quick" if quick else ""
    for name in EXPERIMENTS:
        folder = name + suffix
        fig_name = FIGURES[name].replace(".png", f"{suffix}.png")
        try:
            df = read_results(results_dir, folder)
        except FileNotFoundError:
            committed = docs / "results" / f"{name}_cells{suffix}.csv"
            if name == "table1" and committed.is_file():  # 75 min to rerun: the committed cells stand in
                text, cl, run_row = table1.section_from_committed(committed, docs, fig_name, suffix)
                sections.append(text)
                claims += [[*row[:2], row[2], row[3], f"[{name}](figures/{fig_name})"] for row in cl]
                timing_rows.append([run_row[0], run_row[1], run_row[2], run_row[3], "local x2", run_row[5]])
                continue
            sections.append(f"## {name}\n\nNot run: `asymgeo reproduce {name}{' --quick' if quick else ''}`.\n")
            timing_rows.append([name, "–", "not run", "–", "–", "–"])
            continue
        text, cl = _SECTIONS[name](df, figs / fig_name, f"figures/{fig_name}")
        sections.append(text)
        claims += [[*row[:2], row[2], row[3], f"[{name}](figures/{fig_name})"] for row in cl]
        t = _timing(results_dir, folder)
        cmds = "<br>".join(f"`{portable_command(c)}`" for c in t["commands"]) or "–"
        cell_sum = float(df["cell_seconds"].sum()) if "cell_seconds" in df else None
        timing_rows.append([name, f"{len(df)} cells", _fmt_seconds(t["wall"]), _fmt_seconds(cell_sum),
                            t.get("executor") or "–", cmds])
    rq3_results = {}
    for name in (*RQ3_EXPERIMENTS, *RQ3_VARIANTS):
        try:
            rq3_results[name] = read_results(results_dir, name + suffix)
        except FileNotFoundError:
            if name in RQ3_VARIANTS:
                continue
            sections.append(f"## {name}\n\nNot run: `asymgeo reproduce {name}{' --quick' if quick else ''}`.\n")
            timing_rows.append([name, "–", "not run", "–", "–", "–"])
            continue
        t = _timing(results_dir, name + suffix)
        df = rq3_results[name]
        cell_sum = float(df["cell_seconds"].sum()) if "cell_seconds" in df else None
        timing_rows.append([name, f"{len(df)} cells", _fmt_seconds(t["wall"]), _fmt_seconds(cell_sum),
                            t.get("executor") or "–",
                            "<br>".join(f"`{portable_command(c)}`" for c in t["commands"]) or "–"])
    if rq3_results:
        text, cl, _figs = rq3.report_section(rq3_results, figs, "figures", suffix=suffix)
        sections.append(text)
        claims += cl
    claim_tab = _table(["claim", "paper", "ours", "holds", "figure"],
                       [[c[0], c[1], c[2], c[3], c[4]] for c in claims]) if claims else "(no results yet)"
    machine = ""
    for name in EXPERIMENTS:
        t = _timing(results_dir, name + suffix)
        if t["machine"]:
            machine = t["machine"]
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    quick_note = ("\n> **Quick variant**: small CI grids, not the paper's; numbers are smoke-test level.\n"
                  if quick else "")
    q = " --quick" if quick else ""
    text = f"""# Reproducing the paper's experiments (RQ1 to RQ4, Tables 1 and 2)
{quick_note}
Regenerate everything with

```bash
asymgeo reproduce all{q}            # rq1, table2, rq2, rq4, table1 (resumes; --executor ray --address ADDR)
asymgeo reproduce rq3_rotation{q}   # and rq3_grid: trained adapters, run by name (need the train extra)
asymgeo reproduce report{q}         # rewrite this page and docs/figures/
```

Configs: `rq1.toml`, `table2.toml`, `rq2.toml` in `src/asymgeo/experiments/configs/` (master seed 20260809;
every cell's seeds are derived from it and its coordinates and stored in the results table
`results/<name>/results.parquet`, with the config and package versions). Generated {now}.

## Claims

{claim_tab}

## Runs and wall times

Machine: {machine or 'unknown'}. Wall time sums the invocations that computed cells (resumed runs add up);
"cell time" is the sum of the cells' own run times (divide by the worker count for an ideal
parallel wall time). Both depend on what else the machine was running.

{_table(["experiment", "size", "wall time", "cell time", "executor", "command"], timing_rows)}

{chr(10).join(sections)}"""
    out = docs / out_name
    atomic_write_text(out, text)
    return out


def reproduce(name: str, *, quick: bool = False, executor: str = "local", address: str | None = None,
              workers: int | None = None, results_dir: str | os.PathLike = "results",
              config_dir: str | os.PathLike | None = None, docs_dir: str | os.PathLike = "docs",
              progress: bool = True, command: str | None = None) -> list[SweepResult] | Path:
    """Run one experiment (``rq1``, ``table2``, ``rq2``), ``all`` of them, or build the ``report``.

    Returns the sweep results, or the report path for ``name == "report"``.
    """
    if name == "report":
        return build_report(results_dir, docs_dir, quick=quick)
    names = list(EXPERIMENTS) if name == "all" else [name]
    out = []
    for nm in names:
        exp = load_experiment(nm, quick=quick, config_dir=config_dir)
        out.append(run_sweep(exp, results_dir=results_dir, executor=executor, workers=workers,
                             address=address, progress=progress, command=command))
    return out
