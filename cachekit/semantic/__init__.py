"""Semantic caching: answer a request from an earlier one whose text means the same.

Use it through :meth:`cachekit.Cache.semantic` (see ``docs/semantic.md``). The pieces:

* :mod:`cachekit.semantic.policy.hit_policy`: :class:`HitPolicy`, :class:`ThresholdPolicy`,
  ``DEFAULT_THRESHOLD``: which neighbour may answer; :class:`VerifiedPolicy`
  (:mod:`~cachekit.semantic.policy.verifier`) and :class:`ErrorBoundedPolicy`
  (:mod:`~cachekit.semantic.policy.error_bounded`) are stricter ones (``docs/hit-quality.md``);
* :mod:`cachekit.semantic.tier`: :class:`SemanticTier`: entries, expiry, capacity, Redis sharing;
* :mod:`cachekit._engine.batcher`: :class:`MicroBatcher`: concurrent lookups share one call;
* :mod:`cachekit.semantic.embed.embedder`, :mod:`cachekit.semantic.index.faiss_index`: the
  mechanisms;
* :mod:`cachekit.testing.embedders`: a deterministic embedder for tests;
* :func:`load_embedder` (:mod:`~cachekit.semantic.embed.adapter`): an embedder written by
  ``cachekit tune`` (:mod:`~cachekit.semantic.train.tune`), on top of the packaged model.

This module imports nothing heavy: names are loaded on first access, so ``import cachekit``
never pulls in numpy, faiss or torch for users without the semantic extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachekit._core.lazy import lazy_exports

if TYPE_CHECKING:
    from cachekit._engine.batcher import MicroBatcher
    from cachekit.semantic.embed.adapter import TunedEmbedder, load_embedder
    from cachekit.semantic.policy.error_bounded import EmbeddingComparator, ErrorBoundedPolicy
    from cachekit.semantic.policy.hit_policy import DEFAULT_THRESHOLD, HitPolicy, ThresholdPolicy
    from cachekit.semantic.policy.verifier import VerifiedPolicy
    from cachekit.semantic.tier import SemanticTier

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
    "DEFAULT_THRESHOLD": "cachekit.semantic.policy.hit_policy",
    "HitPolicy": "cachekit.semantic.policy.hit_policy",
    "ThresholdPolicy": "cachekit.semantic.policy.hit_policy",
    "MicroBatcher": "cachekit._engine.batcher",
    "SemanticTier": "cachekit.semantic.tier",
    "ErrorBoundedPolicy": "cachekit.semantic.policy.error_bounded",
    "EmbeddingComparator": "cachekit.semantic.policy.error_bounded",
    "VerifiedPolicy": "cachekit.semantic.policy.verifier",
    "TunedEmbedder": "cachekit.semantic.embed.adapter",
    "load_embedder": "cachekit.semantic.embed.adapter",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
