"""``LLMCache``: exact and semantic caching of OpenAI-style requests over the public
:class:`~cachekit.Cache` API, and :func:`build_cache`, the one factory that ``cachekit serve``
and ``cachekit replay`` both call so that replay predicts what production does.

Every request gets an exact entry (``cache.get``/``cache.set`` under :func:`rules.exact_key`).
Requests with a semantic text (see :func:`rules.semantic_text`) also go through one
``@cache.semantic`` function whose text is that text and whose scope is
:func:`rules.scope_key`; its ``lookup``/``put`` give the semantic hits. Stored values are the
complete response objects (a streamed answer is stored assembled), wrapped with their store time
and their own expiry so ``max-age`` and per-request TTLs work on both kinds of entry.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict

from cachekit._core.sansio import Core, adrive, drive
from cachekit._core.tracing import NO_SPAN, NoSpan, Span, span
from cachekit._core.types import LookupResult
from cachekit.cache import Cache, Status
from cachekit.llm.admin import MAX_COUNTED_KEYS, entry_meta, meta_key
from cachekit.llm.answers import AnswerComparator
from cachekit.llm.buckets import answers_of, check_bucket, filling, pick, with_answer
from cachekit.llm.config import LLMCacheConfig
from cachekit.llm.rules import CHAT, LLMRequest, cacheable_response, check_response, prepare

if TYPE_CHECKING:
    from typing import Unpack

__all__ = [
    "CacheLookup",
    "LLMCache",
    "LLMCacheConfig",
    "LookupOptions",
    "StoreOptions",
    "Where",
    "build_cache",
]

log = logging.getLogger("cachekit.llm")

#: The semantic function's name: entries shared through Redis are found under it.
SEMANTIC_NAME = "cachekit.llm.request"


class CacheLookup(NamedTuple):
    """What :meth:`LLMCache.lookup` found: ``status, response, similarity, age, reason, nearest``.

    ``status`` is ``Status.HIT`` (exact), ``Status.SEMANTIC_HIT`` or ``Status.MISS``;
    ``response`` the stored response object on a hit; ``similarity`` the cosine of the matched
    (or, on a miss, the nearest rejected) entry; ``age`` seconds since the entry was stored;
    ``reason``, on a miss with a nearest entry, why it was not served (``"slots: numbers 61 !=
    63"``, ``"below threshold 0.8704 < 0.9"``, ``"truncated: ..."``); ``nearest`` that entry's
    semantic text, or a semantic hit's (replay's listings, shadow pairs; never sent to clients)."""

    status: Status
    response: dict[str, Any] | None = None
    similarity: float | None = None
    age: float | None = None
    reason: str | None = None
    nearest: str | None = None

    @property
    def hit(self) -> bool:
        return self.status in (Status.HIT, Status.SEMANTIC_HIT)


_MISS = CacheLookup(Status.MISS)


class Where(TypedDict, total=False):
    """Where a request body's entries live (a prepared :class:`LLMRequest` carries its own):
    ``endpoint`` (default ``/v1/chat/completions``) and the caller's cache ``namespace``."""

    endpoint: str
    namespace: str


class LookupOptions(Where, total=False):
    """Keyword options of :meth:`LLMCache.lookup`: :class:`Where`, and ``max_age`` (only
    entries younger than that, in seconds), ``min_similarity`` (a semantic hit must reach it as
    well as the policy's own bar: it can only raise the bar), ``semantic`` (``False``: exact
    entries only), ``bucket`` (answer buckets, :mod:`cachekit.llm.buckets`: a hit only from a
    bucket holding that many answers, one of them at random; default 1)."""

    max_age: float | None
    min_similarity: float | None
    semantic: bool
    bucket: int


class StoreOptions(Where, total=False):
    """Keyword options of :meth:`LLMCache.store`: :class:`Where`, and ``ttl`` (seconds; ``None``:
    the cache's), ``semantic`` (``False``: no semantic entry), ``bucket`` (the request's bucket
    size: the answer joins the key's bucket until it holds that many,
    :mod:`cachekit.llm.buckets`)."""

    ttl: float | None
    semantic: bool
    bucket: int


def _check_options(what: str, options: Mapping[str, Any], allowed: Any) -> None:
    unknown = sorted(set(options) - allowed.__optional_keys__)
    if unknown:
        raise TypeError(
            f"LLMCache.{what}() got unknown keyword arguments {unknown}; "
            f"known: {sorted(allowed.__optional_keys__)}"
        )


