"""``@cache.cached``: exact-match caching of sync and async functions.

The wrapper holds no caching policy of its own: it turns a call into a :class:`CacheKey` and
uses the engine's public interface. A sync wrapper *is* the engine's L1 hit fast path
(:meth:`~cachekit._engine.engine.Engine.l1_fast_path`), built with this function's key shape,
because an L1 hit must cost about what ``cachetools.cached`` costs and every extra function call on
that path shows in the ratio.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, Self, TypeVar, overload

from cachekit._core.keys import (
    ArgNormalizer,
    UnkeyableArgument,
    all_scalar,
    local_key,
    stable_digest,
)
from cachekit._core.methods import BoundMethod, warn_receiver_left_out
from cachekit._core.types import CacheKey, Found, LookupResult, Status, StoreItem
from cachekit._core.validation import check_fraction, check_seconds
from cachekit.backends.memory import key_size

if TYPE_CHECKING:
    from cachekit._engine.engine import Engine
    from cachekit.cache import Cache

__all__ = ["CachedFunction", "make_cached"]

P = ParamSpec("P")
P2 = ParamSpec("P2")
S = TypeVar("S")
R = TypeVar("R")

_MISS: Any = object()

#: Full keys memoized per decorated function before the memo is cleared (a bound on memory).
KEY_MEMO_SIZE = 4096
#: Local keys larger than this (bytes, ``key_size``) are not memoized: the memo lives outside
#: the L1 byte bound, and for such keys the digest is cheap next to the argument's own size.
KEY_MEMO_MAX_KEY_BYTES = 1024


class CachedFunction(Protocol[P, R]):
    """What ``@cache.cached`` returns: the function, with its parameters and return type kept
    for type checkers, plus these helpers, which take the same arguments. ``alookup``,
    ``arefresh`` and ``ainvalidate`` are always coroutines; ``lookup``, ``refresh`` and
    ``invalidate`` are of the function's kind (docs/api.md, "Sync and async")."""

    __wrapped__: Callable[P, R]
    cache: Cache

    __name__: str
    __qualname__: str

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...
    def cache_key(self, *args: P.args, **kwargs: P.kwargs) -> str: ...
    def invalidate(self, *args: P.args, **kwargs: P.kwargs) -> Any: ...
    def lookup(self, *args: P.args, **kwargs: P.kwargs) -> Any: ...
    def refresh(self, *args: P.args, **kwargs: P.kwargs) -> R: ...
    def with_options(self, *, ttl: float | None = None) -> Callable[P, R]: ...
    async def alookup(self, *args: P.args, **kwargs: P.kwargs) -> LookupResult: ...
    async def ainvalidate(self, *args: P.args, **kwargs: P.kwargs) -> None: ...
    async def arefresh(self, *args: P.args, **kwargs: P.kwargs) -> Any: ...

    @overload
    def __get__(self, instance: None, owner: type[Any] | None = None) -> Self: ...
    @overload
    def __get__(
        self: CachedFunction[Concatenate[S, P2], R], instance: S, owner: type[Any] | None = None
    ) -> BoundMethod[P2, R]: ...


