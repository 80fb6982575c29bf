"""Every engine rule, run through its sync and its asyncio form by one parametrized test.

A test takes ``mode`` ("sync" or "async") and drives the same scenario through either the plain
API or its ``a``-prefixed / ``async def`` mirror, so a rule that drifts between the two forms
fails here. Concurrency is held open with events, never sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis_servers import RedisServer

from cachekit import Cache, Status
from cachekit._core.types import MISSED
from cachekit.backends.memory import MemoryTier
from cachekit.testing.clock import ManualClock, wait_until

MODES = ["sync", "async"]

STORED = "how do I reset my password"
CLOSE = "how do I reset my password please"  # above 0.9 with STORED under the test embedder


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run(mode: str, sync_call: Callable[[], Any], async_call: Callable[[], Awaitable[Any]]) -> Any:
    """Call the sync form, or run the asyncio form to completion on a fresh loop."""
    if mode == "sync":
        return sync_call()
    return asyncio.run(_await(async_call))


async def _await(make: Callable[[], Awaitable[Any]]) -> Any:
    return await make()


def call(mode: str, f: Any, *args: Any, **kwargs: Any) -> Any:
    """Call a decorated function of either form."""
    if mode == "sync":
        return f(*args, **kwargs)
    return asyncio.run(_await(lambda: f(*args, **kwargs)))


def decorate(mode: str, decorator: Callable[[Any], Any], body: Callable[..., Any]) -> Any:
    """``body`` as a sync function or as an ``async def`` (running it in a thread, so a body
    that blocks on a threading.Event holds the call open without blocking the loop)."""
    if mode == "sync":

        def f(x: Any) -> Any:
            return body(x)

    else:

        async def f(x: Any) -> Any:  # type: ignore[misc]
            return await asyncio.to_thread(body, x)

    f.__qualname__ = f"{body.__qualname__}_{mode}"
    return decorator(f)


def concurrently(mode: str, f: Any, arg: Any, n: int) -> list[Any]:
    """Call ``f(arg)`` from ``n`` threads (sync) or ``n`` tasks (async); each outcome is the
    value or the exception raised."""
    if mode == "sync":
        out: list[Any] = [None] * n

        def worker(i: int) -> None:
            try:
                out[i] = f(arg)
            except Exception as exc:
                out[i] = exc

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        return out

    async def gather() -> list[Any]:
        return list(await asyncio.gather(*(f(arg) for _ in range(n)), return_exceptions=True))

    return asyncio.run(gather())


class Gate:
    """Holds the first call of a body open until released, and tells when it is inside."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()

    def hold(self) -> None:
        self.inside.set()
        assert self.release.wait(30), "gate never released"


def start_then_release(
    mode: str,
    f: Any,
    arg: Any,
    n: int,
    cache: Cache,
    gate: Gate,
) -> list[Any]:
    """``n`` concurrent calls; the leader is held inside the function until the other
    ``n - 1`` wait on its flight, then released."""
    result: list[Any] = []
    t = threading.Thread(target=lambda: result.extend(concurrently(mode, f, arg, n)))
    t.start()
    wait_until(lambda: gate.inside.is_set() and cache._engine.waiting() == n - 1)
    gate.release.set()
    t.join(30)
    return result


# ---------------------------------------------------------------------------- key-value


@pytest.mark.parametrize("l1", [True, False])
def test_get_set_delete(mode: str, l1: bool) -> None:
    cache = Cache(l2=MemoryTier(), l1=l1)
    assert run(mode, lambda: cache.set("k", {"a": 1}), lambda: cache.aset("k", {"a": 1}))
    assert run(mode, lambda: cache.get("k"), lambda: cache.aget("k")) == {"a": 1}
    other = Cache(l2=cache.l2)  # another process sharing the tier sees it
    assert run(mode, lambda: other.get("k"), lambda: other.aget("k")) == {"a": 1}
    run(mode, lambda: cache.delete("k"), lambda: cache.adelete("k"))
    assert run(mode, lambda: cache.get("k", "gone"), lambda: cache.aget("k", "gone")) == "gone"
    assert not run(mode, lambda: cache.set("bad", object()), lambda: cache.aset("bad", object()))
    assert cache.stats().extra["serialization_errors"] == 1


