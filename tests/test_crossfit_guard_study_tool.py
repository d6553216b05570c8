"""tools/crossfit_guard_study.py: the cross-fitted deployment guard replayed in docs/adapters.md (issue 36)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


cf = _load("crossfit_guard_study")
mg = _load("memory_guard_study")


def test_blocks_put_the_validation_queries_first_and_partition_the_training_queries():
    train = [f"t{i:03d}" for i in range(23)]
    val = ["v2", "v0", "v1"]
    parts = cf.blocks(train, val, folds=5, seed=7)
    assert parts[0] == val and len(parts) == 5
    rest = [q for p in parts[1:] for q in p]
    assert sorted(rest) == sorted(train) and len(rest) == len(set(rest))  # disjoint, covering
    assert sorted(len(p) for p in parts[1:]) == [5, 6, 6, 6]  # balanced: 23 = 6 + 6 + 6 + 5
    assert cf.blocks(list(reversed(train)), val, folds=5, seed=7) == parts  # input order does not matter


def _block(frozen, protected, cands, test=None):
    b = {"frozen_val": frozen, "protected": protected, "candidates": {n: {"val_values": v} for n, v in cands.items()}}
    if test is not None:
        b["frozen_test"], b["unseen_rows"] = test["frozen"], test["unseen"]
        for n, t in test["values"].items():
            b["candidates"][n]["test_values"] = t
    return b


def _record():
    # block 0: "bold" gains +0.1 on its 3 protected queries (se 0) -> passes alone; "safe" gains +0.01
    # block 1: "bold" loses 0.3 on each of 3 protected queries -> pooled mean -0.1 fails; "safe" +0.01
    test = {"frozen": [0.5, 0.5], "unseen": [1],
            "values": {"bold": [0.9, 0.3], "safe": [0.6, 0.55]}}
    b0 = _block([0.5] * 4, [True, True, True, False],
                {"bold": [0.6, 0.6, 0.6, 1.0], "safe": [0.51, 0.51, 0.51, 0.6]}, test)
    b1 = _block([0.5] * 3, [True, True, True], {"bold": [0.2, 0.2, 0.2], "safe": [0.51, 0.51, 0.51]})
    return {"dataset": "d", "encoder": "e", "seed": 0, "blocks": [b0, b1]}


def test_the_pooled_guard_turns_away_a_candidate_that_block_0_alone_lets_through():
    rec = _record()
    assert cf.replay(rec, 0.5, "deployed", blocks_used=1) == "bold"  # the shipped default: block 0 only
    np.testing.assert_allclose(cf.pooled_protected(rec, "bold"), [0.1, 0.1, 0.1, -0.3, -0.3, -0.3], atol=1e-12)
    assert cf.replay(rec, 0.0, "deployed") == "safe"  # pooled mean -0.1 < 0
    assert cf.replay(rec, 0.0, "pooled") == "safe"


def test_block_0_alone_is_the_memory_guard_studys_default_rule():
    rec = _record()
    b0 = rec["blocks"][0]
    single = {"frozen_val": b0["frozen_val"], "variants": {"train_keys": {
        "protected": b0["protected"], "candidates": {n: {"val_values": c["val_values"]}
                                                     for n, c in b0["candidates"].items()}}}}
    for margin in (0.0, 0.5, 2.0):
        assert cf.replay(rec, margin, "deployed", blocks_used=1) == mg.replay(single, "train_keys", "max", margin)


def test_pooled_selection_ranks_by_every_blocks_validation_queries():
    rec = _record()
    # both pass at margin 0 once bold's block-1 losses become gains; block 0 prefers bold (mean 0.7 against
    # 0.5325), the pooled validation queries prefer safe (block 1: 1.0 against 0.51)
    rec["blocks"][1]["candidates"]["bold"]["val_values"] = [0.51, 0.51, 0.51]
    rec["blocks"][1]["candidates"]["safe"]["val_values"] = [1.0, 1.0, 1.0]
    assert cf.replay(rec, 0.0, "deployed") == "bold"
    # pooled means: bold (0.6 * 3 + 1.0 + 0.51 * 3) / 7 = 0.61857; safe (0.51 * 3 + 0.6 + 3.0) / 7 = 0.73286
    assert cf.replay(rec, 0.0, "pooled") == "safe"


def test_when_nothing_passes_the_largest_pooled_gain_is_kept():
    rec = _record()
    rec["blocks"][1]["candidates"]["safe"]["val_values"] = [0.0, 0.0, 0.0]  # pooled -0.245: worse than bold's -0.1
    assert cf.replay(rec, 0.0, "deployed") == "bold"


def test_summary_prints_the_test_gain_of_the_chosen_candidate(tmp_path, capsys):
    path = tmp_path / "cf.jsonl"
    path.write_text(json.dumps(_record()) + "\n")
    cf.summary(str(path))
    out = capsys.readouterr().out.splitlines()
    # default: bold, test gains +0.4 / -0.2 -> all +0.10, unseen (row 1) -0.20
    assert any(ln.startswith("default (block 0 only)") and "all +0.1000, unseen-doc -0.2000" in ln for ln in out)
    # cross-fitted at 0.5 SE: safe, +0.1 / +0.05 -> all +0.075, unseen +0.05
    assert any(ln.startswith("cross-fitted 0.5 SE, select deployed") and "all +0.0750, unseen-doc +0.0500" in ln
               and ln.endswith("chosen: safe") for ln in out)
    assert out[-1] == "protected queries per block (d e): [3, 3], pooled 6"


def test_a_damaged_study_file_is_named_in_one_line(tmp_path):
    path = tmp_path / "cf.jsonl"
    path.write_text('{"dataset": "d"}\n')
    with pytest.raises(ValueError, match=rf"^{path}:1: not a study record"):
        cf.read_records(str(path))


def test_a_record_missing_a_blocks_field_is_named_by_file_and_record(tmp_path):
    rec = _record()
    del rec["blocks"][0]["frozen_test"]
    path = tmp_path / "cf.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    with pytest.raises(ValueError, match=rf"^{path}: record 1: not a complete study record \(KeyError: 'frozen_test'\)"):
        cf.summary(str(path))
