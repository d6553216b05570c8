"""Export an adapter as a sentence-transformers model folder (extra ``encode``).

The exported model is the base encoder behind a ``Router`` with a ``"query"`` and a
``"document"`` route, so that ``encode_query(q) . encode_document(d)`` equals the
adapter's score ``x^T M y`` of the base embeddings ``x``, ``y``:

* augmented form: query route = base modules + ``Dense(p -> p)`` with weight ``M^T``
  (``x -> M^T x``); document route = the base modules unchanged (the frozen document
  embeddings, so an existing index stays valid);
* projection form: query route = base + ``Dense(p -> r)`` with weight ``A``; document
  route = base + ``Dense(p -> r)`` with weight ``B`` (the compact r-dimensional index).

The base encoder's query and document prefixes become the model's ``"query"`` and
``"document"`` prompts, its truncation length the model's ``max_seq_length``; similarity
is the dot product.
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from .adapter import Adapter

__all__ = ["export_sentence_transformers", "MANIFEST_FILE"]

logger = logging.getLogger(__name__)


def _import_st():
    try:
        import sentence_transformers
        from sentence_transformers.sentence_transformer.modules import Dense, Router
    except ImportError as exc:
        raise ImportError("exporting to sentence-transformers needs it: pip install asymgeo[encode]") from exc
    return sentence_transformers.SentenceTransformer, Dense, Router


def _dense(Dense: Any, weight: np.ndarray) -> Any:
    import torch

    W = torch.tensor(np.asarray(weight, dtype=np.float32))
    return Dense(W.shape[1], W.shape[0], bias=False, activation_function=None, init_weight=W)


#: Written into every export: the files asymgeo put there, so that only those are ever replaced.
MANIFEST_FILE = "asymgeo_export.json"


def _files_under(folder: Path) -> list[str]:
    return sorted(str(f.relative_to(folder)) for f in folder.rglob("*") if not f.is_dir())


def _check_destination(dest: Path, overwrite: bool) -> None:
    """Refuse, before any work, a destination whose replacement could lose a user's file.

    Replaceable: nothing there, an empty folder, or (with ``overwrite``) an earlier asymgeo
    export holding only the files its manifest lists.  Never a folder inside an asymgeo
    adapter folder (the adapter folder must hold only the adapter).
    """
    import json

    from .._atomic import check_writable_parent
    from .io import CONFIG_FILE, _is_our_config

    if str(dest) in ("", "."):
        raise ValueError("out: empty path")
    for parent in [dest, *dest.parents][1:3]:
        if (parent / CONFIG_FILE).is_file() and _is_our_config(parent / CONFIG_FILE)[0]:
            raise ValueError(f"out: {dest} is inside the adapter folder {parent}; export to a folder outside it "
                             "(nothing was written)")
    if dest.exists():
        if not dest.is_dir():
            raise ValueError(f"out: {dest} exists and is not a folder")
        if any(dest.iterdir()):
            manifest = dest / MANIFEST_FILE
            if not manifest.is_file():
                what = ("a sentence-transformers model asymgeo did not export" if (dest / "modules.json").is_file()
                        else "not an asymgeo export")
                raise ValueError(f"out: {dest} exists and is {what}; choose a new folder (nothing was written)")
            try:
                listed = set(json.loads(manifest.read_text(encoding="utf-8"))["files"])
            except (OSError, ValueError, KeyError, TypeError):
                raise ValueError(f"out: {manifest} is damaged; refusing to replace {dest} "
                                 "(nothing was written)") from None
            foreign = [f for f in _files_under(dest) if f not in listed and f != MANIFEST_FILE]
            if foreign:
                shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
                raise ValueError(f"out: {dest} holds files asymgeo did not write ({shown}); move them out or choose "
                                 "another folder (nothing was written)")
            if not overwrite:
                raise ValueError(f"out: {dest} already holds a model; pass overwrite=True (--overwrite) to replace it")
    check_writable_parent(dest, "out")


def export_sentence_transformers(
    adapter: Adapter,
    base: str,
    out: str | os.PathLike,
    *,
    device: str | None = "cpu",
    overwrite: bool = False,
) -> Path:
    """Write a sentence-transformers model folder for ``adapter`` on top of encoder ``base``.

    Parameters
    ----------
    adapter : fitted or loaded :class:`Adapter`.
    base : encoder name known to :func:`asymgeo.data.get_encoder` (its offline package,
        prefixes and truncation are used) or a model id / folder.
    out : destination folder; written beside it and swapped in only when complete.
    device : torch device used while building (default CPU).
    overwrite : replace an existing model folder at ``out`` (only a sentence-transformers
        model folder, one holding ``modules.json``, is ever replaced, and only once the new
        one is complete); without it an existing non-empty ``out`` is refused before any work.

    Returns
    -------
    The folder; ``SentenceTransformer(out)`` loads it.

    Raises
    ------
    ValueError
        The adapter's dimension differs from the base model's embedding dimension, or ``out``
        exists and is not replaceable (see ``overwrite``).
    """
    _check_destination(Path(out), overwrite)
    from ..data.encoders import get_encoder

    adapter._check_fitted()
    SentenceTransformer, Dense, Router = _import_st()
    spec = get_encoder(base)
    model = SentenceTransformer(spec.model_path(), device=device)
    model.max_seq_length = spec.max_tokens
    get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    dim = get_dim()
    if dim is not None and int(dim) != adapter.n_features_in_:
        raise ValueError(f"base: {spec.name} embeds in {dim} dimensions, but the adapter has dimension "
                         f"{adapter.n_features_in_}")
    base_modules = list(model.children())
    if adapter.form == "augmented":
        query_modules = base_modules + [_dense(Dense, adapter.operator_.T)]
        doc_modules = [copy.deepcopy(m) for m in base_modules]
    else:
        query_modules = base_modules + [_dense(Dense, adapter.query_map_)]
        doc_modules = [copy.deepcopy(m) for m in base_modules] + [_dense(Dense, adapter.doc_map_)]
    router = Router.for_query_document(query_modules=query_modules, document_modules=doc_modules)
    prompts = {"query": spec.query_prefix, "document": spec.document_prefix}
    exported = SentenceTransformer(modules=[router], device=device, prompts=prompts, similarity_fn_name="dot")
    exported.max_seq_length = spec.max_tokens
    import json

    from .._atomic import building_folder

    dest = Path(out)
    with building_folder(dest) as tmp:
        exported.save(str(tmp))
        manifest = {"format": "asymgeo-export", "files": _files_under(tmp), "base": spec.name,
                    "geometry": adapter.geometry_, "form": adapter.form,
                    "rank": int(adapter.query_map_.shape[0])}
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    logger.info("exported %s adapter (%s) on %s to %s", adapter.geometry_, adapter.form, spec.name, dest)
    return dest