@pytest.mark.parametrize("l1", [True, False])
def test_get_counts_hits_and_misses(mode: str, l1: bool) -> None:
    cache = Cache(l2=MemoryTier(), l1=l1)
    run(mode, lambda: cache.set("k", 1), lambda: cache.aset("k", 1))
    assert run(mode, lambda: cache.get("k"), lambda: cache.aget("k")) == 1
    assert run(mode, lambda: cache.get("x"), lambda: cache.aget("x")) is None
    assert run(mode, lambda: cache.get("y"), lambda: cache.aget("y")) is None
    stats = cache.stats()
    assert (stats.hits, stats.misses) == (1, 2)
    assert stats.hit_rate == pytest.approx(1 / 3)


def test_get_set_expire_by_ttl(mode: str) -> None:
    clock = ManualClock()
    cache = Cache(l2=MemoryTier(clock=clock), clock=clock)
    run(mode, lambda: cache.set("k", 1, ttl=5), lambda: cache.aset("k", 1, ttl=5))
    clock.advance(6)
    assert run(mode, lambda: cache.get("k"), lambda: cache.aget("k")) is None


def test_shared_tier_down_costs_a_miss(mode: str, redis_server: RedisServer) -> None:
    cache = Cache(redis_url=redis_server.url, l1=False, breaker_failures=100)
    assert run(mode, lambda: cache.set("k", 1), lambda: cache.aset("k", 1))
    redis_server.kill()
    assert run(mode, lambda: cache.get("k", "miss"), lambda: cache.aget("k", "miss")) == "miss"
    assert run(mode, lambda: cache.set("k", 2), lambda: cache.aset("k", 2))  # serializable
    run(mode, lambda: cache.delete("k"), lambda: cache.adelete("k"))
    assert cache.stats().tiers["l2"].errors >= 3
    cache.close()


# ---------------------------------------------------------------------------- namespace


def test_invalidate_namespace(mode: str, redis_server: RedisServer) -> None:
    a = Cache(redis_url=redis_server.url, namespace="inv")
    b = Cache(redis_url=redis_server.url, namespace="inv", version_refresh_s=0)
    assert run(mode, lambda: a.set("k", 1), lambda: a.aset("k", 1))
    assert run(mode, lambda: b.get("k"), lambda: b.aget("k")) == 1
    assert run(mode, a.invalidate_namespace, a.ainvalidate_namespace)
    assert a.version == 1
    assert run(mode, lambda: a.get("k"), lambda: a.aget("k")) is None
    assert run(mode, lambda: b.get("k"), lambda: b.aget("k")) is None  # b read the new version
    assert b.version == 1
    a.close()
    b.close()


def test_invalidate_namespace_without_shared_tier(mode: str) -> None:
    cache = Cache()
    cache.set("k", 1)
    assert run(mode, cache.invalidate_namespace, cache.ainvalidate_namespace)
    assert cache.version == 1 and cache.get("k") is None


