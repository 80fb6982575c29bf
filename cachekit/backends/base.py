"""The declared interface of a shared tier: what a backend must write, and what it may offer.

A backend subclasses :class:`SharedTier` and writes the five required operations (``get_many``,
``set_many``, ``delete_many``, ``incr``, ``close``). Everything else is an optional ability: a
real method with a documented default, which a backend overrides to offer it. The engine calls
every method unconditionally and never asks what a backend has:

==========================  =====================================================================
ability                     default
==========================  =====================================================================
asyncio forms (``a*``)      the sync method in a worker thread (``asyncio.to_thread``)
``target``                  ``name`` (where the tier points, for logs and health)
``incr_from``               ``incr``: a counter lost to eviction restarts at 1, not above what
                            the caller saw (Redis re-seeds atomically)
``raise_counter``           ``None``: the counter is left as it is (the engine keeps what it read)
``publish_invalidation``    nothing; ``publishes_invalidations`` is False, so no process maps
                            remote keys back to its own L1 keys for nothing
``follow_invalidations``    ``None``: not followed (another process's deletes reach this one's
                            L1 at its entries' TTL)
``semantic_store``          ``None``: semantic entries stay in their process
``scan_keys``               ``None``: the tier cannot list its keys (admin listings and purges
                            then see this process's L1 only)
==========================  =====================================================================

Any object with the five required methods (the :class:`~cachekit._core.protocols.StorageTier`
protocol) can still be passed as ``l2``: :func:`as_shared_tier` wraps it in :class:`PlainTier`,
which offers the defaults. ``tests/test_storage_conformance.py`` runs one suite, the optional
abilities included, against every backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from cachekit._core.protocols import AsyncStorageTier, Entry, StorageTier

if TYPE_CHECKING:
    from cachekit.backends.semantic_store import SemanticStore

__all__ = ["PlainTier", "SharedTier", "as_shared_tier"]


class SharedTier:
    """Base of every shared tier. See the module docstring for the required operations and the
    defaults of the optional abilities. Backends raise on failure: the engine turns failures
    into misses, once, for all of them."""

    #: The tier's short name (``"redis"``, ``"memory"``): metric labels, stats keys.
    name: str = "shared"
    #: Whether :meth:`publish_invalidation` reaches other processes.
    publishes_invalidations: bool = False

    # ------------------------------------------------------------------ required

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values for ``keys`` in order; ``None`` where absent or expired."""
        raise NotImplementedError

    def set_many(self, entries: Sequence[Entry]) -> None:
        """Store every ``(key, value, ttl)`` (``ttl`` seconds, ``None``: no expiry; a TTL at
        or below zero stores nothing); an existing key is overwritten."""
        raise NotImplementedError

    def delete_many(self, keys: Sequence[str]) -> int:
        """Delete ``keys``; returns how many existed."""
        raise NotImplementedError

    def incr(self, key: str) -> int:
        """Atomically add one to an integer counter (created at 0) and return the new value."""
        raise NotImplementedError

    def close(self) -> None:
        """Release connections (a later call may reconnect)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ asyncio forms

    async def aget_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return await asyncio.to_thread(self.get_many, keys)

    async def aset_many(self, entries: Sequence[Entry]) -> None:
        await asyncio.to_thread(self.set_many, entries)

    async def adelete_many(self, keys: Sequence[str]) -> int:
        return await asyncio.to_thread(self.delete_many, keys)

    async def aincr(self, key: str) -> int:
        return await asyncio.to_thread(self.incr, key)

    async def aclose(self) -> None:
        """Release the running loop's connections."""
        await asyncio.to_thread(self.close)

    # ------------------------------------------------------------------ optional abilities

    @property
    def target(self) -> str:
        """Where the tier points, for logs and health, with any password redacted."""
        return self.name

    def incr_from(self, key: str, floor: int, epoch: int, exhausted: int) -> int:
        """Add one to the counter ``key`` and return it, first raising it to at least ``floor``
        (a counter lost to eviction restarts above what the caller has seen); a malformed value
        restarts at ``max(floor + 1, epoch)`` and a result at or above ``exhausted`` is replaced
        by ``epoch``. Default: :meth:`incr`, none of that."""
        return self.incr(key)

    async def aincr_from(self, key: str, floor: int, epoch: int, exhausted: int) -> int:
        return await self.aincr(key)

    def raise_counter(self, key: str, floor: int) -> int | None:
        """Atomically raise the counter ``key`` to at least ``floor`` and return its value.
        Default: ``None``, the counter left as it is."""
        return None

    async def araise_counter(self, key: str, floor: int) -> int | None:
        return None

    def publish_invalidation(self, channel: str, payload: bytes) -> None:
        """Send ``payload`` (the keys one process deleted) to every follower of ``channel``.
        Default: nothing (see :attr:`publishes_invalidations`)."""

    async def apublish_invalidation(self, channel: str, payload: bytes) -> None:
        """The asyncio form of :meth:`publish_invalidation`."""

    def follow_invalidations(
        self,
        channel: str,
        on_message: Callable[[bytes], None],
        on_gap: Callable[[], None],
        on_subscribed: Callable[[], None] | None = None,
    ) -> Callable[[], None] | None:
        """Follow ``channel``: ``on_message`` gets each payload, ``on_gap`` runs when messages
        may have been lost, ``on_subscribed`` at each subscription. Returns the function that
        stops following, or ``None`` when not followed (the default)."""
        return None

    def semantic_store(self, base: str, log_maxlen: int = 100_000) -> SemanticStore | None:
        """A store through which semantic tiers share their entries, with its keys under
        ``base``; ``None`` (the default) when entries stay in their process."""
        return None

    def scan_keys(self, prefix: str, batch: int = 1000) -> Iterator[list[str]] | None:
        """Every key that starts with ``prefix``, in lists of about ``batch``, each key once;
        for admin listings and purges, never a request's path. ``None`` (the default) when the
        tier cannot list its keys."""
        return None


