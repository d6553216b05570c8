"""Deterministic query splits, five-fold query folds and nested sample-size subsets.

Every function sorts the ids first (plain string order) and then permutes them with
``numpy.random.default_rng(seed).permutation``, so the result depends only on the set of
ids and the seed, never on input order.

* :func:`adaptation_split` follows Appendix F: official splits when a dataset has
  train, dev and test qrels (FEVER, MS MARCO, HotpotQA); SciFact's official train queries
  split 80/20 into train and validation (809 -> 647/162) with test from ``qrels/test.tsv``;
  datasets with test qrels only (NQ, ArguAna, CQADupStack) split 60/20/20
  (NQ 3,452 -> 2,071/691/690; ArguAna 1,406 -> 844/281/281).
* :func:`query_folds`: the Table 1 protocol, ids sorted, permuted with seed 20260923,
  cut into balanced folds.
* :func:`nested_subsets`: prefixes of one permutation (fold-specific seed
  ``20260924 + fold``, see :func:`fold_seed`) of sizes 32, 64, ..., 4096 when available,
  plus the full pool when it has at most 4096 queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from ..kernels.folds import (
    FOLD_SEED,
    NESTED_SIZES,
    fold_seed,
    fold_split,
    nested_subsets,
    query_folds,
    split_queries,
    split_sizes,
)
from .beir import BeirDataset, load_beir

__all__ = [
    "DEFAULT_SPLIT_SEED",
    "FOLD_SEED",
    "NESTED_SIZES",
    "split_sizes",
    "split_queries",
    "adaptation_split",
    "adaptation_split_source",
    "query_folds",
    "fold_seed",
    "fold_split",
    "nested_subsets",
]

#: Seed of :func:`adaptation_split` (the paper does not state one; this is the paper's
#: master simulation seed, reused so the choice is documented and fixed).
DEFAULT_SPLIT_SEED = 20260809


def adaptation_split(
    dataset: str | BeirDataset,
    seed: int = DEFAULT_SPLIT_SEED,
    *,
    data_dir: str | None = None,
    validation_fraction: float = 0.2,
    test_only_fractions: Sequence[float] = (0.6, 0.2, 0.2),
) -> dict[str, list[str]]:
    """Train / validation / test query ids as the paper's adaptation experiments use them.

    * train, dev and test qrels present: the official splits (FEVER, MS MARCO, HotpotQA);
    * train and test (no dev): train split ``1 - validation_fraction`` / ``validation_fraction``
      by :func:`split_queries` with ``seed``; test official (SciFact: 647/162/300);
    * otherwise the test qrels' queries split by ``test_only_fractions``
      (NQ: 2,071/691/690; ArguAna: 844/281/281).

    A split contains labelled queries (see :meth:`BeirDataset.labelled_query_ids`);
    queries whose only qrels name missing documents stay in (ArguAna's test keeps 281
    queries, 280 evaluable).  Returned lists are in permutation order for split parts and
    file order for official parts.
    """
    ds = load_beir(dataset, data_dir=data_dir)
    splits = ds.splits
    if {"train", "dev", "test"} <= set(splits):
        return {
            "train": ds.labelled_query_ids("train"),
            "validation": ds.labelled_query_ids("dev"),
            "test": ds.labelled_query_ids("test"),
        }
    if "train" in splits and "test" in splits:
        vf = Fraction(str(validation_fraction))
        if not 0 < vf < 1:
            raise ValueError(f"validation_fraction: expected a number in (0, 1), got {validation_fraction!r}")
        tr, va = split_queries(ds.labelled_query_ids("train"), (1 - vf, vf), seed)
        return {"train": tr, "validation": va, "test": ds.labelled_query_ids("test")}
    if "test" in splits:
        tr, va, te = split_queries(ds.labelled_query_ids("test"), test_only_fractions, seed)
        return {"train": tr, "validation": va, "test": te}
    raise ValueError(f"{ds.path / 'qrels'}: no test.tsv, cannot build an adaptation split (splits: {splits})")


def adaptation_split_source(dataset: str | BeirDataset, seed: int = DEFAULT_SPLIT_SEED, *,
                            data_dir: str | None = None) -> dict[str, object]:
    """Where :func:`adaptation_split` takes each part from, as a JSON-ready record.

    ``kind`` is ``"official"`` (train, dev and test qrels), ``"validation_from_train"``
    (validation carved from ``qrels/train.tsv``, test official) or ``"carved_from_test"``
    (no train qrels: all three parts carved out of ``qrels/test.tsv``, so the test *split*
    of the dataset contains the training and validation queries); ``description`` says it
    in one line, with the part sizes and the seed.
    """
    ds = load_beir(dataset, data_dir=data_dir)
    parts = adaptation_split(ds, seed)
    sizes = {k: len(v) for k, v in parts.items()}
    splits = set(ds.splits)
    n = f"{sizes['train']:,}/{sizes['validation']:,}/{sizes['test']:,} train/validation/test queries"
    if {"train", "dev", "test"} <= splits:
        kind, text = "official", f"official qrels/train.tsv, dev.tsv and test.tsv ({n})"
    elif {"train", "test"} <= splits:
        kind, text = ("validation_from_train",
                      f"validation carved from qrels/train.tsv (seed {seed}), test from qrels/test.tsv ({n})")
    else:
        kind, text = ("carved_from_test",
                      f"no qrels/train.tsv: train, validation and test carved 60/20/20 from qrels/test.tsv "
                      f"(seed {seed}; {n})")
    return {"kind": kind, "description": text, "seed": int(seed), "dataset": ds.name, "sizes": sizes}
