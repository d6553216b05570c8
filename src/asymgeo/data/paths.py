"""Default folders of the data layer: where datasets and embedding caches live.

One small module with no imports from the rest of the package, so that
:mod:`asymgeo.data.beir`, :mod:`asymgeo.data.download` and :mod:`asymgeo.data.cache`
can all use it without importing each other.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_root", "cache_root"]


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """Folder holding datasets by name.

    ``data_dir`` if given, else the environment variable ``ASYMGEO_DATA_DIR``, else
    ``~/.cache/asymgeo/datasets``.
    """
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get("ASYMGEO_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "asymgeo" / "datasets"


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """``cache_dir``, else ``$ASYMGEO_CACHE_DIR``, else ``~/.cache/asymgeo/embeddings``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("ASYMGEO_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "asymgeo" / "embeddings"
