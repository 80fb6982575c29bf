from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Hashable
from typing import Any

import pytest

from cachekit import Cache, Status
from cachekit._engine.fast_path import HIT_SAMPLE_EVERY
from cachekit.testing.clock import ManualClock, wait_until


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def test_hit_after_miss_and_signature_kept(clock: ManualClock) -> None:
    cache = Cache(clock=clock)
    calls: list[int] = []

    @cache.cached(ttl=10)
    def predict(x: int, model: str = "v1") -> int:
        """Doc."""
        calls.append(x)
        return x * 2

    assert predict(2) == 4 and predict(2) == 4 and predict(x=2, model="v1") == 4
    assert calls == [2]
    assert inspect.signature(predict) == inspect.signature(predict.__wrapped__)
    assert predict.__doc__ == "Doc." and predict.__name__ == "predict"
    s = cache.stats()
    assert (s.hits, s.misses) == (2, 1)
    assert s.tiers["l1"].hits == 2
    assert s.hit_rate == pytest.approx(2 / 3)


def test_ttl_expiry_with_injected_clock(clock: ManualClock) -> None:
    cache = Cache(clock=clock)
    calls: list[int] = []

    @cache.cached(ttl=10)
    def f(x: int) -> int:
        calls.append(x)
        return len(calls)

    assert f(1) == 1
    clock.advance(9.9)
    assert f(1) == 1
    clock.advance(0.2)
    assert f(1) == 2
    assert f.lookup(1).status is Status.HIT


def test_per_call_ttl_and_ttl_from_result(clock: ManualClock) -> None:
    cache = Cache(clock=clock)

    @cache.cached(ttl=lambda v: 1.0 if v == "short" else 100.0)
    def f(kind: str) -> str:
        return kind

    f("short")
    f("long")
    clock.advance(2)
    assert f.lookup("short").status is Status.MISS
    assert f.lookup("long").status is Status.HIT

    @cache.cached(ttl=100)
    def g(x: int) -> int:
        return x

    g.with_options(ttl=1)(5)
    clock.advance(2)
    assert g.lookup(5).status is Status.MISS


def test_jitter_only_shortens(clock: ManualClock) -> None:
    cache = Cache(clock=clock, random=lambda: 1.0)

    @cache.cached(ttl=100, jitter=0.2)
    def f(x: int) -> int:
        return x

    f(1)
    clock.advance(79)
    assert f.lookup(1).status is Status.HIT
    clock.advance(2)
    assert f.lookup(1).status is Status.MISS


def test_none_cached_only_when_asked() -> None:
    cache = Cache()
    calls: list[str] = []

    @cache.cached
    def plain(x: int) -> None:
        calls.append("plain")

    @cache.cached(cache_none=True)
    def neg(x: int) -> None:
        calls.append("neg")

    plain(1), plain(1), neg(1), neg(1)
    assert calls == ["plain", "plain", "neg"]
    assert neg.lookup(1).status is Status.HIT and neg.lookup(1).value is None


def test_exceptions_are_not_cached() -> None:
    cache = Cache()
    calls: list[int] = []

    @cache.cached
    def flaky(x: int) -> int:
        calls.append(x)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return x

    with pytest.raises(RuntimeError):
        flaky(1)
    assert flaky(1) == 1
    assert calls == [1, 1]


def test_invalidate_and_namespace(clock: ManualClock) -> None:
    cache = Cache(clock=clock)
    n = [0]

    @cache.cached
    def f(x: int) -> int:
        n[0] += 1
        return n[0]

    assert f(1) == 1 and f(2) == 2
    f.invalidate(1)
    assert f(1) == 3 and f(2) == 2
    assert cache.invalidate_namespace()
    assert f(2) == 4


