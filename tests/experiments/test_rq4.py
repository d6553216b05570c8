"""RQ4 cell against a direct computation on SciFact, and the slope claims on synthetic tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from asymgeo.data import load_beir, load_triples
from asymgeo.data.splits import fold_seed, fold_split, nested_subsets, query_folds
from asymgeo.experiments import rq4
from asymgeo.kernels.geometry import dual_truncate, shared_truncate
from asymgeo.kernels.operator_risk import heldout_loss


def _config(shared_dir, **kw):
    cfg = dict(dataset="scifact", encoder="all-MiniLM-L6-v2", centring="raw", seed_index=1, rank=4,
               data_dir=str(shared_dir / "data"), cache_dir=str(shared_dir / "embeddings"), pool="train", folds=5,
               master_seed=20260809)
    cfg.update(kw)
    return cfg


@pytest.mark.parametrize("centring", ["raw", "centred"])
def test_cell_matches_direct_computation(shared_dir, centring):
    out = rq4.cell(_config(shared_dir, centring=centring))
    ds = load_beir(shared_dir / "data" / "scifact")
    ids = ds.labelled_query_ids("train")
    tr = load_triples(ds, "all-MiniLM-L6-v2", ids, cache_dir=shared_dir / "embeddings")
    assert len(tr) == 809 and out["n_pool"] == 809
    row = {q: i for i, q in enumerate(tr.query_ids)}
    X = tr.X.astype(np.float64)
    D = tr.Y_pos.astype(np.float64) - tr.Y_neg.astype(np.float64)
    pool, held = fold_split(query_folds(tr.query_ids), 1)
    if centring == "centred":
        P = [row[q] for q in pool]
        X, D = X - X[P].mean(0), D - D[P].mean(0)
    H = [row[q] for q in held]
    T = X[H].T @ D[H] / len(H)
    nested = nested_subsets(pool, seed=fold_seed(1))
    assert out["sizes"] == sorted(nested) == [32, 64, 128, 256, 512, 647]
    for j, m in enumerate(out["sizes"]):
        idx = [row[q] for q in nested[m]]
        C = X[idx].T @ D[idx] / m
        assert out["loss_shared"][j] == pytest.approx(heldout_loss(shared_truncate(C, 4), T), rel=1e-8)
        assert out["loss_dual"][j] == pytest.approx(heldout_loss(dual_truncate(C, 4), T), rel=1e-8)
    slope = np.polyfit(np.log2(out["sizes"]), out["advantage"], 1)[0]
    assert out["slope"] == pytest.approx(slope, rel=1e-8)
    assert 0 < out["mean_share"] and 0 < out["mean_centred_share"]


def _traj(centring, dataset, rank, seed, adv):
    n = [32, 64, 128, 256][: len(adv)]
    return dict(centring=centring, dataset=dataset, encoder="e", rank=rank, seed_index=seed, sizes=n,
                loss_shared=[1.0] * len(adv), loss_dual=[1.0 - a for a in adv], advantage=adv,
                slope=float(np.polyfit(np.log2(n), adv, 1)[0]) if len(adv) > 1 else float("nan"),
                mean_share=0.2, mean_centred_share=0.8, mean_cosine=0.5, p=8)


def test_claims_count_positive_slopes_and_crossings():
    df = pd.DataFrame([
        _traj("raw", "a", 4, 0, [-1.0, -0.5, 0.1, 0.3]),     # rising, crosses
        _traj("raw", "a", 8, 0, [-1.0, -0.8, -0.6, -0.2]),   # rising, no crossing
        _traj("raw", "b", 4, 0, [-0.1]),                     # one size: not comparable
        _traj("centred", "a", 4, 0, [0.2, 0.1, 0.0, -0.1]),  # falling
    ])
    c = rq4.claims(df, "raw")
    assert (c["trajectories"], c["positive"], c["all_positive"], c["crossings"]) == (2, 2, True, 1)
    c = rq4.claims(df, "centred")
    assert (c["trajectories"], c["positive"], c["all_positive"]) == (1, 0, False)
    s = rq4.summarise(df)
    raw_a = s[(s.centring == "raw") & (s.dataset == "a")].iloc[0]
    got = (raw_a.trajectories, raw_a.positive_slopes, raw_a.crossings, raw_a.dual_favoured_at_largest_n)
    assert got == (2, 2, 1, 1)
    assert rq4.claims(df[df.centring == "raw"], "centred")["all_positive"] is False   # no trajectories: not a pass


def test_centring_effect_first_positive_and_last():
    df = pd.DataFrame([_traj("raw", "a", 4, 0, [-1.0, 0.2, 0.3, 0.5]), _traj("raw", "a", 8, 0, [-1.0, -0.4, 0.1, 0.3]),
                       _traj("centred", "a", 4, 0, [-1.0, -0.5, -0.1, 0.1])])
    ce = rq4.centring_effect(df).set_index("centring")
    assert ce.loc["raw", "first_positive_n"] == 128          # means: -1, -0.1, 0.2, 0.4
    assert ce.loc["raw", "mean_at_largest_n"] == pytest.approx(0.4)
    assert ce.loc["centred", "first_positive_n"] == 256


def test_plots_and_export(tmp_path):
    df = pd.DataFrame([_traj(c, "a", r, s, [-1.0, -0.3, 0.2, 0.4]) for c in ("raw", "centred") for r in (4, 8)
                       for s in (0, 1)])
    rq4.plot(df, tmp_path / "t.png")
    rq4.plot_means(df, tmp_path / "m.png")
    paths = rq4.export(df, tmp_path / "res")
    assert (tmp_path / "t.png").stat().st_size > 1000 and (tmp_path / "m.png").stat().st_size > 1000
    long = pd.read_csv(paths[0])
    assert len(long) == 8 * 4 and set(long["n"]) == {32, 64, 128, 256}


def test_centring_effect_headline_uses_the_papers_ranks():
    """Ranks 4 to 32 favour dual at the largest n; rank 256 pulls the all-rank mean below zero."""
    df = pd.DataFrame([_traj("raw", "a", 4, 0, [-1.0, 0.2]), _traj("raw", "a", 32, 0, [-1.0, 0.4]),
                       _traj("raw", "a", 256, 0, [-3.0, -2.0])])
    paper = rq4.centring_effect(df, rq4.PAPER_RANKS).set_index("centring")
    every = rq4.centring_effect(df).set_index("centring")
    assert paper.loc["raw", "mean_at_largest_n"] == pytest.approx(0.3) and paper.loc["raw", "first_positive_n"] == 64
    assert every.loc["raw", "mean_at_largest_n"] == pytest.approx((0.2 + 0.4 - 2.0) / 3)
    assert every.loc["raw", "first_positive_n"] is None  # "never"


def test_frozen_ndcg_names_a_missing_cache_instead_of_failing(tmp_path, shared_dir):
    import pandas as pd

    from asymgeo.experiments.rq4 import frozen_ndcg

    df = pd.DataFrame({"dataset": ["scifact", "scifact"], "encoder": ["all-MiniLM-L6-v2", "no-such-encoder"],
                       "data_dir": [str(shared_dir / "data")] * 2, "cache_dir": [str(shared_dir / "embeddings")] * 2})
    ok, missing = frozen_ndcg(df)
    assert ok["encoder"] == "all-MiniLM-L6-v2" and ok["queries"] == 300
    assert set(missing) == {"dataset", "encoder", "error"} and "no-such-encoder" in missing["error"]
