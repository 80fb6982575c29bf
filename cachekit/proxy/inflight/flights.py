"""One upstream call for identical concurrent misses: a :class:`Flight` is one call's answer,
which every identical request of one tenant arriving while it is under way shares.

* A whole answer is published once (:meth:`Flight.publish`): a later caller gets the same
  status, headers and body.
* A streamed answer is read from the upstream by one task (the pump, the proxy's) that
  :meth:`Flight.add`\\ s each relayed piece; every caller is a :class:`Subscriber` reading the
  pieces from the first one on (a later caller joins the stream from its start) at its own pace.
  The pump does not stop when the first caller leaves: it stops when the last one has
  (:attr:`Flight.on_abandoned`), as a lone client's hang-up always stopped its upstream call.
* Memory is bounded by ``max_bytes`` (the proxy's ``max_answer_bytes``): the pieces are kept
  from the start until they pass it, then no new caller may join (:meth:`Flight.joinable`) and
  pieces every subscriber has read are dropped; the pump waits while the slowest subscriber is
  more than ``max_bytes`` behind, so the upstream is read no faster than the clients take it.

:class:`Flights` maps a request's key to its flight while the call is under way. Pure asyncio;
no HTTP here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from typing import Any

__all__ = ["BrokenStream", "Flight", "Flights", "Subscriber"]


class BrokenStream(ConnectionError):
    """Raised into a client's stream when the upstream's broke off: the client's breaks too."""


class Flight:
    """One upstream call's answer, shared."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        #: Set once the status and headers are known (or the call failed: :attr:`failed`).
        self.ready = asyncio.Event()
        self.status = 0
        self.headers: dict[str, str] = {}
        #: A whole answer's body (``None`` for a stream).
        self.body: bytes | None = None
        #: The call ended without an answer to share: a later caller asks on its own.
        self.failed = False
        self.done = False
        #: The upstream broke off mid-stream.
        self.broken = False
        #: The task reading a stream (the pump): cancelled, and waited for, when every
        #: subscriber of the unfinished stream has left.
        self.task: asyncio.Task[Any] | None = None
        #: What releases the upstream call: awaited once the abandoned pump has ended (a task
        #: cancelled before it started never runs its own ``finally``).
        self.release: Callable[[], Awaitable[None]] | None = None
        #: Called once when the flight takes no more callers (set by :class:`Flights`).
        self.on_landed: Callable[[], None] | None = None
        self._pieces: list[bytes] = []
        self._first = 0  # the index of _pieces[0] among every piece added
        self._bytes = 0  # bytes added in all
        self._dropped = 0  # bytes of the pieces dropped from the front
        self._subscribers: set[Subscriber] = set()
        #: Callers waiting for the answer's status (a whole answer's body).
        self.waiting = 0
        self._then: list[Callable[[], object]] = []
        self._wake = asyncio.Event()

    # ------------------------------------------------------------------ the first caller's side

    def publish(self, status: int, headers: dict[str, str], body: bytes | None) -> None:
        """The answer's status and headers, and its body when it is whole."""
        self.status, self.headers, self.body = status, headers, body
        self.done = body is not None
        self.ready.set()

    def fail(self) -> None:
        """No answer will come: callers waiting ask on their own."""
        if not self.ready.is_set():
            self.failed = True
            self.done = True
            self.ready.set()
        self.land()

    def land(self) -> None:
        """Take no more callers (the answer is stored, or never will be)."""
        landed, self.on_landed = self.on_landed, None
        if landed is not None:
            landed()
        for then in self._then:
            then()
        self._then.clear()

    def then(self, fn: Callable[[], object]) -> None:
        """Call ``fn`` too once the flight has landed."""
        self._then.append(fn)

    async def add(self, piece: bytes) -> None:
        """One relayed piece of a stream; returns once the slowest subscriber is at most
        ``max_bytes`` behind (the upstream is read no faster than the clients take it)."""
        self._pieces.append(piece)
        self._bytes += len(piece)
        self._trim()
        self._notify()
        while self._subscribers and self._bytes - self._slowest() > self.max_bytes:
            await self._wake.wait()

    def end(self, broken: bool = False) -> None:
        """The stream ended (complete or not): subscribers read what is left, then stop, with
        :class:`BrokenStream` when the upstream broke off (their connection breaks too)."""
        self.broken = broken
        self.done = True
        self._notify()
        self.land()

    # ------------------------------------------------------------------ the callers' side

    @property
    def readers(self) -> int:
        """Callers reading the stream now."""
        return len(self._subscribers)

    def joinable(self) -> bool:
        """Whether a new caller can still read the answer from its start."""
        if self.failed:
            return False
        return self.body is not None or (not self.done and self._dropped == 0)

    def subscribe(self) -> Subscriber:
        sub = Subscriber(self)
        self._subscribers.add(sub)
        return sub

    def leave(self, sub: Subscriber) -> asyncio.Task[Any] | None:
        """``sub`` stops reading; the pump's task, cancelled, when it was the last of an
        unfinished stream (its leaver waits for it: the upstream is released by then)."""
        self._subscribers.discard(sub)
        self._trim()
        task = self.task
        if self._subscribers or self.done or task is None:
            return None
        self.task = None
        task.cancel()
        return task

    def _notify(self) -> None:
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    def _slowest(self) -> int:
        return min(s.offset for s in self._subscribers)

    def _trim(self) -> None:
        """Past ``max_bytes`` (no caller joins any more): drop the pieces every subscriber has
        read."""
        if self._bytes <= self.max_bytes:
            return
        low = min((s.index for s in self._subscribers), default=self._first + len(self._pieces))
        while self._first < low and self._pieces:
            self._dropped += len(self._pieces.pop(0))
            self._first += 1

    async def pieces(self, sub: Subscriber) -> AsyncIterator[bytes]:
        """The stream for ``sub``: every piece from the first, then each as it comes."""
        while True:
            at = sub.index - self._first
            if at < len(self._pieces):
                piece = self._pieces[at]
                sub.index += 1
                sub.offset += len(piece)
                if self._bytes > self.max_bytes:
                    self._trim()
                    self._notify()  # a pump waiting for room may go on
                yield piece
            elif self.done:
                if self.broken:
                    raise BrokenStream("the upstream broke off mid-stream")
                return
            else:
                await self._wake.wait()


