"""One conformance suite for :class:`~cachekit.backends.base.SharedTier`, run against every
backend: in-process memory, a plain object with only the five required operations (wrapped by
``as_shared_tier``), Redis (plain, password, TLS) and a 3-node Redis Cluster. It covers the
optional abilities too: each backend either offers one (Redis) or shows its documented default."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import pytest

from cachekit._core.protocols import AsyncStorageTier, Entry, StorageTier
from cachekit.backends.base import PlainTier, SharedTier, as_shared_tier
from cachekit.backends.memory import MemoryTier

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("plain", id="plain"),
    pytest.param("redis", id="redis", marks=pytest.mark.redis),
    pytest.param("redis-password", id="redis-password", marks=pytest.mark.redis),
    pytest.param("redis-tls", id="redis-tls", marks=pytest.mark.redis),
    pytest.param(
        "redis-cluster", id="redis-cluster", marks=[pytest.mark.redis, pytest.mark.cluster]
    ),
]

# Generous timeouts here: this suite checks semantics, and a loaded CI box must not turn a
# 1 MiB write into a flaky timeout. The tight production defaults are tested in
# test_redis_tier.py.
_TIMEOUT = 2.0

SHORT_TTL = 0.2
LONG_TTL = 600.0
EXPIRY_DEADLINE = 5.0


class DictTier:
    """The least a user's backend needs: the five required operations, sync only, no base
    class (the StorageTier protocol). Not thread-safe beyond what the suite needs."""

    name = "dict"

    def __init__(self) -> None:
        self.data: dict[str, tuple[bytes, float | None]] = {}

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        now = time.monotonic()
        got = [self.data.get(key) for key in keys]
        return [
            v if v is not None and (t is None or t > now) else None
            for v, t in (g if g is not None else (None, None) for g in got)
        ]

    def set_many(self, entries: Sequence[Entry]) -> None:
        for key, value, ttl in entries:
            if ttl is not None and ttl <= 0:
                self.data.pop(key, None)
            else:
                self.data[key] = (value, None if ttl is None else time.monotonic() + ttl)

    def delete_many(self, keys: Sequence[str]) -> int:
        live = self.get_many(keys)
        for key in keys:
            self.data.pop(key, None)
        return len({key for key, v in zip(keys, live, strict=True) if v is not None})

    def incr(self, key: str) -> int:
        current = self.get_many([key])[0]
        value = int(current or b"0") + 1
        self.data[key] = (str(value).encode(), None)
        return value

    def close(self) -> None:
        pass


@pytest.fixture(params=BACKENDS)
def tier(request: pytest.FixtureRequest) -> Iterator[Any]:
    backend: str = request.param
    if backend == "memory":
        t: Any = MemoryTier()
    elif backend == "plain":
        t = as_shared_tier(DictTier())
    else:
        pytest.importorskip("redis")
        from cachekit.backends.redis import RedisTier

        fixture = {
            "redis": "redis_server",
            "redis-password": "redis_password_server",
            "redis-tls": "redis_tls_server",
            "redis-cluster": "redis_cluster",
        }[backend]
        server = request.getfixturevalue(fixture)
        t = RedisTier(
            server.url,
            socket_timeout=_TIMEOUT,
            connect_timeout=_TIMEOUT,
            **getattr(server, "client_kwargs", {}),
        )
    try:
        yield t
    finally:
        t.close()


@pytest.fixture
async def atier(tier: Any) -> AsyncIterator[Any]:
    """The same tier, closed on the test's own event loop afterwards."""
    yield tier
    await tier.aclose()


@pytest.fixture
def k(key_prefix: str) -> Callable[[str], str]:
    """Key maker: unique per test, because the cluster is shared by the whole session."""
    return lambda name: key_prefix + name


def _poll(predicate: Callable[[], bool], deadline_s: float) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)  # polling interval
    return predicate()


# -- sync protocol ---------------------------------------------------------------------------


def test_implements_protocols(tier: Any) -> None:
    assert isinstance(tier, SharedTier) and as_shared_tier(tier) is tier
    assert isinstance(tier, StorageTier)
    assert isinstance(tier, AsyncStorageTier)
    assert isinstance(tier.name, str) and tier.name


