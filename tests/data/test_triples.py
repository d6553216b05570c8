"""Triples and frozen hard negatives: hand-made geometry, then brute force on SciFact."""

from __future__ import annotations

import numpy as np
import pytest
from beir_fixtures import doc, query, write_beir

from asymgeo.data import load_beir, load_embeddings, load_triples, mine_hard_negatives, write_embeddings


def test_mine_hard_negatives_by_hand():
    Q = np.array([[1.0, 0.0], [0.0, 1.0]])
    C = np.array([[0.9, 0.0], [0.5, 0.5], [0.0, 0.8], [0.9, 0.0], [-1.0, 0.0]], dtype=np.float32)
    scores, rows = mine_hard_negatives(Q, C, [{0}, {1, 2}], k=3)
    # query 0: c0 and c3 tie at 0.9 (c0 excluded), then c1 0.5, c2 0.0
    # query 1: c2 0.8 and c1 0.5 excluded; c0, c3, c4 tie at 0.0 -> lower index first
    assert rows.tolist() == [[3, 1, 2], [0, 3, 4]]
    np.testing.assert_allclose(scores, [[0.9, 0.5, 0.0], [0.0, 0.0, 0.0]], atol=1e-7)


def test_mine_hard_negatives_errors():
    C = np.eye(3, dtype=np.float32)
    with pytest.raises(ValueError, match="exceed the corpus"):
        mine_hard_negatives(np.eye(3), C, [{0, 1}, set(), set()], k=2)
    with pytest.raises(ValueError, match="one per query"):
        mine_hard_negatives(np.eye(3), C, [set()], k=1)
    with pytest.raises(ValueError, match=r"expected shape \(N, 2\)"):
        mine_hard_negatives(np.ones((1, 2)), C, [set()], k=1)


@pytest.fixture
def hand(tmp_path, monkeypatch):
    # nothing names a triples folder (the suite's ASYMGEO_TRIPLES_DIR would win): mined negatives go
    # beside this writable cache, and ~/.cache is a temporary folder
    monkeypatch.delenv("ASYMGEO_TRIPLES_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ids = ["d0", "d1", "d2", "d3", "d4", "d5", "q0"]
    C = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0.6, 0.8, 0], [0, 0.6, 0.8], [0.8, 0, 0.6], [2, 0, 0]])
    Q = np.array([[1, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0]])
    root = write_beir(
        tmp_path / "hand",
        [doc(i) for i in ids],
        [query(f"q{i}") for i in range(4)],
        {"train": [("q0", "d1", 1), ("q0", "d2", 1), ("q1", "d3", 0), ("q1", "d4", 2)], "test": [("q2", "d0", 1)]},
    )
    write_embeddings(tmp_path / "cache" / "hand" / "enc", C, ids, Q, [f"q{i}" for i in range(4)], {})
    return root, tmp_path / "cache"


def test_load_triples_by_hand(hand):
    root, cache = hand
    tr = load_triples(root, "enc", ["q0", "q1", "q2", "q3"], cache_dir=cache, k=2)
    assert tr.query_ids == ["q0", "q1", "q2"]
    assert tr.skipped == {"no_positive": 1}  # q3 has no qrels
    assert tr.pos_ids == ["d1", "d4", "d0"]  # q1: d3 has grade 0, so d4
    assert tr.neg_ids == ["q0", "d2", "d1"]  # q0's identically named doc scores 2
    assert tr.hard_negative_ids == [["q0", "d0"], ["d2", "d5"], ["d1", "d3"]]
    np.testing.assert_array_equal(tr.X, [[1, 0, 0], [0, 0, 1], [0, 1, 0]])
    np.testing.assert_array_equal(tr.Y_pos[0], [0, 1, 0])
    np.testing.assert_array_equal(tr.Y_neg[1], [0, 0, 1])
    assert tr.X.dtype == np.float32 and tr.hard_negatives().shape == (3, 2, 3)
    np.testing.assert_array_equal(tr.hard_negatives()[2, 1], np.float16([0.6, 0.8, 0]).astype(np.float32))
    sub = tr.subset(["q2", "q0"])
    assert sub.query_ids == ["q2", "q0"] and sub.neg_ids == ["d1", "q0"]


def test_ignore_identical_ids_and_min_grade(hand):
    root, cache = hand
    tr = load_triples(root, "enc", ["q0", "q1", "q2"], cache_dir=cache, k=2, ignore_identical_ids=True)
    assert tr.hard_negative_ids[0] == ["d0", "d5"]
    ds = load_beir(root, ignore_identical_ids=True)
    assert load_triples(ds, "enc", ["q0"], cache_dir=cache, k=2).neg_ids == ["d0"]
    high = load_triples(root, "enc", ["q0", "q1", "q2"], cache_dir=cache, k=2, min_grade=2)
    assert high.query_ids == ["q1"] and high.skipped == {"no_positive": 2}


def test_named_splits(hand):
    root, cache = hand
    # adaptation split of a train+test dataset: 2 train queries -> 80/20 rounds to 2/0
    assert sorted(load_triples(root, "enc", "train", cache_dir=cache, k=2).query_ids) == ["q0", "q1"]
    assert load_triples(root, "enc", "validation", cache_dir=cache, k=2).query_ids == []
    assert load_triples(root, "enc", "test", cache_dir=cache, k=2).query_ids == ["q2"]
    (root / "qrels" / "extra.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td4\t1\nq0\td1\t1\n")
    assert load_triples(root, "enc", "extra", cache_dir=cache, k=2).query_ids == ["q1", "q0"]  # a qrels file
    with pytest.raises(ValueError, match="split 'nope'"):
        load_triples(root, "enc", "nope", cache_dir=cache)


