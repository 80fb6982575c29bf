"""Vector indexes: :class:`FaissIndex` (exact, then an HNSW graph past ``exact_max`` entries, on
the GPU where there is one), the graph itself, and the readers-writer lock that guards them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachekit._core.lazy import lazy_exports

if TYPE_CHECKING:
    from cachekit.semantic.index.faiss_index import (
        DEFAULT_EF_SEARCH,
        DEFAULT_EXACT_MAX,
        FaissIndex,
        gpu_available,
    )
    from cachekit.semantic.index.hnsw import HnswGraph
    from cachekit.semantic.index.rwlock import RWLock

__all__ = [
    "DEFAULT_EF_SEARCH",
    "DEFAULT_EXACT_MAX",
    "FaissIndex",
    "HnswGraph",
    "RWLock",
    "gpu_available",
]

_LAZY = {
    "FaissIndex": "cachekit.semantic.index.faiss_index",
    "gpu_available": "cachekit.semantic.index.faiss_index",
    "DEFAULT_EXACT_MAX": "cachekit.semantic.index.faiss_index",
    "DEFAULT_EF_SEARCH": "cachekit.semantic.index.faiss_index",
    "HnswGraph": "cachekit.semantic.index.hnsw",
    "RWLock": "cachekit.semantic.index.rwlock",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
