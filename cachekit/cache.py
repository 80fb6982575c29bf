"""The cache: every caching policy lives here, once.

Mechanisms below it (storage tiers, serializers, the vector index, embedders) are dumb; entry
points above it (decorators, feature sets, the semantic tier, adapters) translate their world
into the batch operations of this class: :meth:`Cache._lookup_many`, :meth:`Cache._store_many`,
:meth:`Cache._delete_many` and their ``_a``-prefixed asyncio mirrors.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random as _random
import threading
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from cachekit.breaker import CircuitBreaker
from cachekit.protocols import Clock, Entry, Serializer
from cachekit.serialization import (
    Envelope,
    SerializationError,
    decode_envelope,
    encode_envelope,
    get_serializer,
)
from cachekit.storage.memory import MemoryStore
from cachekit.telemetry import CacheStats, Telemetry

if TYPE_CHECKING:
    from cachekit.decorators import CachedFunction
    from cachekit.protocols import AsyncStorageTier, StorageTier

__all__ = ["Cache", "CacheKey", "LookupResult", "Status"]

log = logging.getLogger("cachekit")

T = TypeVar("T")
_FAILED: Any = object()  # a guarded L2 call that errored or was skipped by the breaker


class Status(str, enum.Enum):
    """The outcome of a lookup. A status, never ``None``: ``None`` can be a cached value."""

    HIT = "hit"
    SEMANTIC_HIT = "semantic_hit"
    STALE = "stale"
    MISS = "miss"
    ERROR = "error"


@dataclass(frozen=True)
class LookupResult:
    """What a lookup found. ``value`` is meaningful when :attr:`hit` is true."""

    status: Status
    value: Any = None
    tier: str | None = None
    key: str | None = None
    age_s: float | None = None
    similarity: float | None = None
    matched_text: str | None = None

    @property
    def hit(self) -> bool:
        return self.status in (Status.HIT, Status.SEMANTIC_HIT, Status.STALE)


@dataclass(frozen=True, slots=True)
class CacheKey:
    """``local`` keys the in-process tier (any hashable), ``remote`` the shared one (a string that
    is stable across processes and already carries the namespace and its version)."""

    local: Hashable
    remote: str
    version: int = 0


#: One item of a batch write: (key, value, ttl, stale_ttl, version).
StoreItem = tuple[CacheKey, Any, "float | None", float, "str | int | None"]


@dataclass(slots=True)
class _Found:
    status: Status
    env: Envelope | None = None
    tier: str | None = None


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
        if not isinstance(namespace, str) or not namespace or any(c in namespace for c in "{} \n"):
            raise ValueError("namespace must be a non-empty string without spaces or braces")
        if default_ttl is not None and default_ttl <= 0:
            raise ValueError("default_ttl must be positive or None")
        if sum(x is not None for x in (redis_url, redis_cluster_url, l2)) > 1:
            raise ValueError("give at most one of redis_url, redis_cluster_url and l2")
        self.namespace = namespace
        self.default_ttl = default_ttl
        self.clock = clock
        self.random = random
        self.key_prefix = key_prefix
        self.serializer: Serializer = get_serializer(serializer)
        self._telemetry = Telemetry(namespace)

        if redis_url is not None or redis_cluster_url is not None:
            try:
                from cachekit.storage.redis import RedisTier
            except ImportError as exc:  # pragma: no cover - depends on the environment
                raise ImportError(
                    "Redis support needs redis-py: pip install 'cachekit-ml[redis]'"
                ) from exc
            options = dict(redis_options or {})
            l2 = RedisTier(
                redis_url if redis_url is not None else redis_cluster_url,
                cluster=True if redis_cluster_url is not None else None,
                socket_timeout=redis_timeout,
                connect_timeout=redis_connect_timeout or max(redis_timeout, 0.05),
                **options,
            )
        self.l2: StorageTier | None = l2
        self.l1: MemoryStore[Envelope] | None = (
            MemoryStore(l1_max_entries, l1_max_bytes, clock) if l1 else None
        )
        if self.l1 is None and self.l2 is None:
            raise ValueError("l1=False needs a shared tier: pass redis_url or l2")
        self._l1c = self._telemetry.tier("l1")
        self._l2c = self._telemetry.tier("l2") if self.l2 is not None else None
        self._breaker = CircuitBreaker(breaker_failures, breaker_reset_s)

        self._version = 0
        self._version_prefix = f"{key_prefix}:{namespace}:v"
        self._version_key = f"{key_prefix}:{namespace}:__version__"
        self._version_refresh_s = version_refresh_s
        # The hit path compares against this one float; inf when there is nothing to refresh.
        self._next_version_check = float("-inf") if self.l2 is not None else float("inf")
        self._version_lock = threading.Lock()

        self._refresh_workers = refresh_workers
        self._executor: ThreadPoolExecutor | None = None
        self._refreshing: set[Hashable] = set()
        self._refresh_lock = threading.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closers: list[Callable[[], None]] = []
        self._last_warning = 0.0

    # ------------------------------------------------------------------ public surface

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
        from cachekit.decorators import make_cached

        def wrap(f: Callable[..., Any]) -> CachedFunction:
            return make_cached(
                self, f, ttl=ttl, stale_ttl=stale_ttl, jitter=jitter, cache_none=cache_none,
                key=key, ignore=tuple(ignore), name=name, version=version,
            )

        return wrap(fn) if fn is not None else wrap

    def semantic(self, *args: Any, **kwargs: Any) -> Any:
        """Decorate a function whose text argument may be answered by a similar earlier one.
        See :mod:`cachekit.semantic`."""
        from cachekit.semantic.decorator import make_semantic

        return make_semantic(self, *args, **kwargs)

    def features(self, name: str, **kwargs: Any) -> Any:
        """A feature set: batch multi-get of entity features. See :mod:`cachekit.features`."""
        from cachekit.features import FeatureSet

        return FeatureSet(self, name, **kwargs)

    def get(self, key: str, default: Any = None) -> Any:
        """The fresh value stored under ``key`` with :meth:`set`, else ``default``."""
        found = self._lookup_many([self._kv_key(key)])[0]
        return found.env.value if found.status is Status.HIT and found.env else default

    def set(self, key: str, value: Any, ttl: float | None = None) -> bool:
        """Store ``value`` under ``key``; returns whether it could be serialized and stored."""
        return self._store_many([(self._kv_key(key), value, self._resolve_ttl(ttl), 0.0, None)])[0]

    def delete(self, key: str) -> None:
        self._delete_many([self._kv_key(key)])

    async def aget(self, key: str, default: Any = None) -> Any:
        found = (await self._alookup_many([self._kv_key(key)]))[0]
        return found.env.value if found.status is Status.HIT and found.env else default

    async def aset(self, key: str, value: Any, ttl: float | None = None) -> bool:
        items = [(self._kv_key(key), value, self._resolve_ttl(ttl), 0.0, None)]
        return (await self._astore_many(items))[0]

    async def adelete(self, key: str) -> None:
        await self._adelete_many([self._kv_key(key)])

    def invalidate_namespace(self) -> bool:
        """Retire every entry of this namespace, in every process sharing it: the namespace
        version in every key is bumped. Returns False (and keeps the old version) when the
        shared tier could not be reached."""
        if self.l2 is None:
            with self._version_lock:
                self._version += 1
            self._clear_l1()
            return True
        new = self._l2_call(self.l2.incr, self._version_key)
        if new is _FAILED:
            log.warning("cachekit: could not bump namespace %r: shared tier unavailable",
                        self.namespace)
            return False
        self._set_version(int(new))
        return True

    async def ainvalidate_namespace(self) -> bool:
        if self.l2 is None:
            return self.invalidate_namespace()
        new = await self._al2_call(self._async_l2().aincr, self._version_key)
        if new is _FAILED:
            return False
        self._set_version(int(new))
        return True

    def clear_local(self) -> None:
        """Drop this process's in-memory entries (the shared tier keeps its own)."""
        self._clear_l1()

    def stats(self) -> CacheStats:
        return self._telemetry.snapshot(self.breaker_state)

    @property
    def breaker_state(self) -> str | None:
        return self._breaker.state if self.l2 is not None else None

    @property
    def version(self) -> int:
        return self._version

    def on_close(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the cache closes: entry points with background work (the semantic
        tier's batcher and Redis sync threads) register their shutdown here."""
        self._closers.append(fn)

    def close(self) -> None:
        """Stop background work and release connections. Idempotent."""
        closers, self._closers = self._closers, []
        for fn in closers:
            try:
                fn()
            except Exception:
                log.warning("cachekit: error while closing", exc_info=True)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self.l2 is not None:
            try:
                self.l2.close()
            except Exception:  # closing a dead connection must not raise either
                log.debug("cachekit: error closing shared tier", exc_info=True)

    def __enter__(self) -> Cache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ keys and ttl

    def make_key(self, kind: str, name: str, part: str, local: Hashable | None = None) -> CacheKey:
        """A key for entries of ``kind`` (``f`` functions, ``kv``, ``feat``, ``sem`` ...) owned
        by ``name``; ``part`` identifies the entry within it. ``local`` defaults to the remote
        string."""
        version = self._version
        remote = f"{self._version_prefix}{version}:{kind}:{name}:{part}"
        return CacheKey(remote if local is None else local, remote, version)

    def _current(self, keys: Sequence[CacheKey]) -> Sequence[CacheKey]:
        """``keys`` re-made for the current namespace version: a bump seen by the version check
        that runs inside a batch operation must apply to keys built just before it."""
        version = self._version
        if all(k.version == version for k in keys):
            return keys
        cut = len(self._version_prefix)
        return [
            k if k.version == version else CacheKey(
                k.local, f"{self._version_prefix}{version}:{k.remote[cut:].split(':', 1)[1]}",
                version,
            )
            for k in keys
        ]

    def _kv_key(self, key: str) -> CacheKey:
        if not isinstance(key, str):
            raise TypeError(f"cache keys are str, got {type(key).__qualname__}")
        return self.make_key("kv", "_", key, ("kv", key))

    def _resolve_ttl(self, ttl: float | None, jitter: float = 0.0) -> float | None:
        if ttl is None:
            ttl = self.default_ttl
        if ttl is None:
            return None
        if ttl <= 0:
            raise ValueError(f"ttl must be positive, got {ttl!r}")
        if jitter:
            # Only ever shorten: a TTL is a promise about staleness, not a suggestion.
            ttl = ttl * (1.0 - jitter * self.random())
        return ttl

    # ------------------------------------------------------------------ namespace version

    def _set_version(self, version: int) -> None:
        with self._version_lock:
            changed = version != self._version
            self._version = version
        if changed:
            self._clear_l1()

    def _clear_l1(self) -> None:
        if self.l1 is not None:
            self.l1.clear()

    def _check_version(self, now: float) -> None:
        if now < self._next_version_check or self.l2 is None:
            return
        self._next_version_check = now + self._version_refresh_s
        got = self._l2_call(self.l2.get_many, [self._version_key])
        if got is not _FAILED:
            self._set_version(int(got[0]) if got[0] is not None else 0)

    async def _acheck_version(self, now: float) -> None:
        if now < self._next_version_check or self.l2 is None:
            return
        self._next_version_check = now + self._version_refresh_s
        got = await self._al2_call(self._async_l2().aget_many, [self._version_key])
        if got is not _FAILED:
            self._set_version(int(got[0]) if got[0] is not None else 0)

    # ------------------------------------------------------------------ guarded shared tier

    def _l2_failed(self, exc: BaseException) -> None:
        assert self._l2c is not None
        self._l2c.errors += 1
        self._breaker.record_failure()
        now = time.monotonic()
        if now - self._last_warning > 10.0:  # rate-limited: a dead Redis must not flood logs
            self._last_warning = now
            log.warning("cachekit: shared tier error (served as a miss): %r", exc)

    def _l2_call(self, op: Callable[..., T], *args: Any) -> T:
        """Call the shared tier; an error or an open circuit costs a miss, never an exception."""
        assert self._l2c is not None
        if not self._breaker.allow():
            self._l2c.skipped += 1
            return _FAILED  # type: ignore[no-any-return,unused-ignore]
        t0 = time.perf_counter()
        try:
            result = op(*args)
        except Exception as exc:
            self._l2_failed(exc)
            return _FAILED  # type: ignore[no-any-return,unused-ignore]
        self._l2c.latency.record(time.perf_counter() - t0)
        self._breaker.record_success()
        return result

    async def _al2_call(self, op: Callable[..., Awaitable[T]], *args: Any) -> T:
        assert self._l2c is not None
        if not self._breaker.allow():
            self._l2c.skipped += 1
            return _FAILED  # type: ignore[no-any-return,unused-ignore]
        t0 = time.perf_counter()
        try:
            result = await op(*args)
        except Exception as exc:
            self._l2_failed(exc)
            return _FAILED  # type: ignore[no-any-return,unused-ignore]
        self._l2c.latency.record(time.perf_counter() - t0)
        self._breaker.record_success()
        return result

    def _async_l2(self) -> AsyncStorageTier:
        tier = self.l2
        if not hasattr(tier, "aget_many"):
            raise TypeError(f"shared tier {type(tier).__name__} has no asyncio interface")
        return tier  # type: ignore[return-value]

    # ------------------------------------------------------------------ batch lookups

    def _l2_merge(
        self,
        keys: Sequence[CacheKey],
        found: list[_Found],
        pending: list[int],
        datas: list[bytes | None] | Any,
        now: float,
    ) -> None:
        assert self._l2c is not None
        if datas is _FAILED:
            for i in pending:
                if found[i].status is Status.MISS:
                    found[i] = _Found(Status.ERROR)
            return
        for i, data in zip(pending, datas, strict=True):
            if data is None:
                self._l2c.misses += 1
                continue
            try:
                env = decode_envelope(self.serializer, data)
            except SerializationError as exc:
                self._l2c.errors += 1
                self._telemetry.serialization_errors += 1
                log.warning("cachekit: unreadable entry %s treated as a miss: %s",
                            keys[i].remote, exc)
                continue
            if env.fresh(now):
                self._l2c.hits += 1
                found[i] = _Found(Status.HIT, env, "l2")
                self._fill_l1(keys[i].local, env, data, now)
            elif env.servable_stale(now):
                self._l2c.hits += 1
                if found[i].status is not Status.STALE:
                    found[i] = _Found(Status.STALE, env, "l2")
            else:
                self._l2c.misses += 1

    def _fill_l1(self, local: Hashable, env: Envelope, data: bytes, now: float) -> None:
        if self.l1 is None:
            return
        remaining = None
        if env.ttl is not None:
            remaining = env.created_at + env.ttl + env.stale_ttl - now
            if remaining <= 0:
                return
        self.l1.set(local, env, remaining, len(data))

    def _count(self, found: list[_Found]) -> None:
        tel = self._telemetry
        for f in found:
            if f.status is Status.HIT:
                tel.hits += 1
            elif f.status is Status.STALE:
                tel.stale_hits += 1

    def _lookup_many(self, keys: Sequence[CacheKey]) -> list[_Found]:
        """What each key finds: one L1 pass, then one L2 round trip for the L1 misses."""
        fresh, rest = self._lookup_many_lazy([k.local for k in keys], self._key_at(keys))
        return self._merge_found(fresh, rest)

    async def _alookup_many(self, keys: Sequence[CacheKey]) -> list[_Found]:
        fresh, rest = await self._alookup_many_lazy(
            [k.local for k in keys], self._key_at(keys)
        )
        return self._merge_found(fresh, rest)

    def _lookup_one(self, key: CacheKey) -> _Found:
        """:meth:`_lookup_many` for the one key of a decorated call, without the batch
        bookkeeping, which costs as much as the rest of an L2 hit's Python work."""
        now = self.clock()
        self._check_version(now)
        key, found = self._l1_one(key, now)
        if found.status is Status.HIT or self.l2 is None:
            return self._counted(found)
        datas = self._l2_call(self.l2.get_many, [key.remote])
        return self._l2_one(key, found, datas, now)

    async def _alookup_one(self, key: CacheKey) -> _Found:
        now = self.clock()
        await self._acheck_version(now)
        key, found = self._l1_one(key, now)
        if found.status is Status.HIT or self.l2 is None:
            return self._counted(found)
        datas = await self._al2_call(self._async_l2().aget_many, [key.remote])
        return self._l2_one(key, found, datas, now)

    def _l1_one(self, key: CacheKey, now: float) -> tuple[CacheKey, _Found]:
        if key.version != self._version:
            key = self._current([key])[0]
        if self.l1 is None:
            return key, _Found(Status.MISS)
        env = self.l1.get(key.local)
        if env is not None and env.fresh(now):
            self._l1c.hits += 1
            return key, _Found(Status.HIT, env, "l1")
        self._l1c.misses += 1
        if env is not None and env.servable_stale(now):
            return key, _Found(Status.STALE, env, "l1")
        return key, _Found(Status.MISS)

    def _l2_one(self, key: CacheKey, found: _Found, datas: Any, now: float) -> _Found:
        result = [found]
        self._l2_merge([key], result, [0], datas, now)
        return self._counted(result[0])

    def _counted(self, found: _Found) -> _Found:
        self._count([found])
        return found

    def _key_at(self, keys: Sequence[CacheKey]) -> Callable[[int], CacheKey]:
        # Called after the lookup's version check: a key built before a bump gets the new version.
        return lambda i: self._current([keys[i]])[0]

    @staticmethod
    def _merge_found(
        fresh: list[Envelope | None], rest: dict[int, tuple[CacheKey, _Found]]
    ) -> list[_Found]:
        return [
            _Found(Status.HIT, env, "l1") if env is not None else rest[i][1]
            for i, env in enumerate(fresh)
        ]

    def _l1_pass_lazy(
        self, locals_: Sequence[Hashable], now: float
    ) -> tuple[list[Envelope | None], list[int], dict[int, Envelope]]:
        """The L1 pass of :meth:`_lookup_many_lazy`: fresh envelopes by index, the indexes
        still to look up, and the stale L1 envelopes among those."""
        fresh: list[Envelope | None] = [None] * len(locals_)
        stale: dict[int, Envelope] = {}
        l1 = self.l1
        if l1 is None:
            return fresh, list(range(len(locals_))), stale
        pending: list[int] = []
        # Raw items rather than MemoryStore.get: one clock read for the whole batch instead of
        # one per key. The envelope's own windows lie inside the stored expiry, so checking
        # them checks both.
        getitem = l1.getitem
        t0 = time.perf_counter()
        for i, local in enumerate(locals_):
            try:
                env = getitem(local).value
            except KeyError:
                pending.append(i)
                continue
            ttl = env.ttl
            if ttl is None or now < env.created_at + ttl:
                fresh[i] = env
                continue
            if env.servable_stale(now):
                stale[i] = env
            pending.append(i)
        self._l1c.latency.record(time.perf_counter() - t0)
        self._l1c.misses += len(pending)
        hits = len(locals_) - len(pending)
        self._l1c.hits += hits
        self._telemetry.hits += hits
        return fresh, pending, stale

    @staticmethod
    def _pending_found(
        pending: list[int], stale: dict[int, Envelope]
    ) -> list[_Found]:
        return [
            _Found(Status.STALE, stale[i], "l1") if i in stale else _Found(Status.MISS)
            for i in pending
        ]

    def _lookup_many_lazy(
        self, locals_: Sequence[Hashable], key_of: Callable[[int], CacheKey]
    ) -> tuple[list[Envelope | None], dict[int, tuple[CacheKey, _Found]]]:
        """The lookup behind every entry point, shaped for large batches that are mostly L1 hits
        (feature sets).

        Entries are given by their local keys; ``key_of(i)`` builds the full key of entry ``i``
        and is called only for entries L1 cannot answer, and an L1 hit allocates nothing, since
        at hundreds of entries per call those costs dominate. Returns the fresh L1 envelopes by
        index (``None`` elsewhere) and, for every other index, its key and what L2 found.
        """
        now = self.clock()
        self._check_version(now)
        fresh, pending, stale = self._l1_pass_lazy(locals_, now)
        if not pending:
            return fresh, {}
        keys = [key_of(i) for i in pending]
        found = self._pending_found(pending, stale)
        if self.l2 is not None:
            datas = self._l2_call(self.l2.get_many, [k.remote for k in keys])
            self._l2_merge(keys, found, list(range(len(keys))), datas, now)
        self._count(found)
        return fresh, dict(zip(pending, zip(keys, found, strict=True), strict=True))

    async def _alookup_many_lazy(
        self, locals_: Sequence[Hashable], key_of: Callable[[int], CacheKey]
    ) -> tuple[list[Envelope | None], dict[int, tuple[CacheKey, _Found]]]:
        now = self.clock()
        await self._acheck_version(now)
        fresh, pending, stale = self._l1_pass_lazy(locals_, now)
        if not pending:
            return fresh, {}
        keys = [key_of(i) for i in pending]
        found = self._pending_found(pending, stale)
        if self.l2 is not None:
            datas = await self._al2_call(
                self._async_l2().aget_many, [k.remote for k in keys]
            )
            self._l2_merge(keys, found, list(range(len(keys))), datas, now)
        self._count(found)
        return fresh, dict(zip(pending, zip(keys, found, strict=True), strict=True))

    # ------------------------------------------------------------------ batch writes

    def _encode_many(self, items: Sequence[StoreItem]) -> tuple[list[bool], list[Entry]]:
        now = self.clock()
        if any(item[0].version != self._version for item in items):
            fresh = self._current([item[0] for item in items])
            items = [(k, *item[1:]) for k, item in zip(fresh, items, strict=True)]
        ok: list[bool] = []
        entries: list[Entry] = []
        for key, value, ttl, stale_ttl, version in items:
            env = Envelope(value, now, ttl, stale_ttl if ttl is not None else 0.0, version)
            try:
                data = encode_envelope(self.serializer, env)
            except SerializationError as exc:
                self._telemetry.serialization_errors += 1
                log.warning("cachekit: not caching %s: %s", key.remote, exc)
                ok.append(False)
                continue
            ok.append(True)
            if self.l1 is not None:
                self.l1.set(key.local, env, env.storage_ttl, len(data))
            entries.append((key.remote, data, env.storage_ttl))
        return ok, entries

    def _store_many(self, items: Sequence[StoreItem]) -> list[bool]:
        ok, entries = self._encode_many(items)
        if entries and self.l2 is not None:
            self._l2_call(self.l2.set_many, entries)
        return ok

    async def _astore_many(self, items: Sequence[StoreItem]) -> list[bool]:
        ok, entries = self._encode_many(items)
        if entries and self.l2 is not None:
            await self._al2_call(self._async_l2().aset_many, entries)
        return ok

    def _delete_many(self, keys: Sequence[CacheKey]) -> None:
        keys = self._current(keys)
        if self.l1 is not None:
            for k in keys:
                self.l1.delete(k.local)
        if keys and self.l2 is not None:
            self._l2_call(self.l2.delete_many, [k.remote for k in keys])

    async def _adelete_many(self, keys: Sequence[CacheKey]) -> None:
        keys = self._current(keys)
        if self.l1 is not None:
            for k in keys:
                self.l1.delete(k.local)
        if keys and self.l2 is not None:
            await self._al2_call(self._async_l2().adelete_many, [k.remote for k in keys])

    # ------------------------------------------------------------------ background refresh

    def _refresh_in_background(self, token: Hashable, work: Callable[[], Any]) -> bool:
        """Run ``work`` once in a worker thread unless a refresh of ``token`` is under way."""
        with self._refresh_lock:
            if token in self._refreshing:
                return False
            self._refreshing.add(token)
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self._refresh_workers, thread_name_prefix="cachekit-refresh"
                )
            executor = self._executor

        def run() -> None:
            try:
                work()
                self._telemetry.refreshes += 1
            except Exception:
                self._telemetry.refresh_errors += 1
                log.warning("cachekit: background refresh failed (old value kept)", exc_info=True)
            finally:
                with self._refresh_lock:
                    self._refreshing.discard(token)

        executor.submit(run)
        return True

    def _arefresh_in_background(self, token: Hashable, work: Callable[[], Awaitable[Any]]) -> bool:
        with self._refresh_lock:
            if token in self._refreshing:
                return False
            self._refreshing.add(token)

        async def run() -> None:
            try:
                await work()
                self._telemetry.refreshes += 1
            except Exception:
                self._telemetry.refresh_errors += 1
                log.warning("cachekit: background refresh failed (old value kept)", exc_info=True)
            finally:
                with self._refresh_lock:
                    self._refreshing.discard(token)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._tasks.discard)
        return True

    def refreshing(self) -> bool:
        """Whether a background refresh is under way (for tests and graceful shutdown)."""
        return bool(self._refreshing)

    def feedback(self, result: LookupResult, *, correct: bool) -> bool:
        """Record a user's verdict on a semantic hit (``result`` from ``fn.lookup`` or a
        proxy). A wrong one demotes the entry that answered and, once refuted repeatedly,
        evicts it; see docs/hit-quality.md. Returns whether a semantic tier knew the hit."""
        from cachekit.semantic.arbiter import report_feedback

        return report_feedback(self, result, correct)