def test_stale_while_revalidate_refreshes_once(clock: ManualClock) -> None:
    cache = Cache(clock=clock)
    calls: list[int] = []
    release = threading.Event()

    @cache.cached(ttl=10, stale_ttl=30)
    def f(x: int) -> int:
        calls.append(x)
        if len(calls) > 1:
            release.wait(5)
        return len(calls)

    assert f(1) == 1
    clock.advance(15)  # expired, inside the stale window
    assert [f(1) for _ in range(5)] == [1] * 5  # served stale, no caller waits
    assert cache.stats().stale_hits == 5
    release.set()
    wait_until(lambda: f.lookup(1).status is Status.HIT)
    assert f(1) == 2
    assert len(calls) == 2  # one background refresh for five stale reads
    clock.advance(100)  # past the stale window: a plain miss
    assert f.lookup(1).status is Status.MISS


def test_singleflight_50_threads() -> None:
    cache = Cache()
    calls: list[int] = []
    started = threading.Event()
    gate = threading.Event()

    @cache.cached
    def slow(x: int) -> int:
        calls.append(x)
        started.set()
        gate.wait(5)
        return x * 10

    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(slow(7))) for _ in range(50)]
    for t in threads:
        t.start()
    started.wait(5)
    # every caller has missed L1 and is queued behind the one running call
    wait_until(lambda: cache.stats().tiers["l1"].misses >= 50)
    gate.set()
    for t in threads:
        t.join(5)
    assert results == [70] * 50
    assert calls == [7]
    s = cache.stats()
    assert s.misses + s.extra["singleflight_waits"] == 50
    assert s.calls_saved >= s.extra["singleflight_waits"] >= 1


def test_singleflight_shares_the_exception() -> None:
    cache = Cache()
    calls: list[int] = []
    gate = threading.Event()

    @cache.cached
    def bad(x: int) -> int:
        calls.append(x)
        gate.wait(5)
        raise ValueError("nope")

    errors: list[BaseException] = []

    def call() -> None:
        try:
            bad(1)
        except ValueError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(10)]
    for t in threads:
        t.start()
    wait_until(lambda: len(calls) == 1)
    gate.set()
    for t in threads:
        t.join(5)
    assert len(errors) == 10
    assert len(calls) <= 10 and calls.count(1) >= 1
    # not cached: the next call runs again
    gate.set()
    with pytest.raises(ValueError):
        bad(1)


async def test_singleflight_50_tasks() -> None:
    cache = Cache()
    calls: list[int] = []
    release = asyncio.Event()

    @cache.cached
    async def slow(x: int) -> int:
        calls.append(x)
        await release.wait()  # holds the call open until every other task waits on it
        return x + 1

    tasks = [asyncio.create_task(slow(1)) for _ in range(50)]
    deadline = time.monotonic() + 10
    while cache._engine.waiting() < 49:
        assert time.monotonic() < deadline, "the other tasks never waited on the first"
        await asyncio.sleep(0)
    release.set()
    results = await asyncio.gather(*tasks)
    assert results == [2] * 50
    assert calls == [1]
    assert await slow(1) == 2
    assert (await slow.lookup(1)).status is Status.HIT


async def test_async_ttl_invalidate_and_exceptions(clock: ManualClock) -> None:
    cache = Cache(clock=clock)
    calls: list[int] = []

    @cache.cached(ttl=5)
    async def f(x: int) -> int:
        calls.append(x)
        if x < 0:
            raise ValueError
        return len(calls)

    assert await f(1) == 1 and await f(1) == 1
    clock.advance(6)
    assert await f(1) == 2
    await f.invalidate(1)
    assert await f(1) == 3
    for _ in range(2):
        with pytest.raises(ValueError):
            await f(-1)
    assert calls.count(-1) == 2


async def test_async_stale_while_revalidate(clock: ManualClock) -> None:
    cache = Cache(clock=clock)
    n = [0]

    @cache.cached(ttl=1, stale_ttl=10)
    async def f() -> int:
        n[0] += 1
        return n[0]

    assert await f() == 1
    clock.advance(2)
    assert await f() == 1
    deadline = time.monotonic() + 5
    while (await f.lookup()).status is not Status.HIT:
        assert time.monotonic() < deadline
        await asyncio.sleep(0)
    assert await f() == 2


