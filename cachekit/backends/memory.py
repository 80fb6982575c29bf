"""In-process storage: a cachetools LRU cache with per-entry TTLs, bounded by entries and bytes.

Expiry is checked on read rather than kept in a heap (as ``TLRUCache`` does): a read through
``TLRUCache.__getitem__`` costs about 3.5x a plain ``LRUCache`` read here, and the read is the L1
hit path. An expired entry is never returned; it leaves when it is overwritten, deleted, or
reaches the cold end of the LRU order, and the entry and byte bounds hold throughout.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from cachetools import LRUCache

from cachekit._core.protocols import Entry
from cachekit.backends.base import SharedTier

V = TypeVar("V")

_NEVER = float("inf")

#: Misses a batch read (:meth:`MemoryStore.get_items`) takes as raised ``KeyError`` (at least,
#: and a quarter of the keys read) before it tests membership first for the rest of the batch.
_MISSES_BEFORE_TESTING = 8


class _Item(Generic[V]):
    __slots__ = ("expires", "size", "value")

    def __init__(self, value: V, expires: float, size: int) -> None:
        self.value = value
        self.expires = expires
        self.size = size


def _sizeof(item: _Item[Any]) -> int:
    return item.size


_TUPLE_BYTES = sys.getsizeof(())
_SLOT_BYTES = sys.getsizeof((None,)) - _TUPLE_BYTES
_STR_BYTES = sys.getsizeof("")
_LEAF_BYTES = 32


def _items_size(items: tuple[Any, ...]) -> int:
    """A tuple argument's items, shallowly: the strings and bytes among them by length."""
    n = _TUPLE_BYTES + _SLOT_BYTES * len(items)
    for y in items:
        if type(y) is str or type(y) is bytes:
            n += _STR_BYTES + len(y)
    return n


def _tuple_size(items: tuple[Any, ...]) -> int:
    n = _TUPLE_BYTES + _SLOT_BYTES * len(items)
    if items and type(items[0]) is type:  # a signature: its types are shared by every key
        return n
    for x in items:
        t = type(x)
        if t is str or t is bytes:
            n += _STR_BYTES + len(x)
        elif t is tuple:
            n += _items_size(x)
        else:
            n += _LEAF_BYTES
    return n


def key_size(key: Hashable) -> int:
    """An estimate of the bytes ``key`` holds, for the byte bound. A key can carry a call's whole
    argument list, so ``str``/``bytes`` count their length (a character as a byte: exact for
    ASCII), tuples are walked three levels deep (the key, its values, a tuple argument's items),
    type signatures are free (every key shares their types) and anything else counts a small
    constant. It runs on every store: ``len`` and constants only (``sys.getsizeof`` costs
    several times ``len``)."""
    t = type(key)
    if t is str or t is bytes:
        return _STR_BYTES + len(key)  # type: ignore[arg-type]
    if t is not tuple:
        return _LEAF_BYTES
    items: tuple[Any, ...] = key  # type: ignore[assignment]
    n = _TUPLE_BYTES + _SLOT_BYTES * len(items)
    for x in items:
        tx = type(x)
        if tx is tuple:
            n += _tuple_size(x)
        elif tx is str or tx is bytes:
            n += _STR_BYTES + len(x)
        elif tx is not type:
            n += _LEAF_BYTES
    return n


