"""A stress encoder for issue #36: a shipped encoder's embeddings crowded so that they sit close together.

Encoders such as E5, BGE or GTE put every text in a narrow cone (mean cosine between unrelated
queries 0.7 to 0.8, against about 0.12 for the shipped MiniLM and MPNet).  A document memory
gated on query-query cosine, or a map trained on such vectors, can behave very differently
there, and issue #36 warns that its default will be checked on an encoder that is not in
``../shared``.  This tool makes such an encoder from one that is:

.. math:: v' = (v + c\\,u) / \\|v + c\\,u\\|,

with ``u`` the unit mean direction of all of the dataset's query and document embeddings and
``c`` found by bisection so that the mean cosine between two distinct queries equals
``--target`` (default 0.75).  Queries and documents get the same map (one encoder embeds both),
so frozen search changes too: the document term ``c u.y`` and the norms reorder the documents,
as a different encoder would.  The result is written as a verified embedding cache
(:func:`asymgeo.data.import_embeddings`) under the encoder name ``crowded-<target>-<encoder>``.

Usage::

    python tools/crowded_encoder.py scifact all-MiniLM-L6-v2 --out results/crowded/embeddings
    asymgeo reproduce peers_crowded        # experiments/peers_crowded.toml reads that cache
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def mean_pair_cosine(V: np.ndarray) -> float:
    """Mean cosine over ordered pairs of distinct rows of unit-norm ``V``: ``(|sum v|^2 - n) / (n^2 - n)``."""
    n = V.shape[0]
    if n < 2:
        raise ValueError(f"need at least two rows, got {n}")
    s = V.sum(axis=0)
    return float((s @ s - np.einsum("ij,ij->", V, V)) / (n * n - n))


def crowd(V: np.ndarray, u: np.ndarray, c: float) -> np.ndarray:
    """Rows of ``V + c u`` scaled to unit norm."""
    W = V + c * u[None, :]
    return W / np.linalg.norm(W, axis=1, keepdims=True)


def crowding_scale(Q: np.ndarray, u: np.ndarray, target: float, *, tol: float = 1e-6) -> float:
    """The ``c >= 0`` whose crowded queries have mean pairwise cosine ``target`` (bisection; the
    mean cosine rises monotonically with ``c`` toward 1 when every query leans toward ``u``)."""
    now = mean_pair_cosine(Q)
    if not now < target < 1.0:
        raise ValueError(f"target: expected a mean cosine in ({now:.3f}, 1), the queries' own and the limit; "
                         f"got {target}")
    lo, hi = 0.0, 1.0
    while mean_pair_cosine(crowd(Q, u, hi)) < target:
        hi *= 2.0
        if hi > 1e6:
            raise ValueError("the queries do not approach each other along the mean direction")
    while hi - lo > tol:
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if mean_pair_cosine(crowd(Q, u, mid)) < target else (lo, mid)
    return (lo + hi) / 2.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("encoder", help="a cached encoder under --cache-dir")
    ap.add_argument("--data-dir", default=str(ROOT / ".." / "shared" / "data"))
    ap.add_argument("--cache-dir", default=str(ROOT / ".." / "shared" / "embeddings"))
    ap.add_argument("--out", required=True, help="the embedding cache folder to write into")
    ap.add_argument("--target", type=float, default=0.75, help="mean cosine between two queries (default 0.75)")
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)

    from asymgeo.data import import_embeddings, load_beir, load_embeddings

    ds = load_beir(args.dataset, data_dir=args.data_dir)
    src = load_embeddings(ds, args.encoder, cache_dir=args.cache_dir)
    Q = np.asarray(src.queries, dtype=np.float64)
    C = np.asarray(src.corpus, dtype=np.float64)
    u = np.concatenate([Q, C]).mean(axis=0)
    u /= np.linalg.norm(u)
    c = crowding_scale(Q, u, args.target)
    name = f"crowded-{args.target:g}-{args.encoder.rsplit('/', 1)[-1]}"
    cache = import_embeddings(ds, name, corpus=crowd(C, u, c), corpus_ids=list(ds.corpus_ids),
                              queries=crowd(Q, u, c), query_ids=list(ds.query_ids), normalize=True,
                              cache_dir=args.out, overwrite=args.overwrite)
    Qc = np.asarray(cache.queries, dtype=np.float64)
    print(f"{name}: c = {c:.4f}; mean query-query cosine {mean_pair_cosine(Q):.3f} -> {mean_pair_cosine(Qc):.3f} "
          f"(float16 cache); written to {cache.path}")
    return 0


def _cli(argv: list[str] | None = None) -> int:
    """``main`` with every refusal as one line on stderr and exit status 2 (nothing written)."""
    try:
        return main(argv)
    except (ValueError, OSError, KeyError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"crowded_encoder: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_cli())