def test_get_many_order_and_misses(tier: Any, k: Callable[[str], str]) -> None:
    tier.set_many([(k("a"), b"1", None), (k("c"), b"3", None)])
    assert tier.get_many([k("c"), k("b"), k("a"), k("c")]) == [b"3", None, b"1", b"3"]
    assert tier.get_many([k("nope")]) == [None]


def test_set_many_overwrites(tier: Any, k: Callable[[str], str]) -> None:
    tier.set_many([(k("a"), b"old", None), (k("b"), b"keep", None)])
    tier.set_many([(k("a"), b"new", None)])
    assert tier.get_many([k("a"), k("b")]) == [b"new", b"keep"]


def test_set_many_last_write_in_batch_wins(tier: Any, k: Callable[[str], str]) -> None:
    tier.set_many([(k("a"), b"first", None), (k("a"), b"second", None)])
    assert tier.get_many([k("a")]) == [b"second"]


def test_ttl_none_persists_past_short_ttl(tier: Any, k: Callable[[str], str]) -> None:
    tier.set_many([(k("forever"), b"v", None), (k("short"), b"v", SHORT_TTL)])
    # Once the short-lived key is gone, at least its TTL has passed: the other must remain.
    assert _poll(lambda: tier.get_many([k("short")]) == [None], EXPIRY_DEADLINE)
    assert tier.get_many([k("forever")]) == [b"v"]


def test_positive_ttl_expires(tier: Any, k: Callable[[str], str]) -> None:
    start = time.monotonic()
    tier.set_many([(k("long"), b"v", LONG_TTL), (k("a"), b"v", SHORT_TTL)])
    # Readable within its TTL: asserted on an entry whose TTL no machine stall outlasts ...
    assert tier.get_many([k("long")]) == [b"v"]
    # ... and gone after it, not before.
    assert _poll(lambda: tier.get_many([k("a")]) == [None], EXPIRY_DEADLINE)
    assert time.monotonic() - start >= SHORT_TTL * 0.9
    assert tier.get_many([k("long")]) == [b"v"]


def test_overwrite_with_none_ttl_clears_expiry(tier: Any, k: Callable[[str], str]) -> None:
    tier.set_many([(k("a"), b"v1", SHORT_TTL)])
    tier.set_many([(k("a"), b"v2", None), (k("b"), b"marker", SHORT_TTL)])
    assert _poll(lambda: tier.get_many([k("b")]) == [None], EXPIRY_DEADLINE)
    assert tier.get_many([k("a")]) == [b"v2"]


@pytest.mark.parametrize("ttl", [0.0, -1.0])
def test_non_positive_ttl_not_stored(tier: Any, k: Callable[[str], str], ttl: float) -> None:
    tier.set_many([(k("fresh"), b"v", ttl)])
    assert tier.get_many([k("fresh")]) == [None]
    # An existing value is not left behind either: an expired write must not read as a hit.
    tier.set_many([(k("old"), b"old", None)])
    tier.set_many([(k("old"), b"new", ttl)])
    assert tier.get_many([k("old")]) == [None]


def test_delete_many_counts_existing(tier: Any, k: Callable[[str], str]) -> None:
    tier.set_many([(k("a"), b"1", None), (k("b"), b"2", None)])
    assert tier.delete_many([k("a"), k("missing"), k("b")]) == 2
    assert tier.get_many([k("a"), k("b")]) == [None, None]
    assert tier.delete_many([k("a")]) == 0


def test_incr_from_absent_and_repeated(tier: Any, k: Callable[[str], str]) -> None:
    assert tier.incr(k("n")) == 1
    assert [tier.incr(k("n")) for _ in range(4)] == [2, 3, 4, 5]
    assert tier.incr(k("other")) == 1


