"""The edges of ``asymgeo.estimators.validation`` that the numerical tests do not reach: the
protocol's defaults, which rules a validation scores, the argument each bad input is blamed on,
the boundaries of the checks, the fold log and the progress kind (mutation survivors of
``tools/mutation.py validation``, docs/testing.md)."""

from __future__ import annotations

import inspect
import io
import logging
import warnings

import numpy as np
import pytest

import asymgeo.estimators.validation as fv
from asymgeo.kernels.folds import NESTED_SIZES


def _triples(n=40, p=6, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, p)), rng.standard_normal((n, p)), rng.standard_normal((n, p))


def test_the_defaults_are_table_1s_protocol():
    # the paper's Table 1: five held-out folds, CARS with L = 20 half-splits, nested sizes from 32
    sig = inspect.signature(fv.validate_selection).parameters
    expected = {"folds": 5, "n_splits": 20, "seed": 0, "selector_dim": None, "centred": False, "sure": True,
                "progress": False, "cv_folds": 0, "bootstrap": 200, "rules": None, "n_jobs": None}
    assert {k: sig[k].default for k in expected} == expected
    assert tuple(sig["sizes"].default) == (32, 64, 128, 256, 512, 1024, 2048, 4096) == tuple(NESTED_SIZES)
    cells = inspect.signature(fv.fold_cells).parameters
    assert (cells["n_splits"].default, cells["bootstrap"].default, cells["reduce"].default) == (20, 0, True)


def _names(rules):
    return [r.name for r in rules]


def test_which_rules_a_validation_scores():
    # by default: CARS (Table 1's rule) first, then the SURE family, as in 0.2.0
    assert _names(fv.validation_rules()) == ["cars", "sure", "anisotropic"]
    assert _names(fv.validation_rules(sure=False)) == ["cars"]
    assert _names(fv.validation_rules(cv_folds=2)) == ["cars", "sure", "anisotropic", "cv"]
    assert _names(fv.validation_rules(cv_folds=1)) == ["cars", "sure", "anisotropic"]  # one fold is no CV
    # named: each once, in the order given, CARS added and put first
    assert _names(fv.validation_rules(["sure", "sure", "anisotropic"])) == ["cars", "sure", "anisotropic"]
    assert _names(fv.validation_rules(["cvp", "cars", "bsure"])) == ["cars", "cvp", "bsure"]
    assert _names(fv.validation_rules([])) == ["cars"]
    with pytest.raises(ValueError, match=r"^rules: expected one of 'cars', .*got 'nope'$"):
        fv.validation_rules(["nope"])
    with pytest.raises(ValueError, match=r"^rules: 'validation' needs trained; a validation scores rules that "
                                         r"decide from the training triples alone$"):
        fv.validation_rules(["cars", "validation"])


def test_the_old_rules_tuple_warns_and_other_names_do_not_exist():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert fv.RULES == ("cars", "shared", "dual", "sure", "anisotropic")
    assert [w.category for w in caught] == [DeprecationWarning]
    assert "validation_rules()" in str(caught[0].message)
    with pytest.raises(AttributeError, match="has no attribute 'RULEZ'"):
        fv.RULEZ  # noqa: B018


@pytest.mark.parametrize("which, message", [
    (0, r"^Y_pos: shape \(40, 6\) does not match X shape \(40, 5\)$"),
    (1, r"^Y_pos: shape \(40, 5\) does not match X shape \(40, 6\)$"),
    (2, r"^Y_neg: shape \(39, 6\) does not match X shape \(40, 6\)$"),
])
def test_validate_selection_names_the_array_at_fault(which, message):
    X, P, N = _triples()
    args = [(X[:, :5], P, N), (X, P[:, :5], N), (X, P, N[:39])][which]
    with pytest.raises(ValueError, match=message):
        fv.validate_selection(*args, rank=1)
    for i, name in enumerate(("X", "Y_pos", "Y_neg")):
        bad = [X, P, N]
        bad[i] = np.ones(5)
        with pytest.raises(ValueError, match=rf"^{name}: expected a 2-d array"):
            fv.validate_selection(*bad, rank=1)


