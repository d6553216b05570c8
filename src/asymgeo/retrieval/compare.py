"""Paired comparison of two runs scored on the same queries (e.g. Shared vs Dual).

The difference is ``a - b`` per query.  Reported: the two means, the mean
difference, the paired t-test (two-sided; identical to ``scipy.stats.ttest_rel``)
and a percentile bootstrap confidence interval for the mean difference, resampling
queries with replacement.

Degenerate case: when every per-query difference is the same value ``c`` the
t statistic is undefined (zero variance); we report ``t = 0, p = 1`` when ``c == 0``
and ``t = ±inf, p = 0`` otherwise.  (scipy returns NaN for both.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import check_seed

__all__ = ["PairedComparison", "paired_comparison"]


@dataclass(frozen=True)
class PairedComparison:
    """Outcome of :func:`paired_comparison`: the paired mean difference ``a - b``, its t-test and bootstrap CI."""

    n: int
    mean_a: float
    mean_b: float
    mean_diff: float
    t_statistic: float
    p_value: float
    ci_low: float
    ci_high: float
    confidence: float
    n_boot: int

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


def _align(a: Any, b: Any, names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        if not (isinstance(a, Mapping) and isinstance(b, Mapping)):
            raise TypeError(f"{names[0]}, {names[1]}: pass both as dicts {{qid: value}} or both as arrays")
        only_a = [q for q in a if q not in b]
        only_b = [q for q in b if q not in a]
        if only_a or only_b:
            which, q = (names[0], only_a[0]) if only_a else (names[1], only_b[0])
            raise ValueError(
                f"{which}: query {q!r} is not scored in the other run "
                f"({len(only_a)} only in {names[0]}, {len(only_b)} only in {names[1]})"
            )
        keys = list(a)
        a = [a[q] for q in keys]
        b = [b[q] for q in keys]
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    for arr, nm in ((x, names[0]), (y, names[1])):
        if arr.ndim != 1:
            raise ValueError(f"{nm}: expected per-query values of shape (n,), got {arr.shape}")
        if arr.size < 2:
            raise ValueError(f"{nm}: need at least 2 paired queries, got {arr.size}")
        if not np.isfinite(arr).all():
            first = int(np.flatnonzero(~np.isfinite(arr))[0])
            raise ValueError(f"{nm}: contains NaN or infinite values (first at {first})")
    if x.shape != y.shape:
        raise ValueError(f"{names[1]}: {y.size} queries, but {names[0]} has {x.size}")
    return x, y


def paired_comparison(
    a: Any,
    b: Any,
    *,
    n_boot: int = 10_000,
    confidence: float = 0.95,
    seed: Any = 0,
) -> PairedComparison:
    """Compare per-query scores ``a`` and ``b`` (arrays of equal length, or dicts
    ``{qid: value}`` with the same keys, e.g. ``EvalResult.per_query['ndcg@10']``).

    Returns
    -------
    PairedComparison
        ``mean_diff = mean(a - b)``, two-sided paired t-test, and a percentile
        bootstrap ``confidence`` interval of ``mean_diff`` from ``n_boot`` resamples
        drawn with ``seed``.
    """
    from scipy import stats

    x, y = _align(a, b, ("a", "b"))
    if not (0 < confidence < 1):
        raise ValueError(f"confidence: expected a number in (0, 1), got {confidence!r}")
    if isinstance(n_boot, bool) or int(n_boot) != n_boot or n_boot < 1:
        raise ValueError(f"n_boot: expected a positive integer, got {n_boot!r}")
    rng = check_seed(seed)
    d = x - y
    n = d.size
    mean = float(d.mean())
    sd = float(d.std(ddof=1))
    if sd == 0.0 or not np.isfinite(sd) or np.all(d == d[0]):
        t, p = (0.0, 1.0) if mean == 0 else (float(np.copysign(np.inf, mean)), 0.0)
    else:
        t = mean / (sd / np.sqrt(n))
        p = float(2.0 * stats.t.sf(abs(t), df=n - 1))
    n_boot = int(n_boot)
    boots = np.empty(n_boot)
    chunk = max(1, (1 << 22) // n)
    for s in range(0, n_boot, chunk):
        m = min(chunk, n_boot - s)
        idx = rng.integers(0, n, size=(m, n))
        boots[s : s + m] = d[idx].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boots, [alpha, 1.0 - alpha])
    return PairedComparison(
        n=n,
        mean_a=float(x.mean()),
        mean_b=float(y.mean()),
        mean_diff=mean,
        t_statistic=float(t),
        p_value=p,
        ci_low=float(lo),
        ci_high=float(hi),
        confidence=float(confidence),
        n_boot=n_boot,
    )