def _where(options: Mapping[str, Any]) -> dict[str, Any]:
    return {k: options[k] for k in ("endpoint", "namespace") if k in options}


def _bucket(options: Mapping[str, Any]) -> int:
    size = options.get("bucket", 1)
    return 1 if size == 1 and type(size) is int else check_bucket(size)


def _lookup_failed(exc: Exception, traced: NoSpan | Span = NO_SPAN) -> CacheLookup:
    log.warning("LLM cache lookup failed (served as a miss): %r", exc)
    traced.set_attribute("status", "MISS")
    traced.set_attribute("error.type", type(exc).__name__)
    return _MISS


#: The span around :meth:`LLMCache.lookup` and :meth:`LLMCache.alookup` (docs/tracing.md).
LOOKUP_SPAN = "cachekit.lookup"


def _describe(traced: Span | NoSpan, endpoint: str, found: CacheLookup, searched: bool) -> None:
    """A lookup's span attributes: its endpoint, status (``HIT``, ``SEMANTIC_HIT``, ``MISS``),
    the tier that answered (a miss: the last one asked), the similarity and why not served."""
    traced.set_attribute("endpoint", endpoint)
    traced.set_attribute("status", found.status.name)
    exact = found.status is Status.HIT or (found.status is Status.MISS and not searched)
    traced.set_attribute("tier", "exact" if exact else "semantic")
    traced.set_attribute("similarity", found.similarity)
    traced.set_attribute("reason", found.reason)


def _store_failed(exc: Exception) -> bool:
    log.warning("LLM cache store failed: %r", exc)
    return False


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _malformed(value: Any, endpoint: str | None) -> str | None:
    """Why a stored wrapper ``{"r": response, "t": stored at, "e": expires at}`` cannot be
    served, or ``None``. ``endpoint`` ``None``: the response's shape is not checked."""
    if not isinstance(value, dict) or not isinstance(value.get("r"), dict):
        return "not a wrapped response"
    stamp, expires = value.get("t"), value.get("e")
    if (stamp is not None and not _is_number(stamp)) or (
        expires is not None and not _is_number(expires)
    ):
        return "store time or expiry not a number"
    if endpoint is None:
        return None
    if "b" not in value:  # one answer (no bucket): the common case
        return check_response(endpoint, value["r"])
    for answer in answers_of(value):
        why = check_response(endpoint, answer)
        if why is not None:
            return why
    return None


def _semantic_only(text: str, *, scope: str) -> Any:
    raise RuntimeError("the LLM semantic function is used through search/index only")


def _scope_of(text: str, *, scope: str) -> str:
    return scope


