"""Invalidation that reaches every replica, and a namespace version that cannot go backwards.
Each test starts its own redis-server; "replicas" are Cache instances, and one test runs the
other replica in a second process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cachekit import Cache, Status
from cachekit.testing.clock import ManualClock, wait_until
from cachekit.testing.embedders import DeterministicTestEmbedder

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def caches(redis_server: Any) -> Iterator[Callable[[str], Cache]]:
    made: list[Cache] = []

    def make(namespace: str, **kw: Any) -> Cache:
        cache = Cache(redis_url=redis_server.url, namespace=namespace, redis_timeout=0.2, **kw)
        made.append(cache)
        # Pub/sub keeps nothing for a late subscriber: the test must not publish before.
        assert cache._engine.wait_following(10)
        return cache

    yield make
    for c in made:
        c.close()


def ns() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def _l1_size(cache: Cache) -> int:
    l1 = cache._engine.l1
    assert l1 is not None
    return len(l1)


@pytest.mark.parametrize("form", ["sync", "async"])
def test_function_invalidation_reaches_the_other_replicas_l1(
    caches: Callable[..., Cache], form: str
) -> None:
    name = ns()
    a, b = caches(name), caches(name)
    version = {"v": 1}

    def compute(x: int) -> str:
        return f"{x}:{version['v']}"

    fa, fb = a.cached(name="f", ttl=300)(compute), b.cached(name="f", ttl=300)(compute)
    assert fa(1) == fb(1) == "1:1"
    assert fb.lookup(1).tier == "l1"
    version["v"] = 2
    if form == "sync":
        fa.invalidate(1)
    else:
        import asyncio

        async def acompute(x: int) -> str:
            return compute(x)

        afa = a.cached(name="f", ttl=300)(acompute)
        asyncio.run(afa.invalidate(1))
    wait_until(lambda: fb.lookup(1).status is Status.MISS, timeout=5)
    assert fb(1) == "1:2"


def test_feature_and_semantic_invalidation_reach_the_other_replica(
    caches: Callable[..., Cache],
) -> None:
    name = ns()
    a, b = caches(name), caches(name)
    loads = {"n": 0}

    def load(ids: list[int]) -> dict[int, dict[str, int]]:
        loads["n"] += 1
        return {i: {"v": i * loads["n"]} for i in ids}

    fa = a.features("user", loader=load, ttl=300)
    fb = b.features("user", loader=load, ttl=300)
    assert fa.get_many([1, 2]) == fb.get_many([1, 2])
    size = _l1_size(b)
    fa.invalidate([1])
    wait_until(lambda: _l1_size(b) == size - 1, timeout=5)

    def answer(prompt: str) -> str:
        return f"answer:{prompt}"

    sa = a.semantic(name="s", embedder=DeterministicTestEmbedder(), ttl=300)(answer)
    sb = b.semantic(name="s", embedder=DeterministicTestEmbedder(), ttl=300)(answer)
    sa("hello there")
    assert sb.lookup("hello there").status is Status.HIT
    assert sb.lookup("hello there").tier == "l1"
    sa.invalidate("hello there")
    wait_until(lambda: sb.lookup("hello there").status is Status.MISS, timeout=5)


CHILD = textwrap.dedent("""
    import sys
    from cachekit import Cache

    url, namespace = sys.argv[1:3]
    cache = Cache(redis_url=url, namespace=namespace, redis_timeout=0.2)

    @cache.cached(name="f", ttl=300)
    def f(x):
        return f"child:{x}"

    print(f(1), flush=True)   # stored, so the parent reads it from Redis
    sys.stdin.readline()      # the parent has it in its L1
    f.invalidate(1)
    print("invalidated", flush=True)
    sys.stdin.readline()
    cache.close()
