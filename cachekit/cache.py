"""The front: :class:`Cache`, what users import.

It builds the shared tier and the :class:`~cachekit._engine.engine.Engine` (which holds every
caching policy) and hands the engine to the entry points: ``cached``
(:mod:`cachekit.exact.decorator`), ``semantic`` (:mod:`cachekit.semantic.decorator`) and
``features`` (:mod:`cachekit.features`).
"""

from __future__ import annotations

import random as _random
import time
import warnings
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeGuard, TypeVar, overload

from cachekit._core.health import Health
from cachekit._core.protocols import Clock, Serializer
from cachekit._core.serialization import Envelope, SerializationError, decode_envelope
from cachekit._core.types import CacheKey, Found, LookupResult, Status
from cachekit._engine.engine import Engine
from cachekit._engine.l1 import loaded
from cachekit._engine.telemetry import CacheStats, PrometheusCollector
from cachekit.exact.decorator import CachedFunction, make_cached
from cachekit.features import FeatureSet
from cachekit.semantic.arbiter import cache_labels, report_feedback
from cachekit.semantic.decorator import SemanticFunction, make_semantic

if TYPE_CHECKING:
    from cachekit._core.protocols import Embedder, StorageTier, VectorIndex
    from cachekit.backends.base import SharedTier
    from cachekit.backends.memory import MemoryStore
    from cachekit.semantic.arbiter import Label
    from cachekit.semantic.policy.hit_policy import HitPolicy

__all__ = ["Cache", "CacheKey", "LookupResult", "ScannedEntry", "Status"]

P = ParamSpec("P")
R = TypeVar("R")
K = TypeVar("K")


