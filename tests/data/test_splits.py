"""Splits, folds and nested subsets: hand counts and an independent re-implementation."""

from __future__ import annotations

import numpy as np
import pytest
from beir_fixtures import doc, query, write_beir

from asymgeo.data import (
    adaptation_split,
    fold_seed,
    fold_split,
    load_beir,
    nested_subsets,
    query_folds,
    split_queries,
    split_sizes,
)


@pytest.mark.parametrize(
    "n, fractions, expected",
    [
        (3452, (0.6, 0.2, 0.2), [2071, 691, 690]),  # NQ, Appendix F
        (1406, (0.6, 0.2, 0.2), [844, 281, 281]),  # ArguAna, Appendix F
        (2906, (0.6, 0.2, 0.2), [1744, 581, 581]),  # CQA-TeX, Appendix F
        (809, (0.8, 0.2), [647, 162]),  # SciFact train -> train/validation
        (10, (0.5, 0.5), [5, 5]),
        (7, (1 / 3, 1 / 3, 1 / 3), [3, 2, 2]),
    ],
)
def test_split_sizes_match_the_papers_counts(n, fractions, expected):
    assert split_sizes(n, fractions) == expected


def test_split_sizes_refuses_fractions_not_summing_to_one():
    with pytest.raises(ValueError, match="sum to 1"):
        split_sizes(10, (0.5, 0.4))


def test_split_queries_is_a_seeded_permutation_of_sorted_ids():
    ids = [f"q{i}" for i in range(50)]
    parts = split_queries(ids[::-1], (0.6, 0.2, 0.2), seed=7)
    # independent: sort, permute with default_rng(7), cut 30/10/10
    srt = sorted(ids)
    perm = [srt[i] for i in np.random.default_rng(7).permutation(50)]
    assert parts == [perm[:30], perm[30:40], perm[40:]]
    assert split_queries(ids, (0.6, 0.2, 0.2), seed=7) == parts  # input order is irrelevant
    assert split_queries(ids, (0.6, 0.2, 0.2), seed=8) != parts


def test_split_queries_rejects_duplicates():
    with pytest.raises(ValueError, match="duplicate id 'a'"):
        split_queries(["a", "b", "a"], (0.5, 0.5), seed=0)


def test_query_folds_protocol():
    ids = [str(i) for i in range(23)]
    folds = query_folds(ids, n_folds=5, seed=20260923)
    srt = sorted(ids)
    perm = [srt[i] for i in np.random.default_rng(20260923).permutation(23)]
    assert [len(f) for f in folds] == [5, 5, 5, 4, 4]
    assert folds == [perm[0:5], perm[5:10], perm[10:15], perm[15:19], perm[19:23]]
    assert query_folds(list(reversed(ids))) == folds  # default seed is the paper's
    pool, held = fold_split(folds, 2)
    assert held == folds[2] and sorted(pool + held) == srt and not set(pool) & set(held)


def test_query_folds_errors():
    with pytest.raises(ValueError, match="n_folds"):
        query_folds(["a", "b"], n_folds=1)
    with pytest.raises(ValueError, match="at least n_folds"):
        query_folds(["a", "b"], n_folds=5)


def test_nested_subsets_are_prefixes_with_full_pool():
    ids = [f"x{i:03d}" for i in range(100)]
    sub = nested_subsets(ids, sizes=(32, 64, 128), seed=fold_seed(3))
    assert fold_seed(3) == 20260927
    srt = sorted(ids)
    perm = [srt[i] for i in np.random.default_rng(20260927).permutation(100)]
    assert list(sub) == [32, 64, 100]  # 128 unavailable; the full pool (100 <= 128) added
    assert sub[32] == perm[:32] and sub[64] == perm[:64] and sub[100] == perm
    big = nested_subsets(ids, sizes=(32, 64), seed=1)
    assert list(big) == [32, 64]  # the pool (100) exceeds max(sizes): not added
    assert list(nested_subsets(ids, sizes=(32,), seed=1, include_full=False)) == [32]


