"""Client-side caching for the official ``anthropic`` package, for teams that do not run the proxy.

``cached_client(client, cache)`` wraps an ``anthropic.Anthropic`` or ``anthropic.AsyncAnthropic``:
``client.messages.create(...)`` (``stream=True`` included) and the SDK's
``client.messages.stream(...)`` helper are answered from the cache by the same key, scope and
tenant rules as ``cachekit serve`` (:mod:`cachekit.llm`, the ``anthropic-beta`` and
``anthropic-version`` headers keyed with the body), and everything else goes to the wrapped client
untouched (``messages.count_tokens``, ``messages.batches``, ``models``, ``beta``, ...). A
``messages.stream(output_format=...)`` call (a parsed structured output) goes straight to the
client, never cached.

Hits come back as the anthropic package's own types: a ``Message``, for ``stream=True`` an
``anthropic.Stream`` (``AsyncStream``) of ``RawMessageStreamEvent`` replaying the answer in
several pieces, and for ``messages.stream(...)`` a ``MessageStreamManager``
(``AsyncMessageStreamManager``) over such a stream. A streamed miss is handed through as it
arrives (a thin wrapper over the client's stream, same iteration, ``with`` and ``close``) and
stored only if it completed: ended with ``message_stop``, no ``error`` event. Answers that are
errors, cut off (``stop_reason: max_tokens``), paused (``pause_turn``) or unfinished are never
stored. A turn answering a tool (a ``tool_result`` block) is matched exactly only, never by
similarity. The cache failing costs a miss, never an exception; a request the rules refuse is
sent as it is (the API says what is wrong).

A semantic hit carries a fresh id (``msg_ck...``), never the stored answer's; an exact hit keeps
the upstream's id.

``client.feedback(correct, **create_kwargs)`` records a user's verdict on the semantic hit that
``messages.create(**create_kwargs)`` got (``LLMCache.feedback``, as the proxy's
``POST /v1/cachekit/feedback`` does).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Mapping
from functools import partial
from typing import Any, ClassVar

from cachekit._core.extras import require

try:
    import anthropic
    from anthropic.lib.streaming import AsyncMessageStreamManager, MessageStreamManager
    from anthropic.types import Message, RawMessageStreamEvent
except ImportError:  # name the extra and its install command (the import error is chained)
    require("anthropic", extra="anthropic", feature="cachekit.adapters.anthropic")
    raise

from cachekit.adapters._sdk import (
    TRANSPORT,
    AsyncCachedCreate,
    AsyncStreamRecorder,
    CachedCreate,
    Context,
    Recorder,
    StreamRecorder,
    dump,
)

from cachekit.cache import Cache
from cachekit.llm import MESSAGES, LLMCache, LLMRequest

__all__ = ["AsyncRecordingStream", "CachedClient", "RecordingStream", "cached_client"]

#: What the anthropic package passes for an argument not given: never part of the body.
_SENTINELS: tuple[type, ...] = (anthropic.NotGiven, anthropic.Omit)
#: ``create()`` arguments the SDK sends as headers, not in the body (none of them keyed).
_TRANSPORT = TRANSPORT | {"user_profile_id", "workspace_id"}
#: Whether the stream managers take ``output_format`` (recent anthropic versions; 0.40 did not).
_TAKES_FORMAT = "output_format" in inspect.signature(MessageStreamManager).parameters


def _given(value: Any) -> bool:
    return value is not None and not isinstance(value, _SENTINELS)


def _typed_event(event: dict[str, Any]) -> bytes:
    """A stream event as the API sent it: its type on the ``event:`` line, itself as ``data:``."""
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"event: {event.get('type')}\ndata: {data}\n\n".encode()


class _MessagesRecorder(Recorder):
    """:class:`~cachekit.adapters._sdk.Recorder` of the typed events the client's stream yields
    (pings and an ``error`` event never reach here: the SDK skips the one and raises at the
    other): each goes to the endpoint's
    :class:`~cachekit.llm.endpoints.messages_stream.MessagesStreamAssembler` as the bytes it
    came as, which says whether the stream completed."""

    def _add(self, item: Any) -> None:
        self._asm.feed_events(_typed_event(dump(item)))


class RecordingStream(_MessagesRecorder, StreamRecorder):
    """A streamed miss: iterates the client's ``Stream`` as events arrive, and stores the
    assembled Message once the stream has ended complete (``message_stop``, no error). Supports
    ``with`` and ``close()``."""


class AsyncRecordingStream(_MessagesRecorder, AsyncStreamRecorder):
    """:class:`RecordingStream` for ``AsyncAnthropic`` (``async for``, ``async with``)."""


def _headers(client: Any, kwargs: Mapping[str, Any]) -> dict[str, str]:
    """The header lines ``client`` sends with ``create(**kwargs)``: its default headers
    (``anthropic-version``, its own ``default_headers``) and ``extra_headers`` over them, an
    omitted value removing the header as the SDK does."""
    headers: dict[str, str] = {}
    for source in (client.default_headers, kwargs.get("extra_headers") or {}):
        for name, value in source.items():
            if isinstance(value, str):
                headers[name.lower()] = value
            else:
                headers.pop(name.lower(), None)
    return headers


def _prepare(ctx: Context, kwargs: Mapping[str, Any]) -> LLMRequest | None:
    """The request ``messages.create(**kwargs)`` makes, its keyed headers included, or ``None``
    when the rules refuse it (the client sends it as it is)."""
    try:
        headers = _headers(ctx.client, kwargs)
    except (AttributeError, TypeError):  # extra_headers the SDK itself would refuse
        return None
    return ctx.prepare(MESSAGES, kwargs, headers)


def _manager(cls: Any, request: Any) -> Any:
    """The SDK's stream manager over ``request`` (what makes the raw stream)."""
    if _TAKES_FORMAT:
        return cls(request, output_format=anthropic.NOT_GIVEN)
    return cls(request)  # pragma: no cover - an older anthropic


