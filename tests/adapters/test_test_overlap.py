"""Issue #39 (round 3): ``fit`` on a dataset whose qrels/train.tsv is a copy of test.tsv.

The training split is then 240 of the 300 test queries (and the validation split the other
60): ``fit`` refuses before training, naming the counts, unless ``--allow-test-overlap``
(``allow_test_overlap=True``), and then the metrics and the printed report say that the
scores are not held out."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from asymgeo.adapters import Adapter
from asymgeo.adapters.workflow import fit_adapter, load_adaptation_data
from asymgeo.cli import main


@pytest.fixture(scope="module")
def train_is_test(tmp_path_factory, shared_dir):
    """SciFact with qrels/train.tsv replaced by test.tsv (corpus and queries linked; the shared
    MiniLM cache is read as it is: its texts are the same)."""
    root = tmp_path_factory.mktemp("train-is-test") / "data"
    ds = root / "scifact"
    (ds / "qrels").mkdir(parents=True)
    src = shared_dir / "data" / "scifact"
    for f in ("corpus.jsonl", "queries.jsonl"):
        os.symlink(src / f, ds / f)
    shutil.copy(src / "qrels" / "test.tsv", ds / "qrels" / "test.tsv")
    shutil.copy(src / "qrels" / "test.tsv", ds / "qrels" / "train.tsv")
    return root


def _argv(data, shared_dir, out, *extra):
    return ["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--geometry", "dual", "--rank", "4",
            "--epochs", "1", "--learning-rates", "1e-3", "--no-progress", "--out", str(out),
            "--data-dir", str(data), "--cache-dir", str(shared_dir / "embeddings"), *extra]


def test_fit_refuses_to_train_on_the_test_queries(train_is_test, shared_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(Adapter, "fit", lambda *a, **k: pytest.fail("trained before checking the split"))
    out = tmp_path / "ad"
    rc = main(_argv(train_is_test, shared_dir, out))
    # one error line (a notice of where mined negatives were cached may come before it)
    lines = [ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith("asymgeo fit: note: ")]
    assert rc == 2 and len(lines) == 1, lines
    err = lines[0]
    assert err.startswith(f"asymgeo fit: error: {train_is_test / 'scifact' / 'qrels'}: "
                          "240 of the 240 training queries are test queries (first: '"), err
    assert "60 of the 60 validation queries are test queries" in err
    assert "--allow-test-overlap" in err
    assert not out.exists()


def test_a_training_subset_is_counted_as_trained(train_is_test, shared_dir):
    with pytest.raises(ValueError, match=r"32 of the 32 training queries are test queries .*allow_test_overlap=True"):
        fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="dual", rank=4, n_train=32, epochs=1,
                    learning_rates=(1e-3,), report=False, data_dir=train_is_test,
                    cache_dir=shared_dir / "embeddings")


def test_load_adaptation_data_names_the_overlap(train_is_test, shared_dir):
    d = load_adaptation_data("scifact", "all-MiniLM-L6-v2", data_dir=train_is_test,
                             cache_dir=shared_dir / "embeddings")
    assert d.overlap.refused and d.overlap.n_shared == 300
    assert d.split["overlap"]["refused"] is True


def test_allowed_overlap_is_written_and_printed(train_is_test, shared_dir, tmp_path, capsys):
    out = tmp_path / "ad"
    rc = main(_argv(train_is_test, shared_dir, out, "--n-train", "32", "--allow-test-overlap"))
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    metrics = json.loads((out / "metrics.json").read_text())
    warning = next(w for w in metrics["warnings"] if w.startswith("test overlap allowed"))
    assert "32 of the 32 training queries are test queries" in warning and "not held out" in warning
    assert metrics["split_overlap"]["refused"] is True and metrics["split_overlap"]["allowed"] is True
    assert f"asymgeo fit: warning: {warning}" in cap.err
    # the report itself says so, beside the scores
    assert any(line.startswith("warning: NOT HELD OUT:") for line in cap.out.splitlines()), cap.out


def test_the_shared_datasets_fit_without_a_refusal(shared_dir):
    rep = fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="dual", rank=4, epochs=1, learning_rates=(1e-3,),
                      report=False, data_dir=shared_dir / "data", cache_dir=shared_dir / "embeddings")
    ov = rep.metrics["split_overlap"]
    assert ov["refused"] is False and ov["allowed"] is False
    # SciFact: 2 of the 300 test queries repeat a training query's text under another id: named, kept
    texts = [w for w in rep.metrics["warnings"] if "under another id" in w]
    assert texts == ["2 of the 300 test queries have the text of a training query under another id (first: "
                     "'Obesity decreases life quality.' as test '870' and training '871'); kept: identical texts are refused beyond 5% of the test queries"], texts