def test_l1_bounded_by_entries_and_bytes() -> None:
    cache = Cache(l1_max_entries=10)

    @cache.cached
    def f(x: int) -> int:
        return x

    for i in range(50):
        f(i)
    assert cache.l1 is not None and len(cache.l1) == 10
    assert f.lookup(49).status is Status.HIT and f.lookup(0).status is Status.MISS

    small = Cache(l1_max_bytes=10_000)

    @small.cached
    def blob(i: int) -> bytes:
        return bytes(1000)

    for i in range(100):
        blob(i)
    assert small.l1 is not None and small.l1.currsize <= 10_000
    assert 5 <= len(small.l1) <= 10


def test_kv_api(clock: ManualClock) -> None:
    cache = Cache(clock=clock)
    assert cache.set("a", {"x": 1}, ttl=5)
    assert cache.get("a") == {"x": 1}
    clock.advance(6)
    assert cache.get("a", "gone") == "gone"
    cache.set("b", 1)
    cache.delete("b")
    assert cache.get("b") is None
    with pytest.raises(TypeError):
        cache.get(1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        cache.set("c", 1, ttl=-1)


def test_bad_configuration_is_rejected() -> None:
    with pytest.raises(ValueError):
        Cache(l1=False)
    with pytest.raises(ValueError):
        Cache(namespace="")
    cache = Cache()
    with pytest.raises(ValueError):
        cache.cached(ttl=0)(lambda: 1)
    with pytest.raises(ValueError):
        cache.cached(jitter=1.5)(lambda: 1)


def test_numpy_and_dataclass_arguments() -> None:
    np = pytest.importorskip("numpy")
    cache = Cache()
    calls: list[int] = []

    @cache.cached
    def score(v: object) -> float:
        calls.append(1)
        return float(np.sum(v))

    a = np.ones(4, dtype=np.float32)
    score(a), score(a.copy()), score(np.ones(4, dtype=np.float64))
    assert len(calls) == 2


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_unkeyable_argument_is_a_type_error_naming_its_parameter(mode: str) -> None:
    cache = Cache()
    loop: list[object] = []
    loop.append(loop)

    if mode == "sync":

        @cache.cached
        def f(x: int, options: object = None) -> int:
            return x

        @cache.cached(key=lambda x: (x, object()))
        def g(x: int) -> int:
            return x

        call = lambda fn, *a, **kw: fn(*a, **kw)  # noqa: E731
    else:

        @cache.cached
        async def f(x: int, options: object = None) -> int:
            return x

        @cache.cached(key=lambda x: (x, object()))
        async def g(x: int) -> int:
            return x

        call = lambda fn, *a, **kw: asyncio.run(fn(*a, **kw))  # noqa: E731

    for bad in (object(), loop, 10**5000):
        with pytest.raises(TypeError, match="parameter 'options'"):
            call(f, 1, bad)
        with pytest.raises(TypeError, match="parameter 'options'"):
            call(f, 1, options=bad)
    with pytest.raises(TypeError, match="parameter 'key'"):
        call(g, 1)
    assert call(f, 2) == 2  # and the function still works


@pytest.mark.parametrize("default", [1.5, 0.0, -0.0, float("nan")])
def test_float_arguments_beside_a_float_default_are_told_apart(default: float) -> None:
    """A float default is checked for zero and NaN once, not on every call: arguments still
    are, so 0.0 and -0.0 stay two entries whatever the default."""
    cache = Cache()
    calls: list[str] = []

    @cache.cached
    def f(x: float, *, scale: float = default) -> str:
        calls.append(repr(x))
        return f"{x!r}*{scale!r}"

    for x in (0.0, -0.0, 0.0, -0.0, 2.5, 2.5):
        assert f(x) == f"{x!r}*{default!r}"
    assert calls == ["0.0", "-0.0", "2.5"]
    assert cache.stats().hits == 3


def test_an_entry_evicted_between_a_hit_and_its_timing_read_is_still_served() -> None:
    """The sampled hit reads its entry a second time to time the read; an entry evicted in
    between (by another thread) leaves the hit as it was, never a KeyError."""
    cache = Cache()
    l1 = cache._engine.l1
    assert l1 is not None
    real_read = l1.getitem
    armed = threading.Event()
    armed_reads: list[object] = []

    def evicted_at_the_second_read(key: Hashable) -> Any:
        if armed.is_set():
            armed_reads.append(key)
            if len(armed_reads) == 2:
                raise KeyError(key)
        return real_read(key)

    l1.getitem = evicted_at_the_second_read

    @cache.cached
    def f(x: int) -> int:
        return x * 10

    assert f(3) == 30  # a miss, then the store
    for _ in range(HIT_SAMPLE_EVERY - 1):
        assert f(3) == 30
    armed.set()  # the next hit is the sampled one: its second read finds the entry gone
    assert f(3) == 30
    assert len(armed_reads) == 2 and cache.stats().hits == HIT_SAMPLE_EVERY


def test_keyword_calls_share_entries_and_keep_signed_zeros_apart() -> None:
    """Calls with keyword arguments are keyed on the hit path too: f(1, 2.5) and f(1, y=2.5)
    are one entry, and a zero given by keyword is told from the other zero."""
    cache = Cache()
    calls: list[str] = []

    @cache.cached
    def f(x: int, y: float = 1.5, *, z: float = 2.5) -> str:
        calls.append(f"{x!r},{y!r},{z!r}")
        return calls[-1]

    assert f(1, 2.5) == f(1, y=2.5) == f(y=2.5, x=1) == "1,2.5,2.5"
    assert f(1, z=0.0) == "1,1.5,0.0" and f(1, z=-0.0) == "1,1.5,-0.0"
    assert f(1, y=0.0) == "1,0.0,2.5" and f(1, y=-0.0) == "1,-0.0,2.5"
    assert f(1, z=0.0) == "1,1.5,0.0" and f(1, y=-0.0) == "1,-0.0,2.5"
    assert len(calls) == 5
    hits = cache.stats().hits
    assert f(x=1, y=2.5) == "1,2.5,2.5" and cache.stats().hits == hits + 1


def test_a_signed_zero_default_is_not_its_other_zero() -> None:
    """f(1) with a -0.0 default and f(1, 0.0) are two entries: a zero default sends the call
    to the checked key, like a zero argument."""
    cache = Cache()
    calls: list[str] = []

    @cache.cached
    def f(x: int, scale: float = -0.0) -> str:
        calls.append(repr(scale))
        return repr(scale)

    assert [f(1), f(1, 0.0), f(1), f(1, 0.0), f(1, -0.0)] == ["-0.0", "0.0", "-0.0", "0.0", "-0.0"]
    assert calls == ["-0.0", "0.0"]


def test_fast_path_hits_sample_the_l1_read_latency() -> None:
    cache = Cache()

    @cache.cached
    def f(x: int, tag: str = "a") -> int:
        return x

    for _ in range(1 + 3 * HIT_SAMPLE_EVERY):
        f(1)
    l1 = cache.stats().tiers["l1"]
    assert l1.hits == 3 * HIT_SAMPLE_EVERY
    assert l1.latency.count == 3 and l1.latency.max_ms is not None


def test_float_arguments_hit_by_bits_through_the_fast_path() -> None:
    cache = Cache()
    calls: list[float] = []

    @cache.cached
    def f(x: float, tag: str = "a") -> str:
        calls.append(x)
        return repr(x)

    for x in (0.5, 0.5, -0.0, 0.0, -0.0, float("nan"), float("nan"), 2.5):
        f(x)
    assert f(0.0) == "0.0" and f(-0.0) == "-0.0"
    assert [repr(c) for c in calls] == ["0.5", "-0.0", "0.0", "nan", "2.5"]
    assert f.lookup(0.5).tier == "l1" and f(0.5, "a") == "0.5"
    hits = cache.stats().hits
    f(0.5)
    assert cache.stats().hits == hits + 1
