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
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .adapter import Adapter

__all__ = ["export_sentence_transformers"]

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


def _check_destination(dest: Path, overwrite: bool) -> None:
    """Refuse, before any work, a destination that would replace something not ours."""
    if not dest.exists():
        return
    if not dest.is_dir():
        raise ValueError(f"out: {dest} exists and is not a folder")
    if not any(dest.iterdir()):
        return  # an empty folder holds nothing to lose
    if not (dest / "modules.json").is_file():
        raise ValueError(f"out: {dest} exists and is not a sentence-transformers model folder; "
                         "choose a new folder (nothing was written)")
    if not overwrite:
        raise ValueError(f"out: {dest} already holds a model; pass overwrite=True (--overwrite) to replace it")


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
    dest = Path(out)
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"out: {dest} exists and is not a folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        exported.save(str(tmp))
        old = None
        if dest.exists():
            old = dest.parent / f".{dest.name}.old-{os.getpid()}"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(dest, old)
        os.replace(tmp, dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logger.info("exported %s adapter (%s) on %s to %s", adapter.geometry_, adapter.form, spec.name, dest)
    return dest
