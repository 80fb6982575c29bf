"""The capacity view of a replay: Little's law and M/M/c queueing, with and without the cache.

Upstream calls arrive at ``lambda`` per second and take ``W`` seconds on average, so on average
``L = lambda * W`` are in flight (Little's law). With ``c`` upstream slots (the concurrency the
deployment provisions: rate-limit slots, GPU replicas times batch) the utilisation is
``rho = L / c`` and, treating the upstream as an M/M/c queue, a call waits before it is served
with probability ``C(c, L)`` (Erlang C) and then for an exponential time of rate
``(c - L) / W``. A cache lowers ``lambda`` to the miss rate, which is why its effect on latency
is out of proportion to its hit rate near the knee.

End-to-end latency of a request is modelled as: a hit takes the cache's measured time; a miss
takes the cache's measured time plus the logged upstream latency plus the queueing wait; the
percentiles are those of that mixture, computed exactly from the samples (no simulation).

The knee: the smallest concurrency at which queueing adds at most :data:`KNEE_SLACK` to the p99
of upstream calls. ``concurrency_needed`` is that number for the traffic; ``headroom_x`` is how
many times the traffic could grow before a given concurrency passes its knee.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "KNEE_SLACK",
    "Capacity",
    "Side",
    "capacity_report",
    "erlang_c",
    "latency_quantile",
    "rate_from_timestamps",
]

#: Queueing may add this fraction to the p99 of upstream calls at the knee.
KNEE_SLACK = 0.10
_MAX_CONCURRENCY = 1_000_000
_BISECT_STEPS = 80


def erlang_c(c: int, load: float) -> float:
    """Probability that a call waits in an M/M/c queue with offered ``load`` (Erlangs,
    ``lambda * W``); 1.0 when the queue is saturated (``load >= c``)."""
    if c < 1:
        raise ValueError(f"c must be >= 1, got {c}")
    if load <= 0.0:
        return 0.0
    if load >= c:
        return 1.0
    # Erlang B by its recurrence (stable for any c), then C from B.
    b = 1.0
    for k in range(1, c + 1):
        b = load * b / (k + load * b)
    rho = load / c
    return b / (1.0 - rho * (1.0 - b))


def rate_from_timestamps(stamps: Sequence[float | None]) -> float | None:
    """Requests per second over the span of the timestamps, or None if they cannot say."""
    known = [s for s in stamps if s is not None]
    if len(known) < 2:
        return None
    span = max(known) - min(known)
    return (len(known) - 1) / span if span > 0 else None


@dataclass(frozen=True)
class _Queue:
    wait_probability: float  # C(c, L)
    wait_rate: float  # 1/s, the exponential tail of the wait; inf when there is no queueing


def _queue(load: float, mean_service: float, c: int | None) -> _Queue | None:
    """None when saturated; no wait when the concurrency is unlimited."""
    if c is None or load <= 0.0 or mean_service <= 0.0:
        return _Queue(0.0, math.inf)
    if load >= c:
        return None
    return _Queue(erlang_c(c, load), (c - load) / mean_service)


def latency_quantile(q: float, hit_s: np.ndarray, miss_base_s: np.ndarray, queue: _Queue) -> float:
    """The ``q`` quantile of a mixture: hits take ``hit_s``; misses take ``miss_base_s`` (their
    fixed part) plus a wait that is 0 with probability ``1 - C`` and else exponential."""
    n = hit_s.size + miss_base_s.size
    if n == 0:
        return math.nan
    cw, theta = queue.wait_probability, queue.wait_rate

    def cdf(t: float) -> float:
        below = float(np.count_nonzero(hit_s <= t))
        x = t - miss_base_s[miss_base_s <= t]
        if cw > 0.0:
            below += float(np.sum(1.0 - cw * np.exp(-theta * x)))
        else:
            below += float(x.size)
        return below / n

    lo = 0.0
    hi = max(float(hit_s.max(initial=0.0)), float(miss_base_s.max(initial=0.0)))
    if cw > 0.0:
        # Past every fixed part, the wait alone must leave at most 1 - q above: e^(-theta x)
        # C <= 1 - q. When C < 1 - q the log is negative and the fixed parts bound it already.
        hi += max(0.0, math.log(cw / max(1.0 - q, 1e-12))) / theta + 1.0
    for _ in range(_BISECT_STEPS):
        mid = (lo + hi) / 2.0
        if cdf(mid) >= q:
            hi = mid
        else:
            lo = mid
    return hi


def _upstream_p99(service_s: np.ndarray, queue: _Queue) -> float:
    return latency_quantile(0.99, np.empty(0), service_s, queue)


def _meets_knee(service_s: np.ndarray, load: float, c: int, bare_p99: float) -> bool:
    mean = float(service_s.mean())
    q = _queue(load, mean, c)
    return q is not None and _upstream_p99(service_s, q) <= bare_p99 * (1.0 + KNEE_SLACK)


def concurrency_needed(service_s: np.ndarray, load: float) -> int | None:
    """The smallest ``c`` at the knee for this offered load (binary search; the criterion is
    monotone in ``c``)."""
    if service_s.size == 0 or load <= 0.0:
        return 0 if service_s.size else None
    bare = _upstream_p99(service_s, _Queue(0.0, math.inf))
    lo, hi = max(1, math.floor(load)), max(2, math.ceil(load) * 2)
    while not _meets_knee(service_s, load, hi, bare):
        lo, hi = hi, hi * 2
        if hi > _MAX_CONCURRENCY:
            return None
    while lo < hi:
        mid = (lo + hi) // 2
        if _meets_knee(service_s, load, mid, bare):
            hi = mid
        else:
            lo = mid + 1
    return lo


def headroom(service_s: np.ndarray, load: float, c: int) -> float | None:
    """How many times the offered load can grow before ``c`` passes its knee (below 1: it
    already has)."""
    if service_s.size == 0 or load <= 0.0:
        return None
    bare = _upstream_p99(service_s, _Queue(0.0, math.inf))
    lo, hi = 0.0, c / load  # beyond c/load the queue is saturated
    for _ in range(50):
        mid = (lo + hi) / 2.0
        if _meets_knee(service_s, load * mid, c, bare):
            lo = mid
        else:
            hi = mid
    return lo


@dataclass
class Side:
    """One side of the comparison: all requests go upstream, or only the misses do."""

    upstream_rps: float | None
    mean_upstream_latency_s: float | None
    in_flight: float | None  # L = lambda * W
    utilisation: float | None
    saturated: bool
    latency_ms: dict[str, float | None]
    concurrency_needed: int | None
    headroom_x: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "upstream_rps": self.upstream_rps,
            "mean_upstream_latency_s": self.mean_upstream_latency_s,
            "in_flight": self.in_flight,
            "utilisation": self.utilisation,
            "saturated": self.saturated,
            "latency_ms": self.latency_ms,
            "concurrency_needed": self.concurrency_needed,
            "headroom_x": self.headroom_x,
        }


@dataclass
class Capacity:
    rate_rps: float | None
    rate_source: str | None  # "timestamps", "--rate" or None
    upstream_concurrency: int | None
    without_cache: Side
    with_cache: Side
    concurrency_saved: float | None  # 1 - needed_with / needed_without
    #: ``(traffic multiplier, p99 ms without, p99 ms with)``; None where saturated. For plots.
    curve: list[tuple[float, float | None, float | None]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate_rps": self.rate_rps,
            "rate_source": self.rate_source,
            "upstream_concurrency": self.upstream_concurrency,
            "knee_slack": KNEE_SLACK,
            "without_cache": self.without_cache.to_dict(),
            "with_cache": self.with_cache.to_dict(),
            "concurrency_saved": self.concurrency_saved,
        }


def _side(
    rate: float | None,
    share: float,
    service_s: np.ndarray,
    hit_s: np.ndarray,
    miss_overhead_s: np.ndarray,
    c: int | None,
) -> Side:
    """``share`` of the traffic goes upstream, taking ``service_s``; hits take ``hit_s``."""
    mean = float(service_s.mean()) if service_s.size else None
    up_rate = rate * share if rate is not None else None
    load = up_rate * mean if up_rate is not None and mean is not None else None
    queue: _Queue | None = _Queue(0.0, math.inf)
    if load is not None and mean is not None:
        queue = _queue(load, mean, c)
    latency: dict[str, float | None] = {"p50": None, "p99": None}
    if queue is not None and (service_s.size or hit_s.size):
        base = service_s + miss_overhead_s
        latency = {
            p: latency_quantile(q, hit_s, base, queue) * 1000.0
            for p, q in (("p50", 0.50), ("p99", 0.99))
        }
    return Side(
        upstream_rps=up_rate,
        mean_upstream_latency_s=mean,
        in_flight=load,
        utilisation=load / c if load is not None and c else None,
        saturated=queue is None,
        latency_ms=latency,
        concurrency_needed=concurrency_needed(service_s, load) if load is not None else None,
        headroom_x=headroom(service_s, load, c) if load is not None and c else None,
    )


def capacity_report(
    *,
    latency_ms: Sequence[float | None],
    hit: Sequence[bool],
    overhead_ms: Sequence[float],
    rate: float | None,
    rate_source: str | None,
    upstream_concurrency: int | None,
) -> Capacity:
    """Capacity with and without the cache for one replay.

    ``latency_ms[i]`` is request i's logged upstream latency (None when not logged: it then
    counts in the rates but not in the latency samples), ``hit[i]`` whether the cache answered
    it, ``overhead_ms[i]`` the cache's measured time for it."""
    n = len(hit)
    lat = np.array([math.nan if v is None else v for v in latency_ms], dtype=np.float64) / 1e3
    hits = np.asarray(hit, dtype=bool)
    over = np.asarray(overhead_ms, dtype=np.float64) / 1e3
    known = ~np.isnan(lat)
    miss_share = float(np.count_nonzero(~hits)) / n if n else 0.0
    without = _side(
        rate, 1.0, lat[known], np.empty(0), np.zeros(int(known.sum())), upstream_concurrency
    )
    misses = known & ~hits
    with_ = _side(rate, miss_share, lat[misses], over[hits], over[misses], upstream_concurrency)
    saved = None
    if without.concurrency_needed and with_.concurrency_needed is not None:
        saved = 1.0 - with_.concurrency_needed / without.concurrency_needed
    out = Capacity(rate, rate_source, upstream_concurrency, without, with_, saved)
    if rate is not None and upstream_concurrency and known.any():
        out.curve = _curve(
            rate,
            miss_share,
            lat[known],
            lat[misses],
            over[hits],
            over[misses],
            upstream_concurrency,
        )
    return out


