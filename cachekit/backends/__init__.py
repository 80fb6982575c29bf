"""Storage tiers: bytes key-value stores, each a :class:`~cachekit.backends.base.SharedTier`
(five required operations, optional abilities with defaults; see :mod:`cachekit.backends.base`).

Kept import-light: optional backends (redis) are imported only when their class is first
accessed, so ``import cachekit.backends`` works without the ``redis`` extra installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cachekit.backends.base import PlainTier, SharedTier, as_shared_tier
    from cachekit.backends.memory import MemoryTier
    from cachekit.backends.redis import RedisTier, hash_tag

__all__ = ["MemoryTier", "PlainTier", "RedisTier", "SharedTier", "as_shared_tier", "hash_tag"]

_LAZY = {
    "PlainTier": "cachekit.backends.base",
    "SharedTier": "cachekit.backends.base",
    "as_shared_tier": "cachekit.backends.base",
    "MemoryTier": "cachekit.backends.memory",
    "RedisTier": "cachekit.backends.redis",
    "hash_tag": "cachekit.backends.redis",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
