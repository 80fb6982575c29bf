from __future__ import annotations

import json
import logging

import pytest

from cachekit import Cache, StatsLogger
from cachekit._engine.breaker import CircuitBreaker
from cachekit._engine.telemetry import LatencyHistogram
from cachekit.testing.clock import ManualClock


def test_histogram_percentiles_are_close() -> None:
    h = LatencyHistogram()
    for i in range(1, 1001):
        h.record(i * 1e-6)  # 1 us .. 1 ms uniform
    assert h.percentile(0.5) == pytest.approx(500e-6, rel=0.08)
    assert h.percentile(0.99) == pytest.approx(990e-6, rel=0.08)
    top = h.percentile(1.0)
    assert top is not None and top <= 1e-3 + 1e-12
    assert LatencyHistogram().percentile(0.5) is None
    s = h.summary()
    assert s.p50_ms is not None and s.p95_ms is not None and s.p99_ms is not None
    assert s.count == 1000 and s.p50_ms < s.p95_ms < s.p99_ms


def test_stats_to_dict_is_json_ready() -> None:
    cache = Cache()

    @cache.cached
    def f(x: int) -> int:
        return x

    f(1), f(1), f(2)
    d = cache.stats().to_dict()
    json.dumps(d)
    assert d["hits"] == 1 and d["misses"] == 2 and d["calls_saved"] == 1
    assert d["tiers"]["l1"]["hits"] == 1
    assert d["compute"]["count"] == 2
    assert d["time_saved_s"] > 0


def test_prometheus_collector_exposes_tiers() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from cachekit import register_prometheus

    cache = Cache(namespace="prom")

    @cache.cached
    def f(x: int) -> int:
        return x

    f(1), f(1)
    registry = prometheus_client.CollectorRegistry()
    register_prometheus(cache, registry)
    text = prometheus_client.generate_latest(registry).decode()
    assert 'cachekit_tier_hits_total{namespace="prom",tier="l1"} 1.0' in text
    assert 'cachekit_requests_total{namespace="prom",outcome="miss"} 1.0' in text
    assert "cachekit_tier_latency_seconds_bucket" in text


def test_stats_logger_logs_json(caplog: pytest.LogCaptureFixture) -> None:
    cache = Cache()
    with caplog.at_level(logging.INFO, logger="cachekit.stats"):
        StatsLogger(cache, interval=60).log_once()
    assert len(caplog.records) == 1
    payload = caplog.records[0].getMessage().split("cachekit stats ", 1)[1]
    assert json.loads(payload)["namespace"] == "default"
    with pytest.raises(ValueError):
        StatsLogger(cache, interval=0)


def test_breaker_opens_probes_and_closes() -> None:
    clock = ManualClock()
    b = CircuitBreaker(failure_threshold=3, reset_timeout=5, clock=clock)
    for _ in range(2):
        b.record_failure()
    assert b.state == "closed" and b.allow()
    b.record_failure()
    assert b.state == "open" and not b.allow()
    clock.advance(5)
    assert b.allow()  # one probe
    assert not b.allow()  # only one
    b.record_failure()
    assert b.state == "open" and not b.allow()
    clock.advance(5)
    assert b.allow()
    b.record_success()
    assert b.state == "closed" and b.allow() and b.opened_count == 2
