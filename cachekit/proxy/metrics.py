"""The proxy's Prometheus metrics (one registry per app).

Besides hits, misses and latencies, the capacity view: upstream requests in flight now, and
its time average since start. By Little's law (L = lambda W) the average is the request rate to
the upstream times the mean upstream latency: the concurrency that the provider's rate limits
and a self-hosted model's batch size are about.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["OTHER", "InFlight", "LabelFolder", "ProxyMetrics"]

_HIT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
_UPSTREAM_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)
#: Cosine similarity of a miss's nearest entry: the band just under a threshold, in 0.05 steps.
_SIMILARITY_BUCKETS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)


class InFlight:
    """Upstream requests in flight now, and the time average of that count since start (the
    integral of the count over time divided by the time)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start = self._last = clock()
        self._area = 0.0
        self.now = 0

    def _advance(self) -> None:
        t = self._clock()
        self._area += self.now * (t - self._last)
        self._last = t

    def enter(self) -> None:
        self._advance()
        self.now += 1

    def leave(self) -> None:
        self._advance()
        self.now -= 1

    def average(self) -> float:
        # Read-only (a scrape may run on another thread than enter/leave): no _advance here.
        t, now = self._clock(), self.now
        area = self._area + now * (t - self._last)
        elapsed = t - self._start
        return area / elapsed if elapsed > 0 else float(now)


class LabelFolder:
    """Bounded label values: the first ``limit`` distinct values are kept as they are, every
    later one is counted as :data:`OTHER`. Memory and series stay bounded whatever an upstream
    or a client sends (model names are echoed from the upstream's answers)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self._known: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self._known:
            return value
        if len(self._known) >= self.limit:
            return OTHER
        self._known.add(value)
        return value


#: The label value that label values past a :class:`LabelFolder`'s limit are counted under.
OTHER = "other"


class _InFlightCollector(Collector):
    def __init__(self, inflight: InFlight) -> None:
        self._inflight = inflight

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "cachekit_proxy_upstream_in_flight",
            "Upstream requests in flight now.",
            value=self._inflight.now,
        )
        yield GaugeMetricFamily(
            "cachekit_proxy_upstream_in_flight_avg",
            "Time average of upstream requests in flight since start (Little's law L).",
            value=self._inflight.average(),
        )


class ProxyMetrics:
    """Counters and histograms of one proxy process; :meth:`render` gives the exposition text.

    ``max_models``: distinct model names labelled as they are (later ones count as ``other``);
    ``max_reasons``: the same for the reasons of refusals and of answers not stored."""

    def __init__(self, max_models: int = 64, max_reasons: int = 32) -> None:
        self.model_label = LabelFolder(max_models)
        self.reason_label = LabelFolder(max_reasons)
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "cachekit_proxy_requests",
            "Requests to cached endpoints by cache outcome.",
            ["endpoint", "cache"],
            registry=r,
        )
        self.passthrough = Counter(
            "cachekit_proxy_passthrough_requests", "Requests passed through uncached.", registry=r
        )
        self.errors = Counter(
            "cachekit_proxy_errors",
            "Requests answered with an error by the proxy itself.",
            ["reason"],
            registry=r,
        )
        self.refusals = Counter(
            "cachekit_proxy_semantic_refusals",
            "Misses with a near entry, by why it was not served (numbers, negation, opposites, "
            "names, identifiers, order, code, preamble, truncated, threshold, demoted, policy).",
            ["reason"],
            registry=r,
        )
        self.stored = Counter("cachekit_proxy_stored", "Upstream answers stored.", registry=r)
        self.not_stored = Counter(
            "cachekit_proxy_not_stored",
            "Upstream answers not stored, by reason.",
            ["reason"],
            registry=r,
        )
        self.hit_latency = Histogram(
            "cachekit_proxy_hit_latency_seconds",
            "Time to answer a cache hit.",
            ["kind"],
            buckets=_HIT_BUCKETS,
            registry=r,
        )
        self.upstream_latency = Histogram(
            "cachekit_proxy_upstream_latency_seconds",
            "Upstream call time (to the last byte of the answer).",
            ["endpoint"],
            buckets=_UPSTREAM_BUCKETS,
            registry=r,
        )
        self.tokens_saved = Counter(
            "cachekit_proxy_tokens_saved",
            "Tokens not requested from the upstream thanks to hits.",
            ["model", "type"],
            registry=r,
        )
        self.dollars_saved = Counter(
            "cachekit_proxy_dollars_saved",
            "List-price dollars not spent thanks to hits.",
            ["model"],
            registry=r,
        )
        self.unpriced_hits = Counter(
            "cachekit_proxy_unpriced_hits",
            "Hits whose model or usage has no known price.",
            ["model"],
            registry=r,
        )
        self.feedback = Counter(
            "cachekit_proxy_feedback",
            "Verdicts reported on semantic hits (POST /v1/cachekit/feedback), by verdict and by "
            "whether the cache still knew the hit.",
            ["verdict", "recorded"],
            registry=r,
        )
        self.miss_similarity = Histogram(
            "cachekit_proxy_miss_nearest_similarity",
            "Cosine similarity of the nearest entry of a semantic miss that had one (how close "
            "misses come to a threshold; at or below 0.5 counted in the first bucket).",
            buckets=_SIMILARITY_BUCKETS,
            registry=r,
        )
        self.model_requests = Counter(
            "cachekit_proxy_model_requests",
            "Requests to cached endpoints by the model the request names, and cache outcome.",
            ["model", "cache"],
            registry=r,
        )
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.inflight = InFlight()
        r.register(_InFlightCollector(self.inflight))

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, remembered: resolving labels costs more than counting."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            if len(self._children) > 10_000:  # unbounded model names must not grow memory
                self._children.clear()
            found = self._children[key] = metric.labels(*labels)
        return found

    def saved(self, model: str, counts: tuple[int, int] | None, dollars: float | None) -> None:
        """A hit saved ``counts``, its ``(input, output)`` tokens as its endpoint reads its usage
        (``None``: unknown), and ``dollars`` (``None``: unpriced)."""
        model = self.model_label(model)
        for n, label in zip(counts or (), ("prompt", "completion"), strict=False):
            if n > 0:
                self.child(self.tokens_saved, model, label).inc(n)
        if dollars is None:
            self.child(self.unpriced_hits, model).inc()
        else:
            self.child(self.dollars_saved, model).inc(dollars)

    def nearest(self, similarity: float | None) -> None:
        """A miss whose nearest entry had ``similarity`` (``None``: no entry was near, nothing
        counted)."""
        if similarity is not None:
            self.miss_similarity.observe(similarity)

    def by_model(self, model: str, cache: str) -> None:
        """A request for ``model`` (as the request names it) answered with outcome ``cache``
        (``HIT``, ``SEMANTIC_HIT``, ``MISS`` ...: what ``x-cachekit-cache`` says)."""
        self.child(self.model_requests, self.model_label(model[:80]), cache).inc()

    def refused(self, reason: str) -> None:
        self.child(self.refusals, self.reason_label(reason)).inc()

    def not_kept(self, reason: str) -> None:
        self.child(self.not_stored, self.reason_label(reason)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
