"""The `embed` and `select` commands."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from beir_fixtures import doc, query, write_beir

from asymgeo._runtime import available_cpus
from asymgeo.cli import build_parser, main
from asymgeo.data import load_embeddings, load_triples, write_embeddings
from asymgeo.kernels.selection import cars_score
from reference_impl import naive_approximation_errors, naive_moment


@pytest.mark.slow
def test_select_on_scifact(shared_dir, capsys):
    args = ["scifact", "--encoder", "all-MiniLM-L6-v2", "--data-dir", str(shared_dir / "data"), "--cache-dir", str(shared_dir / "embeddings")]
    assert main(["select", *args, "--rank", "4", "--n-splits", "3", "--seed", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["dataset"], out["split"], out["n"]) == ("scifact", "train", 647)
    tr = load_triples(shared_dir / "data" / "scifact", "all-MiniLM-L6-v2", "train", cache_dir=shared_dir / "embeddings")
    direct = cars_score(tr.X, tr.Y_pos, tr.Y_neg, 4, n_splits=3, seed=5)
    assert out["cars"]["score"] == pytest.approx(direct.score, rel=1e-9)
    assert out["cars"]["choice"] == ("dual" if direct.score > 0 else "shared")
    # Theorem 1 gap of the training moment, from numpy's full decompositions (tests/reference_impl.py)
    ref = naive_approximation_errors(naive_moment(tr.X.astype(np.float64), tr.Y_pos.astype(np.float64),
                                                  tr.Y_neg.astype(np.float64)), 4)
    for key in ("gap", "shared_error", "dual_error"):
        assert out["approximation_gap"][key] == pytest.approx(ref[key], rel=1e-6)
    assert out["approximation_gap"]["rank"] == 4


def test_select_text_output(tmp_path, capsys):
    rng = np.random.default_rng(3)
    docs = [f"d{i}" for i in range(12)]
    qs = [f"q{i}" for i in range(10)]
    write_beir(tmp_path / "data" / "syn", [doc(d) for d in docs], [query(q) for q in qs], {"test": [(q, f"d{i}", 1) for i, q in enumerate(qs)]})
    write_embeddings(tmp_path / "c" / "syn" / "enc", rng.standard_normal((12, 5)), docs, rng.standard_normal((10, 5)), qs, {})
    argv = ["select", "syn", "--encoder", "enc", "--rank", "1", "--split", "train", "--n-splits", "4", "--data-dir", str(tmp_path / "data"), "--cache-dir", str(tmp_path / "c")]
    assert main(argv) == 0
    text = capsys.readouterr().out
    tr = load_triples(tmp_path / "data" / "syn", "enc", "train", cache_dir=tmp_path / "c")
    direct = cars_score(tr.X, tr.Y_pos, tr.Y_neg, 1, n_splits=4, seed=0)
    assert len(tr) == 6  # test-only dataset: 10 queries -> 6/2/2
    assert f"decision: {direct.choice}" in text
    assert f"CARS score: {direct.score:.6g} +/- {direct.standard_error:.2g}" in text
    # n says which queries it counts: the adaptation split's training part, 6 of 10 (60/20/20), not all (#38)
    assert ("syn / enc, train triples: n = 6 (the adaptation split's training part, the queries `fit` trains on: "
            "no qrels/train.tsv: train, validation and test carved 60/20/20 from qrels/test.tsv (seed 20260809; "
            "6/2/2 train/validation/test queries)), p = 5, rank 1, L = 4") in text
    # the gap line names both numbers, each from numpy's full decompositions (tests/reference_impl.py)
    ref = naive_approximation_errors(naive_moment(tr.X.astype(np.float64), tr.Y_pos.astype(np.float64),
                                                  tr.Y_neg.astype(np.float64)), 1)
    assert (f"approximation gap of the training moment M (Theorem 1): {ref['gap']:.6g} = shared error "
            f"{ref['shared_error']:.6g} - dual error {ref['dual_error']:.6g} (each family's smallest "
            "||M - fit||_F^2 at rank 1)") in text


def test_select_and_fit_share_one_rank_default(tmp_path, capsys):
    parser = build_parser()
    sel = parser.parse_args(["select", "syn"])
    fit = parser.parse_args(["fit", "syn", "--out", str(tmp_path / "a")])
    assert sel.rank == fit.rank == 16
    import inspect

    import asymgeo

    assert inspect.signature(asymgeo.fit).parameters["rank"].default == 16  # the Python entry point too
    for cmd in ("select", "fit"):
        with pytest.raises(SystemExit):
            parser.parse_args([cmd, "--help"])
        assert "(default 16, as " in capsys.readouterr().out


def test_fit_needs_no_geometry_auto_is_the_default(tmp_path):
    """#38: `fit` required --geometry although auto is what the docs recommend; the pairs path and
    asymgeo.fit default to auto as well."""
    import inspect

    import asymgeo

    parser = build_parser()
    assert parser.parse_args(["fit", "syn", "--out", str(tmp_path / "a")]).geometry == "auto"
    assert parser.parse_args(["fit", "--pairs", "p.jsonl", "--out", str(tmp_path / "a")]).geometry == "auto"
    assert inspect.signature(asymgeo.fit).parameters["geometry"].default == "auto"


def test_select_without_cache_is_one_line_and_exit_2(shared_dir, tmp_path, capsys):
    code = main(["select", "scifact", "--rank", "4", "--data-dir", str(shared_dir / "data"), "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "no embedding cache" in err


def test_embed_command(tmp_path, monkeypatch, capsys):
    class Fake:
        def encode(self, texts):
            return np.array([[len(t), 1.0, 0.0] for t in texts])

    monkeypatch.setattr("asymgeo.data.encoding.load_encoder", lambda spec, **kw: Fake())
    write_beir(tmp_path / "data" / "toy", [doc("a", "", "xx"), doc("b", "T", "yyy")], [query("q", "z")], {"test": [("q", "a", 1)]})
    code = main(["embed", "toy", "--encoder", "gte-base", "--data-dir", str(tmp_path / "data"), "--cache-dir", str(tmp_path / "c")])
    assert code == 0 and "corpus (2, 3)" in capsys.readouterr().out
    emb = load_embeddings("toy", "gte-base", cache_dir=tmp_path / "c")
    want = np.array([[2, 1, 0], [5, 1, 0]], float)  # "xx", "T yyy"
    np.testing.assert_allclose(emb.corpus, want / np.linalg.norm(want, axis=1, keepdims=True), atol=1e-3)
    assert (emb.meta["encoder"], emb.meta["model_name"]) == ("gte-base", "thenlper/gte-base")


def test_help_has_examples():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in ("embed", "select"):
        assert "example:\n  asymgeo " + name in sub.choices[name].format_help()


def test_select_validate_json_and_text(shared_dir, capsys):
    args = ["scifact", "--encoder", "all-MiniLM-L6-v2", "--data-dir", str(shared_dir / "data"),
            "--cache-dir", str(shared_dir / "embeddings"), "--rank", "4", "--n-splits", "2", "--seed", "5",
            "--selector-dim", "32", "--validate", "--folds", "2"]
    assert main(["select", *args, "--json"]) == 0
    v = json.loads(capsys.readouterr().out)["validation"]
    assert {"cars_accuracy", "regret", "folds", "per_size"} <= set(v)
    assert set(v["regret"]) >= {"cars", "shared", "dual"} and len(v["folds"]) == 2
    # 647 queries, 2 folds: training pools of 323/324 -> sizes 32..256 plus the full pool
    assert [s["size"] for s in v["per_size"]][:4] == [32, 64, 128, 256]
    cells = sum(s["cells"] for s in v["per_size"])
    assert cells == 2 * 5
    # the figures are the library's on the same triples and arguments (validate_selection itself is
    # checked against brute-force fold validation in tests/estimators/test_validation.py)
    from asymgeo.data import load_triples
    from asymgeo.estimators.validation import validate_selection

    tr = load_triples("scifact", "all-MiniLM-L6-v2", "train", data_dir=shared_dir / "data",
                      cache_dir=shared_dir / "embeddings", require=True)
    lib = validate_selection(tr.X, tr.Y_pos, tr.Y_neg, 4, folds=2, n_splits=2, selector_dim=32, seed=5,
                             query_ids=tr.query_ids, progress=None)
    assert v["cars_accuracy"] == pytest.approx(lib.accuracy["cars"], abs=1e-12)
    for rule in ("cars", "shared", "dual"):
        assert v["regret"][rule] == pytest.approx(lib.regret[rule], rel=1e-12, abs=1e-15), rule
    assert main(["select", *args]) == 0
    text = capsys.readouterr().out
    assert "validation: 2 held-out folds of these 647 queries" in text
    assert "CARS chose the lower held-out loss" in text and "strict fold wins" in text


def test_select_validate_bad_folds_is_one_line(shared_dir, capsys):
    args = ["scifact", "--data-dir", str(shared_dir / "data"), "--cache-dir", str(shared_dir / "embeddings"),
            "--rank", "4", "--validate", "--folds", "1"]
    assert main(["select", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "folds" in err[0]


@pytest.mark.slow
def test_embed_on_two_workers_is_byte_identical_to_a_one_process_run(tiny_beir, tmp_path):
    """`asymgeo embed --workers 2` with the shipped all-MiniLM-L6-v2 on the CPU (1 torch thread per worker)
    writes the cache a one-process `asymgeo embed` writes (all cores), byte for byte: the reference runs in a
    fresh process, as a user would run it."""
    pytest.importorskip("sentence_transformers")
    common = ["embed", str(tiny_beir), "--chunk-size", "3", "--batch-size", "2", "--device", "cpu"]
    ref = subprocess.run([sys.executable, "-m", "asymgeo", *common, "--cache-dir", str(tmp_path / "one")],
                         capture_output=True, text=True, timeout=600)
    assert ref.returncode == 0, ref.stderr
    assert main([*common, "--cache-dir", str(tmp_path / "two"), "--workers", "2", "--threads-per-worker", "1"]) == 0
    one, two = tmp_path / "one" / "tiny" / "all-MiniLM-L6-v2", tmp_path / "two" / "tiny" / "all-MiniLM-L6-v2"
    for f in ("corpus.npy", "queries.npy", "corpus_ids.txt", "query_ids.txt"):
        assert (two / f).read_bytes() == (one / f).read_bytes(), f
    m1, m2 = (json.loads((p / "meta.json").read_text()) for p in (one, two))
    assert m2["fingerprint"] == m1["fingerprint"]
    assert m2["encode"] == {"workers": 2, "executor": "local", "threads_per_worker": 1, "mkl_cbwr": "AUTO,STRICT"}
    assert m2["torch_threads"] == 1 and m1["torch_threads"] == available_cpus() and m1["encode"]["workers"] == 1


def test_embed_passes_the_worker_options(tmp_path, monkeypatch, capsys):
    import asymgeo.data

    seen = {}

    def fake_encode(ds, encoder, **kw):
        seen.update(kw)
        raise ValueError("stop here")

    monkeypatch.setattr(asymgeo.data, "encode_dataset", fake_encode)
    write_beir(tmp_path / "data" / "toy", [doc("a")], [query("q")], {"test": [("q", "a", 1)]})
    argv = ["embed", "toy", "--data-dir", str(tmp_path / "data"), "--workers", "3", "--executor", "ray",
            "--address", "auto", "--threads-per-worker", "2"]
    assert main(argv) == 2 and capsys.readouterr().err.strip() == "asymgeo embed: error: stop here"
    assert {k: seen[k] for k in ("workers", "executor", "address", "threads_per_worker")} == {
        "workers": 3, "executor": "ray", "address": "auto", "threads_per_worker": 2}
    assert main(["embed", "toy", "--data-dir", str(tmp_path / "data")]) == 2
    assert {k: seen[k] for k in ("workers", "executor", "address", "threads_per_worker")} == {
        "workers": 1, "executor": "local", "address": None, "threads_per_worker": None}


@pytest.mark.parametrize("extra, message", [
    (["--workers", "0"], "workers: expected a positive integer"),
    (["--address", "auto"], "address: only meaningful with executor='ray'"),
    (["--threads-per-worker", "0"], "threads_per_worker: expected a positive integer"),
])
def test_embed_bad_worker_options_are_one_line(tmp_path, capsys, extra, message):
    write_beir(tmp_path / "data" / "toy", [doc("a")], [query("q")], {"test": [("q", "a", 1)]})
    code = main(["embed", "toy", "--data-dir", str(tmp_path / "data"), "--cache-dir", str(tmp_path / "c"), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"asymgeo embed: error: {message}")
    assert not (tmp_path / "c").exists()


def test_embed_without_the_disk_space_is_one_line(tmp_path, monkeypatch, capsys):
    from collections import namedtuple

    class Fake:
        dimension = 3  # stated, as SentenceTransformerEncoder does: refused before the progress bar starts

        def encode(self, texts):
            return np.array([[len(t), 1.0, 0.0] for t in texts])

    monkeypatch.setattr("asymgeo.data.encoding.load_encoder", lambda spec, **kw: Fake())
    monkeypatch.setattr("asymgeo.data.encoding.shutil.disk_usage", lambda p: namedtuple("U", "total used free")(1, 1, 7))
    write_beir(tmp_path / "data" / "toy", [doc("a", "", "xx"), doc("b", "T", "yyy")], [query("q", "z")], {"test": [("q", "a", 1)]})
    code = main(["embed", "toy", "--encoder", "gte-base", "--data-dir", str(tmp_path / "data"), "--cache-dir", str(tmp_path / "c")])
    err = capsys.readouterr().err.strip().splitlines()
    need = (2 + 1) * 3 * 2 * 2   # 3 rows of 3 float16 columns, as parts and assembled
    assert code == 2 and err == [f"asymgeo embed: error: {tmp_path / 'c' / 'toy' / 'gte-base'}: the cache needs "
                                 f"{need} bytes (parts and assembled arrays), 7 bytes free"]
    assert not (tmp_path / "c").exists()


def test_embed_workers_2_by_name_gives_the_one_process_cache(tmp_path):
    """`--workers 2` with an encoder the workers open by name (the weight-free benchmark encoder) writes the
    cache of a one-process run, byte for byte."""
    docs = [doc(f"d{i}", "T" if i % 3 else "", f"word{i} common text {i % 4}") for i in range(11)]
    write_beir(tmp_path / "data" / "toy", docs, [query(f"q{i}", f"word{i} text") for i in range(6)], {"test": [("q0", "d0", 1)]})
    common = ["embed", "toy", "--encoder", "synthetic-hash-768", "--data-dir", str(tmp_path / "data"), "--chunk-size", "4"]
    assert main([*common, "--cache-dir", str(tmp_path / "one")]) == 0
    assert main([*common, "--cache-dir", str(tmp_path / "two"), "--workers", "2"]) == 0
    one, two = tmp_path / "one" / "toy" / "synthetic-hash-768", tmp_path / "two" / "toy" / "synthetic-hash-768"
    for f in ("corpus.npy", "queries.npy", "corpus_ids.txt", "query_ids.txt"):
        assert (two / f).read_bytes() == (one / f).read_bytes(), f
    m1, m2 = (json.loads((p / "meta.json").read_text()) for p in (one, two))
    assert m2["fingerprint"] == m1["fingerprint"] and m2["encode"]["workers"] == 2 and m1["encode"]["workers"] == 1
    assert m2["encode"]["threads_per_worker"] == max(1, available_cpus() // 2)
