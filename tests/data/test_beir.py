"""BEIR loading: hand-written folders (every fault), malformed input, streaming, real SciFact."""

from __future__ import annotations

import hashlib
import inspect
import json
import tracemalloc

import pytest
from beir_fixtures import doc, query, write_beir

from asymgeo.data import BeirDataset, document_text, load_beir, warn_faults


# --------------------------------------------------------------------------- basics
def test_tiny_folder_reads_in_file_order(tiny_beir):
    ds = load_beir(tiny_beir)
    assert ds.name == "tiny"
    assert ds.corpus_ids == ["d1", "d2", "d3", "d4"]
    assert ds.query_ids == ["q1", "q2", "q3"]
    assert ds.queries == {"q1": "first", "q2": "second", "q3": "third"}
    assert ds.splits == ["train", "test"]
    assert ds.qrels("train") == {"q1": {"d1": 1, "d3": 1}, "q2": {"d2": 1}}
    assert ds.qrels("test") == {"q3": {"d4": 1}}
    assert list(ds.iter_corpus()) == [("d1", "Title one", "alpha"), ("d2", "", "beta"), ("d3", "Three", "gamma"), ("d4", "", "delta")]
    assert list(ds.iter_documents())[:2] == [("d1", "Title one alpha"), ("d2", "beta")]
    assert ds.report.faults() == {}


def test_document_text_convention():
    assert document_text("A title", "body") == "A title body"
    assert document_text("", "body") == "body"
    assert document_text("   ", "body") == "body"


def test_iter_corpus_is_a_stream(tmp_path):
    """A 12 MB corpus is read with a small, bounded Python-heap peak: never held as text."""
    n, body = 6000, "x" * 2000
    root = write_beir(tmp_path / "big", [doc(i, "t", body + str(i)) for i in range(n)], [query(0)], {"test": [("0", "0", 1)]})
    ds = load_beir(root)
    assert inspect.isgenerator(ds.iter_corpus())
    tracemalloc.start()
    ids = ds.corpus_ids
    total = sum(len(text) for _i, _t, text in ds.iter_corpus())
    _cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(ids) == n
    assert total == sum(len(body + str(i)) for i in range(n))
    assert peak < 3_000_000, f"peak {peak} bytes while streaming a {n * 2000} byte corpus"


# --------------------------------------------------------------------------- faults
@pytest.fixture
def faulty(tmp_path):
    corpus = [doc("d1", "", "alpha"), doc("d2"), doc("d1", "", "alpha"), "", doc("d3"), doc("q2", "", "a doc named like a query")]
    queries = [query("q1"), query("q2"), query("q3"), query("q1"), query("q4")]
    train = [
        ("q1", "d1", 1),
        ("q1", "d9", 1),  # document missing from the corpus
        ("q7", "d2", 1),  # query missing from queries.jsonl
        ("q1", "d1", 1),  # duplicate row
        ("q2", "q2", 1),  # identical query and document id
        ("q2", "d2", 2),  # graded relevance
        ("q3", "d3", 0),  # zero grade
    ]
    return write_beir(tmp_path / "faulty", corpus, queries, {"train": train})


def test_every_fault_is_counted(faulty):
    ds = load_beir(faulty)
    assert ds.corpus_ids == ["d1", "d2", "d3", "q2"]
    assert ds.query_ids == ["q1", "q2", "q3", "q4"]
    assert ds.queries["q1"] == "question q1"  # first occurrence kept
    assert [t for i, _ti, t in ds.iter_corpus() if i == "d1"] == ["alpha"]
    assert ds.qrels("train") == {"q1": {"d1": 1}, "q2": {"q2": 1, "d2": 2}, "q3": {"d3": 0}}
    rep = ds.report
    assert rep.corpus_docs == 4 and rep.queries == 4
    assert rep.faults() == {
        "duplicate_corpus_ids": 1,
        "duplicate_query_ids": 1,
        "queries_without_qrels": 1,
        "query_ids_in_corpus": 1,
        "blank_lines[corpus.jsonl]": 1,
        "qrels_missing_document[train]": 1,
        "qrels_missing_query[train]": 1,
        "qrels_duplicate_rows[train]": 1,
        "qrels_identical_ids[train]": 1,
        "grade_2[train]": 1,
    }
    assert rep.grade_counts["train"] == {1: 2, 2: 1, 0: 1}
    assert rep.non_binary_grades
    assert rep.examples["qrels_missing_document"] == ["train:q1->d9"]
    assert rep.examples["queries_without_qrels"] == ["q4"]
    assert rep.qrels_rows == {"train": 7}
    assert "qrels_missing_document[train]: 1" in rep.summary()
    json.dumps(rep.as_dict())  # serialisable