class Cache:
    """A tiered cache: in-process L1, optional Redis L2, and the policy around them.

    ``Cache()`` is the embedded default (L1 only). With ``redis_url`` (or ``redis_cluster_url``,
    or any :class:`~cachekit._core.protocols.StorageTier` as ``l2``) entries are shared by every
    process using the same namespace. ``l1=False`` makes every read go to L2, so every reader sees
    the shared value at once.
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
        # The policy behind this front (private: entry points get it from the front).
        self._engine = Engine(
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
            self._engine.start_health_check()

    # ------------------------------------------------------------------ entry points

    @overload
    def cached(
        self,
        fn: Callable[P, R],
        *,
        ttl: float | Callable[[Any], float | None] | None = None,
        stale_ttl: float = 0.0,
        jitter: float = 0.0,
        cache_none: bool = False,
        key: Callable[..., Any] | None = None,
        ignore: Sequence[str] = (),
        name: str | None = None,
        version: str | int | None = None,
    ) -> CachedFunction[P, R]: ...

    @overload
    def cached(
        self,
        fn: None = None,
        *,
        ttl: float | Callable[[Any], float | None] | None = None,
        stale_ttl: float = 0.0,
        jitter: float = 0.0,
        cache_none: bool = False,
        key: Callable[..., Any] | None = None,
        ignore: Sequence[str] = (),
        name: str | None = None,
        version: str | int | None = None,
    ) -> Callable[[Callable[P, R]], CachedFunction[P, R]]: ...

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
        """Decorate a sync or async function so its results are cached (docs/exact.md).

        ``ttl``: seconds (default: the cache's ``default_ttl``), ``None`` for the default, or a
        function of the result returning seconds. ``stale_ttl``: seconds after expiry during which
        the old value is served while one background call refreshes it. ``jitter``: fraction of
        the TTL removed at random so entries written together do not expire together.
        ``cache_none``: whether a ``None`` result is stored. ``key``: a function of the same
        arguments returning what identifies the call. ``ignore``: parameter names left out of
        the key (a method's receiver is left out either way; name it here, or give ``key=``, to
        say so, else :class:`~cachekit.ReceiverLeftOutWarning`). ``name``/``version``: the
        function's identity in the key (default ``module.qualname``); bump ``version`` when its
        code changes. Usable bare (``@cache.cached``) or with options.
        """

        def wrap(f: Callable[..., Any]) -> CachedFunction[..., Any]:
            return make_cached(
                self._engine,
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

    @overload
    def semantic(
        self,
        fn: Callable[P, R],
        *,
        threshold: float | None = None,
        policy: HitPolicy | None = None,
        ttl: float | None = None,
        text: Callable[..., str] | None = None,
        scope: Callable[..., Any] | None = None,
        ignore: Sequence[str] = (),
        embedder: Embedder | Callable[..., Any] | None = None,
        name: str | None = None,
        version: str | int | None = None,
        cache_none: bool = False,
        capacity: int = 100_000,
        max_bytes: int | None = None,
        max_batch: int = 64,
        max_wait_ms: float = 0.0,
        batching: bool = True,
        index_factory: Callable[[int], VectorIndex] | None = None,
    ) -> SemanticFunction[P, R]: ...

    @overload
    def semantic(
        self,
        fn: None = None,
        *,
        threshold: float | None = None,
        policy: HitPolicy | None = None,
        ttl: float | None = None,
        text: Callable[..., str] | None = None,
        scope: Callable[..., Any] | None = None,
        ignore: Sequence[str] = (),
        embedder: Embedder | Callable[..., Any] | None = None,
        name: str | None = None,
        version: str | int | None = None,
        cache_none: bool = False,
        capacity: int = 100_000,
        max_bytes: int | None = None,
        max_batch: int = 64,
        max_wait_ms: float = 0.0,
        batching: bool = True,
        index_factory: Callable[[int], VectorIndex] | None = None,
    ) -> Callable[[Callable[P, R]], SemanticFunction[P, R]]: ...

    def semantic(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        threshold: float | None = None,
        policy: HitPolicy | None = None,
        ttl: float | None = None,
        text: Callable[..., str] | None = None,
        scope: Callable[..., Any] | None = None,
        ignore: Sequence[str] = (),
        embedder: Embedder | Callable[..., Any] | None = None,
        name: str | None = None,
        version: str | int | None = None,
        cache_none: bool = False,
        capacity: int = 100_000,
        max_bytes: int | None = None,
        max_batch: int = 64,
        max_wait_ms: float = 0.0,
        batching: bool = True,
        index_factory: Callable[[int], VectorIndex] | None = None,
    ) -> Any:
        """Decorate a sync or async function whose text argument may be answered by an earlier
        call whose text means the same (docs/semantic.md).

        ``threshold`` (cosine, default 0.90) or ``policy`` (a
        :class:`~cachekit.semantic.HitPolicy`):
        which neighbour may answer. ``ttl``: seconds an entry lives (default: the cache's
        ``default_ttl``). ``text``: a function of the call's arguments returning the compared
        text (default: the first ``str`` parameter). ``scope``: a function of the arguments
        returning what must match exactly for two calls to share an answer (default: every
        other argument). ``ignore``: parameter names left out of the scope (a method's
        receiver is left out either way; name it here, or give ``scope=``, to say so, else
        :class:`~cachekit.ReceiverLeftOutWarning`). ``embedder``: an
        :class:`~cachekit.Embedder` or a function of a list of texts (default: the packaged
        all-MiniLM-L6-v2 on ONNX Runtime). ``name``/``version`` and ``cache_none`` as for
        :meth:`cached`. ``capacity``/``max_bytes``: what the index holds in this process.
        ``max_batch``/``max_wait_ms``/``batching``: how concurrent lookups share one embedding
        call. ``index_factory``: a function of the dimension returning a
        :class:`~cachekit.VectorIndex` (default: FAISS).
        """
        return make_semantic(
            self._engine,
            self,
            fn,
            threshold=threshold,
            policy=policy,
            ttl=ttl,
            text=text,
            scope=scope,
            ignore=tuple(ignore),
            embedder=embedder,
            name=name,
            version=version,
            capacity=capacity,
            max_bytes=max_bytes,
            max_batch=max_batch,
            max_wait_ms=max_wait_ms,
            batching=batching,
            cache_none=cache_none,
            index_factory=index_factory,
        )

    def features(
        self,
        name: str,
        *,
        loader: Callable[[list[K]], Any],
        ttl: float | None = None,
        version: str | int | None = None,
        negative_ttl: float | None = 30.0,
        stale_ttl: float = 0.0,
        jitter: float = 0.1,
        max_batch: int | None = None,
        copy: bool = True,
        write_behind: bool = False,
    ) -> FeatureSet[K]:
        """A feature set: batch multi-get of entity features in front of ``loader``
        (docs/features.md).

        ``loader``: a sync or async function of a list of ids returning ``{id: features}`` (or a
        list in the ids' order). ``ttl``, ``stale_ttl``, ``version`` as for :meth:`cached`
        (``version`` None is the set's first version). ``negative_ttl``: seconds an id the loader
        does not know is remembered as absent (0 or None: never). ``jitter``: 0.1 by default,
        unlike :meth:`cached`, because one load writes a whole batch of entries at once, which
        would otherwise all expire together. ``max_batch``: ids per loader call. ``copy``:
        whether callers get their own copy of mutable features. ``write_behind``: store in the
        background, off the caller's path.
        """
        return FeatureSet(
            self._engine,
            name,
            loader=loader,
            ttl=ttl,
            version=1 if version is None else version,
            negative_ttl=negative_ttl,
            stale_ttl=stale_ttl,
            jitter=jitter,
            max_batch=max_batch,
            copy=copy,
            write_behind=write_behind,
        )

    # ------------------------------------------------------------------ key-value

    def kv_key(self, key: str) -> CacheKey:
        """The :class:`~cachekit._core.types.CacheKey` of ``key`` for :meth:`get`/:meth:`set`."""
        if not isinstance(key, str):
            raise TypeError(f"cache keys are str, got {type(key).__qualname__}")
        return self._engine.make_key("kv", "_", key, ("kv", key))

    def _served(self, found: Found, default: Any, count: bool) -> Any:
        """What :meth:`get` returns for ``found``, counted unless ``count`` is False: a fresh
        value is a hit; anything else (absent, stale, an unreachable shared tier) a miss."""
        hit = found.status is Status.HIT and found.env is not None
        if count:
            self.record(Status.HIT if hit else Status.MISS)
        return found.env.value if hit and found.env is not None else default

    def get(self, key: str, default: Any = None, *, count: bool = True) -> Any:
        """The fresh value stored under ``key`` with :meth:`set`, else ``default``. ``count``:
        whether the read counts as a hit or a miss in :meth:`stats` (an application that
        counts each request once, at its end, reads with ``count=False`` and calls
        :meth:`record`)."""
        found = self._engine.lookup_one(self.kv_key(key), count=False)
        return self._served(found, default, count)

    def set(self, key: str, value: Any, ttl: float | None = None) -> bool:
        """Store ``value`` under ``key``; returns whether it could be serialized and stored."""
        items = [(self.kv_key(key), value, self._engine.resolve_ttl(ttl), 0.0, None)]
        return self._engine.store_many(items)[0]

    def delete(self, key: str) -> None:
        self._engine.delete_many([self.kv_key(key)])

    async def aget(self, key: str, default: Any = None, *, count: bool = True) -> Any:
        """The asyncio form of :meth:`get`."""
        found = await self._engine.alookup_one(self.kv_key(key), count=False)
        return self._served(found, default, count)

    async def aset(self, key: str, value: Any, ttl: float | None = None) -> bool:
        items = [(self.kv_key(key), value, self._engine.resolve_ttl(ttl), 0.0, None)]
        return (await self._engine.astore_many(items))[0]

    async def adelete(self, key: str) -> None:
        await self._engine.adelete_many([self.kv_key(key)])

    def delete_many(self, keys: Sequence[str]) -> None:
        """Forget every one of ``keys`` here, in the shared tier and (one invalidation message
        for the batch) in the L1 of every process following it."""
        self._engine.delete_many([self.kv_key(k) for k in keys])

    # ------------------------------------------------------------------ admin: listing

    def scan(self, prefix: str = "", *, batch: int = 500) -> Iterator[list[ScannedEntry]]:
        """The fresh entries stored with :meth:`set` whose key starts with ``prefix``, in lists
        of at most ``batch`` ``(key, value, expires_at)`` (clock seconds; ``None``: no expiry);
        unreadable entries are left out. From the shared tier when it lists its keys (Redis:
        SCAN on every node of a cluster, never KEYS), else this process's L1. For admin tools:
        reads are not counted, L1 is not filled, and a failing shared tier raises."""
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
        engine = self._engine
        head = engine.remote_prefix("kv", "_")
        l2 = engine.l2
        pages = None if l2 is None else l2.scan_keys(head + prefix, batch)
        if pages is None:
            return self._scan_l1(prefix, batch)
        return self._scan_shared(pages, len(head))

    def purge(self, name: str) -> int:
        """Remove every entry of the decorated function or feature set whose cache identity is
        ``name`` (a function's ``name=``, default ``module.qualname``, with ``@version`` when it
        has one; a feature set's ``name@v<version>``): its results, features and semantic
        entries with their vectors, in the shared tier and in every process following it (this
        process's L1 is cleared). Returns how many shared keys and semantic entries were
        removed. Needs a shared tier that lists its keys (Redis): ValueError otherwise; raises
        when it fails. For ``cachekit purge --function``."""
        from cachekit.semantic.admin import purge_store
        from cachekit.semantic.tier import semantic_base

        engine, l2 = self._engine, self._engine.l2
        if l2 is None or not isinstance(name, str) or not name:
            raise ValueError("purge needs a shared tier (redis_url) and a function's name")
        removed, version = 0, engine.version
        for kind in ("f", "sem", "feat"):
            pages = l2.scan_keys(engine.remote_prefix(kind, name))
            if pages is None:
                raise ValueError(f"the shared tier {l2.target} cannot list its keys")
            for remotes in pages:
                engine.delete_many([CacheKey(r, r, version) for r in remotes])
                removed += len(remotes)
        store = l2.semantic_store(semantic_base(self.key_prefix, self.namespace, name))
        if store is not None:
            removed += purge_store(store, b"purge-" + name.encode("utf-8", "replace"))
        self.clear_local()
        return removed

    def _scan_shared(self, pages: Iterator[list[str]], head: int) -> Iterator[list[ScannedEntry]]:
        assert self._engine.l2 is not None
        now = self.clock()
        for remotes in pages:
            found = []
            for remote, data in zip(remotes, self._engine.l2.get_many(remotes), strict=True):
                if data is None:
                    continue
                try:
                    env = decode_envelope(self.serializer, data, remote)
                except SerializationError:
                    continue
                if env.fresh(now):
                    found.append(_scanned(remote[head:], env))
            if found:
                yield found

    def _scan_l1(self, prefix: str, batch: int) -> Iterator[list[ScannedEntry]]:
        l1 = self._engine.l1
        keys = [] if l1 is None else l1.keys()
        wanted = [k[1] for k in keys if _is_kv(k) and k[1].startswith(prefix)]
        for start in range(0, len(wanted), batch):
            found = []
            for key in wanted[start : start + batch]:
                env = None if l1 is None else l1.get(("kv", key))
                if env is not None:
                    found.append(_scanned(key, loaded(env)))
            if found:
                yield found

    # ------------------------------------------------------------------ namespace and state

    def invalidate_namespace(self) -> bool:
        """Retire every entry of this namespace, in every process sharing it: the namespace
        version in every key is bumped. Returns False (and keeps the old version) when the
        shared tier could not be reached."""
        return self._engine.invalidate_namespace()

    async def ainvalidate_namespace(self) -> bool:
        """The asyncio form of :meth:`invalidate_namespace`."""
        return await self._engine.ainvalidate_namespace()

    def clear_local(self) -> None:
        """Drop this process's in-memory entries (the shared tier keeps its own)."""
        self._engine.clear_l1()

    def make_key(self, kind: str, name: str, part: str, local: Hashable | None = None) -> CacheKey:
        """See :meth:`cachekit._engine.engine.Engine.make_key`."""
        return self._engine.make_key(kind, name, part, local)

    def stats(self) -> CacheStats:
        return self._engine.stats()

    def prometheus_collector(self, prefix: str = "cachekit") -> PrometheusCollector:
        """A Prometheus collector of this cache's counters, read at scrape time; register it
        with :func:`~cachekit.register_prometheus` (which builds it with this method)."""
        return PrometheusCollector(self, self._engine.telemetry, prefix)

    def record(self, status: Status) -> None:
        """Count one lookup's outcome in :meth:`stats`: a hit or a semantic hit as such,
        anything else as a miss. For applications that look up in steps and count each request
        once (the proxy's :class:`~cachekit.llm.LLMCache`)."""
        if status is Status.HIT or status is Status.SEMANTIC_HIT:
            self._engine.record_found(status)
        else:
            self._engine.record_misses(1)

    def record_malformed(self) -> None:
        """Count a stored value an application found malformed and served as a miss (the
        ``serialization_errors`` of :meth:`stats`)."""
        self._engine.telemetry.serialization_errors += 1

    @property
    def engine(self) -> Engine:
        """Deprecated: the engine is private (docs/api.md). Kept for one release."""
        warnings.warn(
            "Cache.engine is private and goes in the release after next; use the Cache's own "
            "methods (docs/api.md)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self._engine

    def health(self, *, check: bool = False) -> Health:
        """The shared tier's state: configured, reachable, last error (cause and fix) and circuit
        breaker state; see :class:`cachekit._core.health.Health`. ``check=True`` reads from the
        shared tier first (bounded by its timeouts), e.g. for a readiness probe."""
        return self._engine.check_shared_tier() if check else self._engine.health()

    def refreshing(self) -> bool:
        """Whether a background refresh is under way (for tests and graceful shutdown)."""
        return self._engine.refreshing()

    @property
    def breaker_state(self) -> str | None:
        return self._engine.breaker_state

    @property
    def version(self) -> int:
        return self._engine.version

    @property
    def namespace(self) -> str:
        return self._engine.namespace

    @property
    def default_ttl(self) -> float | None:
        return self._engine.default_ttl

    @property
    def key_prefix(self) -> str:
        return self._engine.key_prefix

    @property
    def clock(self) -> Callable[[], float]:
        return self._engine.clock

    @property
    def random(self) -> Callable[[], float]:
        return self._engine.random

    @property
    def serializer(self) -> Serializer:
        return self._engine.serializer

    @property
    def l1(self) -> MemoryStore[Envelope] | None:
        """The in-process tier, for introspection. It holds a mutable value as a
        :class:`~cachekit._core.serialization.Packed` (``.load()`` decodes a copy); read values
        through the cache, which does that for you."""
        return self._engine.l1

    @property
    def l2(self) -> SharedTier | None:
        """The shared tier (a plain ``StorageTier`` passed as ``l2`` comes back wrapped in a
        :class:`~cachekit.backends.base.PlainTier`)."""
        return self._engine.l2

    # ------------------------------------------------------------------ lifecycle

    def on_close(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the cache closes (see
        :meth:`cachekit._engine.engine.Engine.on_close`)."""
        self._engine.on_close(fn)

    def close(self) -> None:
        """Stop background work and release connections. Idempotent."""
        self._engine.close()

    def __enter__(self) -> Cache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def feedback(self, result: LookupResult, *, correct: bool) -> bool:
        """Record a user's verdict on a semantic hit (``result`` from ``fn.lookup`` or a served
        call's result). A wrong one demotes the entry that answered and, once refuted
        repeatedly, evicts it; see docs/hit-quality.md. Returns whether a semantic tier of this
        cache knew the hit."""
        return report_feedback(self._engine, result, correct)

    def labels(self) -> list[Label]:
        """The verdicts this process recorded on its semantic functions' hits and checks, as
        labelled pairs, oldest first (the last 10,000 per function): explorations and checked
        misses (``source="check"``) and users' :meth:`feedback` (``"feedback"``). See
        docs/labels.md; ``cachekit export-labels`` reads the ones shared through Redis."""
        return cache_labels(self._engine)


#: One entry of :meth:`Cache.scan`: its key, value and expiry (clock seconds; None: never).
ScannedEntry = tuple[str, Any, float | None]


def _scanned(key: str, env: Envelope) -> ScannedEntry:
    return key, env.value, None if env.ttl is None else env.created_at + env.ttl


def _is_kv(local: Hashable) -> TypeGuard[tuple[str, str]]:
    """Whether an L1 key is one of :meth:`Cache.kv_key`'s (``("kv", key)``)."""
    return type(local) is tuple and len(local) == 2 and local[0] == "kv" and type(local[1]) is str


def _redis_tier(
    url: str | None,
    cluster_url: str | None,
    timeout: float,
    connect_timeout: float | None,
    options: dict[str, Any] | None,
) -> StorageTier:
    try:
        from cachekit.backends.redis import RedisTier
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("Redis support needs redis-py: pip install 'cachekit-ml[redis]'") from exc
    return RedisTier(
        url if url is not None else cluster_url,
        cluster=True if cluster_url is not None else None,
        socket_timeout=timeout,
        connect_timeout=connect_timeout or max(timeout, 0.05),
        **dict(options or {}),
    )
