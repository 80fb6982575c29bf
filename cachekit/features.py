"""Feature sets: batch multi-get of entity features in front of any feature source.

``cache.features("user", loader=load_users, ttl=60, version=3)`` returns a :class:`FeatureSet`.
``get_many(ids)`` answers what it can from L1, then looks the rest up in L2 in one round trip,
then calls the loader once for what is still missing; every tier, TTL, fail-open and
serialization rule is the engine's (:meth:`cachekit.engine.Engine.lookup_lazy` and friends). What
this module adds is the translation between entity ids and cache keys, the loader contract,
negative entries for ids the loader does not know, and sharing of in-flight loads per id between
overlapping requests.

Loader contract
---------------
``loader(ids: list) -> Mapping[id, features]``, sync or async, called with distinct ids only.

* An id present in the mapping is cached with its features (``None`` is a valid value).
* An id absent from the mapping does not exist: it is cached as *absent* for ``negative_ttl``
  seconds and left out of the result.
* Ids the loader could not load (a shard timed out, ...) are reported, not cached: return
  ``FeatureResult(found={...}, failed={id: exception})`` or raise
  ``PartialLoadError(found, failed)``. They are left out of the result and listed in the
  result's :attr:`FeatureBatch.failed`; the next request loads them again.
* Any other exception from the loader propagates to the caller (to every caller waiting on that
  load); nothing is cached for the ids of that call.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from cachekit.background import WRITE_BEHIND_FLUSH_TIMEOUT, WriteBehind
from cachekit.keys import stable_digest
from cachekit.sansio import Core, adrive, drive
from cachekit.serialization import load_packed
from cachekit.singleflight import Flight
from cachekit.telemetry import LatencyHistogram
from cachekit.types import CacheKey, Status, StoreItem

if TYPE_CHECKING:
    from cachekit.engine import Engine
    from cachekit.types import Envelope, LazyFound

__all__ = ["FeatureBatch", "FeatureResult", "FeatureSet", "PartialLoadError"]

log = logging.getLogger("cachekit.features")

#: Envelope ``version`` of a negative entry; positive entries carry ``None`` there, so a cached
#: ``None`` feature value and "this entity does not exist" stay distinguishable.
NEGATIVE_MARK = "ck:absent"

#: String ids up to this length (printable ASCII, no braces) appear as themselves in shared-tier
#: keys, readable in redis-cli; longer or other ids are digested.
READABLE_ID_MAX = 100


class _Absent:
    """The type of :data:`_ABSENT`, a type of its own so that a batch of outcomes is checked
    for absent ids with one ``set(map(type, ...))``."""

    __slots__ = ()


_ABSENT: Any = _Absent()  # outcome: the loader does not know this id (or a negative entry hit)
_BAD_NAME_CHARS = frozenset(":@{} \t\n")


@dataclass(frozen=True)
class FeatureResult:
    """What a loader may return instead of a plain mapping, to report ids it failed to load.

    ``found``: id -> features. ``failed``: id -> the exception (or reason) for ids that could not
    be loaded this time; they are not cached. Ids in neither do not exist (negative cache)."""

    found: Mapping[Any, Any]
    failed: Mapping[Any, Any] = field(default_factory=dict)


class PartialLoadError(Exception):
    """A loader may raise this to return what it could: same meaning as :class:`FeatureResult`."""

    def __init__(self, found: Mapping[Any, Any], failed: Mapping[Any, Any]) -> None:
        super().__init__(f"{len(failed)} ids failed to load")
        self.found = found
        self.failed = failed


class FeatureBatch(dict[Any, Any]):
    """The result of :meth:`FeatureSet.get_many`: ``{id: features}`` in request order (first
    occurrence of each id), without the ids that do not exist or failed to load. ``failed`` maps
    each id whose load failed in this request to its exception."""

    __slots__ = ("failed",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.failed: dict[Any, Any] = {}


@dataclass(slots=True)
class _Counters:
    requested: int = 0
    unique: int = 0
    l1: int = 0
    l2: int = 0
    stale: int = 0
    loaded: int = 0
    negative_hits: int = 0
    negative_stored: int = 0
    failed: int = 0
    shared: int = 0
    loader_calls: int = 0
    loader_errors: int = 0
    written_behind: int = 0


class _FeatureStats:
    """The telemetry section ``features:<name>``. Shared by every FeatureSet of that name on one
    cache (a version bump makes a new FeatureSet, not a new series)."""

    def __init__(self) -> None:
        self.c = _Counters()
        self.latency = LatencyHistogram()

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = asdict(self.c)
        lat = self.latency.summary()
        out["latency_ms"] = {
            "count": lat.count, "p50": lat.p50_ms, "p95": lat.p95_ms, "p99": lat.p99_ms,
            "max": lat.max_ms,
        }  # fmt: skip
        return out


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: Any) -> None:
        self.error = error


_NOT_FOUND = (_Absent, _Failure)  # the types of outcomes that store no features


class _AllFound(list[Any]):
    """Outcomes of a loader call that returned every id asked for: features only (no
    ``_ABSENT``, no ``_Failure``), so nobody needs to look at each."""

    __slots__ = ()


class _Todo(NamedTuple):
    """Entities to load (or refresh): their local keys and ids, in step. Lists, not a tuple per
    entity: a batch of a thousand new ids goes through the read path without one."""

    locals: list[Hashable]
    ids: list[Any]


# What one loader call gave: its entities and their outcomes, in step.
_Loaded = tuple[_Todo, list[Any]]


def _at(todo: _Todo, idx: list[int]) -> _Todo:
    """The entities of ``todo`` at ``idx`` (``todo`` itself when that is all of them)."""
    if len(idx) == len(todo.ids):
        return todo
    lks, ids = todo.locals, todo.ids
    return _Todo([lks[i] for i in idx], [ids[i] for i in idx])


def _waits_core(
    todo: _Todo, waits: Mapping[Hashable, Flight], outcomes: dict[Hashable, Any]
) -> Core[list[int]]:
    """Each key of ``todo`` that another load holds: its outcome into ``outcomes``, waiting for
    its flight (op ``wait``). Returns the positions whose leader was abandoned (cancelled, or
    interrupted by a BaseException that is not an error), which the caller loads itself; the
    leader's error, or this caller's own cancellation, propagates."""
    orphans: list[int] = []
    for k, lk in enumerate(todo.locals):
        other = waits.get(lk)
        if other is None:
            continue
        try:
            got = yield ("wait", (other,))
        except BaseException:
            if not other.abandoned():
                raise
            orphans.append(k)
            continue
        outcomes[lk] = got.get(lk, _ABSENT)
    return orphans


_WAIT: dict[str, Callable[..., Any]] = {"wait": Flight.wait}
_AWAIT: dict[str, Callable[..., Any]] = {"wait": Flight.await_outcome}


def _unclaimed(todo: _Todo, waits: Mapping[Hashable, Any]) -> _Todo:
    """The entities of ``todo`` no other load holds (``waits``: those that one does)."""
    if not waits:
        return todo
    return _at(todo, [k for k, lk in enumerate(todo.locals) if lk not in waits])


def _in_step(todo: _Todo, outcomes: Mapping[Hashable, Any]) -> list[Any]:
    """The outcomes of ``todo``'s entities, in step with it."""
    get = outcomes.get
    return [get(lk, _ABSENT) for lk in todo.locals]


