"""The semantic tier: entries, their vectors, expiry, capacity and (optionally) Redis sharing.

Layout of state, all guarded by one lock:

* ``_entries``: an :class:`~cachekit.semantic.entries.EntryTable`, id -> entry in insertion
  order with the bytes they hold. Eviction (over ``capacity`` entries or ``max_bytes`` bytes) pops
  from the front (oldest-first), which needs no bookkeeping on the hit path and, with Redis
  sharing, makes every process evict the same entries. An entry over ``max_bytes //
  MAX_ENTRY_SHARE`` is not held at all (counted ``too_large``): one request cannot flush the index.
* ``_indexes``: one :class:`~cachekit._core.protocols.VectorIndex` per scope, made on first insert.
  A scope holds only requests that may answer each other, so a search can never return an entry
  from another model, tenant or system prompt, whatever its similarity.
* ``_expiry``: a heap of ``(expires_at, id)``; expired entries are purged on every batch and
  every store, and are never served even before the purge reaches them.

Ids are derived from ``(scope, text)`` (63 bits of BLAKE2b), so every process gives a request the
same id without asking anyone: storing the same text again replaces the entry, replaying a
stream message twice is harmless, and invalidation needs no lookup.

This module holds the local store and the decision. Sharing through a
:class:`~cachekit.backends.semantic_store.SemanticStore` (Redis) is
:class:`~cachekit.semantic.replication.Replication`; saving to a directory is
:mod:`cachekit.semantic.snapshots`; the counters are :mod:`cachekit.semantic.tier_counters`.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cachekit._core.serialization import (
    Envelope,
    SerializationError,
    decode_envelope,
    encode_envelope,
)
from cachekit._core.tracing import span
from cachekit._engine.batcher import MicroBatcher
from cachekit._engine.telemetry import LatencyHistogram
from cachekit.semantic.arbiter import HitArbiter
from cachekit.semantic.entries import EntryTable, Match, SemanticEntry, entry_bytes, entry_id
from cachekit.semantic.policy.hit_policy import HitPolicy
from cachekit.semantic.replication import (
    FOLLOW_BLOCK_S,
    INITIAL_SYNC_WAIT_S,
    NO_REPLICATION_STATS,
    UNIT_NORM_TOLERANCE,
    Replication,
)
from cachekit.semantic.snapshots import read_snapshot, write_snapshot
from cachekit.semantic.tier_counters import TierCounters, ms

if TYPE_CHECKING:
    from cachekit._core.protocols import Embedder, VectorIndex
    from cachekit._engine.engine import Engine
    from cachekit.backends.semantic_store import SemanticStore

__all__ = [
    "FOLLOW_BLOCK_S",
    "INITIAL_SYNC_WAIT_S",
    "MAX_BYTES",
    "MAX_ENTRY_SHARE",
    "UNIT_NORM_TOLERANCE",
    "Match",
    "SemanticEntry",
    "SemanticTier",
    "entry_id",
    "semantic_base",
]

log = logging.getLogger("cachekit.semantic")


#: Default bound on the bytes a tier's entries hold (texts, values, vectors; see
#: :mod:`cachekit.semantic.entries`), besides ``capacity`` entries.
MAX_BYTES = 256 * 2**20
#: An entry larger than ``max_bytes // MAX_ENTRY_SHARE`` is not held: storing it would evict at
#: least that share of the index.
MAX_ENTRY_SHARE = 16


class SemanticTier(TierCounters):
    """Semantic entries of one decorated function. See the module docstring for the layout.

    ``embedder`` is a zero-argument factory or an :class:`~cachekit._core.protocols.Embedder`; the
    factory runs on first use so that decorating a function never loads a model.
    """

    def __init__(
        self,
        engine: Engine,
        name: str,
        *,
        embedder: Callable[[], Embedder],
        policy: HitPolicy,
        ttl: float | None,
        capacity: int = 100_000,
        max_bytes: int = MAX_BYTES,
        max_batch: int = 64,
        max_wait_ms: float = 0.0,
        batching: bool = True,
        index_factory: Callable[[int], VectorIndex] | None = None,
        candidates: int = 4,
        sync_interval_s: float = 0.1,
        stream_maxlen: int = 100_000,
        initial_sync_wait_s: float = INITIAL_SYNC_WAIT_S,
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        super().__init__()
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"max_bytes must be a positive int, got {max_bytes!r}")
        if candidates < 1:
            raise ValueError(f"candidates must be >= 1, got {candidates!r}")
        self.engine = engine
        self.name = name
        self.policy = policy
        self.ttl = ttl
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.arbiter = HitArbiter.attach(self, policy)  # candidates, per-entry records, verdicts
        self.candidates = candidates
        self._embedder_factory = embedder
        self._embedder: Embedder | None = None
        self._index_factory = index_factory
        self._lock = threading.RLock()
        self._entries = EntryTable()
        self._indexes: dict[str, VectorIndex] = {}
        self._expiry: list[tuple[float, int]] = []
        self._seen_version = engine.version

        self.batcher: MicroBatcher[tuple[str, str], Match] | None = (
            MicroBatcher(
                self.search_batch,
                max_batch=max_batch,
                max_wait_ms=max_wait_ms,
                name=f"cachekit-sem-batch:{name}",
            )
            if batching
            else None
        )

        # Sharing through the shared tier, when it offers a semantic store (Redis does).
        store = _semantic_store(
            engine, semantic_base(engine.key_prefix, engine.namespace, name), stream_maxlen
        )
        self.replication: Replication | None = None
        if store is not None:
            self.replication = Replication(
                self,
                store,
                sync_interval_s=sync_interval_s,
                initial_sync_wait_s=initial_sync_wait_s,
            )

    # ------------------------------------------------------------------ embedder and indexes

    @property
    def embedder(self) -> Embedder:
        e = self._embedder
        if e is None:
            with self._lock:
                if self._embedder is None:
                    self._embedder = self._embedder_factory()
                e = self._embedder
        return e

    @property
    def shared(self) -> bool:
        """Whether entries are shared through the shared tier (Redis)."""
        return self.replication is not None

    def _new_index(self, dim: int) -> VectorIndex:
        if self._index_factory is not None:
            return self._index_factory(dim)
        from cachekit.semantic.index.faiss_index import FaissIndex

        return FaissIndex(dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        t0 = time.perf_counter()
        with span("cachekit.embed", texts=len(texts)):  # docs/tracing.md; no-op unless enabled
            vecs = self.embedder.embed(list(texts))
        elapsed = time.perf_counter() - t0
        if self.model_load_s is None:
            # Embedders load their model on first use (seconds for MiniLM): the first call is
            # reported as the load, apart from request latency, or it would own embed_p99_ms.
            self.model_load_s = elapsed
        else:
            self.embed_time.record(elapsed)
        return np.asarray(vecs, dtype=np.float32)

    # ------------------------------------------------------------------ search

    def search(self, scope: str, text: str) -> Match:
        """One semantic lookup, through the micro-batcher when batching is on."""
        self.start()
        if self.batcher is None:
            return self.search_batch([(scope, text)])[0]
        # A lone caller that finds the batcher idle runs its batch in its own thread; callers that
        # arrive meanwhile share the next batch. On an event loop (blocked anyway) the worker runs.
        return self.batcher.call((scope, text), block_loop=True)

    def search_batch(self, requests: Sequence[tuple[str, str]]) -> list[Match]:
        """Embed every text in one call and search each scope once. Results in request order."""
        if self.replication is not None and not self.replication.ready.is_set():
            self.replication.await_first_build()
        now = self.engine.clock()
        self.purge_expired(now)
        if len(requests) <= 1:
            return [self._search_one(requests, now)] if requests else []
        with self._lock:
            scopes = {scope for scope, _ in requests if scope in self._indexes}
        if not scopes:
            # Nothing stored in any requested scope: no point computing embeddings.
            return [Match(None, None) for _ in requests]
        wanted = [i for i, (scope, _) in enumerate(requests) if scope in scopes]
        unique: dict[str, int] = {}
        by_scope: dict[str, list[int]] = {}
        for i in wanted:
            scope, text = requests[i]
            unique.setdefault(text, len(unique))
            by_scope.setdefault(scope, []).append(i)
        # Everything but the search is settled before the embedding: the code that runs after
        # a forward pass runs with cold CPU caches, so there it is kept short.
        plan = [
            (scope, ids, [unique[requests[i][1]] for i in ids]) for scope, ids in by_scope.items()
        ]
        out = [Match(None, None)] * len(requests)
        version = self.engine.version
        vecs = self.embed(list(unique))
        everything = list(range(len(unique)))
        for scope, idxs, rows in plan:
            queries = vecs if rows == everything else vecs[rows]
            self._search_scope(requests, scope, idxs, queries, out, now, version)
        return out

    def _search_one(self, requests: Sequence[tuple[str, str]], now: float) -> Match:
        """A batch of one (a lone lookup): :meth:`search_batch` without its grouping."""
        scope, text = requests[0]
        out = [Match(None, None)]
        if scope in self._indexes:  # else nothing is stored there: no point embedding
            version = self.engine.version
            self._search_scope(requests, scope, [0], self.embed([text]), out, now, version)
        return out[0]

    def _search_scope(
        self,
        requests: Sequence[tuple[str, str]],
        scope: str,
        idxs: list[int],
        queries: np.ndarray,
        out: list[Match],
        now: float,
        version: int,
    ) -> None:
        index = self._indexes.get(scope)
        if index is None:  # emptied since the batch started
            return
        t0 = time.perf_counter()
        with span("cachekit.index.search", queries=len(idxs), k=self.candidates):
            scores, ids = index.search(queries, self.candidates)
        self.search_time.record(time.perf_counter() - t0)
        for row, i in enumerate(idxs):
            out[i] = self._decide(requests[i][1], scope, scores[row], ids[row], now, version)

    def index(self, scope_key: str) -> VectorIndex | None:
        """The vector index of one scope (None while the scope holds nothing)."""
        return self._indexes.get(scope_key)

    def _decide(
        self, text: str, scope: str, scores: np.ndarray, ids: np.ndarray, now: float, version: int
    ) -> Match:
        live: list[tuple[float, SemanticEntry]] = []
        # Padding (-1) is never an entry's id: it finds None, like an entry removed since.
        found = self._entries.get_many(ids.tolist())
        for score, entry in zip(scores.tolist(), found, strict=True):
            if entry is None or entry.scope != scope or not entry.live(now, version):
                continue  # removed since the search, or expired and not yet purged
            live.append((score, entry))
        if not live:
            return Match(None, None)
        try:
            chosen, reason = self.arbiter.decide(scope, text, live)
        except Exception:
            # A failing policy must not answer, nor fail the other callers in the batch.
            self.errors += 1
            log.warning("hit policy %r failed; treated as a miss", self.policy, exc_info=True)
            return Match(live[0][0], None, "policy failed", live[0][1].text)
        if chosen is None:
            return Match(live[0][0], None, reason, live[0][1].text)
        score, entry = live[chosen]
        if entry.shared and self.replication is not None:
            self.replication.note_hit(entry.id)  # confirmed present in the background
        return Match(score, entry)

    def decode(self, entry: SemanticEntry) -> Envelope | None:
        try:
            return decode_envelope(self.engine.serializer, entry.value)
        except SerializationError as exc:
            self.errors += 1
            log.warning("unreadable semantic entry %d treated as a miss: %s", entry.id, exc)
            return None

    # ------------------------------------------------------------------ writes

    def add(
        self,
        scope: str,
        texts: Sequence[str],
        values: Sequence[Any],
        *,
        ttl: float | None = None,
        version: str | int | None = None,
    ) -> int:
        """Embed ``texts`` (one call) and store ``values`` for them in ``scope``. Returns how
        many were stored (values that cannot be serialized are skipped)."""
        return self.add_many(
            [(scope, t, v) for t, v in zip(texts, values, strict=True)], ttl=ttl, version=version
        )

    def add_many(
        self,
        items: Sequence[tuple[str, str, Any]],
        *,
        ttl: float | None = None,
        version: str | int | None = None,
        encoded: bool = False,
    ) -> int:
        """Store ``(scope, text, value)`` items of any scopes with one embedding call.
        ``encoded``: values are envelopes already."""
        if not items:
            return 0
        vecs = self.embed([text for _, text, _ in items])
        return self._add_vectors(items, vecs, ttl, version, encoded)

    def add_vectors(
        self,
        scope_key: str,
        texts: Sequence[str],
        vectors: Any,
        values: Sequence[Any],
        *,
        ttl: float | None = None,
    ) -> int:
        """Insert precomputed vectors (one row per text) without embedding, e.g. to load a
        benchmark corpus. Rows are L2-normalised here. Only semantic entries are written (no
        exact-match entries). Returns how many were stored."""
        if len(texts) != len(values):
            raise ValueError(f"got {len(texts)} texts for {len(values)} values")
        vecs = np.array(vectors, dtype=np.float32, copy=True, order="C")
        if vecs.ndim != 2 or vecs.shape[0] != len(texts):
            raise ValueError(f"vectors must have shape ({len(texts)}, dim), got {vecs.shape}")
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        np.divide(vecs, norms, out=vecs, where=norms > 0)
        return self._add_vectors(
            [(scope_key, t, v) for t, v in zip(texts, values, strict=True)], vecs, ttl, None, False
        )

    def _add_vectors(
        self,
        items: Sequence[tuple[str, str, Any]],
        vecs: np.ndarray,
        ttl: float | None,
        version: str | int | None,
        encoded: bool,
    ) -> int:
        self.start()
        ttl = self.engine.resolve_ttl(ttl if ttl is not None else self.ttl)
        now = self.engine.clock()
        ns_version = self.engine.version
        entries: list[SemanticEntry] = []
        rows: list[int] = []
        vector_bytes = int(vecs.shape[1]) * vecs.itemsize if vecs.ndim == 2 else 0
        for row, (scope, text, value) in enumerate(items):
            if not isinstance(text, str):
                raise TypeError(f"texts must be str, got {type(text).__name__}")
            if encoded:
                data = value
            else:
                try:
                    data = encode_envelope(
                        self.engine.serializer, Envelope(value, now, ttl, 0.0, version)
                    )
                except SerializationError as exc:
                    self.engine.telemetry.serialization_errors += 1
                    log.warning("not caching semantic entry: %s", exc)
                    continue
            expires = None if ttl is None else now + ttl
            e = SemanticEntry(entry_id(scope, text), scope, text, data, now, expires, ns_version)
            if self._too_large(e, vector_bytes):
                continue  # neither held nor shared
            entries.append(e)
            rows.append(row)
        if not entries:
            return 0
        kept = vecs[rows]
        if self.replication is not None:
            self.replication.share(entries, kept, ttl)
        evicted = self._insert(entries, kept)
        if evicted and self.replication is not None:
            self.replication.unshare([e.id for e in evicted])
        self.purge_expired(now)
        return len(entries)

    def _insert(self, entries: Sequence[SemanticEntry], vecs: np.ndarray) -> list[SemanticEntry]:
        """Put entries and their vectors into the local state; returns what capacity evicted."""
        stamp = time.monotonic()
        groups: dict[str, tuple[list[int], list[int]]] = {}
        vector_bytes = int(vecs.shape[1]) * vecs.itemsize
        with self._lock:
            for row, e in enumerate(entries):
                if self._too_large(e, vector_bytes):
                    continue
                e.stamp = stamp
                old = self._entries.put(e, vector_bytes)
                if old is not None and old.scope != e.scope:  # a 63-bit collision: keep it sane
                    self._drop_from_index(old.scope, [old.id])
                if e.expires_at is not None:
                    heapq.heappush(self._expiry, (e.expires_at, e.id))
                ids, rows = groups.setdefault(e.scope, ([], []))
                ids.append(e.id)
                rows.append(row)
            for scope, (ids, rows) in groups.items():
                index = self._indexes.get(scope)
                if index is None:
                    index = self._indexes[scope] = self._new_index(int(vecs.shape[1]))
                index.add(np.asarray(ids, dtype=np.int64), vecs[rows])
            return self._evict_over_bounds()

    def _evict_over_bounds(self) -> list[SemanticEntry]:
        """Drop the oldest entries while over ``capacity`` or ``max_bytes``; returns them."""
        evicted: list[SemanticEntry] = []
        table = self._entries
        with self._lock:
            while len(table) > self.capacity or table.bytes > self.max_bytes:
                evicted.append(table.pop_oldest())
            self._drop_entries_from_indexes(evicted)
            self.evictions += len(evicted)
        return evicted

    def _too_large(self, entry: SemanticEntry, vector_bytes: int) -> bool:
        """Whether ``entry`` is over ``max_bytes // MAX_ENTRY_SHARE`` (then counted)."""
        if entry_bytes(entry, vector_bytes) <= self.max_bytes // MAX_ENTRY_SHARE:
            return False
        self.too_large += 1
        return True

    def _drop_from_index(self, scope: str, ids: list[int]) -> None:
        index = self._indexes.get(scope)
        if index is None:
            return
        index.remove(np.asarray(ids, dtype=np.int64))
        if len(index) == 0:
            # Many short-lived scopes (tenants, conversations) must not leave empty indexes.
            del self._indexes[scope]

    def _drop_entries_from_indexes(self, entries: Iterable[SemanticEntry]) -> None:
        groups: dict[str, list[int]] = {}
        for e in entries:
            groups.setdefault(e.scope, []).append(e.id)
        for scope, ids in groups.items():
            self._drop_from_index(scope, ids)

    def remove_ids(self, ids: Iterable[int]) -> int:
        """Remove entries locally (not from Redis). Returns how many existed."""
        with self._lock:
            gone = [e for e in (self._entries.pop(i) for i in ids) if e is not None]
            self._drop_entries_from_indexes(gone)
        return len(gone)

    def invalidate(self, scope: str, text: str) -> bool:
        """Remove the entry for ``text`` in ``scope`` here and, with Redis, everywhere."""
        self.start()
        id_ = entry_id(scope, text)
        existed = self.remove_ids([id_]) > 0
        if self.replication is not None:
            self.replication.unshare([id_])
        return existed

    def purge_expired(self, now: float | None = None) -> int:
        """Remove expired entries (and those of a retired namespace version) from the index."""
        now = self.engine.clock() if now is None else now
        gone: list[SemanticEntry] = []
        with self._lock:
            heap = self._expiry
            while heap and heap[0][0] <= now:
                expires_at, id_ = heapq.heappop(heap)
                e = self._entries.get(id_)
                if e is not None and e.expires_at == expires_at:
                    self._entries.pop(id_)
                    gone.append(e)
            self.expirations += len(gone)
            version = self.engine.version
            if version != self._seen_version:
                self._seen_version = version
                stale = [e for e in self._entries.values() if e.version != version]
                for e in stale:
                    self._entries.pop(e.id)
                gone.extend(stale)
            if gone:
                self._drop_entries_from_indexes(gone)
        return len(gone)

    def clear(self) -> None:
        """Drop every local entry (Redis keeps its own)."""
        with self._lock:
            self._entries.clear()
            self._indexes.clear()
            self._expiry.clear()

    def __len__(self) -> int:
        self.purge_expired()
        return len(self._entries)

    def entries(self) -> list[SemanticEntry]:
        with self._lock:
            return list(self._entries.values())

    def index_size(self) -> int:
        with self._lock:
            return sum(len(ix) for ix in self._indexes.values())

    # ------------------------------------------------------------ snapshots on disk (no Redis)

    def save(self, directory: str | Path) -> None:
        """Write every live entry and each scope's index under ``directory``
        (:mod:`cachekit.semantic.snapshots`)."""
        self.purge_expired()
        with self._lock:
            write_snapshot(
                Path(directory),
                self.name,
                self.embedder.name,
                self._indexes,
                self._entries.values(),
            )

    def load(self, directory: str | Path) -> int:
        """Replace the local entries with those saved by :meth:`save` (expired ones are
        dropped, and those over this tier's bounds). Returns how many entries were loaded."""
        indexes, entries = read_snapshot(Path(directory), self.embedder.name, self._load_index)
        now = self.engine.clock()
        with self._lock:
            self.clear()
            self._indexes = indexes
            vector_bytes = {scope: ix.dim * 4 for scope, ix in indexes.items()}  # float32
            for e in entries:
                e.version = self.engine.version  # what was saved belongs to this cache now
                self._entries.put(e, vector_bytes.get(e.scope, 0))
                if e.expires_at is not None:
                    heapq.heappush(self._expiry, (e.expires_at, e.id))
            self._evict_over_bounds()  # saved by a tier with larger bounds
        self.purge_expired(now)
        return len(self._entries)

    def _load_index(self, path: Path) -> VectorIndex:
        if self._index_factory is None:
            from cachekit.semantic.index.faiss_index import FaissIndex

            return FaissIndex.load(path)
        loader = getattr(type(self._index_factory(1)), "load", None)
        if loader is None:
            raise TypeError("the index type made by index_factory has no load() classmethod")
        return loader(path)

    # ------------------------------------------------------------------ telemetry

    def stats(self) -> dict[str, Any]:
        b = self.batcher
        qw = b.queue_wait if b is not None else LatencyHistogram()
        return {
            "policy": getattr(self.policy, "name", repr(self.policy)),
            **self.counter_stats(),
            "batches": b.batches if b is not None else 0,
            "batch_size_mean": b.mean_batch if b is not None else 0.0,
            "batch_size_max": b.max_seen if b is not None else 0,
            "queue_wait_p50_ms": ms(qw, 0.5),
            "queue_wait_p99_ms": ms(qw, 0.99),
            "refusals": dict(self.arbiter.refusals),
            "index_size": len(self._entries),
            "index_bytes": self._entries.bytes,
            "scopes": len(self._indexes),
            "errors": self.errors + (self.replication.errors if self.replication else 0),
            "shared": self.shared,
            **(NO_REPLICATION_STATS if self.replication is None else self.replication.stats()),
            **self.arbiter.summary(),
            "ready": self.replication is None or self.replication.ready.is_set(),
        }

    # ------------------------------------------------------------------ lifecycle

    @property
    def store(self) -> SemanticStore | None:
        """The shared store this tier follows (None when entries stay in-process)."""
        return None if self.replication is None else self.replication.store

    def start(self) -> None:
        """Start following Redis (idempotent; a no-op without Redis). The semantic decorator
        calls it when it creates the tier; every use calls it too."""
        if self.replication is not None:
            self.replication.start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until the index has been built from Redis (True at once without Redis)."""
        if self.replication is None:
            return True
        self.replication.start()
        return self.replication.ready.wait(timeout)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued lookup has its answer."""
        return self.batcher.flush(timeout) if self.batcher is not None else True

    def close(self) -> None:
        """Stop the batching and Redis threads (later calls still work, unbatched and
        without following Redis)."""
        if self.batcher is not None:
            self.batcher.close()
        if self.replication is not None:
            self.replication.close()

    # ------------------------------------------------------------------ for replication

    def add_remote(self, fetched: list[tuple[SemanticEntry, np.ndarray]]) -> None:
        """Hold entries read from the shared store (validated by the caller); an entry whose
        scope's index has another dimension is skipped."""
        if not fetched:
            return
        dim = self.embedder.dim  # validated: every vector has it
        entries = [e for e, _ in fetched]
        vecs = np.stack([v for _, v in fetched]).reshape(len(fetched), dim)
        with self._lock:
            ok = [
                j
                for j, e in enumerate(entries)
                if e.scope not in self._indexes or self._indexes[e.scope].dim == dim
            ]
        if ok:
            self._insert([entries[j] for j in ok], vecs[ok])

    def shared_ids(self, start: int, count: int) -> tuple[list[int], int]:
        """The ids of shared entries among ``count`` held entries from position ``start``
        (oldest first), and how many entries are held."""
        with self._lock:
            n = len(self._entries)
            window = itertools.islice(self._entries.values(), start, start + count)
            return [e.id for e in window if e.shared], n

    def stale_shared(self, before: float, present: set[int]) -> list[int]:
        """Shared entries held since before ``before`` (``time.monotonic()``) whose ids are not
        in ``present``: gone from the store by the time of a rescan that started then."""
        with self._lock:
            return [
                e.id
                for e in self._entries.values()
                if e.shared and e.stamp < before and e.id not in present
            ]

    def still_held(self, ids: Sequence[int], until: float) -> list[int]:
        """Those of ``ids`` held here as shared entries that live past ``until`` (clock s)."""
        with self._lock:
            return [
                i
                for i in ids
                if (e := self._entries.get(i)) is not None
                and e.shared
                and (e.expires_at is None or e.expires_at > until)
            ]

    def warm_index(self) -> None:
        """Import faiss now (most of a second) when this tier will need it, rather than when
        the first entry shared by another replica arrives."""
        if self._index_factory is None:
            import cachekit.semantic.index.faiss_index  # noqa: F401


def semantic_base(key_prefix: str, namespace: str, name: str) -> str:
    """What every shared key of the semantic function ``name`` starts with (entries, log,
    generation, labels): ``{key_prefix}:{namespace}:sem:{name}``."""
    return f"{key_prefix}:{namespace}:sem:{name}"


def _semantic_store(engine: Engine, base: str, log_maxlen: int) -> SemanticStore | None:
    """The shared tier's semantic store, when it offers one."""
    return None if engine.l2 is None else engine.l2.semantic_store(base, log_maxlen)