def test_fold_cells_names_the_array_and_the_rows_at_fault():
    X, P, N = _triples()
    D = P - N
    with pytest.raises(ValueError, match=r"^X: expected a 2-d array"):
        fv.fold_cells(np.ones(3), D, range(30), [35], [4], [1])
    with pytest.raises(ValueError, match=r"^D: expected a 2-d array"):
        fv.fold_cells(X, np.ones(3), range(30), [35], [4], [1])
    with pytest.raises(ValueError, match=r"^D: shape \(40, 5\) does not match X shape \(40, 6\)$"):
        fv.fold_cells(X, D[:, :5], range(30), [35], [4], [1])
    # row 40 is one past the end: refused by name, not an IndexError deep inside numpy
    with pytest.raises(ValueError, match=r"^test_rows: expected row numbers in \[0, 40\)$"):
        fv.fold_cells(X, D, range(30), [40], [4], [1])
    with pytest.raises(ValueError, match=r"^train_order: expected row numbers in \[0, 40\)$"):
        fv.fold_cells(X, D, [*range(29), 40], [35], [4], [1])
    with pytest.raises(ValueError, match=r"^test_rows: the held-out fold is empty$"):
        fv.fold_cells(X, D, range(30), [], [4], [1])
    with pytest.raises(ValueError, match=r"^test_rows: held-out rows overlap the training pool$"):
        fv.fold_cells(X, D, range(30), [29, 35], [4], [1])
    # row 39, the last, is a valid held-out row
    assert fv.fold_cells(X, D, range(30), [39], [4], [1])[0]["size"] == 4


def test_the_boundaries_of_the_checks_are_inclusive():
    X, P, N = _triples()
    D = P - N
    # the smallest CARS size (4) is allowed, 3 is not
    assert [c["size"] for c in fv.fold_cells(X, D, range(30), [35], [4, 30], [1])] == [4, 30]
    with pytest.raises(ValueError, match=r"^sizes: expected sizes in \[4, 30\]"):
        fv.fold_cells(X, D, range(30), [35], [3], [1])
    with pytest.raises(ValueError, match=r"^sizes: expected sizes in \[4, 30\]"):
        fv.fold_cells(X, D, range(30), [35], [31], [1])
    # the smallest bootstrap (two resamples) gives a standard error; one is refused
    cell = fv.fold_cells(X, D, range(30), [35, 36, 37], [8], [1], bootstrap=2)[0]
    assert np.isfinite(cell["heldout_se"])
    with pytest.raises(ValueError, match=r"^bootstrap: expected 0 or an integer >= 2, got 1$"):
        fv.fold_cells(X, D, range(30), [35], [8], [1], bootstrap=1)
    # folds: an integer >= 2; a float, a bool or 1 are refused by name
    for bad in (1, 2.5, True):
        with pytest.raises(ValueError, match=rf"^folds: expected an integer >= 2, got {bad!r}$"):
            fv.validate_selection(X, P, N, rank=1, folds=bad)
    # five queries in five folds leave four training queries per fold: exactly CARS's minimum
    res = fv.validate_selection(X[:5], P[:5], N[:5], rank=1, folds=5, bootstrap=2)
    assert res.n == 5 and [s["size"] for s in res.per_size] == [4] and len(res.cells) == 5


def test_each_fold_is_logged_with_its_sizes(caplog):
    X, P, N = _triples(n=40)
    with caplog.at_level(logging.INFO, logger="asymgeo.estimators.validation"):
        fv.validate_selection(X, P, N, rank=1, folds=4, bootstrap=0, sizes=(8, 16))
    lines = [r.getMessage() for r in caplog.records if r.name == "asymgeo.estimators.validation"]
    # a pool of 30 above the largest size (16): the prefix of 16 trains, the whole pool is not added
    assert lines == [f"fold {f}: 16 training / 10 held-out queries, sizes [8, 16]" for f in range(4)]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_on_a_terminal_and_lines_when_piped(monkeypatch):
    import sys

    X, P, N = _triples(n=40)
    kw = {"rank": 1, "folds": 2, "bootstrap": 0, "sizes": (8,), "progress": True}
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    fv.validate_selection(X, P, N, **kw)
    assert piped.getvalue().startswith("asymgeo: validate rank 1: 0/2 cells, started\n")
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    fv.validate_selection(X, P, N, **kw)
    assert "asymgeo: validate rank 1" not in term.getvalue() and "validate rank 1" in term.getvalue()