class FeatureSet:
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
        loader: Callable[[list[Any]], Any],
        ttl: float | None = None,
        version: int | str = 1,
        negative_ttl: float | None = 30.0,
        stale_ttl: float = 0.0,
        jitter: float = 0.1,
        max_batch: int | None = None,
        copy: bool = True,
        write_behind: bool = False,
    ) -> None:
        _validate(name, version, loader, ttl, negative_ttl, stale_ttl, jitter, max_batch)
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
        # Local keys are (token, id) with one token per id type, so 1 and "1" never share an
        # entry; ids of other types are keyed by their typed stable digest. Shared values
        # (copy=False) live under local keys of their own: a copying reader of the same set
        # must never be handed an object another caller holds.
        base = f"feat\x00{self._kname}\x00{'' if copy else 'shared'}\x00"
        self._tok_int = base + "i"
        self._tok_str = base + "s"
        self._tok_digest = base + "h"
        self._toks: dict[type, str] = {int: self._tok_int, str: self._tok_str}

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
        if not isinstance(stats, _FeatureStats):
            stats = _FeatureStats()
            engine.telemetry.sections[section] = stats
        self._stats = stats
        self._c = stats.c

    def __repr__(self) -> str:
        return f"FeatureSet({self._kname!r}, loader={self._loader_name})"

    # ------------------------------------------------------------------ keys

    def _local_keys(self, ids: list[Any]) -> tuple[list[Hashable], str | None]:
        """The local keys of ``ids``, and their one token when all ids are of one plain type
        (ints or strings), else ``None``."""
        types = set(map(type, ids))
        if len(types) == 1:
            tok = self._toks.get(next(iter(types)))
            if tok is not None:  # the common case: all ints or all strings
                return [(tok, i) for i in ids], tok
        toks = self._toks
        out: list[Hashable] = []
        for i in ids:
            tok = toks.get(type(i))
            out.append((tok, i) if tok is not None else (self._tok_digest, self._digest(i)))
        return out, None

    def _digest(self, entity_id: Any) -> str:
        try:
            hash(entity_id)
        except TypeError:
            raise TypeError(
                f"feature set {self.name!r}: ids must be hashable, got "
                f"{type(entity_id).__qualname__} {entity_id!r:.60}"
            ) from None
        try:
            return stable_digest(entity_id)
        except TypeError as exc:
            raise TypeError(
                f"feature set {self.name!r}: cannot key id {entity_id!r:.60}: {exc}"
            ) from None

    def _part(self, local: Hashable, entity_id: Any) -> str:
        """The entity's part of its shared-tier key."""
        tok: str
        val: Any
        tok, val = local  # type: ignore[misc]
        if tok is self._tok_int:
            return f"i{val}"
        if (
            tok is self._tok_str
            and len(val) <= READABLE_ID_MAX
            and val.isascii()
            and val.isprintable()
            and "{" not in val
            and "}" not in val
        ):
            # readable in redis-cli; braces would act as a cluster hash tag
            return "s" + val
        if tok is self._tok_digest:
            return "h" + val
        return "h" + stable_digest(entity_id)

    def _make_keys(self, locals_: list[Hashable], ids: list[Any]) -> list[CacheKey]:
        """The full keys of ``ids`` (with their local keys), built as one batch."""
        tok_int = self._tok_int
        if all(local[0] is tok_int for local in locals_):  # type: ignore[index]
            # the common case, int ids: part "i<id>", as _part makes it
            return self.engine.make_id_keys("feat", self._kname, "i", ids, locals_)
        parts = [self._part(lk, i) for lk, i in zip(locals_, ids, strict=True)]
        return self.engine.make_keys("feat", self._kname, parts, locals_)

    def _remotes_at(
        self, locals_: list[Hashable], ids: list[Any], tok: str | None
    ) -> Callable[[list[int]], list[str]]:
        """``remotes_of`` for :meth:`Engine.lookup_lazy`: the shared-tier keys of the entries
        at some indexes of a request (``tok``: the request's one token, see _local_keys)."""

        def remotes_of(idx: list[int]) -> list[str]:
            prefix = self.engine.remote_prefix("feat", self._kname)
            every = len(idx) == len(ids)
            if tok is self._tok_int:  # the common case, int ids: part "i<id>", as _part makes it
                return [f"{prefix}i{i}" for i in (ids if every else [ids[i] for i in idx])]
            part = self._part
            return [prefix + part(locals_[i], ids[i]) for i in idx]

        return remotes_of

    def _request(self, ids: Iterable[Any]) -> tuple[list[Any], list[Hashable], int, str | None]:
        """Validated distinct ids in request order, their local keys, the request size and
        the ids' one token (see _local_keys)."""
        if isinstance(ids, str | bytes):
            raise TypeError(
                f"feature set {self.name!r}: pass a list of ids, not one {type(ids).__name__}"
            )
        try:
            seq = list(ids)
        except TypeError:
            raise TypeError(
                f"feature set {self.name!r}: ids must be an iterable of ids, got "
                f"{type(ids).__qualname__}"
            ) from None
        locals_, tok = self._local_keys(seq)
        if tok is not None and len(set(seq)) == len(seq):
            return seq, locals_, len(seq), tok  # ids of one plain type, all distinct
        distinct = dict(zip(locals_, seq, strict=True))  # typed dedupe, first occurrence order
        if len(distinct) == len(seq):
            return seq, locals_, len(seq), tok
        return list(distinct.values()), list(distinct), len(seq), tok

    def cache_key(self, entity_id: Any) -> str:
        """The shared-tier key of ``entity_id`` (for debugging)."""
        locals_, _ = self._local_keys([entity_id])
        return self._make_keys(locals_, [entity_id])[0].remote

    # ------------------------------------------------------------------ read path

    def _classify(
        self, uids: list[Any], locals_: list[Hashable], lazy: LazyFound
    ) -> tuple[list[Any], list[int], list[int], _Todo]:
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
            return vals, absent, pending, _Todo([], [])
        need_idx: list[int] = []
        stale_idx: list[int] = []
        l2 = 0
        for i, f in zip(pending, found, strict=True):
            env = f.env
            if env is None or (f.status is not Status.HIT and f.status is not Status.STALE):
                need_idx.append(i)
            elif env.version is not None:  # a negative entry: the id does not exist
                if f.status is Status.HIT:
                    vals[i] = _ABSENT
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
        return vals, absent, need_idx, _at(_Todo(locals_, uids), stale_idx)

    @staticmethod
    def _from_l1(fresh: list[Envelope | None]) -> tuple[list[Any], list[int]]:
        """Values from L1's own envelopes (``None`` where it had none) and the indexes of its
        negative entries. A mutable value is packed: each caller gets a copy."""
        vals = load_packed(
            [
                None if env is None else _ABSENT if env.version is not None else env.value
                for env in fresh
            ]
        )
        absent = (
            [i for i, v in enumerate(vals) if v is _ABSENT]
            if _Absent in set(map(type, vals))
            else []
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
        kinds = set() if type(loaded) is _AllFound else set(map(type, loaded))
        failed: dict[Any, Any] = {}
        if _Failure in kinds:
            failed = {
                uids[i]: v.error
                for i, v in zip(need_idx, loaded, strict=True)
                if type(v) is _Failure
            }
            loaded = [_ABSENT if type(v) is _Failure else v for v in loaded]
        if len(need_idx) == len(vals):  # every id loaded: the outcomes are the values
            vals = loaded
        else:
            for i, v in zip(need_idx, loaded, strict=True):
                vals[i] = v
        batch = FeatureBatch(zip(uids, vals, strict=True))
        if len(batch) != len(vals):
            # ids equal under == but of different types (1, 1.0, True) share a dict slot
            batch = FeatureBatch(
                (u, v) for u, v in zip(uids, vals, strict=True) if v is not _ABSENT
            )
        elif absent or failed or _Absent in kinds:
            for i in absent:
                del batch[uids[i]]
            for i, v in zip(need_idx, loaded, strict=True):
                if v is _ABSENT:
                    del batch[uids[i]]
        batch.failed = failed
        self._c.failed += len(failed)
        self._stats.latency.record(time.perf_counter() - t0)
        return batch

    def _get_core(self, ids: Iterable[Any]) -> Core[FeatureBatch]:
        """The read path, for both forms: one L1 pass and one L2 round trip (``lookup``), a
        background load of stale ids (``refresh``), one load of what is missing (``load``)."""
        t0 = time.perf_counter()
        uids, locals_, n, tok = self._request(ids)
        c = self._c
        c.requested += n
        c.unique += len(uids)
        if not uids:
            return FeatureBatch()
        lazy = yield ("lookup", (locals_, self._remotes_at(locals_, uids, tok)))
        vals, absent, need_idx, stale = self._classify(uids, locals_, lazy)
        if stale.ids:
            yield ("refresh", (stale,))
        need = _at(_Todo(locals_, uids), need_idx)
        loaded = (yield ("load", (need,))) if need_idx else []
        return self._finish(uids, vals, absent, need_idx, loaded, t0)

    def get_many(self, ids: Iterable[Any]) -> FeatureBatch:
        """Features of ``ids``: ``{id: features}`` in request order, absent and failed ids left
        out (failed ones listed in ``.failed``). One L1 pass, one L2 round trip for the L1
        misses, one loader call for what is left (waiting on loads already in flight)."""
        try:
            return drive(self._get_core(ids), self._ops)
        finally:
            self._writer.kick()  # write-behind: the writes start as the answer leaves

    async def aget_many(self, ids: Iterable[Any]) -> FeatureBatch:
        """The asyncio form of :meth:`get_many`."""
        return await adrive(self._get_core(ids), self._aops)

    def get(self, entity_id: Any, default: Any = None) -> Any:
        """Features of one entity, or ``default`` when it does not exist or failed to load."""
        return self.get_many([entity_id]).get(entity_id, default)

    async def aget(self, entity_id: Any, default: Any = None) -> Any:
        return (await self.aget_many([entity_id])).get(entity_id, default)

    # ------------------------------------------------------------------ loading

    def _split(self, todo: _Todo) -> list[_Todo]:
        m = self.max_batch
        if m is None or len(todo.ids) <= m:
            return [todo]
        lks, ids = todo.locals, todo.ids
        return [_Todo(lks[k : k + m], ids[k : k + m]) for k in range(0, len(ids), m)]

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
        self, chunk: _Todo, found: Mapping[Any, Any], failed: Mapping[Any, Any]
    ) -> list[Any]:
        """Per-id outcomes of one loader call, in step with ``chunk``: the features,
        ``_ABSENT`` or a ``_Failure``."""
        if not failed and type(found) is dict and len(found) >= len(chunk.ids):
            try:  # the common case, every id found: one C-level pass
                every = _AllFound(map(found.__getitem__, chunk.ids))
            except KeyError:
                pass
            else:
                self._count_loaded(len(every), 0)
                return every
        get = found.get
        vals: list[Any] = (
            [_Failure(failed[i]) if i in failed else get(i, _ABSENT) for i in chunk.ids]
            if failed
            else [get(i, _ABSENT) for i in chunk.ids]
        )
        kinds = set(map(type, vals))
        n_absent = vals.count(_ABSENT) if _Absent in kinds else 0
        n_failed = sum(type(v) is _Failure for v in vals) if _Failure in kinds else 0
        n_hits = len(vals) - n_absent - n_failed
        if found and not n_hits:
            log.warning(
                "cachekit: feature loader %s returned %d ids, none of them requested "
                "(ids of another type?)",
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

    def _store_items(self, loaded: _Loaded) -> list[StoreItem]:
        """The entries to store for one loader call's outcomes: the features of the ids it
        found, a negative entry for each id it does not know, nothing for failures."""
        todo, vals = loaded
        keys = self._make_keys(todo.locals, todo.ids)
        hits = (
            list(zip(keys, vals, strict=True))
            if type(vals) is _AllFound
            else [(k, v) for k, v in zip(keys, vals, strict=True) if type(v) not in _NOT_FOUND]
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
            misses = [k for k, v in zip(keys, vals, strict=True) if v is _ABSENT]
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

    def _chunk_core(self, chunk: _Todo, later: list[_Loaded] | None) -> Core[list[Any]]:
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

    def _own_core(self, own: _Todo, later: list[_Loaded] | None) -> Core[list[Any]]:
        """The loads of the ids this caller claimed, chunk by chunk, in step with ``own``."""
        vals: list[Any] = []
        for chunk in self._split(own):
            got = yield from self._chunk_core(chunk, later)
            vals = got if not vals else vals + got  # one chunk: no copy
        return vals

    def _load(self, todo: _Todo) -> list[Any]:
        """Load ``todo``: the ids no other thread is loading with one loader call, then wait
        for the others' loads. The outcomes, in step with ``todo``."""
        flight, mine, waits = self._flights.claim(todo.locals)
        self._count_shared(len(waits))
        own = _unclaimed(todo, waits)
        vals: list[Any] = []
        if mine:
            later: list[_Loaded] | None = [] if self.write_behind else None
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
        orphans = drive(_waits_core(todo, waits, outcomes), _WAIT)
        if orphans:
            again = _at(todo, orphans)
            outcomes.update(zip(again.locals, self._load(again), strict=True))
        return _in_step(todo, outcomes)

    async def _aload(self, todo: _Todo) -> list[Any]:
        loop = asyncio.get_running_loop()
        flight, mine, waits = self._flights.claim(todo.locals, loop)
        self._count_shared(len(waits))
        own = _unclaimed(todo, waits)
        vals: list[Any] = []
        if mine:
            later: list[_Loaded] | None = [] if self.write_behind else None
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
        orphans = await adrive(_waits_core(todo, waits, outcomes), _AWAIT)
        if orphans:
            again = _at(todo, orphans)
            outcomes.update(zip(again.locals, await self._aload(again), strict=True))
        return _in_step(todo, outcomes)

    @staticmethod
    def _outcomes_of(later: list[_Loaded]) -> dict[Hashable, Any]:
        """What a write-behind load's waiters are told: outcomes by local key."""
        return {lk: v for todo, vals in later for lk, v in zip(todo.locals, vals, strict=True)}

    def _store_then_release(self, later: list[_Loaded], flight: Any, mine: list[Hashable]) -> None:
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
        later: list[_Loaded],
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

    def _claim_refresh(self, stale: _Todo) -> _Todo:
        with self._lock:
            refreshing = self._refreshing
            todo = _at(stale, [k for k, lk in enumerate(stale.locals) if lk not in refreshing])
            refreshing.update(todo.locals)
        return todo

    def _release_refresh(self, todo: _Todo) -> None:
        with self._lock:
            self._refreshing.difference_update(todo.locals)

    def _refresh(self, stale: _Todo) -> None:
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

    def _arefresh(self, stale: _Todo) -> None:
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
        uids, locals_, _, _ = self._request(ids)
        return self._make_keys(locals_, uids)

    def _prime_items(self, features: Mapping[Any, Any]) -> list[StoreItem]:
        if not isinstance(features, Mapping):
            raise TypeError(
                f"prime() takes a dict of id -> features, got {type(features).__qualname__}"
            )
        entity_ids = list(features)
        locals_, _ = self._local_keys(entity_ids)
        keys = self._make_keys(locals_, entity_ids)
        ttls = self.engine.resolve_ttls(self.ttl, self.jitter, len(keys))
        stale_ttl = self.stale_ttl
        return [
            (k, v, ttl, stale_ttl, None)
            for k, v, ttl in zip(keys, features.values(), ttls, strict=True)
        ]

    def invalidate(self, ids: Iterable[Any]) -> None:
        """Forget ``ids`` in every tier (positive and negative entries alike)."""
        keys = self._keys(ids)
        self._writer.flush()  # a pending store must not land after the delete
        if keys:
            self.engine.delete_many(keys)

    async def ainvalidate(self, ids: Iterable[Any]) -> None:
        keys = self._keys(ids)
        await self._writer.aflush()
        if keys:
            await self.engine.adelete_many(keys)

    def prime(self, features: Mapping[Any, Any]) -> int:
        """Store ``{id: features}`` as if the loader had returned them; returns how many could
        be stored."""
        items = self._prime_items(features)
        self._writer.flush()  # an older pending store must not land after this one
        return sum(self.engine.store_many(items, share=not self.copy))

    async def aprime(self, features: Mapping[Any, Any]) -> int:
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


def _validate(
    name: str,
    version: int | str,
    loader: Any,
    ttl: float | None,
    negative_ttl: float | None,
    stale_ttl: float,
    jitter: float,
    max_batch: int | None,
) -> None:
    if not isinstance(name, str) or not name or _BAD_NAME_CHARS.intersection(name):
        raise ValueError("feature set name must be a non-empty string without : @ { } or spaces")
    if not isinstance(version, int | str) or _BAD_NAME_CHARS.intersection(str(version)):
        raise ValueError("version must be an int or a string without : @ { } or spaces")
    if not callable(loader):
        raise TypeError("loader must be callable: loader(ids: list) -> dict[id, features]")
    if ttl is not None and ttl <= 0:
        raise ValueError(f"ttl must be positive or None, got {ttl!r}")
    if negative_ttl is not None and negative_ttl < 0:
        raise ValueError(f"negative_ttl must be >= 0 or None, got {negative_ttl!r}")
    if stale_ttl < 0 or not 0.0 <= jitter < 1.0:
        raise ValueError("stale_ttl must be >= 0 and jitter in [0, 1)")
    if max_batch is not None and (not isinstance(max_batch, int) or max_batch <= 0):
        raise ValueError(f"max_batch must be a positive int or None, got {max_batch!r}")


async def _as_coroutine(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