class Subscriber:
    """One caller reading a streamed :class:`Flight`."""

    def __init__(self, flight: Flight) -> None:
        self.flight = flight
        self.index = 0  # the next piece to read, counted among every piece added
        self.offset = 0  # bytes read
        self._left = False

    def stream(self) -> AsyncIterator[bytes]:
        return self.flight.pieces(self)

    async def leave(self) -> None:
        """Stop reading (however the response ended); idempotent."""
        if not self._left:
            self._left = True
            task = self.flight.leave(self)
            if task is not None:
                await asyncio.wait({task})
                if self.flight.release is not None:
                    await self.flight.release()


class Flights:
    """The flights under way, by request key."""

    def __init__(self) -> None:
        self._under_way: dict[Hashable, Flight] = {}

    def __len__(self) -> int:
        return len(self._under_way)

    def under_way(self) -> list[Flight]:
        return list(self._under_way.values())

    def joinable(self, key: Hashable) -> Flight | None:
        """The flight a request with ``key`` may share, else ``None``."""
        flight = self._under_way.get(key)
        return flight if flight is not None and flight.joinable() else None

    def start(self, key: Hashable | None, max_bytes: int) -> Flight:
        """A new flight, under ``key`` until it lands (``None``: one no other caller shares)."""
        flight = Flight(max_bytes)
        if key is not None:
            self._under_way[key] = flight
            flight.on_landed = lambda: self._landed(key, flight)
        return flight

    def _landed(self, key: Hashable, flight: Flight) -> None:
        if self._under_way.get(key) is flight:
            del self._under_way[key]
