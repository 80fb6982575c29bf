"""A scrape never holds two samples with one name and one label set: Prometheus rejects it."""

from __future__ import annotations

from collections import Counter

import pytest

from cachekit import Cache, register_prometheus, unregister_prometheus

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def samples(registry: object) -> Counter[tuple[str, tuple[tuple[str, str], ...]]]:
    text = prometheus_client.generate_latest(registry).decode()
    return Counter(
        (s.name, tuple(sorted(s.labels.items())))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    )


def used(cache: Cache) -> Cache:
    @cache.cached(ttl=60)
    def f(x: int) -> int:
        return x

    f(1)
    f(1)
    return cache


def test_registering_a_cache_twice_adds_no_series() -> None:
    registry = prometheus_client.CollectorRegistry()
    cache = used(Cache(namespace="twice"))
    first = register_prometheus(cache, registry)
    assert register_prometheus(cache, registry) is first
    counts = samples(registry)
    assert counts[("cachekit_tier_hits_total", (("namespace", "twice"), ("tier", "l1")))] == 1
    assert max(counts.values()) == 1


def test_two_caches_sharing_a_namespace_are_refused() -> None:
    registry = prometheus_client.CollectorRegistry()
    register_prometheus(used(Cache(namespace="shared")), registry)
    with pytest.raises(ValueError, match="namespace 'shared' is already registered"):
        register_prometheus(used(Cache(namespace="shared")), registry)
    assert max(samples(registry).values()) == 1


def test_caches_with_their_own_namespaces_or_prefixes_coexist() -> None:
    registry = prometheus_client.CollectorRegistry()
    register_prometheus(used(Cache(namespace="a")), registry)
    register_prometheus(used(Cache(namespace="b")), registry)
    register_prometheus(used(Cache(namespace="a")), registry, prefix="other")
    counts = samples(registry)
    assert max(counts.values()) == 1
    hits = {labels for name, labels in counts if name == "cachekit_tier_hits_total"}
    assert {dict(labels)["namespace"] for labels in hits} == {"a", "b"}
    assert ("other_tier_hits_total", (("namespace", "a"), ("tier", "l1"))) in counts


def test_unregistered_namespace_can_be_registered_again() -> None:
    registry = prometheus_client.CollectorRegistry()
    first = register_prometheus(used(Cache(namespace="again")), registry)
    unregister_prometheus(first, registry)
    second = register_prometheus(used(Cache(namespace="again")), registry)
    assert second is not first and max(samples(registry).values()) == 1
