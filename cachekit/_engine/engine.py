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
  :data:`~cachekit._core.types.FAILED`, never an exception);
* the L1 hit fast path of decorated functions: :meth:`Engine.l1_fast_path`;
* the namespace version: :attr:`Engine.version`, :meth:`Engine.invalidate_namespace`.

Every operation that may touch the shared tier has an asyncio mirror with an ``a`` prefix.
Both forms run one core: a generator that yields the shared-tier operation it needs,
``(SharedTier method name, its arguments)``, and is sent back the guarded result;
:meth:`Engine._run` and :meth:`Engine._arun` drive it (the sans-IO pattern of h11), so no rule
is written twice. The engine composes its parts: :class:`~cachekit._engine.guard.GuardedTier` (the
shared tier behind its breaker, and its health), :class:`~cachekit._engine.namespace.Namespace` (the
version and the keys made with it), :class:`~cachekit._engine.l1.L1` (what L1 holds and hands out),
:class:`~cachekit._engine.invalidations.Invalidations` (deletes across processes) and
:func:`~cachekit._engine.fast_path.l1_fast_path`. A generator costs a fraction of a microsecond per
operation, which only the paths that miss L1 pay; the L1 hit fast path runs no core.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from cachekit._core.health import Health
from cachekit._core.protocols import Clock, Entry, Serializer
from cachekit._core.sansio import Core, adrive, drive
from cachekit._core.serialization import (
    SerializationError,
    SignedSerializer,
    decode_envelope,
    encode_for_tiers,
    get_serializer,
)
from cachekit._core.types import (
    FAILED,
    MISSED,
    CacheKey,
    Envelope,
    Found,
    LazyFound,
    Status,
    StoreItem,
)
from cachekit._core.validation import check_seconds
from cachekit._engine.background import BackgroundRefresh
from cachekit._engine.fast_path import KeyShape, l1_fast_path
from cachekit._engine.guard import NO_SHARED_TIER, GuardedTier
from cachekit._engine.invalidations import Invalidations
from cachekit._engine.l1 import L1, L1Item, merged
from cachekit._engine.namespace import Namespace
from cachekit._engine.singleflight import SingleFlight
from cachekit._engine.telemetry import CacheStats, FunctionCounters, Telemetry
from cachekit.backends.base import SharedTier, as_shared_tier
from cachekit.backends.memory import MemoryStore

if TYPE_CHECKING:
    from cachekit._core.protocols import StorageTier

__all__ = ["Engine", "KeyShape"]

log = logging.getLogger("cachekit")

