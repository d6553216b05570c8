"""Fixtures for the data-layer tests: hand-written BEIR folders built in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest
from beir_fixtures import doc, query, write_beir


@pytest.fixture
def tiny_beir(tmp_path) -> Path:
    """Four documents, three queries, train and test qrels, no faults."""
    return write_beir(
        tmp_path / "tiny",
        [doc("d1", "Title one", "alpha"), doc("d2", "", "beta"), doc("d3", "Three", "gamma"), doc("d4", "", "delta")],
        [query("q1", "first"), query("q2", "second"), query("q3", "third")],
        {"train": [("q1", "d1", 1), ("q1", "d3", 1), ("q2", "d2", 1)], "test": [("q3", "d4", 1)]},
    )
