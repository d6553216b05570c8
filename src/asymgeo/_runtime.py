"""Process runtime helpers: usable CPUs, BLAS thread limits and JSON encoding of numpy values.

One home for what the search, selection, data and experiment layers each used to
compute their own way.  Foundation layer: imports only the standard library
(threadpoolctl and numpy lazily, inside the functions that need them).
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["available_cpus", "cgroup_cpu_limit", "limit_blas_threads", "json_default"]

_CGROUP_ROOT = Path("/sys/fs/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_cpu_limit(root: str | os.PathLike = _CGROUP_ROOT) -> float | None:
    """CPU quota of this process's cgroup, in CPUs (``quota / period``), or None when unlimited.

    Reads cgroup v2 ``cpu.max`` (``"max 100000"`` or ``"200000 100000"``) and falls back to
    cgroup v1 ``cpu/cpu.cfs_quota_us`` / ``cpu/cpu.cfs_period_us`` (quota ``-1``: unlimited).
    Missing or unreadable files mean no limit.
    """
    root = Path(root)
    text = _read(root / "cpu.max")
    if text is not None:
        parts = text.split()
        if len(parts) == 2 and parts[0] != "max":
            try:
                quota, period = float(parts[0]), float(parts[1])
            except ValueError:
                return None
            return quota / period if quota > 0 and period > 0 else None
        return None
    quota_text = _read(root / "cpu" / "cpu.cfs_quota_us")
    period_text = _read(root / "cpu" / "cpu.cfs_period_us")
    if quota_text is None or period_text is None:
        return None
    try:
        quota, period = float(quota_text), float(period_text)
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def available_cpus() -> int:
    """CPUs this process may use: the affinity mask, capped by the cgroup CPU quota.

    ``os.sched_getaffinity(0)`` where the platform has it (a container pinned to 2
    cores of a 64-core host gets 2, not ``os.cpu_count() == 64``), else
    ``os.cpu_count()``; a cgroup quota of ``q`` CPUs caps it at ``ceil(q)``.  At least 1.
    """
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        n = os.cpu_count() or 1
    quota = cgroup_cpu_limit()
    if quota is not None:
        n = min(n, math.ceil(quota))
    return max(1, n)


def limit_blas_threads(limits: int = 1, user_api: str | None = "blas") -> contextlib.AbstractContextManager:
    """Context manager limiting native thread pools (``threadpoolctl.threadpool_limits``).

    ``user_api="blas"`` limits BLAS only; ``None`` limits BLAS and OpenMP.  A no-op
    context when threadpoolctl is not importable.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl is a core dependency
        return contextlib.nullcontext()
    return threadpool_limits(limits=limits, user_api=user_api)


def json_default(o: Any) -> Any:
    """``json.dumps(..., default=json_default)``: numpy arrays and scalars, paths.

    Arrays become lists, numpy scalars their Python value, :class:`~pathlib.Path` a string;
    anything else raises :class:`TypeError` naming its type.
    """
    import numpy as np

    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.floating, np.integer, np.bool_)):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def package_versions() -> dict[str, str]:
    """Versions recorded with every experiment cell and fitted adapter: python, asymgeo, numpy, scipy."""
    import platform

    import numpy
    import scipy

    from ._version import __version__

    return {
        "python": platform.python_version(),
        "asymgeo": __version__,
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
    }
