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
        (["demo", "--n", "16", "--n-test", "0"], "n_test: expected an integer >= 2"),
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


# --------------------------------------------------------------------------- bad inputs, every subcommand
import hashlib  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from asymgeo.data import EncoderSpec, encode_dataset, write_embeddings  # noqa: E402

_TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(_TESTS / "data"))
from beir_fixtures import doc, query, write_beir  # noqa: E402

N_DOCS, N_QUERIES, DIM = 40, 12, 8


def _unit_rows(n, seed):
    V = np.random.default_rng(seed).standard_normal((n, DIM))
    return V / np.linalg.norm(V, axis=1, keepdims=True)


@pytest.fixture
def small(tmp_path):
    """A clean 40-document dataset with a legacy-style cache (no fingerprint) under cache/."""
    docs = [doc(f"d{i}", "", f"text {i}") for i in range(N_DOCS)]
    qs = [query(f"q{i}", f"ask {i}") for i in range(N_QUERIES)]
    rows = [(f"q{i}", f"d{i}", 1) for i in range(N_QUERIES)] + [("q0", "d20", 2)]
    qrels = {"test": rows, "dev": rows}
    root = write_beir(tmp_path / "data" / "small", docs, qs, qrels)
    cache = tmp_path / "cache"
    write_embeddings(cache / "small" / "all-MiniLM-L6-v2", _unit_rows(N_DOCS, 1), [f"d{i}" for i in range(N_DOCS)],
                     _unit_rows(N_QUERIES, 2), [f"q{i}" for i in range(N_QUERIES)], {"normalised": True})
    return root, cache


def _cache_file(cache, name):
    return cache / "small" / "all-MiniLM-L6-v2" / name


def _set_row(cache, name, row, value):
    f = _cache_file(cache, name)
    A = np.load(f)
    A[row] = value
    np.save(f, A)


def _common(root, cache):
    return ["--data-dir", str(root.parent), "--cache-dir", str(cache)]


