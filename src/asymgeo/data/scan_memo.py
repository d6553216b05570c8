"""A corpus scan remembered per file version, so that commands stop re-reading ``corpus.jsonl`` (issue #40).

Every command that opens a BEIR folder parses ``corpus.jsonl`` once to list its ids and to
compute the digest an embedding cache is checked against
(:meth:`asymgeo.data.BeirDataset.fingerprint`): 35 s per million documents here, 2 to 5
minutes per command at MS MARCO's 8.8M.  The result depends only on the file's bytes, so it
is kept in a small ``.npz`` (the ids as one fixed-width byte array, the digest, the count of
blank lines) keyed by the file's *version*: its resolved path, size, modification time and
inode, the key the finiteness scan of memory-mapped arrays uses
(:func:`asymgeo._validation.finite_checked`).

Two rules keep a remembered scan from ever standing in for other bytes:

* the key is read before and after the scan, and a scan whose file changed meanwhile is not
  kept;
* like git's "racily clean" entries, a scan is kept only when the file's modification time is
  at least :data:`SETTLE_SECONDS` older than the start of the scan: a later edit gets a later
  modification time even on filesystems with coarse timestamps, so it cannot share the key.

Only clean scans are kept (no repeated ids, no empty documents: those produce warnings that
must be shown again on every read).  The memo lives in ``$ASYMGEO_SCAN_DIR``, else
``~/.cache/asymgeo/scans``; when it cannot be written nothing is kept and nothing fails.
"""

from __future__ import annotations

import hashlib
import logging
import os
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["ScanKey", "scan_key", "scan_dir", "load_scan", "save_scan", "SCAN_PATHS", "SETTLE_SECONDS",
           "SCAN_FORMAT"]

log = logging.getLogger(__name__)

#: how often a corpus scan was read from the memo (``"memo"``) or parsed (``"parsed"``)
SCAN_PATHS: Counter[str] = Counter()
#: a file modified less than this many seconds before its scan started is not remembered
SETTLE_SECONDS = 2.0
#: format of the memo files (a change makes old files unread, never misread)
SCAN_FORMAT = 1


@dataclass(frozen=True)
class ScanKey:
    """A file version: resolved path, size, modification time (ns) and inode."""

    path: str
    size: int
    mtime_ns: int
    inode: int

    def digest(self) -> str:
        return hashlib.sha256(f"{SCAN_FORMAT}\0{self.path}\0{self.size}\0{self.mtime_ns}\0{self.inode}".encode())\
            .hexdigest()[:32]


def scan_key(path: str | os.PathLike) -> ScanKey:
    """The current version of the file at ``path`` (``os.stat``; raises ``OSError`` when absent)."""
    st = os.stat(path)
    return ScanKey(os.path.realpath(path), int(st.st_size), int(st.st_mtime_ns), int(st.st_ino))


def scan_dir() -> Path:
    """``$ASYMGEO_SCAN_DIR``, else ``~/.cache/asymgeo/scans``."""
    env = os.environ.get("ASYMGEO_SCAN_DIR")
    return Path(env) if env else Path.home() / ".cache" / "asymgeo" / "scans"


def _file(key: ScanKey) -> Path:
    return scan_dir() / f"corpus-{key.digest()}.npz"


def load_scan(path: str | os.PathLike) -> tuple[np.ndarray, str, int] | None:
    """``(ids, digest, blank_lines)`` remembered for the file's current version, or None.

    ``ids`` is an ``S`` array of the UTF-8 ids in file order.  A memo whose recorded key
    differs from the file's (another version, a hash collision) or that cannot be read is
    ignored.
    """
    try:
        key = scan_key(path)
        f = _file(key)
        if not f.is_file():
            return None
        with np.load(f, allow_pickle=False) as z:
            recorded = ScanKey(str(z["path"]), int(z["size"]), int(z["mtime_ns"]), int(z["inode"]))
            if recorded != key or int(z["format"]) != SCAN_FORMAT:
                return None
            ids = np.array(z["ids"])
            if ids.dtype.kind != "S" or ids.ndim != 1:
                return None
            return ids, str(z["digest"]), int(z["blank_lines"])
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:  # a damaged memo is only a miss
        log.debug("scan memo for %s not used: %s", path, exc)
        return None


def save_scan(path: str | os.PathLike, before: ScanKey, started: float, ids: np.ndarray, digest: str,
              blank_lines: int) -> bool:
    """Remember a clean scan of ``path`` that started at ``started`` (``time.time()``) with the
    file at version ``before``.  Returns whether it was kept (module docstring: not when the
    file changed during the scan, was modified within :data:`SETTLE_SECONDS` of its start,
    or the memo folder cannot be written)."""
    from .._atomic import atomic_path

    try:
        if scan_key(path) != before or before.mtime_ns / 1e9 > started - SETTLE_SECONDS:
            return False
        with atomic_path(_file(before), suffix=".npz") as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, ids=np.asarray(ids), digest=np.array(digest), blank_lines=np.array(int(blank_lines)),
                         path=np.array(before.path), size=np.array(before.size),
                         mtime_ns=np.array(before.mtime_ns), inode=np.array(before.inode),
                         format=np.array(SCAN_FORMAT))
        return True
    except OSError as exc:
        log.debug("scan memo for %s not written: %s", path, exc)
        return False
