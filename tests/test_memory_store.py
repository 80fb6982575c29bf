"""The in-process store's byte bound, which must hold whatever the keys carry."""

from __future__ import annotations

import tracemalloc

from cachekit import Cache
from cachekit.backends.memory import MemoryStore, key_size

BIG = 100_000


def big_arg(i: int) -> str:
    return f"{i:06d}" * (BIG // 6)


def test_key_size_counts_what_a_key_carries() -> None:
    s = big_arg(1)
    assert key_size(s) >= BIG
    assert key_size(("mod.f", (s, "v1"), (str, str))) >= BIG
    assert key_size(("mod.f", ((1, s),), ((int, str),))) >= BIG  # a tuple argument's string
    assert key_size(("mod.f", (42,), (int,))) < 300
    assert key_size(object()) > 0


def test_byte_bound_counts_the_keys() -> None:
    # Before keys were counted, 2,000 such entries under a 1 MiB bound held ~190 MiB of keys.
    store: MemoryStore[int] = MemoryStore(max_entries=10_000, max_bytes=2**20)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(2000):
            store.set(("mod.f", (big_arg(i),), (str,)), i, None, size=8)
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert store.currsize <= 2**20
    assert 1 <= len(store) <= 2**20 // BIG
    assert grown < 4 * 2**20
    assert store.get(("mod.f", (big_arg(1999),), (str,))) == 1999  # the newest is kept


def test_a_key_larger_than_the_bound_is_not_stored() -> None:
    store: MemoryStore[int] = MemoryStore(max_bytes=10_000)
    store.set("small", 1, None)
    store.set(big_arg(0), 2, None, size=1)
    assert store.get(big_arg(0)) is None and store.get("small") == 1


def test_cached_function_memory_is_bounded_by_l1_max_bytes() -> None:
    cache = Cache(l1_max_bytes=2**20)

    @cache.cached
    def f(s: str) -> int:
        return len(s)

    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(2000):
            f(big_arg(i))
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert cache.l1 is not None and cache.l1.currsize <= 2**20
    assert grown < 16 * 2**20


def test_set_many_is_set_of_each() -> None:
    clock = [100.0]
    one: MemoryStore[int] = MemoryStore(max_entries=3, max_bytes=10_000, clock=lambda: clock[0])
    many: MemoryStore[int] = MemoryStore(max_entries=3, max_bytes=10_000, clock=lambda: clock[0])
    one.set("gone", 0, None)
    many.set("gone", 0, None)
    items = [
        ("a", 1, 5.0, 10),
        ("gone", 9, 0.0, 1),
        ("huge", 2, None, 20_000),
        ("b", 3, None, 1),
        ("c", 4, 1.0, 1),
        ("d", 5, 10.0, 1),
    ]
    for key, value, ttl, size in items:
        one.set(key, value, ttl, size)
    many.set_many(items)
    clock[0] += 2.0
    for store in (one, many):
        assert [store.get(k) for k in ("a", "gone", "huge", "b", "c", "d")] == [
            None,
            None,
            None,
            3,
            None,
            5,
        ]  # a evicted (3 entries), c expired
        assert len(store) == 3
    assert one.currsize == many.currsize


def test_get_items_reads_a_batch_in_order() -> None:
    store: MemoryStore[str] = MemoryStore(max_entries=100, max_bytes=2**20)
    store.set_many([(i, f"v{i}", None, 1) for i in range(0, 40, 2)])  # even keys only
    for keys in ([0, 1, 2], list(range(40)), [1, 3, 5] * 10 + [4], []):
        items = store.get_items(keys)
        # Past a quarter of misses the batch switches to membership tests: same answers.
        assert [None if it is None else it.value for it in items] == [
            f"v{k}" if k % 2 == 0 else None for k in keys
        ]


def test_get_items_marks_what_it_found_recently_used() -> None:
    store: MemoryStore[int] = MemoryStore(max_entries=3, max_bytes=2**20)
    store.set_many([("a", 1, None, 1), ("b", 2, None, 1), ("c", 3, None, 1)])
    store.get_items(["a", "x"])  # "a" read: "b" is now the least recently used
    store.set("d", 4, None)
    assert store.get("a") == 1 and store.get("b") is None


def test_get_items_leaves_expiry_to_the_caller() -> None:
    now = [1000.0]
    store: MemoryStore[str] = MemoryStore(clock=lambda: now[0])
    store.set("k", "v", 5.0)
    now[0] += 10
    assert store.get("k") is None
    (item,) = store.get_items(["k"])
    assert item is not None and item.expires <= now[0]  # raw: the caller checks freshness
