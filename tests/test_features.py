from __future__ import annotations

import asyncio
import collections
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis_servers import RedisServer

from cachekit import Cache
from cachekit.backends.memory import MemoryTier
from cachekit.features import FeatureBatch, FeatureResult, PartialLoadError
from cachekit.testing.clock import ManualClock, wait_until


async def async_wait_until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.001)


class Loader:
    """A feature source that records every call; ids in ``missing`` do not exist."""

    def __init__(self, missing: frozenset[Any] = frozenset()) -> None:
        self.calls: list[list[Any]] = []
        self.missing = missing
        self.version = 1

    def __call__(self, ids: list[Any]) -> dict[Any, Any]:
        self.calls.append(list(ids))
        return {i: {"id": i, "v": self.version} for i in ids if i not in self.missing}

    @property
    def seen(self) -> list[Any]:
        return [i for call in self.calls for i in call]


class CountingGets:
    """Wraps a storage tier's get_many/aget_many to count shared-tier round trips."""

    def __init__(self, cache: Cache) -> None:
        tier: Any = cache.l2
        self.calls: list[list[str]] = []
        inner, ainner = tier.get_many, getattr(tier, "aget_many", None)

        inside_async = [False]  # MemoryTier.aget_many calls get_many: count it once

        def get_many(keys: list[str]) -> Any:
            if not inside_async[0]:
                self.calls.append(list(keys))
            return inner(keys)

        async def aget_many(keys: list[str]) -> Any:
            self.calls.append(list(keys))
            assert ainner is not None
            inside_async[0] = True
            try:
                return await ainner(keys)
            finally:
                inside_async[0] = False

        tier.get_many = get_many
        tier.aget_many = aget_many

    def data_calls(self) -> list[list[str]]:
        return [c for c in self.calls if not any(k.endswith("__version__") for k in c)]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory", "redis"])
def make_cache(request: pytest.FixtureRequest) -> Iterator[Callable[..., Cache]]:
    """Caches sharing one L2 (an in-process tier, or a real Redis started for the test), each
    with its own empty L1: what two processes of one service see."""
    made: list[Cache] = []
    if request.param == "memory":
        tier = MemoryTier()

        def make(**kw: Any) -> Cache:
            made.append(Cache(l2=tier, namespace="feat-test", **kw))
            return made[-1]
    else:
        server: RedisServer = request.getfixturevalue("redis_server")

        def make(**kw: Any) -> Cache:
            # Roomy timeouts: these tests are about sharing, and a loaded machine must not
            # turn a write into a (correctly) fail-open miss.
            kw.setdefault("redis_timeout", 2.0)
            made.append(Cache(redis_url=server.url, namespace="feat-test", **kw))
            return made[-1]

    yield make
    for c in made:
        c.close()


# ---------------------------------------------------------------------- tiers and batching


def test_partial_hits_across_tiers_one_round_trip_one_loader_call(
    make_cache: Callable[..., Cache],
) -> None:
    writer, reader = make_cache(), make_cache()
    assert writer.features("user", loader=Loader()).prime({i: {"id": i} for i in (1, 2, 3, 4)}) == 4
    load = Loader()
    users = reader.features("user", loader=load, ttl=60)
    users.prime({1: {"id": 1}, 2: {"id": 2}})  # in the reader's L1 too
    gets = CountingGets(reader)

    got = users.get_many([1, 2, 3, 4, 5, 6])

    assert list(got) == [1, 2, 3, 4, 5, 6]
    assert got[3] == {"id": 3} and got[6] == {"id": 6, "v": 1}
    assert load.calls == [[5, 6]]  # ONE loader call, only for what neither tier had
    data = gets.data_calls()
    assert len(data) == 1 and len(data[0]) == 4  # one L2 round trip, for the 4 L1 misses
    s = users.stats()
    assert (s["l1"], s["l2"], s["loaded"], s["loader_calls"]) == (2, 2, 2, 1)
    # everything is now in the reader's L1: no round trip, no load
    assert users.get_many([6, 5, 4, 3, 2, 1]) == {i: got[i] for i in (6, 5, 4, 3, 2, 1)}
    assert len(gets.data_calls()) == 1 and load.calls == [[5, 6]]


