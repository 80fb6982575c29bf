"""The shared tier behind its guard: every call timed, counted and behind a circuit breaker.

:class:`GuardedTier` is how the engine talks to a :class:`~cachekit.backends.base.SharedTier`.
An error or an open circuit costs :data:`~cachekit._core.types.FAILED` (a miss for the caller),
never an exception; the tier's health (reachable, the last failure's diagnosis, the breaker's state)
is kept from those calls and from an explicit check. It also answers the engine's sans-IO cores
(:func:`cachekit._core.sansio.drive`): each operation a core yields is the tier's method of that
name, looked up when called (so instrumentation can wrap it), and guarded: :attr:`GuardedTier.ops`.
"""

from __future__ import annotations

import logging
import operator
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from cachekit._core.health import Diagnosis, Health, diagnose
from cachekit._core.tracing import span
from cachekit._core.types import FAILED
from cachekit._engine.breaker import CircuitBreaker
from cachekit._engine.telemetry import TierCounters
from cachekit.backends.base import SharedTier

__all__ = ["NO_SHARED_TIER", "WARNING_INTERVAL_S", "GuardedTier"]

log = logging.getLogger("cachekit")

T = TypeVar("T")

#: The span around each call to the shared tier (its attribute: the operation's name).
REDIS_SPAN = "cachekit.redis"

#: Seconds between two "shared tier error" warnings: a dead Redis must not flood the logs.
WARNING_INTERVAL_S = 10.0

#: The health of a cache with no shared tier.
NO_SHARED_TIER = Health(
    shared_tier=False, target=None, reachable=None, last_error=None, breaker_state=None
)