def _hand_cell(fold, size, ls, ld, cars, se=None, **choices):
    row = {"fold": fold, "size": size, "rank": 1, "loss_shared": ls, "loss_dual": ld, "cars_choice": cars,
           "cars_score": 1.0 if cars == "dual" else -1.0}
    row.update({f"{k}_choice": v for k, v in choices.items()})
    if se is not None:
        row["heldout_se"] = se
    return row


def test_per_size_counts_by_hand():
    # size 8: CARS says dual in two of three cells; held-out dual wins once (0.5 < 0.75)
    # decided: |L_s - L_d| > 2 se strictly: 0.25 against 2 x 0.125 is a tie, not decided
    cells = [_hand_cell(0, 8, 0.75, 0.5, "dual", se=0.125), _hand_cell(1, 8, 0.5, 0.75, "dual", se=0.0625),
             _hand_cell(2, 8, 0.5, 1.0, "shared", se=0.5)]
    s = fv.summarise_cells(cells)["per_size"][0]
    assert (s["size"], s["cells"], s["cars_dual"], s["heldout_dual"]) == (8, 3, 2, 1)
    assert s["decided"] == 1  # only the second: 0.25 > 2 x 0.0625
    assert s["accuracy"] == pytest.approx(2 / 3)


def test_the_scored_rules_are_cars_the_fixed_rules_then_the_registry_order():
    row = _hand_cell(0, 8, 0.5, 0.75, "dual", zzz="shared", cvp="dual", aaa="dual", sure="shared")
    # registered rules in the registry's order (sure before cvp), unregistered ones as the cells list them
    assert fv._scored_rules([row]) == ["cars", "shared", "dual", "sure", "cvp", "zzz", "aaa"]
    other = dict(row)
    del other["cvp_choice"]  # a rule some cell lacks is not scored
    assert fv._scored_rules([row, other]) == ["cars", "shared", "dual", "sure", "zzz", "aaa"]


def test_the_selector_projection_follows_its_seed_and_names_a_bad_dimension():
    R3, R4 = fv.fixed_projection(12, 5, 3), fv.fixed_projection(12, 5, 4)
    assert R3.shape == R4.shape == (12, 5) and not np.allclose(R3, R4)
    with pytest.raises(ValueError, match=r"^selector_dim"):
        fv.fixed_projection(12, 0, 3)
    # a dimension beyond any p is not a bad dimension: it means no projection
    assert fv.fixed_projection(12, 10**9, 3) is None


def test_cells_run_on_every_core_from_256_dimensions(monkeypatch):
    monkeypatch.setattr(fv, "available_cpus", lambda: 3)
    assert fv._cell_workers(None, 10, 256) == 3 and fv._cell_workers(None, 10, 255) == 1
    assert fv._cell_workers(None, 2, 384) == 2  # never more workers than cells
    assert fv._cell_workers(2, 10, 16) == 2
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match=rf"^n_jobs: expected a positive integer or None, got {bad!r}$"):
            fv._cell_workers(bad, 10, 16)


def test_fold_cells_scores_the_rules_it_is_given():
    X, P, N = _triples()
    D = P - N
    cell = fv.fold_cells(X, D, range(30), [35, 36], [16], [2], rules=["cars", "cvp"])[0]
    assert "cvp_choice" in cell and "sure_choice" not in cell
    plain = fv.fold_cells(X, D, range(30), [35, 36], [16], [2], sure=False)[0]
    assert "cars_choice" in plain and "sure_choice" not in plain and "anisotropic_choice" not in plain
    default = fv.fold_cells(X, D, range(30), [35, 36], [16], [2])[0]
    assert "sure_choice" in default and "anisotropic_choice" in default
    sig = inspect.signature(fv.fold_cells).parameters
    assert (sig["seed"].default, sig["cv_folds"].default, sig["sure"].default) == (0, 0, True)