def test_cache_from_another_corpus_is_refused(hand, tmp_path):
    root, _ = hand
    write_embeddings(tmp_path / "other" / "hand" / "enc", np.eye(3), ["a", "b", "c"], np.eye(3)[:1], ["q0"], {})
    with pytest.raises(ValueError, match=r"corpus_ids.txt: 3 ids but .*corpus.jsonl has 7 documents; the cache is st"):
        load_triples(root, "enc", ["q0"], cache_dir=tmp_path / "other")


def test_scifact_triples_match_brute_force(shared_dir):
    data, cache = shared_dir / "data" / "scifact", shared_dir / "embeddings"
    tr = load_triples(data, "all-MiniLM-L6-v2", "train", cache_dir=cache)
    assert len(tr) == 647 and tr.X.shape == (647, 384) and tr.hard_negative_rows.shape == (647, 8)
    # independent reading of the qrels files and the cache
    labels: dict[str, list[str]] = {}
    for f in ("train.tsv", "test.tsv"):
        for line in (data / "qrels" / f).read_text().splitlines()[1:]:
            q, d, _s = line.split("\t")
            labels.setdefault(q, []).append(d)
    cids = (cache / "scifact" / "all-MiniLM-L6-v2" / "corpus_ids.txt").read_text().split()
    qids = (cache / "scifact" / "all-MiniLM-L6-v2" / "query_ids.txt").read_text().split()
    C = np.load(cache / "scifact" / "all-MiniLM-L6-v2" / "corpus.npy").astype(np.float64)
    Q = np.load(cache / "scifact" / "all-MiniLM-L6-v2" / "queries.npy").astype(np.float64)
    qrow = {q: i for i, q in enumerate(qids)}
    crow = {d: i for i, d in enumerate(cids)}
    S = Q[[qrow[q] for q in tr.query_ids]] @ C.T
    for i, q in enumerate(tr.query_ids):
        assert tr.pos_ids[i] == labels[q][0]
        S[i, [crow[d] for d in labels[q]]] = -np.inf
    top = np.argsort(-S, axis=1, kind="stable")[:, :8]
    # rankings agree except where float32 and float64 scores tie to rounding
    same = top == tr.hard_negative_rows
    gap = np.abs(np.take_along_axis(S, tr.hard_negative_rows, 1) - np.take_along_axis(S, top, 1))
    assert np.all(same | (gap < 1e-5))
    assert np.mean(tr.neg_rows == top[:, 0]) > 0.99
    for i, q in enumerate(tr.query_ids):
        assert not set(tr.hard_negative_ids[i]) & set(labels[q])
    np.testing.assert_array_equal(tr.Y_pos, C[[crow[d] for d in tr.pos_ids]].astype(np.float32))
    val = load_triples(data, "all-MiniLM-L6-v2", "validation", cache_dir=cache, cache=load_embeddings("scifact", "minilm", cache_dir=cache))
    test = load_triples(data, "all-MiniLM-L6-v2", "test", cache_dir=cache)
    assert (len(val), len(test)) == (162, 300)
    assert not set(val.query_ids) & set(tr.query_ids)


# --------------------------------------------------------------------------- triple cache
def _fields(tr):
    return (tr.query_ids, tr.pos_ids, tr.neg_ids, tr.hard_negative_ids, tr.hard_negative_rows.tolist(),
            tr.X.tolist(), tr.Y_pos.tolist(), tr.Y_neg.tolist(), tr.skipped)


@pytest.fixture
def count_searches(monkeypatch):
    """Counts calls of the exact search behind mine_hard_negatives."""
    import asymgeo.data.triples as triples

    calls = []
    real = triples.exact_search

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(triples, "exact_search", counting)
    return calls


def test_triple_cache_second_load_skips_search(hand, count_searches, monkeypatch):
    root, cache = hand
    first = load_triples(root, "enc", ["q0", "q1", "q2", "q3"], cache_dir=cache, k=2)
    assert len(count_searches) == 1
    files = list((cache / "hand" / "enc" / "triples").glob("*.npz"))
    assert len(files) == 1  # beside the embeddings
    import asymgeo.data.triples as triples

    def no_search(*args, **kwargs):
        raise AssertionError("exact search ran although the triples were cached")

    monkeypatch.setattr(triples, "exact_search", no_search)
    second = load_triples(root, "enc", ["q0", "q1", "q2", "q3"], cache_dir=cache, k=2)
    assert _fields(second) == _fields(first)
    assert second.hard_negative_rows.dtype == np.int64


def test_triple_cache_key_follows_settings_and_cache_identity(hand, count_searches):
    root, cache = hand
    folder = cache / "hand" / "enc" / "triples"
    ids = ["q0", "q1", "q2"]
    load_triples(root, "enc", ids, cache_dir=cache, k=2)
    variants = [
        dict(k=1), dict(min_grade=2), dict(ignore_identical_ids=True), dict(split=["q0", "q1"]),
    ]
    for i, v in enumerate(variants):
        split = v.pop("split", ids)
        kw = dict(k=2) | v
        tr = load_triples(root, "enc", split, cache_dir=cache, **kw)
        fresh = load_triples(root, "enc", split, cache_dir=cache, triples_cache=False, **kw)
        assert _fields(tr) == _fields(fresh)  # a different key, not a stale answer
        assert len(list(folder.glob("*.npz"))) == 2 + i
    n_before = len(count_searches)
    # the same embeddings with another meta.json (e.g. re-encoded): a new key, mined again
    meta = cache / "hand" / "enc" / "meta.json"
    meta.write_text(meta.read_text().rstrip().rstrip("}") + ', "note": "re-encoded"}')
    load_triples(root, "enc", ids, cache_dir=cache, k=2)
    assert len(count_searches) == n_before + 1
    assert len(list(folder.glob("*.npz"))) == 2 + len(variants)
    # qrels that change the excluded documents change the key too
    (root / "qrels" / "train.tsv").write_text(
        (root / "qrels" / "train.tsv").read_text() + "q0\td0\t1\n")
    tr = load_triples(root, "enc", ids, cache_dir=cache, k=2)
    assert len(count_searches) == n_before + 2
    assert "d0" not in tr.hard_negative_ids[0]


