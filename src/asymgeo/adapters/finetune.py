"""The full fine-tune peer baseline: tune the encoder itself, re-encode the corpus, report the cost.

asymgeo adapts *frozen* embeddings; the obvious alternative a team weighs it against is to
fine-tune the encoder on the same training queries and re-index.  :func:`finetune_baseline`
does exactly that on the adaptation split of :func:`~asymgeo.adapters.workflow.load_adaptation_data`
(the same training, validation and test query ids as ``asymgeo fit``):

1. training pairs ``(query text, positive document text)``, one per positive (grade >= 1)
   of every training query (``max_train``: a seeded subset of the training queries, as
   ``fit --n-train`` takes it), texts formatted by the encoder's conventions
   (:class:`~asymgeo.data.EncoderSpec`: query / document prefixes,
   ``title + " " + text``, truncation at ``max_tokens``), the conventions the cache's
   ``meta.json`` records and :func:`~asymgeo.data.load_embeddings` has verified;
2. sentence-transformers' ``SentenceTransformerTrainer`` with ``MultipleNegativesRankingLoss``
   (in-batch negatives, scale 20, cosine similarity), a no-duplicates batch sampler (a text
   twice in one batch would be its own negative), AdamW with a linear decay over the
   largest candidate epoch count, seeded (``seed``), on CUDA when available else on the CPU
   with one torch thread per usable core;
3. after each candidate epoch count ``e`` the corpus, the validation and the test queries
   are re-encoded with the model as it stands, rounded to float16 as the cache stores
   frozen embeddings, and scored by exact full-corpus search (trec_eval tie order, as
   :func:`~asymgeo.adapters.workflow.ndcg_at_10` with ``corpus_ids``); the epoch count with
   the highest mean validation NDCG@10 is chosen (ties: fewer epochs), and its test
   per-query NDCG@10 is the result;
4. the costs are measured: training seconds (wall and process CPU, evaluation excluded),
   corpus re-encoding seconds per pass, documents per second, and the re-encoding time
   projected linearly to MS MARCO's 8,841,823 passages.

The result is written atomically as JSON (:data:`FINETUNE_FORMAT`); calling again with
the same configuration returns the saved result without loading a model (``resumed``).
torch, sentence-transformers, ``datasets`` and ``accelerate`` (the ``finetune`` extra)
are imported inside the functions only.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FinetuneResult", "finetune_baseline", "load_finetune_result", "default_finetune_path",
           "FINETUNE_FORMAT", "MSMARCO_PASSAGES"]

#: ``format`` of the result JSON.
FINETUNE_FORMAT = "asymgeo-finetune/1"
#: Passages of the MS MARCO passage corpus, the size the re-encoding time is projected to.
MSMARCO_PASSAGES = 8_841_823
#: Texts per forward pass when re-encoding (the shared caches were encoded with 32).
ENCODE_BATCH_SIZE = 32
_LOSS = "MultipleNegativesRankingLoss(scale=20, cos_sim)"
_SAMPLER = "no_duplicates"


@dataclass
class FinetuneResult:
    """Outcome of :func:`finetune_baseline`.

    Attributes
    ----------
    dataset, encoder : names.
    config : the settings that identify the run (a rerun with the same ones resumes).
    chosen_epochs : epoch count chosen on validation.
    test_query_ids : test query ids, in ``load_adaptation_data(...).test.query_ids`` order.
    test_ndcg : (n_test,) per-query NDCG@10 of the tuned encoder (``chosen_epochs``).
    frozen_test_ndcg : (n_test,) per-query NDCG@10 of the frozen cache, same order, to pair against.
    test_ndcg_by_epoch : per-query test NDCG@10 of every candidate epoch count.
    validation_query_ids, validation_ndcg_by_epoch, frozen_validation_ndcg : the same on validation.
    validation_ndcg : mean validation NDCG@10 per candidate epoch count (what chose).
    test_subsets : ``{"seen": ids, "unseen": ids}``: test queries with / without a relevant
        document that is a positive of the training queries used.
    costs : measured seconds (see :func:`finetune_baseline`).
    versions : package versions.
    seed : the training seed.
    path : where the JSON lies (None if not written).
    resumed : True when read back from ``path`` instead of computed.
    embeddings : the tuned ``corpus``, ``validation`` and ``test`` query embeddings of the chosen
        epoch count (float16, as searched); only after a computed run, never saved.
    """

    dataset: str
    encoder: str
    config: dict[str, Any]
    chosen_epochs: int
    test_query_ids: list[str]
    test_ndcg: np.ndarray
    frozen_test_ndcg: np.ndarray
    test_ndcg_by_epoch: dict[int, np.ndarray]
    validation_query_ids: list[str]
    validation_ndcg_by_epoch: dict[int, np.ndarray]
    frozen_validation_ndcg: np.ndarray
    validation_ndcg: dict[int, float]
    test_subsets: dict[str, list[str]]
    costs: dict[str, Any]
    versions: dict[str, str]
    seed: int
    split: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    resumed: bool = False
    embeddings: dict[str, np.ndarray] | None = field(default=None, repr=False)

    @property
    def test_mean(self) -> float:
        """Mean test NDCG@10 of the tuned encoder."""
        return float(np.mean(self.test_ndcg))

    @property
    def frozen_test_mean(self) -> float:
        """Mean test NDCG@10 of the frozen cache."""
        return float(np.mean(self.frozen_test_ndcg))

    def comparison(self, *, subset: str | None = None, n_boot: int = 10_000, seed: int = 0) -> Any:
        """Paired comparison tuned minus frozen (:func:`~asymgeo.retrieval.compare.paired_comparison`).

        ``mean_diff = mean_q (ndcg_tuned(q) - ndcg_frozen(q))`` over the test queries, or over
        ``subset`` (``"seen"`` / ``"unseen"``, see ``test_subsets``), with a bootstrap 95% interval.
        """
        from ..retrieval.compare import paired_comparison

        a = dict(zip(self.test_query_ids, self.test_ndcg.tolist()))
        b = dict(zip(self.test_query_ids, self.frozen_test_ndcg.tolist()))
        if subset is not None:
            if subset not in self.test_subsets:
                raise ValueError(f"subset: expected one of {sorted(self.test_subsets)} or None, got {subset!r}")
            keep = set(self.test_subsets[subset])
            a = {q: v for q, v in a.items() if q in keep}
            b = {q: v for q, v in b.items() if q in keep}
        return paired_comparison(a, b, n_boot=n_boot, seed=seed)

    def as_json(self) -> dict[str, Any]:
        """The JSON document :func:`finetune_baseline` writes (layout in :func:`load_finetune_result`)."""
        def by_epoch(d: Mapping[int, np.ndarray]) -> dict[str, list[float]]:
            return {str(e): np.asarray(v, dtype=np.float64).tolist() for e, v in sorted(d.items())}

        return {
            "format": FINETUNE_FORMAT,
            "method": "full fine-tune of the encoder (sentence-transformers), re-encoded corpus",
            "dataset": self.dataset,
            "encoder": self.encoder,
            "config": self.config,
            "seed": self.seed,
            "versions": self.versions,
            "split": self.split,
            "chosen_epochs": self.chosen_epochs,
            "selection": {"rule": "highest mean validation NDCG@10 over the candidate epoch counts; ties: fewer epochs",
                          "validation_ndcg@10": {str(e): v for e, v in sorted(self.validation_ndcg.items())},
                          "frozen_validation_ndcg@10": float(np.mean(self.frozen_validation_ndcg))},
            "test": {"query_ids": list(self.test_query_ids),
                     "ndcg@10": np.asarray(self.test_ndcg, dtype=np.float64).tolist(),
                     "frozen_ndcg@10": np.asarray(self.frozen_test_ndcg, dtype=np.float64).tolist(),
                     "ndcg@10_by_epoch": by_epoch(self.test_ndcg_by_epoch),
                     "mean_ndcg@10": self.test_mean, "frozen_mean_ndcg@10": self.frozen_test_mean,
                     "subsets": self.test_subsets},
            "validation": {"query_ids": list(self.validation_query_ids),
                           "ndcg@10_by_epoch": by_epoch(self.validation_ndcg_by_epoch),
                           "frozen_ndcg@10": np.asarray(self.frozen_validation_ndcg, dtype=np.float64).tolist()},
            "costs": self.costs,
        }


def _check_epochs(epochs: Any) -> list[int]:
    if isinstance(epochs, bool):
        raise ValueError(f"epochs: expected a positive integer or a sequence of them, got {epochs!r}")
    if isinstance(epochs, (int, np.integer)):
        if epochs < 1:
            raise ValueError(f"epochs: expected a positive integer or a sequence of them, got {epochs!r}")
        return list(range(1, int(epochs) + 1))
    try:
        values = list(epochs)
    except TypeError:
        raise ValueError(f"epochs: expected a positive integer or a sequence of them, got {epochs!r}") from None
    if not values or any(isinstance(e, bool) or not isinstance(e, (int, np.integer)) or e < 1 for e in values):
        raise ValueError(f"epochs: expected a non-empty sequence of positive integers, got {epochs!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"epochs: candidate epoch counts must be distinct, got {epochs!r}")
    return sorted(int(e) for e in values)


def _check_args(learning_rate: Any, batch_size: Any, seed: Any, max_train: Any) -> tuple[float, int, int, int | None]:
    from .._validation import check_int

    if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float, np.floating)) \
            or not np.isfinite(learning_rate) or learning_rate < 0:
        raise ValueError(f"learning_rate: expected a finite number >= 0, got {learning_rate!r}")
    batch_size = check_int(batch_size, "batch_size", min_value=2)
    seed = check_int(seed, "seed", min_value=0)
    if max_train is not None:
        max_train = check_int(max_train, "max_train", min_value=2)
    return float(learning_rate), batch_size, seed, max_train


def _training_imports() -> dict[str, Any]:
    """torch, sentence-transformers and the trainer's ``datasets`` / ``accelerate``, or one clear ImportError."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    mods: dict[str, Any] = {}
    missing = []
    for name in ("torch", "sentence_transformers", "datasets", "accelerate"):
        try:
            mods[name] = __import__(name)
        except ImportError:
            missing.append(name.replace("_", "-"))
    if missing:
        raise ImportError(f"finetune_baseline needs {', '.join(missing)} (sentence-transformers' trainer needs torch, "
                          "datasets and accelerate); install asymgeo[finetune]")
    return mods


