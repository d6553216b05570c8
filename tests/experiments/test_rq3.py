"""RQ3 cells (with a closed-form stand-in adapter injected by the test) and the summaries.

The cells run on the real SciFact / all-MiniLM-L6-v2 cache in ``../shared``.  The adapter is
the TEST-ONLY stand-in of ``rq3_standin.py`` (a closed-form shared/dual operator), patched in
through :func:`asymgeo.experiments.rq3.make_adapter`, until ``asymgeo.adapters`` exists.
Expected values come from independent computations: the published MTEB NDCG@10 of the
frozen encoder, a brute-force float64 ranking with a hand-written NDCG, planes rebuilt from
``load_triples``, and a direct ``cars_score`` call.  Summaries are checked on synthetic
tables whose means, intervals and counts are known by construction.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from asymgeo.data import load_beir, load_embeddings, load_triples
from asymgeo.experiments import rq3
from asymgeo.experiments.report import build_report
from asymgeo.experiments.runner import load_experiment, read_results, run_sweep
from asymgeo.kernels.geometry import relevance_moment
from asymgeo.kernels.rotation import query_rotation, relevance_planes
from asymgeo.kernels.selection import cars_score

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rq3_standin

CONFIGS = Path(__file__).resolve().parents[2] / "src" / "asymgeo" / "experiments" / "configs"
ENC = "all-MiniLM-L6-v2"
#: the shipped factory (the module fixture below replaces it with the stand-in)
REAL_MAKE_ADAPTER = rq3.make_adapter


@pytest.fixture(scope="module")
def standin():
    mp = pytest.MonkeyPatch()
    mp.setattr(rq3, "make_adapter", lambda **kw: rq3_standin.StandInAdapter(**kw))
    yield rq3_standin.FITTED
    mp.undo()


@pytest.fixture(scope="module")
def base_cfg(shared_dir):
    return {"dataset": "scifact", "encoder": ENC, "angle": 0, "rank": 8, "n": 64, "seed_index": 0,
            "master_seed": 20260809, "data_dir": str(shared_dir / "data"),
            "cache_dir": str(shared_dir / "embeddings"), "learning_rates": "1e-3 3e-3", "cars_splits": 4}


@pytest.fixture(scope="module")
def runs(standin, base_cfg):
    """A few cells, each with the two stand-in adapters it fitted."""
    out = {}
    for key, kw in {"a0": {"angle": 0}, "a90": {"angle": 90}, "a90_r4": {"angle": 90, "rank": 4},
                    "a90_s1": {"angle": 90, "seed_index": 1}}.items():
        before = len(standin)
        rec = rq3.cell({**base_cfg, **kw})
        out[key] = (rec, standin[before:])
    return out


@pytest.fixture(scope="module")
def scifact(shared_dir):
    ds = load_beir("scifact", data_dir=shared_dir / "data")
    emb = load_embeddings(ds, ENC, cache_dir=shared_dir / "embeddings")
    tr = load_triples(ds, ENC, "train", cache=emb)
    U, W = relevance_planes(relevance_moment(tr.X, tr.Y_pos, tr.Y_neg), tr.X, 8)
    return ds, emb, tr, U, W


def _subset(rec):
    return np.random.default_rng(rec["subset_seed"]).permutation(rec["n_pool"])[: rec["n_used"]]


# --------------------------------------------------------------------------- cells
def test_cell_is_deterministic(runs, base_cfg, standin):
    rec = rq3.cell({**base_cfg, "angle": 90})
    assert rec == runs["a90"][0]
    assert rec["status"] == "ok" and rec["n_used"] == 64 and rec["n_pool"] == 647 and not rec["n_capped"]
    assert rec["ndcg_diff"] == pytest.approx(rec["ndcg_dual"] - rec["ndcg_shared"])
    assert rec["winner"] == ("dual" if rec["ndcg_dual"] > rec["ndcg_shared"] else "shared")


def test_frozen_encoder_matches_published_scifact_figure(runs):
    # MTEB: all-MiniLM-L6-v2 on SciFact test, NDCG@10 = 0.645 (binary qrels: graded == binary)
    rec = runs["a0"][0]
    assert rec["ndcg_frozen"] == pytest.approx(0.645, abs=1e-3)
    assert rec["ndcg_graded_frozen"] == pytest.approx(rec["ndcg_frozen"])
    assert rec["n_test_queries"] == 300 and rec["n_val_queries"] == 162


def test_angle_zero_trains_on_load_triples(runs, scifact, shared_dir):
    rec, (sh, du) = runs["a0"]
    ds, emb, tr, _, _ = scifact
    idx = _subset(rec)
    for ad in (sh, du):
        np.testing.assert_array_equal(ad.fit_args_["X"], tr.X[idx])
        np.testing.assert_array_equal(ad.fit_args_["positive_rows"], tr.pos_rows[idx])
        np.testing.assert_array_equal(ad.fit_args_["hard_negative_rows"], tr.hard_negative_rows[idx])
        np.testing.assert_array_equal(np.asarray(ad.fit_args_["corpus"]), np.asarray(emb.corpus, np.float32))
    # relevant rows: every labelled positive of the query, from the qrels directly
    labels = ds.all_qrels()
    for i, rel in zip(idx[:10], sh.fit_args_["relevant_rows"][:10]):
        q = tr.query_ids[i]
        assert sorted(rel) == sorted(emb.corpus_rows([d for d, g in labels[q].items() if g >= 1]).tolist())


def test_rotation_moves_every_query_and_nothing_else(runs, scifact):
    rec, (sh, du) = runs["a90"]
    _ds, emb, tr, U, W = scifact
    R = query_rotation(U, W, np.pi / 2)
    idx = _subset(rec)
    for ad in (sh, du):
        np.testing.assert_allclose(ad.fit_args_["X"], tr.X[idx] @ R.T, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(ad.fit_args_["corpus"]), np.asarray(emb.corpus, np.float32))
        table = ad.fit_args_["validation_relevance"]
        Qv = np.asarray(emb.queries[emb.query_rows(table.query_ids)], dtype=np.float64)
        np.testing.assert_allclose(ad.fit_args_["validation_queries"], Qv @ R.T, atol=1e-5)
    # hard negatives were mined again for the rotated queries (they differ from the unrotated ones)
    assert not np.array_equal(sh.fit_args_["hard_negative_rows"], tr.hard_negative_rows[idx])
    assert rec["ndcg_frozen"] < runs["a0"][0]["ndcg_frozen"] - 0.01


def test_test_ndcg_against_brute_force(runs, scifact):
    rec, fitted = runs["a90"]
    ds, emb, _tr, U, W = scifact
    R = query_rotation(U, W, np.pi / 2)
    qrels = ds.qrels("test")
    qids = list(qrels)
    Q = np.asarray(emb.queries[emb.query_rows(qids)], dtype=np.float64) @ R.T
    D = np.asarray(emb.corpus, dtype=np.float64)
    disc = 1.0 / np.log2(np.arange(2, 12))
    for ad in fitted:
        S = Q @ ad.operator_ @ D.T
        top = np.argsort(-S, axis=1, kind="stable")[:, :10]
        vals = []
        for qi, q in enumerate(qids):
            rel = {d for d, g in qrels[q].items() if g >= 1}
            z = np.array([emb.corpus_ids[j] in rel for j in top[qi]], dtype=float)
            vals.append((z * disc).sum() / disc[: min(10, len(rel))].sum())
        assert rec[f"ndcg_{ad.geometry}"] == pytest.approx(np.mean(vals), abs=1e-3)


def test_seeds_and_data_are_paired(runs):
    a, (sh, du) = runs["a90"]
    r4, s1 = runs["a90_r4"][0], runs["a90_s1"][0]
    z = runs["a0"][0]
    assert sh.seed == du.seed == a["train_seed"]
    np.testing.assert_array_equal(sh.fit_args_["X"], du.fit_args_["X"])
    np.testing.assert_array_equal(sh.fit_args_["hard_negative_rows"], du.fit_args_["hard_negative_rows"])
    assert a["train_seed"] == r4["train_seed"] == z["train_seed"] and a["subset_seed"] == z["subset_seed"]
    assert s1["train_seed"] != a["train_seed"] and s1["subset_seed"] != a["subset_seed"]
    assert (sh.rank, du.rank, runs["a90_r4"][1][0].rank) == (8, 8, 4)
    assert sh.learning_rates == (1e-3, 3e-3) and sh.form == "augmented" and sh.device is None


def test_cars_beside_the_cell_matches_a_direct_call(runs):
    rec, (sh, _) = runs["a90"]
    X, pos, hard = sh.fit_args_["X"], sh.fit_args_["positive_rows"], sh.fit_args_["hard_negative_rows"]
    D = np.asarray(sh.fit_args_["corpus"])
    res = cars_score(X, D[pos], D[hard[:, 0]], 8, n_splits=4, seed=rec["cars_seed"])
    assert rec["cars_choice"] == res.choice and rec["cars_score"] == pytest.approx(res.score, rel=1e-9)
    assert rec["cars_match"] == (res.choice == rec["winner"])


def test_pool_policies(standin, base_cfg):
    rec = rq3.cell({**base_cfg, "n": 1024, "cars_splits": 0})
    assert (rec["status"], rec["n_used"], rec["n_capped"]) == ("ok", 647, True)
    assert "cars_choice" not in rec
    before = len(standin)
    skipped = rq3.cell({**base_cfg, "n": 2048, "pool_policy": "first_cap"})
    assert skipped["status"] == "beyond_pool" and len(standin) == before
    assert rq3.cell({**base_cfg, "n": 1024, "pool_policy": "first_cap", "cars_splits": 0}) == rec


def test_make_adapter_names_the_extra_when_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "asymgeo.adapters", None)
    with pytest.raises(ImportError, match=r"asymgeo\[train\]"):
        REAL_MAKE_ADAPTER(geometry="shared", rank=4)


def test_bad_configs(base_cfg):
    with pytest.raises(ValueError, match=r"missing key\(s\) \['rank'\]"):
        rq3.cell({k: v for k, v in base_cfg.items() if k != "rank"})
    with pytest.raises(ValueError, match="pool_policy"):
        rq3.cell({**base_cfg, "pool_policy": "drop"})
    with pytest.raises(ValueError, match="n >= 2"):
        rq3.cell({**base_cfg, "n": 1})
    assert rq3.parse_learning_rates("3e-4, 1e-3 3e-3") == (3e-4, 1e-3, 3e-3)
    assert rq3.parse_learning_rates(0.01) == (0.01,)
    for bad in ("fast", "", -1.0, "1e-3 0"):
        with pytest.raises(ValueError, match="learning_rates"):
            rq3.parse_learning_rates(bad)
    with pytest.raises(TypeError, match="learning_rates"):
        rq3.parse_learning_rates(True)


def test_configs_follow_the_paper():
    rot = load_experiment("rq3_rotation", config_dir=CONFIGS)
    grid = load_experiment("rq3_grid", config_dir=CONFIGS)
    assert rot.grid["angle"] == [0, 15, 30, 45, 60, 75, 90] and rot.fixed["rank"] == 16
    assert rot.fixed["n"] == 1024 and rq3.parse_learning_rates(rot.fixed["learning_rates"]) == (3e-4, 1e-3, 3e-3)
    assert len(rot.grid["seed_index"]) == 3 and rot.fixed["form"] == "augmented"
    assert grid.grid["rank"] == [4, 8, 16, 32] and grid.grid["n"] == [32, 64, 128, 256, 512, 1024, 2048]
    assert sorted(grid.grid["angle"]) == [0, 90] and rq3.parse_learning_rates(grid.fixed["learning_rates"]) == (3e-4,)
    # issue 23: the random start (F.1) is primary, the closed-form start a labelled variant
    assert rot.grid["init"] == ["random", "closed_form"] and grid.fixed["init"] == "random"
    assert (len(rot.configs()), len(grid.configs())) == (168, 672)
    assert rot.cell == grid.cell == "asymgeo.experiments.rq3:cell"
    variants = Path(__file__).resolve().parents[2] / "experiments"
    cf = load_experiment("rq3_grid_closed_form", config_dir=variants)
    planes = load_experiment("rq3_rotation_random_planes", config_dir=variants)
    assert cf.fixed["init"] == "closed_form" and len(cf.configs()) == 672
    assert {k: v for k, v in cf.fixed.items() if k != "init"} == {k: v for k, v in grid.fixed.items() if k != "init"}
    assert planes.fixed["plane_directions"] == "random" and planes.grid["angle"] == [0, 45, 90]
    assert planes.grid["init"] == ["random"] and len(planes.configs()) == 36


@pytest.mark.slow
def test_quick_variants_run_through_the_runner_and_report(standin, shared_dir, tmp_path):
    results = {}
    for name in ("rq3_rotation", "rq3_grid"):
        exp = load_experiment(name, quick=True, config_dir=CONFIGS)
        exp = dataclasses.replace(exp, fixed={**exp.fixed, "data_dir": str(shared_dir / "data"),
                                              "cache_dir": str(shared_dir / "embeddings")})
        res = run_sweep(exp, results_dir=tmp_path, workers=1, progress=False, command=f"test {name}")
        assert res.n_failed == 0 and res.n_run == len(exp.configs())
        results[name] = read_results(tmp_path, exp.name)
    grid = results["rq3_grid"]
    assert (grid["status"] == "beyond_pool").sum() == 2 and (grid["status"] == "ok").sum() == 6
    text, claim_rows, figs = rq3.report_section(results, tmp_path / "figs", "figs", suffix="-quick")
    assert "Figure 5" in text and "Figure 6" in text and all(f.is_file() and f.stat().st_size > 0 for f in figs)
    assert len(figs) == 3 and any("n = 32" in r[0] for r in claim_rows)  # figure 5 per start, one figure 6
    # the report builder picks the RQ3 results up (other experiments listed as not run)
    page = build_report(tmp_path, tmp_path / "docs", quick=True).read_text()
    assert "## RQ3: query rotation with trained adapters (Figure 5)" in page
    assert "RQ3 grid (90°), pooled: Shared wins most cells at n = 32" in page
    assert "Not run: `asymgeo reproduce rq1 --quick`" in page
    assert (tmp_path / "docs" / "figures" / "rq3_figure6_90deg-quick.png").is_file()
    # the stand-alone results page: claims, wall times, per-cell tables, figures
    page2 = rq3.write_results_page(tmp_path, tmp_path / "docs2", names=("rq3_rotation-quick", "rq3_grid-quick"))
    text2 = page2.read_text()
    assert "## Claims" in text2 and "## Runs and wall times" in text2 and "test rq3_grid" in text2
    csv = (tmp_path / "docs2" / "results" / "rq3_grid-quick.csv").read_text().splitlines()
    assert len(csv) == 1 + len(results["rq3_grid"])  # header + one row per cell
    assert (tmp_path / "docs2" / "figures" / "rq3_figure5.png").stat().st_size > 0
    assert (tmp_path / "docs2" / "figures" / "rq3_figure5_closed_form.png").stat().st_size > 0
    assert "pq_dual" not in csv[0]  # per-query columns stay in the parquet table


# --------------------------------------------------------------------------- summaries
T975_2 = 4.302652729911275  # Student t 97.5% quantile, 2 degrees of freedom


def _rotation_table(slope_b=1e-4):
    rows = []
    for ds, base, slope in (("A", 0.001, 2e-4), ("B", 0.003, slope_b)):
        for enc, shift in (("e1", 0.0), ("e2", 0.002)):
            for angle in (0, 45, 90):
                for s, off in enumerate((-0.001, 0.0, 0.001)):
                    diff = base + shift + slope * angle + off
                    rows.append({"study": "rotation", "dataset": ds, "encoder": enc, "angle": angle, "seed_index": s,
                                 "ndcg_shared": 0.5, "ndcg_dual": 0.5 + diff, "ndcg_diff": diff,
                                 "ndcg_frozen": 0.4, "n_used": 1024, "status": "ok"})
    rows.append({**rows[0], "status": "beyond_pool", "ndcg_diff": 99.0})  # never counted
    return pd.DataFrame(rows)


def test_rotation_summary_known_means_and_intervals():
    s = rq3.rotation_summary(_rotation_table())
    assert len(s) == 12 and (s["seeds"] == 3).all()
    assert (s["init"] == "closed_form").all()  # records without init ran with the adapter default
    r = s[(s["dataset"] == "A") & (s["encoder"] == "e2") & (s["angle"] == 90)].iloc[0]
    assert r["diff_mean"] == pytest.approx(0.001 + 0.002 + 0.018)
    assert r["diff_sd"] == pytest.approx(0.001)
    assert r["ci_high"] - r["diff_mean"] == pytest.approx(T975_2 * 0.001 / np.sqrt(3))
    assert np.isnan(r["q_ci_low"])  # no per-query columns: no query-level interval
    m = rq3.rotation_means(s).set_index("angle")
    # pairs at 0 deg: 0.001, 0.003, 0.003, 0.005 -> mean 0.003
    assert m.loc[0, "mean"] == pytest.approx(0.003) and m.loc[0, "pairs_min"] == pytest.approx(0.001)
    assert m.loc[90, "mean"] == pytest.approx(0.003 + 90 * (2e-4 + 1e-4) / 2)


def _query_table(effects, m=40, seeds=3, noise=0.01, seed=0):
    """Per-query records: pair -> (gap at 0 deg, gap at 90 deg); per-query NDCG values drawn so
    that the per-query gaps have exactly the given means."""
    rng = np.random.default_rng(seed)
    rows = []
    for (ds, enc, init), (g0, g90) in effects.items():
        base = rng.uniform(0.2, 0.8, size=m)
        for angle, gap in ((0, g0), (90, g90)):
            for s in range(seeds):
                e = rng.normal(0, noise, size=m)
                e -= e.mean()
                shared = base + rng.normal(0, 0.02, size=m)
                dual = shared + gap + e
                rows.append({"study": "rotation", "dataset": ds, "encoder": enc, "init": init, "angle": angle,
                             "seed_index": s, "ndcg_shared": shared.mean(), "ndcg_dual": dual.mean(),
                             "ndcg_diff": dual.mean() - shared.mean(), "ndcg_frozen": 0.4, "n_used": 64,
                             "status": "ok", "pq_shared": shared.tolist(), "pq_dual": dual.tolist()})
    return pd.DataFrame(rows)


def test_angle_changes_are_paired_by_seed_and_query():
    from scipy import stats

    t = _query_table({("A", "e", "random"): (0.0, 0.02), ("B", "e", "random"): (0.01, 0.01)})
    ch = rq3.angle_changes(t).set_index("dataset")
    assert ch.loc["A", "change"] == pytest.approx(0.02) and ch.loc["B", "change"] == pytest.approx(0.0, abs=1e-12)
    # independent: the per-query change averaged over seeds, by scipy's one-sample t interval
    a = t[t["dataset"] == "A"]
    per_q = np.mean([np.subtract(r1.pq_dual, r1.pq_shared) - np.subtract(r0.pq_dual, r0.pq_shared)
                     for r0, r1 in zip(a[a.angle == 0].sort_values("seed_index").itertuples(),
                                       a[a.angle == 90].sort_values("seed_index").itertuples())], axis=0)
    ci = stats.ttest_1samp(per_q, 0.0).confidence_interval(0.95)
    assert (ch.loc["A", "ci_low"], ch.loc["A", "ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-9)
    assert ch.loc["A", "queries"] == 40 and ch.loc["A", "seeds"] == 3
    assert ch.loc["A", "ci_low"] > 0 and ch.loc["B", "ci_low"] < 0 < ch.loc["B", "ci_high"]
    # pooled: mean over pairs, standard errors combined as independent test sets
    p = rq3.pooled_changes(ch.reset_index()).iloc[0]
    se = np.hypot(ch.loc["A", "se"], ch.loc["B", "se"]) / 2
    assert p["change"] == pytest.approx(0.01) and p["ci_high"] - p["change"] == pytest.approx(1.959964 * se)
    assert p["pair_seeds"] == 6


def test_rotation_claims_per_pair_and_start():
    eff = {("A", "e", "random"): (0.0, 0.02), ("B", "e", "random"): (0.01, 0.01),
           ("A", "e", "closed_form"): (0.03, 0.0), ("B", "e", "closed_form"): (0.03, 0.0)}
    c = rq3.claims(_query_table(eff))
    assert list(dict.fromkeys(c["start"])) == ["random", "closed_form"]  # primary first
    h = {(r.claim, r.start): r.holds for r in c.itertuples()}
    assert h[("RQ3 rotation, A / e: Dual − Shared rises from 0° to 90°", "random")] is True
    assert h[("RQ3 rotation, B / e: Dual − Shared rises from 0° to 90°", "random")] == "inconclusive"
    assert h[("RQ3 rotation, A / e: Dual − Shared rises from 0° to 90°", "closed_form")] is False
    assert h[("RQ3 rotation: every dataset–encoder pair's gap increases from 0° to 90°", "random")] == "inconclusive"
    assert h[("RQ3 rotation: every dataset–encoder pair's gap increases from 0° to 90°", "closed_form")] is False
    assert h[("RQ3 rotation, mean over pairs: Dual − Shared rises from 0° to 90°", "random")] is True
    assert h[("RQ3 rotation, B / e: Dual beats Shared at 90°", "random")] is True
    assert h[("RQ3 rotation, A / e: Dual beats Shared at 90°", "closed_form")] == "inconclusive"
    assert set(c["scope"]) == {"A / e", "B / e", "pooled"}


def test_rotation_claims_without_per_query_columns_use_seeds():
    c = rq3.claims(_rotation_table()).set_index("claim")
    row = c.loc["RQ3 rotation, A / e1: Dual − Shared rises from 0° to 90°"]
    # seeds only: change 0.018 exactly in every seed -> zero spread, interval degenerate at +0.018
    assert "+0.0180" in row["ours"] and "3 seeds" in row["ours"]
    assert "4 pairs" in c.loc["RQ3 rotation, mean over pairs: Dual − Shared rises from 0° to 90°", "ours"]


def _grid_table():
    """2 pairs x ranks 4/32 x n 32/1024/2048 x 3 seeds; winners and CARS choices planted."""
    rows = []
    for ds in ("A", "B"):
        for rank in (4, 32):
            for n in (32, 1024, 2048):
                # n=32: shared wins except (B, 32); large n: dual wins except (B, 4, 2048)
                sign = -1 if n == 32 else 1
                if (ds, rank, n) in {("B", 32, 32), ("B", 4, 2048)}:
                    sign = -sign
                for s in range(3):
                    diff = sign * (0.002 + 0.001 * s)
                    shared = 0.70 + (0.002 if rank == 32 else 0.0) + 0.0005 * s
                    cars = "dual" if (n > 32 or s == 0) else "shared"   # majority: shared at 32, dual above
                    rows.append({"study": "grid", "dataset": ds, "encoder": "e", "angle": 90, "rank": rank,
                                 "n_used": n, "seed_index": s, "ndcg_shared": shared, "ndcg_dual": shared + diff,
                                 "ndcg_diff": diff, "cars_choice": cars, "status": "ok"})
    return pd.DataFrame(rows)


def test_grid_summary_winners_and_cars_counts():
    g = rq3.grid_summary(_grid_table())
    assert len(g) == 12
    assert (g[g["n_used"] == 32]["winner"] == "shared").sum() == 3
    assert (g[g["n_used"] > 32]["winner"] == "dual").sum() == 7
    assert (g["cars_choice"] == np.where(g["n_used"] == 32, "shared", "dual")).all()
    # CARS matches every cell except the two planted exceptions
    assert int(g["cars_match"].sum()) == 10
    counts = rq3.cars_match_counts(g).set_index("dataset")
    assert counts.loc["A", "cell_matches"] == 6 and counts.loc["B", "cell_matches"] == 4
    # seed level: A all 18 seeds match except n=32 seed 0 (2 cells); B: by hand
    assert counts.loc["A", "seed_matches"] == 16 and counts.loc["A", "seeds"] == 18
    assert counts.loc["B", "seed_matches"] == 1 + 2 + 3 + 3 + 0 + 3  # (4,32) (32,32) (4,1024) (32,1024) (4,2048) (32,2048)


def test_rank_contrasts_by_hand():
    rc = rq3.rank_contrasts(_grid_table()).set_index("dataset")
    # shared is exactly 0.002 higher at rank 32 in every paired cell: zero spread
    assert rc.loc["pooled", "shared_gain"] == pytest.approx(0.002) and rc.loc["pooled", "cells"] == 18
    assert rc.loc["A", "cells"] == 9
    # A: diff identical at both ranks -> advantage change 0 exactly; dual gain = shared gain
    assert rc.loc["A", "advantage_change"] == pytest.approx(0.0, abs=1e-15)
    # B, by hand: rank-32 sign flips at n=32 (+), rank-4 flips at 2048 (-): changes per cell
    # (n=32) +2d, (1024) 0, (2048) +2d with d = 0.002 + 0.001 s -> mean 4/3 * 0.003
    assert rc.loc["B", "advantage_change"] == pytest.approx(4 / 3 * 0.003)


def test_grid_claims():
    c = rq3.claims(_grid_table())
    h = {r.claim: r.holds for r in c.itertuples()}
    assert h["RQ3 grid (90°), pooled: Shared wins most cells at n = 32"] is True
    assert h["RQ3 grid (90°), B / e: Shared wins most cells at n = 32"] is False  # 1 of 2 is not most
    assert h["RQ3 grid (90°), pooled: Dual wins every cell at n = 1024 and 2048"] is False
    assert h["RQ3 grid (90°), A / e: Dual wins every cell at n = 1024 and 2048"] is True
    assert h["RQ3 grid (90°), A / e: rank 32 above rank 4 in NDCG@10, both families"] is True
    # B's advantage grows at rank 32 in 6 of 9 cells and never shrinks: "not enlarged" is judged
    b = c[c["claim"] == "RQ3 grid (90°), B / e: rank 32 does not enlarge Dual's advantage over rank 4"].iloc[0]
    assert b["holds"] in (False, "inconclusive") and "[" in b["ours"]
    a = c[c["claim"] == "RQ3 grid (90°), A / e: rank 32 does not enlarge Dual's advantage over rank 4"].iloc[0]
    assert a["holds"] == "inconclusive"  # exactly no change: the (degenerate) interval contains zero
    both = rq3.claims(pd.concat([_grid_table(), _rotation_table()], ignore_index=True))
    assert len(both) > len(c)


def test_report_section_on_synthetic_tables(tmp_path):
    grid = _grid_table()
    grid = pd.concat([grid, grid.assign(angle=0), grid.assign(init="random")], ignore_index=True)
    rot = _query_table({("A", "e", "random"): (0.0, 0.02), ("A", "e", "closed_form"): (0.03, 0.0)})
    text, claim_rows, figs = rq3.report_section({"rq3_rotation": rot, "rq3_grid": grid}, tmp_path, "figures")
    assert [f.name for f in figs] == ["rq3_figure5.png", "rq3_figure5_closed_form.png", "rq3_figure6_90deg.png",
                                      "rq3_figure6_90deg_closed_form.png", "rq3_figure6_0deg_closed_form.png"]
    assert "![Figure 5, random start (Appendix F.1; primary)](figures/rq3_figure5.png)" in text
    assert "| A / e | 90° | 4 | 32 |" in text and "### Start against start" in text
    assert all(" — random start" in r[0] or " — closed-form start" in r[0] for r in claim_rows)
    assert {r[3] for r in claim_rows} <= {"**yes**", "**no**", "**inconclusive**", "n/a"}


def test_markdown_verdicts():
    from asymgeo.experiments._markdown import interval_holds, plural, verdict

    assert [interval_holds(0.1, 0.2), interval_holds(-0.2, -0.1), interval_holds(-0.1, 0.1)] == [
        True, False, "inconclusive"]
    assert interval_holds(float("nan"), 1.0) is None and interval_holds(0.0, 1.0) == "inconclusive"
    assert verdict("inconclusive") == "**inconclusive**" and verdict(None) == "n/a"
    with pytest.raises(ValueError, match="inconclusive"):
        verdict("maybe")
    assert (plural(1, "encoder"), plural(2, "encoder"), plural(0, "pair")) == ("1 encoder", "2 encoders", "0 pairs")


def test_portable_command_prints_no_machine_paths(tmp_path):
    from asymgeo.experiments.runner import portable_command

    cmd = f"asymgeo reproduce x --results-dir {tmp_path}/results --config-dir=/elsewhere/cfg_a --workers 2"
    assert portable_command(cmd, tmp_path) == "asymgeo reproduce x --results-dir results --config-dir=<outside>/cfg_a --workers 2"
    assert portable_command("asymgeo reproduce rq1 --quick", tmp_path) == "asymgeo reproduce rq1 --quick"


def test_summaries_reject_bad_tables(tmp_path):
    with pytest.raises(ValueError, match=r"missing column\(s\) \['ndcg_diff'\]"):
        rq3.rotation_summary(_rotation_table().drop(columns="ndcg_diff"))
    with pytest.raises(ValueError, match="no finished cells"):
        rq3.grid_summary(_grid_table().assign(status="beyond_pool"))
    with pytest.raises(TypeError, match="DataFrame"):
        rq3.rotation_summary([{"angle": 0}])
    with pytest.raises(ValueError, match="'study'"):
        rq3.claims(_grid_table().drop(columns="study"))
    with pytest.raises(ValueError, match="unknown study"):
        rq3.claims(_grid_table().assign(study="other"))
    with pytest.raises(ValueError, match="CARS"):
        rq3.cars_match_counts(rq3.grid_summary(_grid_table().drop(columns="cars_choice")))
    with pytest.raises(ValueError, match="unknown experiment"):
        rq3.report_section({"rq1": _grid_table()}, tmp_path)
    with pytest.raises(ValueError, match="none of"):
        rq3.report_section({}, tmp_path)
    with pytest.raises(ValueError, match="unknown init"):
        rq3.rotation_summary(_rotation_table().assign(init="warm"))
    with pytest.raises(ValueError, match="no grid cells at 45"):
        rq3.plot_grid(rq3.grid_summary(_grid_table()), tmp_path / "x.png", 45)


def test_cell_with_the_real_adapter_selects_on_validation_never_test(base_cfg, monkeypatch, shared_dir):
    """rq3.cell with the shipped Adapter (not the stand-in): both families choose their checkpoints
    on the validation queries, and the test queries never reach training or selection."""
    from asymgeo.adapters import Adapter
    from asymgeo.adapters.workflow import load_adaptation_data

    monkeypatch.setattr(rq3, "make_adapter", REAL_MAKE_ADAPTER)
    d = load_adaptation_data("scifact", ENC, data_dir=shared_dir / "data", cache_dir=shared_dir / "embeddings")
    seen = []
    real_fit = Adapter.fit

    def spy(self, X, *a, validation_queries=None, validation_relevance=None, **k):
        seen.append((self.geometry, len(X), list(validation_relevance.query_ids), np.asarray(validation_queries).shape))
        return real_fit(self, X, *a, validation_queries=validation_queries, validation_relevance=validation_relevance,
                        **k)

    monkeypatch.setattr(Adapter, "fit", spy)
    rec = rq3.cell({**base_cfg, "rank": 4, "epochs": 1, "learning_rates": "1e-3"})
    assert [s[0] for s in seen] == ["shared", "dual"]
    for _, n, ids, shape in seen:
        assert n == 64 and shape[0] == len(ids)
        assert set(ids) <= set(d.validation.query_ids) and not set(ids) & set(d.test.query_ids)
    assert 0.5 < rec["ndcg_shared"] < 0.9 and 0.5 < rec["ndcg_dual"] < 0.9


def test_cell_records_per_query_ndcg_and_the_generalisation_split(runs, scifact):
    """Per-query columns average to the cell's means; the seen / unseen split of the test queries
    equals a brute-force one from the qrels and the cell's own training queries."""
    rec, (sh, du) = runs["a90"]
    ds, _emb, tr, _U, _W = scifact
    for fam in ("shared", "dual", "frozen"):
        assert len(rec[f"pq_{fam}"]) == 300
        assert np.mean(rec[f"pq_{fam}"]) == pytest.approx(rec[f"ndcg_{fam}"], abs=1e-12)
    train_ids = [tr.query_ids[i] for i in _subset(rec)]
    labels = ds.all_qrels()
    seen_docs = {d for q in train_ids for d, g in labels[q].items() if g > 0}
    test = ds.qrels("test")
    n_seen = sum(any(g > 0 and d in seen_docs for d, g in test[q].items()) for q in test)
    assert (rec["gen_n_seen"], rec["gen_n_unseen"], rec["gen_n_all"]) == (n_seen, 300 - n_seen, 300)
    # the report's frozen and family figures are the cell's own (exact search, same test queries)
    for fam in ("frozen", "shared", "dual"):
        assert rec[f"gen_{fam}_all_ndcg"] == pytest.approx(rec[f"ndcg_{fam}"], abs=2e-3)
    assert rec["gen_dual_all_diff"] == pytest.approx(rec["ndcg_dual"] - rec["ndcg_frozen"], abs=2e-3)
    assert rec["gen_prior_weight"] >= 0 and rec["init_used"] == "closed_form"
    assert rec["plane_directions"] == "leading"


