"""A cache folder named for one encoder but made by another is refused by every entry point
(issue #39, round 3): ``meta.json`` records the model, its dimension and its conventions, and
each is compared with the encoder asked for; legacy caches without them keep loading."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from asymgeo.cli import main
from asymgeo.data import load_beir, load_embeddings, load_triples, write_embeddings

MINILM, MPNET = "all-MiniLM-L6-v2", "all-mpnet-base-v2"


@pytest.fixture(scope="module")
def misnamed(shared_dir, tmp_path_factory):
    """The shared MPNet cache of SciFact copied into a folder named all-MiniLM-L6-v2."""
    root = tmp_path_factory.mktemp("misnamed")
    dest = root / "scifact" / MINILM
    shutil.copytree(shared_dir / "embeddings" / "scifact" / MPNET, dest)
    for p in (dest, *dest.iterdir()):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return root


def _wanted(root):
    return (f"{root / 'scifact' / MINILM / 'meta.json'}: made by sentence-transformers/all-mpnet-base-v2 (dim 768), "
            f"not {MINILM} (dim 384): re-embed with `asymgeo embed scifact --encoder {MINILM}` "
            "or point --encoder at the right folder")


def test_the_library_refuses_a_cache_made_by_another_encoder(misnamed, shared_dir):
    want = _wanted(misnamed)
    ds = load_beir("scifact", data_dir=shared_dir / "data")
    for dataset in ("scifact", ds):  # a bare name (no dataset to verify against) as well as a dataset
        with pytest.raises(ValueError) as e:
            load_embeddings(dataset, MINILM, cache_dir=misnamed)
        assert str(e.value) == want
    with pytest.raises(ValueError) as e:
        load_triples(ds, MINILM, "train", cache_dir=misnamed, k=1, triples_cache=False)
    assert str(e.value) == want
    # the same files under their own name load, and the alias of the right encoder is accepted
    assert load_embeddings("scifact", "mpnet", cache_dir=shared_dir / "embeddings").dim == 768


def _adapter(tmp_path, dim):
    from asymgeo.adapters import Adapter, save_adapter

    return str(save_adapter(Adapter.from_maps(np.ones((2, dim)) * 0.01), tmp_path / f"adapter{dim}",
                            encoder=MINILM, dataset="scifact"))


@pytest.mark.parametrize("command", ["evaluate", "evaluate-adapter", "select", "select-ranking", "fit"])
def test_every_command_refuses_a_cache_made_by_another_encoder(capsys, misnamed, shared_dir, tmp_path, command):
    common = ["scifact", "--encoder", MINILM, "--data-dir", str(shared_dir / "data"), "--cache-dir", str(misnamed)]
    argv = {
        "evaluate": ["evaluate", *common],
        "evaluate-adapter": ["evaluate", *common, "--adapter", _adapter(tmp_path, 768)] if command == "evaluate-adapter"
        else [],
        "select": ["select", *common, "--rank", "4", "--n-splits", "2"],
        "select-ranking": ["select", *common, "--rank", "4", "--n-splits", "2", "--selector", "ranking"],
        "fit": ["fit", *common, "--geometry", "dual", "--rank", "2", "--epochs", "1", "--out", str(tmp_path / "out")],
    }[command]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"asymgeo {argv[0]}: error: {_wanted(misnamed)}"]


def test_export_refuses_an_adapter_of_another_dimension_before_opening_the_model(tmp_path, monkeypatch):
    import asymgeo.adapters.export as export

    monkeypatch.setattr(export, "_import_st", lambda: pytest.fail("opened sentence-transformers before the check"))
    code = main(["export", _adapter(tmp_path, 768), "--base", MINILM, "--out", str(tmp_path / "m")])
    assert code == 2 and not (tmp_path / "m").exists()


def _cache(tmp_path, folder, meta, dim=384):
    rng = np.random.default_rng(0)
    C, Q = rng.standard_normal((4, dim)), rng.standard_normal((2, dim))
    C, Q = C / np.linalg.norm(C, axis=1, keepdims=True), Q / np.linalg.norm(Q, axis=1, keepdims=True)
    return write_embeddings(tmp_path / "ds" / folder, C, [f"d{i}" for i in range(4)], Q, ["q0", "q1"], meta)


@pytest.mark.parametrize("meta, message", [
    ({"model_name": "intfloat/e5-base-v2"}, "made by intfloat/e5-base-v2 (dim 384), not all-MiniLM-L6-v2 (dim 384)"),
    ({"encoder": "e5-base-v2"}, "embeddings of encoder 'e5-base-v2', not 'all-MiniLM-L6-v2'"),
    ({"model_name": "sentence-transformers/all-MiniLM-L6-v2", "normalised": False},
     "made with normalised = False, but all-MiniLM-L6-v2 has normalised = True"),
    ({"prefixes": {"query": "query: ", "document": "passage: "}},
     "made with prefixes = {'query': 'query: ', 'document': 'passage: '}, but all-MiniLM-L6-v2 has prefixes = "
     "{'query': '', 'document': ''}"),
    ({"max_tokens": 512}, "made with max_tokens = 512, but all-MiniLM-L6-v2 has max_tokens = 256"),
])
def test_each_recorded_convention_is_compared_with_the_encoder(tmp_path, meta, message):
    path = _cache(tmp_path, MINILM, meta)
    with pytest.raises(ValueError) as e:
        load_embeddings("ds", MINILM, cache_dir=tmp_path)
    assert str(e.value).startswith(str(path)) and f": {message}" in str(e.value)
    assert "asymgeo embed ds --encoder all-MiniLM-L6-v2" in str(e.value)


def test_legacy_and_matching_caches_keep_loading(tmp_path, shared_dir):
    # nothing recorded: only the folder name identifies the encoder
    _cache(tmp_path, MINILM, {})
    assert load_embeddings("ds", MINILM, cache_dir=tmp_path).dim == 384
    # the shared caches record the model id, not the registry name; aliases resolve
    for enc in (MINILM, "minilm", "sentence-transformers/all-MiniLM-L6-v2"):
        assert load_embeddings("scifact", enc, cache_dir=shared_dir / "embeddings").dim == 384
    # an encoder outside the registry, recorded by its path, is found by its folder name
    shutil.rmtree(tmp_path / "ds")
    _cache(tmp_path, "my-model", {"model_name": "/models/my-model", "encoder": "my-model"}, dim=6)
    assert load_embeddings("ds", "my-model", cache_dir=tmp_path).dim == 6
    assert load_embeddings("ds", "/models/my-model", cache_dir=tmp_path).dim == 6
    meta = json.loads((tmp_path / "ds" / "my-model" / "meta.json").read_text())
    assert meta["dimension"] == 6
    # verify=False opens a cache as it is (the documented escape hatch)
    shutil.rmtree(tmp_path / "ds")
    _cache(tmp_path, MINILM, {"model_name": "intfloat/e5-base-v2"})
    assert load_embeddings("ds", MINILM, cache_dir=tmp_path, verify=False).dim == 384


def test_conventions_of_an_encoder_outside_the_registry_are_not_guessed(tmp_path):
    # made with prefixes by a library EncoderSpec; a bare name cannot know them, so they are not compared
    _cache(tmp_path, "fake-enc", {"model_name": "fake/model", "prefixes": {"query": "Q: ", "document": "D: "}}, dim=6)
    assert load_embeddings("ds", "fake-enc", cache_dir=tmp_path).dim == 6
