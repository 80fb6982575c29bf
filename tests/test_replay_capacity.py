"""Little's law and M/M/c figures of ``cachekit replay``, against values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cachekit.replay.capacity import (
    capacity_report,
    concurrency_needed,
    erlang_c,
    rate_from_timestamps,
)


def test_erlang_c_by_hand() -> None:
    # C(c, a) = (a^c / c!) (c / (c - a)) / (sum_{k<c} a^k / k! + (a^c / c!) (c / (c - a)))
    # c=4, a=2: (16/24)(4/2) = 4/3; sum = 1 + 2 + 2 + 4/3 = 19/3; C = (4/3) / (23/3) = 4/23.
    assert erlang_c(4, 2.0) == pytest.approx(4 / 23)
    # c=4, a=1: (1/24)(4/3) = 1/18; sum = 1 + 1 + 1/2 + 1/6 = 8/3; C = (1/18) / (49/18) = 1/49.
    assert erlang_c(4, 1.0) == pytest.approx(1 / 49)
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: the probability of waiting is rho
    assert erlang_c(4, 4.0) == 1.0 and erlang_c(4, 0.0) == 0.0


def test_rate_from_timestamps() -> None:
    assert rate_from_timestamps([0.0, 0.5, 1.0, 1.5]) == pytest.approx(2.0)
    assert rate_from_timestamps([None, 3.0]) is None
    assert rate_from_timestamps([5.0, 5.0]) is None


def test_no_hits_constant_latency() -> None:
    # 2 req/s, 1 s each, 4 slots: L = 2, rho = 0.5, P(wait) = 4/23, the wait's tail has rate
    # (c - L) / W = 2 per second. p50: more than half never wait, so 1 s exactly. p99: the wait
    # exceeded with probability 0.01: (4/23) e^(-2x) = 0.01, x = ln(400/23) / 2.
    cap = capacity_report(
        latency_ms=[1000.0] * 100,
        hit=[False] * 100,
        overhead_ms=[0.0] * 100,
        rate=2.0,
        rate_source="--rate",
        upstream_concurrency=4,
    ).to_dict()
    side = cap["without_cache"]
    assert side["in_flight"] == pytest.approx(2.0)
    assert side["utilisation"] == pytest.approx(0.5)
    assert side["latency_ms"]["p50"] == pytest.approx(1000.0, abs=1e-6)
    assert side["latency_ms"]["p99"] == pytest.approx(1000.0 * (1 + math.log(400 / 23) / 2))
    assert cap["with_cache"] == side  # nothing hit: the cache changes nothing
    assert cap["concurrency_saved"] == 0.0


def test_half_hits_halve_the_upstream_load() -> None:
    # Every other request is a hit taking 0 ms: 1 req/s upstream, L = 1, P(wait) = 1/49, tail
    # rate 3/s. p99 of the mixture: 0.5 * P(miss path > t) = 0.01, so P(wait > t - 1) = 0.02:
    # (1/49) e^(-3x) = 0.02, x = ln(50/49) / 3.
    hit = [i % 2 == 1 for i in range(100)]
    cap = capacity_report(
        latency_ms=[1000.0] * 100,
        hit=hit,
        overhead_ms=[0.0] * 100,
        rate=2.0,
        rate_source="--rate",
        upstream_concurrency=4,
    ).to_dict()
    w = cap["with_cache"]
    assert w["upstream_rps"] == pytest.approx(1.0)
    assert w["in_flight"] == pytest.approx(1.0)
    assert w["utilisation"] == pytest.approx(0.25)
    assert w["latency_ms"]["p99"] == pytest.approx(1000.0 * (1 + math.log(50 / 49) / 3))
    # The median request is a hit (half are) or a miss without wait: at most 1 s.
    assert w["latency_ms"]["p50"] <= 1000.0 + 1e-6
    assert cap["without_cache"]["concurrency_needed"] > w["concurrency_needed"]
    assert cap["concurrency_saved"] > 0
    assert w["headroom_x"] > cap["without_cache"]["headroom_x"]


def test_rarely_waiting_calls_keep_the_service_percentiles() -> None:
    # 0.1 req/s on 32 slots: P(wait) is vanishingly small, so the percentiles are those of the
    # logged latencies themselves (here 1..100 s, p99 by linear interpolation of 1% steps).
    latencies = [1000.0 * (i + 1) for i in range(100)]
    cap = capacity_report(
        latency_ms=latencies,
        hit=[False] * 100,
        overhead_ms=[0.0] * 100,
        rate=0.1,
        rate_source="--rate",
        upstream_concurrency=32,
    ).to_dict()
    side = cap["without_cache"]
    assert side["utilisation"] == pytest.approx(0.1 * 50.5 / 32)
    assert 99_000.0 <= side["latency_ms"]["p99"] <= 100_000.0
    assert 50_000.0 <= side["latency_ms"]["p50"] <= 51_000.0


def test_saturated_upstream_has_no_latency() -> None:
    cap = capacity_report(
        latency_ms=[1000.0] * 10,
        hit=[False] * 10,
        overhead_ms=[0.0] * 10,
        rate=5.0,
        rate_source="--rate",
        upstream_concurrency=4,
    ).to_dict()
    side = cap["without_cache"]
    assert side["saturated"] is True and side["utilisation"] == pytest.approx(1.25)
    assert side["latency_ms"] == {"p50": None, "p99": None}
    assert side["headroom_x"] < 1.0  # past its knee already


def test_knee_definition() -> None:
    # Constant 1 s service: the knee is the smallest c with P(wait > 0.1 s) <= 1%.
    service = np.full(50, 1.0)
    c = concurrency_needed(service, 2.0)
    assert c is not None

    def tail(c_: int) -> float:
        return erlang_c(c_, 2.0) * math.exp(-(c_ - 2.0) * 0.1)

    assert tail(c) <= 0.01 < tail(c - 1)


def test_without_rate_only_latency_without_queueing() -> None:
    cap = capacity_report(
        latency_ms=[100.0, 300.0, None],
        hit=[False, False, True],
        overhead_ms=[0.0, 0.0, 0.0],
        rate=None,
        rate_source=None,
        upstream_concurrency=8,
    ).to_dict()
    side = cap["without_cache"]
    assert side["in_flight"] is None and side["utilisation"] is None
    assert side["concurrency_needed"] is None
    assert side["mean_upstream_latency_s"] == pytest.approx(0.2)
    assert side["latency_ms"]["p99"] == pytest.approx(300.0, abs=1e-6)
