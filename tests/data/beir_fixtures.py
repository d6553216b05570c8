"""Helpers for the data-layer tests: hand-written BEIR folders."""

from __future__ import annotations

import json
from pathlib import Path


def write_beir(
    root: Path,
    corpus: list[dict] | list[str],
    queries: list[dict] | list[str],
    qrels: dict[str, list[tuple[str, str, int]] | list[str]],
    *,
    header: bool = True,
) -> Path:
    """Write a BEIR folder; list items may be dicts (JSON-encoded) or raw lines."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "qrels").mkdir(exist_ok=True)

    def line(x):
        return x if isinstance(x, str) else json.dumps(x)

    (root / "corpus.jsonl").write_text("".join(line(x) + "\n" for x in corpus), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(line(x) + "\n" for x in queries), encoding="utf-8")
    for split, rows in qrels.items():
        text = "query-id\tcorpus-id\tscore\n" if header else ""
        text += "".join((r if isinstance(r, str) else "\t".join(map(str, r))) + "\n" for r in rows)
        (root / "qrels" / f"{split}.tsv").write_text(text, encoding="utf-8")
    return root


def doc(i, title="", text=None):
    return {"_id": str(i), "title": title, "text": text if text is not None else f"document {i}", "metadata": {}}


def query(i, text=None):
    return {"_id": str(i), "text": text if text is not None else f"question {i}", "metadata": {}}
