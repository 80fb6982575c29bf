"""Single-flight: concurrent work on one key runs once; the others share its outcome.

One mechanism for every caller: the engine's per-key misses (:meth:`SingleFlight.do` and
:meth:`SingleFlight.ado`) and the feature sets' batch loads, which claim many keys at once
(:meth:`SingleFlight.claim`) and wait on the flights of the keys others hold.

The leader's exception reaches every waiter and is not remembered: the next call after it tries
again. Threads share flights with threads, and asyncio tasks with tasks of the same event loop:
a future belongs to its loop, and a thread blocking on a task of its own loop would never wake.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any, TypeVar

__all__ = ["Flight", "SingleFlight"]

T = TypeVar("T")


class Flight:
    """Work in progress for one or more keys. The leader settles it once; waiters read it."""

    __slots__ = ("_event", "_future", "error", "outcome", "waiters")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.waiters = 0  # claims that found this flight holding one of their keys
        self.outcome: Any = None
        self.error: BaseException | None = None
        self._event = threading.Event() if loop is None else None
        self._future: asyncio.Future[Any] | None = (
            loop.create_future() if loop is not None else None
        )

    def settle(self, outcome: Any = None, error: BaseException | None = None) -> None:
        """Record the outcome (or the leader's exception) and wake every waiter."""
        self.outcome, self.error = outcome, error
        if self._event is not None:
            self._event.set()
            return
        fut = self._future
        assert fut is not None
        if isinstance(error, asyncio.CancelledError):
            fut.cancel()  # the leader was cancelled, not its waiters: they take over
        elif error is not None:
            fut.set_exception(error)
            fut.exception()  # retrieved: no "exception never retrieved" when none waits
        else:
            fut.set_result(outcome)

    def wait(self) -> Any:
        """Block until settled (thread flights); the outcome, or the leader's exception."""
        assert self._event is not None
        self._event.wait()
        if self.error is not None:
            raise self.error
        return self.outcome

    async def await_outcome(self) -> Any:
        """Await the outcome (asyncio flights). Raises CancelledError when the leader was
        cancelled; the caller can tell with :meth:`abandoned`."""
        assert self._future is not None
        return await asyncio.shield(self._future)

    def abandoned(self) -> bool:
        """Whether the leader gave up rather than failed: an asyncio leader cancelled before it
        settled anything, or a thread leader stopped by a BaseException that is not an error
        (KeyboardInterrupt, SystemExit, a cancellation). Its waiters take its keys over."""
        if self._future is not None:
            return self._future.cancelled()
        return self.error is not None and not isinstance(self.error, Exception)


class SingleFlight:
    """Claims of keys by flights. Thread-safe; asyncio claims are per event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Claims by scope (0: threads; id(loop): that loop's tasks), then key.
        self._scopes: dict[int, dict[Hashable, Flight]] = {}

    def claim(
        self, keys: Iterable[Hashable], loop: asyncio.AbstractEventLoop | None = None
    ) -> tuple[Flight, list[Hashable], dict[Hashable, Flight]]:
        """Claim for a new flight every key nobody is working on (``keys`` distinct). Returns
        the flight, the keys it holds (its caller must do their work, then :meth:`release`)
        and, for the other keys, the flight holding each."""
        scope = 0 if loop is None else id(loop)
        flight = Flight(loop)
        wanted = keys if isinstance(keys, list) else list(keys)
        with self._lock:
            held = self._scopes.get(scope)
            if held is None:
                held = self._scopes[scope] = {}
            if held.keys().isdisjoint(wanted):  # the common case, claimed in one C call
                held.update(dict.fromkeys(wanted, flight))
                return flight, wanted, {}
            return self._claim_each(held, flight, wanted)

    @staticmethod
    def _claim_each(
        held: dict[Hashable, Flight], flight: Flight, keys: list[Hashable]
    ) -> tuple[Flight, list[Hashable], dict[Hashable, Flight]]:
        mine: list[Hashable] = []
        others: dict[Hashable, Flight] = {}
        counted: set[int] = set()
        for key in keys:
            other = held.get(key)
            if other is None:
                held[key] = flight
                mine.append(key)
            else:
                if id(other) not in counted:
                    counted.add(id(other))
                    other.waiters += 1
                others[key] = other
        return flight, mine, others

    def waiting(self) -> int:
        """How many callers wait on flights in progress (for tests and introspection)."""
        with self._lock:
            flights = {id(f): f for held in self._scopes.values() for f in held.values()}
        return sum(f.waiters for f in flights.values())

    def release(
        self,
        flight: Flight,
        keys: Iterable[Hashable],
        outcome: Any = None,
        error: BaseException | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """Drop ``flight``'s claims on ``keys`` and settle it: later callers start afresh."""
        scope = 0 if loop is None else id(loop)
        with self._lock:
            held = self._scopes.get(scope)
            if held is not None:
                for key in keys:
                    if held.get(key) is flight:
                        del held[key]
                if not held:
                    del self._scopes[scope]
        flight.settle(outcome, error)

    def do(self, key: Hashable, fn: Callable[[], T]) -> tuple[T, bool]:
        """Run ``fn`` once per concurrent ``key`` among threads. Returns ``(result, shared)``;
        ``shared`` is true for callers that waited on another's call."""
        flight, mine, others = self.claim((key,))
        if not mine:
            return others[key].wait(), True
        try:
            result = fn()
        except BaseException as exc:
            self.release(flight, mine, error=exc)
            raise
        self.release(flight, mine, result)
        return result, False

    async def ado(self, key: Hashable, fn: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """The asyncio form of :meth:`do`, among the tasks of the running loop. A waiter whose
        leader was cancelled takes over the work."""
        loop = asyncio.get_running_loop()
        while True:
            flight, mine, others = self.claim((key,), loop)
            if mine:
                break
            other = others[key]
            try:
                return await other.await_outcome(), True
            except asyncio.CancelledError:
                if not other.abandoned():
                    raise
        try:
            result = await fn()
        except BaseException as exc:
            self.release(flight, mine, error=exc, loop=loop)
            raise
        self.release(flight, mine, result, loop=loop)
        return result, False
