"""The engine: every caching policy lives here, once, behind a public interface.

Mechanisms below it (storage tiers, serializers, the breaker, single-flight, telemetry) are
dumb; entry points above it (the exact decorator, feature sets, the semantic decorator and tier)
translate their world into these calls:

* keys and TTLs: :meth:`Engine.make_key` (batches: :meth:`~Engine.make_keys`,
  :meth:`~Engine.make_id_keys`), :meth:`Engine.resolve_ttl` (:meth:`~Engine.resolve_ttls`);
* reads: :meth:`Engine.lookup_one`, :meth:`Engine.lookup_many`, :meth:`Engine.lookup_lazy`;
* writes: :meth:`Engine.store_many`, :meth:`Engine.delete_many`;
* misses: :meth:`Engine.single_flight` (one computation per concurrent miss, counted once),
  :meth:`Engine.refresh_in_background` (stale-while-revalidate);
* the shared tier directly: :meth:`Engine.l2_call` (an error or an open circuit costs
  :data:`~cachekit.types.FAILED`, never an exception);
* the L1 hit fast path of decorated functions: :meth:`Engine.l1_fast_path`;
* the namespace version: :attr:`Engine.version`, :meth:`Engine.invalidate_namespace`.

Every operation that may touch the shared tier has an asyncio mirror with an ``a`` prefix.
Both forms run one core: the rule is a generator that yields the shared-tier operation it needs,
``(SharedTier method name, its arguments)``, and is sent back the guarded result.
:meth:`Engine._run` drives a core with the sync tier and :meth:`Engine._arun` with its asyncio
mirror (the sans-IO pattern of h11), so no rule is written twice. The shared tier is a
:class:`~cachekit.storage.base.SharedTier`: its optional abilities are methods with defaults,
called unconditionally, never probed for. A generator costs a fraction of a microsecond per
operation, which only the paths that miss L1 pay; the L1 hit fast path runs no core.
"""

from __future__ import annotations

import json
import logging
import operator
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from cachekit.background import BackgroundRefresh
from cachekit.breaker import CircuitBreaker
from cachekit.health import Diagnosis, Health, diagnose
from cachekit.keys import FLOAT_SIGNATURES, SCALAR_SIGNATURES, all_scalar, local_key
from cachekit.protocols import Clock, Entry, Serializer
from cachekit.sansio import Core, adrive, drive
from cachekit.serialization import (
    Packed,
    SerializationError,
    SignedSerializer,
    decode_envelope,
    encode_for_tiers,
    for_sharing,
    get_serializer,
    parse_version,
)
from cachekit.singleflight import SingleFlight
from cachekit.storage.base import SharedTier, as_shared_tier
from cachekit.storage.memory import MemoryStore
from cachekit.telemetry import CacheStats, FunctionCounters, Telemetry
from cachekit.types import (
    FAILED,
    MISSED,
    CacheKey,
    Envelope,
    Found,
    LazyFound,
    Status,
    StoreItem,
)
from cachekit.validation import check_seconds

if TYPE_CHECKING:
    from cachekit.protocols import StorageTier

__all__ = ["Engine", "KeyShape"]

log = logging.getLogger("cachekit")

T = TypeVar("T")

#: One L1 write of a batch: (local key, envelope as held, seconds to keep, size in bytes).
L1Item = tuple[Hashable, Envelope, float | None, int]

#: The positional fast path of a decorated function, from ``ArgNormalizer.positional_fast_path``:
#: (fewest positional arguments, most positional arguments, the defaults filling the rest).
KeyShape = tuple[int, int, tuple[Any, ...]]

#: Seconds between two "shared tier error" warnings: a dead Redis must not flood the logs.
WARNING_INTERVAL_S = 10.0
#: L1 hit latency is recorded for one fast-path hit in this many (a power of two): timing every
#: hit would cost more than the rest of the hit path.
HIT_SAMPLE_EVERY = 64


#: Namespace versions are integers below this (2**53: exact in a Lua number and in a float); a
#: version key holding anything else is malformed (see :meth:`Engine._version_core`).
VERSION_LIMIT = 2**53
#: A version at or above this is exhausted: the next bump moves the namespace to a new epoch.
#: Counting from the wall clock in milliseconds (about 2**41 today) never gets here honestly.
VERSION_EXHAUSTED = 2**52


def shared_version(data: Any) -> int | None:
    """A namespace version read from (or returned by) the shared tier, or ``None`` when
    ``data`` is absent or malformed: :func:`parse_version` bounded by :data:`VERSION_LIMIT`.
    Never raises."""
    version = parse_version(data)
    return version if version is not None and version < VERSION_LIMIT else None