T = TypeVar("T")


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
        #: Live counters; entry points record what only they can see (semantic hits, time saved).
        self.telemetry = Telemetry(namespace)
        self.l2: SharedTier | None = None if l2 is None else as_shared_tier(l2)
        self.l1: MemoryStore[Envelope] | None = (
            MemoryStore(l1_max_entries, l1_max_bytes, clock) if l1 else None
        )
        if self.l1 is None and self.l2 is None:
            raise ValueError("l1=False needs a shared tier: pass redis_url or l2")
        self._l1c = self.telemetry.tier("l1")
        self._l2c = self.telemetry.tier("l2") if self.l2 is not None else None
        #: The namespace's version and the keys made with it.
        self.ns = Namespace(
            namespace,
            key_prefix,
            shared=self.l2 is not None,
            refresh_s=version_refresh_s,
            on_change=self.clear_l1,
        )
        #: The shared tier behind its breaker (``None`` without one).
        self.guard: GuardedTier | None = None
        self._ops: dict[str, Callable[..., Any]] = {}
        self._aops: dict[str, Callable[..., Any]] = {}
        if self.l2 is not None:
            assert self._l2c is not None
            self.guard = GuardedTier(
                self.l2,
                self._l2c,
                failures=breaker_failures,
                reset_s=breaker_reset_s,
                probe_key=self.ns.version_key,
            )
            self._ops, self._aops = self.guard.ops, self.guard.aops

        #: The single-flight claims of every entry point of this cache (keys are full local
        #: keys, unique across entry points): per-key misses here, batch loads in feature sets.
        self.flights = SingleFlight()
        #: Stale-while-revalidate refreshes; one running past close() re-closes the shared tier.
        self.refresh = BackgroundRefresh(refresh_workers, self._refresh_done, self._close_l2)
        self._closers: list[Callable[[], None]] = []
        #: Per-key deletes published to, and followed from, other processes' L1.
        self.invalidations = Invalidations(
            self.l1,
            self.l2,
            key_prefix=key_prefix,
            namespace=namespace,
            max_keys=max(1024, 2 * l1_max_entries),
            clear_l1=self.clear_l1,
        )
        if self.invalidations.stop is not None:
            self._closers.append(self.invalidations.stop)
        s = self.serializer
        # What L1 copies mutable values with: bytes that never leave the process need no MAC.
        l1_serializer = s.inner if isinstance(s, SignedSerializer) else s
        self._l1 = L1(self.l1, self._l1c, l1_serializer, self.invalidations.remember)

    # ------------------------------------------------------------------ drivers

    def _run(self, core: Core[T]) -> T:
        """Drive ``core`` (:func:`cachekit._core.sansio.drive`) with the sync shared tier, each
        operation guarded (:attr:`GuardedTier.ops <cachekit._engine.guard.GuardedTier.ops>`)."""
        return drive(core, self._ops)

    async def _arun(self, core: Core[T]) -> T:
        """Drive ``core`` with the asyncio shared tier: the ``a`` form of each operation,
        guarded."""
        return await adrive(core, self._aops)

    # ------------------------------------------------------------------ keys and ttl

    def make_key(self, kind: str, name: str, part: str, local: Hashable | None = None) -> CacheKey:
        """A key for entries of ``kind`` (``f`` functions, ``kv``, ``feat``, ``sem`` ...) owned
        by ``name``; ``part`` identifies the entry within it. ``local`` defaults to the remote
        string."""
        return self.ns.make_key(kind, name, part, local)

    def remote_prefix(self, kind: str, name: str) -> str:
        """What every shared-tier key of ``name``'s ``kind`` entries starts with at the current
        namespace version: ``remote_prefix(kind, name) + part`` is :meth:`make_key`'s
        ``remote`` (for batch paths that need only the strings)."""
        return self.ns.prefix(self.ns.version, kind, name)

    def make_keys(
        self, kind: str, name: str, parts: Iterable[str], locals_: Iterable[Hashable]
    ) -> list[CacheKey]:
        """:meth:`make_key` for many entries of one owner: ``parts`` and their local keys in
        step (one prefix for the batch)."""
        return self.ns.make_keys(kind, name, parts, locals_)

    def make_id_keys(
        self, kind: str, name: str, tag: str, ids: Iterable[Any], locals_: Iterable[Hashable]
    ) -> list[CacheKey]:
        """:meth:`make_keys` where each entry's part is ``tag`` followed by its id as text
        (``f"{tag}{id}"``), built in one step per key: int ids of a feature set."""
        return self.ns.make_keys(kind, name, ids, locals_, tag)

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
        """The namespace version this process keys entries with (see
        :meth:`Namespace.version_core <cachekit._engine.namespace.Namespace.version_core>`)."""
        return self.ns.version

    def clear_l1(self) -> None:
        """Drop this process's in-memory entries (the shared tier keeps its own)."""
        if self.l1 is not None:
            self.l1.clear()

    def invalidate_namespace(self) -> bool:
        """Bump the namespace version in the shared tier (or locally without one); False, with
        the old version kept, when the shared tier could not be reached."""
        return self._run(self.ns.invalidate_core())

    async def ainvalidate_namespace(self) -> bool:
        return await self._arun(self.ns.invalidate_core())

    # ------------------------------------------------------------------ the shared tier

    @property
    def breaker_state(self) -> str | None:
        return self.guard.breaker.state if self.guard is not None else None

    @property
    def shared_target(self) -> str | None:
        """Where the shared tier points, password redacted (its ``target``, else its name)."""
        return self.l2.target if self.l2 is not None else None

    def check_shared_tier(self) -> Health:
        """Read from the shared tier once, now (bounded by its timeouts), record the outcome and
        return :meth:`health`. Never raises."""
        return self.guard.check() if self.guard is not None else NO_SHARED_TIER

    def start_health_check(self) -> None:
        """Check the shared tier once in a daemon thread and log the outcome: the cause and the
        fix when it fails, since every later failure is only a miss."""
        if self.guard is not None:
            self.guard.start_check()

    def health(self) -> Health:
        """The shared tier's state, without touching it (see
        :class:`~cachekit._core.health.Health`)."""
        return self.guard.health() if self.guard is not None else NO_SHARED_TIER

    def l2_call(self, op: Callable[..., T], *args: Any) -> T:
        """Call ``op(*args)`` against the shared tier: timed, counted and behind the circuit
        breaker. An error or an open circuit returns :data:`~cachekit._core.types.FAILED` (a miss
        for the caller), never an exception (:meth:`GuardedTier.call
        <cachekit._engine.guard.GuardedTier.call>`)."""
        assert self.guard is not None, "l2_call needs a shared tier"
        return self.guard.call(op, *args)

    async def al2_call(self, op: Callable[..., Awaitable[T]], *args: Any) -> T:
        """The asyncio form of :meth:`l2_call`."""
        assert self.guard is not None, "al2_call needs a shared tier"
        return await self.guard.acall(op, *args)

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
        new, version = tuple.__new__, self.ns.version
        for j, data in enumerate(datas):
            if data is None:
                continue
            key = new(CacheKey, (locals_[pending[j]], remotes[j], version))
            found[j] = self._l2_found(key, found[j], data, now, share, fills)
            if found[j].status is Status.HIT:
                held.append(key)
        self._l1.put_many(fills, held)
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
            log.warning("unreadable entry %s treated as a miss: %s", key.remote, exc)
            return prev
        if env.fresh(now):
            l2c.hits += 1
            self._l1.fill(key, env, len(data), now, share, fills)
            return Found(Status.HIT, env, "l2")
        if env.servable_stale(now):
            l2c.hits += 1
            return prev if prev.status is Status.STALE else Found(Status.STALE, env, "l2")
        l2c.misses += 1
        return prev

    def _lookup_one_core(self, key: CacheKey, probe: bool, count: bool = True) -> Core[Found]:
        now = self.clock()
        if now >= self.ns.next_check:
            yield from self.ns.version_core(now)
        if key.version != self.ns.version:
            key = self.ns.current([key])[0]
        found = self._l1.one(key.local, now)
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

    def l1_fresh(self, key: CacheKey) -> Envelope | None:
        """The fresh L1 envelope of ``key``, if any (no counting, no shared tier)."""
        return self._l1.fresh(key.local, self.clock())

    def lookup_many(self, keys: Sequence[CacheKey]) -> list[Found]:
        """What each key finds: one L1 pass, then one shared-tier round trip for the L1 misses."""
        return merged(self._run(self._lazy_core([k.local for k in keys], self._remotes_at(keys))))

    async def alookup_many(self, keys: Sequence[CacheKey]) -> list[Found]:
        return merged(
            await self._arun(self._lazy_core([k.local for k in keys], self._remotes_at(keys)))
        )

    def _remotes_at(self, keys: Sequence[CacheKey]) -> Callable[[list[int]], list[str]]:
        # Called after the lookup's version check: a key built before a bump gets the new version.
        return lambda idx: [k.remote for k in self.ns.current([keys[i] for i in idx])]

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
        call those costs dominate. Returns a :class:`~cachekit._core.types.LazyFound`.

        The fresh envelopes are L1's own: a mutable value is held as a
        :class:`~cachekit._core.serialization.Packed`, whose ``load()`` gives the caller its copy
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
        if now >= self.ns.next_check:
            yield from self.ns.version_core(now)
        fresh, pending, stale = self._l1.scan(locals_, now)
        self.telemetry.hits += len(locals_) - len(pending)
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
            for f in found:
                self.record_found(f.status)
        return LazyFound(fresh, pending, remotes, found, misses_only)

    # ------------------------------------------------------------------ writes

    def _encode_many(
        self, items: Sequence[StoreItem], share: bool
    ) -> tuple[list[bool], list[Entry]]:
        now = self.clock()
        if any(item[0].version != self.ns.version for item in items):
            fresh = self.ns.current([item[0] for item in items])
            items = [(k, *item[1:]) for k, item in zip(fresh, items, strict=True)]
        ok: list[bool] = []
        entries: list[Entry] = []
        l1_items: list[L1Item] = []
        stored: list[CacheKey] = []
        share = share or self.l1 is None
        serializer, l1_serializer = self.serializer, self._l1.serializer
        for key, value, ttl, stale_ttl, version in items:
            env = Envelope(value, now, ttl, stale_ttl if ttl is not None else 0.0, version)
            try:
                data, held_value = encode_for_tiers(
                    serializer, l1_serializer, env, key.remote, share=share
                )
            except SerializationError as exc:
                self.telemetry.serialization_errors += 1
                log.warning("not caching %s: %s", key.remote, exc)
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
        self._l1.put_many(l1_items, stored)
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
        keys = self.ns.current(keys)
        self._l1.delete(keys)
        if keys and self.l2 is not None:
            remotes = [k.remote for k in keys]
            yield ("delete_many", (remotes,))
            inv = self.invalidations
            if inv.publishes:
                yield ("publish_invalidation", (inv.channel, inv.message(remotes)))

    def wait_following(self, timeout: float | None = None) -> bool:
        """Wait until this process follows the namespace's invalidation channel (subscribed in
        the background after the cache was created); False at once when it has none to
        follow (no shared tier offering one, or no L1)."""
        return self.invalidations.wait(timeout)

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
        :class:`~cachekit._engine.background.BackgroundRefresh`). A failure is logged and counted;
        the old value stays."""
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
        bind: Callable[[tuple[Any, ...], dict[str, Any]], tuple[Any, ...] | None] | None = None,
    ) -> Callable[..., Any]:
        """The L1 hit path of a decorated function, as a function of the call's arguments.

        Serves a fresh L1 entry of the current namespace version and hands everything else to
        ``on_miss(args, kwargs)``. Returned as a function so a sync decorator's wrapper *is* this
        function: a Python call layer costs about a tenth of an L1 hit. For positional scalar
        arguments within ``shape`` (or bound by ``bind`` when some are given by keyword) the
        local key ``(fname, values, types)`` is built inline; other calls get theirs from
        ``local_key_of(args, kwargs)`` (:func:`cachekit._engine.fast_path.l1_fast_path`).
        """
        held = (self.l1, self.clock, self.ns, self._l1c)
        return l1_fast_path(*held, fname, shape, local_key_of, timing, on_miss, bind)

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
                log.warning("error while closing", exc_info=True)
        self._close_l2()

    def _close_l2(self) -> None:
        if self.l2 is not None:
            try:
                self.l2.close()
            except Exception:  # closing a dead connection must not raise either
                log.debug("error closing shared tier", exc_info=True)
