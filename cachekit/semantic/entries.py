"""The semantic tier's entries: what one holds, its id, and the table that keeps them in insertion
order with the bytes they hold, so the tier can bound its memory by bytes as well as by count.

An entry's size is an estimate of what holding it costs this process: its text as Python holds it
(``sys.getsizeof``: 1 to 4 bytes a character), its stored value, its vector in the index, and a
fixed :data:`ENTRY_OVERHEAD` for the objects around them (the entry, its table and expiry slots,
the index's graph links). It is computed once, when the entry is put, in constant time.
"""

from __future__ import annotations

import hashlib
import sys
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = [
    "ENTRY_ID_DIGEST_BYTES",
    "ENTRY_OVERHEAD",
    "EntryTable",
    "Match",
    "SemanticEntry",
    "entry_id",
]

#: Bytes of the BLAKE2b digest an entry id is taken from.
ENTRY_ID_DIGEST_BYTES = 8
#: Bytes counted for each entry besides its text, value and vector: the entry object, its slots
#: in the table, the expiry heap and the index's id maps and graph links (HNSW, M=32).
ENTRY_OVERHEAD = 512


def entry_id(scope: str, text: str) -> int:
    """The id of the entry for ``text`` in ``scope``: stable across processes, 63 bits, so never
    the ``-1`` that pads search results."""
    raw = f"{len(scope)}:{scope}|{text}".encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(raw, digest_size=ENTRY_ID_DIGEST_BYTES).digest()
    return int.from_bytes(digest, "big") >> 1  # a non-negative int64


@dataclass(slots=True)
class SemanticEntry:
    id: int
    scope: str
    text: str
    value: bytes  # an envelope written with the cache's serializer
    created_at: float
    expires_at: float | None
    version: int  # the cache's namespace version when stored; another version is retired
    shared: bool = False  # present in Redis (written there, or read from there)
    stamp: float = 0.0  # time.monotonic() of the local insert, to reconcile a rescan

    def live(self, now: float, version: int) -> bool:
        return (self.expires_at is None or now < self.expires_at) and self.version == version


def entry_bytes(entry: SemanticEntry, vector_bytes: int) -> int:
    """What holding ``entry`` costs, as counted by :class:`EntryTable` (see the module doc)."""
    return sys.getsizeof(entry.text) + len(entry.value) + vector_bytes + ENTRY_OVERHEAD


class EntryTable:
    """Entries by id, oldest first, and ``bytes``: the sum of their :func:`entry_bytes`. Not
    thread-safe: the tier calls it under its lock."""

    __slots__ = ("_entries", "_sizes", "bytes")

    def __init__(self) -> None:
        self._entries: OrderedDict[int, SemanticEntry] = OrderedDict()
        self._sizes: dict[int, int] = {}
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, id_: int) -> bool:
        return id_ in self._entries

    def get(self, id_: int) -> SemanticEntry | None:
        return self._entries.get(id_)

    def get_many(self, ids: Iterable[int]) -> list[SemanticEntry | None]:
        """The entry of each id, None where there is none."""
        return list(map(self._entries.get, ids))

    def values(self) -> Iterator[SemanticEntry]:
        return iter(self._entries.values())

    def put(self, entry: SemanticEntry, vector_bytes: int) -> SemanticEntry | None:
        """Hold ``entry`` as the newest; returns the entry it replaced (same id), if any."""
        old = self.pop(entry.id)
        size = entry_bytes(entry, vector_bytes)
        self._entries[entry.id] = entry
        self._sizes[entry.id] = size
        self.bytes += size
        return old

    def pop(self, id_: int) -> SemanticEntry | None:
        entry = self._entries.pop(id_, None)
        if entry is not None:
            self.bytes -= self._sizes.pop(id_)
        return entry

    def pop_oldest(self) -> SemanticEntry:
        id_, entry = self._entries.popitem(last=False)
        self.bytes -= self._sizes.pop(id_)
        return entry

    def clear(self) -> None:
        self._entries.clear()
        self._sizes.clear()
        self.bytes = 0


@dataclass(frozen=True, slots=True)
class Match:
    """The outcome of one semantic search: ``entry`` is the accepted neighbour (or None) and
    ``similarity`` its score, or the best rejected score when nothing was accepted; then
    ``reason`` says why the nearest was refused (``"slots: numbers 61 != 63"``) and
    ``nearest_text`` is its text."""

    similarity: float | None
    entry: SemanticEntry | None
    reason: str | None = None
    nearest_text: str | None = None