async def test_async_partial_hits_across_tiers(make_cache: Callable[..., Cache]) -> None:
    writer, reader = make_cache(), make_cache()
    assert await writer.features("item", loader=Loader()).aprime({1: "a", 2: "b"}) == 2
    calls: list[list[int]] = []

    async def load(ids: list[int]) -> dict[int, str]:
        calls.append(ids)
        return {i: f"loaded-{i}" for i in ids}

    items = reader.features("item", loader=load)
    await items.aprime({3: "c"})
    gets = CountingGets(reader)
    got = await items.aget_many([3, 2, 1, 4, 4])
    assert got == {3: "c", 2: "b", 1: "a", 4: "loaded-4"} and list(got) == [3, 2, 1, 4]
    assert calls == [[4]]
    assert len(gets.data_calls()) == 1
    assert await items.aget(4) == "loaded-4" and calls == [[4]]


def test_duplicates_fetched_once_and_order_follows_request() -> None:
    load = Loader()
    users = Cache().features("user", loader=load)
    got = users.get_many([3, 1, 3, 2, 1, 3])
    assert list(got) == [3, 1, 2]
    assert load.calls == [[3, 1, 2]]
    s = users.stats()
    assert (s["requested"], s["unique"]) == (6, 3)
    assert list(users.get_many(x for x in (2, 9, 2, 3))) == [2, 9, 3]
    assert load.calls == [[3, 1, 2], [9]]
    assert users.get_many([]) == {} and len(load.calls) == 2


def test_ids_are_typed() -> None:
    load = Loader()
    cache = Cache()
    users = cache.features("user", loader=load)
    got = users.get_many([1, "1", (1, 2), (1.0, 2), b"1", 1.5])
    assert load.calls == [[1, "1", (1, 2), (1.0, 2), b"1", 1.5]]
    assert got[1] == {"id": 1, "v": 1} and got["1"] == {"id": "1", "v": 1}
    assert users.cache_key(1) != users.cache_key("1") != users.cache_key(True)
    assert users.cache_key(1).endswith(":feat:user@v1:i1")
    users.get_many([1, "1", (1, 2), (1.0, 2), b"1", 1.5])
    assert len(load.calls) == 1


def test_max_batch_splits_loader_calls() -> None:
    load = Loader()
    users = Cache().features("user", loader=load, max_batch=4)
    assert len(users.get_many(range(10))) == 10
    assert load.calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


# ---------------------------------------------------------------------- negative caching


def test_negative_caching_with_ttl(clock: ManualClock) -> None:
    load = Loader(missing=frozenset({2, 4}))
    cache = Cache(clock=clock)
    users = cache.features("user", loader=load, ttl=100, negative_ttl=10, jitter=0)
    assert list(users.get_many([1, 2, 3, 4])) == [1, 3]
    assert users.get(2) is None and users.get(2, "none") == "none"
    assert load.calls == [[1, 2, 3, 4]]  # absent ids are remembered as absent
    assert users.stats()["negative_hits"] == 2
    load.missing = frozenset()
    clock.advance(10.5)  # past the negative TTL, well inside the positive one
    assert list(users.get_many([1, 2, 3, 4])) == [1, 2, 3, 4]
    assert load.calls == [[1, 2, 3, 4], [2, 4]]


def test_cached_none_is_not_a_negative_entry(make_cache: Callable[..., Cache]) -> None:
    calls: list[list[int]] = []

    def load(ids: list[int]) -> dict[int, Any]:
        calls.append(ids)
        return {1: None}

    users = make_cache().features("user", loader=load)
    assert users.get_many([1, 2]) == {1: None}
    other = make_cache().features("user", loader=load)  # served from L2 this time
    got = other.get_many([1, 2])
    assert got == {1: None} and 2 not in got
    assert calls == [[1, 2]]
    assert other.stats()["negative_hits"] == 1  # telemetry is per cache


def test_negative_ttl_zero_disables_negative_entries() -> None:
    load = Loader(missing=frozenset({2}))
    users = Cache().features("user", loader=load, negative_ttl=0)
    users.get_many([1, 2])
    users.get_many([1, 2])
    assert load.calls == [[1, 2], [2]]


