"""In-process counters and latency histograms, with a Prometheus collector and a log pusher.

Recording is a handful of integer and float operations with no lock: under heavy thread
contention a rare increment can be lost, which is acceptable for telemetry and keeps the hit
path cheap. Snapshots are taken on demand (``Cache.stats()``, a Prometheus scrape).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import weakref
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from cachekit._core.extras import require

if TYPE_CHECKING:
    from cachekit.cache import Cache

__all__ = [
    "CacheStats",
    "LatencyHistogram",
    "LatencySummary",
    "PrometheusCollector",
    "StatsLogger",
    "TierSnapshot",
    "register_prometheus",
    "unregister_prometheus",
]

# Log-spaced bucket bounds from 100 ns to 1000 s, 20 per decade (each bucket 12% wide), with
# geometric interpolation inside a bucket: finer than run-to-run noise of latencies.
_BOUNDS: tuple[float, ...] = tuple(10 ** (-7 + i / 20) for i in range(0, 10 * 20 + 1))


class LatencyHistogram:
    __slots__ = ("count", "counts", "max", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(_BOUNDS) + 1)
        self.count = 0
        self.total = 0.0
        self.max = 0.0

    def record(self, seconds: float) -> None:
        self.counts[bisect_left(_BOUNDS, seconds)] += 1
        self.count += 1
        self.total += seconds
        if seconds > self.max:
            self.max = seconds

    def percentile(self, q: float) -> float | None:
        """Approximate ``q``-quantile (0..1) in seconds, or ``None`` with no samples."""
        n = self.count
        if n == 0:
            return None
        rank = q * n
        seen = 0
        for i, c in enumerate(self.counts):
            if c == 0:
                continue
            if seen + c >= rank:
                lo = _BOUNDS[i - 1] if i > 0 else 0.0
                hi = _BOUNDS[i] if i < len(_BOUNDS) else self.max
                hi = min(hi, self.max) if self.max > 0 else hi
                frac = (rank - seen) / c
                if lo <= 0:
                    return hi * frac
                # geometric interpolation inside a log-spaced bucket
                return float(lo * (max(hi, lo) / lo) ** frac)
            seen += c
        return self.max

    def summary(self) -> LatencySummary:
        def ms(v: float | None) -> float | None:
            return None if v is None else v * 1e3

        return LatencySummary(
            count=self.count,
            mean_ms=ms(self.total / self.count) if self.count else None,
            p50_ms=ms(self.percentile(0.50)),
            p95_ms=ms(self.percentile(0.95)),
            p99_ms=ms(self.percentile(0.99)),
            max_ms=ms(self.max) if self.count else None,
        )

    def buckets(self) -> Iterator[tuple[float, int]]:
        """Cumulative ``(upper_bound_seconds, count)`` pairs, Prometheus style."""
        acc = 0
        for bound, c in zip((*_BOUNDS, math.inf), self.counts, strict=True):
            acc += c
            yield bound, acc


@dataclass(frozen=True)
class LatencySummary:
    count: int
    mean_ms: float | None
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None


#: Weight of the newest sample in a decorated function's mean compute time (an exponentially
#: weighted moving average: recent calls count most, and one slow call moves it by a tenth).
COMPUTE_EWMA_WEIGHT = 0.1


class FunctionCounters:
    """Per decorated function: L1 hits served by its fast path, and its mean compute time.
    One increment on the hit path; :meth:`Telemetry.snapshot` folds them into the totals."""

    __slots__ = ("hits", "mean")

    def __init__(self) -> None:
        self.hits = 0
        self.mean = 0.0

    def add_compute(self, seconds: float) -> None:
        w = COMPUTE_EWMA_WEIGHT
        self.mean = seconds if self.mean == 0.0 else (1.0 - w) * self.mean + w * seconds


class TierCounters:
    """Live counters for one tier (``l1``, ``l2``, ``semantic``, ``compute``)."""

    __slots__ = ("errors", "hits", "latency", "misses", "skipped")

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0
        self.errors = 0
        self.skipped = 0  # calls not made because the circuit breaker was open
        self.latency = LatencyHistogram()

    def snapshot(self, extra_hits: int = 0) -> TierSnapshot:
        hits = self.hits + extra_hits
        looked = hits + self.misses
        return TierSnapshot(
            hits=hits,
            misses=self.misses,
            errors=self.errors,
            skipped=self.skipped,
            hit_rate=hits / looked if looked else 0.0,
            latency=self.latency.summary(),
        )


@dataclass(frozen=True)
class TierSnapshot:
    hits: int
    misses: int
    errors: int
    skipped: int
    hit_rate: float
    latency: LatencySummary


@dataclass(frozen=True)
class CacheStats:
    """A point-in-time copy of a cache's telemetry. ``to_dict()`` gives plain JSON-able data."""

    namespace: str
    hits: int
    misses: int
    stale_hits: int
    hit_rate: float
    calls_saved: int
    time_saved_s: float
    tiers: dict[str, TierSnapshot]
    compute: LatencySummary
    breaker_state: str | None
    extra: dict[str, Any] = field(default_factory=dict)
    #: ``f.lookup(...)`` calls (and how many found something): questions asked of the cache,
    #: not calls it served, so they are in none of the fields above.
    probes: int = 0
    probe_hits: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Telemetry:
    """The live counters behind :class:`CacheStats`."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.tiers: dict[str, TierCounters] = {}
        self.hits = 0
        self.misses = 0
        self.stale_hits = 0
        # Probes (``f.lookup(...)``): asked, not served; never in hits or the hit rate.
        self.probes = 0
        self.probe_hits = 0
        self.time_saved = 0.0
        self.compute = LatencyHistogram()
        self.refreshes = 0
        self.refresh_errors = 0
        self.singleflight_waits = 0
        self.serialization_errors = 0
        self.functions: list[FunctionCounters] = []
        # Sections contributed by higher layers (feature sets, the semantic tier): name -> fn.
        self.sections: dict[str, Callable[[], dict[str, Any]]] = {}

    def tier(self, name: str) -> TierCounters:
        counters = self.tiers.get(name)
        if counters is None:
            counters = self.tiers.setdefault(name, TierCounters())
        return counters

    def function(self) -> FunctionCounters:
        counters = FunctionCounters()
        self.functions.append(counters)
        return counters

    def snapshot(self, breaker_state: str | None) -> CacheStats:
        fast_hits = sum(f.hits for f in self.functions)
        fast_saved = sum(f.hits * f.mean for f in self.functions)
        hits = self.hits + fast_hits
        served = hits + self.stale_hits
        looked = served + self.misses
        extra: dict[str, Any] = {
            "refreshes": self.refreshes,
            "refresh_errors": self.refresh_errors,
            "singleflight_waits": self.singleflight_waits,
            "serialization_errors": self.serialization_errors,
        }
        for name, fn in list(self.sections.items()):
            extra[name] = fn()
        return CacheStats(
            namespace=self.namespace,
            hits=hits,
            misses=self.misses,
            stale_hits=self.stale_hits,
            hit_rate=served / looked if looked else 0.0,
            calls_saved=served + self.singleflight_waits,
            time_saved_s=self.time_saved + fast_saved,
            tiers={
                name: c.snapshot(fast_hits if name == "l1" else 0)
                for name, c in list(self.tiers.items())
            },
            compute=self.compute.summary(),
            breaker_state=breaker_state,
            extra=extra,
            probes=self.probes,
            probe_hits=self.probe_hits,
        )


class PrometheusCollector:
    """A ``prometheus_client`` collector that reads a cache's telemetry at scrape time, so the
    hit path pays nothing for it. Register with :func:`register_prometheus`."""

    def __init__(self, cache: Cache, telemetry: Telemetry, prefix: str = "cachekit") -> None:
        self.cache = cache
        self.telemetry = telemetry
        self.prefix = prefix

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        p = self.prefix
        tel = self.telemetry
        snap = self.cache.stats()
        ns = tel.namespace
        for what in ("hits", "misses", "errors", "skipped"):
            fam = CounterMetricFamily(
                f"{p}_tier_{what}", f"Lookups per tier: {what}", labels=["namespace", "tier"]
            )
            for name, tier in snap.tiers.items():
                fam.add_metric([ns, name], getattr(tier, what))
            yield fam
        lat = HistogramMetricFamily(
            f"{p}_tier_latency_seconds", "Latency of tier operations", labels=["namespace", "tier"]
        )
        for name, c in list(tel.tiers.items()):
            buckets = [(("+Inf" if math.isinf(b) else repr(b)), n) for b, n in c.latency.buckets()]
            lat.add_metric([ns, name], buckets, c.latency.total)
        yield lat
        totals = CounterMetricFamily(
            f"{p}_requests", "Cache requests by outcome", labels=["namespace", "outcome"]
        )
        totals.add_metric([ns, "hit"], snap.hits)
        totals.add_metric([ns, "stale_hit"], snap.stale_hits)
        totals.add_metric([ns, "miss"], snap.misses)
        yield totals
        probes = CounterMetricFamily(
            f"{p}_probes",
            "Lookups that only asked (f.lookup), not counted as requests",
            labels=["namespace"],
        )
        probes.add_metric([ns], snap.probes)
        yield probes
        saved = CounterMetricFamily(
            f"{p}_time_saved_seconds", "Estimated compute time saved by hits", labels=["namespace"]
        )
        saved.add_metric([ns], snap.time_saved_s)
        yield saved
        state = GaugeMetricFamily(
            f"{p}_breaker_open", "1 while the Redis circuit is open", labels=["namespace"]
        )
        state.add_metric([ns], 1.0 if snap.breaker_state == "open" else 0.0)
        yield state
        yield self._refusals(ns, snap.extra, CounterMetricFamily)

    def _refusals(self, ns: str, sections: dict[str, Any], family: Any) -> Any:
        """Semantic misses by why the nearest entry was not served, per semantic function."""
        fam = family(
            f"{self.prefix}_semantic_refusals",
            "Semantic misses by why the nearest entry was not served",
            labels=["namespace", "function", "reason"],
        )
        for name, section in sections.items():
            if name.startswith("semantic:") and isinstance(section, dict):
                for reason, n in sorted((section.get("refusals") or {}).items()):
                    fam.add_metric([ns, name.removeprefix("semantic:"), reason], n)
        return fam


#: The collectors registered by :func:`register_prometheus`, per registry, by (prefix, namespace):
#: the series of one namespace must come from one collector, or a scrape holds duplicates.
_REGISTERED: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], PrometheusCollector]] = (
    weakref.WeakKeyDictionary()
)
_REGISTER_LOCK = threading.Lock()


def register_prometheus(cache: Cache, registry: Any = None, prefix: str = "cachekit") -> Any:
    """Register a :class:`PrometheusCollector` for ``cache`` (default registry unless given).

    Registering the same cache again returns its collector and adds nothing. A second cache with
    the namespace of a registered one is refused with a ValueError: both would emit the same
    series, which Prometheus rejects. Give each cache its own namespace, or its own ``prefix``.
    """
    if registry is None:
        registry = require(
            "prometheus_client", extra="prometheus", feature="register_prometheus"
        ).REGISTRY
    else:
        require("prometheus_client", extra="prometheus", feature="register_prometheus")
    key = (prefix, cache.namespace)
    with _REGISTER_LOCK:
        known = _REGISTERED.setdefault(registry, {})
        existing = known.get(key)
        if existing is not None:
            if existing.cache is cache:
                return existing
            raise ValueError(
                f"register_prometheus: a cache with namespace {cache.namespace!r} is already "
                f"registered with prefix {prefix!r}; their series would be identical. Give each "
                "cache its own namespace (Cache(namespace=...)) or prefix, or "
                "unregister_prometheus() the first"
            )
        collector = cache.prometheus_collector(prefix)
        registry.register(collector)
        known[key] = collector
    return collector


def unregister_prometheus(collector: PrometheusCollector, registry: Any = None) -> None:
    """Undo :func:`register_prometheus` (default registry unless given)."""
    if registry is None:
        registry = require(
            "prometheus_client", extra="prometheus", feature="unregister_prometheus"
        ).REGISTRY
    with _REGISTER_LOCK:
        known = _REGISTERED.get(registry, {})
        key = (collector.prefix, collector.cache.namespace)
        if known.get(key) is collector:
            del known[key]
    registry.unregister(collector)


class StatsLogger:
    """Pushes ``cache.stats().to_dict()`` as one JSON log line every ``interval`` seconds from a
    daemon thread. ``stop()`` ends it; it is also a context manager."""

    def __init__(
        self,
        cache: Cache,
        interval: float = 60.0,
        logger: logging.Logger | None = None,
        level: int = logging.INFO,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.cache = cache
        self.interval = interval
        self.logger = logger or logging.getLogger("cachekit.stats")
        self.level = level
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def log_once(self) -> None:
        self.logger.log(
            self.level, "cachekit stats %s", json.dumps(self.cache.stats().to_dict(), default=str)
        )

    def start(self) -> StatsLogger:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="cachekit-stats", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.log_once()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> StatsLogger:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
