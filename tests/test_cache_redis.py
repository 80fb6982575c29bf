"""The cache's policy against a real Redis started by the tests: sharing, fail-open, breaker."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

from cachekit import Cache, Status
from cachekit.testing.clock import wait_until

ROOT = Path(__file__).resolve().parents[1]


def ns() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def test_l2_hit_fills_l1_across_instances(redis_server) -> None:
    name = ns()
    a = Cache(redis_url=redis_server.url, namespace=name)
    b = Cache(redis_url=redis_server.url, namespace=name)
    calls: list[str] = []

    def make(cache: Cache, tag: str):  # the same function identity in two caches
        @cache.cached(name="predict", ttl=60)
        def predict(x: int) -> str:
            calls.append(tag)
            return f"{tag}:{x}"

        return predict

    pa, pb = make(a, "a"), make(b, "b")
    assert pa(1) == "a:1"
    assert pb(1) == "a:1"  # served from Redis, b never ran
    assert pb(1) == "a:1"
    assert calls == ["a"]
    sb = b.stats()
    assert sb.tiers["l2"].hits == 1 and sb.tiers["l1"].hits == 1
    assert sb.tiers["l2"].latency.p50_ms is not None


def test_l2_only_sees_every_write(redis_server) -> None:
    name = ns()
    a = Cache(redis_url=redis_server.url, namespace=name, l1=False)
    b = Cache(redis_url=redis_server.url, namespace=name, l1=False)
    a.set("k", 1)
    assert b.get("k") == 1
    a.set("k", 2)
    assert b.get("k") == 2
    b.delete("k")
    assert a.get("k") is None


def test_namespace_bump_reaches_other_processes(redis_server) -> None:
    name = ns()
    a = Cache(redis_url=redis_server.url, namespace=name, version_refresh_s=0.0)
    b = Cache(redis_url=redis_server.url, namespace=name, version_refresh_s=0.0)
    b.set("k", "old")
    assert a.get("k") == "old"
    assert b.get("k") == "old"
    assert a.invalidate_namespace()
    assert a.version == 1
    assert b.get("k") is None and b.version == 1


def test_unreadable_entry_is_a_miss_and_gets_overwritten(redis_server) -> None:
    import redis

    name = ns()
    cache = Cache(redis_url=redis_server.url, namespace=name)

    @cache.cached(name="f")
    def f(x: int) -> int:
        return x + 1

    raw = redis.Redis.from_url(redis_server.url)
    raw.set(f.cache_key(1), b"p\x80garbage-pickle")  # another serializer's tag: refused
    assert f(1) == 2
    assert cache.stats().tiers["l2"].errors == 1
    stored = raw.get(f.cache_key(1))
    assert isinstance(stored, bytes) and stored.startswith(b"m")


def test_two_processes_share_entries(redis_server) -> None:
    name = ns()
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from cachekit import Cache
        cache = Cache(redis_url={redis_server.url!r}, namespace={name!r})
        @cache.cached(name="embed", ttl=60)
        def embed(text, dims=3):
            return [len(text)] * dims
        print(embed("hello"), embed("hello", dims=2))
    """)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[5, 5, 5] [5, 5]"
    cache = Cache(redis_url=redis_server.url, namespace=name)

    @cache.cached(name="embed", ttl=60)
    def embed(text: str, dims: int = 3) -> list[int]:
        raise AssertionError("must be served from Redis")

    assert embed("hello") == [5, 5, 5]
    assert embed(dims=2, text="hello") == [5, 5]


def test_redis_killed_mid_run_fails_open_and_recovers(redis_server) -> None:
    cache = Cache(
        redis_url=redis_server.url,
        namespace=ns(),
        breaker_failures=3,
        breaker_reset_s=0.2,
        l1=False,
    )
    calls: list[int] = []

    @cache.cached(name="f")
    def f(x: int) -> int:
        calls.append(x)
        return x * 2

    assert f(1) == 2 and f(1) == 2
    assert calls == [1]
    redis_server.kill()
    for i in range(20):
        assert f(i) == i * 2  # never an exception; every call computes
    assert cache.breaker_state == "open"
    s = cache.stats()
    assert s.tiers["l2"].errors >= 3
    assert s.tiers["l2"].skipped > 0  # the breaker spared Redis the remaining calls
    redis_server.restart()
    wait_until(lambda: f(100) == 200 and cache.breaker_state == "closed")
    calls.clear()
    f(101)
    f(101)
    assert calls == [101]  # the second call was a Redis hit again


