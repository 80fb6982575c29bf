"""Test doubles for code that uses cachekit: a clock that moves only when told to."""

from __future__ import annotations


class ManualClock:
    """A :class:`~cachekit.protocols.Clock` for deterministic TTL tests: ``advance(s)`` moves it."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time only moves forward")
        self.now += seconds
