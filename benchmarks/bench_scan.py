"""Reading a BEIR folder twice: the corpus parsed, then its scan remembered per file version (issue #40).

A synthetic ``corpus.jsonl`` (60 words a document) is written to a temporary folder and
settled (its modification time set an hour back, :mod:`asymgeo.data.scan_memo`); the first
``load_beir(...).fingerprint()`` parses and hashes it, the second reads the remembered scan.
Both return the same ids and digest (checked).  The ratio is the reference (parse) over the
memo, measured in the same run.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
from pathlib import Path


def _corpus(folder: Path, n: int) -> None:
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "protein", "cell", "gene", "study", "result", "method"]
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(json.dumps({"_id": f"doc{i}", "title": "t", "text": " ".join(rng.choice(words) for _ in range(60))})
                     + "\n")
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "x"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tdoc1\t1\n")
    st = os.stat(folder / "corpus.jsonl")
    os.utime(folder / "corpus.jsonl", ns=(st.st_atime_ns, st.st_mtime_ns - 3600 * 10**9))


def run(quick: bool = False) -> str:
    from asymgeo.data import load_beir, scan_memo

    sizes = [20_000] if quick else [100_000, 500_000]
    rows = []
    old = os.environ.get("ASYMGEO_SCAN_DIR")
    try:
        for n in sizes:
            with tempfile.TemporaryDirectory() as tmp:
                os.environ["ASYMGEO_SCAN_DIR"] = str(Path(tmp) / "memo")
                folder = Path(tmp) / "ds"
                _corpus(folder, n)
                times, fps = [], []
                for _ in range(2):
                    before = scan_memo.SCAN_PATHS["memo"]
                    t0 = time.perf_counter()
                    fps.append(load_beir(folder).fingerprint())
                    times.append(time.perf_counter() - t0)
                assert scan_memo.SCAN_PATHS["memo"] == before + 1, "the second read did not use the memo"
                assert fps[0] == fps[1]
                mb = os.path.getsize(folder / "corpus.jsonl") / 1e6
                rows.append(f"| {n:,} | {mb:.0f} | {times[0]:.2f} | {times[1]:.3f} | **{times[0] / times[1]:.0f}x** |")
    finally:
        if old is None:
            os.environ.pop("ASYMGEO_SCAN_DIR", None)
        else:
            os.environ["ASYMGEO_SCAN_DIR"] = old
    return ("## Reading a corpus twice (`asymgeo.data.scan_memo`)\n\n"
            "`load_beir(folder).fingerprint()` on a settled synthetic corpus: the first read parses and hashes "
            "`corpus.jsonl`, the second reads the scan remembered for that file version (same ids and digest, "
            "checked). Every command that opens a BEIR folder pays the first column once per file version, then "
            "the second.\n\n"
            "| documents | corpus MB | parse (s) | remembered (s) | parse / remembered |\n|---|---|---|---|---|\n"
            + "\n".join(rows) + "\n")
