"""The semantic tier shared through a real Redis: across processes, after restarts, on failure."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cachekit import Cache, Status
from cachekit.testing.clock import wait_until
from cachekit.testing.embedders import DeterministicTestEmbedder

ROOT = Path(__file__).resolve().parents[1]

STORED = "how do I reset my password"
CLOSE = "how do I reset my password please"
WORDS = [
    "apple",
    "river",
    "motor",
    "violet",
    "castle",
    "pepper",
    "silver",
    "tunnel",
    "garden",
    "rocket",
    "marble",
    "forest",
]


def topic(i: int) -> str:
    return f"tell me about the {WORDS[i]} and the {WORDS[(i + 7) % len(WORDS)]}"


def ns() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def make_answer(
    url: str, namespace: str, closing: Callable[[Any], Any], *, cluster: bool = False, **kw: Any
) -> Any:
    opts: dict[str, Any] = {"redis_cluster_url" if cluster else "redis_url": url}
    cache = Cache(namespace=namespace, redis_timeout=0.2, breaker_reset_s=0.2, **opts)
    calls: list[str] = []

    @cache.semantic(
        name="answer", embedder=DeterministicTestEmbedder(), ttl=600, threshold=0.9, **kw
    )
    def answer(prompt: str, *, model: str = "m1") -> str:
        calls.append(prompt)
        return f"{model}:{prompt}"

    answer.calls = calls
    return closing(answer)


CHILD = textwrap.dedent("""
    import sys
    from cachekit import Cache
    from cachekit.testing.embedders import DeterministicTestEmbedder

    url, namespace, action = sys.argv[1:4]
    cache = Cache(redis_url=url, namespace=namespace, redis_timeout=0.2)

    @cache.semantic(name="answer", embedder=DeterministicTestEmbedder(), ttl=600, threshold=0.9)
    def answer(prompt: str, *, model: str = "m1") -> str:
        return f"{model}:{prompt}"

    assert answer.tier.wait_ready(10)
    if action == "store":
        answer("how do I reset my password", model="a")
    else:
        answer.invalidate("how do I reset my password", model="a")
    print("done", flush=True)
    sys.stdin.readline()  # stay alive until the test has looked
    answer.close()