class _Messages(CachedCreate):
    """``client.messages``: ``create`` cached, ``stream`` (the SDK's helper) over the cached
    ``create``; everything else (``count_tokens``, ``batches``, ``parse`` ...) is the client's."""

    endpoint = MESSAGES
    stream_type: ClassVar[Any] = anthropic.Stream
    recorder: ClassVar[Any] = RecordingStream
    manager: ClassVar[Any] = MessageStreamManager
    package = "anthropic"

    def _prepare(self, kwargs: Mapping[str, Any]) -> LLMRequest | None:
        return _prepare(self._ctx, kwargs)

    def _hit(self, req: LLMRequest, response: dict[str, Any]) -> Any:
        message = Message.model_validate(response)  # a stored answer this SDK cannot read: a miss
        if req.stream:
            return self._replay(req.api.replay(response), RawMessageStreamEvent)
        return message

    def _request(self, kwargs: dict[str, Any]) -> Any:
        """What the stream manager calls (sync) or awaits (async) for the raw stream."""
        return partial(self.create, **kwargs)

    def stream(self, **kwargs: Any) -> Any:
        """The SDK's ``messages.stream(...)`` helper over this ``create``: a
        ``MessageStreamManager`` (``with ... as stream``, ``stream.text_stream``,
        ``stream.get_final_message()``). With an ``output_format`` it is the client's, uncached."""
        if _given(kwargs.get("output_format")):
            return self._inner.stream(**kwargs)
        kwargs.pop("output_format", None)
        return _manager(self.manager, self._request({**kwargs, "stream": True}))


class _AsyncMessages(AsyncCachedCreate, _Messages):
    """:class:`_Messages` for ``AsyncAnthropic``: the same rules, awaited."""

    stream_type = anthropic.AsyncStream
    recorder = AsyncRecordingStream
    manager = AsyncMessageStreamManager

    def _request(self, kwargs: dict[str, Any]) -> Any:
        return self.create(**kwargs)  # a coroutine, awaited when the manager is entered


class CachedClient:
    """The wrapped client: ``messages.create`` and the ``messages.stream`` helper are cached;
    every other attribute is the wrapped client's. ``llm`` is the :class:`LLMCache` used and
    ``tenant`` the tenant its entries belong to."""

    def __init__(self, client: Any, ctx: Context, asynchronous: bool) -> None:
        self._client = client
        self._ctx = ctx
        self._asynchronous = asynchronous
        self.llm = ctx.llm
        self.tenant = ctx.tenant
        self.messages = (_AsyncMessages if asynchronous else _Messages)(client.messages, ctx)

    def feedback(self, correct: bool, **create_kwargs: Any) -> Any:
        """A user's verdict on the semantic hit that ``messages.create(**create_kwargs)`` got
        (pass the same arguments): a wrong one demotes the entry that answered; see
        :meth:`LLMCache.feedback`. Returns whether the hit was known; for an async client, an
        awaitable of it (the Redis round trip runs in a thread)."""
        req = _prepare(self._ctx, create_kwargs)
        if self._asynchronous:
            return asyncio.to_thread(self._feedback, req, correct)
        return self._feedback(req, correct)

    def _feedback(self, req: LLMRequest | None, correct: bool) -> bool:
        return req is not None and self.llm.feedback(req, correct)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def cached_client(
    client: anthropic.Anthropic | anthropic.AsyncAnthropic,
    cache: Cache | LLMCache,
    *,
    tenant: str | None = None,
    namespace: str = "",
    tenant_secret: str | None = None,
    bucket_size: int = 1,
) -> Any:
    """Wrap ``client`` so Messages API answers are cached in ``cache`` (a
    :class:`~cachekit.Cache`, used through an :class:`~cachekit.llm.LLMCache` with default
    settings, or an ``LLMCache`` such as :func:`cachekit.llm.build_cache` returns).

    ``tenant``: who the entries belong to; by default the keyed hash of the client's API key
    (its ``auth_token`` when it has none), as the proxy computes it (same ``tenant_secret`` or
    ``CACHEKIT_TENANT_SECRET``), so a client and a proxy on one cache share entries.
    ``namespace``: a partition, as the proxy's ``x-cachekit-namespace`` header.
    ``bucket_size``: answers kept per key for sampled requests (temperature not 0, absent
    meaning 1): the first ``bucket_size`` calls of a key reach the API, later ones get one of
    those answers at random (:mod:`cachekit.llm.buckets`; the proxy's ``bucket_size``)."""
    if not isinstance(client, (anthropic.Anthropic, anthropic.AsyncAnthropic)):
        raise TypeError(
            "cached_client wraps anthropic.Anthropic or anthropic.AsyncAnthropic, "
            f"got {type(client).__name__}"
        )
    llm = cache if isinstance(cache, LLMCache) else LLMCache(cache)
    credential = getattr(client, "api_key", None) or getattr(client, "auth_token", None)
    ctx = Context(
        client,
        llm,
        tenant,
        namespace,
        tenant_secret,
        sentinels=_SENTINELS,
        transport=_TRANSPORT,
        credential=credential,
        bucket_size=bucket_size,
    )
    return CachedClient(client, ctx, isinstance(client, anthropic.AsyncAnthropic))
