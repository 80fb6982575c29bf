"""The semantic tier: entries, their vectors, expiry, capacity and (optionally) Redis sharing.

Layout of state, all guarded by one lock:

* ``_entries``: an :class:`~cachekit.semantic.entries.EntryTable`, id -> entry in insertion
  order with the bytes they hold. Eviction (over ``capacity`` entries or ``max_bytes`` bytes) pops
  from the front (oldest-first), which needs no bookkeeping on the hit path and, with Redis
  sharing, makes every process evict the same entries. An entry over ``max_bytes //
  MAX_ENTRY_SHARE`` is not held at all (counted ``too_large``): one request cannot flush the index.
* ``_indexes``: one :class:`~cachekit.protocols.VectorIndex` per scope, created on first insert.
  A scope holds only requests that may answer each other, so a search can never return an entry
  from another model, tenant or system prompt, whatever its similarity.
* ``_expiry``: a heap of ``(expires_at, id)``; expired entries are purged on every batch and
  every store, and are never served even before the purge reaches them.

Ids are derived from ``(scope, text)`` (63 bits of BLAKE2b), so every process gives a request the
same id without asking anyone: storing the same text again replaces the entry, replaying a
stream message twice is harmless, and invalidation needs no lookup.

When the shared tier offers a :class:`~cachekit.semantic.persistence.SemanticStore` (Redis does),
every entry is also written there and every addition or removal announced on its log. One daemon
thread per tier, started when the tier is created, builds the local index from the store's
snapshot and then follows the log with a blocking read on a connection of its own (``follow``,
when the store offers it; otherwise it polls ``read_after``). It rebuilds from a new snapshot
when the log says messages were lost (trimmed before they were read), when the store lost its
data (a new generation), and when an entry it holds is found missing from the store (evicted or
deleted behind its back: the entries this process answered from are checked in the background,
and a rotating slice of the rest). Lookups made before the first build wait for it, up to
``initial_sync_wait_s`` after the tier was created.

Whatever is read from the store is input, not truth: an entry is indexed only when its vector
has the tier's dimension, is finite and of unit norm (within :data:`UNIT_NORM_TOLERANCE`), was
made by this tier's embedder, and its id is the id of its own scope and text. Others are skipped
and counted (``invalid_entries``); they are data errors, not Redis failures, so only the store's
own round trips run through the engine's guarded call (and its circuit breaker).

Each entry's record (:class:`~cachekit.semantic.policy.EntryStats`, kept by the tier's
:class:`~cachekit.semantic.arbiter.HitArbiter`) is shared too, when the store can
(``add_stats``/``fetch_stats``): a verdict is written beside the entry and announced in the
thread that reached it, served counts are added by the sync thread at most once a second, and
records come in with the entries at a build and with ``stats`` messages on the log. Lookups read
only the local record. A malformed record is skipped and counted (``invalid_stats``).

This module holds the policy (what to share, when to rebuild, what to apply); the store only
moves records.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np

from cachekit.semantic.arbiter import LABELS_MAX, HitArbiter, Label
from cachekit.semantic.batcher import MicroBatcher, on_event_loop
from cachekit.semantic.entries import EntryTable, SemanticEntry, entry_bytes, entry_id
from cachekit.semantic.persistence import PIPELINE_CHUNK, LogMessage, StatsChange, StoredEntry
from cachekit.semantic.policy import HitPolicy
from cachekit.serialization import (
    Envelope,
    SerializationError,
    decode_envelope,
    encode_envelope,
)
from cachekit.telemetry import LatencyHistogram
from cachekit.types import FAILED

if TYPE_CHECKING:
    from cachekit.engine import Engine
    from cachekit.protocols import Embedder, VectorIndex
    from cachekit.semantic.persistence import SemanticStore

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

_SAVE_FORMAT = 1
#: Hit similarities kept for the stats' median (a sliding window).
_SIMILARITY_SAMPLES = 10_000
#: Default bound on the bytes a tier's entries hold (texts, values, vectors; see
#: :mod:`cachekit.semantic.entries`), besides ``capacity`` entries.
MAX_BYTES = 256 * 2**20
#: An entry larger than ``max_bytes // MAX_ENTRY_SHARE`` is not held: storing it would evict at
#: least that share of the index.
MAX_ENTRY_SHARE = 16
#: Seconds the sync thread waits after a failed step, doubling up to the maximum.
_SYNC_BACKOFF_S = 0.05
_SYNC_BACKOFF_MAX_S = 5.0
#: Longest one blocking read of the log waits for a message; also how often the sync thread
#: wakes for its background checks when nothing is written.
FOLLOW_BLOCK_S = 1.0
#: Seconds after a tier's creation during which lookups wait for the first build from Redis.
INITIAL_SYNC_WAIT_S = 2.0
#: How far a stored vector's norm may be from 1 (float32 rounding of a normalised row is ~1e-7).
UNIT_NORM_TOLERANCE = 1e-3
#: Seconds between two presence checks of held entries in the store, and how many per check.
_AUDIT_INTERVAL_S = 1.0
_AUDIT_BATCH = 256
#: Most answered-from ids remembered for the next presence check.
_HIT_CHECKS_MAX = 1024
#: An entry this close to its expiry may already be gone from the store: not a sign of eviction.
_EXPIRY_SLACK_S = 1.0
#: Seconds between two batches of served counts added to the shared records.
_SERVED_FLUSH_S = 1.0


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


class SemanticTier:
    """Semantic entries of one decorated function. See the module docstring for the layout.

    ``embedder`` is a zero-argument factory or an :class:`~cachekit.protocols.Embedder`; the
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

        # Counters: lookups and their outcomes are counted by the decorator, the rest here.
        self.lookups = 0  # of calls; probes (``f.lookup``) are counted apart
        self.probes = 0
        self.probe_hits = 0
        self.exact_hits = 0
        self.semantic_hits = 0
        self.misses = 0
        self.evictions = 0
        self.too_large = 0  # entries over max_bytes // MAX_ENTRY_SHARE, not held
        self.expirations = 0
        self.errors = 0
        self.embed_time = LatencyHistogram()
        #: Seconds of the first embedding call, which loads the model; None until it ran.
        self.model_load_s: float | None = None
        self.search_time = LatencyHistogram()
        self.sync_lag = LatencyHistogram()
        self._similarities: deque[float] = deque(maxlen=_SIMILARITY_SAMPLES)
        self._min_similarity: float | None = None

        # Sharing through the shared tier, when it offers a semantic store (Redis does).
        self._store = _semantic_store(
            engine, semantic_base(engine.key_prefix, engine.namespace, name), stream_maxlen
        )
        self._gen: bytes | None = None
        self._origin = uuid.uuid4().hex.encode()
        self._sync_interval_s = sync_interval_s
        self._sync_thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._start_lock = threading.Lock()
        self.resyncs = 0
        self.invalid_entries = 0
        self.lost_log = 0
        self.missing_found = 0
        self._initial_wait_until = time.monotonic() + max(0.0, initial_sync_wait_s)
        self._hit_checks: set[int] = set()
        self._audit_at = 0.0
        self._audit_pos = 0
        self._served_at = 0.0
        self.invalid_stats = 0
        if self._store is None:
            self._ready.set()
        elif self._store.shares_records:
            self.arbiter.on_verdict = self._share_verdict
            self.arbiter.on_label = self._share_label

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
        return self._store is not None

    def _new_index(self, dim: int) -> VectorIndex:
        if self._index_factory is not None:
            return self._index_factory(dim)
        from cachekit.semantic.index import FaissIndex

        return FaissIndex(dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        t0 = time.perf_counter()
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
        if on_event_loop():
            # A sync function called from async code blocks its loop anyway; the worker runs it.
            return self.batcher.submit((scope, text)).result()
        # A lone caller that finds the batcher idle runs its batch in its own thread (no hand-off
        # to the worker); callers that arrive meanwhile still share the next batch.
        return self.batcher.call((scope, text))

    def search_batch(self, requests: Sequence[tuple[str, str]]) -> list[Match]:
        """Embed every text in one call and search each scope once. Results in request order."""
        if not self._ready.is_set():
            self._await_first_build()
        now = self.engine.clock()
        self.purge_expired(now)
        if not requests:
            return []
        with self._lock:
            scopes = {scope for scope, _ in requests if scope in self._indexes}
        if not scopes:
            # Nothing stored in any requested scope: no point computing embeddings.
            return [Match(None, None) for _ in requests]
        wanted = [i for i, (scope, _) in enumerate(requests) if scope in scopes]
        unique: dict[str, int] = {}
        for i in wanted:
            unique.setdefault(requests[i][1], len(unique))
        vecs = self.embed(list(unique))
        by_scope: dict[str, list[int]] = {}
        for i in wanted:
            by_scope.setdefault(requests[i][0], []).append(i)
        out = [Match(None, None) for _ in requests]
        version = self.engine.version
        for scope, idxs in by_scope.items():
            self._search_scope(requests, scope, idxs, vecs, unique, out, now, version)
        return out

    def _search_scope(
        self,
        requests: Sequence[tuple[str, str]],
        scope: str,
        idxs: list[int],
        vecs: np.ndarray,
        unique: dict[str, int],
        out: list[Match],
        now: float,
        version: int,
    ) -> None:
        index = self._indexes.get(scope)
        if index is None:  # emptied since the batch started
            return
        queries = vecs[[unique[requests[i][1]] for i in idxs]]
        t0 = time.perf_counter()
        scores, ids = index.search(queries, self.candidates)
        self.search_time.record(time.perf_counter() - t0)
        for row, i in enumerate(idxs):
            out[i] = self._decide(requests[i][1], scope, scores[row], ids[row], now, version)

    def _await_first_build(self) -> None:
        """A new replica answers from the shared entries from its first lookup: wait for the
        first build, but never past the bound set at creation (Redis may be down)."""
        self.start()
        left = self._initial_wait_until - time.monotonic()
        if left > 0:
            self._ready.wait(left)

    def index(self, scope_key: str) -> VectorIndex | None:
        """The vector index of one scope (None while the scope holds nothing)."""
        return self._indexes.get(scope_key)

    def _decide(
        self, text: str, scope: str, scores: np.ndarray, ids: np.ndarray, now: float, version: int
    ) -> Match:
        live: list[tuple[float, SemanticEntry]] = []
        for score, id_ in zip(scores.tolist(), ids.tolist(), strict=True):
            if id_ == -1:
                break
            entry = self._entries.get(id_)
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
            log.warning(
                "cachekit: hit policy %r failed; treated as a miss", self.policy, exc_info=True
            )
            return Match(live[0][0], None, "policy failed", live[0][1].text)
        if chosen is None:
            return Match(live[0][0], None, reason, live[0][1].text)
        score, entry = live[chosen]
        if entry.shared:
            with self._lock:  # the sync thread swaps the set under the same lock
                if len(self._hit_checks) < _HIT_CHECKS_MAX:
                    self._hit_checks.add(entry.id)  # confirmed present in the background
        return Match(score, entry)

    def record_hit(self, similarity: float) -> None:
        self._similarities.append(similarity)
        if self._min_similarity is None or similarity < self._min_similarity:
            self._min_similarity = similarity

    def decode(self, entry: SemanticEntry) -> Envelope | None:
        try:
            return decode_envelope(self.engine.serializer, entry.value)
        except SerializationError as exc:
            self.errors += 1
            log.warning(
                "cachekit: unreadable semantic entry %d treated as a miss: %s", entry.id, exc
            )
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
                    log.warning("cachekit: not caching semantic entry: %s", exc)
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
        if self._store is not None:
            self._share(entries, kept, ttl)
        evicted = self._insert(entries, kept)
        if evicted and self._store is not None:
            self._unshare([e.id for e in evicted])
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
        if self._store is not None:
            self._unshare([id_])
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

    # ------------------------------------------------------------------ persistence (no Redis)

    def save(self, directory: str | Path) -> None:
        """Write every live entry and each scope's index under ``directory``."""
        root = Path(directory)
        self.purge_expired()
        with self._lock:
            root.mkdir(parents=True, exist_ok=True)
            scopes_dir = root / "scopes"
            scopes_dir.mkdir(exist_ok=True)
            names: dict[str, str] = {}
            for i, (scope, index) in enumerate(self._indexes.items()):
                names[scope] = f"s{i}"
                index.save(scopes_dir / names[scope])
            rows = [
                [e.id, e.scope, e.text, e.value, e.created_at, e.expires_at, e.version]
                for e in self._entries.values()
            ]
            (root / "entries.msgpack").write_bytes(msgpack.packb(rows, use_bin_type=True))
            meta = {
                "format": _SAVE_FORMAT,
                "name": self.name,
                "scopes": names,
                "embedder": self.embedder.name,
            }
            (root / "meta.json").write_text(json.dumps(meta, indent=2))

    def load(self, directory: str | Path) -> int:
        """Replace the local entries with those saved by :meth:`save` (expired ones are
        dropped). Returns how many entries were loaded."""
        root = Path(directory)
        meta = json.loads((root / "meta.json").read_text())
        if meta.get("format") != _SAVE_FORMAT:
            raise ValueError(f"unsupported semantic tier format {meta.get('format')!r} in {root}")
        if meta.get("embedder") != self.embedder.name:
            raise ValueError(
                f"{root} was written with embedder {meta.get('embedder')!r}, this tier uses "
                f"{self.embedder.name!r}; its vectors are not comparable"
            )
        indexes: dict[str, VectorIndex] = {}
        for scope, sub in meta["scopes"].items():
            indexes[scope] = self._load_index(root / "scopes" / sub)
        rows = msgpack.unpackb((root / "entries.msgpack").read_bytes(), raw=False)
        now = self.engine.clock()
        stamp = time.monotonic()
        with self._lock:
            self.clear()
            self._indexes = indexes
            vector_bytes = {scope: ix.dim * 4 for scope, ix in indexes.items()}  # float32
            for id_, scope, text, value, created, expires, version in rows:
                e = SemanticEntry(id_, scope, text, value, created, expires, version, stamp=stamp)
                self._entries.put(e, vector_bytes.get(scope, 0))
                if expires is not None:
                    heapq.heappush(self._expiry, (expires, id_))
            # Versions are per cache instance; what was saved belongs to this one now.
            for e in self._entries.values():
                e.version = self.engine.version
            for scope, index in list(indexes.items()):
                from_index = set(_index_ids(index))
                known = {e.id for e in self._entries.values() if e.scope == scope}
                orphans = from_index - known
                if orphans:
                    index.remove(np.asarray(sorted(orphans), dtype=np.int64))
                if len(index) == 0:
                    del self._indexes[scope]
            self._evict_over_bounds()  # saved by a tier with larger bounds
        self.purge_expired(now)
        return len(self._entries)

    def _load_index(self, path: Path) -> VectorIndex:
        if self._index_factory is None:
            from cachekit.semantic.index import FaissIndex

            return FaissIndex.load(path)
        loader = getattr(type(self._index_factory(1)), "load", None)
        if loader is None:
            raise TypeError("the index type made by index_factory has no load() classmethod")
        return loader(path)

    # ------------------------------------------------------------------ telemetry

    def stats(self) -> dict[str, Any]:
        b = self.batcher
        qw = b.queue_wait if b is not None else LatencyHistogram()
        sims = sorted(self._similarities)
        lookups = self.lookups

        def ms(h: LatencyHistogram, q: float) -> float | None:
            v = h.percentile(q)
            return None if v is None else v * 1e3

        return {
            "policy": getattr(self.policy, "name", repr(self.policy)),
            "lookups": lookups,
            "exact_hits": self.exact_hits,
            "semantic_hits": self.semantic_hits,
            "misses": self.misses,
            "hit_rate": (self.exact_hits + self.semantic_hits) / lookups if lookups else 0.0,
            "probes": self.probes,
            "probe_hits": self.probe_hits,
            "batches": b.batches if b is not None else 0,
            "batch_size_mean": b.mean_batch if b is not None else 0.0,
            "batch_size_max": b.max_seen if b is not None else 0,
            "queue_wait_p50_ms": ms(qw, 0.5),
            "queue_wait_p99_ms": ms(qw, 0.99),
            "embed_p50_ms": ms(self.embed_time, 0.5),
            "embed_p99_ms": ms(self.embed_time, 0.99),
            "model_load_ms": None if self.model_load_s is None else self.model_load_s * 1e3,
            "search_p50_ms": ms(self.search_time, 0.5),
            "search_p99_ms": ms(self.search_time, 0.99),
            "refusals": dict(self.arbiter.refusals),
            "hit_similarity_p50": sims[len(sims) // 2] if sims else None,
            "hit_similarity_min": self._min_similarity,
            "index_size": len(self._entries),
            "index_bytes": self._entries.bytes,
            "scopes": len(self._indexes),
            "evictions": self.evictions,
            "too_large": self.too_large,
            "expirations": self.expirations,
            "errors": self.errors,
            "shared": self.shared,
            "redis_sync_lag_p50_ms": ms(self.sync_lag, 0.5),
            "redis_sync_lag_p99_ms": ms(self.sync_lag, 0.99),
            "resyncs": self.resyncs,
            **self.arbiter.summary(),
            "invalid_entries": self.invalid_entries,
            "invalid_stats": self.invalid_stats,
            "log_lost": self.lost_log,
            "missing_from_store": self.missing_found,
            "ready": self._ready.is_set(),
        }

    # ------------------------------------------------------------------ lifecycle

    @property
    def store(self) -> SemanticStore | None:
        """The shared store this tier follows (None when entries stay in-process)."""
        return self._store

    def start(self) -> None:
        """Start following Redis (idempotent; a no-op without Redis). The semantic decorator
        calls it when it creates the tier; every use calls it too."""
        if self._store is None or self._sync_thread is not None or self._stop.is_set():
            return
        with self._start_lock:
            if self._sync_thread is None and not self._stop.is_set():
                t = threading.Thread(
                    target=self._sync_loop, name=f"cachekit-sem-sync:{self.name}", daemon=True
                )
                self._sync_thread = t
                t.start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until the index has been built from Redis (True at once without Redis)."""
        self.start()
        return self._ready.wait(timeout)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued lookup has its answer."""
        return self.batcher.flush(timeout) if self.batcher is not None else True

    def close(self) -> None:
        """Stop the batching and Redis threads (later calls still work, unbatched and
        without following Redis)."""
        if self.batcher is not None:
            self.batcher.close()
        self._stop.set()
        if self._store is not None:
            try:
                self._store.close()  # interrupts a blocked read instead of waiting out its block
            except Exception:
                log.debug("cachekit: error closing the semantic store", exc_info=True)
        t = self._sync_thread
        if t is not None and t is not threading.current_thread():
            t.join(FOLLOW_BLOCK_S + 1.0)

    # ------------------------------------------------------------------ sharing

    def _share(self, entries: Sequence[SemanticEntry], vecs: np.ndarray, ttl: float | None) -> None:
        """Write entries to the shared store, one guarded call per chunk: an entry is marked
        shared only when its chunk was written."""
        store = self._store
        assert store is not None
        emb = self.embedder.name
        for start in range(0, len(entries), PIPELINE_CHUNK):
            chunk = entries[start : start + PIPELINE_CHUNK]
            stored = [
                StoredEntry(
                    e.id,
                    e.scope,
                    e.text,
                    e.value,
                    e.created_at,
                    e.expires_at,
                    e.version,
                    emb,
                    vecs[start + j],
                )
                for j, e in enumerate(chunk)
            ]
            if self.engine.l2_call(store.write, stored, ttl, self._origin) is not FAILED:
                for e in chunk:
                    e.shared = True

    def _unshare(self, ids: Sequence[int]) -> None:
        store = self._store
        assert store is not None
        for start in range(0, len(ids), PIPELINE_CHUNK):
            self.engine.l2_call(
                store.delete, list(ids[start : start + PIPELINE_CHUNK]), self._origin
            )

    def _fetch(self, ids: Sequence[int]) -> list[tuple[SemanticEntry, np.ndarray]] | None:
        """The stored entries of ``ids`` that pass validation; None when the store failed."""
        assert self._store is not None
        got = self.engine.l2_call(self._store.fetch, ids)
        if got is FAILED:
            return None
        stored, bad = got
        for id_, reason in bad:
            self._invalid(id_, f"unreadable: {reason}")
        now = self.engine.clock()
        out: list[tuple[SemanticEntry, np.ndarray]] = []
        for s in stored:
            vec = self._valid_vector(s)
            if vec is None or (s.expires_at is not None and s.expires_at <= now):
                continue
            self._take_stats(s)
            out.append(
                (
                    SemanticEntry(
                        s.id,
                        s.scope,
                        s.text,
                        s.value,
                        s.created_at,
                        s.expires_at,
                        s.version,
                        shared=True,
                    ),
                    vec,
                )
            )
        return out

    def _valid_vector(self, s: StoredEntry) -> np.ndarray | None:
        """The entry's vector when the entry may be indexed; None (counted) otherwise."""
        emb = self.embedder
        vec = np.asarray(s.vector, dtype=np.float32)
        if s.embedder != emb.name:
            reason = f"embedded by {s.embedder!r}, not {emb.name!r}"
        elif vec.ndim != 1 or vec.shape[0] != emb.dim:
            reason = f"dimension {vec.shape} is not ({emb.dim},)"
        elif not np.isfinite(vec).all():
            reason = "vector not finite"
        elif abs(float(np.linalg.norm(vec)) - 1.0) > UNIT_NORM_TOLERANCE:
            reason = f"vector norm {float(np.linalg.norm(vec)):.6g} is not 1"
        elif not isinstance(s.scope, str) or entry_id(s.scope, s.text) != s.id:
            reason = "id does not match its scope and text"
        elif not isinstance(s.value, bytes):
            reason = "value is not bytes"
        else:
            return vec
        self._invalid(s.id, reason)
        return None

    def _take_stats(self, s: StoredEntry) -> None:
        """The record stored beside a valid entry, into the arbiter (a malformed one is
        skipped and counted: the entry is still served)."""
        if s.stats_problem is not None:
            self._invalid_stats(s.id, s.stats_problem)
        elif s.stats is not None:
            self.arbiter.merge_stats(s.id, s.stats)

    def _invalid_stats(self, id_: int, reason: str) -> None:
        self.invalid_stats += 1
        log.warning(
            "cachekit: record of semantic entry %d in the shared store skipped: %s", id_, reason
        )

    def _share_verdict(self, entry_id: int, correct: bool, similarity: float, user: bool) -> None:
        """The arbiter's hook: add a verdict to the entry's shared record and announce it.
        A failure (Redis down) costs the sharing only."""
        assert self._store is not None
        change = StatsChange(
            entry_id,
            confirmed=int(correct),
            refuted=int(not correct),
            reported_wrong=int(user and not correct),
            refuted_at=None if correct else similarity,
        )
        self.engine.l2_call(self._store.add_stats, [change], self._origin)

    def _share_label(self, label: Label) -> None:
        """The arbiter's label hook: append the verdict to the tier's capped list of labels
        (every process's, for ``cachekit export-labels``). A failure costs the sharing only."""
        assert self._store is not None
        self.engine.l2_call(self._store.push_labels, [json.dumps(label.to_dict())], LABELS_MAX)

    def _share_served(self) -> None:
        """Served counts since the last batch, added to the shared records unannounced, at most
        once per :data:`_SERVED_FLUSH_S` (not between two reads of a busy log)."""
        now = time.monotonic()
        if now < self._served_at:
            return
        self._served_at = now + _SERVED_FLUSH_S
        store = self._store
        taken = self.arbiter.take_served()
        if taken and store is not None and store.shares_records:
            self.engine.l2_call(store.add_stats, [StatsChange(i, served=n) for i, n in taken], None)

    def _apply_stats(self, ids: Sequence[int]) -> bool:
        """New shared records of ``ids`` (announced by another process) into the arbiter."""
        store = self._store
        if store is None or not store.shares_records:
            return True
        got = self.engine.l2_call(store.fetch_stats, ids)
        if got is FAILED:
            return False
        records, bad = got
        for id_, reason in bad:
            self._invalid_stats(id_, reason)
        for id_, st in records.items():
            self.arbiter.merge_stats(id_, st)
        return True

    def _invalid(self, id_: int, reason: str) -> None:
        self.invalid_entries += 1
        log.warning("cachekit: semantic entry %d from the shared store skipped: %s", id_, reason)

    def _apply_adds(self, fetched: list[tuple[SemanticEntry, np.ndarray]]) -> None:
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

    def _resync(self) -> bytes | None:
        """Rebuild the local state from the store. Returns the log cursor to follow from, or
        None when the store failed."""
        assert self._store is not None
        scan_started = time.monotonic()
        snap = self.engine.l2_call(self._store.snapshot)
        if snap is FAILED:
            return None
        fetched = self._fetch(snap.ids)
        if fetched is None:
            return None
        self._gen = snap.generation
        self._apply_adds(fetched)
        present = {e.id for e, _ in fetched}
        with self._lock:
            stale = [
                e.id
                for e in self._entries.values()
                if e.shared and e.stamp < scan_started and e.id not in present
            ]
        self.remove_ids(stale)
        self.resyncs += 1
        return snap.cursor

    def _apply_log(self, messages: Sequence[LogMessage]) -> bool:
        """Apply the log's messages; False when an entry could not be fetched."""
        now = time.time()
        for m in messages:
            if m.origin == self._origin:
                continue
            if m.op == "add":
                fetched = self._fetch(m.ids)
                if fetched is None:
                    return False
                self._apply_adds(fetched)
            elif m.op == "del":
                self.remove_ids(m.ids)
                self.arbiter.forget(m.ids)
            elif m.op == "stats" and not self._apply_stats(m.ids):
                return False
            self.sync_lag.record(max(0.0, now - m.at_s))
        return True

    def _sync_loop(self) -> None:
        backoff = _SYNC_BACKOFF_S
        last: bytes | None = None
        while not self._stop.is_set():
            try:
                last = self._sync_step(last)
            except Exception as exc:  # a bug or a dead reader must not end syncing
                if self._stop.is_set():
                    break
                self.errors += 1
                log.warning("cachekit: semantic sync of %s failed (%r); rescanning", self.name, exc)
                last = None
            if last is None:
                # Messages may have been missed: the next step rescans, after a backoff.
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _SYNC_BACKOFF_MAX_S)
                continue
            backoff = _SYNC_BACKOFF_S

    def _sync_step(self, last: bytes | None) -> bytes | None:
        """Build (when ``last`` is None) or follow the log once. Returns the cursor to go on
        from, or None to rebuild after a backoff (a failure)."""
        if last is None:
            return self._rebuild()
        read = self._read_log(last)
        if read is None:
            return None
        if read.generation != self._gen or read.lost:
            # The store lost this tier's data (restart, flush) or messages were trimmed
            # before they were read: rebuild at once.
            self.lost_log += read.lost
            return self._rebuild()
        if read.messages and not self._apply_log(read.messages):
            return None
        self._share_served()
        self.purge_expired()
        if self._check_presence():
            return self._rebuild()
        return read.cursor

    def _rebuild(self) -> bytes | None:
        if self._stop.is_set():
            return None
        cursor = self._resync()
        if cursor is not None and not self._ready.is_set():
            self._ready.set()
            if self._index_factory is None:
                # Importing faiss takes most of a second: here, not when the first entry
                # shared by another replica arrives.
                import cachekit.semantic.index  # noqa: F401
        return cursor

    def _read_log(self, cursor: bytes) -> Any:
        """One read of the log: blocking on the store's own connection when it can follow
        (its failures are not the shared tier's, so it bypasses the breaker), else a guarded
        poll after the polling interval."""
        store = self._store
        assert store is not None
        if store.follows:
            return store.follow(cursor, FOLLOW_BLOCK_S)
        self._stop.wait(self._sync_interval_s)
        read = self.engine.l2_call(store.read_after, cursor)
        return None if read is FAILED else read

    def _check_presence(self) -> bool:
        """Whether an entry held here is gone from the store (evicted or deleted without an
        announcement): the entries answered from since the last check, and a rotating slice of
        the rest, at most once per :data:`_AUDIT_INTERVAL_S`."""
        store = self._store
        now_m = time.monotonic()
        if store is None or now_m < self._audit_at:
            return False
        self._audit_at = now_m + _AUDIT_INTERVAL_S
        ids = self._audit_ids()
        if not ids:
            return False
        gone = self.engine.l2_call(store.missing, ids)
        if gone is FAILED or not gone:
            return False
        now = self.engine.clock()
        with self._lock:
            held = [
                i
                for i in gone
                if (e := self._entries.get(i)) is not None
                and e.shared
                and (e.expires_at is None or e.expires_at > now + _EXPIRY_SLACK_S)
            ]
        self.missing_found += len(held)
        return bool(held)

    def _audit_ids(self) -> list[int]:
        with self._lock:
            hits, self._hit_checks = self._hit_checks, set()
            n = len(self._entries)
            if n and self._audit_pos >= n:
                self._audit_pos = 0
            start = self._audit_pos
            ring = [
                e.id
                for e in itertools.islice(self._entries.values(), start, start + _AUDIT_BATCH)
                if e.shared
            ]
            self._audit_pos = start + _AUDIT_BATCH
        return list(hits.union(ring))


def _index_ids(index: Any) -> list[int]:
    ids = getattr(index, "ids", None)
    return [int(i) for i in ids()] if callable(ids) else []


def semantic_base(key_prefix: str, namespace: str, name: str) -> str:
    """What every shared key of the semantic function ``name`` starts with (entries, log,
    generation, labels): ``{key_prefix}:{namespace}:sem:{name}``."""
    return f"{key_prefix}:{namespace}:sem:{name}"


def _semantic_store(engine: Engine, base: str, log_maxlen: int) -> SemanticStore | None:
    """The shared tier's semantic store, when it offers one."""
    return None if engine.l2 is None else engine.l2.semantic_store(base, log_maxlen)