def test_invalidate_and_prime(clock: ManualClock) -> None:
    load = Loader(missing=frozenset({3}))
    users = Cache(clock=clock).features("user", loader=load)
    users.prime({7: {"id": 7, "v": 0}})
    assert users.get(7) == {"id": 7, "v": 0} and load.calls == []
    users.get_many([1, 3])
    load.missing = frozenset()
    users.invalidate([1, 3, 7])
    assert users.get_many([1, 3, 7]) == {i: {"id": i, "v": 1} for i in (1, 3, 7)}
    assert load.calls == [[1, 3], [1, 3, 7]]


# ---------------------------------------------------------------------- concurrency


@pytest.mark.parametrize("write_behind", [False, True])
def test_overlapping_threads_share_in_flight_loads(write_behind: bool) -> None:
    calls: list[list[int]] = []
    gate = threading.Event()

    def load(ids: list[int]) -> dict[int, int]:
        calls.append(list(ids))
        gate.wait(5)
        return {i: i * 10 for i in ids}

    cache = Cache()
    users = cache.features("user", loader=load, write_behind=write_behind)
    results: dict[str, FeatureBatch] = {}
    t1 = threading.Thread(target=lambda: results.update(a=users.get_many(range(10))))
    t2 = threading.Thread(target=lambda: results.update(b=users.get_many(range(5, 15))))
    t3 = threading.Thread(target=lambda: results.update(c=users.get_many([3, 12])))
    t1.start()
    wait_until(lambda: len(calls) == 1)
    t2.start()
    wait_until(lambda: len(calls) == 2)  # t2 is loading 10..14 and waiting on t1 for 5..9
    t3.start()
    wait_until(lambda: users.stats()["shared"] == 7)  # t3 waits on both, loads nothing
    gate.set()
    for t in (t1, t2, t3):
        t.join(5)
    assert calls == [list(range(10)), list(range(10, 15))]  # the loader saw each id once
    assert results["a"] == {i: i * 10 for i in range(10)}
    assert results["b"] == {i: i * 10 for i in range(5, 15)} and list(results["b"]) == list(
        range(5, 15)
    )
    assert results["c"] == {3: 30, 12: 120}
    assert cache.stats().extra["singleflight_waits"] == 7
    assert users.flush(5.0)
    assert users.get_many(range(15)) == {i: i * 10 for i in range(15)} and len(calls) == 2


def test_waiters_share_the_leaders_exception() -> None:
    calls: list[list[int]] = []
    gate = threading.Event()

    def load(ids: list[int]) -> dict[int, int]:
        calls.append(list(ids))
        gate.wait(5)
        raise ConnectionError("feature store down")

    users = Cache().features("user", loader=load)
    errors: list[BaseException] = []

    def call(ids: list[int]) -> None:
        try:
            users.get_many(ids)
        except ConnectionError as exc:
            errors.append(exc)

    t1 = threading.Thread(target=call, args=([1, 2],))
    t1.start()
    wait_until(lambda: len(calls) == 1)
    t2 = threading.Thread(target=call, args=([2],))
    t2.start()
    wait_until(lambda: users.stats()["shared"] == 1)
    gate.set()
    t1.join(5)
    t2.join(5)
    assert len(errors) == 2 and calls == [[1, 2]]
    assert users.stats()["loader_errors"] == 1


async def test_overlapping_tasks_share_in_flight_loads() -> None:
    calls: list[list[int]] = []
    gate = asyncio.Event()

    async def load(ids: list[int]) -> dict[int, int]:
        calls.append(list(ids))
        await gate.wait()
        return {i: -i for i in ids}

    users = Cache().features("user", loader=load)
    t1 = asyncio.create_task(users.aget_many(range(10)))
    await async_wait_until(lambda: len(calls) == 1)
    t2 = asyncio.create_task(users.aget_many(range(5, 15)))
    t3 = asyncio.create_task(users.aget_many([9, 9, 14]))
    await async_wait_until(lambda: len(calls) == 2 and users.stats()["shared"] == 7)
    gate.set()
    a, b, c = await asyncio.gather(t1, t2, t3)
    assert calls == [list(range(10)), list(range(10, 15))]
    assert a == {i: -i for i in range(10)} and b == {i: -i for i in range(5, 15)}
    assert c == {9: -9, 14: -14}