def test_random_planes_variant_changes_only_w(standin, base_cfg, runs):
    rec = rq3.cell({**base_cfg, "angle": 90, "plane_directions": "random", "plane_seed": 7, "cars_splits": 0})
    lead = runs["a90"][0]
    assert rec["plane_directions"] == "random" and rec["relevance_energy"] == pytest.approx(lead["relevance_energy"])
    assert rec["w_query_energy"] != pytest.approx(lead["w_query_energy"])
    assert rec["ndcg_frozen"] != pytest.approx(lead["ndcg_frozen"])


# ------------------------------------------------------------------ small helpers by hand (issue #19)
def test_parse_learning_rates_takes_a_list_and_refuses_other_types():
    assert rq3.parse_learning_rates([1e-3, "3e-3"]) == (1e-3, 3e-3)
    with pytest.raises(TypeError, match=r"learning_rates: expected a number or a string of numbers, got \{'a': 1\}"):
        rq3.parse_learning_rates({"a": 1})


def test_t_interval_by_hand():
    from scipy import stats

    m, lo, hi, se, n = rq3.t_interval([1.0, 2.0, 4.0, float("nan")])
    sd = np.std([1.0, 2.0, 4.0], ddof=1)
    half = stats.t.ppf(0.975, 2) * sd / np.sqrt(3)
    assert (m, n) == (7 / 3, 3) and (lo, hi, se) == pytest.approx((7 / 3 - half, 7 / 3 + half, sd / np.sqrt(3)))
    one = rq3.t_interval([0.5])
    assert one[0] == 0.5 and one[4] == 1 and all(np.isnan(one[1:4]))
    none = rq3.t_interval([float("nan")])
    assert none[4] == 0 and all(np.isnan(none[:4]))