def _p99(
    rate: float, service_s: np.ndarray, hit_s: np.ndarray, overhead_s: np.ndarray, c: int
) -> float | None:
    if not service_s.size:
        return None
    mean = float(service_s.mean())
    queue = _queue(rate * mean, mean, c)
    if queue is None:
        return None
    return latency_quantile(0.99, hit_s, service_s + overhead_s, queue) * 1000.0


def _curve(
    rate: float,
    miss_share: float,
    all_s: np.ndarray,
    miss_s: np.ndarray,
    hit_over: np.ndarray,
    miss_over: np.ndarray,
    c: int,
) -> list[tuple[float, float | None, float | None]]:
    """p99 end-to-end latency as the traffic is scaled, with and without the cache."""
    top = c / (rate * float(all_s.mean())) * 1.05  # a little past the no-cache saturation
    if miss_s.size and miss_share > 0:
        top = max(top, min(c / (rate * miss_share * float(miss_s.mean())) * 1.05, top * 20))
    points = []
    for k in np.linspace(top / 40, top, 40):
        points.append(
            (
                float(k),
                _p99(rate * k, all_s, np.empty(0), np.zeros(all_s.size), c),
                _p99(rate * k * miss_share, miss_s, hit_over, miss_over, c),
            )
        )
    return points