def default_finetune_path(dataset: str, encoder: str, config: Mapping[str, Any]) -> Path:
    """``$ASYMGEO_FINETUNE_DIR`` (else ``~/.cache/asymgeo/finetune``) ``/<dataset>-<encoder>-<key>.json``,
    ``key`` the first 12 hex digits of the SHA-256 of the canonical JSON of ``config``."""
    import hashlib

    root = Path(os.environ.get("ASYMGEO_FINETUNE_DIR") or Path.home() / ".cache" / "asymgeo" / "finetune")
    key = hashlib.sha256(json.dumps(dict(config), sort_keys=True).encode("utf-8")).hexdigest()[:12]
    return root / f"{dataset}-{encoder}-{key}.json"


def load_finetune_result(path: str | os.PathLike) -> FinetuneResult:
    """Read a result written by :func:`finetune_baseline`.

    Layout: ``format``, ``dataset``, ``encoder``, ``config`` (what identifies the run),
    ``seed``, ``versions``, ``split``, ``chosen_epochs``, ``selection``
    (``validation_ndcg@10`` per candidate epoch count), ``test`` (``query_ids``, ``ndcg@10``,
    ``frozen_ndcg@10``, ``ndcg@10_by_epoch``, means, ``subsets``), ``validation``
    (``query_ids``, ``ndcg@10_by_epoch``, ``frozen_ndcg@10``), ``costs``.

    Raises
    ------
    ValueError
        The file is not such a result (wrong ``format``, a missing field, arrays whose
        lengths differ from their query ids).
    """
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a fine-tune result (invalid JSON: {exc.msg} at line {exc.lineno})") from None
    if not isinstance(doc, dict) or doc.get("format") != FINETUNE_FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise ValueError(f"{path}: not a fine-tune result (format {got!r}, expected {FINETUNE_FORMAT!r})")
    try:
        test, val = doc["test"], doc["validation"]
        tq, vq = list(test["query_ids"]), list(val["query_ids"])

        def arr(values: Any, n: int, what: str) -> np.ndarray:
            a = np.asarray(values, dtype=np.float64)
            if a.shape != (n,):
                raise ValueError(f"{path}: {what} has shape {a.shape}, expected ({n},) like its query ids")
            return a

        res = FinetuneResult(
            dataset=doc["dataset"], encoder=doc["encoder"], config=doc["config"],
            chosen_epochs=int(doc["chosen_epochs"]), test_query_ids=tq,
            test_ndcg=arr(test["ndcg@10"], len(tq), "test.ndcg@10"),
            frozen_test_ndcg=arr(test["frozen_ndcg@10"], len(tq), "test.frozen_ndcg@10"),
            test_ndcg_by_epoch={int(e): arr(v, len(tq), f"test.ndcg@10_by_epoch[{e}]")
                                for e, v in test["ndcg@10_by_epoch"].items()},
            validation_query_ids=vq,
            validation_ndcg_by_epoch={int(e): arr(v, len(vq), f"validation.ndcg@10_by_epoch[{e}]")
                                      for e, v in val["ndcg@10_by_epoch"].items()},
            frozen_validation_ndcg=arr(val["frozen_ndcg@10"], len(vq), "validation.frozen_ndcg@10"),
            validation_ndcg={int(e): float(v) for e, v in doc["selection"]["validation_ndcg@10"].items()},
            test_subsets={k: list(v) for k, v in test["subsets"].items()},
            costs=doc["costs"], versions=doc["versions"], seed=int(doc["seed"]), split=doc.get("split", {}),
            path=path, resumed=True)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a complete fine-tune result (field {exc} missing or malformed)") from None
    return res