class PlainTier(SharedTier):
    """A :class:`SharedTier` over any object with the five required operations (the
    :class:`~cachekit._core.protocols.StorageTier` protocol), offering the defaults of everything
    else, and its asyncio methods when it has them."""

    def __init__(self, inner: StorageTier) -> None:
        self.inner = inner
        self.name = inner.name
        #: The inner tier's own asyncio methods, when it declares them (AsyncStorageTier).
        self.ainner = inner if isinstance(inner, AsyncStorageTier) else None

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return self.inner.get_many(keys)

    def set_many(self, entries: Sequence[Entry]) -> None:
        self.inner.set_many(entries)

    def delete_many(self, keys: Sequence[str]) -> int:
        return self.inner.delete_many(keys)

    def incr(self, key: str) -> int:
        return self.inner.incr(key)

    def close(self) -> None:
        self.inner.close()

    async def aget_many(self, keys: Sequence[str]) -> list[bytes | None]:
        if self.ainner is None:
            return await super().aget_many(keys)
        return await self.ainner.aget_many(keys)

    async def aset_many(self, entries: Sequence[Entry]) -> None:
        if self.ainner is None:
            return await super().aset_many(entries)
        return await self.ainner.aset_many(entries)

    async def adelete_many(self, keys: Sequence[str]) -> int:
        if self.ainner is None:
            return await super().adelete_many(keys)
        return await self.ainner.adelete_many(keys)

    async def aincr(self, key: str) -> int:
        if self.ainner is None:
            return await super().aincr(key)
        return await self.ainner.aincr(key)

    async def aclose(self) -> None:
        if self.ainner is None:
            return await super().aclose()
        return await self.ainner.aclose()

    def __repr__(self) -> str:
        return f"PlainTier({self.inner!r})"


def as_shared_tier(tier: SharedTier | StorageTier) -> SharedTier:
    """``tier`` as a :class:`SharedTier`: itself when it is one, else wrapped in
    :class:`PlainTier`. TypeError for an object without the required operations."""
    if isinstance(tier, SharedTier):
        return tier
    if not isinstance(tier, StorageTier):
        raise TypeError(
            f"l2 must be a SharedTier or have name, get_many, set_many, delete_many, incr and "
            f"close; got {type(tier).__name__}"
        )
    return PlainTier(tier)
