"""Tests of asymgeo.experiments.adapters_scifact: the SciFact sweep cell and its summary."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from asymgeo.experiments.adapters_scifact import cell, format_summary, summarise
from asymgeo.experiments.runner import load_experiment


def _row(enc, n, s, shared, dual):
    r = {"encoder": enc, "n": n, "seed_index": s, "frozen_test": 0.6, "baseline_shared_test": 0.61,
         "baseline_dual_test": 0.62, "cars_choice": "dual" if s == 0 else "shared"}
    for form in ("augmented", "projection"):
        r[f"shared_{form}_test"] = shared
        r[f"dual_{form}_test"] = dual
    return r


def test_summarise_by_hand():
    df = pd.DataFrame([_row("m", 32, 0, 0.70, 0.71), _row("m", 32, 1, 0.72, 0.70), _row("m", 32, 2, 0.74, 0.75)])
    s = summarise(df).iloc[0]
    assert s["seeds"] == 3 and s["shared_augmented_test_mean"] == pytest.approx(0.72)
    assert s["shared_augmented_test_sd"] == pytest.approx(0.02)  # sample sd of 0.70, 0.72, 0.74
    assert s["gap_augmented_mean"] == pytest.approx((0.01 - 0.02 + 0.01) / 3)
    assert s["dual_wins_augmented"] == 2 and s["cars_dual"] == 1
    text = format_summary(summarise(df))
    assert "| 32 | 3 | 0.6000 ± 0.0000 |" in text and "2/3" in text


def test_experiment_config_is_the_issue_grid():
    exp = load_experiment("adapters")
    cfgs = exp.configs()
    assert len(cfgs) == 2 * 5 * 3
    assert {c["n"] for c in cfgs} == {32, 64, 128, 256, 647} and {c["rank"] for c in cfgs} == {16}


@pytest.mark.slow
def test_quick_cell_runs_and_is_paired(shared_dir):
    cfg = dict(load_experiment("adapters", quick=True).configs()[0])
    cfg.update(data_dir=str(shared_dir / "data"), cache_dir=str(shared_dir / "embeddings"))
    out = cell(cfg)
    # frozen all-MiniLM-L6-v2 on SciFact's 300 test queries: MTEB's published NDCG@10, 0.6451
    assert out["frozen_test"] == pytest.approx(0.6451, abs=5e-5)
    assert out["cars_choice"] == ("dual" if out["cars_score"] > 0 else "shared")
    assert np.isfinite([out[f"{f}_{m}_test"] for f in ("shared", "dual") for m in ("augmented", "projection")]).all()
    again = cell(cfg)  # deterministic given the seeds (wall times aside)
    assert {k: v for k, v in out.items() if not k.endswith("_seconds")} == {
        k: v for k, v in again.items() if not k.endswith("_seconds")}


def _train_qrels_from_file(shared_dir):
    out: dict[str, dict[str, int]] = {}
    for line in (shared_dir / "data" / "scifact" / "qrels" / "train.tsv").read_text().splitlines()[1:]:
        q, doc, g = line.split("\t")
        out.setdefault(q, {})[doc] = int(g)
    return out


def test_cell_trains_every_model_on_its_seeded_subset_and_reports_on_its_positives(shared_dir, monkeypatch):
    """The cell's split wiring, against the qrels files and numpy's seeded permutations (not
    asymgeo's split code): the adaptation train split (SciFact's 80/20 carve of train.tsv, seed
    20260809), then the n-query prefix of the permutation seeded by the cell's subset seed
    (SeedSequence(master, spawn_key=(1, seed_index))).  Every fit (closed form and trained) gets
    exactly those queries' embeddings, positives and relevant rows, and the generalisation
    report calls those n queries (not the 647) the training queries."""
    import asymgeo.adapters.baseline as baseline
    import asymgeo.adapters.generalisation as generalisation
    from asymgeo.adapters import Adapter
    from asymgeo.data import load_embeddings

    train = _train_qrels_from_file(shared_dir)
    labelled = sorted(q for q, docs in train.items() if any(g > 0 for g in docs.values()))
    carve = [labelled[i] for i in np.random.default_rng(20260809).permutation(len(labelled))]
    pool = sorted(carve[:round(0.8 * len(labelled))])
    master, seed_index, n = 7, 1, 32
    subset_seed = int(np.random.SeedSequence(master, spawn_key=(1, seed_index)).generate_state(2, np.uint64)[0]
                      >> np.uint64(1))
    want = [pool[i] for i in np.random.default_rng(subset_seed).permutation(len(pool))][:n]
    emb = load_embeddings("scifact", "all-MiniLM-L6-v2", cache_dir=shared_dir / "embeddings")
    X_want = np.asarray(emb.queries[emb.query_rows(want)], np.float32)
    ids = list(emb.corpus_ids)
    rel_want = [{ids.index(doc) for doc, g in train[q].items() if g > 0} for q in want]

    fits, reports = [], []
    real_fit, real_cf, real_rep = Adapter.fit, baseline.closed_form_adapter, generalisation.generalisation_report

    def fit_spy(self, X, pos, corpus, *a, relevant_rows=None, **k):
        fits.append(("trained", np.asarray(X, np.float32), np.asarray(pos), relevant_rows))
        return real_fit(self, X, pos, corpus, *a, relevant_rows=relevant_rows, **k)

    def cf_spy(X, pos, corpus, **k):
        fits.append(("closed form", np.asarray(X, np.float32), np.asarray(pos), None))
        return real_cf(X, pos, corpus, **k)

    def rep_spy(data, train_query_ids, *a, **k):
        reports.append(list(train_query_ids))
        return real_rep(data, train_query_ids, *a, **k)

    monkeypatch.setattr(Adapter, "fit", fit_spy)
    monkeypatch.setattr(baseline, "closed_form_adapter", cf_spy)
    monkeypatch.setattr(generalisation, "generalisation_report", rep_spy)
    out = cell({"dataset": "scifact", "encoder": "all-MiniLM-L6-v2", "n": n, "seed_index": seed_index, "rank": 4,
                "epochs": 1, "master_seed": master, "data_dir": str(shared_dir / "data"),
                "cache_dir": str(shared_dir / "embeddings"), "hard_negatives": 8, "init": "closed_form",
                "learning_rates": "1e-3"})
    assert out["subset_seed"] == subset_seed
    assert [f[0] for f in fits] == ["closed form"] * 2 + ["trained"] * 4
    for kind, X, pos, rel in fits:
        np.testing.assert_array_equal(X, X_want, err_msg=kind)
        assert all(ids[int(r)] in train[q] and train[q][ids[int(r)]] > 0 for q, r in zip(want, pos)), kind
        if rel is not None:
            assert [set(int(i) for i in r) for r in rel] == rel_want
    assert reports == [want]
