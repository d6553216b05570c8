"""The corpus scan remembered per file version (issue #40): a second read of an unchanged
``corpus.jsonl`` does not parse it, and any change, a racy one included, parses it again."""

from __future__ import annotations

import json
import os

import pytest

from asymgeo.data import load_beir, scan_memo


def _folder(root, docs, name="ds"):
    d = root / name
    (d / "qrels").mkdir(parents=True)
    (d / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": "", "text": t}) + "\n" for i, t in docs))
    (d / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "what"}) + "\n")
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return d


def _age(path, seconds=3600):
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - int(seconds * 1e9)))


@pytest.fixture
def memo_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ASYMGEO_SCAN_DIR", str(tmp_path / "memo"))
    return tmp_path / "memo"


def test_an_unchanged_settled_corpus_is_parsed_once(tmp_path, memo_dir):
    d = _folder(tmp_path, [("d1", "alpha"), ("d2", "beta"), ("d3", "gamma")])
    _age(d / "corpus.jsonl")
    first = load_beir(d)
    ids, fp = list(first.corpus_ids), first.fingerprint()
    before = dict(scan_memo.SCAN_PATHS)
    again = load_beir(d)
    assert list(again.corpus_ids) == ids == ["d1", "d2", "d3"]
    assert again.fingerprint() == fp  # the digest too, without reading the texts
    assert scan_memo.SCAN_PATHS["memo"] == before.get("memo", 0) + 1
    assert scan_memo.SCAN_PATHS["parsed"] == before.get("parsed", 0)  # the fast path ran, no parse
    assert again.report.corpus_docs == 3
    assert again.corpus_rows(["d3", "d1"]) == [2, 0]