class MemoryStore(Generic[V]):
    """LRU + per-entry TTL map holding Python objects, bounded by entry count and by bytes.

    Value sizes are supplied by the writer (the cache passes the serialized size), so the byte
    bound is meaningful without walking object graphs; the key's size is added here
    (:func:`key_size`), since a key can hold a call's arguments and be larger than its value.
    Thread-safe; every operation is a few dict
    operations under one lock, so it is also safe to call from asyncio code.
    """

    def __init__(
        self,
        max_entries: int = 10_000,
        max_bytes: int = 64 * 2**20,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_entries <= 0 or max_bytes <= 0:
            raise ValueError("max_entries and max_bytes must be positive")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.clock = clock
        # cachetools enforces one bound (bytes, through getsizeof); the entry bound is kept here.
        self._data: LRUCache[Hashable, _Item[V]] = LRUCache(maxsize=max_bytes, getsizeof=_sizeof)
        self._lock = threading.Lock()
        #: Lock-free raw read for hot paths that check freshness themselves: returns the stored
        #: item (``.value``, ``.expires``, ``.size``) or raises KeyError; see :meth:`get`.
        self.getitem: Callable[[Hashable], _Item[V]] = self._data.__getitem__

    def get_items(self, keys: Sequence[Hashable]) -> list[_Item[V] | None]:
        """The raw stored items of ``keys`` (``None`` where absent), for batch hot paths that
        check freshness themselves, as :attr:`getitem` does for one key. Lock-free like
        :meth:`get`; each item found becomes most recently used.

        A read that misses costs a raised ``KeyError`` inside cachetools (about 5x a hit), a
        membership test first costs every hit half as much again: keys are read directly until
        a quarter of them (and at least a few) have missed, the rest after a membership test."""
        getitem = self._data.__getitem__
        out: list[_Item[V] | None] = []
        append = out.append
        misses = 0
        for key in keys:
            try:
                append(getitem(key))
            except KeyError:
                append(None)
                misses += 1
                if misses >= _MISSES_BEFORE_TESTING and misses * 4 >= len(out):
                    out.extend(self._tested(keys[len(out) :]))
                    break
        return out

    def _tested(self, keys: Sequence[Hashable]) -> list[_Item[V] | None]:
        contains = self._data.__contains__
        getitem = self._data.__getitem__
        try:
            return [getitem(k) if contains(k) else None for k in keys]
        except KeyError:  # removed between the test and the read: one at a time
            return [self._item_or_none(k) for k in keys]

    def _item_or_none(self, key: Hashable) -> _Item[V] | None:
        try:
            return self._data[key]
        except KeyError:
            return None

    def get(self, key: Hashable) -> V | None:
        # Lock-free read. LRUCache.__getitem__ mutates nothing but the recency order, through
        # OrderedDict.move_to_end, which is a single atomic C call; a writer racing with us can
        # only make it raise KeyError, which reads as a miss. Writers hold the lock. (Before
        # cachetools 7.2.6 a read that lost that race put the key back in the recency order
        # without its data, and every later eviction raised: hence the dependency's floor.)
        data = self._data
        if key not in data:  # a miss without raising: lookups that go on to L2 or a search
            return None
        try:
            item = data[key]
        except KeyError:  # removed under us
            return None
        if item.expires <= self.clock():
            return None
        return item.value

    def set(self, key: Hashable, value: V, ttl: float | None, size: int = 1) -> None:
        """Store ``value`` for ``ttl`` seconds (None: no expiry). ``size``: the value's size in
        bytes; the entry is accounted as that plus :func:`key_size` of ``key``."""
        if ttl is not None and ttl <= 0:
            self.delete(key)
            return
        size += key_size(key)
        if size > self.max_bytes:
            # Too large to ever fit: storing it would evict everything else first.
            self.delete(key)
            return
        expires = _NEVER if ttl is None else self.clock() + ttl
        with self._lock:
            self._data[key] = _Item(value, expires, size)
            while len(self._data) > self.max_entries:
                self._data.popitem()

    def set_many(self, items: Sequence[tuple[Hashable, V, float | None, int]]) -> None:
        """:meth:`set` of every ``(key, value, ttl, size)``, with one clock read and one lock
        for the batch (a feature set writes back hundreds of entries at once)."""
        now = self.clock()
        put: list[tuple[Hashable, _Item[V]]] = []
        drop: list[Hashable] = []
        for key, value, ttl, size in items:
            size += key_size(key)
            if (ttl is not None and ttl <= 0) or size > self.max_bytes:
                drop.append(key)
            else:
                put.append((key, _Item(value, _NEVER if ttl is None else now + ttl, size)))
        data = self._data
        with self._lock:
            for key in drop:
                data.pop(key, None)
            for key, item in put:
                data[key] = item
            while len(data) > self.max_entries:
                data.popitem()

    def delete(self, key: Hashable) -> bool:
        with self._lock:
            return self._data.pop(key, None) is not None

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def keys(self) -> list[Hashable]:
        """The keys held now (expired ones not yet dropped included), oldest use first."""
        with self._lock:
            return list(self._data.keys())

    def __len__(self) -> int:
        """Entries held, expired ones not yet dropped included."""
        return len(self._data)

    @property
    def currsize(self) -> int:
        """Bytes held (as sized by the writers)."""
        return int(self._data.currsize)


class MemoryTier(SharedTier):
    """A :class:`~cachekit.backends.base.SharedTier` over :class:`MemoryStore` (one process:
    tests, and a stand-in for Redis), sync and async; the optional abilities are the defaults."""

    def __init__(
        self,
        max_entries: int = 10_000,
        max_bytes: int = 64 * 2**20,
        clock: Callable[[], float] = time.time,
        name: str = "memory",
    ) -> None:
        self.name = name
        self.store: MemoryStore[bytes] = MemoryStore(max_entries, max_bytes, clock)
        self._counter_lock = threading.Lock()

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return [self.store.get(k) for k in keys]

    def set_many(self, entries: Sequence[Entry]) -> None:
        self.store.set_many([(key, value, ttl, len(value)) for key, value, ttl in entries])

    def delete_many(self, keys: Sequence[str]) -> int:
        return sum(self.store.delete(k) for k in keys)

    def incr(self, key: str) -> int:
        with self._counter_lock:
            current = self.store.get(key)
            value = (int(current) if current is not None else 0) + 1
            self.store.set(key, str(value).encode(), None, 8)
            return value

    def close(self) -> None:
        self.store.clear()

    def scan_keys(self, prefix: str, batch: int = 1000) -> Iterator[list[str]]:
        keys = [k for k in self.store.keys() if isinstance(k, str) and k.startswith(prefix)]
        for start in range(0, len(keys), batch):
            yield keys[start : start + batch]

    async def aget_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return self.get_many(keys)

    async def aset_many(self, entries: Sequence[Entry]) -> None:
        self.set_many(entries)

    async def adelete_many(self, keys: Sequence[str]) -> int:
        return self.delete_many(keys)

    async def aincr(self, key: str) -> int:
        return self.incr(key)

    async def aclose(self) -> None:
        self.close()
