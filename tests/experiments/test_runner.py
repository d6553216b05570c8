"""Sweep runner: grid expansion, TOML errors, atomic cell records, resume, pool and Ray."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from asymgeo._atomic import atomic_write_text
from asymgeo.experiments import runner
from asymgeo.experiments.runner import (
    SweepError,
    cell_id,
    cell_seed,
    expand_grid,
    load_experiment,
    parse_experiment,
    read_results,
    run_sweep,
)

HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _helpers_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    # Ray workers are fresh interpreters: they find sweep_cells through PYTHONPATH.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("ASYMGEO_TEST_FAIL_X", raising=False)
    monkeypatch.delenv("ASYMGEO_TEST_INTERRUPT_X", raising=False)


def _toy(cell: str = "sweep_cells:toy_cell", xs=range(6), **fixed) -> runner.Experiment:
    return parse_experiment(
        {"experiment": {"name": "toy", "cell": cell, "master_seed": 7},
         "grid": {"x": list(xs)}, "fixed": {"size": 5, **fixed}},
        "toy.toml",
    )


def _records(results_dir) -> dict[str, dict]:
    return {cid: p["record"] for cid, p in runner.load_records(results_dir, "toy").items()}


# --------------------------------------------------------------------------- grid and ids
def test_expand_grid_order_and_fixed():
    cfgs = expand_grid({"a": [1, 2], "b": ["x", "y", "z"]}, {"c": 0.5})
    assert len(cfgs) == 6
    assert cfgs[0] == {"c": 0.5, "a": 1, "b": "x"} and cfgs[1]["b"] == "y" and cfgs[3]["a"] == 2


def test_cell_id_is_stable_and_key_order_free():
    a = {"x": 1, "y": 0.2, "name": "s"}
    b = {"name": "s", "y": 0.2, "x": 1.0}
    assert cell_id(a) == cell_id(b)
    assert len(cell_id(a)) == 16
    assert cell_id(a) != cell_id({**a, "y": 0.4})


def test_cell_seed_deterministic_and_distinct():
    assert cell_seed(20260809, 1, 2) == cell_seed(20260809, 1, 2)
    seeds = {cell_seed(20260809, i, j) for i in range(5) for j in range(5)}
    assert len(seeds) == 25
    assert cell_seed(1, 3) != cell_seed(2, 3)
    with pytest.raises(ValueError, match="coords"):
        cell_seed(1, -1)


# --------------------------------------------------------------------------- TOML parsing
def test_bundled_configs_parse_full_and_quick():
    sizes = {}
    for name in ("rq1", "table2", "rq2"):
        full = load_experiment(name, config_dir=runner.packaged_config_dir())
        quick = load_experiment(name, quick=True, config_dir=runner.packaged_config_dir())
        assert quick.name == f"{name}-quick" and quick.quick
        assert len(quick.configs()) < len(full.configs())
        full.cell_function()
        sizes[name] = len(full.configs())
        assert full.master_seed == 20260809
    assert sizes == {"rq1": 7 * 7 * 3 * 5, "table2": 16, "rq2": 3 * 7 * 10}
    rq1 = load_experiment("rq1", config_dir=runner.packaged_config_dir())
    assert rq1.grid["angle"] == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2]
    assert rq1.grid["n"] == [32, 64, 128, 256, 512, 1024, 2048]
    assert rq1.fixed["n_negatives"] == 299 and rq1.fixed["noise_sd"] == 0.6


def test_toml_syntax_error_names_file(tmp_path):
    bad = tmp_path / "broken.toml"
    bad.write_text("[experiment]\nname = \n")
    with pytest.raises(ValueError, match=r"broken\.toml: invalid TOML.*line 2"):
        load_experiment(bad)


@pytest.mark.parametrize("data, match", [
    ({"grid": {"x": [1]}}, r"missing table \[experiment\]"),
    ({"experiment": {"name": "t", "master_seed": 1}, "grid": {"x": [1]}}, r"\[experiment\] is missing key 'cell'"),
    ({"experiment": {"name": "t", "cell": "m:f", "master_seed": 1}}, r"missing table \[grid\]"),
    ({"experiment": {"name": "t", "cell": "m:f", "master_seed": 1}, "grid": {"x": []}}, r"\[grid\] x: expected a non-empty list"),
    ({"experiment": {"name": "t", "cell": "m:f", "master_seed": 1}, "grid": {"x": [[1]]}}, r"\[grid\] x: expected a number"),
    ({"experiment": {"name": "t", "cell": "m:f", "master_seed": -1}, "grid": {"x": [1]}}, r"master_seed"),
    ({"experiment": {"name": "t", "cell": "nocolon", "master_seed": 1}, "grid": {"x": [1]}}, r"cell: expected 'module:function'"),
    ({"experiment": {"name": "t", "cell": "m:f", "master_seed": 1}, "grid": {"x": [1]}, "quick": {"grid": {"y": [1]}}},
     r"\[quick.grid\] y: not an axis"),
    ({"experiment": {"name": "t", "cell": "m:f", "master_seed": 1}, "grid": {"x": [1]}, "fixed": {"x": 2}},
     r"both \[grid\] and \[fixed\]"),
    ({"experiment": {"name": "t", "cell": "m:f", "master_seed": 1}, "grid": {"x": [1]}, "extra": {}},
     r"unknown top-level"),
    ({"experiment": {"name": "t", "cell": "m:f", "master_seed": 1}, "grid": {"x": [float("nan")]}},
     r"\[grid\] x: expected a finite number, got nan"),
    ({"experiment": {"name": "t", "cell": "m:f", "master_seed": 1}, "grid": [1]}, r"\[grid\] must be a table, got list"),
    ({"experiment": {"name": "t", "cell": "m:f", "master_seed": 1}, "grid": {"x": [1, 2, 1]}},
     r"\[grid\] x: contains repeated values \[1, 2, 1\]"),
    ({"experiment": {"name": "../up", "cell": "m:f", "master_seed": 1}, "grid": {"x": [1]}},
     r"\[experiment\] name: expected a plain folder name, got '../up'"),
    ({"experiment": {"name": "t", "cell": "m:f", "master_seed": 1}, "grid": {}}, r"\[grid\] has no axes"),
    ({"experiment": {"name": "t", "cell": "m:f", "master_seed": 1}, "grid": {"x": [1]}, "quick": {"other": {}}},
     r"\[quick\] may only contain \[quick.grid\] and \[quick.fixed\], got \['other'\]"),
    ({"experiment": {"name": "t", "cell": "m:f", "master_seed": 1}, "grid": {"x": [1]}, "fixed": {"a": 1},
      "quick": {"fixed": {"b": 2}}}, r"\[quick.fixed\] b: not a key of \[fixed\] \(keys: \['a'\]\)"),
])
def test_parse_errors_name_file_and_key(data, match):
    with pytest.raises(ValueError, match=match) as info:
        parse_experiment(data, "exp.toml")
    assert str(info.value).startswith("exp.toml: ")


def test_missing_config_lists_available(tmp_path):
    (tmp_path / "one.toml").write_text("")
    with pytest.raises(FileNotFoundError, match=r"available: \['one'\]"):
        load_experiment("two", config_dir=tmp_path)


def test_quick_overrides():
    exp = parse_experiment(
        {"experiment": {"name": "t", "cell": "m:f", "master_seed": 1}, "grid": {"x": [1, 2, 3], "y": [0]},
         "fixed": {"k": 1, "j": 2}, "quick": {"grid": {"x": [1]}, "fixed": {"k": 5}}}, "t.toml", quick=True)
    assert exp.grid == {"x": [1], "y": [0]} and exp.fixed == {"k": 5, "j": 2} and exp.name == "t-quick"


def test_bad_cell_import_fails_early(tmp_path):
    exp = _toy(cell="asymgeo.experiments.runner:no_such_function")
    with pytest.raises(ValueError, match="cannot import"):
        run_sweep(exp, results_dir=tmp_path, workers=1, progress=False)


# --------------------------------------------------------------------------- records
def test_results_table_has_config_versions_and_seeds(tmp_path):
    exp = _toy()
    res = run_sweep(exp, results_dir=tmp_path, workers=1, progress=False, command="test")
    assert (res.n_total, res.n_run, res.n_skipped, res.n_failed) == (6, 6, 0, 0)
    df = read_results(tmp_path, "toy")
    assert list(df["x"]) == list(range(6))  # grid order
    for col in ("cell_id", "x", "size", "master_seed", "seed", "mean", "square", "cell_seconds",
                "version_asymgeo", "version_numpy", "version_scipy", "version_python"):
        assert col in df.columns, col
    assert (df["master_seed"] == 7).all()
    assert list(df["seed"]) == [cell_seed(7, x) for x in range(6)]
    log = [json.loads(l) for l in (tmp_path / "toy" / "runs.jsonl").read_text().splitlines()]
    assert log[-1]["cells_run"] == 6 and log[-1]["command"] == "test"
    cells = list((tmp_path / "toy" / "cells").iterdir())
    assert len(cells) == 6 and all(p.suffix == ".json" and not p.name.startswith(".") for p in cells)


def test_csv_format(tmp_path):
    exp = _toy()
    run_sweep(exp, results_dir=tmp_path, workers=1, progress=False)
    path = runner.consolidate(tmp_path, exp, fmt="csv")
    assert path.name == "results.csv" and not (tmp_path / "toy" / "results.parquet").exists()
    assert len(read_results(tmp_path, "toy")) == 6


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "cells" / "abc.json"
    atomic_write_text(target, '{"ok": 1}')

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(runner.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(target, '{"ok": 2, "partial": ')
    # The old complete record is untouched and no temporary file is left behind.
    assert json.loads(target.read_text()) == {"ok": 1}
    assert [p.name for p in target.parent.iterdir()] == ["abc.json"]


def test_unreadable_or_temporary_cell_files_are_ignored(tmp_path):
    exp = _toy()
    cells = tmp_path / "toy" / "cells"
    cells.mkdir(parents=True)
    first = cell_id(exp.configs()[0])
    (cells / f"{first}.json").write_text('{"cell_id": "')  # torn write from a foreign tool
    (cells / f".{first}.json.x.tmp").write_text("{}")
    res = run_sweep(exp, results_dir=tmp_path, workers=1, progress=False)
    assert res.n_run == 6


# --------------------------------------------------------------------------- resume
def test_resume_after_a_crashed_cell(tmp_path, monkeypatch, caplog, capsys):
    exp = _toy(cell="sweep_cells:flaky_cell")
    monkeypatch.setenv("ASYMGEO_TEST_FAIL_X", "3")
    with pytest.raises(SweepError, match=r"1 of 6 cells failed.*simulated crash") as info:
        run_sweep(exp, results_dir=tmp_path, workers=1, progress=False)
    assert info.value.failures[0][0]["x"] == 3
    # the library logs the failed cell (only the CLI prints)
    logged = [r for r in caplog.records if r.name == "asymgeo.experiments.runner"]
    assert len(logged) == 1 and "failed: RuntimeError: simulated crash at x = 3" in logged[0].getMessage()
    assert capsys.readouterr().out == ""
    df = read_results(tmp_path, "toy")
    assert sorted(df["x"]) == [0, 1, 2, 4, 5]
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "toy" / "cells").iterdir()}
    monkeypatch.delenv("ASYMGEO_TEST_FAIL_X")
    res = run_sweep(exp, results_dir=tmp_path, workers=1, progress=False)
    assert (res.n_skipped, res.n_run) == (5, 1)
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "toy" / "cells").iterdir()}
    assert {k: after[k] for k in before} == before  # finished cells were not recomputed
    assert sorted(read_results(tmp_path, "toy")["x"]) == list(range(6))
    again = run_sweep(exp, results_dir=tmp_path, workers=1, progress=False)
    assert (again.n_skipped, again.n_run) == (6, 0)


def test_resume_after_crash_in_process_pool(tmp_path, monkeypatch):
    exp = _toy(cell="sweep_cells:flaky_cell", xs=range(8))
    monkeypatch.setenv("ASYMGEO_TEST_FAIL_X", "5")
    with pytest.raises(SweepError):
        run_sweep(exp, results_dir=tmp_path, workers=2, progress=False)
    assert len(read_results(tmp_path, "toy")) == 7
    monkeypatch.delenv("ASYMGEO_TEST_FAIL_X")
    res = run_sweep(exp, results_dir=tmp_path, workers=2, progress=False)
    assert (res.n_skipped, res.n_run) == (7, 1)


def test_keyboard_interrupt_keeps_finished_cells(tmp_path, monkeypatch):
    exp = _toy(cell="sweep_cells:flaky_cell")
    monkeypatch.setenv("ASYMGEO_TEST_INTERRUPT_X", "2")
    with pytest.raises(KeyboardInterrupt):
        run_sweep(exp, results_dir=tmp_path, workers=1, progress=False)
    assert sorted(read_results(tmp_path, "toy")["x"]) == [0, 1]
    log = [json.loads(l) for l in (tmp_path / "toy" / "runs.jsonl").read_text().splitlines()]
    assert log[-1]["interrupted"] is True
    monkeypatch.delenv("ASYMGEO_TEST_INTERRUPT_X")
    res = run_sweep(exp, results_dir=tmp_path, workers=1, progress=False)
    assert (res.n_skipped, res.n_run) == (2, 4)


def test_limit_runs_a_prefix(tmp_path):
    res = run_sweep(_toy(), results_dir=tmp_path, workers=1, progress=False, limit=2)
    assert res.n_run == 2
    assert run_sweep(_toy(), results_dir=tmp_path, workers=1, progress=False).n_run == 4


def test_process_pool_matches_in_process(tmp_path):
    exp = _toy(xs=range(10))
    run_sweep(exp, results_dir=tmp_path / "a", workers=1, progress=False)
    run_sweep(exp, results_dir=tmp_path / "b", workers=2, progress=False)
    assert _records(tmp_path / "a") == _records(tmp_path / "b")


def test_bad_executor_and_address(tmp_path):
    with pytest.raises(ValueError, match="executor"):
        run_sweep(_toy(), results_dir=tmp_path, executor="dask", progress=False)
    with pytest.raises(ValueError, match="address"):
        run_sweep(_toy(), results_dir=tmp_path, address="auto", workers=1, progress=False)


@pytest.mark.parametrize("workers", [-1, 2.5, True])
def test_bad_workers(tmp_path, workers):
    with pytest.raises(ValueError, match="workers: expected a positive integer"):
        run_sweep(_toy(), results_dir=tmp_path, workers=workers, progress=False)


def test_missing_ray_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install 'asymgeo\[ray\]'"):
        run_sweep(_toy(), results_dir=tmp_path, executor="ray", workers=1, progress=False)


# --------------------------------------------------------------------------- Ray
@pytest.mark.xdist_group("ray")  # one Ray cluster at a time under xdist
@pytest.mark.slow
def test_ray_executor_matches_local(tmp_path):
    ray = pytest.importorskip("ray")
    from asymgeo.experiments.runner import load_experiment

    rq2 = load_experiment("rq2", quick=True, config_dir=runner.packaged_config_dir())
    small = parse_experiment(
        {"experiment": {"name": "rq2-ray", "cell": rq2.cell, "master_seed": rq2.master_seed},
         "grid": {"angle": [0.4, 1.2], "n": [32, 128], "seed_index": [0]}, "fixed": dict(rq2.fixed)},
        "rq2-ray.toml")
    run_sweep(small, results_dir=tmp_path / "local", workers=2, progress=False)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        res = run_sweep(small, results_dir=tmp_path / "ray", executor="ray", progress=False)
        toy = run_sweep(_toy(), results_dir=tmp_path / "ray", executor="ray", progress=False)
    finally:
        ray.shutdown()
    assert res.n_run == 4 and toy.n_run == 6
    local = {k: v["record"] for k, v in runner.load_records(tmp_path / "local", "rq2-ray").items()}
    remote = {k: v["record"] for k, v in runner.load_records(tmp_path / "ray", "rq2-ray").items()}
    assert local == remote and len(local) == 4
    run_sweep(_toy(), results_dir=tmp_path / "local", workers=1, progress=False)
    assert _records(tmp_path / "local") == _records(tmp_path / "ray")


# --------------------------------------------------------------------------- packaged configs
def test_configs_ship_as_package_data():
    import tomllib

    pkg = runner.packaged_config_dir()
    assert pkg.parent == Path(runner.__file__).resolve().parent  # inside the installed package
    names = sorted(p.stem for p in pkg.glob("*.toml"))
    assert {"rq1", "rq2", "table2", "rq3_rotation", "rq3_grid"} <= set(names)
    root = Path(runner.__file__).resolve().parents[3]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["asymgeo"]
    shipped = {p for g in globs for p in (root / "src" / "asymgeo").glob(g)}
    assert set(pkg.glob("*.toml")) <= shipped  # the wheel's package-data globs pick them up


def test_default_config_dir_outside_a_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./experiments here: the packaged configs
    assert runner.default_config_dir() == runner.packaged_config_dir()
    assert load_experiment("rq2", quick=True).name == "rq2-quick"
    (tmp_path / "experiments").mkdir()  # a folder without configs does not shadow them
    assert runner.default_config_dir() == runner.packaged_config_dir()
    (tmp_path / "experiments" / "mine.toml").write_text(
        '[experiment]\nname = "mine"\ncell = "sweep_cells:toy_cell"\nmaster_seed = 1\n[grid]\nx = [1, 2]\n')
    assert runner.default_config_dir() == Path("experiments")
    assert load_experiment("mine").configs() == [{"master_seed": 1, "x": 1}, {"master_seed": 1, "x": 2}]


def test_local_configs_do_not_hide_the_packaged_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "mine.toml").write_text(
        (runner.packaged_config_dir() / "table2.toml").read_text().replace('name = "table2"', 'name = "mine"')
    )
    assert runner.load_experiment("mine").name == "mine"  # the checkout's own config
    assert runner.load_experiment("rq1").name == "rq1"  # still found in the package
    with pytest.raises(FileNotFoundError, match="mine.*rq1|rq1.*mine"):
        runner.load_experiment("nope")


# ------------------------------------------------------- cell files that are JSON but not a cell
@pytest.mark.parametrize("damage", ["empty record", "list", "edited record", "other cell", "no record", "no config"])
def test_a_cell_file_without_its_record_is_recomputed_and_named(tmp_path, caplog, damage):
    exp = _toy(xs=range(3))
    run_sweep(exp, results_dir=tmp_path, workers=1, progress=False)
    good = _records(tmp_path)
    victim = sorted((tmp_path / "toy" / "cells").glob("*.json"))[0]
    payload = json.loads(victim.read_text())
    if damage == "empty record":
        payload["record"] = {}
    elif damage == "list":
        payload = []
    elif damage == "edited record":
        key = next(iter(payload["record"]))
        payload["record"][key] = "tampered"
    elif damage == "other cell":
        payload["cell_id"] = "0" * 16
    elif damage == "no config":
        payload["config"] = "x=1"
    else:
        del payload["record"]
    victim.write_text(json.dumps(payload))
    with caplog.at_level("WARNING", logger="asymgeo.experiments.store"):
        assert victim.stem not in _records(tmp_path)
    assert any(str(victim) in r.getMessage() and "recomputed" in r.getMessage() for r in caplog.records)
    result = run_sweep(exp, results_dir=tmp_path, workers=1, progress=False)
    assert result.n_run == 1, "only the damaged cell runs again"
    assert _records(tmp_path) == good


def test_cell_files_from_before_the_digest_still_count(tmp_path):
    exp = _toy(xs=range(2))
    run_sweep(exp, results_dir=tmp_path, workers=1, progress=False)
    for f in (tmp_path / "toy" / "cells").glob("*.json"):
        payload = json.loads(f.read_text())
        del payload["record_sha256"]
        f.write_text(json.dumps(payload))
    assert len(_records(tmp_path)) == 2


def test_load_records_of_an_experiment_never_run_is_empty_and_ids_filter(tmp_path):
    assert runner.load_records(tmp_path, "toy") == {}
    exp = _toy(xs=range(3))
    run_sweep(exp, results_dir=tmp_path, workers=1, progress=False)
    every = runner.load_records(tmp_path, "toy")
    one = sorted(every)[1]
    assert list(runner.load_records(tmp_path, "toy", ids=[one])) == [one]


def test_consolidate_refuses_an_unknown_format_before_writing(tmp_path):
    from asymgeo.experiments.store import consolidate

    exp = _toy(xs=range(2))
    run_sweep(exp, results_dir=tmp_path, workers=1, progress=False)
    before = sorted(p.name for p in (tmp_path / "toy").iterdir())
    with pytest.raises(ValueError, match="fmt: expected 'parquet', 'csv' or 'auto', got 'xlsx'"):
        consolidate(tmp_path, exp, fmt="xlsx")
    assert sorted(p.name for p in (tmp_path / "toy").iterdir()) == before


def test_a_cell_that_returns_no_record_fails_naming_the_cell(tmp_path):
    exp = _toy(cell="sweep_cells:list_cell", xs=range(2))
    with pytest.raises(SweepError, match=r"2 of 2 cells failed.*cell sweep_cells:list_cell: expected a dict record, "
                                         r"got list"):
        run_sweep(exp, results_dir=tmp_path, workers=1, progress=False)
    assert runner.load_records(tmp_path, "toy") == {}


def test_ctrl_c_in_the_process_pool_keeps_finished_cells_and_resumes(tmp_path, monkeypatch):
    exp = _toy(cell="sweep_cells:flaky_cell", xs=range(8))
    monkeypatch.setenv("ASYMGEO_TEST_INTERRUPT_X", "6")
    with pytest.raises(KeyboardInterrupt):
        run_sweep(exp, results_dir=tmp_path, workers=2, progress=False)
    done = set(_records(tmp_path))
    assert len(done) < 8
    monkeypatch.delenv("ASYMGEO_TEST_INTERRUPT_X")
    res = run_sweep(exp, results_dir=tmp_path, workers=2, progress=False)
    assert (res.n_skipped, res.n_run) == (len(done), 8 - len(done))
    ref = tmp_path / "ref"
    run_sweep(_toy(cell="sweep_cells:flaky_cell", xs=range(8)), results_dir=ref, workers=1, progress=False)
    assert _records(tmp_path) == _records(ref)


@pytest.mark.xdist_group("ray")  # one Ray cluster at a time under xdist
def test_ray_executor_starts_and_stops_its_own_cluster_and_reports_a_failed_cell(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    monkeypatch.setenv("ASYMGEO_TEST_FAIL_X", "3")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    with pytest.raises(SweepError, match=r"1 of 6 cells failed.*simulated crash at x = 3"):
        run_sweep(_toy(cell="sweep_cells:flaky_cell"), results_dir=tmp_path, executor="ray", workers=2,
                  progress=False)
    assert not ray.is_initialized(), "the cluster it started is shut down"
    assert sorted(r["square"] for r in _records(tmp_path).values()) == [0, 1, 4, 16, 25]


def test_a_cell_that_is_not_callable_is_refused():
    from asymgeo.experiments.config import import_cell

    with pytest.raises(ValueError, match="cell 'sweep_cells:__doc__': not callable"):
        import_cell("sweep_cells:__doc__")
