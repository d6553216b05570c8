"""The ``asymgeo`` command line: help, version, ``demo`` and error reporting."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from asymgeo import __version__
from asymgeo.cli import build_parser, main

SMALL = ["--n", "16", "32", "--n-test", "60", "--rank", "4", "--seed", "3"]


def _run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"asymgeo {__version__}"


def test_top_level_help_has_example(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "usage: asymgeo" in out and "example:" in out and "demo" in out


def _subcommands():
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return sorted(action.choices)
    return []


def test_demo_is_registered():
    assert "demo" in _subcommands()


@pytest.mark.parametrize("command", _subcommands())
def test_every_subcommand_help_has_an_example(capsys, command):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "example:" in out
    example = out.split("example:", 1)[1].strip().splitlines()[0].strip()
    assert example.startswith(f"asymgeo {command}")


def test_demo_help_lists_options(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    out = capsys.readouterr().out
    for opt in ("--angle", "--rank", "--n", "--seed", "--json"):
        assert opt in out


def test_no_command_prints_help_and_fails(capsys):
    code, out, _ = _run(capsys, [])
    assert code == 2 and "usage:" in out


def test_demo_json_in_process(capsys):
    code, out, err = _run(capsys, ["demo", *SMALL, "--angle", "0.8", "--json"])
    assert code == 0, err
    res = json.loads(out)
    cfg = res["config"]
    assert cfg["angle"] == 0.8 and cfg["rank"] == 4 and cfg["sizes"] == [16, 32]
    assert cfg["seed"] == 3 and cfg["n_test"] == 60
    assert [r["n"] for r in res["rows"]] == [16, 32]
    for r in res["rows"]:
        assert r["cars_choice"] in ("shared", "dual")
        assert r["cars_choice"] == ("dual" if r["cars_score"] > 0 else "shared")
        assert 0.0 <= r["ndcg10_shared"] <= 1.0 and 0.0 <= r["ndcg10_dual"] <= 1.0
        assert r["ndcg10_dual_minus_shared"] == pytest.approx(r["ndcg10_dual"] - r["ndcg10_shared"])
        assert r["train_gap"] >= 0
    assert res["population"]["gap"] >= 0
    # Same seed: identical numbers (apart from timing).
    code, out2, _ = _run(capsys, ["demo", *SMALL, "--angle", "0.8", "--json"])
    res2 = json.loads(out2)
    res.pop("seconds"), res2.pop("seconds")
    assert res == res2


def test_demo_table_output(capsys):
    code, out, err = _run(capsys, ["demo", *SMALL])
    assert code == 0, err
    assert "NDCG" in out and "CARS agreed" in out
    assert not out.lstrip().startswith("{")


def test_demo_subprocess_json():
    exe = os.path.join(os.path.dirname(sys.executable), "asymgeo")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "asymgeo"]
    proc = subprocess.run(cmd + ["demo", "--n", "32", "64", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert [r["n"] for r in res["rows"]] == [32, 64]
    assert res["config"]["seed"] == 20260809 and res["config"]["rank"] == 8


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["demo", "--rank", "0", "--n", "16", "--n-test", "20"], "rank"),
        (["demo", "--rank", "33", "--n", "16", "--n-test", "20"], "rank"),
        (["demo", "--n", "2"], "n"),
        (["demo", "--n", "16", "--angle", "nan"], "angle"),
        (["demo", "--n", "16", "--angle", "inf"], "angle"),
        (["demo", "--n", "16", "--n-test", "0"], "n_queries"),
        (["demo", "--n", "16", "--seed", "-1"], "seed"),
    ],
)
def test_bad_input_one_line_exit_2(capsys, argv, needle):
    code, out, err = _run(capsys, argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("asymgeo demo: error:")
    assert needle in lines[0]
    assert "Traceback" not in err and out == ""


def test_bad_seed_message_names_argument(capsys):
    code, _, err = _run(capsys, ["demo", "--n", "16", "--seed", "-1"])
    assert code == 2 and "seed" in err


def test_bad_input_subprocess_has_no_traceback():
    exe = os.path.join(os.path.dirname(sys.executable), "asymgeo")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "asymgeo"]
    proc = subprocess.run(cmd + ["demo", "--rank", "0", "--n", "16", "--n-test", "20"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr and "rank" in proc.stderr


def test_argparse_type_errors_exit_2_without_traceback(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--rank", "abc"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--rank" in err
