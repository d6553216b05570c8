"""Tests of asymgeo.adapters.workflow and its commands (asymgeo fit / evaluate --adapter / export)
on the shared SciFact MiniLM cache."""

from __future__ import annotations

import json

import pytest

from asymgeo import load_adapter
from asymgeo.adapters import Adapter, save_adapter
from asymgeo.adapters.workflow import evaluate_adapter, fit_adapter
from asymgeo.cli import main


def _data_args(shared_dir):
    return ["--data-dir", str(shared_dir / "data"), "--cache-dir", str(shared_dir / "embeddings")]


def _fit_argv(shared_dir, out, *extra):
    return ["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--geometry", "dual", "--rank", "4",
            "--n-train", "32", "--epochs", "2", "--learning-rates", "1e-3", "--no-progress", "--memory", "none",
            "--out", str(out), *_data_args(shared_dir), *extra]


@pytest.fixture(scope="module")
def fitted_dir(tmp_path_factory, shared_dir):
    out = tmp_path_factory.mktemp("fit") / "adapter"
    assert main(_fit_argv(shared_dir, out)) == 0
    return out


def test_fit_writes_a_complete_adapter(fitted_dir, capsys):
    assert sorted(p.name for p in fitted_dir.iterdir()) == ["adapter.json", "adapter.safetensors", "metrics.json"]
    metrics = json.loads((fitted_dir / "metrics.json").read_text())
    assert metrics["n_train"] == 32 and metrics["n_validation"] == 162 and metrics["n_test"] == 300
    ad = load_adapter(fitted_dir)
    assert ad.geometry_ == "dual" and ad.metadata_["encoder"] == "all-MiniLM-L6-v2"
    assert ad.metadata_["dataset"] == "scifact"
    assert ad.metadata_["extra"]["arguments"]["geometry"] == "dual"
    assert ad.metadata_["extra"]["arguments"]["n_train"] == 32
    assert {"numpy", "torch", "asymgeo"} <= set(ad.metadata_["extra"]["versions"])
    # the frozen number is the published-scale MiniLM SciFact figure computed elsewhere in the suite
    assert 0.6 < metrics["frozen"]["test_ndcg@10"] < 0.7


def test_evaluate_through_the_adapter_matches_fit(fitted_dir, shared_dir, capsys):
    assert main(["evaluate", "scifact", "--encoder", "all-MiniLM-L6-v2", "--adapter", str(fitted_dir), "--json",
                 *_data_args(shared_dir)]) == 0
    out = json.loads(capsys.readouterr().out)
    metrics = json.loads((fitted_dir / "metrics.json").read_text())
    assert out["mean"]["ndcg@10"] == pytest.approx(metrics["trained"]["test_ndcg@10"], abs=1e-9)
    assert out["geometry"] == "dual"


