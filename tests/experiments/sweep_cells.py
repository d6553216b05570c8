"""Cell functions for the runner tests (importable by forked pool workers).

``flaky_cell`` fails for the x named in the environment variable ``ASYMGEO_TEST_FAIL_X``
(simulating a crash in one cell; the variable is outside the config, so the cell id is
unchanged when the "bug" is fixed) and raises ``KeyboardInterrupt`` for the x in
``ASYMGEO_TEST_INTERRUPT_X`` (simulating Ctrl-C).
"""

import os

from asymgeo.experiments.runner import toy_cell


def flaky_cell(config: dict) -> dict:
    x = str(config["x"])
    if os.environ.get("ASYMGEO_TEST_FAIL_X") == x:
        raise RuntimeError(f"simulated crash at x = {x}")
    if os.environ.get("ASYMGEO_TEST_INTERRUPT_X") == x:
        raise KeyboardInterrupt
    return toy_cell(config)
