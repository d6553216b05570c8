"""Where mined hard negatives are written (issue #39, round 3): ``--triples-dir``, then
``$ASYMGEO_TRIPLES_DIR``, then beside a writable embedding cache, then ``~/.cache``; each new
file is announced in one line on stderr."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from beir_fixtures import doc, query, write_beir

from asymgeo.cli import main
from asymgeo.data import load_triples, write_embeddings


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A 30-document dataset with train qrels and a writable cache; HOME in tmp_path."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ids = [f"d{i}" for i in range(30)]
    qs = [f"q{i}" for i in range(20)]
    root = write_beir(tmp_path / "data" / "toy", [doc(d) for d in ids], [query(q) for q in qs],
                      {"train": [(q, f"d{i}", 1) for i, q in enumerate(qs[:15])],
                       "test": [(q, f"d{i}", 1) for i, q in enumerate(qs[15:])]})
    rng = np.random.default_rng(0)
    C, Q = rng.standard_normal((30, 6)), rng.standard_normal((20, 6))
    write_embeddings(tmp_path / "cache" / "toy" / "enc", C / np.linalg.norm(C, axis=1, keepdims=True), ids,
                     Q / np.linalg.norm(Q, axis=1, keepdims=True), qs, {"normalised": True})
    return root, tmp_path / "cache"


def _npz(folder):
    return sorted(p.name for p in folder.rglob("*.npz")) if folder.exists() else []


def test_the_variable_beats_a_writable_cache_folder(toy, tmp_path, monkeypatch, caplog):
    root, cache = toy
    env = tmp_path / "env-triples"
    monkeypatch.setenv("ASYMGEO_TRIPLES_DIR", str(env))
    with caplog.at_level(logging.INFO, logger="asymgeo"):
        load_triples(root, "enc", "train", cache_dir=cache, k=2)
    (name,) = _npz(env)
    assert _npz(cache) == [] and _npz(tmp_path / "home") == []
    notes = [r.getMessage() for r in caplog.records if getattr(r, "notice", False)]
    assert notes == [f"mined hard negatives cached in {env / name}"]


def test_nothing_given_writes_beside_the_cache(toy, tmp_path, monkeypatch):
    root, cache = toy
    monkeypatch.delenv("ASYMGEO_TRIPLES_DIR", raising=False)
    load_triples(root, "enc", "train", cache_dir=cache, k=2)
    assert len(_npz(cache / "toy" / "enc" / "triples")) == 1 and _npz(tmp_path / "home") == []


def test_triples_dir_beats_the_variable_and_the_cache_folder(toy, tmp_path, monkeypatch, capsys):
    root, cache = toy
    env, opt = tmp_path / "env-triples", tmp_path / "opt-triples"
    monkeypatch.setenv("ASYMGEO_TRIPLES_DIR", str(env))
    argv = ["select", "toy", "--encoder", "enc", "--rank", "1", "--n-splits", "2", "--data-dir", str(root.parent),
            "--cache-dir", str(cache), "--triples-dir", str(opt)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    (name,) = _npz(opt)
    assert _npz(env) == [] and _npz(cache) == [] and _npz(tmp_path / "home") == []
    assert err.strip().splitlines() == [f"asymgeo select: note: mined hard negatives cached in {opt / name}"]
    assert main(argv) == 0  # read back: nothing new is written, nothing is said
    assert capsys.readouterr().err == "" and _npz(opt) == [name]
    import os

    assert os.environ["ASYMGEO_TRIPLES_DIR"] == str(env)  # the option applies to its command only


def test_fit_takes_triples_dir_too(toy, tmp_path, monkeypatch, capsys):
    import asymgeo.adapters.workflow as wf

    root, cache = toy
    opt = tmp_path / "opt-triples"

    def mining_only(dataset, encoder, **kw):  # the part of fit_adapter that mines, then stop
        load_triples(dataset, encoder, "train", data_dir=kw["data_dir"], cache_dir=kw["cache_dir"], k=2)
        raise ValueError("stopped after mining")

    monkeypatch.setattr(wf, "fit_adapter", mining_only)
    code = main(["fit", "toy", "--encoder", "enc", "--geometry", "dual", "--out", str(tmp_path / "ad"),
                 "--data-dir", str(root.parent), "--cache-dir", str(cache), "--triples-dir", str(opt)])
    err = capsys.readouterr().err
    (name,) = _npz(opt)
    assert code == 2 and _npz(cache) == []
    assert err.strip().splitlines() == ["asymgeo fit: error: stopped after mining"]  # an error stays one line


def test_an_unwritable_chosen_folder_is_said_and_nothing_lands_elsewhere(toy, tmp_path, monkeypatch, caplog):
    root, cache = toy
    blocker = tmp_path / "a-file"
    blocker.write_text("user data")
    monkeypatch.setenv("ASYMGEO_TRIPLES_DIR", str(blocker / "sub"))
    with caplog.at_level(logging.WARNING, logger="asymgeo"):
        load_triples(root, "enc", "train", cache_dir=cache, k=2)
    assert _npz(cache) == [] and _npz(tmp_path / "home") == [] and blocker.read_text() == "user data"
    (msg,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert msg.startswith(f"{blocker / 'sub'} (ASYMGEO_TRIPLES_DIR): cannot write the mined hard negatives there")


def test_a_triples_dir_that_is_a_file_is_refused_before_any_work(tmp_path, capsys):
    from pathlib import Path

    shared = Path(__file__).resolve().parents[2] / ".." / "shared"
    afile = tmp_path / "afile"
    afile.write_text("mine")
    args = ["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4", "--data-dir", str(shared / "data"),
            "--cache-dir", str(shared / "embeddings"), "--triples-dir", str(afile)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"--triples-dir: {afile} is a file, not a folder; nothing was computed" in err and "warning" not in err
    assert afile.read_text() == "mine"
