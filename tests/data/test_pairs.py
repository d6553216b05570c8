"""Tests of asymgeo.data.pairs: relevance pairs and a corpus, in the layouts sentence-transformers
users hold them, written as the BEIR folder the rest of asymgeo reads."""

from __future__ import annotations

import hashlib
import json

import pytest

from asymgeo.data import adaptation_split, load_beir
from asymgeo.data.pairs import PAIRS_MARKER, pairs_dataset, read_corpus, read_pairs


class FakeDataset:
    """What asymgeo reads of a ``datasets.Dataset``: ``column_names`` and rows as dicts."""

    def __init__(self, columns: dict[str, list]):
        self.column_names = list(columns)
        self._rows = [dict(zip(columns, vals)) for vals in zip(*columns.values())]

    def __iter__(self):
        return iter(self._rows)

    def __len__(self):
        return len(self._rows)


def _qid(text: str) -> str:
    return "q-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def test_every_pair_layout_reads_the_same_pairs(tmp_path):
    want = [("q one", "pos one", ("neg one",)), ("q two", "pos two", ())]
    f = tmp_path / "pairs.jsonl"
    f.write_text('{"query": "q one", "positive": "pos one", "negative": "neg one"}\n\n'
                 '["q two", "pos two"]\n', encoding="utf-8")
    layouts = [
        [("q one", "pos one", "neg one"), ["q two", "pos two"]],
        [{"anchor": "q one", "positive": "pos one", "negative": "neg one"}, {"question": "q two", "passage": "pos two"}],
        [{"negative_1": "neg one", "pos": "pos one", "query": "q one"}, {"query": "q two", "document": "pos two"}],
        [{"a": "q one", "b": "pos one", "c": "neg one"}, {"a": "q two", "b": "pos two", "c": None}],  # by position
        FakeDataset({"sentence_A": ["q one", "q two"], "sentence_B": ["pos one", "pos two"], "n": ["neg one", None]}),
        f,
    ]
    for layout in layouts:
        assert read_pairs(layout).pairs == want, layout


