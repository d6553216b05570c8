"""What `asymgeo fit` prints says each fact once and truly (issue #38, "Messages"): the auto decision,
the queries that chose the checkpoint after the document-disjoint fallback, the test-only note's
evaluate command (runnable as pasted), the given negatives."""

from __future__ import annotations

import argparse
import shlex
from types import SimpleNamespace

import pytest

from asymgeo.adapters.workflow import auto_phrase, selection_phrase
from asymgeo.cli import _print_fit, evaluate_command


def _report(*, auto=None, fallback=False, selection="document_disjoint", n_selection=67, kind="carved", mining=None):
    row = {"validation_ndcg@10": 0.5, "test_ndcg@10": 0.5}
    metrics = {"rank": 16, "n_validation": 324 if fallback else 162, "n_test": 300, "n_selection": n_selection,
               "selection": selection, "selection_fallback": fallback, "frozen": row, "trained": row,
               "closed_form": {**row, "c": 0.5}, "auto": auto, "mining": mining or {}, "warnings": []}
    ad = SimpleNamespace(geometry_="shared", form="augmented", learning_rate_=1e-3, best_epoch_=3, stopped_=[])
    return SimpleNamespace(metrics=metrics, adapter=ad, split={"description": "d", "kind": kind}, dataset="nfcorpus",
                           encoder="all-MiniLM-L6-v2", n_train=40)


def _args(**kw):
    base = dict(dataset="nfcorpus", encoder="all-MiniLM-L6-v2", data_dir=None, cache_dir=None, plot=None)
    return argparse.Namespace(**{**base, **kw})


AUTO = {"choice": "shared", "rule": "tie: shared", "validation_shared": 0.72, "validation_dual": 0.725,
        "diff": 0.005, "standard_error": 0.0117, "n_validation": 67, "cars_score": 1.27e-4,
        "cars_standard_error": 1.3e-5, "cars_choice": "dual"}


@pytest.mark.parametrize("rule, choice, want", [
    ("tie: shared", "shared", "auto: shared, a tie within one standard error kept by the one-SE rule ("),
    ("tie: CARS", "dual", "auto: dual, a tie within one standard error broken by CARS ("),
    ("validation", "dual", "auto: dual, the higher validation NDCG@10 beyond one standard error ("),
])
def test_the_auto_line_names_the_family_once(capsys, rule, choice, want):
    _print_fit(_report(auto={**AUTO, "rule": rule, "choice": choice}), "out", _args())
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("auto:"))
    assert line.startswith(want)
    assert line.split("(")[0].count(choice) == 1 and "by tie" not in line


def test_a_rule_on_the_training_triples_is_named():
    assert auto_phrase({"choice": "dual", "rule": "sure"}) == "dual by sure"


def test_after_the_fallback_the_checkpoint_line_says_all_queries(capsys):
    _print_fit(_report(fallback=True, n_selection=324), "out", _args())
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "the checkpoint was chosen on" in ln)
    assert line.endswith("the checkpoint was chosen on all 324 validation queries (too few document-disjoint ones: "
                         "the fallback of selection document_disjoint))")
    assert "324 document_disjoint" not in out


@pytest.mark.parametrize("metrics, want", [
    ({"n_selection": 67, "n_validation": 162, "selection": "document_disjoint"},
     "67 document-disjoint validation queries (no relevant document is a training positive)"),
    ({"n_selection": 162, "n_validation": 162, "selection": "all"}, "all 162 validation queries"),
    # a record written before n_selection and selection were recorded: the paper's protocol, all of them
    ({"n_validation": 162}, "all 162 validation queries"),
    ({"n_selection": 324, "n_validation": 324, "selection": "document_disjoint", "selection_fallback": True},
     "all 324 validation queries (too few document-disjoint ones: the fallback of selection document_disjoint)"),
    # neither count recorded: no placeholder in the sentence
    ({}, "all validation queries"),
    ({"selection": "document_disjoint"},
     "document-disjoint validation queries (no relevant document is a training positive)"),
    ({"selection": "document_disjoint", "selection_fallback": True},
     "all validation queries (too few document-disjoint ones: the fallback of selection document_disjoint)"),
    ({"n_selection": 100, "n_validation": 162, "selection": "all"}, "100 of the 162 validation queries (all)"),
    ({"n_selection": 100, "selection": "all"}, "100 validation queries (all)"),
])
def test_selection_phrase(metrics, want):
    assert selection_phrase(metrics) == want


