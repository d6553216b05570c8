"""Layering: docs/architecture.md's rule over the import graph of src/asymgeo.

The layer table lives in one place, docs/architecture.md; this test reads it, builds the
import graph of the package with ``ast`` (every ``import`` statement, function-level ones
included) and checks that

* every module of the package appears in the table,
* no module imports from a layer above its own,
* no modules import each other, directly or through others (no cycles).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "asymgeo"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

#: Known violations (none today; an entry here must name an open issue).
KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset()
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()


def layer_table(text: str) -> dict[str, int]:
    """``{entry: layer}`` from the markdown table: ``"geometry.py"`` or a package ``"data/"``."""
    table: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"\|\s*(\d+)\.[^|]*\|([^|]*)\|", line)
        if not m:
            continue
        layer = int(m.group(1))
        cell = re.sub(r"\([^)]*\)", "", m.group(2))  # "(`beir.py`, ...)" lists a package's members
        for entry in re.findall(r"`([^`]+)`", cell):
            if entry.endswith(".py") or entry.endswith("/"):
                table[entry] = layer
    return table


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str, table: dict[str, int]) -> int | None:
    parts = module.split(".")[1:]
    if not parts:
        return table.get("__init__.py")
    if len(parts) == 1 and f"{parts[0]}.py" in table:
        return table[f"{parts[0]}.py"]
    return table.get(f"{parts[0]}/")


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def imports_of(path: Path) -> set[str]:
    """asymgeo modules imported anywhere in ``path`` (resolved relative imports)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "asymgeo")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "asymgeo":
                continue
            subs = [f"{target}.{a.name}" for a in node.names if _is_module(f"{target}.{a.name}")]
            out.update(subs)
            if len(subs) < len(node.names):
                out.add(target)
    out.discard(me)
    return out


def import_graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


TABLE = layer_table(ARCHITECTURE.read_text())
GRAPH = import_graph()


def test_the_table_names_the_layers():
    assert TABLE["_validation.py"] < TABLE["linalg/"] < TABLE["kernels/"] < TABLE["selectors/"] < TABLE["estimators/"]
    assert TABLE["estimators/"] < TABLE["retrieval/"] < TABLE["data/"] < TABLE["adapters/"]
    assert TABLE["adapters/"] < TABLE["experiments/"] < TABLE["cli.py"] < TABLE["__init__.py"]


def _layer_names(text: str) -> dict[int, str]:
    """``{layer: name}`` from the table's first column (``"2. kernels"`` -> ``{2: "kernels"}``)."""
    return {int(m.group(1)): m.group(2).strip()
            for m in re.finditer(r"^\|\s*(\d+)\.\s*([^|]+)\|", text, flags=re.M)}


