"""Compact id lists: millions of document ids without a Python object per id (issue #21).

A BEIR corpus of N documents has N string ids.  As a Python ``list[str]`` plus a
``dict[str, int]`` for lookups they cost about 190 bytes per id (measured: 123 MB per
million ids for the cache's list and index), which at MS MARCO's 8.84M documents alone
exceeds the 1.5 GiB that issue #21 allows beyond the memory-mapped embeddings.
:class:`IdIndex` keeps the ids as UTF-8 bytes in one fixed-width numpy array (``S{w}``,
``w`` the longest id's length) and their sort permutation, about ``w + 8`` bytes per id;
lookups are vectorised binary searches.  It is a read-only ``Sequence[str]``: indexing,
iteration, ``len``, ``in`` and ``==`` with a list behave as on the list of ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np

__all__ = ["IdIndex"]

# bytes that str.strip() removes (ASCII); an id made only of these (or of non-ASCII bytes,
# checked by decoding) is "empty"
_ASCII_SPACE = np.zeros(256, dtype=bool)
_ASCII_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True


class IdIndex(Sequence[str]):
    """Unique string ids in row order, stored compactly, with fast row lookups.

    Parameters
    ----------
    ids : the ids in row order (any iterable of str), or an ``S`` numpy array of their UTF-8 bytes.
    what : what the ids name ("corpus", "query"): used in error messages.
    source : the file they came from, named in error messages.

    Raises
    ------
    ValueError
        An empty (or whitespace-only) id, an id with a NUL character, or a repeated id,
        naming ``source`` and the line(s) (row + 1).
    """

    def __init__(self, ids: Iterable[str] | np.ndarray, *, what: str = "id", source: str | Path | None = None):
        self.what = what
        self.source = None if source is None else str(source)
        if isinstance(ids, np.ndarray) and ids.dtype.kind == "S":
            arr = ids.reshape(-1)
        else:
            enc = [str(s).encode("utf-8") for s in ids]
            arr = np.array(enc, dtype=bytes) if enc else np.zeros(0, dtype="S1")
            if any(b"\x00" in b for b in enc):
                row = next(i for i, b in enumerate(enc) if b"\x00" in b)
                raise ValueError(f"{self._where(row)}: {what} id {enc[row]!r} contains a NUL character")
            lengths = np.fromiter((len(b) for b in enc), dtype=np.int64, count=len(enc))
            self._check_blank(arr, lengths)
        self._index(arr)

    def _index(self, arr: np.ndarray) -> None:
        """Keep ``arr`` and its stable sort order; refuse a repeated id."""
        self._arr = arr
        self._order = np.argsort(arr, kind="stable")
        self._sorted = arr[self._order]
        if arr.size > 1:
            same = self._sorted[1:] == self._sorted[:-1]
            if same.any():
                self._raise_duplicate(same)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_file(cls, path: str | Path, *, what: str = "id") -> IdIndex:
        """Read one id per line (UTF-8, newline-separated, an optional final newline) without
        making a Python string per id."""
        path = Path(path)
        data = np.fromfile(path, dtype=np.uint8)
        if data.size and data[-1] == 10:
            data = data[:-1]
        if data.size == 0:
            return cls(np.zeros(0, dtype="S1"), what=what, source=path)
        nl = np.flatnonzero(data == 10)
        starts = np.concatenate([[0], nl + 1])
        ends = np.concatenate([nl, [data.size]])
        lengths = ends - starts
        if np.any(data == 0):
            row = int(np.searchsorted(ends, int(np.flatnonzero(data == 0)[0]), side="left"))
            raise ValueError(f"{path}, line {row + 1}: {what} id contains a NUL character")
        try:  # refuse bytes that are not UTF-8 now, not when an id is first read
            data.tobytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            row = int(np.searchsorted(ends, exc.start, side="left"))
            raise ValueError(f"{path}, line {row + 1}: {what} id is not valid UTF-8 ({exc.reason})") from None
        width = max(int(lengths.max()), 1)
        grid = np.zeros((lengths.size, width), dtype=np.uint8)
        for j in range(width):  # column by column: w vectorised passes, no Python object per id
            rows = np.flatnonzero(lengths > j)
            if rows.size == 0:
                break
            grid[rows, j] = data[starts[rows] + j]
        arr = grid.view(f"S{width}").reshape(-1)
        out = cls.__new__(cls)
        out.what, out.source = what, str(path)
        out._check_blank(arr, lengths, grid)
        out._index(arr)
        return out

    def _where(self, row: int) -> str:
        return f"{self.source}, line {row + 1}" if self.source else f"{self.what} ids, row {row}"

    def _check_blank(self, arr: np.ndarray, lengths: np.ndarray, grid: np.ndarray | None = None) -> None:
        """Refuse empty ids and ids that ``str.strip()`` empties (as the list reader did)."""
        if arr.size == 0:
            return
        empty = np.flatnonzero(lengths == 0)
        if grid is None:
            width = arr.dtype.itemsize
            grid = arr.view(np.uint8).reshape(arr.size, width) if width else np.zeros((arr.size, 0), np.uint8)
        inside = np.arange(grid.shape[1])[None, :] < lengths[:, None]
        maybe = ((_ASCII_SPACE[grid] | (grid >= 0x80)) | ~inside).all(axis=1) & (lengths > 0)
        blank = [int(i) for i in np.flatnonzero(maybe) if not bytes(arr[i]).decode("utf-8", "replace").strip()]
        bad = sorted(set(empty.tolist()) | set(blank))
        if bad:
            raise ValueError(f"{self._where(bad[0])}: empty id")

    def _raise_duplicate(self, same: np.ndarray) -> None:
        # the first repeat in row order, and the row of its first occurrence
        later = self._order[1:][same]
        b = int(later.min())
        k = int(np.flatnonzero(self._order == b)[0])
        while k > 0 and self._sorted[k - 1] == self._sorted[k]:
            k -= 1
        a = int(self._order[k])
        text = bytes(self._arr[b]).decode("utf-8", "replace")
        where = f"{self.source}: " if self.source else ""
        raise ValueError(f"{where}duplicate {self.what} id {text!r} on lines {a + 1} and {b + 1}")

    # ------------------------------------------------------------------ Sequence
    def __len__(self) -> int:
        return int(self._arr.size)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, (int, np.integer)):
            return bytes(self._arr[int(i)]).decode("utf-8")
        if isinstance(i, slice):
            return [bytes(b).decode("utf-8") for b in self._arr[i]]
        return self.take(i)

    def take(self, rows: Any) -> list[str]:
        """The ids of the given rows, as a list of str."""
        return [bytes(b).decode("utf-8") for b in self._arr[np.asarray(rows, dtype=np.int64).reshape(-1)]]

    def __iter__(self) -> Iterator[str]:
        for start in range(0, self._arr.size, 65536):
            yield from (bytes(b).decode("utf-8") for b in self._arr[start : start + 65536])

    def __contains__(self, value: object) -> bool:
        return isinstance(value, str) and bool(self.lookup([value])[0] >= 0)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IdIndex):
            return len(self) == len(other) and bool(np.array_equal(self._arr, other._arr))
        if isinstance(other, (list, tuple)):
            if len(other) != len(self):
                return False
            for start in range(0, len(other), 65536):  # in blocks: no second full copy
                blk = [str(s).encode("utf-8") for s in other[start : start + 65536]]
                if not np.array_equal(np.array(blk, dtype=bytes) if blk else np.zeros(0, "S1"),
                                      self._arr[start : start + 65536]):
                    return False
            return True
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        head = ", ".join(repr(s) for s in self[:3])
        return f"IdIndex([{head}{', ...' if len(self) > 3 else ''}], n={len(self)})"

    def tolist(self) -> list[str]:
        return list(self)

    @property
    def nbytes(self) -> int:
        """Bytes held: the id array, its sorted copy and the permutation."""
        return int(self._arr.nbytes + self._sorted.nbytes + self._order.nbytes)

    # ------------------------------------------------------------------ lookups
    def lookup(self, ids: Iterable[str]) -> np.ndarray:
        """Row of each id (int64), ``-1`` for an id not present."""
        enc = [str(s).encode("utf-8") for s in ids]
        if not enc or self._arr.size == 0:
            return np.full(len(enc), -1, dtype=np.int64)
        want = np.array(enc, dtype=bytes)
        pos = np.searchsorted(self._sorted, want)
        pos = np.minimum(pos, self._sorted.size - 1)
        # an id longer than the stored width cannot be present (numpy would compare its prefix)
        fits = np.fromiter((len(b) <= self._arr.dtype.itemsize and b"\x00" not in b for b in enc),
                           dtype=bool, count=len(enc))
        hit = (self._sorted[pos] == want) & fits
        return np.where(hit, self._order[pos], -1).astype(np.int64)

    def rows(self, ids: Iterable[str]) -> np.ndarray:
        """Row of each id; ``KeyError`` naming the first id not present."""
        ids = list(ids)
        out = self.lookup(ids)
        if out.size and out.min() < 0:
            missing = ids[int(np.flatnonzero(out < 0)[0])]
            where = f"{self.source}: " if self.source else ""
            raise KeyError(f"{where}no {self.what} with id {missing!r}")
        return out

    def sort_rank(self) -> np.ndarray:
        """``rank[row]``: the position of each row's id in ascending UTF-8 byte order (which is
        Python's str order: code point order)."""
        rank = np.empty(self._arr.size, dtype=np.int64)
        rank[self._order] = np.arange(self._arr.size)
        return rank
