"""Triples and frozen hard negatives: hand-made geometry, then brute force on SciFact."""

from __future__ import annotations

import numpy as np
import pytest
from beir_fixtures import doc, query, write_beir

from asymgeo.data import load_beir, load_embeddings, load_triples, mine_hard_negatives, write_embeddings


def test_mine_hard_negatives_by_hand():
    Q = np.array([[1.0, 0.0], [0.0, 1.0]])
    C = np.array([[0.9, 0.0], [0.5, 0.5], [0.0, 0.8], [0.9, 0.0], [-1.0, 0.0]], dtype=np.float32)
    rows, scores = mine_hard_negatives(Q, C, [{0}, {1, 2}], k=3)
    # query 0: c0 and c3 tie at 0.9 (c0 excluded), then c1 0.5, c2 0.0
    # query 1: c2 0.8 and c1 0.5 excluded; c0, c3, c4 tie at 0.0 -> lower index first
    assert rows.tolist() == [[3, 1, 2], [0, 3, 4]]
    np.testing.assert_allclose(scores, [[0.9, 0.5, 0.0], [0.0, 0.0, 0.0]], atol=1e-7)


def test_mine_hard_negatives_errors():
    C = np.eye(3, dtype=np.float32)
    with pytest.raises(ValueError, match="exceed the corpus"):
        mine_hard_negatives(np.eye(3), C, [{0, 1}, set(), set()], k=2)
    with pytest.raises(ValueError, match="one per query"):
        mine_hard_negatives(np.eye(3), C, [set()], k=1)
    with pytest.raises(ValueError, match=r"expected shape \(N, 2\)"):
        mine_hard_negatives(np.ones((1, 2)), C, [set()], k=1)


@pytest.fixture
def hand(tmp_path):
    ids = ["d0", "d1", "d2", "d3", "d4", "d5", "q0"]
    C = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0.6, 0.8, 0], [0, 0.6, 0.8], [0.8, 0, 0.6], [2, 0, 0]])
    Q = np.array([[1, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0]])
    root = write_beir(
        tmp_path / "hand",
        [doc(i) for i in ids],
        [query(f"q{i}") for i in range(4)],
        {"train": [("q0", "d1", 1), ("q0", "d2", 1), ("q1", "d3", 0), ("q1", "d4", 2)], "test": [("q2", "d0", 1)]},
    )
    write_embeddings(tmp_path / "cache" / "hand" / "enc", C, ids, Q, [f"q{i}" for i in range(4)], {})
    return root, tmp_path / "cache"


def test_load_triples_by_hand(hand):
    root, cache = hand
    tr = load_triples(root, "enc", ["q0", "q1", "q2", "q3"], cache_dir=cache, k=2)
    assert tr.query_ids == ["q0", "q1", "q2"]
    assert tr.skipped == {"no_positive": 1}  # q3 has no qrels
    assert tr.pos_ids == ["d1", "d4", "d0"]  # q1: d3 has grade 0, so d4
    assert tr.neg_ids == ["q0", "d2", "d1"]  # q0's identically named doc scores 2
    assert tr.hard_negative_ids == [["q0", "d0"], ["d2", "d5"], ["d1", "d3"]]
    np.testing.assert_array_equal(tr.X, [[1, 0, 0], [0, 0, 1], [0, 1, 0]])
    np.testing.assert_array_equal(tr.Y_pos[0], [0, 1, 0])
    np.testing.assert_array_equal(tr.Y_neg[1], [0, 0, 1])
    assert tr.X.dtype == np.float32 and tr.hard_negatives().shape == (3, 2, 3)
    np.testing.assert_array_equal(tr.hard_negatives()[2, 1], np.float16([0.6, 0.8, 0]).astype(np.float32))
    sub = tr.subset(["q2", "q0"])
    assert sub.query_ids == ["q2", "q0"] and sub.neg_ids == ["d1", "q0"]


def test_ignore_identical_ids_and_min_grade(hand):
    root, cache = hand
    tr = load_triples(root, "enc", ["q0", "q1", "q2"], cache_dir=cache, k=2, ignore_identical_ids=True)
    assert tr.hard_negative_ids[0] == ["d0", "d5"]
    ds = load_beir(root, ignore_identical_ids=True)
    assert load_triples(ds, "enc", ["q0"], cache_dir=cache, k=2).neg_ids == ["d0"]
    high = load_triples(root, "enc", ["q0", "q1", "q2"], cache_dir=cache, k=2, min_grade=2)
    assert high.query_ids == ["q1"] and high.skipped == {"no_positive": 2}


