"""Following Redis across replicas, and distrusting what is in it: blocking log reads, a trimmed
log, entries evicted behind a replica's back, the first lookups of a new replica, a prompt
close, and entries that are not what a tier wrote. Two caches in one process stand in for two
replicas; each test starts its own redis-server."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from test_semantic_redis import CLOSE, STORED, WORDS, topic

from cachekit import Cache, Status
from cachekit.backends.semantic_store import RedisSemanticStore
from cachekit.semantic.tier import entry_id
from cachekit.testing.clock import wait_until
from cachekit.testing.embedders import DeterministicTestEmbedder


def replica(url: str, namespace: str, closing: Callable[[Any], Any], **kw: Any) -> Any:
    cache = Cache(namespace=namespace, redis_url=url, redis_timeout=0.2, breaker_reset_s=0.2)
    calls: list[str] = []

    @cache.semantic(
        name="answer", embedder=DeterministicTestEmbedder(), ttl=600, threshold=0.9, **kw
    )
    def answer(prompt: str) -> str:
        calls.append(prompt)
        return f"computed:{prompt}"

    answer.calls = calls
    return closing(answer)


def store_of(fn: Any) -> RedisSemanticStore:
    store = fn.tier.store
    assert isinstance(store, RedisSemanticStore)
    return store


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def test_a_new_replica_answers_from_shared_entries_at_its_first_lookup(
    redis_server: Any, namespace: str, closing: Callable[[Any], Any]
) -> None:
    writer = replica(redis_server.url, namespace, closing)
    assert writer.put("stored answer", STORED)
    late = replica(redis_server.url, namespace, closing)
    # No wait_ready: sync began when the function was decorated, and the first lookup waits
    # for the first build (bounded).
    r = late.lookup(CLOSE)
    assert r.status is Status.SEMANTIC_HIT and r.value == "stored answer"


def test_a_replica_follows_writes_with_a_blocking_read(
    redis_server: Any, namespace: str, closing: Callable[[Any], Any]
) -> None:
    a = replica(redis_server.url, namespace, closing)
    b = replica(redis_server.url, namespace, closing)
    assert a.tier.wait_ready(10) and b.tier.wait_ready(10)
    assert hasattr(store_of(b), "follow")
    a.put("stored answer", STORED)
    wait_until(lambda: b.lookup(CLOSE).status is Status.SEMANTIC_HIT)
    a.invalidate(STORED)
    wait_until(lambda: b.lookup(CLOSE).status is Status.MISS)
    assert b.calls == []


def test_log_trimmed_past_a_slow_reader_triggers_a_resync(
    redis_server: Any,
    namespace: str,
    closing: Callable[[Any], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a = replica(redis_server.url, namespace, closing)
    b = replica(redis_server.url, namespace, closing)
    assert a.tier.wait_ready(10) and b.tier.wait_ready(10)
    store = store_of(b)
    gate = threading.Event()
    parked = threading.Event()
    real_follow = store.follow

    def slow_follow(cursor: bytes, block_s: float) -> Any:
        parked.set()
        gate.wait(10)
        return real_follow(cursor, block_s)

    a.put("v0", topic(0))
    wait_until(lambda: b.lookup("please " + topic(0)).status is Status.SEMANTIC_HIT)
    monkeypatch.setattr(store, "follow", slow_follow)
    wait_until(parked.is_set)  # b's cursor is past topic 0, and b reads no further
    resyncs = b.tier.stats()["resyncs"]
    a.put("v1", topic(1))
    a.put("v2", topic(2))
    client = a.cache.l2.client
    client.xtrim(store.log_key, maxlen=1, approximate=False)  # topic 1's message is gone
    gate.set()
    wait_until(lambda: b.lookup("please " + topic(1)).status is Status.SEMANTIC_HIT)
    stats = b.tier.stats()
    assert stats["log_lost"] >= 1 and stats["resyncs"] > resyncs


def test_the_store_reports_messages_trimmed_before_they_were_read(redis_server: Any) -> None:
    import redis

    client = redis.Redis.from_url(redis_server.url)
    store = RedisSemanticStore(lambda: client, False, "ck:ns:sem:f")
    cursor = store.snapshot().cursor
    for i in range(3):
        store.delete([i], b"w")
    read = store.follow(cursor, 0.01)
    assert not read.lost and len(read.messages) == 3
    store.delete([9], b"w")
    store.delete([10], b"w")
    client.xtrim(store.log_key, maxlen=1, approximate=False)
    lost = store.read_after(read.cursor)
    assert lost.lost
    client.delete(store.log_key)  # the whole log evicted
    assert store.read_after(read.cursor).lost
    client.close()


def test_an_entry_evicted_behind_a_replicas_back_is_detected(
    redis_server: Any, namespace: str, closing: Callable[[Any], Any]
) -> None:
    a = replica(redis_server.url, namespace, closing)
    b = replica(redis_server.url, namespace, closing)
    assert a.tier.wait_ready(10) and b.tier.wait_ready(10)
    a.put("stored answer", STORED)
    wait_until(lambda: b.lookup(CLOSE).status is Status.SEMANTIC_HIT)
    rebuilt = threading.Event()

    def on_rebuild(reason: str) -> None:
        if reason == "missing":
            rebuilt.set()

    # Listening before the delete: nothing is missing until then, so the rebuild waited for
    # is the one the delete causes (a counter read after the delete may already have moved).
    b.tier.replication.on_rebuild = on_rebuild
    scope = b.scope_key(STORED)
    client = a.cache.l2.client
    assert client.delete(store_of(b).entry_key(entry_id(scope, STORED))) == 1
    # b answered from it, so b checks it in the background and rebuilds without it.
    assert rebuilt.wait(10), "the missing entry was not detected"
    assert b.tier.stats()["missing_from_store"] >= 1
    assert b.lookup(CLOSE).status is Status.MISS


def test_close_stops_the_blocked_reader_promptly(
    redis_server: Any, namespace: str, closing: Callable[[Any], Any]
) -> None:
    a = replica(redis_server.url, namespace, closing)
    assert a.tier.wait_ready(10)
    name = f"cachekit-sem-sync:{a.tier.name}"
    assert any(t.name == name for t in threading.enumerate())
    a.close()  # joins the sync thread for at most about one block
    assert not any(t.name == name and t.is_alive() for t in threading.enumerate())


# ---------------------------------------------------------------------- hostile entries


def _hostile(fn: Any, text: str, vec: np.ndarray, **fields: Any) -> None:
    """Write a semantic entry for ``text`` by hand, as another program could."""
    store = store_of(fn)
    scope = fn.scope_key(text)
    h = {
        "vec": np.asarray(vec, dtype=np.float32).tobytes(),
        "text": text,
        "scope": scope,
        "value": fields.pop("value", b"x"),
        "created_at": "1.0",
        "expires_at": "",
        "v": "0",
        "emb": DeterministicTestEmbedder().name,
    }
    h.update(fields)
    id_ = entry_id(scope, text)
    client = fn.cache.l2.client
    client.hset(store.entry_key(id_), mapping=h)
    client.xadd(store.log_key, {"op": "add", "src": "someone", "ids": str(id_)})


def test_invalid_entries_are_skipped_counted_and_never_open_the_breaker(
    redis_server: Any, namespace: str, closing: Callable[[Any], Any]
) -> None:
    writer = replica(redis_server.url, namespace, closing)
    assert writer.put("good answer", STORED)
    emb = DeterministicTestEmbedder()
    client = writer.cache.l2.client
    store = store_of(writer)
    client.set(store.entry_key(12345), "a plain string, not a hash")
    client.set(store.entry_key(0)[:-1] + "junk", "not even an id")
    nan = emb.vector(topic(1)).copy()
    nan[0] = np.nan
    _hostile(writer, topic(1), nan)
    _hostile(writer, topic(2), emb.vector(topic(2))[:10])  # wrong dimension
    _hostile(writer, topic(3), emb.vector(topic(3)), emb="another-model")
    _hostile(writer, topic(4), emb.vector(topic(4)), scope="someone else's scope")

    late = replica(redis_server.url, namespace, closing)
    assert late.tier.wait_ready(10)
    assert late.lookup(CLOSE).value == "good answer"  # the valid entry is served
    assert {e.text for e in late.tier.entries()} == {STORED}
    stats = late.tier.stats()
    assert stats["invalid_entries"] >= 4  # another embedder's entry is counted apart:
    assert stats["embedder_mismatch"] >= 1 and stats["foreign_embedders"] == ["another-model"]
    assert late.cache._engine.breaker_state == "closed"
    assert late.lookup(STORED).tier == "l2"  # exact L2 hits still served
    for i in range(1, 5):
        assert late.lookup("please " + topic(i)).status is Status.MISS


def test_a_scaled_vector_does_not_answer_unrelated_prompts(
    redis_server: Any, namespace: str, closing: Callable[[Any], Any]
) -> None:
    a = replica(redis_server.url, namespace, closing)
    b = replica(redis_server.url, namespace, closing)
    assert a.tier.wait_ready(10) and b.tier.wait_ready(10)
    emb = DeterministicTestEmbedder()
    _hostile(a, STORED, emb.vector(STORED) * 1000.0, value=b"poison")
    a.put("fine", topic(0))
    late = replica(redis_server.url, namespace, closing)
    assert late.tier.wait_ready(10)
    wait_until(lambda: b.lookup("please " + topic(0)).status is Status.SEMANTIC_HIT)
    for fn in (late, b):
        assert fn.tier.index_size() == 1
        for w in WORDS[1:11]:
            assert fn.lookup(f"a recipe for {w} soup").status is Status.MISS
    assert late.tier.stats()["invalid_entries"] >= 1