class Engine:
    """A tiered cache's policy: in-process L1, optional shared L2, and everything around them.

    Built by :class:`cachekit.Cache`, which documents the arguments; entry points receive it.
    """

    def __init__(
        self,
        *,
        l2: SharedTier | StorageTier | None,
        namespace: str,
        l1: bool,
        l1_max_entries: int,
        l1_max_bytes: int,
        default_ttl: float | None,
        serializer: str | Serializer,
        breaker_failures: int,
        breaker_reset_s: float,
        version_refresh_s: float,
        refresh_workers: int,
        clock: Clock | Callable[[], float],
        random: Callable[[], float],
        key_prefix: str,
    ) -> None:
        if not isinstance(namespace, str) or not namespace or any(c in namespace for c in "{} \n"):
            raise ValueError("namespace must be a non-empty string without spaces or braces")
        check_seconds("default_ttl", default_ttl)
        self.namespace = namespace
        self.default_ttl = default_ttl
        self.clock = clock
        self.random = random
        self.key_prefix = key_prefix
        self.serializer: Serializer = get_serializer(serializer)
        # What L1 copies mutable values with: bytes that never leave the process need no MAC.
        s = self.serializer
        self._l1_serializer: Serializer = s.inner if isinstance(s, SignedSerializer) else s
        #: Live counters; entry points record what only they can see (semantic hits, time saved).
        self.telemetry = Telemetry(namespace)
        self.l2: SharedTier | None = None if l2 is None else as_shared_tier(l2)
        # The drivers' operation tables: each op looked up on the tier when called.
        self._l2_ops = {name: self._guarded(m) for name, m in _SYNC_OPS.items()}
        self._al2_ops = {name: self._aguarded(m) for name, m in _ASYNC_OPS.items()}
        self.l1: MemoryStore[Envelope] | None = (
            MemoryStore(l1_max_entries, l1_max_bytes, clock) if l1 else None
        )
        if self.l1 is None and self.l2 is None:
            raise ValueError("l1=False needs a shared tier: pass redis_url or l2")
        self._l1c = self.telemetry.tier("l1")
        self._l2c = self.telemetry.tier("l2") if self.l2 is not None else None
        self._breaker = CircuitBreaker(breaker_failures, breaker_reset_s)

        self._version = 0
        self._version_prefix = f"{key_prefix}:{namespace}:v"
        self._version_key = f"{key_prefix}:{namespace}:__version__"
        self._version_refresh_s = version_refresh_s
        # The hit path compares against this one float; inf when there is nothing to refresh.
        self._next_version_check = float("-inf") if self.l2 is not None else float("inf")
        self._version_lock = threading.Lock()

        #: The single-flight claims of every entry point of this cache (keys are full local
        #: keys, unique across entry points): per-key misses here, batch loads in feature sets.
        self.flights = SingleFlight()
        #: Stale-while-revalidate refreshes; one running past close() re-closes the shared tier.
        self.refresh = BackgroundRefresh(refresh_workers, self._refresh_done, self._close_l2)
        self._closers: list[Callable[[], None]] = []
        self._last_warning = 0.0
        # Health of the shared tier: written on failures and checks; the success path only reads
        # _l2_down, so an L2 hit pays one attribute test.
        self._reachable: bool | None = None
        self._l2_down = False
        self._last_error: Diagnosis | None = None
        self._checker: threading.Thread | None = None

        # Per-key invalidation reaches other processes' L1 through the shared tier's channel,
        # when it has one. Deleted keys travel as remote keys; this maps them back to the local
        # keys of what this process holds in L1 (filled on the store and L2-fill paths only).
        self._origin = uuid.uuid4().hex
        self._inval_channel = f"{key_prefix}:{namespace}:invalidations"
        # Oldest-written first out (a key written again moves to the end): the map is read only
        # when an invalidation arrives, so recency of writes is all an LRU would track, and a
        # plain ordered dict costs a tenth of an LRUCache per store.
        self._local_of: OrderedDict[str, Hashable] = OrderedDict()
        self._local_of_max = max(1024, 2 * l1_max_entries)
        self._local_of_lock = threading.Lock()
        self._publishes = self.l2 is not None and self.l2.publishes_invalidations
        self._follows = False
        self._following = threading.Event()
        if self.l1 is not None and self.l2 is not None:
            stop = self.l2.follow_invalidations(
                self._inval_channel, self._on_invalidation, self.clear_l1, self._following.set
            )
            if stop is not None:
                self._follows = True
                self._closers.append(stop)

    # ------------------------------------------------------------------ drivers

    def _run(self, core: Core[T]) -> T:
        """Drive ``core`` (:func:`cachekit.sansio.drive`) with the sync shared tier, each
        operation guarded by :meth:`l2_call`."""
        return drive(core, self._l2_ops)

    async def _arun(self, core: Core[T]) -> T:
        """Drive ``core`` with the asyncio shared tier: the ``a`` form of each operation,
        guarded by :meth:`al2_call`."""
        return await adrive(core, self._al2_ops)

    def _guarded(self, method: Callable[[SharedTier], Callable[..., Any]]) -> Callable[..., Any]:
        """The driver's operation: the tier's method, called through :meth:`l2_call`. Cores
        yield shared-tier operations only when there is a shared tier."""

        def op(*args: Any) -> Any:
            return self.l2_call(method(self.l2), *args)  # type: ignore[arg-type]

        return op

    def _aguarded(
        self, method: Callable[[SharedTier], Callable[..., Awaitable[Any]]]
    ) -> Callable[..., Awaitable[Any]]:
        def op(*args: Any) -> Awaitable[Any]:
            return self.al2_call(method(self.l2), *args)  # type: ignore[arg-type]

        return op

    # ------------------------------------------------------------------ keys and ttl

    def make_key(self, kind: str, name: str, part: str, local: Hashable | None = None) -> CacheKey:
        """A key for entries of ``kind`` (``f`` functions, ``kv``, ``feat``, ``sem`` ...) owned
        by ``name``; ``part`` identifies the entry within it. ``local`` defaults to the remote
        string."""
        version = self._version
        remote = self._prefix(version, kind, name) + part
        return CacheKey(remote if local is None else local, remote, version)

    def _prefix(self, version: int, kind: str, name: str) -> str:
        return f"{self._version_prefix}{version}:{kind}:{name}:"

    def remote_prefix(self, kind: str, name: str) -> str:
        """What every shared-tier key of ``name``'s ``kind`` entries starts with at the current
        namespace version: ``remote_prefix(kind, name) + part`` is :meth:`make_key`'s
        ``remote`` (for batch paths that need only the strings)."""
        return self._prefix(self._version, kind, name)

    def make_keys(
        self, kind: str, name: str, parts: Iterable[str], locals_: Iterable[Hashable]
    ) -> list[CacheKey]:
        """:meth:`make_key` for many entries of one owner: ``parts`` and their local keys in
        step (one prefix for the batch)."""
        version = self._version
        prefix = self._prefix(version, kind, name)
        new = tuple.__new__  # CacheKey(...) without its Python-level __new__: a third less
        return [
            new(CacheKey, (local, prefix + part, version))
            for part, local in zip(parts, locals_, strict=True)
        ]

    def _current(self, keys: Sequence[CacheKey]) -> Sequence[CacheKey]:
        """``keys`` re-made for the current namespace version: a bump seen by the version check
        that runs inside a batch operation must apply to keys built just before it."""
        version = self._version
        if all(k.version == version for k in keys):
            return keys
        cut = len(self._version_prefix)
        return [
            k
            if k.version == version
            else CacheKey(
                k.local,
                f"{self._version_prefix}{version}:{k.remote[cut:].split(':', 1)[1]}",
                version,
            )
            for k in keys
        ]

    def resolve_ttl(self, ttl: float | None, jitter: float = 0.0) -> float | None:
        """The TTL to store with: ``None`` means the default; ``jitter`` shortens it at random
        by up to that fraction."""
        if ttl is None:
            ttl = self.default_ttl
        if ttl is None:
            return None
        check_seconds("ttl", ttl, allow_none=False)
        if jitter:
            # Only ever shorten: a TTL is a promise about staleness, not a suggestion.
            ttl = ttl * (1.0 - jitter * self.random())
        return ttl

    def make_id_keys(
        self, kind: str, name: str, tag: str, ids: Iterable[Any], locals_: Iterable[Hashable]
    ) -> list[CacheKey]:
        """:meth:`make_keys` where each entry's part is ``tag`` followed by its id as text
        (``f"{tag}{id}"``), built in one step per key: int ids of a feature set."""
        version = self._version
        prefix = self._prefix(version, kind, name) + tag
        new = tuple.__new__
        return [
            new(CacheKey, (local, f"{prefix}{i}", version))
            for i, local in zip(ids, locals_, strict=True)
        ]

    def resolve_ttls(self, ttl: float | None, jitter: float, n: int) -> list[float | None]:
        """:meth:`resolve_ttl` for ``n`` entries stored together (each its own jitter)."""
        base = self.resolve_ttl(ttl)
        if base is None or not jitter:
            return [base] * n
        rand = self.random
        return [base * (1.0 - jitter * rand()) for _ in range(n)]

    # ------------------------------------------------------------------ namespace version

    @property
    def version(self) -> int:
        """The namespace version this process keys entries with (see :meth:`_version_core`)."""
        return self._version

    def _set_version(self, version: int) -> None:
        # Never backwards: a version key lost to eviction (or deleted) must not bring back the
        # entries that invalidate_namespace() retired. The one exception is a process at an
        # exhausted version (only a value written by someone else gets there): it follows the
        # shared key to the new epoch that the next bump moved the namespace to.
        with self._version_lock:
            current = self._version
            changed = version > current or (current >= VERSION_EXHAUSTED and version != current)
            if changed:
                self._version = version
        if changed:
            self.clear_l1()

    def clear_l1(self) -> None:
        """Drop this process's in-memory entries (the shared tier keeps its own)."""
        if self.l1 is not None:
            self.l1.clear()

    def _fresh_epoch(self) -> int:
        """Where a namespace whose version key was malformed or exhausted restarts: past the
        version this process knows and at the wall clock in milliseconds, so past every version
        an honest counter has held (the clock moves faster than invalidations are counted)."""
        epoch = time.time_ns() // 1_000_000
        known = self._version
        return epoch if known >= VERSION_EXHAUSTED else max(known + 1, epoch)

    def _version_core(self, now: float) -> Core[None]:
        """Re-read the namespace version from the shared tier when it is due (callers test
        ``now >= _next_version_check`` first: a generator costs more than the test).

        The version key holds the decimal digits of an integer below :data:`VERSION_LIMIT`
        (2**53, exact in a Lua number and a float). A process never goes below the highest
        version it has seen, so:

        * a missing key, or one lowered below the version this process knows, is re-seeded
          with that version;
        * a malformed key (not digits, float text such as ``1.5`` or ``9.2e+18``, a sign,
          2**53 or more, e.g. 2**63-1) moves the namespace to a fresh *epoch*: a version past
          the one this process knows and at least the wall clock in milliseconds, so past
          every version used before; the re-seed is atomic (``raise_counter``) and every
          process adopts what the key then holds;
        * a version at or above :data:`VERSION_EXHAUSTED` (2**52, which honest counting
          never reaches) is exhausted: the next :meth:`invalidate_namespace` moves the
          namespace to a fresh epoch, and processes at an exhausted version follow the key
          down to it.

        Nothing here raises to a caller, and nothing but integer digits is ever written."""
        if now < self._next_version_check or self.l2 is None:
            return
        self._next_version_check = now + self._version_refresh_s
        got = yield ("get_many", ([self._version_key],))
        if got is FAILED:
            return
        seen = shared_version(got[0])
        if seen is None and (got[0] is not None or self._version > 0):
            floor = self._version
            if got[0] is not None:
                floor = self._fresh_epoch()
                log.warning(
                    "cachekit: namespace version key %s holds %r, not a version; "
                    "moved to a new epoch (%d)",
                    self._version_key,
                    got[0][:32],
                    floor,
                )
            seeded = yield ("raise_counter", (self._version_key, floor))
            if seeded is not None:  # None: the tier leaves counters as they are
                seen = None if seeded is FAILED else shared_version(seeded)
        elif seen is not None and seen < self._version < VERSION_EXHAUSTED:
            # Lowered by another writer: put it back, so that processes started now do not
            # adopt a version that was retired.
            seeded = yield ("raise_counter", (self._version_key, self._version))
            if seeded is not None:
                seen = None if seeded is FAILED else shared_version(seeded)
        if seen is not None:
            self._set_version(seen)

    def _invalidate_core(self) -> Core[bool]:
        if self.l2 is None:
            with self._version_lock:
                self._version += 1
            self.clear_l1()
            return True
        known = self._version
        # INCR-safe re-seed (where the tier offers it): a lost key restarts above the version
        # this process knows, a malformed or exhausted one at a fresh epoch (see _version_core).
        new = yield (
            "incr_from",
            (self._version_key, known, self._fresh_epoch(), VERSION_EXHAUSTED),
        )
        if new is FAILED:
            log.warning(
                "cachekit: could not bump namespace %r: shared tier unavailable", self.namespace
            )
            return False
        bumped = shared_version(new)
        if bumped is None:
            log.warning(
                "cachekit: could not bump namespace %r: the shared tier answered %r",
                self.namespace,
                new,
            )
            return False
        # At an exhausted version the bump moved to a new epoch, below the old version.
        self._set_version(bumped if known >= VERSION_EXHAUSTED else max(bumped, known + 1))
        return True

    def invalidate_namespace(self) -> bool:
        """Bump the namespace version in the shared tier (or locally without one); False, with
        the old version kept, when the shared tier could not be reached."""
        return self._run(self._invalidate_core())

    async def ainvalidate_namespace(self) -> bool:
        return await self._arun(self._invalidate_core())

    # ------------------------------------------------------------------ guarded shared tier

    @property
    def breaker_state(self) -> str | None:
        return self._breaker.state if self.l2 is not None else None

    def _l2_failed(self, exc: BaseException) -> None:
        assert self._l2c is not None
        self._l2c.errors += 1
        self._breaker.record_failure()
        diagnosis = self._record_down(exc)
        now = time.monotonic()
        if now - self._last_warning > WARNING_INTERVAL_S:
            self._last_warning = now
            log.warning(
                "cachekit: shared tier %s failed (served as a miss): %s (%s). Fix: %s",
                self.shared_target,
                diagnosis.cause,
                diagnosis.detail,
                diagnosis.fix,
            )

    def _record_down(self, exc: BaseException) -> Diagnosis:
        diagnosis = diagnose(exc)
        self._last_error = diagnosis
        self._reachable = False
        self._l2_down = True
        return diagnosis

    def _record_up(self) -> None:
        self._reachable = True
        self._l2_down = False

    # ------------------------------------------------------------------ health

    @property
    def shared_target(self) -> str | None:
        """Where the shared tier points, password redacted (its ``target``, else its name)."""
        if self.l2 is None:
            return None
        return self.l2.target

    def check_shared_tier(self) -> Health:
        """Read from the shared tier once, now (bounded by its timeouts), record the outcome and
        return :meth:`health`. Never raises."""
        if self.l2 is not None:
            try:
                self.l2.get_many([self._version_key])
            except Exception as exc:
                self._record_down(exc)
            else:
                self._record_up()
        return self.health()

    def start_health_check(self) -> None:
        """Check the shared tier once in a daemon thread and log the outcome: the cause and the
        fix when it fails, since every later failure is only a miss."""
        if self.l2 is None or self._checker is not None:
            return
        self._checker = threading.Thread(
            target=self._check_and_log, name="cachekit-health", daemon=True
        )
        self._checker.start()

    def _check_and_log(self) -> None:
        health = self.check_shared_tier()
        err = health.last_error
        if health.reachable or err is None:
            log.info("cachekit: shared tier %s reachable", health.target)
            return
        log.warning(
            "cachekit: shared tier %s unreachable: %s (%s). Serving from this process's "
            "memory only meanwhile. Fix: %s",
            health.target,
            err.cause,
            err.detail,
            err.fix,
        )

    def health(self) -> Health:
        """The shared tier's state, without touching it (see :class:`~cachekit.health.Health`)."""
        return Health(
            shared_tier=self.l2 is not None,
            target=self.shared_target,
            reachable=self._reachable,
            last_error=self._last_error,
            breaker_state=self.breaker_state,
        )

    def l2_call(self, op: Callable[..., T], *args: Any) -> T:
        """Call ``op(*args)`` against the shared tier: timed, counted and behind the circuit
        breaker. An error or an open circuit returns :data:`~cachekit.types.FAILED` (a miss for
        the caller), never an exception."""
        if not self._breaker.allow():
            return self._l2_skipped()
        t0 = time.perf_counter()
        try:
            result = op(*args)
        except Exception as exc:
            self._l2_failed(exc)
            return FAILED
        self._l2_succeeded(t0)
        return result

    async def al2_call(self, op: Callable[..., Awaitable[T]], *args: Any) -> T:
        """The asyncio form of :meth:`l2_call` (the rules are :meth:`_l2_skipped`,
        :meth:`_l2_failed` and :meth:`_l2_succeeded`; only the call differs)."""
        if not self._breaker.allow():
            return self._l2_skipped()
        t0 = time.perf_counter()
        try:
            result = await op(*args)
        except Exception as exc:
            self._l2_failed(exc)
            return FAILED
        self._l2_succeeded(t0)
        return result

    def _l2_skipped(self) -> Any:
        """A call the open circuit refused: counted, and :data:`~cachekit.types.FAILED`."""
        assert self._l2c is not None
        self._l2c.skipped += 1
        return FAILED

    def _l2_succeeded(self, t0: float) -> None:
        assert self._l2c is not None
        self._l2c.latency.record(time.perf_counter() - t0)
        self._breaker.record_success()
        if self._l2_down:
            self._record_up()

    # ------------------------------------------------------------------ lookups

    def _l2_merge(
        self,
        locals_: Sequence[Hashable],
        pending: list[int],
        remotes: list[str],
        found: list[Found],
        datas: list[bytes | None] | Any,
        now: float,
        share: bool = False,
    ) -> int:
        """Fold one shared-tier read of ``remotes`` (the entries at ``pending``) into ``found``
        (in step with both); returns how many entries the tier held (0 when the read failed).
        A full key is made only for an entry the tier held: most of a batch of new ids holds
        nothing."""
        if datas is FAILED:
            for i, f in enumerate(found):
                if f.status is Status.MISS:
                    found[i] = Found(Status.ERROR)
            return 0
        absent = datas.count(None)
        if absent and self._l2c is not None:
            self._l2c.misses += absent
        if absent == len(datas):  # the whole batch new: nothing to decode
            return 0
        fills: list[L1Item] = []
        held: list[CacheKey] = []
        new, version = tuple.__new__, self._version
        for j, data in enumerate(datas):
            if data is None:
                continue
            key = new(CacheKey, (locals_[pending[j]], remotes[j], version))
            found[j] = self._l2_found(key, found[j], data, now, share, fills)
            if found[j].status is Status.HIT:
                held.append(key)
        if fills and self.l1 is not None:
            self.l1.set_many(fills)  # one lock and one clock read for the batch
            self._remember_locals(held)
        return len(found) - absent

    def _l2_found(
        self,
        key: CacheKey,
        prev: Found,
        data: bytes | None,
        now: float,
        share: bool = False,
        fills: list[L1Item] | None = None,
    ) -> Found:
        """What the shared tier's bytes for ``key`` make of ``prev`` (what L1 found). A fresh
        entry goes into L1 at once, or into ``fills`` when given (the caller stores them)."""
        l2c = self._l2c
        assert l2c is not None
        if data is None:
            l2c.misses += 1
            return prev
        try:
            # A signed entry is bound to its key: one copied over another key is refused.
            env = decode_envelope(self.serializer, data, key=key.remote)
        except SerializationError as exc:
            l2c.errors += 1
            self.telemetry.serialization_errors += 1
            log.warning("cachekit: unreadable entry %s treated as a miss: %s", key.remote, exc)
            return prev
        if env.fresh(now):
            l2c.hits += 1
            self._fill_l1(key, env, data, now, share, fills)
            return Found(Status.HIT, env, "l2")
        if env.servable_stale(now):
            l2c.hits += 1
            return prev if prev.status is Status.STALE else Found(Status.STALE, env, "l2")
        l2c.misses += 1
        return prev

    def _fill_l1(
        self,
        key: CacheKey,
        env: Envelope,
        data: bytes,
        now: float,
        share: bool = False,
        fills: list[L1Item] | None = None,
    ) -> None:
        if self.l1 is None:
            return
        remaining = None
        if env.ttl is not None:
            remaining = env.created_at + env.ttl + env.stale_ttl - now
            if remaining <= 0:
                return
        try:
            held = env if share else self._for_l1(env)
        except SerializationError:
            return
        if fills is None:
            self.l1.set(key.local, held, remaining, len(data))
            self._remember_locals([key])
        else:
            fills.append((key.local, held, remaining, len(data)))

    def _remember_locals(self, keys: Sequence[CacheKey]) -> None:
        """Remember which local key each remote key is held under, for invalidations from
        other processes (only when following them, and only where the two differ)."""
        if not self._follows:
            return
        local_of = self._local_of
        with self._local_of_lock:
            for key in keys:
                if key.local != key.remote:
                    local_of[key.remote] = key.local
                    local_of.move_to_end(key.remote)
            while len(local_of) > self._local_of_max:
                local_of.popitem(last=False)

    def _for_l1(self, env: Envelope) -> Envelope:
        """What L1 holds for ``env``: its value as is when immutable, else a :class:`Packed`
        copy, so no caller can change what later callers get by mutating its result (what L1
        hands out goes through :func:`_loaded`). The value is packed on its own, not read back
        from the envelope's bytes: decoding a whole envelope on every L1 hit cost 2.8x decoding
        the value, and an entry is read more often than written."""
        held = for_sharing(self._l1_serializer, env.value)
        if held is env.value:
            return env
        return Envelope(held, env.created_at, env.ttl, env.stale_ttl, env.version)

    def _count(self, found: Sequence[Found]) -> None:
        tel = self.telemetry
        for f in found:
            if f.status is Status.HIT:
                tel.hits += 1
            elif f.status is Status.STALE:
                tel.stale_hits += 1

    def _lookup_one_core(self, key: CacheKey, probe: bool, count: bool = True) -> Core[Found]:
        now = self.clock()
        if now >= self._next_version_check:
            yield from self._version_core(now)
        key, found = self._l1_one(key, now)
        if found.status is not Status.HIT and self.l2 is not None:
            datas = yield ("get_many", ([key.remote],))
            if datas is FAILED:
                if found.status is Status.MISS:
                    found = Found(Status.ERROR)
            else:
                found = self._l2_found(key, found, datas[0], now)
        if count:
            self.record_found(found.status, probe)
        return found

    def record_found(self, status: Status, probe: bool = False) -> None:
        """Count what one lookup found. A probe (``f.lookup(...)``: a question about the cache,
        not a call it answers) is counted apart and never as a hit, a call saved or time saved,
        so that the hit rate stays served calls / calls."""
        tel = self.telemetry
        if probe:
            tel.probes += 1
            if status in (Status.HIT, Status.STALE, Status.SEMANTIC_HIT):
                tel.probe_hits += 1
        elif status is Status.HIT or status is Status.SEMANTIC_HIT:
            tel.hits += 1
        elif status is Status.STALE:
            tel.stale_hits += 1

    def lookup_one(self, key: CacheKey, *, probe: bool = False, count: bool = True) -> Found:
        """What ``key`` finds: L1, then the shared tier. The lookup of one decorated call,
        without the batch bookkeeping of :meth:`lookup_many`. ``probe``: the caller only asks
        (see :meth:`record_found`); the tiers' own counters count it like any lookup.
        ``count=False``: the caller counts the outcome itself (:meth:`record_found`,
        :meth:`record_misses`), as one that serves no stale value must."""
        return self._run(self._lookup_one_core(key, probe, count))

    async def alookup_one(self, key: CacheKey, *, probe: bool = False, count: bool = True) -> Found:
        return await self._arun(self._lookup_one_core(key, probe, count))

    def _l1_one(self, key: CacheKey, now: float) -> tuple[CacheKey, Found]:
        if key.version != self._version:
            key = self._current([key])[0]
        if self.l1 is None:
            return key, Found(Status.MISS)
        env = self.l1.get(key.local)
        if env is not None and env.fresh(now):
            self._l1c.hits += 1
            return key, Found(Status.HIT, _loaded(env), "l1")
        self._l1c.misses += 1
        if env is not None and env.servable_stale(now):
            return key, Found(Status.STALE, _loaded(env), "l1")
        return key, Found(Status.MISS)

    def l1_fresh(self, key: CacheKey) -> Envelope | None:
        """The fresh L1 envelope of ``key``, if any (no counting, no shared tier)."""
        if self.l1 is None:
            return None
        env = self.l1.get(key.local)
        return _loaded(env) if env is not None and env.fresh(self.clock()) else None

    def lookup_many(self, keys: Sequence[CacheKey]) -> list[Found]:
        """What each key finds: one L1 pass, then one shared-tier round trip for the L1 misses."""
        return _merge_found(
            self._run(self._lazy_core([k.local for k in keys], self._remotes_at(keys)))
        )

    async def alookup_many(self, keys: Sequence[CacheKey]) -> list[Found]:
        return _merge_found(
            await self._arun(self._lazy_core([k.local for k in keys], self._remotes_at(keys)))
        )

    def _remotes_at(self, keys: Sequence[CacheKey]) -> Callable[[list[int]], list[str]]:
        # Called after the lookup's version check: a key built before a bump gets the new version.
        return lambda idx: [k.remote for k in self._current([keys[i] for i in idx])]

    def lookup_lazy(
        self,
        locals_: Sequence[Hashable],
        remotes_of: Callable[[list[int]], list[str]],
        *,
        share: bool = False,
    ) -> LazyFound:
        """The batch lookup shaped for large batches (feature sets): mostly L1 hits, or mostly
        new entries.

        Entries are given by their local keys; ``remotes_of(indexes)`` builds the shared-tier
        keys of the entries at those indexes (in that order, for the current namespace
        :attr:`version`: it is called after the lookup's version check). It is called once,
        only for the entries L1 cannot answer; an L1 hit allocates nothing, and an entry the
        shared tier does not hold costs no full key either, since at hundreds of entries per
        call those costs dominate. Returns a :class:`~cachekit.types.LazyFound`.

        The fresh envelopes are L1's own: a mutable value is held as a
        :class:`~cachekit.serialization.Packed`, whose ``load()`` gives the caller its copy
        (``v.load() if type(v) is Packed else v``); building a new envelope per hit would cost
        more than the copy.

        ``share``: entries read from the shared tier go into L1 as the decoded value itself, not
        a packed copy (for callers that hand out shared read-only values and keep their entries
        under their own local keys; see :meth:`store_many`).
        """
        return self._run(self._lazy_core(locals_, remotes_of, share))

    async def alookup_lazy(
        self,
        locals_: Sequence[Hashable],
        remotes_of: Callable[[list[int]], list[str]],
        *,
        share: bool = False,
    ) -> LazyFound:
        return await self._arun(self._lazy_core(locals_, remotes_of, share))

    def _lazy_core(
        self,
        locals_: Sequence[Hashable],
        remotes_of: Callable[[list[int]], list[str]],
        share: bool = False,
    ) -> Core[LazyFound]:
        now = self.clock()
        if now >= self._next_version_check:
            yield from self._version_core(now)
        fresh, pending, stale = self._l1_pass(locals_, now)
        if not pending:
            return LazyFound(fresh, pending, [], [], True)
        found = (
            [Found(Status.STALE, stale[i], "l1") if i in stale else MISSED for i in pending]
            if stale
            else [MISSED] * len(pending)
        )
        remotes = remotes_of(pending)
        held = 0
        if self.l2 is not None:
            datas = yield ("get_many", (remotes,))
            held = self._l2_merge(locals_, pending, remotes, found, datas, now, share)
        misses_only = not (stale or held)
        if not misses_only:  # otherwise every entry is MISSED or an error: nothing to count
            self._count(found)
        return LazyFound(fresh, pending, remotes, found, misses_only)

    def _l1_pass(
        self, locals_: Sequence[Hashable], now: float
    ) -> tuple[list[Envelope | None], list[int], dict[int, Envelope]]:
        """The L1 pass of a batch lookup: fresh envelopes by index, the indexes still to look
        up, and the stale L1 envelopes among those."""
        fresh: list[Envelope | None] = [None] * len(locals_)
        stale: dict[int, Envelope] = {}
        l1 = self.l1
        if l1 is None:
            return fresh, list(range(len(locals_))), stale
        pending: list[int] = []
        # Raw items rather than MemoryStore.get: one clock read for the whole batch instead of
        # one per key. The envelope's own windows lie inside the stored expiry, so checking
        # them checks both.
        t0 = time.perf_counter()
        items = l1.get_items(locals_)
        if items.count(None) == len(items):  # a batch of new entries: one C-level pass
            pending = list(range(len(items)))
            items = []
        for i, item in enumerate(items):
            if item is None:
                pending.append(i)
                continue
            env = item.value
            ttl = env.ttl
            if ttl is None or now < env.created_at + ttl:
                fresh[i] = env  # as held: see lookup_lazy on Packed values
                continue
            if env.servable_stale(now):
                stale[i] = _loaded(env)
            pending.append(i)
        self._l1c.latency.record(time.perf_counter() - t0)
        self._l1c.misses += len(pending)
        hits = len(locals_) - len(pending)
        self._l1c.hits += hits
        self.telemetry.hits += hits
        return fresh, pending, stale

    # ------------------------------------------------------------------ writes

    def _encode_many(
        self, items: Sequence[StoreItem], share: bool
    ) -> tuple[list[bool], list[Entry]]:
        now = self.clock()
        if any(item[0].version != self._version for item in items):
            fresh = self._current([item[0] for item in items])
            items = [(k, *item[1:]) for k, item in zip(fresh, items, strict=True)]
        ok: list[bool] = []
        entries: list[Entry] = []
        l1_items: list[L1Item] = []
        stored: list[CacheKey] = []
        share = share or self.l1 is None
        serializer, l1_serializer = self.serializer, self._l1_serializer
        for key, value, ttl, stale_ttl, version in items:
            env = Envelope(value, now, ttl, stale_ttl if ttl is not None else 0.0, version)
            try:
                data, held_value = encode_for_tiers(
                    serializer, l1_serializer, env, key.remote, share=share
                )
            except SerializationError as exc:
                self.telemetry.serialization_errors += 1
                log.warning("cachekit: not caching %s: %s", key.remote, exc)
                ok.append(False)
                continue
            ok.append(True)
            held = (
                env
                if held_value is value
                else Envelope(held_value, now, env.ttl, env.stale_ttl, version)
            )
            l1_items.append((key.local, held, env.storage_ttl, len(data)))
            stored.append(key)
            entries.append((key.remote, data, env.storage_ttl))
        if self.l1 is not None:
            self.l1.set_many(l1_items)
            self._remember_locals(stored)
        return ok, entries

    def _store_core(self, items: Sequence[StoreItem], share: bool) -> Core[list[bool]]:
        ok, entries = self._encode_many(items, share)
        if entries and self.l2 is not None:
            yield ("set_many", (entries,))
        return ok

    def store_many(self, items: Sequence[StoreItem], *, share: bool = False) -> list[bool]:
        """Write every ``(key, value, ttl, stale_ttl, version)`` to L1 and the shared tier;
        returns, per item, whether its value could be serialized (a shared-tier failure is
        not reported: the entry is in L1 and the next reader elsewhere misses).

        ``share``: L1 holds a mutable value itself, not a packed copy, so every later L1 reader
        gets that same object (for callers that promise to treat values as read-only; keep such
        entries under local keys of their own, since other readers of a key expect copies)."""
        return self._run(self._store_core(items, share))

    async def astore_many(self, items: Sequence[StoreItem], *, share: bool = False) -> list[bool]:
        return await self._arun(self._store_core(items, share))

    def _delete_core(self, keys: Sequence[CacheKey]) -> Core[None]:
        keys = self._current(keys)
        if self.l1 is not None:
            for k in keys:
                self.l1.delete(k.local)
        if keys and self.l2 is not None:
            remotes = [k.remote for k in keys]
            yield ("delete_many", (remotes,))
            if self._publishes:
                payload = json.dumps({"o": self._origin, "k": remotes}).encode()
                yield ("publish_invalidation", (self._inval_channel, payload))

    def wait_following(self, timeout: float | None = None) -> bool:
        """Wait until this process follows the namespace's invalidation channel (subscribed in
        the background after the cache was created); False at once when it has none to
        follow (no shared tier offering one, or no L1)."""
        return self._following.wait(timeout) if self._follows else False

    def _on_invalidation(self, payload: bytes) -> None:
        """Drop from L1 the keys another process deleted. The payload came from the network:
        anything but ``{"o": str, "k": [str, ...]}`` is ignored."""
        try:
            msg = json.loads(payload)
            origin, remotes = msg["o"], msg["k"]
        except (ValueError, TypeError, KeyError):
            log.debug("cachekit: malformed invalidation message ignored")
            return
        l1 = self.l1
        if origin == self._origin or l1 is None or not isinstance(remotes, list):
            return
        for remote in remotes:
            if not isinstance(remote, str):
                continue
            with self._local_of_lock:
                local = self._local_of.pop(remote, None)
            l1.delete(remote)
            if local is not None:
                l1.delete(local)

    def delete_many(self, keys: Sequence[CacheKey]) -> None:
        """Forget ``keys`` in L1 and in the shared tier."""
        self._run(self._delete_core(keys))

    async def adelete_many(self, keys: Sequence[CacheKey]) -> None:
        await self._arun(self._delete_core(keys))

    # ------------------------------------------------------------------ misses

    def _flight_work(self, key: CacheKey, work: Callable[[], T], miss: bool) -> Callable[[], Any]:
        if not miss or self.l1 is None:
            return work

        def leader() -> Any:
            # A leader that finished between our miss and our turn has stored it already.
            env = self.l1_fresh(key)
            return env.value if env is not None else work()

        return leader

    def single_flight(self, key: CacheKey, work: Callable[[], T], *, miss: bool = True) -> T:
        """Run ``work`` once for every concurrent caller with ``key``; the others wait and share
        its result or its exception (which is not cached: the next call tries again).

        ``miss``: the call is a cache miss: it is counted as one (a caller served by another's
        run counts as a single-flight wait instead), and the one that runs first re-checks L1.
        """
        if miss:
            self.record_misses(1)
        value, shared = self.flights.do(key.local, self._flight_work(key, work, miss))
        if shared and miss:
            self.record_misses(-1, shared=1)
        return value

    async def asingle_flight(
        self, key: CacheKey, work: Callable[[], Awaitable[T]], *, miss: bool = True
    ) -> T:
        """The asyncio form of :meth:`single_flight`."""
        if miss:
            self.record_misses(1)

        async def leader() -> Any:
            env = self.l1_fresh(key)
            return env.value if env is not None else await work()

        run = leader if miss and self.l1 is not None else work
        value, shared = await self.flights.ado(key.local, run)
        if shared and miss:
            self.record_misses(-1, shared=1)
        return value

    def record_misses(self, missed: int, shared: int = 0) -> None:
        """Count lookups nothing answered (``missed``) and callers served by a computation
        another caller had in flight (``shared``): what an entry point's own single-flight
        (feature sets' batch loads) must report."""
        tel = self.telemetry
        tel.misses += missed
        tel.singleflight_waits += shared

    def waiting(self) -> int:
        """How many callers wait on another caller's computation right now (for tests and
        introspection)."""
        return self.flights.waiting()

    def _refresh_done(self, ok: bool) -> None:
        if ok:
            self.telemetry.refreshes += 1
        else:
            self.telemetry.refresh_errors += 1

    def refresh_in_background(self, token: Hashable, work: Callable[[], Any]) -> bool:
        """Run ``work`` once in a worker thread unless a refresh of ``token`` is under way (see
        :class:`~cachekit.background.BackgroundRefresh`). A failure is logged and counted; the
        old value stays."""
        return self.refresh.start(token, work)

    def arefresh_in_background(self, token: Hashable, work: Callable[[], Awaitable[Any]]) -> bool:
        """The asyncio form of :meth:`refresh_in_background`: a task on the running loop."""
        return self.refresh.astart(token, work)

    def refreshing(self) -> bool:
        """Whether a background refresh is under way (for tests and graceful shutdown)."""
        return self.refresh.running()

    # ------------------------------------------------------------------ L1 hit fast path

    def l1_fast_path(
        self,
        fname: str,
        shape: KeyShape | None,
        local_key_of: Callable[[tuple[Any, ...], dict[str, Any]], Hashable],
        timing: FunctionCounters,
        on_miss: Callable[[tuple[Any, ...], dict[str, Any]], Any],
    ) -> Callable[..., Any]:
        """The L1 hit path of a decorated function, as a function of the call's arguments.

        Serves a fresh L1 entry of the current namespace version and hands everything else to
        ``on_miss(args, kwargs)``. Returned as a function so a sync decorator's wrapper *is* this
        function: a Python call layer costs about a tenth of an L1 hit. For positional scalar
        arguments within ``shape`` the local key ``(fname, values, types)`` is built inline;
        other calls get theirs from ``local_key_of(args, kwargs)``. Every attribute lookup here
        shows in the hit cost, hence the local names.
        """
        l1_item = self.l1.getitem if self.l1 is not None else None
        first_default, nparams, defaults = shape if shape is not None else (0, -1, ())
        # Argument-type signatures known to be all scalars: tested inline first, since even the
        # call to all_scalar shows in the hit cost.
        scalar_sigs = SCALAR_SIGNATURES
        float_sigs = FLOAT_SIGNATURES.get
        perf_counter = time.perf_counter
        clock = self.clock
        record = self._l1c.latency.record
        engine = self
        sample_mask = HIT_SAMPLE_EVERY - 1
        packed = Packed

        def fast(*args: Any, **kwargs: Any) -> Any:
            if l1_item is None:
                return on_miss(args, kwargs)
            n = len(args)
            if not kwargs and first_default <= n <= nparams:
                values = args if n == nparams else args + defaults[n:]
                types = tuple(map(type, values))
                lk: Hashable | None = None
                if types in scalar_sigs:
                    lk = (fname, values, types)
                elif (floats := float_sigs(types)) is not None:
                    # Scalars and floats: keyed by value unless a float is zero or NaN, whose
                    # == does not tell keys apart (those take local_key's digest). Asked before
                    # all_scalar, whose call alone costs a tenth of a float-argument hit.
                    lk = (fname, values, types)
                    for i in floats:
                        x = values[i]
                        if x == 0.0 or x != x:
                            lk = None
                            break
                elif all_scalar(types):
                    lk = (fname, values, types)
                if lk is None:
                    plain = local_key(values, types)
                    lk = (fname, *plain) if plain is not None else local_key_of(args, kwargs)
            else:
                lk = local_key_of(args, kwargs)
            sampled = not timing.hits & sample_mask
            t0 = perf_counter() if sampled else 0.0
            try:
                env = l1_item(lk).value
            except KeyError:
                return on_miss(args, kwargs)
            # Freshness implies the store's own expiry (fresh-until <= stored-until), so one
            # clock read decides both; past the version check time, the slow path checks it.
            now = clock()
            if (env.ttl is not None and now >= env.created_at + env.ttl) or (
                now >= engine._next_version_check
            ):
                return on_miss(args, kwargs)
            timing.hits += 1
            if sampled:
                record(perf_counter() - t0)
            v = env.value
            return v.load() if type(v) is packed else v

        return fast

    # ------------------------------------------------------------------ lifecycle

    def stats(self) -> CacheStats:
        return self.telemetry.snapshot(self.breaker_state)

    def on_close(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the cache closes: entry points with background work (the semantic
        tier's batcher and Redis sync threads) register their shutdown here."""
        self._closers.append(fn)

    def close(self) -> None:
        """Stop background work and release connections. Idempotent. A refresh already running
        finishes, and then releases what it reopened."""
        self.refresh.close()
        closers, self._closers = self._closers, []
        for fn in closers:
            try:
                fn()
            except Exception:
                log.warning("cachekit: error while closing", exc_info=True)
        self._close_l2()

    def _close_l2(self) -> None:
        if self.l2 is not None:
            try:
                self.l2.close()
            except Exception:  # closing a dead connection must not raise either
                log.debug("cachekit: error closing shared tier", exc_info=True)


def _loaded(env: Envelope) -> Envelope:
    """``env`` as L1 hands it out: a :class:`Packed` value decoded into a copy of its own."""
    v = env.value
    if type(v) is not Packed:
        return env
    return Envelope(v.load(), env.created_at, env.ttl, env.stale_ttl, env.version)


def _merge_found(lazy: LazyFound) -> list[Found]:
    # Callers of lookup_many get Found values of their own: none of them is the shared MISSED.
    rest = dict(zip(lazy.pending, lazy.found, strict=True))
    return [
        Found(Status.HIT, _loaded(env), "l1")
        if env is not None
        else Found(Status.MISS)
        if rest[i] is MISSED
        else rest[i]
        for i, env in enumerate(lazy.fresh)
    ]


#: The SharedTier operations a core may yield, by name: each is looked up on the tier when
#: called (a tier's methods may be wrapped after the engine was built: instrumentation, tests),
#: and the asyncio driver calls the ``a`` form.
_SYNC_OPS: dict[str, Callable[[SharedTier], Callable[..., Any]]] = {
    name: operator.attrgetter(name)
    for name in (
        "get_many",
        "set_many",
        "delete_many",
        "incr",
        "incr_from",
        "raise_counter",
        "publish_invalidation",
    )
}
_ASYNC_OPS: dict[str, Callable[[SharedTier], Callable[..., Awaitable[Any]]]] = {
    name: operator.attrgetter("a" + name) for name in _SYNC_OPS
}
