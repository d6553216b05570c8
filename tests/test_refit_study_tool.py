"""tools/refit_study.py: which maps a refit retrains, and the summary behind docs/adapters.md's refit row."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("refit_study", ROOT / "tools" / "refit_study.py")
assert _spec is not None and _spec.loader is not None
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)

MAPS = dict.fromkeys(["dual (document_disjoint)", "query (document_disjoint)", "query (all)",
                      "query (blend 0.25)", "query (blend 0.5)", "query (blend 0.75)"])


def test_a_plain_query_map_is_refitted_alone():
    assert tool.refit_plan("query (document_disjoint)", MAPS) == (["query (document_disjoint)"], None)
    assert tool.refit_plan("query (all)", MAPS) == (["query (all)"], None)


def test_a_blend_is_refitted_from_its_two_ends_with_its_weight():
    assert tool.refit_plan("query (blend 0.75)", MAPS) == (["query (document_disjoint)", "query (all)"], 0.75)


def test_a_shared_or_dual_choice_is_not_refitted_and_an_unknown_one_is_refused():
    assert tool.refit_plan("dual (document_disjoint)", MAPS) is None
    with pytest.raises(ValueError, match="'query \\(blend 0.1\\)' is not one of the joint candidates"):
        tool.refit_plan("query (blend 0.1)", MAPS)


def test_the_summary_averages_seeds_and_counts_an_unrefitted_seed_at_the_default():
    # frozen 0.5 on four test queries; queries 2 and 3 are unseen-document ones
    base = {"dataset": "d", "encoder": "e", "frozen_test": [0.5] * 4, "unseen_rows": [2, 3]}
    recs = [{**base, "seed": 0, "deployed_test": [1.0, 1.0, 0.5, 0.7], "refitted": True,
             "refit_test": [1.0, 1.0, 0.4, 0.5]},
            {**base, "seed": 1, "deployed_test": [0.9, 0.5, 0.6, 0.5], "refitted": False}]
    (row,) = tool.summarise(recs)
    # by hand: seed 0 gains [0.5, 0.5, 0, 0.2] (mean 0.3, unseen 0.1), refitted [0.5, 0.5, -0.1, 0]
    # (mean 0.225, unseen -0.05); seed 1 gains [0.4, 0, 0.1, 0] (mean 0.125, unseen 0.05), counted
    # with its default values in the refit column too
    assert row["seeds"] == 2
    assert row["default_all"] == pytest.approx((0.3 + 0.125) / 2)
    assert row["default_unseen"] == pytest.approx(0.075)
    assert row["refit_all"] == pytest.approx((0.225 + 0.125) / 2)
    assert row["refit_unseen"] == pytest.approx(0.0)


def test_values_of_different_lengths_are_refused_by_encoder_and_seed():
    rec = {"dataset": "d", "encoder": "e", "seed": 3, "frozen_test": [0.5] * 3, "unseen_rows": [],
           "deployed_test": [0.5] * 4, "refitted": False}
    with pytest.raises(ValueError, match="e seed 3: per-query values of different lengths"):
        tool.summarise([rec])


def test_a_bad_study_file_is_named_with_its_line(tmp_path, capsys):
    good = {"dataset": "d", "encoder": "e", "seed": 0, "frozen_test": [0.5], "deployed_test": [0.6], "unseen_rows": []}
    f = tmp_path / "s.jsonl"
    f.write_text(json.dumps(good) + "\n{not json\n")
    assert tool._main(["--summary", str(f)]) == 2
    assert capsys.readouterr().err.strip() == (f"refit_study: {f}:2: not a JSON record (Expecting property name "
                                               "enclosed in double quotes, column 2)")
    f.write_text(json.dumps({k: v for k, v in good.items() if k != "deployed_test"}) + "\n")
    assert tool._main(["--summary", str(f)]) == 2
    assert "s.jsonl:1: not a refit study record (missing deployed_test)" in capsys.readouterr().err
    assert tool._main(["--summary", str(tmp_path / "none.jsonl")]) == 2
    assert "none.jsonl: cannot read the study file" in capsys.readouterr().err
    f.write_text(json.dumps(good) + "\n")
    assert tool._main(["--summary", str(f)]) == 0
    assert "d e (1 seeds): default +0.1000 / +nan" in capsys.readouterr().out


def test_an_unknown_dataset_is_one_line_and_keeps_the_records_already_written(tmp_path, capsys):
    out = tmp_path / "refit.jsonl"
    out.write_text('{"kept": 1}\n')
    assert tool._main(["no-such-dataset", "all-MiniLM-L6-v2", "--seeds", "0", "--out", str(out),
                       "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("refit_study: dataset 'no-such-dataset': no folder") and "\n" not in err
    assert out.read_text() == '{"kept": 1}\n'
    fresh = tmp_path / "new.jsonl"
    assert tool._main(["no-such-dataset", "all-MiniLM-L6-v2", "--out", str(fresh), "--data-dir", str(tmp_path)]) == 2
    assert not fresh.exists()  # nothing computed, nothing written
