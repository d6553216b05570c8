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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

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
    "split_overlap",
    "SplitOverlap",
    "TEXT_DUPLICATE_LIMIT",
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
    file order for official parts.  Official parts are taken as the files give them, even when
    they share queries (a ``train.tsv`` that copies ``test.tsv``): :func:`split_overlap` counts
    that, and :func:`asymgeo.adapters.fit_adapter` refuses to train on it.
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


#: Queries of a scored part (validation, test) whose text is a training query's under another id
#: are refused beyond this share of the scored part, and named below it.  The shared datasets
#: repeat a few short texts across their official files (SciFact 2 of 300 test queries,
#: NFCorpus at most 4 of 324, titles such as 'EPIC Study'): not a copy of one split into another.
TEXT_DUPLICATE_LIMIT = 0.05

#: (part that trains or selects, part that is scored), in the order they are reported
_OVERLAP_PAIRS = (("train", "test"), ("train", "validation"), ("validation", "test"))
_PART_WORDS = {"train": "training", "validation": "validation", "test": "test"}


def _normal_text(text: str) -> str:
    return " ".join(str(text).split()).casefold()


@dataclass(frozen=True)
class SplitOverlap:
    """What :func:`split_overlap` found: one record per pair of parts, the problems in words.

    ``pairs``: per (``part``, ``scored``) pair: their sizes ``n_part`` / ``n_scored``,
    ``shared_ids`` (ids in both) with ``first_shared``, and ``same_text`` (scored queries
    whose text is a ``part`` query's under another id) with ``first_same_text``
    (``[scored_id, part_id]``).  ``messages``: one line per non-zero count; ``refused``: any
    shared id, or identical texts beyond :data:`TEXT_DUPLICATE_LIMIT` of a scored part;
    ``refusals``: the messages that make it refused; ``warnings``: the others (identical
    texts within the limit), each saying why it is kept.
    """

    pairs: list[dict[str, Any]]
    messages: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        return bool(self.refusals)

    @property
    def n_shared(self) -> int:
        """Scored queries that are also training or validation queries (each counted once)."""
        return len({q for p in self.pairs for q in p["_shared"]})

    @property
    def n_same_text(self) -> int:
        return sum(int(p["same_text"]) for p in self.pairs)

    def as_dict(self) -> dict[str, Any]:
        return {"pairs": [{k: v for k, v in p.items() if not k.startswith("_")} for p in self.pairs],
                "messages": list(self.messages), "refused": self.refused,
                "text_duplicate_limit": TEXT_DUPLICATE_LIMIT}


def split_overlap(queries: Mapping[str, str], parts: Mapping[str, Sequence[str]]) -> SplitOverlap:
    """Queries shared by the parts of an adaptation split (``train``, ``validation``, ``test``).

    For training vs test, training vs validation and validation vs test: the ids in both
    (a split built from a qrels file that repeats another, e.g. ``train.tsv`` a copy of
    ``test.tsv``), and the scored queries whose text (case and spacing aside) is the text of
    a query of the other part under another id.  ``queries``: id -> text
    (:attr:`BeirDataset.queries`); parts missing from ``parts`` are skipped.  The caller
    decides: :func:`asymgeo.adapters.fit_adapter` refuses :attr:`SplitOverlap.refused`.
    """
    pairs: list[dict[str, Any]] = []
    messages: list[str] = []
    refusals: list[str] = []
    kept: list[str] = []
    for part, scored in _OVERLAP_PAIRS:
        if part not in parts or scored not in parts:
            continue
        a, b = list(parts[part]), list(parts[scored])
        in_a = set(a)
        shared = [q for q in b if q in in_a]
        in_both = set(shared)
        first_shared = next((q for q in a if q in in_both), None)
        by_text: dict[str, str] = {}
        for q in a:
            by_text.setdefault(_normal_text(queries.get(q, "")), q)
        same = [(q, by_text[t]) for q in b if q not in in_a
                and (t := _normal_text(queries.get(q, ""))) and t in by_text and by_text[t] != q]
        pw, sw = _PART_WORDS[part], _PART_WORDS[scored]
        pairs.append({"part": part, "scored": scored, "n_part": len(a), "n_scored": len(b),
                      "shared_ids": len(shared), "first_shared": first_shared, "same_text": len(same),
                      "first_same_text": list(same[0]) if same else None, "_shared": shared})
        if shared:
            msg = f"{len(shared):,} of the {len(a):,} {pw} queries are {sw} queries (first: {first_shared!r})"
            messages.append(msg)
            refusals.append(msg)
        if same:
            q, other = same[0]
            verb = "has" if len(same) == 1 else "have"
            msg = (f"{len(same):,} of the {len(b):,} {sw} queries {verb} the text of a {pw} query under another id "
                   f"(first: {str(queries.get(q, ''))[:80]!r} as {sw} {q!r} and {pw} {other!r})")
            messages.append(msg)
            if len(same) > TEXT_DUPLICATE_LIMIT * len(b):
                refusals.append(msg)
            else:
                kept.append(f"{msg}; kept: identical texts are refused beyond {TEXT_DUPLICATE_LIMIT:.0%} "
                            f"of the {sw} queries")
    return SplitOverlap(pairs, messages, refusals, kept)


def adaptation_split_source(dataset: str | BeirDataset, seed: int = DEFAULT_SPLIT_SEED, *,
                            data_dir: str | None = None) -> dict[str, object]:
    """Where :func:`adaptation_split` takes each part from, as a JSON-ready record.

    ``kind`` is ``"official"`` (train, dev and test qrels), ``"validation_from_train"``
    (validation carved from ``qrels/train.tsv``, test official) or ``"carved_from_test"``
    (no train qrels: all three parts carved out of ``qrels/test.tsv``, so the test *split*
    of the dataset contains the training and validation queries); ``description`` says it
    in one line, with the part sizes and the seed; ``overlap`` is :func:`split_overlap` of
    the parts (:meth:`SplitOverlap.as_dict`): queries in two parts, by id or by text.
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
    return {"kind": kind, "description": text, "seed": int(seed), "dataset": ds.name, "sizes": sizes,
            "overlap": split_overlap(ds.queries, parts).as_dict()}
