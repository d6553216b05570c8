"""Beyond the paper (issue 20): the selectors cell against a brute-force loop on the same design,
the join with Table 1's cells (and its refusals), the summary on hand-made cells."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from asymgeo.experiments import selectors
from asymgeo.experiments.real_pool import fold_design, pool_triples
from asymgeo.experiments.runner import cell_seed
from asymgeo.kernels.geometry import dual_truncate, shared_truncate
from asymgeo.kernels.operator_risk import heldout_loss


def _cfg(shared_dir, **kw):
    return {**dict(centring="raw", dataset="scifact", encoder="all-MiniLM-L6-v2", fold=1, rank=4, folds=5,
                   cv_folds=5, data_dir=str(shared_dir / "data"), cache_dir=str(shared_dir / "embeddings"),
                   pool="train", master_seed=20260809, max_size=64), **kw}


def test_cell_against_a_brute_force_loop(shared_dir):
    cfg = _cfg(shared_dir)
    out = selectors.cell(cfg)
    pool = pool_triples("scifact", "all-MiniLM-L6-v2", cfg["data_dir"], cfg["cache_dir"], "train")
    design = fold_design(pool.ids, 1)
    X, D = pool.X.astype(np.float64), pool.D.astype(np.float64)
    T = sum(np.outer(X[i], D[i]) for i in design.test_rows) / design.test_rows.size
    assert out["size"] == [32, 64]                                # the sizes up to max_size
    j = out["size"].index(64)
    rows = design.train_order[:64]
    C = X[rows].T @ D[rows] / 64
    assert out["loss_shared"][j] == pytest.approx(heldout_loss(shared_truncate(C, 4, solver="dense"), T), rel=1e-9)
    assert out["loss_dual"][j] == pytest.approx(heldout_loss(dual_truncate(C, 4, solver="dense"), T), rel=1e-9)
    # the inner five folds, by hand: Table 1's seed of (fold 1, size 64), a seeded permutation
    ss = np.random.SeedSequence(cell_seed(20260809, 1), spawn_key=(1, 64))
    seed = int(ss.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))
    order = np.random.default_rng(np.random.SeedSequence(seed)).permutation(64)
    diffs = []
    for part in np.array_split(order, 5):
        keep = np.setdiff1d(np.arange(64), part)
        Ctr = X[rows[keep]].T @ D[rows[keep]] / keep.size
        Mk = X[rows[part]].T @ D[rows[part]] / part.size
        diffs.append(heldout_loss(shared_truncate(Ctr, 4, solver="dense"), Mk)
                     - heldout_loss(dual_truncate(Ctr, 4, solver="dense"), Mk))
    assert out["cv_score"][j] == pytest.approx(np.mean(diffs), rel=1e-8)
    assert out["cv_se"][j] == pytest.approx(np.std(diffs, ddof=1) / np.sqrt(5), rel=1e-8)


def _results_frame(shared_dir, ranks=(4,), folds=(0,)):
    rows = []
    for f in folds:
        for r in ranks:
            cfg = _cfg(shared_dir, fold=f, rank=r)
            rows.append({**{k: cfg[k] for k in ("centring", "dataset", "encoder", "fold", "rank")}, **selectors.cell(cfg)})
    return pd.DataFrame(rows)


def test_join_with_the_committed_table1_cells_and_its_refusals(shared_dir):
    t1 = pd.read_csv(Path(__file__).resolve().parents[2] / "docs" / "results" / "table1_cells.csv")
    cells = selectors.explode(_results_frame(shared_dir))
    joined = selectors.join_table1(cells, t1)
    assert len(joined) == len(cells) and joined["cars_choice"].notna().all()
    # the one-SE and sign rules, from the recorded numbers
    assert (joined["cv_choice"] == np.where(joined["cv_score"] > joined["cv_se"], "dual", "shared")).all()
    assert (joined["cv0_choice"] == np.where(joined["cv_score"] > 0, "dual", "shared")).all()
    moved = cells.copy()
    moved.loc[0, "loss_dual"] *= 1.01
    with pytest.raises(ValueError, match="not the same design"):
        selectors.join_table1(moved, t1)
    with pytest.raises(ValueError, match="no projection-0 cell"):
        selectors.join_table1(cells, t1[t1["size"] != int(cells["size"].iloc[0])])


def _joined(rows):
    df = pd.DataFrame([dict(centring="raw", dataset="d", encoder="e", rank=4, cars_score=0.0, cv_score=0.0,
                            anisotropic_choice="shared", anisotropic_score=0.0, ranking_choice="shared", ranking_score=0.0,
                            **r) for r in rows])
    df["advantage"] = df["loss_shared"] - df["loss_dual"]
    return df


def test_summary_by_hand():
    rows = [  # fold 0: shared wins then dual wins; fold 1: dual wins twice
        dict(fold=0, size=32, loss_shared=1.0, loss_dual=1.4, cars_choice="dual", sure_choice="shared",
             cv_choice="shared", cv0_choice="dual"),
        dict(fold=0, size=64, loss_shared=1.0, loss_dual=0.8, cars_choice="shared", sure_choice="shared",
             cv_choice="dual", cv0_choice="dual"),
        dict(fold=1, size=32, loss_shared=1.0, loss_dual=0.9, cars_choice="dual", sure_choice="shared",
             cv_choice="dual", cv0_choice="dual"),
        dict(fold=1, size=64, loss_shared=1.0, loss_dual=0.5, cars_choice="dual", sure_choice="dual",
             cv_choice="shared", cv0_choice="dual"),
    ]
    s = selectors.summarise(_joined(rows)).iloc[0]
    # regrets per fold: cars (0.4+0.2)/2=.3, (0+0)/2=0 -> .15; cv (0+0)/2=0, (0+.5)/2=.25 -> .125
    assert s["regret_cars"] == pytest.approx(0.15) and s["regret_cv"] == pytest.approx(0.125)
    assert s["regret_shared"] == pytest.approx((0.1 + 0.3) / 2) and s["regret_dual"] == pytest.approx(0.2 / 2)
    assert s["regret_cv0"] == pytest.approx(0.1) and s["regret_sure"] == pytest.approx((0.1 + 0.05) / 2)
    assert s["accuracy_cars"] == pytest.approx((0 + 1) / 2) and s["accuracy_cv"] == pytest.approx((1 + 0.5) / 2)
    assert s["fold_wins_cv"] == 1 and s["fold_wins_cars"] == 0     # fold 0: cv 0 < shared .1 and dual .2
    assert s["reduction_cv"] == pytest.approx(1 - 0.125 / 0.1)
    assert s["regret_anisotropic"] == pytest.approx(s["regret_shared"])   # always "shared" in these cells


def test_evidence_page_refuses_damaged_committed_selector_tables(tmp_path):
    # without a run, the Beyond-the-paper section reads the committed tables: a damaged one is one
    # line naming the file, and the page already there is left as it was
    import shutil

    from asymgeo.experiments.evidence_report import build_evidence_report

    root = Path(__file__).resolve().parents[2]
    docs = tmp_path / "docs"
    shutil.copytree(root / "docs" / "results", docs / "results")
    (docs / "evidence.md").write_text("the page before\n")
    (docs / "results" / "selectors_cells.csv").write_text("centring,dataset\nraw,scifact\n")
    with pytest.raises(ValueError, match=r"selectors_cells.csv: missing column\(s\) \['encoder'"):
        build_evidence_report(tmp_path / "no-results", docs)
    shutil.copy(root / "docs" / "results" / "selectors_cells.csv", docs / "results" / "selectors_cells.csv")
    (docs / "results" / "rq1_selectors.csv").write_text('garbage,,"\n')
    with pytest.raises(ValueError, match="rq1_selectors.csv: not a readable CSV table"):
        build_evidence_report(tmp_path / "no-results", docs)
    assert (docs / "evidence.md").read_text() == "the page before\n"
