"""cachekit: semantic and feature caching in front of model inference.

``import cachekit`` stays light: redis, faiss, torch, fastapi and openai load only when a feature
that needs them is used.
"""

from cachekit._version import __version__
from cachekit.cache import Cache
from cachekit.decorators import ReceiverLeftOutWarning
from cachekit.serialization import SerializationError
from cachekit.telemetry import (
    CacheStats,
    StatsLogger,
    register_prometheus,
    unregister_prometheus,
)
from cachekit.types import CacheKey, LookupResult, Status

__all__ = [
    "Cache",
    "CacheKey",
    "CacheStats",
    "LookupResult",
    "ReceiverLeftOutWarning",
    "SerializationError",
    "StatsLogger",
    "Status",
    "__version__",
    "register_prometheus",
    "unregister_prometheus",
]