class _Keys:
    """The keys of one decorated function's calls."""

    def __init__(
        self,
        engine: Engine,
        fn: Callable[..., Any],
        fname: str,
        key: Callable[..., Any] | None,
        ignore: tuple[str, ...],
    ) -> None:
        self.engine = engine
        self.fname = fname
        self.key = key
        self.normalize = ArgNormalizer(fn, ignore)
        self.shape = self.normalize.positional_fast_path if key is None else None
        #: Binds keyword calls on the fast path (where there is one: no key function, no
        #: ignored or variadic parameters).
        self.bind = self.normalize.bind if self.shape is not None else None
        # What a key error calls each value: the parameter, or the key function's result.
        self.names: tuple[str, ...] = self.normalize.value_names if key is None else ("key",)
        self.first_default, self.nparams, self.defaults, _ = (
            self.shape if self.shape is not None else (0, -1, (), -1)
        )
        # Local key -> full key. The digest is a pure function of the arguments and, with the
        # key string, costs microseconds: a large share of an L2 hit. A memoized key is re-made
        # when the namespace version moved. Bounded by clearing (dict operations are atomic).
        self.made: dict[Hashable, CacheKey] = {}

    def _values(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        if self.key is not None:
            return (self.key(*args, **kwargs),)
        return self.normalize(args, kwargs)

    def local(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Hashable, str | None]:
        """The local key, and the stable digest when it had to be computed anyway."""
        try:
            return self._local(args, kwargs)
        except UnkeyableArgument as exc:
            # The key functions name the parameter (or ``key``); say whose parameter it is.
            raise UnkeyableArgument(f"{self.fname}: {exc}") from exc

    def _local(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Hashable, str | None]:
        types: tuple[type, ...] | None = None
        if not kwargs and self.key is None and self.first_default <= len(args) <= self.nparams:
            values: tuple[Any, ...] = args + self.defaults[len(args) :]
            types = tuple(map(type, values))
            if all_scalar(types):
                return (self.fname, values, types), None
        else:
            values = self._values(args, kwargs)
        lk = local_key(values, types)
        if lk is not None:
            return (self.fname, *lk), None
        digest = stable_digest(values, names=self.names)
        return (self.fname, digest), digest

    def local_only(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Hashable:
        return self.local(args, kwargs)[0]

    def full(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CacheKey:
        lk, digest = self.local(args, kwargs)
        k = self.made.get(lk)
        if k is not None and k.version == self.engine.version:
            return k
        if digest is None:
            digest = stable_digest(self._values(args, kwargs), names=self.names)
        k = self.engine.make_key("f", self.fname, digest, lk)
        if key_size(lk) > KEY_MEMO_MAX_KEY_BYTES:
            return k
        if len(self.made) >= KEY_MEMO_SIZE:
            self.made.clear()
        self.made[lk] = k
        return k


class _Calls:
    """Everything a decorated function does past the L1 hit fast path."""

    def __init__(
        self,
        engine: Engine,
        fn: Callable[..., Any],
        keys: _Keys,
        *,
        ttl: float | Callable[[Any], float | None] | None,
        stale_ttl: float,
        jitter: float,
        cache_none: bool,
        version: str | int | None,
    ) -> None:
        self.engine = engine
        self.fn = fn
        self.keys = keys
        self.ttl = ttl
        self.stale_ttl = stale_ttl
        self.jitter = jitter
        self.cache_none = cache_none
        self.version = version
        self.timing = engine.telemetry.function()

    def _items(self, k: CacheKey, value: Any, override: float | None) -> list[StoreItem]:
        """What to store for a computed value (nothing for ``None`` unless ``cache_none``)."""
        if value is None and not self.cache_none:
            return []
        chosen = override if override is not None else self.ttl
        if callable(chosen):
            chosen = chosen(value)
        resolved = self.engine.resolve_ttl(chosen, self.jitter)
        return [(k, value, resolved, self.stale_ttl, self.version)]

    def _computed(self, elapsed: float) -> None:
        self.timing.add_compute(elapsed)
        self.engine.telemetry.compute.record(elapsed)

    def _served(self, found: Found) -> bool:
        """Whether ``found`` answers the call (a hit, or a stale hit)."""
        if found.status is Status.HIT or found.status is Status.STALE:
            self.engine.telemetry.time_saved += self.timing.mean
            return True
        return False

    def result(self, k: CacheKey, found: Found) -> LookupResult:
        env = found.env
        if env is None or found.status not in (Status.HIT, Status.STALE):
            return LookupResult(found.status, key=k.remote)
        return LookupResult(
            found.status,
            env.value,
            found.tier,
            k.remote,
            age_s=self.engine.clock() - env.created_at,
        )

    # ------------------------------------------------------------------ sync
    # call/acall are written out rather than run as one generator core (as the semantic
    # decorator and feature sets do): this is the L2 hit path, and a core measured 0.2-2.6 us
    # slower per hit against an in-memory shared tier. The rules they use are the engine's.

    def compute(
        self, k: CacheKey, args: tuple[Any, ...], kwargs: dict[str, Any], override: float | None
    ) -> Any:
        t0 = time.perf_counter()
        value = self.fn(*args, **kwargs)
        self._computed(time.perf_counter() - t0)
        items = self._items(k, value, override)
        if items:
            self.engine.store_many(items)
        return value

    def refresh_key(
        self, k: CacheKey, args: tuple[Any, ...], kwargs: dict[str, Any], override: float | None
    ) -> Any:
        return self.engine.single_flight(
            k, lambda: self.compute(k, args, kwargs, override), miss=False
        )

    def call(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], override: float | None = None
    ) -> Any:
        k = self.keys.full(args, kwargs)
        found = self.engine.lookup_one(k)
        if self._served(found):
            if found.status is Status.STALE:
                self.engine.refresh_in_background(
                    k.local, lambda: self.refresh_key(k, args, kwargs, override)
                )
            return found.env.value  # type: ignore[union-attr]
        return self.engine.single_flight(k, lambda: self.compute(k, args, kwargs, override))

    # ------------------------------------------------------------------ asyncio

    async def acompute(
        self, k: CacheKey, args: tuple[Any, ...], kwargs: dict[str, Any], override: float | None
    ) -> Any:
        t0 = time.perf_counter()
        value = await self.fn(*args, **kwargs)
        self._computed(time.perf_counter() - t0)
        items = self._items(k, value, override)
        if items:
            await self.engine.astore_many(items)
        return value

    async def arefresh_key(
        self, k: CacheKey, args: tuple[Any, ...], kwargs: dict[str, Any], override: float | None
    ) -> Any:
        return await self.engine.asingle_flight(
            k, lambda: self.acompute(k, args, kwargs, override), miss=False
        )

    async def acall(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], override: float | None = None
    ) -> Any:
        k = self.keys.full(args, kwargs)
        found = await self.engine.alookup_one(k)
        if self._served(found):
            if found.status is Status.STALE:
                self.engine.arefresh_in_background(
                    k.local, lambda: self.arefresh_key(k, args, kwargs, override)
                )
            return found.env.value  # type: ignore[union-attr]
        return await self.engine.asingle_flight(k, lambda: self.acompute(k, args, kwargs, override))


def _validate(
    fn: Callable[..., Any],
    ttl: Any,
    stale_ttl: float,
    jitter: float,
    key: Callable[..., Any] | None,
    ignore: tuple[str, ...],
) -> None:
    if not callable(fn):
        raise TypeError("@cache.cached decorates a function")
    check_seconds("ttl", ttl, allow_callable=True)
    check_seconds("stale_ttl", stale_ttl, allow_none=False, allow_zero=True)
    check_fraction("jitter", jitter)
    if key is not None and ignore:
        raise ValueError("give key= or ignore=, not both")


def _method_ignore(
    fn: Callable[..., Any], key: Callable[..., Any] | None, ignore: tuple[str, ...]
) -> tuple[str, ...]:
    """``ignore`` plus the receiver of a method: an instance (or class) is rarely keyable, and
    its identity would differ in every process. Results that depend on the instance say so
    with ``key=``; results that do not, with ``ignore=("self",)``, which also silences the
    :class:`ReceiverLeftOutWarning` that leaving it out unsaid gives (docs/exact.md)."""
    if key is not None:
        return ignore
    receiver = warn_receiver_left_out(fn, "cached", "key", ignore)
    return ignore if receiver is None or receiver in ignore else (receiver, *ignore)


def make_cached(
    engine: Engine,
    fn: Callable[..., Any],
    *,
    owner: Cache,
    ttl: float | Callable[[Any], float | None] | None,
    stale_ttl: float,
    jitter: float,
    cache_none: bool,
    key: Callable[..., Any] | None,
    ignore: tuple[str, ...],
    name: str | None,
    version: str | int | None,
) -> CachedFunction[..., Any]:
    """Implements :meth:`cachekit.Cache.cached` (``owner``) over ``engine``."""
    _validate(fn, ttl, stale_ttl, jitter, key, ignore)
    fname = name or f"{fn.__module__}.{fn.__qualname__}"
    if version is not None:
        fname = f"{fname}@{version}"
    keys = _Keys(engine, fn, fname, key, _method_ignore(fn, key, ignore))
    calls = _Calls(
        engine,
        fn,
        keys,
        ttl=ttl,
        stale_ttl=stale_ttl,
        jitter=jitter,
        cache_none=cache_none,
        version=version,
    )
    if inspect.iscoroutinefunction(fn):
        w = _async_wrapper(engine, fn, keys, calls)
    else:
        w = _sync_wrapper(engine, fn, keys, calls)
    w.cache = owner
    w.cache_key = lambda *args, **kwargs: keys.full(args, kwargs).remote
    return w


def _sync_wrapper(engine: Engine, fn: Callable[..., Any], keys: _Keys, calls: _Calls) -> Any:
    w: Any = functools.wraps(fn)(
        engine.l1_fast_path(
            keys.fname, keys.shape, keys.local_only, calls.timing, calls.call, keys.bind
        )
    )

    def with_options(*, ttl: float | None = None) -> Callable[..., Any]:
        return lambda *a, **kw: calls.call(a, kw, ttl)

    def refresh(*args: Any, **kwargs: Any) -> Any:
        return calls.refresh_key(keys.full(args, kwargs), args, kwargs, None)

    def invalidate(*args: Any, **kwargs: Any) -> None:
        engine.delete_many([keys.full(args, kwargs)])

    def lookup(*args: Any, **kwargs: Any) -> LookupResult:
        k = keys.full(args, kwargs)
        return calls.result(k, engine.lookup_one(k, probe=True))

    async def arefresh(*args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(refresh, *args, **kwargs)

    w.with_options, w.refresh, w.invalidate, w.lookup = with_options, refresh, invalidate, lookup
    w.arefresh = arefresh
    return _with_async_helpers(w, engine, keys, calls)


def _with_async_helpers(w: Any, engine: Engine, keys: _Keys, calls: _Calls) -> Any:
    """``alookup`` and ``ainvalidate`` on ``w``, whatever the function's kind (they never call
    it): the asyncio forms every decorated function has (docs/api.md, "Sync and async")."""

    async def alookup(*args: Any, **kwargs: Any) -> LookupResult:
        k = keys.full(args, kwargs)
        return calls.result(k, await engine.alookup_one(k, probe=True))

    async def ainvalidate(*args: Any, **kwargs: Any) -> None:
        await engine.adelete_many([keys.full(args, kwargs)])

    w.alookup, w.ainvalidate = alookup, ainvalidate
    return w


def _async_wrapper(engine: Engine, fn: Callable[..., Any], keys: _Keys, calls: _Calls) -> Any:
    # The same fast path as a probe: a hit returns the value, anything else _MISS.
    probe = engine.l1_fast_path(
        keys.fname,
        keys.shape,
        keys.local_only,
        calls.timing,
        lambda args, kwargs: _MISS,
        keys.bind,
    )

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        value = probe(*args, **kwargs)
        if value is not _MISS:
            return value
        return await calls.acall(args, kwargs)

    def with_options(*, ttl: float | None = None) -> Callable[..., Any]:
        async def call(*a: Any, **kw: Any) -> Any:
            return await calls.acall(a, kw, ttl)

        return call

    async def refresh(*args: Any, **kwargs: Any) -> Any:
        return await calls.arefresh_key(keys.full(args, kwargs), args, kwargs, None)

    w: Any = _with_async_helpers(wrapper, engine, keys, calls)
    w.with_options, w.refresh, w.arefresh = with_options, refresh, refresh
    w.invalidate, w.lookup = w.ainvalidate, w.alookup
    return w