async def test_cancelled_leader_hands_its_ids_over() -> None:
    calls: list[list[int]] = []
    gate = asyncio.Event()

    async def load(ids: list[int]) -> dict[int, int]:
        calls.append(list(ids))
        if len(calls) == 1:
            await gate.wait()
        return {i: i for i in ids}

    users = Cache().features("user", loader=load)
    leader = asyncio.create_task(users.aget_many([1, 2]))
    await async_wait_until(lambda: len(calls) == 1)
    follower = asyncio.create_task(users.aget_many([2, 3]))
    await async_wait_until(lambda: users.stats()["shared"] == 1)
    leader.cancel()
    assert await follower == {2: 2, 3: 3}
    assert sorted(map(sorted, calls)) == [[1, 2], [2], [3]]


class Interrupted(BaseException):
    """Stops a thread the way KeyboardInterrupt or SystemExit would: not an error."""


def test_interrupted_leader_hands_its_ids_over_to_waiting_threads() -> None:
    # The thread form of test_cancelled_leader_hands_its_ids_over: the waiter loads the ids
    # itself instead of receiving the leader's interruption.
    calls: list[list[int]] = []
    inside, release = threading.Event(), threading.Event()

    def load(ids: list[int]) -> dict[int, int]:
        calls.append(list(ids))
        if len(calls) == 1:
            inside.set()
            assert release.wait(30)
            raise Interrupted
        return {i: i for i in ids}

    users = Cache().features("user", loader=load)
    leader_saw: list[BaseException] = []

    def lead() -> None:
        try:
            users.get_many([1, 2])
        except Interrupted as exc:
            leader_saw.append(exc)

    t = threading.Thread(target=lead)
    t.start()
    assert inside.wait(10)
    got: list[dict[int, int]] = []
    follower = threading.Thread(target=lambda: got.append(users.get_many([2, 3])))
    follower.start()
    wait_until(lambda: users.stats()["shared"] == 1)
    release.set()
    t.join(10)
    follower.join(10)
    assert len(leader_saw) == 1  # the leader itself is interrupted
    assert got == [{2: 2, 3: 3}]
    assert sorted(map(sorted, calls)) == [[1, 2], [2], [3]]


async def test_sync_loader_runs_off_the_event_loop() -> None:
    loop_thread = threading.get_ident()
    threads: list[int] = []

    def load(ids: list[int]) -> dict[int, int]:
        threads.append(threading.get_ident())
        return {i: i for i in ids}

    users = Cache().features("user", loader=load)
    assert await users.aget_many([1, 2]) == {1: 1, 2: 2}
    assert threads and threads[0] != loop_thread


def test_async_loader_from_sync_code() -> None:
    async def load(ids: list[int]) -> dict[int, int]:
        await asyncio.sleep(0)
        return {i: i + 1 for i in ids}

    users = Cache().features("user", loader=load)
    assert users.get_many([1, 2]) == {1: 2, 2: 3}


async def test_async_loader_from_sync_code_inside_a_loop_is_refused() -> None:
    async def load(ids: list[int]) -> dict[int, int]:
        return {}

    users = Cache().features("user", loader=load)
    with pytest.raises(TypeError, match="aget_many"):
        users.get_many([1])


# ---------------------------------------------------------------------- versions, TTLs


def test_version_bump_retires_every_old_entry(make_cache: Callable[..., Cache]) -> None:
    load = Loader()
    cache = make_cache()
    v1 = cache.features("user", loader=load, version=1)
    v1.get_many([1, 2, 3])
    load.version = 2
    v2 = make_cache().features("user", loader=load, version=2)
    assert v2.get_many([1, 2, 3]) == {i: {"id": i, "v": 2} for i in (1, 2, 3)}
    assert load.calls == [[1, 2, 3], [1, 2, 3]]
    assert v1.get(1) == {"id": 1, "v": 1}  # old readers keep their own entries until they expire
    assert v1.cache_key(1) != v2.cache_key(1)