def test_binary_and_large_values(tier: Any, k: Callable[[str], str]) -> None:
    nul = b"\x00a\x00\xff\r\n\x00"
    big = uuid.uuid4().bytes * (2**20 // 16)  # 1 MiB, not compressible to a pattern check
    assert len(big) == 2**20
    tier.set_many([(k("nul"), nul, None), (k("big"), big, None), (k("empty"), b"", None)])
    assert tier.get_many([k("nul"), k("big"), k("empty")]) == [nul, big, b""]


def test_many_keys_in_one_batch(tier: Any, k: Callable[[str], str]) -> None:
    keys = [k(f"many:{i}") for i in range(1000)]
    entries = [(key, f"v{i}".encode(), 60.0 if i % 2 else None) for i, key in enumerate(keys)]
    tier.set_many(entries)
    assert tier.get_many(keys) == [v for _, v, _ in entries]
    if getattr(tier, "is_cluster", False):
        # The batch really crossed slots and nodes, so the per-node split was exercised.
        from redis.cluster import key_slot

        nodes = {tier.client.get_node_from_key(key).name for key in keys}
        assert len({key_slot(key.encode()) for key in keys}) > 100
        assert len(nodes) == 3
    assert tier.delete_many(keys) == 1000
    assert tier.get_many(keys) == [None] * 1000


def test_empty_inputs(tier: Any) -> None:
    assert tier.get_many([]) == []
    assert tier.set_many([]) is None
    assert tier.delete_many([]) == 0


def test_keys_are_not_shared_across_prefixes(tier: Any, k: Callable[[str], str]) -> None:
    # Guards the suite itself: tests sharing the cluster rely on prefixes isolating them.
    tier.set_many([(k("x"), b"mine", None)])
    assert tier.get_many(["ck-test:someone-else:x"]) == [None]


# -- async mirror ----------------------------------------------------------------------------


async def test_async_get_many_order_and_misses(atier: Any, k: Callable[[str], str]) -> None:
    await atier.aset_many([(k("a"), b"1", None), (k("c"), b"3", None)])
    assert await atier.aget_many([k("c"), k("b"), k("a")]) == [b"3", None, b"1"]


async def test_async_set_many_overwrites(atier: Any, k: Callable[[str], str]) -> None:
    await atier.aset_many([(k("a"), b"old", None), (k("b"), b"keep", None)])
    await atier.aset_many([(k("a"), b"new", None)])
    assert await atier.aget_many([k("a"), k("b")]) == [b"new", b"keep"]


async def test_async_ttls(atier: Any, k: Callable[[str], str]) -> None:
    await atier.aset_many(
        [(k("forever"), b"v", None), (k("short"), b"v", SHORT_TTL), (k("zero"), b"v", 0.0)]
    )
    assert (await atier.aget_many([k("zero")])) == [None]
    end = time.monotonic() + EXPIRY_DEADLINE
    while time.monotonic() < end and await atier.aget_many([k("short")]) != [None]:
        await asyncio.sleep(0.01)  # polling interval
    assert await atier.aget_many([k("short"), k("forever")]) == [None, b"v"]


async def test_async_delete_many_and_incr(atier: Any, k: Callable[[str], str]) -> None:
    await atier.aset_many([(k("a"), b"1", None), (k("b"), b"2", None)])
    assert await atier.adelete_many([k("a"), k("b"), k("missing")]) == 2
    assert await atier.aincr(k("n")) == 1
    assert await atier.aincr(k("n")) == 2


async def test_async_binary_large_and_many(atier: Any, k: Callable[[str], str]) -> None:
    big = b"\x00" + uuid.uuid4().bytes * (2**20 // 16)
    keys = [k(f"many:{i}") for i in range(1000)]
    await atier.aset_many([(k("big"), big, None), *((key, key.encode(), None) for key in keys)])
    assert await atier.aget_many([k("big")]) == [big]
    assert await atier.aget_many(keys) == [key.encode() for key in keys]
    assert await atier.adelete_many(keys) == 1000


async def test_async_empty_inputs(atier: Any) -> None:
    assert await atier.aget_many([]) == []
    assert await atier.aset_many([]) is None
    assert await atier.adelete_many([]) == 0


async def test_sync_and_async_see_the_same_data(atier: Any, k: Callable[[str], str]) -> None:
    atier.set_many([(k("s"), b"from-sync", None)])
    await atier.aset_many([(k("a"), b"from-async", None)])
    assert await atier.aget_many([k("s")]) == [b"from-sync"]
    assert atier.get_many([k("a")]) == [b"from-async"]


# -- optional abilities: offered, or the documented default ------------------------------------


def offers(tier: Any) -> bool:
    """Whether ``tier`` offers the optional abilities (Redis, in every deployment); the others
    show the documented defaults."""
    return tier.name == "redis"


def test_target_names_where_the_tier_points(tier: Any) -> None:
    assert isinstance(tier.target, str) and tier.target
    assert ":***@" in tier.target or "@" not in tier.target  # a password never shows


def test_incr_from_restarts_above_the_floor_or_is_incr(tier: Any, k: Callable[[str], str]) -> None:
    first = tier.incr_from(k("v"), 41, 1000, 2**52)
    assert first == (42 if offers(tier) else 1)
    assert tier.incr_from(k("v"), 0, 1000, 2**52) == first + 1
    tier.set_many([(k("bad"), b"1.5", None)])
    if offers(tier):  # a malformed counter restarts at the epoch
        assert tier.incr_from(k("bad"), 3, 1000, 2**52) == 1000


def test_raise_counter_raises_or_leaves_it(tier: Any, k: Callable[[str], str]) -> None:
    tier.incr(k("c"))
    got = tier.raise_counter(k("c"), 7)
    assert got == (7 if offers(tier) else None)
    assert tier.get_many([k("c")]) == [b"7" if offers(tier) else b"1"]
    if offers(tier):
        assert tier.raise_counter(k("c"), 3) == 7  # never lowered


def test_invalidations_are_published_and_followed_or_not(
    tier: Any, k: Callable[[str], str]
) -> None:
    got: list[bytes] = []
    subscribed = threading.Event()
    stop = tier.follow_invalidations(k("chan"), got.append, lambda: None, subscribed.set)
    assert tier.publishes_invalidations is offers(tier)
    if not offers(tier):
        assert stop is None
        tier.publish_invalidation(k("chan"), b"x")  # the default does nothing, never raises
        return
    try:
        assert subscribed.wait(10)
        tier.publish_invalidation(k("chan"), b"deleted-keys")
        assert _poll(lambda: got == [b"deleted-keys"], 10)
    finally:
        stop()


def test_semantic_store_is_offered_or_none(tier: Any, key_prefix: str) -> None:
    store = tier.semantic_store(key_prefix + "sem")
    if offers(tier):
        from cachekit.backends.semantic_store import SemanticStore  # numpy: not in a base install

        assert isinstance(store, SemanticStore) and store.shares_records
        store.close()
    else:
        assert store is None


def test_scan_keys_lists_a_prefix_once_or_is_none(tier: Any, k: Callable[[str], str]) -> None:
    # Keys with glob characters in the prefix are matched literally (never as a pattern).
    head = k("scan*[x]?:")
    mine = [f"{head}{i}" for i in range(2500)]
    tier.set_many([(key, b"v", None) for key in mine])
    tier.set_many([(k("scan-other"), b"v", None), (k("scanZ[x]?:1"), b"v", None)])
    pages = tier.scan_keys(head, 1000)
    if isinstance(tier, PlainTier):
        assert pages is None
        return
    got = [key for page in pages for key in page]
    assert sorted(got) == sorted(mine)  # each once, nothing outside the prefix
    assert all(len(page) <= 1000 for page in tier.scan_keys(head, 1000))


async def test_async_optional_abilities(atier: Any, k: Callable[[str], str]) -> None:
    first = await atier.aincr_from(k("v"), 9, 1000, 2**52)
    assert first == (10 if offers(atier) else 1)
    await atier.aincr(k("c"))
    assert await atier.araise_counter(k("c"), 5) == (5 if offers(atier) else None)
    await atier.apublish_invalidation(k("chan"), b"x")  # offered or a no-op: never raises
