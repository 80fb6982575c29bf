"""The feature set: ids in, features out, through L1, the shared tier and one loader call.

The package's docs (:mod:`cachekit.features`) give the loader contract; keys are
:mod:`cachekit.features.entity_keys`, outcomes and result types :mod:`cachekit.features.outcomes`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from cachekit._core.sansio import Core, adrive, drive
from cachekit._core.serialization import load_packed
from cachekit._core.types import CacheKey, Status, StoreItem
from cachekit._engine.background import WRITE_BEHIND_FLUSH_TIMEOUT, WriteBehind
from cachekit.features.entity_keys import FeatureKeys, validate
from cachekit.features.outcomes import (
    ABSENT,
    AWAIT_OPS,
    NEGATIVE_MARK,
    NOT_FOUND,
    WAIT_OPS,
    Absent,
    AllFound,
    Failure,
    FeatureBatch,
    FeatureResult,
    FeatureStats,
    Loaded,
    PartialLoadError,
    Todo,
    at,
    in_step,
    unclaimed,
    waits_core,
)

if TYPE_CHECKING:
    from cachekit._core.types import Envelope, LazyFound
    from cachekit._engine.engine import Engine

__all__ = ["FeatureSet"]

log = logging.getLogger("cachekit.features")


#: The type of a feature set's entity ids (its loader's argument items).
K = TypeVar("K")


class FeatureSet(Generic[K]):
    """Cached features of one kind of entity (users, items ...). Create with
    :meth:`cachekit.Cache.features`.

    ``loader``: see the module docs for the contract. ``ttl``: seconds an entry is fresh
    (``None``: the cache's ``default_ttl``). ``version``: the feature schema version, part of
    every key, so bumping it retires every old entry. ``negative_ttl``: seconds an id the loader
    did not return is remembered as absent (``0`` or ``None``: not remembered). ``stale_ttl``:
    seconds after expiry during which the old features are served while one background load
    refreshes them. ``jitter``: fraction of the TTL removed at random per entry so a batch loaded
    together does not expire together. ``max_batch``: most ids per loader call (``None``: one
    call for everything missing). ``copy``: whether each caller gets its own copy of a
    mutable value from L1 (the default, as everywhere in cachekit: mutating a result never
    changes what later callers get); ``copy=False`` hands every caller the cached object itself,
    about 1 µs less per L1 hit of a small dict (most of a large ``get_many`` of L1 hits), for
    callers that treat features as read-only (see docs/features.md). ``write_behind``: return
    as soon as the loader has answered and write the loaded entries to L1 and the shared tier in
    the background (one worker thread for sync callers, a task of the caller's loop for async
    ones); requests for those ids meanwhile wait on the load instead of loading again, and
    :meth:`invalidate` / :meth:`prime` wait for pending writes first.
    """

    def __init__(
        self,
        engine: Engine,
        name: str,
        *,
        loader: Callable[[list[K]], Any],
        ttl: float | None = None,
        version: int | str = 1,
        negative_ttl: float | None = 30.0,
        stale_ttl: float = 0.0,
        jitter: float = 0.1,
        max_batch: int | None = None,
        copy: bool = True,
        write_behind: bool = False,
    ) -> None:
        validate(name, version, loader, ttl, negative_ttl, stale_ttl, jitter, max_batch)
        if not isinstance(copy, bool) or not isinstance(write_behind, bool):
            raise TypeError("copy and write_behind must be True or False")
        self.engine = engine
        self.name = name
        self.version = version
        self.loader = loader
        self.ttl = ttl
        self.negative_ttl = negative_ttl or None
        self.stale_ttl = float(stale_ttl)
        self.jitter = jitter
        self.max_batch = max_batch
        self.copy = copy
        self.write_behind = write_behind
        self._writer = WriteBehind()
        if write_behind:
            engine.on_close(self._writer.close)
        self._loader_name = getattr(loader, "__qualname__", None) or repr(loader)
        self._loader_is_async = inspect.iscoroutinefunction(loader)

        self._kname = f"{name}@v{version}"
        #: How this set keys its entities (see :mod:`cachekit.features.entity_keys`).
        self.keys = FeatureKeys(engine, name, self._kname, copy)

        self._lock = threading.Lock()
        self._flights = engine.flights
        # What the sync and asyncio drivers answer the read and load cores with.
        share = not copy
        self._ops: dict[str, Callable[..., Any]] = {
            "lookup": partial(engine.lookup_lazy, share=share),
            "refresh": self._refresh,
            "load": self._load,
            "loader": self._call_loader,
            "store": partial(engine.store_many, share=share),
        }
        self._aops: dict[str, Callable[..., Any]] = {
            "lookup": partial(engine.alookup_lazy, share=share),
            "refresh": self._arefresh,
            "load": self._aload,
            "loader": self._acall_loader,
            "store": partial(engine.astore_many, share=share),
        }
        self._refreshing: set[Hashable] = set()

        section = f"features:{name}"
        stats = engine.telemetry.sections.get(section)
        if not isinstance(stats, FeatureStats):
            stats = FeatureStats()
            engine.telemetry.sections[section] = stats
        self._stats = stats
        self._c = stats.c

    def __repr__(self) -> str:
        return f"FeatureSet({self._kname!r}, loader={self._loader_name})"

    # ------------------------------------------------------------------ keys

    def cache_key(self, entity_id: K) -> str:
        """The shared-tier key of ``entity_id`` (for debugging)."""
        return self.keys.cache_key(entity_id)

    # ------------------------------------------------------------------ read path

    def _classify(
        self, uids: list[Any], locals_: list[Hashable], lazy: LazyFound
    ) -> tuple[list[Any], list[int], list[int], Todo]:
        """Values by index, the indexes known absent, the indexes to load, and the entities to
        refresh."""
        pending, found = lazy.pending, lazy.found
        c = self._c
        c.l1 += len(uids) - len(pending)
        if len(pending) == len(uids):  # nothing from L1: no envelope to look at
            vals: list[Any] = [None] * len(uids)
            absent: list[int] = []
        else:
            vals, absent = self._from_l1(lazy.fresh)
        if lazy.misses_only:  # a batch of new ids: all of them to load
            c.negative_hits += len(absent)
            return vals, absent, pending, Todo([], [])
        need_idx: list[int] = []
        stale_idx: list[int] = []
        l2 = 0
        for i, f in zip(pending, found, strict=True):
            env = f.env
            if env is None or (f.status is not Status.HIT and f.status is not Status.STALE):
                need_idx.append(i)
            elif env.version is not None:  # a negative entry: the id does not exist
                if f.status is Status.HIT:
                    vals[i] = ABSENT
                    absent.append(i)
                    l2 += 1
                else:
                    need_idx.append(i)
            else:
                vals[i] = env.value
                if f.status is Status.HIT:
                    l2 += 1
                else:
                    stale_idx.append(i)
        c.l2 += l2
        c.stale += len(stale_idx)
        c.negative_hits += len(absent)
        return vals, absent, need_idx, at(Todo(locals_, uids), stale_idx)

    @staticmethod
    def _from_l1(fresh: list[Envelope | None]) -> tuple[list[Any], list[int]]:
        """Values from L1's own envelopes (``None`` where it had none) and the indexes of its
        negative entries. A mutable value is packed: each caller gets a copy."""
        vals = load_packed(
            [
                None if env is None else ABSENT if env.version is not None else env.value
                for env in fresh
            ]
        )
        absent = (
            [i for i, v in enumerate(vals) if v is ABSENT] if Absent in set(map(type, vals)) else []
        )
        return vals, absent

    def _finish(
        self,
        uids: list[Any],
        vals: list[Any],
        absent: list[int],
        need_idx: list[int],
        loaded: list[Any],
        t0: float,
    ) -> FeatureBatch:
        """The result: ``vals`` by index, with the ``loaded`` outcomes (in step with
        ``need_idx``) in place; absent and failed ids left out."""
        kinds = set() if type(loaded) is AllFound else set(map(type, loaded))
        failed: dict[Any, Any] = {}
        if Failure in kinds:
            failed = {
                uids[i]: v.error
                for i, v in zip(need_idx, loaded, strict=True)
                if type(v) is Failure
            }
            loaded = [ABSENT if type(v) is Failure else v for v in loaded]
        if len(need_idx) == len(vals):  # every id loaded: the outcomes are the values
            vals = loaded
        else:
            for i, v in zip(need_idx, loaded, strict=True):
                vals[i] = v
        batch = FeatureBatch(zip(uids, vals, strict=True))
        if len(batch) != len(vals):
            # ids equal under == but of different types (1, 1.0, True) share a dict slot
            batch = FeatureBatch((u, v) for u, v in zip(uids, vals, strict=True) if v is not ABSENT)
        elif absent or failed or Absent in kinds:
            for i in absent:
                del batch[uids[i]]
            for i, v in zip(need_idx, loaded, strict=True):
                if v is ABSENT:
                    del batch[uids[i]]
        batch.failed = failed
        self._c.failed += len(failed)
        self._stats.latency.record(time.perf_counter() - t0)
        return batch

    def _get_core(self, ids: Iterable[Any]) -> Core[FeatureBatch]:
        """The read path, for both forms: one L1 pass and one L2 round trip (``lookup``), a
        background load of stale ids (``refresh``), one load of what is missing (``load``)."""
        t0 = time.perf_counter()
        uids, locals_, n, tok = self.keys.request(ids)
        c = self._c
        c.requested += n
        c.unique += len(uids)
        if not uids:
            return FeatureBatch()
        lazy = yield ("lookup", (locals_, self.keys.remotes_at(locals_, uids, tok)))
        vals, absent, need_idx, stale = self._classify(uids, locals_, lazy)
        if stale.ids:
            yield ("refresh", (stale,))
        need = at(Todo(locals_, uids), need_idx)
        loaded = (yield ("load", (need,))) if need_idx else []
        return self._finish(uids, vals, absent, need_idx, loaded, t0)

    def get_many(self, ids: Iterable[K]) -> FeatureBatch:
        """Features of ``ids``: ``{id: features}`` in request order, absent and failed ids left
        out (failed ones listed in ``.failed``). One L1 pass, one L2 round trip for the L1
        misses, one loader call for what is left (waiting on loads already in flight)."""
        try:
            return drive(self._get_core(ids), self._ops)
        finally:
            self._writer.kick()  # write-behind: the writes start as the answer leaves

    async def aget_many(self, ids: Iterable[K]) -> FeatureBatch:
        """The asyncio form of :meth:`get_many`."""
        return await adrive(self._get_core(ids), self._aops)

    def get(self, entity_id: K, default: Any = None) -> Any:
        """Features of one entity, or ``default`` when it does not exist or failed to load."""
        return self.get_many([entity_id]).get(entity_id, default)

    async def aget(self, entity_id: K, default: Any = None) -> Any:
        return (await self.aget_many([entity_id])).get(entity_id, default)

    # ------------------------------------------------------------------ loading

    def _split(self, todo: Todo) -> list[Todo]:
        m = self.max_batch
        if m is None or len(todo.ids) <= m:
            return [todo]
        lks, ids = todo.locals, todo.ids
        return [Todo(lks[k : k + m], ids[k : k + m]) for k in range(0, len(ids), m)]

    def _interpret(self, result: Any) -> tuple[Mapping[Any, Any], Mapping[Any, Any]]:
        if isinstance(result, FeatureResult):
            return result.found, result.failed
        if isinstance(result, Mapping):
            return result, {}
        raise TypeError(
            f"feature loader {self._loader_name} must return a dict of id -> features "
            f"(or a FeatureResult), got {type(result).__qualname__}"
        )

    def _outcomes(
        self, chunk: Todo, found: Mapping[Any, Any], failed: Mapping[Any, Any]
    ) -> list[Any]:
        """Per-id outcomes of one loader call, in step with ``chunk``: the features,
        ``ABSENT`` or a ``Failure``."""
        if not failed and type(found) is dict and len(found) >= len(chunk.ids):
            try:  # the common case, every id found: one C-level pass
                every = AllFound(map(found.__getitem__, chunk.ids))
            except KeyError:
                pass
            else:
                self._count_loaded(len(every), 0)
                return every
        get = found.get
        vals: list[Any] = (
            [Failure(failed[i]) if i in failed else get(i, ABSENT) for i in chunk.ids]
            if failed
            else [get(i, ABSENT) for i in chunk.ids]
        )
        kinds = set(map(type, vals))
        n_absent = vals.count(ABSENT) if Absent in kinds else 0
        n_failed = sum(type(v) is Failure for v in vals) if Failure in kinds else 0
        n_hits = len(vals) - n_absent - n_failed
        if found and not n_hits:
            log.warning(
                "feature loader %s returned %d ids, none of them requested (ids of another type?)",
                self._loader_name,
                len(found),
            )
        self._count_loaded(n_hits, n_absent)
        return vals

    def _count_loaded(self, found: int, absent: int) -> None:
        c = self._c
        c.loaded += found
        c.negative_stored += absent
        self.engine.record_misses(found + absent)

    def _store_items(self, loaded: Loaded) -> list[StoreItem]:
        """The entries to store for one loader call's outcomes: the features of the ids it
        found, a negative entry for each id it does not know, nothing for failures."""
        todo, vals = loaded
        keys = self.keys.make_keys(todo.locals, todo.ids)
        hits = (
            list(zip(keys, vals, strict=True))
            if type(vals) is AllFound
            else [(k, v) for k, v in zip(keys, vals, strict=True) if type(v) not in NOT_FOUND]
        )
        resolve = self.engine.resolve_ttls
        stale_ttl = self.stale_ttl
        store: list[StoreItem] = [
            (key, value, ttl, stale_ttl, None)
            for (key, value), ttl in zip(
                hits, resolve(self.ttl, self.jitter, len(hits)), strict=True
            )
        ]
        if len(hits) < len(keys) and self.negative_ttl is not None:
            misses = [k for k, v in zip(keys, vals, strict=True) if v is ABSENT]
            ttls = resolve(self.negative_ttl, self.jitter, len(misses))
            store.extend(
                (key, None, ttl, 0.0, NEGATIVE_MARK) for key, ttl in zip(misses, ttls, strict=True)
            )
        return store

    def _call_loader(self, ids: list[Any]) -> Any:
        result = self.loader(ids)
        if inspect.isawaitable(result):
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return asyncio.run(_as_coroutine(result))
            if inspect.iscoroutine(result):
                result.close()
            raise TypeError(
                f"feature loader {self._loader_name} is async: call aget_many() "
                "inside an event loop"
            )
        return result

    async def _acall_loader(self, ids: list[Any]) -> Any:
        if self._loader_is_async:
            result = self.loader(ids)
        else:
            # A sync loader is slow I/O by nature: keep it off the event loop.
            result = await asyncio.to_thread(self.loader, ids)
        if inspect.isawaitable(result):
            result = await result
        return result

    def _chunk_core(self, chunk: Todo, later: list[Loaded] | None) -> Core[list[Any]]:
        """One loader call (``loader``) and the write-back of what it returned (``store``), or
        with write-behind what to write added to ``later`` (its entries are made by the
        writer, off the request). The outcomes, in step with ``chunk``."""
        c = self._c
        c.loader_calls += 1
        t0 = time.perf_counter()
        try:
            found, failed = self._interpret((yield ("loader", (chunk.ids,))))
        except PartialLoadError as exc:
            found, failed = exc.found, exc.failed
        except BaseException:
            c.loader_errors += 1
            raise
        finally:
            self.engine.telemetry.compute.record(time.perf_counter() - t0)
        vals = self._outcomes(chunk, found, failed)
        if later is not None:
            later.append((chunk, vals))
        else:
            store = self._store_items((chunk, vals))
            if store:
                yield ("store", (store,))
        return vals

    def _own_core(self, own: Todo, later: list[Loaded] | None) -> Core[list[Any]]:
        """The loads of the ids this caller claimed, chunk by chunk, in step with ``own``."""
        vals: list[Any] = []
        for chunk in self._split(own):
            got = yield from self._chunk_core(chunk, later)
            vals = got if not vals else vals + got  # one chunk: no copy
        return vals

    def _load(self, todo: Todo) -> list[Any]:
        """Load ``todo``: the ids no other thread is loading with one loader call, then wait
        for the others' loads. The outcomes, in step with ``todo``."""
        flight, mine, waits = self._flights.claim(todo.locals)
        self._count_shared(len(waits))
        own = unclaimed(todo, waits)
        vals: list[Any] = []
        if mine:
            later: list[Loaded] | None = [] if self.write_behind else None
            try:
                vals = drive(self._own_core(own, later), self._ops)
            except BaseException as exc:
                self._flights.release(flight, mine, error=exc)
                raise
            if later:
                self._writer.defer(self._store_then_release, later, flight, mine)
            else:
                self._flights.release(flight, mine, dict(zip(own.locals, vals, strict=True)))
        if not waits:
            return vals
        # About to wait on other loads, whose leaders may wait on ours: ours must not wait for
        # this request to return.
        self._writer.kick()
        outcomes = dict(zip(own.locals, vals, strict=True))  # (rare: overlapping requests)
        orphans = drive(waits_core(todo, waits, outcomes), WAIT_OPS)
        if orphans:
            again = at(todo, orphans)
            outcomes.update(zip(again.locals, self._load(again), strict=True))
        return in_step(todo, outcomes)

    async def _aload(self, todo: Todo) -> list[Any]:
        loop = asyncio.get_running_loop()
        flight, mine, waits = self._flights.claim(todo.locals, loop)
        self._count_shared(len(waits))
        own = unclaimed(todo, waits)
        vals: list[Any] = []
        if mine:
            later: list[Loaded] | None = [] if self.write_behind else None
            try:
                vals = await adrive(self._own_core(own, later), self._aops)
            except BaseException as exc:
                self._flights.release(flight, mine, error=exc, loop=loop)
                raise
            if later:
                self._writer.asubmit(self._astore_then_release(later, flight, mine, loop))
            else:
                outcomes = dict(zip(own.locals, vals, strict=True))
                self._flights.release(flight, mine, outcomes, loop=loop)
        if not waits:
            return vals
        outcomes = dict(zip(own.locals, vals, strict=True))
        orphans = await adrive(waits_core(todo, waits, outcomes), AWAIT_OPS)
        if orphans:
            again = at(todo, orphans)
            outcomes.update(zip(again.locals, await self._aload(again), strict=True))
        return in_step(todo, outcomes)

    @staticmethod
    def _outcomes_of(later: list[Loaded]) -> dict[Hashable, Any]:
        """What a write-behind load's waiters are told: outcomes by local key."""
        return {lk: v for todo, vals in later for lk, v in zip(todo.locals, vals, strict=True)}

    def _store_then_release(self, later: list[Loaded], flight: Any, mine: list[Hashable]) -> None:
        """Write-behind: store what a load returned, then let its waiters go (until then, a
        request for the same ids waits on the load instead of missing and loading again)."""
        outcomes = self._outcomes_of(later)
        try:
            items = [item for loaded in later for item in self._store_items(loaded)]
            self.engine.store_many(items, share=not self.copy)
            self._c.written_behind += len(items)
        finally:
            self._flights.release(flight, mine, outcomes)

    async def _astore_then_release(
        self,
        later: list[Loaded],
        flight: Any,
        mine: list[Hashable],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        outcomes = self._outcomes_of(later)
        try:
            items = [item for loaded in later for item in self._store_items(loaded)]
            await self.engine.astore_many(items, share=not self.copy)
            self._c.written_behind += len(items)
        finally:
            self._flights.release(flight, mine, outcomes, loop=loop)

    def _count_shared(self, n: int) -> None:
        if n:
            self._c.shared += n
            self.engine.record_misses(0, shared=n)

    # ------------------------------------------------------------------ stale-while-revalidate

    def _claim_refresh(self, stale: Todo) -> Todo:
        with self._lock:
            refreshing = self._refreshing
            todo = at(stale, [k for k, lk in enumerate(stale.locals) if lk not in refreshing])
            refreshing.update(todo.locals)
        return todo

    def _release_refresh(self, todo: Todo) -> None:
        with self._lock:
            self._refreshing.difference_update(todo.locals)

    def _refresh(self, stale: Todo) -> None:
        todo = self._claim_refresh(stale)
        if not todo.ids:
            return

        def work() -> None:
            try:
                self._load(todo)
            finally:
                self._writer.kick()
                self._release_refresh(todo)

        if not self.engine.refresh_in_background(("feat", self._kname, id(todo)), work):
            self._release_refresh(todo)

    def _arefresh(self, stale: Todo) -> None:
        todo = self._claim_refresh(stale)
        if not todo.ids:
            return

        async def work() -> None:
            try:
                await self._aload(todo)
            finally:
                self._release_refresh(todo)

        if not self.engine.arefresh_in_background(("feat", self._kname, id(todo)), work):
            self._release_refresh(todo)

    # ------------------------------------------------------------------ writes

    def _keys(self, ids: Iterable[Any]) -> list[CacheKey]:
        uids, locals_, _, _ = self.keys.request(ids)
        return self.keys.make_keys(locals_, uids)

    def _prime_items(self, features: Mapping[Any, Any]) -> list[StoreItem]:
        if not isinstance(features, Mapping):
            raise TypeError(
                f"prime() takes a dict of id -> features, got {type(features).__qualname__}"
            )
        entity_ids = list(features)
        locals_, _ = self.keys.local_keys(entity_ids)
        keys = self.keys.make_keys(locals_, entity_ids)
        ttls = self.engine.resolve_ttls(self.ttl, self.jitter, len(keys))
        stale_ttl = self.stale_ttl
        return [
            (k, v, ttl, stale_ttl, None)
            for k, v, ttl in zip(keys, features.values(), ttls, strict=True)
        ]

    def invalidate(self, ids: Iterable[K]) -> None:
        """Forget ``ids`` in every tier (positive and negative entries alike)."""
        keys = self._keys(ids)
        self._writer.flush()  # a pending store must not land after the delete
        if keys:
            self.engine.delete_many(keys)

    async def ainvalidate(self, ids: Iterable[K]) -> None:
        keys = self._keys(ids)
        await self._writer.aflush()
        if keys:
            await self.engine.adelete_many(keys)

    def prime(self, features: Mapping[K, Any]) -> int:
        """Store ``{id: features}`` as if the loader had returned them; returns how many could
        be stored."""
        items = self._prime_items(features)
        self._writer.flush()  # an older pending store must not land after this one
        return sum(self.engine.store_many(items, share=not self.copy))

    async def aprime(self, features: Mapping[K, Any]) -> int:
        items = self._prime_items(features)
        await self._writer.aflush()
        return sum(await self.engine.astore_many(items, share=not self.copy))

    def flush(self, timeout: float = WRITE_BEHIND_FLUSH_TIMEOUT) -> bool:
        """Wait for this feature set's pending write-behind stores; False on timeout. (Nothing
        is pending without ``write_behind``.)"""
        return self._writer.flush(timeout)

    async def aflush(self, timeout: float = WRITE_BEHIND_FLUSH_TIMEOUT) -> bool:
        return await self._writer.aflush(timeout)

    def stats(self) -> dict[str, Any]:
        """This feature set's telemetry section (also in ``cache.stats().extra``)."""
        return self._stats()


async def _as_coroutine(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
