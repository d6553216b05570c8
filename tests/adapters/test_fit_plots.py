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


# ---------------------------------------------------------------- under the joint deployment (fit's default)
def _joint_report(choice, memory=True):
    """fit's default since the joint deployment: shared and dual trained on the 67 selection queries, the
    query-only map chosen on the same queries ('query (document_disjoint)'), one chosen on all 162
    ('query (all)', its history on other queries), and blends that copy the first one's lr and epoch."""
    rep = _report()
    q_sel = _adapter("query", 3e-4, 1, [(0, 0.55), (1, 0.65), (2, 0.62)])
    q_all = _adapter("query", 3e-4, 2, [(0, 0.50), (1, 0.70), (2, 0.90)])  # 162 queries: must not be drawn
    blend = _adapter("query", 3e-4, 1, [(0, 0.55), (1, 0.65), (2, 0.62)])  # _blend_query_maps copies q_sel's
    rep.joint = {"shared (document_disjoint)": rep.candidates["shared"], "query (document_disjoint)": q_sel,
                 "query (all)": q_all, "query (blend 0.5)": blend}
    rep.adapter = rep.joint[choice]
    rep.adapter.memory_ = object() if memory else None
    rep.metrics.update(selection="document_disjoint", joint={"choice": choice})
    return rep


def test_joint_the_query_only_curve_on_the_selection_queries_is_drawn_and_its_checkpoint_starred():
    data = fit_plot_data(_joint_report("query (document_disjoint)"))
    drawn = {c["family"]: c["ndcg"] for c in data["curves"]}
    assert drawn == {"shared": [0.60, 0.62, 0.63], "dual": [0.66, 0.64, 0.61], "query": [0.55, 0.65, 0.62]}
    assert data["chosen"] == {"family": "query", "learning_rate": 3e-4, "epoch": 1, "ndcg": 0.65}
    # dual's epoch 0 (0.66) is above the star (0.65): the title must not call it the highest point
    assert data["title"] == ("star: the deployed map + memory (query, lr 0.0003, epoch 1), chosen with its memory on "
                             "all 162 validation queries; not the highest point (the curves score the map alone on "
                             "the selection queries)")
    assert "highest point" in fit_plot_data(_joint_report("shared (document_disjoint)"))["title"]


@pytest.mark.parametrize("choice, why", [
    ("query (blend 0.5)", "a blend of the query-only maps chosen on the selection queries and on all validation "
                          "queries"),
    ("query (all)", "its checkpoint chosen on all 162 validation queries, not these"),
])
def test_joint_a_blend_or_a_map_chosen_on_other_queries_is_no_star(choice, why):
    """A blend copies the selection map's lr and epoch: matching on them would star the wrong map."""
    data = fit_plot_data(_joint_report(choice, memory=False))
    assert data["chosen"] is None
    assert data["title"] == f"deployed: {choice} ({why}; not a point on these curves), chosen with its memory on " \
                            "all 162 validation queries"
    assert max(v for c in data["curves"] for v in c["ndcg"]) == 0.66  # q_all's 0.90 (other queries) not drawn


def test_joint_plot_draws(tmp_path):
    png = plot_fit(_joint_report("query (blend 0.5)"), tmp_path / "fit.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
