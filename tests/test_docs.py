"""The README quotes benchmark figures only from the generated docs/benchmarks.md of the same commit."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _section(text: str, title: str) -> str:
    start = text.index(title)
    nxt = text.find("\n## ", start + len(title))
    return text[start: nxt if nxt != -1 else len(text)]


def test_every_ratio_the_readme_quotes_is_on_the_benchmark_page():
    readme = _section((ROOT / "README.md").read_text(), "## Benchmarks")
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    quoted = re.findall(r"\*\*(\d+(?:\.\d+)?x)\*\*", readme)
    assert len(quoted) >= 6, quoted
    missing = [q for q in quoted if q not in page]
    assert not missing, f"README quotes ratios the benchmark page does not hold: {missing}"
    for stamp in re.findall(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}) UTC", readme):
        assert stamp in page, f"README cites a run of {stamp} that is not on the page"


def test_the_readme_search_block_defines_what_it_compares():
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("## Search and evaluation"):readme.index("- **Search**")]
    for name in re.findall(r"paired_comparison\((\w+)\.by_query", block):
        assert re.search(rf"^{name} = ", block, flags=re.M), f"{name} is used before it is defined"
