"""The front: :class:`Cache`, what users import.

It builds the shared tier and the :class:`~cachekit.engine.Engine` (which holds every caching
policy) and hands the engine to the entry points: ``cached`` (:mod:`cachekit.decorators`),
``semantic`` (:mod:`cachekit.semantic.decorator`) and ``features`` (:mod:`cachekit.features`).
"""

from __future__ import annotations

import random as _random
import time
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

from cachekit.decorators import CachedFunction, make_cached
from cachekit.engine import Engine
from cachekit.features import FeatureSet
from cachekit.health import Health
from cachekit.protocols import Clock, Serializer
from cachekit.semantic.arbiter import cache_labels, report_feedback
from cachekit.semantic.decorator import make_semantic
from cachekit.telemetry import CacheStats
from cachekit.types import CacheKey, Found, LookupResult, Status

if TYPE_CHECKING:
    from cachekit.protocols import StorageTier
    from cachekit.semantic.arbiter import Label
    from cachekit.storage.base import SharedTier
    from cachekit.storage.memory import MemoryStore
    from cachekit.types import Envelope

__all__ = ["Cache", "CacheKey", "LookupResult", "Status"]


class Cache:
    """A tiered cache: in-process L1, optional Redis L2, and the policy around them.

    ``Cache()`` is the embedded default (L1 only). With ``redis_url`` (or ``redis_cluster_url``,
    or any :class:`~cachekit.protocols.StorageTier` as ``l2``) entries are shared by every process
    using the same namespace. ``l1=False`` makes every read go to L2, so every reader sees the
    shared value at once.
    """

    def __init__(
        self,
        *,
        redis_url: str | None = None,
        redis_cluster_url: str | None = None,
        l2: StorageTier | None = None,
        namespace: str = "default",
        l1: bool = True,
        l1_max_entries: int = 10_000,
        l1_max_bytes: int = 64 * 2**20,
        default_ttl: float | None = 300.0,
        serializer: str | Serializer = "msgpack",
        redis_timeout: float = 0.05,
        redis_connect_timeout: float | None = None,
        redis_options: dict[str, Any] | None = None,
        breaker_failures: int = 5,
        breaker_reset_s: float = 5.0,
        version_refresh_s: float = 1.0,
        refresh_workers: int = 4,
        clock: Clock | Callable[[], float] = time.time,
        random: Callable[[], float] = _random.random,
        key_prefix: str = "ck",
    ) -> None:
        if sum(x is not None for x in (redis_url, redis_cluster_url, l2)) > 1:
            raise ValueError("give at most one of redis_url, redis_cluster_url and l2")
        if redis_url is not None or redis_cluster_url is not None:
            l2 = _redis_tier(
                redis_url, redis_cluster_url, redis_timeout, redis_connect_timeout, redis_options
            )
        #: The policy behind this front; entry points use its public interface.
        self.engine = Engine(
            l2=l2,
            namespace=namespace,
            l1=l1,
            l1_max_entries=l1_max_entries,
            l1_max_bytes=l1_max_bytes,
            default_ttl=default_ttl,
            serializer=serializer,
            breaker_failures=breaker_failures,
            breaker_reset_s=breaker_reset_s,
            version_refresh_s=version_refresh_s,
            refresh_workers=refresh_workers,
            clock=clock,
            random=random,
            key_prefix=key_prefix,
        )
        if redis_url is not None or redis_cluster_url is not None:
            # A wrong URL would only ever cost misses: say so once, with the cause and the fix.
            self.engine.start_health_check()

    # ------------------------------------------------------------------ entry points

    def cached(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        ttl: float | Callable[[Any], float | None] | None = None,
        stale_ttl: float = 0.0,
        jitter: float = 0.0,
        cache_none: bool = False,
        key: Callable[..., Any] | None = None,
        ignore: Sequence[str] = (),
        name: str | None = None,
        version: str | int | None = None,
    ) -> Any:
        """Decorate a sync or async function so its results are cached.

        ``ttl``: seconds (default: the cache's ``default_ttl``), ``None`` for the default, or a
        function of the result returning seconds. ``stale_ttl``: seconds after expiry during which
        the old value is served while one background call refreshes it. ``jitter``: fraction of
        the TTL removed at random so entries written together do not expire together.
        ``key``: a function of the same arguments returning what identifies the call.
        ``ignore``: parameter names left out of the key. ``name``/``version``: the function's
        identity in the key (default ``module.qualname``); bump ``version`` when its code changes.
        """

        def wrap(f: Callable[..., Any]) -> CachedFunction:
            return make_cached(
                self.engine,
                f,
                owner=self,
                ttl=ttl,
                stale_ttl=stale_ttl,
                jitter=jitter,
                cache_none=cache_none,
                key=key,
                ignore=tuple(ignore),
                name=name,
                version=version,
            )

        return wrap(fn) if fn is not None else wrap

    def semantic(self, *args: Any, **kwargs: Any) -> Any:
        """Decorate a function whose text argument may be answered by a similar earlier one.
        See :mod:`cachekit.semantic`."""
        return make_semantic(self.engine, self, *args, **kwargs)

    def features(self, name: str, **kwargs: Any) -> FeatureSet:
        """A feature set: batch multi-get of entity features. See :mod:`cachekit.features`."""
        return FeatureSet(self.engine, name, **kwargs)

    # ------------------------------------------------------------------ key-value

    def kv_key(self, key: str) -> CacheKey:
        """The :class:`~cachekit.types.CacheKey` of ``key`` for :meth:`get`/:meth:`set`."""
        if not isinstance(key, str):
            raise TypeError(f"cache keys are str, got {type(key).__qualname__}")
        return self.engine.make_key("kv", "_", key, ("kv", key))

    def _served(self, found: Found, default: Any) -> Any:
        """What :meth:`get` returns for ``found``, counted: a fresh value is a hit; anything
        else (absent, stale, an unreachable shared tier) a miss."""
        if found.status is Status.HIT and found.env is not None:
            self.engine.record_found(Status.HIT)
            return found.env.value
        self.engine.record_misses(1)
        return default

    def get(self, key: str, default: Any = None) -> Any:
        """The fresh value stored under ``key`` with :meth:`set`, else ``default``."""
        return self._served(self.engine.lookup_one(self.kv_key(key), count=False), default)

    def set(self, key: str, value: Any, ttl: float | None = None) -> bool:
        """Store ``value`` under ``key``; returns whether it could be serialized and stored."""
        items = [(self.kv_key(key), value, self.engine.resolve_ttl(ttl), 0.0, None)]
        return self.engine.store_many(items)[0]

    def delete(self, key: str) -> None:
        self.engine.delete_many([self.kv_key(key)])

    async def aget(self, key: str, default: Any = None) -> Any:
        found = await self.engine.alookup_one(self.kv_key(key), count=False)
        return self._served(found, default)

    async def aset(self, key: str, value: Any, ttl: float | None = None) -> bool:
        items = [(self.kv_key(key), value, self.engine.resolve_ttl(ttl), 0.0, None)]
        return (await self.engine.astore_many(items))[0]

    async def adelete(self, key: str) -> None:
        await self.engine.adelete_many([self.kv_key(key)])

    # ------------------------------------------------------------------ namespace and state

    def invalidate_namespace(self) -> bool:
        """Retire every entry of this namespace, in every process sharing it: the namespace
        version in every key is bumped. Returns False (and keeps the old version) when the
        shared tier could not be reached."""
        return self.engine.invalidate_namespace()

    async def ainvalidate_namespace(self) -> bool:
        """The asyncio form of :meth:`invalidate_namespace`."""
        return await self.engine.ainvalidate_namespace()

    def clear_local(self) -> None:
        """Drop this process's in-memory entries (the shared tier keeps its own)."""
        self.engine.clear_l1()

    def make_key(self, kind: str, name: str, part: str, local: Hashable | None = None) -> CacheKey:
        """See :meth:`cachekit.engine.Engine.make_key`."""
        return self.engine.make_key(kind, name, part, local)

    def stats(self) -> CacheStats:
        return self.engine.stats()

    def health(self, *, check: bool = False) -> Health:
        """The shared tier's state: configured, reachable, last error (cause and fix) and circuit
        breaker state; see :class:`cachekit.health.Health`. ``check=True`` reads from the shared
        tier first (bounded by its timeouts), e.g. for a readiness probe."""
        return self.engine.check_shared_tier() if check else self.engine.health()

    def refreshing(self) -> bool:
        """Whether a background refresh is under way (for tests and graceful shutdown)."""
        return self.engine.refreshing()

    @property
    def breaker_state(self) -> str | None:
        return self.engine.breaker_state

    @property
    def version(self) -> int:
        return self.engine.version

    @property
    def namespace(self) -> str:
        return self.engine.namespace

    @property
    def default_ttl(self) -> float | None:
        return self.engine.default_ttl

    @property
    def key_prefix(self) -> str:
        return self.engine.key_prefix

    @property
    def clock(self) -> Callable[[], float]:
        return self.engine.clock

    @property
    def random(self) -> Callable[[], float]:
        return self.engine.random

    @property
    def serializer(self) -> Serializer:
        return self.engine.serializer

    @property
    def l1(self) -> MemoryStore[Envelope] | None:
        """The in-process tier, for introspection. It holds a mutable value as a
        :class:`~cachekit.serialization.Packed` (``.load()`` decodes a copy); read values
        through the cache, which does that for you."""
        return self.engine.l1

    @property
    def l2(self) -> SharedTier | None:
        """The shared tier (a plain ``StorageTier`` passed as ``l2`` comes back wrapped in a
        :class:`~cachekit.storage.base.PlainTier`)."""
        return self.engine.l2

    # ------------------------------------------------------------------ lifecycle

    def on_close(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the cache closes (see :meth:`cachekit.engine.Engine.on_close`)."""
        self.engine.on_close(fn)

    def close(self) -> None:
        """Stop background work and release connections. Idempotent."""
        self.engine.close()

    def __enter__(self) -> Cache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def feedback(self, result: LookupResult, *, correct: bool) -> bool:
        """Record a user's verdict on a semantic hit (``result`` from ``fn.lookup`` or a served
        call's result). A wrong one demotes the entry that answered and, once refuted
        repeatedly, evicts it; see docs/hit-quality.md. Returns whether a semantic tier of this
        cache knew the hit."""
        return report_feedback(self.engine, result, correct)

    def labels(self) -> list[Label]:
        """The verdicts this process recorded on its semantic functions' hits and checks, as
        labelled pairs, oldest first (the last 10,000 per function): explorations and checked
        misses (``source="check"``) and users' :meth:`feedback` (``"feedback"``). See
        docs/labels.md; ``cachekit export-labels`` reads the ones shared through Redis."""
        return cache_labels(self.engine)


def _redis_tier(
    url: str | None,
    cluster_url: str | None,
    timeout: float,
    connect_timeout: float | None,
    options: dict[str, Any] | None,
) -> StorageTier:
    try:
        from cachekit.storage.redis import RedisTier
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("Redis support needs redis-py: pip install 'cachekit-ml[redis]'") from exc
    return RedisTier(
        url if url is not None else cluster_url,
        cluster=True if cluster_url is not None else None,
        socket_timeout=timeout,
        connect_timeout=connect_timeout or max(timeout, 0.05),
        **dict(options or {}),
    )
