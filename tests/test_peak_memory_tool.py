"""tools/peak_memory.py: the peak-memory probe behind docs/scaling.md's memory figures."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_peak_memory_reports_both_peaks_and_where(shared_dir):
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "peak_memory.py"), "select", "scifact", "--encoder",
                          "all-MiniLM-L6-v2", "--data-dir", str(shared_dir / "data"), "--cache-dir",
                          str(shared_dir / "embeddings"), "--rank", "4"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    m = re.search(r"peak anonymous memory ([\d.]+) GiB; resident peak \(VmHWM\) ([\d.]+) GiB; exit 0", out.stderr)
    assert m, out.stderr
    anon, hwm = float(m.group(1)), float(m.group(2))
    assert 0 < anon <= hwm  # anonymous pages are part of the resident set
    assert "where the anonymous peak was:" in out.stderr and "asymgeo" in out.stderr.split("peak was:")[1]
    assert "decision:" in out.stdout  # the command itself ran and printed its report


def test_peak_memory_without_a_command_or_with_a_wrong_one_says_so_in_one_line():
    tool = [sys.executable, str(ROOT / "tools" / "peak_memory.py")]
    out = subprocess.run(tool, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.startswith("usage: python tools/peak_memory.py COMMAND")
    out = subprocess.run([*tool, "nosuchcommand"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.splitlines()[-1].startswith("asymgeo: error: argument COMMAND")
    assert "peak anonymous memory" not in out.stderr  # a usage error is not a measurement
