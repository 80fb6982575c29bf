"""``@cache.semantic``: answer a call from an earlier call whose text means the same.

The wrapper turns a call into ``(scope, text)``: the compared text, and a digest of everything
else that must match for two calls to share an answer. Lookups go exact-first (the engine's
L1/L2, keyed by scope and text, before anything is embedded), then to the
:class:`~cachekit.semantic.tier.SemanticTier`, which searches only that scope and asks the hit
policy about the nearest entries. A miss runs the function once per concurrent identical call
and stores both an exact and a semantic entry.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, Self, TypeVar, overload

from cachekit._core.extras import check_faiss_distributions, require, require_installed
from cachekit._core.keys import strings_digest
from cachekit._core.methods import (
    BoundMethod,
    warn_receiver_left_out,
)
from cachekit._core.sansio import Core, adrive, drive
from cachekit._core.types import CacheKey, Found, LookupResult, Status
from cachekit.semantic.policy.hit_policy import HitPolicy, resolve_policy
from cachekit.semantic.scope import CallSplit

if TYPE_CHECKING:
    from cachekit._core.protocols import Embedder, VectorIndex
    from cachekit._engine.engine import Engine
    from cachekit.cache import Cache
    from cachekit.semantic.tier import Match, SemanticTier

__all__ = ["SemanticFunction", "make_semantic"]

log = logging.getLogger("cachekit.semantic")

T = TypeVar("T")
P = ParamSpec("P")
#: One item of ``put_many``: ``(value, args, kwargs)``.
PutItem = tuple[Any, tuple[Any, ...], dict[str, Any]]
P2 = ParamSpec("P2")
S = TypeVar("S")
R = TypeVar("R")


class SemanticFunction(Protocol[P, R]):
    """What ``@cache.semantic`` returns: the function, its types kept, plus helpers taking the
    same arguments (docs/api.md). ``search``/``index`` (both forms on every function) are the
    semantic side alone, for callers that keep their own exact entries (``LLMCache``)."""

    __wrapped__: Callable[P, R]
    cache: Cache
    tier: SemanticTier
    policy: HitPolicy

    __name__: str
    __qualname__: str

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...
    def lookup(self, *args: P.args, **kwargs: P.kwargs) -> Any: ...
    def put(self, value: Any, *args: P.args, **kwargs: P.kwargs) -> Any: ...
    def put_many(self, items: Sequence[PutItem]) -> Any: ...
    def invalidate(self, *args: P.args, **kwargs: P.kwargs) -> Any: ...
    async def alookup(self, *args: P.args, **kwargs: P.kwargs) -> LookupResult: ...
    async def aput(self, value: Any, *args: P.args, **kwargs: P.kwargs) -> bool: ...
    async def aput_many(self, items: Sequence[PutItem]) -> int: ...
    async def ainvalidate(self, *args: P.args, **kwargs: P.kwargs) -> None: ...
    def search(self, *args: P.args, **kwargs: P.kwargs) -> LookupResult: ...
    async def asearch(self, *args: P.args, **kwargs: P.kwargs) -> LookupResult: ...
    def index(self, value: Any, *args: P.args, **kwargs: P.kwargs) -> bool: ...
    async def aindex(self, value: Any, *args: P.args, **kwargs: P.kwargs) -> bool: ...
    def cache_key(self, *args: P.args, **kwargs: P.kwargs) -> str: ...
    def scope_key(self, *args: P.args, **kwargs: P.kwargs) -> str: ...
    def flush(self, timeout: float | None = None) -> bool: ...
    def close(self) -> None: ...

    @overload
    def __get__(self, instance: None, owner: type[Any] | None = None) -> Self: ...
    @overload
    def __get__(
        self: SemanticFunction[Concatenate[S, P2], R], instance: S, owner: type[Any] | None = None
    ) -> BoundMethod[P2, R]: ...


def make_semantic(
    engine: Engine,
    owner: Cache,
    fn: Callable[..., Any] | None = None,
    *,
    threshold: float | None = None,
    policy: HitPolicy | None = None,
    ttl: float | None = None,
    text: Callable[..., str] | None = None,
    scope: Callable[..., Any] | None = None,
    ignore: tuple[str, ...] = (),
    embedder: Embedder | Callable[..., Any] | None = None,
    name: str | None = None,
    version: str | int | None = None,
    capacity: int = 100_000,
    max_bytes: int | None = None,
    max_batch: int = 64,
    max_wait_ms: float = 0.0,
    batching: bool = True,
    cache_none: bool = False,
    index_factory: Callable[[int], VectorIndex] | None = None,
) -> Any:
    """Implements :meth:`cachekit.Cache.semantic` (``owner``) over ``engine``; see
    ``docs/semantic.md``."""
    _require_extras(embedder, index_factory)
    hit_policy = resolve_policy(threshold, policy, embedder)
    if ttl is not None and (
        isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0
    ):
        raise ValueError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
    if text is not None and not callable(text):
        raise TypeError("text= must be a function of the call's arguments returning str")
    if scope is not None and not callable(scope):
        raise TypeError("scope= must be a function of the call's arguments")
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"capacity must be a positive int, got {capacity!r}")
    if max_bytes is not None and (
        isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1
    ):
        raise ValueError(f"max_bytes must be a positive int or None, got {max_bytes!r}")
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise ValueError(f"max_batch must be a positive int, got {max_batch!r}")
    if not max_wait_ms >= 0:
        raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms!r}")
    embedder_factory = _embedder_factory(embedder)

    if isinstance(ignore, str) or not all(isinstance(n, str) for n in ignore):
        raise TypeError(f"ignore= must be a sequence of parameter names, got {ignore!r}")

    def wrap(f: Callable[..., Any]) -> SemanticFunction[..., Any]:
        if not callable(f):
            raise TypeError("@cache.semantic decorates a function")
        if scope is None:
            warn_receiver_left_out(f, "semantic", "scope", ignore)
        return _make(
            engine,
            owner,
            f,
            policy=hit_policy,
            ttl=ttl,
            text=text,
            scope=scope,
            ignore=ignore,
            embedder_factory=embedder_factory,
            name=name,
            version=version,
            capacity=capacity,
            max_bytes=max_bytes,
            max_batch=max_batch,
            max_wait_ms=max_wait_ms,
            batching=batching,
            cache_none=cache_none,
            index_factory=index_factory,
        )

    return wrap(fn) if fn is not None else wrap


#: What the default embedder (ONNX, no torch) loads on first use; checked, not imported, at
#: decoration. Its weights are found on first use (`cachekit.semantic.embed.model_files`).
DEFAULT_EMBEDDER_MODULES = ("onnxruntime", "onnx", "tokenizers", "safetensors")


def _require_extras(embedder: Any, index_factory: Any) -> None:
    """Fail at decoration, once, naming the extra to install, rather than on every call (or, with
    numpy alone, with a warning on every store while the cache silently stays exact-only)."""
    feature = "@cache.semantic"
    require("numpy", extra="semantic", feature=feature)
    if index_factory is None:
        check_faiss_distributions()
        require("faiss", extra="semantic", feature=feature + " (its default FAISS index)")
    if embedder is None:
        for module in DEFAULT_EMBEDDER_MODULES:
            require_installed(
                module,
                extra="semantic",
                feature=feature + " (its default embedder, all-MiniLM-L6-v2)",
            )


def _embedder_factory(embedder: Any) -> Callable[[], Embedder]:
    from cachekit.semantic.embed.embedder import CachedEmbedder, as_embedder

    if embedder is None:

        def default() -> Embedder:
            # Built on first use: loading the model takes seconds and must not happen at import
            # or decoration time.
            from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder

            return CachedEmbedder(SentenceTransformerEmbedder())

        return default
    resolved = as_embedder(embedder)
    # Every embedder gets the exact-text cache: a text looked up and then stored (the miss
    # path) is encoded once, not twice.
    wrapped = resolved if isinstance(resolved, CachedEmbedder) else CachedEmbedder(resolved)
    return lambda: wrapped


#: One entry to store: (exact key, scope key, text, value).
_Item = tuple[CacheKey, str, str, Any]
#: What a lookup found, with what the miss path needs: (result, exact key, scope key, text).
_Parts = tuple[LookupResult, CacheKey, str, str]


class _SemanticCalls:
    """Everything a ``@cache.semantic`` function does: exact lookup, semantic search, the miss
    path and the writes. Each is one generator core (see :mod:`cachekit._core.sansio`), run by
    :meth:`run` with the sync operations or by :meth:`arun` with their asyncio forms."""

    def __init__(
        self,
        engine: Engine,
        fn: Callable[..., Any],
        tier: SemanticTier,
        split: CallSplit,
        *,
        ttl: float | None,
        version: str | int | None,
        cache_none: bool,
    ) -> None:
        self.engine = engine
        self.fn = fn
        self.tier = tier
        self.split = split
        self.fname = split.fname
        self.ttl = ttl
        self.version = version
        self.cache_none = cache_none
        self.timing = engine.telemetry.function()  # the mean compute time, for time saved
        self._ops = self._sync_ops()
        self._aops = self._async_ops()

    # ------------------------------------------------------------------ shared helpers

    def exact_key(self, scope_key: str, t: str) -> CacheKey:
        return self.engine.make_key("sem", self.fname, strings_digest(scope_key, t))

    def key_of(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[CacheKey, str, str]:
        scope_key, t = self.split(args, kwargs)
        return self.exact_key(scope_key, t), scope_key, t

    def _exact(self, k: CacheKey, found: Found, probe: bool) -> LookupResult | None:
        """The exact-match answer, if any. A probe (``lookup``) is counted by the tier and the
        engine apart from calls: never a hit, nor time saved."""
        tier = self.tier
        tier.count_lookup(probe)
        if found.status is Status.HIT and found.env is not None:
            tier.count_exact_hit(probe)
            if not probe:
                self.engine.telemetry.time_saved += self.timing.mean
            return LookupResult(
                Status.HIT,
                found.env.value,
                found.tier,
                k.remote,
                age_s=self.engine.clock() - found.env.created_at,
            )
        return None

    def _missed(self, probe: bool) -> None:
        self.tier.count_miss(probe)

    def _no_text(self, k: CacheKey, probe: bool) -> LookupResult:
        # An empty text is compared exactly only: it means nothing to embed.
        self._missed(probe)
        return LookupResult(Status.MISS, key=k.remote)

    def _semantic(
        self, k: CacheKey, m: Match, probe: bool, t: str, count: bool = True
    ) -> LookupResult:
        tier = self.tier
        entry = m.entry
        if entry is not None and m.similarity is not None:
            env = tier.decode(entry)
            if env is not None:
                # The arbiter remembers which entry answered under this key, so a verdict on the
                # result (cache.feedback) reaches the entry and the policy.
                tier.arbiter.served(k.remote, entry.scope, t, entry, m.similarity)
                tier.count_semantic_hit(m.similarity, probe)
                if probe:
                    # The engine counted this probe with its exact miss; now it found something.
                    self.engine.telemetry.probe_hits += 1
                elif count:
                    self.engine.record_found(Status.SEMANTIC_HIT)
                    self.engine.telemetry.time_saved += self.timing.mean
                return LookupResult(
                    Status.SEMANTIC_HIT,
                    env.value,
                    "semantic",
                    k.remote,
                    age_s=self.engine.clock() - entry.created_at,
                    similarity=m.similarity,
                    matched_text=entry.text,
                )
        self._missed(probe)
        return LookupResult(
            Status.MISS,
            key=k.remote,
            similarity=m.similarity,
            matched_text=m.nearest_text,
            reason=m.reason,
        )

    def _search_failed(self, k: CacheKey, exc: Exception, probe: bool) -> LookupResult:
        # An embedder or index failure costs a miss (the function still runs), never an answer.
        self.tier.count_error()
        self._missed(probe)
        log.warning("semantic lookup in %s failed (served as a miss): %r", self.fname, exc)
        return LookupResult(Status.ERROR, key=k.remote)

    def _exact_items(self, items: Sequence[_Item]) -> tuple[list[_Item], float | None]:
        kept = [it for it in items if it[3] is not None or self.cache_none]
        return kept, self.engine.resolve_ttl(self.ttl) if kept else None

    def _semantic_items(self, kept: list[_Item], ok: list[bool]) -> list[tuple[str, str, Any]]:
        return [(s, t, v) for (_, s, t, v), good in zip(kept, ok, strict=True) if good and t]

    def add_semantic(self, items: list[tuple[str, str, Any]], ttl: float | None) -> None:
        try:
            self.tier.add_many(items, ttl=ttl, version=self.version)
        except Exception as exc:
            self.tier.count_error()
            log.warning("semantic store in %s failed: %r", self.fname, exc)

    def _computed(self, elapsed: float) -> None:
        self.timing.add_compute(elapsed)
        self.engine.telemetry.compute.record(elapsed)

    def prepared(self, items: Sequence[PutItem]) -> list[_Item]:
        out = []
        for value, a, kw in items:
            k, scope_key, t = self.key_of(tuple(a), dict(kw or {}))
            out.append((k, scope_key, t, value))
        return out

    # ------------------------------------------------------------------ cores, both forms

    def lookup_core(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], probe: bool = False
    ) -> Core[_Parts]:
        """Exact first (``lookup``, or ``probe`` for a lookup that serves no call), then the
        semantic search (``search``)."""
        k, scope_key, t = self.key_of(args, kwargs)
        hit = self._exact(k, (yield ("probe" if probe else "lookup", (k,))), probe)
        if hit is not None:
            return hit, k, scope_key, t
        if not t:
            return self._no_text(k, probe), k, scope_key, t
        try:
            m = yield ("search", (scope_key, t))
        except Exception as exc:
            return self._search_failed(k, exc, probe), k, scope_key, t
        return self._semantic(k, m, probe, t), k, scope_key, t

    def search_core(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Core[LookupResult]:
        """The semantic search alone (no exact read: the caller keeps its own exact entries),
        counted as a call in this function's tier; the engine's counters are the caller's."""
        k, scope_key, t = self.key_of(args, kwargs)
        self.tier.count_lookup(False)
        if not t:
            return self._no_text(k, False)
        try:
            m = yield ("search", (scope_key, t))
        except Exception as exc:
            return self._search_failed(k, exc, False)
        return self._semantic(k, m, False, t, count=False)

    def index_core(self, items: Sequence[_Item]) -> Core[int]:
        """Semantic entries alone for ``items`` (no exact entry). Returns how many."""
        for _, scope_key, t, value in items:
            yield ("checked", (scope_key, t, value))
        sem = [(s, t, v) for _, s, t, v in items if t and (v is not None or self.cache_none)]
        if sem:
            yield ("add_semantic", (sem, self.engine.resolve_ttl(self.ttl)))
        return len(sem)

    def store_core(self, items: Sequence[_Item]) -> Core[int]:
        """Exact entries (``store``), then semantic entries for the ones stored
        (``add_semantic``). Returns how many were stored."""
        for _, scope_key, t, value in items:
            # A fresh answer (computed, or put by an entry point that called the model itself)
            # settles a pending check of the hit policy on the same text.
            yield ("checked", (scope_key, t, value))
        kept, ttl = self._exact_items(items)
        if not kept:
            return 0
        ok = yield ("store", ([(k, v, ttl, 0.0, self.version) for k, _, _, v in kept],))
        sem = self._semantic_items(kept, ok)
        if sem:
            yield ("add_semantic", (sem, ttl))
        return sum(ok)

    def _compute_core(
        self, k: CacheKey, scope_key: str, t: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Core[Any]:
        t0 = time.perf_counter()
        value = yield ("fn", (args, kwargs))
        self._computed(time.perf_counter() - t0)
        yield from self.store_core([(k, scope_key, t, value)])
        return value

    def call_core(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Core[Any]:
        """A call: a hit answers, a miss computes once per concurrent identical call
        (``flight``, given the computation's own core)."""
        result, k, scope_key, t = yield from self.lookup_core(args, kwargs)
        if result.hit:
            return result.value
        return (yield ("flight", (k, self._compute_core(k, scope_key, t, args, kwargs))))

    def invalidate_core(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Core[None]:
        k, scope_key, t = self.key_of(args, kwargs)
        yield ("delete", ([k],))
        yield ("unindex", (scope_key, t))

    # ------------------------------------------------------------------ drivers

    def _sync_ops(self) -> dict[str, Callable[..., Any]]:
        engine, tier = self.engine, self.tier
        return {
            "lookup": engine.lookup_one,
            "probe": lambda k: engine.lookup_one(k, probe=True),
            "search": tier.search,
            "store": engine.store_many,
            "add_semantic": self.add_semantic,
            "fn": lambda args, kwargs: self.fn(*args, **kwargs),
            "checked": tier.arbiter.computed,
            "flight": lambda k, core: engine.single_flight(k, lambda: drive(core, self._ops)),
            "delete": engine.delete_many,
            "unindex": tier.invalidate,
        }

    def _async_ops(self) -> dict[str, Callable[..., Any]]:
        engine, tier = self.engine, self.tier
        return {
            "lookup": engine.alookup_one,
            "probe": lambda k: engine.alookup_one(k, probe=True),
            "search": self._asearch,
            "store": engine.astore_many,
            # Embedding and index work is CPU work of milliseconds: never on the event loop.
            "add_semantic": lambda items, ttl: asyncio.to_thread(self.add_semantic, items, ttl),
            "fn": lambda args, kwargs: self.fn(*args, **kwargs),
            "checked": self._achecked,
            "flight": lambda k, core: engine.asingle_flight(k, lambda: adrive(core, self._aops)),
            "delete": engine.adelete_many,
            "unindex": lambda scope_key, t: asyncio.to_thread(tier.invalidate, scope_key, t),
        }

    def run(self, core: Core[T]) -> T:
        return drive(core, self._ops)

    async def arun(self, core: Core[T]) -> T:
        return await adrive(core, self._aops)

    async def _achecked(self, scope_key: str, t: str, value: Any) -> None:
        arbiter = self.tier.arbiter
        if arbiter.pending(scope_key, t):  # a comparator may embed: not on the event loop
            await asyncio.to_thread(arbiter.computed, scope_key, t, value)

    async def _asearch(self, scope_key: str, t: str) -> Match:
        batcher = self.tier.batcher
        if batcher is not None and not batcher.closed:
            self.tier.start()
            return await asyncio.wrap_future(batcher.submit((scope_key, t)))
        return await asyncio.to_thread(self.tier.search, scope_key, t)


def _make(
    engine: Engine,
    owner: Cache,
    fn: Callable[..., Any],
    *,
    policy: HitPolicy,
    ttl: float | None,
    text: Callable[..., str] | None,
    scope: Callable[..., Any] | None,
    ignore: tuple[str, ...],
    embedder_factory: Callable[[], Embedder],
    name: str | None,
    version: str | int | None,
    capacity: int,
    max_bytes: int | None,
    max_batch: int,
    max_wait_ms: float,
    batching: bool,
    cache_none: bool,
    index_factory: Callable[[int], VectorIndex] | None,
) -> SemanticFunction[..., Any]:
    from cachekit.semantic.tier import MAX_BYTES, SemanticTier

    fname = name or f"{fn.__module__}.{fn.__qualname__}"
    if version is not None:
        fname = f"{fname}@{version}"
    split = CallSplit(fn, fname, text, scope, ignore)
    tier = SemanticTier(
        engine,
        fname,
        embedder=embedder_factory,
        policy=policy,
        ttl=ttl,
        capacity=capacity,
        max_bytes=MAX_BYTES if max_bytes is None else max_bytes,
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        batching=batching,
        index_factory=index_factory,
    )
    engine.telemetry.sections[f"semantic:{fname}"] = tier.stats
    engine.on_close(tier.close)
    # Sync starts now, not at the first call, so a new replica's first lookups find the
    # shared entries (they wait for the first build up to the tier's initial_sync_wait_s).
    tier.start()
    calls = _SemanticCalls(engine, fn, tier, split, ttl=ttl, version=version, cache_none=cache_none)
    w = _async_wrapper(fn, calls) if inspect.iscoroutinefunction(fn) else _sync_wrapper(fn, calls)
    w.cache = owner
    w.tier = tier
    w.policy = policy
    w.cache_key = lambda *args, **kwargs: calls.key_of(args, kwargs)[0].remote
    w.scope_key = lambda *args, **kwargs: split(args, kwargs)[0]
    w.flush = tier.flush
    w.close = tier.close
    return w


def _sync_wrapper(fn: Callable[..., Any], calls: _SemanticCalls) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return calls.run(calls.call_core(args, kwargs))

    def lookup(*args: Any, **kwargs: Any) -> LookupResult:
        return calls.run(calls.lookup_core(args, kwargs, probe=True))[0]

    def put(value: Any, *args: Any, **kwargs: Any) -> bool:
        k, scope_key, t = calls.key_of(args, kwargs)
        return calls.run(calls.store_core([(k, scope_key, t, value)])) > 0

    def put_many(items: Sequence[PutItem]) -> int:
        return calls.run(calls.store_core(calls.prepared(items)))

    def invalidate(*args: Any, **kwargs: Any) -> None:
        calls.run(calls.invalidate_core(args, kwargs))

    w: Any = wrapper
    w.lookup, w.put, w.put_many, w.invalidate = lookup, put, put_many, invalidate
    return _with_semantic_only(w, calls)


def _with_semantic_only(w: Any, calls: _SemanticCalls) -> Any:
    """The helpers every semantic function has in both forms, whatever its kind (they never
    call it): ``search``/``asearch`` and ``index``/``aindex`` (the semantic side alone, for
    callers that keep their own exact entries, :class:`~cachekit.llm.LLMCache`), and the
    asyncio forms ``alookup``, ``aput``, ``aput_many``, ``ainvalidate``."""

    def search(*args: Any, **kwargs: Any) -> LookupResult:
        return calls.run(calls.search_core(args, kwargs))

    async def asearch(*args: Any, **kwargs: Any) -> LookupResult:
        return await calls.arun(calls.search_core(args, kwargs))

    def index(value: Any, *args: Any, **kwargs: Any) -> bool:
        k, scope_key, t = calls.key_of(args, kwargs)
        return calls.run(calls.index_core([(k, scope_key, t, value)])) > 0

    async def aindex(value: Any, *args: Any, **kwargs: Any) -> bool:
        k, scope_key, t = calls.key_of(args, kwargs)
        return await calls.arun(calls.index_core([(k, scope_key, t, value)])) > 0

    async def alookup(*args: Any, **kwargs: Any) -> LookupResult:
        return (await calls.arun(calls.lookup_core(args, kwargs, probe=True)))[0]

    async def aput(value: Any, *args: Any, **kwargs: Any) -> bool:
        k, scope_key, t = calls.key_of(args, kwargs)
        return await calls.arun(calls.store_core([(k, scope_key, t, value)])) > 0

    async def aput_many(items: Sequence[PutItem]) -> int:
        return await calls.arun(calls.store_core(calls.prepared(items)))

    async def ainvalidate(*args: Any, **kwargs: Any) -> None:
        await calls.arun(calls.invalidate_core(args, kwargs))

    w.search, w.asearch, w.index, w.aindex = search, asearch, index, aindex
    w.alookup, w.aput, w.aput_many, w.ainvalidate = alookup, aput, aput_many, ainvalidate
    return w


def _async_wrapper(fn: Callable[..., Any], calls: _SemanticCalls) -> Any:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        return await calls.arun(calls.call_core(args, kwargs))

    w = _with_semantic_only(wrapper, calls)
    w.lookup, w.put, w.put_many, w.invalidate = w.alookup, w.aput, w.aput_many, w.ainvalidate
    return w