def test_triple_cache_falls_back_when_the_embedding_folder_is_read_only(hand, count_searches, tmp_path, monkeypatch):
    root, cache = hand
    user = tmp_path / "user-cache"
    monkeypatch.setenv("ASYMGEO_TRIPLES_DIR", str(user))
    enc = cache / "hand" / "enc"
    enc.chmod(0o555)  # like the shared caches (root ignores it; the cache must not)
    try:
        first = load_triples(root, "enc", ["q0", "q1"], cache_dir=cache, k=2)
        assert not (enc / "triples").exists()
        assert len(list(user.glob("hand-enc-*.npz"))) == 1
        second = load_triples(root, "enc", ["q0", "q1"], cache_dir=cache, k=2)
        assert len(count_searches) == 1 and _fields(second) == _fields(first)
        # neither folder writable: no caching, still the right answer
        user.chmod(0o555)
        for f in user.glob("*.npz"):
            f.unlink()
        third = load_triples(root, "enc", ["q0", "q1"], cache_dir=cache, k=2)
        assert _fields(third) == _fields(first) and list(user.iterdir()) == []
        assert len(count_searches) == 2
    finally:
        enc.chmod(0o755)
        user.chmod(0o755)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other_key", "excluded_row"])
def test_damaged_triple_cache_is_ignored_and_rebuilt(hand, count_searches, damage):
    root, cache = hand
    ids = ["q0", "q1", "q2"]
    good = load_triples(root, "enc", ids, cache_dir=cache, k=2)
    (path,) = (cache / "hand" / "enc" / "triples").glob("*.npz")
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"not a zip file")
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:
        with np.load(path) as z:
            rows, scores, meta = z["rows"].copy(), z["scores"], str(z["meta"][()])
        if damage == "other_key":
            meta = meta.replace('"key": "', '"key": "0')
        else:
            rows[0, 0] = 1  # d1 is q0's positive: never a negative
        with open(path, "wb") as fh:
            np.savez(fh, rows=rows, scores=scores, meta=np.array(meta))
    again = load_triples(root, "enc", ids, cache_dir=cache, k=2)
    assert _fields(again) == _fields(good)
    assert len(count_searches) == 2  # mined again
    assert path.read_bytes() != b"not a zip file"
    load_triples(root, "enc", ids, cache_dir=cache, k=2)
    assert len(count_searches) == 2  # the rebuilt file is used


def test_triples_cache_false_never_writes(hand, count_searches):
    root, cache = hand
    load_triples(root, "enc", ["q0"], cache_dir=cache, k=2, triples_cache=False)
    load_triples(root, "enc", ["q0"], cache_dir=cache, k=2, triples_cache=False)
    assert len(count_searches) == 2 and not (cache / "hand" / "enc" / "triples").exists()


def test_mine_hard_negatives_returns_a_search_result():
    from asymgeo.retrieval.search import SearchResult

    C = np.array([[1.0, 0.0], [0.5, 0.0], [0.2, 0.0]], dtype=np.float32)
    res = mine_hard_negatives(np.array([[1.0, 0.0]]), C, [{0}], k=2)
    assert isinstance(res, SearchResult)
    scores, rows = res  # same order as exact_search
    assert rows.tolist() == [[1, 2]] and res.indices is rows
    np.testing.assert_allclose(scores, [[0.5, 0.2]], rtol=1e-6)


def test_the_suite_never_writes_into_shared(shared_dir, tmp_path):
    """The session guard in conftest: a writable-looking folder under ../shared is refused, so
    mined negatives land in the temporary ASYMGEO_TRIPLES_DIR."""
    import os

    import asymgeo.data.triples as triples

    assert not triples._writable(shared_dir / "embeddings" / "scifact" / "all-MiniLM-L6-v2")
    assert triples._writable(tmp_path)
    assert str(triples._user_triples_dir()).startswith(os.environ["ASYMGEO_TRIPLES_DIR"])
    before = sorted(str(p) for p in shared_dir.rglob("*"))
    load_triples("scifact", "all-MiniLM-L6-v2", "train", data_dir=shared_dir / "data",
                 cache_dir=shared_dir / "embeddings", k=3)
    assert sorted(str(p) for p in shared_dir.rglob("*")) == before


def test_header_only_train_qrels_name_the_file(tmp_path):
    from beir_fixtures import doc, query, write_beir

    root = write_beir(tmp_path / "d", [doc("a"), doc("b")], [query("q1"), query("q2")],
                      {"train": [], "test": [("q1", "a", 1), ("q2", "b", 1)]})
    C = np.eye(2, dtype=np.float32)
    write_embeddings(tmp_path / "c" / "d" / "enc", C, ["a", "b"], C, ["q1", "q2"], {"normalised": True})
    with pytest.raises(ValueError, match=r"qrels/train\.tsv: split 'train' has no usable relevance judgements"):
        load_triples(root, "enc", "train", cache_dir=tmp_path / "c", k=1, require=True)
    assert load_triples(root, "enc", "train", cache_dir=tmp_path / "c", k=1).query_ids == []  # the library default


