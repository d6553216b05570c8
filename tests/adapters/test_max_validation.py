"""``fit --max-validation N`` (issue #40): selection on a seeded subsample of the validation queries,
so that each epoch's corpus search costs N queries, not the whole dev set."""

from __future__ import annotations

import json

import numpy as np
import pytest

from asymgeo.adapters.workflow import load_adaptation_data, validation_subsample


def test_validation_subsample_is_seeded_sorted_and_whole_when_small():
    a, b = validation_subsample(162, 50), validation_subsample(162, 50)
    np.testing.assert_array_equal(a, b)
    assert a.size == 50 and len(set(a.tolist())) == 50 and np.all(np.diff(a) > 0) and a.max() < 162
    assert not np.array_equal(a, validation_subsample(162, 50, seed=1))
    np.testing.assert_array_equal(validation_subsample(40, 50), np.arange(40))
    for bad in (0, -3, True, 2.5):
        with pytest.raises(ValueError, match="max_validation: expected a positive integer"):
            validation_subsample(10, bad)


def test_fit_selects_on_the_subsample_and_says_so(shared_dir, tmp_path, monkeypatch, capsys):
    import asymgeo.adapters.adapter as training_mod
    from asymgeo.cli import main
    from asymgeo.retrieval.metrics import evaluate_indices
    from asymgeo.retrieval.search import exact_search

    seen_sizes: list[int] = []
    real_fit = training_mod.Adapter.fit

    def spying_fit(self, *a, validation_queries=None, **k):
        seen_sizes.append(int(np.asarray(validation_queries).shape[0]))
        return real_fit(self, *a, validation_queries=validation_queries, **k)

    monkeypatch.setattr(training_mod.Adapter, "fit", spying_fit)
    kw = ["--data-dir", str(shared_dir / "data"), "--cache-dir", str(shared_dir / "embeddings")]
    rc = main(["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--geometry", "shared", "--rank", "4",
               "--n-train", "40", "--epochs", "1", "--learning-rates", "1e-3", "--memory", "none",
               "--selection", "all", "--max-validation", "50", "--out", str(tmp_path / "ad"), "--no-progress",
               "--json", *kw])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert seen_sizes == [50]  # training validated every epoch on the 50 sampled queries only
    assert out["n_validation"] == 50 and out["split"]["validation_subsample"]["of"] == 162
    # the recorded frozen figure is the hand-computed NDCG@10 of the sampled queries, and its SE
    full = load_adaptation_data("scifact", "all-MiniLM-L6-v2", data_dir=shared_dir / "data",
                                cache_dir=shared_dir / "embeddings")
    rows = validation_subsample(len(full.validation), 50)
    V = full.V[rows]
    ids = [full.validation.query_ids[i] for i in rows]
    idx = exact_search(V, np.asarray(full.corpus, dtype=np.float32), 10).indices
    per = []
    for q, r in zip(ids, idx, strict=True):
        rel = {d: g for d, g in full.qrels[q].items() if g > 0}
        docs = [full.corpus_ids[int(j)] for j in r]
        dcg = sum((2 ** rel.get(d, 0) - 1) / np.log2(i + 2) for i, d in enumerate(docs))
        ideal = sum((2 ** g - 1) / np.log2(i + 2) for i, g in enumerate(sorted(rel.values(), reverse=True)[:10]))
        per.append(dcg / ideal)
    per = np.asarray(per)
    assert out["frozen"]["validation_ndcg@10"] == pytest.approx(per.mean(), abs=1e-6)
    assert out["validation_subsample"]["frozen_ndcg@10_se"] == pytest.approx(per.std(ddof=1) / np.sqrt(50), abs=1e-6)
    assert evaluate_indices(idx, load_adaptation_data("scifact", "all-MiniLM-L6-v2", data_dir=shared_dir / "data",
                                                      cache_dir=shared_dir / "embeddings",
                                                      max_validation=50).validation,
                            ["ndcg@10"]).per_query["ndcg@10"].mean() == pytest.approx(per.mean(), abs=1e-6)
    # the text report names the subsample
    rc = main(["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--geometry", "shared", "--rank", "4",
               "--n-train", "40", "--epochs", "1", "--learning-rates", "1e-3", "--memory", "none",
               "--selection", "all", "--max-validation", "50", "--out", str(tmp_path / "ad2"), "--no-progress", *kw])
    assert rc == 0
    assert "a seeded subsample of 50 of the 162 validation queries" in capsys.readouterr().out


def test_fit_refuses_a_bad_max_validation_before_loading(shared_dir, tmp_path, capsys):
    from asymgeo.cli import main

    rc = main(["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--max-validation", "0",
               "--out", str(tmp_path / "ad"), "--data-dir", str(shared_dir / "data"),
               "--cache-dir", str(shared_dir / "embeddings"), "--no-progress"])
    assert rc == 2
    assert "max_validation: expected a positive integer, got 0" in capsys.readouterr().err
    assert not (tmp_path / "ad").exists()


def test_validation_subsample_of_one_query_is_allowed():
    # the smallest subsample (the refusal is below 1, not at it), and all of them when there are exactly as many
    one = validation_subsample(10, 1)
    assert one.shape == (1,) and 0 <= int(one[0]) < 10 and one.dtype == np.int64
    np.testing.assert_array_equal(validation_subsample(7, 7), np.arange(7))
