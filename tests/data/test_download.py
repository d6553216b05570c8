"""Download path against a file:// URL and a loopback HTTP server serving a zip built here."""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading
import zipfile

import pytest
from beir_fixtures import doc, query, write_beir

from asymgeo.data import BEIR_CHECKSUMS, beir_url, download_beir, load_beir


def _zip_folder(folder, archive, prefix):
    with zipfile.ZipFile(archive, "w") as zf:
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                zf.write(f, f"{prefix}{f.relative_to(folder).as_posix()}")
    return archive


@pytest.fixture
def archive(tmp_path):
    src = write_beir(tmp_path / "src" / "mini", [doc("d1"), doc("d2")], [query("q1")], {"test": [("q1", "d2", 1)]})
    (tmp_path / "serve").mkdir()
    path = _zip_folder(src, tmp_path / "serve" / "mini.zip", "mini/")
    data = path.read_bytes()
    return path, hashlib.sha256(data).hexdigest(), hashlib.md5(data).hexdigest()


def test_file_url_with_sha256(archive, tmp_path):
    path, sha, _md5 = archive
    out = download_beir("mini", tmp_path / "data", url=path.as_uri(), sha256=sha, progress=False)
    assert out == tmp_path / "data" / "mini"
    ds = load_beir("mini", data_dir=tmp_path / "data")
    assert ds.corpus_ids == ["d1", "d2"] and ds.qrels("test") == {"q1": {"d2": 1}}
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["mini"]  # archive and temp folders gone


def test_loopback_http_with_md5(archive, tmp_path):
    path, _sha, md5 = archive
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(path.parent))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/mini.zip"
        out = download_beir("mini", tmp_path / "data", url=url, md5=md5, progress=False)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert load_beir(out).query_ids == ["q1"]


def test_checksum_mismatch_is_refused_and_cleaned(archive, tmp_path):
    path, _sha, _md5 = archive
    with pytest.raises(ValueError, match=r"sha256 mismatch \(expected 0000"):
        download_beir("mini", tmp_path / "data", url=path.as_uri(), sha256="0" * 64, progress=False)
    assert not (tmp_path / "data" / "mini").exists()
    assert list((tmp_path / "data").iterdir()) == []


def test_no_checksum_no_download(archive, tmp_path):
    path, _sha, _md5 = archive
    with pytest.raises(ValueError, match="without a checksum"):
        download_beir("mini", tmp_path / "data", url=path.as_uri(), progress=False)
    with pytest.raises(ValueError, match="not a known BEIR archive"):
        download_beir("mini", tmp_path / "data", progress=False)


def test_archive_without_beir_layout_or_with_unsafe_paths(tmp_path):
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("../evil.txt", "x")
        zf.writestr("x/corpus.jsonl", "")
    sha = hashlib.sha256(bad.read_bytes()).hexdigest()
    with pytest.raises(ValueError, match="unsafe member path"):
        download_beir("bad", tmp_path / "data", url=bad.as_uri(), sha256=sha, progress=False)
    assert not (tmp_path / "evil.txt").exists()
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("readme.txt", "x")
    sha = hashlib.sha256(other.read_bytes()).hexdigest()
    with pytest.raises(ValueError, match="not a BEIR archive"):
        download_beir("other", tmp_path / "data", url=other.as_uri(), sha256=sha, progress=False)


def test_load_beir_download_flag_uses_the_registry(archive, tmp_path, monkeypatch):
    path, sha, _md5 = archive
    monkeypatch.setitem(BEIR_CHECKSUMS, "mini", {"sha256": sha})
    monkeypatch.setattr("asymgeo.data.download.beir_url", lambda name: path.as_uri())
    ds = load_beir("mini", data_dir=tmp_path / "data", download=True)
    assert ds.name == "mini" and ds.corpus_ids == ["d1", "d2"]


def test_public_urls_and_checksums():
    assert beir_url("scifact") == "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/scifact.zip"
    for name in ("scifact", "nq", "fever", "msmarco", "arguana"):
        assert len(BEIR_CHECKSUMS[name]["md5"]) == 32