def _offline_model_folder(spec: Any, model_path: str | os.PathLike | None) -> str:
    """The local folder of the encoder's weights, or one FileNotFoundError line; never a network call.

    A folder is used as it is; a hub id is looked up in the local Hugging Face cache only
    (``snapshot_download(..., local_files_only=True)``), so a model that is not on this
    machine fails at once instead of after the hub's retries.
    """
    where = str(model_path) if model_path is not None else spec.model_path()
    if Path(where).is_dir():
        return where
    try:
        from huggingface_hub import snapshot_download

        return str(snapshot_download(where, local_files_only=True))
    except Exception as exc:  # LocalEntryNotFoundError, HFValidationError (not a repo id), ...
        raise FileNotFoundError(
            f"encoder {spec.name!r}: model {where!r} is not available offline (no such folder, and not in the local "
            f"Hugging Face cache: {type(exc).__name__}); download it once with network access or pass "
            "model_path=<folder>") from None


def _versions(mods: Mapping[str, Any]) -> dict[str, str]:
    from .._runtime import package_versions

    out = dict(package_versions())
    for name in ("torch", "sentence_transformers", "datasets", "accelerate"):
        out[name.replace("_", "-")] = str(getattr(mods[name], "__version__", "?"))
    try:
        import transformers

        out["transformers"] = transformers.__version__
    except ImportError:  # pragma: no cover - sentence-transformers depends on it
        pass
    return out