class GuardedTier:
    """``tier`` behind a breaker of ``failures`` consecutive errors, retried after ``reset_s``;
    ``counters`` count its calls (hits and misses are counted by the callers that know them).
    ``probe_key`` is what :meth:`check` reads."""

    def __init__(
        self,
        tier: SharedTier,
        counters: TierCounters,
        *,
        failures: int,
        reset_s: float,
        probe_key: str,
    ) -> None:
        self.tier = tier
        self.counters = counters
        self.breaker = CircuitBreaker(failures, reset_s)
        self.probe_key = probe_key
        self._last_warning = 0.0
        # Written on failures and checks; the success path only reads _down, so a hit pays one
        # attribute test.
        self._reachable: bool | None = None
        self._down = False
        self._last_error: Diagnosis | None = None
        self._checker: threading.Thread | None = None
        #: The operations a sans-IO core may yield, by name, for
        #: :func:`cachekit._core.sansio.drive`: the tier's method of that name, guarded by
        #: :meth:`call`.
        self.ops = {name: self._guarded(m) for name, m in _SYNC_OPS.items()}
        #: The same for :func:`cachekit._core.sansio.adrive`: the ``a`` form, guarded by
        #: :meth:`acall`.
        self.aops = {name: self._aguarded(m) for name, m in _ASYNC_OPS.items()}

    # ------------------------------------------------------------------ driver operations

    def _guarded(self, method: Callable[[SharedTier], Callable[..., Any]]) -> Callable[..., Any]:
        def op(*args: Any) -> Any:
            return self.call(method(self.tier), *args)

        return op

    def _aguarded(
        self, method: Callable[[SharedTier], Callable[..., Awaitable[Any]]]
    ) -> Callable[..., Awaitable[Any]]:
        def op(*args: Any) -> Awaitable[Any]:
            return self.acall(method(self.tier), *args)

        return op

    # ------------------------------------------------------------------ guarded calls

    def call(self, op: Callable[..., T], *args: Any) -> T:
        """``op(*args)``: timed, counted and behind the breaker; an error or an open circuit
        returns :data:`~cachekit._core.types.FAILED`, never an exception."""
        if not self.breaker.allow():
            return self._skipped()
        t0 = time.perf_counter()
        with span(REDIS_SPAN) as traced:  # tracing (docs/tracing.md): a no-op unless enabled
            if traced.recording:
                traced.set_attribute("db.operation.name", getattr(op, "__name__", "call"))
            try:
                result = op(*args)
            except Exception as exc:
                traced.set_attribute("error.type", type(exc).__name__)
                self._failed(exc)
                return FAILED
        self._succeeded(t0)
        return result

    async def acall(self, op: Callable[..., Awaitable[T]], *args: Any) -> T:
        """The asyncio form of :meth:`call` (its rules are :meth:`_skipped`, :meth:`_failed`
        and :meth:`_succeeded`; only the call differs)."""
        if not self.breaker.allow():
            return self._skipped()
        t0 = time.perf_counter()
        with span(REDIS_SPAN) as traced:
            if traced.recording:
                traced.set_attribute("db.operation.name", getattr(op, "__name__", "call"))
            try:
                result = await op(*args)
            except Exception as exc:
                traced.set_attribute("error.type", type(exc).__name__)
                self._failed(exc)
                return FAILED
        self._succeeded(t0)
        return result

    def _skipped(self) -> Any:
        self.counters.skipped += 1
        return FAILED

    def _succeeded(self, t0: float) -> None:
        self.counters.latency.record(time.perf_counter() - t0)
        self.breaker.record_success()
        if self._down:
            self._record_up()

    def _failed(self, exc: BaseException) -> None:
        self.counters.errors += 1
        self.breaker.record_failure()
        diagnosis = self._record_down(exc)
        now = time.monotonic()
        if now - self._last_warning > WARNING_INTERVAL_S:
            self._last_warning = now
            log.warning(
                "shared tier %s failed (served as a miss): %s (%s). Fix: %s",
                self.tier.target,
                diagnosis.cause,
                diagnosis.detail,
                diagnosis.fix,
            )

    def _record_down(self, exc: BaseException) -> Diagnosis:
        diagnosis = diagnose(exc)
        self._last_error = diagnosis
        self._reachable = False
        self._down = True
        return diagnosis

    def _record_up(self) -> None:
        self._reachable = True
        self._down = False

    # ------------------------------------------------------------------ health

    def check(self) -> Health:
        """Read :attr:`probe_key` once, now (bounded by the tier's timeouts), record the outcome
        and return :meth:`health`. Never raises."""
        try:
            self.tier.get_many([self.probe_key])
        except Exception as exc:
            self._record_down(exc)
        else:
            self._record_up()
        return self.health()

    def start_check(self) -> None:
        """:meth:`check` once in a daemon thread, and log the outcome: the cause and the fix
        when it fails, since every later failure is only a miss. Once per tier."""
        if self._checker is not None:
            return
        self._checker = threading.Thread(
            target=self._check_and_log, name="cachekit-health", daemon=True
        )
        self._checker.start()

    def _check_and_log(self) -> None:
        health = self.check()
        err = health.last_error
        if health.reachable or err is None:
            log.info("shared tier %s reachable", health.target)
            return
        # This warning names the cause and the fix: the calls failing right after need not
        # say it again (one warning per WARNING_INTERVAL_S).
        self._last_warning = time.monotonic()
        log.warning(
            "shared tier %s unreachable: %s (%s). Serving from this process's memory only "
            "meanwhile. Fix: %s",
            health.target,
            err.cause,
            err.detail,
            err.fix,
        )

    def health(self) -> Health:
        """The tier's state, without touching it (see :class:`~cachekit._core.health.Health`)."""
        return Health(
            shared_tier=True,
            target=self.tier.target,
            reachable=self._reachable,
            last_error=self._last_error,
            breaker_state=self.breaker.state,
        )


#: The SharedTier operations a core may yield, by name: each is looked up on the tier when
#: called (a tier's methods may be wrapped after the engine was built: instrumentation, tests),
#: and the asyncio driver calls the ``a`` form.
_SYNC_OPS: dict[str, Callable[[SharedTier], Callable[..., Any]]] = {
    name: operator.attrgetter(name)
    for name in (
        "get_many",
        "set_many",
        "delete_many",
        "incr",
        "incr_from",
        "raise_counter",
        "publish_invalidation",
    )
}
_ASYNC_OPS: dict[str, Callable[[SharedTier], Callable[..., Awaitable[Any]]]] = {
    name: operator.attrgetter("a" + name) for name in _SYNC_OPS
}
