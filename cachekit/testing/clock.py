"""Test helpers for code that uses cachekit: a clock that moves only when told to, and a
poller with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable


class ManualClock:
    """A :class:`~cachekit._core.protocols.Clock` for deterministic TTL tests: ``advance(s)`` moves
    it."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time only moves forward")
        self.now += seconds


def wait_until(
    condition: Callable[[], bool], timeout: float = 10.0, interval: float = 0.005
) -> float:
    """Poll ``condition`` until it is true; return the seconds it took. Raises AssertionError
    after ``timeout``. For tests of background work (refreshes, Redis sync): a deadline instead
    of a sleep that hopes the work is done."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)
    return time.monotonic() - start
