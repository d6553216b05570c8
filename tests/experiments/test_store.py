"""``asymgeo.experiments.store.write_page``: the one command-line wrapper of the experiment pages."""

from __future__ import annotations


def test_write_page_refuses_bad_arguments_and_writes_the_rendered_page(tmp_path, monkeypatch, capsys):
    import asymgeo.experiments.store as store

    assert store.write_page("rq1", ["only-one"], lambda *a: "x") == 2
    assert "usage: python -m asymgeo.experiments.rq1 RESULTS_DIR OUT.md" in capsys.readouterr().err
    assert store.write_page("rq1", [str(tmp_path / "run"), str(tmp_path / "p.md")], lambda *a: "x") == 2
    assert "no sweep results here (run asymgeo reproduce run first)" in capsys.readouterr().err
    (tmp_path / "run" / "cells").mkdir(parents=True)
    seen = []
    monkeypatch.setattr(store, "read_results", lambda parent, name: seen.append((parent, name)) or "TABLE")
    out = tmp_path / "p.md"
    out.write_text("old page\n")
    rc = store.write_page("rq1", [str(tmp_path / "run"), str(out)],
                          lambda table, res, o, cmd: f"{table} {res.name} {o.name} {cmd}\n")
    assert rc == 0 and seen == [(tmp_path, "run")]
    assert out.read_text() == f"TABLE run p.md python -m asymgeo.experiments.rq1 {tmp_path / 'run'} {out}\n"