""")


def test_invalidation_from_another_process(redis_server: Any, caches: Any) -> None:
    name = ns()
    cache = caches(name)  # following its channel before the child starts

    @cache.cached(name="f", ttl=300)
    def f(x: int) -> str:
        return f"parent:{x}"

    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, redis_server.url, name],
        cwd=ROOT,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline().strip() == "child:1"
        assert f(1) == "child:1" and f.lookup(1).tier == "l1"
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "invalidated"
        wait_until(lambda: f.lookup(1).status is Status.MISS, timeout=5)
        assert f(1) == "parent:1"
    finally:
        proc.communicate("\n", timeout=30)
    assert proc.returncode == 0


def test_malformed_invalidation_messages_are_ignored(caches: Callable[..., Cache]) -> None:
    name = ns()
    a = caches(name)
    fa = a.cached(name="f", ttl=300)(lambda x: x)
    fa(1)
    client = a._engine.l2.client  # type: ignore[union-attr]
    channel = f"ck:{name}:invalidations"
    for junk in (b"\xff\x00", b"[]", b'{"o": 1}', b'{"o": "x", "k": [1, null]}'):
        client.publish(channel, junk)
    client.publish(channel, b'{"o": "x", "k": ["elsewhere"]}')
    fa.invalidate(2)  # a's own message, ignored by a
    assert fa.lookup(1).tier == "l1"


def test_a_lost_version_key_does_not_resurrect_retired_entries(
    caches: Callable[..., Cache],
) -> None:
    name = ns()
    clock = ManualClock()
    a, b = caches(name, clock=clock), caches(name, clock=clock)
    value = {"v": "old"}
    fa = a.cached(name="f", ttl=300)(lambda x: value["v"])
    assert fa(1) == "old"
    old_key = fa.cache_key(1)
    assert a.invalidate_namespace()
    assert a._engine.version == 1
    value["v"] = "new"
    assert fa(1) == "new"
    client = a._engine.l2.client  # type: ignore[union-attr]
    version_key = f"ck:{name}:__version__"
    assert client.get(old_key) is not None  # the retired entry is still in Redis ...
    client.delete(version_key)  # ... and the version key is evicted

    # A process that knows version 1 keeps it and re-seeds the key; the next bump goes past it.
    clock.advance(2.0)  # past version_refresh_s: the next call re-reads the version
    assert fa(1) == "new"
    assert a._engine.version == 1 and client.get(version_key) == b"1"
    fb = b.cached(name="f", ttl=300)(lambda x: "computed by b")
    assert fb(1) == "new"  # b reads version 1: the retired version-0 entry stays retired
    client.delete(version_key)
    assert b.invalidate_namespace()
    assert int(client.get(version_key)) == 2 and b._engine.version == 2


def test_a_garbage_version_key_costs_nothing(caches: Callable[..., Cache]) -> None:
    name = ns()
    a = caches(name)
    fa = a.cached(name="f", ttl=300)(lambda x: x * 2)
    assert a.invalidate_namespace()
    client = a._engine.l2.client  # type: ignore[union-attr]
    client.set(f"ck:{name}:__version__", "not a number")
    fresh = caches(name)
    ff = fresh.cached(name="f", ttl=300)(lambda x: x * 2)
    assert ff(3) == 6 and fa(4) == 8  # no exception to the caller
    # Both moved past version 1 to the same new epoch, which the key now holds as digits.
    stored = client.get(f"ck:{name}:__version__")
    assert stored.isdigit() and int(stored) > 1
    assert a._engine.version == fresh._engine.version == int(stored)


def _epoch_of(client: Any, version_key: str, above: int) -> int:
    """The version key's value, checked to be the digits of an integer in (above, 2**53)."""
    raw = client.get(version_key)
    assert raw is not None and raw.isdigit(), raw
    assert above < int(raw) < 2**53
    return int(raw)


def _retire_two_versions(
    caches: Callable[..., Cache], name: str, clock: ManualClock
) -> tuple[Cache, Any, list[str], Any]:
    """A cache whose entry for 1 was stored at version 0 ("v0") and 1 ("v1"), both still in
    Redis: the function, the two retired keys and the Redis client."""
    a = caches(name, clock=clock)
    value = {"v": "v0"}
    fa = a.cached(name="f", ttl=300)(lambda x: value["v"])
    assert fa(1) == "v0"
    retired = [fa.cache_key(1)]
    assert a.invalidate_namespace() and a._engine.version == 1
    value["v"] = "v1"
    assert fa(1) == "v1"
    retired.append(fa.cache_key(1))
    value["v"] = "new"
    client = a._engine.l2.client  # type: ignore[union-attr]
    assert all(client.get(k) is not None for k in retired)
    return a, fa, retired, client


@pytest.mark.parametrize("form", ["sync", "async"])
def test_a_saturated_version_key_moves_to_a_new_epoch(
    caches: Callable[..., Cache], form: str
) -> None:
    name = ns()
    clock = ManualClock()
    a, fa, retired, client = _retire_two_versions(caches, name, clock)
    version_key = f"ck:{name}:__version__"
    client.set(version_key, 2**63 - 1)  # INCR would overflow; INCRBYFLOAT would write a float
    if form == "sync":
        assert a.invalidate_namespace()
    else:
        import asyncio

        assert asyncio.run(a._engine.ainvalidate_namespace())
    epoch = _epoch_of(client, version_key, above=1)
    assert a._engine.version == epoch
    assert fa(1) == "new" and fa.cache_key(1) not in retired
    assert all(client.get(k) is not None for k in retired)  # still there, never served

    # A process started afterwards reads the epoch: neither retired entry comes back.
    b = caches(name, clock=clock)
    fb = b.cached(name="f", ttl=300)(lambda x: "computed by b")
    assert fb(1) == "new" and b._engine.version == epoch
    assert b.invalidate_namespace()
    assert _epoch_of(client, version_key, above=epoch) == epoch + 1 == b._engine.version
    assert fb(1) == "computed by b"


