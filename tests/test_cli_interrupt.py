"""Issue #39 (round 3): Ctrl-C while a command is starting.

A KeyboardInterrupt raised while a module is being imported (torch, sentence-transformers)
can surface wrapped in another exception (``RuntimeError: Error calling __set_name__ on
'Field' ...``, whose ``__cause__`` or ``__context__`` is the KeyboardInterrupt): the CLI
reports it as an interruption (exit 130), like a bare Ctrl-C."""

from __future__ import annotations

import pytest

import asymgeo.cli as cli


def _raise_wrapped(how: str):
    def run(args):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            if how == "cause":
                raise RuntimeError("Error calling __set_name__ on 'Field' instance 'x' in 'Config'") from ki
            if how == "context":
                raise RuntimeError("Error calling __set_name__ on 'Field' instance 'x' in 'Config'")  # noqa: B904
            # deeper: an ImportError whose cause is a RuntimeError whose cause is the interrupt
            try:
                raise RuntimeError("Error calling __set_name__") from ki
            except RuntimeError as inner:
                raise ImportError("cannot import name 'SentenceTransformer'") from inner
    return run


@pytest.mark.parametrize("how", ["cause", "context", "chain"])
def test_interrupt_wrapped_in_another_exception_is_an_interruption(monkeypatch, capsys, tmp_path, how):
    monkeypatch.setattr(cli, "_run_embed", _raise_wrapped(how))
    rc = cli.main(["embed", "scifact", "--data-dir", str(tmp_path), "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert rc == 130 and err == "asymgeo embed: interrupted"


def test_an_ordinary_runtime_error_is_still_an_error(monkeypatch, capsys, tmp_path):
    def run(args):
        try:
            raise ValueError("inner")
        except ValueError as exc:
            raise RuntimeError("boom") from exc

    monkeypatch.setattr(cli, "_run_embed", run)
    rc = cli.main(["embed", "scifact", "--data-dir", str(tmp_path), "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("asymgeo embed: error: RuntimeError: boom")


def test_a_self_referencing_chain_does_not_hang(monkeypatch, capsys, tmp_path):
    def run(args):
        a, b = RuntimeError("a"), RuntimeError("b")
        a.__context__, b.__context__ = b, a
        raise a

    monkeypatch.setattr(cli, "_run_embed", run)
    assert cli.main(["embed", "scifact", "--data-dir", str(tmp_path), "--cache-dir", str(tmp_path)]) == 2