def test_invalidate_namespace_fails_with_a_warning(
    mode: str, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    cache = Cache(redis_url=redis_server.url)
    redis_server.kill()
    with caplog.at_level(logging.WARNING, logger="cachekit"):
        assert not run(mode, cache.invalidate_namespace, cache.ainvalidate_namespace)
    assert cache.version == 0
    assert any("could not bump namespace" in r.getMessage() for r in caplog.records)
    cache.close()


# ---------------------------------------------------------------------------- decorator


def test_decorator_refresh_recomputes_and_stores(mode: str) -> None:
    cache = Cache()
    n = [0]

    def body(x: int) -> int:
        n[0] += 1
        return x * 100 + n[0]

    f = decorate(mode, cache.cached, body)
    assert call(mode, f, 1) == 101
    assert call(mode, f, 1) == 101
    misses = cache.stats().misses
    assert call(mode, f.refresh, 1) == 102  # runs even though the entry is fresh
    assert call(mode, f, 1) == 102  # ... and stores what it computed
    assert n[0] == 2 and cache.stats().misses == misses  # a refresh is not a miss


def test_stale_hit_served_from_redis_then_refreshed(mode: str, redis_server: RedisServer) -> None:
    clock = ManualClock()
    cache = Cache(redis_url=redis_server.url, l1=False, clock=clock)
    n = [0]

    def body(x: int) -> int:
        n[0] += 1
        return n[0]

    f = decorate(mode, cache.cached(ttl=1, stale_ttl=10), body)
    assert call(mode, f, 1) == 1
    clock.advance(2)
    looked = call(mode, f.lookup, 1)
    assert looked.status is Status.STALE and looked.tier == "l2" and looked.value == 1
    if mode == "sync":
        assert f(1) == 1  # served stale; one refresh starts in the background
        wait_until(lambda: not cache.refreshing())
    else:

        async def stale_then_refreshed() -> None:
            assert await f(1) == 1
            deadline = time.monotonic() + 10
            while cache.refreshing():
                assert time.monotonic() < deadline, "refresh did not finish"
                await asyncio.sleep(0.005)  # polling interval

        asyncio.run(stale_then_refreshed())
    assert n[0] == 2
    assert call(mode, f.lookup, 1).status is Status.HIT
    assert call(mode, f, 1) == 2
    assert cache.stats().stale_hits >= 1 and cache.stats().extra["refreshes"] == 1
    cache.close()


def test_concurrent_misses_compute_once(mode: str) -> None:
    cache = Cache()
    gate = Gate()
    calls: list[int] = []

    def body(x: int) -> int:
        calls.append(x)
        gate.hold()
        return x + 1

    f = decorate(mode, cache.cached, body)
    assert start_then_release(mode, f, 1, 8, cache, gate) == [2] * 8
    assert calls == [1]
    stats = cache.stats()
    assert stats.misses == 1 and stats.extra["singleflight_waits"] == 7


def test_waiters_share_the_leaders_exception(mode: str) -> None:
    cache = Cache()
    gate = Gate()
    calls: list[int] = []

    def body(x: int) -> int:
        calls.append(x)
        gate.hold()
        raise ValueError(f"failed {len(calls)}")

    f = decorate(mode, cache.cached, body)
    outcomes = start_then_release(mode, f, 1, 6, cache, gate)
    assert all(isinstance(o, ValueError) and str(o) == "failed 1" for o in outcomes)
    assert calls == [1]  # the waiters did not run the function again
    assert call(mode, f.lookup, 1).status is Status.MISS  # nothing cached
    with pytest.raises(ValueError, match="failed 2"):
        call(mode, f, 1)  # the next call tries again


# ---------------------------------------------------------------------------- semantic


def semantic_test_embedder() -> Any:
    """A model-free embedder for the semantic tier; skips the test on an install without the
    semantic extra (numpy and faiss), such as a base install."""
    pytest.importorskip("numpy")
    pytest.importorskip("faiss")
    from cachekit.testing.embedders import DeterministicTestEmbedder

    return DeterministicTestEmbedder()


def test_semantic_concurrent_identical_calls_share_one_run(mode: str) -> None:
    embedder = semantic_test_embedder()
    cache = Cache()
    gate = Gate()
    calls: list[str] = []

    def body(prompt: str) -> str:
        calls.append(prompt)
        gate.hold()
        return f"answer to {prompt}"

    f = decorate(mode, cache.semantic(threshold=0.9, embedder=embedder), body)
    try:
        outcomes = start_then_release(mode, f, STORED, 5, cache, gate)
        assert outcomes == [f"answer to {STORED}"] * 5
        assert calls == [STORED]
        assert cache.stats().extra["singleflight_waits"] == 4
        # the stored entry answers a paraphrase too
        assert call(mode, f.lookup, CLOSE).status is Status.SEMANTIC_HIT
    finally:
        f.close()
        cache.close()


def test_semantic_waiters_share_the_leaders_exception(mode: str) -> None:
    embedder = semantic_test_embedder()
    cache = Cache()
    gate = Gate()
    calls: list[str] = []

    def body(prompt: str) -> str:
        calls.append(prompt)
        gate.hold()
        raise RuntimeError("upstream failed")

    f = decorate(mode, cache.semantic(threshold=0.9, embedder=embedder), body)
    try:
        outcomes = start_then_release(mode, f, STORED, 4, cache, gate)
        assert all(isinstance(o, RuntimeError) for o in outcomes)
        assert calls == [STORED]
        assert call(mode, f.lookup, STORED).status is Status.MISS
        assert len(f.tier) == 0  # an error is not an answer
    finally:
        f.close()
        cache.close()


# ---------------------------------------------------------------------------- feature sets


def test_feature_loads_shared_and_failures_not_cached(mode: str) -> None:
    cache = Cache()
    gate = Gate()
    calls: list[list[int]] = []
    fail = [True]

    def load(ids: list[int]) -> dict[int, int]:
        calls.append(sorted(ids))
        gate.hold()
        if fail[0]:
            raise ConnectionError("feature service down")
        return {i: i * 10 for i in ids}

    users = cache.features("user", loader=load)
    get = users.get_many if mode == "sync" else users.aget_many
    outcomes = start_then_release(mode, get, [1, 2], 3, cache, gate)
    assert all(isinstance(o, ConnectionError) for o in outcomes)
    assert calls == [[1, 2]]
    fail[0] = False
    assert run(mode, lambda: users.get_many([1, 2]), lambda: users.aget_many([1, 2])) == {
        1: 10,
        2: 20,
    }
    assert calls == [[1, 2], [1, 2]]


# ---------------------------------------------------------------------------- engine batch


def test_lookup_many_answers_from_l1_then_one_shared_read(mode: str) -> None:
    tier = MemoryTier()
    writer = Cache(l2=tier)._engine
    key = writer.make_key("kv", "_", "a")
    assert run(
        mode,
        lambda: writer.store_many([(key, "A", 60.0, 0.0, None)]),
        lambda: writer.astore_many([(key, "A", 60.0, 0.0, None)]),
    ) == [True]
    reader = Cache(l2=tier)._engine  # another process: its L1 is empty
    keys = [reader.make_key("kv", "_", name) for name in ("a", "b")]
    found = run(mode, lambda: reader.lookup_many(keys), lambda: reader.alookup_many(keys))
    assert [(f.status, f.tier) for f in found] == [(Status.HIT, "l2"), (Status.MISS, None)]
    assert found[1] is not MISSED  # the caller's own, not the engine's shared miss
    assert found[0].env is not None and found[0].env.value == "A"
    found = run(mode, lambda: reader.lookup_many(keys), lambda: reader.alookup_many(keys))
    assert found[0].tier == "l1"  # the shared read filled L1
    run(mode, lambda: reader.delete_many(keys[:1]), lambda: reader.adelete_many(keys[:1]))
    found = run(mode, lambda: writer.lookup_many([key]), lambda: writer.alookup_many([key]))
    assert found[0].status is Status.HIT  # the writer's own L1 still has it ...
    assert tier.get_many([key.remote]) == [None]  # ... the shared tier does not


def test_lookup_lazy_builds_remote_keys_once_and_only_for_l1_misses(mode: str) -> None:
    tier = MemoryTier()
    writer = Cache(l2=tier)._engine
    keys = {n: writer.make_key("kv", "_", n, ("L", n)) for n in "abcd"}
    items = [(keys["a"], "A", 60.0, 0.0, None), (keys["b"], "B", 60.0, 0.0, None)]
    run(mode, lambda: writer.store_many(items), lambda: writer.astore_many(items))
    reader = Cache(l2=tier)._engine
    reader.store_many([(keys["c"], "C", 60.0, 0.0, None)])  # in the reader's L1 (and L2)
    prefix = reader.remote_prefix("kv", "_")
    assert prefix + "a" == keys["a"].remote
    asked: list[list[int]] = []

    def remotes_of(idx: list[int]) -> list[str]:
        asked.append(idx)
        return [prefix + "abcd"[i] for i in idx]

    locals_ = [("L", n) for n in "abcd"]
    lazy = run(
        mode,
        lambda: reader.lookup_lazy(locals_, remotes_of),
        lambda: reader.alookup_lazy(locals_, remotes_of),
    )
    assert asked == [[0, 1, 3]]  # once, for what L1 could not answer
    assert [e is not None for e in lazy.fresh] == [False, False, True, False]
    assert lazy.pending == [0, 1, 3] and lazy.remotes == [keys[n].remote for n in "abd"]
    assert [(f.status, f.tier) for f in lazy.found] == [
        (Status.HIT, "l2"),
        (Status.HIT, "l2"),
        (Status.MISS, None),
    ]
    assert lazy.found[0].env is not None and lazy.found[0].env.value == "A"
    assert not lazy.misses_only
    assert reader.l1_fresh(keys["b"]) is not None  # the shared read filled L1
    new = run(
        mode,
        lambda: reader.lookup_lazy([("L", "x"), ("L", "y")], lambda idx: ["rx", "ry"]),
        lambda: reader.alookup_lazy([("L", "x"), ("L", "y")], lambda idx: ["rx", "ry"]),
    )
    assert new.misses_only and new.found == [MISSED, MISSED] and new.fresh == [None, None]


def test_batch_keys_and_ttls_match_the_single_forms() -> None:
    engine = Cache(namespace="ns")._engine
    parts, locals_ = ["a", "b"], [("L", 1), ("L", 2)]
    assert engine.make_keys("feat", "user@v1", parts, locals_) == [
        engine.make_key("feat", "user@v1", p, lk) for p, lk in zip(parts, locals_, strict=True)
    ]
    ids, id_locals = [7, 10**20, -3], [*locals_, ("L", 3)]
    assert engine.make_id_keys("feat", "user@v1", "i", ids, id_locals) == (
        engine.make_keys("feat", "user@v1", [f"i{i}" for i in ids], id_locals)
    )
    assert engine.resolve_ttls(None, 0.0, 3) == [engine.default_ttl] * 3
    ttls = engine.resolve_ttls(100.0, 0.5, 200)
    assert len(ttls) == 200 and all(t is not None and 50.0 <= t <= 100.0 for t in ttls)
    assert len(set(ttls)) > 100  # each entry its own jitter
    with pytest.raises(ValueError):
        engine.resolve_ttls(-1.0, 0.0, 2)


def test_sync_wrapper_is_the_l1_fast_path() -> None:
    # An L1 hit of a sync decorated function runs one Python function: the engine's fast path
    # itself, with the decorated function's name and docs, not a wrapper calling it.
    cache = Cache()

    @cache.cached
    def f(x: int) -> int:
        """Doubles."""
        return 2 * x

    probe = cache._engine.l1_fast_path(
        "probe", None, lambda a, kw: a, cache._engine.telemetry.function(), lambda a, kw: None
    )
    assert f.__code__ is probe.__code__  # type: ignore[attr-defined]
    assert f.__name__ == "f" and f.__doc__ == "Doubles." and f(21) == 42 and f(21) == 42
    assert cache.stats().hits == 1
