"""A semantic tier's replication through a shared :class:`SemanticStore` (Redis): the policy of
what to share, when to rebuild and what to apply; the store only moves records.

Every entry a tier holds is also written to the store, and every addition or removal announced on
its log. One daemon thread per tier (:class:`Replication`), started when the tier is created,
builds the local index from the store's snapshot and then follows the log with a blocking read on
a connection of its own (``follow``, when the store ``follows``; otherwise it polls
``read_after``). It rebuilds from a new snapshot when the log says messages were lost (trimmed
before they were read), when the store lost its data (a new generation), and when an entry it
holds is found missing from the store (evicted or deleted behind its back: the entries this
process answered from are checked in the background, and a rotating slice of the rest). Lookups
made before the first build wait for it, up to ``initial_sync_wait_s`` after the tier was
created.

Whatever is read from the store is input, not truth: an entry is indexed only when its vector
has the tier's dimension, is finite and of unit norm (within :data:`UNIT_NORM_TOLERANCE`), was
made by this tier's embedder, and its id is the id of its own scope and text. Others are skipped
and counted (``invalid_entries``); they are data errors, not Redis failures, so only the store's
own round trips run through the engine's guarded call (and its circuit breaker).

Each entry's record (:class:`~cachekit.semantic.policy.hit_policy.EntryStats`, kept by the tier's
:class:`~cachekit.semantic.arbiter.HitArbiter`) is shared too, when the store
``shares_records``: a verdict is written beside the entry and announced in the thread that
reached it, served counts are added by the sync thread at most once a second, and a process
that reads an entry (or a ``stats`` message) merges its record. A malformed record is skipped
and counted (``invalid_stats``).

The tier is reached through its public interface only (:class:`Replicated`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from cachekit._core.types import FAILED
from cachekit._engine.telemetry import LatencyHistogram
from cachekit.backends.semantic_store import (
    PIPELINE_CHUNK,
    LogMessage,
    LogRead,
    SemanticStore,
    StatsChange,
    StoredEntry,
)
from cachekit.semantic.arbiter import LABELS_MAX, HitArbiter, Label
from cachekit.semantic.embed.embedder import fingerprint_of
from cachekit.semantic.entries import SemanticEntry, entry_id

if TYPE_CHECKING:
    from cachekit._core.protocols import Embedder
    from cachekit._engine.engine import Engine

__all__ = [
    "FOLLOW_BLOCK_S",
    "INITIAL_SYNC_WAIT_S",
    "NO_REPLICATION_STATS",
    "UNIT_NORM_TOLERANCE",
    "Replicated",
    "Replication",
]

log = logging.getLogger("cachekit.semantic")

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


#: What a tier that shares nothing reports for :meth:`Replication.stats`.
NO_REPLICATION_STATS: dict[str, Any] = {
    "redis_sync_lag_p50_ms": None,
    "redis_sync_lag_p99_ms": None,
    "resyncs": 0,
    "invalid_entries": 0,
    "invalid_stats": 0,
    "log_lost": 0,
    "missing_from_store": 0,
    "embedder": None,
    "embedder_mismatch": 0,
    "foreign_embedders": [],
}
#: Foreign embedder fingerprints remembered for the stats (the first ones seen).
MAX_FOREIGN = 8


class Replicated(Protocol):
    """What replication needs of a tier (:class:`~cachekit.semantic.tier.SemanticTier`)."""

    engine: Engine
    name: str
    arbiter: HitArbiter

    @property
    def embedder(self) -> Embedder: ...

    def add_remote(self, fetched: list[tuple[SemanticEntry, np.ndarray]]) -> None: ...

    def remove_ids(self, ids: Sequence[int]) -> int: ...

    def purge_expired(self, now: float | None = None) -> int: ...

    def shared_ids(self, start: int, count: int) -> tuple[list[int], int]: ...

    def stale_shared(self, before: float, present: set[int]) -> list[int]: ...

    def still_held(self, ids: Sequence[int], until: float) -> list[int]: ...

    def warm_index(self) -> None: ...


class Replication:
    """Shares one tier's entries through ``store`` and follows what others share."""

    def __init__(
        self,
        tier: Replicated,
        store: SemanticStore,
        *,
        sync_interval_s: float = 0.1,
        initial_sync_wait_s: float = INITIAL_SYNC_WAIT_S,
    ) -> None:
        self.tier = tier
        self.store = store
        self.engine = tier.engine
        self.origin = uuid.uuid4().hex.encode()
        self.ready = threading.Event()
        self._sync_interval_s = sync_interval_s
        self._initial_wait_until = time.monotonic() + max(0.0, initial_sync_wait_s)
        self._gen: bytes | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._start_lock = threading.Lock()
        self._lock = threading.Lock()
        self._hit_checks: set[int] = set()
        self._audit_at = 0.0
        self._audit_pos = 0
        self._served_at = 0.0
        self.sync_lag = LatencyHistogram()
        self.resyncs = 0
        self.errors = 0
        self.invalid_entries = 0
        self.invalid_stats = 0
        self.lost_log = 0
        self.missing_found = 0
        #: Shared entries written by an embedder of another fingerprint: never candidates.
        self.embedder_mismatch = 0
        self.foreign_embedders: list[str] = []
        self._fingerprint: str | None = None
        #: Called on the sync thread after each rebuild from the store, once the local index
        #: holds the new snapshot, with why it was rebuilt: ``"initial"`` (the first build),
        #: ``"retry"`` (after a failed step), ``"lost"`` (log messages trimmed before they were
        #: read), ``"generation"`` (the store lost its data) or ``"missing"`` (an entry held here
        #: was gone from the store). For tests and monitoring that wait for a rebuild itself
        #: rather than for a counter that may already have moved; an exception it raises is
        #: logged and ignored.
        self.on_rebuild: Callable[[str], None] | None = None
        if store.shares_records:
            tier.arbiter.on_verdict = self.share_verdict
            tier.arbiter.on_label = self.share_label

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the sync thread (idempotent; not after :meth:`close`)."""
        if self._thread is not None or self._stop.is_set():
            return
        with self._start_lock:
            if self._thread is None and not self._stop.is_set():
                t = threading.Thread(
                    target=self._sync_loop, name=f"cachekit-sem-sync:{self.tier.name}", daemon=True
                )
                self._thread = t
                t.start()

    def await_first_build(self) -> None:
        """A new replica answers from the shared entries from its first lookup: wait for the
        first build, but never past the bound set at creation (Redis may be down)."""
        self.start()
        left = self._initial_wait_until - time.monotonic()
        if left > 0:
            self.ready.wait(left)

    def close(self) -> None:
        self._stop.set()
        try:
            self.store.close()  # interrupts a blocked read instead of waiting out its block
        except Exception:
            log.debug("error closing the semantic store", exc_info=True)
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(FOLLOW_BLOCK_S + 1.0)

    def stats(self) -> dict[str, Any]:
        def ms(q: float) -> float | None:
            v = self.sync_lag.percentile(q)
            return None if v is None else v * 1e3

        return {
            "redis_sync_lag_p50_ms": ms(0.5),
            "redis_sync_lag_p99_ms": ms(0.99),
            "resyncs": self.resyncs,
            "invalid_entries": self.invalid_entries,
            "invalid_stats": self.invalid_stats,
            "log_lost": self.lost_log,
            "missing_from_store": self.missing_found,
            "embedder": self._fingerprint,
            "embedder_mismatch": self.embedder_mismatch,
            "foreign_embedders": list(self.foreign_embedders),
        }

    # ------------------------------------------------------------------ writes

    def share(self, entries: Sequence[SemanticEntry], vecs: np.ndarray, ttl: float | None) -> None:
        """Write entries to the store, one guarded call per chunk: an entry is marked shared
        only when its chunk was written."""
        emb = self.fingerprint
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
            if self.engine.l2_call(self.store.write, stored, ttl, self.origin) is not FAILED:
                for e in chunk:
                    e.shared = True

    def unshare(self, ids: Sequence[int]) -> None:
        for start in range(0, len(ids), PIPELINE_CHUNK):
            self.engine.l2_call(
                self.store.delete, list(ids[start : start + PIPELINE_CHUNK]), self.origin
            )

    def note_hit(self, entry_id: int) -> None:
        """An entry this process answered from: checked for presence in the background."""
        with self._lock:
            if len(self._hit_checks) < _HIT_CHECKS_MAX:
                self._hit_checks.add(entry_id)

    # ------------------------------------------------------------------ records

    def share_verdict(self, entry_id: int, correct: bool, similarity: float, user: bool) -> None:
        """The arbiter's hook: add a verdict to the entry's shared record and announce it.
        A failure (Redis down) costs the sharing only."""
        change = StatsChange(
            entry_id,
            confirmed=int(correct),
            refuted=int(not correct),
            reported_wrong=int(user and not correct),
            refuted_at=None if correct else similarity,
        )
        self.engine.l2_call(self.store.add_stats, [change], self.origin)

    def share_label(self, label: Label) -> None:
        """The arbiter's label hook: append the verdict to the tier's capped list of labels
        (every process's, for ``cachekit export-labels``). A failure costs the sharing only."""
        self.engine.l2_call(self.store.push_labels, [json.dumps(label.to_dict())], LABELS_MAX)

    def _share_served(self) -> None:
        """Served counts since the last batch, added to the shared records unannounced, at most
        once per :data:`_SERVED_FLUSH_S` (not between two reads of a busy log)."""
        now = time.monotonic()
        if now < self._served_at:
            return
        self._served_at = now + _SERVED_FLUSH_S
        taken = self.tier.arbiter.take_served()
        if taken and self.store.shares_records:
            changes = [StatsChange(i, served=n) for i, n in taken]
            self.engine.l2_call(self.store.add_stats, changes, None)

    def _apply_stats(self, ids: Sequence[int]) -> bool:
        """New shared records of ``ids`` (announced by another process) into the arbiter."""
        if not self.store.shares_records:
            return True
        got = self.engine.l2_call(self.store.fetch_stats, ids)
        if got is FAILED:
            return False
        records, bad = got
        for id_, reason in bad:
            self._invalid_stats(id_, reason)
        for id_, st in records.items():
            self.tier.arbiter.merge_stats(id_, st)
        return True

    def _invalid_stats(self, id_: int, reason: str) -> None:
        self.invalid_stats += 1
        log.warning("record of semantic entry %d in the shared store skipped: %s", id_, reason)

    # ------------------------------------------------------------------ reads

    def _fetch(self, ids: Sequence[int]) -> list[tuple[SemanticEntry, np.ndarray]] | None:
        """The stored entries of ``ids`` that pass validation; None when the store failed."""
        got = self.engine.l2_call(self.store.fetch, ids)
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
            entry = SemanticEntry(
                s.id, s.scope, s.text, s.value, s.created_at, s.expires_at, s.version, shared=True
            )
            out.append((entry, vec))
        return out

    @property
    def fingerprint(self) -> str:
        """The tier's embedder's fingerprint (:func:`~cachekit.semantic.embed.embedder.
        fingerprint_of`), written with every shared entry."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint_of(self.tier.embedder)
        return self._fingerprint

    def _same_embedder(self, stored: str) -> bool:
        """Whether an entry written with embedder ``stored`` may be compared with this tier's:
        the same fingerprint, or (an entry of an earlier version, which wrote the name alone)
        the same name (the vector's width is checked apart)."""
        if stored == self.fingerprint:
            return True
        return "|" not in stored and stored == self.tier.embedder.name

    def _foreign(self, stored: str) -> None:
        self.embedder_mismatch += 1
        if stored not in self.foreign_embedders and len(self.foreign_embedders) < MAX_FOREIGN:
            self.foreign_embedders.append(stored[:200])
            log.warning(
                "semantic entries written by embedder %r are never candidates here (this tier "
                "embeds with %r): purge them or re-embed them (cachekit reembed)",
                stored[:200],
                self.fingerprint,
            )

    def reembed(self, batch: int = 256, dry_run: bool = False) -> dict[str, Any]:
        """Embed again, with this tier's embedder, every shared entry another embedder wrote,
        and write it back under this embedder's fingerprint (same id: replicas embedding as
        this one does then use it; the others count it as foreign). For ``cachekit reembed``
        after an embedder is rolled out; raises when the store fails. Returns counts:
        ``entries``, ``reembedded``, ``already`` (this embedder's), ``expired``, and
        ``foreign`` (how many each other fingerprint had)."""
        ids = self.store.snapshot().ids
        counts: dict[str, Any] = {"entries": len(ids), "reembedded": 0, "already": 0}
        counts["expired"], counts["foreign"] = 0, {}
        origin = b"reembed-" + uuid.uuid4().hex.encode()
        for start in range(0, len(ids), batch):
            stored, _ = self.store.fetch(ids[start : start + batch])
            now = time.time()
            todo = []
            for e in stored:
                if e.expires_at is not None and e.expires_at <= now:
                    counts["expired"] += 1
                elif self._same_embedder(e.embedder):
                    counts["already"] += 1
                else:
                    counts["foreign"][e.embedder] = counts["foreign"].get(e.embedder, 0) + 1
                    todo.append(e)
            if todo and not dry_run:
                self._write_again(todo, now, origin)
            counts["reembedded"] += len(todo)
        return counts

    def _write_again(self, entries: list[StoredEntry], now: float, origin: bytes) -> None:
        vecs = np.asarray(self.tier.embedder.embed([e.text for e in entries]), dtype=np.float32)
        by_ttl: dict[float | None, list[StoredEntry]] = {}
        for e, vec in zip(entries, vecs, strict=True):
            again = dataclasses.replace(e, embedder=self.fingerprint, vector=vec, stats=None)
            ttl = None if e.expires_at is None else max(0.001, e.expires_at - now)
            by_ttl.setdefault(None if ttl is None else round(ttl, 3), []).append(again)
        for ttl, group in by_ttl.items():
            self.store.write(group, ttl, origin)

    def _valid_vector(self, s: StoredEntry) -> np.ndarray | None:
        """The entry's vector when the entry may be indexed; None (counted) otherwise."""
        emb = self.tier.embedder
        vec = np.asarray(s.vector, dtype=np.float32)
        if not self._same_embedder(s.embedder):
            self._foreign(s.embedder)
            return None
        if vec.ndim != 1 or vec.shape[0] != emb.dim:
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
            self.tier.arbiter.merge_stats(s.id, s.stats)

    def _invalid(self, id_: int, reason: str) -> None:
        self.invalid_entries += 1
        log.warning("semantic entry %d from the shared store skipped: %s", id_, reason)

    # ------------------------------------------------------------------ the sync thread

    def _resync(self) -> bytes | None:
        """Rebuild the local state from the store. Returns the log cursor to follow from, or
        None when the store failed."""
        scan_started = time.monotonic()
        snap = self.engine.l2_call(self.store.snapshot)
        if snap is FAILED:
            return None
        fetched = self._fetch(snap.ids)
        if fetched is None:
            return None
        self._gen = snap.generation
        self.tier.add_remote(fetched)
        self.tier.remove_ids(self.tier.stale_shared(scan_started, {e.id for e, _ in fetched}))
        self.resyncs += 1
        return snap.cursor

    def _apply_log(self, messages: Sequence[LogMessage]) -> bool:
        """Apply the log's messages; False when an entry could not be fetched."""
        now = time.time()
        for m in messages:
            if m.origin == self.origin:
                continue
            if m.op == "add":
                fetched = self._fetch(m.ids)
                if fetched is None:
                    return False
                self.tier.add_remote(fetched)
            elif m.op == "del":
                self.tier.remove_ids(m.ids)
                self.tier.arbiter.forget(m.ids)
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
                log.warning("semantic sync of %s failed (%r); rescanning", self.tier.name, exc)
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
            return self._rebuild("retry" if self.ready.is_set() else "initial")
        read = self._read_log(last)
        if read is None:
            return None
        if read.generation != self._gen or read.lost:
            # The store lost this tier's data (restart, flush) or messages were trimmed
            # before they were read: rebuild at once.
            self.lost_log += read.lost
            return self._rebuild("generation" if read.generation != self._gen else "lost")
        if read.messages and not self._apply_log(read.messages):
            return None
        self._share_served()
        self.tier.purge_expired()
        if self._check_presence():
            return self._rebuild("missing")
        return read.cursor

    def _rebuild(self, reason: str) -> bytes | None:
        """Rebuild from a new snapshot for ``reason`` (see :attr:`on_rebuild`); the cursor to
        follow the log from, or None when the store failed."""
        if self._stop.is_set():
            return None
        cursor = self._resync()
        if cursor is None:
            return None
        if not self.ready.is_set():
            self.ready.set()
            self.tier.warm_index()
        self._announce_rebuild(reason)
        return cursor

    def _announce_rebuild(self, reason: str) -> None:
        """Call :attr:`on_rebuild`; its failure must not make the sync thread rebuild again."""
        hook = self.on_rebuild
        if hook is None:
            return
        try:
            hook(reason)
        except Exception:
            log.warning("on_rebuild hook of %s failed", self.tier.name, exc_info=True)

    def _read_log(self, cursor: bytes) -> LogRead | None:
        """One read of the log: blocking on the store's own connection when it can follow
        (its failures are not the shared tier's, so it bypasses the breaker), else a guarded
        poll after the polling interval."""
        if self.store.follows:
            return self.store.follow(cursor, FOLLOW_BLOCK_S)
        self._stop.wait(self._sync_interval_s)
        read = self.engine.l2_call(self.store.read_after, cursor)
        return None if read is FAILED else read

    def _check_presence(self) -> bool:
        """Whether an entry held here is gone from the store (evicted or deleted without an
        announcement): the entries answered from since the last check, and a rotating slice of
        the rest, at most once per :data:`_AUDIT_INTERVAL_S`."""
        now_m = time.monotonic()
        if now_m < self._audit_at:
            return False
        self._audit_at = now_m + _AUDIT_INTERVAL_S
        ids = self._audit_ids()
        if not ids:
            return False
        gone = self.engine.l2_call(self.store.missing, ids)
        if gone is FAILED or not gone:
            return False
        held = self.tier.still_held(gone, self.engine.clock() + _EXPIRY_SLACK_S)
        self.missing_found += len(held)
        return bool(held)

    def _audit_ids(self) -> list[int]:
        with self._lock:
            hits, self._hit_checks = self._hit_checks, set()
        ring, total = self.tier.shared_ids(self._audit_pos, _AUDIT_BATCH)
        self._audit_pos = (
            0 if self._audit_pos + _AUDIT_BATCH >= total else (self._audit_pos + _AUDIT_BATCH)
        )
        return list(hits.union(ring))
