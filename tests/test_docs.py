"""The README quotes benchmark figures only from the generated docs/benchmarks.md of the same commit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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


@pytest.mark.slow
def test_the_nfcorpus_closed_form_figure_docs_adapters_quotes(shared_dir):
    """#38: docs/adapters.md said no variant beats frozen on NFCorpus beyond noise, while the untrained dual
    closed form does; the page now quotes it, and the figure is recomputed here (MiniLM, rank 16, c on
    validation, paired bootstrap over the test queries)."""
    from asymgeo.adapters.baseline import closed_form_adapter
    from asymgeo.adapters.workflow import _per_query_ndcg, load_adaptation_data
    from asymgeo.retrieval.compare import paired_comparison

    page = (ROOT / "docs" / "adapters.md").read_text()
    assert "no variant beats frozen beyond" not in page
    quoted = re.search(r"dual closed form `I \+ cM` \(c = ([\d.]+)\s+chosen on the (\d+) validation queries\) is "
                       r"beyond noise on MiniLM: (\+[\d.]+) \[(\+[\d.]+), (\+[\d.]+)\] over the\s+(\d+) test", page)
    assert quoted, "the NFCorpus closed-form sentence moved"
    d = load_adaptation_data("nfcorpus", "all-MiniLM-L6-v2", data_dir=shared_dir / "data",
                             cache_dir=shared_dir / "embeddings")
    tr = d.triples
    base = closed_form_adapter(tr.X, tr.pos_rows, d.corpus, geometry="dual", rank=16, device="cpu",
                               hard_negative_rows=tr.hard_negative_rows, validation_queries=d.V,
                               validation_relevance=d.validation)
    frozen = _per_query_ndcg(d.T, d.test, d.corpus, None, d.corpus_ids)
    closed = _per_query_ndcg(d.T, d.test, d.corpus, base.operator_, d.corpus_ids)
    c = paired_comparison(closed, frozen, seed=0)
    got = (f"{base.init_scale_:g}", str(len(d.validation)), f"{c.mean_diff:+.3f}", f"{c.ci_low:+.3f}",
           f"{c.ci_high:+.3f}", str(c.n))
    assert quoted.groups() == got


def _commands(text: str) -> list[str]:
    """Every `asymgeo ...` command line of the page's bash / console blocks (continuations joined,
    prompts and comments dropped)."""
    out = []
    for block in re.findall(r"```(?:bash|console)\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.removeprefix("$ ").split("  #")[0].split(" # ")[0].strip()
            for part in line.split(" && "):
                if part.startswith("asymgeo "):
                    out.append(part)
    return out


@pytest.mark.parametrize("page", ["README.md", "docs/adapters.md"])
def test_every_command_on_the_page_parses_and_names_where_its_dataset_is(page, tmp_path, monkeypatch):
    """#38: `asymgeo embed scifact --workers 2 ...` failed as written (no --data-dir): every command
    parses, and one that names a dataset (not a folder, not --download) says where it is."""
    import shlex

    from asymgeo.cli import build_parser

    monkeypatch.chdir(tmp_path)  # nothing runs; parse only
    commands = _commands((ROOT / page).read_text())
    assert commands
    parser = build_parser()
    for cmd in commands:
        argv = shlex.split(cmd)[1:]
        args = parser.parse_args(argv)
        dataset = getattr(args, "dataset", None)
        if args.command in ("embed", "select", "fit", "evaluate", "import") and dataset and "/" not in dataset \
                and not getattr(args, "download", False):
            assert args.data_dir is not None, f"{page}: `{cmd}` names {dataset} without --data-dir"
        for dest in ("out", "plot"):  # what a user's command writes goes under their working directory
            value = getattr(args, dest, None)
            assert not (value and Path(value).is_absolute()), f"{page}: `{cmd}` writes to the absolute {value}"