""")


def run_child(url: str, namespace: str, action: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, namespace, action],
        cwd=ROOT,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "done", f"child failed: {line!r}"
    return proc


def finish(proc: subprocess.Popen[str]) -> None:
    proc.communicate("\n", timeout=30)
    assert proc.returncode == 0


def test_two_processes_share_the_semantic_tier(redis_server, closing) -> None:
    name = ns()
    answer = make_answer(redis_server.url, name, closing)
    assert answer.tier.wait_ready(10)
    assert answer.lookup(CLOSE, model="a").status is Status.MISS
    assert answer.tier.store.follows  # a blocking read of the log, woken by the child's write
    before = answer.tier.stats()
    assert before["redis_sync_lag_p50_ms"] is None  # no log message applied yet

    child = run_child(redis_server.url, name, "store")
    try:
        wait_until(lambda: answer.lookup(CLOSE, model="a").status is Status.SEMANTIC_HIT)
        # It came by following the log (the child's message was applied, its lag measured),
        # not by a rebuild from a later snapshot: what a bound on the wait stood in for.
        after = answer.tier.stats()
        assert after["redis_sync_lag_p50_ms"] is not None
        assert after["resyncs"] == before["resyncs"] and after["log_lost"] == 0
        r = answer.lookup(CLOSE, model="a")
        assert r.value == f"a:{STORED}" and r.matched_text == STORED
        assert answer.lookup(STORED, model="a").tier == "l2"  # the exact entry is shared too
        assert answer.lookup(CLOSE, model="b").status is Status.MISS  # scope holds across

        # Removal by the other process propagates as well.
        remover = run_child(redis_server.url, name, "invalidate")
        finish(remover)
        wait_until(lambda: len(answer.tier) == 0)
        assert answer.lookup(CLOSE, model="a").status is Status.MISS
        assert answer.calls == []
    finally:
        finish(child)


def test_new_instance_rebuilds_its_index_from_redis(redis_server, closing) -> None:
    name = ns()
    writer = make_answer(redis_server.url, name, closing)
    writer.put_many([(f"v{i}", (topic(i),), {"model": "a"}) for i in range(12)])
    writer.close()

    reader = make_answer(redis_server.url, name, closing)
    assert reader.tier.wait_ready(10)
    assert len(reader.tier) == 12
    for i in range(12):
        r = reader.lookup("please " + topic(i), model="a")
        assert r.status is Status.SEMANTIC_HIT and r.value == f"v{i}"
    assert reader.calls == []


def test_entries_carry_redis_ttl_and_capacity_bounds_redis(redis_server, closing) -> None:
    name = ns()
    answer = make_answer(redis_server.url, name, closing, capacity=3)
    answer.tier.wait_ready(10)
    for i in range(5):
        answer(topic(i), model="a")
    client = answer.cache.l2.client
    keys = list(client.scan_iter(match=f"ck:{name}:sem:answer:e:*"))
    assert len(keys) == 3  # evicted entries left Redis too
    assert all(0 < client.pttl(k) <= 600_000 for k in keys)

    other = make_answer(redis_server.url, name, closing, capacity=3)
    assert other.tier.wait_ready(10)
    assert {e.text for e in other.tier.entries()} == {topic(2), topic(3), topic(4)}


def test_redis_restart_costs_misses_then_sync_resumes(redis_server, closing) -> None:
    name = ns()
    a = make_answer(redis_server.url, name, closing)
    assert a.tier.wait_ready(10)
    a(STORED, model="a")

    redis_server.kill()
    assert a(topic(1), model="a") == f"a:{topic(1)}"  # no exception: computed
    assert a.lookup(topic(2), model="a").status is Status.MISS
    redis_server.restart()

    # Redis came back empty: after its rescan, `a` holds only what Redis holds.
    b = make_answer(redis_server.url, name, closing)
    assert b.tier.wait_ready(10)
    b(topic(3), model="a")
    wait_until(lambda: a.lookup("please " + topic(3), model="a").status is Status.SEMANTIC_HIT)
    wait_until(lambda: STORED not in {e.text for e in a.tier.entries()})
    assert a.tier.stats()["resyncs"] >= 2


def test_cluster_shares_and_rebuilds(redis_cluster, closing) -> None:
    name = ns()
    url = (
        redis_cluster.url
        if hasattr(redis_cluster, "url")
        else (f"redis+cluster://127.0.0.1:{redis_cluster.ports[0]}/0")
    )
    a = make_answer(url, name, closing)
    b = make_answer(url, name, closing)
    assert a.tier.wait_ready(10) and b.tier.wait_ready(10)
    a.put_many([(f"v{i}", (topic(i),), {"model": "a"}) for i in range(12)])
    wait_until(lambda: len(b.tier) == 12)
    c = make_answer(url, name, closing)
    assert c.tier.wait_ready(10) and len(c.tier) == 12
    assert c.lookup("please " + topic(5), model="a").value == "v5"


def test_the_redis_store_neither_shares_nor_reads_oversized_entries(redis_url: str) -> None:
    import numpy as np
    import redis

    from cachekit.backends.semantic_store import RedisSemanticStore, StoredEntry

    client = redis.Redis.from_url(redis_url)
    store = RedisSemanticStore(
        lambda: client, False, "ck:bounds:sem:f", max_text_bytes=1_000, max_value_bytes=5_000
    )
    vec = np.full(8, 8**-0.5, dtype=np.float32)

    def entry(id_: int, text: str = "short text", value: bytes = b"v") -> StoredEntry:
        return StoredEntry(id_, "scope", text, value, 1.0, None, 0, "emb", vec)

    store.write([entry(1), entry(2, text="x" * 2_000), entry(3, value=b"v" * 6_000)], None, b"o")
    assert [bool(client.exists(store.entry_key(i))) for i in (1, 2, 3)] == [True, False, False]
    # Forged around the store: a valid entry whose text then grows to 10 MB, and a foreign type.
    store.write([entry(4)], None, b"o")
    client.hset(store.entry_key(4), "text", "y" * 10_000_000)
    client.set(store.entry_key(5), "not a hash")
    found, bad = store.fetch([1, 4, 5, 6])  # 6: never written (expired, say): neither
    assert [e.id for e in found] == [1] and found[0].text == "short text"
    assert [i for i, _ in bad] == [4, 5]
    assert "text of 10000000 or value of 1 bytes is over the store's bounds" in bad[0][1]
    assert "ResponseError" in bad[1][1]  # WRONGTYPE, as data, not a Redis failure
    with pytest.raises(ValueError):
        RedisSemanticStore(lambda: client, False, "b", max_text_bytes=0)
    client.close()
