"""Training pairs and a corpus, as a sentence-transformers user holds them, turned into a dataset.

:func:`pairs_dataset` takes (query, positive[, negative, ...]) pairs and the corpus to
search, and writes the BEIR folder the rest of asymgeo reads (``corpus.jsonl``,
``queries.jsonl``, ``qrels/*.tsv``) under the data folder, so the user never writes one:

* pairs: a list of tuples or lists ``(query, positive, *negatives)``; a list of dicts with
  named fields (``anchor`` / ``query`` / ``question``, ``positive`` / ``pos`` / ``document`` /
  ``passage``, and any field starting with ``negative``), else read by position as
  ``SentenceTransformerTrainer`` reads its columns (first the anchor, then the positive, the
  rest negatives); a ``datasets.Dataset`` (anything with ``column_names`` whose rows are dicts),
  read the same way; or a JSONL file of such records (one object or array per line).  A column
  ``label`` or ``score`` is refused: those are scored pairs, not relevance pairs.
* corpus: a mapping ``id -> text`` (or ``id -> {"title", "text"}``), a list of texts (ids
  ``d0``, ``d1``, ...), a list of dicts with ``_id`` / ``id``, ``title`` and ``text``, a JSONL
  file of such objects, or ``None`` (the pairs' own positives and negatives are the corpus).

A positive or negative is found in the corpus by its text (``text``, or ``title + " " + text``);
one that is not there is added to the corpus (id ``p-`` and the first 12 hex digits of its text's
SHA-256).  Negatives are added to the corpus (searched as distractors) and written to
``negatives.tsv``: a training query's given negatives are its first hard negatives in training,
in their order, and the frozen model's mined negatives fill the other columns
(:mod:`asymgeo.data.triples`; ``Triples.given_counts``), as ``SentenceTransformerTrainer`` uses a
negative column.  A negative that is also one of the query's positives is not a negative and
is dropped.  A query's id is ``q-`` and the first 12 hex digits of its
text's SHA-256; pairs with the same query text are one query with several positives.

Splits: training pairs go to ``qrels/train.tsv`` and evaluation pairs to ``qrels/test.tsv``;
:func:`asymgeo.data.adaptation_split` then holds out a fifth of the training queries for
validation.  Without evaluation pairs the training pairs are written as ``qrels/test.tsv`` and
the split carves 60 / 20 / 20 training, validation and test queries from them.

The folder is ``<data_dir>/pairs-<digest>`` (the SHA-256 of its contents, first 12 hex digits)
unless ``name`` is given: the same pairs and corpus give the same folder, so its embedding
cache is reused and an interrupted encoding resumes.  It is built beside its place and moved
in complete (:func:`asymgeo._atomic.building_folder`); a folder of that name that asymgeo did
not write is never replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .beir import NEGATIVES_FILE, BeirDataset, document_text
from .paths import data_root

__all__ = ["PairsData", "read_pairs", "read_corpus", "pairs_dataset", "prepare_pairs", "PAIRS_MARKER",
           "QUERY_FIELDS", "POSITIVE_FIELDS"]

#: Written in every folder :func:`pairs_dataset` makes: its digest and sizes.
PAIRS_MARKER = "asymgeo_pairs.json"

#: Field names read as the query, then the positive, of a dict record (first match wins).
QUERY_FIELDS = ("anchor", "query", "question")
POSITIVE_FIELDS = ("positive", "pos", "document", "passage")
_SCORE_FIELDS = ("label", "score", "labels", "scores")


@dataclass
class PairsData:
    """Pairs read by :func:`read_pairs`: ``(query, positive, negatives)`` per record and where each came from."""

    pairs: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)
    where: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.pairs)


def _text(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{where}: {what}: expected a text, got {type(value).__name__} {value!r:.60}")
    if not value.strip():
        raise ValueError(f"{where}: {what}: empty text")
    return value


def _negatives(values: Sequence[Any], where: str, what: str) -> tuple[str, ...]:
    out: list[str] = []
    for i, v in enumerate(values):
        if isinstance(v, (list, tuple)):
            out += [_text(x, where, f"{what}[{i}][{j}]") for j, x in enumerate(v)]
        elif v is not None:
            out.append(_text(v, where, f"{what}[{i}]" if len(values) > 1 else what))
    return tuple(out)


def _record(rec: Any, where: str, columns: Sequence[str] | None = None) -> tuple[str, str, tuple[str, ...]]:
    """One pair from a tuple / list (by position) or a dict (by name, else by position)."""
    if isinstance(rec, Mapping):
        keys = list(columns) if columns is not None else list(rec)
        scored = [k for k in keys if str(k).lower() in _SCORE_FIELDS]
        if scored:
            raise ValueError(f"{where}: field {scored[0]!r}: scored pairs are not relevance pairs; give "
                             "(query, positive[, negative]) records")
        low = {str(k).lower(): k for k in keys}
        qk = next((low[f] for f in QUERY_FIELDS if f in low), None)
        pk = next((low[f] for f in POSITIVE_FIELDS if f in low), None)
        if qk is not None and pk is not None:
            nk = [k for k in keys if str(k).lower().startswith("negative") or str(k).lower() in ("neg", "negs")]
            return (_text(rec[qk], where, repr(qk)), _text(rec[pk], where, repr(pk)),
                    _negatives([rec[k] for k in nk], where, "negatives"))
        if len(keys) < 2:
            raise ValueError(f"{where}: expected a query and a positive (fields {', '.join(QUERY_FIELDS)} and "
                             f"{', '.join(POSITIVE_FIELDS)}, or two columns), got fields {keys}")
        return (_text(rec[keys[0]], where, repr(keys[0])), _text(rec[keys[1]], where, repr(keys[1])),
                _negatives([rec[k] for k in keys[2:]], where, "negatives"))
    if isinstance(rec, (tuple, list)):
        if len(rec) < 2:
            raise ValueError(f"{where}: expected (query, positive[, negative, ...]), got {len(rec)} item(s)")
        return _text(rec[0], where, "query"), _text(rec[1], where, "positive"), _negatives(rec[2:], where, "negative")
    raise TypeError(f"{where}: expected a (query, positive[, negative]) tuple or a dict, got {type(rec).__name__}")


def _jsonl(path: Path, what: str) -> Iterable[tuple[str, Any]]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such {what} file")
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield f"{path}, line {lineno}", json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}, line {lineno}: invalid JSON ({exc.msg})") from None


def read_pairs(pairs: Any, what: str = "pairs") -> PairsData:
    """Read relevance pairs in any accepted layout (module docstring); errors name the record.

    Raises
    ------
    ValueError, TypeError
        A record without a query and a positive, an empty or non-text field, a scored-pair
        column, or no records at all; the message names the file and line, or the index.
    """
    out = PairsData()
    if isinstance(pairs, (str, os.PathLike)):
        for where, rec in _jsonl(Path(pairs), what):
            out.pairs.append(_record(rec, where))
            out.where.append(where)
    elif hasattr(pairs, "column_names") and not isinstance(pairs, Mapping):  # a datasets.Dataset
        columns = list(pairs.column_names)
        for i, rec in enumerate(pairs):
            where = f"{what}[{i}]"
            out.pairs.append(_record(rec, where, columns))
            out.where.append(where)
    elif isinstance(pairs, Iterable) and not isinstance(pairs, (Mapping, bytes)):
        for i, rec in enumerate(pairs):
            where = f"{what}[{i}]"
            out.pairs.append(_record(rec, where))
            out.where.append(where)
    else:
        raise TypeError(f"{what}: expected a list of (query, positive[, negative]) records, a datasets.Dataset or "
                        f"a JSONL file, got {type(pairs).__name__}")
    if not out.pairs:
        raise ValueError(f"{what}: no pairs")
    return out


def _corpus_record(where: str, doc_id: Any, rec: Any) -> tuple[str, str, str]:
    if not isinstance(doc_id, str) or not doc_id.strip():
        raise ValueError(f"{where}: document id: expected a non-empty text, got {doc_id!r}")
    if any(c in doc_id for c in "\t\r\n"):
        raise ValueError(f"{where}: document id {doc_id!r} holds a tab or line break")
    if isinstance(rec, Mapping):
        title = rec.get("title") or ""
        if not isinstance(title, str):
            raise TypeError(f"{where}: 'title': expected a text, got {type(title).__name__}")
        return doc_id, title, _text(rec.get("text"), where, "'text'")
    return doc_id, "", _text(rec, where, "text")


def _corpus_items(corpus: Any) -> Iterable[tuple[str, Any, Any]]:
    """``(where, id, record)`` of every document, in order."""
    if isinstance(corpus, (str, os.PathLike)):
        for i, (where, rec) in enumerate(_jsonl(Path(corpus), "corpus")):
            if isinstance(rec, str):
                yield where, f"d{i}", rec
            elif isinstance(rec, Mapping):
                yield where, rec.get("_id", rec.get("id")), rec
            else:
                raise TypeError(f"{where}: expected an object with _id and text, or a text")
    elif isinstance(corpus, Mapping):
        for doc_id, rec in corpus.items():
            yield f"corpus[{doc_id!r}]", doc_id, rec
    elif isinstance(corpus, Iterable) and not isinstance(corpus, bytes):
        for i, rec in enumerate(corpus):
            yield f"corpus[{i}]", (rec.get("_id", rec.get("id")) if isinstance(rec, Mapping) else f"d{i}"), rec
    else:
        raise TypeError(f"corpus: expected a mapping id -> text, a list of texts or dicts, or a JSONL file, "
                        f"got {type(corpus).__name__}")


def read_corpus(corpus: Any) -> list[tuple[str, str, str]]:
    """The corpus as ``(id, title, text)`` records (module docstring); errors name the record.

    Raises
    ------
    ValueError, TypeError
        A record without text, a duplicate id, an id with a tab or line break.
    """
    records: list[tuple[str, str, str]] = []
    seen: dict[str, str] = {}
    for where, doc_id, rec in _corpus_items(corpus):
        record = _corpus_record(where, doc_id, rec)
        if record[0] in seen:
            raise ValueError(f"{where}: document id {record[0]!r} already given at {seen[record[0]]}")
        seen[record[0]] = where
        records.append(record)
    return records


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _build(train: PairsData, corpus: list[tuple[str, str, str]], evaluation: PairsData | None
           ) -> tuple[list[tuple[str, str, str]], dict[str, str], dict[str, list[tuple[str, str]]],
                      list[tuple[str, str]]]:
    """Corpus records (with added positives / negatives), queries id -> text, qrels per split,
    and the given negatives as ``(query id, doc id)`` rows in the pairs' order."""
    docs = list(corpus)
    by_text: dict[str, str] = {}
    for doc_id, title, text in docs:
        by_text.setdefault(text, doc_id)
        by_text.setdefault(document_text(title, text), doc_id)
    ids = {d for d, _t, _x in docs}

    def doc(text: str) -> str:
        found = by_text.get(text)
        if found is None:
            found = f"p-{_digest(text)}"
            while found in ids:  # a user's id that happens to look like ours
                found = f"p-{_digest(found + text)}"
            docs.append((found, "", text))
            ids.add(found)
            by_text[text] = found
        return found

    queries: dict[str, str] = {}
    qrels: dict[str, list[tuple[str, str]]] = {}
    negatives: dict[str, list[str]] = {}
    owner: dict[str, tuple[str, str]] = {}
    parts = [("train" if evaluation is not None else "test", train)]
    if evaluation is not None:
        parts.append(("test", evaluation))
    for split, data in parts:
        rows = qrels.setdefault(split, [])
        seen: set[tuple[str, str]] = set()
        for (q, pos, negs), where in zip(data.pairs, data.where):
            qid = f"q-{_digest(q)}"
            first = owner.setdefault(qid, (split, where))
            if first[0] != split:
                raise ValueError(f"{where}: query {q!r:.80} is also a training query ({first[1]}); a query "
                                 "trained on cannot be scored as held out: remove it from one of them")
            queries[qid] = q
            d = doc(pos)
            if (qid, d) not in seen:
                seen.add((qid, d))
                rows.append((qid, d))
            for n in negs:
                d = doc(n)
                if d not in negatives.setdefault(qid, []):
                    negatives[qid].append(d)
    positives = {(q, d) for rows in qrels.values() for q, d in rows}
    given = [(q, d) for q, ds in negatives.items() for d in ds if (q, d) not in positives]
    return docs, queries, qrels, given


