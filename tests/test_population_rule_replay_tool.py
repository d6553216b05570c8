"""tools/population_rule_replay.py: the combined rules and the regret, by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("population_rule_replay", ROOT / "tools" / "population_rule_replay.py")
assert _spec is not None and _spec.loader is not None
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)

REC = {"risk_shared": 0.5, "risk_dual": 0.2, "bsure_score": 0.01, "bsure_se": 0.04, "bsure_choice": "dual",
       "cars_choice": "shared", "cvp_choice": "shared"}


def test_bsure_defers_only_within_k_standard_errors_and_the_vote_is_a_majority():
    assert tool.choice(REC, "bsure") == "dual"
    assert tool.choice(REC, "bsure>cars@0.5") == "shared"  # |0.01| < 0.5 * 0.04: CARS decides
    assert tool.choice(REC, "bsure>cars@0.2") == "dual"  # 0.01 >= 0.2 * 0.04 = 0.008: bsure keeps it
    assert tool.choice(REC, "vote3") == "shared"  # two of three say shared
    assert tool.regret(REC, "shared") == 0.3 and tool.regret(REC, "dual") == 0.0


def test_a_damaged_cell_record_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps({"config": {}}))
    assert tool.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"population_rule_replay: {tmp_path / 'a.json'}: not a population cell record")
