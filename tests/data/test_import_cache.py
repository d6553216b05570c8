"""Tests of asymgeo import (asymgeo.data.import_cache): embeddings computed elsewhere become a verified cache."""

from __future__ import annotations

import numpy as np
import pytest
from beir_fixtures import doc, query, write_beir

from asymgeo.cli import main
from asymgeo.data import import_embeddings, load_beir, load_embeddings


@pytest.fixture
def setup(tmp_path):
    ds = write_beir(tmp_path / "mini", [doc(i) for i in range(5)], [query(i) for i in range(3)],
                    {"test": [("0", "1", 1), ("1", "2", 1), ("2", "3", 1)]})
    rng = np.random.default_rng(0)
    C = rng.normal(size=(5, 8))
    Q = rng.normal(size=(3, 8))
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    order = [3, 0, 4, 1, 2]  # the user's row order is not the dataset's
    np.save(tmp_path / "c.npy", C[order].astype(np.float32))
    (tmp_path / "c.txt").write_text("".join(f"{i}\n" for i in order))
    np.save(tmp_path / "q.npy", Q.astype(np.float32))
    (tmp_path / "q.txt").write_text("0\n1\n2\n")
    files = dict(corpus=tmp_path / "c.npy", corpus_ids=tmp_path / "c.txt", queries=tmp_path / "q.npy",
                 query_ids=tmp_path / "q.txt")
    return ds, C, Q, files, tmp_path / "cache"


def test_import_reorders_rows_and_the_cache_loads_verified(setup):
    ds, C, Q, files, cache = setup
    got = import_embeddings(ds, "my-encoder", cache_dir=cache, **files)
    again = load_embeddings(load_beir(ds), "my-encoder", cache_dir=cache)  # verified against the dataset
    for emb in (got, again):
        assert list(emb.corpus_ids) == [str(i) for i in range(5)]
        np.testing.assert_allclose(emb.corpus.astype(np.float64), C, atol=1e-3)
        np.testing.assert_allclose(emb.queries.astype(np.float64), Q, atol=1e-3)
    assert again.meta["imported"]["corpus"] == str(files["corpus"]) and again.meta["normalised"] is True
    with pytest.raises(ValueError, match="a cache is already there; pass overwrite=True"):
        import_embeddings(ds, "my-encoder", cache_dir=cache, **files)
    import_embeddings(ds, "my-encoder", cache_dir=cache, overwrite=True, **files)


def test_unnormalised_rows_are_refused_or_normalised(setup):
    ds, C, Q, files, cache = setup
    np.save(files["queries"], 3 * Q.astype(np.float32))
    with pytest.raises(ValueError, match=rf"{files['queries']}: the row of id '0' has norm 3, not 1 .*3 such rows.*"
                                         r"normalize=True \(--normalize\)"):
        import_embeddings(ds, "my-encoder", cache_dir=cache, **files)
    assert not cache.exists()  # refused before anything was written
    emb = import_embeddings(ds, "my-encoder", cache_dir=cache, normalize=True, **files)
    np.testing.assert_allclose(emb.queries.astype(np.float64), Q, atol=1e-3)


@pytest.mark.parametrize("ids, arr, match", [
    ("0\n1\n", None, r"c.npy: 5 rows but .*c.txt lists 2 ids"),
    ("3\n0\n4\n1\n1\n", None, r"c.txt, line 5: id '1' repeats line 4"),
    ("3\n0\n4\n1\n9\n", None, r"c.txt: 1 of the dataset's 5 documents have no row \(first: '2'\)"),
    ("3\n0\n4\n1\n2\n9\n", np.eye(6, 8), r"c.txt: 1 ids are not documents of the dataset \(first: '9', line 6\)"),
    (None, np.eye(5, 8) * (np.arange(5) != 2)[:, None], r"c.npy: the row of id '4' is all zero; 1 such rows"),
    (None, np.where(np.arange(5)[:, None] == 1, np.nan, np.eye(5, 8)), r"c.npy: the row of id '0' has non-finite"),
    (None, np.eye(5, 6), r"c.npy has dimension 6 but .*q.npy has 8"),
    (None, np.ones(5), r"c.npy: expected a 2-d \(rows, dimension\) array, got shape \(5,\)"),
])
def test_bad_arrays_and_ids_are_named(setup, ids, arr, match):
    ds, _C, _Q, files, cache = setup
    if ids is not None:
        files["corpus_ids"].write_text(ids)
    if arr is not None:
        np.save(files["corpus"], arr)
    with pytest.raises(ValueError, match=match):
        import_embeddings(ds, "my-encoder", cache_dir=cache, **files)


def test_a_registry_encoder_of_another_dimension_is_refused(setup):
    ds, _C, _Q, files, cache = setup
    with pytest.raises(ValueError, match="dimension 8, but all-MiniLM-L6-v2 embeds in 384"):
        import_embeddings(ds, "all-MiniLM-L6-v2", cache_dir=cache, **files)


def test_cli_import_and_the_missing_meta_json_error_names_it(setup, capsys):
    ds, _C, _Q, files, cache = setup
    argv = ["import", str(ds), "--encoder", "my-encoder", "--cache-dir", str(cache),
            "--corpus-embeddings", str(files["corpus"]), "--corpus-ids", str(files["corpus_ids"]),
            "--query-embeddings", str(files["queries"]), "--query-ids", str(files["query_ids"])]
    assert main(argv) == 0
    assert "corpus (5, 8), queries (3, 8), float16; verified" in capsys.readouterr().out
    (cache / "mini" / "my-encoder" / "meta.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"meta.json: missing, the cache is incomplete \(meta.json is written "
                                                r"last .*`asymgeo import mini --encoder my-encoder --corpus-embeddings"):
        load_embeddings(ds, "my-encoder", cache_dir=cache)
