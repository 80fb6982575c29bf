"""Where a semantic tier shares its entries with other processes: the mechanism, no policy.

A :class:`SemanticStore` keeps one record per entry (with the entry's TTL) and a log that
announces every addition and removal. The tier (:mod:`cachekit.semantic.tier`) decides what to
write, when to rebuild and what to apply; a store only moves records. Stores raise on failure:
the tier calls them through the engine's guarded shared-tier call.

A shared tier offers a store from its ``semantic_store(base_key)``
(:meth:`cachekit.backends.base.SharedTier.semantic_store`; Redis does, the default is ``None``):
any other tier keeps its semantic entries in-process.

The Redis layout of :class:`RedisSemanticStore`: each entry is a hash ``{base}:e:{id}`` (Redis
TTL = entry TTL), the log is the stream ``{base}:log``, and ``{base}:gen`` is a token that lives
as long as Redis keeps this tier's data: a restart or a flush loses it, which tells a follower
its index no longer matches (a reconnecting pool would otherwise hide the restart).

Each entry's hash also carries the entry's shared record
(:class:`~cachekit._core.types.EntryStats`): the counters ``st_n`` (served), ``st_ok``
(confirmed), ``st_bad`` (refuted), ``st_user`` (reported wrong by users) and ``st_sim`` (the
highest similarity at which it was refuted). :meth:`RedisSemanticStore.add_stats` changes them
atomically (a small Lua script: the counters are incremented, ``st_sim`` only ever rises, and
nothing is written for an entry that is gone) and announces a verdict with a ``stats`` message
on the log; served counts are added without a message. A store that does not override them
(``shares_records`` False) shares no records.

Verdicts are also kept as labelled pairs (:class:`~cachekit.semantic.arbiter.Label`, one JSON
object each) in the capped list ``{base}:labels``, newest first: :meth:`RedisSemanticStore.
push_labels` pushes and trims it in one round trip, and ``cachekit export-labels`` reads it.

A cursor is opaque to the tier. Here it is ``b"<stream id> <n>"``: the last message read and how
many messages the stream had received up to it. Comparing ``n`` with the stream's
``entries-added`` (Redis >= 7) tells whether messages the reader has not seen were trimmed
(``LogRead.lost``), which a plain XREAD would skip in silence.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cachekit._core.serialization import DEFAULT_MAX_BYTES
from cachekit._core.types import EntryStats

__all__ = [
    "LABELS_SUFFIX",
    "LOG_READ_BATCH",
    "MAX_TEXT_BYTES",
    "PIPELINE_CHUNK",
    "READER_TIMEOUT_MARGIN_S",
    "SCAN_BATCH",
    "STATS_FIELDS",
    "LogMessage",
    "LogRead",
    "RedisSemanticStore",
    "SemanticStore",
    "Snapshot",
    "StatsChange",
    "StoredEntry",
    "parse_stats",
]

#: What ends the key of a tier's list of labelled verdicts (``{base}:labels``).
LABELS_SUFFIX = ":labels"
#: Most entries written, deleted or fetched per pipeline round trip.
PIPELINE_CHUNK = 500
#: Most log messages returned by one read; a full batch means more are waiting.
LOG_READ_BATCH = 1000
#: Keys asked per SCAN step while listing entries.
SCAN_BATCH = 1000
#: Approximate length the log is trimmed to on every append.
LOG_MAXLEN = 100_000
#: Seconds a blocking reader's socket waits beyond its block before it calls the server dead.
READER_TIMEOUT_MARGIN_S = 1.0
#: Hash fields of an entry's shared record: served, confirmed, refuted, reported wrong, and the
#: highest refuted similarity.
STATS_FIELDS = ("st_n", "st_ok", "st_bad", "st_user", "st_sim")
_STATS_KEYS = tuple(f.encode() for f in STATS_FIELDS)
#: Largest counter accepted from the store (beyond it the record is treated as hostile).
_STATS_MAX_COUNT = 2**53
#: The longest entry text a Redis semantic store shares or reads (bytes of UTF-8). Texts past the
#: embedder's window are never semantic hits with the slot guard on; this only bounds what a
#: forged or runaway entry costs every reader.
MAX_TEXT_BYTES = 1 << 20

# KEYS[1]: the entry hash. ARGV: served, confirmed, refuted, reported wrong (increments) and the
# refuted similarity ("" for none). A counter that is not a decimal integer in [0, 2**53)
# (hostile or damaged) counts as 0 and is rewritten; st_sim rises only, and a value that is not
# a number in [-1, 1] is replaced. Nothing is written for a missing entry (it would outlive it
# without a TTL).
_ADD_STATS_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local fields = {'st_n', 'st_ok', 'st_bad', 'st_user'}
for i = 1, 4 do
  local raw = redis.call('HGET', KEYS[1], fields[i])
  local d = tonumber(ARGV[i]) or 0
  local ok = raw and #raw <= 15 and string.match(raw, '^%d+$')
  if d ~= 0 or (raw and not ok) then
    local cur = ok and tonumber(raw) or 0
    redis.call('HSET', KEYS[1], fields[i], string.format('%d', cur + d))
  end
end
local new = tonumber(ARGV[5])
if new then
  local raw = redis.call('HGET', KEYS[1], 'st_sim')
  local cur = raw and string.match(raw, '^[-+%d.eE]+$') and tonumber(raw)
  if (not cur) or cur ~= cur or cur > 1 or cur < -1 or new > cur then
    redis.call('HSET', KEYS[1], 'st_sim', ARGV[5])
  end
end
return 1
"""


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """One entry as shared: what a tier needs to rebuild it and its vector."""

    id: int
    scope: str
    text: str
    value: bytes
    created_at: float
    expires_at: float | None
    version: int
    embedder: str
    vector: np.ndarray
    #: The entry's shared record (None when it has none, or it was malformed: then
    #: ``stats_problem`` says why and the entry itself is still usable).
    stats: EntryStats | None = None
    stats_problem: str | None = None