def test_stale_while_revalidate_refreshes_each_id_once(clock: ManualClock) -> None:
    load = Loader()
    gate = threading.Event()
    refresh_calls: list[list[int]] = []

    def slow_load(ids: list[int]) -> dict[int, Any]:
        if load.calls:
            refresh_calls.append(list(ids))
            gate.wait(5)
        return load(ids)

    cache = Cache(clock=clock)
    users = cache.features("user", loader=slow_load, ttl=10, stale_ttl=30, jitter=0)
    users.get_many([1, 2])
    load.version = 2
    clock.advance(15)  # expired, inside the stale window
    for _ in range(5):  # served stale at once; one background load for both ids
        assert users.get_many([1, 2]) == {i: {"id": i, "v": 1} for i in (1, 2)}
    wait_until(lambda: len(refresh_calls) == 1)
    assert users.stats()["stale"] == 10
    gate.set()
    wait_until(lambda: not cache.refreshing())
    assert users.get_many([1, 2]) == {i: {"id": i, "v": 2} for i in (1, 2)}
    assert refresh_calls == [[1, 2]] and len(load.calls) == 2
    clock.advance(100)  # past the stale window: a plain miss, loaded in the request
    users.get_many([1])
    assert load.calls[-1] == [1] and len(load.calls) == 3


async def test_async_stale_while_revalidate(clock: ManualClock) -> None:
    load = Loader()
    cache = Cache(clock=clock)
    users = cache.features("user", loader=load, ttl=1, stale_ttl=10, jitter=0)
    await users.aget_many([1])
    load.version = 2
    clock.advance(2)
    assert await users.aget(1) == {"id": 1, "v": 1}
    await async_wait_until(lambda: not cache.refreshing())
    assert await users.aget(1) == {"id": 1, "v": 2}
    assert load.calls == [[1], [1]]


def test_jitter_spreads_expiry_and_only_shortens(clock: ManualClock) -> None:
    draws = itertools.cycle([0.0, 0.5, 0.99])
    cache = Cache(clock=clock, random=lambda: next(draws))
    load = Loader()
    users = cache.features("user", loader=load, ttl=100, jitter=0.5)
    users.get_many([1, 2, 3])  # TTLs 100, 75, 50.5
    clock.advance(50)
    users.get_many([1, 2, 3])
    assert len(load.calls) == 1
    clock.advance(1)
    users.get_many([1, 2, 3])
    assert load.calls[1] == [3]
    clock.advance(25)  # t=76
    users.get_many([1, 2])
    assert load.calls[2] == [2]


# ---------------------------------------------------------------------- failures


def test_redis_killed_mid_run_serves_from_l1_and_loader(redis_server: RedisServer) -> None:
    load = Loader()
    cache = Cache(redis_url=redis_server.url, redis_timeout=0.05)
    users = cache.features("user", loader=load)
    users.get_many(range(10))
    redis_server.kill()
    got = users.get_many(range(20))  # no exception from the cache
    assert got == {i: {"id": i, "v": 1} for i in range(20)}
    assert load.calls == [list(range(10)), list(range(10, 20))]
    assert users.get_many(range(20)) == got and len(load.calls) == 2  # L1 kept the loads
    users.invalidate([1])
    users.prime({1: "primed"})
    assert users.get(1) == "primed"
    assert cache.stats().tiers["l2"].errors + cache.stats().tiers["l2"].skipped >= 1
    cache.close()


async def test_redis_killed_async(redis_server: RedisServer) -> None:
    load = Loader()
    cache = Cache(redis_url=redis_server.url, redis_timeout=0.05)
    users = cache.features("user", loader=load)
    await users.aget_many([1, 2])
    redis_server.kill()
    assert await users.aget_many([1, 2, 3]) == {i: {"id": i, "v": 1} for i in (1, 2, 3)}
    assert load.calls == [[1, 2], [3]]
    await users.ainvalidate([3])
    assert await users.aget(3) == {"id": 3, "v": 1}


