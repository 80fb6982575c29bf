"""What an operator does to a semantic tier's entries by what they are: list them all and delete
chosen ones, here and in every process sharing them (``cachekit serve``'s admin routes and
``cachekit purge``, docs/admin.md).

With a shared store (Redis, Redis Cluster) the entries listed are every process's: the store's
snapshot (SCAN on every node, never KEYS), read in batches; a deletion is announced on the store's
log, which every replica follows, so each drops the entries and their vectors from its index
within a log read. Without one, the entries are this process's. Unlike a request's path, these
raise when the store fails: an operator must know a purge did not happen.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from cachekit._core.serialization import SerializationError, decode_envelope
from cachekit.backends.semantic_store import PIPELINE_CHUNK
from cachekit.semantic.entries import SemanticEntry

if TYPE_CHECKING:
    from cachekit._core.protocols import Serializer
    from cachekit.backends.semantic_store import SemanticStore
    from cachekit.semantic.tier import SemanticTier

__all__ = [
    "decoded",
    "delete_entries",
    "delete_stored",
    "purge_store",
    "scan_entries",
    "scan_store",
]


def scan_store(store: SemanticStore, batch: int = 500) -> Iterator[list[SemanticEntry]]:
    """Every entry of ``store`` (any embedder's, expired ones not yet dropped included), in
    lists of at most ``batch``."""
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch!r}")
    ids = store.snapshot().ids
    for start in range(0, len(ids), batch):
        stored, _ = store.fetch(ids[start : start + batch])
        yield [
            SemanticEntry(
                s.id, s.scope, s.text, s.value, s.created_at, s.expires_at, s.version, shared=True
            )
            for s in stored
        ]


def scan_entries(tier: SemanticTier, batch: int = 500) -> Iterator[list[SemanticEntry]]:
    """Every entry of ``tier``, in lists of at most ``batch``: its shared store's when it has
    one (:func:`scan_store`), else its own."""
    store = tier.store
    if store is not None:
        yield from scan_store(store, batch)
        return
    held = tier.entries()
    for start in range(0, len(held), max(1, batch)):
        yield held[start : start + batch]


def decoded(serializer: Serializer, entry: SemanticEntry) -> tuple[bool, Any]:
    """``(True, value)`` of an entry written with ``serializer``, ``(False, None)`` when its
    bytes cannot be read."""
    try:
        return True, decode_envelope(serializer, entry.value).value
    except SerializationError:
        return False, None


def delete_entries(tier: SemanticTier, ids: Sequence[int], origin: bytes) -> int:
    """Remove the entries of ``ids`` from ``tier`` and from its shared store, announced to every
    replica (``origin``: who deleted, on the log). Returns how many were removed: those the store
    held, or without one those the tier held."""
    ids = list(ids)
    here = tier.remove_ids(ids)
    store = tier.store
    return here if store is None else delete_stored(store, ids, origin)


def delete_stored(store: SemanticStore, ids: Sequence[int], origin: bytes) -> int:
    """Remove the entries of ``ids`` from ``store``, announced to every replica following it.
    Returns how many it held."""
    ids = list(ids)
    if not ids:
        return 0
    held = len(ids) - len(store.missing(ids))
    for start in range(0, len(ids), PIPELINE_CHUNK):
        store.delete(ids[start : start + PIPELINE_CHUNK], origin)
    return held


def purge_store(store: SemanticStore, origin: bytes) -> int:
    """Delete every entry of ``store`` (a whole semantic function's, for ``cachekit purge
    --function``), announced to every replica. Returns how many there were."""
    ids = store.snapshot().ids
    for start in range(0, len(ids), PIPELINE_CHUNK):
        store.delete(ids[start : start + PIPELINE_CHUNK], origin)
    return len(ids)
