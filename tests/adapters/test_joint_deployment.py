"""fit_adapter(candidates="joint"): which map + memory is deployed, and the guard that protects
queries about documents no training query found.  Unit cases built by hand (the guard's interval
recomputed by an independent bootstrap), then the wiring on SciFact."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from asymgeo.adapters.workflow import choose_deployment


def _cand(geometry, values, weight=1.0):
    ad = SimpleNamespace(geometry_=geometry)
    v = np.asarray(values, dtype=np.float64)
    mem = SimpleNamespace(validation_values_=v, map_validation_ndcg_=float(v.mean()) - 0.01, weight_=weight)
    return ad, mem


def _boot_high(d, n_boot=2000, seed=0):
    """95% percentile bootstrap upper end of mean(d), drawn here independently of the library."""
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(n_boot, d.size))].mean(axis=1)
    return float(np.quantile(means, 0.975))


def test_the_best_validation_whole_wins_unless_it_loses_on_protected_queries_on_average():
    rng = np.random.default_rng(1)
    m, k = 80, 40  # 40 protected queries (the second half)
    protected = np.arange(m) >= m - k
    frozen = rng.uniform(0.2, 0.8, size=m)
    # "greedy": best on all queries but every protected query loses 0.2 (clearly below frozen)
    greedy = frozen + np.where(protected, -0.2, 0.7)
    # "straddle": protected queries lose 0.02 on average, within noise (its interval reaches
    # above zero): the SciFact MiniLM seed-1 case, let through by an interval-only guard
    noise = rng.normal(0, 0.1, size=m)
    noise[protected] -= noise[protected].mean()
    straddle = frozen + np.where(protected, noise - 0.02, 0.4)
    # "gain": protected queries scattered around +0.01, unprotected +0.3
    gain = frozen + np.where(protected, noise + 0.01, 0.3)
    safe = frozen + np.where(protected, 0.0, 0.1)
    cands = {"greedy": _cand("dual", greedy), "straddle": _cand("query", straddle), "gain": _cand("query", gain),
             "safe": _cand("shared", safe)}
    assert greedy.mean() > straddle.mean() > gain.mean() > safe.mean()
    out = choose_deployment(cands, frozen, protected, seed=0)
    assert out["choice"] == "gain" and out["note"] == ""
    rec = out["candidates"]
    assert [rec[n]["feasible"] for n in cands] == [False, False, True, True]
    assert rec["straddle"]["protected_diff"] == pytest.approx(-0.02, abs=1e-12)
    assert rec["gain"]["protected_diff"] == pytest.approx(float((gain - frozen)[protected].mean()), abs=1e-12)
    # the interval is recorded beside the rule: recomputed by an independent bootstrap, the
    # straddling candidate's reaches above zero (the old guard would have passed it)
    assert _boot_high((straddle - frozen)[protected]) > 0 > _boot_high((greedy - frozen)[protected])
    assert rec["straddle"]["protected_ci_high"] == pytest.approx(_boot_high((straddle - frozen)[protected]), abs=0.01)
    assert out["n_protected"] == k and rec["greedy"]["validation_ndcg@10"] == pytest.approx(greedy.mean())


def test_ties_go_to_the_first_listed_and_too_few_protected_queries_drop_the_guard():
    frozen = np.full(40, 0.5)
    protected = np.zeros(40, dtype=bool)
    protected[:5] = True  # 5 < 32: no guard
    bad = frozen + np.where(protected, -0.4, 0.2)
    same = frozen + 0.1
    out = choose_deployment({"a": _cand("shared", same), "b": _cand("query", same.copy()),
                             "bad": _cand("dual", bad)}, frozen, protected)
    assert out["choice"] == "bad" and "without the unseen-document guard" in out["note"]
    out = choose_deployment({"a": _cand("shared", same), "b": _cand("query", same.copy())}, frozen, protected)
    assert out["choice"] == "a"
    one = np.zeros(40, dtype=bool)
    one[3] = True  # a single protected query (NFCorpus): no interval, no guard, its difference kept
    out = choose_deployment({"bad": _cand("dual", bad)}, frozen, one)
    assert out["choice"] == "bad" and out["candidates"]["bad"]["protected_diff"] == pytest.approx(-0.4)
    assert "protected_ci_high" not in out["candidates"]["bad"]


def test_when_every_whole_hurts_protected_queries_the_least_harmful_is_deployed_and_said():
    frozen = np.full(50, 0.6)
    protected = np.arange(50) < 40
    worse = frozen + np.where(protected, -0.3, 0.4)
    less = frozen + np.where(protected, -0.1, 0.1)
    out = choose_deployment({"worse": _cand("dual", worse), "less": _cand("query", less)}, frozen, protected)
    assert out["choice"] == "less" and "below frozen on average" in out["note"]


def _margin_case():
    """40 protected queries whose differences alternate +-0.1 around an offset (by hand: sample sd
    sqrt(0.4 / 39), standard error sqrt(0.4 / 39) / sqrt(40) = 0.016013, half of it 0.0080064)."""
    m, k = 60, 40
    frozen = np.full(m, 0.5)
    protected = np.arange(m) < k
    wiggle = np.where(np.arange(k) % 2 == 0, 0.1, -0.1)

    def whole(offset, rest):
        return frozen + np.concatenate([wiggle + offset, np.full(m - k, rest)])

    cands = {"thin": _cand("query", whole(0.007, 0.40)),  # 0.007 < 0.5 SE: out at the default margin
             "clear": _cand("query", whole(0.009, 0.30)),  # 0.5 SE <= 0.009 < 0.75 SE
             "safe": _cand("shared", frozen + np.where(protected, 0.0, 0.10))}  # exactly 0, sd 0: in at any margin
    return cands, frozen, protected


def test_the_guard_asks_for_a_gain_of_guard_margin_standard_errors_worked_by_hand():
    cands, frozen, protected = _margin_case()
    se = np.sqrt(0.4 / 39) / np.sqrt(40)
    out = choose_deployment(cands, frozen, protected)  # the default margin: 0.5
    assert out["guard_margin"] == 0.5 and out["choice"] == "clear" and out["note"] == ""
    assert out["candidates"]["thin"]["protected_se"] == pytest.approx(se, rel=1e-9)
    assert out["candidates"]["thin"]["protected_diff"] == pytest.approx(0.007, abs=1e-12)
    assert [out["candidates"][n]["feasible"] for n in cands] == [False, True, True]
    assert "at least 0.5 standard errors" in out["rule"]
    assert choose_deployment(cands, frozen, protected, guard_margin=0)["choice"] == "thin"  # the earlier rule
    assert choose_deployment(cands, frozen, protected, guard_margin=0.75)["choice"] == "safe"  # 0 >= 0.75 * 0
    # every candidate gains, none by 2 SE except "safe" (removed): the largest gain is deployed, said in words
    out = choose_deployment({n: cands[n] for n in ("thin", "clear")}, frozen, protected, guard_margin=2)
    assert out["choice"] == "clear" and out["rule"] == "least harm on protected validation queries"
    assert out["note"].startswith("deployment: no candidate gains at least 2 standard errors over frozen")


@pytest.mark.parametrize("bad", [-0.5, float("nan"), float("inf"), "0.5", True, None])
def test_a_bad_guard_margin_is_refused_by_name(bad):
    cands, frozen, protected = _margin_case()
    with pytest.raises(ValueError, match=r"^guard_margin: expected a (finite )?number of standard errors >= 0"):
        choose_deployment(cands, frozen, protected, guard_margin=bad)


def test_fit_adapter_refuses_a_bad_guard_margin_before_loading_anything():
    from asymgeo.adapters.workflow import fit_adapter

    with pytest.raises(ValueError, match=r"^guard_margin: "):
        fit_adapter("no-such-dataset", "all-MiniLM-L6-v2", guard_margin=-1.0)


def test_values_of_another_length_are_refused_by_name():
    with pytest.raises(ValueError, match=r"candidates\['x'\].*one value per validation query"):
        choose_deployment({"x": _cand("dual", np.ones(9))}, np.ones(10), np.ones(10, dtype=bool))
    with pytest.raises(ValueError, match="at least one"):
        choose_deployment({}, np.ones(3), np.ones(3, dtype=bool))


@pytest.fixture(scope="module")
def joint_report(shared_dir):
    from asymgeo.adapters.workflow import fit_adapter

    kw = dict(data_dir=shared_dir / "data", cache_dir=shared_dir / "embeddings")
    import time

    import asymgeo.adapters.workflow as workflow

    loads = []  # every split the fit loads: its own, then the cross-fitted guard's blocks
    real_load = workflow.load_adaptation_data

    def spy_load(*args, **kwargs):
        d = real_load(*args, **kwargs)
        loads.append({"split": kwargs.get("split"), "train": list(d.triples.query_ids),
                      "validation": list(d.validation.query_ids), "cache": kwargs.get("triples_cache", True)})
        return d

    t0 = time.perf_counter()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(workflow, "load_adaptation_data", spy_load)
        rep = fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="auto", rank=4, n_train=120, epochs=1,
                          learning_rates=(1e-3,), report=False, **kw)
    rep.measured_wall = time.perf_counter() - t0  # for the accounting test below
    rep.loads = loads
    return rep


def test_the_stage_seconds_add_up_to_the_call(joint_report):
    # metrics["seconds"]: each stage's wall time, laps from the call's start to its end, so they are
    # non-negative and together make up the call (not a speed check: the bookkeeping of the laps)
    secs = joint_report.metrics["seconds"]
    assert {"load and mine", "selection", "closed form", "figures and memory"} <= set(secs)
    assert all(v >= 0 for v in secs.values())
    # a stage met twice adds its laps (selection runs between every training): the laps cover all but the
    # call's first and last few statements (0.99 of it here)
    assert 0.9 * joint_report.measured_wall <= sum(secs.values()) <= joint_report.measured_wall + 0.01
    assert joint_report.metrics["mining"] == {"index": "exact"}  # the default mining, recorded


def test_fit_decides_the_deployed_whole_among_family_and_query_maps(joint_report, shared_dir):
    from asymgeo.adapters.workflow import _per_query_ndcg, load_adaptation_data

    rep = joint_report
    j = rep.metrics["joint"]
    fam = rep.metrics["auto"]["choice"]
    blends = {f"query (blend {lam})" for lam in ("0.25", "0.5", "0.75")}
    assert set(j["candidates"]) == {f"{fam} (document_disjoint)", "query (document_disjoint)", "query (all)", *blends}
    assert set(rep.joint) == set(j["candidates"]) and rep.adapter is rep.joint[j["choice"]]
    feasible = {n: c["validation_ndcg@10"] for n, c in j["candidates"].items() if c["feasible"]}
    assert j["choice"] == max(feasible, key=feasible.get)
    assert j["guard_margin"] == 0.5  # fit_adapter's default reaches the guard
    d = load_adaptation_data("scifact", "all-MiniLM-L6-v2", data_dir=shared_dir / "data",
                             cache_dir=shared_dir / "embeddings", train_ids=rep.adapter_train_ids)
    # the recorded map figures are each map's NDCG@10 on all validation queries, recomputed here
    for name, ad in rep.joint.items():
        want = _per_query_ndcg(d.V, d.validation, d.corpus, ad.operator_, d.corpus_ids).mean()
        assert j["candidates"][name]["map_validation_ndcg@10"] == pytest.approx(want, abs=1e-6)
    # the two query-only maps follow one trajectory (same seed): the one chosen on all validation
    # queries is at least as good on them as the one chosen on the document-disjoint part
    qa, qd = j["candidates"]["query (all)"], j["candidates"]["query (document_disjoint)"]
    assert qa["map_validation_ndcg@10"] >= qd["map_validation_ndcg@10"] - 1e-9
    # each blend is the straight path between the two query-only maps, written out here: the
    # operator of x -> x + W x is I + W^T, so it is linear in W
    Wd, Wa = rep.joint["query (document_disjoint)"].query_map_, rep.joint["query (all)"].query_map_
    for lam in (0.25, 0.5, 0.75):
        b = rep.joint[f"query (blend {lam:g})"]
        assert b.geometry_ == "query"
        np.testing.assert_allclose(b.query_map_, (1 - lam) * Wd + lam * Wa, atol=1e-12)
        np.testing.assert_allclose(b.operator_, np.eye(Wd.shape[1]) + ((1 - lam) * Wd + lam * Wa).T, atol=1e-9)
    # the deployed memory holds the training and then the validation queries
    assert rep.adapter.memory_ is not None and rep.adapter.memory_.table_.n_keys == 120 + 162


def test_candidates_family_keeps_the_selectors_family(shared_dir):
    from asymgeo.adapters.workflow import fit_adapter

    kw = dict(data_dir=shared_dir / "data", cache_dir=shared_dir / "embeddings")
    rep = fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="auto", rank=4, n_train=64, epochs=1,
                      learning_rates=(1e-3,), report=False, candidates="family", **kw)
    assert "joint" not in rep.metrics and rep.joint == {}
    assert rep.adapter.geometry_ == rep.metrics["auto"]["choice"]
    with pytest.raises(ValueError, match="candidates: expected one of 'joint', 'family'"):
        fit_adapter("scifact", "all-MiniLM-L6-v2", candidates="both", **kw)


def test_fit_prints_the_deployed_whole_and_saves_the_record(joint_report, shared_dir, tmp_path, capsys, monkeypatch):
    """The command is a thin layer: given the library's report (the fixture's), it prints and saves it."""
    import asymgeo.adapters.workflow as workflow
    from asymgeo.cli import main

    seen = {}

    def fake_fit(*args, **kwargs):
        seen.update(kwargs)
        return joint_report

    monkeypatch.setattr(workflow, "fit_adapter", fake_fit)
    out = tmp_path / "ad"
    rc = main(["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4", "--n-train", "200",
               "--epochs", "1", "--learning-rates", "1e-3", "--no-progress", "--out", str(out),
               "--data-dir", str(shared_dir / "data"), "--cache-dir", str(shared_dir / "embeddings")])
    text = capsys.readouterr().out
    assert rc == 0 and seen["candidates"] == "joint" and seen["memory"] == "auto" and seen["guard_margin"] == 0.5
    rec = json.loads((out / "metrics.json").read_text())["joint"]
    line = next(x for x in text.splitlines() if x.startswith("deployed: "))
    assert line.startswith(f"deployed: {rec['choice']} + memory")
    assert all(name in line for name in rec["candidates"])
    blocks = rec["n_protected_by_block"]
    assert len(blocks) == 5 and blocks[0] == rec["n_protected"] and seen["guard_folds"] == 5
    assert line.endswith(f"guard: a gain of at least 0.5 standard errors over frozen on {sum(blocks)} document-disjoint "
                         f"queries of 5 cross-fitted blocks ({rec['n_protected']} of them validation queries))")
    main(["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--guard-margin", "0", "--guard-folds", "1",
          "--no-progress", "--out", str(tmp_path / "ad0"), "--data-dir", str(shared_dir / "data"),
          "--cache-dir", str(shared_dir / "embeddings")])
    assert seen["guard_margin"] == 0.0 and seen["guard_folds"] == 1


@pytest.mark.parametrize("lam", [0.25, 0.5, 0.75])
def test_blended_query_map_is_the_straight_path_between_two_distinct_maps(lam):
    # #41: the fitted fixture's two query-only maps can coincide (one epoch: both selections may keep
    # the same checkpoint), which hides a blend that ignores its weight; here they differ by construction
    from asymgeo.adapters import Adapter
    from asymgeo.adapters.workflow import _blend_query_maps

    rng = np.random.default_rng(3)
    p = 5
    Wd, Wa = rng.normal(size=(p, p)), rng.normal(size=(p, p))
    a = Adapter.from_maps(Wd, np.eye(p), geometry="query", form="augmented")
    b = Adapter.from_maps(Wa, np.eye(p), geometry="query", form="augmented")
    out = _blend_query_maps(a, b, lam)
    want = (1 - lam) * Wd + lam * Wa  # written out: the weight on the second map is lam
    np.testing.assert_allclose(out.query_map_, want, atol=1e-12)
    np.testing.assert_allclose(out.operator_, np.eye(p) + want.T, atol=1e-12)
    x, y = rng.normal(size=(1, p)), rng.normal(size=(1, p))
    np.testing.assert_allclose(out.similarity(x, y), (x + x @ want.T) @ y.T, atol=1e-10)


# ---------------------------------------------------------------- #41: data that reach both sides of each branch
def _guard_case(n_protected, m=60):
    """"bad": best on all queries, -0.2 on every protected one; "ok": +0.05 everywhere."""
    frozen = np.full(m, 0.5)
    protected = np.arange(m) < n_protected
    bad = frozen + np.where(protected, -0.2, 0.4)
    return {"bad": _cand("dual", bad), "ok": _cand("query", frozen + 0.05)}, frozen, protected


def test_the_guard_applies_with_exactly_min_protected_queries():
    from asymgeo.adapters.workflow import MIN_DISJOINT_VALIDATION

    # by hand: with the guard "bad" is infeasible (-0.2 < 0) and "ok" wins; without it "bad" (0.5 + ...)
    out = choose_deployment(*_guard_case(MIN_DISJOINT_VALIDATION))
    assert out["choice"] == "ok" and out["note"] == "" and out["n_protected"] == MIN_DISJOINT_VALIDATION
    out = choose_deployment(*_guard_case(MIN_DISJOINT_VALIDATION - 1))
    assert out["choice"] == "bad" and "without the unseen-document guard" in out["note"]


def test_min_protected_given_moves_the_guards_threshold():
    assert choose_deployment(*_guard_case(3), min_protected=3)["choice"] == "ok"
    out = choose_deployment(*_guard_case(3), min_protected=4)
    assert out["choice"] == "bad" and "(< 4)" in out["note"]


def test_a_protected_mask_of_another_length_is_refused_by_name():
    with pytest.raises(ValueError, match=r"candidates\['x'\].*protected \(9,\).*one value per validation query"):
        choose_deployment({"x": _cand("dual", np.ones(10))}, np.ones(10), np.ones(9, dtype=bool))


def test_a_blend_keeps_the_first_maps_provenance():
    # the fitted blends start from the document-disjoint map: its seed, learning rate, epoch and history,
    # told apart here because the two maps' differ
    from asymgeo.adapters import Adapter
    from asymgeo.adapters.workflow import _blend_query_maps

    p = 4
    a = Adapter.from_maps(np.eye(p), np.eye(p), geometry="query", seed=1)
    b = Adapter.from_maps(-np.eye(p), np.eye(p), geometry="query", seed=2)
    a.learning_rate_, a.best_epoch_, a.history_ = 1e-3, 2, [{"epoch": 1}, {"epoch": 2}]
    b.learning_rate_, b.best_epoch_, b.history_ = 1e-2, 5, [{"epoch": 5}]
    out = _blend_query_maps(a, b, 0.25)
    assert (out.seed, out.learning_rate_, out.best_epoch_) == (1, 1e-3, 2)
    assert out.history_ == [{"epoch": 1}, {"epoch": 2}] and out.history_ is not a.history_
    np.testing.assert_allclose(out.query_map_, 0.5 * np.eye(p), atol=1e-12)  # 0.75 I + 0.25 (-I)


def test_one_protected_query_never_turns_the_guard_on_whatever_min_protected_says():
    # a paired interval needs two queries: with min_protected 0 or 1 and a single protected query the
    # guard stays off (and says so) instead of failing inside the interval; with two it applies
    for floor in (0, 1):
        out = choose_deployment(*_guard_case(1), min_protected=floor)
        assert out["choice"] == "bad" and "only 1 validation queries" in out["note"] and "(< 2)" in out["note"]
        assert "without the unseen-document guard" in out["note"]
    assert choose_deployment(*_guard_case(2), min_protected=1)["choice"] == "ok"


# ---------------------------------------------------------------- #41: what the 2026-12-05 mutation run left
def test_each_candidates_record_holds_its_own_figures_and_the_interval_of_the_callers_seed():
    from asymgeo.retrieval.compare import paired_comparison

    cands, frozen, protected = _margin_case()
    cands = {"thin": _cand("query", cands["thin"][1].validation_values_, weight=0.25),
             "clear": _cand("dual", cands["clear"][1].validation_values_, weight=2.0),
             "safe": _cand("shared", cands["safe"][1].validation_values_, weight=0.0)}
    out = choose_deployment(cands, frozen, protected, seed=7)
    for name, (ad, mem) in cands.items():
        rec, v = out["candidates"][name], mem.validation_values_
        assert set(rec) == {"geometry", "validation_ndcg@10", "map_validation_ndcg@10", "memory_weight",
                            "protected_diff", "protected_se", "protected_ci_low", "protected_ci_high", "feasible"}
        assert rec["geometry"] == ad.geometry_ and rec["memory_weight"] == mem.weight_
        assert rec["validation_ndcg@10"] == pytest.approx(v.mean(), abs=1e-15)
        assert rec["map_validation_ndcg@10"] == mem.map_validation_ndcg_
        # the recorded interval: the paired bootstrap of the protected values, 2,000 draws, 95%, the caller's seed
        want = paired_comparison(v[protected], frozen[protected], n_boot=2000, confidence=0.95, seed=7)
        assert (rec["protected_ci_low"], rec["protected_ci_high"]) == (want.ci_low, want.ci_high)
    thin = out["candidates"]["thin"]
    assert thin["protected_ci_low"] < thin["protected_diff"] < thin["protected_ci_high"]
    # no seed given: seed 0
    rec0 = choose_deployment(cands, frozen, protected)["candidates"]["thin"]
    want0 = paired_comparison(cands["thin"][1].validation_values_[protected], frozen[protected], n_boot=2000,
                              confidence=0.95, seed=0)
    assert (rec0["protected_ci_low"], rec0["protected_ci_high"]) == (want0.ci_low, want0.ci_high)
    assert want0.ci_low != want.ci_low


def test_a_protected_mask_of_zeros_and_ones_is_a_mask_not_row_numbers():
    cands, frozen, protected = _margin_case()
    as_bool = choose_deployment(cands, frozen, protected)
    as_int = choose_deployment(cands, frozen, protected.astype(np.int64))
    assert as_int["n_protected"] == 40 and as_int["choice"] == as_bool["choice"] == "clear"
    assert as_int["candidates"]["thin"]["protected_diff"] == pytest.approx(0.007, abs=1e-12)
    assert as_int["candidates"] == as_bool["candidates"]


def test_the_rule_and_the_notes_in_full_words():
    cands, frozen, protected = _margin_case()
    assert choose_deployment(cands, frozen, protected)["rule"] == (
        "highest validation NDCG@10 among the candidates whose protected gain is at least 0.5 standard errors")
    assert choose_deployment(cands, frozen, protected, guard_margin=0)["rule"] == (
        "highest validation NDCG@10 among the guarded candidates")
    out = choose_deployment(*_guard_case(5))
    assert out["rule"] == "highest validation NDCG@10 (no guard)"
    assert out["note"] == ("deployment: only 5 validation queries have no training-positive document (< 32): the map "
                           "is chosen on all validation queries without the unseen-document guard")
    fz = np.full(50, 0.6)
    prot = np.arange(50) < 40
    out = choose_deployment({"worse": _cand("dual", fz + np.where(prot, -0.3, 0.4)),
                             "less": _cand("query", fz + np.where(prot, -0.1, 0.1))}, fz, prot)
    assert out["note"] == ("deployment: every candidate is below frozen on average on the document-disjoint "
                           "validation queries; deploying 'less', the least harmful there")
    with pytest.raises(ValueError, match=r"^candidates: expected at least one \(adapter, memory\) pair$"):
        choose_deployment({}, np.ones(3), np.ones(3, dtype=bool))


def test_a_protected_gain_of_exactly_zero_is_not_a_loss_when_no_candidate_passes():
    # differences +-0.25 (exact in binary) on 40 protected queries: mean exactly 0, SE > 0, so the
    # half-SE guard turns it away; it is deployed as the largest gain, not as "below frozen"
    frozen = np.full(50, 0.5)
    prot = np.arange(50) < 40
    even = frozen + np.where(prot, np.where(np.arange(50) % 2 == 0, 0.25, -0.25), 0.3)
    worse = frozen + np.where(prot, -0.1, 0.4)
    out = choose_deployment({"worse": _cand("dual", worse), "even": _cand("query", even)}, frozen, prot)
    assert out["candidates"]["even"]["protected_diff"] == 0.0 and out["candidates"]["even"]["protected_se"] > 0
    assert out["choice"] == "even" and out["rule"] == "least harm on protected validation queries"
    assert out["note"] == ("deployment: no candidate gains at least 0.5 standard errors over frozen on the "
                           "document-disjoint validation queries; deploying 'even', the largest gain there")


def test_a_blend_is_computed_in_float64_on_the_first_maps_device_and_without_a_history():
    from asymgeo.adapters import Adapter
    from asymgeo.adapters.workflow import _blend_query_maps

    rng = np.random.default_rng(5)
    p = 6
    Wa = rng.normal(size=(p, p)).astype(np.float32)
    Wb = rng.normal(size=(p, p)).astype(np.float32)
    a = Adapter.from_maps(Wa, np.eye(p), geometry="query", device="cpu")
    b = Adapter.from_maps(Wb, np.eye(p), geometry="query")
    a.query_map_, b.query_map_ = Wa, Wb  # float32 checkpoints, as a trained map may hold them
    del a.history_  # an adapter without a training history blends with an empty one
    lam = 0.3
    out = _blend_query_maps(a, b, lam)
    want = 0.7 * Wa.astype(np.float64) + 0.3 * Wb.astype(np.float64)  # float64 arithmetic, by hand
    np.testing.assert_allclose(out.query_map_, want, rtol=0, atol=1e-15)
    assert out.device == "cpu" and out.history_ == [] and out.form == "augmented"


# ---------------------------------------------------------------- the cross-fitted guard (guard_folds)
def test_the_crossfitted_blocks_are_held_out_and_the_guard_pools_them(joint_report):
    """fit's default guard reads each candidate's protected gain on five blocks: the validation
    queries, then four blocks of training queries, each the validation queries of a fit on the rest."""
    from asymgeo.adapters.workflow import GUARD_FOLDS, guard_blocks

    own, *rotated = joint_report.loads
    assert own["split"] is None and len(rotated) == GUARD_FOLDS - 1 == 4
    train, val = own["train"], own["validation"]
    assert [r["validation"] for r in rotated] == guard_blocks(train, len(val))  # the blocks, in order
    covered = set()
    for r in rotated:
        block = set(r["validation"])
        assert block <= set(train) and not block & set(r["train"])  # held out of that fit's training
        assert set(r["train"]) == (set(train) - block) | set(val)  # it trains on every other labelled query
        assert r["split"]["test"] and r["cache"] is False  # the same test part; nothing cached for a one-off set
        covered |= block
    assert covered == set(train)  # 120 training queries, four blocks of 30
    j = joint_report.metrics["joint"]
    assert j["guard_folds"] == 5 and len(j["n_protected_by_block"]) == 5 and j["n_protected_by_block"][0] == \
        j["n_protected"]
    for rec in j["candidates"].values():
        assert rec["n_guard"] == sum(j["n_protected_by_block"])  # every block's protected queries, pooled
        assert rec["feasible"] == (rec["protected_diff"] >= 0.5 * rec["protected_se"])
        assert rec["protected_ci_low"] <= rec["protected_diff"] <= rec["protected_ci_high"]


def test_guard_blocks_partition_the_training_queries_and_are_cut_to_the_validation_size():
    from asymgeo.adapters.workflow import guard_blocks

    train = [f"q{i:03d}" for i in range(23)]
    parts = guard_blocks(train, 100, folds=5)
    flat = [q for p in parts for q in p]
    assert len(parts) == 4 and sorted(flat) == train and len(set(flat)) == 23
    assert sorted(len(p) for p in parts) == [5, 6, 6, 6]
    assert guard_blocks(list(reversed(train)), 100, folds=5) == parts  # depends on the set, not its order
    cut = guard_blocks(train, 4, folds=5)
    assert [len(p) for p in cut] == [4, 4, 4, 4] and all(c == p[:4] for c, p in zip(cut, parts, strict=True))
    assert guard_blocks(train, 100, folds=1) == [] and guard_blocks(train[:3], 100, folds=5) == []
    two = guard_blocks(train, 7, folds=2)  # one block: a seeded draw of the training queries
    assert len(two) == 1 and len(two[0]) == 7 and set(two[0]) <= set(train) and two[0] != train[:7]
    assert guard_blocks(train, 100, folds=3, seed=1) != guard_blocks(train, 100, folds=3, seed=2)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "5", None])
def test_guard_folds_is_refused_before_any_data_is_read(bad):
    from asymgeo.adapters.workflow import fit_adapter

    with pytest.raises(ValueError, match=r"^guard_folds: expected an integer >= 1 \(1: the validation queries alone\)"):
        fit_adapter("no-such-dataset", "all-MiniLM-L6-v2", guard_folds=bad)


def _mem(values, weight=1.0):
    from types import SimpleNamespace

    return SimpleNamespace(validation_values_=np.asarray(values, dtype=float), weight_=weight,
                           map_validation_ndcg_=float(np.mean(values)))


def test_pooled_differences_decide_the_guard_and_the_choice_stays_on_this_split():
    """Worked by hand: on this split's three protected queries 'bold' gains +0.1 each (se 0: passes
    alone), but the pooled blocks show -0.3 on three more (mean -0.1): turned away; 'safe' (+0.01
    everywhere) is deployed though its validation NDCG@10 is lower."""
    from types import SimpleNamespace

    from asymgeo.adapters.workflow import choose_deployment
    from asymgeo.retrieval.compare import paired_comparison

    fz, prot = np.full(4, 0.5), np.array([True, True, True, False])
    ad = SimpleNamespace(geometry_="query")
    cands = {"bold": (ad, _mem([0.6, 0.6, 0.6, 1.0])), "safe": (ad, _mem([0.51, 0.51, 0.51, 0.6]))}
    alone = choose_deployment(cands, fz, prot, min_protected=2)
    assert alone["choice"] == "bold"
    pooled = {"bold": np.array([0.1, 0.1, 0.1, -0.3, -0.3, -0.3]), "safe": np.full(6, 0.01)}
    got = choose_deployment(cands, fz, prot, min_protected=2, guard_differences=pooled, seed=4)
    assert got["choice"] == "safe"
    bold = got["candidates"]["bold"]
    assert bold["n_guard"] == 6 and bold["protected_diff"] == pytest.approx(-0.1)
    assert bold["protected_diff_split"] == pytest.approx(0.1)  # this split's own reading, kept beside it
    assert bold["protected_se"] == pytest.approx(np.std(pooled["bold"], ddof=1) / np.sqrt(6))
    want = paired_comparison(pooled["bold"], np.zeros(6), n_boot=2000, confidence=0.95, seed=4)
    assert (bold["protected_ci_low"], bold["protected_ci_high"]) == (want.ci_low, want.ci_high)
    assert not bold["feasible"] and got["candidates"]["safe"]["feasible"]
    with pytest.raises(ValueError, match="guard_differences: no pooled protected differences for candidate 'safe'"):
        choose_deployment(cands, fz, prot, min_protected=2, guard_differences={"bold": pooled["bold"]})
    # without a guard (too few protected queries) the pooled differences are not read
    assert choose_deployment(cands, fz, prot, min_protected=4, guard_differences={})["choice"] == "bold"


def test_the_guard_blocks_reload_a_dataset_given_as_a_folder(shared_dir, tmp_path):
    """A BEIR folder with an n_train subset: the blocks reload the folder, not its name under data_dir
    (an empty folder here, where the name alone would not be found)."""
    from asymgeo.adapters.workflow import fit_adapter

    rep = fit_adapter(shared_dir / "data" / "scifact", "all-MiniLM-L6-v2", geometry="auto", rank=4, n_train=120,
                      epochs=1, learning_rates=(1e-3,), report=False, guard_folds=2, data_dir=tmp_path,
                      cache_dir=shared_dir / "embeddings")
    j = rep.metrics["joint"]
    assert j["guard_folds"] == 2 and len(j["n_protected_by_block"]) == 2
    assert all(c["n_guard"] == sum(j["n_protected_by_block"]) for c in j["candidates"].values())
