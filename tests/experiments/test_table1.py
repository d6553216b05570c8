"""Table 1 cell = validate_selection on the same pool; aggregation and claims on synthetic
cells with known answers (holding and failing)."""

from __future__ import annotations

import pandas as pd
import pytest

from asymgeo.estimators.validation import validate_selection
from asymgeo.experiments import table1
from asymgeo.experiments.real_pool import pool_triples
from asymgeo.experiments.runner import cell_seed


@pytest.mark.slow
def test_cell_equals_validate_selection_on_the_pool(shared_dir):
    cfg = dict(projection=256, centring="raw", dataset="scifact", encoder="all-MiniLM-L6-v2", fold=2, rank=4,
               n_splits=2, folds=5, data_dir=str(shared_dir / "data"), cache_dir=str(shared_dir / "embeddings"),
               pool="train", master_seed=20260809)
    out = table1.cell(cfg)
    pool = pool_triples(cfg["dataset"], cfg["encoder"], cfg["data_dir"], cfg["cache_dir"], "train")
    v = validate_selection(pool.X, pool.D, 0 * pool.D, 4, n_splits=2, selector_dim=256,
                           seed=cell_seed(20260809, 1), query_ids=list(pool.ids))
    ref = [c for c in v.cells if c["fold"] == 2]
    assert out["size"] == [c["size"] for c in ref] and out["selector_dim"] == 256
    for key in ("loss_shared", "loss_dual", "cars_score", "raw_distance", "sure_score"):
        assert out[key] == pytest.approx([c[key] for c in ref], rel=1e-9, nan_ok=True)
    assert out["cars_choice"] == [c["cars_choice"] for c in ref]


def _cells(rows):
    base = dict(projection=256, centring="raw", encoder="e", sure_choice="shared", raw_distance=1.0,
                corrected_distance=1.0, cars_score=0.0, cars_se=0.1, sure_score=0.0)
    df = pd.DataFrame([{**base, **r} for r in rows])
    df["advantage"] = df["loss_shared"] - df["loss_dual"]
    return df


def _row(dataset, fold, size, ls, ld, cars):
    return dict(dataset=dataset, fold=fold, size=size, rank=4, loss_shared=ls, loss_dual=ld, cars_choice=cars)


def test_explode_round_trip():
    df = pd.DataFrame([dict(projection=0, centring="raw", dataset="d", encoder="e", fold=1, rank=8,
                            size=[32, 64], loss_shared=[1.0, 0.9], loss_dual=[1.5, 0.8], cars_score=[-1.0, 1.0],
                            cars_se=[0.1, 0.1], cars_choice=["shared", "dual"], raw_distance=[2.0, 1.0],
                            corrected_distance=[0.5, 0.4], sure_choice=["shared", "shared"],
                            sure_score=[-1.0, -0.5])])
    cells = table1.explode(df)
    assert list(cells["size"]) == [32, 64] and list(cells["rank"]) == [8, 8]
    assert cells["advantage"].tolist() == pytest.approx([-0.5, 0.1])


def test_summary_and_claims_hold():
    rows = []
    for d in ("a", "b"):
        for f in range(5):
            rows += [_row(d, f, 32, 1.0, 2.0, "shared"), _row(d, f, 512, 1.0, 0.5, "dual")]  # CARS always right
    s = table1.summarise(_cells(rows))
    enc = s[(s.dataset == "all") & (s.encoder == "e")].iloc[0]      # the paper's per-encoder row
    assert enc.outer_folds == 10 and enc.reduction == 1.0
    allrow = s[(s.dataset == "all") & (s.encoder == "all")].iloc[0]
    assert allrow.outer_folds == 10 and allrow.accuracy == 1.0 and allrow.regret_cars == 0.0
    assert allrow.regret_shared == pytest.approx(0.25) and allrow.regret_dual == pytest.approx(0.5)
    c = table1.claims(s)
    assert c["accuracy_holds"] and c["reduction_holds"] and c["fold_wins_holds"]
    assert (c["fold_wins"], c["outer_folds"]) == (10, 10) and c["reduction_min"] == 1.0


def test_claims_fail_when_cars_copies_shared():
    rows = []
    for f in range(5):
        rows += [_row("a", f, 32, 1.0, 2.0, "shared"), _row("a", f, 512, 1.0, 0.5, "shared")]
    c = table1.claims(table1.summarise(_cells(rows)))
    assert c["accuracy"] == 0.5 and not c["accuracy_holds"]
    assert c["fold_wins"] == 0 and not c["fold_wins_holds"]        # ties with always-shared win nothing
    assert c["reduction_min"] == 0.0 and not c["reduction_holds"]
    with pytest.raises(ValueError, match="projection"):
        table1.claims(table1.summarise(_cells(rows)), projection=0)


