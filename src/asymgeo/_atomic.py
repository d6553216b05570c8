"""Atomic file writes: a temporary file in the destination folder, then ``os.replace``.

A crash, an exception or Ctrl-C leaves either the old file or the new one, never a
half-written file under the final name; the temporary file is removed on failure.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "atomic_write_text", "atomic_write_bytes"]


def _fsync_file(path: str) -> None:
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike, suffix: str = ".tmp", *, fsync: bool = True) -> Iterator[Path]:
    """Yield a temporary path next to ``dest``; on success it replaces ``dest`` atomically.

    The caller writes the whole file to the yielded path (by any library: numpy,
    pandas, plain ``open``).  On any exception the temporary file is deleted and the
    exception propagates; ``dest`` is untouched.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=suffix, dir=dest.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        if fsync:
            _fsync_file(tmp)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(dest: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``dest`` atomically."""
    with atomic_path(dest) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(dest: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``dest`` atomically."""
    with atomic_path(dest) as tmp:
        tmp.write_text(text, encoding="utf-8")
