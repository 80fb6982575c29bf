"""Fair use of the upstream: how many upstream calls one caller may hold at once, and the release
of everything an upstream call holds, once, on every exit path.

A caller is its credential (a hash of the API key it sends) or, without one, its address. A
caller past ``per_caller`` concurrent upstream calls is answered 429 with ``Retry-After`` at once
(:data:`RETRY_AFTER_S`), so one client cannot hold the connection pool that every tenant's misses
share. Behind a load balancer every keyless caller has the balancer's address: give clients keys,
or raise the bound.
"""

from __future__ import annotations

import hashlib

from cachekit.proxy.metrics import InFlight

__all__ = ["RETRY_AFTER_S", "CallerLimits", "UpstreamCall", "caller_id"]

#: Seconds a caller over its bound is told to wait (``Retry-After``).
RETRY_AFTER_S = 1


def caller_id(api_key: str | None, address: str | None) -> str:
    """Who holds upstream calls: ``key:<hash>`` for a caller with a credential (the key itself is
    never held), ``addr:<host>`` for a keyless one."""
    if api_key is not None:
        return "key:" + hashlib.blake2b(api_key.encode(), digest_size=16).hexdigest()
    return f"addr:{address or 'unknown'}"


class UpstreamCall:
    """One caller's hold on the upstream: its place under the caller's bound and, once
    :meth:`sent`, a count in the in-flight gauge. :meth:`release` gives both back, once however
    often it is called, so every exit path may call it."""

    __slots__ = ("_caller", "_in_flight", "_limits", "_released")

    def __init__(self, limits: CallerLimits, caller: str) -> None:
        self._limits = limits
        self._caller = caller
        self._in_flight = False
        self._released = False

    def sent(self) -> None:
        """The request is going upstream now: counted in flight until released."""
        if not self._in_flight and not self._released:
            self._in_flight = True
            self._limits.inflight.enter()

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        if self._in_flight:
            self._limits.inflight.leave()
        self._limits.give_back(self._caller)


class CallerLimits:
    """Concurrent upstream calls per caller, at most ``per_caller`` each (``0``: no bound).
    Memory: one entry per caller holding a call now, dropped when its last call ends."""

    def __init__(self, per_caller: int, inflight: InFlight) -> None:
        if per_caller < 0:
            raise ValueError(f"per_caller must be >= 0, got {per_caller}")
        self.per_caller = per_caller
        self.inflight = inflight
        self._held: dict[str, int] = {}

    def acquire(self, caller: str) -> UpstreamCall | None:
        """A hold for ``caller``, or ``None`` when it holds ``per_caller`` calls already."""
        n = self._held.get(caller, 0)
        if self.per_caller and n >= self.per_caller:
            return None
        self._held[caller] = n + 1
        return UpstreamCall(self, caller)

    def give_back(self, caller: str) -> None:
        n = self._held.get(caller, 0) - 1
        if n > 0:
            self._held[caller] = n
        else:
            self._held.pop(caller, None)

    def holding(self, caller: str) -> int:
        """Calls ``caller`` holds now."""
        return self._held.get(caller, 0)

    @property
    def callers(self) -> int:
        """Callers holding at least one call now."""
        return len(self._held)
