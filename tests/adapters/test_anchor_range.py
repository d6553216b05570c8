"""Issue #39 (round 3): ``fit --anchor 1e30`` is refused before any work, and a divergence
that a large anchor causes says so."""

from __future__ import annotations

import pytest

import asymgeo.adapters.workflow as wf
from asymgeo.adapters import Adapter
from asymgeo.cli import main


def _argv(shared_dir, out, anchor):
    return ["fit", "scifact", "--encoder", "all-MiniLM-L6-v2", "--geometry", "dual", "--rank", "4",
            "--n-train", "64", "--epochs", "2", "--learning-rates", "1e-3", "--no-progress", "--out", str(out),
            "--anchor", anchor, "--data-dir", str(shared_dir / "data"), "--cache-dir", str(shared_dir / "embeddings")]


@pytest.mark.parametrize("anchor", ["1e30", "1e7", "inf", "nan", "-1"])
def test_fit_refuses_an_anchor_out_of_range_before_loading_anything(shared_dir, tmp_path, capsys, monkeypatch,
                                                                    anchor):
    monkeypatch.setattr(wf, "load_adaptation_data", lambda *a, **k: pytest.fail("loaded data before the check"))
    out = tmp_path / "ad"
    rc = main(_argv(shared_dir, out, anchor))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("asymgeo fit: error: anchor: expected a finite number in [0, 1e+06]"), err
    assert not out.exists()


def test_the_bound_itself_is_accepted_by_the_estimator():
    from asymgeo.adapters.adapter import MAX_ANCHOR

    assert MAX_ANCHOR == 1e6
    Adapter(anchor=MAX_ANCHOR)._check_params(32)
    with pytest.raises(ValueError, match=r"anchor: expected a finite number in \[0, 1e\+06\]"):
        Adapter(anchor=MAX_ANCHOR * 10)._check_params(32)


def test_a_divergence_the_anchor_causes_names_the_anchor(shared_dir):
    # anchor 1e6 (allowed): the pull toward the start dwarfs the contrastive loss after one step
    with pytest.raises(ValueError) as info:
        wf.fit_adapter("scifact", "all-MiniLM-L6-v2", geometry="dual", rank=4, n_train=64, epochs=2,
                       learning_rates=(1e-3,), anchor=1e6, report=False, progress=False,
                       data_dir=shared_dir / "data", cache_dir=shared_dir / "embeddings")
    msg = str(info.value)
    assert msg.startswith("anchor: training diverged for every learning rate"), msg
    assert "the anchor (1e+06) may be the cause" in msg and "anchor term" in msg
