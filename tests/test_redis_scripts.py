"""The Redis tier's Lua scripts are registered once and called by their SHA1 (EVALSHA), never
sent as source per call; a server that lost them (restart, ``SCRIPT FLUSH``) gets them back
transparently, in the sync and the asyncio form, standalone and on a cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import redis
from redis_servers import RedisCluster, RedisServer

from cachekit.backends.redis import RedisTier
from cachekit.backends.semantic_store import StatsChange, StoredEntry

MODES = ["sync", "async"]

# Counter keys in one slot, and entries above the tier's script threshold.
BATCH = [(f"k{i}", b"v%d" % i, 60.0) for i in range(12)]


@pytest.fixture
def tier(redis_server: RedisServer) -> Iterator[RedisTier]:
    t = RedisTier(redis_server.url, socket_timeout=1.0, connect_timeout=1.0)
    try:
        yield t
    finally:
        t.close()


@pytest.fixture
def admin(redis_server: RedisServer) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_server.url)
    try:
        yield c
    finally:
        c.close()


def calls(client: Any, command: str) -> int:
    """How many times ``command`` ran on the server, from INFO commandstats."""
    stats = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def work(tier: RedisTier, mode: str, prefix: str = "") -> list[Any]:
    """One round of every scripted operation, through the sync or the asyncio form."""
    batch = [(prefix + k, v, ttl) for k, v, ttl in BATCH]

    async def async_round() -> list[Any]:
        try:
            await tier.aset_many(batch)
            return [
                await tier.aincr_from(prefix + "n", 10),
                await tier.araise_counter(prefix + "m", 5),
                await tier.aget_many([k for k, _, _ in batch]),
            ]
        finally:
            await tier.aclose()

    if mode == "async":
        return asyncio.run(async_round())
    tier.set_many(batch)
    return [
        tier.incr_from(prefix + "n", 10),
        tier.raise_counter(prefix + "m", 5),
        tier.get_many([k for k, _, _ in batch]),
    ]


@pytest.mark.parametrize("mode", MODES)
def test_scripts_go_by_sha_after_the_first_call(
    tier: RedisTier, admin: redis.Redis, mode: str
) -> None:
    work(tier, mode)  # first round: each script is loaded (EVALSHA -> NOSCRIPT -> SCRIPT LOAD)
    assert calls(admin, "script|load") == 3 and calls(admin, "eval") == 0
    sha_before = calls(admin, "evalsha")
    for _ in range(3):
        work(tier, mode)
    assert calls(admin, "eval") == 0, "script source was sent"
    assert calls(admin, "script|load") == 3, "scripts were loaded again"
    assert calls(admin, "evalsha") - sha_before == 3 * 3  # set_many, incr_from, raise_counter
    assert admin.get("n") == b"14" and admin.get("m") == b"5"


@pytest.mark.parametrize("mode", MODES)
def test_script_flush_between_calls_reloads_them(
    tier: RedisTier, admin: redis.Redis, mode: str
) -> None:
    first = work(tier, mode)
    assert first == [11, 5, [v for _, v, _ in BATCH]]
    admin.script_flush()
    second = work(tier, mode)  # NOSCRIPT on each: loaded again, then run
    assert second == [12, 5, [v for _, v, _ in BATCH]]
    assert calls(admin, "script|load") == 6 and calls(admin, "eval") == 0
    admin.script_flush()
    assert work(tier, mode)[:2] == [13, 5]


def test_scripts_survive_a_server_restart(redis_server: RedisServer, tier: RedisTier) -> None:
    assert work(tier, "sync")[:2] == [11, 5]
    redis_server.restart()  # no persistence: data and scripts are gone
    tier.close()  # the pooled connections died with the server; the tier's scripts did not
    assert work(tier, "sync")[:2] == [11, 5]


def test_semantic_store_stats_by_sha(
    redis_server: RedisServer, tier: RedisTier, admin: redis.Redis
) -> None:
    store = tier.semantic_store("sem")
    vec = np.array([1.0, 0.0], dtype=np.float32)
    entries = [StoredEntry(i, "s", f"text {i}", b"v", 1.0, None, 0, "emb", vec) for i in (1, 2)]
    store.write(entries, 60.0, b"o")
    store.add_stats([StatsChange(1, served=1), StatsChange(2, confirmed=1)], b"o")
    admin.script_flush()  # the pipelined calls meet NOSCRIPT: loaded, sent again once
    store.add_stats([StatsChange(1, served=2), StatsChange(2, refuted=1, refuted_at=0.5)], None)
    eval_before, sha_before = calls(admin, "eval"), calls(admin, "evalsha")
    store.add_stats([StatsChange(1, served=1)], None)
    assert calls(admin, "eval") == eval_before == 0
    assert calls(admin, "evalsha") == sha_before + 1
    stats, bad = store.fetch_stats([1, 2])
    assert not bad
    assert (stats[1].served, stats[2].confirmed, stats[2].refuted) == (4, 1, 1)


def test_cluster_scripts_by_sha_and_reloaded(redis_cluster: RedisCluster, key_prefix: str) -> None:
    t = RedisTier(redis_cluster.url, socket_timeout=1.0, connect_timeout=1.0)
    nodes = [redis.Redis(host="127.0.0.1", port=p) for p in redis_cluster.ports]
    try:
        # Counters on every node: each EVALSHA goes to its key's node.
        keys = [f"{key_prefix}c{i}" for i in range(12)]
        assert len({t.client.get_node_from_key(k).name for k in keys}) == 3
        for mode in MODES:
            for n in nodes:
                n.script_flush()  # scripts only; other tests' calls reload them too
            if mode == "sync":
                got = [t.incr_from(k, 10) for k in keys] + [t.raise_counter(k, 20) for k in keys]
            else:

                async def run() -> list[int]:
                    try:
                        out = [await t.aincr_from(k, 10) for k in keys]
                        return out + [await t.araise_counter(k, 20) for k in keys]
                    finally:
                        await t.aclose()

                got = asyncio.run(run())
            want = [11] * 12 + [20] * 12 if mode == "sync" else [21] * 24
            assert got == want
        evals = sum(calls(n, "eval") for n in nodes)
        shas = sum(calls(n, "evalsha") for n in nodes)
        assert [t.incr_from(k, 0) for k in keys] == [22] * 12
        assert sum(calls(n, "eval") for n in nodes) == evals
        assert sum(calls(n, "evalsha") for n in nodes) == shas + 12
    finally:
        t.close()
        for n in nodes:
            n.close()