def _corpus_texts(ds: Any, spec: Any, corpus_ids: Sequence[str]) -> list[str]:
    texts: list[str] = []
    ids: list[str] = []
    for _id, title, text in ds.iter_corpus():
        ids.append(_id)
        texts.append(spec.format_document(title, text))
    if len(ids) != len(corpus_ids) or any(a != b for a, b in zip(ids, corpus_ids)):
        raise ValueError(f"{ds.name}: corpus.jsonl ids differ from the embedding cache's corpus_ids.txt "
                         f"({len(ids)} vs {len(corpus_ids)} documents); re-encode the cache")
    return texts


def _training_pairs(d: Any, spec: Any, doc_texts: Sequence[str],
                    train_ids: Sequence[str]) -> tuple[list[str], list[str]]:
    row = {str(c): i for i, c in enumerate(d.corpus_ids)}
    anchors: list[str] = []
    positives: list[str] = []
    for q in train_ids:
        for doc_id, grade in (d.qrels.get(q) or {}).items():
            if grade >= 1 and doc_id in row:
                anchors.append(spec.format_query(d.queries[q]))
                positives.append(doc_texts[row[doc_id]])
    return anchors, positives


def _projection(n_docs: int, seconds: float, device: str, threads: int) -> dict[str, Any]:
    rate = n_docs / seconds if seconds > 0 else float("inf")
    projected = MSMARCO_PASSAGES / rate
    text = (f"{MSMARCO_PASSAGES:,} passages / ({n_docs:,} documents / {seconds:.1f} s = {rate:.2f} documents/s) "
            f"= {projected:,.0f} s = {projected / 3600:.1f} h on {device}"
            + (f" with {threads} torch threads" if device == "cpu" else "")
            + "; linear in the corpus size, same document length distribution assumed")
    return {"documents_per_second": rate, "msmarco_passages": MSMARCO_PASSAGES,
            "msmarco_reencode_seconds": projected, "msmarco_projection": text}