class LLMCache:
    """Exact and semantic entries for OpenAI-style requests on one :class:`~cachekit.Cache`.

    ``lookup``/``store`` and their async forms ``alookup``/``astore`` take a request body
    (``dict``, with ``tenant`` and ``endpoint``) or an :class:`~cachekit.llm.rules.LLMRequest`
    from :func:`~cachekit.llm.rules.prepare`. Failures of the cache cost a miss (or a lost store),
    never an exception; a bad request body raises :class:`~cachekit.llm.rules.RequestError`.

    One entry per answer: the exact entry (``cache.set`` under the request's exact key) holds
    the answer; the semantic function (built on first use, one for both forms) keeps only the
    semantic side (``search``/``index``: no exact entry of its own). A lookup reads the exact
    entry once, then searches; each request is counted once in the cache's stats (a hit, a
    semantic hit or a miss). ``embedder``: any embedder accepted by ``@cache.semantic`` (replay
    passes precomputed vectors this way).
    """

    def __init__(
        self,
        cache: Cache,
        *,
        ttl: float = 3600.0,
        threshold: float | None = None,
        semantic: bool = True,
        embedder: Any = None,
        capacity: int = 100_000,
        semantic_max_bytes: int | None = None,
        cache_length: bool = False,
        cache_refusals: bool = True,
        name: str = SEMANTIC_NAME,
        policy: Any = None,
    ) -> None:
        self.cache = cache
        self.ttl = float(ttl)
        self.threshold = threshold
        #: A HitPolicy for the semantic function (then ``threshold`` must be None).
        self.policy = policy
        self.semantic_enabled = semantic
        self.cache_length = cache_length
        #: ``False``: Responses API answers holding a refusal are not stored.
        self.cache_refusals = cache_refusals
        self._embedder = embedder
        self._capacity = capacity
        self._semantic_max_bytes = semantic_max_bytes
        self.semantic_name = name
        self._fn: Any = None
        #: Hits served here per exact key (``GET /admin/entries``; restarts past 100,000 keys).
        self.hits: dict[str, int] = {}
        self._op_tables = (self._ops(False), self._ops(True))  # the drivers' operations

    # ------------------------------------------------------------------ semantic functions

    def semantic_function(self, asynchronous: bool = False) -> Any:
        """The ``@cache.semantic`` function (``search``/``index`` and their asyncio forms,
        ``tier``), one for both forms (``asynchronous`` is accepted and ignored)."""
        fn = self._fn
        if fn is None:
            fn = self._fn = self.cache.semantic(
                _semantic_only,
                threshold=self.threshold,
                policy=self.policy,
                ttl=self.ttl,
                scope=_scope_of,
                embedder=self._embedder,
                name=self.semantic_name,
                capacity=self._capacity,
                max_bytes=self._semantic_max_bytes,
            )
        return fn

    @property
    def semantic_tier(self) -> Any:
        """The semantic function's tier, or None before it is built (or without one)."""
        return None if self._fn is None else self._fn.tier

    def semantic_health(self) -> dict[str, Any] | None:
        """The semantic tier's embedder and the shared entries it refused as another embedder's
        (``embedder``, ``embedder_mismatch``, ``foreign_embedders``), or ``None`` before the tier
        is built (or without one)."""
        tier = self.semantic_tier
        stats = {} if tier is None else tier.stats()
        keys = ("embedder", "embedder_mismatch", "foreign_embedders")
        return None if tier is None else {k: stats.get(k) for k in keys}

    def start(self, asynchronous: bool = True, timeout: float | None = None) -> bool:
        """Build the semantic function now and wait (up to ``timeout`` s) until its index has
        been loaded from Redis, so the first requests can hit. True when ready."""
        if not self.semantic_enabled:
            return True
        return bool(self.semantic_function(asynchronous).tier.wait_ready(timeout))

    def warm(self, asynchronous: bool = True, timeout: float | None = None) -> bool:
        """:meth:`start`, and load the embedding model now (it otherwise loads on the first
        semantic lookup that needs it, which would then take seconds). True when ready."""
        if not self.semantic_enabled:
            return True
        if self._embedder is None and self._fn is None:
            from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder

            self._embedder = SentenceTransformerEmbedder()
        load = getattr(self._embedder, "load", None)
        if callable(load):
            load()
        return self.start(asynchronous, timeout)

    # ------------------------------------------------------------------ helpers

    def request(
        self,
        request: Mapping[str, Any] | LLMRequest,
        tenant: str | None = None,
        *,
        endpoint: str = CHAT,
        namespace: str = "",
    ) -> LLMRequest:
        """``request`` prepared (validated, keyed); an :class:`LLMRequest` is returned as is."""
        if isinstance(request, LLMRequest):
            return request
        return prepare(
            endpoint, dict(request), tenant if tenant is not None else "anonymous", namespace
        )

    def _unwrap(
        self, value: Any, max_age: float | None, endpoint: str | None = None, key: Any = None
    ) -> tuple[dict[str, Any], float] | str:
        """The stored response and its age, else why the entry is not served (a miss): expired,
        older than ``max_age``, or malformed. A malformed entry (a wrapper of the wrong types, or
        a response that fails :func:`cachekit.llm.rules.check_response` for ``endpoint``) is
        counted in the cache's ``serialization_errors`` stat and logged at WARNING with its key;
        it never raises."""
        if value is None:
            return "not found"
        why = _malformed(value, endpoint)
        if why is not None:
            self._count_malformed(key, why)
            return "malformed entry"
        now = self.cache.clock()
        stamp = value.get("t")
        age = max(0.0, now - (now if stamp is None else float(stamp)))
        expires = value.get("e")
        if expires is not None and now >= expires:
            return "expired"
        if max_age is not None and age > max_age:
            return "older than max-age"
        return value["r"], age

    def _count_malformed(self, key: Any, why: str) -> None:
        self.cache.record_malformed()
        log.warning("malformed LLM cache entry %s served as a miss: %s", key, why)

    def _wrap(
        self, response: Mapping[str, Any], ttl: float | None, req: LLMRequest
    ) -> dict[str, Any]:
        now = self.cache.clock()
        expires = None if ttl is None else now + ttl
        return {"r": dict(response), "t": now, "e": expires, "m": entry_meta(req)}

    def _note_hit(self, key: Any) -> None:
        """One more hit served from the entry of exact key ``key``."""
        hits = self.hits
        n = hits.get(key)
        if n is None and len(hits) >= MAX_COUNTED_KEYS:
            hits.clear()
        hits[key] = 1 if n is None else n + 1

    def _semantic_result(
        self,
        r: Any,
        max_age: float | None,
        min_similarity: float | None,
        endpoint: str | None = None,
        bucket: int = 1,
    ) -> CacheLookup:
        if not r.hit:
            return CacheLookup(Status.MISS, None, r.similarity, None, r.reason, r.matched_text)
        if (
            r.status is Status.SEMANTIC_HIT
            and min_similarity is not None
            and (r.similarity or 0.0) < min_similarity
        ):
            why = f"below threshold {r.similarity or 0.0:.4f} < {min_similarity:g} (request)"
            return CacheLookup(Status.MISS, None, r.similarity, None, why, r.matched_text)
        found = self._unwrap(r.value, max_age, endpoint, getattr(r, "key", None))
        if isinstance(found, str):
            return CacheLookup(Status.MISS, None, r.similarity, None, found, r.matched_text)
        unfilled = filling(r.value, bucket)
        if unfilled is not None:
            return CacheLookup(Status.MISS, None, r.similarity, None, unfilled, r.matched_text)
        status = Status.SEMANTIC_HIT if r.status is Status.SEMANTIC_HIT else Status.HIT
        semantic = status is Status.SEMANTIC_HIT
        self._note_hit(meta_key(r.value))
        text = r.matched_text if semantic else None
        sim = r.similarity if semantic else None
        return CacheLookup(status, pick(r.value), sim, found[1], None, text)

    def _use_semantic(self, req: LLMRequest, semantic: bool) -> bool:
        return semantic and self.semantic_enabled and req.text is not None and bool(req.text)

    def entry_ttl(self, ttl: float | None) -> float:
        """The TTL an entry gets: ``ttl``, else the configured one. A semantic entry is served
        for at most the configured TTL whatever ``ttl`` says (the semantic function has one)."""
        return self.ttl if ttl is None else float(ttl)

    # ------------------------------------------------------------------ one core, two forms

    def _lookup_core(
        self,
        req: LLMRequest,
        max_age: float | None,
        min_similarity: float | None,
        semantic: bool,
        bucket: int = 1,
        traced: NoSpan | Span = NO_SPAN,
    ) -> Core[CacheLookup]:
        result = yield from self._find_core(req, max_age, min_similarity, semantic, bucket)
        self._count(result.status)
        if traced.recording:  # the lookup's span (docs/tracing.md)
            searched = req.passthrough is None and self._use_semantic(req, semantic)
            _describe(traced, req.endpoint, result, searched)
        return result

    def _find_core(
        self,
        req: LLMRequest,
        max_age: float | None,
        min_similarity: float | None,
        semantic: bool,
        bucket: int,
    ) -> Core[CacheLookup]:
        if req.passthrough is not None:
            return CacheLookup(Status.MISS, reason=f"passthrough: {req.passthrough}")
        value = yield ("get", (req.key,))
        found = self._unwrap(value, max_age, req.endpoint, req.key)
        if not isinstance(found, str):
            if bucket == 1:  # one answer, or one of a bucket's
                self._note_hit(req.key)
                return CacheLookup(
                    Status.HIT, found[0] if "b" not in value else pick(value), None, found[1]
                )
            why = filling(value, bucket)  # this key's own bucket: filled by this request
            if why is not None:
                return CacheLookup(Status.MISS, reason=why)
            self._note_hit(req.key)
            return CacheLookup(Status.HIT, pick(value), None, found[1])
        if not self._use_semantic(req, semantic):
            return _MISS
        r = yield ("search", (req.text, req.scope))
        if bucket > 1 and r.hit and isinstance(r.value, dict) and isinstance(r.value.get("k"), str):
            live = yield ("get", (r.value["k"],))  # the matched bucket as it is now
            if isinstance(live, dict) and _malformed(live, req.endpoint) is None:
                r = dataclasses.replace(r, value=live)
        return self._semantic_result(r, max_age, min_similarity, req.endpoint, bucket)

    def _count(self, status: Status) -> None:
        """One request, counted once in the cache's stats."""
        self.cache.record(status)

    def cacheable(self, endpoint: str, status: int, body: Any) -> tuple[bool, str]:
        """:func:`~cachekit.llm.rules.cacheable_response` with this cache's settings."""
        return cacheable_response(
            endpoint,
            status,
            body,
            cache_length=self.cache_length,
            cache_refusals=self.cache_refusals,
        )

    def _store_core(
        self,
        req: LLMRequest,
        response: Mapping[str, Any],
        ttl: float | None,
        semantic: bool,
        bucket: int = 1,
    ) -> Core[bool]:
        if req.passthrough is not None:
            return False
        value = self._wrap(response, self.entry_ttl(ttl), req)
        full = True
        if bucket > 1:
            live = yield ("get", (req.key,))
            if isinstance(self._unwrap(live, None, req.endpoint, req.key), str):
                live = None  # none, expired or malformed: the bucket starts again
            answers = with_answer(live, value["r"], bucket)
            if answers is None:
                return False  # full already: a concurrent caller filled it
            value.update(r=answers[0], b=answers, k=req.key)
            full = len(answers) == bucket
        ok = yield ("set", (req.key, value, self.entry_ttl(ttl)))
        if ok and full and self._use_semantic(req, semantic):
            yield ("index", (value, req.text, req.scope))
        return bool(ok)

    def _ops(self, asynchronous: bool) -> dict[str, Callable[..., Any]]:
        cache = self.cache
        if asynchronous:
            return {
                "get": self._aget,
                "set": lambda k, v, ttl: cache.aset(k, v, ttl=ttl),
                "search": lambda text, scope: self.semantic_function().asearch(text, scope=scope),
                "index": lambda v, text, scope: self.semantic_function().aindex(
                    v, text, scope=scope
                ),
            }
        return {
            "get": self._get,
            "set": lambda k, v, ttl: cache.set(k, v, ttl=ttl),
            "search": lambda text, scope: self.semantic_function().search(text, scope=scope),
            "index": lambda v, text, scope: self.semantic_function().index(v, text, scope=scope),
        }

    def _get(self, key: str) -> Any:
        """The exact entry's value, or None; not counted (the request is, once, at its end)."""
        return self.cache.get(key, count=False)

    async def _aget(self, key: str) -> Any:
        return await self.cache.aget(key, count=False)

    # ------------------------------------------------------------------ lookups and stores

    def _lookup_of(
        self,
        request: Mapping[str, Any] | LLMRequest,
        tenant: str | None,
        options: Any,
        traced: NoSpan | Span = NO_SPAN,
    ) -> Core[CacheLookup]:
        _check_options("lookup", options, LookupOptions)
        req = self.request(request, tenant, **_where(options))
        return self._lookup_core(
            req,
            options.get("max_age"),
            options.get("min_similarity"),
            options.get("semantic", True),
            _bucket(options),
            traced,
        )

    def _store_of(
        self,
        request: Mapping[str, Any] | LLMRequest,
        response: Mapping[str, Any],
        tenant: str | None,
        options: Any,
    ) -> Core[bool]:
        _check_options("store", options, StoreOptions)
        req = self.request(request, tenant, **_where(options))
        return self._store_core(
            req,
            response,
            options.get("ttl"),
            options.get("semantic", True),
            _bucket(options),
        )

    def lookup(
        self,
        request: Mapping[str, Any] | LLMRequest,
        tenant: str | None = None,
        **options: Unpack[LookupOptions],
    ) -> CacheLookup:
        """Exact entry first, then (for requests with a semantic text) the semantic tier; see
        :class:`LookupOptions`. A failing cache is a miss, never an error."""
        with span(LOOKUP_SPAN) as traced:
            core = self._lookup_of(request, tenant, options, traced)
            try:
                return drive(core, self._op_tables[0])
            except Exception as exc:  # the cache must never fail the caller
                return _lookup_failed(exc, traced)

    async def alookup(
        self,
        request: Mapping[str, Any] | LLMRequest,
        tenant: str | None = None,
        **options: Unpack[LookupOptions],
    ) -> CacheLookup:
        """:meth:`lookup` for asyncio callers (embedding never runs on the event loop)."""
        with span(LOOKUP_SPAN) as traced:
            core = self._lookup_of(request, tenant, options, traced)
            try:
                return await adrive(core, self._op_tables[1])
            except Exception as exc:
                return _lookup_failed(exc, traced)

    def store(
        self,
        request: Mapping[str, Any] | LLMRequest,
        response: Mapping[str, Any],
        tenant: str | None = None,
        **options: Unpack[StoreOptions],
    ) -> bool:
        """Store a complete response (check it with :func:`rules.cacheable_response` first);
        see :class:`StoreOptions`. Returns whether the exact entry was written."""
        core = self._store_of(request, response, tenant, options)
        try:
            return drive(core, self._op_tables[0])
        except Exception as exc:
            return _store_failed(exc)

    async def astore(
        self,
        request: Mapping[str, Any] | LLMRequest,
        response: Mapping[str, Any],
        tenant: str | None = None,
        **options: Unpack[StoreOptions],
    ) -> bool:
        """:meth:`store` for asyncio callers."""
        core = self._store_of(request, response, tenant, options)
        try:
            return await adrive(core, self._op_tables[1])
        except Exception as exc:
            return _store_failed(exc)

    # ------------------------------------------------------------------ feedback

    def feedback_ref(
        self,
        request: Mapping[str, Any] | LLMRequest,
        tenant: str | None = None,
        *,
        endpoint: str = CHAT,
        namespace: str = "",
    ) -> str | None:
        """What :meth:`feedback` needs to find a semantic hit of ``request`` later: a short
        string (the semantic function's key of the request), or None when the request cannot
        have a semantic hit. Keep it instead of the request (the proxy keeps it per response
        id)."""
        req = self.request(request, tenant, endpoint=endpoint, namespace=namespace)
        fn = self._fn
        if fn is None or not self._use_semantic(req, True):
            return None
        return str(fn.cache_key(req.text, scope=req.scope))

    def feedback(
        self,
        request: Mapping[str, Any] | LLMRequest | str,
        correct: bool,
        tenant: str | None = None,
        *,
        endpoint: str = CHAT,
        namespace: str = "",
    ) -> bool:
        """A user's verdict on the semantic hit ``request`` got from this cache, as
        ``cache.feedback(result, correct=...)`` records one for the library: a wrong one demotes
        the entry that answered (it is not served again at or below that similarity, in every
        replica sharing Redis) and, once users have refuted it ``evict_after`` times, evicts it.
        ``request``: the request (body or :class:`LLMRequest`) or its :meth:`feedback_ref`.
        Returns whether the hit was known: a recent semantic hit of this process. Blocks for a
        Redis round trip (run it off an event loop)."""
        if not isinstance(correct, bool):
            raise TypeError(f"correct must be a bool, got {type(correct).__name__}")
        ref = (
            request
            if isinstance(request, str)
            else self.feedback_ref(request, tenant, endpoint=endpoint, namespace=namespace)
        )
        if ref is None:
            return False
        return self.cache.feedback(LookupResult(Status.SEMANTIC_HIT, key=ref), correct=correct)

    def close(self) -> None:
        """Stop the semantic threads and close the cache."""
        self.cache.close()


