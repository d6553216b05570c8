"""``fit --n-train N`` mines hard negatives for the N queries it trains on, not for every training query."""

from __future__ import annotations

import numpy as np
import pytest

import asymgeo.data.triples as triples_mod
from asymgeo.adapters.workflow import adapter_training_queries, fit_adapter
from asymgeo.data import load_triples


@pytest.fixture
def mined(monkeypatch):
    """The query blocks handed to hard-negative mining, recorded (mining itself still runs)."""
    seen: list[np.ndarray] = []
    real = triples_mod.mine_hard_negatives

    def recording(queries, *a, **k):
        seen.append(np.array(queries, copy=True))
        return real(queries, *a, **k)

    monkeypatch.setattr(triples_mod, "mine_hard_negatives", recording)
    return seen


def test_n_train_mines_only_the_subset_and_the_subset_is_unchanged(shared_dir, tmp_path, monkeypatch, mined):
    monkeypatch.setenv("ASYMGEO_TRIPLES_DIR", str(tmp_path / "triples"))  # no mined file to reuse
    kw = dict(data_dir=shared_dir / "data", cache_dir=shared_dir / "embeddings")
    rep = fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="shared", rank=4, n_train=40, epochs=1,
                      learning_rates=(1e-3,), report=False, memory="none", **kw)
    assert [m.shape[0] for m in mined] == [40]  # SciFact has 647 training queries; only the 40 trained on were searched
    assert rep.n_train == 40 and len(rep.adapter_train_ids) == 40
    # the same queries, and the same negatives, as the subset of the full mining (negatives are per query)
    full = load_triples("scifact", "all-MiniLM-L6-v2", "train", triples_cache=False, **kw)
    sub = full.subset(rep.adapter_train_ids)
    mined.clear()
    again = load_triples("scifact", "all-MiniLM-L6-v2", rep.adapter_train_ids, **kw)
    assert mined == []  # the subset's file was cached by the fit
    np.testing.assert_array_equal(again.hard_negative_rows, sub.hard_negative_rows)
    np.testing.assert_array_equal(again.pos_rows, sub.pos_rows)
    # and the adapter's record still rebuilds its training queries
    from asymgeo.adapters import load_adapter, save_adapter

    out = save_adapter(rep.adapter, tmp_path / "ad", dataset="scifact", extra={"split": rep.split})
    assert adapter_training_queries(load_adapter(out), "scifact", data_dir=shared_dir / "data") == \
        rep.adapter_train_ids


def test_fit_mining_ivf_reports_its_recall(shared_dir, tmp_path, monkeypatch, capsys):
    from asymgeo.adapters import workflow
    from asymgeo.cli import main

    monkeypatch.setenv("ASYMGEO_TRIPLES_DIR", str(tmp_path / "triples"))
    asked = []
    real = workflow.load_adaptation_data

    def spy(*a, **k):  # the training triples are mined with the index asked for, not only the recall record
        asked.append(k.get("mining"))
        return real(*a, **k)

    monkeypatch.setattr(workflow, "load_adaptation_data", spy)
    rc = main(["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--geometry", "shared", "--rank", "4",
               "--n-train", "60", "--epochs", "1", "--learning-rates", "1e-3", "--memory", "none", "--mining", "ivf",
               "--out", str(tmp_path / "ad"), "--data-dir", str(shared_dir / "data"),
               "--cache-dir", str(shared_dir / "embeddings"), "--no-progress", "--json"])
    assert rc == 0
    import json

    m = json.loads(capsys.readouterr().out)["mining"]
    assert m["index"] == "ivf" and m["n_queries"] == 60 and m["k"] == 8
    assert 0.0 < m["recall"] <= 1.0
    assert asked == ["ivf"]


def test_select_n_train_mines_only_its_subset_and_matches_fits_subset(shared_dir, tmp_path, monkeypatch, capsys,
                                                                     mined):
    # select --n-train N decides on the same seeded subset fit --n-train N trains on, mining only it
    import json

    from asymgeo.cli import main

    monkeypatch.setenv("ASYMGEO_TRIPLES_DIR", str(tmp_path / "triples"))
    kw = ["--data-dir", str(shared_dir / "data"), "--cache-dir", str(shared_dir / "embeddings")]
    assert main(["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4", "--n-train", "40",
                 "--seed", "3", "--json", *kw]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [m.shape[0] for m in mined] == [40]
    # the same 40 queries as fit's subset for seed 3, rebuilt independently from the pool
    from asymgeo.adapters.workflow import training_pool
    from asymgeo.data import load_beir, nested_subsets

    want = nested_subsets(training_pool(load_beir("scifact", data_dir=shared_dir / "data")), sizes=[40], seed=3)[40]
    full = load_triples("scifact", "all-MiniLM-L6-v2", want, data_dir=shared_dir / "data",
                        cache_dir=shared_dir / "embeddings")
    assert out["n"] == len(full) and len(set(full.query_ids)) == 40
    # the queries mined are exactly those of the subset (another seed's 40 would differ)
    got = {r.tobytes() for r in mined[0].astype(np.float32)}
    assert got == {r.tobytes() for r in np.asarray(full.X, dtype=np.float32)}
    assert "a seeded subset of 40 of the adaptation split's training queries" in out["n_source"]


def test_select_mining_ivf_prints_its_recall_and_n_train_needs_the_train_split(shared_dir, tmp_path, monkeypatch,
                                                                               capsys):
    from asymgeo.cli import main

    monkeypatch.setenv("ASYMGEO_TRIPLES_DIR", str(tmp_path / "triples"))
    kw = ["--data-dir", str(shared_dir / "data"), "--cache-dir", str(shared_dir / "embeddings")]
    assert main(["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4", "--n-train", "60",
                 "--mining", "ivf", *kw]) == 0
    err = capsys.readouterr().err
    assert "mining: ivf (approximate), recall@8" in err and "on 60 queries" in err
    assert main(["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--split", "test", "--n-train", "10",
                 *kw]) == 2
    assert "--n-train: subsets the training queries; it needs --split train" in capsys.readouterr().err
    assert main(["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--n-train", "100000", *kw]) == 2
    assert "--n-train: 100000 exceeds the 647 training queries of scifact" in capsys.readouterr().err
