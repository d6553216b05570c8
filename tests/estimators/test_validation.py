"""fold_validation: the Table 1 protocol against a brute-force loop, the exact row-space
fast path, the aggregation rules on hand-made cells, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import asymgeo.estimators.validation as fv
from asymgeo.data.splits import fold_seed, fold_split, nested_subsets, query_folds
from asymgeo.kernels.geometry import dual_truncate, shared_truncate
from asymgeo.kernels.operator_risk import heldout_loss
from asymgeo.kernels.selection import cars_score
from asymgeo.selectors.registry import RuleNotApplicable, SelectionContext, get_rule


def _data(n=150, p=40, seed=3):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((p, p)) / np.sqrt(p)
    X = rng.standard_normal((n, p))
    Y_pos = X @ A + 0.8 * rng.standard_normal((n, p))
    Y_neg = 0.8 * rng.standard_normal((n, p))
    return X, Y_pos, Y_neg


def _brute_force(X, Y_pos, Y_neg, rank, folds, sizes, n_splits, seed, centred=False):
    n = X.shape[0]
    ids = [f"{i:03d}" for i in range(n)]
    D = Y_pos - Y_neg
    cells = []
    for f in range(folds):
        pool, held = fold_split(query_folds(ids, folds), f)
        nested = nested_subsets(pool, sizes, seed=fold_seed(f))
        Xf, Df = X, D
        if centred:
            rows = [int(q) for q in pool]
            Xf, Df = X - X[rows].mean(0), D - D[rows].mean(0)
        T = sum(np.outer(Xf[int(q)], Df[int(q)]) for q in held) / len(held)
        for m in sorted(nested):
            idx = [int(q) for q in nested[m]]
            C = sum(np.outer(Xf[i], Df[i]) for i in idx) / m
            ls = heldout_loss(shared_truncate(C, rank, solver="dense"), T)
            ld = heldout_loss(dual_truncate(C, rank, solver="dense"), T)
            ss = np.random.SeedSequence(seed, spawn_key=(f, m))
            split_seed = int(ss.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))
            cars = cars_score(Xf[idx], Df[idx], np.zeros_like(Df[idx]), rank, n_splits=n_splits, seed=split_seed,
                              solver="dense")
            cells.append((f, m, ls, ld, cars.choice, cars.score))
    return cells


@pytest.mark.parametrize("centred", [False, True])
def test_validate_selection_matches_brute_force(centred):
    X, Yp, Yn = _data()
    res = fv.validate_selection(X, Yp, Yn, 3, folds=3, sizes=(16, 32, 64), n_splits=4, seed=7, centred=centred,
                                sure=False)
    ref = _brute_force(X, Yp, Yn, 3, 3, (16, 32, 64), 4, 7, centred)
    assert len(res.cells) == len(ref) == 3 * 3          # the pool of 100 exceeds max(sizes): not added
    for c, (f, m, ls, ld, choice, score) in zip(res.cells, ref, strict=True):
        assert (c["fold"], c["size"]) == (f, m)
        assert c["loss_shared"] == pytest.approx(ls, rel=1e-9)
        assert c["loss_dual"] == pytest.approx(ld, rel=1e-9)
        assert c["cars_score"] == pytest.approx(score, rel=1e-7, abs=1e-12)
        assert c["cars_choice"] == choice
    # aggregation: within fold, then over folds
    acc, reg = [], {"cars": [], "shared": [], "dual": []}
    for f in range(3):
        rows = [r for r in ref if r[0] == f]
        win = ["dual" if r[3] < r[2] else "shared" for r in rows]
        acc.append(np.mean([r[4] == w for r, w in zip(rows, win, strict=True)]))
        best = [min(r[2], r[3]) for r in rows]
        reg["shared"].append(np.mean([r[2] - b for r, b in zip(rows, best, strict=True)]))
        reg["dual"].append(np.mean([r[3] - b for r, b in zip(rows, best, strict=True)]))
        reg["cars"].append(np.mean([(r[3] if r[4] == "dual" else r[2]) - b for r, b in zip(rows, best, strict=True)]))
    assert res.cars_accuracy == pytest.approx(np.mean(acc))
    for g in reg:
        assert res.regret[g] == pytest.approx(np.mean(reg[g]))
    d = res.as_dict()
    assert {"cars_accuracy", "regret", "folds", "per_size"} <= set(d)
    assert [s["size"] for s in d["per_size"]] == [16, 32, 64]


#: where each registered rule looks up its kernel (the registry module of the rule)
_RULE_MODULES = {"cars_score": "asymgeo.selectors.cars", "cross_validated_risk": "asymgeo.selectors.cross_validation"}


def _spy_dimensions(monkeypatch, name: str) -> list[int]:
    """Record the column count of the first argument of every call of kernel ``name`` made by its rule."""
    import importlib

    module = importlib.import_module(_RULE_MODULES[name])
    dims: list[int] = []
    real = getattr(module, name)

    def spy(Xa, *args, **kwargs):
        dims.append(Xa.shape[1])
        return real(Xa, *args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return dims


def test_row_space_fast_path_runs_and_is_exact(monkeypatch):
    X, Yp, Yn = _data(n=80, p=40)
    D = Yp - Yn
    dims = _spy_dimensions(monkeypatch, "cars_score")
    order, test = list(range(60)), list(range(60, 80))
    fast = fv.fold_cells(X, D, order, test, [8, 16, 60], [2, 5], n_splits=3, seed=1, sure=False)
    assert dims == [16, 16, 32, 32, 40, 40]               # 2m < p runs in the 2m-dim row space
    dims.clear()
    slow = fv.fold_cells(X, D, order, test, [8, 16, 60], [2, 5], n_splits=3, seed=1, sure=False, reduce=False)
    assert dims == [40] * 6
    for a, b in zip(fast, slow, strict=True):
        assert a["cars_score"] == pytest.approx(b["cars_score"], rel=1e-8, abs=1e-14)
        assert a["raw_distance"] == pytest.approx(b["raw_distance"], rel=1e-8)
        assert a["cars_choice"] == b["cars_choice"]


def test_cross_validated_risk_in_the_row_space_is_exact(monkeypatch):
    """The cv selector of a cell runs in the prefix's row space when 2m < p (no projection):
    its dimension is 2m, and its score equals cross_validated_risk on the full-space prefix,
    computed directly (same inner folds and seed)."""
    from asymgeo.kernels.operator_risk import cross_validated_risk

    X, Yp, Yn = _data(n=80, p=40)
    D = Yp - Yn
    dims = _spy_dimensions(monkeypatch, "cross_validated_risk")
    order, test = list(range(60)), list(range(60, 80))
    cells = fv.fold_cells(X, D, order, test, [8, 16, 60], [2], n_splits=3, seed=1, sure=False, cv_folds=4)
    assert dims == [16, 32, 40]
    for c in cells:
        m = c["size"]
        rows = np.asarray(order[:m])
        want = cross_validated_risk(X[rows], D[rows], np.zeros((m, 40)), 2, folds=4,
                                    seed=fv._derived_seed(1, 0, m))
        assert c["cv_score"] == pytest.approx(want.score, rel=1e-9, abs=1e-15)
        assert c["cv_se"] == pytest.approx(want.standard_error, rel=1e-8, abs=1e-15)
        assert c["cv_choice"] == want.choice


def test_cross_validated_risk_ignores_the_selector_projection():
    """With a fixed selector projection CARS and SURE see X R, D R, but the cv selector stays
    in the full space (its losses are of full-space operators): its score equals
    cross_validated_risk on the unprojected prefix, not on the projected one."""
    from asymgeo.kernels.operator_risk import cross_validated_risk

    X, Yp, Yn = _data(n=80, p=40)
    D = Yp - Yn
    R = fv.fixed_projection(40, 30, seed=3)  # 2m = 16 < 30 at m = 8: CARS runs in a row space
    order, test = list(range(60)), list(range(60, 80))
    cells = fv.fold_cells(X, D, order, test, [8, 60], [2], n_splits=3, seed=1, sure=False, cv_folds=4,
                          projection=R)
    for c in cells:
        m = c["size"]
        rows = np.asarray(order[:m])
        want = cross_validated_risk(X[rows], D[rows], np.zeros((m, 40)), 2, folds=4,
                                    seed=fv._derived_seed(1, 0, m))
        projected = cross_validated_risk(X[rows] @ R, D[rows] @ R, np.zeros((m, 30)), 2, folds=4,
                                         seed=fv._derived_seed(1, 0, m))
        assert c["cv_score"] == pytest.approx(want.score, rel=1e-9, abs=1e-15)
        assert c["cv_score"] != pytest.approx(projected.score, rel=1e-3)


def test_row_space_basis_widens_to_rank():
    rng = np.random.default_rng(0)
    X, D = rng.standard_normal((3, 20)), rng.standard_normal((3, 20))
    Q = fv.row_space_basis(X, D, min_dim=9)
    assert Q.shape == (20, 9) and np.allclose(Q.T @ Q, np.eye(9))
    assert np.allclose(Q @ (Q.T @ X.T), X.T)
    assert fv.row_space_basis(X, D, min_dim=20) is None


def _row(fold, size, ls, ld, cars, sure="shared"):
    return {"fold": fold, "size": size, "rank": 4, "loss_shared": ls, "loss_dual": ld, "cars_choice": cars,
            "sure_choice": sure}


def test_summarise_cells_by_hand():
    rows = [
        _row(0, 32, 1.0, 1.5, "shared"),   # shared wins, CARS right, regret 0; dual regret .5
        _row(0, 64, 1.0, 0.8, "shared"),   # dual wins, CARS wrong, regret .2; shared .2
        _row(1, 32, 1.0, 1.0, "dual"),     # tie -> shared; CARS "wrong" but regret 0
        _row(1, 64, 1.0, 0.6, "dual"),     # dual wins, CARS right
    ]
    s = fv.summarise_cells(rows)
    assert s["cars_accuracy"] == pytest.approx((0.5 + 0.5) / 2)
    assert s["regret"]["cars"] == pytest.approx((0.1 + 0.0) / 2)
    assert s["regret"]["shared"] == pytest.approx((0.1 + 0.2) / 2)
    assert s["regret"]["dual"] == pytest.approx((0.25 + 0.0) / 2)
    assert s["reduction"] == pytest.approx(1 - 0.05 / 0.125)
    # fold 0: cars .1 vs shared .1 (tie, no win); fold 1: cars 0 vs dual 0 (tie): no strict wins
    assert s["fold_wins"] == 0
    by_size = {p["size"]: p for p in s["per_size"]}
    assert by_size[64]["cars_dual"] == 1 and by_size[64]["heldout_dual"] == 2
    assert by_size[32]["heldout_dual"] == 0
    with pytest.raises(ValueError, match="rows"):
        fv.summarise_cells([])


def test_fold_win_requires_beating_both():
    rows = [_row(0, 32, 1.0, 1.5, "shared"), _row(0, 64, 1.0, 0.8, "dual")]
    s = fv.summarise_cells(rows)
    assert s["regret"]["cars"] == 0.0 and s["fold_wins"] == 1


def test_validate_selection_bad_input():
    X, Yp, Yn = _data(n=30, p=6)
    with pytest.raises(ValueError, match="query_ids"):
        fv.validate_selection(X, Yp, Yn, 2, query_ids=["a"])
    with pytest.raises(ValueError, match="folds"):
        fv.validate_selection(X, Yp, Yn, 2, folds=1)
    with pytest.raises(ValueError, match="CARS needs"):
        fv.validate_selection(X[:4], Yp[:4], Yn[:4], 2)
    with pytest.raises(ValueError, match="rank"):
        fv.validate_selection(X, Yp, Yn, 7)
    with pytest.raises(ValueError, match="Y_pos"):
        fv.validate_selection(X, Yp[:, :5], Yn, 2)


def test_projection_is_fixed_and_identity_above_p():
    assert fv.fixed_projection(10, None, 0) is None and fv.fixed_projection(10, 10, 0) is None
    R1, R2 = fv.fixed_projection(12, 5, 3), fv.fixed_projection(12, 5, 3)
    assert R1.shape == (12, 5) and np.array_equal(R1, R2) and np.allclose(R1.T @ R1, np.eye(5))


def test_fold_cells_bad_input():
    X, Yp, Yn = _data(n=40, p=6)
    D = Yp - Yn
    with pytest.raises(ValueError, match="overlap"):
        fv.fold_cells(X, D, range(30), [29, 35], [8], [2])
    with pytest.raises(ValueError, match="test_rows"):
        fv.fold_cells(X, D, range(30), [41], [8], [2])
    with pytest.raises(ValueError, match="sizes"):
        fv.fold_cells(X, D, range(30), range(30, 40), [31], [2])
    with pytest.raises(ValueError, match="projection"):
        fv.fold_cells(X, D, range(30), range(30, 40), [8], [2], projection=np.eye(5))
    with pytest.raises(ValueError, match="D"):
        fv.fold_cells(X, D[:, :5], range(30), range(30, 40), [8], [2])


def test_reduction_is_none_when_the_better_fixed_rule_has_no_regret(shared_dir):
    """SciFact/MiniLM with 2 folds: always-shared never loses, so 1 - CARS/best-fixed is
    undefined; the result says None (JSON null), never NaN."""
    import json

    from asymgeo.data import load_triples

    tr = load_triples("scifact", "all-MiniLM-L6-v2", "train", data_dir=shared_dir / "data",
                      cache_dir=shared_dir / "embeddings")
    v = fv.validate_selection(tr.X, tr.Y_pos, tr.Y_neg, 4, folds=2, n_splits=2, selector_dim=32, seed=5,
                           query_ids=tr.query_ids)
    assert v.regret["shared"] == 0.0 or v.regret["dual"] == 0.0
    assert v.reduction is None
    json.dumps(v.as_dict(), allow_nan=False)  # valid JSON


def test_cells_do_not_depend_on_threads_and_share_one_decomposition_per_size(monkeypatch, capsys):
    # p >= 256: the cells run on threads; every cell is single-threaded inside, so 1 and 2
    # threads give bit-identical cells.  Each (fold, size) decomposes its training moment once
    # (truncation_spectra), and SURE reuses those eigenpairs instead of solving again.
    X, Yp, Yn = _data(n=120, p=260, seed=4)
    calls: list[int] = []
    eigen_passed: list[bool] = []
    import asymgeo.selectors.sure as sure_rule

    real_spectra, real_sure = fv.truncation_spectra, sure_rule.sure_statistic

    def spectra_spy(C, rank, **kw):
        calls.append(rank)
        return real_spectra(C, rank, **kw)

    def sure_spy(X_, D_, rank, **kw):
        eigen_passed.append(kw.get("eigen") is not None)
        return real_sure(X_, D_, rank, **kw)

    monkeypatch.setattr(fv, "truncation_spectra", spectra_spy)
    monkeypatch.setattr(sure_rule, "sure_statistic", sure_spy)
    one = fv.validate_selection(X, Yp, Yn, 3, folds=3, sizes=(16, 32, 64), n_splits=3, seed=2, n_jobs=1)
    assert len(calls) == 9 and eigen_passed == [True] * 9
    two = fv.validate_selection(X, Yp, Yn, 3, folds=3, sizes=(16, 32, 64), n_splits=3, seed=2, n_jobs=2,
                                progress=True)
    assert one.cells == two.cells
    err = capsys.readouterr().err
    assert "0/9 cells" in err and "9/9 cells" in err  # the progress counts cells (9), not folds (3)
    eigen_passed.clear()
    fv.validate_selection(X, Yp, Yn, 3, folds=3, sizes=(16,), n_splits=3, seed=2, selector_dim=50)
    assert eigen_passed == [False] * 3               # SURE sees the projected moment: its own eigenpairs
    ref = _brute_force(X, Yp, Yn, 3, 3, (16, 32, 64), 3, 2)
    for c, (f, m, ls, ld, choice, score) in zip(two.cells, ref, strict=True):
        assert (c["fold"], c["size"], c["cars_choice"]) == (f, m, choice)
        assert c["loss_shared"] == pytest.approx(ls, rel=1e-9)
        assert c["loss_dual"] == pytest.approx(ld, rel=1e-9)
        assert c["cars_score"] == pytest.approx(score, rel=1e-7, abs=1e-12)
    with pytest.raises(ValueError, match="n_jobs"):
        fv.validate_selection(X, Yp, Yn, 3, folds=3, sizes=(16,), n_jobs=0)


def test_sure_cell_equals_the_estimator_rule():
    # the validation's SURE shortcut (no estimator fit) against GeometrySelector(selector="sure")
    from asymgeo import GeometrySelector

    X, Yp, Yn = _data(n=80, p=30, seed=9)
    D = Yp - Yn
    for r in (2, 5):
        sel = GeometrySelector(rank=r, selector="sure").fit(X, Yp, Yn)
        cell = fv._rule_cell(get_rule("sure"), X, D, r, 0, SelectionContext())
        assert cell["sure_choice"] == sel.choice_ and cell["sure_score"] == pytest.approx(sel.score_, rel=1e-12)
    # fewer positive eigenvalues than the rank: the rule does not apply, shared, no score
    cell = fv._rule_cell(get_rule("sure"), X, -np.abs(D) * 0 - X, 3, 0, SelectionContext())
    assert cell["sure_choice"] == "shared" and np.isnan(cell["sure_score"])
    with pytest.raises(RuleNotApplicable, match="fewer than rank = 3"):  # GeometrySelector says why
        GeometrySelector(rank=3, selector="sure").fit(X, X * 0 + 1.0, X * 0 + 1.0 + X)


def test_summarise_cells_accuracy_of_every_rule_by_hand():
    rows = [
        _row(0, 32, 1.0, 1.5, "shared", sure="dual"),     # shared wins: cars right, sure wrong
        _row(0, 64, 1.0, 0.8, "shared", sure="dual"),     # dual wins: cars wrong, sure right
        _row(0, 128, 1.0, 0.9, "dual", sure="dual"),      # dual wins: both right
        _row(1, 32, 1.0, 1.0, "dual", sure="shared"),     # tie -> shared: cars wrong, sure right
    ]
    s = fv.summarise_cells(rows)
    assert s["accuracy"]["cars"] == pytest.approx((2 / 3 + 0) / 2) == s["cars_accuracy"]
    assert s["accuracy"]["sure"] == pytest.approx((2 / 3 + 1) / 2)
    assert s["accuracy"]["shared"] == pytest.approx((1 / 3 + 1) / 2)
    assert s["accuracy"]["dual"] == pytest.approx((2 / 3 + 0) / 2)


def test_cells_carry_the_anisotropic_rule_of_each_training_prefix():
    from asymgeo.kernels.theory import anisotropic_sure

    X, Yp, Yn = _data(n=90, p=20, seed=6)
    D = Yp - Yn
    order, test = list(range(70)), list(range(70, 90))
    rows = fv.fold_cells(X, D, order, test, [16, 40], [3], n_splits=3, seed=1)
    for row in rows:
        m = row["size"]
        want = anisotropic_sure(X[:m], D[:m], 3)
        assert row["anisotropic_choice"] == want.choice
        assert row["anisotropic_score"] == pytest.approx(want.score, rel=1e-8)
    s = fv.summarise_cells(rows)
    assert "anisotropic" in s["regret"] and "anisotropic" in s["accuracy"]


def test_fold_cells_refuses_an_empty_fold_no_ranks_and_a_bad_projection():
    X, Yp, Yn = _data(n=40, p=6)
    D = Yp - Yn
    with pytest.raises(ValueError, match="test_rows: the held-out fold is empty"):
        fv.fold_cells(X, D, range(30), [], [8], [2])
    with pytest.raises(ValueError) as e:
        fv.fold_cells(X, D, range(30), range(30, 40), [8], [])
    assert str(e.value) == "ranks: expected at least one rank"
    with pytest.raises(ValueError, match=r"projection: expected shape \(6, q\), got \(5, 2\)"):
        fv.fold_cells(X, D, range(30), range(30, 40), [8], [2], projection=np.ones((5, 2)))
    with pytest.raises(ValueError, match=r"train_order: expected row numbers in \[0, 40\)"):
        fv.fold_cells(X, D, [-1, 3], range(30, 40), [2], [2])


# --------------------------------------------------------------------------- survivors of mutation testing (issue #19)
def _cell(fold, size, ls, ld, cars, sure="", cv="", aniso=""):
    return {"fold": fold, "size": size, "loss_shared": ls, "loss_dual": ld, "cars_choice": cars,
            "sure_choice": sure, "cv_choice": cv, "anisotropic_choice": aniso, "cars_score": 0.0}


def test_summarise_cells_by_hand_for_every_rule():
    """Four cells in two folds, every rule's regret, accuracy and the per-fold / per-size figures
    worked out by hand (regret = the chosen family's held-out loss minus the better one's)."""
    rows = [
        _cell(0, 32, 1.0, 0.5, "dual", "shared", "dual", "shared"),    # dual wins by 0.5
        _cell(0, 64, 0.2, 0.6, "dual", "shared", "shared", "dual"),    # shared wins by 0.4
        _cell(1, 32, 0.3, 0.3, "shared", "dual", "dual", "shared"),    # tie: shared wins, no regret either way
        _cell(1, 64, 0.9, 0.1, "shared", "dual", "shared", "dual"),    # dual wins by 0.8
    ]
    s = fv.summarise_cells(rows)
    # per fold, then the mean over folds
    f0 = {"cars": (0 + 0.4) / 2, "shared": (0.5 + 0) / 2, "dual": (0 + 0.4) / 2, "sure": (0.5 + 0) / 2,
          "cv": (0 + 0) / 2, "anisotropic": (0.5 + 0.4) / 2}
    f1 = {"cars": (0 + 0.8) / 2, "shared": (0 + 0.8) / 2, "dual": (0 + 0) / 2, "sure": (0 + 0) / 2,
          "cv": (0 + 0.8) / 2, "anisotropic": (0 + 0) / 2}
    assert s["regret"] == pytest.approx({g: (f0[g] + f1[g]) / 2 for g in f0})
    assert [f["regret"] for f in s["folds"]] == [pytest.approx(f0), pytest.approx(f1)]
    # accuracy: the choice names the lower loss (ties to shared)
    acc = {"cars": (1 / 2 + 1 / 2) / 2, "shared": (1 / 2 + 1 / 2) / 2, "dual": (1 / 2 + 1 / 2) / 2,
           "sure": (1 / 2 + 1 / 2) / 2, "cv": (1 + 0) / 2, "anisotropic": (0 + 1) / 2}
    assert s["accuracy"] == pytest.approx(acc) and s["cars_accuracy"] == pytest.approx(0.5)
    assert [(f["fold"], f["cells"], f["accuracy"], f["cars_wins"]) for f in s["folds"]] == [
        (0, 2, 0.5, False), (1, 2, 0.5, False)]
    better = min(s["regret"]["shared"], s["regret"]["dual"])
    assert s["reduction"] == pytest.approx(1 - s["regret"]["cars"] / better) and s["fold_wins"] == 0
    sizes = {p["size"]: p for p in s["per_size"]}
    assert (sizes[32]["cells"], sizes[32]["cars_dual"], sizes[32]["heldout_dual"]) == (2, 1, 1)
    assert (sizes[64]["cars_dual"], sizes[64]["heldout_dual"]) == (1, 1)
    assert sizes[32]["accuracy"] == pytest.approx(1.0) and sizes[64]["accuracy"] == pytest.approx(0.0)
    assert sizes[32]["mean_advantage"] == pytest.approx((0.5 + 0.0) / 2)
    assert sizes[64]["mean_advantage"] == pytest.approx((-0.4 + 0.8) / 2)
    assert sizes[64]["regret"]["cars"] == pytest.approx((0.4 + 0.8) / 2)


def test_summarise_cells_fold_wins_and_an_undefined_reduction():
    wins = fv.summarise_cells([_cell(0, 32, 1.0, 0.5, "dual"), _cell(0, 64, 0.2, 0.6, "shared")])
    assert wins["fold_wins"] == 1 and wins["folds"][0]["cars_wins"] and wins["reduction"] == pytest.approx(1.0)
    assert set(wins["regret"]) == {"cars", "shared", "dual"}  # rules without choices in every cell are left out
    flat = fv.summarise_cells([_cell(0, 32, 0.2, 0.6, "dual")])  # always-shared has no regret
    assert np.isnan(flat["reduction"])
    with pytest.raises(ValueError) as e:
        fv.summarise_cells([])
    assert str(e.value) == "rows: no cells to summarise"


def test_validate_selection_records_its_protocol_and_names_bad_arrays():
    X, Yp, Yn = _data(n=120, p=12)
    v = fv.validate_selection(X, Yp, Yn, 2, folds=3, n_splits=3, sizes=(32,), selector_dim=8, seed=7)
    d = v.as_dict()
    assert {k: d[k] for k in ("rank", "n", "n_folds", "n_splits", "selector_dim", "centred", "seed")} == {
        "rank": 2, "n": 120, "n_folds": 3, "n_splits": 3, "selector_dim": 8, "centred": False, "seed": 7}
    assert set(d) == {"cars_accuracy", "accuracy", "regret", "reduction", "fold_wins", "folds", "per_size",
                      "rank", "n", "n_folds", "n_splits", "selector_dim", "centred", "seed", "rules"}
    assert d["rules"] == ["cars", "sure", "anisotropic"]
    assert d["regret"] == v.regret and d["folds"] == v.folds and d["per_size"] == v.per_size
    assert (d["cars_accuracy"], d["fold_wins"]) == (v.cars_accuracy, v.fold_wins)
    assert fv.summarise_cells(v.cells)["regret"] == pytest.approx(v.regret)
    for bad, name in ((dict(X=X[:, :5]), "Y_pos"), (dict(Y_pos=Yp[:, :5]), "Y_pos"), (dict(Y_neg="x"), "Y_neg")):
        args = {"X": X, "Y_pos": Yp, "Y_neg": Yn, **bad}
        with pytest.raises((ValueError, TypeError), match=name):
            fv.validate_selection(args["X"], args["Y_pos"], args["Y_neg"], 2, folds=3, sizes=(32,))
    for folds in (1, True, 2.5):
        with pytest.raises(ValueError, match="folds"):
            fv.validate_selection(X, Yp, Yn, 2, folds=folds, sizes=(32,))
    with pytest.raises(ValueError, match="selector_dim"):
        fv.validate_selection(X, Yp, Yn, 2, folds=3, sizes=(32,), selector_dim=0)


def test_every_cell_field_equals_the_selectors_called_directly():
    """Beyond losses and CARS scores: CARS's standard error and distances, SURE, the anisotropic
    rule and the cross-validated risk of every cell against direct calls on the same prefix of
    the same fold (reconstructed from the files' protocol as in _brute_force); with both SURE and
    cross-validation on, no rule's fields displace another's."""
    from asymgeo.kernels.operator_risk import cross_validated_risk
    from asymgeo.kernels.theory import anisotropic_sure, sure_statistic

    X, Yp, Yn = _data(n=120, p=12)
    D = Yp - Yn
    res = fv.validate_selection(X, Yp, Yn, 2, folds=3, sizes=(32, 64), n_splits=3, seed=5, cv_folds=3)
    ids = [f"{i:03d}" for i in range(120)]
    for c in res.cells:
        pool, _ = fold_split(query_folds(ids, 3), c["fold"])
        idx = [int(q) for q in nested_subsets(pool, (32, 64), seed=fold_seed(c["fold"]))[c["size"]]]
        ss = np.random.SeedSequence(5, spawn_key=(c["fold"], c["size"]))
        split_seed = int(ss.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))
        Xm, Dm = X[idx], D[idx]
        cars = cars_score(Xm, Dm, np.zeros_like(Dm), 2, n_splits=3, seed=split_seed)
        assert c["rank"] == 2
        assert (c["cars_se"], c["raw_distance"], c["corrected_distance"]) == pytest.approx(
            (cars.standard_error, cars.raw_distance, cars.corrected_distance), rel=1e-7, abs=1e-12)
        st, _ = sure_statistic(Xm, Dm, 2)
        assert c["sure_choice"] == st.choice
        assert c["sure_score"] == pytest.approx(st.risk_shared - st.risk_dual, rel=1e-7, abs=1e-12)
        an = anisotropic_sure(Xm, Dm, 2)
        assert (c["anisotropic_choice"], c["anisotropic_score"]) == (
            an.choice, pytest.approx(an.score, rel=1e-7, abs=1e-12))
        cv = cross_validated_risk(Xm, Dm, np.zeros_like(Dm), 2, folds=3, seed=split_seed)
        assert (c["cv_choice"], c["cv_score"], c["cv_se"]) == (
            cv.choice, pytest.approx(cv.score, rel=1e-9, abs=1e-12), pytest.approx(cv.standard_error, rel=1e-9))
    assert {"cars", "sure", "anisotropic", "cv"} <= set(res.regret)


def test_fold_cells_defaults_are_validate_selections():
    import inspect

    a = inspect.signature(fv.fold_cells).parameters
    b = inspect.signature(fv.validate_selection).parameters
    for key in ("n_splits", "seed", "cv_folds", "sure", "projection"):
        assert a[key].default == b[key].default if key in b else a[key].default is None, key
    assert a["fold"].default == 0


def test_held_out_bootstrap_standard_error_against_explicit_resamples():
    """fold_cells(..., bootstrap=B): the resampled held-out queries drawn by hand from the documented
    seed (SeedSequence(seed, spawn_key=(fold, 2_000_000))), each resample's moment formed row by row
    and scored on the dense truncations."""
    X, Yp, Yn = _data(n=90, p=12, seed=5)
    D = Yp - Yn
    train, test = list(range(60)), list(range(60, 90))
    rows = fv.fold_cells(X, D, train, test, [16, 60], [2, 3], fold=3, seed=11, bootstrap=25, n_jobs=1)
    ss = np.random.SeedSequence(11, spawn_key=(3, 2_000_000))
    rng = np.random.default_rng(int(ss.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1)))
    counts = rng.multinomial(30, np.full(30, 1 / 30), size=25)
    for row in rows:
        m, r = row["size"], row["rank"]
        C = X[:m].T @ D[:m] / m
        Ms, Md = shared_truncate(C, r, solver="dense"), dual_truncate(C, r, solver="dense")
        diffs = []
        for c in counts:
            idx = np.repeat(np.asarray(test), c)
            T = X[idx].T @ D[idx] / idx.size
            diffs.append(heldout_loss(Ms, T) - heldout_loss(Md, T))
        assert row["heldout_se"] == pytest.approx(np.std(diffs, ddof=1), rel=1e-7)
    assert "heldout_se" not in fv.fold_cells(X, D, train, test, [16], [2], n_jobs=1)[0]  # off by default
    for bad in (1, -3, True, 2.5):
        with pytest.raises(ValueError, match="bootstrap: expected 0 or an integer >= 2"):
            fv.fold_cells(X, D, train, test, [16], [2], bootstrap=bad)


def test_validation_counts_the_folds_that_decide_each_size():
    X, Yp, Yn = _data()
    v = fv.validate_selection(X, Yp, Yn, 3, folds=3, n_splits=4, sizes=(32, 64), bootstrap=40)
    for s in v.per_size:
        cells = [c for c in v.cells if c["size"] == s["size"]]
        by_hand = sum(abs(c["loss_shared"] - c["loss_dual"]) > 2 * c["heldout_se"] for c in cells)
        assert s["decided"] == by_hand
    off = fv.validate_selection(X, Yp, Yn, 3, folds=3, n_splits=4, sizes=(32, 64), bootstrap=0)
    assert all("decided" not in s for s in off.per_size) and all("heldout_se" not in c for c in off.cells)
    assert [c["loss_dual"] for c in off.cells] == [c["loss_dual"] for c in v.cells]  # nothing else moves


def test_summarise_cells_counts_decided_cells_by_hand():
    rows = [{**_row(0, 32, 1.0, 1.5, "shared"), "heldout_se": 0.2},   # |diff| .5 > .4: decided
            {**_row(1, 32, 1.0, 0.9, "dual"), "heldout_se": 0.06},    # .1 < .12: not
            {**_row(0, 64, 1.0, 0.7, "dual"), "heldout_se": 0.1}]     # .3 > .2: decided
    by_size = {p["size"]: p for p in fv.summarise_cells(rows)["per_size"]}
    assert by_size[32]["decided"] == 1 and by_size[64]["decided"] == 1
    assert "decided" not in fv.summarise_cells([_row(0, 32, 1.0, 1.5, "shared")])["per_size"][0]
