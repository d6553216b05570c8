"""Download BEIR's public dataset archives, verify their checksums, unpack atomically.

BEIR publishes each dataset as ``<BEIR_BASE_URL>/<name>.zip`` together with its MD5 (the
table in BEIR's README); :data:`BEIR_CHECKSUMS` holds those values, and for SciFact also
the SHA-256 of the archive.  A download is streamed to a temporary file while hashing,
refused on a checksum mismatch, and unpacked into a temporary folder that is renamed
into place only once complete, so an interrupted download never leaves a folder that
looks like a dataset.  Any URL urllib can open works (``file://`` included), which is how
the tests exercise this module without a network.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from .._atomic import atomic_path, replace_folder
from .paths import data_root

__all__ = ["BEIR_BASE_URL", "BEIR_CHECKSUMS", "beir_url", "download_beir", "fetch_url", "file_digest"]

BEIR_BASE_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets"

#: Published archive checksums (BEIR README, "md5" column; SciFact's SHA-256 as recorded
#: by independent mirrors of the same 2,816,079-byte archive).
BEIR_CHECKSUMS: dict[str, dict[str, str]] = {
    "msmarco": {"md5": "444067daf65d982533ea17ebd59501e4"},
    "trec-covid": {"md5": "ce62140cb23feb9becf6270d0d1fe6d1"},
    "nfcorpus": {"md5": "a89dba18a62ef92f7d323ec890a0d38d"},
    "nq": {"md5": "d4d3d2e48787a744b6f6e691ff534307"},
    "hotpotqa": {"md5": "f412724f78b0d91183a0e86805e16114"},
    "fiqa": {"md5": "17918ed23cd04fb15047f73e6c3bd9d9"},
    "arguana": {"md5": "8ad3e3c2a5867cdced806d6503f29b99"},
    "webis-touche2020": {"md5": "46f650ba5a527fc69e0a6521c5a23563"},
    "cqadupstack": {"md5": "4e41456d7df8ee7760a7f866133bda78"},
    "quora": {"md5": "18fb154900ba42a600f84b839c173167"},
    "dbpedia-entity": {"md5": "c2a39eb420a3164af735795df012ac2c"},
    "scidocs": {"md5": "38121350fc3a4d2f48850f6aff52e4a9"},
    "fever": {"md5": "5a818580227bfb4b35bb6fa46d9b6c03"},
    "climate-fever": {"md5": "8b66f0a9126c521bae2bde127b4dc99d"},
    "scifact": {
        "md5": "5f7d1de60b170fc8027bb7898e2efca1",
        "sha256": "536e14446a0ba56ed1398ab1055f39fe852686ecad24a6306c80c490fa8e0165",
    },
}

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
_CHUNK = 1 << 20


def beir_url(name: str) -> str:
    """Public archive URL of a BEIR dataset."""
    return f"{BEIR_BASE_URL}/{name}.zip"


def file_digest(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """Hex digest of a file, read in 1 MiB chunks."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _opener(url: str) -> urllib.request.OpenerDirector:
    host = urllib.parse.urlparse(url).hostname
    if host in _LOOPBACK:  # never send loopback traffic through a configured proxy
        return urllib.request.build_opener(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener()


def fetch_url(
    url: str,
    dest: str | os.PathLike,
    *,
    md5: str | None = None,
    sha256: str | None = None,
    progress: bool = True,
    timeout: float = 60.0,
) -> Path:
    """Download ``url`` to ``dest`` atomically, verifying at least one checksum.

    Raises
    ------
    ValueError
        When no checksum is given or the downloaded bytes do not match it (the partial
        file is removed).
    """
    if not md5 and not sha256:
        raise ValueError(f"{url}: refusing to download without a checksum (pass md5= or sha256=)")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    h_md5, h_sha = hashlib.md5(), hashlib.sha256()
    with atomic_path(dest, suffix=".part") as tmp:
        with open(tmp, "wb") as out, _opener(url).open(url, timeout=timeout) as resp:
            total = resp.headers.get("Content-Length")
            bar = None
            if progress:
                from tqdm.auto import tqdm

                bar = tqdm(total=int(total) if total else None, unit="B", unit_scale=True, desc=dest.name)
            try:
                for block in iter(lambda: resp.read(_CHUNK), b""):
                    out.write(block)
                    h_md5.update(block)
                    h_sha.update(block)
                    if bar is not None:
                        bar.update(len(block))
            finally:
                if bar is not None:
                    bar.close()
        for algo, want, h in (("md5", md5, h_md5), ("sha256", sha256, h_sha)):
            if want and h.hexdigest().lower() != want.lower():
                raise ValueError(f"{url}: {algo} mismatch (expected {want.lower()}, got {h.hexdigest()})")
    return dest


def _beir_root_in_zip(zf: zipfile.ZipFile, archive: Path) -> str:
    """The member prefix ('' or 'name/') of the folder holding corpus.jsonl."""
    names = zf.namelist()
    for n in names:
        p = Path(n)
        if n.startswith("/") or ".." in p.parts or p.is_absolute():
            raise ValueError(f"{archive}: unsafe member path {n!r}")
    candidates = sorted(
        (n[: -len("corpus.jsonl")] for n in names if n.endswith("corpus.jsonl") and n.count("/") <= 1),
        key=len,
    )
    if not candidates:
        raise ValueError(f"{archive}: no corpus.jsonl at the top level or one folder down (not a BEIR archive)")
    return candidates[0]


def download_beir(
    name: str,
    data_dir: str | os.PathLike | None = None,
    *,
    url: str | None = None,
    md5: str | None = None,
    sha256: str | None = None,
    force: bool = False,
    progress: bool = True,
    keep_archive: bool = False,
) -> Path:
    """Download and unpack a BEIR dataset into ``<data_dir>/<name>``; return that folder.

    Parameters
    ----------
    name : BEIR dataset name (``scifact``, ``nq``, ``fever``, ``msmarco``, ``arguana``, ...)
        or any name when ``url`` and a checksum are given.
    data_dir : target root (default ``$ASYMGEO_DATA_DIR``, then ``~/.cache/asymgeo/datasets``).
    url : archive URL (default :func:`beir_url`); ``file://`` and ``http://127.0.0.1``
        work as well.
    md5, sha256 : expected checksums (default: :data:`BEIR_CHECKSUMS` for known names).
    force : re-download even if the folder already exists.
    """
    root = data_root(data_dir)
    target = root / name
    if target.is_dir() and (target / "corpus.jsonl").is_file() and not force:
        return target
    known = BEIR_CHECKSUMS.get(name, {})
    if url is None:
        if name not in BEIR_CHECKSUMS:
            raise ValueError(
                f"dataset {name!r}: not a known BEIR archive (known: {', '.join(sorted(BEIR_CHECKSUMS))}); "
                "pass url= and a checksum"
            )
        url = beir_url(name)
    if md5 is None and sha256 is None:
        md5, sha256 = known.get("md5"), known.get("sha256")
    root.mkdir(parents=True, exist_ok=True)
    archive = root / f"{name.replace('/', '_')}.zip"
    fetch_url(url, archive, md5=md5, sha256=sha256, progress=progress)
    tmpdir = Path(tempfile.mkdtemp(prefix=f".{name.replace('/', '_')}.", suffix=".unpack", dir=root))
    try:
        try:
            with zipfile.ZipFile(archive) as zf:
                prefix = _beir_root_in_zip(zf, archive)
                zf.extractall(tmpdir)
        except zipfile.BadZipFile as exc:
            raise ValueError(f"{url}: not a zip archive ({exc})") from None
        src = tmpdir / prefix if prefix else tmpdir
        target.parent.mkdir(parents=True, exist_ok=True)
        replace_folder(src, target)  # the old folder goes only once the new one is in place
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
        if not keep_archive:
            archive.unlink(missing_ok=True)
    return target
