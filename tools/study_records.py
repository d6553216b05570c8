"""Reading the JSON-lines record files the study tools write (``memory_guard_study``, ``refit_study``)."""

from __future__ import annotations

import json
from collections.abc import Sequence


def read_jsonl_records(path: str, need: Sequence[str], what: str = "study record") -> list[dict]:
    """The records of one file, one JSON object per line (blank lines skipped); ``ValueError``
    naming the file and line of a file that cannot be read, a damaged line, or a record missing
    one of ``need`` (``"<path>:<line>: not a <what> (missing ...)"``).  An empty list when the
    file holds no record: the caller says so."""
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the study file ({exc.strerror or exc})") from None
    recs = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{i}: not a JSON record ({exc.msg}, column {exc.colno})") from None
        missing = [k for k in need if not isinstance(rec, dict) or k not in rec]
        if missing:
            raise ValueError(f"{path}:{i}: not a {what} (missing {', '.join(missing)})")
        recs.append(rec)
    return recs
