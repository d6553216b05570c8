"""``asymgeo import``: embeddings computed elsewhere (``.npy`` arrays and id lists) into a verified cache.

:func:`import_embeddings` takes the corpus and query matrices with their ids, the encoder's
name and whether the rows are unit-norm, and writes the cache folder
``<cache_dir>/<dataset>/<encoder>/`` that ``asymgeo embed`` would have written (the format:
:mod:`asymgeo.data.cache`): rows reordered to the dataset's file order, ``meta.json`` (written
last) recording the encoder, its conventions, the dataset's fingerprint and where the arrays
came from.  The result is then opened and verified as every cache is, so ``select``, ``fit``
and ``evaluate`` take it as they take an encoded one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from .beir import BeirDataset, load_beir
from .cache import (
    CACHE_FORMAT,
    NORM_TOLERANCE,
    EmbeddingCache,
    cache_fingerprint,
    cache_path,
    load_embeddings,
    write_embeddings,
)
from .encoders import EncoderSpec, get_encoder

__all__ = ["import_embeddings"]


def _array(value: Any, what: str) -> tuple[np.ndarray, str]:
    if isinstance(value, (str, os.PathLike)):
        path = Path(value)
        if not path.is_file():
            raise FileNotFoundError(f"{what}: {path}: no such file")
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise ValueError(f"{what}: {path}: not a readable .npy array ({exc or type(exc).__name__})") from None
        return arr, str(path)
    arr = np.asarray(value)
    return arr, what


def _ids(value: Any, what: str) -> tuple[list[str], str]:
    if isinstance(value, (str, os.PathLike)):
        path = Path(value)
        if not path.is_file():
            raise FileNotFoundError(f"{what}: {path}: no such file")
        lines = path.read_text(encoding="utf-8").splitlines()
        while lines and not lines[-1].strip():
            lines.pop()
        for i, s in enumerate(lines):
            if not s.strip():
                raise ValueError(f"{path}, line {i + 1}: empty id")
        return lines, str(path)
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(f"{what}: expected a list of ids or a text file of one id per line")
    out = [str(s) for s in value]
    return out, what


def _reordered(arr: np.ndarray, ids: list[str], want: Sequence[str], src: str, id_src: str,
               what: str) -> np.ndarray:
    """``arr``'s rows in the order of ``want`` (the dataset's ids), every check naming its source."""
    if arr.ndim != 2:
        raise ValueError(f"{src}: expected a 2-d (rows, dimension) array, got shape {arr.shape}")
    if arr.shape[0] != len(ids):
        raise ValueError(f"{src}: {arr.shape[0]} rows but {id_src} lists {len(ids)} ids")
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"{src}: expected floating-point embeddings, got dtype {arr.dtype}")
    where: dict[str, int] = {}
    for i, s in enumerate(ids):
        if s in where:
            raise ValueError(f"{id_src}, line {i + 1}: id {s!r} repeats line {where[s] + 1}")
        where[s] = i
    missing = [s for s in want if s not in where]
    if missing:
        raise ValueError(f"{id_src}: {len(missing)} of the dataset's {len(want)} {what} have no row "
                         f"(first: {missing[0]!r}); embed every {what[:-1]} of the dataset")
    if len(ids) != len(want):
        have = set(want)
        extra = next(s for s in ids if s not in have)
        raise ValueError(f"{id_src}: {len(ids) - len(want)} ids are not {what} of the dataset (first: {extra!r}, "
                         f"line {where[extra] + 1}); embeddings of another dataset?")
    rows = np.fromiter((where[s] for s in want), dtype=np.int64, count=len(want))
    return np.asarray(arr[rows], dtype=np.float32) if not np.array_equal(rows, np.arange(len(want))) \
        else np.asarray(arr, dtype=np.float32)


def _check_rows(E: np.ndarray, src: str, ids: Sequence[str], normalize: bool) -> np.ndarray:
    finite = np.isfinite(E).all(axis=1)
    if not finite.all():
        i = int(np.flatnonzero(~finite)[0])
        raise ValueError(f"{src}: the row of id {ids[i]!r} has non-finite values (NaN or inf); "
                         f"{int((~finite).sum())} such rows")
    norms = np.linalg.norm(E.astype(np.float64), axis=1)
    if (norms == 0).any():
        i = int(np.flatnonzero(norms == 0)[0])
        raise ValueError(f"{src}: the row of id {ids[i]!r} is all zero; {int((norms == 0).sum())} such rows")
    if normalize:
        return (E / norms[:, None]).astype(np.float32)
    off = np.abs(norms - 1.0) > NORM_TOLERANCE
    if off.any():
        i = int(np.flatnonzero(off)[0])
        raise ValueError(f"{src}: the row of id {ids[i]!r} has norm {norms[i]:.4g}, not 1 (tolerance "
                         f"{NORM_TOLERANCE}; {int(off.sum())} such rows); asymgeo's caches hold L2-normalised "
                         "embeddings: pass normalize=True (--normalize) to scale every row to unit norm")
    return E


def import_embeddings(
    dataset: str | os.PathLike | BeirDataset,
    encoder: str | EncoderSpec,
    *,
    corpus: Any,
    corpus_ids: Any,
    queries: Any,
    query_ids: Any,
    normalize: bool = False,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    overwrite: bool = False,
) -> EmbeddingCache:
    """Write embeddings computed elsewhere as the verified cache of ``dataset`` under ``encoder``.

    Parameters
    ----------
    dataset : BEIR folder, name under ``data_dir`` or :class:`~asymgeo.data.BeirDataset`:
        the texts the embeddings are of (its ids are checked against the id lists).
    encoder : the encoder that made them: a registry name (its conventions are recorded and
        later checked) or any name, id or folder (the cache's folder name).
    corpus, queries : (N, p) and (Q, p) float arrays, or ``.npy`` files.
    corpus_ids, query_ids : their row ids, as lists or text files of one id per line; every
        id of the dataset must have a row (rows are reordered to the dataset's file order).
    normalize : scale each row to unit L2 norm; without it every row must already have norm
        1 (within :data:`~asymgeo.data.NORM_TOLERANCE`), as asymgeo's caches do.
    cache_dir : where caches live (default ``$ASYMGEO_CACHE_DIR``, ``~/.cache/asymgeo/embeddings``).
    overwrite : replace a cache already there (only once the new one is complete).

    Returns
    -------
    EmbeddingCache
        The cache, opened and verified against ``dataset`` and ``encoder``.

    Raises
    ------
    ValueError
        Naming the file (or argument) at fault: wrong shape, row count or dtype, a repeated,
        missing or foreign id, a non-finite, zero or (without ``normalize``) non-unit row,
        differing query and corpus dimensions, a dimension the registry encoder does not
        have, or a cache already there (without ``overwrite``).
    """
    ds = load_beir(dataset, data_dir=data_dir)
    spec = get_encoder(encoder)
    dest = cache_path(ds, spec, cache_dir)
    if (dest / "meta.json").is_file() and not overwrite:
        raise ValueError(f"{dest}: a cache is already there; pass overwrite=True (--overwrite) to replace it "
                         "(nothing was written)")
    C, c_src = _array(corpus, "corpus")
    Q, q_src = _array(queries, "queries")
    c_ids, c_id_src = _ids(corpus_ids, "corpus_ids")
    q_ids, q_id_src = _ids(query_ids, "query_ids")
    C = _reordered(C, c_ids, ds.corpus_ids, c_src, c_id_src, "documents")
    Q = _reordered(Q, q_ids, ds.query_ids, q_src, q_id_src, "queries")
    if C.shape[1] != Q.shape[1]:
        raise ValueError(f"{c_src} has dimension {C.shape[1]} but {q_src} has {Q.shape[1]}: one encoder embeds both")
    if spec.dimension is not None and C.shape[1] != spec.dimension:
        raise ValueError(f"{c_src}: dimension {C.shape[1]}, but {spec.name} embeds in {spec.dimension}; name the "
                         "encoder that made these embeddings")
    C = _check_rows(C, c_src, ds.corpus_ids, normalize)
    Q = _check_rows(Q, q_src, ds.query_ids, normalize)
    meta: dict[str, Any] = {
        "format": CACHE_FORMAT,
        "model_name": spec.model,
        "encoder": spec.name,
        "prefixes": {"query": spec.query_prefix, "document": spec.document_prefix},
        "max_tokens": spec.max_tokens,
        "normalised": True,
        "row_order": "corpus.jsonl / queries.jsonl file order (ids in corpus_ids.txt / query_ids.txt)",
        "dataset": {"name": ds.name, "path": str(ds.path.resolve())},
        "fingerprint": cache_fingerprint(ds, spec),
        "imported": {"corpus": c_src, "corpus_ids": c_id_src, "queries": q_src, "query_ids": q_id_src,
                     "normalised_on_import": bool(normalize)},
        "python_version": sys.version.split()[0],
        "numpy_version": np.__version__,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
    }
    write_embeddings(dest, C, list(ds.corpus_ids), Q, list(ds.query_ids), meta)
    return load_embeddings(ds, spec, cache_dir=cache_dir)