def finetune_baseline(  # noqa: C901 - one flat sequence: data, pairs, training with evaluations, report
    dataset: Any,
    encoder: str = "all-MiniLM-L6-v2",
    *,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    epochs: int | Sequence[int] = (1,),
    learning_rate: float = 2e-5,
    batch_size: int = 32,
    seed: int = 0,
    max_train: int | None = None,
    device: str | None = None,
    model_path: str | None = None,
    out: str | os.PathLike | None = None,
    overwrite: bool = False,
    progress: bool = False,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
) -> FinetuneResult:
    """Fine-tune ``encoder`` on ``dataset``'s training queries and score it like the adapters.

    See the module docstring for the procedure.  The tuned model's NDCG@10 of query ``q``
    is Appendix F's binary

    ``NDCG@10(q) = sum_{i<=10} rel_i / log2(i + 1) / sum_{i<=min(10, |R_q|)} 1 / log2(i + 1)``

    over the exact top 10 of ``s(q, d) = f(q) . f(d)`` for every corpus document ``d``,
    ``f`` the tuned encoder (L2-normalised, float16-rounded), ties in trec_eval order.
    The epoch count chosen is ``argmax_e mean_{q in V} NDCG@10_e(q)`` (ties: smallest ``e``).

    Parameters
    ----------
    dataset : name or BEIR folder, with an embedding cache of ``encoder`` (the frozen figures,
        the split and the training queries come from it: :func:`~asymgeo.adapters.workflow.load_adaptation_data`).
    encoder : registry name (:func:`~asymgeo.data.get_encoder`); its weights are opened offline.
    epochs : candidate epoch counts: an int ``E`` means ``1..E``, a sequence the counts to
        evaluate; training runs to the largest, and the learning rate decays linearly over it.
    learning_rate, batch_size : AdamW's peak learning rate; pairs per batch (in-batch negatives).
    seed : the trainer's seed (initial data order, dropout) and the ``max_train`` subset.
    max_train : train on a seeded subset of this many training queries (all by default).
    device : torch device; default CUDA when available, else CPU.
    model_path : read the weights from this folder instead of the encoder's own.
    out : the JSON result; default :func:`default_finetune_path` (keyed by the configuration).
        An existing result with the same ``config`` is returned as it is (``resumed``); one
        with another ``config`` is refused unless ``overwrite``.
    progress : progress bars for training and every re-encoding pass.
    on_epoch : called as ``on_epoch(e, {"validation": mean, "test": mean})`` after each evaluation.

    Returns
    -------
    FinetuneResult
        ``costs``: ``train_seconds`` / ``train_cpu_seconds`` (wall / process CPU, summed over
        epochs, evaluation excluded) with ``train_seconds_by_epoch``;
        ``corpus_encode_seconds`` (mean over the re-encoding passes, ``..._by_pass``);
        ``queries_encode_seconds``; ``n_documents``; ``documents_per_second``;
        ``msmarco_reencode_seconds`` and the arithmetic in ``msmarco_projection``;
        ``device``, ``torch_threads``, ``load_average_start`` / ``_end`` (1, 5, 15 minutes)
        and ``total_seconds``.

    Raises
    ------
    ImportError
        torch, sentence-transformers, datasets or accelerate is missing (one line naming them).
    FileNotFoundError
        The model cannot be opened offline (one line; no hub retries: ``HF_HUB_OFFLINE=1``
        unless the caller set it), or the dataset / cache is missing.
    ValueError
        A bad argument (named), a split without judged queries, fewer than two training
        pairs, or an existing ``out`` written with another configuration.
    """
    from .._atomic import atomic_write_text
    from .._runtime import available_cpus, json_default
    from ..data import get_encoder, ids_digest, load_beir
    from ..kernels.folds import nested_subsets
    from ..retrieval.generalisation import seen_document_split, seen_documents
    from .workflow import _per_query_ndcg, load_adaptation_data

    candidates = _check_epochs(epochs)
    learning_rate, batch_size, seed, max_train = _check_args(learning_rate, batch_size, seed, max_train)
    spec = get_encoder(encoder)

    t_start = time.perf_counter()
    load_start = list(os.getloadavg())
    d = load_adaptation_data(dataset, encoder, data_dir=data_dir, cache_dir=cache_dir)
    train_ids = list(dict.fromkeys(d.triples.query_ids))
    if max_train is not None:
        if max_train > len(train_ids):
            raise ValueError(f"max_train: {max_train} exceeds the {len(train_ids)} training queries of {d.dataset}")
        train_ids = list(nested_subsets(train_ids, sizes=[max_train], seed=seed)[max_train])
    config = {"dataset": d.dataset, "encoder": d.encoder, "epochs": candidates, "learning_rate": learning_rate,
              "batch_size": batch_size, "seed": seed, "max_train": max_train, "loss": _LOSS,
              "batch_sampler": _SAMPLER, "max_tokens": spec.max_tokens,
              "prefixes": {"query": spec.query_prefix, "document": spec.document_prefix},
              "train_ids_sha256": ids_digest(train_ids),
              "model_path": None if model_path is None else str(model_path)}
    dest = Path(out) if out is not None else default_finetune_path(d.dataset, d.encoder, config)
    if dest.exists():
        old = load_finetune_result(dest)
        if old.config == config:
            return old
        if not overwrite:
            diff = sorted(k for k in set(old.config) | set(config) if old.config.get(k) != config.get(k))
            raise ValueError(f"{dest}: holds a fine-tune result of another configuration (differs in "
                             f"{', '.join(diff)}); pass overwrite=True or another out")

    mods = _training_imports()
    torch = mods["torch"]
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.base.sampler import BatchSamplers
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from transformers import TrainerCallback

    from ..data.encoders import SentenceTransformerEncoder, check_device

    device = check_device(device)
    local = _offline_model_folder(spec, model_path)
    enc = SentenceTransformerEncoder(replace(spec, model=local, package=None), device=device,
                                     batch_size=ENCODE_BATCH_SIZE)
    model = enc.model
    threads = int(torch.get_num_threads()) if device == "cpu" else 0

    ds = load_beir(dataset, data_dir=data_dir)
    doc_texts = _corpus_texts(ds, spec, d.corpus_ids)
    anchors, positives = _training_pairs(d, spec, doc_texts, train_ids)
    if len(anchors) < 2:
        raise ValueError(f"{d.dataset}: {len(anchors)} training pair(s) from {len(train_ids)} training queries; "
                         "in-batch negatives need at least 2")
    val_ids, test_ids = list(d.validation.query_ids), list(d.test.query_ids)
    val_texts = [spec.format_query(d.queries[q]) for q in val_ids]
    test_texts = [spec.format_query(d.queries[q]) for q in test_ids]
    cids = d.corpus_ids or None
    frozen_val = _per_query_ndcg(d.V, d.validation, d.corpus, None, cids)
    frozen_test = _per_query_ndcg(d.T, d.test, d.corpus, None, cids)

    def encode(texts: Sequence[str], bar: bool) -> np.ndarray:
        with torch.inference_mode():
            E = model.encode(list(texts), batch_size=ENCODE_BATCH_SIZE, normalize_embeddings=spec.normalize,
                             convert_to_numpy=True, show_progress_bar=bar)
        # rounded as the cache stores frozen embeddings, so tuned and frozen are searched alike
        return np.asarray(E, dtype=np.float16)

    val_by_epoch: dict[int, np.ndarray] = {}
    test_by_epoch: dict[int, np.ndarray] = {}
    kept: dict[str, np.ndarray] = {}  # the best epoch's tuned embeddings so far
    clock: dict[str, Any] = {"train": [], "train_cpu": [], "corpus": [], "queries": []}

    def evaluate(e: int) -> None:
        was_training = model.training
        model.eval()
        t0 = time.perf_counter()
        C = encode(doc_texts, progress)
        clock["corpus"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        V, T = encode(val_texts, False), encode(test_texts, False)
        clock["queries"].append(time.perf_counter() - t0)
        val_by_epoch[e] = _per_query_ndcg(V.astype(np.float32), d.validation, C, None, cids)
        test_by_epoch[e] = _per_query_ndcg(T.astype(np.float32), d.test, C, None, cids)
        if max(val_by_epoch, key=lambda k: (float(np.mean(val_by_epoch[k])), -k)) == e:  # best so far
            kept.clear()
            kept.update(corpus=C, validation=V, test=T)
        if on_epoch is not None:
            on_epoch(e, {"validation": float(np.mean(val_by_epoch[e])), "test": float(np.mean(test_by_epoch[e]))})
        if was_training:
            model.train()

    class _EpochClock(TrainerCallback):
        """Times each epoch's training and evaluates the candidate epoch counts (outside the clock)."""

        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            clock["train"].append(time.perf_counter() - self.t0)
            clock["train_cpu"].append(time.process_time() - self.c0)
            e = len(clock["train"])
            if e in candidates:
                evaluate(e)

    train_ds = Dataset.from_dict({"anchor": anchors, "positive": positives})
    with tempfile.TemporaryDirectory(prefix="asymgeo-finetune-") as tmp:
        args = SentenceTransformerTrainingArguments(
            output_dir=tmp, num_train_epochs=max(candidates), per_device_train_batch_size=batch_size,
            learning_rate=learning_rate, seed=seed, data_seed=seed, batch_sampler=BatchSamplers.NO_DUPLICATES,
            save_strategy="no", eval_strategy="no", logging_strategy="no", report_to="none",
            disable_tqdm=not progress, use_cpu=device == "cpu", dataloader_num_workers=0)
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=train_ds,
                                             loss=MultipleNegativesRankingLoss(model), callbacks=[_EpochClock()])
        trainer.train()
    if sorted(val_by_epoch) != candidates:
        raise RuntimeError(f"fine-tune: evaluated epochs {sorted(val_by_epoch)}, expected {candidates}")
    chosen = max(candidates, key=lambda k: (float(np.mean(val_by_epoch[k])), -k))

    n_docs = len(doc_texts)
    corpus_s = float(np.mean(clock["corpus"]))
    costs: dict[str, Any] = {
        "train_seconds": float(sum(clock["train"])), "train_cpu_seconds": float(sum(clock["train_cpu"])),
        "train_seconds_by_epoch": [float(s) for s in clock["train"]],
        "n_train_pairs": len(anchors), "n_train_queries": len(train_ids),
        "steps_per_epoch": int(np.ceil(len(anchors) / batch_size)),
        "corpus_encode_seconds": corpus_s, "corpus_encode_seconds_by_pass": [float(s) for s in clock["corpus"]],
        "queries_encode_seconds": float(np.mean(clock["queries"])),
        "n_documents": n_docs, **_projection(n_docs, corpus_s, device, threads),
        "device": device, "torch_threads": threads, "available_cpus": available_cpus(),
        "load_average_start": load_start, "load_average_end": list(os.getloadavg()),
        "total_seconds": time.perf_counter() - t_start,
    }
    seen = seen_documents(d.qrels, train_ids)
    split = seen_document_split({q: d.qrels[q] for q in test_ids}, seen)
    result = FinetuneResult(
        dataset=d.dataset, encoder=d.encoder, config=config, chosen_epochs=chosen, test_query_ids=test_ids,
        test_ndcg=test_by_epoch[chosen], frozen_test_ndcg=frozen_test, test_ndcg_by_epoch=test_by_epoch,
        validation_query_ids=val_ids, validation_ndcg_by_epoch=val_by_epoch, frozen_validation_ndcg=frozen_val,
        validation_ndcg={e: float(np.mean(v)) for e, v in val_by_epoch.items()},
        test_subsets={"seen": list(split.seen), "unseen": list(split.unseen)}, costs=costs,
        versions=_versions(mods), seed=seed,
        split={**d.split, "n_train_queries": len(train_ids), "train_ids_sha256": ids_digest(train_ids),
               "seen_definition": "a test query is seen when one of its relevant documents is a positive of "
                                  "the training queries used"},
        path=dest, resumed=False, embeddings=dict(kept))
    atomic_write_text(dest, json.dumps(result.as_json(), indent=1, default=json_default) + "\n")
    return result
