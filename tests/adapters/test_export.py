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
    """A user's own folder is refused before any work, with or without overwrite; an earlier
    export needs overwrite=True, and then it is replaced only by a complete new export."""
    ad = Adapter.from_maps(np.random.default_rng(0).normal(0, 0.2, size=(2, 384)))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    for overwrite in (False, True):
        with pytest.raises(ValueError, match="not a sentence-transformers model folder"):
            export_sentence_transformers(ad, "all-MiniLM-L6-v2", mine, overwrite=overwrite)
    assert (mine / "notes.txt").read_text() == "keep me" and sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    earlier = tmp_path / "model"
    earlier.mkdir()
    (earlier / "modules.json").write_text("[]")
    with pytest.raises(ValueError, match="--overwrite"):
        export_sentence_transformers(ad, "all-MiniLM-L6-v2", earlier)
    assert (earlier / "modules.json").read_text() == "[]"
    out = export_sentence_transformers(ad, "all-MiniLM-L6-v2", earlier, overwrite=True)
    assert (out / "modules.json").read_text() != "[]" and (out / "config_sentence_transformers.json").is_file()