def test_size_correlations():
    rows = [_row("a", f, 32, 1.0, 1.0 + 0.1 * f, "shared") for f in range(5)]
    cells = _cells(rows)
    cells["cars_score"] = [-0.1 * f for f in range(5)]       # ranks agree with L_s - L_d = -0.1 f
    corr = table1.size_correlations(cells)
    assert corr.iloc[0].spearman == pytest.approx(1.0) and corr.iloc[0].heldout_dual == 0


def test_claims_per_pair_show_a_pooled_figure_can_hide_a_dataset():
    """Dataset "b" has regrets 100x larger: the pooled reduction is b's; dataset "a" (where
    CARS copies always-shared: 0% reduction) fails on its own row."""
    rows = []
    for f in range(5):
        # a: shared always wins by a little; CARS picks dual at n=512 and is wrong
        rows += [_row("a", f, 32, 1.0, 1.01, "shared"), _row("a", f, 512, 1.0, 1.01, "dual")]
        # b: shared wins at 32, dual at 512, by a lot; CARS always right
        rows += [_row("b", f, 32, 1.0, 2.0, "shared"), _row("b", f, 512, 2.0, 1.0, "dual")]
    s = table1.summarise(_cells(rows))
    pc = {p["dataset"]: p for p in table1.pair_claims(s)}
    # a by hand: CARS regret = (0 + 0.01) / 2 = 0.005, always-shared 0, always-dual 0.01
    assert pc["a"]["regret_cars"] == pytest.approx(0.005) and pc["a"]["regret_shared"] == 0.0
    assert not pc["a"]["reduction_holds"] and not pc["a"]["adds_accuracy"]
    assert (pc["a"]["accuracy"], pc["a"]["accuracy_shared"], pc["a"]["accuracy_dual"]) == (0.5, 1.0, 0.0)
    assert pc["b"]["reduction"] == 1.0 and pc["b"]["reduction_holds"] and pc["b"]["adds_accuracy"]
    # pooled over the encoder's datasets: shared 0.25 vs dual 0.255 vs CARS 0.0025 -> 99% "holds"
    pooled = table1.claims(s)
    assert pooled["reduction_holds"] and pooled["reduction_min"] == pytest.approx(1 - 0.0025 / 0.25)


def test_pooled_rows_only_where_they_pool():
    rows = [_row("a", f, 32, 1.0, 2.0, "shared") for f in range(5)]
    s = table1.summarise(_cells(rows))
    assert list(s["dataset"]) == ["a"]  # one dataset, one encoder: no "all" rows repeating it
    assert table1.claims(s)["accuracy"] == 1.0  # the claim falls back to the single pair


def test_size_correlations_per_pair_and_pooled():
    rows = []
    for f in range(5):
        rows += [_row("a", f, 32, 1.0, 1.0 + 0.1 * f, "shared"), _row("b", f, 32, 5.0, 5.0 - 0.1 * f, "dual")]
    cells = _cells(rows)
    # within a: score rises with L_s - L_d; within b: falls (inverted); b's level is higher
    cells["cars_score"] = [v for f in range(5) for v in (-0.1 * f, 10.0 - 0.1 * f)]
    corr = table1.size_correlations(cells).set_index("dataset")
    assert corr.loc["a", "spearman"] == pytest.approx(1.0) and corr.loc["b", "spearman"] == pytest.approx(-1.0)
    # pooled: the level difference alone makes the pooled rank correlation strongly positive
    assert corr.loc["all", "spearman"] > 0.5 and corr.loc["all", "cells"] == 10


@pytest.mark.parametrize("text, why", [
    ("projection,centring\n0,raw\n", "missing column"),
    ("projection,centring,dataset,encoder,fold,rank,size,loss_shared,loss_dual,cars_score,cars_choice,advantage\n"
     "x,raw,scifact,m,0,4,32,1,1,0,shared,0\n", "Unable to parse"),
])
def test_a_damaged_committed_cell_table_is_refused_with_the_fix(tmp_path, text, why):
    from asymgeo.experiments.table1 import section_from_committed

    bad = tmp_path / "table1_cells.csv"
    bad.write_text(text)
    with pytest.raises(ValueError, match=rf"table1_cells.csv: not a Table 1 per-cell table \(.*{why}.*\); "
                                         r"rerun `asymgeo reproduce table1`"):
        section_from_committed(bad, tmp_path, "fig.png", "")
