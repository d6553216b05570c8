"""Argument checks shared by the kernels and estimators.

Every check raises :class:`ValueError` (or :class:`TypeError`) whose message names
the argument, the expected shape or range and what was received, so a user never
sees a bare traceback from deep inside numpy.
"""

from __future__ import annotations

import numbers
import os
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

__all__ = [
    "as_float_matrix",
    "check_int",
    "check_rank",
    "check_same_shape",
    "check_square",
    "check_seed",
    "check_positive",
    "check_triples_informative",
    "finite_checked",
    "mark_finite",
]


def as_float_matrix(
    value: Any,
    name: str,
    *,
    dtype: Any = np.float64,
    ndim: int = 2,
    allow_empty: bool = False,
    check_finite: bool = True,
) -> np.ndarray:
    """Return ``value`` as a floating array of ``ndim`` dimensions, or raise.

    float16/float32 inputs are converted to ``dtype`` (float64 by default) so that
    every accumulation downstream happens in double precision.
    """
    try:
        arr = np.asarray(value)
    except Exception as exc:  # pragma: no cover - exotic inputs
        raise TypeError(f"{name}: could not convert to an array ({exc})") from exc
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or arr.dtype == bool
    ):
        raise TypeError(f"{name}: expected a numeric array, got dtype {arr.dtype}")
    if np.iscomplexobj(arr):
        raise TypeError(f"{name}: complex values are not supported")
    if arr.ndim != ndim:
        shape_word = {1: "(n,)", 2: "(n, p)", 3: "(m, n, p)"}.get(ndim, f"{ndim}-d")
        raise ValueError(
            f"{name}: expected a {ndim}-d array of shape {shape_word}, got shape {arr.shape}"
        )
    if not allow_empty and arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty array, got shape {arr.shape}")
    if dtype is not None:
        arr = arr.astype(dtype, copy=False)
    if check_finite and arr.size and not np.isfinite(arr).all():
        bad = np.argwhere(~np.isfinite(arr))[0]
        where = ", ".join(str(int(i)) for i in bad)
        raise ValueError(
            f"{name}: contains NaN or infinite values (first at index [{where}])"
        )
    return arr


def check_square(M: np.ndarray, name: str) -> None:
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(f"{name}: expected a square (p, p) matrix, got shape {M.shape}")


def check_same_shape(arrays: dict[str, np.ndarray]) -> None:
    """Raise unless all arrays have the same shape, naming the first mismatch."""
    items = list(arrays.items())
    ref_name, ref = items[0]
    for name, arr in items[1:]:
        if arr.shape != ref.shape:
            raise ValueError(
                f"{name}: shape {arr.shape} does not match {ref_name} shape {ref.shape}"
            )


def _int_range_words(min_value: int | None, max_value: int | None, max_label: str | None) -> str:
    if max_value is not None:
        return f"an integer in [{min_value}, {max_label or max_value}]"
    if min_value == 1:
        return "a positive integer"
    if min_value == 0:
        return "a non-negative integer"
    if min_value is None:
        return "an integer"
    return f"an integer >= {min_value}"


def check_int(
    value: Any,
    name: str,
    *,
    min_value: int | None = 1,
    max_value: int | None = None,
    max_label: str | None = None,
    type_error: bool = False,
    note: str = "",
) -> int:
    """Return ``value`` as a Python int in ``[min_value, max_value]``, or raise.

    Accepts Python and numpy integers, never ``bool`` (``True`` is not a count) and
    never floats (``2.0`` is refused, not rounded).  The message names the argument:
    ``"k: expected a positive integer, got 0"``.

    Parameters
    ----------
    value : the candidate.
    name : the argument's name, first word of the message.
    min_value, max_value : inclusive bounds (None: unbounded).
    max_label : how the message writes the upper bound (``"p=8"``).
    type_error : raise :class:`TypeError` (``"expected an integer, got float 2.0"``)
        instead of :class:`ValueError` when ``value`` is not an integer at all.
    note : appended to the expected range in the message (``" (number of ...)"``).

    Raises
    ------
    ValueError
        Out of range, or not an integer (unless ``type_error``).
    TypeError
        Not an integer, with ``type_error=True``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if type_error:
            raise TypeError(f"{name}: expected an integer, got {type(value).__name__} {value!r}")
        raise ValueError(f"{name}: expected {_int_range_words(min_value, max_value, max_label)}{note}, got {value!r}")
    out = int(value)
    if (min_value is not None and out < min_value) or (max_value is not None and out > max_value):
        raise ValueError(f"{name}: expected {_int_range_words(min_value, max_value, max_label)}{note}, got {value!r}")
    return out


def check_rank(rank: Any, p: int, name: str = "rank") -> int:
    """Return ``rank`` as an int in ``[1, p]`` or raise."""
    rank = check_int(rank, name, min_value=None, type_error=True)
    if rank < 1 or rank > p:
        raise ValueError(f"{name}: expected 1 <= {name} <= p = {p}, got {rank}")
    return rank


def check_positive(value: Any, name: str, *, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}: expected a number, got {value!r}") from exc
    if not np.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: expected a finite number {bound}, got {value!r}")
    return v


def check_seed(seed: Any, name: str = "seed") -> np.random.Generator:
    """Turn ``seed`` (int, SeedSequence or Generator) into a Generator; ``None`` is refused.

    Refusing ``None`` keeps every random choice reproducible.
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.SeedSequence):
        return np.random.default_rng(seed)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(
            f"{name}: expected an int seed or numpy.random.Generator, got {seed!r}"
        )
    if int(seed) < 0:
        raise ValueError(f"{name}: expected a non-negative int, got {seed}")
    return np.random.default_rng(int(seed))