def test_evaluate_through_an_adapter_with_memory_matches_what_fit_deployed(shared_dir, tmp_path, capsys):
    out = tmp_path / "mem"
    argv = [a for a in _fit_argv(shared_dir, out) if a not in ("--memory", "none")]
    assert main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["memory"]["kept"] and metrics["deployed"]["memory"]
    capsys.readouterr()
    assert main(["evaluate", "scifact", "--encoder", "all-MiniLM-L6-v2", "--adapter", str(out), "--json",
                 *_data_args(shared_dir)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["mean"]["ndcg@10"] == pytest.approx(metrics["deployed"]["test_ndcg@10"], abs=1e-9)
    assert got["mean"]["ndcg@10"] != pytest.approx(metrics["trained"]["test_ndcg@10"], abs=1e-3)


def test_evaluate_refuses_other_embeddings(fitted_dir, shared_dir, capsys):
    rc = main(["evaluate", "scifact", "--encoder", "all-mpnet-base-v2", "--adapter", str(fitted_dir),
               *_data_args(shared_dir)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "dimension 384 does not match" in err


def test_evaluate_refuses_a_damaged_adapter(fitted_dir, shared_dir, tmp_path, capsys):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(fitted_dir, bad)
    w = bad / "adapter.safetensors"
    w.write_bytes(w.read_bytes()[:-10])
    rc = main(["evaluate", "scifact", "--encoder", "all-MiniLM-L6-v2", "--adapter", str(bad), *_data_args(shared_dir)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "digest" in err


def test_fit_too_few_queries_one_line(shared_dir, tmp_path, capsys):
    rc = main(_fit_argv(shared_dir, tmp_path / "x")[:8] + ["--n-train", "1", "--out", str(tmp_path / "x"),
                                                            *_data_args(shared_dir)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "X: need at least 2 training queries" in err
    assert not (tmp_path / "x").exists()


def test_fit_refuses_a_user_folder_before_training(shared_dir, tmp_path, capsys, monkeypatch):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    monkeypatch.setattr(Adapter, "fit", lambda *a, **k: pytest.fail("trained before checking --out"))
    rc = main(_fit_argv(shared_dir, mine))
    assert rc == 2 and "not an asymgeo adapter" in capsys.readouterr().err
    assert (mine / "keep.txt").read_text() == "mine"


def test_interrupted_fit_leaves_the_old_adapter(fitted_dir, shared_dir, tmp_path, capsys, monkeypatch):
    import shutil

    out = tmp_path / "ad"
    shutil.copytree(fitted_dir, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def interrupted(self, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(Adapter, "fit", interrupted)
    assert main(_fit_argv(shared_dir, out)) == 130
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ad"]


def test_fit_adapter_library_n_train_checks(shared_dir):
    with pytest.raises(ValueError, match="n_train: 100000 exceeds"):
        fit_adapter("scifact", "all-MiniLM-L6-v2", n_train=100000, data_dir=shared_dir / "data",
                    cache_dir=shared_dir / "embeddings")


def test_evaluate_adapter_names_the_folder(shared_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="no adapter folder"):
        evaluate_adapter("scifact", "all-MiniLM-L6-v2", tmp_path / "none", data_dir=shared_dir / "data",
                         cache_dir=shared_dir / "embeddings")


def test_export_needs_a_base_when_the_adapter_has_no_encoder(tmp_path, capsys, rng):
    out = save_adapter(Adapter.from_maps(rng.normal(size=(2, 384))), tmp_path / "a")
    rc = main(["export", str(out), "--out", str(tmp_path / "m")])
    assert rc == 2 and "pass --base" in capsys.readouterr().err


def test_fit_with_a_diverging_loss_fails_cleanly(shared_dir, tmp_path, capsys):
    out = tmp_path / "div"
    argv = _fit_argv(shared_dir, out)
    argv[argv.index("--learning-rates") + 1] = "1e4"
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "learning_rates: training diverged" in err
    assert not out.exists()


def test_sklearn_clone():
    from sklearn.base import clone

    ad = Adapter(geometry="dual", rank=8, learning_rates=(1e-3,), early_stopping=2)
    assert clone(ad).get_params() == ad.get_params()


# ------------------------------------------------------------- a dataset without train qrels
@pytest.fixture(scope="module")
def test_only_scifact(tmp_path_factory, shared_dir):
    """SciFact without qrels/train.tsv (corpus and queries linked), with a private copy of the
    MiniLM cache so that mined negatives are written under the temp folder, never ../shared."""
    import os
    import shutil

    root = tmp_path_factory.mktemp("testonly")
    ds = root / "data" / "scifact"
    (ds / "qrels").mkdir(parents=True)
    src = shared_dir / "data" / "scifact"
    for f in ("corpus.jsonl", "queries.jsonl"):
        os.symlink(src / f, ds / f)
    shutil.copy(src / "qrels" / "test.tsv", ds / "qrels" / "test.tsv")
    cache = root / "cache" / "scifact" / "all-MiniLM-L6-v2"
    cache.mkdir(parents=True)
    for f in (shared_dir / "embeddings" / "scifact" / "all-MiniLM-L6-v2").iterdir():
        shutil.copy(f, cache / f.name)
    return root


def _held_out_test_ids(qrels_path, seed=20260809):
    """The 20% test part of a 60/20/20 carve, computed here from the file (ids sorted, then
    permuted by numpy's default_rng(seed)), independently of asymgeo's split code."""
    import numpy as np

    ids = sorted({line.split("\t")[0] for line in qrels_path.read_text().splitlines()[1:]
                  if line.strip() and int(line.split("\t")[2]) > 0})
    perm = [ids[i] for i in np.random.default_rng(seed).permutation(len(ids))]
    n_train, n_val = round(0.6 * len(ids)), round(0.2 * len(ids))
    return perm[n_train + n_val:], perm[:n_train + n_val]


def test_test_only_dataset_fit_names_the_carved_split_and_evaluate_scores_only_held_out(
        test_only_scifact, tmp_path, capsys):
    root = test_only_scifact
    args = ["--data-dir", str(root / "data"), "--cache-dir", str(root / "cache")]
    out = tmp_path / "ad"
    rc = main(["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--geometry", "dual", "--rank", "4",
               "--epochs", "1", "--learning-rates", "1e-3", "--no-progress", "--out", str(out), *args])
    text = capsys.readouterr().out
    assert rc == 0
    split_lines = [ln for ln in text.splitlines() if ln.startswith("split: ")]
    assert len(split_lines) == 1 and "carved 60/20/20 from qrels/test.tsv" in split_lines[0]
    assert "180/60/60" in split_lines[0]
    held_out, seen = _held_out_test_ids(root / "data" / "scifact" / "qrels" / "test.tsv")
    assert len(held_out) == 60 and len(seen) == 240
    # the note's evaluate command is the one run here: pasted, it finds the run's folders (#38)
    import shlex

    note = next(ln for ln in text.splitlines() if ln.startswith("note: `asymgeo evaluate"))
    pasted = shlex.split(note.split("`")[1])
    assert pasted[:2] == ["asymgeo", "evaluate"] and "--data-dir" in pasted and "--cache-dir" in pasted
    rc = main([*pasted[1:], "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and res["n_excluded"] == 240 and res["n_judged"] == 300
    lib = evaluate_adapter("scifact", "all-MiniLM-L6-v2", out, data_dir=root / "data", cache_dir=root / "cache")
    assert sorted(lib.query_ids) == sorted(held_out)
    assert lib.mean["ndcg@10"] == pytest.approx(res["mean"]["ndcg@10"], abs=1e-12)
    assert any("scored 60 of the 300 judged test queries" in n for n in res["notes"])
    # the score is the held-out one: the fit's own test figure (map + memory) is over the same 60 queries
    metrics = json.loads((out / "metrics.json").read_text())
    assert res["mean"]["ndcg@10"] == pytest.approx(metrics["deployed"]["test_ndcg@10"], abs=1e-12)
    assert not list((root / "cache").rglob("*.partial")), "nothing half-written left"


def test_evaluate_adapter_empty_path_is_an_error(shared_dir, capsys):
    rc = main(["evaluate", "scifact", "--encoder", "all-MiniLM-L6-v2", "--adapter", "", *_data_args(shared_dir)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "adapter: empty path" in err


def test_evaluate_on_another_dataset_says_so(fitted_dir, shared_dir, capsys):
    import shutil

    # the same embeddings under another dataset name: a transfer evaluation is named as one
    from asymgeo.adapters.workflow import evaluate_adapter as ev

    meta = json.loads((fitted_dir / "adapter.json").read_text())
    assert meta["dataset"] == "scifact"
    tmp = fitted_dir.parent / "renamed"
    if not tmp.exists():
        shutil.copytree(fitted_dir, tmp)
    cfg = json.loads((tmp / "adapter.json").read_text())
    cfg["dataset"] = "nfcorpus-like"
    (tmp / "adapter.json").write_text(json.dumps(cfg))
    res = ev("scifact", "all-MiniLM-L6-v2", tmp, data_dir=shared_dir / "data", cache_dir=shared_dir / "embeddings")
    assert any("fitted on 'nfcorpus-like', not 'scifact'" in n for n in res.extra["notes"])
    assert res.extra["n_excluded"] == 0


# ------------------------------------------------------------- generalisation-aware selection and auto
def test_document_disjoint_validation_against_the_files(shared_dir):
    from asymgeo.adapters.workflow import document_disjoint_validation, load_adaptation_data

    d = load_adaptation_data("scifact", "all-MiniLM-L6-v2", data_dir=shared_dir / "data",
                             cache_dir=shared_dir / "embeddings")
    rows = {}
    for line in (shared_dir / "data" / "scifact" / "qrels" / "train.tsv").read_text().splitlines()[1:]:
        q, doc, g = line.split("\t")
        rows.setdefault(q, {})[doc] = int(g)
    seen = {doc for q in d.triples.query_ids for doc, g in rows[q].items() if g > 0}
    want = [q for q in d.validation.query_ids if not any(g > 0 and doc in seen for doc, g in rows[q].items())]
    V, table, note = document_disjoint_validation(d, d.triples.query_ids)
    assert note == "" and list(table.query_ids) == want and len(want) == 67
    pos = {q: i for i, q in enumerate(d.validation.query_ids)}
    assert V.tolist() == d.V[[pos[q] for q in want]].tolist(), "embeddings follow their queries"
    # with few training positives almost every validation query is disjoint; with none seen, all are
    V2, t2, _ = document_disjoint_validation(d, [])
    assert len(t2) == len(d.validation)
    # the corpus ids stay the cache's compact IdIndex (issue #21: no list or dict of every id)
    from asymgeo._ids import IdIndex

    assert isinstance(d.corpus_ids, IdIndex) and len(d.corpus_ids) == 5183


def test_document_disjoint_selection_falls_back_on_dense_qrels(shared_dir):
    from asymgeo.adapters.workflow import document_disjoint_validation, load_adaptation_data

    d = load_adaptation_data("nfcorpus", "all-MiniLM-L6-v2", data_dir=shared_dir / "data",
                             cache_dir=shared_dir / "embeddings")
    V, table, note = document_disjoint_validation(d, d.triples.query_ids)
    assert V is d.V and table is d.validation
    assert note == ("selection: only 1 of 324 validation queries have no relevant training-positive document "
                    "(< 32); selecting on all 324 validation queries instead")


class _Cars:
    def __init__(self, choice, score, se):
        self.choice, self.score, self.standard_error = choice, score, se


def test_choose_family_rules():
    import numpy as np

    from asymgeo.adapters.workflow import choose_family
    from asymgeo.retrieval.metrics import RelevanceTable

    corpus = np.eye(4)
    V = np.eye(4)[:3]
    table = RelevanceTable({"a": {"d0": 1}, "b": {"d1": 1}, "c": {"d2": 1}}, ["a", "b", "c"],
                           ["d0", "d1", "d2", "d3"])
    good = np.eye(4)  # each query ranks its own document first
    bad = np.roll(np.eye(4), 1, axis=1)  # each query ranks another document first
    r = choose_family(V, table, corpus, good, bad, _Cars("dual", 5.0, 1.0))
    assert r["choice"] == "shared" and r["rule"] == "validation" and r["diff"] < 0
    r = choose_family(V, table, corpus, bad, good, _Cars("shared", -5.0, 1.0))
    assert r["choice"] == "dual" and r["rule"] == "validation"
    r = choose_family(V, table, corpus, good, good, _Cars("dual", 5.0, 1.0))
    assert (r["choice"], r["rule"]) == ("shared", "tie: shared"), "one-SE rule: a tie goes to shared"
    r = choose_family(V, table, corpus, good, good, _Cars("dual", 5.0, 1.0), tie_break="cars")
    assert (r["choice"], r["rule"]) == ("dual", "tie: CARS")
    r = choose_family(V, table, corpus, good, good, _Cars("dual", 0.5, 1.0), tie_break="cars")
    assert (r["choice"], r["rule"]) == ("shared", "tie: shared")
    with pytest.raises(ValueError, match="tie_break"):
        choose_family(V, table, corpus, good, good, _Cars("dual", 0.5, 1.0), tie_break="coin")


def test_choose_family_record_by_hand():
    """Two queries, binary NDCG@10 by hand.  The dual operator ranks each query's document
    among exact score ties: trec_eval order (ids descending) puts query a's d0 4th and query
    b's d1 3rd; lower-row order would put d0 2nd.  So the figures depend on the tie order too."""
    import math

    import numpy as np

    from asymgeo.adapters.workflow import choose_family
    from asymgeo.retrieval.metrics import RelevanceTable

    ids = ["d0", "d1", "d2", "d3"]
    corpus, V = np.eye(4), np.eye(4)[:2]
    table = RelevanceTable({"a": {"d0": 1}, "b": {"d1": 1}}, ["a", "b"], ids)
    good, bad = np.eye(4), np.roll(np.eye(4), 1, axis=1)
    dual = np.array([1 / math.log2(5), 1 / math.log2(4)])
    d = dual - 1.0
    se = float(np.sqrt(((d - d.mean()) ** 2).sum() / 1) / np.sqrt(2))
    r = choose_family(V, table, corpus, good, bad, _Cars("dual", 0.3, 0.1), corpus_ids=ids)
    want = {"choice": "shared", "rule": "validation", "validation_shared": 1.0,
            "validation_dual": float(dual.mean()), "diff": float(d.mean()), "standard_error": se,
            "n_validation": 2, "cars_choice": "dual", "cars_score": 0.3, "cars_standard_error": 0.1,
            "selector": "validation"}
    assert set(r) == set(want)
    for key, value in want.items():
        assert r[key] == (value if isinstance(value, str) else pytest.approx(value, rel=1e-12)), key
    # without ids, ties go to the lower row: query a finds d0 second
    r_rows = choose_family(V, table, corpus, good, bad, _Cars("dual", 0.3, 0.1))
    assert r_rows["validation_dual"] == pytest.approx((1 / math.log2(3) + 0.5) / 2, rel=1e-12)
    # one validation query: no standard error (infinite), so a tie, broken toward shared
    one = RelevanceTable({"a": {"d0": 1}}, ["a"], ids)
    r1 = choose_family(V[:1], one, corpus, bad, good, _Cars("dual", 9.0, 1.0), corpus_ids=ids)
    assert r1["standard_error"] == float("inf") and (r1["choice"], r1["rule"]) == ("shared", "tie: shared")
    # CARS breaks a tie only when its score is strictly beyond one of its standard errors
    r2 = choose_family(V, table, corpus, good, good, _Cars("dual", 1.0, 1.0), tie_break="cars")
    assert (r2["choice"], r2["rule"]) == ("shared", "tie: shared")


def test_auto_fit_trains_both_families_and_keeps_the_validation_choice(shared_dir, tmp_path, capsys):
    import numpy as np

    rep = fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="auto", rank=4, n_train=64, epochs=2,
                      learning_rates=(1e-3,), candidates="family", data_dir=shared_dir / "data",
                      cache_dir=shared_dir / "embeddings")
    a = rep.metrics["auto"]
    assert set(rep.candidates) == {"shared", "dual"}
    assert rep.adapter is rep.candidates[a["choice"]] and rep.adapter.geometry_ == a["choice"]
    assert a["cars_choice"] in ("shared", "dual") and np.isfinite(a["cars_score"])
    # the two candidates saw the same paired batches: same training seed, different families
    assert rep.candidates["shared"].seed == rep.candidates["dual"].seed
    out = save_adapter(rep.adapter, tmp_path / "auto", dataset="scifact", metrics=rep.metrics)
    assert load_adapter(out).geometry_ == a["choice"]
    # the fitted adapter carries its generalisation table (the one in the metrics)
    gen = rep.adapter.generalisation_
    assert gen is not None and gen.as_dict() == rep.metrics["generalisation"]
    assert gen.rows["frozen"]["all"]["n"] == 300


def test_fit_warns_when_not_better_than_frozen(shared_dir, monkeypatch):
    import asymgeo.adapters.workflow as wf

    kw = dict(geometry="dual", rank=4, n_train=32, epochs=1, learning_rates=(1e-3,), report=False, memory="none",
              data_dir=shared_dir / "data", cache_dir=shared_dir / "embeddings")
    monkeypatch.setattr(wf, "validation_gain", lambda *a, **k: {"n": 162, "diff": 0.01, "ci_low": -0.002,
                                                                "ci_high": 0.02})
    rep = wf.fit_adapter("scifact", "all-MiniLM-L6-v2", **kw)
    assert rep.metrics["warnings"] == ["the adapter is not better than frozen on validation beyond noise: "
                                       "+0.0100 [-0.0020, +0.0200] NDCG@10 over 162 queries"]
    monkeypatch.setattr(wf, "validation_gain", lambda *a, **k: {"n": 162, "diff": 0.03, "ci_low": 0.01,
                                                                "ci_high": 0.05})
    assert wf.fit_adapter("scifact", "all-MiniLM-L6-v2", **kw).metrics["warnings"] == []


def test_validation_gain_of_the_frozen_operator_is_zero(shared_dir):
    import numpy as np

    from asymgeo.adapters.workflow import load_adaptation_data, validation_gain

    d = load_adaptation_data("scifact", "all-MiniLM-L6-v2", data_dir=shared_dir / "data",
                             cache_dir=shared_dir / "embeddings")
    g = validation_gain(d, np.eye(d.corpus.shape[1]), n_boot=100)
    assert g == {"n": 162, "diff": 0.0, "ci_low": 0.0, "ci_high": 0.0}


def test_evaluate_rebuilds_the_training_queries_and_splits_seen_unseen(fitted_dir, shared_dir, tmp_path):
    import shutil

    from asymgeo.adapters.workflow import adapter_training_queries

    ad = load_adapter(fitted_dir)
    ids = adapter_training_queries(ad, "scifact", data_dir=shared_dir / "data")
    assert ids is not None and len(ids) == 32
    res = evaluate_adapter("scifact", "all-MiniLM-L6-v2", fitted_dir, data_dir=shared_dir / "data",
                           cache_dir=shared_dir / "embeddings")
    g = res.extra["generalisation"]
    assert g["seen"]["n"] + g["unseen"]["n"] == len(res.query_ids) == 300
    vs = res.extra["vs_frozen"]["ndcg@10"]
    assert vs["diff"] == pytest.approx(vs["adapter"] - vs["frozen"], abs=1e-12)
    assert vs["adapter"] == pytest.approx(res.mean["ndcg@10"], abs=1e-12)
    tampered = tmp_path / "t"
    shutil.copytree(fitted_dir, tampered)
    cfg = json.loads((tampered / "adapter.json").read_text())
    cfg["extra"]["split"]["train_ids_sha256"] = "0" * 64
    (tampered / "adapter.json").write_text(json.dumps(cfg))
    assert adapter_training_queries(load_adapter(tampered), "scifact", data_dir=shared_dir / "data") is None
    res2 = evaluate_adapter("scifact", "all-MiniLM-L6-v2", tampered, data_dir=shared_dir / "data",
                            cache_dir=shared_dir / "embeddings")
    assert res2.extra["generalisation"] is None
    assert any("cannot be rebuilt" in n for n in res2.extra["notes"])
    # a record without its seeds (an adapter.json edited by hand, or written before they were recorded):
    # the defaults, the split's default seed and subset seed 0, are what this fit used, so the ids agree
    from asymgeo.data import DEFAULT_SPLIT_SEED

    bare = tmp_path / "bare"
    shutil.copytree(fitted_dir, bare)
    cfg = json.loads((bare / "adapter.json").read_text())
    assert (cfg["extra"]["split"].pop("seed"), cfg["extra"]["split"].pop("subset_seed")) == (DEFAULT_SPLIT_SEED, 0)
    (bare / "adapter.json").write_text(json.dumps(cfg))
    assert adapter_training_queries(load_adapter(bare), "scifact", data_dir=shared_dir / "data") == ids


def test_fit_plot_and_bad_plot_name(shared_dir, tmp_path, capsys, monkeypatch):
    png = tmp_path / "fit.png"
    assert main(_fit_argv(shared_dir, tmp_path / "ad", "--plot", str(png))) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert capsys.readouterr().out.strip().endswith(f"and {png}")
    monkeypatch.setattr(Adapter, "fit", lambda *a, **k: pytest.fail("trained before checking --plot"))
    rc = main(_fit_argv(shared_dir, tmp_path / "ad2", "--plot", str(tmp_path / "fit.pdf")))
    assert rc == 2 and "--plot: " in capsys.readouterr().err


def test_model_card_says_what_trained_it_and_whether_it_helps(fitted_dir):
    from asymgeo.adapters.export import model_card

    ad = load_adapter(fitted_dir)
    card = model_card(ad, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
    gen = ad.metadata_["metrics"]["generalisation"]
    head = card.split("\n---\n", 1)[0]
    assert head.startswith("---\nlibrary_name: sentence-transformers\npipeline_tag: sentence-similarity\n")
    assert "\nbase_model: sentence-transformers/all-MiniLM-L6-v2\n" in head and "datasets:\n- BeIR/scifact" in head
    assert f"value: {ad.metadata_['metrics']['trained']['test_ndcg@10']:.4f}" in head
    assert "**dual**" in card and "rank 4" in card and "scifact" in card and "32 training queries" in card
    assert "## Does it help new queries?" in card and gen["headline"] in card
    assert f"frozen {ad.metadata_['metrics']['frozen']['test_ndcg@10']:.4f}" in card


def test_fit_and_evaluate_print_the_same_figure_on_nfcorpus_ties(shared_dir, tmp_path, capsys):
    """NFCorpus has groups of identical document embeddings: both commands order ties as trec_eval."""
    out = tmp_path / "nf"
    argv = ["fit", "nfcorpus", "--encoder", "all-MiniLM-L6-v2", "--geometry", "dual", "--rank", "4",
            "--n-train", "64", "--epochs", "1", "--learning-rates", "1e-3", "--no-progress", "--out", str(out),
            *_data_args(shared_dir)]
    assert main(argv) == 0
    capsys.readouterr()
    metrics = json.loads((out / "metrics.json").read_text())
    assert main(["evaluate", "nfcorpus", "--encoder", "all-MiniLM-L6-v2", "--adapter", str(out), "--json",
                 *_data_args(shared_dir)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["mean"]["ndcg@10"] == metrics["deployed"]["test_ndcg@10"]  # the map and its memory, ties as trec_eval
    assert res["vs_frozen"]["ndcg@10"]["frozen"] == metrics["frozen"]["test_ndcg@10"]


def test_plot_into_a_folder_that_cannot_be_made_is_refused_before_training(shared_dir, tmp_path, capsys,
                                                                            monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setattr(Adapter, "fit", lambda *a, **k: pytest.fail("trained before checking --plot"))
    rc = main(_fit_argv(shared_dir, tmp_path / "ad", "--plot", str(blocker / "sub" / "fit.png")))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "--plot: " in err and "is a file, not a folder" in err
    assert not (tmp_path / "ad").exists() and blocker.read_text() == "x"


def test_plot_folder_that_cannot_be_created_is_named(tmp_path, monkeypatch):
    """A folder the OS refuses to make (as under /proc) is found before training."""
    from pathlib import Path

    from asymgeo.cli import _check_plot_folder

    def refuse(self, *a, **k):
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(ValueError, match=r"--plot: .*fit.png: cannot write in .*nope \(No such file or directory\); "
                                         r"nothing was trained"):
        _check_plot_folder(str(tmp_path / "nope" / "fit.png"))


@pytest.mark.parametrize("damage, message", [
    (lambda s: "oops", "extra.split: expected an object, got str"),
    (lambda s: {**s, "seed": "x"}, "extra.split.seed: expected an integer, got 'x'"),
    (lambda s: {**s, "n_train_requested": 3.5}, "extra.split.n_train_requested: expected an integer"),
])
def test_evaluate_names_a_damaged_split_record(fitted_dir, shared_dir, tmp_path, capsys, damage, message):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(fitted_dir, bad)
    cfg = json.loads((bad / "adapter.json").read_text())
    cfg["extra"]["split"] = damage(cfg["extra"]["split"])
    (bad / "adapter.json").write_text(json.dumps(cfg))
    rc = main(["evaluate", "scifact", "--encoder", "all-MiniLM-L6-v2", "--adapter", str(bad), *_data_args(shared_dir)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and f"{bad / 'adapter.json'}: " in err and message in err


def test_model_card_of_a_damaged_generalisation_record(fitted_dir, caplog):
    from asymgeo.adapters.export import model_card

    ad = load_adapter(fitted_dir)
    ad.metadata_["metrics"]["generalisation"] = {"rows": 3}
    with caplog.at_level("WARNING", logger="asymgeo.adapters.export"):
        card = model_card(ad, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
    assert "could not be read (damaged or edited)" in card and "## Use" in card
    assert any("metrics.generalisation is damaged" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("selector", ["ranking", "cv", "anisotropic", "cars"])
def test_auto_fit_with_a_named_selector_trains_only_the_chosen_family(shared_dir, monkeypatch, selector):
    # a spy on Adapter.fit: one family trained; the decision equals the selector called directly on
    # the same training triples (and, for ranking, on the same selection queries)
    import numpy as np

    import asymgeo.adapters.workflow as wf
    from asymgeo.adapters.adapter import Adapter
    from asymgeo.kernels.operator_risk import cross_validated_risk
    from asymgeo.kernels.theory import anisotropic_sure
    from asymgeo.retrieval.ranking_selector import ranking_choice

    trained: list[str] = []
    seen: dict = {}
    real_fit = Adapter.fit

    def spy(self, X, *args, **kw):
        trained.append(self.geometry)
        seen.update(V=kw["validation_queries"], table=kw["validation_relevance"], corpus=args[1], X=X)
        return real_fit(self, X, *args, **kw)

    monkeypatch.setattr(Adapter, "fit", spy)
    real_decide = wf.decide_family
    got: dict = {}

    def decide(sel, tr, V, table, corpus, rank, cars, **kw):
        got["tr"] = tr
        return real_decide(sel, tr, V, table, corpus, rank, cars, **kw)

    monkeypatch.setattr(wf, "decide_family", decide)
    rep = fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="auto", selector=selector, rank=4, n_train=64,
                      epochs=1, learning_rates=(1e-3,), report=False, data_dir=shared_dir / "data",
                      cache_dir=shared_dir / "embeddings")
    a = rep.metrics["auto"]
    assert trained == [a["choice"]] and rep.adapter.geometry_ == a["choice"] and a["rule"] == selector
    assert rep.candidates == {}
    tr = got["tr"]
    X, D = tr.X.astype(np.float64), tr.Y_pos.astype(np.float64) - tr.Y_neg
    np.testing.assert_array_equal(seen["X"], tr.X)           # the same 64 training queries
    from asymgeo.kernels.selection import cars_score

    cars = cars_score(tr.X, tr.Y_pos, tr.Y_neg, 4, seed=0)
    common = {"rule": selector, "selector": selector, "cars_choice": cars.choice, "cars_score": float(cars.score),
              "cars_standard_error": float(cars.standard_error)}
    if selector == "ranking":
        want = ranking_choice(X, D, seen["V"], seen["table"], seen["corpus"], 4)
        expected = {**common, "choice": want.choice, "validation_shared": want.ndcg["shared"],
                    "validation_dual": want.ndcg["dual"], "diff": want.diff, "standard_error": want.standard_error,
                    "n_validation": want.n_validation, "scale": want.scale}
    elif selector == "cv":
        cv = cross_validated_risk(X, D, np.zeros_like(D), 4, folds=5, seed=0)
        expected = {**common, "choice": cv.choice, "diff": cv.score, "standard_error": cv.standard_error,
                    "folds": 5, "differences": list(cv.differences), "seed": 0}
    elif selector == "anisotropic":
        an = anisotropic_sure(X, D, 4)
        expected = {**common, "choice": an.choice, "diff": an.score, "statistic": an.statistic,
                    "threshold": an.threshold, "isotropic_threshold": an.isotropic_threshold, "k": an.k, "n": an.n}
    else:
        expected = {**common, "choice": cars.choice, "diff": cars.score, "standard_error": cars.standard_error,
                    "raw_distance": cars.raw_distance, "corrected_distance": cars.corrected_distance, "n": cars.n,
                    "n_splits": 20, "selector_dim": None, "seed": 0}
    assert set(a) == set(expected)
    for key, value in expected.items():
        if isinstance(value, list):
            assert a[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
        else:
            assert a[key] == (pytest.approx(value, rel=1e-12, abs=1e-15) if isinstance(value, float) else value), key
    with pytest.raises(ValueError, match="geometry='auto' only"):
        fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="dual", selector=selector, data_dir=shared_dir / "data",
                    cache_dir=shared_dir / "embeddings")


# ------------------------------------------------------------- refusals and rare branches (issue #19)
def test_fit_adapter_refuses_unknown_choices_before_loading_anything(tmp_path):
    # a data folder that does not exist: the argument checks come first, so they are what fails
    with pytest.raises(ValueError, match="selection: expected one of 'all', 'document_disjoint', got 'test'"):
        fit_adapter("scifact", "all-MiniLM-L6-v2", selection="test", data_dir=tmp_path)
    with pytest.raises(ValueError, match="^memory: expected one of 'auto', 'none', got 'always'$"):
        fit_adapter("scifact", "all-MiniLM-L6-v2", memory="always", data_dir=tmp_path)
    with pytest.raises(ValueError, match="^candidates: expected one of 'joint', 'family', got 'every'$"):
        fit_adapter("scifact", "all-MiniLM-L6-v2", candidates="every", data_dir=tmp_path)
    # geometry="query" needs the augmented form: refused first; with it, the check lets the call through
    # to loading (which then fails on the missing folder, not on the form)
    with pytest.raises(ValueError, match=r"^form: geometry='query' \(a p x p map on queries from the identity\) "
                                         r"needs form='augmented'$"):
        fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="query", form="projection", data_dir=tmp_path)
    with pytest.raises((ValueError, FileNotFoundError)) as err:
        fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="query", form="augmented", data_dir=tmp_path)
    assert not str(err.value).startswith("form")
    # a bad validation_pool is named before any data is read (the folder does not exist)
    with pytest.raises(ValueError, match=r"^validation_pool: expected 'auto', 'none' or an integer >= 10"):
        fit_adapter("scifact", "all-MiniLM-L6-v2", validation_pool=3, data_dir=tmp_path)
    with pytest.raises(ValueError, match="selector: expected one of 'cars', 'sure', 'anisotropic', 'cv', 'cv0', "
                                         "'cvx', 'cvp', 'bsure', 'pairwise', 'ranking', 'validation', got 'magic'"):
        fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="auto", selector="magic", data_dir=tmp_path)
    with pytest.raises(ValueError, match="selector: 'cars' decides the family of geometry='auto' only"):
        fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="dual", selector="cars", data_dir=tmp_path)


@pytest.mark.parametrize("n_train", [0, -3, True, 2.5])
def test_fit_adapter_refuses_a_bad_n_train(shared_dir, n_train):
    with pytest.raises(ValueError, match=f"n_train: expected a positive integer, got {n_train!r}"):
        fit_adapter("scifact", "all-MiniLM-L6-v2", n_train=n_train, data_dir=shared_dir / "data",
                    cache_dir=shared_dir / "embeddings")


def test_decide_family_refuses_an_unknown_selector():
    from asymgeo.adapters.workflow import decide_family

    class _Tr:
        X = Y_pos = Y_neg = [[0.0, 1.0], [1.0, 0.0]]

    with pytest.raises(ValueError, match="selector: 'validation' decides after training both families"):
        decide_family("validation", _Tr(), None, None, None, 1, _Cars("shared", 0.0, 1.0))
    with pytest.raises(ValueError, match="selector: expected one of 'cars', .*, got 'magic'"):
        decide_family("magic", _Tr(), None, None, None, 1, _Cars("shared", 0.0, 1.0))


def test_decide_family_hands_the_rule_its_seed_and_the_callers_cars_result():
    """#41 mutation survivors: a named rule decides with fit's seed (not its own default) and rule
    ``cars`` reuses the CARS result fit already computed (not a second run on the triples)."""
    import numpy as np

    from asymgeo.adapters.workflow import decide_family
    from asymgeo.selectors.registry import SelectionContext, get_rule

    rng = np.random.default_rng(11)
    n, p, rank = 80, 10, 3
    tr = type("Tr", (), {"X": rng.normal(size=(n, p)), "Y_pos": rng.normal(size=(n, p)),
                         "Y_neg": rng.normal(size=(n, p))})()
    X, D = tr.X, tr.Y_pos - tr.Y_neg
    cars = _Cars("dual", 0.125, 0.5)  # a planted result, unlike anything CARS computes on these triples
    direct = {s: get_rule("bsure").decide(X, D, rank, seed=s, context=SelectionContext(cv_folds=5)).score
              for s in (0, 5)}
    assert direct[0] != direct[5]  # the seed matters for this rule, so the check below can fail
    rec = decide_family("bsure", tr, None, None, None, rank, cars, seed=5)
    assert rec["diff"] == direct[5] and rec["selector"] == "bsure"
    rec = decide_family("cars", tr, None, None, None, rank, cars, seed=5)
    assert (rec["choice"], rec["diff"]) == ("dual", 0.125)  # reused, not recomputed
    assert rec["cars_score"] == 0.125 and rec["cars_standard_error"] == 0.5


def test_fit_records_the_document_disjoint_fallback_as_a_warning(shared_dir, monkeypatch):
    # NFCorpus's dense qrels: with every training query, only one validation query is disjoint,
    # so the fit selects on all 324 and says so in metrics["warnings"]
    seen = {}
    real_fit = Adapter.fit

    def spy(self, X, pos, corpus, **kw):
        seen["n_val"] = kw["validation_queries"].shape[0]
        return real_fit(self, X, pos, corpus, **kw)

    monkeypatch.setattr(Adapter, "fit", spy)
    rep = fit_adapter("nfcorpus", "all-MiniLM-L6-v2", geometry="dual", rank=2, epochs=1, learning_rates=(1e-3,),
                      report=False, data_dir=shared_dir / "data", cache_dir=shared_dir / "embeddings")
    note = ("selection: only 1 of 324 validation queries have no relevant training-positive document (< 32); "
            "selecting on all 324 validation queries instead")
    assert note in rep.metrics["warnings"]
    assert rep.metrics["n_selection"] == 324 == seen["n_val"]
    from asymgeo.adapters.workflow import selection_phrase

    assert rep.metrics["selection_fallback"] is True
    assert selection_phrase(rep.metrics).startswith("all 324 validation queries (too few document-disjoint ones")


def test_adapter_without_a_split_record_uses_the_default_split_seed(shared_dir, rng):
    from asymgeo.adapters.workflow import adapter_seen_queries, adapter_training_queries

    ad = Adapter.from_maps(rng.normal(size=(2, 384)), rng.normal(size=(2, 384)))
    ad.metadata_ = {"dataset": "scifact"}
    # SciFact's adaptation split carves train + validation from qrels/train.tsv: whatever the
    # seed, the queries it saw are every query of that file (read here, not through asymgeo)
    ids = {ln.split("\t")[0] for ln in (shared_dir / "data" / "scifact" / "qrels" / "train.tsv")
           .read_text().splitlines()[1:] if ln.strip()}
    assert adapter_seen_queries(ad, "scifact", data_dir=shared_dir / "data") == ids
    # no digest of the training ids: they cannot be rebuilt
    assert adapter_training_queries(ad, "scifact", data_dir=shared_dir / "data") is None
    ad.metadata_ = {"dataset": "nfcorpus"}  # another dataset: nothing is known to be seen
    assert adapter_seen_queries(ad, "scifact", data_dir=shared_dir / "data") == set()
    # an adapter built in Python, never saved or loaded, has no metadata_ at all: nothing is known either
    from asymgeo.adapters.workflow import _split_record

    fresh = Adapter.from_maps(rng.normal(size=(2, 384)), rng.normal(size=(2, 384)))
    assert not hasattr(fresh, "metadata_")
    assert adapter_seen_queries(fresh, "scifact", data_dir=shared_dir / "data") == set()
    assert adapter_training_queries(fresh, "scifact", data_dir=shared_dir / "data") is None
    assert _split_record(fresh) == {}


def test_evaluate_an_adapter_that_records_no_dataset_scores_every_query(shared_dir, tmp_path, rng):
    import numpy as np

    from asymgeo.data import evaluate_frozen

    A, B = rng.normal(size=(2, 384)) * 0.05, rng.normal(size=(2, 384)) * 0.05
    ad = Adapter.from_maps(A, B, form="augmented")
    save_adapter(ad, tmp_path / "ad")
    res = evaluate_adapter("scifact", "all-MiniLM-L6-v2", tmp_path / "ad", data_dir=shared_dir / "data",
                           cache_dir=shared_dir / "embeddings")
    assert "the adapter does not record its dataset: its training queries cannot be left out" in res.extra["notes"]
    assert res.extra["n_excluded"] == 0 and len(res.query_ids) == 300
    ref = evaluate_frozen("scifact", "all-MiniLM-L6-v2", operator=np.eye(384) + A.T @ B,
                          data_dir=shared_dir / "data", cache_dir=shared_dir / "embeddings")
    assert res.mean["ndcg@10"] == pytest.approx(ref.mean["ndcg@10"], abs=1e-6)
    assert res.extra["generalisation"] is None


def test_evaluate_with_no_seen_documents_reports_an_empty_seen_part(fitted_dir, shared_dir, monkeypatch):
    import asymgeo.adapters.workflow as wf

    monkeypatch.setattr(wf, "adapter_training_queries", lambda *a, **k: [])  # trained on nothing seen
    res = evaluate_adapter("scifact", "all-MiniLM-L6-v2", fitted_dir, data_dir=shared_dir / "data",
                           cache_dir=shared_dir / "embeddings")
    g = res.extra["generalisation"]
    assert g["seen"] == {"n": 0} and g["n_seen_documents"] == 0
    assert g["unseen"]["n"] == 300
    assert g["unseen"]["adapter"] == pytest.approx(res.mean["ndcg@10"], abs=1e-12)


# ------------------------------------------------------------- the commands' text and JSON reports (issue #19)
def test_evaluate_adapter_text_report_prints_the_library_figures(fitted_dir, shared_dir, capsys):
    res = evaluate_adapter("scifact", "all-MiniLM-L6-v2", fitted_dir, data_dir=shared_dir / "data",
                           cache_dir=shared_dir / "embeddings")
    assert main(["evaluate", "scifact", "--encoder", "all-MiniLM-L6-v2", "--adapter", str(fitted_dir),
                 *_data_args(shared_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    # fitted on SciFact's train qrels: no test query trained it, so no note, and the head line first
    head = lines[0]
    assert head.startswith(f"scifact / all-MiniLM-L6-v2, test split, through the dual augmented adapter {fitted_dir}:")
    assert head.endswith(f"exact search over 5,183 documents ({res.extra['backend']}), 300 queries")
    for m, c in res.extra["vs_frozen"].items():
        row = next(ln for ln in lines if ln.split()[:1] == [m])
        assert row.split()[1:4] == [f"{c['adapter']:.4f}", f"{c['frozen']:.4f}", f"{c['diff']:+.4f}"], m
    g = res.extra["generalisation"]
    for name, label in (("seen", "queries with a relevant training-positive document"), ("unseen", "the other queries")):
        if g[name]["n"]:
            line = next(ln for ln in lines if f"on {label} ({g[name]['n']})" in ln)
            assert f"{g[name]['adapter']:.4f} vs frozen {g[name]['frozen']:.4f}" in line


def test_fit_json_report_equals_metrics_json(shared_dir, tmp_path, capsys):
    out = tmp_path / "ad"
    assert main(_fit_argv(shared_dir, out, "--json")) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads((out / "metrics.json").read_text())
    assert printed["adapter"] == str(out)
    for key in ("frozen", "closed_form", "trained", "n_train", "geometry", "rank"):
        assert printed[key] == saved[key], key
    assert printed["split"]["n_train"] == 32


def test_fit_auto_text_report_names_the_rule_and_the_cars_figures(shared_dir, tmp_path, capsys):
    out = tmp_path / "auto"
    argv = ["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--geometry", "auto", "--selector", "cars",
            "--rank", "4", "--n-train", "32", "--epochs", "1", "--learning-rates", "1e-3", "--no-progress",
            "--out", str(out), *_data_args(shared_dir)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    a = json.loads((out / "metrics.json").read_text())["auto"]
    assert (f"auto: {a['choice']} by cars on the training triples (only that family trained; CARS "
            f"{a['cars_score']:+.4g} +/- {a['cars_standard_error']:.2g} -> {a['cars_choice']})") in text
    assert a["choice"] == a["cars_choice"]


def test_fit_named_selector_without_auto_is_refused_before_loading(shared_dir, tmp_path, capsys):
    argv = _fit_argv(tmp_path / "no-data-here", tmp_path / "ad", "--selector", "cars")
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "--selector cars: decides the family of --geometry auto only" in err
    assert not (tmp_path / "ad").exists()


def test_print_json_refuses_non_finite_numbers(capsys):
    from asymgeo.cli import _print_json

    with pytest.raises(ValueError, match="the result holds a non-finite number .*refusing to print invalid JSON"):
        _print_json({"a": float("nan")})
    assert capsys.readouterr().out == ""


# ------------------------------------------------------------- evaluate --adapter against independent figures
def _brute_per_query(Q, corpus, qrels, qids, corpus_ids, M):
    """NDCG@10 per query by float64 scoring and pytrec_eval (trec_eval's tie order)."""
    import numpy as np
    import pytrec_eval

    S = Q.astype(np.float64) @ M @ corpus.astype(np.float64).T
    run = {}
    for i, q in enumerate(qids):
        top = np.argsort(-S[i], kind="stable")[:100]
        run[q] = {corpus_ids[j]: float(S[i, j]) for j in top}
    ev = pytrec_eval.RelevanceEvaluator({q: qrels[q] for q in qids}, {"ndcg_cut.10"}).evaluate(run)
    return np.array([ev[q]["ndcg_cut_10"] for q in qids])


def test_evaluate_adapter_figures_equal_pytrec_eval_and_the_seen_split_from_the_files(fitted_dir, shared_dir):
    import numpy as np

    from asymgeo.adapters.workflow import adapter_training_queries
    from asymgeo.data import load_embeddings
    from asymgeo.retrieval.compare import paired_comparison

    res = evaluate_adapter("scifact", "all-MiniLM-L6-v2", fitted_dir, data_dir=shared_dir / "data",
                           cache_dir=shared_dir / "embeddings")
    emb = load_embeddings("scifact", "all-MiniLM-L6-v2", cache_dir=shared_dir / "embeddings")
    test = _tsv_qrels(shared_dir / "data" / "scifact" / "qrels" / "test.tsv")
    qids = list(res.query_ids)
    Q = np.asarray(emb.queries[emb.query_rows(qids)], dtype=np.float32)
    M = load_adapter(fitted_dir).operator_
    a = _brute_per_query(Q, np.asarray(emb.corpus), test, qids, emb.corpus_ids, M)
    f = _brute_per_query(Q, np.asarray(emb.corpus), test, qids, emb.corpus_ids, np.eye(M.shape[0]))
    np.testing.assert_allclose(res.per_query["ndcg@10"], a, atol=1e-6)
    vs = res.extra["vs_frozen"]["ndcg@10"]
    cmp = paired_comparison(a, f, n_boot=2000, seed=0)
    assert set(vs) == {"adapter", "frozen", "diff", "ci_low", "ci_high"}
    assert vs["adapter"] == pytest.approx(a.mean(), abs=1e-6) and vs["frozen"] == pytest.approx(f.mean(), abs=1e-6)
    assert (vs["ci_low"], vs["ci_high"]) == pytest.approx((cmp.ci_low, cmp.ci_high), abs=1e-6)
    # seen documents: the training queries' relevant documents, read from qrels/train.tsv
    train = _tsv_qrels(shared_dir / "data" / "scifact" / "qrels" / "train.tsv")
    ids = adapter_training_queries(load_adapter(fitted_dir), "scifact", data_dir=shared_dir / "data")
    seen_docs = {d for q in ids for d, g in train[q].items() if g >= 1}
    g = res.extra["generalisation"]
    assert g["metric"] == "ndcg@10" and g["n_seen_documents"] == len(seen_docs)
    pos = {q: i for i, q in enumerate(qids)}
    for name, keep in (("seen", lambda q: bool(seen_docs & set(test[q]))),
                       ("unseen", lambda q: not seen_docs & set(test[q]))):
        rows = [pos[q] for q in qids if keep(q)]
        c = paired_comparison(a[rows], f[rows], n_boot=2000, seed=0)
        assert g[name]["n"] == len(rows) > 0, name
        assert (g[name]["adapter"], g[name]["frozen"], g[name]["ci_low"], g[name]["ci_high"]) == pytest.approx(
            (a[rows].mean(), f[rows].mean(), c.ci_low, c.ci_high), abs=1e-6), name


def _tsv_qrels(path):
    out: dict[str, dict[str, int]] = {}
    for line in path.read_text().splitlines()[1:]:
        if line.strip():
            q, d, g = line.split("\t")
            out.setdefault(q, {})[d] = int(g)
    return out


@pytest.mark.parametrize("ties", ["trec_eval", "index"])
def test_evaluate_adapter_passes_ties_and_backend_to_both_runs(shared_dir, tmp_path, ties):
    # an identity adapter on NFCorpus (many exact ties): adapter and frozen rank alike under either
    # tie order, so every difference is exactly 0, and the backend asked for is the one that ran
    import numpy as np

    ad = Adapter.from_maps(np.zeros((2, 384)), geometry="shared", form="augmented")
    save_adapter(ad, tmp_path / "ad")
    res = evaluate_adapter("nfcorpus", "all-MiniLM-L6-v2", tmp_path / "ad", data_dir=shared_dir / "data",
                           cache_dir=shared_dir / "embeddings", ties=ties, backend="torch")
    assert res.extra["backend"].startswith("torch")
    for m, c in res.extra["vs_frozen"].items():
        assert c["diff"] == 0.0, m


def test_evaluate_refuses_an_adapter_of_another_encoder_with_the_same_dimension(fitted_dir, shared_dir, tmp_path):
    import shutil

    other = tmp_path / "other"
    shutil.copytree(fitted_dir, other)
    cfg = json.loads((other / "adapter.json").read_text())
    cfg["encoder"] = "all-mpnet-base-v2"  # edited to claim 384-dimensional MPNet embeddings
    (other / "adapter.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError) as err:
        evaluate_adapter("scifact", "all-MiniLM-L6-v2", other, data_dir=shared_dir / "data",
                         cache_dir=shared_dir / "embeddings")
    assert str(err.value) == f"{other}: adapter was trained on 'all-mpnet-base-v2' embeddings, not 'all-MiniLM-L6-v2'"


def test_split_record_edge_cases(rng):
    from asymgeo.adapters.workflow import _split_record

    ad = Adapter.from_maps(rng.normal(size=(2, 4)))
    ad.metadata_ = {"dataset": "x", "extra": ["not", "an", "object"]}
    assert _split_record(ad) == {}
    ad.metadata_ = {"extra": {"split": {"seed": 1, "subset_seed": "3"}}}
    with pytest.raises(ValueError) as err:
        _split_record(ad)
    assert str(err.value) == ("adapter.json: extra.split.subset_seed: expected an integer, got '3' (edited or "
                              "damaged); re-fit the adapter")
    ad.metadata_ = {"extra": {"split": [1]}}
    with pytest.raises(ValueError) as err:
        _split_record(ad)
    assert str(err.value) == ("adapter.json: extra.split: expected an object, got list (edited or damaged); the "
                              "queries that trained the adapter cannot be known: re-fit it")
    ad.metadata_ = None
    assert _split_record(ad) == {}


@pytest.mark.parametrize("seed", [None, 7])
def test_seen_and_training_queries_follow_the_recorded_split_seed(test_only_scifact, rng, seed):
    """On a dataset without train qrels the carve depends on the seed: the seen queries and the
    training queries are rebuilt with the recorded one (the split's default when none is recorded),
    computed here from qrels/test.tsv independently of asymgeo's split code."""
    import numpy as np

    from asymgeo.adapters.generalisation import ids_digest
    from asymgeo.adapters.workflow import adapter_seen_queries, adapter_training_queries
    from asymgeo.data import nested_subsets

    root = test_only_scifact
    qrels_path = root / "data" / "scifact" / "qrels" / "test.tsv"
    s = 20260809 if seed is None else seed
    held_out, seen = _held_out_test_ids(qrels_path, seed=s)
    ids = sorted({ln.split("\t")[0] for ln in qrels_path.read_text().splitlines()[1:]
                  if ln.strip() and int(ln.split("\t")[2]) > 0})
    perm = [ids[i] for i in np.random.default_rng(s).permutation(len(ids))]
    train = perm[:round(0.6 * len(ids))]
    sub = nested_subsets(train, sizes=[20], seed=3)[20]
    split = {"train_ids_sha256": ids_digest(sub), "n_train_requested": 20, "subset_seed": 3}
    if seed is not None:
        split["seed"] = seed
    ad = Adapter.from_maps(rng.normal(size=(2, 384)))
    ad.metadata_ = {"dataset": "scifact", "extra": {"split": split}}
    assert adapter_seen_queries(ad, "scifact", data_dir=root / "data") == set(seen)
    assert adapter_training_queries(ad, "scifact", data_dir=root / "data") == sub
    split["subset_seed"] = 4  # another subset than the digest's: not rebuilt
    assert adapter_training_queries(ad, "scifact", data_dir=root / "data") is None


def test_evaluate_messages_in_full(fitted_dir, shared_dir, tmp_path):
    import shutil

    with pytest.raises(ValueError) as err:
        evaluate_adapter("scifact", "all-MiniLM-L6-v2", "  ", data_dir=shared_dir / "data")
    assert str(err.value) == "adapter: empty path (an unset shell variable?); name the folder written by asymgeo fit"
    tampered = tmp_path / "t"
    shutil.copytree(fitted_dir, tampered)
    cfg = json.loads((tampered / "adapter.json").read_text())
    cfg["extra"]["split"]["train_ids_sha256"] = "0" * 64
    (tampered / "adapter.json").write_text(json.dumps(cfg))
    res = evaluate_adapter("scifact", "all-MiniLM-L6-v2", tampered, data_dir=shared_dir / "data",
                           cache_dir=shared_dir / "embeddings")
    assert res.extra["notes"] == ["the training queries cannot be rebuilt from adapter.json: no seen / "
                                  "unseen-document split"]


# ------------------------------------------------------------- what fit_adapter hands to the adapter
def test_fit_adapter_defaults_are_the_estimators_and_the_commands():
    import inspect

    from asymgeo.cli import build_parser

    sig = inspect.signature(fit_adapter).parameters
    est = Adapter().get_params()
    for key in ("rank", "form", "init", "learning_rates", "epochs", "early_stopping", "anchor", "seed",
                "device", "progress"):
        assert sig[key].default == est[key], key
    # geometry: the estimator fits one family; the workflow, like `asymgeo fit`, decides (auto)
    assert est["geometry"] == "shared" and sig["geometry"].default == "auto"
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["fit"]
    cli = vars(sub.parse_args(["scifact", "--out", "x"]))
    for key in ("geometry", "rank", "form", "init", "epochs", "seed", "selection", "anchor", "selector", "memory",
                "candidates"):
        assert cli[key] == sig[key].default, key
    assert tuple(cli["learning_rates"]) == sig["learning_rates"].default


def test_fit_adapter_passes_every_setting_and_the_right_rows_to_the_adapter(shared_dir, monkeypatch):
    import numpy as np

    from asymgeo.data import load_embeddings, load_triples, nested_subsets

    captured: dict = {}
    real_fit = Adapter.fit

    def spy(self, X, pos, corpus, **kw):
        captured.update(params=self.get_params(), X=np.array(X), pos=np.array(pos), kw=kw)
        return real_fit(self, X, pos, corpus, **kw)

    monkeypatch.setattr(Adapter, "fit", spy)
    rep = fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="dual", rank=3, form="projection", init="random",
                      n_train=40, seed=5, learning_rates=(2e-3,), epochs=2, early_stopping=1, anchor=0.1,
                      selection="all", report=False, device="cpu", progress=False, data_dir=shared_dir / "data",
                      cache_dir=shared_dir / "embeddings")
    p = captured["params"]
    want = dict(geometry="dual", rank=3, form="projection", init="random", learning_rates=(2e-3,), epochs=2,
                early_stopping=1, anchor=0.1, seed=5, device="cpu", progress=False)
    assert {k: p[k] for k in want} == want
    # the 40 queries: the seeded prefix of the training queries; their rows and relevant documents
    tr = load_triples("scifact", "all-MiniLM-L6-v2", "train", data_dir=shared_dir / "data",
                      cache_dir=shared_dir / "embeddings", k=8, require=True)
    ids = nested_subsets(tr.query_ids, sizes=[40], seed=5)[40]
    assert rep.adapter_train_ids == ids and rep.n_train == 40
    sub = tr.subset(ids)
    np.testing.assert_array_equal(captured["X"], sub.X)
    np.testing.assert_array_equal(captured["pos"], sub.pos_rows)
    np.testing.assert_array_equal(captured["kw"]["hard_negative_rows"], sub.hard_negative_rows)
    emb = load_embeddings("scifact", "all-MiniLM-L6-v2", cache_dir=shared_dir / "embeddings")
    train = _tsv_qrels(shared_dir / "data" / "scifact" / "qrels" / "train.tsv")
    rel = [set(emb.corpus_rows([d for d, g in train[q].items() if g >= 1 and emb.has_corpus_id(d)]).tolist())
           for q in ids]
    assert captured["kw"]["relevant_rows"] == rel


def test_fit_adapter_accepts_the_whole_pool_as_n_train(shared_dir, monkeypatch):
    import numpy as np

    n = {}

    def quick(self, X, pos, corpus, **kw):  # no training: the closed form is enough to check the plumbing
        n["rows"] = len(X)
        return Adapter.from_maps(np.zeros((2, corpus.shape[1])), geometry="shared")

    monkeypatch.setattr(Adapter, "fit", quick)
    rep = fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="shared", n_train=647, rank=2, report=False,
                      data_dir=shared_dir / "data",
                      cache_dir=shared_dir / "embeddings")
    assert rep.n_train == n["rows"] == 647


def test_validation_gain_against_pytrec_eval_on_nfcorpus_ties(shared_dir, rng):
    import numpy as np

    from asymgeo.adapters.workflow import load_adaptation_data, validation_gain
    from asymgeo.retrieval.compare import paired_comparison

    d = load_adaptation_data("nfcorpus", "all-MiniLM-L6-v2", data_dir=shared_dir / "data",
                             cache_dir=shared_dir / "embeddings")
    p = d.corpus.shape[1]
    A = 0.2 * rng.standard_normal((3, p))
    M = np.eye(p) + A.T @ A
    qids = list(d.validation.query_ids)
    qrels = {q: {doc: int(g >= 1) for doc, g in d.qrels[q].items()} for q in qids}  # binary NDCG (Appendix F)
    a = _brute_per_query(d.V, d.corpus, qrels, qids, d.corpus_ids, M)
    f = _brute_per_query(d.V, d.corpus, qrels, qids, d.corpus_ids, np.eye(p))
    g = validation_gain(d, M, seed=3, n_boot=500)
    cmp = paired_comparison(a, f, n_boot=500, seed=3)
    assert g["n"] == len(qids) == 324
    assert (g["diff"], g["ci_low"], g["ci_high"]) == pytest.approx((cmp.mean_diff, cmp.ci_low, cmp.ci_high), abs=1e-6)
    assert abs(g["diff"]) > 1e-4  # the operator changes rankings: a frozen stand-in would give 0


def test_evaluate_adapter_passes_split_and_cut_off_and_records_the_rank(fitted_dir, shared_dir):
    # a transfer evaluation: the SciFact adapter on NFCorpus's dev split at k = 5
    res = evaluate_adapter("nfcorpus", "all-MiniLM-L6-v2", fitted_dir, split="dev", k=5,
                           data_dir=shared_dir / "data", cache_dir=shared_dir / "embeddings")
    dev = _tsv_qrels(shared_dir / "data" / "nfcorpus" / "qrels" / "dev.tsv")
    judged = {q for q, docs in dev.items() if any(g >= 1 for g in docs.values())}
    assert res.extra["split"] == "dev" and set(res.query_ids) == judged
    assert "ndcg@5" in res.per_query and set(res.extra["vs_frozen"]) == set(res.per_query)
    assert (res.extra["rank"], res.extra["geometry"], res.extra["form"]) == (4, "dual", "augmented")
    assert res.extra["notes"][0] == "the adapter was fitted on 'scifact', not 'nfcorpus': a transfer evaluation"
    assert res.extra["generalisation"] is None  # trained on another dataset: no seen / unseen split


def test_fit_report_figures_equal_pytrec_eval_through_each_operator(shared_dir):
    """Every NDCG@10 in metrics.json against pytrec_eval (binary, trec_eval's tie order) through
    the operator it names; the auto record's figures through the two candidates; CARS and the
    closed-form baseline against direct calls on the same 32 training queries."""
    import numpy as np

    from asymgeo.adapters.baseline import closed_form_adapter
    from asymgeo.adapters.workflow import load_adaptation_data
    from asymgeo.data import nested_subsets
    from asymgeo.kernels.selection import cars_score

    kw = dict(data_dir=shared_dir / "data", cache_dir=shared_dir / "embeddings")
    rep = fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="auto", rank=2, n_train=32, epochs=1, seed=3,
                      learning_rates=(1e-3,), selection="all", report=False, candidates="family", **kw)
    d = load_adaptation_data("scifact", "all-MiniLM-L6-v2", **kw)
    p = d.corpus.shape[1]

    def ndcg(Q, table, M):
        qids = list(table.query_ids)
        qrels = {q: {doc: int(g >= 1) for doc, g in d.qrels[q].items()} for q in qids}
        return float(_brute_per_query(Q, d.corpus, qrels, qids, d.corpus_ids, M).mean())

    m = rep.metrics
    for name, M in (("frozen", np.eye(p)), ("closed_form", rep.baseline.operator_), ("trained", rep.adapter.operator_)):
        assert m[name]["validation_ndcg@10"] == pytest.approx(ndcg(d.V, d.validation, M), abs=1e-6), name
        assert m[name]["test_ndcg@10"] == pytest.approx(ndcg(d.T, d.test, M), abs=1e-6), name
    assert m["trained"]["learning_rate"] == rep.adapter.learning_rate_ == 1e-3
    assert m["trained"]["best_epoch"] == rep.adapter.best_epoch_
    assert m["closed_form"]["selection_ndcg@10"] == rep.baseline.validation_ndcg_
    a = m["auto"]
    assert a["validation_shared"] == pytest.approx(ndcg(d.V, d.validation, rep.candidates["shared"].operator_), abs=1e-6)
    assert a["validation_dual"] == pytest.approx(ndcg(d.V, d.validation, rep.candidates["dual"].operator_), abs=1e-6)
    tr = d.triples.subset(nested_subsets(d.triples.query_ids, sizes=[32], seed=3)[32])
    cars = cars_score(tr.X, tr.Y_pos, tr.Y_neg, 2, seed=3)
    assert m["cars"] == {"choice": cars.choice, "score": cars.score, "standard_error": cars.standard_error}
    assert rep.adapter.selection_.score == cars.score
    base = closed_form_adapter(tr.X, tr.pos_rows, d.corpus, geometry=rep.adapter.geometry_, rank=2,
                               hard_negative_rows=tr.hard_negative_rows, validation_queries=d.V,
                               validation_relevance=d.validation)
    np.testing.assert_allclose(rep.baseline.operator_, base.operator_, atol=1e-12)


def test_evaluate_refuses_a_memory_that_names_a_row_beyond_the_corpus(shared_dir, tmp_path, rng):
    # #41 (mutation): the boundary is the corpus size itself, the first row that does not exist
    import numpy as np

    from asymgeo.adapters import save_adapter
    from asymgeo.adapters.memory import DocumentMemory
    from asymgeo.retrieval.memory import memory_table_from_pairs

    n_docs = sum(1 for ln in (shared_dir / "data" / "scifact" / "corpus.jsonl").read_text().splitlines() if ln.strip())
    assert n_docs == 5183  # the file, read here

    def saved(row, name):
        ad = Adapter.from_maps(0.01 * rng.normal(size=(2, 384)), 0.01 * rng.normal(size=(2, 384)), form="augmented")
        keys = rng.normal(size=(1, 384)).astype(np.float32)
        ad.memory_ = DocumentMemory.from_table(
            memory_table_from_pairs(keys, np.array([0]), np.array([row])), threshold=0.5, weight=1.0)
        return save_adapter(ad, tmp_path / name)

    kw = dict(data_dir=shared_dir / "data", cache_dir=shared_dir / "embeddings")
    out = saved(n_docs, "beyond")
    with pytest.raises(ValueError) as err:
        evaluate_adapter("scifact", "all-MiniLM-L6-v2", out, **kw)
    assert str(err.value) == (f"{out}: the adapter's memory names corpus row 5183, beyond the 5,183 documents of "
                              "scifact: another corpus")
    res = evaluate_adapter("scifact", "all-MiniLM-L6-v2", saved(n_docs - 1, "last"), **kw)  # the last row is fine
    assert res.extra["vs_frozen"]["ndcg@10"]["adapter"] >= 0


def test_evaluate_counts_the_validation_queries_documents_as_seen_when_the_adapter_remembers(fitted_dir, shared_dir,
                                                                                            tmp_path, rng):
    # a memory holds the validation queries too (DocumentMemory.extend): their documents are seen documents,
    # so the split is drawn over every query of qrels/train.tsv (train + validation), read here from the file
    import numpy as np

    from asymgeo.adapters import save_adapter
    from asymgeo.adapters.memory import DocumentMemory
    from asymgeo.retrieval.memory import memory_table_from_pairs

    ad = load_adapter(fitted_dir)
    ad.memory_ = DocumentMemory.from_table(
        memory_table_from_pairs(rng.normal(size=(1, 384)).astype(np.float32), np.array([0]), np.array([0])),
        threshold=0.9, weight=0.5)
    out = save_adapter(ad, tmp_path / "remembering", extra=ad.metadata_["extra"])
    res = evaluate_adapter("scifact", "all-MiniLM-L6-v2", out, data_dir=shared_dir / "data",
                           cache_dir=shared_dir / "embeddings")
    train = _tsv_qrels(shared_dir / "data" / "scifact" / "qrels" / "train.tsv")
    every = {d for q in train for d, g in train[q].items() if g >= 1}
    from asymgeo.adapters.workflow import adapter_training_queries

    ids = adapter_training_queries(load_adapter(fitted_dir), "scifact", data_dir=shared_dir / "data")
    only_train = {d for q in ids for d, g in train[q].items() if g >= 1}
    assert len(only_train) < len(every)
    assert res.extra["generalisation"]["n_seen_documents"] == len(every)
