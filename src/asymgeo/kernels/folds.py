"""Deterministic query splits, five-fold query folds and nested sample-size subsets (pure, on id lists).

Every function sorts the ids first (plain string order) and then permutes them with
``numpy.random.default_rng(seed).permutation``, so the result depends only on the set of
ids and the seed, never on input order.  No files: the dataset-aware
:func:`asymgeo.data.adaptation_split` builds on these.

* :func:`split_queries`: consecutive parts of a seeded permutation (largest-remainder sizes).
* :func:`query_folds`: the Table 1 protocol, ids sorted, permuted with seed 20260923,
  cut into balanced folds.
* :func:`nested_subsets`: prefixes of one permutation (fold-specific seed
  ``20260924 + fold``, see :func:`fold_seed`) of sizes 32, 64, ..., 4096 when available,
  plus the full pool when it has at most 4096 queries.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from .._validation import check_int, check_seed

__all__ = [
    "FOLD_SEED",
    "NESTED_SIZES",
    "split_sizes",
    "split_queries",
    "query_folds",
    "fold_seed",
    "fold_split",
    "nested_subsets",
]

#: Seed of the five held-out folds (Appendix F, "Five-fold geometry selection").
FOLD_SEED = 20260923
#: Nested training sizes of the RQ4 protocol.
NESTED_SIZES = (32, 64, 128, 256, 512, 1024, 2048, 4096)


def _unique_sorted(ids: Sequence[str], name: str = "ids") -> list[str]:
    if isinstance(ids, str):
        raise TypeError(f"{name}: expected a sequence of ids, got a single string")
    ids = [str(i) for i in ids]
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        for dup in ids:
            if dup in seen:
                raise ValueError(f"{name}: duplicate id {dup!r}")
            seen.add(dup)
    return sorted(ids)


def _permuted(ids: Sequence[str], seed: int | np.random.Generator, name: str = "ids") -> list[str]:
    srt = _unique_sorted(ids, name)
    perm = check_seed(seed).permutation(len(srt))
    return [srt[i] for i in perm]


def split_sizes(n: int, fractions: Sequence[float | Fraction]) -> list[int]:
    """Integer part sizes summing to ``n`` by the largest-remainder rule.

    Fractions are read exactly (``Fraction(str(f))``), floors are taken, and the leftover
    units go to the parts with the largest remainders, earlier parts first on ties.
    ``split_sizes(3452, (0.6, 0.2, 0.2)) == [2071, 691, 690]``.
    """
    if not fractions:
        raise ValueError("fractions: expected at least one fraction")
    fr = [Fraction(str(f)) for f in fractions]
    if any(f < 0 for f in fr):
        raise ValueError(f"fractions: must be non-negative, got {list(fractions)}")
    total = sum(fr, Fraction(0))
    if abs(total - 1) > Fraction(1, 10**9):
        raise ValueError(f"fractions: must sum to 1, got {list(fractions)} (sum {float(total)})")
    fr = [f / total for f in fr]  # absorbs float round-off such as 3 * (1/3) != 1
    exact = [n * f for f in fr]
    sizes = [int(e) for e in exact]  # floor (non-negative)
    left = n - sum(sizes)
    order = sorted(range(len(fr)), key=lambda j: (-(exact[j] - sizes[j]), j))
    for j in order[:left]:
        sizes[j] += 1
    return sizes


def split_queries(
    ids: Sequence[str], fractions: Sequence[float | Fraction], seed: int | np.random.Generator
) -> list[list[str]]:
    """Split ids into consecutive parts of a seeded permutation of the sorted ids.

    Sizes come from :func:`split_sizes`; each part keeps permutation order.
    """
    perm = _permuted(ids, seed)
    out, start = [], 0
    for s in split_sizes(len(perm), fractions):
        out.append(perm[start : start + s])
        start += s
    return out


def query_folds(ids: Sequence[str], n_folds: int = 5, seed: int | np.random.Generator = FOLD_SEED) -> list[list[str]]:
    """Balanced held-out folds: ids sorted, permuted with ``seed``, cut into ``n_folds`` parts.

    Fold sizes differ by at most one (the first ``n % n_folds`` folds get the extra id);
    each fold keeps permutation order.
    """
    n_folds = check_int(n_folds, "n_folds", min_value=2)
    perm = _permuted(ids, seed)
    if len(perm) < n_folds:
        raise ValueError(f"ids: need at least n_folds = {n_folds} ids, got {len(perm)}")
    q, r = divmod(len(perm), int(n_folds))
    out, start = [], 0
    for f in range(int(n_folds)):
        size = q + (1 if f < r else 0)
        out.append(perm[start : start + size])
        start += size
    return out


def fold_seed(fold: int, base: int = FOLD_SEED + 1) -> int:
    """Seed of fold ``fold``'s nested-subset permutation: ``20260924 + fold`` (Appendix F)."""
    return int(base) + int(fold)


def fold_split(folds: Sequence[Sequence[str]], fold: int) -> tuple[list[str], list[str]]:
    """``(training pool, held-out)`` for one fold: the other folds concatenated, and the fold."""
    if not 0 <= fold < len(folds):
        raise ValueError(f"fold: expected 0 <= fold < {len(folds)}, got {fold}")
    pool = [i for f, ids in enumerate(folds) if f != fold for i in ids]
    return pool, list(folds[fold])


def nested_subsets(
    ids: Sequence[str],
    sizes: Sequence[int] = NESTED_SIZES,
    seed: int | np.random.Generator = FOLD_SEED + 1,
    *,
    include_full: bool = True,
    max_full: int | None = None,
) -> dict[int, list[str]]:
    """Nested training subsets: prefixes of one seeded permutation of the sorted ids.

    Returns ``{size: ids}`` for every requested size not exceeding the pool, plus (when
    ``include_full``) the full pool if it has at most ``max_full`` ids (default
    ``max(sizes)``), as in the paper's "plus the full remaining pool when it has at most
    4096 queries".  Smaller subsets are prefixes of larger ones.
    """
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 1:
            raise ValueError(f"sizes: expected positive integers, got {list(sizes)}")
    perm = _permuted(ids, seed)
    n = len(perm)
    wanted = sorted({int(s) for s in sizes if s <= n})
    cap = max(sizes) if max_full is None and len(sizes) else (max_full if max_full is not None else n)
    if include_full and n and n <= cap and n not in wanted:
        wanted.append(n)
    return {s: perm[:s] for s in wanted}
