"""Fakes for tests of code that uses cachekit (never for production): a clock that moves only when
told to and a poller with a deadline (:mod:`~cachekit.testing.clock`), a deterministic embedder
that needs no model (:mod:`~cachekit.testing.embedders`), and an OpenAI-compatible upstream served
over real HTTP (:mod:`~cachekit.testing.upstream`, needs the ``proxy`` extra). The memory tier for
a cache without Redis is :class:`MemoryTier` (from :mod:`cachekit.backends`, named here too).
Names load on first access."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachekit._core.lazy import lazy_exports

if TYPE_CHECKING:
    from cachekit.backends.memory import MemoryTier
    from cachekit.testing.clock import ManualClock, wait_until
    from cachekit.testing.embedders import DeterministicTestEmbedder
    from cachekit.testing.upstream import FakeUpstream, UpstreamServer, serving

__all__ = [
    "DeterministicTestEmbedder",
    "FakeUpstream",
    "ManualClock",
    "MemoryTier",
    "UpstreamServer",
    "serving",
    "wait_until",
]

_LAZY = {
    "MemoryTier": "cachekit.backends.memory",
    "ManualClock": "cachekit.testing.clock",
    "wait_until": "cachekit.testing.clock",
    "DeterministicTestEmbedder": "cachekit.testing.embedders",
    "FakeUpstream": "cachekit.testing.upstream",
    "UpstreamServer": "cachekit.testing.upstream",
    "serving": "cachekit.testing.upstream",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
