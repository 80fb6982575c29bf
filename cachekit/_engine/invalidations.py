"""Per-key invalidation across processes: a delete here drops the key from other processes' L1.

A deleting process publishes the deleted shared-tier keys on the namespace's channel (where the
shared tier offers one: ``SharedTier.publishes_invalidations``); every other process with an L1
follows the channel and drops those keys. Keys travel as remote keys, and L1 holds entries under
local keys, so each process remembers which local key it holds each remote key under (filled on
the store and L2-fill paths only, bounded, oldest-written first out).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any
from uuid import uuid4

from cachekit._core.types import CacheKey
from cachekit.backends.base import SharedTier

__all__ = ["Invalidations"]

log = logging.getLogger("cachekit")


class Invalidations:
    """The invalidation channel of ``namespace`` for one process's ``l1`` (anything with
    ``delete(key)``, or ``None``) over ``l2`` (or ``None``). ``clear_l1`` runs when the channel
    was lost and resubscribed (what was published meanwhile is unknown)."""

    def __init__(
        self,
        l1: Any,
        l2: SharedTier | None,
        *,
        key_prefix: str,
        namespace: str,
        max_keys: int,
        clear_l1: Callable[[], None],
    ) -> None:
        self._l1 = l1
        self.origin = uuid4().hex
        self.channel = f"{key_prefix}:{namespace}:invalidations"
        # Read only when an invalidation arrives, so recency of writes is all an LRU would
        # track, and a plain ordered dict costs a tenth of an LRUCache per store.
        self._local_of: OrderedDict[str, Hashable] = OrderedDict()
        self._max_keys = max_keys
        self._lock = threading.Lock()
        #: Deletes here are published (the shared tier has a channel).
        self.publishes = l2 is not None and l2.publishes_invalidations
        #: This process follows other processes' deletes.
        self.follows = False
        self._following = threading.Event()
        #: Stops following (to run when the cache closes), or ``None``.
        self.stop: Callable[[], None] | None = None
        if l1 is not None and l2 is not None:
            self.stop = l2.follow_invalidations(
                self.channel, self.on_message, clear_l1, self._following.set
            )
            self.follows = self.stop is not None

    def remember(self, keys: Sequence[CacheKey]) -> None:
        """Remember which local key each remote key is held under in L1 (only when following,
        and only where the two differ)."""
        if not self.follows:
            return
        local_of = self._local_of
        with self._lock:
            for key in keys:
                if key.local != key.remote:
                    local_of[key.remote] = key.local
                    local_of.move_to_end(key.remote)
            while len(local_of) > self._max_keys:
                local_of.popitem(last=False)

    def message(self, remotes: list[str]) -> bytes:
        """What to publish after deleting ``remotes``."""
        return json.dumps({"o": self.origin, "k": remotes}).encode()

    def on_message(self, payload: bytes) -> None:
        """Drop from L1 the keys another process deleted. The payload came from the network:
        anything but ``{"o": str, "k": [str, ...]}`` is ignored."""
        try:
            msg = json.loads(payload)
            origin, remotes = msg["o"], msg["k"]
        except (ValueError, TypeError, KeyError):
            log.debug("malformed invalidation message ignored")
            return
        l1 = self._l1
        if origin == self.origin or l1 is None or not isinstance(remotes, list):
            return
        for remote in remotes:
            if not isinstance(remote, str):
                continue
            with self._lock:
                local = self._local_of.pop(remote, None)
            l1.delete(remote)
            if local is not None:
                l1.delete(local)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until this process follows the channel (subscribed in the background); False
        at once when there is none to follow (no shared tier offering one, or no L1)."""
        return self._following.wait(timeout) if self.follows else False
