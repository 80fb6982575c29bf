"""Single-flight: concurrent misses on one key run the work once; the others share its outcome."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class _Call:
    __slots__ = ("done", "error", "result", "waiters")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.waiters = 0


class SingleFlight:
    """Thread form. The leader's exception is raised in every waiter and is not remembered: the
    next call after it tries again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[Hashable, _Call] = {}

    def do(self, key: Hashable, fn: Callable[[], T]) -> tuple[T, bool]:
        """Run ``fn`` once per concurrent ``key``. Returns ``(result, shared)``; ``shared`` is
        true for callers that waited on another's call."""
        with self._lock:
            call = self._calls.get(key)
            leader = call is None
            if call is None:
                call = self._calls[key] = _Call()
            else:
                call.waiters += 1
        if not leader:
            call.done.wait()
            if call.error is not None:
                raise call.error
            return call.result, True
        try:
            call.result = fn()
        except BaseException as exc:
            call.error = exc
            raise
        finally:
            with self._lock:
                del self._calls[key]
            call.done.set()
        return call.result, False

    def in_flight(self, key: Hashable) -> bool:
        return key in self._calls


class AsyncSingleFlight:
    """asyncio form. Keyed per event loop, since a future belongs to the loop that made it."""

    def __init__(self) -> None:
        self._calls: dict[tuple[int, Hashable], asyncio.Future[Any]] = {}

    async def do(self, key: Hashable, fn: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        loop = asyncio.get_running_loop()
        k = (id(loop), key)
        while True:
            fut = self._calls.get(k)
            if fut is None:
                break
            try:
                return await asyncio.shield(fut), True
            except asyncio.CancelledError:
                if fut.cancelled():
                    continue  # the leader was cancelled, not us: take over its work
                raise
        fut = loop.create_future()
        self._calls[k] = fut
        try:
            result = await fn()
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except BaseException as exc:
            fut.set_exception(exc)
            # Mark retrieved so an unawaited failure does not warn "exception never retrieved".
            fut.exception()
            raise
        else:
            fut.set_result(result)
            return result, False
        finally:
            if self._calls.get(k) is fut:
                del self._calls[k]

    def in_flight(self, key: Hashable) -> bool:
        return any(k[1] == key for k in self._calls)