# --------------------------------------------------------------------------- adaptation splits
def _labelled_folder(tmp_path, splits):
    docs = [doc(f"d{i}") for i in range(5)]
    qs = [query(f"q{i}") for i in range(40)]
    return write_beir(tmp_path / "ds", docs, qs, splits)


def test_adaptation_split_official_three_way(tmp_path):
    root = _labelled_folder(
        tmp_path,
        {
            "train": [(f"q{i}", "d0", 1) for i in range(10)],
            "dev": [(f"q{i}", "d1", 1) for i in range(10, 14)],
            "test": [(f"q{i}", "d2", 1) for i in range(14, 20)],
        },
    )
    sp = adaptation_split(load_beir(root), seed=1)
    assert sp == {
        "train": [f"q{i}" for i in range(10)],
        "validation": [f"q{i}" for i in range(10, 14)],
        "test": [f"q{i}" for i in range(14, 20)],
    }


def test_adaptation_split_test_only_is_60_20_20(tmp_path):
    root = _labelled_folder(tmp_path, {"test": [(f"q{i}", "d0", 1) for i in range(40)] + [("q99", "d0", 1)]})
    sp = adaptation_split(load_beir(root), seed=3)
    assert [len(sp[k]) for k in ("train", "validation", "test")] == [24, 8, 8]
    assert sorted(sp["train"] + sp["validation"] + sp["test"]) == sorted(f"q{i}" for i in range(40))
    # the parts themselves, not only their sizes (validation and test are both 8 long, so sizes
    # cannot tell them apart): the sorted labelled ids, numpy's permutation with the seed asked
    # for, cut 24 / 8 / 8
    srt = sorted(f"q{i}" for i in range(40))
    for seed in (3, 4):
        perm = [srt[i] for i in np.random.default_rng(seed).permutation(40)]
        assert adaptation_split(load_beir(root), seed=seed) == {
            "train": perm[:24], "validation": perm[24:32], "test": perm[32:]}, seed
    default = [srt[i] for i in np.random.default_rng(20260809).permutation(40)]
    assert adaptation_split(load_beir(root))["validation"] == default[24:32]


def test_scifact_adaptation_split(shared_dir):
    ds = load_beir(shared_dir / "data" / "scifact")
    sp = adaptation_split(ds)
    assert [len(sp[k]) for k in ("train", "validation", "test")] == [647, 162, 300]
    train_qrels = {line.split("\t")[0] for line in (ds.path / "qrels" / "train.tsv").read_text().splitlines()[1:]}
    test_qrels = {line.split("\t")[0] for line in (ds.path / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    assert set(sp["train"]) | set(sp["validation"]) == train_qrels
    assert not set(sp["train"]) & set(sp["validation"])
    assert set(sp["test"]) == test_qrels
    assert adaptation_split(ds) == sp  # deterministic
    assert adaptation_split(ds, seed=1)["train"] != sp["train"]


@pytest.mark.parametrize("call, exc, message", [
    (lambda: split_sizes(10, ()), ValueError, "fractions: expected at least one fraction"),
    (lambda: split_sizes(10, (1.5, -0.5)), ValueError, r"fractions: must be non-negative, got \[1.5, -0.5\]"),
    (lambda: fold_split([["a"], ["b"]], 2), ValueError, "fold: expected 0 <= fold < 2, got 2"),
    (lambda: fold_split([["a"], ["b"]], -1), ValueError, "fold: expected 0 <= fold < 2, got -1"),
    (lambda: nested_subsets(["a", "b"], sizes=[0]), ValueError, r"sizes: expected positive integers, got \[0\]"),
    (lambda: nested_subsets(["a", "b"], sizes=[True]), ValueError, "sizes: expected positive integers"),
    (lambda: split_queries("abc", (0.5, 0.5), 0), TypeError, "expected a sequence of ids, got a single string"),
])
def test_fold_helpers_refuse_bad_arguments(call, exc, message):
    with pytest.raises(exc, match=message):
        call()


def test_fold_split_by_hand():
    assert fold_split([["a", "b"], ["c"], ["d"]], 1) == (["a", "b", "d"], ["c"])
