"""A circuit breaker for the shared tiers: after repeated failures stop calling, probe later."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


class CircuitBreaker:
    """Closed: calls go through. ``failure_threshold`` consecutive failures open it: calls are
    refused (a miss, at no cost) for ``reset_timeout`` seconds. Then one probe call is let
    through (half-open): success closes the circuit, failure opens it again."""

    def __init__(
        self,
        failure_threshold: int = 5,
        reset_timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failure_threshold < 1 or reset_timeout < 0:
            raise ValueError("failure_threshold must be >= 1 and reset_timeout >= 0")
        self.failure_threshold = failure_threshold
        self.reset_timeout = reset_timeout
        self.clock = clock
        self._state = CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probe_in_flight = False
        self._lock = threading.Lock()
        self.opened_count = 0

    @property
    def state(self) -> str:
        return self._state

    def allow(self) -> bool:
        if self._state == CLOSED:  # the hot path takes no lock
            return True
        with self._lock:
            if self._state == OPEN and self.clock() - self._opened_at >= self.reset_timeout:
                self._state = HALF_OPEN
                self._probe_in_flight = False
            if self._state == HALF_OPEN and not self._probe_in_flight:
                self._probe_in_flight = True
                return True
            return self._state == CLOSED

    def record_success(self) -> None:
        if self._state == CLOSED and self._failures == 0:
            return
        with self._lock:
            self._state = CLOSED
            self._failures = 0
            self._probe_in_flight = False

    def record_failure(self) -> None:
        with self._lock:
            self._failures += 1
            if self._state == HALF_OPEN or self._failures >= self.failure_threshold:
                if self._state != OPEN:
                    self.opened_count += 1
                self._state = OPEN
                self._opened_at = self.clock()
                self._probe_in_flight = False
