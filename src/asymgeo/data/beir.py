"""Datasets in BEIR layout: streamed reading, fault accounting, exact error messages.

A BEIR folder holds

* ``corpus.jsonl``: one JSON object per line with ``_id``, ``title`` (optional) and ``text``;
* ``queries.jsonl``: one JSON object per line with ``_id`` and ``text``;
* ``qrels/<split>.tsv``: tab-separated ``query-id  corpus-id  score`` with a header line;
* optionally ``negatives.tsv`` (asymgeo's addition, written by :mod:`asymgeo.data.pairs` for
  the negatives a user's pairs carry): tab-separated ``query-id  corpus-id`` with a header
  line, the query's given hard negatives in order (:meth:`BeirDataset.given_negatives`).

The corpus is never held in memory as text: :class:`BeirDataset` scans it once for its ids
(lazily, on first use) and :meth:`BeirDataset.iter_corpus` streams ``(id, title, text)``.

Known faults of real BEIR releases are handled and *counted* in :attr:`BeirDataset.report`
rather than silently absorbed: qrels naming a missing document (ArguAna has one), qrels
naming a missing query, queries without any qrels, duplicate ids (first occurrence kept),
query ids that are also corpus ids (ArguAna, Quora; see ``ignore_identical_ids``), and
non-binary relevance grades.  Malformed input raises :class:`ValueError` naming the file,
the line number and what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from .._ids import IdIndex
from .download import download_beir
from .paths import data_root

__all__ = [
    "BeirDataset",
    "DatasetReport",
    "load_beir",
    "data_root",
    "document_text",
    "ids_digest",
    "warn_faults",
    "SPLIT_ORDER",
    "NEGATIVES_FILE",
]

logger = logging.getLogger(__name__)

SPLIT_ORDER = ("train", "dev", "test")

#: A dataset's given hard negatives (``query-id  corpus-id`` rows; :meth:`BeirDataset.given_negatives`).
NEGATIVES_FILE = "negatives.tsv"
_EXAMPLES = 5  # how many offending ids a report keeps per fault


def document_text(title: str, text: str) -> str:
    """Document text as encoders see it: ``title + " " + text``, or ``text`` if the title is blank."""
    return f"{title} {text}" if title and title.strip() else text


def ids_digest(ids: Sequence[str]) -> str:
    r"""SHA-256 of ids written one per line (UTF-8, ``\\n`` after each): the bytes of an id file."""
    h = hashlib.sha256()
    for s in ids:
        h.update(s.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


# --------------------------------------------------------------------------- report
@dataclass
class DatasetReport:
    """Counts of every fault found while reading a BEIR folder.

    Attributes
    ----------
    corpus_docs, queries : int
        Unique documents / queries kept.
    duplicate_corpus_ids, duplicate_query_ids : int
        Repeated ``_id`` lines (the first occurrence is kept, later ones skipped).
    blank_lines : dict
        Blank lines skipped, per file name.
    qrels_rows : dict
        Rows read per split (before cleaning).
    qrels_missing_document, qrels_missing_query : dict
        Rows per split naming an id absent from ``corpus.jsonl`` / ``queries.jsonl``
        (dropped from :meth:`BeirDataset.qrels`).
    qrels_duplicate_rows : dict
        Repeated ``(query, doc)`` rows per split (first kept).
    qrels_identical_ids : dict
        Rows per split whose query id equals the doc id (dropped only when
        ``ignore_identical_ids``).
    queries_without_qrels : int
        Queries in ``queries.jsonl`` that appear in no qrels file.
    query_ids_in_corpus : int
        Query ids that are also corpus ids.
    grade_counts : dict
        Per split, relevance grade -> number of kept rows.
    headerless_qrels : list
        qrels files read without a header line.
    empty_documents : int
        Documents whose title and text are both empty or blank (each is embedded as the
        empty string); warned about once when the corpus is first read.
    examples : dict
        Up to five offending ids per fault, for the message a user reads.
    """

    corpus_docs: int = 0
    queries: int = 0
    duplicate_corpus_ids: int = 0
    duplicate_query_ids: int = 0
    blank_lines: dict[str, int] = field(default_factory=dict)
    qrels_rows: dict[str, int] = field(default_factory=dict)
    qrels_missing_document: dict[str, int] = field(default_factory=dict)
    qrels_missing_query: dict[str, int] = field(default_factory=dict)
    qrels_duplicate_rows: dict[str, int] = field(default_factory=dict)
    qrels_identical_ids: dict[str, int] = field(default_factory=dict)
    queries_without_qrels: int = 0
    query_ids_in_corpus: int = 0
    grade_counts: dict[str, dict[int, int]] = field(default_factory=dict)
    headerless_qrels: list[str] = field(default_factory=list)
    empty_documents: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def non_binary_grades(self) -> bool:
        """True when some kept qrels row has a grade other than 0 or 1."""
        return any(g not in (0, 1) for gc in self.grade_counts.values() for g in gc)

    def faults(self) -> dict[str, int]:
        """Non-zero fault counts, flattened (``"qrels_missing_document[test]": 1``)."""
        out: dict[str, int] = {}
        for key in ("duplicate_corpus_ids", "duplicate_query_ids", "queries_without_qrels", "query_ids_in_corpus",
                    "empty_documents"):
            v = getattr(self, key)
            if v:
                out[key] = v
        for key in ("blank_lines", "qrels_missing_document", "qrels_missing_query", "qrels_duplicate_rows", "qrels_identical_ids"):
            for split, v in getattr(self, key).items():
                if v:
                    out[f"{key}[{split}]"] = v
        for split, gc in self.grade_counts.items():
            for g, v in sorted(gc.items()):
                if g not in (0, 1):
                    out[f"grade_{g}[{split}]"] = v
        for name in self.headerless_qrels:
            out[f"headerless_qrels[{name}]"] = 1
        return out

    def as_dict(self) -> dict:
        return {
            "corpus_docs": self.corpus_docs,
            "queries": self.queries,
            "qrels_rows": dict(self.qrels_rows),
            "grade_counts": {s: {str(g): c for g, c in sorted(gc.items())} for s, gc in self.grade_counts.items()},
            "non_binary_grades": self.non_binary_grades,
            "faults": self.faults(),
            "examples": {k: list(v) for k, v in self.examples.items()},
        }

    def summary(self) -> str:
        lines = [f"{self.corpus_docs} documents, {self.queries} queries"]
        for split, n in self.qrels_rows.items():
            lines.append(f"qrels[{split}]: {n} rows")
        faults = self.faults()
        if not faults:
            lines.append("no faults found")
        for k, v in faults.items():
            ex = self.examples.get(k.split("[")[0])
            lines.append(f"fault {k}: {v}" + (f" (e.g. {', '.join(ex[:3])})" if ex else ""))
        return "\n".join(lines)

    def warnings(self) -> list[str]:
        """One line per kind of fault a user should hear about, with its count and examples.

        Blank lines, queries without qrels and graded relevance are normal in BEIR
        releases and are not warned about (they stay in :meth:`faults`); empty documents
        are warned about when the corpus is read (:func:`_warn_empty_documents`), not here.
        """
        kinds = (
            ("duplicate_corpus_ids", "duplicate document ids (same text; first occurrence kept)"),
            ("duplicate_query_ids", "duplicate query ids (same text; first occurrence kept)"),
            ("qrels_missing_document", "qrels rows naming a document absent from corpus.jsonl (dropped)"),
            ("qrels_missing_query", "qrels rows naming a query absent from queries.jsonl (dropped)"),
            ("qrels_duplicate_rows", "repeated qrels (query, document) rows (first grade kept)"),
            ("qrels_identical_ids", "qrels rows whose query id equals the document id"),
            ("query_ids_in_corpus", "query ids that are also document ids"),
        )
        out = []
        for key, what in kinds:
            v = getattr(self, key)
            n = sum(v.values()) if isinstance(v, dict) else int(v)
            if n:
                ex = self.examples.get(key, [])
                out.append(f"{what}: {n}" + (f" (e.g. {', '.join(ex[:3])})" if ex else ""))
        if self.headerless_qrels:
            out.append(
                f"qrels files without a header line (first line read as data): {len(self.headerless_qrels)} "
                f"({', '.join(self.headerless_qrels[:3])})"
            )
        return out

    def _example(self, key: str, value: str) -> None:
        lst = self.examples.setdefault(key, [])
        if len(lst) < _EXAMPLES:
            lst.append(value)


# --------------------------------------------------------------------------- parsing
def _jsonl_records(path: Path, report: DatasetReport, *, need_title: bool) -> Iterator[tuple[int, str, str, str]]:  # noqa: C901 - data layer, reliability branch
    """Yield ``(line_number, id, title, text)`` for every non-blank line, validating each."""
    blanks = 0
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                blanks += 1
                continue
            try:
                obj = json.loads(raw)
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}, line {lineno}: not valid UTF-8 ({exc.reason})") from None
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}, line {lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{path}, line {lineno}: expected a JSON object, got {type(obj).__name__}")
            if "_id" not in obj:
                raise ValueError(f"{path}, line {lineno}: missing field '_id'")
            _id = obj["_id"]
            if isinstance(_id, int) and not isinstance(_id, bool):
                _id = str(_id)
            if not isinstance(_id, str):
                raise ValueError(f"{path}, line {lineno}: field '_id' must be a string, got {type(_id).__name__}")
            if not _id.strip():
                raise ValueError(f"{path}, line {lineno}: field '_id' is empty")
            if "text" not in obj:
                raise ValueError(f"{path}, line {lineno}: missing field 'text' (id {_id!r})")
            text = obj["text"]
            if not isinstance(text, str):
                raise ValueError(f"{path}, line {lineno}: field 'text' must be a string, got {type(text).__name__} (id {_id!r})")
            title = obj.get("title", "") if need_title else ""
            if title is None:
                title = ""
            if not isinstance(title, str):
                raise ValueError(f"{path}, line {lineno}: field 'title' must be a string, got {type(title).__name__} (id {_id!r})")
            yield lineno, _id, title, text
    report.blank_lines[path.name] = report.blank_lines.get(path.name, 0) + blanks


def _read_qrels(path: Path, report: DatasetReport) -> list[tuple[str, str, int, int]]:
    """Rows ``(query_id, doc_id, grade, line_number)`` of one qrels file, validated."""
    rows: list[tuple[str, str, int, int]] = []
    blanks = 0
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}, line {lineno}: not valid UTF-8 ({exc.reason})") from None
            if not line.strip():
                blanks += 1
                continue
            parts = line.split("\t")
            if len(parts) != 3:
                raise ValueError(
                    f"{path}, line {lineno}: expected 3 tab-separated fields "
                    f"(query-id, corpus-id, score), got {len(parts)}"
                )
            q, d, s = (x.strip() for x in parts)
            if lineno == 1 or (not rows and lineno == blanks + 1):
                try:
                    int(s)
                except ValueError:
                    continue  # the header line
                report.headerless_qrels.append(path.name)
            if not q:
                raise ValueError(f"{path}, line {lineno}: empty query-id")
            if not d:
                raise ValueError(f"{path}, line {lineno}: empty corpus-id")
            try:
                grade = int(s)
            except ValueError:
                raise ValueError(f"{path}, line {lineno}: score must be an integer, got {s!r}") from None
            rows.append((q, d, grade, lineno))
    if blanks:
        report.blank_lines[f"qrels/{path.name}"] = blanks
    return rows


@dataclass
class _CorpusScan:
    ids: IdIndex
    skip_lines: frozenset[int]
    digest: str


def _record_bytes(_id: str, title: str, text: str) -> bytes:
    """Length-prefixed ``(id, title, text)`` for digests (no separator can be forged)."""
    return f"{len(_id)}:{_id}{len(title)}:{title}{len(text)}:{text}".encode()


def _text_hash(title: str, text: str) -> bytes:
    return hashlib.sha256(_record_bytes("", title, text)).digest()


# --------------------------------------------------------------------------- dataset
class BeirDataset:
    """A dataset in BEIR layout, read lazily and streamed.

    Parameters
    ----------
    path : folder holding ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/*.tsv``.
    name : dataset name used for cache folders (default: the folder's name).
    ignore_identical_ids : drop qrels rows whose query id equals the document id and
        exclude a query's identically-named document from mined negatives (what BEIR's
        evaluation does for ArguAna and Quora).

    Attributes
    ----------
    corpus_ids : list[str]
        Document ids in file order (duplicates removed; first occurrence kept).
    query_ids : list[str]
        Query ids in file order (duplicates removed).
    queries : dict[str, str]
        Query id -> text.
    splits : list[str]
        qrels splits available (``train``, ``dev``, ``test`` first, then others sorted).
    report : DatasetReport
        Fault counts; reading it scans the corpus and every qrels file.
    """

    def __init__(self, path: str | os.PathLike, *, name: str | None = None, ignore_identical_ids: bool = False):
        self.path = Path(path)
        if not self.path.is_dir():
            raise FileNotFoundError(f"{self.path}: no such dataset folder")
        for fname in ("corpus.jsonl", "queries.jsonl"):
            if not (self.path / fname).is_file():
                raise FileNotFoundError(f"{self.path / fname}: missing (not a BEIR folder)")
        if not (self.path / "qrels").is_dir():
            raise FileNotFoundError(f"{self.path / 'qrels'}: missing qrels folder (not a BEIR folder)")
        self.name = name or self.path.name
        self.ignore_identical_ids = bool(ignore_identical_ids)
        self._report = DatasetReport()
        self._qrels_clean: dict[str, dict[str, dict[str, int]]] = {}
        self._faults_warned = False

    def __repr__(self) -> str:
        return f"BeirDataset(name={self.name!r}, path='{self.path}')"

    @property
    def corpus_file(self) -> Path:
        return self.path / "corpus.jsonl"

    @property
    def queries_file(self) -> Path:
        return self.path / "queries.jsonl"

    # ---------------------------------------------------------------- corpus
    @cached_property
    def _corpus(self) -> _CorpusScan:
        """The corpus's ids and digest: remembered per file version when the file was read
        before and was clean (:mod:`asymgeo.data.scan_memo`), else parsed (and remembered)."""
        import time

        from . import scan_memo

        rep = self._report
        memo = scan_memo.load_scan(self.corpus_file)
        if memo is not None:
            arr, digest, blanks = memo
            scan_memo.SCAN_PATHS["memo"] += 1
            rep.corpus_docs = int(arr.size)
            if blanks:
                rep.blank_lines[self.corpus_file.name] = rep.blank_lines.get(self.corpus_file.name, 0) + blanks
            return _CorpusScan(ids=IdIndex(arr, what="document", source=self.corpus_file), skip_lines=frozenset(),
                               digest=digest)
        scan_memo.SCAN_PATHS["parsed"] += 1
        started, before = time.time(), scan_memo.scan_key(self.corpus_file)
        blanks_before = rep.blank_lines.get(self.corpus_file.name, 0)
        scan = self._parse_corpus()
        if not scan.skip_lines and not rep.empty_documents:  # clean: nothing to warn about again
            scan_memo.save_scan(self.corpus_file, before, started, scan.ids._arr, scan.digest,
                                rep.blank_lines.get(self.corpus_file.name, 0) - blanks_before)
        return scan

    def _parse_corpus(self) -> _CorpusScan:
        ids: list[str] = []
        seen: set[str] = set()
        skip: set[int] = set()
        dup_hashes: dict[str, list[tuple[int, bytes]]] = {}
        rep = self._report
        h = hashlib.sha256()
        first_empty = 0
        for lineno, _id, _title, _text in _jsonl_records(self.corpus_file, rep, need_title=True):
            if _id in seen:
                skip.add(lineno)
                rep.duplicate_corpus_ids += 1
                rep._example("duplicate_corpus_ids", _id)
                dup_hashes.setdefault(_id, []).append((lineno, _text_hash(_title, _text)))
                continue
            seen.add(_id)
            ids.append(_id)
            h.update(_record_bytes(_id, _title, _text))
            if not _text.strip() and not _title.strip():
                rep.empty_documents += 1
                rep._example("empty_documents", _id)
                first_empty = first_empty or lineno
        if dup_hashes:
            self._check_duplicates(dup_hashes)
        rep.corpus_docs = len(ids)
        if rep.empty_documents:
            _warn_empty_documents(self, first_empty)
        del seen
        return _CorpusScan(ids=IdIndex(ids, what="document", source=self.corpus_file), skip_lines=frozenset(skip),
                           digest=h.hexdigest())

    def _check_duplicates(self, dup_hashes: dict[str, list[tuple[int, bytes]]]) -> None:
        """Repeated ids must repeat the same document: a different title or text is an error."""
        first: dict[str, tuple[int, bytes]] = {}
        for lineno, _id, title, text in _jsonl_records(self.corpus_file, DatasetReport(), need_title=True):
            if _id in dup_hashes and _id not in first:
                first[_id] = (lineno, _text_hash(title, text))
        for _id, dups in dup_hashes.items():
            line0, h0 = first[_id]
            for lineno, h in dups:
                if h != h0:
                    raise ValueError(
                        f"{self.corpus_file}, line {lineno}: duplicate document id {_id!r} with a different "
                        f"title or text than line {line0} (which document is meant is ambiguous)"
                    )

    @property
    def corpus_ids(self) -> IdIndex:
        """Document ids in file order: a read-only ``Sequence[str]`` kept compactly
        (:class:`asymgeo._ids.IdIndex`, no Python string per document)."""
        return self._corpus.ids

    def _present_docs(self, ids: Iterable[str]) -> set[str]:
        """The given document ids that are in the corpus (one vectorised lookup)."""
        ids = list(dict.fromkeys(ids))
        return {d for d, j in zip(ids, self._corpus.ids.lookup(ids), strict=True) if j >= 0}

    def corpus_rows(self, ids) -> list[int]:
        """Row numbers (file order, duplicates removed) of the given document ids."""
        ids = list(ids)
        rows = self._corpus.ids.lookup([str(d) for d in ids]) if ids else np.zeros(0, dtype=np.int64)
        for d, j in zip(ids, rows, strict=True):
            if j < 0 or not isinstance(d, str):
                raise KeyError(f"{self.corpus_file}: no document with id {d!r}")
        return [int(j) for j in rows]

    @cached_property
    def given_negatives(self) -> dict[str, list[str]]:
        """The hard negatives the dataset gives per query (``negatives.tsv``; ``{}`` without it).

        ``{query_id: [doc_id, ...]}`` in file order, repeats dropped.  :func:`asymgeo.data.load_triples`
        puts them first among a training query's hard negatives, before the mined ones.

        Raises
        ------
        ValueError
            A row without two tab-separated fields, an empty id, or an id that is not in
            ``queries.jsonl`` / ``corpus.jsonl``; the message names the file and line.
        """
        path = self.path / NEGATIVES_FILE
        if not path.is_file():
            return {}
        queries = self.queries
        rows: list[tuple[str, str, int]] = []
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                line = line.rstrip("\r\n")
                if not line.strip() or (lineno == 1 and line.split("\t")[0] == "query-id"):
                    continue
                parts = line.split("\t")
                if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                    raise ValueError(f"{path}, line {lineno}: expected 'query-id<TAB>corpus-id', got {line!r:.80}")
                rows.append((parts[0], parts[1], lineno))
        present = self._present_docs(d for _q, d, _ln in rows)
        out: dict[str, list[str]] = {}
        for q, d, lineno in rows:
            if q not in queries:
                raise ValueError(f"{path}, line {lineno}: query-id {q!r} is not in {self.queries_file}")
            if d not in present:
                raise ValueError(f"{path}, line {lineno}: corpus-id {d!r} is not in {self.corpus_file}")
            docs = out.setdefault(q, [])
            if d not in docs:
                docs.append(d)
        return out

    def iter_corpus(self) -> Iterator[tuple[str, str, str]]:
        """Stream ``(id, title, text)`` in file order, skipping duplicate ids."""
        skip = self._corpus.skip_lines
        scratch = DatasetReport()
        for lineno, _id, title, text in _jsonl_records(self.corpus_file, scratch, need_title=True):
            if lineno in skip:
                continue
            yield _id, title, text

    def iter_documents(self) -> Iterator[tuple[str, str]]:
        """Stream ``(id, document_text)`` with :func:`document_text` applied."""
        for _id, title, text in self.iter_corpus():
            yield _id, document_text(title, text)

    # ---------------------------------------------------------------- queries
    @cached_property
    def queries(self) -> dict[str, str]:
        out: dict[str, str] = {}
        rep = self._report
        for _lineno, _id, _title, text in _jsonl_records(self.queries_file, rep, need_title=False):
            if _id in out:
                if out[_id] != text:
                    raise ValueError(
                        f"{self.queries_file}, line {_lineno}: duplicate query id {_id!r} with a different text "
                        "than its first occurrence (which query is meant is ambiguous)"
                    )
                rep.duplicate_query_ids += 1
                rep._example("duplicate_query_ids", _id)
                continue
            out[_id] = text
        rep.queries = len(out)
        return out

    @property
    def query_ids(self) -> list[str]:
        return list(self.queries)

    def fingerprint(self) -> dict[str, Any]:
        """What an encoding of this dataset depends on: sizes and SHA-256 digests.

        ``corpus_sha256`` covers every kept document's id, title and text in file order,
        ``queries_sha256`` every query's id and text; ``corpus_ids_sha256`` /
        ``query_ids_sha256`` are the digests of the id files an embedding cache writes
        (one id per line, UTF-8), so a cache can be checked without re-reading texts.
        """
        qh = hashlib.sha256()
        for q, text in self.queries.items():
            qh.update(_record_bytes(q, "", text))
        return {
            "n_corpus": len(self.corpus_ids),
            "n_queries": len(self.queries),
            "corpus_sha256": self._corpus.digest,
            "queries_sha256": qh.hexdigest(),
            "corpus_ids_sha256": ids_digest(self.corpus_ids),
            "query_ids_sha256": ids_digest(self.query_ids),
        }

    # ---------------------------------------------------------------- qrels
    @cached_property
    def splits(self) -> list[str]:
        names = [p.stem for p in (self.path / "qrels").glob("*.tsv") if p.is_file()]
        first = [s for s in SPLIT_ORDER if s in names]
        return first + sorted(set(names) - set(first))

    def _check_split(self, split: str) -> Path:
        f = self.path / "qrels" / f"{split}.tsv"
        if split not in self.splits:
            raise ValueError(
                f"split {split!r}: no {f} (available splits of {self.name}: {', '.join(self.splits) or 'none'})"
            )
        return f

    @cached_property
    def _qrels_raw(self) -> dict[str, list[tuple[str, str, int, int]]]:
        out = {}
        for split in self.splits:
            rows = _read_qrels(self.path / "qrels" / f"{split}.tsv", self._report)
            self._report.qrels_rows[split] = len(rows)
            out[split] = rows
        return out

    def labelled_query_ids(self, split: str) -> list[str]:
        """Query ids with at least one row in ``qrels/<split>.tsv`` and a text in ``queries.jsonl``.

        First-appearance order.  Unlike :meth:`qrels`, a query whose only rows name a
        missing document is kept here (it is labelled, though not evaluable): this is the
        population the paper splits (ArguAna: 1,406 test queries, 1,405 evaluable).
        """
        self._check_split(split)
        queries = self.queries
        seen: dict[str, None] = {}
        for q, _d, _g, _ln in self._qrels_raw[split]:
            if q in queries and q not in seen:
                seen[q] = None
        return list(seen)

    def qrels(self, split: str) -> dict[str, dict[str, int]]:
        """Cleaned relevance judgements ``{query_id: {doc_id: grade}}`` of one split.

        Rows naming a missing query or document are dropped (and counted in
        :attr:`report`), repeated ``(query, doc)`` rows keep the first grade, and rows with
        identical query and doc ids are dropped when ``ignore_identical_ids``.  Grades
        are kept as read (graded and zero-grade rows included); rows and docs keep file
        order.
        """
        self._check_split(split)
        if split not in self._qrels_clean:
            self._clean_split(split)
        return self._qrels_clean[split]

    def _clean_split(self, split: str) -> None:
        rep = self._report
        queries = self.queries
        corpus = self._present_docs(d for _q, d, _g, _ln in self._qrels_raw[split])
        missing_doc = missing_q = dup = ident = 0
        grades: dict[int, int] = {}
        out: dict[str, dict[str, int]] = {}
        for q, d, g, _ln in self._qrels_raw[split]:
            if q not in queries:
                missing_q += 1
                rep._example("qrels_missing_query", f"{split}:{q}")
                continue
            if d not in corpus:
                missing_doc += 1
                rep._example("qrels_missing_document", f"{split}:{q}->{d}")
                continue
            if q == d:
                ident += 1
                rep._example("qrels_identical_ids", f"{split}:{q}")
                if self.ignore_identical_ids:
                    continue
            docs = out.setdefault(q, {})
            if d in docs:
                dup += 1
                rep._example("qrels_duplicate_rows", f"{split}:{q}->{d}")
                continue
            docs[d] = g
            grades[g] = grades.get(g, 0) + 1
        rep.qrels_missing_document[split] = missing_doc
        rep.qrels_missing_query[split] = missing_q
        rep.qrels_duplicate_rows[split] = dup
        rep.qrels_identical_ids[split] = ident
        rep.grade_counts[split] = grades
        self._qrels_clean[split] = out

    def all_qrels(self) -> dict[str, dict[str, int]]:
        """Every split's cleaned qrels merged (a query's rows from all splits; first grade kept)."""
        merged: dict[str, dict[str, int]] = {}
        for split in self.splits:
            for q, docs in self.qrels(split).items():
                tgt = merged.setdefault(q, {})
                for d, g in docs.items():
                    tgt.setdefault(d, g)
        return merged

    def positives(self, split: str | None = None, *, min_grade: int = 1) -> dict[str, list[str]]:
        """``{query_id: [doc_id, ...]}`` of documents with grade >= ``min_grade`` in file order.

        ``split=None`` merges all splits.  Queries without such a document are absent.
        """
        qrels = self.all_qrels() if split is None else self.qrels(split)
        out = {}
        for q, docs in qrels.items():
            pos = [d for d, g in docs.items() if g >= min_grade]
            if pos:
                out[q] = pos
        return out

    # ---------------------------------------------------------------- report
    @property
    def report(self) -> DatasetReport:
        """Fault counts over the whole folder (scans the corpus and all qrels on first use)."""
        rep = self._report
        queries = self.queries
        corpus = self._present_docs(queries)
        labelled: set[str] = set()
        for split in self.splits:
            self.qrels(split)
            labelled.update(q for q, _d, _g, _ln in self._qrels_raw[split])
        rep.queries_without_qrels = sum(1 for q in queries if q not in labelled)
        rep.examples.pop("queries_without_qrels", None)
        for q in queries:
            if q not in labelled:
                rep._example("queries_without_qrels", q)
        rep.query_ids_in_corpus = sum(1 for q in queries if q in corpus)
        rep.examples.pop("query_ids_in_corpus", None)
        for q in queries:
            if q in corpus:
                rep._example("query_ids_in_corpus", q)
        return rep


def _warn_empty_documents(dataset: BeirDataset, lineno: int) -> None:
    """One warning when a corpus is read (once per dataset object, never per encoding batch):
    how many documents have an empty title and text, and where the first is."""
    rep = dataset._report  # the counts so far: reading .report would scan the qrels as well
    n = rep.empty_documents
    logger.warning("%s: %d document%s with an empty title and text (first: %r, line %d of %s); each is embedded "
                   "as the empty string and still searched: fill in or remove them", dataset.name, n,
                   "s" if n != 1 else "", rep.examples["empty_documents"][0], lineno, dataset.corpus_file.name)


def warn_faults(dataset: BeirDataset) -> list[str]:
    """Log one warning per kind of fault in ``dataset.report`` (once per dataset object).

    Returns the warning lines (empty when the dataset is clean or was already reported).
    The CLI shows them on stderr; library users see them through :mod:`logging`.
    """
    if getattr(dataset, "_faults_warned", False):
        return []
    lines = dataset.report.warnings()
    dataset._faults_warned = True
    for line in lines:
        logger.warning("%s: %s", dataset.name, line)
    return lines


def load_beir(
    path_or_name: str | os.PathLike | BeirDataset,
    *,
    data_dir: str | os.PathLike | None = None,
    download: bool = False,
    ignore_identical_ids: bool = False,
) -> BeirDataset:
    """Open a dataset in BEIR layout by folder path or by name.

    Parameters
    ----------
    path_or_name : an existing folder (used as is), or a dataset name looked up as
        ``<data_dir>/<name>``.  A :class:`BeirDataset` is returned unchanged.
    data_dir : folder of datasets by name; default ``$ASYMGEO_DATA_DIR``, then
        ``~/.cache/asymgeo/datasets``.
    download : fetch BEIR's public archive (checksum-verified) when the name is not
        found locally; see :func:`asymgeo.data.download_beir`.
    ignore_identical_ids : see :class:`BeirDataset`.

    Raises
    ------
    FileNotFoundError
        When the folder does not exist (and ``download`` is off) or lacks BEIR files.
    """
    if isinstance(path_or_name, BeirDataset):
        return path_or_name
    p = Path(path_or_name).expanduser()
    if p.is_dir():
        return BeirDataset(p, ignore_identical_ids=ignore_identical_ids)
    name = str(path_or_name)
    root = data_root(data_dir)
    cand = root / name
    if cand.is_dir():
        return BeirDataset(cand, name=name, ignore_identical_ids=ignore_identical_ids)
    if download:
        folder = download_beir(name, root)
        return BeirDataset(folder, name=name, ignore_identical_ids=ignore_identical_ids)
    raise FileNotFoundError(
        f"dataset {name!r}: no folder {p} and none at {cand} "
        "(pass a folder path, set --data-dir / ASYMGEO_DATA_DIR, or fetch it: `asymgeo embed NAME --download`, "
        "load_beir(name, download=True) in Python)"
    )
