"""Semantic caching: answer a request from an earlier one whose text means the same.

Use it through :meth:`cachekit.Cache.semantic` (see ``docs/semantic.md``). The pieces:

* :mod:`cachekit.semantic.policy`: :class:`HitPolicy`, :class:`ThresholdPolicy`,
  ``DEFAULT_THRESHOLD``: which neighbour may answer; :class:`VerifiedPolicy`
  (:mod:`~cachekit.semantic.verifier`) and :class:`ErrorBoundedPolicy`
  (:mod:`~cachekit.semantic.error_bounded`) are stricter ones (``docs/hit-quality.md``);
* :mod:`cachekit.semantic.tier`: :class:`SemanticTier`: entries, expiry, capacity, Redis sharing;
* :mod:`cachekit.semantic.batcher`: :class:`MicroBatcher`: concurrent lookups share one call;
* :mod:`cachekit.semantic.embedder`, :mod:`cachekit.semantic.index`: the mechanisms;
* :mod:`cachekit.semantic.testing`: a deterministic embedder for tests;
* :func:`load_embedder` (:mod:`~cachekit.semantic.tuned`): an embedder written by
  ``cachekit tune`` (:mod:`~cachekit.semantic.tune`), on top of the packaged model.

This module imports nothing heavy: names are loaded on first access, so ``import cachekit``
never pulls in numpy, faiss or torch for users without the semantic extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachekit.lazy import lazy_exports

if TYPE_CHECKING:
    from cachekit.semantic.batcher import MicroBatcher
    from cachekit.semantic.error_bounded import EmbeddingComparator, ErrorBoundedPolicy
    from cachekit.semantic.policy import DEFAULT_THRESHOLD, HitPolicy, ThresholdPolicy
    from cachekit.semantic.tier import SemanticTier
    from cachekit.semantic.tuned import TunedEmbedder, load_embedder
    from cachekit.semantic.verifier import VerifiedPolicy

__all__ = [
    "DEFAULT_THRESHOLD",
    "EmbeddingComparator",
    "ErrorBoundedPolicy",
    "HitPolicy",
    "MicroBatcher",
    "SemanticTier",
    "ThresholdPolicy",
    "TunedEmbedder",
    "VerifiedPolicy",
    "load_embedder",
]

_LAZY = {
    "DEFAULT_THRESHOLD": "cachekit.semantic.policy",
    "HitPolicy": "cachekit.semantic.policy",
    "ThresholdPolicy": "cachekit.semantic.policy",
    "MicroBatcher": "cachekit.semantic.batcher",
    "SemanticTier": "cachekit.semantic.tier",
    "ErrorBoundedPolicy": "cachekit.semantic.error_bounded",
    "EmbeddingComparator": "cachekit.semantic.error_bounded",
    "VerifiedPolicy": "cachekit.semantic.verifier",
    "TunedEmbedder": "cachekit.semantic.tuned",
    "load_embedder": "cachekit.semantic.tuned",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