@pytest.mark.parametrize("pairs, match", [
    ([("q", "p", 1)], r"pairs\[0\]: negative: expected a text, got int"),
    ([("q",)], r"pairs\[0\]: expected \(query, positive"),
    ([{"anchor": "q", "positive": "  "}], r"pairs\[0\]: 'positive': empty text"),
    ([{"sentence1": "a", "sentence2": "b", "score": 0.5}], r"pairs\[0\]: field 'score': scored pairs"),
    (FakeDataset({"s1": ["a"], "s2": ["b"], "label": [1]}), r"pairs\[0\]: field 'label'"),
    ([], "pairs: no pairs"),
    (42, "pairs: expected a list"),
])
def test_bad_pairs_are_named(pairs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        read_pairs(pairs)


def test_a_bad_jsonl_line_is_named_by_file_and_line(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('["q", "p"]\n{"query": "q2"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{f}, line 2: invalid JSON"):
        read_pairs(f)
    f.write_text('["q", "p"]\n{"query": "q2", "positive": 3}\n', encoding="utf-8")
    with pytest.raises(TypeError, match=rf"{f}, line 2: 'positive': expected a text"):
        read_pairs(f)


def test_corpus_layouts_and_their_errors(tmp_path):
    assert read_corpus(["a", "b"]) == [("d0", "", "a"), ("d1", "", "b")]
    assert read_corpus({"x": "a", "y": {"title": "T", "text": "b"}}) == [("x", "", "a"), ("y", "T", "b")]
    f = tmp_path / "c.jsonl"
    f.write_text('{"_id": "x", "text": "a"}\n{"id": "y", "title": "T", "text": "b"}\n', encoding="utf-8")
    assert read_corpus(f) == [("x", "", "a"), ("y", "T", "b")]
    f.write_text('{"_id": "x", "text": "a"}\n{"_id": "x", "text": "b"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{f}, line 2: document id 'x' already given at {f}, line 1"):
        read_corpus(f)
    with pytest.raises(ValueError, match=r"corpus\[0\]: document id 'a\\tb' holds a tab"):
        read_corpus([{"_id": "a\tb", "text": "t"}])


def test_the_folder_holds_the_pairs_as_qrels_and_finds_positives_by_text(tmp_path):
    corpus = {"d1": {"title": "Fever", "text": "is caused by infection"}, "d2": "proteins fold", "d3": "trains run"}
    pairs = [("what causes fever", "Fever is caused by infection"),  # title + " " + text
             ("what causes fever", "proteins fold"),                  # a second positive of the same query
             ("how do proteins fold", "proteins fold", "trains run"),
             ("new question", "a positive not in the corpus", "a negative not in the corpus")]
    evals = [("held out", "trains run")]
    ds = pairs_dataset(pairs, corpus=corpus, eval_pairs=evals, data_dir=tmp_path)
    added = {t: "p-" + hashlib.sha256(t.encode()).hexdigest()[:12]
             for t in ("a positive not in the corpus", "a negative not in the corpus")}
    assert list(ds.corpus_ids) == ["d1", "d2", "d3", *added.values()]
    assert ds.splits == ["train", "test"]
    assert ds.qrels("train") == {_qid("what causes fever"): {"d1": 1, "d2": 1},
                                 _qid("how do proteins fold"): {"d2": 1},
                                 _qid("new question"): {added["a positive not in the corpus"]: 1}}
    assert ds.qrels("test") == {_qid("held out"): {"d3": 1}}
    assert ds.queries[_qid("held out")] == "held out"
    marker = json.loads((ds.path / PAIRS_MARKER).read_text())
    assert ds.path.name == f"pairs-{marker['sha256'][:12]}" and marker["n_pairs"] == {"train": 4, "test": 1}
    # the same inputs: the same folder, not rewritten; a foreign folder of a given name is never replaced
    stamp = (ds.path / "corpus.jsonl").stat().st_mtime_ns
    assert pairs_dataset(pairs, corpus=corpus, eval_pairs=evals, data_dir=tmp_path).path == ds.path
    assert (ds.path / "corpus.jsonl").stat().st_mtime_ns == stamp
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(ValueError, match="was not written by asymgeo from pairs"):
        pairs_dataset(pairs, data_dir=tmp_path, name="mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_a_query_both_trained_and_evaluated_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"eval_pairs\[1\]: query 'q1' is also a training query \(train_pairs\[0\]\)"):
        pairs_dataset([("q1", "a"), ("q2", "b")], eval_pairs=[("q3", "a"), ("q1", "b")], data_dir=tmp_path)
    assert not any(tmp_path.iterdir())


def test_without_eval_pairs_the_split_carves_test_from_the_pairs(tmp_path):
    pairs = [(f"question {i}", f"answer {i}") for i in range(20)]
    ds = pairs_dataset(pairs, data_dir=tmp_path)
    assert ds.splits == ["test"] and len(ds.corpus_ids) == 20  # the positives are the corpus
    parts = adaptation_split(load_beir(ds.path))
    assert [len(parts[k]) for k in ("train", "validation", "test")] == [12, 4, 4]
    assert set().union(*map(set, parts.values())) == {_qid(f"question {i}") for i in range(20)}


def test_a_real_datasets_dataset_in_the_trainer_layout():
    """#38: pairs as a `datasets.Dataset` in the column layout SentenceTransformerTrainer takes (named anchor /
    positive / negative columns, or any names read by position), not only the stand-in above."""
    datasets = pytest.importorskip("datasets")
    named = datasets.Dataset.from_dict({"anchor": ["q one", "q two"], "positive": ["pos one", "pos two"],
                                        "negative": ["neg one", "neg two"]})
    assert read_pairs(named).pairs == [("q one", "pos one", ("neg one",)), ("q two", "pos two", ("neg two",))]
    by_position = datasets.Dataset.from_dict({"question": ["q one"], "answer": ["pos one"]})
    assert read_pairs(by_position).pairs == [("q one", "pos one", ())]
    with pytest.raises(ValueError, match=r"pairs\[0\]: field 'score'"):  # scored pairs are not relevance pairs
        read_pairs(datasets.Dataset.from_dict({"s1": ["a"], "s2": ["b"], "score": [0.5]}))
