"""Shared test configuration for the asymgeo suite."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

# Make the independent reference implementations importable as ``reference_impl``
# (the CARS benchmark imports the same module).
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh, fixed-seed generator per test."""
    return np.random.default_rng(12345)

