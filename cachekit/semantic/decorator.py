"""``@cache.semantic``: answer a call from an earlier call whose text means the same.

The wrapper turns a call into ``(scope, text)``: the compared text, and a digest of everything
else that must match for two calls to share an answer. Lookups go exact-first (the cache's own
L1/L2, keyed by scope and text, before anything is embedded), then to the
:class:`~cachekit.semantic.tier.SemanticTier`, which searches only that scope and asks the hit
policy about the nearest entries. A miss runs the function once per concurrent identical call
and stores both an exact and a semantic entry.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from cachekit.cache import Cache, CacheKey, LookupResult, Status
from cachekit.keys import ArgNormalizer, stable_digest
from cachekit.semantic.policy import HitPolicy, resolve_policy
from cachekit.singleflight import AsyncSingleFlight, SingleFlight

if TYPE_CHECKING:
    from cachekit.protocols import Embedder, VectorIndex
    from cachekit.semantic.tier import Match, SemanticTier

__all__ = ["SemanticFunction", "make_semantic"]

log = logging.getLogger("cachekit.semantic")

_VAR_KINDS = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


class SemanticFunction(Protocol):
    """What ``@cache.semantic`` returns: the function, same signature, plus these helpers.
    For ``async def`` functions ``lookup``, ``put``, ``put_many`` and ``invalidate`` are
    coroutines."""

    __wrapped__: Callable[..., Any]
    cache: Cache
    tier: SemanticTier
    policy: HitPolicy

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def lookup(self, *args: Any, **kwargs: Any) -> Any: ...
    def put(self, value: Any, *args: Any, **kwargs: Any) -> Any: ...
    def put_many(self, items: Sequence[tuple[Any, tuple[Any, ...], dict[str, Any]]]) -> Any: ...
    def invalidate(self, *args: Any, **kwargs: Any) -> Any: ...
    def cache_key(self, *args: Any, **kwargs: Any) -> str: ...
    def scope_key(self, *args: Any, **kwargs: Any) -> str: ...
    def flush(self, timeout: float | None = None) -> bool: ...
    def close(self) -> None: ...


def make_semantic(
    cache: Cache,
    fn: Callable[..., Any] | None = None,
    *,
    threshold: float | None = None,
    policy: HitPolicy | None = None,
    ttl: float | None = None,
    text: Callable[..., str] | None = None,
    scope: Callable[..., Any] | None = None,
    embedder: Embedder | Callable[..., Any] | None = None,
    name: str | None = None,
    version: str | int | None = None,
    capacity: int = 100_000,
    max_batch: int = 64,
    max_wait_ms: float = 0.0,
    batching: bool = True,
    cache_none: bool = False,
    index_factory: Callable[[int], VectorIndex] | None = None,
) -> Any:
    """Implements :meth:`cachekit.Cache.semantic`; see ``docs/semantic.md``."""
    hit_policy = resolve_policy(threshold, policy)
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float))
                            or not ttl > 0):
        raise ValueError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
    if text is not None and not callable(text):
        raise TypeError("text= must be a function of the call's arguments returning str")
    if scope is not None and not callable(scope):
        raise TypeError("scope= must be a function of the call's arguments")
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"capacity must be a positive int, got {capacity!r}")
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise ValueError(f"max_batch must be a positive int, got {max_batch!r}")
    if not max_wait_ms >= 0:
        raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms!r}")
    embedder_factory = _embedder_factory(embedder)

    def wrap(f: Callable[..., Any]) -> SemanticFunction:
        if not callable(f):
            raise TypeError("@cache.semantic decorates a function")
        return _make(
            cache, f, policy=hit_policy, ttl=ttl, text=text, scope=scope,
            embedder_factory=embedder_factory, name=name, version=version, capacity=capacity,
            max_batch=max_batch, max_wait_ms=max_wait_ms, batching=batching,
            cache_none=cache_none, index_factory=index_factory,
        )

    return wrap(fn) if fn is not None else wrap


def _embedder_factory(embedder: Any) -> Callable[[], Embedder]:
    from cachekit.semantic.embedder import CachedEmbedder, as_embedder

    if embedder is None:
        def default() -> Embedder:
            # Built on first use: loading the model takes seconds and must not happen at import
            # or decoration time.
            from cachekit.semantic.embedder import SentenceTransformerEmbedder

            return CachedEmbedder(SentenceTransformerEmbedder())

        return default
    resolved = as_embedder(embedder)
    # Every embedder gets the exact-text cache: a text looked up and then stored (the miss
    # path) is encoded once, not twice.
    wrapped = resolved if isinstance(resolved, CachedEmbedder) else CachedEmbedder(resolved)
    return lambda: wrapped


def _text_parameter(fn: Callable[..., Any]) -> tuple[int, str]:
    """The compared argument: the first parameter annotated ``str``, else the first one."""
    params = [p for p in inspect.signature(fn).parameters.values()]
    candidates = [(i, p) for i, p in enumerate(params) if p.kind not in _VAR_KINDS]
    if not candidates:
        raise TypeError(
            f"{fn!r} has no named parameter to compare; pass text=lambda *a, **kw: ... instead"
        )
    for i, p in candidates:
        if p.annotation is str or p.annotation == "str":
            return i, p.name
    i, p = candidates[0]
    return i, p.name


def _make(
    cache: Cache,
    fn: Callable[..., Any],
    *,
    policy: HitPolicy,
    ttl: float | None,
    text: Callable[..., str] | None,
    scope: Callable[..., Any] | None,
    embedder_factory: Callable[[], Embedder],
    name: str | None,
    version: str | int | None,
    capacity: int,
    max_batch: int,
    max_wait_ms: float,
    batching: bool,
    cache_none: bool,
    index_factory: Callable[[int], VectorIndex] | None,
) -> SemanticFunction:
    from cachekit.semantic.tier import SemanticTier

    fname = name or f"{fn.__module__}.{fn.__qualname__}"
    if version is not None:
        fname = f"{fname}@{version}"
    normalize = ArgNormalizer(fn)
    text_pos, text_name = (-1, "") if text is not None else _text_parameter(fn)
    tier = SemanticTier(
        cache, fname, embedder=embedder_factory, policy=policy, ttl=ttl, capacity=capacity,
        max_batch=max_batch, max_wait_ms=max_wait_ms, batching=batching,
        index_factory=index_factory,
    )
    cache._telemetry.sections[f"semantic:{fname}"] = tier.stats
    cache.on_close(tier.close)
    tel = cache._telemetry
    clock = cache.clock
    mean_compute = [0.0]

    def split(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str]:
        """``(scope_key, text)`` of a call."""
        values = normalize(args, kwargs)
        if text is not None:
            t = text(*args, **kwargs)
            if not isinstance(t, str):
                raise TypeError(f"{fname}: text= returned {type(t).__name__}, expected str")
            # The argument the text was taken from is not scope; anything derived from it
            # (a stripped prompt, the last message) stays in scope unless scope= says otherwise:
            # a missed hit is cheaper than a wrong one.
            pos = next((i for i, v in enumerate(values) if v is t), None)
            rest: tuple[Any, ...] = values if pos is None else values[:pos] + values[pos + 1 :]
        else:
            t = values[text_pos]
            if not isinstance(t, str):
                raise TypeError(
                    f"{fname}: the compared text argument {text_name!r} must be str, "
                    f"got {type(t).__name__}"
                )
            rest = values[:text_pos] + values[text_pos + 1 :]
        what = ("scope", scope(*args, **kwargs)) if scope is not None else ("args", rest)
        return stable_digest(what), t

    def exact_key(scope_key: str, t: str) -> CacheKey:
        return cache.make_key("sem", fname, stable_digest((scope_key, t)))

    def exact_result(k: CacheKey, found: Any) -> LookupResult | None:
        if found.status is Status.HIT and found.env is not None:
            tier.exact_hits += 1
            tel.time_saved += mean_compute[0]
            return LookupResult(Status.HIT, found.env.value, found.tier, k.remote,
                                age_s=clock() - found.env.created_at)
        return None

    def semantic_result(k: CacheKey, m: Match, t: str) -> LookupResult:
        entry = m.entry
        if entry is not None and m.similarity is not None:
            env = tier.decode(entry)
            if env is not None:
                tier.arbiter.served(k.remote, entry.scope, t, entry, m.similarity)
                tier.semantic_hits += 1
                tier.record_hit(m.similarity)
                tel.hits += 1
                tel.time_saved += mean_compute[0]
                return LookupResult(Status.SEMANTIC_HIT, env.value, "semantic", k.remote,
                                    age_s=clock() - entry.created_at,
                                    similarity=m.similarity, matched_text=entry.text)
        tier.misses += 1
        return LookupResult(Status.MISS, key=k.remote, similarity=m.similarity)

    def search_failed(k: CacheKey, exc: Exception) -> LookupResult:
        # An embedder or index failure costs a miss (the function still runs), never an answer.
        tier.errors += 1
        tier.misses += 1
        log.warning("cachekit: semantic lookup in %s failed (served as a miss): %r", fname, exc)
        return LookupResult(Status.ERROR, key=k.remote)

    def note_compute(elapsed: float) -> None:
        tel.compute.record(elapsed)
        m = mean_compute[0]
        mean_compute[0] = elapsed if m == 0.0 else 0.9 * m + 0.1 * elapsed

    def storable(value: Any) -> bool:
        return value is not None or cache_none

    def add_semantic(items: list[tuple[str, str, Any]], resolved_ttl: float | None) -> None:
        try:
            tier.add_many(items, ttl=resolved_ttl, version=version)
        except Exception as exc:
            tier.errors += 1
            log.warning("cachekit: semantic store in %s failed: %r", fname, exc)

    is_async = inspect.iscoroutinefunction(fn)

    if not is_async:
        flight = SingleFlight()

        def lookup_parts(args: tuple[Any, ...], kwargs: dict[str, Any]
                         ) -> tuple[LookupResult, CacheKey, str, str]:
            scope_key, t = split(args, kwargs)
            k = exact_key(scope_key, t)
            tier.lookups += 1
            hit = exact_result(k, cache._lookup_one(k))
            if hit is not None:
                return hit, k, scope_key, t
            if not t:  # an empty text is compared exactly only: it means nothing to embed
                tier.misses += 1
                return LookupResult(Status.MISS, key=k.remote), k, scope_key, t
            try:
                m = tier.search(scope_key, t)
            except Exception as exc:
                return search_failed(k, exc), k, scope_key, t
            return semantic_result(k, m, t), k, scope_key, t

        def store_many(items: list[tuple[CacheKey, str, str, Any]]) -> int:
            kept = [it for it in items if storable(it[3])]
            if not kept:
                return 0
            resolved = cache._resolve_ttl(ttl)
            ok = cache._store_many([(k, v, resolved, 0.0, version) for k, _, _, v in kept])
            sem = [(s, t, v) for (_, s, t, v), good in zip(kept, ok, strict=True) if good and t]
            add_semantic(sem, resolved)
            return sum(ok)

        def compute(k: CacheKey, scope_key: str, t: str, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Any:
            l1 = cache.l1
            if l1 is not None:
                # A leader that finished between our miss and our turn has stored it already.
                env = l1.get(k.local)
                if env is not None and env.fresh(clock()):
                    return env.value
            t0 = time.perf_counter()
            value = fn(*args, **kwargs)
            note_compute(time.perf_counter() - t0)
            tier.arbiter.computed(scope_key, t, value)  # checks an exploration
            store_many([(k, scope_key, t, value)])
            return value

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result, k, scope_key, t = lookup_parts(args, kwargs)
            if result.hit:
                return result.value
            tel.misses += 1
            value, shared = flight.do(k.local, lambda: compute(k, scope_key, t, args, kwargs))
            if shared:  # another caller's run answered this one
                tel.misses -= 1
                tel.singleflight_waits += 1
            return value

        def lookup(*args: Any, **kwargs: Any) -> LookupResult:
            return lookup_parts(args, kwargs)[0]

        def put(value: Any, *args: Any, **kwargs: Any) -> bool:
            scope_key, t = split(args, kwargs)
            return store_many([(exact_key(scope_key, t), scope_key, t, value)]) > 0

        def put_many(items: Sequence[tuple[Any, tuple[Any, ...], dict[str, Any]]]) -> int:
            prepared = []
            for value, a, kw in items:
                scope_key, t = split(tuple(a), dict(kw or {}))
                prepared.append((exact_key(scope_key, t), scope_key, t, value))
            return store_many(prepared)

        def invalidate(*args: Any, **kwargs: Any) -> None:
            scope_key, t = split(args, kwargs)
            cache._delete_many([exact_key(scope_key, t)])
            tier.invalidate(scope_key, t)

    else:
        aflight = AsyncSingleFlight()

        async def alookup_parts(args: tuple[Any, ...], kwargs: dict[str, Any]
                                ) -> tuple[LookupResult, CacheKey, str, str]:
            scope_key, t = split(args, kwargs)
            k = exact_key(scope_key, t)
            tier.lookups += 1
            hit = exact_result(k, await cache._alookup_one(k))
            if hit is not None:
                return hit, k, scope_key, t
            if not t:
                tier.misses += 1
                return LookupResult(Status.MISS, key=k.remote), k, scope_key, t
            try:
                batcher = tier.batcher
                if batcher is not None and not batcher.closed:
                    tier.start()
                    m = await asyncio.wrap_future(batcher.submit((scope_key, t)))
                else:
                    # Embedding is CPU work of milliseconds: never on the event loop.
                    m = await asyncio.to_thread(tier.search, scope_key, t)
            except Exception as exc:
                return search_failed(k, exc), k, scope_key, t
            return semantic_result(k, m, t), k, scope_key, t

        async def astore_many(items: list[tuple[CacheKey, str, str, Any]]) -> int:
            kept = [it for it in items if storable(it[3])]
            if not kept:
                return 0
            resolved = cache._resolve_ttl(ttl)
            ok = await cache._astore_many(
                [(k, v, resolved, 0.0, version) for k, _, _, v in kept]
            )
            sem = [(s, t, v) for (_, s, t, v), good in zip(kept, ok, strict=True) if good and t]
            if sem:
                await asyncio.to_thread(add_semantic, sem, resolved)
            return sum(ok)

        async def acompute(k: CacheKey, scope_key: str, t: str, args: tuple[Any, ...],
                           kwargs: dict[str, Any]) -> Any:
            l1 = cache.l1
            if l1 is not None:
                env = l1.get(k.local)
                if env is not None and env.fresh(clock()):
                    return env.value
            t0 = time.perf_counter()
            value = await fn(*args, **kwargs)
            note_compute(time.perf_counter() - t0)
            if tier.arbiter.pending(scope_key, t):  # a comparator may embed: not on the loop
                await asyncio.to_thread(tier.arbiter.computed, scope_key, t, value)
            await astore_many([(k, scope_key, t, value)])
            return value

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            result, k, scope_key, t = await alookup_parts(args, kwargs)
            if result.hit:
                return result.value
            tel.misses += 1
            value, shared = await aflight.do(
                k.local, lambda: acompute(k, scope_key, t, args, kwargs)
            )
            if shared:
                tel.misses -= 1
                tel.singleflight_waits += 1
            return value

        async def lookup(*args: Any, **kwargs: Any) -> LookupResult:  # type: ignore[misc]
            return (await alookup_parts(args, kwargs))[0]

        async def put(value: Any, *args: Any, **kwargs: Any) -> bool:  # type: ignore[misc]
            scope_key, t = split(args, kwargs)
            return await astore_many([(exact_key(scope_key, t), scope_key, t, value)]) > 0

        async def put_many(  # type: ignore[misc]
            items: Sequence[tuple[Any, tuple[Any, ...], dict[str, Any]]],
        ) -> int:
            prepared = []
            for value, a, kw in items:
                scope_key, t = split(tuple(a), dict(kw or {}))
                prepared.append((exact_key(scope_key, t), scope_key, t, value))
            return await astore_many(prepared)

        async def invalidate(*args: Any, **kwargs: Any) -> None:  # type: ignore[misc]
            scope_key, t = split(args, kwargs)
            await cache._adelete_many([exact_key(scope_key, t)])
            await asyncio.to_thread(tier.invalidate, scope_key, t)

    def cache_key(*args: Any, **kwargs: Any) -> str:
        """The exact-match key of a call (what an identical call is served from)."""
        return exact_key(*split(args, kwargs)).remote

    def scope_key(*args: Any, **kwargs: Any) -> str:
        """The scope digest of a call, e.g. for ``tier.add_vectors``."""
        return split(args, kwargs)[0]

    w: Any = wrapper
    w.cache = cache
    w.tier = tier
    w.policy = policy
    w.lookup = lookup
    w.put = put
    w.put_many = put_many
    w.invalidate = invalidate
    w.cache_key = cache_key
    w.scope_key = scope_key
    w.flush = tier.flush
    w.close = tier.close
    return w