def test_fault_warnings_one_line_per_kind_with_count(faulty, caplog):
    ds = load_beir(faulty)
    lines = ds.report.warnings()
    # seven kinds, each once, each with its count (blank lines, unlabelled queries and grades are normal)
    assert len(lines) == 7
    expected = {
        "duplicate document ids": ": 1",
        "duplicate query ids": ": 1",
        "absent from corpus.jsonl": ": 1",
        "absent from queries.jsonl": ": 1",
        "repeated qrels": ": 1",
        "query id equals the document id": ": 1",
        "query ids that are also document ids": ": 1",
    }
    for needle, count in expected.items():
        (line,) = [x for x in lines if needle in x]
        assert count in line
    with caplog.at_level("WARNING", logger="asymgeo.data.beir"):
        assert warn_faults(ds) == lines
        assert warn_faults(ds) == []  # once per dataset object
    assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 7


def test_headerless_qrels_is_warned(tmp_path):
    root = write_beir(tmp_path / "h", [doc("d1")], [query("q1")], {"test": [("q1", "d1", 1)]}, header=False)
    lines = load_beir(root).report.warnings()
    assert len(lines) == 1 and "without a header line" in lines[0] and "test.tsv" in lines[0]


def test_clean_dataset_has_no_warnings(tiny_beir):
    assert load_beir(tiny_beir).report.warnings() == []


def test_duplicate_document_id_with_different_text_is_an_error(tmp_path):
    root = write_beir(tmp_path / "c", [doc("d1", "", "alpha"), doc("d2"), doc("d1", "", "other")], [query("q1")],
                      {"test": [("q1", "d1", 1)]})
    with pytest.raises(ValueError, match=r"corpus.jsonl, line 3: duplicate document id 'd1' .*than line 1"):
        _ = load_beir(root).corpus_ids


def test_duplicate_query_id_with_different_text_is_an_error(tmp_path):
    root = write_beir(tmp_path / "c", [doc("d1")], [query("q1", "a"), query("q1", "b")], {"test": [("q1", "d1", 1)]})
    with pytest.raises(ValueError, match=r"queries.jsonl, line 2: duplicate query id 'q1'"):
        _ = load_beir(root).queries


def test_fingerprint_changes_with_texts_and_order(tmp_path):
    a = write_beir(tmp_path / "a", [doc("d1", "", "x"), doc("d2", "", "y")], [query("q1")], {"test": [("q1", "d1", 1)]})
    b = write_beir(tmp_path / "b", [doc("d1", "", "x"), doc("d2", "", "z")], [query("q1")], {"test": [("q1", "d1", 1)]})
    c = write_beir(tmp_path / "c", [doc("d2", "", "y"), doc("d1", "", "x")], [query("q1")], {"test": [("q1", "d1", 1)]})
    fa, fb, fc = (load_beir(p).fingerprint() for p in (a, b, c))
    assert fa["corpus_ids_sha256"] == fb["corpus_ids_sha256"] and fa["corpus_sha256"] != fb["corpus_sha256"]
    assert fa["corpus_ids_sha256"] != fc["corpus_ids_sha256"]
    # the ids digest is the SHA-256 of the id file a cache writes (independent: hashlib on the bytes)
    assert fa["corpus_ids_sha256"] == hashlib.sha256(b"d1\nd2\n").hexdigest()
    assert fa["n_corpus"] == 2 and fa["n_queries"] == 1


def test_ignore_identical_ids_drops_the_pair(faulty):
    ds = load_beir(faulty, ignore_identical_ids=True)
    assert ds.qrels("train")["q2"] == {"d2": 2}
    assert ds.report.qrels_identical_ids == {"train": 1}


def test_positives_and_labelled_queries(faulty):
    ds = load_beir(faulty)
    assert ds.positives("train") == {"q1": ["d1"], "q2": ["q2", "d2"]}
    assert ds.positives("train", min_grade=2) == {"q2": ["d2"]}
    assert ds.labelled_query_ids("train") == ["q1", "q2", "q3"]


def test_labelled_queries_keep_a_query_whose_only_doc_is_missing(tmp_path):
    """ArguAna's case: the query is labelled (split population) but not evaluable."""
    root = write_beir(tmp_path / "a", [doc("d1")], [query("q1"), query("q2")], {"test": [("q1", "d1", 1), ("q2", "gone", 1)]})
    ds = load_beir(root)
    assert ds.labelled_query_ids("test") == ["q1", "q2"]
    assert ds.qrels("test") == {"q1": {"d1": 1}}
    assert ds.report.qrels_missing_document == {"test": 1}


def test_headerless_qrels_are_read_and_reported(tmp_path):
    root = write_beir(tmp_path / "h", [doc("d1")], [query("q1")], {"test": [("q1", "d1", 1)]}, header=False)
    ds = load_beir(root)
    assert ds.qrels("test") == {"q1": {"d1": 1}}
    assert ds.report.faults() == {"headerless_qrels[test.tsv]": 1}


