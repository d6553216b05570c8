"""Layer 5, retrieval: exact full-corpus search, metrics, paired comparisons; imports layers 0-4, never data.

:mod:`.search` (exact top-k: numpy blocks, torch on CUDA, FAISS; ``ExactIndex``,
``AdapterIndex``), :mod:`.metrics` (NDCG@k and friends, trec_eval tie order),
:mod:`.compare` (paired per-query comparisons with intervals), :mod:`.approximate` (FAISS IVF /
HNSW ``ApproximateIndex`` and ``recall_at_k``, for mining hard negatives only).  Knows runs and relevance
tables, not files.
"""