def test_paused_redis_costs_a_timeout_not_a_hang(redis_server) -> None:
    cache = Cache(redis_url=redis_server.url, namespace=ns(), redis_timeout=0.05)

    @cache.cached(name="f")
    def f(x: int) -> int:
        return x

    f(0)
    redis_server.pause()  # accepts connections, answers nothing: a hung server
    try:
        got: list[int] = []
        done = threading.Event()

        def call() -> None:
            got.append(f(1))
            done.set()

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        # A hang detector, not a timing: the call ends on its own socket timeout.
        assert done.wait(30), "the call hung on a paused Redis"
        assert got == [1]
        assert cache.stats().tiers["l2"].errors >= 1
    finally:
        redis_server.resume()


async def test_async_functions_share_through_redis(redis_server) -> None:
    name = ns()
    a = Cache(redis_url=redis_server.url, namespace=name)
    b = Cache(redis_url=redis_server.url, namespace=name)

    @a.cached(name="g")
    async def ga(x: int) -> dict[str, int]:
        return {"x": x}

    @b.cached(name="g")
    async def gb(x: int) -> dict[str, int]:
        raise AssertionError("served from Redis")

    assert await ga(3) == {"x": 3}
    assert await gb(3) == {"x": 3}
    assert (await gb.lookup(3)).status is Status.HIT
    assert a._engine.wait_following(10)
    await gb.invalidate(3)
    # The invalidation reaches a's L1 through the namespace's invalidation channel.
    wait_until(lambda: a._engine.l1 is not None and len(a._engine.l1) == 0)
    assert (await ga.lookup(3)).status is Status.MISS
    a.close()
    b.close()


async def test_async_fail_open(redis_server) -> None:
    cache = Cache(redis_url=redis_server.url, namespace=ns(), breaker_failures=2, l1=False)

    @cache.cached(name="g")
    async def g(x: int) -> int:
        return -x

    assert await g(1) == -1
    redis_server.kill()
    for i in range(5):
        assert await g(i) == -i
    assert cache.breaker_state == "open"


def test_redis_cluster_backed_cache(redis_cluster) -> None:
    name = ns()
    a = Cache(redis_cluster_url=redis_cluster.url, namespace=name)
    # version_refresh_s=0: b reads the namespace version on every lookup, so it sees a's bump
    b = Cache(redis_cluster_url=redis_cluster.url, namespace=name, l1=False, version_refresh_s=0)
    calls: list[int] = []

    @a.cached(name="f")
    def fa(x: int) -> int:
        calls.append(x)
        return x

    @b.cached(name="f")
    def fb(x: int) -> int:
        calls.append(-x)
        return x

    for i in range(50):  # keys land on all three nodes' slots
        fa(i)
    assert [fb(i) for i in range(50)] == list(range(50))
    assert calls == list(range(50))
    assert a.invalidate_namespace()
    assert fb.lookup(1).status is Status.MISS


def test_tls_and_password_urls(redis_password_server, redis_tls_server) -> None:
    for server in (redis_password_server, redis_tls_server):
        cache = Cache(
            redis_url=server.url,
            namespace=ns(),
            l1=False,
            redis_options=server.client_kwargs,
            redis_timeout=0.5,
        )
        assert cache.set("k", [1, 2])
        assert cache.get("k") == [1, 2]
        assert cache.stats().tiers["l2"].errors == 0


def test_a_refresh_running_past_close_leaves_no_connection_open(redis_server) -> None:
    import redis as redis_py

    admin = redis_py.Redis.from_url(redis_server.url)
    admin.client_setname("admin")
    cache = Cache(redis_url=redis_server.url, namespace=ns(), l1=False)
    inside, release = threading.Event(), threading.Event()

    def refresh() -> None:
        inside.set()
        assert release.wait(30)
        cache.set("k", 1)  # after close(): reopens the shared tier's connections

    def others() -> list[dict]:
        return [c for c in admin.client_list() if c.get("name") != "admin"]

    try:
        cache.set("warm", 0)
        assert cache._engine.refresh_in_background("t", refresh)
        assert inside.wait(10)
        cache.close()
        assert not cache._engine.refresh_in_background("u", lambda: None)  # none after close
        release.set()
        wait_until(lambda: not cache._engine.refreshing(), timeout=10)
        wait_until(lambda: others() == [], timeout=10)
    finally:
        release.set()
        admin.close()
