"""Saving and loading adapters: a folder with ``adapter.safetensors`` + ``adapter.json``.

``adapter.safetensors`` holds the float64 maps (``query_map``, and ``doc_map`` for the
dual geometry); ``adapter.json`` holds the format version, geometry, form, rank,
dimension, encoder, dataset, the training configuration, the fitted scalars, metrics and
the SHA-256 of the weights file.  Writing is atomic: the new folder is written and checked
beside the destination and only then swapped in, so an interrupted save leaves the old
adapter (or nothing) and never a half-written one.  Loading checks the format version,
the digest, the keys, shapes, dtype and finiteness, and fails with one clear
``ValueError`` naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from .adapter import FORMS, Adapter

__all__ = ["save_adapter", "load_adapter", "check_compatible", "check_output_folder", "FORMAT_VERSION",
           "WEIGHTS_FILE", "CONFIG_FILE", "METRICS_FILE", "ADAPTER_FILES"]

FORMAT_VERSION = 1
WEIGHTS_FILE = "adapter.safetensors"
CONFIG_FILE = "adapter.json"
METRICS_FILE = "metrics.json"
_FORMAT_NAME = "asymgeo-adapter"


def _safetensors_numpy():
    try:
        from safetensors import numpy as st_numpy
    except ImportError as exc:  # pragma: no cover - installed in the dev env
        raise ImportError("saving adapters needs safetensors: pip install asymgeo[train]") from exc
    return st_numpy


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        return _jsonable(value.item())
    if isinstance(value, float) and not np.isfinite(value):
        return None  # JSON has no NaN: an undefined figure is written as null
    return value


#: Every file :func:`save_adapter` writes; a folder holding anything else is not only ours.
ADAPTER_FILES = frozenset({WEIGHTS_FILE, CONFIG_FILE, METRICS_FILE})


def _is_our_config(path: Path) -> tuple[bool, str]:
    """``(True, "")`` when ``path`` is an asymgeo ``adapter.json``, else ``(False, why)``."""
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False, f"its {CONFIG_FILE} is not readable JSON"
    if isinstance(cfg, dict) and cfg.get("format") == _FORMAT_NAME:
        return True, ""
    if isinstance(cfg, dict) and "peft_type" in cfg:
        return False, f"its {CONFIG_FILE} is another tool's (peft_type {cfg['peft_type']!r})"
    fmt = cfg.get("format") if isinstance(cfg, dict) else None
    return False, f"its {CONFIG_FILE} is not an asymgeo adapter's (format {fmt!r})"


def check_output_folder(path: str | os.PathLike, what: str = "out") -> Path:
    """Refuse, before any work, a destination whose replacement could lose a user's file.

    ``path`` may be new, an empty folder, or an earlier asymgeo adapter: a folder whose
    ``adapter.json`` says ``"format": "asymgeo-adapter"`` and which holds nothing but the
    files :func:`save_adapter` writes (:data:`ADAPTER_FILES`).  Anything else (a file,
    another tool's adapter, an adapter folder with a user's notes or an export inside it, a
    folder that cannot be written) raises one ``ValueError`` / ``PermissionError`` naming
    the folder.  Returns the path.
    """
    from .._atomic import check_writable_parent

    dest = Path(path)
    if not str(path).strip():
        raise ValueError(f"{what}: empty path (an unset shell variable?); name the adapter folder to write")
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"{what}: {dest} exists and is not a folder; an adapter is saved as a folder")
    if dest.is_dir():
        entries = sorted(e.name for e in dest.iterdir())
        if entries:
            if CONFIG_FILE not in entries:
                shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
                raise ValueError(f"{what}: {dest} is a folder that is not an asymgeo adapter (holds {shown}); "
                                 "choose a new or empty folder (nothing was written)")
            ours, why = _is_our_config(dest / CONFIG_FILE)
            if not ours:
                raise ValueError(f"{what}: {dest} is not an asymgeo adapter folder: {why}; refusing to replace it "
                                 "(nothing was written)")
            foreign = [e for e in entries if e not in ADAPTER_FILES]
            if foreign:
                shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
                raise ValueError(f"{what}: {dest} holds files asymgeo did not write ({shown}); move them out or "
                                 "choose another folder (nothing was written)")
    check_writable_parent(dest, what)
    return dest


def save_adapter(
    adapter: Adapter,
    path: str | os.PathLike,
    *,
    encoder: str | None = None,
    dataset: str | None = None,
    metrics: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write a fitted adapter to the folder ``path`` (created; an existing adapter there is
    replaced only once the new one is completely written and checked).

    Parameters
    ----------
    adapter : fitted :class:`Adapter`.
    path : destination folder.
    encoder, dataset : recorded so that :func:`check_compatible` can refuse mismatched embeddings
        (default: the adapter's ``metadata_`` when it was loaded).
    metrics : e.g. validation/test NDCG@10, recorded in the JSON and written to ``metrics.json``.
    extra : any further JSON-serialisable provenance.

    Returns
    -------
    The folder path.
    """
    if not isinstance(adapter, Adapter):
        raise TypeError(f"adapter: expected an asymgeo.adapters.Adapter, got {type(adapter).__name__}")
    adapter._check_fitted()
    st = _safetensors_numpy()
    dest = check_output_folder(path)
    meta_prev = getattr(adapter, "metadata_", {}) or {}
    A = np.ascontiguousarray(adapter.query_map_, dtype=np.float64)
    tensors = {"query_map": A}
    if adapter.geometry_ == "dual":
        tensors["doc_map"] = np.ascontiguousarray(adapter.doc_map_, dtype=np.float64)
    mem = getattr(adapter, "memory_", None)
    memory_cfg = None
    if mem is not None:
        t = mem.table_
        tensors["memory_keys"] = np.ascontiguousarray(t.keys, dtype=np.float64)
        tensors["memory_pairs"] = np.ascontiguousarray(np.stack([t.pair_key, t.pair_document]), dtype=np.int64)
        memory_cfg = {"threshold": float(mem.threshold_), "weight": float(mem.weight_), "n_keys": t.n_keys,
                      "n_documents": t.n_documents, "n_pairs": int(t.pair_key.size),
                      "description": "gated document memory: score x^T M y + weight * max over the keys q that "
                                     "found y of max(0, x.q - threshold) / (1 - threshold); keys are frozen query "
                                     "embeddings, pairs (key row, corpus row) of the embedding cache"}
    sel = getattr(adapter, "selection_", None)
    selection = sel.as_dict() if sel is not None else None
    params = adapter.get_params()
    if adapter.geometry_ == "query":  # rank is not a parameter of the p x p query map
        params["rank"] = int(A.shape[0])
    params["learning_rates"] = list(params["learning_rates"]) if not isinstance(
        params["learning_rates"], (int, float)) else [params["learning_rates"]]
    config = {
        "format": _FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "asymgeo_version": __version__,
        "geometry": adapter.geometry_,
        "form": adapter.form,
        "rank": int(A.shape[0]),
        "dimension": int(A.shape[1]),
        "encoder": encoder if encoder is not None else meta_prev.get("encoder"),
        "dataset": dataset if dataset is not None else meta_prev.get("dataset"),
        "training": params,
        "fitted": {
            "learning_rate": adapter.learning_rate_,
            "best_epoch": adapter.best_epoch_,
            "validation_ndcg": adapter.validation_ndcg_,
            "init_scale": getattr(adapter, "init_scale_", None),
            "stopped": list(getattr(adapter, "stopped_", [])),
            "selection": selection,
            "history": adapter.history_,
        },
        "memory": memory_cfg,
        "metrics": metrics if metrics is not None else meta_prev.get("metrics", {}),
        "extra": extra if extra is not None else meta_prev.get("extra", {}),
    }
    from .._atomic import building_folder

    with building_folder(dest) as tmp:
        data = st.save(tensors, metadata={"format": _FORMAT_NAME, "format_version": str(FORMAT_VERSION)})
        config["weights_sha256"] = hashlib.sha256(data).hexdigest()
        (tmp / WEIGHTS_FILE).write_bytes(data)
        (tmp / CONFIG_FILE).write_text(json.dumps(_jsonable(config), indent=2, allow_nan=False) + "\n",
                                       encoding="utf-8")
        files = [WEIGHTS_FILE, CONFIG_FILE]
        if metrics is not None:
            (tmp / METRICS_FILE).write_text(json.dumps(_jsonable(metrics), indent=2, allow_nan=False) + "\n",
                                            encoding="utf-8")
            files.append(METRICS_FILE)
        for f in files:
            with open(tmp / f, "rb+") as fh:
                os.fsync(fh.fileno())
        load_adapter(tmp)  # check before swapping in
    return dest


