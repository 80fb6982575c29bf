"""``@cache.cached``: exact-match caching of sync and async functions.

The wrapper holds no caching policy of its own: it turns a call into a :class:`CacheKey` and
uses the cache's batch operations. The one thing it does itself is the L1 fast path (a dict
lookup and a freshness check), because an L1 hit must cost about what ``cachetools.cached``
costs, and every extra function call on that path shows in the ratio.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Hashable
from typing import Any, Protocol

from cachekit.cache import Cache, CacheKey, LookupResult, Status
from cachekit.keys import (
    SCALAR_SIGNATURES,
    ArgNormalizer,
    all_scalar,
    local_key,
    stable_digest,
)
from cachekit.singleflight import AsyncSingleFlight, SingleFlight

__all__ = ["CachedFunction", "make_cached"]

_MISS: Any = object()


class CachedFunction(Protocol):
    """What ``@cache.cached`` returns: the function, same signature, plus these helpers."""

    __wrapped__: Callable[..., Any]
    cache: Cache

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def cache_key(self, *args: Any, **kwargs: Any) -> str: ...
    def invalidate(self, *args: Any, **kwargs: Any) -> Any: ...
    def lookup(self, *args: Any, **kwargs: Any) -> Any: ...
    def refresh(self, *args: Any, **kwargs: Any) -> Any: ...
    def with_options(self, *, ttl: float | None = None) -> Callable[..., Any]: ...


def make_cached(
    cache: Cache,
    fn: Callable[..., Any],
    *,
    ttl: float | Callable[[Any], float | None] | None,
    stale_ttl: float,
    jitter: float,
    cache_none: bool,
    key: Callable[..., Any] | None,
    ignore: tuple[str, ...],
    name: str | None,
    version: str | int | None,
) -> CachedFunction:
    if not callable(fn):
        raise TypeError("@cache.cached decorates a function")
    if stale_ttl < 0 or not 0.0 <= jitter < 1.0:
        raise ValueError("stale_ttl must be >= 0 and jitter in [0, 1)")
    if ttl is not None and not callable(ttl) and ttl <= 0:
        raise ValueError(f"ttl must be positive, got {ttl!r}")
    if key is not None and ignore:
        raise ValueError("give key= or ignore=, not both")
    fname = name or f"{fn.__module__}.{fn.__qualname__}"
    if version is not None:
        fname = f"{fname}@{version}"
    normalize = ArgNormalizer(fn, ignore)
    tel = cache._telemetry
    l1c = cache._l1c
    timing = tel.function()

    fast = normalize.positional_fast_path if key is None else None
    first_default, nparams, defaults = fast if fast is not None else (0, -1, ())
    # Argument-type signatures known to be all scalars (see keys.SCALAR_SIGNATURES): tested inline
    # first, since even the call to all_scalar shows in the hit cost.
    scalar_sigs = SCALAR_SIGNATURES

    def keys_for(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Hashable, str | None]:
        """The local key, and the stable digest when it had to be computed anyway."""
        if not kwargs and first_default <= len(args) <= nparams:
            # Inlined ArgNormalizer fast path + local_key scalar case: this is the L1 hit path.
            values: tuple[Any, ...] = args + defaults[len(args):]
            types = tuple(map(type, values))
            if all_scalar(types):
                return (fname, values, types), None
        elif key is not None:
            values = (key(*args, **kwargs),)
        else:
            values = normalize(args, kwargs)
        lk = local_key(values)
        if lk is not None:
            return (fname, *lk), None
        digest = stable_digest(values)
        return (fname, digest), digest

    # Local key -> full key. The digest is a pure function of the arguments and, with the key
    # string, costs microseconds: a large share of an L2 hit. A memoized key is re-made when the
    # namespace version moved. Bounded by clearing (dict operations are atomic).
    made: dict[Hashable, CacheKey] = {}

    def full_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> CacheKey:
        lk, digest = keys_for(args, kwargs)
        k = made.get(lk)
        if k is not None and k.version == cache.version:
            return k
        if digest is None:
            values = (key(*args, **kwargs),) if key is not None else normalize(args, kwargs)
            digest = stable_digest(values)
        k = cache.make_key("f", fname, digest, lk)
        if len(made) >= 4096:
            made.clear()
        made[lk] = k
        return k

    def ttl_for(value: Any, override: float | None) -> float | None:
        chosen = override if override is not None else ttl
        if callable(chosen):
            chosen = chosen(value)
        return cache._resolve_ttl(chosen, jitter)

    def lookup_result(k: CacheKey, found: Any) -> LookupResult:
        env = found.env
        if env is None or found.status not in (Status.HIT, Status.STALE):
            return LookupResult(found.status, key=k.remote)
        return LookupResult(found.status, env.value, found.tier, k.remote,
                            age_s=cache.clock() - env.created_at)

    is_async = inspect.iscoroutinefunction(fn)
    l1 = cache.l1
    l1_item = l1.getitem if l1 is not None else None
    perf_counter = time.perf_counter
    clock = cache.clock

    def hit_path(on_miss: Callable[[tuple[Any, ...], dict[str, Any]], Any]) -> Callable[..., Any]:
        """The L1 hit path as a function of the call's arguments, handing misses to
        ``on_miss(args, kwargs)``. Built as a factory so the sync wrapper *is* this function (a
        Python call layer costs about a tenth of an L1 hit) while the async wrapper reuses the
        same body as a probe. Every attribute lookup here shows in the hit cost, hence the
        inlined key building."""

        def fast(*args: Any, **kwargs: Any) -> Any:
            if l1_item is None:
                return on_miss(args, kwargs)
            n = len(args)
            if not kwargs and first_default <= n <= nparams:
                values = args if n == nparams else args + defaults[n:]
                types = tuple(map(type, values))
                if types in scalar_sigs or all_scalar(types):
                    lk: Hashable = (fname, values, types)
                else:
                    plain = local_key(values, types)
                    lk = (fname, *plain) if plain is not None else keys_for(args, kwargs)[0]
            else:
                lk = keys_for(args, kwargs)[0]
            # Latency is sampled on one hit in 64: timing every hit would cost more than the
            # rest of the hit path.
            sampled = not timing.hits & 63
            t0 = perf_counter() if sampled else 0.0
            try:
                env = l1_item(lk).value
            except KeyError:
                return on_miss(args, kwargs)
            # Freshness implies the store's own expiry (fresh-until <= stored-until), so one clock
            # read decides both.
            now = clock()
            if (env.ttl is not None and now >= env.created_at + env.ttl) or (
                now >= cache._next_version_check
            ):
                return on_miss(args, kwargs)
            timing.hits += 1
            if sampled:
                l1c.latency.record(perf_counter() - t0)
            return env.value

        return fast

    if not is_async:
        flight = SingleFlight()

        def compute(k: CacheKey, args: tuple[Any, ...], kwargs: dict[str, Any],
                    override: float | None, recheck: bool) -> Any:
            if recheck and l1 is not None:
                # A leader that finished between our miss and our turn has stored it already.
                env = l1.get(k.local)
                if env is not None and env.fresh(clock()):
                    return env.value
            t0 = time.perf_counter()
            value = fn(*args, **kwargs)
            elapsed = time.perf_counter() - t0
            timing.add_compute(elapsed)
            tel.compute.record(elapsed)
            if value is not None or cache_none:
                cache._store_many([(k, value, ttl_for(value, override), stale_ttl, version)])
            return value

        def slow(args: tuple[Any, ...], kwargs: dict[str, Any], override: float | None) -> Any:
            k = full_key(args, kwargs)
            found = cache._lookup_one(k)
            if found.status is Status.HIT:
                tel.time_saved += timing.mean
                return found.env.value  # type: ignore[union-attr]
            if found.status is Status.STALE:
                tel.time_saved += timing.mean
                cache._refresh_in_background(
                    k.local,
                    lambda: flight.do(k.local, lambda: compute(k, args, kwargs, override, False)),
                )
                return found.env.value  # type: ignore[union-attr]
            tel.misses += 1
            value, shared = flight.do(k.local, lambda: compute(k, args, kwargs, override, True))
            if shared:  # another caller's run answered this one: not a miss after all
                tel.misses -= 1
                tel.singleflight_waits += 1
            return value

        wrapper = functools.wraps(fn)(hit_path(lambda args, kwargs: slow(args, kwargs, None)))

        def with_options(*, ttl: float | None = None) -> Callable[..., Any]:
            return lambda *a, **kw: slow(a, kw, ttl)

        def refresh(*args: Any, **kwargs: Any) -> Any:
            k = full_key(args, kwargs)
            return flight.do(k.local, lambda: compute(k, args, kwargs, None, False))[0]

        def invalidate(*args: Any, **kwargs: Any) -> None:
            cache._delete_many([full_key(args, kwargs)])

        def lookup(*args: Any, **kwargs: Any) -> LookupResult:
            k = full_key(args, kwargs)
            return lookup_result(k, cache._lookup_one(k))

    else:
        aflight = AsyncSingleFlight()

        async def acompute(k: CacheKey, args: tuple[Any, ...], kwargs: dict[str, Any],
                           override: float | None, recheck: bool) -> Any:
            if recheck and l1 is not None:
                env = l1.get(k.local)
                if env is not None and env.fresh(clock()):
                    return env.value
            t0 = time.perf_counter()
            value = await fn(*args, **kwargs)
            elapsed = time.perf_counter() - t0
            timing.add_compute(elapsed)
            tel.compute.record(elapsed)
            if value is not None or cache_none:
                await cache._astore_many([(k, value, ttl_for(value, override), stale_ttl, version)])
            return value

        async def aslow(args: tuple[Any, ...], kwargs: dict[str, Any],
                        override: float | None) -> Any:
            k = full_key(args, kwargs)
            found = await cache._alookup_one(k)
            if found.status is Status.HIT:
                tel.time_saved += timing.mean
                return found.env.value  # type: ignore[union-attr]
            if found.status is Status.STALE:
                tel.time_saved += timing.mean
                cache._arefresh_in_background(
                    k.local,
                    lambda: aflight.do(k.local, lambda: acompute(k, args, kwargs, override, False)),
                )
                return found.env.value  # type: ignore[union-attr]
            tel.misses += 1
            value, shared = await aflight.do(
                k.local, lambda: acompute(k, args, kwargs, override, True)
            )
            if shared:  # another caller's run answered this one: not a miss after all
                tel.misses -= 1
                tel.singleflight_waits += 1
            return value

        probe = hit_path(lambda args, kwargs: _MISS)

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            value = probe(*args, **kwargs)
            if value is not _MISS:
                return value
            return await aslow(args, kwargs, None)

        def with_options(*, ttl: float | None = None) -> Callable[..., Any]:
            async def call(*a: Any, **kw: Any) -> Any:
                return await aslow(a, kw, ttl)

            return call

        async def refresh(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            k = full_key(args, kwargs)
            return (await aflight.do(k.local, lambda: acompute(k, args, kwargs, None, False)))[0]

        async def invalidate(*args: Any, **kwargs: Any) -> None:  # type: ignore[misc]
            await cache._adelete_many([full_key(args, kwargs)])

        async def lookup(*args: Any, **kwargs: Any) -> LookupResult:  # type: ignore[misc]
            k = full_key(args, kwargs)
            return lookup_result(k, await cache._alookup_one(k))

    def cache_key(*args: Any, **kwargs: Any) -> str:
        return full_key(args, kwargs).remote

    w: Any = wrapper
    w.cache = cache
    w.cache_key = cache_key
    w.invalidate = invalidate
    w.lookup = lookup
    w.refresh = refresh
    w.with_options = with_options
    return w  # type: ignore[no-any-return,unused-ignore]