def test_triple_cache_notices_arrays_rewritten_under_the_same_meta(hand, count_searches):
    """corpus.npy replaced in place (same ids, same meta.json): the mined negatives are stale and
    must be mined again, and they must equal a fresh mining (a mutation survivor of the key)."""
    import os

    root, cache = hand
    ids = ["q0", "q1", "q2"]
    load_triples(root, "enc", ids, cache_dir=cache, k=2)
    n_before = len(count_searches)
    path = cache / "hand" / "enc" / "corpus.npy"
    arr = np.load(path)
    new = arr[::-1].copy()  # the rows now point elsewhere: other nearest documents
    np.save(path, new.astype(np.float32))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a later modification time, as a rewrite has
    tr = load_triples(root, "enc", ids, cache_dir=cache, k=2)
    assert len(count_searches) == n_before + 1
    fresh = load_triples(root, "enc", ids, cache_dir=cache, k=2, triples_cache=False)
    assert _fields(tr) == _fields(fresh)


# --------------------------------------------------------------------------- rarely taken branches (issue #19)
def test_mine_hard_negatives_refuses_one_dimensional_queries():
    with pytest.raises(ValueError, match=r"queries: expected a 2-d \(n, p\) array, got shape \(3,\)"):
        mine_hard_negatives(np.ones(3), np.eye(3, dtype=np.float32), [set()], k=1)


def test_a_carved_split_without_usable_judgements_names_test_tsv(tmp_path):
    # no train.tsv: the adaptation split is carved from test.tsv, so that is the file to fix
    qs = [query(f"q{i}") for i in range(10)]
    root = write_beir(tmp_path / "d", [doc("a"), doc("b")], qs, {"test": [(f"q{i}", "a", 0) for i in range(10)]})
    C = np.eye(2, dtype=np.float32)
    write_embeddings(tmp_path / "c" / "d" / "enc", C, ["a", "b"], np.tile(C, (5, 1)), [f"q{i}" for i in range(10)],
                     {"normalised": True})
    with pytest.raises(ValueError, match=r"qrels/test\.tsv: split 'train' has no usable relevance judgements"):
        load_triples(root, "enc", "train", cache_dir=tmp_path / "c", k=1, require=True)


def test_triple_cache_in_a_named_folder_that_does_not_exist_yet(hand, count_searches, tmp_path):
    root, cache = hand
    where = tmp_path / "deep" / "er" / "triples"
    first = load_triples(root, "enc", ["q0", "q1"], cache_dir=cache, k=2, triples_cache=where)
    assert len(list(where.glob("*.npz"))) == 1 and not (cache / "hand" / "enc" / "triples").exists()
    again = load_triples(root, "enc", ["q0", "q1"], cache_dir=cache, k=2, triples_cache=str(where))
    assert len(count_searches) == 1 and _fields(again) == _fields(first)


def test_triple_cache_under_a_file_is_skipped_and_the_negatives_are_still_right(hand, count_searches, tmp_path):
    root, cache = hand
    blocker = tmp_path / "a-file"
    blocker.write_text("user data")
    tr = load_triples(root, "enc", ["q0", "q1"], cache_dir=cache, k=2, triples_cache=blocker / "sub")
    assert blocker.read_text() == "user data"
    ref = load_triples(root, "enc", ["q0", "q1"], cache_dir=cache, k=2, triples_cache=False)
    assert _fields(tr) == _fields(ref) and len(count_searches) == 2


def test_triples_of_a_cache_whose_files_are_gone_are_mined_and_not_cached(hand, count_searches):
    import shutil

    from asymgeo.data.triples import triples_cache_key

    root, cache = hand
    emb = load_embeddings(root, "enc", cache_dir=cache, mmap=False)
    moved = cache / "moved"
    shutil.move(str(emb.path), str(moved))  # the arrays are in memory; the folder is gone
    assert triples_cache_key(emb, ["q0"], [set()], 2, 1, True) is None
    tr = load_triples(root, "enc", ["q0", "q1"], k=2, cache=emb)
    assert tr.hard_negative_ids == [["q0", "d0"], ["d2", "d5"]]  # as test_load_triples_by_hand
    assert len(count_searches) == 1 and not list(cache.rglob("*.npz"))


def test_triples_without_a_corpus_reference_refuse_hard_negatives_and_subset_names_unknown_ids(hand):
    root, cache = hand
    tr = load_triples(root, "enc", ["q0", "q1"], cache_dir=cache, k=2)
    with pytest.raises(KeyError, match="subset: query 'q9' has no triple"):
        tr.subset(["q0", "q9"])
    tr._corpus = None
    with pytest.raises(ValueError, match="hard_negatives: these triples carry no corpus reference"):
        tr.hard_negatives()


def test_writable_is_false_for_a_missing_folder(tmp_path):
    import asymgeo.data.triples as triples

    assert triples._writable(tmp_path) and not triples._writable(tmp_path / "missing")