def _fail(path: Path, msg: str) -> ValueError:
    return ValueError(f"{path}: {msg}")


def load_adapter(path: str | os.PathLike) -> Adapter:  # noqa: C901 - one flat sequence of file checks
    """Read an adapter folder written by :func:`save_adapter`.

    Returns a fitted :class:`Adapter` whose ``metadata_`` holds the JSON config (encoder,
    dataset, metrics, training configuration).

    Raises
    ------
    FileNotFoundError
        The folder or one of its two files is missing.
    ValueError
        Unknown format or version, weights that do not match the recorded digest (truncated or
        edited), missing or unexpected tensors, wrong shape, dtype or non-finite values.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no adapter folder here")
    cfg_path, w_path = folder / CONFIG_FILE, folder / WEIGHTS_FILE
    for f in (cfg_path, w_path):
        if not f.is_file():
            raise FileNotFoundError(f"{f}: missing; not a complete adapter folder")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _fail(cfg_path, f"not valid JSON ({exc})") from None
    if not isinstance(cfg, dict) or cfg.get("format") != _FORMAT_NAME:
        fmt = cfg.get("format") if isinstance(cfg, dict) else None
        raise _fail(cfg_path, f"not an asymgeo adapter config (format {fmt!r})")
    if cfg.get("format_version") != FORMAT_VERSION:
        raise _fail(cfg_path, f"format version {cfg.get('format_version')!r} is not supported "
                              f"(this asymgeo reads version {FORMAT_VERSION})")
    for key in ("geometry", "form", "rank", "dimension", "weights_sha256"):
        if key not in cfg:
            raise _fail(cfg_path, f"missing key {key!r}")
    geometry, form = cfg["geometry"], cfg["form"]
    if geometry not in ("shared", "dual", "query"):
        raise _fail(cfg_path, f"geometry {geometry!r} is not 'shared', 'dual' or 'query'")
    if form not in FORMS:
        raise _fail(cfg_path, f"form {form!r} is not one of {', '.join(FORMS)}")
    r, p = cfg["rank"], cfg["dimension"]
    if not (isinstance(r, int) and isinstance(p, int) and 1 <= r <= p):
        raise _fail(cfg_path, f"rank {r!r} and dimension {p!r} are not integers with 1 <= rank <= dimension")
    training = cfg.get("training") or {}
    if not isinstance(training, dict):
        raise _fail(cfg_path, f"'training' is not an object (got {type(training).__name__})")
    # The fields that decide the operator are stated twice; they must agree (an edited file
    # that flips one of them would score a different operator without complaint).
    for key, value in (("form", form), ("rank", r)):
        if key in training and training[key] != value:
            raise _fail(cfg_path, f"{key} {value!r} disagrees with training.{key} {training[key]!r} "
                                  "(edited by hand?); re-save the adapter")
    if "geometry" in training and training["geometry"] not in (geometry, "auto"):
        raise _fail(cfg_path, f"geometry {geometry!r} disagrees with training.geometry {training['geometry']!r} "
                              "(edited by hand?); re-save the adapter")
    chosen = ((cfg.get("fitted") or {}).get("selection") or {}).get("choice") if isinstance(
        cfg.get("fitted"), dict) else None
    if training.get("geometry") == "auto" and chosen is not None and chosen != geometry:
        raise _fail(cfg_path, f"geometry {geometry!r} disagrees with the recorded selection {chosen!r} "
                              "(edited by hand?); re-save the adapter")
    data = w_path.read_bytes()
    if hashlib.sha256(data).hexdigest() != cfg["weights_sha256"]:
        raise _fail(w_path, "contents do not match the digest recorded in adapter.json (truncated, edited or "
                            "from another adapter); re-save the adapter")
    st = _safetensors_numpy()
    try:
        tensors = st.load(data)
    except Exception as exc:  # safetensors raises its own SafetensorError on damaged files
        raise _fail(w_path, f"not a readable safetensors file ({exc})") from None
    memory_cfg = cfg.get("memory")
    expected = {"query_map"} | ({"doc_map"} if geometry == "dual" else set()) | (
        {"memory_keys", "memory_pairs"} if memory_cfg is not None else set())
    if set(tensors) != expected:
        raise _fail(w_path, f"tensors {sorted(tensors)} do not match the {geometry} geometry "
                            f"{'with' if memory_cfg is not None else 'without'} a memory (expected {sorted(expected)})")
    memory = None
    if memory_cfg is not None:
        memory = _load_memory(cfg_path, w_path, memory_cfg, tensors.pop("memory_keys"), tensors.pop("memory_pairs"), p)
    if geometry == "query" and r != p:
        raise _fail(cfg_path, f"rank {r} of a query-only adapter must equal its dimension {p}")
    for name, arr in tensors.items():
        if arr.dtype != np.float64:
            raise _fail(w_path, f"tensor {name!r} has dtype {arr.dtype}, expected float64")
        if arr.shape != (r, p):
            raise _fail(w_path, f"tensor {name!r} has shape {arr.shape}, expected (rank, dimension) = ({r}, {p})")
        if not np.isfinite(arr).all():
            raise _fail(w_path, f"tensor {name!r} contains NaN or infinite values")
    params = {}
    for key in Adapter._param_names():
        if key in training and key not in ("geometry", "rank", "form"):
            params[key] = tuple(training[key]) if key == "learning_rates" else training[key]
    doc_map = np.eye(p) if geometry == "query" else tensors.get("doc_map")
    ad = Adapter.from_maps(tensors["query_map"], doc_map, form=form, geometry=geometry, **params)
    ad.memory_ = memory
    fitted = cfg.get("fitted") or {}
    ad.geometry = str(training.get("geometry", geometry))
    ad.learning_rate_ = fitted.get("learning_rate")
    ad.best_epoch_ = fitted.get("best_epoch")
    ad.validation_ndcg_ = fitted.get("validation_ndcg")
    ad.init_scale_ = fitted.get("init_scale")
    ad.stopped_ = list(fitted.get("stopped") or [])
    ad.history_ = list(fitted.get("history") or [])
    ad.metadata_ = cfg
    return ad


def _load_memory(cfg_path: Path, w_path: Path, cfg: Any, keys: np.ndarray, pairs: np.ndarray, p: int) -> Any:
    """The :class:`~asymgeo.adapters.memory.DocumentMemory` saved with an adapter, checked."""
    from ..retrieval.memory import memory_table_from_pairs
    from .memory import DocumentMemory

    if not isinstance(cfg, dict):
        raise _fail(cfg_path, f"'memory' is not an object (got {type(cfg).__name__})")
    for key in ("threshold", "weight"):
        v = cfg.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
            raise _fail(cfg_path, f"memory.{key}: expected a finite number, got {v!r}")
    if not -1.0 <= cfg["threshold"] < 1.0 or cfg["weight"] < 0:
        raise _fail(cfg_path, f"memory: threshold {cfg['threshold']!r} outside [-1, 1) or weight {cfg['weight']!r} < 0")
    if keys.dtype != np.float64 or keys.ndim != 2 or keys.shape[1] != p or not np.isfinite(keys).all():
        raise _fail(w_path, f"tensor 'memory_keys': expected finite float64 of shape (n_keys, {p}), got "
                            f"{keys.dtype} {keys.shape}")
    if pairs.dtype != np.int64 or pairs.ndim != 2 or pairs.shape[0] != 2:
        raise _fail(w_path, f"tensor 'memory_pairs': expected int64 of shape (2, n_pairs), got "
                            f"{pairs.dtype} {pairs.shape}")
    if pairs.size and (pairs[0].min() < 0 or pairs[0].max() >= keys.shape[0] or pairs[1].min() < 0):
        raise _fail(w_path, "tensor 'memory_pairs': a key row or corpus row is out of range")
    if cfg.get("n_keys") not in (None, keys.shape[0]) or cfg.get("n_pairs") not in (None, pairs.shape[1]):
        raise _fail(cfg_path, "memory: n_keys / n_pairs disagree with the saved tensors (edited by hand?)")
    return DocumentMemory.from_table(memory_table_from_pairs(keys, pairs[0], pairs[1]), cfg["threshold"], cfg["weight"])


def _canonical_encoder(name: str) -> str:
    from ..data.encoders import get_encoder

    try:
        return get_encoder(name).name
    except (ValueError, KeyError):
        return str(name)


def check_compatible(adapter: Adapter, dimension: int, *, encoder: str | None = None,
                     source: str | os.PathLike | None = None) -> None:
    """Refuse embeddings the adapter was not trained for: another dimension, or (when both
    are known) another encoder.  ``source`` names the adapter folder in the message."""
    where = f"{source}: " if source is not None else "adapter: "
    if int(dimension) != int(adapter.n_features_in_):
        raise ValueError(f"{where}adapter dimension {adapter.n_features_in_} does not match the embeddings' "
                         f"dimension {dimension}")
    trained = (getattr(adapter, "metadata_", None) or {}).get("encoder")
    if encoder is not None and trained is not None and _canonical_encoder(str(trained)) != _canonical_encoder(encoder):
        raise ValueError(f"{where}adapter was trained on {trained!r} embeddings, not {encoder!r}")
