"""asymgeo.retrieval.compare: the paired bootstrap interval against SciPy's own bootstrap, and
every refusal (issue #19).  (The t-test is checked against scipy.stats.ttest_rel in test_metrics.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from asymgeo.retrieval.compare import paired_comparison


def test_percentile_interval_agrees_with_scipy_bootstrap():
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 1, 300)
    b = np.clip(a - 0.03 + 0.2 * rng.standard_normal(300), 0, 1)
    res = paired_comparison(a, b, n_boot=20_000, seed=1)
    ref = stats.bootstrap((a - b,), np.mean, n_resamples=20_000, method="percentile", confidence_level=0.95,
                          random_state=np.random.default_rng(2)).confidence_interval
    # two independent Monte Carlo estimates of the same quantiles: within a few 1e-3 of each other
    assert res.ci_low == pytest.approx(ref.low, abs=3e-3) and res.ci_high == pytest.approx(ref.high, abs=3e-3)
    assert res.as_dict() == {**res.__dict__}
    assert res.n == 300 and res.n_boot == 20_000 and res.confidence == 0.95


@pytest.mark.parametrize("a, b, exc, message", [
    ({"q": 1.0, "r": 0.0}, [1.0, 0.0], TypeError, r"a, b: pass both as dicts \{qid: value\} or both as arrays"),
    ([[1.0, 2.0]], [[1.0, 2.0]], ValueError, r"a: expected per-query values of shape \(n,\), got \(1, 2\)"),
    ([1.0], [0.0], ValueError, "a: need at least 2 paired queries, got 1"),
])
def test_bad_inputs_are_refused_naming_them(a, b, exc, message):
    with pytest.raises(exc, match=message):
        paired_comparison(a, b, n_boot=10)


@pytest.mark.parametrize("kw, message", [
    (dict(confidence=1.0), r"confidence: expected a number in \(0, 1\), got 1.0"),
    (dict(confidence=0), r"confidence: expected a number in \(0, 1\), got 0"),
    (dict(n_boot=0), "n_boot: expected a positive integer, got 0"),
    (dict(n_boot=2.5), "n_boot: expected a positive integer, got 2.5"),
    (dict(n_boot=True), "n_boot: expected a positive integer, got True"),
])
def test_bad_settings_are_refused(kw, message):
    with pytest.raises(ValueError, match=message):
        paired_comparison([1.0, 0.0, 0.5], [0.0, 0.0, 0.5], **kw)