@pytest.mark.parametrize(
    "junk", ["1.5", "abc", "-3", "9.2233720368547758e+18", str(2**53), "1e5", " 7", ""]
)
def test_a_malformed_version_key_neither_raises_nor_resurrects(
    caches: Callable[..., Cache], junk: str
) -> None:
    name = ns()
    clock = ManualClock()
    a, fa, retired, client = _retire_two_versions(caches, name, clock)
    version_key = f"ck:{name}:__version__"
    client.set(version_key, junk)

    # A process started now knows no version: it must not fall back to version 0's entry.
    b = caches(name, clock=clock)
    fb = b.cached(name="f", ttl=300)(lambda x: "computed by b")
    assert fb(1) == "computed by b"
    epoch = _epoch_of(client, version_key, above=1)
    assert b._engine.version == epoch and fb.cache_key(1) not in retired

    # The process that knew version 1 follows it to the epoch at its next version check.
    clock.advance(2.0)
    assert fa(1) == "computed by b" and a._engine.version == epoch
    assert a.invalidate_namespace()
    assert _epoch_of(client, version_key, above=epoch) == epoch + 1 == a._engine.version


def test_a_malformed_version_key_is_replaced_by_the_next_bump(
    caches: Callable[..., Cache],
) -> None:
    name = ns()
    clock = ManualClock()
    a, fa, retired, client = _retire_two_versions(caches, name, clock)
    version_key = f"ck:{name}:__version__"
    for junk in ("-3", "1.5"):
        client.set(version_key, junk)
        known = a._engine.version
        assert a.invalidate_namespace()  # before any read of the junk
        assert a._engine.version == _epoch_of(client, version_key, above=known)
        assert fa(1) == "new" and fa.cache_key(1) not in retired


def test_a_lowered_version_key_is_put_back_by_a_running_process(
    caches: Callable[..., Cache],
) -> None:
    name = ns()
    clock = ManualClock()
    a, fa, retired, client = _retire_two_versions(caches, name, clock)
    version_key = f"ck:{name}:__version__"
    client.set(version_key, 0)
    clock.advance(2.0)
    assert fa(1) == "v1" and a._engine.version == 1  # never backwards ...
    assert client.get(version_key) == b"1"  # ... and the key is put back
    b = caches(name, clock=clock)
    fb = b.cached(name="f", ttl=300)(lambda x: "computed by b")
    assert fb(1) == "v1" and b._engine.version == 1  # not version 0's retired entry
    assert fb.cache_key(1) == retired[1] != retired[0]


def test_an_exhausted_version_moves_every_process_to_a_new_epoch(
    caches: Callable[..., Cache],
) -> None:
    name = ns()
    clock = ManualClock()
    a, fa, retired, client = _retire_two_versions(caches, name, clock)
    b = caches(name, clock=clock)
    fb = b.cached(name="f", ttl=300)(lambda x: "computed by b")
    assert fb(1) == "v1"
    version_key = f"ck:{name}:__version__"
    planted = 2**53 - 2  # a valid integer, but one bump short of what a Lua number holds
    client.set(version_key, planted)
    clock.advance(2.0)
    assert fa(1) == "new" and fb(1) == "new"  # both adopted it: never backwards
    assert a._engine.version == b._engine.version == planted
    retired.append(fa.cache_key(1))

    assert a.invalidate_namespace()
    epoch = _epoch_of(client, version_key, above=1)
    assert epoch < 2**52 and a._engine.version == epoch
    clock.advance(2.0)
    assert fb(1) == "computed by b" and b._engine.version == epoch  # b followed it down
    assert fa(1) == "computed by b" and fa.cache_key(1) not in retired
    assert all(client.get(k) is not None for k in retired)


def test_invalidation_reaches_the_other_replica_on_a_cluster(redis_cluster: Any) -> None:
    name = ns()
    a = Cache(redis_cluster_url=redis_cluster.url, namespace=name, redis_timeout=0.5)
    b = Cache(redis_cluster_url=redis_cluster.url, namespace=name, redis_timeout=0.5)
    try:
        fa = a.cached(name="f", ttl=300)(lambda x: x)
        fb = b.cached(name="f", ttl=300)(lambda x: x)
        fa(1)
        assert fb(1) == 1 and fb.lookup(1).tier == "l1"
        assert b._engine.wait_following(10)
        fa.invalidate(1)
        wait_until(lambda: fb.lookup(1).status is Status.MISS, timeout=5)
    finally:
        a.close()
        b.close()