def test_the_layout_shows_the_layers():
    """Layers 1 to 8 are one folder each; the root holds only the foundation, the CLI and the namespace."""
    names = _layer_names(ARCHITECTURE.read_text())
    for layer in range(1, 9):
        entries = [e for e, n in TABLE.items() if n == layer]
        assert entries == [f"{names[layer].lower()}/"], (layer, entries)
    root_modules = {p.name for p in PACKAGE.glob("*.py")}
    allowed = {e for e, n in TABLE.items() if e.endswith(".py") and n in (0, 9, 10)}
    assert root_modules == allowed, f"root modules outside the foundation/CLI/package: {sorted(root_modules ^ allowed)}"
    folders = {p.name + "/" for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == {e for e in TABLE if e.endswith("/")}


def test_each_folder_says_its_layer():
    """Each folder's ``__init__.py`` docstring opens with ``Layer N, name:`` as the table says."""
    import ast as _ast

    names = _layer_names(ARCHITECTURE.read_text())
    for entry, layer in TABLE.items():
        if not entry.endswith("/"):
            continue
        init = PACKAGE / entry / "__init__.py"
        doc = _ast.get_docstring(_ast.parse(init.read_text())) or ""
        first = doc.splitlines()[0] if doc else ""
        assert first.startswith(f"Layer {layer}, {names[layer].lower()}"), (entry, first)
        assert "import" in first, f"{entry}__init__.py: the first line says what the layer may import"


def test_every_module_is_in_the_table():
    missing = sorted(m for m in GRAPH if layer_of(m, TABLE) is None)
    assert not missing, f"add these modules to docs/architecture.md's layer table: {missing}"


def test_no_module_imports_from_a_layer_above():
    upward = sorted(
        (m, dep) for m, deps in GRAPH.items() for dep in deps
        if layer_of(dep, TABLE) is not None and layer_of(m, TABLE) is not None
        and layer_of(dep, TABLE) > layer_of(m, TABLE) and (m, dep) not in KNOWN_UPWARD
    )
    assert not upward, f"upward imports (module, imported): {upward}"


def test_no_import_cycles():
    found = [c for c in cycles(GRAPH) if c not in KNOWN_CYCLES]
    assert not found, f"modules importing each other: {[sorted(c) for c in found]}"


def test_known_violations_are_still_real():
    """The allow-lists shrink: an entry fixed elsewhere must be removed here."""
    for m, dep in KNOWN_UPWARD:
        assert dep in GRAPH.get(m, set()), f"({m}, {dep}) no longer imported: remove it from KNOWN_UPWARD"
    present = set(cycles(GRAPH))
    for c in KNOWN_CYCLES:
        assert c in present, f"{sorted(c)} is no longer a cycle: remove it from KNOWN_CYCLES"


# ------------------------------------------------------------------ the checker itself
def test_checker_sees_function_level_and_relative_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "asymgeo"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from .sub import high\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "high.py").write_text("from ..low import f\nimport numpy\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    graph = import_graph()
    assert graph["asymgeo.low"] == {"asymgeo.sub.high"}
    assert graph["asymgeo.sub.high"] == {"asymgeo.low"}
    assert cycles(graph) == [frozenset({"asymgeo.low", "asymgeo.sub.high"})]


def test_layer_table_parsing():
    text = ("| layer | modules | what |\n|---|---|---|\n"
            "| 0. foundation | `_validation.py` (argument checks, `check_int`) | x |\n"
            "| 2. kernels | `kernels/` (`geometry.py`, `selection.py` `cars_score`) | y |\n"
            "| 5. data | `data/` (`beir.py`, `cache.py`) | z |\n")
    table = layer_table(text)
    assert table == {"_validation.py": 0, "kernels/": 2, "data/": 5}
    assert _layer_names(text) == {0: "foundation", 2: "kernels", 5: "data"}
    assert layer_of("asymgeo.data.beir", table) == 5
    assert layer_of("asymgeo.kernels.selection", table) == 2
    assert layer_of("asymgeo.kernels", table) == 2
    assert layer_of("asymgeo._validation", table) == 0
    assert layer_of("asymgeo.selection", table) is None  # a root module the table does not name
    assert layer_of("asymgeo.retrieval.search", table) is None


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])


# ----------------------------------------------------------------- selector dispatch (issue 35)
def _rule_names() -> set[str]:
    from asymgeo.selectors.catalogue import ALIASES, BUILTIN_RULES

    return set(BUILTIN_RULES) | set(ALIASES)


_NAMEISH = re.compile(r"selector|rule|\.name\b|method", re.I)


def _constant_strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _constant_strings(e)]
    return []


def selector_dispatch(source: str, names: set[str]) -> list[tuple[int, str]]:
    """``(line, text)`` of every place that decides by a rule's *name*: a comparison of something
    named like a selector / rule (``selector == "cv"``, ``rule.name in ("sure", ...)``) with a
    registered name, or a dict keyed by two or more registered names with constant values (a
    per-rule lookup table such as names to labels)."""
    found: list[tuple[int, str]] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            consts = [s for side in sides for s in _constant_strings(side)]
            others = [ast.unparse(side) for side in sides if not _constant_strings(side)]
            if set(consts) & names and any(_NAMEISH.search(o) for o in others):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            constant_values = all(isinstance(v, ast.Constant) for v in node.values)
            if len(set(keys) & names) >= 2 and constant_values:
                found.append((node.lineno, ast.unparse(node)[:80]))
    return found


def test_selector_dispatch_happens_only_in_the_registry():
    """Outside ``asymgeo/selectors/`` no code chooses what to do by a rule's name: callers look
    rules up (``get_rule``) and read what a rule declares (``needs``, ``sees_projection``, ...)."""
    names = _rule_names()
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "selectors":
            continue
        for line, text in selector_dispatch(path.read_text(), names):
            offenders.append(f"{path.relative_to(PACKAGE)}:{line}: {text}")
    assert not offenders, "dispatch on selector names outside the registry:\n" + "\n".join(offenders)


@pytest.mark.parametrize("code", [
    'if args.selector == "cv":\n    pass',
    'x = rule.name in ("sure", "anisotropic")',
    'name = {"cars": "CARS", "cv": "cross-validated risk"}.get(selector)',
    'if selector not in ("cars", "sure", "anisotropic"):\n    pass',
])
def test_the_dispatch_check_sees_a_name_chain(code):
    # the check above can fail: each of 0.2.0's patterns is found
    assert selector_dispatch(code, _rule_names())


def test_the_dispatch_check_leaves_other_comparisons_alone():
    code = 'if split == "validation":\n    pass\nif selector != DEFAULT:\n    pass\nok = "trained" in rule.needs'
    assert selector_dispatch(code, _rule_names()) == []
