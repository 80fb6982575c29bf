"""What a cache's in-process tier holds and hands out.

:class:`L1` is the engine's view of its :class:`~cachekit.backends.memory.MemoryStore`: entries are
:class:`~cachekit._core.types.Envelope` values, a mutable value is held as a
:class:`~cachekit._core.serialization.Packed` copy so no caller can change what later callers get,
and what L1 hands out goes through :func:`loaded`. Built over ``None`` (a cache with ``l1=False``),
every read misses and every write is dropped, so the engine asks no question twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence

from cachekit._core.protocols import Serializer
from cachekit._core.serialization import Packed, SerializationError, for_sharing
from cachekit._core.types import MISSED, CacheKey, Envelope, Found, LazyFound, Status
from cachekit._engine.telemetry import TierCounters
from cachekit.backends.memory import MemoryStore

__all__ = ["L1", "L1Item", "loaded", "merged"]

#: One L1 write of a batch: (local key, envelope as held, seconds to keep, size in bytes).
L1Item = tuple[Hashable, Envelope, float | None, int]


def loaded(env: Envelope) -> Envelope:
    """``env`` as L1 hands it out: a :class:`Packed` value decoded into a copy of its own."""
    v = env.value
    if type(v) is not Packed:
        return env
    return Envelope(v.load(), env.created_at, env.ttl, env.stale_ttl, env.version)


def merged(lazy: LazyFound) -> list[Found]:
    """A batch lookup's :class:`~cachekit._core.types.LazyFound` as one ``Found`` per entry, each
    the caller's own (none of them is the shared ``MISSED``)."""
    rest = dict(zip(lazy.pending, lazy.found, strict=True))
    return [
        Found(Status.HIT, loaded(env), "l1")
        if env is not None
        else Found(Status.MISS)
        if rest[i] is MISSED
        else rest[i]
        for i, env in enumerate(lazy.fresh)
    ]


class L1:
    """``store`` (or ``None``), counted in ``counters``; mutable values are copied with
    ``serializer``; ``remember(keys)`` runs for every batch of keys written (the invalidation
    channel's local-key map)."""

    def __init__(
        self,
        store: MemoryStore[Envelope] | None,
        counters: TierCounters,
        serializer: Serializer,
        remember: Callable[[Sequence[CacheKey]], None],
    ) -> None:
        self.store = store
        self.counters = counters
        self.serializer = serializer
        self._remember = remember

    # ------------------------------------------------------------------ reads

    def one(self, local: Hashable, now: float) -> Found:
        """What L1 holds under ``local`` at ``now``: a fresh hit, a servable stale entry, or
        ``MISS``; counted."""
        if self.store is None:
            return Found(Status.MISS)
        env = self.store.get(local)
        if env is not None and env.fresh(now):
            self.counters.hits += 1
            return Found(Status.HIT, loaded(env), "l1")
        self.counters.misses += 1
        if env is not None and env.servable_stale(now):
            return Found(Status.STALE, loaded(env), "l1")
        return Found(Status.MISS)

    def fresh(self, local: Hashable, now: float) -> Envelope | None:
        """The fresh envelope under ``local``, if any (not counted)."""
        if self.store is None:
            return None
        env = self.store.get(local)
        return loaded(env) if env is not None and env.fresh(now) else None

    def scan(
        self, locals_: Sequence[Hashable], now: float
    ) -> tuple[list[Envelope | None], list[int], dict[int, Envelope]]:
        """The L1 pass of a batch lookup: fresh envelopes by index (as held: a
        :class:`Packed` value is the caller's to load), the indexes still to look up, and the
        stale envelopes among those. Counted here; the caller counts the hits as served."""
        fresh: list[Envelope | None] = [None] * len(locals_)
        stale: dict[int, Envelope] = {}
        if self.store is None:
            return fresh, list(range(len(locals_))), stale
        pending: list[int] = []
        # Raw items rather than MemoryStore.get: one clock read for the whole batch instead of
        # one per key. The envelope's own windows lie inside the stored expiry, so checking
        # them checks both.
        t0 = time.perf_counter()
        items = self.store.get_items(locals_)
        if items.count(None) == len(items):  # a batch of new entries: one C-level pass
            pending = list(range(len(items)))
            items = []
        for i, item in enumerate(items):
            if item is None:
                pending.append(i)
                continue
            env = item.value
            ttl = env.ttl
            if ttl is None or now < env.created_at + ttl:
                fresh[i] = env
                continue
            if env.servable_stale(now):
                stale[i] = loaded(env)
            pending.append(i)
        c = self.counters
        c.latency.record(time.perf_counter() - t0)
        c.misses += len(pending)
        c.hits += len(locals_) - len(pending)
        return fresh, pending, stale

    # ------------------------------------------------------------------ writes

    def held(self, env: Envelope) -> Envelope:
        """What L1 holds for ``env``: its value as is when immutable, else a :class:`Packed`
        copy. The value is packed on its own, not read back from the envelope's bytes: decoding
        a whole envelope on every L1 hit cost 2.8x decoding the value, and an entry is read
        more often than written."""
        held = for_sharing(self.serializer, env.value)
        if held is env.value:
            return env
        return Envelope(held, env.created_at, env.ttl, env.stale_ttl, env.version)

    def fill(
        self,
        key: CacheKey,
        env: Envelope,
        size: int,
        now: float,
        share: bool = False,
        fills: list[L1Item] | None = None,
    ) -> None:
        """Hold ``env`` (read from the shared tier, ``size`` bytes there) under ``key`` for what
        is left of its life; into ``fills`` instead when given (the caller writes them with
        :meth:`put_many`). ``share``: hold the value itself, not a copy."""
        if self.store is None:
            return
        remaining = None
        if env.ttl is not None:
            remaining = env.created_at + env.ttl + env.stale_ttl - now
            if remaining <= 0:
                return
        try:
            held = env if share else self.held(env)
        except SerializationError:
            return
        if fills is None:
            self.store.set(key.local, held, remaining, size)
            self._remember([key])
        else:
            fills.append((key.local, held, remaining, size))

    def put_many(self, items: list[L1Item], keys: Sequence[CacheKey]) -> None:
        """Write ``items`` (one lock and one clock read for the batch); ``keys`` are theirs."""
        if self.store is not None and items:
            self.store.set_many(items)
            self._remember(keys)

    def delete(self, keys: Sequence[CacheKey]) -> None:
        if self.store is not None:
            for k in keys:
                self.store.delete(k.local)
