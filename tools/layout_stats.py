"""Rooms and arrows of the package layout (issue #24): how many places a newcomer has to learn,
and how many import arrows run between them.

A *room* is a folder of ``src/asymgeo`` or a module at its root; an *arrow* is an import from
one room to another (function-level imports included, the graph of ``tests/test_layers.py``).

Usage: ``python tools/layout_stats.py [CHECKOUT]`` (default: this checkout).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def stats(root: Path) -> dict[str, object]:
    spec = importlib.util.spec_from_file_location("_layers", root / "tests" / "test_layers.py")
    assert spec is not None and spec.loader is not None
    layers = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(root / "tests"))
    spec.loader.exec_module(layers)
    graph = layers.GRAPH

    def room(module: str) -> str:
        parts = module.split(".")
        if len(parts) > 2 or (len(parts) == 2 and (layers.PACKAGE / parts[1]).is_dir()):
            return parts[1] + "/"
        return module

    rooms = {room(m) for m in graph}
    arrows = {(room(m), room(d)) for m, deps in graph.items() for d in deps if room(m) != room(d)}
    return {"modules": len(graph), "rooms": len(rooms), "arrows": len(arrows),
            "cycles": [sorted(c) for c in layers.cycles(graph)]}


if __name__ == "__main__":
    root = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
    print(stats(root))
