"""Run one ``asymgeo`` command in this process and report its peak memory and where it peaked.

Usage::

    python tools/peak_memory.py fit DATASET --encoder ENC --cache-dir DIR ...

A thread samples ``/proc/self/status`` every 0.1 s: the peak of ``RssAnon`` (anonymous memory:
what the command allocates, apart from the memory-mapped cache's file pages) with the main
thread's stack at that moment, and ``VmHWM`` (the resident peak, file pages included: the
figure the scale benchmarks set against the cache's size + 1.5 GiB).  Linux only.
"""

from __future__ import annotations

import re
import sys
import threading
import time
import traceback


def _status(field: str) -> int:
    with open("/proc/self/status") as fh:
        m = re.search(rf"{field}:\s+(\d+)\s+kB", fh.read())
    return int(m.group(1)) * 1024 if m else 0


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print("usage: python tools/peak_memory.py COMMAND [ARGS ...]  (an asymgeo command, e.g. fit DATASET ...)",
              file=sys.stderr)
        return 2
    main_id = threading.main_thread().ident
    peak: list = [0, ""]

    def sample() -> None:
        while True:
            a = _status("RssAnon")
            if a > peak[0]:
                frame = sys._current_frames().get(main_id)
                peak[0], peak[1] = a, "".join(traceback.format_stack(frame)[-6:]) if frame else ""
            time.sleep(0.1)

    threading.Thread(target=sample, daemon=True).start()
    from asymgeo.cli import main as cli

    try:
        rc = cli(argv)
    except SystemExit as exc:  # argparse's usage errors: its one line is the report
        rc = exc.code if isinstance(exc.code, int) else 1
        if rc == 2:
            return 2
    gib = 1 << 30
    print(f"peak anonymous memory {peak[0] / gib:.2f} GiB; resident peak (VmHWM) {_status('VmHWM') / gib:.2f} GiB; "
          f"exit {rc}", file=sys.stderr)
    print("where the anonymous peak was:\n" + peak[1], file=sys.stderr)
    return int(rc or 0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