@pytest.mark.parametrize("write_behind", [False, True])
@pytest.mark.parametrize("style", ["result", "raise"])
def test_partial_loader_failure_is_reported_not_cached(style: str, write_behind: bool) -> None:
    calls: list[list[int]] = []

    def load(ids: list[int]) -> Any:
        calls.append(ids)
        found = {i: i for i in ids if i % 2}
        failed = {i: TimeoutError(f"shard of {i}") for i in ids if i == 2}
        if style == "raise" and failed:
            raise PartialLoadError(found, failed)
        return FeatureResult(found, failed)

    users = Cache().features("user", loader=load, write_behind=write_behind)
    got = users.get_many([1, 2, 3, 4])
    assert got == {1: 1, 3: 3}
    assert list(got.failed) == [2] and isinstance(got.failed[2], TimeoutError)
    assert users.flush(10.0)
    again = users.get_many([1, 2, 3, 4])  # 4 is negatively cached, 2 is retried
    assert calls == [[1, 2, 3, 4], [2]]
    assert again == {1: 1, 3: 3} and list(again.failed) == [2]
    assert users.stats()["failed"] == 2


@pytest.mark.parametrize("write_behind", [False, True])
def test_loader_answers_of_every_shape_are_read_alike(write_behind: bool) -> None:
    # A dict holding every id (the one-pass path), a dict with other ids beside some asked
    # for, and a defaultdict (a Mapping whose [] would invent the ids it lacks).
    answers: list[Any] = [
        {1: "a", 2: "b", 3: None},
        {4: "d", 99: "x", 98: "y"},
        collections.defaultdict(lambda: "invented", {7: "g"}),
    ]

    def load(ids: list[int]) -> Any:
        return answers.pop(0)

    users = Cache().features("user", loader=load, write_behind=write_behind)
    assert users.get_many([1, 2, 3]) == {1: "a", 2: "b", 3: None}
    assert users.get_many([4, 5, 6]) == {4: "d"}
    assert users.get_many([7, 8]) == {7: "g"}
    assert users.flush(10.0)
    assert users.stats()["loaded"] == 5 and users.stats()["negative_stored"] == 3
    # stored as loaded: the next read is all hits, absent ids included
    assert users.get_many([1, 2, 3, 4, 5, 6, 7, 8]) == {1: "a", 2: "b", 3: None, 4: "d", 7: "g"}
    assert answers == []


def test_loader_exception_propagates_and_nothing_is_cached() -> None:
    calls: list[list[int]] = []
    fail = [True]

    def load(ids: list[int]) -> dict[int, int]:
        calls.append(ids)
        if fail[0]:
            raise RuntimeError("feature service 503")
        return {i: i for i in ids}

    cache = Cache()
    users = cache.features("user", loader=load)
    users.prime({1: 1})
    with pytest.raises(RuntimeError, match="503"):
        users.get_many([1, 2])
    fail[0] = False
    assert users.get_many([1, 2]) == {1: 1, 2: 2}
    assert calls == [[2], [2]]
    assert users.stats()["loader_errors"] == 1


def test_bad_ids_and_bad_loaders_raise_clear_type_errors() -> None:
    load = Loader()
    users = Cache().features("user", loader=load)
    with pytest.raises(TypeError, match="hashable"):
        users.get_many([1, [2, 3]])
    with pytest.raises(TypeError, match="cannot key"):
        users.get_many([1, object()])
    with pytest.raises(TypeError, match="list of ids"):
        users.get_many("abc")
    with pytest.raises(TypeError, match="iterable"):
        users.get_many(5)  # type: ignore[arg-type]
    assert load.calls == []  # nothing loaded for a bad request

    def returns_list(ids: list[int]) -> list[int]:
        return ids

    bad = Cache().features("thing", loader=returns_list)
    with pytest.raises(TypeError, match="returns_list"):
        bad.get_many([1])
    with pytest.raises(ValueError):
        Cache().features("a:b", loader=load)
    with pytest.raises(ValueError):
        Cache().features("user", loader=load, jitter=1.0)
    with pytest.raises(TypeError):
        Cache().features("user", loader=None)  # type: ignore[arg-type]


