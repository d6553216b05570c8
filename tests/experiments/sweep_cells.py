"""Cell functions for the runner tests (importable by forked pool workers and, via PYTHONPATH, Ray).

``flaky_cell`` fails for the x named in the environment variable ``ASYMGEO_TEST_FAIL_X``
(simulating a crash in one cell; the variable is outside the config, so the cell id is
unchanged when the "bug" is fixed) and raises ``KeyboardInterrupt`` for the x in
``ASYMGEO_TEST_INTERRUPT_X`` (simulating Ctrl-C).
"""

import os

import numpy as np

from asymgeo.experiments.runner import cell_seed


def toy_cell(config: dict) -> dict:
    """A tiny deterministic cell for the runner tests.

    Draws ``size`` normals from ``cell_seed(master_seed, x)`` and returns their mean
    and ``x**2``; raises ``RuntimeError`` when ``config["fail"]`` is true.
    """
    if config.get("fail", False):
        raise RuntimeError(f"toy_cell: asked to fail at x = {config.get('x')}")
    x = int(config["x"])
    seed = cell_seed(int(config.get("master_seed", 0)), x)
    draws = np.random.default_rng(seed).standard_normal(int(config.get("size", 10)))
    return {"seed": seed, "mean": float(draws.mean()), "square": x * x}


def flaky_cell(config: dict) -> dict:
    x = str(config["x"])
    if os.environ.get("ASYMGEO_TEST_FAIL_X") == x:
        raise RuntimeError(f"simulated crash at x = {x}")
    if os.environ.get("ASYMGEO_TEST_INTERRUPT_X") == x:
        raise KeyboardInterrupt
    return toy_cell(config)


def list_cell(config: dict) -> list:
    """A broken cell: returns a list, not a record."""
    return [int(config["x"])]
