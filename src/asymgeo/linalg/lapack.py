"""The few LAPACK/BLAS routines on CARS' hot path, called without holding the GIL.

The wrappers of ``scipy.linalg.lapack`` / ``scipy.linalg.blas`` do not run two calls at
once (two threads of ``ssytrd`` take about as long as the same calls one after the other:
``python benchmarks/run.py --only lapack``), so threads over CARS' half-splits ran their tridiagonal
reductions, subset eigensolvers and Cholesky factorisations one at a time.  The same
Fortran routines are exported by SciPy's documented Cython API
(``scipy.linalg.cython_lapack`` / ``cython_blas``, LP64 ``int``); calling those function
pointers through :mod:`ctypes` releases the GIL for the duration of the call and takes no
lock (two threads scale as numpy's own products already do; same benchmark).

Each function here takes and returns numpy arrays (Fortran order where LAPACK writes in
place) and raises :class:`numpy.linalg.LinAlgError` on a LAPACK error code.  When the
Cython API cannot be read (an unusual SciPy build) :func:`available` is False and each
function calls the f2py wrapper instead (same answer, GIL held).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

__all__ = ["available", "ssytrd", "sormtr", "ssyr2k_lower", "dsyevr_top", "dpstrf", "dtrmm", "dstebz_index", "dstein"]

_int = ctypes.c_int
_ptr = ctypes.c_void_p


@functools.cache
def _routine(module: str, name: str, nargs: int) -> Any:
    """A ctypes function (GIL released while it runs) for ``scipy.linalg.<module>.<name>``."""
    import importlib

    capsule = importlib.import_module(f"scipy.linalg.{module}").__pyx_capi__[name]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    address = get_pointer(capsule, get_name(capsule))
    return ctypes.CFUNCTYPE(None, *([_ptr] * nargs))(address)


@functools.cache
def available() -> bool:
    """Whether SciPy's Cython LAPACK/BLAS API can be called here."""
    try:
        for module, name, nargs in _SIGNATURES:
            _routine(module, name, nargs)
    except Exception:  # noqa: BLE001 - any failure means: use the f2py wrappers
        return False
    return True


_SIGNATURES = (
    ("cython_lapack", "ssytrd", 10),
    ("cython_lapack", "sormtr", 13),
    ("cython_lapack", "dsyevr", 21),
    ("cython_lapack", "dpstrf", 9),
    ("cython_lapack", "dstebz", 18),
    ("cython_lapack", "dstein", 13),
    ("cython_blas", "ssyr2k", 12),
    ("cython_blas", "dtrmm", 11),
)


class _Args:
    """Keeps the ctypes scalars alive and hands out their addresses."""

    def __init__(self) -> None:
        self._keep: list[Any] = []

    def integer(self, value: int) -> int:
        box = _int(int(value))
        self._keep.append(box)
        return ctypes.addressof(box)

    def real(self, value: float, dtype: type = ctypes.c_double) -> int:
        box = dtype(value)
        self._keep.append(box)
        return ctypes.addressof(box)

    def char(self, value: str) -> int:
        box = ctypes.create_string_buffer(value.encode())
        self._keep.append(box)
        return ctypes.addressof(box)

    def out_integer(self) -> tuple[int, ctypes.c_int]:
        box = _int(0)
        self._keep.append(box)
        return ctypes.addressof(box), box


def _addr(a: np.ndarray) -> int:
    return int(a.ctypes.data)


def _check(info: ctypes.c_int, name: str) -> None:
    if info.value != 0:
        raise np.linalg.LinAlgError(f"{name} failed (info={info.value})")


