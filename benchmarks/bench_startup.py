"""Start-up time: ``import asymgeo`` and ``asymgeo --version`` / ``--help`` against numpy + scipy.linalg.

Each command runs in a fresh interpreter (``subprocess``), best of N, with this source
tree first on the path; the reference ``python -c "import numpy, scipy.linalg"`` is
measured in the same run, interleaved with the others so that load on the machine hits
all of them alike.  Goals (issue #8): ``import asymgeo`` within 0.15 s of the
reference, ``--version`` and ``--help`` under 0.3 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")

COMMANDS = {
    "python -c 'import numpy, scipy.linalg' (reference)": ["-c", "import numpy, scipy.linalg"],
    "python -c 'import asymgeo'": ["-c", "import asymgeo"],
    "asymgeo --version": ["-m", "asymgeo", "--version"],
    "asymgeo --help": ["-m", "asymgeo", "--help"],
    "python -c 'import asymgeo; asymgeo.GeometrySelector' (kernels + estimators)":
        ["-c", "import asymgeo; asymgeo.GeometrySelector"],
}


def _time_once(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def run(quick: bool = False) -> str:
    repeats = 3 if quick else 15
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))}
    best = {name: float("inf") for name in COMMANDS}
    for _ in range(repeats):  # interleaved: every command sees the same machine load
        for name, args in COMMANDS.items():
            best[name] = min(best[name], _time_once(args, env))
    ref = best[next(iter(COMMANDS))]
    lines = [
        "## Start-up time",
        "",
        f"Fresh interpreter per run, best of {repeats} (interleaved); the reference is "
        "`python -c \"import numpy, scipy.linalg\"` measured in the same run.",
        "",
        "| command | best (s) | ratio to reference | minus reference (s) |",
        "|---|---|---|---|",
    ]
    for name, t in best.items():
        lines.append(f"| `{name}` | {t:.3f} | {t / ref:.2f}x | {t - ref:+.3f} |")
    lines += [
        "",
        "Goals (issue #8): `import asymgeo` within 0.15 s of the reference; `--version` and `--help` "
        "under 0.3 s. Public names are imported on first use (PEP 562), `scipy.stats` inside the "
        "functions that need it, and the CLI imports a subcommand's modules inside the command.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
