"""Identical misses across replicas that share a Redis: the first replica to ask the upstream
marks the call in the shared tier for at most ``wait`` seconds; another replica that misses the
same key while the mark stands polls the cache for the answer instead of asking too, and asks
on its own once the wait is over (a slow upstream costs a second call, never a long stall).

Best effort: two replicas missing within the same few milliseconds may both ask. The mark is a
cache entry (``llm:f:`` and the request's key) with a TTL, so a replica that dies mid-call
leaves nothing behind for longer than ``wait``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

from cachekit.cache import Cache
from cachekit.llm import CacheLookup, LLMRequest

__all__ = ["POLL_S", "ReplicaFlights"]

#: Seconds between two looks at the shared tier while another replica's call is under way.
POLL_S = 0.02


class ReplicaFlights:
    """Upstream calls under way on other replicas, through ``cache``'s shared tier."""

    def __init__(self, cache: Cache, wait: float) -> None:
        self.cache = cache
        self.wait = wait
        #: Only with a shared tier (a Redis) and a positive wait.
        self.enabled = cache.l2 is not None and wait > 0
        #: Requests waiting for another replica's answer now.
        self.waiting = 0

    @staticmethod
    def mark_of(req: LLMRequest) -> str:
        return "llm:f:" + req.key

    async def under_way(self, req: LLMRequest) -> bool:
        """Whether another replica (or this one) marked a call for ``req``'s key."""
        return await self.cache.aget(self.mark_of(req), count=False) is not None

    async def mark(self, req: LLMRequest) -> None:
        """Mark this replica's call for ``req``'s key, for at most :attr:`wait` seconds."""
        await self.cache.aset(self.mark_of(req), 1, ttl=self.wait)

    async def unmark(self, req: LLMRequest) -> None:
        await self.cache.adelete(self.mark_of(req))

    async def answered(
        self, req: LLMRequest, lookup: Coroutine[Any, Any, CacheLookup]
    ) -> CacheLookup | None:
        """What ``lookup`` finds once another replica fetching an identical request stored its
        answer (waiting at most :attr:`wait`), else ``None`` with this replica's call marked.
        ``lookup`` is awaited only when there is something to find (else closed)."""
        if await self.under_way(req) and await self.stored(req):
            found = await lookup
            if found.hit:
                return found
        else:
            lookup.close()
        await self.mark(req)
        return None

    async def stored(self, req: LLMRequest) -> bool:
        """Wait, at most :attr:`wait` seconds, for ``req``'s exact entry to be stored by the
        replica asking for it; whether it was (then a lookup finds it)."""
        deadline = time.monotonic() + self.wait
        self.waiting += 1
        try:
            while time.monotonic() < deadline:
                await asyncio.sleep(POLL_S)
                if await self.cache.aget(req.key, count=False) is not None:
                    return True
                if not await self.under_way(req):
                    return False  # the other call ended without an answer to share
            return False
        finally:
            self.waiting -= 1