def ssytrd(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Tridiagonal reduction of the lower triangle of float32 ``a`` (Fortran, overwritten).

    Returns ``(a, d, e, tau)`` as LAPACK ``ssytrd(uplo='L')`` leaves them.
    """
    n = a.shape[0]
    if a.dtype != np.float32 or not a.flags.f_contiguous or a.shape != (n, n):
        raise ValueError("ssytrd: expected a square Fortran-ordered float32 array")
    if not available():
        from scipy.linalg import lapack

        lwork = int(lapack.ssytrd_lwork(n, lower=1)[0])
        c, d, e, tau, code = lapack.ssytrd(a, lower=1, lwork=max(lwork, 1), overwrite_a=1)
        _check(_int(code), "ssytrd")
        return c, d, e, tau
    d, e, tau = np.empty(n, np.float32), np.empty(max(n - 1, 1), np.float32), np.empty(max(n - 1, 1), np.float32)
    fn = _routine("cython_lapack", "ssytrd", 10)
    args = _Args()
    info_p, info = args.out_integer()
    work = np.empty(1, np.float32)
    fn(args.char("L"), args.integer(n), _addr(a), args.integer(n), _addr(d), _addr(e), _addr(tau),
       _addr(work), args.integer(-1), info_p)  # workspace query (GIL held: it is instant)
    _check(info, "ssytrd")
    work = np.empty(max(int(work[0]), 1), np.float32)
    fn(args.char("L"), args.integer(n), _addr(a), args.integer(n), _addr(d), _addr(e), _addr(tau),
       _addr(work), args.integer(work.size), info_p)
    _check(info, "ssytrd")
    return a, d, e[: n - 1], tau[: n - 1]


def sormtr(a: np.ndarray, tau: np.ndarray, C: np.ndarray, transpose: bool = False) -> np.ndarray:
    """``Q C`` (or ``Q^T C``) with ``Q`` from :func:`ssytrd` (its ``a`` and ``tau``), float32.

    Returns a new Fortran-ordered float32 array.
    """
    out = np.array(C, dtype=np.float32, order="F")
    m, n = out.shape
    if not available():
        raise RuntimeError("sormtr: SciPy's Cython LAPACK API is not available")
    fn = _routine("cython_lapack", "sormtr", 13)
    args = _Args()
    info_p, info = args.out_integer()
    work = np.empty(1, np.float32)
    common = (args.char("L"), args.char("L"), args.char("T" if transpose else "N"), args.integer(m), args.integer(n),
              _addr(a), args.integer(a.shape[0]), _addr(tau), _addr(out), args.integer(m))
    fn(*common, _addr(work), args.integer(-1), info_p)
    _check(info, "sormtr")
    work = np.empty(max(int(work[0]), 1), np.float32)
    fn(*common, _addr(work), args.integer(work.size), info_p)
    _check(info, "sormtr")
    return out


def ssyr2k_lower(alpha: float, A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Lower triangle of ``alpha (A^T B + B^T A)`` for C-ordered float32 A, B of shape (m, p).

    Returned as a (p, p) Fortran-ordered float32 array (the upper triangle is zero).
    """
    m, p = A.shape
    if A.dtype != np.float32 or B.dtype != np.float32 or B.shape != (m, p):
        raise ValueError("ssyr2k_lower: expected two float32 arrays of one shape")
    A, B = np.ascontiguousarray(A), np.ascontiguousarray(B)
    if not available():
        from scipy.linalg import blas

        return np.asfortranarray(blas.ssyr2k(alpha, A.T, B.T, lower=1))
    C = np.zeros((p, p), np.float32, order="F")
    # a C-ordered (m, p) array is the column-major (p, m) matrix A^T: C = alpha (A^T B + B^T A)
    fn = _routine("cython_blas", "ssyr2k", 12)
    args = _Args()
    fn(args.char("L"), args.char("N"), args.integer(p), args.integer(m), args.real(alpha, ctypes.c_float),
       _addr(A), args.integer(p), _addr(B), args.integer(p), args.real(0.0, ctypes.c_float), _addr(C), args.integer(p))
    return C


def dsyevr_top(S: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``r`` largest eigenpairs (ascending, as LAPACK returns them) of symmetric float64 S.

    LAPACK ``dsyevr`` (MRRR) with ``range='I'`` on a copy of ``S``.
    """
    n = S.shape[0]
    if not available():
        from scipy.linalg import eigh

        return eigh(S, subset_by_index=[n - r, n - 1], driver="evr", check_finite=False)
    a = np.array(S, dtype=np.float64, order="F")
    w = np.empty(n, np.float64)
    z = np.empty((n, r), np.float64, order="F")
    isuppz = np.empty(2 * max(r, 1), np.int32)
    fn = _routine("cython_lapack", "dsyevr", 21)
    args = _Args()
    m_p, m = args.out_integer()
    info_p, info = args.out_integer()
    work, iwork = np.empty(1, np.float64), np.empty(1, np.int32)
    common = (args.char("V"), args.char("I"), args.char("L"), args.integer(n), _addr(a), args.integer(n),
              args.real(0.0), args.real(0.0), args.integer(n - r + 1), args.integer(n), args.real(0.0),
              m_p, _addr(w), _addr(z), args.integer(n), _addr(isuppz))
    fn(*common, _addr(work), args.integer(-1), _addr(iwork), args.integer(-1), info_p)
    _check(info, "dsyevr")
    work = np.empty(max(int(work[0]), 1), np.float64)
    iwork = np.empty(max(int(iwork[0]), 1), np.int32)
    fn(*common, _addr(work), args.integer(work.size), _addr(iwork), args.integer(iwork.size), info_p)
    _check(info, "dsyevr")
    if m.value != r:
        raise np.linalg.LinAlgError(f"dsyevr: {m.value} eigenpairs found, {r} wanted")
    return w[:r], z


def dpstrf(G: np.ndarray, tol: float = -1.0) -> tuple[np.ndarray, np.ndarray, int]:
    """Pivoted Cholesky of symmetric positive semi-definite float64 ``G`` (lower).

    Returns ``(c, piv, rank)``: ``c`` holds ``L`` in its lower triangle, ``piv`` is 1-based
    (as LAPACK's), ``G[piv-1][:, piv-1] = L L^T`` to the rank found.
    """
    n = G.shape[0]
    if not available():
        from scipy.linalg import lapack

        c, piv, rank_found, code = lapack.dpstrf(G, lower=1, tol=tol)
        if code < 0:
            raise np.linalg.LinAlgError(f"dpstrf failed (info={code})")
        return c, piv, int(rank_found)
    c = np.array(G, dtype=np.float64, order="F")
    piv = np.empty(n, np.int32)
    work = np.empty(2 * n, np.float64)
    fn = _routine("cython_lapack", "dpstrf", 9)
    args = _Args()
    rank_p, rank = args.out_integer()
    info_p, info = args.out_integer()
    fn(args.char("L"), args.integer(n), _addr(c), args.integer(n), _addr(piv), rank_p, args.real(tol),
       _addr(work), info_p)
    if info.value < 0:
        raise np.linalg.LinAlgError(f"dpstrf failed (info={info.value})")
    return c, piv, rank.value  # info = 1: rank deficient, which is what pivoting is for


def dtrmm(alpha: float, L: np.ndarray, B: np.ndarray, *, right: bool, transpose: bool) -> np.ndarray:
    """``alpha B L`` (``right``) or ``alpha op(L) B`` for lower-triangular float64 ``L``;
    ``op(L) = L^T`` when ``transpose``.  Returns a new Fortran-ordered array."""
    if not available():
        from scipy.linalg import blas

        return np.asfortranarray(blas.dtrmm(alpha, L, B, side=int(right), lower=1, trans_a=int(transpose)))
    out = np.array(B, dtype=np.float64, order="F")
    m, n = out.shape
    Lf = np.asfortranarray(L, dtype=np.float64)
    fn = _routine("cython_blas", "dtrmm", 11)
    args = _Args()
    fn(args.char("R" if right else "L"), args.char("L"), args.char("T" if transpose else "N"), args.char("N"),
       args.integer(m), args.integer(n), args.real(alpha), _addr(Lf), args.integer(Lf.shape[0]), _addr(out),
       args.integer(m))
    return out


def dstebz_index(
    d: np.ndarray, e: np.ndarray, il: int, iu: int, abstol: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eigenvalues ``il..iu`` (1-based, ascending) of the tridiagonal ``(d, e)`` by bisection.

    Returns ``(w, iblock, isplit)`` as LAPACK ``dstebz(range='I', order='B')``.
    """
    n = d.size
    d, e = np.ascontiguousarray(d, np.float64), np.ascontiguousarray(e, np.float64)
    if not available():
        from scipy.linalg import lapack

        m_found, w_all, iblock_all, isplit_all, code = lapack.dstebz(d, e, 3, 0.0, 0.0, il, iu, abstol, "B")
        _check(_int(code), "dstebz")
        return w_all[:m_found], iblock_all, isplit_all
    w = np.empty(n, np.float64)
    iblock, isplit = np.empty(n, np.int32), np.empty(n, np.int32)
    work, iwork = np.empty(4 * n, np.float64), np.empty(3 * n, np.int32)
    fn = _routine("cython_lapack", "dstebz", 18)
    args = _Args()
    m_p, m = args.out_integer()
    nsplit_p, _ = args.out_integer()
    info_p, info = args.out_integer()
    fn(args.char("I"), args.char("B"), args.integer(n), args.real(0.0), args.real(0.0), args.integer(il),
       args.integer(iu), args.real(abstol), _addr(d), _addr(e), m_p, nsplit_p, _addr(w), _addr(iblock), _addr(isplit),
       _addr(work), _addr(iwork), info_p)
    _check(info, "dstebz")
    return w[: m.value], iblock, isplit


def dstein(d: np.ndarray, e: np.ndarray, w: np.ndarray, iblock: np.ndarray, isplit: np.ndarray) -> np.ndarray:
    """Eigenvectors of the tridiagonal ``(d, e)`` for eigenvalues ``w`` by inverse iteration."""
    n, m = d.size, w.size
    d, e = np.ascontiguousarray(d, np.float64), np.ascontiguousarray(e, np.float64)
    w = np.ascontiguousarray(w, np.float64)
    if not available():
        from scipy.linalg import lapack

        z_found, code = lapack.dstein(d, e, w, iblock, isplit)
        _check(_int(code), "dstein")
        return z_found
    z = np.empty((n, m), np.float64, order="F")
    work, iwork, ifail = np.empty(5 * n, np.float64), np.empty(n, np.int32), np.empty(max(m, 1), np.int32)
    fn = _routine("cython_lapack", "dstein", 13)
    args = _Args()
    info_p, info = args.out_integer()
    iblock, isplit = np.ascontiguousarray(iblock, np.int32), np.ascontiguousarray(isplit, np.int32)
    fn(args.integer(n), _addr(d), _addr(e), args.integer(m), _addr(w), _addr(iblock), _addr(isplit), _addr(z),
       args.integer(n), _addr(work), _addr(iwork), _addr(ifail), info_p)
    _check(info, "dstein")
    return z
