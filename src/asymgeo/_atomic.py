"""Atomic file writes: a temporary file in the destination folder, then ``os.replace``.

A crash, an exception or Ctrl-C leaves either the old file or the new one, never a
half-written file under the final name; the temporary file is removed on failure.
Folders (saved adapters, exports, embedding caches, downloaded datasets) go through one
helper, :func:`replace_folder`: built beside the destination, swapped in by two renames
with rollback, given the mode of the folder they replace.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PLOT_SOFTWARE", "written_by_asymgeo", "check_plot_destination",
           "atomic_path", "atomic_write_text", "atomic_write_bytes", "replace_folder", "building_folder",
           "folder_mode", "check_writable_parent"]


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


# --------------------------------------------------------------------------- folders
def _umask_default_dir_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o777 & ~mask


def folder_mode(dest: str | os.PathLike) -> int:
    """The permission bits a folder written to ``dest`` should get: those of the folder it
    replaces, else the umask default (``mkdtemp`` alone would give 0700)."""
    dest = Path(dest)
    if dest.is_dir():
        return dest.stat().st_mode & 0o7777
    return _umask_default_dir_mode()


def replace_folder(new: str | os.PathLike, dest: str | os.PathLike, *, mode: int | None = None) -> Path:
    """Put the complete folder ``new`` at ``dest``, with rollback.

    Two renames on one file system: an existing ``dest`` moves to a hidden
    ``.<name>.old-<pid>`` beside it, then ``new`` moves to ``dest``; the old folder is deleted
    only after that.  Any exception between or during the renames (Ctrl-C included) moves the
    old folder back, so ``dest`` always holds either the old folder or the new one.  ``new``
    gets ``mode`` (default :func:`folder_mode` of ``dest``) before it is moved in.
    """
    new, dest = Path(new), Path(dest)
    os.chmod(new, folder_mode(dest) if mode is None else mode)
    old: Path | None = None
    try:
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            if old.exists():
                shutil.rmtree(old)
            os.replace(dest, old)
        os.replace(new, dest)
    except BaseException:
        if old is not None and old.exists() and not dest.exists():
            os.replace(old, dest)  # put the previous folder back
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return dest


@contextlib.contextmanager
def building_folder(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty hidden folder beside ``dest`` to build in; on success it replaces
    ``dest`` by :func:`replace_folder`; on any exception it is deleted and ``dest`` is untouched."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        yield tmp
        replace_folder(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def check_writable_parent(dest: str | os.PathLike, what: str) -> None:
    """Refuse, before any work, a ``dest`` whose nearest existing ancestor cannot be written."""
    dest = Path(dest)
    probe = dest.parent if not dest.exists() else dest
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    target = probe if probe != dest else dest.parent
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(f"{what}: {dest}: {target} is a file, not a folder; nothing was written")
    if not os.access(target, os.W_OK | os.X_OK):
        raise PermissionError(f"{what}: {dest}: cannot write in {target} (permission denied); nothing was written")


#: The ``Software`` text chunk asymgeo's figures carry (``savefig(metadata={"Software": ...})``): how a
#: later ``--plot`` knows the file at its path is one asymgeo drew, and may be replaced.
PLOT_SOFTWARE = "asymgeo (matplotlib)"


def written_by_asymgeo(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a PNG whose ``tEXt`` chunk ``Software`` is :data:`PLOT_SOFTWARE`.

    Reads the chunks before the image data only (PNG: an 8-byte signature, then
    ``length, type, data, crc`` chunks; text chunks precede ``IDAT`` when matplotlib writes them).
    """
    try:
        with open(path, "rb") as fh:
            if fh.read(8) != b"\x89PNG\r\n\x1a\n":
                return False
            for _ in range(64):
                head = fh.read(8)
                if len(head) < 8:
                    return False
                length, kind = int.from_bytes(head[:4], "big"), head[4:]
                if kind in (b"IDAT", b"IEND") or length > 1 << 20:
                    return False
                data = fh.read(length)
                fh.read(4)  # crc
                if kind == b"tEXt" and data.partition(b"\0")[0] == b"Software":
                    return data.partition(b"\0")[2].decode("latin-1") == PLOT_SOFTWARE
    except OSError:
        return False
    return False


def check_plot_destination(dest: str | os.PathLike | None, what: str, *, overwrite: bool = False,
                           nothing: str = "nothing was computed") -> None:
    """Refuse, before any work, a ``--plot`` destination that cannot take asymgeo's figure.

    ``None``: no plot asked.  Refused: an empty path (an unset shell variable), a name not ending
    in ``.png``, an existing folder, a parent that is a file or cannot be written, and an existing
    file asymgeo did not draw (:func:`written_by_asymgeo`) unless ``overwrite``.
    """
    if dest is None:
        return
    text = os.fspath(dest)
    if not text.strip():
        raise ValueError(f"{what}: empty file name (an unset variable?); {nothing}")
    path = Path(text)
    if path.is_dir():
        raise IsADirectoryError(f"{what}: {path} is a folder; name a .png file in it; {nothing}")
    if not text.lower().endswith(".png"):
        raise ValueError(f"{what}: {path}: expected a .png file name; {nothing}")
    check_writable_parent(path, what)
    if path.exists() and not overwrite and not written_by_asymgeo(path):
        raise FileExistsError(f"{what}: {path} exists and was not drawn by asymgeo; pass --overwrite to replace it, "
                              f"or name another file; {nothing}")
