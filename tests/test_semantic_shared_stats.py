"""Per-entry records (served, confirmed, refuted, reported wrong, refuted similarity) shared
through Redis beside the entries: a demotion in one replica reaches the others, a new replica
starts with the records, Redis down costs only the sharing, and a hostile record is ignored.
Two caches in one process stand in for two replicas; each test starts its own redis-server."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from test_semantic_redis import CLOSE, STORED
from test_semantic_sync import replica, store_of

from cachekit import Status
from cachekit.backends.semantic_store import STATS_FIELDS, parse_stats
from cachekit.semantic.policy.hit_policy import NO_STATS, EntryStats
from cachekit.semantic.tier import entry_id
from cachekit.testing.clock import wait_until

#: Lower-cased it embeds like STORED (similarity 1.0), yet it is not STORED's exact key.
CLOSER = "How do I reset my password"


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def _id(fn: Any) -> int:
    return entry_id(fn.scope_key(STORED), STORED)


def _pair(url: str, namespace: str, closing: Callable[[Any], Any]) -> tuple[Any, Any]:
    a = replica(url, namespace, closing)
    b = replica(url, namespace, closing)
    assert a.tier.wait_ready(10) and b.tier.wait_ready(10)
    a.put("stored answer", STORED)
    wait_until(lambda: b.lookup(CLOSE).status is Status.SEMANTIC_HIT)
    return a, b


def _hash(fn: Any) -> dict[bytes, bytes]:
    client = fn.cache.l2.client
    return dict(client.hgetall(store_of(fn).entry_key(_id(fn))))


def test_a_demotion_in_one_replica_stops_the_other_from_serving(
    redis_server: Any, namespace: str, closing: Callable[[Any], Any]
) -> None:
    a, b = _pair(redis_server.url, namespace, closing)
    r = a.lookup(CLOSE)
    assert r.status is Status.SEMANTIC_HIT and r.similarity is not None
    assert a.cache.feedback(r, correct=False)
    wait_until(lambda: b.lookup(CLOSE).status is Status.MISS)
    st = b.tier.arbiter.stats_of(_id(b))
    assert st.max_refuted_similarity == pytest.approx(r.similarity, abs=1e-6)
    assert st.refuted == 1 and st.reported_wrong == 1
    # Demoted at or below the refuted similarity only: a closer request is still served.
    closer = b.lookup(CLOSER)
    assert closer.status is Status.SEMANTIC_HIT and closer.similarity > r.similarity
    # A second user report, in the other replica, reaches evict_after (2) across both: the
    # entry is evicted everywhere.
    assert b.cache.feedback(closer, correct=False)
    assert b.tier.stats()["feedback_evictions"] == 1
    # The demotion (a record) reaches `a` before the eviction (a log message after it), so the
    # first miss is not the end: wait for the entry to go and its record with it (a timeout
    # fails the test).
    wait_until(lambda: len(a.tier) == 0 and a.tier.arbiter.stats_of(_id(a)) == NO_STATS)
    assert a.lookup(CLOSER).status is Status.MISS
    # A fresh answer stored under the same text starts with a clean record everywhere.
    b.put("fresh answer", STORED)
    wait_until(lambda: a.lookup(CLOSE).value == "fresh answer")
    assert b.calls == []


def test_a_confirmation_and_served_counts_reach_the_shared_record(
    redis_server: Any, namespace: str, closing: Callable[[Any], Any]
) -> None:
    a, b = _pair(redis_server.url, namespace, closing)
    r = a.lookup(CLOSE)
    assert a.cache.feedback(r, correct=True)
    wait_until(lambda: b.tier.arbiter.stats_of(_id(b)).confirmed == 1)
    # Served counts travel in batches, unannounced: they reach the hash, and a new replica.
    wait_until(lambda: (parse_stats(_hash(a)) or NO_STATS).served >= 2)
    late = replica(redis_server.url, namespace, closing)
    assert late.tier.wait_ready(10)
    st = late.tier.arbiter.stats_of(_id(late))
    assert st.confirmed == 1 and st.served >= 2 and st.max_refuted_similarity is None


def test_a_new_replica_starts_with_the_demotions(
    redis_server: Any, namespace: str, closing: Callable[[Any], Any]
) -> None:
    a, _ = _pair(redis_server.url, namespace, closing)
    r = a.lookup(CLOSE)
    assert a.cache.feedback(r, correct=False)
    wait_until(lambda: b"st_sim" in _hash(a))
    late = replica(redis_server.url, namespace, closing)
    # No wait_ready: the first lookup waits for the first build, records included.
    assert late.lookup(CLOSE).status is Status.MISS
    st = late.tier.arbiter.stats_of(_id(late))
    assert st.reported_wrong == 1
    assert st.max_refuted_similarity == pytest.approx(r.similarity, abs=1e-6)
    assert late.lookup(CLOSER).status is Status.SEMANTIC_HIT
    assert late.tier.stats()["invalid_stats"] == 0


def test_with_redis_down_a_verdict_is_still_recorded_locally(
    redis_server: Any, namespace: str, closing: Callable[[Any], Any]
) -> None:
    a, _ = _pair(redis_server.url, namespace, closing)
    r = a.lookup(CLOSE)
    redis_server.kill()
    assert a.cache.feedback(r, correct=False)  # no exception: only the sharing is lost
    st = a.tier.arbiter.stats_of(_id(a))
    assert st.reported_wrong == 1 and st.max_refuted_similarity is not None
    assert a.lookup(CLOSE).status is Status.MISS  # the local demotion holds
    assert a.tier.stats()["feedback_reports"] == 1


HOSTILE = [
    {"st_n": b"-5"},
    {"st_ok": b"many"},
    {"st_bad": b"1e400"},
    {"st_user": str(2**60).encode()},
    {"st_sim": b"nan"},
    {"st_sim": b"inf"},
    {"st_sim": b"2.5"},
    {"st_sim": b"\xff\xfe"},
]


@pytest.mark.parametrize("fields", HOSTILE, ids=lambda f: "-".join(f))
def test_parse_stats_refuses_malformed_records(fields: dict[str, bytes]) -> None:
    with pytest.raises(ValueError):
        parse_stats({k.encode(): v for k, v in fields.items()})


def test_parse_stats_reads_a_record_and_ignores_other_fields() -> None:
    h = {b"st_n": b"3", b"st_bad": b"1", b"st_sim": b"0.93", b"text": b"whatever"}
    assert parse_stats(h) == EntryStats(3, 0, 1, 0, 0.93)
    assert parse_stats({b"text": b"no record"}) is None
    assert set(STATS_FIELDS) == {"st_n", "st_ok", "st_bad", "st_user", "st_sim"}


def test_hostile_records_are_ignored_and_repaired_by_the_next_verdict(
    redis_server: Any, namespace: str, closing: Callable[[Any], Any]
) -> None:
    a, b = _pair(redis_server.url, namespace, closing)
    client = a.cache.l2.client
    key = store_of(a).entry_key(_id(a))
    # A record that would demote the entry for every request, if it were believed.
    client.hset(key, mapping={"st_n": "-5", "st_ok": "many", "st_sim": "nan"})
    client.xadd(store_of(a).log_key, {"op": "stats", "src": "someone", "ids": str(_id(a))})
    client.xadd(store_of(a).log_key, {"op": "stats", "src": "someone", "ids": "not ids"})
    wait_until(lambda: b.tier.stats()["invalid_stats"] >= 1)
    late = replica(redis_server.url, namespace, closing)
    assert late.tier.wait_ready(10)
    for fn in (b, late):
        assert fn.lookup(CLOSE).status is Status.SEMANTIC_HIT
        assert fn.tier.arbiter.stats_of(_id(fn)).max_refuted_similarity is None
        assert fn.cache._engine.breaker_state == "closed"
    assert late.tier.stats()["invalid_stats"] == 1
    # The next verdict replaces what cannot be counted, and the record is readable again.
    r = a.lookup(CLOSE)
    assert a.cache.feedback(r, correct=False)
    st = parse_stats(_hash(a))
    assert st is not None and st.refuted == 1 and st.confirmed == 0
    assert st.max_refuted_similarity == pytest.approx(r.similarity, abs=1e-6)
    wait_until(lambda: b.lookup(CLOSE).status is Status.MISS)


def test_a_verdict_on_a_vanished_entry_writes_no_record(
    redis_server: Any, namespace: str, closing: Callable[[Any], Any]
) -> None:
    a, _ = _pair(redis_server.url, namespace, closing)
    r = a.lookup(CLOSE)
    client = a.cache.l2.client
    key = store_of(a).entry_key(_id(a))
    assert client.delete(key) == 1
    assert a.cache.feedback(r, correct=False)
    assert client.exists(key) == 0  # no stub hash without a TTL


def test_records_are_shared_on_a_redis_cluster(
    redis_cluster: Any, namespace: str, closing: Callable[[Any], Any]
) -> None:
    url = getattr(redis_cluster, "url", f"redis+cluster://127.0.0.1:{redis_cluster.ports[0]}/0")
    a, b = _pair(url, namespace, closing)
    r = a.lookup(CLOSE)
    assert a.cache.feedback(r, correct=False)
    wait_until(lambda: b.lookup(CLOSE).status is Status.MISS)
    late = replica(url, namespace, closing)
    assert late.tier.wait_ready(10)
    assert late.tier.arbiter.stats_of(_id(late)).reported_wrong == 1
    assert late.lookup(CLOSER).status is Status.SEMANTIC_HIT