# --------------------------------------------------------------------------- malformed input
@pytest.mark.parametrize(
    "bad, message",
    [
        ('{"_id": "x", "text": ', "invalid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"text": "no id"}', "missing field '_id'"),
        ('{"_id": "x", "title": "t"}', "missing field 'text'"),
        ('{"_id": "x", "text": 5}', "field 'text' must be a string"),
        ('{"_id": ["x"], "text": "t"}', "field '_id' must be a string"),
        ('{"_id": "  ", "text": "t"}', "field '_id' is empty"),
        ('{"_id": "x", "title": 3, "text": "t"}', "field 'title' must be a string"),
    ],
)
def test_malformed_corpus_line_names_file_and_line(tmp_path, bad, message):
    root = write_beir(tmp_path / "m", [doc("d1"), doc("d2"), bad, doc("d4")], [query("q1")], {"test": [("q1", "d1", 1)]})
    with pytest.raises(ValueError) as exc:
        load_beir(root).corpus_ids
    assert "corpus.jsonl, line 3" in str(exc.value)
    assert message in str(exc.value)


def test_bad_utf8_names_the_line(tmp_path):
    root = write_beir(tmp_path / "u", [doc("d1")], [query("q1")], {"test": [("q1", "d1", 1)]})
    with open(root / "queries.jsonl", "ab") as fh:
        fh.write(b'{"_id": "q2", "text": "\xff\xfe"}\n')
    with pytest.raises(ValueError, match=r"queries\.jsonl, line 2: not valid UTF-8"):
        load_beir(root).queries


@pytest.mark.parametrize(
    "row, message",
    [
        ("q1\td1", "expected 3 tab-separated fields"),
        ("q1\td1\t1\textra", "expected 3 tab-separated fields"),
        ("q1\td1\t1.5", "score must be an integer, got '1.5'"),
        ("\td1\t1", "empty query-id"),
        ("q1\t\t1", "empty corpus-id"),
    ],
)
def test_malformed_qrels_row_names_file_and_line(tmp_path, row, message):
    root = write_beir(tmp_path / "m", [doc("d1")], [query("q1")], {"dev": [("q1", "d1", 1), row]})
    with pytest.raises(ValueError) as exc:
        load_beir(root).qrels("dev")
    assert "dev.tsv, line 3" in str(exc.value)
    assert message in str(exc.value)


@pytest.mark.parametrize("missing", ["corpus.jsonl", "queries.jsonl", "qrels"])
def test_missing_files_are_named(tiny_beir, missing):
    target = tiny_beir / missing
    if target.is_dir():
        for f in target.iterdir():
            f.unlink()
        target.rmdir()
    else:
        target.unlink()
    with pytest.raises(FileNotFoundError, match=missing):
        load_beir(tiny_beir)


def test_unknown_split_lists_the_available_ones(tiny_beir):
    with pytest.raises(ValueError, match=r"split 'dev'.*train, test"):
        load_beir(tiny_beir).qrels("dev")


# --------------------------------------------------------------------------- resolution
def test_resolution_by_name_data_dir_and_env(tiny_beir, tmp_path, monkeypatch):
    root = tiny_beir.parent
    ds = load_beir("tiny", data_dir=root)
    assert ds.path == root / "tiny" and ds.name == "tiny"
    monkeypatch.setenv("ASYMGEO_DATA_DIR", str(root))
    assert load_beir("tiny").path == root / "tiny"
    assert load_beir(ds) is ds
    monkeypatch.setenv("ASYMGEO_DATA_DIR", str(tmp_path / "elsewhere"))
    with pytest.raises(FileNotFoundError, match=r"dataset 'tiny'.*elsewhere"):
        load_beir("tiny")


def test_default_data_dir_is_under_home(monkeypatch, tmp_path):
    from asymgeo.data import data_root

    monkeypatch.delenv("ASYMGEO_DATA_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert data_root() == tmp_path / ".cache" / "asymgeo" / "datasets"


# --------------------------------------------------------------------------- real data
def test_scifact_counts(shared_dir):
    ds = load_beir(shared_dir / "data" / "scifact")
    assert isinstance(ds, BeirDataset) and ds.name == "scifact"
    assert len(ds.corpus_ids) == 5183
    assert len(ds.query_ids) == 1109
    assert ds.splits == ["train", "test"]
    assert len(ds.qrels("train")) == 809 and sum(map(len, ds.qrels("train").values())) == 919
    assert len(ds.qrels("test")) == 300 and sum(map(len, ds.qrels("test").values())) == 339
    rep = ds.report
    assert rep.faults() == {}
    assert rep.grade_counts == {"train": {1: 919}, "test": {1: 339}}
    # ids agree with the independently produced embedding cache's id files
    emb = shared_dir / "embeddings" / "scifact" / "all-MiniLM-L6-v2"
    assert ds.corpus_ids == (emb / "corpus_ids.txt").read_text().split()
    assert ds.query_ids == (emb / "query_ids.txt").read_text().split()
