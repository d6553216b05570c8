"""The split of the embedding cache by job (issue 35): cache (format) <- encode_workers <- encoding (the job),
and the 0.1 paths ``asymgeo.data.cache.encode_dataset`` & co. kept for one release with a warning."""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import pytest

import asymgeo.data.cache as cache
from asymgeo.data import encode_workers, encoding

DATA = Path(encoding.__file__).resolve().parent


@pytest.mark.parametrize("name, new", [("encode_dataset", encoding), ("_format_bytes", encoding), ("_assemble", encoding),
                                       ("EXECUTORS", encode_workers), ("MAX_WORKER_RESTARTS", encode_workers),
                                       ("_worker_devices", encode_workers)])
def test_an_old_cache_path_still_works_and_warns_once(monkeypatch, name, new):
    monkeypatch.delitem(vars(cache), name, raising=False)  # as in a fresh process
    with pytest.warns(DeprecationWarning, match=rf"^asymgeo\.data\.cache\.{name} moved to {new.__name__}\.{name}; "
                                                r"import it from there \(deprecated in 0\.2, removed in 0\.3\)$"):
        assert getattr(cache, name) is getattr(new, name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(cache, name) is getattr(new, name)  # one warning per name


def test_from_import_of_an_old_path_warns_and_names_the_caller(monkeypatch):
    monkeypatch.delitem(vars(cache), "encode_dataset", raising=False)
    with pytest.warns(DeprecationWarning, match="moved to asymgeo.data.encoding.encode_dataset") as record:
        from asymgeo.data.cache import encode_dataset
    assert encode_dataset is encoding.encode_dataset
    assert record[0].filename == __file__


def test_every_moved_name_exists_at_its_new_path_and_others_are_attribute_errors():
    for module, names in cache._MOVED.items():
        new = importlib.import_module(module)
        missing = [n for n in names if not hasattr(new, n)]
        assert not missing, f"{module} lacks {missing}"
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        cache.no_such_name  # noqa: B018


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            out.add(node.module)
    return out


def test_the_three_modules_import_downwards_only():
    assert not _imports(DATA / "cache.py") & {"encoding", "encode_workers"}
    assert "encoding" not in _imports(DATA / "encode_workers.py")
    assert {"cache", "encode_workers"} <= _imports(DATA / "encoding.py")
