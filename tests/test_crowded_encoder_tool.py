"""tools/crowded_encoder.py: the crowded stress encoder behind docs/peers_crowded.md (issue #36)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from asymgeo.data import import_embeddings, load_beir, load_embeddings

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "data"))
from beir_fixtures import doc, query, write_beir  # noqa: E402

_spec = importlib.util.spec_from_file_location("crowded_encoder", ROOT / "tools" / "crowded_encoder.py")
assert _spec is not None and _spec.loader is not None
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


def _unit_rows(n: int, p: int, seed: int, lean: float = 0.3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((n, p)) + lean * np.eye(p)[0]  # every row leans toward e_0
    return V / np.linalg.norm(V, axis=1, keepdims=True)


def _loop_mean_cosine(V: np.ndarray) -> float:
    n = V.shape[0]
    return sum(float(V[i] @ V[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))


def test_mean_pair_cosine_equals_the_loop_over_distinct_pairs():
    V = _unit_rows(9, 5, 0)
    assert tool.mean_pair_cosine(V) == pytest.approx(_loop_mean_cosine(V), abs=1e-12)
    two = np.array([[1.0, 0.0], [0.6, 0.8]])
    assert tool.mean_pair_cosine(two) == pytest.approx(0.6)  # by hand
    with pytest.raises(ValueError, match="at least two rows"):
        tool.mean_pair_cosine(two[:1])


def test_the_crowding_scale_reaches_the_target_and_rows_stay_unit():
    Q = _unit_rows(40, 6, 1)
    u = Q.mean(axis=0) / np.linalg.norm(Q.mean(axis=0))
    for target in (0.5, 0.75, 0.9):
        c = tool.crowding_scale(Q, u, target)
        W = tool.crowd(Q, u, c)
        np.testing.assert_allclose(np.linalg.norm(W, axis=1), 1.0, atol=1e-12)
        assert _loop_mean_cosine(W) == pytest.approx(target, abs=1e-5)
    # by hand: v' = (v + c u) / |v + c u| for v = e_1, u = e_0, c = 1
    np.testing.assert_allclose(tool.crowd(np.array([[0.0, 1.0]]), np.array([1.0, 0.0]), 1.0),
                               [[2 ** -0.5, 2 ** -0.5]])


def test_a_target_outside_the_reachable_range_is_refused_by_name():
    Q = _unit_rows(20, 4, 2)
    u = Q.mean(axis=0) / np.linalg.norm(Q.mean(axis=0))
    now = tool.mean_pair_cosine(Q)
    for bad in (now - 0.01, 1.0):
        with pytest.raises(ValueError, match=r"^target: expected a mean cosine in"):
            tool.crowding_scale(Q, u, bad)


def test_main_writes_a_verified_cache_whose_queries_sit_at_the_target(tmp_path, capsys):
    n_docs, n_q, p = 12, 10, 8
    ds = write_beir(tmp_path / "mini", [doc(i) for i in range(n_docs)], [query(i) for i in range(n_q)],
                    {"test": [(str(i), str(i), 1) for i in range(n_q)]})
    C, Q = _unit_rows(n_docs, p, 3), _unit_rows(n_q, p, 4)
    import_embeddings(ds, "base-enc", corpus=C, corpus_ids=[str(i) for i in range(n_docs)], queries=Q,
                      query_ids=[str(i) for i in range(n_q)], cache_dir=tmp_path / "src")
    assert tool.main([str(ds), "base-enc", "--cache-dir", str(tmp_path / "src"), "--out", str(tmp_path / "out"),
                      "--target", "0.8"]) == 0
    assert "crowded-0.8-base-enc" in capsys.readouterr().out
    got = load_embeddings(load_beir(ds), "crowded-0.8-base-enc", cache_dir=tmp_path / "out")
    Qc = np.asarray(got.queries, dtype=np.float64)
    assert tool.mean_pair_cosine(Qc) == pytest.approx(0.8, abs=2e-3)  # float16 cache
    # one map for both sides: the documents moved by the same direction and scale
    u = np.concatenate([Q, C]).mean(axis=0)
    u /= np.linalg.norm(u)
    c = tool.crowding_scale(Q, u, 0.8)
    np.testing.assert_allclose(np.asarray(got.corpus, dtype=np.float64), tool.crowd(C, u, c), atol=2e-3)


def test_refusals_are_one_line_with_exit_status_2_and_an_existing_cache_is_kept(tmp_path, capsys):
    n_docs, n_q, p = 6, 5, 4
    ds = write_beir(tmp_path / "mini", [doc(i) for i in range(n_docs)], [query(i) for i in range(n_q)],
                    {"test": [(str(i), str(i), 1) for i in range(n_q)]})
    C, Q = _unit_rows(n_docs, p, 5), _unit_rows(n_q, p, 6)
    import_embeddings(ds, "base", corpus=C, corpus_ids=[str(i) for i in range(n_docs)], queries=Q,
                      query_ids=[str(i) for i in range(n_q)], cache_dir=tmp_path / "src")
    args = [str(ds), "base", "--cache-dir", str(tmp_path / "src"), "--out", str(tmp_path / "out")]
    assert tool._cli(args + ["--target", "1.5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crowded_encoder: error: target: expected a mean cosine in") and err.count("\n") == 1
    assert tool._cli([str(ds), "nope", "--cache-dir", str(tmp_path / "src"), "--out", str(tmp_path / "out")]) == 2
    assert "no embedding cache" in capsys.readouterr().err
    assert tool._cli(args) == 0
    written = (tmp_path / "out" / "mini" / "crowded-0.75-base" / "queries.npy").read_bytes()
    assert tool._cli(args) == 2  # already there: refused, the cache untouched
    assert "a cache is already there" in capsys.readouterr().err
    assert (tmp_path / "out" / "mini" / "crowded-0.75-base" / "queries.npy").read_bytes() == written