def test_telemetry_section() -> None:
    cache = Cache()
    users = cache.features("user", loader=Loader(missing=frozenset({3})))
    users.get_many([1, 2, 3])
    users.get_many([1, 2, 3, 3])
    section = cache.stats().extra["features:user"]
    assert section["requested"] == 7 and section["unique"] == 6
    assert section["l1"] == 3 and section["loaded"] == 2 and section["negative_hits"] == 1
    assert section["loader_calls"] == 1 and section["negative_stored"] == 1
    assert section["latency_ms"]["count"] == 2 and section["latency_ms"]["p50"] > 0
    # a new version of the same set keeps counting in the same section
    cache.features("user", loader=Loader(), version=2).get_many([1])
    assert cache.stats().extra["features:user"]["loader_calls"] == 2


# ---------------------------------------------------------------------- copy or share


def _mutate_and_reread(fs: Any, ids: list[int], form: str) -> tuple[Any, Any]:
    get = fs.get_many if form == "sync" else (lambda i: asyncio.run(fs.aget_many(i)))
    first = get(ids)
    first[ids[0]]["v"] = "changed by a caller"
    return first, get(ids)


@pytest.mark.parametrize("form", ["sync", "async"])
def test_copy_true_hands_each_caller_its_own_value(
    make_cache: Callable[..., Cache], form: str
) -> None:
    fs = make_cache().features("user", loader=Loader())
    first, again = _mutate_and_reread(fs, [1, 2], form)
    assert again[1] == {"id": 1, "v": 1} and again[1] is not first[1]


@pytest.mark.parametrize("form", ["sync", "async"])
def test_copy_false_shares_the_cached_object(make_cache: Callable[..., Cache], form: str) -> None:
    writer, reader = make_cache(), make_cache()
    writer.features("user", loader=Loader()).get_many([3])  # id 3 in the shared tier only
    fs = reader.features("user", loader=Loader(), copy=False)
    first, again = _mutate_and_reread(fs, [1, 3], form)  # 1 loaded here, 3 from the shared tier
    assert again[1] is first[1] and again[1]["v"] == "changed by a caller"
    again3 = fs.get_many([3])[3]
    assert again3 is fs.get_many([3])[3]  # filled into L1 from the shared tier, as itself


def test_copying_and_sharing_sets_of_one_name_never_share_objects() -> None:
    cache = Cache(namespace="copy-modes")
    shared = cache.features("user", loader=Loader(), copy=False)
    copying = cache.features("user", loader=Loader())
    s = shared.get_many([1])[1]
    c1, c2 = copying.get_many([1])[1], copying.get_many([1])[1]
    assert c1 == s and c1 is not s and c2 is not c1


def test_copy_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="copy and write_behind must be True or False"):
        Cache().features("user", loader=Loader(), copy="no")  # type: ignore[arg-type]


def test_replica_invalidation_reaches_batch_filled_entries(redis_server: RedisServer) -> None:
    """Entries filled into L1 by a batch (load write-back and shared-tier fill) are dropped when
    another process invalidates them."""
    a = Cache(redis_url=redis_server.url, namespace="inval-batch", redis_timeout=2.0)
    b = Cache(redis_url=redis_server.url, namespace="inval-batch", redis_timeout=2.0)
    try:
        assert a._engine.wait_following(5.0) and b._engine.wait_following(5.0)
        loader = Loader()
        fa = a.features("user", loader=loader)
        fb = b.features("user", loader=loader)
        fa.get_many(list(range(20)))  # a: loaded and written back
        fb.get_many(list(range(20)))  # b: filled from the shared tier
        assert len(loader.calls) == 1
        loader.version = 2
        fa.invalidate([3])
        wait_until(lambda: fb.get_many([3])[3]["v"] == 2, timeout=5.0)
        fb.invalidate([4])
        wait_until(lambda: fa.get_many([4])[4]["v"] == 2, timeout=5.0)
        assert fb.get_many([5])[5]["v"] == 1  # the others stay cached
    finally:
        a.close()
        b.close()


# ---------------------------------------------------------------------- write-behind