# --------------------------------------------------------------------------- survivors of mutation testing (issue #19)
def test_user_triples_dir_defaults_under_the_home_cache(monkeypatch, tmp_path):
    import asymgeo.data.triples as triples

    monkeypatch.delenv("ASYMGEO_TRIPLES_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert triples._user_triples_dir() == tmp_path / ".cache" / "asymgeo" / "triples"
    monkeypatch.setenv("ASYMGEO_TRIPLES_DIR", str(tmp_path / "mine"))
    assert triples._user_triples_dir() == tmp_path / "mine"


def _read_cached(path):
    """(rows, scores, meta) of a triple-cache file, copied out of the archive."""
    with np.load(path) as z:
        return z["rows"].copy(), z["scores"].copy(), str(z["meta"][()])


def _write_cached(path, rows, scores, meta):
    with open(path, "wb") as fh:
        np.savez(fh, rows=rows, scores=scores, meta=np.array(meta))


@pytest.mark.parametrize("damage", ["row_past_corpus", "negative_row", "unsorted", "nan_score", "int32_rows",
                                    "other_shape"])
def test_every_inconsistent_triple_cache_is_rebuilt_and_named(hand, count_searches, damage, caplog):
    root, cache = hand
    ids = ["q0", "q1", "q2"]
    good = load_triples(root, "enc", ids, cache_dir=cache, k=2)
    (path,) = (cache / "hand" / "enc" / "triples").glob("*.npz")
    rows, scores, meta = _read_cached(path)
    if damage == "row_past_corpus":
        rows[2, 1] = 7  # the corpus has rows 0..6
    elif damage == "negative_row":
        rows[2, 1] = -1
    elif damage == "unsorted":
        scores[1] = scores[1][::-1] + np.array([0.0, 0.5], np.float32)  # ascending within a row
    elif damage == "nan_score":
        scores[0, 1] = np.nan
    elif damage == "int32_rows":
        rows = rows.astype(np.int32)
    else:
        rows, scores = rows[:2], scores[:2]
    _write_cached(path, rows, scores, meta)
    with caplog.at_level("WARNING", logger="asymgeo.data.triples"):
        again = load_triples(root, "enc", ids, cache_dir=cache, k=2)
    assert _fields(again) == _fields(good) and len(count_searches) == 2
    assert [r.getMessage() for r in caplog.records if "triple cache" in r.getMessage()] == [
        f"{path}: triple cache does not match its key or is damaged; rebuilding it"]


def test_an_unreadable_triple_cache_is_named_with_the_reason(hand, count_searches, caplog):
    root, cache = hand
    load_triples(root, "enc", ["q0"], cache_dir=cache, k=2)
    (path,) = (cache / "hand" / "enc" / "triples").glob("*.npz")
    path.write_bytes(b"not a zip file")
    with caplog.at_level("WARNING", logger="asymgeo.data.triples"):
        load_triples(root, "enc", ["q0"], cache_dir=cache, k=2)
    (msg,) = [r.getMessage() for r in caplog.records if "triple cache" in r.getMessage()]
    assert msg.startswith(f"{path}: unreadable triple cache, rebuilding it (") and len(msg) > len(str(path)) + 40


def test_a_subset_keeps_every_field_row_for_row(hand):
    root, cache = hand
    tr = load_triples(root, "enc", ["q0", "q1", "q2", "q3"], cache_dir=cache, k=2)
    sub = tr.subset(["q2", "q0"])
    pick = [2, 0]
    for name in ("X", "Y_pos", "Y_neg", "query_rows", "pos_rows", "neg_rows", "hard_negative_rows"):
        np.testing.assert_array_equal(getattr(sub, name), getattr(tr, name)[pick], err_msg=name)
    for name in ("query_ids", "pos_ids", "neg_ids", "hard_negative_ids"):
        assert getattr(sub, name) == [getattr(tr, name)[i] for i in pick], name
    assert (sub.dataset, sub.encoder, sub.split, sub.skipped) == (tr.dataset, tr.encoder, tr.split, tr.skipped)
    assert (tr.dataset, tr.encoder, tr.split) == ("hand", "enc", "custom")
    np.testing.assert_array_equal(sub.hard_negatives(), tr.hard_negatives()[pick])
    assert sub.hard_negatives().dtype == np.float32


def test_load_triples_defaults_to_the_train_split_and_honours_the_split_seed(hand):
    from asymgeo.data import adaptation_split

    root, cache = hand
    default = load_triples(root, "enc", cache_dir=cache, k=2)
    assert default.query_ids == load_triples(root, "enc", "train", cache_dir=cache, k=2).query_ids
    assert default.split == "train" and set(default.query_ids) <= {"q0", "q1"}
    ds = load_beir(root)
    for seed in (1, 2, 3, 4):
        want = [q for q in adaptation_split(ds, seed)["validation"] if q in ("q0", "q1")]
        assert load_triples(root, "enc", "validation", cache_dir=cache, k=1, seed=seed).query_ids == want


def test_mine_hard_negatives_messages_defaults_and_backend():
    C = np.eye(4, dtype=np.float32)
    with pytest.raises(ValueError) as e:
        mine_hard_negatives(np.ones((3, 4)), C, [set()], k=1)
    assert str(e.value) == "exclude: expected 3 collections (one per query), got 1"
    with pytest.raises(ValueError, match="^k: "):
        mine_hard_negatives(np.ones((1, 4)), C, [set()], k=0)
    big = np.eye(12, dtype=np.float32)
    res = mine_hard_negatives(np.ones((2, 12)), big, [set(), set()])
    assert res.indices.shape == (2, 8) and res.backend in ("numpy", "torch:cuda")
    empty = mine_hard_negatives(np.ones((0, 4)), C, [], k=2)
    assert empty.indices.shape == (0, 2) and empty.scores.shape == (0, 2) and empty.backend == "numpy"


def test_an_existing_read_only_triples_folder_falls_back_to_the_user_folder(hand, count_searches, tmp_path,
                                                                              monkeypatch):
    root, cache = hand
    user = tmp_path / "user-cache"
    monkeypatch.setenv("ASYMGEO_TRIPLES_DIR", str(user))
    ro = cache / "hand" / "enc" / "triples"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        load_triples(root, "enc", ["q0", "q1"], cache_dir=cache, k=2)
        assert list(ro.iterdir()) == [] and len(list(user.glob("hand-enc-*.npz"))) == 1
    finally:
        ro.chmod(0o755)


def test_a_cached_file_with_tied_scores_is_reused_and_an_unsorted_row_of_three_is_not(hand, count_searches):
    root, cache = hand
    ids = ["q0", "q1", "q2"]
    good = load_triples(root, "enc", ids, cache_dir=cache, k=3)
    (path,) = (cache / "hand" / "enc" / "triples").glob("*.npz")
    rows, scores, meta = _read_cached(path)
    tied = scores.copy()
    tied[:, :] = tied[:, :1]  # every score equal within a row: still sorted (non-increasing)
    _write_cached(path, rows, tied, meta)
    again = load_triples(root, "enc", ids, cache_dir=cache, k=3)
    assert len(count_searches) == 1 and _fields(again) == _fields(good)
    bad = np.tile(np.array([3.0, 1.0, 2.0], np.float32), (3, 1))  # first >= both others, yet unsorted
    _write_cached(path, rows, bad, meta)
    load_triples(root, "enc", ids, cache_dir=cache, k=3)
    assert len(count_searches) == 2


def test_triples_arrays_are_float32_and_split_errors_name_the_choices(hand):
    root, cache = hand
    tr = load_triples(root, "enc", ["q0", "q1"], cache_dir=cache, k=2)
    assert tr.X.dtype == tr.Y_pos.dtype == tr.Y_neg.dtype == np.float32
    with pytest.raises(ValueError) as e:
        load_triples(root, "enc", "dev", cache_dir=cache, k=2)
    assert str(e.value) == ("split 'dev': expected one of train, validation, test or a qrels split of hand "
                            "(train, test)")


def test_an_empty_validation_split_names_train_tsv(tmp_path):
    qs = [query(f"q{i}") for i in range(3)]
    root = write_beir(tmp_path / "d", [doc("a"), doc("b")], qs,
                      {"train": [("q0", "a", 0), ("q1", "a", 0), ("q2", "b", 0)], "test": [("q0", "a", 1)]})
    C = np.eye(2, dtype=np.float32)
    write_embeddings(tmp_path / "c" / "d" / "enc", C, ["a", "b"], np.vstack([C, C[:1]]), ["q0", "q1", "q2"],
                     {"normalised": True})
    with pytest.raises(ValueError, match=r"qrels/train\.tsv: split 'validation' has no usable relevance judgements"):
        load_triples(root, "enc", "validation", cache_dir=tmp_path / "c", k=1, require=True)


def test_the_split_seed_reaches_scifact_validation(shared_dir):
    from asymgeo.data import adaptation_split

    ds = load_beir("scifact", data_dir=shared_dir / "data")
    want = adaptation_split(ds, 7)["validation"]
    tr = load_triples(ds, "all-MiniLM-L6-v2", "validation", cache_dir=shared_dir / "embeddings", k=1, seed=7)
    assert sorted(tr.query_ids) == sorted(want) and set(want) != set(adaptation_split(ds)["validation"])


def test_a_cache_passed_in_is_checked_against_the_encoder_named(shared_dir):
    ds = load_beir("scifact", data_dir=shared_dir / "data")
    emb = load_embeddings(ds, "all-MiniLM-L6-v2", cache_dir=shared_dir / "embeddings")
    with pytest.raises(ValueError) as e:
        load_triples(ds, "all-mpnet-base-v2", "train", cache=emb, k=1)
    assert str(e.value) == (f"{emb.path}: embeddings of encoder 'all-MiniLM-L6-v2', not 'all-mpnet-base-v2'; pass "
                            "the all-mpnet-base-v2 cache (asymgeo embed scifact --encoder all-mpnet-base-v2)")
    assert load_triples(ds, "minilm", "train", cache=emb, k=1).encoder == "all-MiniLM-L6-v2"  # an alias is the same


# --------------------------------------------------------------------------- approximate mining (issue #21)
def _pinned_cache(tmp_path):
    """A stand-in embedding cache whose key inputs are fixed bytes and times."""
    import os
    import types

    d = tmp_path / "ds" / "enc"
    d.mkdir(parents=True)
    (d / "meta.json").write_bytes(b'{"dtype": "float16"}\n')
    (d / "corpus_ids.txt").write_bytes(b"d0\nd1\nd2\n")
    (d / "query_ids.txt").write_bytes(b"q0\nq1\n")
    (d / "corpus.npy").write_bytes(b"x" * 100)
    (d / "queries.npy").write_bytes(b"y" * 60)
    for name in ("corpus.npy", "queries.npy"):
        os.utime(d / name, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    return types.SimpleNamespace(path=d, corpus=np.zeros((3, 4)))


#: triples_cache_key of _pinned_cache, computed with the code before approximate mining existed.
_EXACT_KEY = "f4a66307f32c637f83bd388d9139bd14fe038decf63ffe74492f19a4bf89ee91"


def test_the_exact_mining_key_is_unchanged(tmp_path):
    from asymgeo.data.triples import triples_cache_key

    emb = _pinned_cache(tmp_path)
    args = (emb, ["q0", "q1"], [{1}, {0, 2}], 2, 1, False)
    assert triples_cache_key(*args) == _EXACT_KEY  # existing caches stay valid
    assert triples_cache_key(*args, None) == triples_cache_key(*args, {"index": "exact"}) == _EXACT_KEY


def test_the_approximate_mining_key_differs_and_follows_its_settings(tmp_path):
    pytest.importorskip("faiss")
    from asymgeo.data.triples import triples_cache_key
    from asymgeo.retrieval.approximate import approximate_settings

    emb = _pinned_cache(tmp_path)
    args = (emb, ["q0", "q1"], [{1}, {0, 2}], 2, 1, False)
    variants = [
        approximate_settings("ivf", 3),
        approximate_settings("ivf", 3, nlist=2),
        approximate_settings("ivf", 3, nlist=2, nprobe=1),
        approximate_settings("ivf", 3, seed=1),
        approximate_settings("hnsw", 3),
        approximate_settings("hnsw", 3, ef_search=100),
        approximate_settings("hnsw", 3, seed=1),
    ]
    keys = [triples_cache_key(*args, v) for v in variants]
    assert len(set(keys) | {_EXACT_KEY}) == len(variants) + 1
    assert triples_cache_key(*args, approximate_settings("ivf", 3)) == keys[0]  # stable
    # the defaults filled in: nlist=None and the default nlist mine the same negatives, one key
    assert approximate_settings("ivf", 3) == approximate_settings("ivf", 3, nlist=1, nprobe=1)


def test_ivf_mining_scanning_every_list_equals_brute_force():
    pytest.importorskip("faiss")
    rng = np.random.default_rng(6)
    C = rng.standard_normal((800, 16)).astype(np.float32)
    Q = rng.standard_normal((25, 16)).astype(np.float32)
    exclude = [set(rng.choice(800, size=int(rng.integers(0, 5)), replace=False).tolist()) for _ in range(25)]
    S = Q.astype(np.float64) @ C.T.astype(np.float64)
    for i, ex in enumerate(exclude):
        S[i, sorted(ex)] = -np.inf
    want = np.argsort(-S, axis=1, kind="stable")[:, :6]
    res = mine_hard_negatives(Q, C, exclude, k=6, index="ivf", nlist=8, nprobe=8)
    assert res.backend == "faiss-ivf"
    np.testing.assert_array_equal(res.indices, want)  # Gaussian data: no near ties
    np.testing.assert_allclose(res.scores, np.take_along_axis(S, want, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("index", ["ivf", "hnsw"])
def test_approximate_mining_by_hand_keeps_the_tie_rule(index):
    pytest.importorskip("faiss")
    Q = np.array([[1.0, 0.0], [0.0, 1.0]])
    C = np.array([[0.9, 0.0], [0.5, 0.5], [0.0, 0.8], [0.9, 0.0], [-1.0, 0.0]], dtype=np.float32)
    scores, rows = res = mine_hard_negatives(Q, C, [{0}, {1, 2}], k=3, index=index)
    assert rows.tolist() == [[3, 1, 2], [0, 3, 4]]  # as test_mine_hard_negatives_by_hand
    np.testing.assert_allclose(scores, [[0.9, 0.5, 0.0], [0.0, 0.0, 0.0]], atol=1e-7)
    assert res.backend == f"faiss-{index}"


def test_approximate_mining_that_finds_too_few_documents_says_to_raise_nprobe():
    pytest.importorskip("faiss")
    rng = np.random.default_rng(2)
    C = np.vstack([np.array([5.0, 0, 0]) + rng.standard_normal((30, 3)) * 0.1,
                   np.array([-5.0, 0, 0]) + rng.standard_normal((30, 3)) * 0.1]).astype(np.float32)
    Q = np.array([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"index='ivf': 2 of 2 queries got fewer than 40 unlabelled documents .*"
                                         r"\(first: query 0, 29 found\); raise nprobe \(now 1 of 2 lists\)"):
        mine_hard_negatives(Q, C, [{0}, set()], k=40, index="ivf", nlist=2, nprobe=1)
    assert mine_hard_negatives(Q, C, [{0}, set()], k=40, index="ivf", nlist=2, nprobe=2).indices.shape == (2, 40)


def test_approximate_mining_argument_errors():
    pytest.importorskip("faiss")
    from asymgeo.retrieval.approximate import ApproximateIndex

    C = np.eye(6, dtype=np.float32)
    Q = np.ones((1, 6))
    with pytest.raises(ValueError, match="index: expected one of 'exact', 'ivf', 'hnsw' or an ApproximateIndex, got 'flat'"):
        mine_hard_negatives(Q, C, [set()], k=1, index="flat")
    with pytest.raises(ValueError, match="nprobe: settings of an approximate index; exact mining"):
        mine_hard_negatives(Q, C, [set()], k=1, nprobe=2)
    with pytest.raises(ValueError, match="ef_search: an HNSW setting"):
        mine_hard_negatives(Q, C, [set()], k=1, index="ivf", ef_search=3)
    built = ApproximateIndex(C)
    with pytest.raises(ValueError, match="nprobe: set them on the ApproximateIndex"):
        mine_hard_negatives(Q, C, [set()], k=1, index=built, nprobe=1)
    with pytest.raises(ValueError, match=r"index: an ApproximateIndex of 6 x 6 documents, but the corpus has shape \(5, 6\)"):
        mine_hard_negatives(Q, C[:5], [set()], k=1, index=built)
    assert mine_hard_negatives(Q, C, [set()], k=2, index=built).backend == "faiss-ivf"
    empty = mine_hard_negatives(np.ones((0, 6)), C, [], k=2, index="hnsw")
    assert empty.indices.shape == (0, 2) and empty.backend == "faiss-hnsw"


def test_mining_recall_against_brute_force():
    pytest.importorskip("faiss")
    from asymgeo.data.triples import mining_recall

    rng = np.random.default_rng(9)
    C = rng.standard_normal((3000, 32)).astype(np.float32)
    Q = rng.standard_normal((60, 32)).astype(np.float32)
    exclude = [{int(i)} for i in rng.choice(3000, size=60)]
    full = mining_recall(Q, C, exclude, k=8, index="ivf", nlist=16, nprobe=16)
    assert full["recall"] == 1.0 and full["first_agreement"] == 1.0 and full["n_queries"] == 60
    assert full["settings"]["nlist"] == 16 and full["settings"]["nprobe"] == 16
    assert full["build_seconds"] > 0 and full["approx_seconds"] > 0 and full["exact_seconds"] > 0
    low = mining_recall(Q, C, exclude, k=8, index="ivf", nlist=16, nprobe=1)
    # the recall of the approximate negatives, recomputed from brute force and an independent IVF mining
    S = Q.astype(np.float64) @ C.T.astype(np.float64)
    for i, ex in enumerate(exclude):
        S[i, sorted(ex)] = -np.inf
    want = np.argsort(-S, axis=1, kind="stable")[:, :8]
    got = mine_hard_negatives(Q, C, exclude, k=8, index="ivf", nlist=16, nprobe=1).indices
    expect = np.mean([len(set(a) & set(b)) / 8 for a, b in zip(got.tolist(), want.tolist())])
    assert low["recall"] == pytest.approx(expect) and 0.0 < low["recall"] < 0.8
    sub = mining_recall(Q, C, exclude, k=8, index="hnsw", sample=10, seed=3)
    assert sub["n_queries"] == 10 and sub["settings"]["index"] == "hnsw"
    with pytest.raises(ValueError, match="index: 'exact' is the reference"):
        mining_recall(Q, C, exclude, index="exact")


@pytest.fixture
def count_approximate(monkeypatch):
    """Counts approximate indexes built by mine_hard_negatives."""
    pytest.importorskip("faiss")
    import asymgeo.data.triples as triples

    calls = []
    real = triples.ApproximateIndex

    class Counting(real):
        def __init__(self, *args, **kwargs):
            calls.append(kwargs.get("kind"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(triples, "ApproximateIndex", Counting)
    return calls


def test_load_triples_with_ivf_mining_has_its_own_cache(hand, count_searches, count_approximate):
    root, cache = hand
    folder = cache / "hand" / "enc" / "triples"
    ids = ["q0", "q1", "q2"]
    exact = load_triples(root, "enc", ids, cache_dir=cache, k=2)
    assert len(count_searches) == 1 and len(list(folder.glob("*.npz"))) == 1
    ivf = load_triples(root, "enc", ids, cache_dir=cache, k=2, mining="ivf")
    assert count_approximate == ["ivf"] and len(count_searches) == 1  # the exact cache was not reused
    assert len(list(folder.glob("*.npz"))) == 2
    # 7 documents: one list, scanned whole, so the negatives are the exact ones (test_load_triples_by_hand)
    assert ivf.hard_negative_ids == exact.hard_negative_ids == [["q0", "d0"], ["d2", "d5"], ["d1", "d3"]]
    again = load_triples(root, "enc", ids, cache_dir=cache, k=2, mining="ivf", mining_options={"nlist": 1})
    assert count_approximate == ["ivf"] and _fields(again) == _fields(ivf)  # same settings: from the cache
    load_triples(root, "enc", ids, cache_dir=cache, k=2, mining="ivf", mining_options={"seed": 1})
    load_triples(root, "enc", ids, cache_dir=cache, k=2, mining="hnsw", mining_options={"ef_search": 8})
    assert count_approximate == ["ivf", "ivf", "hnsw"] and len(list(folder.glob("*.npz"))) == 4
    load_triples(root, "enc", ids, cache_dir=cache, k=2)
    assert len(count_searches) == 1  # the exact file is still there and still valid


def test_load_triples_checks_the_mining_arguments(hand):
    root, cache = hand
    with pytest.raises(ValueError, match="mining: expected one of 'exact', 'ivf', 'hnsw', got 'approx'"):
        load_triples(root, "enc", ["q0"], cache_dir=cache, k=2, mining="approx")
    with pytest.raises(ValueError, match=r"mining_options: exact mining takes no options, got nprobe \(pass mining='ivf'"):
        load_triples(root, "enc", ["q0"], cache_dir=cache, k=2, mining_options={"nprobe": 4})
    with pytest.raises(ValueError, match=r"mining_options: ef_search not an option of mining='ivf' \(expected some of "
                                         r"nlist, nprobe, seed\)"):
        load_triples(root, "enc", ["q0"], cache_dir=cache, k=2, mining="ivf", mining_options={"ef_search": 4})
    with pytest.raises(TypeError, match="mining_options: expected a mapping"):
        load_triples(root, "enc", ["q0"], cache_dir=cache, k=2, mining="ivf", mining_options=[("nprobe", 4)])
    pytest.importorskip("faiss")
    with pytest.raises(ValueError, match="nprobe: 3 exceeds nlist = 1"):
        load_triples(root, "enc", ["q0"], cache_dir=cache, k=2, mining="ivf", mining_options={"nprobe": 3})
