"""The selector registry (issue 35): one signature and one result for every rule, and a rule
added with one module and one registry line is available everywhere without touching callers.

Expected values come from the kernels called directly (CARS, SURE, the cross-validated risk)
or by hand (the toy rule and the pairwise accuracy), never from the registry itself.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from asymgeo.estimators.projections import GeometrySelector
from asymgeo.selectors import catalogue
from asymgeo.selectors.registry import (
    Decision,
    Rule,
    RuleNotApplicable,
    SelectionContext,
    decide,
    get_rule,
    register,
    rule_names,
    rules,
    unregister,
)

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"


def _triples(n=120, p=10, seed=0, signal=0.4):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    Yp = X @ (np.eye(p) + signal * rng.standard_normal((p, p))) * 0.3 + rng.standard_normal((n, p))
    Yn = rng.standard_normal((n, p))
    return X, Yp, Yn


# ---------------------------------------------------------------------------- the toy rule
def _toy(X, D, rank, seed, context):
    """Dual iff the mean of x_i . d_i exceeds 1 (by hand, no kernel)."""
    s = float(np.mean(np.einsum("ij,ij->i", X, D)))
    return Decision(rule="toy", choice="dual" if s > 1.0 else "shared", score=s - 1.0, standard_error=None,
                    evidence={"mean_xd": s})


TOY = Rule(name="toy", label="toy rule", summary="dual iff mean x.d > 1", function=_toy, min_triples=2)


@pytest.fixture
def toy():
    register(TOY)
    yield TOY
    unregister("toy")


def test_every_builtin_rule_is_registered_under_its_catalogue_name():
    assert rule_names() == list(catalogue.BUILTIN_RULES)
    for rule in rules():
        assert get_rule(rule.name) is rule and rule.label and rule.summary
        assert rule.needs <= {"retrieval", "trained"}
    assert rule_names(triples_only=True) == ["cars", "sure", "anisotropic", "cv", "cv0", "cvx", "cvp", "bsure",
                                              "pairwise"]
    assert get_rule("ranking").needs == {"retrieval"} and get_rule("validation").needs == {"trained"}


def test_decisions_equal_the_kernels_called_directly():
    from asymgeo.kernels.operator_risk import cross_validated_risk
    from asymgeo.kernels.selection import cars_score
    from asymgeo.kernels.theory import anisotropic_sure, sure_statistic

    X, Yp, Yn = _triples()
    D = Yp - Yn
    cars = cars_score(X, Yp, Yn, 3, n_splits=6, seed=4)
    got = decide("cars", X, D, 3, seed=4, context=SelectionContext(n_splits=6))
    assert (got.choice, got.score, got.standard_error) == (cars.choice, cars.score, cars.standard_error)
    assert got.evidence["raw_distance"] == cars.raw_distance and got.result.terms.tolist() == cars.terms.tolist()
    st, sigma = sure_statistic(X, D, 3)
    got = decide("sure", X, D, 3)
    assert got.choice == st.choice and got.score == st.risk_shared - st.risk_dual and got.standard_error is None
    assert got.evidence["sigma"] == sigma
    an = anisotropic_sure(X, D, 3)
    got = decide("anisotropic", X, D, 3)
    assert (got.choice, got.score, got.evidence["threshold"]) == (an.choice, an.score, an.threshold)
    cv = cross_validated_risk(X, Yp, Yn, 3, folds=4, seed=9)
    for name, choice in (("cv", cv.choice), ("cv0", "dual" if cv.score > 0 else "shared")):
        got = decide(name, X, D, 3, seed=9, context=SelectionContext(cv_folds=4))
        assert (got.choice, got.score, got.standard_error) == (choice, cv.score, cv.standard_error)


def test_the_pairwise_rule_by_hand():
    from asymgeo.kernels.geometry import dual_truncate, shared_truncate

    X, Yp, Yn = _triples(n=50)
    D = Yp - Yn
    got = decide("pairwise", X, D, 2, seed=3)
    perm = np.random.default_rng(np.random.SeedSequence(3)).permutation(50)
    val, fit = perm[:10], perm[10:]
    C = X[fit].T @ D[fit] / 40
    right = {g: np.array([X[i] @ M @ D[i] > 0 for i in val], dtype=float)
             for g, M in (("shared", shared_truncate(C, 2, solver="dense")), ("dual", dual_truncate(C, 2, solver="dense")))}
    d = right["dual"] - right["shared"]
    assert got.score == pytest.approx(d.mean()) and got.standard_error == pytest.approx(d.std(ddof=1) / np.sqrt(10))
    assert got.choice == ("dual" if d.mean() > d.std(ddof=1) / np.sqrt(10) else "shared")


def test_decision_contract():
    with pytest.raises(ValueError, match="choice must be 'shared' or 'dual'"):
        Decision(rule="x", choice="both", score=0.0)
    d = Decision(rule="x", choice="dual", score=np.float32(2.0), standard_error=1.0, evidence={"a": np.arange(2)})
    assert type(d.score) is float and d.clear and json.loads(json.dumps(d.as_dict()))["evidence"] == {"a": [0, 1]}
    assert not Decision(rule="x", choice="dual", score=1.0, standard_error=1.0).clear   # not beyond one SE
    assert not Decision(rule="x", choice="dual", score=9.0).clear                       # no SE: never clear
    assert pickle.loads(pickle.dumps(d)).as_dict() == d.as_dict()
    assert d.cell() == {"x_score": 2.0, "x_se": 1.0, "x_choice": "dual"}


def test_registry_refusals(toy):
    with pytest.raises(ValueError, match="already registered"):
        register(TOY)
    with pytest.raises(ValueError, match="built-in selector"):
        unregister("cars")
    with pytest.raises(ValueError, match="expected an identifier other than shared"):
        Rule(name="dual", label="d", summary="s", function=_toy)
    with pytest.raises(ValueError, match="needs"):
        Rule(name="z", label="z", summary="s", function=_toy, needs=frozenset({"gpu"}))
    with pytest.raises(ValueError, match=r"selector: expected one of 'cars', .*'toy', got 'nope'"):
        get_rule("nope")
    X, Yp, Yn = _triples(n=20)
    with pytest.raises(ValueError, match=r"selector 'ranking' needs a corpus and judged validation queries"):
        decide("ranking", X, Yp - Yn, 2)
    with pytest.raises(ValueError, match="X: toy rule needs at least 2 triples, got n = 1"):
        decide("toy", X[:1], X[:1], 2)
    with pytest.raises(ValueError, match="D"):
        decide("toy", X, X[:, :3], 2)
    bad = Rule(name="liar", label="l", summary="s", function=lambda *a: _toy(*a))  # returns rule "toy"
    with pytest.raises(TypeError, match="expected a Decision of rule 'liar'"):
        bad.decide(X, X, 2)


def test_the_old_anisotropic_name_warns_and_resolves():
    with pytest.warns(DeprecationWarning, match="'aniso' is renamed to 'anisotropic'"):
        assert get_rule("aniso") is get_rule("anisotropic")


def test_sure_that_does_not_apply_says_why():
    X, Yp, Yn = _triples(n=40)
    with pytest.raises(RuleNotApplicable, match="positive eigenvalues"):
        decide("sure", X, -X, 3)           # sym(C) negative definite: no rank-3 PSD point


# ------------------------------------------------- a registered toy rule reaches every caller
def test_a_registered_rule_is_available_in_python_and_validation(toy):
    from asymgeo.estimators.validation import validate_selection

    X, Yp, Yn = _triples(n=150)
    sel = GeometrySelector(rank=2, selector="toy").fit(X, Yp, Yn)
    s = float(np.mean(np.einsum("ij,ij->i", X, Yp - Yn)))
    assert sel.choice_ == ("dual" if s > 1 else "shared") and sel.score_ == pytest.approx(s - 1.0)
    assert sel.decision_.evidence["mean_xd"] == pytest.approx(s)
    v = validate_selection(X, Yp, Yn, 2, folds=3, n_splits=3, sizes=(32, 64))   # validated by default
    assert "toy" in v.rules and "toy" in v.regret and "toy" in v.accuracy
    for c in v.cells:
        assert c["toy_choice"] in ("shared", "dual") and np.isfinite(c["toy_score"])


def test_a_registered_rule_is_available_in_select_and_its_validation(toy, capsys):
    from asymgeo.cli import main
    from asymgeo.data import load_triples

    args = ["--data-dir", str(SHARED / "data"), "--cache-dir", str(SHARED / "embeddings")]
    code = main(["select", "scifact", "--encoder", "all-MiniLM-L6-v2", "--rank", "4", "--n-splits", "4",
                 "--selector", "toy", "--validate", "--folds", "2", "--json", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    got = json.loads(out)
    tr = load_triples("scifact", "all-MiniLM-L6-v2", "train", data_dir=SHARED / "data", cache_dir=SHARED / "embeddings")
    s = float(np.mean(np.einsum("ij,ij->i", tr.X.astype(float), tr.Y_pos.astype(float) - tr.Y_neg)))
    assert got["choice"] == ("dual" if s > 1 else "shared") and got["decision"]["rule"] == "toy"
    assert got["decision"]["score"] == pytest.approx(s - 1.0, rel=1e-9)
    assert got["validation"]["accuracy"]["selector"] == got["validation"]["accuracy"]["toy"]
    assert "(toy rule)" in got["verdict"]


def test_a_registered_rule_decides_fit_geometry_auto(toy, shared_dir):
    from asymgeo.adapters.workflow import fit_adapter

    rep = fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="auto", selector="toy", rank=4, n_train=64, epochs=1,
                      learning_rates=(1e-3,), report=False, data_dir=shared_dir / "data",
                      cache_dir=shared_dir / "embeddings")
    a = rep.metrics["auto"]
    assert a["selector"] == a["rule"] == "toy" and rep.adapter.geometry_ == a["choice"] and rep.candidates == {}
    assert a["diff"] == pytest.approx(a["mean_xd"] - 1.0)


def test_a_registered_rule_runs_in_the_experiments(toy):
    from asymgeo.experiments import rq1

    cfg = dict(angle=0.8, n=64, rank=4, seed_index=0, p=12, latent_rank=4, noise_sd=0.6, n_test=30,
               n_negatives=9, master_seed=7, cars_splits=0, selectors=True, selector_rules="toy,cv")
    out = rq1.cell(cfg)
    assert out["toy_choice"] in ("shared", "dual") and "cv_choice" in out and "anisotropic_choice" not in out
