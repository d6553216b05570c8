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


def test_generated_pages_print_no_machine_paths():
    """Issue 23: pages generated from results name repository-relative paths only."""
    pages = [ROOT / "docs" / p for p in ("reproduction.md", "evidence.md", "generalisation.md", "auto_geometry.md",
                                         "auto_geometry_confirm.md")]
    pages += sorted((ROOT / "docs" / "results").glob("*.md"))
    absolute = re.compile(r"(?<![\w.<>])/(work|tmp|root|home|Users|mnt)/")
    for page in pages:
        text = page.read_text()
        hits = [m.group(0) for m in absolute.finditer(text)]
        assert not hits, f"{page.relative_to(ROOT)}: machine paths {hits[:3]}"


def test_every_rq3_config_the_pages_cite_is_in_the_repository():
    """Every `asymgeo reproduce NAME` on the RQ3 page names a config committed here."""
    text = (ROOT / "docs" / "results" / "rq3.md").read_text()
    names = set(re.findall(r"`asymgeo reproduce (\w+)", text))
    assert names >= {"rq3_rotation", "rq3_grid", "rq3_grid_closed_form", "rq3_rotation_random_planes"}
    configs = {p.stem for p in (ROOT / "experiments").glob("*.toml")}
    configs |= {p.stem for p in (ROOT / "src" / "asymgeo" / "experiments" / "configs").glob("*.toml")}
    assert names <= configs, names - configs
    assert "--config-dir" not in text


def test_every_planted_fault_still_finds_its_text():
    """tools/plant_faults.py plants each fault by replacing a text that must occur in its file; a
    refactor that moves the text would silently drop the fault from the next run (issue 35 moved
    eight of them), so the texts are checked here on every run of the suite."""
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("plant_faults", root / "tools" / "plant_faults.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    gone = [f"{rel}: {what}" for what, rel, old, _new, _args in module.FAULTS
            if old not in (root / "src" / "asymgeo" / rel).read_text()]
    assert not gone, "planted faults whose text moved (update tools/plant_faults.py):\n" + "\n".join(gone)


def test_reproduce_help_lists_every_experiment_the_docs_tell_users_to_run(monkeypatch, capsys):
    """#38: `reproduce --help` listed five of the experiments; it lists every config, and every
    `asymgeo reproduce NAME` in the README and docs/ is one of them (or all / report / a .toml path)."""
    import pytest

    from asymgeo.cli import main

    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit):
        main(["reproduce", "--help"])
    text = capsys.readouterr().out
    listing = text[text.index("\nexperiments (NAME):"):text.index("\nexample:")]
    listed = set(re.findall(r"^  ([\w-]+) {2,}", listing, flags=re.M))
    configs = {p.stem for p in (ROOT / "src" / "asymgeo" / "experiments" / "configs").glob("*.toml")}
    configs |= {p.stem for p in (ROOT / "experiments").glob("*.toml")}
    assert listed == configs, listed ^ configs
    assert {"adapters", "generalisation", "auto_geometry", "rq3_rotation", "rq3_grid"} <= listed
    pages = [ROOT / "README.md", ROOT / "experiments" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    cited = {m for page in pages for m in re.findall(r"asymgeo reproduce ([\w-]+)(?![\w/.-])", page.read_text())}
    assert cited - {"all", "report", "N", "NAME"} <= listed, cited - listed
