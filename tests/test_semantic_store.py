"""The semantic tier's sharing seam: any shared tier that offers a SemanticStore shares semantic
entries between processes, not only Redis. Here an in-process store (a test double that keeps
records and a log in memory) stands in for Redis: a SemanticStore subclass writing the five
required operations, with the defaults of the optional ones."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from cachekit import Cache, Status
from cachekit.backends.memory import MemoryTier
from cachekit.backends.semantic_store import (
    LOG_READ_BATCH,
    LogMessage,
    LogRead,
    RedisSemanticStore,
    SemanticStore,
    Snapshot,
    StoredEntry,
)
from cachekit.testing.clock import wait_until
from cachekit.testing.embedders import DeterministicTestEmbedder

STORED = "how do I reset my password"
CLOSE = "how do I reset my password please"  # above 0.9 with STORED under the test embedder


class InMemorySemanticStore(SemanticStore):
    """Records by id and an append-only log; cursors are log positions."""

    def __init__(self) -> None:
        self.records: dict[int, StoredEntry] = {}
        self.log: list[LogMessage] = []
        self.generation = b"gen-1"

    def _announce(self, op: str, ids: Sequence[int], origin: bytes) -> None:
        cursor = str(len(self.log) + 1).encode()
        self.log.append(LogMessage(cursor, op, origin, tuple(ids), time.time()))

    def write(self, entries: Sequence[StoredEntry], ttl: float | None, origin: bytes) -> None:
        for e in entries:
            self.records[e.id] = e
        self._announce("add", [e.id for e in entries], origin)

    def delete(self, ids: Sequence[int], origin: bytes) -> None:
        for i in ids:
            self.records.pop(i, None)
        self._announce("del", ids, origin)

    def fetch(self, ids: Sequence[int]) -> tuple[list[StoredEntry], list[tuple[int, str]]]:
        return [self.records[i] for i in ids if i in self.records], []

    def snapshot(self) -> Snapshot:
        return Snapshot(self.generation, str(len(self.log)).encode(), list(self.records))

    def read_after(self, cursor: bytes) -> LogRead:
        start = int(cursor)
        batch = self.log[start : start + LOG_READ_BATCH]
        more = start + len(batch) < len(self.log)
        return LogRead(self.generation, batch, str(start + len(batch)).encode(), more)


class SharingMemoryTier(MemoryTier):
    """An in-process shared tier that also offers semantic stores."""

    def __init__(self) -> None:
        super().__init__()
        self.stores: dict[str, InMemorySemanticStore] = {}

    def semantic_store(self, base: str, log_maxlen: int = 0) -> InMemorySemanticStore:
        return self.stores.setdefault(base, InMemorySemanticStore())


def test_stores_subclass_the_base() -> None:
    assert isinstance(InMemorySemanticStore(), SemanticStore)
    assert isinstance(RedisSemanticStore(lambda: None, False, "ck:ns:sem:f"), SemanticStore)


def _answer(cache: Cache, closing: Callable[[Any], Any]) -> Any:
    @cache.semantic(threshold=0.9, embedder=DeterministicTestEmbedder(), name="answer")
    def answer(prompt: str) -> str:
        return "computed"

    return closing(answer)


def test_any_shared_tier_with_a_semantic_store_shares_entries(
    closing: Callable[[Any], Any],
) -> None:
    tier = SharingMemoryTier()
    a = _answer(Cache(l2=tier, namespace="shared"), closing)
    b = _answer(Cache(l2=tier, namespace="shared"), closing)
    assert a.tier.shared and b.tier.shared
    assert a.tier.wait_ready(10) and b.tier.wait_ready(10)
    assert a.put("stored answer", STORED)
    # b never stored anything: its tier learns the entry from the store's log.
    wait_until(lambda: b.lookup(CLOSE).status is Status.SEMANTIC_HIT)
    assert b.lookup(CLOSE).value == "stored answer"
    a.invalidate(STORED)
    wait_until(lambda: b.lookup(CLOSE).status is Status.MISS)


def test_a_new_process_rebuilds_from_the_store(closing: Callable[[Any], Any]) -> None:
    tier = SharingMemoryTier()
    a = _answer(Cache(l2=tier, namespace="shared"), closing)
    assert a.put("stored answer", STORED)
    late = _answer(Cache(l2=tier, namespace="shared"), closing)
    assert late.tier.wait_ready(10)
    assert late.lookup(CLOSE).status is Status.SEMANTIC_HIT
    assert late.tier.stats()["resyncs"] >= 1


def test_a_shared_tier_without_a_store_keeps_entries_local(closing: Callable[[Any], Any]) -> None:
    tier = MemoryTier()
    a = _answer(Cache(l2=tier, namespace="local"), closing)
    b = _answer(Cache(l2=tier, namespace="local"), closing)
    assert not a.tier.shared
    assert a.put("stored answer", STORED)
    assert a.lookup(CLOSE).status is Status.SEMANTIC_HIT
    assert b.lookup(STORED).status is Status.HIT  # the exact entry is shared through L2 ...
    assert b.lookup(CLOSE).status is Status.MISS  # ... the semantic one is not
