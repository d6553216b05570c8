"""Beyond the paper (issue 20): the held-out-noise cell against a brute-force loop over explicit
half folds and bootstrap resamples, the join with the selectors cells (and its refusals), the
summary on hand-made rows, the page section from committed tables."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from asymgeo.experiments import heldout_noise
from asymgeo.experiments.real_pool import fold_design, pool_triples
from asymgeo.kernels.geometry import dual_truncate, shared_truncate
from asymgeo.kernels.operator_risk import heldout_loss

ROOT = Path(__file__).resolve().parents[2]


def _cfg(shared_dir, **kw):
    return {**dict(centring="raw", dataset="scifact", encoder="all-MiniLM-L6-v2", heldout_folds=2, ranks="4,8",
                   folds=5, half_splits=3, bootstrap=20, data_dir=str(shared_dir / "data"),
                   cache_dir=str(shared_dir / "embeddings"), pool="train", master_seed=20260809), **kw}


def _fold_seed(fold: int) -> int:
    """The documented seed scheme, by hand: cell_seed(master, 4), then spawn_key (fold,)."""
    base_ss = np.random.SeedSequence(20260809, spawn_key=(4,))
    base = int(base_ss.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))
    ss = np.random.SeedSequence(base, spawn_key=(fold,))
    return int(ss.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))


@pytest.fixture(scope="module")
def small_cell(shared_dir):
    cfg = _cfg(shared_dir)
    return cfg, heldout_noise.cell(cfg)


def test_cell_against_a_brute_force_loop(shared_dir, small_cell):
    cfg, out = small_cell
    pool = pool_triples("scifact", "all-MiniLM-L6-v2", cfg["data_dir"], cfg["cache_dir"], "train")
    X, D = pool.X, pool.D
    got = pd.DataFrame({k: out[k] for k in ("fold", "size", "rank", "loss_shared", "loss_dual", "diff_se",
                                            "half_regret_shared", "half_regret_dual", "half_regret_oracle")})
    diffs: dict[str, list] = {}
    checked = 0
    for fold in (0, 1):
        design = fold_design(pool.ids, fold)
        test = design.test_rows
        rng = np.random.default_rng(np.random.SeedSequence(_fold_seed(fold)))
        perms = [rng.permutation(test.size) for _ in range(3)]
        counts = rng.multinomial(test.size, np.full(test.size, 1.0 / test.size), size=20)
        half = test.size // 2
        halves = [(test[p[:half]], test[p[half:]]) for p in perms]

        def moment(rows):
            return X[rows].T @ D[rows] / len(rows)

        boots = [np.repeat(test, c) for c in counts]
        for m in design.sizes:
            rows = design.train_order[:m]
            C = X[rows].T @ D[rows] / m
            label = str(m) if m in (32, 64, 128, 256, 512) else "full"
            for r in (4, 8):
                Ms, Md = shared_truncate(C, r, solver="dense"), dual_truncate(C, r, solver="dense")

                def losses(T, Ms=Ms, Md=Md):
                    return heldout_loss(Ms, T), heldout_loss(Md, T)

                row = got[(got["fold"] == fold) & (got["size"] == m) & (got["rank"] == r)]
                assert len(row) == 1
                row = row.iloc[0]
                ls, ld = losses(moment(test))
                assert row["loss_shared"] == pytest.approx(ls, rel=1e-9)
                assert row["loss_dual"] == pytest.approx(ld, rel=1e-9)
                boot = [np.subtract(*losses(moment(b))) for b in boots]
                assert row["diff_se"] == pytest.approx(np.std(boot, ddof=1), rel=1e-7)
                reg = {"shared": [], "dual": [], "oracle": []}
                pair_diffs = []
                for A, B in halves:
                    la, lb = losses(moment(A)), losses(moment(B))
                    pair_diffs.append((la[0] - la[1], lb[0] - lb[1]))
                    for read, scored in ((la, lb), (lb, la)):
                        best = min(scored)
                        reg["shared"].append(scored[0] - best)
                        reg["dual"].append(scored[1] - best)
                        reg["oracle"].append((scored[1] if read[0] > read[1] else scored[0]) - best)
                for g, v in reg.items():
                    assert row[f"half_regret_{g}"] == pytest.approx(np.mean(v), rel=1e-7, abs=1e-12)
                diffs.setdefault(label, []).append(pair_diffs)
                checked += 1
    assert checked == len(got)
    # split-half reliability: per split, Spearman over the (fold, rank) cells of one size, then the mean
    for label, cells in diffs.items():
        arr = np.asarray(cells)                                  # (cells, splits, 2)
        rho = np.mean([stats.spearmanr(arr[:, k, 0], arr[:, k, 1]).statistic for k in range(3)])
        j = out["reliability_size"].index(label)
        assert out["reliability_cells"][j] == arr.shape[0]
        assert out["reliability_spearman"][j] == pytest.approx(rho, abs=1e-12)
    assert out["reliability_size"] == ["32", "64", "128", "256", "512", "full"]


def test_cell_refuses_bad_ranks_and_counts(shared_dir):
    with pytest.raises(ValueError, match="ranks: expected comma-separated integers"):
        heldout_noise.cell(_cfg(shared_dir, ranks="4;8"))
    with pytest.raises(ValueError, match="bootstrap >= 2"):
        heldout_noise.cell(_cfg(shared_dir, bootstrap=1))
    with pytest.raises(ValueError, match=r"heldout_folds: expected 1 to 5 \(the folds of the design\), got 6"):
        heldout_noise.cell(_cfg(shared_dir, heldout_folds=6))


def _frame(cfg, out):
    return pd.DataFrame([{**{k: cfg[k] for k in ("centring", "dataset", "encoder")}, **out}])


def test_join_with_the_committed_selectors_cells_and_its_refusals(small_cell):
    cfg, out = small_cell
    sel = pd.read_csv(ROOT / "docs" / "results" / "selectors_cells.csv")
    rows = heldout_noise.explode(_frame(cfg, out))
    joined = heldout_noise.join_selectors(rows, sel)
    assert len(joined) == len(rows) == 2 * 2 * 6 and joined["cars_choice"].notna().all()
    assert (joined["cv0_choice"] == np.where(joined["cv_score"] > 0, "dual", "shared")).all()
    moved = rows.copy()
    moved.loc[0, "loss_shared"] *= 1.01
    with pytest.raises(ValueError, match="not the same design"):
        heldout_noise.join_selectors(moved, sel)
    with pytest.raises(ValueError, match="no cell for"):
        heldout_noise.join_selectors(rows, sel[sel["size"] != 64])


def test_summary_by_hand():
    base = dict(centring="raw", dataset="d", encoder="e", rank=4, sure_choice="shared", anisotropic_choice="shared",
                cv_choice="shared", ranking_choice="dual")
    rows = pd.DataFrame([
        # fold 0: CARS wrong (dual wins by 0.2, within 2 SE); fold 1: CARS right, then wrong by 0.5 (outside)
        dict(base, fold=0, size=32, loss_shared=1.0, loss_dual=0.8, diff_se=0.15, cars_choice="shared",
             cv0_choice="dual", half_regret_shared=0.3, half_regret_dual=0.1, half_regret_oracle=0.2),
        dict(base, fold=1, size=32, loss_shared=1.0, loss_dual=1.1, diff_se=0.01, cars_choice="shared",
             cv0_choice="dual", half_regret_shared=0.0, half_regret_dual=0.2, half_regret_oracle=0.05),
        dict(base, fold=1, size=64, loss_shared=1.0, loss_dual=0.5, diff_se=0.1, cars_choice="shared",
             cv0_choice="shared", half_regret_shared=0.4, half_regret_dual=0.0, half_regret_oracle=0.1),
    ])
    rows["advantage"] = rows["loss_shared"] - rows["loss_dual"]
    s = heldout_noise.summarise(rows).iloc[0]
    assert s["half_regret_cars"] == pytest.approx((0.3 + (0.0 + 0.4) / 2) / 2)
    assert s["half_regret_cv0"] == pytest.approx((0.1 + (0.2 + 0.4) / 2) / 2)
    assert s["half_regret_ranking"] == pytest.approx((0.1 + (0.2 + 0.0) / 2) / 2)
    assert s["half_regret_oracle"] == pytest.approx((0.2 + (0.05 + 0.1) / 2) / 2)
    assert s["cars_regret"] == pytest.approx((0.2 + (0.0 + 0.5) / 2) / 2)
    assert (s["cars_errors"], s["cars_errors_noisy"], s["noisy_cells"]) == (2, 1, 1)
    assert s["noisy_share"] == pytest.approx(0.2 / 0.7)
    # the two decided cells (fold 1): dual wins the second, shared the first; CARS picks shared twice
    assert (s["decided_accuracy_cars"], s["decided_accuracy_shared"], s["decided_accuracy_dual"]) == (0.5, 0.5, 0.5)
    rows.loc[2, "cars_choice"] = "dual"            # now right on both decided cells; the noisy one not counted
    s = heldout_noise.summarise(rows).iloc[0]
    assert (s["decided_accuracy_cars"], s["decided_accuracy_shared"], s["decided_accuracy_dual"]) == (1.0, 0.5, 0.5)


def test_section_from_the_run_then_from_its_committed_tables(tmp_path, small_cell):
    from asymgeo.experiments.config import load_experiment
    from asymgeo.experiments.runner import run_sweep

    cfg, out = small_cell
    sel = pd.read_csv(ROOT / "docs" / "results" / "selectors_cells.csv")
    sel["cv_choice"] = np.where(sel["cv_score"] > sel["cv_se"], "dual", "shared")
    sel["cv0_choice"] = np.where(sel["cv_score"] > 0, "dual", "shared")
    docs = tmp_path / "docs"
    assert "Not run: `asymgeo reproduce heldout_noise`" in heldout_noise.section(tmp_path / "none", docs, "", sel)
    toml = tmp_path / "heldout_noise.toml"   # the small cell above, run by the sweep runner
    fixed = "\n".join(f"{k} = {v!r}" if isinstance(v, str) else f"{k} = {v}" for k, v in cfg.items()
                      if k not in ("centring", "dataset", "encoder", "master_seed"))
    toml.write_text('[experiment]\nname = "heldout_noise"\ncell = "asymgeo.experiments.heldout_noise:cell"\n'
                    'master_seed = 20260809\n[grid]\ncentring = ["raw"]\ndataset = ["scifact"]\n'
                    f'encoder = ["all-MiniLM-L6-v2"]\n[fixed]\n{fixed}\n')
    run_sweep(load_experiment(toml), results_dir=tmp_path / "results", progress=False)
    text = heldout_noise.section(tmp_path / "results", docs, "", sel)
    assert "### How much of the regret is the held-out fold's own noise" in text
    assert (docs / "results" / "heldout_noise_cells.csv").is_file()
    again = heldout_noise.section(tmp_path / "none", docs, "", sel)       # from the committed tables
    assert again == text
    (docs / "results" / "heldout_noise_reliability.csv").write_text("centring,dataset\nraw,scifact\n")
    with pytest.raises(ValueError, match=r"heldout_noise_reliability.csv: missing column\(s\) \['cells'"):
        heldout_noise.section(tmp_path / "none", docs, "", sel)


def test_evidence_page_carries_the_committed_noise_section(tmp_path):
    from asymgeo.experiments.evidence_report import build_evidence_report

    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs" / "results", docs / "results")
    page = build_evidence_report(tmp_path / "no-results", docs).read_text()
    committed = pd.read_csv(ROOT / "docs" / "results" / "heldout_noise_cells.csv")
    assert "### How much of the regret is the held-out fold's own noise" in page
    assert len(committed) == 1120                                # every cell of the selectors table
