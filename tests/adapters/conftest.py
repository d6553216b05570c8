"""Fixtures for the adapter tests."""

from __future__ import annotations

import pytest
from adapter_fixtures import Problem, make_problem


@pytest.fixture(scope="module")
def problem() -> Problem:
    return make_problem()