# (name, argv builder, setup(root, cache, tmp_path), needle in the error line)
BAD_INPUTS = [
    ("demo memory", lambda r, c: ["demo", "--n", "100000000"], None, "GiB of memory"),
    ("select one split", lambda r, c: ["select", "small", "--rank", "2", "--split", "dev", "--n-splits", "1",
                                       *_common(r, c)], None, "--n-splits"),
    ("select absurd splits", lambda r, c: ["select", "small", "--rank", "2", "--split", "dev", "--n-splits", "5000000",
                                           *_common(r, c)], None, "--n-splits"),
    ("reproduce workers 0", lambda r, c: ["reproduce", "rq1", "--quick", "--workers", "0",
                                          "--results-dir", str(c / "res")], None, "--workers"),
    ("evaluate cache dir is a file", lambda r, c: ["evaluate", "small", "--data-dir", str(r.parent), "--cache-dir",
                                                   str(r / "corpus.jsonl")], None, "expected a folder"),
    ("evaluate empty corpus.npy", lambda r, c: ["evaluate", "small", *_common(r, c)],
     lambda r, c: _cache_file(c, "corpus.npy").write_bytes(b""), "not a readable .npy"),
    ("evaluate zero queries", lambda r, c: ["evaluate", "small", *_common(r, c)],
     lambda r, c: _set_row(c, "queries.npy", slice(None), 0.0), "all-zero vector"),
    ("evaluate norm 1000", lambda r, c: ["evaluate", "small", *_common(r, c)],
     lambda r, c: _set_row(c, "corpus.npy", 7, 1000.0 / np.sqrt(DIM)), "row 7 (id 'd7'): norm far from 1"),
    ("select norm 1000", lambda r, c: ["select", "small", "--rank", "2", "--split", "dev", *_common(r, c)],
     lambda r, c: _set_row(c, "corpus.npy", 7, 1000.0 / np.sqrt(DIM)), "row 7 (id 'd7')"),
    ("evaluate reduced dataset", lambda r, c: ["evaluate", "small", *_common(r, c)],
     lambda r, c: (r / "corpus.jsonl").write_text("".join((r / "corpus.jsonl").read_text().splitlines(True)[:30])),
     "30 documents; the cache is stale"),
    ("evaluate swapped ids", lambda r, c: ["evaluate", "small", *_common(r, c)],
     lambda r, c: _cache_file(c, "corpus_ids.txt").write_text(
         "d1\nd0\n" + "".join(f"d{i}\n" for i in range(2, N_DOCS))), "line 1: id 'd1'"),
    ("evaluate negative grades", lambda r, c: ["evaluate", "small", "--json", *_common(r, c)],
     lambda r, c: (r / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t-1\nq2\td2\t-3\n"),
     "relevant document"),
    ("evaluate no such split", lambda r, c: ["evaluate", "small", "--split", "nosuch", *_common(r, c)], None, "nosuch"),
    ("evaluate no such dataset", lambda r, c: ["evaluate", "nosuch", *_common(r, c)], None, "dataset 'nosuch'"),
    ("evaluate no cache", lambda r, c: ["evaluate", "small", "--data-dir", str(r.parent),
                                        "--cache-dir", str(c / "none")], None, "no embedding cache"),
    ("embed bad device", lambda r, c: ["embed", "small", "--device", "bogus", "--overwrite", *_common(r, c)], None,
     "device: 'bogus'"),
    ("embed truncated corpus line", lambda r, c: ["embed", "small", "--overwrite", *_common(r, c)],
     lambda r, c: (r / "corpus.jsonl").write_text((r / "corpus.jsonl").read_text()[:-30] + "\n"), "invalid JSON"),
    ("embed duplicate id other text", lambda r, c: ["embed", "small", "--overwrite", *_common(r, c)],
     lambda r, c: (r / "corpus.jsonl").write_text((r / "corpus.jsonl").read_text()
                                                  + json.dumps(doc("d3", "", "x")) + "\n"),
     "duplicate document id 'd3'"),
    ("embed cache dir is a file", lambda r, c: ["embed", "small", "--data-dir", str(r.parent), "--cache-dir",
                                                str(r / "corpus.jsonl")], None, "expected a folder"),
    ("embed bad chunk size", lambda r, c: ["embed", "small", "--chunk-size", "0", "--overwrite", *_common(r, c)], None,
     "chunk_size"),
]


def _snapshot(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("name, argv, setup, needle", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_table_one_line_exit_2(capsys, small, name, argv, setup, needle):
    root, cache = small
    if setup is not None:
        setup(root, cache)
    before = _snapshot(cache / "small" / "all-MiniLM-L6-v2")
    code, out, err = _run(capsys, argv(root, cache))
    lines = err.strip().splitlines()
    assert code == 2, (out, err)
    assert "Traceback" not in err and "nan" not in out.lower()
    assert len(lines) == 1 and lines[0].startswith(f"asymgeo {argv(root, cache)[0]}: error:"), err
    assert needle in lines[0], lines[0]
    assert _snapshot(cache / "small" / "all-MiniLM-L6-v2") == before  # nothing on disk was damaged


@pytest.mark.parametrize("command", _subcommands())
def test_every_subcommand_refuses_a_missing_dataset_without_traceback(capsys, tmp_path, command):
    try:
        code = main([command, str(tmp_path / "no-such-thing")])
    except SystemExit as exc:  # argparse: a required option is missing
        code = exc.code
    _, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err and err.strip()


def test_embed_stale_cache_is_not_reported_done(capsys, small):
    root, cache = small
    spec = EncoderSpec("fake-enc", "fake/model")

    class Enc:
        def encode(self, texts):
            return np.stack([_unit_rows(1, int(hashlib.sha256(t.encode()).hexdigest()[:8], 16))[0] for t in texts])

    encode_dataset(root, spec, cache_dir=cache, model=Enc(), progress=False)
    (root / "corpus.jsonl").write_text((root / "corpus.jsonl").read_text().replace('"text 5"', '"text five"'))
    code, out, err = _run(capsys, ["embed", "small", "--encoder", "fake-enc", *_common(root, cache)])
    assert code == 2 and out == ""
    assert "stale cache, the document texts" in err and "--overwrite" in err


def test_dataset_faults_are_warned_once_per_kind(capsys, small):
    root, cache = small
    corpus = (root / "corpus.jsonl").read_text()
    lines = corpus.splitlines(True)
    (root / "corpus.jsonl").write_text(corpus + lines[3] + lines[4] + lines[4])  # 3 duplicate rows, same text
    (root / "qrels" / "test.tsv").write_text((root / "qrels" / "test.tsv").read_text() + "q1\tgone\t1\nq2\tgone2\t1\n")
    code, out, err = _run(capsys, ["evaluate", "small", *_common(root, cache)])
    assert code == 0, err
    warnings_ = [x for x in err.splitlines() if x.startswith("asymgeo evaluate: warning:")]
    assert len(warnings_) == 2, err
    assert any("duplicate document ids" in w and ": 3" in w for w in warnings_)
    assert any("absent from corpus.jsonl" in w and ": 2" in w for w in warnings_)
    assert "ndcg@10" in out


def test_select_selector_dim_above_p_is_warned(capsys, small):
    root, cache = small
    code, out, err = _run(capsys, ["select", "small", "--rank", "2", "--split", "dev", "--n-splits", "4",
                                   "--selector-dim", "64", *_common(root, cache)])
    assert code == 0, err
    want = "asymgeo select: warning: --selector-dim 64 >= p = 8: no random projection applied"
    # a first run in the session also says where its mined hard negatives were cached
    assert [x for x in err.strip().splitlines() if not x.startswith("asymgeo select: note: ")] == [want]


def test_unexpected_exception_is_one_line(capsys, monkeypatch):
    import asymgeo.cli as cli

    def boom(args):
        raise ZeroDivisionError("division by zero")

    parser = cli.build_parser()
    args = parser.parse_args(["demo"])
    monkeypatch.setattr(cli, "build_parser", lambda: type("P", (), {"parse_args": lambda self, a: args})())
    monkeypatch.setattr(args, "func", boom)
    monkeypatch.delenv("ASYMGEO_DEBUG", raising=False)
    code, _, err = _run(capsys, ["demo"])
    assert code == 2 and err.strip() == (
        "asymgeo demo: error: ZeroDivisionError: division by zero (set ASYMGEO_DEBUG=1 for the traceback)")


@pytest.mark.slow
@pytest.mark.parametrize("argv, needle", [
    (["demo", "--n", "100000000"], "GiB of memory"),
    (["embed", "scifact", "--device", "bogus", "--overwrite", "--cache-dir", "CACHE", "--data-dir", "DATA"], "device"),
])
def test_subprocess_bad_inputs_have_no_traceback(tmp_path, shared_dir, argv, needle):
    exe = os.path.join(os.path.dirname(sys.executable), "asymgeo")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "asymgeo"]
    argv = [str(tmp_path / "c") if a == "CACHE" else str(shared_dir / "data") if a == "DATA" else a for a in argv]
    proc = subprocess.run(cmd + argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert needle in proc.stderr
    shutil.rmtree(tmp_path / "c", ignore_errors=True)


# --------------------------------------------------------------------------- demo values
def test_demo_values_against_closed_form_and_theory(capsys):
    """Population figures equal the closed form; at a large angle and n dual must win.

    With k = 8 planes rotated by t, C = C_q C_d^T has k unit singular values and sym(C)
    has eigenvalues (1 + cos t)/2 (k of them) and (cos t - 1)/2 (k): the rank-8 dual error
    is 0 and the shared error keeps the positive half, so gap = G_PSD = k (1 - ((1 + cos t)/2)^2).
    A demo with the shared and dual columns swapped fails the n = 2048 check.
    """
    code, out, err = _run(capsys, ["demo", "--angle", "1.2", "--n", "32", "2048", "--n-test", "300", "--json"])
    assert code == 0, err
    res = json.loads(out)
    closed = 8 * (1 - ((1 + np.cos(1.2)) / 2) ** 2)
    assert res["population"]["gap"] == pytest.approx(closed, abs=1e-9)
    assert res["population"]["psd_distance"] == pytest.approx(closed, abs=1e-9)
    big = res["rows"][-1]
    assert big["n"] == 2048
    assert big["ndcg10_dual"] - big["ndcg10_shared"] > 0.03 and big["better_on_test"] == "dual"
    # with 2048 triples the training gap and the CARS score estimate the population distance
    assert big["train_gap"] == pytest.approx(closed, abs=0.5)
    assert big["cars_score"] == pytest.approx(closed, abs=0.5) and big["cars_choice"] == "dual"
    small = res["rows"][0]
    assert small["train_gap"] > big["train_gap"]  # noise inflates the plug-in gap at small n


# ------------------------------------------------------------- flags that were ignored or misread
def _shared_args():
    from pathlib import Path

    shared = Path(__file__).resolve().parents[1] / ".." / "shared"
    return ["--data-dir", str(shared / "data"), "--cache-dir", str(shared / "embeddings")]


def test_folds_without_validate_is_an_error(capsys):
    code, out, err = _run(capsys, ["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4",
                                   "--folds", "3", *_shared_args()])
    assert code == 2 and out == "" and err.strip().splitlines() == [
        "asymgeo select: error: --folds: only used with --validate (the held-out check); add --validate or drop --folds"]


def test_validate_refuses_folds_below_32_queries_before_any_cell(capsys, monkeypatch):
    import asymgeo.estimators.validation as v

    monkeypatch.setattr(v, "validate_selection", lambda *a, **k: pytest.fail("ran the cells"))
    code, _, err = _run(capsys, ["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4",
                                 "--validate", "--folds", "100", *_shared_args()])
    # SciFact's adaptation train split: 647 queries, 647 // 100 = 6 per fold; 647 // 32 = 20 folds at most
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--folds 100: held-out folds of 647 queries would hold 6 each; need at least 32 per fold " \
           "(at most --folds 20)" in err
    code, _, err = _run(capsys, ["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4",
                                 "--validate", "--folds", "21", *_shared_args()])
    assert code == 2 and "would hold 30 each" in err


@pytest.mark.parametrize("value", ["-1e-3", "-0.5", "-2"])
def test_negative_learning_rates_reach_the_range_check(capsys, tmp_path, value):
    code, _, err = _run(capsys, ["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--geometry", "dual",
                                 "--rank", "4", "--learning-rates", value, "--out", str(tmp_path / "a"),
                                 "--no-progress", *_shared_args()])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"learning_rates: expected a finite number > 0, got {float(value)!r}" in err
    assert not (tmp_path / "a").exists()


def test_fit_bad_device_is_named_before_loading_data(capsys, tmp_path, monkeypatch):
    import asymgeo.adapters.workflow as wf

    monkeypatch.setattr(wf, "load_adaptation_data", lambda *a, **k: pytest.fail("loaded data first"))
    code, _, err = _run(capsys, ["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--geometry", "dual",
                                 "--rank", "4", "--device", "bogus", "--out", str(tmp_path / "a"), *_shared_args()])
    assert code == 2 and "device: 'bogus' is not a torch device" in err


def test_fit_refuses_another_tools_adapter_folder_before_training(capsys, tmp_path, monkeypatch):
    import asymgeo.adapters.workflow as wf

    monkeypatch.setattr(wf, "fit_adapter", lambda *a, **k: pytest.fail("trained before checking --out"))
    lora = tmp_path / "lora"
    lora.mkdir()
    (lora / "adapter.json").write_text('{"peft_type": "LORA"}')
    (lora / "weights.bin").write_bytes(b"w")
    (lora / "README.md").write_text("r")
    code, _, err = _run(capsys, ["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--geometry", "dual",
                                 "--rank", "4", "--out", str(lora), *_shared_args()])
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(lora) in err and "peft_type 'LORA'" in err
    assert sorted(p.name for p in lora.iterdir()) == ["README.md", "adapter.json", "weights.bin"]


def test_selector_dim_zero_and_demo_single_query_are_one_line_errors(capsys):
    code, _, err = _run(capsys, ["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4",
                                 "--selector-dim", "0", *_shared_args()])
    assert code == 2 and "selector_dim: expected a positive integer" in err and "1e12" not in err
    assert "1000000000000" not in err
    code, out, err = _run(capsys, ["demo", "--n-test", "1"])
    assert code == 2 and err.strip() == "asymgeo demo: error: n_test: expected an integer >= 2, got 1"


def test_demo_calls_an_exact_tie_a_tie():
    from asymgeo.experiments.demo import run_demo

    res = run_demo(sizes=[32], n_test=2)
    row = res["rows"][0]
    s, d = row["ndcg10_shared"], row["ndcg10_dual"]
    want = ("dual" if d > s else "shared" if s > d
            else "tie")
    assert row["better_on_test"] == want
    assert s == d == 0.0 and want == "tie", "two test queries at n = 32: both families miss both (the probed case)"


def test_garbage_lines_in_runs_jsonl_are_named(tmp_path, caplog):
    from asymgeo.experiments.report import run_log

    folder = tmp_path / "x"
    folder.mkdir()
    (folder / "runs.jsonl").write_text('{"cells_run": 1}\nnot json\n[1, 2]\n\n{"cells_run": 2}\n')
    with caplog.at_level("WARNING", logger="asymgeo.experiments.report"):
        assert run_log(tmp_path, "x") == [{"cells_run": 1}, {"cells_run": 2}]
    msgs = [r.getMessage() for r in caplog.records]
    assert any("runs.jsonl:2: not a JSON record" in m for m in msgs)
    assert any("runs.jsonl:3: a JSON list, not a run record" in m for m in msgs)


def test_select_and_fit_on_header_only_train_qrels_name_the_file(capsys, tmp_path):
    import shutil
    from pathlib import Path

    shared = Path(__file__).resolve().parents[1] / ".." / "shared"
    root = tmp_path / "data" / "scifact"
    (root / "qrels").mkdir(parents=True)
    for f in ("corpus.jsonl", "queries.jsonl"):
        os.symlink(shared / "data" / "scifact" / f, root / f)
    shutil.copy(shared / "data" / "scifact" / "qrels" / "test.tsv", root / "qrels" / "test.tsv")
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n")
    args = ["--data-dir", str(tmp_path / "data"), "--cache-dir", str(shared / "embeddings")]
    code, _, err = _run(capsys, ["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4", *args])
    assert code == 2 and "qrels/train.tsv: split 'train' has no usable relevance judgements" in err
    assert "X: expected" not in err
    code, _, err = _run(capsys, ["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--geometry", "dual",
                                 "--rank", "4", "--out", str(tmp_path / "ad"), *args])
    assert code == 2 and "qrels/train.tsv: split 'train' has no usable relevance judgements" in err


def test_validation_rows_merge_full_pool_sizes_one_apart():
    from asymgeo.cli import _merge_full_pool_sizes

    rows = [{"size": 512, "cells": 5, "cars_dual": 1, "heldout_dual": 2, "accuracy": 0.8,
             "regret": {"cars": 0.1, "shared": 0.2, "dual": 0.3}},
            {"size": 518, "cells": 3, "cars_dual": 1, "heldout_dual": 1, "accuracy": 1.0,
             "regret": {"cars": 0.0, "shared": 0.4, "dual": 0.0}},
            {"size": 517, "cells": 2, "cars_dual": 0, "heldout_dual": 1, "accuracy": 0.5,
             "regret": {"cars": 0.5, "shared": 0.1, "dual": 0.2}}]
    out = _merge_full_pool_sizes(rows)
    assert [r["label"] for r in out] == ["512", "517-518"]
    m = out[1]
    assert (m["cells"], m["cars_dual"], m["heldout_dual"]) == (5, 1, 2)
    assert m["accuracy"] == pytest.approx((0.5 * 2 + 1.0 * 3) / 5)
    assert m["regret"] == pytest.approx({"cars": (0.5 * 2 + 0.0) / 5, "shared": (0.1 * 2 + 0.4 * 3) / 5,
                                         "dual": (0.2 * 2) / 5})
    assert out[0]["regret"] == rows[0]["regret"] and rows[1]["cells"] == 3, "inputs untouched"


@pytest.mark.parametrize("argv, message", [
    (["export", "ADAPTER", "--out", " "], "out: empty path"),
    (["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--geometry", "dual", "--out", ""], "out: empty path"),
])
def test_empty_output_paths_are_named(capsys, tmp_path, argv, message):
    if argv[0] == "export":
        from asymgeo.adapters import Adapter, save_adapter

        argv = ["export", str(save_adapter(Adapter.from_maps(np.ones((2, 384)) * 0.01), tmp_path / "a")), *argv[2:],
                "--base", "all-MiniLM-L6-v2"]
    code, _, err = _run(capsys, argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_select_validate_passes_selector_dim_and_seed_through(capsys):
    """The held-out check must use --selector-dim and --seed (a fault that drops them keeps every key)."""
    import json as _json

    from asymgeo.data import load_triples
    from asymgeo.estimators.validation import validate_selection

    argv = ["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4", "--n-splits", "4", "--validate",
            "--folds", "2", "--selector-dim", "64", "--seed", "3", "--json", *_shared_args()]
    code, out, err = _run(capsys, argv)
    assert code == 0, err
    got = _json.loads(out)["validation"]
    shared = _shared_args()
    tr = load_triples("scifact", "all-MiniLM-L6-v2", "train", data_dir=shared[1], cache_dir=shared[3])
    want = validate_selection(tr.X, tr.Y_pos, tr.Y_neg, 4, folds=2, n_splits=4, selector_dim=64, seed=3,
                              query_ids=tr.query_ids)
    default = validate_selection(tr.X, tr.Y_pos, tr.Y_neg, 4, folds=2, n_splits=4, query_ids=tr.query_ids)
    got.pop("seconds")
    cells = got.pop("cells")
    acc = got.pop("accuracy")
    assert got.pop("selector") == "cars"
    assert got["regret"].pop("selector") == got["regret"]["cars"] and acc.pop("selector") == acc["cars"]
    assert got["selector_dim"] == 64 and got["seed"] == 3
    want_dict = _json.loads(_json.dumps(want.as_dict(), default=float))
    assert want_dict.pop("accuracy") == acc
    assert want_dict == got
    # the fixed rules' accuracies, by hand from the held-out losses: within each fold, then over folds
    folds = sorted({c["fold"] for c in want.cells})
    shared_acc = sum(sum(c["loss_shared"] <= c["loss_dual"] for c in want.cells if c["fold"] == f)
                     / sum(c["fold"] == f for c in want.cells) for f in folds) / len(folds)
    assert acc["shared"] == pytest.approx(shared_acc) and acc["dual"] == pytest.approx(1 - shared_acc)
    assert acc["cars"] == pytest.approx(want.cars_accuracy)
    assert [c["cars_score"] for c in cells] == pytest.approx([c["cars_score"] for c in want.cells], rel=1e-12)
    assert [c["cars_score"] for c in cells] != pytest.approx([c["cars_score"] for c in default.cells], rel=1e-3)


def test_fit_command_defaults_are_the_library_defaults():
    """The CLI keeps its own copy (it must not import numpy to build its parser): they must agree."""
    import inspect

    from asymgeo.adapters.workflow import fit_adapter
    from asymgeo.cli import _FIT_DEFAULTS

    sig = inspect.signature(fit_adapter).parameters
    assert {k: sig[k].default for k in _FIT_DEFAULTS} == _FIT_DEFAULTS


def test_select_leads_with_a_verdict_and_reports_centring(capsys):
    """The first line is the verdict; --centred runs CARS on the centred triples (checked against a
    direct call on arrays centred here), and the other reading is reported beside it."""
    import json as _json

    import numpy as np

    from asymgeo.data import load_triples
    from asymgeo.kernels.selection import cars_score

    shared = _shared_args()
    base = ["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4", "--n-splits", "4", *shared]
    code, out, _ = _run(capsys, base)
    assert code == 0 and out.splitlines()[0].startswith("verdict: ") and "not validated" in out.splitlines()[0]
    assert "not a sampling error" in out and "mean term: " in out
    code, out, _ = _run(capsys, [*base, "--centred", "--json"])
    got = _json.loads(out)
    tr = load_triples("scifact", "all-MiniLM-L6-v2", "train", data_dir=shared[1], cache_dir=shared[3])
    X = np.asarray(tr.X, dtype=np.float64)
    D = np.asarray(tr.Y_pos, dtype=np.float64) - np.asarray(tr.Y_neg, dtype=np.float64)
    Xc, Dc = X - X.mean(axis=0), D - D.mean(axis=0)
    want = cars_score(Xc, Dc, np.zeros_like(Dc), 4, n_splits=4, seed=0)
    raw = cars_score(tr.X, tr.Y_pos, tr.Y_neg, 4, n_splits=4, seed=0)
    assert got["centred"] is True and got["cars"]["score"] == pytest.approx(want.score, rel=1e-9)
    assert got["mean_term"]["other_score"] == pytest.approx(raw.score, rel=1e-9)
    # share of the rank-1 mean term, by hand
    C = X.T @ D / len(X)
    share = float(np.sum(np.outer(X.mean(axis=0), D.mean(axis=0)) ** 2) / np.sum(C**2))
    assert got["mean_term"]["share"] == pytest.approx(share, rel=1e-9)


def test_select_verdict_sentences():
    from asymgeo.cli import select_verdict

    def v(cars, shared, red, heldout_dual=5):
        return {"accuracy": {"cars": cars, "shared": shared, "dual": 1 - shared}, "reduction": red,
                "regret": {"cars": 1.0 - red, "shared": 1.0, "dual": 1.0},
                "per_size": [{"size": 517, "cells": 2, "heldout_dual": 2, "cars_dual": 2, "accuracy": 1.0,
                              "regret": {"cars": 0.0, "shared": 1.0, "dual": 0.0}},
                             {"size": 518, "cells": 3, "heldout_dual": heldout_dual - 2, "cars_dual": 3,
                              "accuracy": 1.0, "regret": {"cars": 0.0, "shared": 1.0, "dual": 0.0}}]}

    assert select_verdict("dual", v(0.95, 0.5, 0.84)).startswith("validation supports dual (CARS): regret 84% below")
    assert "at 517-518 queries dual had the lower held-out loss in 5 of 5 folds" in select_verdict("dual", v(0.95, 0.5, 0.84))
    assert "adds nothing" in select_verdict("shared", v(0.933, 0.933, 0.0, heldout_dual=0))
    assert "in 5 of 5 folds" in select_verdict("shared", v(0.933, 0.933, 0.0, heldout_dual=0))
    bad = select_verdict("dual", v(0.70, 0.80, -0.46, heldout_dual=3))
    assert bad.startswith("validation does not support dual") and "46% above" in bad
    assert select_verdict("dual", v(0.9, 0.5, 0.3)).startswith("the data cannot tell")
    assert "not validated" in select_verdict("shared", None)


def test_select_with_the_cross_validated_risk_selector(capsys):
    """--selector cv decides by the cross-validated operator risk (checked against a direct call)
    and --validate scores that selector beside CARS."""
    import json as _json

    from asymgeo.data import load_triples
    from asymgeo.kernels.operator_risk import cross_validated_risk

    shared = _shared_args()
    argv = ["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4", "--n-splits", "4", "--selector", "cv",
            "--validate", "--folds", "2", "--json", *shared]
    code, out, err = _run(capsys, argv)
    assert code == 0, err
    got = _json.loads(out)
    tr = load_triples("scifact", "all-MiniLM-L6-v2", "train", data_dir=shared[1], cache_dir=shared[3])
    want = cross_validated_risk(tr.X, tr.Y_pos, tr.Y_neg, 4, folds=5, seed=0)
    assert got["selector"] == "cv" and got["choice"] == want.choice
    assert got["cv"]["score"] == pytest.approx(want.score, rel=1e-9)
    v = got["validation"]
    assert v["selector"] == "cv"
    assert v["accuracy"]["selector"] == v["accuracy"]["cv"] and v["regret"]["selector"] == v["regret"]["cv"]
    # the named selector's accuracy and regret by hand from the cells: within each fold, then over folds
    folds = sorted({c["fold"] for c in v["cells"]})
    by = {f: [c for c in v["cells"] if c["fold"] == f] for f in folds}
    win = {f: ["dual" if c["loss_dual"] < c["loss_shared"] else "shared" for c in by[f]] for f in folds}
    acc = sum(sum(c["cv_choice"] == w for c, w in zip(by[f], win[f])) / len(by[f]) for f in folds) / len(folds)
    reg = sum(sum((c["loss_dual"] if c["cv_choice"] == "dual" else c["loss_shared"])
                  - min(c["loss_dual"], c["loss_shared"]) for c in by[f]) / len(by[f]) for f in folds) / len(folds)
    assert v["accuracy"]["cv"] == pytest.approx(acc) and v["regret"]["cv"] == pytest.approx(reg)
    assert "cross-validated risk" in got["verdict"]


def test_select_validate_plot_draws_the_cells(capsys, tmp_path):
    """--plot draws held-out L_s - L_d and each selector's choices from the validation cells."""
    import json as _json

    from asymgeo.estimators.plots import validation_curves

    png = tmp_path / "out" / "check.png"
    argv = ["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4", "--n-splits", "4", "--validate",
            "--folds", "2", "--json", "--plot", str(png), *_shared_args()]
    code, out, err = _run(capsys, argv)
    assert code == 0, err
    got = _json.loads(out)
    assert got["plot"] == str(png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cells = got["validation"]["cells"]
    cur = validation_curves(cells)
    groups = []  # sizes one apart are one point (two folds of 323 and 324 training queries), grouped here
    for m in sorted({c["size"] for c in cells}):
        groups.append([m]) if not groups or m > groups[-1][-1] + 1 else groups[-1].append(m)
    assert cur["groups"] == groups and cur["sizes"] == [g[-1] for g in groups]
    assert any(len(g) == 2 for g in groups), "2 folds of 647 queries: full pools of 323 and 324"
    for g, mean, share in zip(groups, cur["mean"], cur["dual_share"]["cars"], strict=True):
        at = [c for c in cells if c["size"] in g]
        assert mean == pytest.approx(sum(c["loss_shared"] - c["loss_dual"] for c in at) / len(at))
        assert share == sum(c["cars_choice"] == "dual" for c in at) / len(at)
    assert set(cur["dual_share"]) == {"held-out", "cars", "sure", "anisotropic"}
    # refused before any work: without --validate, not a .png, a folder that cannot take the file
    for bad, message in ((["--plot", str(tmp_path / "x.png")], "add --validate"),
                         (["--validate", "--plot", str(tmp_path / "x.svg")], "expected a .png"),
                         (["--validate", "--plot", str(png.parent)], "--plot")):
        code, out, err = _run(capsys, ["select", "scifact", "--rank", "4", *bad, *_shared_args()])
        assert code == 2 and message in err and "Traceback" not in err


def test_select_with_the_anisotropic_selector(capsys):
    import json as _json

    from asymgeo.data import load_triples
    from asymgeo.kernels.theory import anisotropic_sure

    shared = _shared_args()
    argv = ["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4", "--n-splits", "4", "--selector",
            "anisotropic", "--validate", "--folds", "2", "--json", *shared]
    code, out, err = _run(capsys, argv)
    assert code == 0, err
    got = _json.loads(out)
    tr = load_triples("scifact", "all-MiniLM-L6-v2", "train", data_dir=shared[1], cache_dir=shared[3])
    want = anisotropic_sure(tr.X.astype(float), tr.Y_pos.astype(float) - tr.Y_neg, 4)
    assert got["choice"] == want.choice and got["anisotropic"]["threshold"] == pytest.approx(want.threshold, rel=1e-9)
    v = got["validation"]
    assert v["accuracy"]["selector"] == v["accuracy"]["anisotropic"]
    assert v["regret"]["selector"] == v["regret"]["anisotropic"]
    assert "anisotropic SURE" in got["verdict"]


def test_select_with_the_ranking_selector(capsys):
    """--selector ranking: 20% of the training queries held out with their qrels, the closed forms by
    NDCG@10 (checked against ranking_choice_on_pool called directly); --validate says it cannot score it."""
    import json as _json

    import numpy as np

    from asymgeo.data import load_beir, load_embeddings, load_triples
    from asymgeo.retrieval.ranking_selector import ranking_choice_on_pool

    shared = _shared_args()
    argv = ["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4", "--n-splits", "4", "--selector",
            "ranking", "--json", *shared]
    code, out, err = _run(capsys, argv)
    assert code == 0, err
    got = _json.loads(out)
    tr = load_triples("scifact", "all-MiniLM-L6-v2", "train", data_dir=shared[1], cache_dir=shared[3])
    ds = load_beir("scifact", data_dir=shared[1])
    emb = load_embeddings(ds, "all-MiniLM-L6-v2", cache_dir=shared[3])
    X, D = tr.X.astype(np.float64), tr.Y_pos.astype(np.float64) - tr.Y_neg
    want = ranking_choice_on_pool(X, D, tr.query_ids, ds.all_qrels(), np.asarray(emb.corpus, np.float32),
                                  emb.corpus_ids, 4)
    assert got["choice"] == want.choice and got["ranking"]["diff"] == pytest.approx(want.diff, abs=1e-12)
    assert got["ranking"]["n_validation"] == round(0.2 * len(set(tr.query_ids)))
    code, out, err = _run(capsys, [*argv[:-5], "--validate", "--folds", "2", *shared])
    assert code == 0 and "scores the triple-based selectors only" in out.splitlines()[0]


def test_ranking_pool_split_keeps_a_query_on_one_side():
    # rows of a query with several positives all go to the same side of the split
    import numpy as np

    from asymgeo.retrieval import ranking_selector as rs

    rng = np.random.default_rng(0)
    ids = [f"q{i // 2}" for i in range(40)]                    # every query twice
    X, D = rng.standard_normal((40, 6)), rng.standard_normal((40, 6))
    corpus = rng.standard_normal((30, 6))
    qrels = {f"q{i}": {f"d{i % 30}": 1} for i in range(20)}
    seen: dict = {}
    real = rs.ranking_choice

    def spy(Xf, Df, V, table, *a, **kw):
        seen["fit"], seen["val"] = Xf, list(table.query_ids)
        return real(Xf, Df, V, table, *a, **kw)

    import pytest as _pytest

    mp = _pytest.MonkeyPatch()
    mp.setattr(rs, "ranking_choice", spy)
    try:
        rs.ranking_choice_on_pool(X, D, ids, qrels, corpus, [f"d{j}" for j in range(30)], 2, seed=3)
    finally:
        mp.undo()
    assert len(seen["val"]) == 4 and seen["fit"].shape[0] == 40 - 2 * 4
    fit_rows = {tuple(r) for r in seen["fit"]}
    for q in seen["val"]:
        for i in (2 * int(q[1:]), 2 * int(q[1:]) + 1):
            assert tuple(X[i]) not in fit_rows
    with _pytest.raises(ValueError, match="qrels"):
        rs.ranking_choice_on_pool(X, D, ids, {}, corpus, [f"d{j}" for j in range(30)], 2)


# --------------------------------------------------------------------------- error lines (issue #19)
def test_error_lines_name_what_failed():
    from asymgeo.cli import _error_line

    assert _error_line(MemoryError()) == "out of memory (use smaller sizes)"
    assert _error_line(MemoryError("Unable to allocate 9 GiB\nmore")) == \
        "out of memory: Unable to allocate 9 GiB (use smaller sizes)"
    e = OSError(28, "No space left on device", "/data/out.npy")  # the message already names the file
    assert _error_line(e) == "[Errno 28] No space left on device: '/data/out.npy'"

    class Worded(OSError):  # OSErrors whose message leaves the file out: the file is prefixed
        def __init__(self, errno, strerror, filename, text):
            super().__init__(errno, strerror, filename)
            self.text = text

        def __str__(self):
            return self.text

    assert _error_line(Worded(28, "No space left on device", "/data/out.npy", "disk full")) == \
        "/data/out.npy: No space left on device"
    assert _error_line(Worded(13, "Permission denied", "/x", "")) == "/x: Permission denied"
    assert _error_line(KeyError("'q9' is unknown")) == "'q9' is unknown"
    assert _error_line(ValueError("")) == "ValueError"


def test_a_library_warning_that_cannot_be_formatted_still_prints_one_line(capsys):
    import logging

    from asymgeo.cli import _WarningHandler

    h = _WarningHandler("fit")
    rec = logging.LogRecord("asymgeo", logging.WARNING, __file__, 1, "bad %d format", ("not a number",), None)
    h.emit(rec)
    assert capsys.readouterr().err == "asymgeo fit: warning: bad %d format\n"


def test_select_verdict_counts_the_folds_the_held_out_data_decides():
    from asymgeo.cli import select_verdict

    per_size = [{"size": 517, "cells": 2, "heldout_dual": 2, "cars_dual": 2, "accuracy": 1.0, "decided": 1,
                 "regret": {"cars": 0.0, "shared": 1.0, "dual": 0.0}},
                {"size": 518, "cells": 3, "heldout_dual": 3, "cars_dual": 3, "accuracy": 1.0, "decided": 2,
                 "regret": {"cars": 0.0, "shared": 1.0, "dual": 0.0}}]
    v = {"accuracy": {"cars": 0.95, "shared": 0.5, "dual": 0.5}, "reduction": 0.84, "per_size": per_size,
         "regret": {"cars": 0.16, "shared": 1.0, "dual": 1.0}}
    assert select_verdict("dual", v).endswith(
        "in 5 of 5 folds (held-out difference beyond two bootstrap standard errors in 3 of 5)")
    per_size[0].pop("decided")                  # one size without the count: no count for the merged row
    assert "bootstrap" not in select_verdict("dual", v)


def test_select_validate_prints_how_many_folds_decide_each_size(capsys):
    import json as _json

    argv = ["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4", "--n-splits", "4", "--validate",
            "--folds", "2", *_shared_args()]
    code, out, err = _run(capsys, argv)
    assert code == 0, err
    assert "beyond 2 SE" in out and "bootstrap standard errors" in out.splitlines()[0]
    code, out, err = _run(capsys, [*argv, "--json"])
    got = _json.loads(out)["validation"]
    assert all("decided" in s for s in got["per_size"]) and all(c["heldout_se"] > 0 for c in got["cells"])


def test_select_verdict_names_the_fixed_rule_each_measure_compares_with():
    """Issue #37: accuracy and regret can favour different fixed rules. The reduction is against
    the fixed rule with the lower regret, and the verdict names that one; accuracy is compared with
    the more accurate fixed rule, and a refusal says which measure failed (numbers by hand)."""
    from asymgeo.cli import select_verdict

    per_size = [{"size": 518, "cells": 5, "heldout_dual": 5, "cars_dual": 5, "accuracy": 1.0,
                 "regret": {"cars": 0.0, "shared": 1.0, "dual": 0.0}}]
    # always-dual is more accurate (0.6 > 0.4) but always-shared has the lower regret (0.1038 < 0.2)
    v = {"accuracy": {"cars": 0.9, "shared": 0.4, "dual": 0.6}, "reduction": None, "per_size": per_size,
         "regret": {"cars": 0.0165, "shared": 0.1038, "dual": 0.2}}
    text = select_verdict("dual", v)
    assert text.startswith("validation supports dual (CARS): regret 84% below always-shared's")  # 1 - .0165/.1038
    assert "accuracy 90.0% vs always-dual 60.0%" in text and "below always-dual" not in text
    # a more accurate selector whose regret is higher than the better fixed rule's: the refusal names regret
    v2 = {**v, "accuracy": {"anisotropic": 0.675, "shared": 0.55, "dual": 0.45},
          "regret": {"anisotropic": 0.2, "shared": 0.1, "dual": 0.3}}
    text = select_verdict("dual", v2, selector="anisotropic")
    assert text.startswith("validation does not support dual (anisotropic SURE) on held-out folds: always-shared had "
                           "the lower regret (0.1 vs 0.2: the selector's 100% above)")
    assert "more accurate" not in text       # 67.5% beats always-shared's 55.0%: accuracy is not the reason


def test_plot_destinations_are_refused_before_any_work(capsys, tmp_path):
    """Issue #39: `--plot ''` (an unset variable), a folder, and a file asymgeo did not draw are
    refused before anything is computed or trained, naming the flag; --overwrite replaces the file."""
    text = tmp_path / "notes.png"
    text.write_text("my notes")
    folder = tmp_path / "figs.png"
    folder.mkdir()
    select = ["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4", "--validate", "--folds", "2",
              *_shared_args()]
    fit = ["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--geometry", "dual", "--rank", "4",
           "--out", str(tmp_path / "ad"), *_shared_args()]
    for argv in (select, fit):
        for plot, message in (("", "--plot: empty file name (an unset variable?)"),
                              (str(folder), f"--plot: {folder} is a folder"),
                              (str(text), f"--plot: {text} exists and was not drawn by asymgeo; pass --overwrite")):
            code, out, err = _run(capsys, [*argv, "--plot", plot])
            assert code == 2 and message in err and out == "", (argv[0], plot, err)
        code, out, err = _run(capsys, [*argv, "--overwrite"])
        assert code == 2 and "--overwrite: only replaces an existing --plot file" in err
    assert text.read_text() == "my notes" and not (tmp_path / "ad").exists()


def test_select_validate_replaces_its_own_plot_and_shows_progress_when_piped(capsys, tmp_path):
    """An existing figure asymgeo drew is replaced without --overwrite; a user's file only with it.
    The validation's progress reaches stderr although stderr is not a terminal (issue #39)."""
    from asymgeo._atomic import written_by_asymgeo

    png = tmp_path / "check.png"
    argv = ["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4", "--n-splits", "4", "--validate",
            "--folds", "2", "--plot", str(png), *_shared_args()]
    code, out, err = _run(capsys, argv)
    assert code == 0, err
    assert written_by_asymgeo(png) and "validate rank 4" in err      # the bar, piped
    first = png.stat().st_mtime_ns
    code, out, err = _run(capsys, [*argv, "--no-progress"])             # its own figure: replaced
    assert code == 0 and png.stat().st_mtime_ns >= first and "validate rank" not in err
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 16)                  # a PNG asymgeo did not draw
    code, out, err = _run(capsys, argv)
    assert code == 2 and "was not drawn by asymgeo" in err
    code, out, err = _run(capsys, [*argv, "--overwrite", "--no-progress"])
    assert code == 0 and written_by_asymgeo(png)


def test_the_verdict_says_when_the_mean_term_decides():
    from asymgeo.cli import mean_term_note

    assert mean_term_note("dual", 0.94, False, "shared") == (
        "; the dual advantage is the mean term (94% of the moment); centred, shared "
        "(CARS on the directional part: --centred)")
    assert mean_term_note("dual", 0.94, False, "dual") == ""      # centring agrees
    assert mean_term_note("dual", 0.40, False, "shared") == ""    # the mean term is not most of the moment
    assert mean_term_note("dual", 0.94, True, "shared") == ""     # already centred


def test_the_validation_plot_merges_sizes_one_apart_and_labels_the_fold_dots(tmp_path, monkeypatch):
    """#38: 517 and 518 are one point (the table merges them), and the grey per-fold dots are in the legend."""
    import asymgeo.estimators.plots as plots

    def cell(fold, size, ls, ld):
        return {"fold": fold, "size": size, "loss_shared": ls, "loss_dual": ld, "cars_choice": "dual"}

    cells = [cell(0, 32, 1.0, 0.9), cell(1, 32, 1.0, 1.1), cell(0, 517, 0.5, 0.4), cell(1, 518, 0.5, 0.7),
             cell(2, 518, 0.5, 0.5)]
    cur = plots.validation_curves(cells)
    assert cur["groups"] == [[32], [517, 518]] and cur["labels"] == ["32", "517-518"] and cur["sizes"] == [32, 518]
    assert cur["mean"] == pytest.approx([0.0, (0.1 - 0.2 + 0.0) / 3])
    assert cur["dual_share"]["held-out"] == [0.5, 1 / 3]  # a tie (0.5 vs 0.5) goes to shared
    real = plots._pyplot()
    figures = []

    class Keep:  # pyplot, but the figure is kept for the test instead of closed
        def __getattr__(self, name):
            return getattr(real, name)

        def close(self, fig):
            figures.append(fig)

    monkeypatch.setattr(plots, "_pyplot", lambda: Keep())
    plots.plot_validation(cells, tmp_path / "v.png")
    top = figures[0].axes[0]
    assert top.get_legend_handles_labels()[1] == ["one held-out fold", "mean over folds"]
    assert [t.get_text() for t in top.texts] == ["n = 517-518"]
    assert [len(pc.get_offsets()) for pc in top.collections if len(pc.get_offsets())] == [2, 3]
    real.close(figures[0])
