"""Report generation on a quick run, and the `asymgeo reproduce` command."""

from __future__ import annotations

from pathlib import Path

import pytest

from asymgeo.cli import main
from asymgeo.experiments.report import build_report, reproduce
from asymgeo.experiments.runner import read_results

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "experiments"


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    out = reproduce("all", quick=True, results_dir=results, config_dir=CONFIGS, workers=2, progress=False,
                    command="asymgeo reproduce all --quick")
    assert [r.name for r in out] == ["rq1-quick", "table2-quick", "rq2-quick", "rq4-quick", "table1-quick"]
    return results


def test_report_on_quick_run(quick_results, tmp_path):
    md = build_report(quick_results, tmp_path / "docs", quick=True)
    text = md.read_text()
    assert md == tmp_path / "docs" / "reproduction.md"
    for needle in ("## Claims", "| claim | paper | ours | holds | figure |", "first positive rank-8",
                   "Table 2: Theorem 2 risks within 0.25%", "RQ2: raw plug-in distance exceeds",
                   "## Runs and wall times", "`asymgeo reproduce all --quick`", "Quick variant"):
        assert needle in text, needle
    for fig in ("rq1_figure3-quick.png", "table2_calibration-quick.png", "rq2_figure4a-quick.png"):
        path = tmp_path / "docs" / "figures" / fig
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"figures/{fig}" in text
    assert not list((tmp_path / "docs").glob("*.tmp"))


def test_report_marks_missing_experiments(tmp_path):
    md = build_report(tmp_path / "empty", tmp_path / "docs")
    text = md.read_text()
    assert "Not run: `asymgeo reproduce rq1`" in text and "(no results yet)" in text


def test_cli_reproduce_resumes_and_reports(quick_results, tmp_path, capsys):
    rc = main(["reproduce", "rq2", "--quick", "--results-dir", str(quick_results), "--config-dir",
               str(CONFIGS), "--no-progress"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "rq2-quick: 0 cells run, 18 already done, 18 total" in out
    assert len(read_results(quick_results, "rq2-quick")) == 18
    rc = main(["reproduce", "report", "--quick", "--results-dir", str(quick_results), "--docs-dir",
               str(tmp_path / "d")])
    assert rc == 0 and (tmp_path / "d" / "reproduction.md").is_file()


def test_cli_unknown_experiment_is_one_line_error(tmp_path, capsys):
    rc = main(["reproduce", "nosuch", "--config-dir", str(CONFIGS), "--results-dir", str(tmp_path)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "nosuch.toml: no such experiment config" in err and "rq1" in err and len(err.strip().splitlines()) == 1


def test_cli_help_has_example(capsys):
    with pytest.raises(SystemExit):
        main(["reproduce", "--help"])
    out = capsys.readouterr().out
    assert "asymgeo reproduce rq1 --quick" in out and "--executor" in out
