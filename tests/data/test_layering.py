"""The data layer's imports: no cycle inside it, nothing from above it, and retrieval never imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import asymgeo

PKG = Path(asymgeo.__file__).resolve().parent


def _imports(path: Path, package: str) -> set[str]:
    """Absolute names of the asymgeo modules a file imports (anywhere in it, functions included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("asymgeo"):
                out.add(mod)
                out.update(f"{mod}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("asymgeo"))
    return out


def _data_graph() -> dict[str, set[str]]:
    mods = {f"asymgeo.data.{p.stem}": p for p in (PKG / "data").glob("*.py") if p.stem != "__init__"}
    return {m: {d for d in _imports(p, "asymgeo.data") if d in mods} - {m} for m, p in mods.items()}


def test_no_import_cycle_inside_the_data_layer():
    graph = _data_graph()
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in graph[m]:
            assert state.get(d) != 1, f"import cycle: {' -> '.join(path + [d])}"
            if d not in state:
                visit(d, path + [d])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [m])
    assert "asymgeo.data.paths" in graph and graph["asymgeo.data.paths"] == set()
    assert "asymgeo.data.beir" not in graph["asymgeo.data.download"]


def test_data_layer_imports_nothing_from_above():
    for p in (PKG / "data").glob("*.py"):
        bad = {m for m in _imports(p, "asymgeo.data") if m.startswith(("asymgeo.experiments", "asymgeo.cli"))}
        assert not bad, f"{p.name} imports {sorted(bad)}"


def test_retrieval_layer_never_imports_the_data_layer():
    files = sorted((PKG / "retrieval").glob("*.py"))
    assert {p.name for p in files} >= {"search.py", "metrics.py", "compare.py"}
    for path in files:
        mods = _imports(path, "asymgeo.retrieval")
        assert not {m for m in mods if m.startswith("asymgeo.data")}, f"retrieval/{path.name} imports the data layer"
