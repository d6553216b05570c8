"""Synthetic BEIR datasets of any size and a deterministic encoder, for scale benchmarks.

Nothing here needs the network or a neural model, so the real commands (``embed``,
``select --validate``, ``fit``, ``evaluate --adapter``) can be run on millions of
documents on any machine (issue #21, ``benchmarks/bench_scale.py``, docs/scaling.md).

The dataset (:func:`make_synthetic_beir`)
    Documents are bags of 12 tokens: 4 of their topic's 8 words, 3 words from a rare
    vocabulary of 200,000 (near-unique combinations, so a document can be found by them)
    and 5 background words drawn from a Zipf law over 2,000 common words.  A query names
    one document: 2 of its 3 rare words, 2 of its topic's words (not necessarily the
    document's own) and a question word, so queries share tokens with their relevant
    documents but not all of them, and other documents of the topic compete.  A fifth of
    the queries have a second relevant document, from the same topic.  Train, dev and
    test queries are disjoint and name disjoint documents; every random choice comes from
    ``numpy.random.default_rng(seed)``.

The encoder (:class:`HashProjectionEncoder`, registry name ``synthetic-hash-768``)
    Feature hashing with a seeded random projection: each lower-cased whitespace token
    ``t`` adds ``s1(t) R[h1(t)] + s2(t) R[h2(t)]`` to the text's vector, where ``h1, h2``
    are two CRC-32 hashes of ``t`` into ``buckets`` rows of a fixed Gaussian matrix ``R``
    (``buckets x dim``, from ``default_rng(seed)``) and ``s1, s2 = ±1`` come from further
    hash bits; the sum is L2-normalised by the cache writer.  It is a linear map of the
    (signed, hashed) bag of words, so inner products approximate token overlap: cheap,
    deterministic across processes and machines (CRC-32, not Python's salted ``hash``),
    and with the structure that exact search, mining and training need.  It is
    registered for benchmarks only: it knows nothing of language.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import building_folder, check_writable_parent
from .._validation import check_int

__all__ = ["HashProjectionEncoder", "make_synthetic_beir", "HASH_ENCODER_NAME", "HASH_ENCODER_MODEL",
           "SYNTHETIC_FORMAT"]

#: registry name of the benchmark encoder (``asymgeo embed DATASET --encoder synthetic-hash-768``)
HASH_ENCODER_NAME = "synthetic-hash-768"
#: its ``model`` field: not a Hugging Face id; :func:`asymgeo.data.load_encoder` recognises it
HASH_ENCODER_MODEL = "asymgeo/hash-projection"
SYNTHETIC_FORMAT = 1

_TOPIC_WORDS = 8
_DOC_TOPIC_WORDS = 4
_RARE_VOCAB = 200_000
_DOC_RARE = 3
_BACKGROUND_VOCAB = 2_000
_DOC_BACKGROUND = 5
_DOCS_PER_TOPIC = 100
_QUESTION_WORDS = ("what", "how", "which", "why", "does", "is", "where", "when")
_SECOND_RELEVANT = 0.2


class HashProjectionEncoder:
    """Signed feature hashing into ``buckets`` rows of a seeded Gaussian matrix (see module docstring).

    ``encode(texts)`` returns the (n, dim) float32 sum ``sum_t s1(t) R[h1(t)] + s2(t) R[h2(t)]``
    over each text's tokens (unnormalised: the cache writer normalises, as for every
    encoder whose spec says ``normalize``).

    Parameters
    ----------
    dim : output dimension.
    buckets : rows of ``R`` (hash range).
    seed : seed of ``R``.
    batch_size : texts per :meth:`encode` call the cache writer makes.
    """

    def __init__(self, dim: int = 768, *, buckets: int = 1 << 14, seed: int = 0, batch_size: int = 8192):
        self.dim = check_int(dim, "dim")
        self.buckets = check_int(buckets, "buckets", min_value=2)
        self.seed = check_int(seed, "seed", min_value=0)
        self.batch_size = check_int(batch_size, "batch_size")
        self.table = np.random.default_rng(self.seed).standard_normal((self.buckets, self.dim), dtype=np.float32)
        self._tokens: dict[str, tuple[int, int, float, float]] = {}

    def __getstate__(self) -> dict[str, Any]:  # workers rebuild the table from the seed
        return {"dim": self.dim, "buckets": self.buckets, "seed": self.seed, "batch_size": self.batch_size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["dim"], buckets=state["buckets"], seed=state["seed"],  # type: ignore[misc]
                      batch_size=state["batch_size"])

    def _hash(self, token: str) -> tuple[int, int, float, float]:
        b = token.encode("utf-8")
        h1 = zlib.crc32(b)
        h2 = zlib.crc32(b, 0x9E3779B9)
        got = (h1 % self.buckets, h2 % self.buckets, 1.0 if h1 >> 31 else -1.0, 1.0 if h2 >> 31 else -1.0)
        if len(self._tokens) < 4_000_000:  # memo bounded: a vocabulary this size is ~0.5 GB of dict
            self._tokens[token] = got
        return got

    def hashed_counts(self, texts: Sequence[str]) -> Any:
        """The (n, buckets) signed hashed bag of words, a ``scipy.sparse.csr_matrix`` (float32)."""
        from scipy import sparse

        memo, hsh = self._tokens, self._hash
        cols: list[int] = []
        vals: list[float] = []
        indptr = [0]
        for text in texts:
            for tok in text.lower().split():
                h = memo.get(tok) or hsh(tok)
                cols.append(h[0])
                cols.append(h[1])
                vals.append(h[2])
                vals.append(h[3])
            indptr.append(len(cols))
        H = sparse.csr_matrix((np.asarray(vals, dtype=np.float32), np.asarray(cols, dtype=np.int32),
                               np.asarray(indptr, dtype=np.int64)), shape=(len(texts), self.buckets))
        H.sum_duplicates()
        return H

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(n, dim) float32 embeddings ``H R`` of ``texts`` (a text without tokens maps to zero)."""
        if isinstance(texts, str):
            raise TypeError("texts: expected a sequence of strings, got one string")
        H = self.hashed_counts(texts)
        return np.ascontiguousarray(H @ self.table, dtype=np.float32)

    def _dimension(self) -> int:
        return self.dim

    def info(self) -> dict[str, Any]:
        """What ``meta.json`` records of this encoder."""
        from .._version import __version__

        return {"package_version": __version__, "model_path": None, "dimension": self.dim,
                "hash_projection": {"buckets": self.buckets, "seed": self.seed, "hashes": "crc32, crc32(start=0x9E3779B9)"}}


