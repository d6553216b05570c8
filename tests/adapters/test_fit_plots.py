"""Tests of what ``fit --plot`` draws (asymgeo.adapters.plots.fit_plot_data), and that it draws it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from asymgeo.adapters.plots import fit_plot_data, plot_fit


def _adapter(family, lr, epoch, history):
    return SimpleNamespace(geometry_=family, learning_rate_=lr, best_epoch_=epoch,
                           history_=[{"learning_rate": lr, "epoch": e, "validation_ndcg": v} for e, v in history])


def _cell(n, diff=0.0, half=0.01):
    return {"n": n, "diff": diff, "ci_low": diff - half, "ci_high": diff + half}


def _report(gen=None, rule="tie: shared"):
    shared = _adapter("shared", 1e-3, 2, [(0, 0.60), (1, 0.62), (2, 0.63)])
    dual = _adapter("dual", 1e-3, 0, [(0, 0.66), (1, 0.64), (2, 0.61)])
    metrics = {"frozen": {"validation_ndcg@10": 0.50, "selection_ndcg@10": 0.55, "test_ndcg@10": 0.5},
               "n_selection": 67, "n_validation": 162, "rank": 16, "auto": {"rule": rule, "choice": "shared"}}
    if gen is not None:
        metrics["generalisation"] = gen
    return SimpleNamespace(adapter=shared, candidates={"shared": shared, "dual": dual}, metrics=metrics,
                           dataset="d", encoder="e", n_train=10)


def test_the_kept_checkpoint_is_marked_and_the_title_says_why_it_is_not_the_highest():
    data = fit_plot_data(_report())
    assert data["chosen"] == {"family": "shared", "learning_rate": 1e-3, "epoch": 2, "ndcg": 0.63}
    # dual's epoch 0 (0.66) is higher; each fact once (#38: not "by tie: shared")
    assert data["title"].endswith("; a tie within one standard error kept by the one-SE rule, not the highest point")
    assert data["title"].count("tie") == 1
    assert fit_plot_data(_report(rule="validation"))["title"].endswith(", the best of shared")
    # the frozen line is on the curves' 67 selection queries, not the 162 validation queries
    assert (data["frozen"], data["frozen_queries"]) == (0.55, 67)


def test_bars_drop_empty_and_duplicate_groups_and_small_groups_do_not_set_the_scale(tmp_path):
    frozen = {"all": {"n": 323}, "seen": {"n": 323}, "unseen": {"n": 0}, "unseen_relevant": {"n": 8}}
    trained = {"all": _cell(323, 0.004, 0.006), "seen": _cell(323, 0.004, 0.006), "unseen": {"n": 0},
               "unseen_relevant": _cell(8, 0.05, 0.15)}
    gen = {"rows": {"frozen": frozen, "trained shared": trained}}
    bars = fit_plot_data(_report(gen))["bars"]
    assert bars["subsets"] == ["all", "unseen_relevant"]  # no empty unseen-doc slot, seen-doc is "all"
    assert bars["labels"][0] == "all (= seen-doc)\n(323 q)"
    lo, hi = bars["ylim"]
    assert lo < -0.002 and hi >= 0.05 and hi < 0.2  # the 8-query interval (up to +0.20) does not set it
    assert bars["clipped"] == [("unseen_relevant", "trained shared")]
    png = plot_fit(_report(gen), tmp_path / "fit.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_report_without_the_selection_score_falls_back_to_validation_and_says_so():
    rep = _report()
    del rep.metrics["frozen"]["selection_ndcg@10"]
    data = fit_plot_data(rep)
    assert (data["frozen"], data["frozen_queries"]) == (0.50, 162)


@pytest.mark.parametrize("n_all, n_small, scales", [(323, 40, True), (323, 8, False), (100, 15, False)])
def test_which_groups_set_the_scale(n_all, n_small, scales):
    frozen = {"all": {"n": n_all}, "seen": {"n": n_all - n_small}, "unseen": {"n": n_small},
              "unseen_relevant": {"n": n_small}}
    trained = {k: _cell(v["n"], 0.0, 0.01) for k, v in frozen.items()}
    trained["unseen"] = _cell(n_small, 0.0, 0.3)
    bars = fit_plot_data(_report({"rows": {"frozen": frozen, "t": trained}}))["bars"]
    assert (bars["ylim"][1] > 0.3) == scales
