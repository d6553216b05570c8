"""Tests of asymgeo.adapters.io: save/load (safetensors + JSON), atomic writes, validation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from asymgeo import load_adapter, save_adapter
from asymgeo.adapters import Adapter, check_compatible
from asymgeo.adapters.io import CONFIG_FILE, WEIGHTS_FILE


@pytest.fixture
def fitted(problem):
    return Adapter(geometry="dual", rank=3, epochs=2, batch_size=16, learning_rates=(1e-2,), seed=4).fit(
        problem.X, problem.pos, problem.corpus, hard_negative_rows=problem.hard,
        validation_queries=problem.V, validation_relevance=problem.table)


def test_round_trip(tmp_path, fitted, problem):
    out = save_adapter(fitted, tmp_path / "ad", encoder="all-MiniLM-L6-v2", dataset="toy",
                       metrics={"test_ndcg@10": 0.5})
    back = load_adapter(out)
    np.testing.assert_array_equal(back.operator_, fitted.operator_)
    np.testing.assert_array_equal(back.query_map_, fitted.query_map_)
    np.testing.assert_array_equal(back.doc_map_, fitted.doc_map_)
    Y = problem.corpus[:5]
    np.testing.assert_array_equal(back.similarity(problem.V, Y), fitted.similarity(problem.V, Y))
    assert (back.geometry_, back.form, back.rank) == ("dual", "augmented", 3)
    assert back.learning_rate_ == fitted.learning_rate_ and back.best_epoch_ == fitted.best_epoch_
    assert back.history_ == fitted.history_
    cfg = json.loads((out / CONFIG_FILE).read_text())
    assert cfg["format_version"] == 1 and cfg["dimension"] == problem.X.shape[1]
    assert cfg["encoder"] == "all-MiniLM-L6-v2" and cfg["dataset"] == "toy"
    assert cfg["training"]["epochs"] == 2
    assert json.loads((out / "metrics.json").read_text()) == {"test_ndcg@10": 0.5}


def test_shared_stores_one_map(tmp_path, rng):
    ad = Adapter.from_maps(rng.normal(size=(2, 6)), form="projection")
    back = load_adapter(save_adapter(ad, tmp_path / "s"))
    assert back.geometry_ == "shared" and back.form == "projection"
    np.testing.assert_array_equal(back.operator_, ad.operator_)


def _saved(tmp_path, rng):
    return save_adapter(Adapter.from_maps(rng.normal(size=(2, 6)), rng.normal(size=(2, 6))), tmp_path / "ad")


def test_truncated_weights(tmp_path, rng):
    out = _saved(tmp_path, rng)
    data = (out / WEIGHTS_FILE).read_bytes()
    (out / WEIGHTS_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=f"{WEIGHTS_FILE}: contents do not match"):
        load_adapter(out)


def test_edited_weights(tmp_path, rng):
    out = _saved(tmp_path, rng)
    data = bytearray((out / WEIGHTS_FILE).read_bytes())
    data[-3] ^= 0xFF
    (out / WEIGHTS_FILE).write_bytes(bytes(data))
    with pytest.raises(ValueError, match="digest"):
        load_adapter(out)


def _rewrite(out, tensors, **cfg_changes):
    import hashlib

    from safetensors.numpy import save

    data = save(tensors)
    (out / WEIGHTS_FILE).write_bytes(data)
    cfg = json.loads((out / CONFIG_FILE).read_text())
    cfg["weights_sha256"] = hashlib.sha256(data).hexdigest()
    cfg.update(cfg_changes)
    (out / CONFIG_FILE).write_text(json.dumps(cfg))


@pytest.mark.parametrize("tensors, changes, needle", [
    ({"query_map": np.zeros((2, 5)), "doc_map": np.zeros((2, 5))}, {}, "shape"),
    ({"query_map": np.zeros((2, 6), np.float32), "doc_map": np.zeros((2, 6), np.float32)}, {}, "dtype"),
    ({"query_map": np.zeros((2, 6))}, {}, "do not match the dual geometry"),
    ({"query_map": np.full((2, 6), np.nan), "doc_map": np.zeros((2, 6))}, {}, "NaN"),
    ({"query_map": np.zeros((2, 6)), "doc_map": np.zeros((2, 6))}, {"format_version": 99}, "format version 99"),
    ({"query_map": np.zeros((2, 6)), "doc_map": np.zeros((2, 6))}, {"geometry": "both"}, "geometry"),
])
def test_consistent_but_wrong_files_are_refused(tmp_path, rng, tensors, changes, needle):
    out = _saved(tmp_path, rng)
    _rewrite(out, tensors, **changes)
    with pytest.raises(ValueError, match=needle):
        load_adapter(out)


def test_damaged_safetensors_with_matching_digest(tmp_path, rng):
    import hashlib

    out = _saved(tmp_path, rng)
    junk = b"\x00\x01not safetensors"
    (out / WEIGHTS_FILE).write_bytes(junk)
    cfg = json.loads((out / CONFIG_FILE).read_text())
    cfg["weights_sha256"] = hashlib.sha256(junk).hexdigest()
    (out / CONFIG_FILE).write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        load_adapter(out)


def test_missing_files(tmp_path, rng):
    with pytest.raises(FileNotFoundError):
        load_adapter(tmp_path / "nothing")
    out = _saved(tmp_path, rng)
    (out / CONFIG_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=CONFIG_FILE):
        load_adapter(out)
    (out / CONFIG_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_adapter(out)


def test_interrupted_save_keeps_the_old_adapter(tmp_path, rng, monkeypatch):
    out = _saved(tmp_path, rng)
    before = {f: (out / f).read_bytes() for f in (WEIGHTS_FILE, CONFIG_FILE)}
    new = Adapter.from_maps(rng.normal(size=(2, 6)), rng.normal(size=(2, 6)))
    real_replace = os.replace
    calls = []

    def boom(src, dst):
        # interrupted once, after the old adapter was moved aside and before the new one moved in
        if str(dst) == str(out) and not calls:
            calls.append(src)
            raise KeyboardInterrupt
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        save_adapter(new, out)
    monkeypatch.setattr(os, "replace", real_replace)
    assert {f: (out / f).read_bytes() for f in (WEIGHTS_FILE, CONFIG_FILE)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ad"]  # no temporary folders left
    # a later save replaces it completely
    save_adapter(new, out)
    np.testing.assert_array_equal(load_adapter(out).operator_, new.operator_)


def test_refuses_to_replace_a_user_folder_or_file(tmp_path, rng):
    ad = Adapter.from_maps(rng.normal(size=(2, 6)))
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not an asymgeo adapter"):
        save_adapter(ad, folder)
    assert (folder / "notes.txt").read_text() == "keep me"
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        save_adapter(ad, f)


def test_unfitted_adapter_cannot_be_saved(tmp_path):
    with pytest.raises(ValueError, match="not fitted"):
        save_adapter(Adapter(), tmp_path / "x")


def test_check_compatible(tmp_path, rng):
    out = save_adapter(Adapter.from_maps(rng.normal(size=(2, 6))), tmp_path / "a", encoder="all-MiniLM-L6-v2")
    ad = load_adapter(out)
    check_compatible(ad, 6, encoder="minilm")  # alias of the same encoder
    with pytest.raises(ValueError, match="dimension 6 does not match"):
        check_compatible(ad, 768, source=out)
    with pytest.raises(ValueError, match="trained on 'all-MiniLM-L6-v2'"):
        check_compatible(ad, 6, encoder="all-mpnet-base-v2")


def test_another_tools_adapter_folder_is_never_replaced(tmp_path, rng):
    """A PEFT/LoRA folder holds an ``adapter.json`` too: it is refused, and nothing in it changes."""
    ad = Adapter.from_maps(rng.normal(size=(2, 6)))
    lora = tmp_path / "lora"
    lora.mkdir()
    files = {"adapter.json": '{"peft_type": "LORA", "r": 8}', "weights.bin": "w", "README.md": "r"}
    for name, text in files.items():
        (lora / name).write_text(text)
    with pytest.raises(ValueError, match=r"another tool's \(peft_type 'LORA'\)"):
        save_adapter(ad, lora)
    assert {f.name: f.read_text() for f in lora.iterdir()} == files
    (lora / "adapter.json").write_text("{not json")
    with pytest.raises(ValueError, match="not readable JSON"):
        save_adapter(ad, lora)


def test_refit_into_an_adapter_folder_with_a_users_file_keeps_the_file(tmp_path, rng):
    ad = Adapter.from_maps(rng.normal(size=(2, 6)))
    out = save_adapter(ad, tmp_path / "ad", metrics={"x": 1})
    (out / "NOTES.md").write_text("my notes")
    weights = (out / WEIGHTS_FILE).read_bytes()
    with pytest.raises(ValueError, match=r"files asymgeo did not write \(NOTES.md\)"):
        save_adapter(Adapter.from_maps(rng.normal(size=(2, 6))), out)
    assert (out / "NOTES.md").read_text() == "my notes" and (out / WEIGHTS_FILE).read_bytes() == weights
    (out / "NOTES.md").unlink()
    save_adapter(Adapter.from_maps(rng.normal(size=(2, 6))), out)  # only asymgeo's files: replaced
    assert (out / WEIGHTS_FILE).read_bytes() != weights


def test_saved_adapter_keeps_the_mode_of_the_folder_it_replaces(tmp_path, rng):
    ad = Adapter.from_maps(rng.normal(size=(2, 6)))
    mask = os.umask(0o022)
    try:
        out = save_adapter(ad, tmp_path / "ad")
        assert out.stat().st_mode & 0o777 == 0o755, "umask default, not mkdtemp's 0700"
        os.chmod(out, 0o750)
        save_adapter(ad, out)
        assert out.stat().st_mode & 0o777 == 0o750
    finally:
        os.umask(mask)


def test_interrupted_save_keeps_the_old_adapter_at_the_second_rename(tmp_path, rng, monkeypatch):
    import asymgeo._atomic as atomic

    out = save_adapter(Adapter.from_maps(rng.normal(size=(2, 6))), tmp_path / "ad")
    before = (out / WEIGHTS_FILE).read_bytes()
    real, calls = os.replace, []

    def interrupted(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_adapter(Adapter.from_maps(rng.normal(size=(2, 6))), out)
    monkeypatch.undo()
    assert (out / WEIGHTS_FILE).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ad"]


def test_unwritable_destination_is_named_before_any_work(tmp_path, monkeypatch):
    """The nearest existing ancestor is asked (``os.access``; faked here, as root may write anywhere)."""
    import asymgeo._atomic as atomic
    from asymgeo.adapters.io import check_output_folder

    locked = tmp_path / "locked"
    locked.mkdir()
    asked = []
    monkeypatch.setattr(atomic.os, "access", lambda path, mode: asked.append(Path(path)) or Path(path) != locked)
    with pytest.raises(PermissionError, match=r"out: .*locked/new/ad: cannot write in .*locked \(permission"):
        check_output_folder(locked / "new" / "ad")
    assert asked == [locked]
    check_output_folder(tmp_path / "elsewhere")  # a writable parent passes
    with pytest.raises(ValueError, match="out: empty path"):
        check_output_folder("")


@pytest.mark.parametrize("key, value, match", [
    ("form", "projection", "form 'augmented' disagrees with training.form 'projection'"),
    ("rank", 5, "rank 2 disagrees with training.rank 5"),
    ("geometry", "dual", "geometry 'shared' disagrees with training.geometry 'dual'"),
])
def test_edited_decision_fields_are_refused(tmp_path, rng, key, value, match):
    out = save_adapter(Adapter.from_maps(rng.normal(size=(2, 6))), tmp_path / "ad")
    cfg = json.loads((out / CONFIG_FILE).read_text())
    cfg["training"].update(form=cfg["form"], rank=cfg["rank"], geometry=cfg["geometry"])
    (out / CONFIG_FILE).write_text(json.dumps(cfg))
    load_adapter(out)  # consistent: loads
    cfg["training"][key] = value
    (out / CONFIG_FILE).write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=match):
        load_adapter(out)


def test_non_finite_metrics_are_written_as_null(tmp_path, rng):
    """NaN anywhere in the metrics (a float, a numpy scalar, inside an array) becomes JSON null."""
    out = save_adapter(Adapter.from_maps(rng.normal(size=(2, 6))), tmp_path / "ad",
                       metrics={"a": float("nan"), "b": np.float64("inf"), "c": np.array([1.0, np.nan]),
                                "d": {"e": [np.float32(2.0), float("-inf")]}})
    text = (out / "metrics.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"a": None, "b": None, "c": [1.0, None], "d": {"e": [2.0, None]}}
    assert load_adapter(out).metadata_["metrics"]["c"] == [1.0, None]


def test_export_through_the_command_line(tmp_path, rng, capsys):
    from asymgeo.cli import main

    ad = save_adapter(Adapter.from_maps(rng.normal(0, 0.1, size=(2, 384))), tmp_path / "ad",
                      encoder="all-MiniLM-L6-v2")
    assert main(["export", str(ad), "--out", str(tmp_path / "model")]) == 0
    assert "wrote" in capsys.readouterr().out
    assert (tmp_path / "model" / "modules.json").is_file() and (tmp_path / "model" / "asymgeo_export.json").is_file()
    assert main(["export", str(ad), "--out", str(tmp_path / "model")]) == 2  # an earlier export needs --overwrite
    assert "--overwrite" in capsys.readouterr().err
    assert main(["export", str(ad), "--out", str(tmp_path / "model"), "--overwrite"]) == 0


# ------------------------------------------------------------------ every refusal of a damaged adapter.json (issue #19)
def _edit_config(out, edit):
    cfg = json.loads((out / CONFIG_FILE).read_text())
    edit(cfg)
    (out / CONFIG_FILE).write_text(json.dumps(cfg))


@pytest.mark.parametrize("edit, message", [
    (lambda c: c.update(format="other"), r"not an asymgeo adapter config \(format 'other'\)"),
    (lambda c: c.pop("weights_sha256"), "missing key 'weights_sha256'"),
    (lambda c: c.pop("dimension"), "missing key 'dimension'"),
    (lambda c: c.update(form="full"), "form 'full' is not one of"),
    (lambda c: c.update(geometry="both"), "geometry 'both' is not 'shared', 'dual' or 'query'"),
    (lambda c: c.update(rank=7), r"rank 7 and dimension 6 are not integers with 1 <= rank <= dimension"),
    (lambda c: c.update(rank="2"), r"rank '2' and dimension 6 are not integers"),
    (lambda c: c.update(training=[1]), r"'training' is not an object \(got list\)"),
    (lambda c: c.update(training={"geometry": "auto"}, fitted={"selection": {"choice": "shared"}}),
     "geometry 'dual' disagrees with the recorded selection 'shared'"),
])
def test_every_damaged_config_field_is_refused_naming_it(tmp_path, rng, edit, message):
    out = _saved(tmp_path, rng)
    load_adapter(out)
    _edit_config(out, edit)
    with pytest.raises(ValueError, match=message) as err:
        load_adapter(out)
    assert str(err.value).startswith(str(out / CONFIG_FILE))


def test_an_auto_adapter_whose_selection_agrees_loads(tmp_path, rng):
    out = save_adapter(Adapter.from_maps(rng.normal(size=(2, 6)), rng.normal(size=(2, 6))), tmp_path / "ad")
    _edit_config(out, lambda c: c.update(training={"geometry": "auto"}, fitted={"selection": {"choice": "dual"}}))
    assert load_adapter(out).geometry_ == "dual"


def test_a_folder_with_a_foreign_adapter_json_is_never_replaced(tmp_path, rng):
    ad = Adapter.from_maps(rng.normal(size=(2, 6)))
    other = tmp_path / "other"
    other.mkdir()
    (other / "adapter.json").write_text('{"format": "something-else"}')
    with pytest.raises(ValueError, match=r"is not an asymgeo adapter's \(format 'something-else'\)"):
        save_adapter(ad, other)
    assert (other / "adapter.json").read_text() == '{"format": "something-else"}'


def test_save_adapter_refuses_what_is_not_an_adapter(tmp_path):
    with pytest.raises(TypeError, match="adapter: expected an asymgeo.adapters.Adapter, got dict"):
        save_adapter({"operator": 1}, tmp_path / "ad")
    assert not (tmp_path / "ad").exists()


def test_check_compatible_compares_unknown_encoder_names_as_given(rng):
    ad = Adapter.from_maps(rng.normal(size=(2, 6)))
    ad.metadata_ = {"encoder": "my-own-encoder"}
    check_compatible(ad, 6, encoder="my-own-encoder")  # not in the registry: compared as written
    with pytest.raises(ValueError, match="adapter was trained on 'my-own-encoder' embeddings, not 'other-encoder'"):
        check_compatible(ad, 6, encoder="other-encoder")