def _word_arrays(rng: np.random.Generator, n_docs: int, n_topics: int) -> dict[str, np.ndarray]:
    topic = rng.integers(0, n_topics, size=n_docs)
    topic_words = np.argsort(rng.random((n_docs, _TOPIC_WORDS)), axis=1)[:, :_DOC_TOPIC_WORDS]
    rare = rng.integers(0, _RARE_VOCAB, size=(n_docs, _DOC_RARE))
    zipf = 1.0 / np.arange(1, _BACKGROUND_VOCAB + 1)
    background = rng.choice(_BACKGROUND_VOCAB, size=(n_docs, _DOC_BACKGROUND), p=zipf / zipf.sum())
    return {"topic": topic, "topic_words": topic_words, "rare": rare, "background": background}


def _doc_text(w: dict[str, np.ndarray], i: int) -> str:
    t = int(w["topic"][i])
    words = [f"t{t}x{j}" for j in w["topic_words"][i]]
    words += [f"r{j}" for j in w["rare"][i]]
    words += [f"b{j}" for j in w["background"][i]]
    return " ".join(words)


def make_synthetic_beir(
    folder: str | os.PathLike,
    n_docs: int,
    *,
    n_train: int = 2000,
    n_dev: int = 200,
    n_test: int = 200,
    seed: int = 0,
    overwrite: bool = False,
    progress: bool = False,
) -> Path:
    """Write a synthetic dataset in BEIR layout (see the module docstring for its design).

    Files: ``corpus.jsonl`` (``_id`` ``d0``, ``d1``, ...; empty titles), ``queries.jsonl``,
    ``qrels/{train,dev,test}.tsv`` and ``synthetic.json`` (generator, parameters, seed).
    The folder is built beside ``folder`` and swapped in only when complete; an existing
    ``folder`` is refused unless ``overwrite`` (then replaced only once the new one is
    complete).

    Parameters
    ----------
    folder : destination folder.
    n_docs : corpus size (>= 100 and at least twice the number of queries).
    n_train, n_dev, n_test : queries per split (official train/dev/test splits, so
        :func:`asymgeo.data.adaptation_split` uses them as they are).
    seed : every random choice.

    Returns
    -------
    Path of the finished folder.
    """
    n_docs = check_int(n_docs, "n_docs", min_value=100)
    sizes = {"train": check_int(n_train, "n_train"), "dev": check_int(n_dev, "n_dev"),
             "test": check_int(n_test, "n_test")}
    seed = check_int(seed, "seed", min_value=0)
    n_q = sum(sizes.values())
    if 2 * n_q > n_docs:
        raise ValueError(f"n_docs: {n_docs} documents cannot give {n_q} queries distinct relevant documents "
                         f"with room for second ones (need n_docs >= {2 * n_q})")
    dest = Path(folder)
    if dest.exists() and not dest.is_dir():
        raise NotADirectoryError(f"{dest}: expected a folder for the synthetic dataset, found a file")
    if dest.is_dir() and any(dest.iterdir()) and not overwrite:
        raise FileExistsError(f"{dest}: folder exists and is not empty; pass overwrite=True (--overwrite) to replace "
                              "it (the old one stays until the new one is complete)")
    check_writable_parent(dest, "folder")
    rng = np.random.default_rng(seed)
    n_topics = max(1, n_docs // _DOCS_PER_TOPIC)
    w = _word_arrays(rng, n_docs, n_topics)
    from tqdm.auto import tqdm

    with building_folder(dest) as tmp:
        with open(tmp / "corpus.jsonl", "w", encoding="utf-8") as fh:
            block = 65536
            with tqdm(total=n_docs, unit="doc", unit_scale=True, desc="synthetic corpus", disable=not progress) as bar:
                for d0 in range(0, n_docs, block):
                    d1 = min(n_docs, d0 + block)
                    fh.writelines(f'{{"_id": "d{i}", "title": "", "text": "{_doc_text(w, i)}"}}\n' for i in range(d0, d1))
                    bar.update(d1 - d0)
        # relevant documents: distinct across all queries; second ones from the same topic
        by_topic_order = np.argsort(w["topic"], kind="stable")
        topic_start = np.searchsorted(w["topic"][by_topic_order], np.arange(n_topics + 1))
        first = rng.choice(n_docs, size=n_q, replace=False)
        used = set(first.tolist())
        queries: list[str] = []
        qrels: dict[str, list[tuple[str, str]]] = {s: [] for s in sizes}
        split_of = np.repeat(np.array(list(sizes)), list(sizes.values()))
        for qi, d in enumerate(first.tolist()):
            t = int(w["topic"][d])
            rare = rng.choice(w["rare"][d], size=2, replace=False)
            tw = rng.choice(_TOPIC_WORDS, size=2, replace=False)
            qwords = [str(rng.choice(_QUESTION_WORDS))] + [f"r{j}" for j in rare] + [f"t{t}x{j}" for j in tw]
            qid = f"q{qi}"
            queries.append(json.dumps({"_id": qid, "text": " ".join(qwords)}) + "\n")
            split = str(split_of[qi])
            qrels[split].append((qid, f"d{d}"))
            if rng.random() < _SECOND_RELEVANT:
                members = by_topic_order[topic_start[t]:topic_start[t + 1]]
                free = [int(m) for m in members if int(m) not in used]
                if free:
                    d2 = free[int(rng.integers(0, len(free)))]
                    used.add(d2)
                    qrels[split].append((qid, f"d{d2}"))
        (tmp / "queries.jsonl").write_text("".join(queries), encoding="utf-8")
        (tmp / "qrels").mkdir()
        for split, rows in qrels.items():
            (tmp / "qrels" / f"{split}.tsv").write_text(
                "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, d in rows), encoding="utf-8")
        meta = {"format": SYNTHETIC_FORMAT, "generator": "asymgeo.data.synthetic.make_synthetic_beir",
                "n_docs": n_docs, "queries": sizes, "seed": seed, "n_topics": n_topics,
                "design": {"doc_tokens": {"topic": _DOC_TOPIC_WORDS, "rare": _DOC_RARE, "background": _DOC_BACKGROUND},
                           "topic_words": _TOPIC_WORDS, "rare_vocabulary": _RARE_VOCAB,
                           "background_vocabulary": _BACKGROUND_VOCAB, "second_relevant": _SECOND_RELEVANT},
                "encoder": HASH_ENCODER_NAME}
        (tmp / "synthetic.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return dest
