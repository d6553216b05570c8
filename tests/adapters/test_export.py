"""Tests of asymgeo.adapters.export: a sentence-transformers folder whose encode_query /
encode_document dot products equal the adapter's similarity (offline MiniLM)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from asymgeo.adapters import Adapter
from asymgeo.adapters.export import export_sentence_transformers
from asymgeo.data.encoders import get_encoder, load_encoder

QUERIES = ["what causes fever in children", "protein folding kinetics", "vitamin D and bone density"]
DOCS = ["Fever in children is usually caused by viral infection.", "Proteins fold into native structures.",
        "Bone mineral density rises with vitamin D supplementation.", "An unrelated sentence about trains."]


@pytest.fixture(scope="module")
def base_embeddings():
    enc = load_encoder("all-MiniLM-L6-v2", device="cpu")
    return enc.encode(QUERIES), enc.encode(DOCS)


@pytest.mark.slow
@pytest.mark.parametrize("form, shared", [("augmented", False), ("projection", True)])
def test_export_dot_products_equal_similarity(tmp_path, base_embeddings, form, shared):
    from sentence_transformers import SentenceTransformer

    rng = np.random.default_rng(7)
    A = rng.normal(0, 0.2, size=(4, 384))
    B = A if shared else rng.normal(0, 0.2, size=(4, 384))
    ad = Adapter.from_maps(A, None if shared else B, form=form)
    out = export_sentence_transformers(ad, "all-MiniLM-L6-v2", tmp_path / "model")
    model = SentenceTransformer(str(out), device="cpu")
    q, d = model.encode_query(QUERIES), model.encode_document(DOCS)
    X, Y = base_embeddings
    np.testing.assert_allclose(q @ d.T, ad.similarity(X, Y), atol=1e-5)
    assert q.shape[1] == (384 if form == "augmented" else 4)
    if form == "augmented":  # the document side is the frozen encoder: existing indexes stay valid
        np.testing.assert_allclose(d, Y, atol=1e-5)
    cfg = json.loads((out / "config_sentence_transformers.json").read_text())
    spec = get_encoder("all-MiniLM-L6-v2")
    assert cfg["prompts"] == {"query": spec.query_prefix, "document": spec.document_prefix}


def test_export_refuses_a_dimension_mismatch(tmp_path):
    ad = Adapter.from_maps(np.ones((2, 10)))
    with pytest.raises(ValueError, match="384 dimensions"):
        export_sentence_transformers(ad, "all-MiniLM-L6-v2", tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_export_never_replaces_a_folder_that_is_not_an_earlier_export(tmp_path):
    """A user's folder, a user's own sentence-transformers model, or an earlier export with a
    user's file in it are refused before any work, with or without overwrite; an earlier
    asymgeo export needs overwrite=True, and then it is replaced only by a complete new one."""
    ad = Adapter.from_maps(np.random.default_rng(0).normal(0, 0.2, size=(2, 384)))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    theirs = tmp_path / "their-model"
    theirs.mkdir()
    (theirs / "modules.json").write_text("[]")
    for overwrite in (False, True):
        with pytest.raises(ValueError, match="not an asymgeo export"):
            export_sentence_transformers(ad, "all-MiniLM-L6-v2", mine, overwrite=overwrite)
        with pytest.raises(ValueError, match="asymgeo did not export"):
            export_sentence_transformers(ad, "all-MiniLM-L6-v2", theirs, overwrite=overwrite)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"] and (mine / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in theirs.iterdir()) == ["modules.json"]
    earlier = export_sentence_transformers(ad, "all-MiniLM-L6-v2", tmp_path / "model")
    before = (earlier / "modules.json").read_bytes()
    with pytest.raises(ValueError, match="--overwrite"):
        export_sentence_transformers(ad, "all-MiniLM-L6-v2", earlier)
    (earlier / "NOTES.md").write_text("mine")
    with pytest.raises(ValueError, match=r"files asymgeo did not write \(NOTES.md\)"):
        export_sentence_transformers(ad, "all-MiniLM-L6-v2", earlier, overwrite=True)
    assert (earlier / "NOTES.md").read_text() == "mine"
    (earlier / "NOTES.md").unlink()
    out = export_sentence_transformers(ad, "all-MiniLM-L6-v2", earlier, overwrite=True)
    assert (out / "modules.json").read_bytes() == before and (out / "config_sentence_transformers.json").is_file()
    manifest = json.loads((out / "asymgeo_export.json").read_text())
    assert "modules.json" in manifest["files"] and manifest["form"] == "augmented"


def test_export_refuses_a_folder_inside_an_adapter_folder(tmp_path):
    from asymgeo import save_adapter

    ad = Adapter.from_maps(np.random.default_rng(0).normal(0, 0.2, size=(2, 384)))
    folder = save_adapter(ad, tmp_path / "adapter")
    with pytest.raises(ValueError, match="inside the adapter folder"):
        export_sentence_transformers(ad, "all-MiniLM-L6-v2", folder / "model")
    assert sorted(p.name for p in folder.iterdir()) == ["adapter.json", "adapter.safetensors"]


def test_interrupted_export_keeps_the_old_model_at_out(tmp_path, monkeypatch):
    """Ctrl-C between moving the old export aside and moving the new one in: the old one is back."""
    import os

    import asymgeo._atomic as atomic

    ad = Adapter.from_maps(np.random.default_rng(0).normal(0, 0.2, size=(2, 384)))
    out = export_sentence_transformers(ad, "all-MiniLM-L6-v2", tmp_path / "model")
    files = {f: (out / f).read_bytes() for f in ("modules.json", "asymgeo_export.json")}
    real, calls = os.replace, []

    def interrupted(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:  # the new folder's move into place
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export_sentence_transformers(ad, "all-MiniLM-L6-v2", out, overwrite=True)
    monkeypatch.undo()
    assert len(calls) == 3  # aside, (interrupted) in, back
    assert {f: (out / f).read_bytes() for f in files} == files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"], "no hidden folder left behind"


@pytest.mark.slow
def test_export_holds_one_copy_of_the_base_weights(tmp_path, base_embeddings):
    """Both routes share the base encoder: the folder's weights are about the base model's size,
    it loads with a plain SentenceTransformer(path), and the routes still differ where they should."""
    from pathlib import Path

    from sentence_transformers import SentenceTransformer

    rng = np.random.default_rng(1)
    ad = Adapter.from_maps(rng.normal(0, 0.2, size=(4, 384)), rng.normal(0, 0.2, size=(4, 384)), form="projection")
    out = export_sentence_transformers(ad, "all-MiniLM-L6-v2", tmp_path / "model")
    weights = sorted(out.rglob("*.safetensors"))
    base = sum(f.stat().st_size for f in Path(get_encoder("all-MiniLM-L6-v2").model_path()).rglob("*.safetensors"))
    total = sum(f.stat().st_size for f in weights)
    assert sum("Transformer" in str(f) for f in weights) == 1, weights
    assert total < 1.05 * base, (total, base)
    # what the pages say (#38: docs/adapters.md said two copies): one copy, the figure the folder measures
    import re

    root = Path(__file__).resolve().parents[2]
    for page in ("docs/adapters.md", "docs/reliability.md"):
        text = " ".join((root / page).read_text().split())
        quoted = re.search(r"(?:one copy of the base weights|saves a module once\)): (\d+) MB for MiniLM", text)
        assert quoted and int(quoted.group(1)) == round(total / 1e6), (page, total)
    model = SentenceTransformer(str(out), device="cpu")
    X, Y = base_embeddings
    np.testing.assert_allclose(model.encode_query(QUERIES) @ model.encode_document(DOCS).T, ad.similarity(X, Y),
                               atol=1e-5)


def test_export_refuses_a_file_a_damaged_manifest_and_an_unopenable_base(tmp_path, monkeypatch):
    ad = Adapter.from_maps(np.random.default_rng(0).normal(0, 0.2, size=(2, 384)))
    f = tmp_path / "a-file"
    f.write_text("user data")
    with pytest.raises(ValueError, match=f"out: {f} exists and is not a folder"):
        export_sentence_transformers(ad, "all-MiniLM-L6-v2", f)
    assert f.read_text() == "user data"
    earlier = export_sentence_transformers(ad, "all-MiniLM-L6-v2", tmp_path / "model")
    (earlier / "asymgeo_export.json").write_text("{oops")
    before = {p.name: p.stat().st_size for p in earlier.iterdir()}
    with pytest.raises(ValueError, match=r"asymgeo_export.json is damaged; refusing to replace"):
        export_sentence_transformers(ad, "all-MiniLM-L6-v2", earlier, overwrite=True)
    assert {p.name: p.stat().st_size for p in earlier.iterdir()} == before
    # a base model that cannot be opened offline: named, with what to do, and nothing written
    with pytest.raises(FileNotFoundError, match=r"base: could not open .* offline .*pass --base a local model folder"):
        export_sentence_transformers(ad, str(tmp_path / "no-such-model"), tmp_path / "out2")
    assert not (tmp_path / "out2").exists()


def test_export_without_sentence_transformers_says_which_extra(tmp_path, monkeypatch):
    import sys

    ad = Adapter.from_maps(np.random.default_rng(0).normal(0, 0.2, size=(2, 384)))
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(ImportError, match=r"exporting to sentence-transformers needs it: pip install asymgeo\[encode\]"):
        export_sentence_transformers(ad, "all-MiniLM-L6-v2", tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_a_query_only_adapter_with_memory_exports_its_map_and_says_the_memory_stays(tmp_path, base_embeddings):
    from sentence_transformers import SentenceTransformer

    from asymgeo.adapters.export import memory_note
    from asymgeo.adapters.memory import DocumentMemory
    from asymgeo.retrieval.memory import memory_table

    rng = np.random.default_rng(3)
    ad = Adapter.from_maps(rng.normal(0, 0.05, size=(384, 384)), np.eye(384), form="augmented", geometry="query")
    X, Y = base_embeddings
    ad.memory_ = DocumentMemory.from_table(memory_table(X[:2], [{0}, {1, 2}]), 0.3, 0.5)
    out = export_sentence_transformers(ad, "all-MiniLM-L6-v2", tmp_path / "model")
    model = SentenceTransformer(str(out), device="cpu")
    q, d = model.encode_query(QUERIES), model.encode_document(DOCS)
    np.testing.assert_allclose(q @ d.T, X.astype(np.float64) @ ad.operator_ @ Y.T.astype(np.float64), atol=1e-4)
    np.testing.assert_allclose(d, Y, atol=1e-5)  # documents untouched: the frozen index serves
    card = (out / "README.md").read_text()
    assert "## The document memory is not in this model" in card and memory_note(ad) in card
    assert "gated boosts of 3 remembered documents" in memory_note(ad)
    assert memory_note(Adapter.from_maps(rng.normal(size=(2, 384)), form="augmented")) is None
