"""tools/memory_guard_study.py: the offline replay behind docs/adapters.md's deployment-guard figures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("memory_guard_study", ROOT / "tools" / "memory_guard_study.py")
assert _spec is not None and _spec.loader is not None
study = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(study)


def _record() -> dict:
    # four validation queries, the first three protected; frozen scores 0.5 everywhere
    # "bold": best validation mean (0.75) but protected gains 0.3, -0.1, -0.1 -> mean +1/30, se 0.1333
    # "safe": protected gains 0.05 each (se 0), validation mean 0.5375
    # "bad":  protected loss -0.2 on each, validation mean 0.475
    frozen = [0.5, 0.5, 0.5, 0.5]
    return {"frozen_val": frozen, "variants": {"train_keys": {
        "protected": [True, True, True, False],
        "candidates": {"bold": {"val_values": [0.8, 0.4, 0.4, 1.0]},
                       "safe": {"val_values": [0.55, 0.55, 0.55, 0.5]},
                       "bad": {"val_values": [0.3, 0.3, 0.3, 1.0]}}}}}


def test_the_shipped_guard_takes_the_best_mean_that_loses_nothing_on_average():
    assert study.replay(_record(), "train_keys", "max") == "bold"  # +1/30 >= 0 and the highest mean


def test_a_margin_in_standard_errors_turns_the_noisy_candidate_away():
    d = np.array([0.3, -0.1, -0.1])
    se = d.std(ddof=1) / np.sqrt(3)  # hand: sd 0.2309, se 0.1333; mean 0.0333 = 0.25 se
    assert abs(d.mean() / se - 0.25) < 1e-9
    assert study.replay(_record(), "train_keys", "max", margin=0.2) == "bold"
    assert study.replay(_record(), "train_keys", "max", margin=0.3) == "safe"


def test_when_no_candidate_passes_the_least_harmful_is_kept():
    rec = _record()
    del rec["variants"]["train_keys"]["candidates"]["safe"]
    # margin 0.3: bold (0.25 se) fails, bad fails; bold loses less on the protected queries
    assert study.replay(rec, "train_keys", "max", margin=0.3) == "bold"
    rec["variants"]["train_keys"]["candidates"]["bold"]["val_values"] = [0.2, 0.2, 0.2, 1.0]  # mean 0.4
    rec["variants"]["train_keys"]["candidates"]["bad"]["val_values"] = [0.3, 0.3, 0.3, 0.0]  # mean 0.225
    # neither passes; "bad" loses less on the protected queries (-0.2 against -0.3) though its mean is lower
    assert study.replay(rec, "train_keys", "max", margin=0.0) == "bad"


def test_a_candidate_that_loses_exactly_nothing_passes_the_shipped_guard():
    rec = _record()
    # protected values equal to frozen (gain exactly 0) and the best validation mean of all
    rec["variants"]["train_keys"]["candidates"]["even"] = {"val_values": [0.5, 0.5, 0.5, 1.0]}
    rec["variants"]["train_keys"]["candidates"]["bold"]["val_values"] = [0.8, 0.4, 0.4, 0.5]  # mean 0.525
    assert study.replay(rec, "train_keys", "max") == "even"  # 0 >= 0: feasible, mean 0.625


def test_a_damaged_or_missing_study_file_is_named_in_one_line(tmp_path):
    import json
    import subprocess
    import sys

    import pytest

    good = {"dataset": "d", "encoder": "e", "frozen_val": [], "frozen_test": [], "unseen_rows": [], "variants": {}}
    path = tmp_path / "study.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + json.dumps(good)[:20] + "\n")
    with pytest.raises(ValueError, match=rf"^{path}:3: not a JSON record"):
        study.read_records(str(path))
    path.write_text(json.dumps({"dataset": "d"}) + "\n")
    with pytest.raises(ValueError, match=rf"^{path}:1: not a study record \(missing encoder, frozen_val"):
        study.read_records(str(path))
    path.write_text("\n")
    with pytest.raises(ValueError, match=rf"^{path}: no study records$"):
        study.read_records(str(path))
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "memory_guard_study.py"), "--summary",
                          str(tmp_path / "missing.jsonl")], capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == f"memory_guard_study: {tmp_path / 'missing.jsonl'}: cannot read the study file " \
                         "(No such file or directory)\n"


def _deep_record() -> dict:
    # the guard read at depth disagrees with NDCG@10: "bold" loses on average at depth on the
    # protected queries (-0.1 each), "safe" gains (+0.02 each); NDCG@10 as in _record()
    rec = _record()
    rec.update({"dataset": "d", "encoder": "e", "frozen_test": [0.5, 0.5], "unseen_rows": [1]})
    rec["frozen_val_deep"] = {"ndcg@100": [0.6, 0.6, 0.6, 0.6]}
    cands = rec["variants"]["train_keys"]["candidates"]
    cands["bold"]["val_deep"] = {"ndcg@100": [0.5, 0.5, 0.5, 1.0]}
    cands["safe"]["val_deep"] = {"ndcg@100": [0.62, 0.62, 0.62, 0.6]}
    cands["bad"]["val_deep"] = {"ndcg@100": [0.3, 0.3, 0.3, 1.0]}
    cands["bold"]["test_values"], cands["safe"]["test_values"], cands["bad"]["test_values"] = (
        [0.9, 0.4], [0.6, 0.55], [0.5, 0.5])
    return rec


def test_the_guard_read_at_depth_decides_on_that_metric_and_selects_on_ndcg10():
    rec = _deep_record()
    assert study.replay_deep(rec, "ndcg@10", 0.0) == study.replay(rec, "train_keys", "max") == "bold"
    assert study.replay_deep(rec, "ndcg@100", 0.0) == "safe"  # bold's protected gain at depth is -0.1
    # with every candidate passing at depth, the choice is the highest validation NDCG@10
    rec["variants"]["train_keys"]["candidates"]["bold"]["val_deep"]["ndcg@100"] = [0.7, 0.7, 0.7, 0.0]
    assert study.replay_deep(rec, "ndcg@100", 0.0) == "bold"


def test_deep_summary_reports_the_chosen_candidates_test_gain(tmp_path, capsys, monkeypatch):
    import json

    import pytest

    monkeypatch.setattr(study, "DEEP_METRICS", ("ndcg@100",))
    monkeypatch.setattr(study, "DEEP_MARGINS", (0.0,))
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(_deep_record()) + "\n")
    study.deep_summary(str(path))
    out = capsys.readouterr().out.splitlines()
    # NDCG@10 guard: bold, test gains +0.4 / -0.1 -> all +0.15, unseen (row 1) -0.10
    assert "guard on ndcg@10   0 SE, d e: all +0.1500, unseen-doc -0.1000 over 1 seeds; chosen: bold" in out
    # guard at depth: safe, +0.1 / +0.05 -> all +0.075, unseen +0.05
    assert "guard on ndcg@100  0 SE, d e: all +0.0750, unseen-doc +0.0500 over 1 seeds; chosen: safe" in out
    old = _deep_record()
    del old["frozen_val_deep"]
    path.write_text(json.dumps(old) + "\n")
    with pytest.raises(ValueError, match="no record carries the validation figures at depth"):
        study.deep_summary(str(path))


def test_deep_values_are_the_brute_force_metrics_of_a_full_ranking():
    from asymgeo.retrieval.metrics import RelevanceTable

    rng = np.random.default_rng(3)
    corpus = rng.normal(size=(40, 5))
    queries = rng.normal(size=(3, 5))
    rel = {"q0": {"d3": 1}, "q1": {"d7": 1, "d11": 1}, "q2": {"d39": 1}}
    ids = [f"d{i}" for i in range(40)]
    table = RelevanceTable(rel, ["q0", "q1", "q2"], ids)
    got = study._deep_values(queries, table, corpus, None, ids)
    order = np.argsort(-(queries @ corpus.T), axis=1, kind="stable")
    for i, q in enumerate(["q0", "q1", "q2"]):
        ranks = sorted(int(np.where(order[i] == int(d[1:]))[0][0]) + 1 for d in rel[q])
        dcg = sum(1 / np.log2(r + 1) for r in ranks)
        idcg = sum(1 / np.log2(r + 1) for r in range(1, len(ranks) + 1))
        assert abs(got["ndcg@1000"][i] - dcg / idcg) < 1e-12
        assert abs(got["ndcg@100"][i] - dcg / idcg) < 1e-12  # 40 documents: every rank is within 100
        assert abs(got["mrr@1000"][i] - 1 / ranks[0]) < 1e-12
