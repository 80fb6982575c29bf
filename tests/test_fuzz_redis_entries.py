"""Hostile and corrupt entries in a real Redis, read through the public API: each costs a
counted miss (the function runs and its result is returned), never an exception or a crash."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis_servers import RedisServer

from cachekit import Cache, FeatureSet
from cachekit._core.serialization import SignedSerializer

ROOT = Path(__file__).resolve().parents[1]


def entry(*fields: Any) -> bytes:
    return b"m" + msgpack.packb(list(fields), use_bin_type=True)


def empty_maps(n: int) -> bytes:
    """A well-formed, fresh envelope whose value is ``n`` empty maps (one byte each)."""
    head = msgpack.packb([1, 1e12, 60.0, 0.0, None])
    return b"m\x96" + head[1:] + b"\xdd" + n.to_bytes(4, "big") + b"\x80" * n


HOSTILE = {
    # Past the decode work bound (2**20 containers): refused, not decoded into ~300 MB.
    "4 MiB of empty maps": empty_maps(4 * 2**20),
    "created_at str": entry(1, "now", 60.0, 0.0, None, "evil"),
    "created_at None": entry(1, None, 60.0, 0.0, None, "evil"),
    "ttl str": entry(1, 1e12, "60", 0.0, None, "evil"),
    "ttl list": entry(1, 1e12, [60], 0.0, None, "evil"),
    "stale_ttl nan": entry(1, 1e12, 60.0, float("nan"), None, "evil"),
    "version dict": entry(1, 1e12, 60.0, 0.0, {"v": 1}, "evil"),
    "unknown ext": b"m" + msgpack.packb([1, 1e12, 60.0, 0.0, None, msgpack.ExtType(77, b"")]),
    "not an envelope": b"m" + msgpack.packb({"a": 1}),
    "truncated": entry(1, 1e12, 60.0, 0.0, None, "evil")[:-3],
    "pickle": b"p\x80\x05N.",
    "empty": b"",
}


class Harness:
    """A cache on the test's Redis, a raw client to write what an attacker would, and a cached
    function run either sync or async."""

    def __init__(self, url: str, mode: str) -> None:
        self.cache = Cache(redis_url=url, namespace=f"t{uuid.uuid4().hex[:8]}")
        self.raw = redis.Redis.from_url(url)
        self.mode = mode
        self.calls = 0
        if mode == "sync":

            @self.cache.cached(name="f", ttl=60)
            def f(x: int) -> str:
                self.calls += 1
                return f"computed:{x}"

            self.f: Any = f
        else:

            @self.cache.cached(name="f", ttl=60)
            async def af(x: int) -> str:
                self.calls += 1
                return f"computed:{x}"

            self.f = af

    def call(self, x: int) -> Any:
        return self.f(x) if self.mode == "sync" else asyncio.run(self.f(x))

    def plant(self, x: int, data: bytes) -> None:
        self.cache.l1.clear() if self.cache.l1 is not None else None
        self.raw.set(self.f.cache_key(x), data)

    def close(self) -> None:
        self.raw.close()
        self.cache.close()


@pytest.fixture(params=["sync", "async"])
def harness(request: pytest.FixtureRequest, redis_server: RedisServer) -> Iterator[Harness]:
    h = Harness(redis_server.url, request.param)
    yield h
    h.close()


@pytest.mark.parametrize("data", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_entry_is_a_counted_miss(harness: Harness, data: bytes) -> None:
    harness.plant(1, data)
    before = harness.cache.stats().extra["serialization_errors"]
    for _ in range(3):  # and again: a bad entry must not fail later reads (L1 fill, freshness)
        assert harness.call(1) == "computed:1"
    assert harness.calls >= 1
    assert harness.cache.stats().extra["serialization_errors"] > before or data == b""


FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
field = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.lists(st.integers(0, 3), max_size=2),
)


@FUZZ
@given(fields=st.lists(field, min_size=5, max_size=7), raw=st.binary(max_size=64))
def test_random_entries_through_redis_never_raise(
    redis_server: RedisServer, fields: list[Any], raw: bytes
) -> None:
    h = Harness(redis_server.url, "sync")
    try:
        for data in (b"m" + msgpack.packb(fields), b"m" + raw):
            h.plant(1, data)
            h.call(1)  # served (if the entry is well formed) or computed: never raises
            h.call(1)
    finally:
        h.close()


def test_segfaulting_entry_in_redis_is_a_miss_in_a_reader_process(
    redis_server: RedisServer,
) -> None:
    # ExtType(1) nested 400 deep: before decoding was bounded, every reader died with SIGSEGV.
    code = textwrap.dedent(f"""
        import msgpack, redis, uuid
        from cachekit import Cache
        cache = Cache(redis_url={redis_server.url!r}, namespace="t" + uuid.uuid4().hex[:8])

        @cache.cached(name="f", ttl=60)
        def f(x):
            return "computed"

        inner = msgpack.packb(None)
        for _ in range(400):
            inner = msgpack.packb(msgpack.ExtType(1, inner))
        bomb = b"m" + msgpack.packb([1, 1e12, 60.0, 0.0, None, msgpack.ExtType(1, inner)])
        redis.Redis.from_url({redis_server.url!r}).set(f.cache_key(1), bomb)
        print(f(1), cache.stats().extra["serialization_errors"])
        cache.close()
        """)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert out.stdout.split() == ["computed", "1"]


def test_garbage_namespace_version_is_not_an_exception(harness: Harness) -> None:
    # The first call checks the version: planted before it, the garbage is read at once.
    harness.raw.set(f"ck:{harness.cache.namespace}:__version__", b"not-a-number")
    assert harness.call(1) == "computed:1"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_mutating_a_returned_value_does_not_change_the_cache(mode: str) -> None:
    cache = Cache()

    if mode == "sync":

        @cache.cached
        def f(x: int) -> list[int]:
            return [x]

        got: Callable[[], Any] = lambda: f(1)  # noqa: E731
        looked: Callable[[], Any] = lambda: f.lookup(1).value  # noqa: E731
    else:

        @cache.cached
        async def af(x: int) -> list[int]:
            return [x]

        got = lambda: asyncio.run(af(1))  # noqa: E731
        looked = lambda: asyncio.run(af.lookup(1)).value  # noqa: E731

    got().append(99)  # the miss's own result
    got().append(99)  # an L1 hit through the fast path
    looked().append(99)  # an L1 hit through lookup
    assert got() == [1] and looked() == [1]


def test_every_l1_reader_hands_out_a_copy(redis_server: RedisServer) -> None:
    writer = Cache(redis_url=redis_server.url, namespace="copy")
    reader = Cache(redis_url=redis_server.url, namespace="copy")
    try:
        writer.set("k", {"a": [1]})
        reader.get("k")["a"].append(2)  # filled L1 from the shared tier
        reader.get("k")["a"].append(3)  # an L1 hit
        assert reader.get("k") == {"a": [1]}
        feats: FeatureSet[int] = reader.features(
            "user", loader=lambda ids: {i: [i] for i in ids}, ttl=60
        )
        feats.get_many([1, 2])[1].append(9)  # loaded
        feats.get_many([1, 2])[1].append(9)  # L1 hits
        assert feats.get_many([1, 2])[1] == [1]
        frozen = (1, "a", (2.0,))
        reader.set("t", frozen)
        assert reader.get("t") is frozen  # immutable values are not copied
    finally:
        writer.close()
        reader.close()


def test_signed_entries_are_copied_on_read_too() -> None:
    cache = Cache(serializer=SignedSerializer("msgpack", b"s" * 32))

    @cache.cached
    def f(x: int) -> dict[str, list[int]]:
        return {"x": [x]}

    f(1)["x"].append(2)
    f(1)["x"].append(3)
    assert f(1) == {"x": [1]}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_signed_entry_moved_to_another_key_is_refused(
    redis_server: RedisServer, mode: str
) -> None:
    cache = Cache(
        redis_url=redis_server.url,
        namespace=f"s{mode}",
        serializer=SignedSerializer("msgpack", b"k" * 32),
    )
    raw = redis.Redis.from_url(redis_server.url)
    try:
        if mode == "sync":

            @cache.cached(ttl=60)
            def f(x: int) -> str:
                return f"computed:{x}"

            call: Callable[[int], Any] = f
        else:

            @cache.cached(ttl=60)
            async def af(x: int) -> str:
                return f"computed:{x}"

            call = lambda x: asyncio.run(af(x))  # noqa: E731
            f = af  # type: ignore[assignment]
        assert call(1) == "computed:1"
        answer = raw.get(f.cache_key(1))
        assert answer is not None
        raw.set(f.cache_key(2), answer)  # the answer for 1, under 2's key
        assert cache.l1 is not None
        cache.l1.clear()
        errors = cache.stats().extra["serialization_errors"]
        assert call(2) == "computed:2"
        assert cache.stats().extra["serialization_errors"] == errors + 1
        cache.l1.clear()
        assert call(1) == "computed:1"  # its own entry still reads
        assert cache.stats().extra["serialization_errors"] == errors + 1
    finally:
        raw.close()
        cache.close()
