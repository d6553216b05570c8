"""asymgeo._ids.IdIndex: compact id lists (issue #21), against plain lists and dicts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asymgeo._ids import IdIndex

_ID = st.text(st.characters(blacklist_characters="\x00\n", blacklist_categories=("Cs",)), min_size=1,
              max_size=12).filter(lambda s: s.strip() != "")


@settings(max_examples=60, deadline=None)
@given(st.lists(_ID, min_size=0, max_size=40, unique=True), st.lists(_ID, max_size=10))
def test_an_id_index_behaves_as_the_list_and_dict_of_its_ids(ids, probes):
    ix = IdIndex(ids)
    index = {s: i for i, s in enumerate(ids)}
    assert len(ix) == len(ids) and list(ix) == ids and ix == ids and not (ix != ids)
    assert [ix[i] for i in range(len(ids))] == ids and ix[1:3] == ids[1:3]
    want = [index.get(s, -1) for s in ids + probes]
    np.testing.assert_array_equal(ix.lookup(ids + probes), want)
    assert all((s in ix) == (s in index) for s in ids + probes)
    rank = {s: k for k, s in enumerate(sorted(ids))}          # Python's str order (code points)
    np.testing.assert_array_equal(ix.sort_rank(), [rank[s] for s in ids])


@settings(max_examples=30, deadline=None)
@given(st.lists(_ID, min_size=1, max_size=30, unique=True), st.booleans())
def test_reading_a_file_equals_building_from_the_list(tmp_path_factory, ids, final_newline):
    path = tmp_path_factory.mktemp("ids") / "ids.txt"
    path.write_bytes(("\n".join(ids) + ("\n" if final_newline else "")).encode("utf-8"))
    got = IdIndex.from_file(path)
    assert list(got) == ids and got == IdIndex(ids)
    np.testing.assert_array_equal(got.sort_rank(), IdIndex(ids).sort_rank())


@pytest.mark.parametrize(("text", "message"), [
    ("a\n\nb\n", r"ids\.txt, line 2: empty id"),
    ("a\n \t\nb\n", r"ids\.txt, line 2: empty id"),
    ("a\nb\u3000\n\u3000\n", r"ids\.txt, line 3: empty id"),           # str.strip() empties it
    ("x\ny\nz\ny\nx\n", r"ids\.txt: duplicate corpus id 'y' on lines 2 and 4"),
    ("a\nb\x00c\n", r"ids\.txt, line 2: corpus id contains a NUL"),
])
def test_a_bad_id_file_is_refused_naming_the_line(tmp_path, text, message):
    (tmp_path / "ids.txt").write_bytes(text.encode("utf-8"))
    with pytest.raises(ValueError, match=message):
        IdIndex.from_file(tmp_path / "ids.txt", what="corpus")


def test_lists_are_refused_the_same_way():
    with pytest.raises(ValueError, match=r"duplicate query id 'q' on lines 1 and 3"):
        IdIndex(["q", "r", "q", "r"], what="query")
    with pytest.raises(ValueError, match=r"row 1: empty id"):
        IdIndex(["a", "  "])


def test_lookups_of_unknown_or_longer_ids_miss_and_rows_names_the_first():
    ix = IdIndex(["d1", "d22", "d3"], what="document", source="ids.txt")
    np.testing.assert_array_equal(ix.lookup(["d22", "d223", "d2", ""]), [1, -1, -1, -1])
    with pytest.raises(KeyError, match=r"ids\.txt: no document with id 'd4'"):
        ix.rows(["d3", "d4", "d5"])
    np.testing.assert_array_equal(ix.rows(["d3", "d1"]), [2, 0])
    assert ix.take([2, 0]) == ["d3", "d1"] and ix[np.array([1])] == ["d22"]


def test_a_million_ids_take_bytes_per_id_not_python_objects(tmp_path):
    n = 1_000_000
    (tmp_path / "ids.txt").write_text("".join(f"doc{i:07d}\n" for i in range(n)), encoding="utf-8")
    ix = IdIndex.from_file(tmp_path / "ids.txt")
    assert len(ix) == n and ix[123_456] == "doc0123456" and ix.rows(["doc0999999"])[0] == n - 1
    assert ix.nbytes == n * (10 + 10 + 8)                      # the ids, their sorted copy, the order


def test_the_retrieval_layer_gives_the_same_answers_from_an_id_index_as_from_the_list():
    from asymgeo.retrieval.metrics import RelevanceTable, order_ties_by_id
    from asymgeo.retrieval.search import SearchResult

    rng = np.random.default_rng(0)
    docs = [f"d{j}" for j in rng.permutation(50)] + ["é1", "e\u0301", "Z"]
    ix = IdIndex(docs)
    qrels = {"q1": {docs[3]: 2, docs[7]: 1, "missing": 1}, "q0": {docs[40]: 1}}
    a = RelevanceTable(qrels, ["q0", "q1"], docs, unknown_docs="ignore")
    b = RelevanceTable(qrels, ["q0", "q1"], ix, unknown_docs="ignore")
    for attr in ("rows", "_keys", "_vals", "n_rel", "ideal"):
        np.testing.assert_array_equal(getattr(a, attr), getattr(b, attr))
    with pytest.raises(ValueError, match=r"document 'missing' is not in corpus_ids"):
        RelevanceTable(qrels, ["q0", "q1"], ix)
    scores = np.round(rng.normal(size=(4, 20)), 1).astype(np.float32)    # many exact ties
    idx = rng.permuted(np.tile(np.arange(len(docs)), (4, 1)), axis=1)[:, :20]
    order = np.argsort(-scores, axis=1, kind="stable")
    scores, idx = np.take_along_axis(scores, order, 1), np.take_along_axis(idx, order, 1)
    for descending in (True, False):
        np.testing.assert_array_equal(order_ties_by_id(scores, idx, ix, descending=descending),
                                      order_ties_by_id(scores, idx, docs, descending=descending))
    res = SearchResult(scores, idx)
    want = {f"q{i}": {docs[j]: float(s) for j, s in zip(idx[i], scores[i])} for i in range(4)}
    assert res.to_run([f"q{i}" for i in range(4)], ix) == want == res.to_run([f"q{i}" for i in range(4)], docs)


def test_an_embedding_cache_holds_its_ids_compactly(tmp_path):
    from asymgeo.data.cache import EmbeddingCache

    (tmp_path / "c").mkdir()
    cache = EmbeddingCache(path=tmp_path / "c", corpus=np.zeros((3, 2), np.float16), queries=np.zeros((1, 2)),
                           corpus_ids=["a", "b", "c"], query_ids=["q"], meta={})
    assert isinstance(cache.corpus_ids, IdIndex) and cache.corpus_ids == ["a", "b", "c"]
    np.testing.assert_array_equal(cache.corpus_rows(["c", "a"]), [2, 0])
    assert cache.has_corpus_id("b") and not cache.has_corpus_id("d") and not cache.has_corpus_id(3)
    with pytest.raises(KeyError, match=r"no document with id 'd' in the cache"):
        cache.corpus_rows(["a", "d"])
    with pytest.raises(KeyError, match=r"no document with id 3 in the cache"):
        cache.corpus_rows(["a", 3])
    with pytest.raises(ValueError, match=r"corpus_ids\.txt: duplicate corpus id 'a' on lines 1 and 2"):
        EmbeddingCache(path=tmp_path / "c", corpus=np.zeros((2, 2)), queries=np.zeros((1, 2)),
                       corpus_ids=["a", "a"], query_ids=["q"], meta={})


def test_an_id_file_that_is_not_utf8_is_refused_at_load_naming_the_line(tmp_path):
    (tmp_path / "ids.txt").write_bytes(b"a\nb\nc\xff\nd\n")
    with pytest.raises(ValueError, match=r"ids\.txt, line 3: corpus id is not valid UTF-8"):
        IdIndex.from_file(tmp_path / "ids.txt", what="corpus")