def build_cache(
    config: LLMCacheConfig | None = None,
    *,
    embedder: Any = None,
    cache: Cache | None = None,
    clock: Callable[[], float] | None = None,
) -> LLMCache:
    """The :class:`LLMCache` that ``config`` describes: a :class:`~cachekit.Cache` on its Redis
    (or in-process only), namespace and TTL, and its semantic settings. ``embedder`` replaces the
    default model (tests, precomputed vectors); ``cache`` an already built cache."""
    config = config or LLMCacheConfig()
    config.check()
    if cache is None:
        kwargs: dict[str, Any] = {}
        if clock is not None:
            kwargs["clock"] = clock
        cache = Cache(
            redis_url=config.redis_url,
            redis_cluster_url=config.redis_cluster_url,
            namespace=config.namespace,
            default_ttl=config.ttl,
            redis_timeout=config.redis_timeout,
            l1_max_entries=config.l1_max_entries,
            **kwargs,
        )
    policy = None
    threshold = config.threshold
    if config.semantic and (config.policy != "threshold" or not config.slot_guard):
        from cachekit.semantic.policy.hit_policy import operating_point_of
        from cachekit.semantic.policy.registry import build_policy

        name, setting = config.policy, config.policy_setting
        if name == "threshold":
            # No threshold given: the embedder's own operating point (a tuned one's), as
            # cache.semantic does.
            setting = threshold if threshold is not None else operating_point_of(embedder)
            threshold = None
        policy = build_policy(
            name, setting, comparator=AnswerComparator(embedder), guard=config.slot_guard
        )
    return LLMCache(
        cache,
        ttl=config.ttl,
        threshold=threshold,
        semantic=config.semantic,
        embedder=embedder,
        capacity=config.capacity,
        semantic_max_bytes=config.semantic_max_bytes,
        cache_length=config.cache_length,
        cache_refusals=config.cache_refusals,
        policy=policy,
    )