def test_query_matrix_needs_equal_length_per_query_rows():
    g = pd.DataFrame({"seed_index": [1, 0], "pq": [np.array([1.0, 2.0]), np.array([3.0, 4.0])]})
    np.testing.assert_array_equal(rq3._query_matrix(g, "pq"), [[3.0, 4.0], [1.0, 2.0]])  # seed order
    assert rq3._query_matrix(g, "absent") is None
    uneven = pd.DataFrame({"seed_index": [0, 1], "pq": [np.array([1.0]), np.array([3.0, 4.0])]})
    assert rq3._query_matrix(uneven, "pq") is None
    missing = pd.DataFrame({"seed_index": [0, 1], "pq": [np.array([1.0]), float("nan")]})
    assert rq3._query_matrix(missing, "pq") is None


def test_a_split_without_usable_judgements_is_refused(tmp_path):
    import json

    from asymgeo.data import write_embeddings

    root = tmp_path / "d"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": "", "text": d}) + "\n" for d in "ab"))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": q}) + "\n" for q in ("q1", "q2")))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ta\t1\n")
    C = np.eye(2, dtype=np.float32)
    write_embeddings(tmp_path / "c" / "d" / "enc", C, ["a", "b"], C, ["q1", "q2"], {"normalised": True})
    ds, emb = load_beir(root), load_embeddings(root, "enc", cache_dir=tmp_path / "c")
    with pytest.raises(ValueError, match="d: the validation split has no usable relevance judgements"):
        rq3._split_table(ds, emb, ["q2"], "validation")
