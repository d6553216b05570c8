"""The peers page's summary: paired figures recomputed by hand from the per-query values of a small table."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from asymgeo.experiments import peers


def _table():
    frozen = np.array([0.5, 0.2, 0.9, 0.4, 0.0, 1.0])
    fmt = peers._fmt_values
    rows = []
    # default: two seeds; the summary averages them per query before pairing
    for seed, v in ((0, [0.9, 0.3, 0.9, 0.4, 0.1, 1.0]), (1, [0.7, 0.3, 0.9, 0.6, 0.1, 1.0])):
        rows.append(dict(dataset="ds", encoder="enc", method="default", seed_index=seed, values=fmt(v),
                         frozen_values=fmt(frozen), seen="0,1,2", unseen="3,4,5", unseen_train_only="2,3,4,5",
                         seconds=10.0))
    rows.append(dict(dataset="ds", encoder="enc", method="prior", seed_index=0, values=fmt([1.0, 0.2, 0.9, 0.1,
                                                                                            0.0, 0.8]),
                     frozen_values=fmt(frozen), seen="0,1,2", unseen="3,4,5", unseen_train_only="2,3,4,5",
                     seconds=1.0))
    return pd.DataFrame(rows), frozen


def test_summary_pairs_every_method_with_frozen_and_the_default_with_the_best_peer(tmp_path):
    table, frozen = _table()
    s = peers.summarise(table, tmp_path)
    g = s["groups"][0]
    default = np.array([0.8, 0.3, 0.9, 0.5, 0.1, 1.0])  # per-query mean of the two seeds
    prior = np.array([1.0, 0.2, 0.9, 0.1, 0.0, 0.8])
    assert g["methods"]["default"]["all"]["diff"] == pytest.approx((default - frozen).mean())
    assert g["methods"]["default"]["unseen"]["diff"] == pytest.approx((default - frozen)[3:].mean())
    assert g["methods"]["prior"]["seen"]["diff"] == pytest.approx((prior - frozen)[:3].mean())
    assert g["methods"]["prior"]["unseen_train_only"]["n"] == 4
    assert g["methods"]["default"]["seeds"] == pytest.approx([(np.array([0.9, 0.3, 0.9, 0.4, 0.1, 1.0]) - frozen).mean(),
                                                             (np.array([0.7, 0.3, 0.9, 0.6, 0.1, 1.0]) - frozen).mean()])
    assert g["best_peer"] == "prior"
    assert g["default_vs_best"]["diff"] == pytest.approx((default - prior).mean())
    lo, hi = g["default_vs_best"]["ci_low"], g["default_vs_best"]["ci_high"]
    assert lo <= (default - prior).mean() <= hi
    page = peers.format_summary(s, "cmd")
    assert "Default minus the best peer on all queries (document prior (train positives))" in page


def test_a_finetune_record_joins_the_table_when_its_queries_match(tmp_path):
    table, frozen = _table()
    vals = [0.6, 0.3, 0.9, 0.5, 0.1, 1.0]
    rec = {"test": {"ndcg@10": vals}, "costs": {"train_seconds": 400, "corpus_encode_seconds": 600}, "chosen_epochs": 1}
    (tmp_path / "finetune_ds_enc.json").write_text(json.dumps(rec))
    g = peers.summarise(table, tmp_path)["groups"][0]
    assert g["methods"]["finetune"]["all"]["diff"] == pytest.approx((np.array(vals) - frozen).mean())
    assert g["finetune_cost"] == {"train_seconds": 400, "corpus_encode_seconds": 600}
    rec["test"]["ndcg@10"] = vals[:5]  # another set of queries: left out
    (tmp_path / "finetune_ds_enc.json").write_text(json.dumps(rec))
    assert "finetune" not in peers.summarise(table, tmp_path)["groups"][0]["methods"]


def test_frontier_figure_is_drawn(tmp_path):
    table, _ = _table()
    out = peers.plot_frontier(peers.summarise(table, tmp_path), tmp_path / "f.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="method: expected one of"):
        peers.cell({"method": "magic", "seed_index": 0, "dataset": "x", "encoder": "y", "data_dir": ".",
                    "cache_dir": "."})


def test_a_crowded_stress_encoder_is_explained_and_the_figure_path_is_the_pages(tmp_path):
    table, _ = _table()
    page = peers.format_summary(peers.summarise(table, tmp_path), "cmd")
    assert "Stress encoders" not in page and "![frontier](figures/peers_frontier.png)" in page
    table["encoder"] = "crowded-0.75-enc"
    page = peers.format_summary(peers.summarise(table, tmp_path), "cmd", "figures/peers_crowded_frontier.png")
    assert "*Stress encoders* (`crowded-0.75-enc`)" in page and "tools/crowded_encoder.py" in page
    assert "![frontier](figures/peers_crowded_frontier.png)" in page and "peers_frontier.png" not in page


def test_the_defaults_gain_is_split_into_its_maps_and_its_memorys(tmp_path):
    """#36 'report each part's share': seed 0 kept a memory (its map alone recorded), seed 1 did not
    (its deployed values are its map's); worked by hand."""
    table, frozen = _table()
    table["map_values"] = [peers._fmt_values([0.6, 0.2, 0.9, 0.4, 0.0, 1.0]), np.nan, np.nan]
    g = peers.summarise(table, tmp_path)["groups"][0]
    deployed = np.array([0.8, 0.3, 0.9, 0.5, 0.1, 1.0])
    maps = (np.array([0.6, 0.2, 0.9, 0.4, 0.0, 1.0]) + np.array([0.7, 0.3, 0.9, 0.6, 0.1, 1.0])) / 2
    p = g["default_parts"]
    assert p["map"]["diff"] == pytest.approx((maps - frozen).mean())  # (0.15 + 0.05 + 0 + 0.1 + 0.05 + 0) / 6
    assert p["memory"]["diff"] == pytest.approx((deployed - maps).mean())
    assert p["map_share"] == pytest.approx((maps - frozen).mean() / (deployed - frozen).mean())
    assert p["map"]["diff"] + p["memory"]["diff"] == pytest.approx(g["methods"]["default"]["all"]["diff"])
    page = peers.format_summary(peers.summarise(table, tmp_path), "cmd")
    line = next(ln for ln in page.splitlines() if ln.startswith("The default's parts"))
    assert f"its map alone {(maps - frozen).mean():+.4f}" in line
    assert f"(the map's share of the gain: {100 * p['map_share']:.0f}%)" in line
    # without the column (a table from before it was recorded) every seed's deployed values are its map's
    g0 = peers.summarise(_table()[0], tmp_path)["groups"][0]["default_parts"]
    assert g0["memory"]["diff"] == pytest.approx(0.0) and g0["map_share"] == pytest.approx(1.0)
