"""Embedders: the packaged MiniLM on ONNX Runtime (its graph built from the weights), where the
weights come from, an exact-text cache of embeddings, and a tuned adapter's loader. Names load on
first access."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachekit._core.lazy import lazy_exports

if TYPE_CHECKING:
    from cachekit.semantic.embed.adapter import TunedEmbedder, load_embedder
    from cachekit.semantic.embed.cached import CachedEmbedder
    from cachekit.semantic.embed.embedder import (
        CallableEmbedder,
        SentenceTransformerEmbedder,
        as_embedder,
    )

__all__ = [
    "CachedEmbedder",
    "CallableEmbedder",
    "SentenceTransformerEmbedder",
    "TunedEmbedder",
    "as_embedder",
    "load_embedder",
]

_LAZY = {
    "SentenceTransformerEmbedder": "cachekit.semantic.embed.embedder",
    "CallableEmbedder": "cachekit.semantic.embed.embedder",
    "as_embedder": "cachekit.semantic.embed.embedder",
    "CachedEmbedder": "cachekit.semantic.embed.cached",
    "TunedEmbedder": "cachekit.semantic.embed.adapter",
    "load_embedder": "cachekit.semantic.embed.adapter",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