def check_triples_informative(X: np.ndarray, D: np.ndarray) -> None:
    """Refuse degenerate training data that would silently give a zero moment.

    ``X`` (n, p) queries and ``D = Y_pos - Y_neg`` (n, p).  Raises when every query row
    is the same vector (zero variance, n >= 2), when X is all zeros, or when the
    positive equals the negative in every triple.
    """
    if not np.any(X):
        raise ValueError("X: every query vector is zero; the relevance moment would be zero")
    if X.shape[0] >= 2 and not np.any(X != X[0]):
        raise ValueError("X: zero variance, every query row is identical")
    if not np.any(D):
        raise ValueError(
            "Y_pos, Y_neg: zero variance in Y_pos - Y_neg, the positive equals the negative in every triple"
        )


# --------------------------------------------------------------------------- checked read-only files
#: (file, offset, shape, dtype, size, mtime_ns, inode) of read-only memory maps whose every value
#: was checked finite in this process; bounded, most recent last.
_FINITE_FILES: OrderedDict[tuple, None] = OrderedDict()
_FINITE_LOCK = threading.Lock()
_FINITE_MAX = 16


def _file_key(arr: Any) -> tuple | None:
    """Identity of a read-only memory-mapped array's bytes, or None when ``arr`` could change.

    Only a ``np.memmap`` opened read-only (``mode='r'``, as ``np.load(mmap_mode='r')`` and the
    embedding caches open it) that maps a whole file region qualifies; a writable array, an
    in-memory copy or a view of a writable buffer never does (it could be changed in place).
    The key includes the file's size, modification time and inode, so a file rewritten (or
    replaced by an atomic rename) since the check is checked again.
    """
    if not isinstance(arr, np.memmap) or getattr(arr, "mode", None) != "r" or arr.flags.writeable:
        return None
    name = getattr(arr, "filename", None)
    if not name:
        return None
    try:
        st = os.stat(name)
    except OSError:
        return None
    return (os.path.realpath(name), int(getattr(arr, "offset", 0)), tuple(arr.shape), arr.dtype.str,
            tuple(arr.strides), st.st_size, st.st_mtime_ns, st.st_ino)


def finite_checked(arr: Any) -> bool:
    """True when ``arr`` is a read-only memory map whose values were all checked finite in this
    process (:func:`mark_finite`) and whose file has not changed since: the check need not run
    again (``fit --geometry auto`` fits three candidates on one corpus; at millions of rows
    each scan costs seconds, issue #21)."""
    key = _file_key(arr)
    if key is None:
        return False
    with _FINITE_LOCK:
        if key in _FINITE_FILES:
            _FINITE_FILES.move_to_end(key)
            return True
    return False


def mark_finite(arr: Any) -> None:
    """Record that every value of ``arr`` was just checked finite (only read-only memory maps
    are recorded; anything else is ignored)."""
    key = _file_key(arr)
    if key is None:
        return
    with _FINITE_LOCK:
        _FINITE_FILES[key] = None
        _FINITE_FILES.move_to_end(key)
        while len(_FINITE_FILES) > _FINITE_MAX:
            _FINITE_FILES.popitem(last=False)