class GatedStores:
    """Holds the engine's stores (sync and async) until released: a slow write-back."""

    def __init__(self, cache: Cache) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        engine: Any = cache._engine
        sync, asyn = engine.store_many, engine.astore_many

        def store_many(items: Any, **kw: Any) -> Any:
            self.started.set()
            assert self.gate.wait(10.0)
            return sync(items, **kw)

        async def astore_many(items: Any, **kw: Any) -> Any:
            self.started.set()
            await asyncio.to_thread(self.gate.wait, 10.0)
            return await asyn(items, **kw)

        engine.store_many, engine.astore_many = store_many, astore_many


def _gated(namespace: str) -> tuple[Cache, Any, GatedStores, Loader, MemoryTier]:
    tier, loader = MemoryTier(), Loader()
    cache = Cache(l2=tier, namespace=namespace)
    fs = cache.features("user", loader=loader, write_behind=True)
    return cache, fs, GatedStores(cache), loader, tier


@pytest.mark.parametrize("form", ["sync", "async"])
def test_write_behind_returns_before_the_write_and_stores_later(form: str) -> None:
    cache, fs, gated, loader, tier = _gated(f"wb-{form}")
    try:
        if form == "sync":
            got = fs.get_many([1, 2, 3])
            assert gated.started.wait(5.0)  # the write waits: get_many returned before it
            gated.gate.set()
            assert fs.flush(5.0)
        else:

            async def run() -> Any:
                out = await fs.aget_many([1, 2, 3])
                await async_wait_until(gated.started.is_set)
                gated.gate.set()
                assert await fs.aflush(5.0)
                return out

            got = asyncio.run(run())
        assert got == {i: {"id": i, "v": 1} for i in (1, 2, 3)}
        other = Cache(l2=tier, namespace=f"wb-{form}").features("user", loader=loader)
        assert other.get_many([1, 2, 3]) == got and len(loader.calls) == 1  # from the shared tier
        assert fs.stats()["written_behind"] == 3
    finally:
        gated.gate.set()
        cache.close()


def test_write_behind_requests_meanwhile_wait_instead_of_loading_again() -> None:
    cache, fs, gated, loader, _ = _gated("wb2")
    try:
        assert fs.get_many([1, 2]) == {1: {"id": 1, "v": 1}, 2: {"id": 2, "v": 1}}
        assert gated.started.wait(5.0)
        second: list[Any] = []
        t = threading.Thread(target=lambda: second.append(fs.get_many([2, 3])))
        t.start()
        wait_until(lambda: cache._engine.waiting() >= 1, timeout=5.0)  # waits on id 2's load
        gated.gate.set()
        t.join(10.0)
        assert second == [{2: {"id": 2, "v": 1}, 3: {"id": 3, "v": 1}}]
        assert loader.seen == [1, 2, 3]  # id 2 loaded once
    finally:
        gated.gate.set()
        cache.close()


def test_write_behind_invalidate_waits_so_no_stale_write_lands_after_it() -> None:
    cache, fs, gated, loader, tier = _gated("wb3")
    try:
        fs.get_many([7])
        assert gated.started.wait(5.0)
        done = threading.Event()

        def invalidate() -> None:
            fs.invalidate([7])
            done.set()

        t = threading.Thread(target=invalidate)
        t.start()
        assert not done.wait(0.2)  # the delete waits for the pending write
        gated.gate.set()
        assert done.wait(10.0)
        t.join(10.0)
        assert tier.get_many([fs.cache_key(7)]) == [None]  # the write did not outlive it
        loader.version = 2
        assert fs.get(7) == {"id": 7, "v": 2}
    finally:
        gated.gate.set()
        cache.close()


def test_write_behind_after_close_stores_inline() -> None:
    cache = Cache(namespace="wb4")
    fs = cache.features("user", loader=Loader(), write_behind=True)
    fs.get_many([1])
    cache.close()  # finishes the pending write, then refuses new background work
    assert fs.get_many([2]) == {2: {"id": 2, "v": 1}}
    assert fs.stats()["written_behind"] == 2


def test_write_behind_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="copy and write_behind must be True or False"):
        Cache().features("user", loader=Loader(), write_behind=1)  # type: ignore[arg-type]