@dataclass(frozen=True, slots=True)
class StatsChange:
    """What happened to one entry since the last report: counts to add, and the similarity at
    which it was refuted (None when it was not)."""

    id: int
    served: int = 0
    confirmed: int = 0
    refuted: int = 0
    reported_wrong: int = 0
    refuted_at: float | None = None


@dataclass(frozen=True, slots=True)
class LogMessage:
    """One announcement: ``op`` is ``"add"``, ``"del"`` or ``"stats"`` (new records) of
    ``ids``, by writer ``origin``; ``at_s`` is when the log received it (seconds since the
    epoch)."""

    cursor: bytes
    op: str
    origin: bytes
    ids: tuple[int, ...]
    at_s: float


@dataclass(frozen=True, slots=True)
class LogRead:
    """One read of the log: the store's generation token, the messages (malformed ones left
    out), the cursor to read after next time, whether more messages are waiting, and whether
    messages after the cursor were lost (trimmed or the log deleted before they were read):
    then the reader must rebuild from a snapshot."""

    generation: bytes | None
    messages: list[LogMessage]
    cursor: bytes
    more: bool
    lost: bool = False


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a rebuild starts from: the store's generation token, the log position to follow
    from, and the ids of every stored entry."""

    generation: bytes | None
    cursor: bytes
    ids: list[int]


class SemanticStore:
    """Shared semantic entries and their log: the base every store subclasses. Every method
    raises on failure. The first five are required; the rest are optional abilities, each with
    a documented default that a store overrides to offer it (the tier calls them without asking
    what a store has)."""

    @property
    def follows(self) -> bool:
        """Whether :meth:`follow` blocks until a message arrives (else the tier polls
        :meth:`read_after` at its interval). Default: False."""
        return False

    #: Whether :meth:`add_stats`, :meth:`fetch_stats` and :meth:`push_labels` share records.
    shares_records: bool = False

    def write(self, entries: Sequence[StoredEntry], ttl: float | None, origin: bytes) -> None:
        """Store ``entries`` (replacing same ids), then announce them on the log."""
        raise NotImplementedError

    def delete(self, ids: Sequence[int], origin: bytes) -> None:
        """Remove the entries of ``ids`` and announce it on the log."""
        raise NotImplementedError

    def fetch(self, ids: Sequence[int]) -> tuple[list[StoredEntry], list[tuple[int, str]]]:
        """The stored entries of ``ids`` (absent ones skipped), and ``(id, reason)`` for those
        that could not be read."""
        raise NotImplementedError

    def snapshot(self) -> Snapshot:
        """Start (or join) a generation and list every entry. The cursor is taken before the
        listing, so what is announced during it is read from the log afterwards."""
        raise NotImplementedError

    def read_after(self, cursor: bytes) -> LogRead:
        """The log messages after ``cursor`` (at most :data:`LOG_READ_BATCH`), with the
        generation token read in the same round trip."""
        raise NotImplementedError

    # ------------------------------------------------------------------ optional

    def follow(self, cursor: bytes, block_s: float) -> LogRead:
        """:meth:`read_after`, waiting up to ``block_s`` for a message. Default: it does not
        wait (and :attr:`follows` is False)."""
        return self.read_after(cursor)

    def missing(self, ids: Sequence[int]) -> list[int]:
        """Those of ``ids`` whose entries are no longer stored. Default: read through
        :meth:`fetch` (an entry that cannot be read is still stored)."""
        entries, unreadable = self.fetch(ids)
        present = {e.id for e in entries} | {i for i, _ in unreadable}
        return [i for i in ids if i not in present]

    def add_stats(self, changes: Sequence[StatsChange], origin: bytes | None) -> None:
        """Apply ``changes`` to the stored records and announce them (op ``stats``) unless
        ``origin`` is None. Default: nothing (records are not shared)."""

    def fetch_stats(
        self, ids: Sequence[int]
    ) -> tuple[dict[int, EntryStats], list[tuple[int, str]]]:
        """The stored records of ``ids`` (entries without one skipped), and the malformed.
        Default: none."""
        return {}, []

    def push_labels(self, records: Sequence[str], cap: int) -> None:
        """Add verdicts (JSON) to the capped list of labels, keeping the newest ``cap``.
        Default: nothing."""

    def close(self) -> None:
        """Release what the store holds of its own (a blocked :meth:`follow` returns at once).
        Default: nothing."""


class RedisSemanticStore(SemanticStore):
    """:class:`SemanticStore` on a redis-py client (standalone or cluster). ``client`` returns
    the client at each use (a tier creates its client lazily).

    ``reader(socket_timeout)`` makes a client of its own for :meth:`follow`, whose blocking
    read would otherwise hold a pooled connection and outlast the pool's short timeout."""

    def __init__(
        self,
        client: Callable[[], Any],
        cluster: bool,
        base: str,
        log_maxlen: int = LOG_MAXLEN,
        reader: Callable[[float], Any] | None = None,
        max_text_bytes: int = MAX_TEXT_BYTES,
        max_value_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if max_text_bytes < 1 or max_value_bytes < 1:
            raise ValueError("max_text_bytes and max_value_bytes must be positive")
        self.max_text_bytes = max_text_bytes
        self.max_value_bytes = max_value_bytes
        self._client = client
        self.cluster = cluster
        self.base = base
        self.log_maxlen = log_maxlen
        self.log_key = f"{base}:log"
        self.gen_key = f"{base}:gen"
        self.labels_key = f"{base}{LABELS_SUFFIX}"
        self._entry_prefix = f"{base}:e:"
        self._reader_factory = reader
        self._reader: Any = None
        self._reader_lock = threading.Lock()
        self._closed = False
        self._stats_script: Any = None  # _ADD_STATS_LUA, registered at its first use

    def entry_key(self, id_: int) -> str:
        return f"{self._entry_prefix}{id_}"

    @property
    def client(self) -> Any:
        return self._client()

    def _pipeline(self) -> Any:
        client = self.client
        return client.pipeline() if self.cluster else client.pipeline(transaction=False)

    def _announce(self, op: str, ids: Iterator[int] | Sequence[int], origin: bytes) -> None:
        self.client.xadd(
            self.log_key,
            {"op": op, "src": origin, "ids": " ".join(map(str, ids))},
            maxlen=self.log_maxlen,
            approximate=True,
        )

    def write(self, entries: Sequence[StoredEntry], ttl: float | None, origin: bytes) -> None:
        """Write and announce ``entries``; one whose text or value is over the store's bounds
        is not shared (readers would refuse it), and stays in its own process."""
        px = None if ttl is None else max(1, math.ceil(ttl * 1000))
        entries = [e for e in entries if self._fits(e)]
        for start in range(0, len(entries), PIPELINE_CHUNK):
            chunk = entries[start : start + PIPELINE_CHUNK]
            pipe = self._pipeline()
            for e in chunk:
                key = self.entry_key(e.id)
                pipe.hset(key, mapping=_to_hash(e))
                if px is not None:
                    pipe.pexpire(key, px)
                else:
                    pipe.persist(key)
            pipe.execute()
            # Announced only after the hashes are written (a cluster pipeline may run on
            # several nodes in any order), so a reader never fetches an entry too early.
            self._announce("add", (e.id for e in chunk), origin)

    def delete(self, ids: Sequence[int], origin: bytes) -> None:
        for start in range(0, len(ids), PIPELINE_CHUNK):
            chunk = list(ids[start : start + PIPELINE_CHUNK])
            self.client.delete(*(self.entry_key(i) for i in chunk))
            self._announce("del", chunk, origin)

    def _fits(self, e: StoredEntry) -> bool:
        text = len(e.text.encode("utf-8", "surrogatepass"))
        return text <= self.max_text_bytes and len(e.value) <= self.max_value_bytes

    def _sizes_ok(self, ids: Sequence[int], bad: list[tuple[int, str]]) -> list[int]:
        """Those of ``ids`` whose text and value are within the bounds, asked of Redis by
        length (HSTRLEN) before anything is read: a forged entry with a huge text costs its
        readers a few bytes, not its size. The others go to ``bad``."""
        pipe = self._pipeline()
        for i in ids:
            pipe.hstrlen(self.entry_key(i), "text")
            pipe.hstrlen(self.entry_key(i), "value")
        sizes = pipe.execute(raise_on_error=False)
        ok = []
        for j, id_ in enumerate(ids):
            text, value = sizes[2 * j], sizes[2 * j + 1]
            if isinstance(text, Exception) or isinstance(value, Exception):
                bad.append((id_, repr(text if isinstance(text, Exception) else value)))
            elif text > self.max_text_bytes or value > self.max_value_bytes:
                bad.append(
                    (id_, f"text of {text} or value of {value} bytes is over the store's bounds")
                )
            else:
                ok.append(id_)
        return ok

    def fetch(self, ids: Sequence[int]) -> tuple[list[StoredEntry], list[tuple[int, str]]]:
        found: list[StoredEntry] = []
        bad: list[tuple[int, str]] = []
        for start in range(0, len(ids), PIPELINE_CHUNK):
            chunk = self._sizes_ok(ids[start : start + PIPELINE_CHUNK], bad)
            if not chunk:
                continue
            pipe = self._pipeline()
            for i in chunk:
                pipe.hgetall(self.entry_key(i))
            # Per-command errors (WRONGTYPE: a foreign value under our prefix) are data, not a
            # Redis failure; a dead connection still raises from execute().
            for id_, h in zip(chunk, pipe.execute(raise_on_error=False), strict=True):
                if isinstance(h, Exception):
                    bad.append((id_, repr(h)))
                    continue
                if not h or b"vec" not in h:
                    continue  # expired or deleted since it was announced
                try:
                    found.append(_from_hash(id_, h))
                except (KeyError, ValueError, TypeError, UnicodeDecodeError) as exc:
                    bad.append((id_, repr(exc)))
        return found, bad

    def add_stats(self, changes: Sequence[StatsChange], origin: bytes | None) -> None:
        """Add ``changes`` to the entries' records (atomically per entry); announce them with
        one ``stats`` message unless ``origin`` is None (served counts travel unannounced)."""
        if self._stats_script is None:
            self._stats_script = self.client.register_script(_ADD_STATS_LUA)
        script = self._stats_script
        for start in range(0, len(changes), PIPELINE_CHUNK):
            chunk = changes[start : start + PIPELINE_CHUNK]
            calls = [(self.entry_key(c.id), *_stats_args(c)) for c in chunk]
            if self.cluster:  # a cluster pipeline refuses scripts: there, one call per entry
                for key, *args in calls:
                    script([key], args, client=self.client)
            else:
                self._evalsha_pipelined(script, calls)
            if origin is not None:
                self._announce("stats", (c.id for c in chunk), origin)

    def _evalsha_pipelined(self, script: Any, calls: Sequence[tuple[Any, ...]]) -> None:
        """Run ``script`` once per ``(key, *args)`` of ``calls`` in one pipeline of EVALSHAs
        (not redis-py's pipelined scripts: they cost a SCRIPT EXISTS round trip each time). A
        server without the script (restarted, SCRIPT FLUSH) gets it, and the calls it refused
        are sent again: they did not run."""
        for attempt in (0, 1):
            pipe = self._pipeline()
            for key, *args in calls:
                pipe.evalsha(script.sha, 1, key, *args)
            results = pipe.execute(raise_on_error=False)
            missing = [c for c, r in zip(calls, results, strict=True) if _noscript(r)]
            for r in results:
                if isinstance(r, Exception) and (attempt or not _noscript(r)):
                    raise r
            if not missing:
                return
            self.client.script_load(script.script)  # the same sha: the text is the same
            calls = missing

    def push_labels(self, records: Sequence[str], cap: int) -> None:
        """Add ``records`` (JSON labels) to the front of the labels list and trim it to the
        newest ``cap``, in one pipelined round trip."""
        if not records:
            return
        pipe = self._pipeline()
        pipe.lpush(self.labels_key, *records)
        pipe.ltrim(self.labels_key, 0, max(1, cap) - 1)
        pipe.execute()

    def fetch_stats(
        self, ids: Sequence[int]
    ) -> tuple[dict[int, EntryStats], list[tuple[int, str]]]:
        """The stored records of ``ids`` (entries gone or without a record skipped), and
        ``(id, reason)`` for malformed ones."""
        found: dict[int, EntryStats] = {}
        bad: list[tuple[int, str]] = []
        for start in range(0, len(ids), PIPELINE_CHUNK):
            chunk = ids[start : start + PIPELINE_CHUNK]
            pipe = self._pipeline()
            for i in chunk:
                pipe.hmget(self.entry_key(i), STATS_FIELDS)
            for id_, row in zip(chunk, pipe.execute(raise_on_error=False), strict=True):
                if isinstance(row, Exception):
                    bad.append((id_, repr(row)))
                    continue
                try:
                    st = parse_stats(dict(zip(_STATS_KEYS, row, strict=True)))
                except ValueError as exc:
                    bad.append((id_, str(exc)))
                    continue
                if st is not None:
                    found[id_] = st
        return found, bad

    def missing(self, ids: Sequence[int]) -> list[int]:
        """Those of ``ids`` whose entries are no longer stored (evicted, expired, deleted)."""
        out: list[int] = []
        for start in range(0, len(ids), PIPELINE_CHUNK):
            chunk = ids[start : start + PIPELINE_CHUNK]
            pipe = self._pipeline()
            for i in chunk:
                pipe.exists(self.entry_key(i))
            out.extend(i for i, n in zip(chunk, pipe.execute(), strict=True) if not n)
        return out

    def snapshot(self) -> Snapshot:
        client = self.client
        client.set(self.gen_key, uuid.uuid4().hex, nx=True)
        generation = client.get(self.gen_key)
        pipe = self._pipeline()
        pipe.xinfo_stream(self.log_key)
        info = pipe.execute(raise_on_error=False)[0]
        if isinstance(info, Exception):  # no log yet
            cursor = _cursor(b"0-0", 0)
        else:
            cursor = _cursor(info["last-generated-id"], info.get("entries-added"))
        prefix = self._entry_prefix
        ids: list[int] = []
        for key in client.scan_iter(match=f"{prefix}*", count=SCAN_BATCH):
            k = key.decode() if isinstance(key, bytes) else key
            try:
                ids.append(int(k[len(prefix) :]))
            except ValueError:
                continue
        return Snapshot(generation, cursor, ids)

    def read_after(self, cursor: bytes) -> LogRead:
        return self._read(self.client, cursor, None)

    shares_records = True

    @property
    def follows(self) -> bool:
        """True when the store can open a reader connection of its own (a URL, not a client
        passed in): only then does :meth:`follow` block."""
        return self._reader_factory is not None

    def follow(self, cursor: bytes, block_s: float) -> LogRead:
        """:meth:`read_after`, waiting up to ``block_s`` for a message (XREAD BLOCK) on the
        reader's own connection. Raises on failure, and once :meth:`close` was called."""
        if self._reader_factory is None:
            return self._read(self.client, cursor, None)
        return self._read(self._reader_client(block_s), cursor, max(1, int(block_s * 1000)))

    def _reader_client(self, block_s: float) -> Any:
        with self._reader_lock:
            if self._closed:
                raise RuntimeError("semantic store closed")
            if self._reader is None:
                assert self._reader_factory is not None
                self._reader = self._reader_factory(block_s + READER_TIMEOUT_MARGIN_S)
            return self._reader

    def close(self) -> None:
        """Close the reader's connection: a read blocked in :meth:`follow` returns at once
        (with an error) instead of at the end of its block."""
        with self._reader_lock:
            self._closed = True
            reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()

    def _read(self, client: Any, cursor: bytes, block_ms: int | None) -> LogRead:
        last_id, seen = _parse_cursor(cursor)
        pipe = client.pipeline() if self.cluster else client.pipeline(transaction=False)
        pipe.get(self.gen_key)
        pipe.xinfo_stream(self.log_key)
        pipe.xread({self.log_key: last_id}, count=LOG_READ_BATCH, block=block_ms)
        generation, info, resp = pipe.execute(raise_on_error=False)
        for r in (generation, resp):
            if isinstance(r, Exception):
                raise r
        raw = resp[0][1] if resp else []
        lost = _lost(info, seen, raw)
        next_cursor = (
            cursor if not raw else _cursor(raw[-1][0], None if seen is None else seen + len(raw))
        )
        return LogRead(generation, _messages(raw), next_cursor, len(raw) >= LOG_READ_BATCH, lost)


def _stream_id(raw: bytes | str) -> tuple[int, int]:
    s = raw.decode() if isinstance(raw, bytes) else raw
    ms, _, seq = s.partition("-")
    return int(ms), int(seq or 0)


def _cursor(stream_id: bytes | str, seen: int | None) -> bytes:
    sid = stream_id.decode() if isinstance(stream_id, bytes) else stream_id
    return f"{sid} {seen}".encode() if seen is not None else sid.encode()


def _parse_cursor(cursor: bytes) -> tuple[bytes, int | None]:
    """``(stream id, messages received up to it or None when unknown)``."""
    sid, _, seen = cursor.partition(b" ")
    return sid, int(seen) if seen else None


def _lost(info: Any, seen: int | None, raw: list[tuple[bytes, Any]]) -> bool:
    """Whether messages after the cursor vanished before this read: the stream received
    ``entries-added - seen`` of them, yet fewer of those were there to read."""
    if seen is None:
        return False  # a server without entries-added (Redis < 7): nothing to compare
    if isinstance(info, Exception):
        return seen > 0  # the log itself is gone (evicted or deleted) after we read some
    added = info.get("entries-added")
    if added is None:
        return False
    if added < seen:
        return True  # the log was deleted and started again
    last = _stream_id(info["last-generated-id"])
    there = sum(1 for msg_id, _ in raw if _stream_id(msg_id) <= last)
    return there < min(added - seen, LOG_READ_BATCH)


def _messages(raw: list[tuple[bytes, dict[bytes, bytes]]]) -> list[LogMessage]:
    out: list[LogMessage] = []
    for msg_id, fields in raw:
        try:
            ids = tuple(int(x) for x in fields.get(b"ids", b"").split())
        except ValueError:
            continue  # malformed: announces nothing (the cursor still moves past it)
        out.append(
            LogMessage(
                msg_id,
                fields.get(b"op", b"").decode(errors="replace"),
                fields.get(b"src", b""),
                ids,
                float(msg_id.split(b"-")[0]) / 1000.0,
            )
        )
    return out


def _to_hash(e: StoredEntry) -> dict[str, Any]:
    return {
        "vec": np.asarray(e.vector, dtype=np.float32).tobytes(),
        "text": e.text.encode("utf-8", "surrogatepass"),
        "scope": e.scope,
        "value": e.value,
        "created_at": repr(e.created_at),
        "expires_at": "" if e.expires_at is None else repr(e.expires_at),
        "v": str(e.version),
        "emb": e.embedder,
    }


def _stats_args(c: StatsChange) -> tuple[Any, ...]:
    """The ARGV of :data:`_ADD_STATS_LUA` for ``c``."""
    sim = "" if c.refuted_at is None else repr(float(c.refuted_at))
    return (c.served, c.confirmed, c.refuted, c.reported_wrong, sim)


def _noscript(reply: Any) -> bool:
    """Whether a pipelined script call failed because the server does not have the script
    (redis-py is imported here: this module loads without the ``redis`` extra)."""
    from redis.exceptions import NoScriptError

    return isinstance(reply, NoScriptError)


def _count(raw: bytes | None, name: str) -> int:
    if raw is None:
        return 0
    n = int(raw)  # ValueError for anything but an integer
    if not 0 <= n < _STATS_MAX_COUNT:
        raise ValueError(f"{name} {n} is out of range")
    return n


def parse_stats(h: dict[bytes, Any]) -> EntryStats | None:
    """The record in an entry's hash fields (:data:`STATS_FIELDS`; other fields ignored), None
    when it has none. Raises ``ValueError`` when a field is malformed: counters must be
    non-negative integers, the refuted similarity a finite number in [-1, 1]."""
    raw = [h.get(k) for k in _STATS_KEYS]
    if all(v is None for v in raw):
        return None
    try:
        counts = [_count(v, name) for v, name in zip(raw[:4], STATS_FIELDS, strict=False)]
        sim = None if raw[4] is None else float(raw[4])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"malformed record: {exc}") from None
    if sim is not None and not (math.isfinite(sim) and -1.0 <= sim <= 1.0):
        raise ValueError(f"refuted similarity {sim!r} is not in [-1, 1]")
    served, confirmed, refuted, reported_wrong = counts
    return EntryStats(served, confirmed, refuted, reported_wrong, sim)


def _stats_of(h: dict[bytes, bytes]) -> tuple[EntryStats | None, str | None]:
    try:
        return parse_stats(h), None
    except ValueError as exc:
        return None, str(exc)


def _from_hash(id_: int, h: dict[bytes, bytes]) -> StoredEntry:
    raw_exp = h.get(b"expires_at", b"")
    stats, problem = _stats_of(h)
    return StoredEntry(
        id=id_,
        scope=h[b"scope"].decode(),
        text=h[b"text"].decode("utf-8", "surrogatepass"),
        value=h[b"value"],
        created_at=float(h[b"created_at"]),
        expires_at=float(raw_exp) if raw_exp else None,
        version=int(h[b"v"]),
        embedder=h.get(b"emb", b"").decode(),
        vector=np.frombuffer(h[b"vec"], dtype=np.float32),
        stats=stats,
        stats_problem=problem,
    )
