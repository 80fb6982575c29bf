"""cachekit: semantic and feature caching in front of model inference.

``import cachekit`` stays light: redis, faiss, torch, fastapi and openai load only when a feature
that needs them is used. Everything a user imports is named here or in a public subpackage
(``cachekit.backends``, ``cachekit.semantic``, ``cachekit.llm``, ``cachekit.replay``,
``cachekit.testing``, ``cachekit.adapters``); docs/api.md lists the whole surface. Modules under
``cachekit._core`` and ``cachekit._engine`` are private.
"""

from cachekit._core import moved
from cachekit._core.extras import MissingExtraError
from cachekit._core.health import Diagnosis, Health
from cachekit._core.keys import UnkeyableArgument
from cachekit._core.methods import ReceiverLeftOutWarning
from cachekit._core.protocols import (
    AsyncStorageTier,
    Clock,
    Embedder,
    Serializer,
    StorageTier,
    VectorIndex,
)
from cachekit._core.serialization import (
    Envelope,
    JsonSerializer,
    MsgpackSerializer,
    PickleSerializer,
    SerializationError,
    SignedSerializer,
)
from cachekit._core.tracing import disable_tracing, enable_tracing
from cachekit._core.types import CacheKey, LookupResult, Status
from cachekit._engine.telemetry import (
    CacheStats,
    StatsLogger,
    register_prometheus,
    unregister_prometheus,
)
from cachekit._version import __version__
from cachekit.cache import Cache
from cachekit.exact.decorator import CachedFunction
from cachekit.features import FeatureSet
from cachekit.semantic.decorator import SemanticFunction

__all__ = [
    "AsyncStorageTier",
    "Cache",
    "CacheKey",
    "CacheStats",
    "CachedFunction",
    "Clock",
    "Diagnosis",
    "Embedder",
    "Envelope",
    "FeatureSet",
    "Health",
    "JsonSerializer",
    "LookupResult",
    "MissingExtraError",
    "MsgpackSerializer",
    "PickleSerializer",
    "ReceiverLeftOutWarning",
    "SemanticFunction",
    "SerializationError",
    "Serializer",
    "SignedSerializer",
    "StatsLogger",
    "Status",
    "StorageTier",
    "UnkeyableArgument",
    "VectorIndex",
    "__version__",
    "disable_tracing",
    "enable_tracing",
    "register_prometheus",
    "unregister_prometheus",
]

moved.install()
