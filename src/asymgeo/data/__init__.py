"""Layer 6, data: BEIR files, encoders, embedding cache, splits, triples; imports layers 0-5, knows no geometry.

Real retrieval data: BEIR datasets, encoder conventions, the embedding cache, splits, triples.

This layer knows files and knows nothing about geometry.  Typical use::

    from asymgeo.data import load_beir, load_embeddings, adaptation_split, load_triples

    ds = load_beir("scifact", data_dir="../shared/data")          # BEIR folder, streamed
    emb = load_embeddings(ds, "all-MiniLM-L6-v2", cache_dir="../shared/embeddings")
    split = adaptation_split(ds)                                  # 647 / 162 / 300
    tr = load_triples(ds, "all-MiniLM-L6-v2", "train", cache_dir="../shared/embeddings")
    cars_score(tr.X, tr.Y_pos, tr.Y_neg, rank=16)
"""

from .beir import BeirDataset, DatasetReport, document_text, ids_digest, load_beir, warn_faults
from .cache import (
    NORM_TOLERANCE,
    EmbeddingCache,
    cache_fingerprint,
    cache_path,
    load_embeddings,
    validate_embeddings,
    verify_cache,
    write_embeddings,
)
from .download import BEIR_CHECKSUMS, beir_url, download_beir, fetch_url
from .encoders import (
    DEFAULT_ENCODER,
    ENCODERS,
    EncoderSpec,
    SentenceTransformerEncoder,
    check_device,
    get_encoder,
    load_encoder,
)
from .encoding import encode_dataset
from .evaluate import TIE_ORDERS, evaluate_frozen
from .import_cache import import_embeddings
from .pairs import pairs_dataset, prepare_pairs
from .paths import cache_root, data_root
from .splits import (
    DEFAULT_SPLIT_SEED,
    FOLD_SEED,
    NESTED_SIZES,
    adaptation_split,
    adaptation_split_source,
    fold_seed,
    fold_split,
    nested_subsets,
    query_folds,
    split_queries,
    split_sizes,
)
from .triples import Triples, load_triples, mine_hard_negatives, mining_recall

__all__ = [
    # datasets
    "BeirDataset",
    "DatasetReport",
    "load_beir",
    "data_root",
    "document_text",
    "ids_digest",
    "warn_faults",
    "download_beir",
    "fetch_url",
    "beir_url",
    "BEIR_CHECKSUMS",
    # encoders
    "EncoderSpec",
    "ENCODERS",
    "DEFAULT_ENCODER",
    "get_encoder",
    "load_encoder",
    "check_device",
    "SentenceTransformerEncoder",
    # cache
    "EmbeddingCache",
    "load_embeddings",
    "write_embeddings",
    "encode_dataset",
    "import_embeddings",
    "cache_root",
    "cache_path",
    "cache_fingerprint",
    "verify_cache",
    "validate_embeddings",
    "NORM_TOLERANCE",
    # pairs and a corpus, as a sentence-transformers user holds them
    "pairs_dataset",
    "prepare_pairs",
    # splits
    "DEFAULT_SPLIT_SEED",
    "FOLD_SEED",
    "NESTED_SIZES",
    "split_sizes",
    "split_queries",
    "adaptation_split",
    "adaptation_split_source",
    "query_folds",
    "fold_seed",
    "fold_split",
    "nested_subsets",
    # evaluation
    "evaluate_frozen",
    "TIE_ORDERS",
    # triples
    "Triples",
    "load_triples",
    "mine_hard_negatives",
    "mining_recall",
]