def _write(folder: Path, docs: list[tuple[str, str, str]], queries: dict[str, str],
           qrels: dict[str, list[tuple[str, str]]], marker: dict[str, Any], negatives: list[tuple[str, str]]) -> None:
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for doc_id, title, text in docs:
            fh.write(json.dumps({"_id": doc_id, "title": title, "text": text}, ensure_ascii=False) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as fh:
        for qid, text in queries.items():
            fh.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    (folder / "qrels").mkdir()
    for split, rows in qrels.items():
        with open(folder / "qrels" / f"{split}.tsv", "w", encoding="utf-8") as fh:
            fh.write("query-id\tcorpus-id\tscore\n")
            fh.writelines(f"{q}\t{d}\t1\n" for q, d in rows)
    if negatives:
        with open(folder / NEGATIVES_FILE, "w", encoding="utf-8") as fh:
            fh.write("query-id\tcorpus-id\n")
            fh.writelines(f"{q}\t{d}\n" for q, d in negatives)
    (folder / PAIRS_MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")


def pairs_dataset(train_pairs: Any, *, corpus: Any = None, eval_pairs: Any = None,
                  data_dir: str | os.PathLike | None = None, name: str | None = None) -> BeirDataset:
    """Write (or find) the BEIR folder of ``train_pairs``, ``corpus`` and ``eval_pairs`` and open it.

    Parameters
    ----------
    train_pairs : the training pairs, in any layout of the module docstring.
    corpus : the documents to search (module docstring); ``None``: the pairs' own texts.
    eval_pairs : held-out pairs scored as the test split; ``None``: the pairs' queries are carved
        60 / 20 / 20 into training, validation and test (:func:`asymgeo.data.adaptation_split`).
    data_dir : where the folder goes (default ``$ASYMGEO_DATA_DIR``, ``~/.cache/asymgeo/datasets``).
    name : the folder's name (default ``pairs-<digest of its contents>``).

    Returns
    -------
    BeirDataset
        The dataset; its name keys the embedding cache.

    Raises
    ------
    ValueError, TypeError
        Bad records (named by file and line, or index), a query both in training and
        evaluation pairs, or a folder at ``name`` that asymgeo did not write.
    """
    from .._atomic import building_folder

    train = read_pairs(train_pairs, "train_pairs")
    evaluation = read_pairs(eval_pairs, "eval_pairs") if eval_pairs is not None else None
    docs = read_corpus(corpus) if corpus is not None else []
    docs, queries, qrels, negatives = _build(train, docs, evaluation)
    h = hashlib.sha256()
    for rec in (docs, sorted(queries.items()), sorted(qrels.items())):
        h.update(json.dumps(rec, ensure_ascii=False).encode("utf-8"))
    if negatives:  # pairs without negatives keep the digest (and the folder) they had before
        h.update(json.dumps(negatives, ensure_ascii=False).encode("utf-8"))
    digest = h.hexdigest()
    if name is not None and (not isinstance(name, str) or not name.strip() or Path(name).name != name):
        raise ValueError(f"name: expected a folder name (no path), got {name!r}")
    dest = data_root(data_dir) / (name or f"pairs-{digest[:12]}")
    marker = {"format": "asymgeo-pairs/1", "sha256": digest, "n_corpus": len(docs), "n_queries": len(queries),
              "n_pairs": {s: len(r) for s, r in qrels.items()}, "n_negatives": len(negatives)}
    if dest.exists():
        try:
            old = json.loads((dest / PAIRS_MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise ValueError(f"{dest}: exists and was not written by asymgeo from pairs; pass another name or "
                             "data_dir (nothing was written)") from None
        if isinstance(old, dict) and old.get("sha256") == digest:
            return BeirDataset(dest)
    with building_folder(dest) as tmp:
        _write(tmp, docs, queries, qrels, marker, negatives)
    return BeirDataset(dest)


def prepare_pairs(model: Any, train_pairs: Any, *, corpus: Any = None, eval_pairs: Any = None,
                  encoder: str | None = None, data_dir: str | os.PathLike | None = None,
                  cache_dir: str | os.PathLike | None = None, name: str | None = None, device: str | None = None,
                  batch_size: int = 32, progress: bool = False) -> tuple[BeirDataset, Any]:
    """:func:`pairs_dataset`, then its embedding cache by :func:`asymgeo.data.encode_dataset`.

    ``model``: a ``SentenceTransformer`` in memory (:func:`asymgeo.data.encoders.encoder_for_model`:
    a registry model keeps its conventions, any other is named by ``encoder``) or an encoder
    name, id or folder (opened offline, as ``asymgeo embed`` does).  The cache is resumable:
    a rerun after an interruption encodes only what is missing, and a complete one is reused.

    Returns
    -------
    (BeirDataset, EncoderSpec)
        The dataset and the encoder conventions its cache was made with.
    """
    from .encoders import encoder_for_model, get_encoder
    from .encoding import encode_dataset

    if isinstance(model, (str, os.PathLike)):
        if encoder is not None:
            raise ValueError("encoder: names a model held in memory; a model given by name is its own name")
        spec, enc_obj = get_encoder(str(model)), None
    else:
        spec, enc_obj = encoder_for_model(model, name=encoder, batch_size=batch_size)
    ds = pairs_dataset(train_pairs, corpus=corpus, eval_pairs=eval_pairs, data_dir=data_dir, name=name)
    encode_dataset(ds, spec, cache_dir=cache_dir, model=enc_obj, device=device, batch_size=batch_size,
                   progress=progress)
    return ds, spec
