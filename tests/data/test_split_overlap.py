"""Issue #39 (round 3): queries shared by the training split and a scored split.

:func:`asymgeo.data.splits.split_overlap` counts, for training vs test, training vs
validation and validation vs test, the query ids in both and the queries whose text is
identical (case and spacing aside) under another id; ids in both are refused, identical
texts only beyond :data:`TEXT_DUPLICATE_LIMIT` of the scored part."""

from __future__ import annotations

from asymgeo.data import adaptation_split, adaptation_split_source, load_beir
from asymgeo.data.splits import TEXT_DUPLICATE_LIMIT, split_overlap


def test_split_overlap_counts_ids_and_texts_by_hand():
    queries = {f"q{i}": f"text {i}" for i in range(20)}
    queries["t0"] = "TEXT  1"  # q1's text, other case and spacing, under another id
    parts = {"train": ["q0", "q1", "q2", "q3"], "validation": ["q4", "q5"],
             "test": ["q2", "q3", "q6", "t0", "q7", "q8", "q9", "q10", "q11", "q12"]}
    ov = split_overlap(queries, parts)
    assert ov.refused and ov.n_shared == 2
    assert ov.messages[0] == "2 of the 4 training queries are test queries (first: 'q2')"
    assert ov.messages[1] == ("1 of the 10 test queries has the text of a training query under another id "
                              "(first: 'TEXT  1' as test 't0' and training 'q1')")
    assert len(ov.messages) == 2
    rec = ov.as_dict()
    assert rec["refused"] is True and rec["pairs"][0] == {
        "part": "train", "scored": "test", "n_part": 4, "n_scored": 10, "shared_ids": 2, "first_shared": "q2",
        "same_text": 1, "first_same_text": ["t0", "q1"]}


def test_identical_texts_alone_are_refused_only_beyond_the_limit():
    queries = {f"q{i}": f"text {i}" for i in range(100)}
    queries.update({f"t{i}": f"text {i}" for i in range(100)})
    test = [f"q{i}" for i in range(50, 100)]
    few = split_overlap(queries, {"train": ["t50", "q1", "q2"], "validation": ["q3"], "test": test})
    assert not few.refused and few.n_shared == 0 and few.n_same_text == 1
    assert 1 / 50 <= TEXT_DUPLICATE_LIMIT == 0.05
    many = split_overlap(queries, {"train": [f"t{i}" for i in range(50, 60)], "validation": ["q3"], "test": test})
    assert many.refused and many.messages == [
        "10 of the 50 test queries have the text of a training query under another id "
        "(first: 'text 50' as test 'q50' and training 't50')"]
    clean = split_overlap(queries, {"train": ["q1"], "validation": ["q2"], "test": test})
    assert not clean.refused and clean.messages == []


def test_the_shared_datasets_share_no_ids_and_a_few_texts(shared_dir):
    """SciFact and NFCorpus have no query in two splits; a handful of texts recur under other
    ids (SciFact: 2 of its 300 test queries; NFCorpus: a few short titles such as 'EPIC Study'):
    named, not refused."""
    want = {"scifact": {("train", "test"): 2, ("train", "validation"): 0, ("validation", "test"): 0},
            "nfcorpus": {("train", "test"): 4, ("train", "validation"): 4, ("validation", "test"): 1}}
    for name, counts in want.items():
        ds = load_beir(name, data_dir=shared_dir / "data")
        ov = split_overlap(ds.queries, adaptation_split(ds))
        assert not ov.refused and ov.n_shared == 0, name
        assert {(p["part"], p["scored"]): p["same_text"] for p in ov.as_dict()["pairs"]} == counts, name
        src = adaptation_split_source(ds)
        assert src["overlap"] == ov.as_dict()