def test_the_test_only_note_carries_the_folders_the_fit_was_given(capsys, tmp_path):
    args = _args(data_dir=str(tmp_path / "my data"), cache_dir="emb", encoder="all-mpnet-base-v2")
    _print_fit(_report(kind="carved_from_test"), tmp_path / "ad", args)
    note = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("note: `"))
    cmd = shlex.split(note.split("`")[1])
    assert cmd == ["asymgeo", "evaluate", "nfcorpus", "--encoder", "all-mpnet-base-v2", "--adapter",
                   str(tmp_path / "ad"), "--data-dir", str(tmp_path / "my data"), "--cache-dir", "emb"]
    assert evaluate_command(_args(), "ad") == "asymgeo evaluate nfcorpus --encoder all-MiniLM-L6-v2 --adapter ad"


def test_given_negatives_are_reported(capsys):
    _print_fit(_report(mining={"index": "exact", "given": {"queries": 10, "negatives": 20, "k": 8}}), "o", _args())
    assert ("negatives: 20 given negatives of 10 of the 40 training queries come first among their 8 hard "
            "negatives") in capsys.readouterr().out


@pytest.mark.parametrize("choice, want", [
    ("shared (document_disjoint)", "the checkpoint was chosen on 67 document-disjoint validation queries (no relevant "
                                   "document is a training positive)"),
    ("query (all)", "the checkpoint was chosen on all 162 validation queries (the query-only map the deployment "
                    "chose)"),
    ("query (blend 0.25)", "the map blends two query-only checkpoints (weight 0.25 on the second), one chosen on 67 "
                           "document-disjoint validation queries (no relevant document is a training positive), one "
                           "on all 162 validation queries"),
])
def test_under_the_joint_deployment_the_checkpoint_line_names_the_queries_that_chose_the_deployed_map(choice, want):
    """fit's default deploys one of six maps; 'the checkpoint was chosen on 67 ... queries' was false for the
    query-only map chosen on all 162 and for the blends (issue #38: each message true)."""
    from asymgeo.adapters.export import checkpoint_phrase

    rep = _report()
    rep.metrics["joint"] = {"choice": choice}
    assert checkpoint_phrase(rep.metrics) == want


def test_fit_prints_a_blend_without_its_copied_epoch_and_a_map_whose_memory_was_not_kept(capsys):
    rep = _report()
    rep.metrics["joint"] = {"choice": "query (blend 0.5)", "rule": "highest validation NDCG@10 among the guarded "
                            "candidates", "n_protected": 67, "candidates": {"query (blend 0.5)": {
                                "validation_ndcg@10": 0.7, "feasible": True}}}
    rep.metrics["memory"] = {"kept": False, "n_protected": 67}
    rep.adapter.geometry_ = "query"
    _print_fit(rep, "out", _args())
    out = capsys.readouterr().out.splitlines()
    assert next(ln for ln in out if ln.startswith("deployed: ")).startswith(
        "deployed: query (blend 0.5) (the map alone: its memory was not kept), by highest")
    assert "nfcorpus / all-MiniLM-L6-v2: query adapter, augmented, rank 16, n = 40 (a blend of two query-only " \
           "checkpoints)" in out
    assert any(ln.endswith("; the map blends two query-only checkpoints (weight 0.5 on the second), one chosen on 67 "
                           "document-disjoint validation queries (no relevant document is a training positive), one "
                           "on all 162 validation queries)") for ln in out)


@pytest.mark.parametrize("rule, want", [
    ("validation", "dual, the higher validation NDCG@10 beyond one standard error"),
    ("tie: shared", "dual, a tie within one standard error kept by the one-SE rule"),
    ("tie: CARS", "dual, a tie within one standard error broken by CARS"),
])
def test_auto_phrase_words_each_outcome_of_the_validation_rule(rule, want):
    assert auto_phrase({"choice": "dual", "rule": rule}) == want


def test_auto_phrase_without_a_rule_names_the_choice_alone():
    assert auto_phrase({"choice": "shared"}) == "shared by "
