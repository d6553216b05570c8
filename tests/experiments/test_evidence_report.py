"""docs/evidence.md from quick RQ4 and Table 1 runs: claims, figures, results tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from asymgeo.experiments.evidence_report import build_evidence_report
from asymgeo.experiments.report import reproduce

CONFIGS = Path(__file__).resolve().parents[2] / "src" / "asymgeo" / "experiments" / "configs"


@pytest.mark.slow
def test_evidence_report_on_quick_runs(tmp_path, shared_dir):
    results = tmp_path / "results"
    for name in ("rq4", "table1"):
        reproduce(name, quick=True, results_dir=results, config_dir=CONFIGS, workers=1, progress=False)
    md = build_evidence_report(results, tmp_path / "docs", quick=True)
    text = md.read_text()
    assert md.name == "evidence-quick.md"
    for needle in ("## Claims", "every held-out L_s − L_d slope against log2 n is positive",
                   "Table 1 (raw, selector projection 256), pooled (secondary): CARS selection accuracy",
                   "Table 1 (raw, selector projection 256), scifact / all-MiniLM-L6-v2: CARS regret", "RQ2 (real)",
                   "frozen NDCG@10 (graded, MTEB)", "## Runs and wall times", "Quick variant"):
        assert needle in text, needle
    figs = tmp_path / "docs" / "figures"
    for fig in ("rq4_trajectories-quick.png", "rq4_trajectories-quick_means.png", "rq2_real_figure4b-quick.png"):
        assert (figs / fig).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", fig
    cells = pd.read_csv(tmp_path / "docs" / "results" / "table1_cells-quick.csv")
    assert len(cells) == 2 * 2 * 6                 # folds x ranks x nested sizes of SciFact's pool
    slopes = pd.read_csv(tmp_path / "docs" / "results" / "rq4_slopes-quick.csv")
    assert len(slopes) == 4
    assert "1 encoder)" in text and "1 encoders" not in text and "| all | all |" not in text
    assert not (tmp_path / "docs" / "results" / "rq4_slopes.csv").exists()   # quick never overwrites full
    # without the Table 1 results folder, the page is rebuilt from the committed cells and run log
    import shutil

    shutil.rmtree(results / "table1-quick")
    again = build_evidence_report(results, tmp_path / "docs", quick=True).read_text()
    assert "Rebuilt from the committed per-cell table `docs/results/table1_cells-quick.csv`" in again
    assert "table1 (from the committed cells)" in again

    def claim_lines(page):
        return [ln for ln in page.splitlines() if ln.startswith("| Table 1 (")]

    # the same claims and verdicts (the committed cells keep 6 significant digits)
    assert [ln.split(" | ")[-1] for ln in claim_lines(again)] == [ln.split(" | ")[-1] for ln in claim_lines(text)]
    assert str(tmp_path) not in again  # no machine paths on the page


def test_evidence_report_marks_missing(tmp_path):
    text = build_evidence_report(tmp_path / "none", tmp_path / "docs").read_text()
    assert "Not run: `asymgeo reproduce rq4`" in text and "(no results yet)" in text
