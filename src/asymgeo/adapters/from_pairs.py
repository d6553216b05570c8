"""``asymgeo.fit``: from a sentence-transformers model, pairs and a corpus to a fitted adapter.

The entry point for a user who holds a ``SentenceTransformer`` (or a model name) and
(query, positive[, negative]) pairs instead of a BEIR folder and an embedding cache:

>>> rep = asymgeo.fit(model, pairs, corpus=corpus)            # doctest: +SKIP
>>> st = asymgeo.attach_adapter(model, rep.adapter)            # doctest: +SKIP
>>> st.encode_query(["a question"]) @ st.encode_document(["a passage"]).T  # doctest: +SKIP

It writes the pairs' BEIR folder and embedding cache (:func:`asymgeo.data.pairs.prepare_pairs`)
and runs :func:`asymgeo.adapters.workflow.fit_adapter` on them, so the decision (``auto``), the
training protocol and the report are those of ``asymgeo fit DATASET``.
"""

from __future__ import annotations

import os
from typing import Any

from .workflow import FitReport, fit_adapter

__all__ = ["fit", "record_metadata"]


def record_metadata(rep: FitReport, extra: dict[str, Any] | None = None) -> None:
    """Give ``rep.adapter`` the ``metadata_`` that :func:`~asymgeo.adapters.save_adapter` writes
    and :func:`~asymgeo.adapters.load_adapter` reads back (encoder, dataset, metrics, split), so
    that an adapter used straight from memory exports with the same model card."""
    from .._version import __version__

    rep.adapter.metadata_ = {"encoder": rep.encoder, "dataset": rep.dataset, "metrics": rep.metrics,
                             "asymgeo_version": __version__,
                             "extra": {"versions": rep.versions, "split": rep.split, **(extra or {})}}


def fit(
    model: Any,
    train_pairs: Any,
    *,
    corpus: Any = None,
    eval_pairs: Any = None,
    geometry: str = "auto",
    rank: int = 16,
    out: str | os.PathLike | None = None,
    encoder: str | None = None,
    name: str | None = None,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    device: str | None = None,
    progress: bool = False,
    **options: Any,
) -> FitReport:
    """Fit a shared or dual adapter for ``model`` from relevance pairs and a corpus.

    Parameters
    ----------
    model : a ``SentenceTransformer`` in memory, or an encoder name, id or folder.
    train_pairs : (query, positive[, negative, ...]) pairs: tuples, dicts, a
        ``datasets.Dataset`` in ``SentenceTransformerTrainer``'s column layout (anchor,
        positive, negatives), or a JSONL file (:mod:`asymgeo.data.pairs`).
    corpus : the documents to search: mapping id -> text, list of texts or dicts, a JSONL
        file, or ``None`` (the pairs' own texts).  Positives missing from it are added.
    eval_pairs : held-out pairs, scored as the test split; ``None``: the pairs' queries are carved
        60 / 20 / 20 into training, validation and test.
    geometry : ``"auto"`` (default: train both families, keep shared unless dual is better on
        validation NDCG@10 by more than one standard error), ``"shared"`` or ``"dual"``.
    rank : adapter rank r (default 16).
    out : also save the adapter to this folder (:func:`~asymgeo.adapters.save_adapter`).
    encoder : the embedding cache's name for a model in memory that is not a registry
        encoder (default: the folder or id it was loaded from).
    name : the dataset folder's name (default ``pairs-<digest>``); ``data_dir`` and
        ``cache_dir``: where the folder and its embedding cache go (the defaults of
        ``asymgeo embed``).
    device : torch device for encoding and training.
    **options : any further keyword of :func:`~asymgeo.adapters.workflow.fit_adapter`
        (``form``, ``epochs``, ``learning_rates``, ``selection``, ``seed``, ...).

    Returns
    -------
    FitReport
        ``.adapter`` (with ``metadata_`` recording the fit, as a loaded adapter has),
        ``.metrics`` (frozen, closed-form and trained NDCG@10, the ``auto`` decision, the
        generalisation report), ``.dataset`` (the pairs folder's name), ``.encoder``.

    Raises
    ------
    ValueError, TypeError
        Bad pairs or corpus records (named by file and line or by index), a query that is both
        a training and an evaluation query, or any refusal of ``fit_adapter``.
    """
    from ..data.pairs import prepare_pairs
    from .io import check_output_folder

    if out is not None:
        check_output_folder(out)  # before any encoding or training
    ds, spec = prepare_pairs(model, train_pairs, corpus=corpus, eval_pairs=eval_pairs, encoder=encoder,
                             data_dir=data_dir, cache_dir=cache_dir, name=name, device=device, progress=progress)
    rep = fit_adapter(ds, spec, geometry=geometry, rank=rank, cache_dir=cache_dir, device=device,
                      progress=progress, **options)
    record_metadata(rep)
    if out is not None:
        from .io import save_adapter

        save_adapter(rep.adapter, out)
    return rep
