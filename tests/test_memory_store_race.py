"""The L1 reads lock-free while writers hold a lock: a read that found its item and an eviction
of that item, interleaved, must leave the store consistent (no key in the recency order without
its data, after which every eviction raises KeyError, as cachetools before 7.2.6 allowed).

The interleaving is driven, not hoped for: a profile hook runs the evicting write in the reading
thread at the moment the read calls ``OrderedDict.move_to_end`` on its key (the recency update),
the one point where a writer of another thread could get in between."""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable
from types import FrameType
from typing import Any

import pytest

from cachekit.backends.memory import MemoryStore

ENTRIES = 4

#: The L1's lock-free reads, each returning the value read.
READS: dict[str, Callable[[MemoryStore[str], Hashable], Any]] = {
    "get": lambda store, key: store.get(key),
    "getitem": lambda store, key: store.getitem(key).value,
    "get_items": lambda store, key: store.get_items([key])[0].value,  # type: ignore[union-attr]
}


def read_racing(
    store: MemoryStore[str], read: Callable[[], Any], write: Callable[[], None]
) -> tuple[Any, bool]:
    """``read()`` with ``write()`` run at the read's recency update; (what it read, whether the
    write ran)."""
    ran = False

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal ran
        if not ran and event == "c_call" and getattr(arg, "__name__", "") == "move_to_end":
            ran = True
            write()  # the hook is not profiled: the write's own recency updates run through

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        value = read()
    finally:
        sys.setprofile(previous)
    return value, ran


def assert_consistent(store: MemoryStore[str]) -> None:
    """Every later write can evict (a key in the recency order without its data makes each
    eviction raise), and the bounds and the LRU order still hold."""
    fresh = [f"fresh{i}" for i in range(2 * ENTRIES)]
    for key in fresh:
        store.set(key, key, None)
    assert len(store) == ENTRIES
    assert all(store.get(k) == k for k in fresh[-ENTRIES:])
    assert all(store.get(k) is None for k in fresh[:-ENTRIES])


@pytest.mark.parametrize("how", sorted(READS))
def test_a_read_interleaved_with_the_eviction_of_its_key_leaves_the_store_consistent(
    how: str,
) -> None:
    store: MemoryStore[str] = MemoryStore(max_entries=ENTRIES)
    for i in range(ENTRIES):
        store.set(f"k{i}", f"v{i}", None)  # k0 is the least recently used

    value, evicted = read_racing(
        store, lambda: READS[how](store, "k0"), lambda: store.set("new", "v-new", None)
    )

    assert evicted, "the read never updated the recency order"
    assert value == "v0"  # found before the eviction, as a read that came first
    assert store.get("k0") is None and store.get("new") == "v-new"
    assert len(store) == ENTRIES
    assert_consistent(store)
