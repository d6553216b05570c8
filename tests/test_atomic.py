"""asymgeo._atomic: files and folders replaced only by complete, checked replacements."""

from __future__ import annotations

import os

import pytest

import asymgeo._atomic as atomic
from asymgeo._atomic import building_folder, folder_mode, replace_folder


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_replace_folder_new_and_existing(tmp_path):
    new = tmp_path / "new"
    new.mkdir()
    (new / "a").write_text("1")
    dest = replace_folder(new, tmp_path / "dest")
    assert _tree(dest) == {"a": "1"} and not new.exists()
    again = tmp_path / "again"
    (again / "sub").mkdir(parents=True)
    (again / "sub" / "b").write_text("2")
    replace_folder(again, dest)
    assert _tree(dest) == {"sub/b": "2"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest"], "the old folder is gone once the new is in"


@pytest.mark.parametrize("fail_at", [1, 2])
def test_replace_folder_rolls_back_at_either_rename(tmp_path, monkeypatch, fail_at):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "old").write_text("keep")
    new = tmp_path / "new"
    new.mkdir()
    (new / "x").write_text("new")
    real, calls = os.replace, []

    def flaky(src, dst):
        calls.append(dst)
        if len(calls) == fail_at:
            raise KeyboardInterrupt if fail_at == 2 else OSError("disk says no")
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", flaky)
    with pytest.raises((KeyboardInterrupt, OSError)):
        replace_folder(new, dest)
    monkeypatch.undo()
    assert _tree(dest) == {"old": "keep"}
    assert not list(tmp_path.glob(".dest.old-*"))


def test_building_folder_leaves_dest_untouched_on_error(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "f").write_text("old")
    with pytest.raises(RuntimeError), building_folder(dest) as tmp:
        (tmp / "f").write_text("half")
        raise RuntimeError("crash while building")
    assert _tree(dest) == {"f": "old"} and sorted(p.name for p in tmp_path.iterdir()) == ["dest"]
    with building_folder(dest) as tmp:
        (tmp / "f").write_text("new")
    assert _tree(dest) == {"f": "new"}


def test_folder_mode_follows_the_replaced_folder_else_umask(tmp_path):
    mask = os.umask(0o027)
    try:
        assert folder_mode(tmp_path / "none") == 0o750
        with building_folder(tmp_path / "d") as tmp:
            (tmp / "f").write_text("x")
        assert (tmp_path / "d").stat().st_mode & 0o777 == 0o750
        os.chmod(tmp_path / "d", 0o711)
        with building_folder(tmp_path / "d") as tmp:
            (tmp / "f").write_text("y")
        assert (tmp_path / "d").stat().st_mode & 0o777 == 0o711
    finally:
        os.umask(mask)


def test_a_stale_aside_folder_of_this_process_is_cleared_before_the_replacement(tmp_path):
    import os

    from asymgeo._atomic import replace_folder

    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "old.txt").write_text("old")
    stale = tmp_path / f".dest.old-{os.getpid()}"  # left by an earlier replacement of this pid
    stale.mkdir()
    (stale / "junk").write_text("junk")
    new = tmp_path / "new"
    new.mkdir()
    (new / "new.txt").write_text("new")
    replace_folder(new, dest)
    assert sorted(p.name for p in dest.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest"]


def test_written_by_asymgeo_reads_the_software_chunk(tmp_path):
    """A PNG is asymgeo's only when its Software text chunk is asymgeo's: matplotlib's own default
    tag, another program's tag, a damaged file and a text file are not (issue #39)."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from asymgeo._atomic import PLOT_SOFTWARE, written_by_asymgeo

    fig = plt.figure()
    for name, meta in (("ours", {"Software": PLOT_SOFTWARE}), ("default", None), ("other", {"Software": "GIMP"})):
        fig.savefig(tmp_path / f"{name}.png", metadata=meta)
    plt.close(fig)
    assert written_by_asymgeo(tmp_path / "ours.png")
    assert not written_by_asymgeo(tmp_path / "default.png") and not written_by_asymgeo(tmp_path / "other.png")
    (tmp_path / "cut.png").write_bytes((tmp_path / "ours.png").read_bytes()[:20])
    (tmp_path / "text.png").write_text("notes")
    assert not written_by_asymgeo(tmp_path / "cut.png") and not written_by_asymgeo(tmp_path / "text.png")
    assert not written_by_asymgeo(tmp_path / "missing.png")