def test_named_splits(hand):
    root, cache = hand
    # adaptation split of a train+test dataset: 2 train queries -> 80/20 rounds to 2/0
    assert sorted(load_triples(root, "enc", "train", cache_dir=cache, k=2).query_ids) == ["q0", "q1"]
    assert load_triples(root, "enc", "validation", cache_dir=cache, k=2).query_ids == []
    assert load_triples(root, "enc", "test", cache_dir=cache, k=2).query_ids == ["q2"]
    (root / "qrels" / "extra.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td4\t1\nq0\td1\t1\n")
    assert load_triples(root, "enc", "extra", cache_dir=cache, k=2).query_ids == ["q1", "q0"]  # a qrels file
    with pytest.raises(ValueError, match="split 'nope'"):
        load_triples(root, "enc", "nope", cache_dir=cache)


def test_cache_from_another_corpus_is_refused(hand, tmp_path):
    root, _ = hand
    write_embeddings(tmp_path / "other" / "hand" / "enc", np.eye(3), ["a", "b", "c"], np.eye(3)[:1], ["q0"], {})
    with pytest.raises(ValueError, match=r"corpus_ids.txt: 3 ids but .*corpus.jsonl has 7 documents; the cache is st"):
        load_triples(root, "enc", ["q0"], cache_dir=tmp_path / "other")


def test_scifact_triples_match_brute_force(shared_dir):
    data, cache = shared_dir / "data" / "scifact", shared_dir / "embeddings"
    tr = load_triples(data, "all-MiniLM-L6-v2", "train", cache_dir=cache)
    assert len(tr) == 647 and tr.X.shape == (647, 384) and tr.hard_negative_rows.shape == (647, 8)
    # independent reading of the qrels files and the cache
    labels: dict[str, list[str]] = {}
    for f in ("train.tsv", "test.tsv"):
        for line in (data / "qrels" / f).read_text().splitlines()[1:]:
            q, d, _s = line.split("\t")
            labels.setdefault(q, []).append(d)
    cids = (cache / "scifact" / "all-MiniLM-L6-v2" / "corpus_ids.txt").read_text().split()
    qids = (cache / "scifact" / "all-MiniLM-L6-v2" / "query_ids.txt").read_text().split()
    C = np.load(cache / "scifact" / "all-MiniLM-L6-v2" / "corpus.npy").astype(np.float64)
    Q = np.load(cache / "scifact" / "all-MiniLM-L6-v2" / "queries.npy").astype(np.float64)
    qrow = {q: i for i, q in enumerate(qids)}
    crow = {d: i for i, d in enumerate(cids)}
    S = Q[[qrow[q] for q in tr.query_ids]] @ C.T
    for i, q in enumerate(tr.query_ids):
        assert tr.pos_ids[i] == labels[q][0]
        S[i, [crow[d] for d in labels[q]]] = -np.inf
    top = np.argsort(-S, axis=1, kind="stable")[:, :8]
    # rankings agree except where float32 and float64 scores tie to rounding
    same = top == tr.hard_negative_rows
    gap = np.abs(np.take_along_axis(S, tr.hard_negative_rows, 1) - np.take_along_axis(S, top, 1))
    assert np.all(same | (gap < 1e-5))
    assert np.mean(tr.neg_rows == top[:, 0]) > 0.99
    for i, q in enumerate(tr.query_ids):
        assert not set(tr.hard_negative_ids[i]) & set(labels[q])
    np.testing.assert_array_equal(tr.Y_pos, C[[crow[d] for d in tr.pos_ids]].astype(np.float32))
    val = load_triples(data, "all-MiniLM-L6-v2", "validation", cache_dir=cache, cache=load_embeddings("scifact", "minilm", cache_dir=cache))
    test = load_triples(data, "all-MiniLM-L6-v2", "test", cache_dir=cache)
    assert (len(val), len(test)) == (162, 300)
    assert not set(val.query_ids) & set(tr.query_ids)
