"""Issue #39 (round 3): a truncated experiment config that still parses.

Before, every cell failed with a bare ``KeyError: 'variant'``; now the loader names the
file and the missing keys once, before any cell runs: a config for a packaged cell must set
every key the cell reads (``config["key"]``) that the packaged configs of that cell set."""

from __future__ import annotations

import tomllib

import pytest

from asymgeo.cli import main
from asymgeo.experiments import runner
from asymgeo.experiments.config import load_experiment, packaged_config_dir


def _truncated(tmp_path, name, cut):
    """The packaged ``name.toml`` cut before line ``cut`` (an int) or before the first line starting with it."""
    lines = (packaged_config_dir() / f"{name}.toml").read_text().splitlines(keepends=True)
    if isinstance(cut, str):
        cut = next(i for i, ln in enumerate(lines) if ln.startswith(cut))
    folder = tmp_path / "configs"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text("".join(lines[:cut]))
    tomllib.loads(path.read_text())  # it still parses
    return path


@pytest.mark.parametrize("name, cut, missing", [
    ("generalisation", "variant =", "'variant'"),
    ("generalisation", 16, "'data_dir', 'cache_dir', 'rank', 'epochs'"),
    ("table2", 14, "'rank', 'sigma', 'shared_signal', 'risk_draws', 'sure_draws'"),
    ("table1", 16, "'n_splits'"),
])
def test_reproduce_names_the_file_and_the_missing_keys_before_any_cell(tmp_path, capsys, monkeypatch, name, cut,
                                                                       missing):
    path = _truncated(tmp_path, name, cut)
    monkeypatch.setattr(runner, "run_cells", lambda *a, **k: pytest.fail("a cell ran"))
    results = tmp_path / "results"
    rc = main(["reproduce", name, "--config-dir", str(path.parent), "--quick", "--results-dir", str(results),
               "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"asymgeo reproduce: error: {path}: missing key"), err
    assert missing in err, err
    assert "KeyError" not in err and not results.exists()


def test_every_shipped_config_has_its_keys():
    from pathlib import Path

    checkout = Path(__file__).resolve().parents[2] / "experiments"
    for folder in (packaged_config_dir(), checkout):
        for toml in sorted(folder.glob("*.toml")):
            load_experiment(toml)
            load_experiment(toml, quick=True)


def test_a_config_of_an_unknown_cell_is_not_checked(tmp_path):
    toml = tmp_path / "own.toml"
    toml.write_text('[experiment]\nname = "own"\ncell = "sweep_cells:toy_cell"\nmaster_seed = 1\n[grid]\nx = [1]\n')
    assert load_experiment(toml).grid == {"x": [1]}


def test_run_sweep_checks_an_experiment_built_by_hand(tmp_path):
    import dataclasses

    exp = load_experiment("table2", quick=True, config_dir=packaged_config_dir())
    fixed = {k: v for k, v in exp.fixed.items() if k != "sigma"}
    with pytest.raises(ValueError, match=r"table2.toml: missing key 'sigma'"):
        runner.run_sweep(dataclasses.replace(exp, fixed=fixed), results_dir=tmp_path, progress=False)
    assert not (tmp_path / exp.name).exists()
