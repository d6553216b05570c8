"""Report generation on a quick run, and the `asymgeo reproduce` command."""

from __future__ import annotations

import pytest

from asymgeo.cli import main
from asymgeo.experiments.report import build_report, reproduce
from asymgeo.experiments.runner import packaged_config_dir, read_results

CONFIGS = packaged_config_dir()


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


def _verdicts(text: str) -> dict[str, str]:
    """``claim -> holds`` cells of the report's claims table."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[3] in ("**yes**", "**no**", "**inconclusive**", "n/a"):
            out[cells[0]] = cells[3]
    return out


def test_report_verdicts_against_an_independent_computation(quick_results, tmp_path):
    import numpy as np
    from scipy import stats

    text = build_report(quick_results, tmp_path / "docs", quick=True).read_text()
    v = _verdicts(text)
    df = read_results(quick_results, "rq2-quick")
    above = True
    for _, g in df.groupby(["angle", "n"]):
        lo, _hi = stats.t.interval(0.95, len(g) - 1, loc=g["raw"].mean(), scale=stats.sem(g["raw"]))
        above &= bool(lo > g["population"].iloc[0])
    assert v["RQ2: raw plug-in distance exceeds the population value"] == ("**yes**" if above else "**no**")
    covers = True
    for _, g in df.groupby(["angle", "n"]):
        lo, hi = stats.t.interval(0.95, len(g) - 1, loc=g["corrected"].mean(), scale=stats.sem(g["corrected"]))
        covers &= bool(lo <= g["population"].iloc[0] <= hi)
    key = "RQ2: the corrected estimate tracks the population distance (its 95% interval covers it)"
    assert v[key] == ("**yes**" if covers else "**no**")
    rq1 = read_results(quick_results, "rq1-quick")
    sub = rq1[rq1["rank"] == 8].groupby(["angle", "n"])["ndcg_diff"].mean()
    both = bool((sub > 0).any() and (sub < 0).any())
    assert v["RQ1: the zero contour splits the grid (neither geometry dominates)"] == ("**yes**" if both else "**no**")
    assert np.isfinite(sub).all()


@pytest.mark.slow
def test_report_says_no_when_the_results_contradict_the_paper(quick_results, tmp_path):
    import shutil

    bad = tmp_path / "results"
    shutil.copytree(quick_results, bad)
    for name, change in (("rq2-quick", lambda d: d.assign(raw=d["population"] - 1.0)),
                         ("rq1-quick", lambda d: d.assign(ndcg_diff=d["ndcg_diff"].abs() + 0.01))):
        df = change(read_results(bad, name))
        for f in (bad / name).glob("results.*"):
            f.unlink()
        df.to_csv(bad / name / "results.csv", index=False)
    v = _verdicts(build_report(bad, tmp_path / "docs", quick=True).read_text())
    assert v["RQ2: raw plug-in distance exceeds the population value"] == "**no**"
    assert v["RQ1: the zero contour splits the grid (neither geometry dominates)"] == "**no**"
