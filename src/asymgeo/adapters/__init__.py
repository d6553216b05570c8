"""Layer 7, adapters: trained shared/dual adapters, files, export; imports layers 0-6, and torch (only here).

Trained shared and dual adapters on frozen embeddings (paper, Section 4 and Appendix F.1).

The only layer that uses PyTorch, and only inside :meth:`Adapter.fit` (extra ``train``):
importing this package, loading a saved adapter and scoring with it are numpy only.

>>> from asymgeo.adapters import Adapter, save_adapter, load_adapter   # doctest: +SKIP
>>> ad = Adapter(geometry="dual", rank=16).fit(X, pos_rows, corpus,    # doctest: +SKIP
...                                            hard_negative_rows=hard, validation_queries=V,
...                                            validation_relevance=table)
>>> scores = ad.query_transform(Q) @ corpus.T      # no re-indexing   # doctest: +SKIP
"""

from .adapter import FORMS, GEOMETRIES, INITS, Adapter, operator_from_maps
from .baseline import DEFAULT_SCALES, ScaleChoice, closed_form_adapter
from .io import check_compatible, load_adapter, save_adapter

__all__ = [
    "Adapter",
    "save_adapter",
    "load_adapter",
    "check_compatible",
    "closed_form_adapter",
    "operator_from_maps",
    "ScaleChoice",
    "DEFAULT_SCALES",
    "GEOMETRIES",
    "FORMS",
    "INITS",
]