def test_a_changed_corpus_is_parsed_again_even_with_the_same_size_and_time(tmp_path, memo_dir):
    d = _folder(tmp_path, [("d1", "alpha"), ("d2", "beta")])
    _age(d / "corpus.jsonl")
    st = os.stat(d / "corpus.jsonl")
    assert load_beir(d).corpus_ids == ["d1", "d2"]
    # edited in place (same size, same inode) with the modification time moved by one nanosecond:
    # the version key differs, so the memo of the old bytes is not used
    with open(d / "corpus.jsonl", "r+") as fh:
        text = fh.read()
        fh.seek(0)
        fh.write(text.replace('"d2"', '"e2"'))
    os.utime(d / "corpus.jsonl", ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    parsed = scan_memo.SCAN_PATHS["parsed"]
    assert load_beir(d).corpus_ids == ["d1", "e2"]  # the time moved by 1 ns: parsed again
    assert scan_memo.SCAN_PATHS["parsed"] == parsed + 1


def test_a_freshly_written_corpus_is_not_remembered(tmp_path, memo_dir):
    # modified less than SETTLE_SECONDS before the scan: a later edit in the same timestamp tick
    # could keep the key, so nothing is kept
    d = _folder(tmp_path, [("d1", "alpha")])
    load_beir(d).corpus_ids
    assert not memo_dir.exists() or not list(memo_dir.iterdir())
    parsed = scan_memo.SCAN_PATHS["parsed"]
    load_beir(d).corpus_ids
    assert scan_memo.SCAN_PATHS["parsed"] == parsed + 1


def test_a_corpus_with_faults_is_parsed_every_time_and_still_warns(tmp_path, memo_dir, caplog):
    d = _folder(tmp_path, [("d1", "alpha"), ("d1", "alpha"), ("d2", "")])  # repeated id, empty document
    _age(d / "corpus.jsonl")
    for _ in range(2):
        caplog.clear()
        ds = load_beir(d)
        ds.corpus_ids
        assert "1 document with an empty title and text" in caplog.text
        assert ds.report.duplicate_corpus_ids == 1 and ds.report.empty_documents == 1
    assert not memo_dir.exists() or not list(memo_dir.iterdir())


def test_a_damaged_or_foreign_memo_is_ignored(tmp_path, memo_dir):
    d = _folder(tmp_path, [("d1", "alpha"), ("d2", "beta")])
    _age(d / "corpus.jsonl")
    load_beir(d).corpus_ids
    (f,) = list(memo_dir.iterdir())
    good = f.read_bytes()
    for damaged in (b"not an npz", good[: len(good) // 2]):  # garbage, and a memo cut off mid-write
        f.write_bytes(damaged)
        parsed = scan_memo.SCAN_PATHS["parsed"]
        assert load_beir(d).corpus_ids == ["d1", "d2"]
        assert scan_memo.SCAN_PATHS["parsed"] == parsed + 1


def test_an_unwritable_memo_folder_costs_nothing(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("ASYMGEO_SCAN_DIR", str(blocker / "memo"))  # under a file: cannot be made
    d = _folder(tmp_path, [("d1", "alpha")])
    _age(d / "corpus.jsonl")
    assert load_beir(d).corpus_ids == ["d1"]


# ---------------------------------------------------------------- #41: data that reach both sides of each branch
@pytest.mark.parametrize("docs", [[("d1", "alpha"), ("d1", "alpha"), ("d2", "beta")],  # a repeated id only
                                  [("d1", "alpha"), ("d2", "")]])  # an empty document only
def test_a_corpus_with_a_single_kind_of_fault_is_not_remembered(tmp_path, memo_dir, docs):
    # the fixture above has both faults at once, where "either" and "both" agree
    d = _folder(tmp_path, docs)
    _age(d / "corpus.jsonl")
    load_beir(d).corpus_ids
    assert not memo_dir.exists() or not list(memo_dir.iterdir())


def test_blank_lines_are_reported_the_same_from_the_memo(tmp_path, memo_dir):
    d = _folder(tmp_path, [("d1", "alpha"), ("d2", "beta")])
    text = (d / "corpus.jsonl").read_text().splitlines(keepends=True)
    (d / "corpus.jsonl").write_text(text[0] + "\n" + text[1] + "  \n")  # two blank lines, counted by hand
    _age(d / "corpus.jsonl")
    first = load_beir(d)
    assert first.corpus_ids == ["d1", "d2"] and first.report.blank_lines["corpus.jsonl"] == 2
    memo = scan_memo.SCAN_PATHS["memo"]
    again = load_beir(d)
    assert again.corpus_ids == ["d1", "d2"] and scan_memo.SCAN_PATHS["memo"] == memo + 1
    assert again.report.blank_lines["corpus.jsonl"] == 2


def test_a_memo_of_another_file_or_format_is_not_used(tmp_path, memo_dir):
    import numpy as np

    a = _folder(tmp_path, [("a1", "alpha"), ("a2", "beta")], name="a")
    b = _folder(tmp_path, [("b1", "gamma")], name="b")
    for d in (a, b):
        _age(d / "corpus.jsonl")
    assert load_beir(a).corpus_ids == ["a1", "a2"]
    (memo_a,) = list(memo_dir.iterdir())
    # a's memo under the name b's version would use (a digest collision): its recorded key is a's
    memo_b = memo_dir / f"corpus-{scan_memo.scan_key(b / 'corpus.jsonl').digest()}.npz"
    memo_b.write_bytes(memo_a.read_bytes())
    assert scan_memo.load_scan(b / "corpus.jsonl") is None
    assert load_beir(b).corpus_ids == ["b1"]
    # a's own memo rewritten with another format number, then with text (not byte) ids
    with np.load(memo_a) as z:
        fields = {k: z[k] for k in z.files}
    assert scan_memo.load_scan(a / "corpus.jsonl")[0].tolist() == [b"a1", b"a2"]
    for change in ({"format": np.array(scan_memo.SCAN_FORMAT + 1)}, {"ids": np.array(["a1", "a2"])}):
        with open(memo_a, "wb") as fh:
            np.savez(fh, **{**fields, **change})
        assert scan_memo.load_scan(a / "corpus.jsonl") is None


def test_a_file_changed_during_its_scan_is_not_remembered(tmp_path, memo_dir):
    import numpy as np

    d = _folder(tmp_path, [("d1", "alpha")])
    f = d / "corpus.jsonl"
    _age(f)
    before = scan_memo.scan_key(f)
    f.write_text(f.read_text() + json.dumps({"_id": "d2", "text": "beta"}) + "\n")  # appended mid-scan
    _age(f, 1800)
    kept = scan_memo.save_scan(f, before, before.mtime_ns / 1e9 + 3600, np.array([b"d1"]), "x", 0)
    assert not kept and (not memo_dir.exists() or not list(memo_dir.iterdir()))


def test_a_file_exactly_settle_seconds_old_is_remembered_and_one_nanosecond_younger_is_not(tmp_path, memo_dir):
    import numpy as np

    # modification times of 3 s after the epoch, so that the nanoseconds survive the float seconds
    d = _folder(tmp_path, [("d1", "alpha")])
    f = d / "corpus.jsonl"
    started = 3.0 + scan_memo.SETTLE_SECONDS
    for mtime_ns, want in ((3_000_000_000, True), (3_000_000_001, False)):
        os.utime(f, ns=(mtime_ns, mtime_ns))
        before = scan_memo.scan_key(f)
        assert scan_memo.save_scan(f, before, started, np.array([b"d1"]), "x", 0) is want
        assert (scan_memo.load_scan(f) is not None) is want
