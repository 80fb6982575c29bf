"""Client-side caching for the official ``openai`` package, for teams that do not run the proxy.

``cached_client(client, cache)`` wraps an ``openai.OpenAI`` or ``openai.AsyncOpenAI``:
``client.chat.completions.create(...)``, ``client.responses.create(...)`` (both streaming
included; the SDK's ``client.responses.stream(...)`` helper too, as it calls ``create``) and
``client.embeddings.create(...)`` are answered from the cache by the same key, scope and tenant
rules as ``cachekit serve`` (:mod:`cachekit.llm`), and everything else goes to the wrapped client
untouched (``client.responses.parse(...)``, ``retrieve``, ...). Responses API requests run in the
``background`` or continuing a ``conversation`` go straight to the client, never cached.

Hits come back as the openai package's own types: ``ChatCompletion``, ``Response``,
``CreateEmbeddingResponse``, and for ``stream=True`` an ``openai.Stream`` (``AsyncStream``) of
``ChatCompletionChunk`` (or of the Responses API's typed ``ResponseStreamEvent``, ending with
``response.completed``) replaying the answer in several pieces. A streamed miss is handed through
as it arrives (a thin wrapper over the client's stream, same iteration and ``close``) and stored
only if it completed. Answers that are errors, cut off (``finish_reason: length``, a response
``incomplete``), failed or unfinished are never stored. The cache failing costs a miss, never an
exception.

A semantic hit carries a fresh id (``resp_ck...``, ``chatcmpl-ck...``), never the stored answer's:
upstream that id names another prompt's history. ``responses.create(previous_response_id=...)``
with such an id raises :class:`~cachekit.llm.RequestError` saying why (the upstream never stored
it); an exact hit keeps the upstream's id.

``client.feedback(correct, **create_kwargs)`` records a user's verdict on the semantic hit that
``chat.completions.create(**create_kwargs)`` (or ``responses.create``, when the arguments have
an ``input`` and no ``messages``) got (``LLMCache.feedback``, as the proxy's
``POST /v1/cachekit/feedback`` does).
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from cachekit._core.extras import require

try:
    import openai
    from openai.types import CreateEmbeddingResponse
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
except ImportError:  # name the extra and its install command (the import error is chained)
    require("openai", extra="openai", feature="cachekit.adapters.openai")
    raise

from cachekit.adapters._sdk import (
    AsyncCachedCreate,
    AsyncStreamRecorder,
    CachedCreate,
    Context,
    Recorder,
    StreamRecorder,
    dump,
)

from cachekit.cache import Cache
from cachekit.llm import (
    CHAT,
    EMBEDDINGS,
    RESPONSES,
    LLMCache,
    LLMRequest,
    responses_sse,
    sse_event,
    sse_stream,
)

__all__ = [
    "AsyncRecordingStream",
    "AsyncResponsesRecordingStream",
    "CachedClient",
    "RecordingStream",
    "ResponsesRecordingStream",
    "cached_client",
]

#: What the openai package passes for an argument not given: never part of the body.
_SENTINELS: tuple[type, ...] = (openai.NotGiven, openai.Omit)


class _ChatRecorder(Recorder):
    """:class:`~cachekit.adapters._sdk.Recorder` of chat chunks: each chunk goes into a
    :class:`~cachekit.llm.StreamAssembler`, and the stream's end is its ``[DONE]``."""

    def _add(self, item: Any) -> None:
        self._asm.add_chunk(dump(item))

    def _answer(self) -> dict[str, Any] | None:
        # The client's stream ended at [DONE] or at a clean end of body (a Responses stream
        # ends at its terminal event: the flag changes nothing there).
        self._asm.done = True
        return super()._answer()


class _ResponsesRecorder(Recorder):
    """:class:`~cachekit.adapters._sdk.Recorder` for the Responses API's typed events: the answer
    is the response of the ``response.completed`` event, when no ``error``, ``response.failed``
    or ``response.incomplete`` came (:class:`~cachekit.llm.ResponsesStreamAssembler`'s rules)."""

    def _add(self, item: Any) -> None:
        self._asm.feed_events(sse_event(dump(item)))


# ---------------------------------------------------------------------- sync


class RecordingStream(_ChatRecorder, StreamRecorder):
    """A streamed miss: iterates the client's ``Stream`` as chunks arrive, and stores the
    assembled answer once the stream has ended complete. Supports ``with`` and ``close()``."""


class ResponsesRecordingStream(_ResponsesRecorder, RecordingStream):
    """:class:`RecordingStream` of a streamed ``responses.create``: relays the typed events and
    stores the final response once ``response.completed`` has come (and nothing failed)."""


class _Endpoint(CachedCreate):
    """A cached ``create`` of the openai package (:class:`~cachekit.adapters._sdk.CachedCreate`):
    a hit comes back as the package's own type (:meth:`_hit`)."""

    endpoint = CHAT
    stream_type: ClassVar[Any] = openai.Stream
    recorder: ClassVar[Any] = RecordingStream
    package = "openai"


class _ChatCompletions(_Endpoint):
    def _hit(self, req: LLMRequest, response: dict[str, Any]) -> Any:
        if req.stream:
            events = sse_stream(response, include_usage=req.include_usage)
            return self._replay(events, ChatCompletionChunk)
        return ChatCompletion.model_validate(response)


class _Responses(_Endpoint):
    """``client.responses``: ``create`` cached; ``stream`` (the SDK's helper) runs over the
    cached ``create``; everything else (``parse``, ``retrieve`` ...) is the client's."""

    endpoint = RESPONSES
    recorder = ResponsesRecordingStream

    def _hit(self, req: LLMRequest, response: dict[str, Any]) -> Any:
        from openai.types.responses import Response, ResponseStreamEvent

        if req.stream:
            return self._replay(responses_sse(response), ResponseStreamEvent)
        return Response.model_validate(response)

    def stream(self, **kwargs: Any) -> Any:
        """The SDK's ``responses.stream(...)`` helper, calling this ``create``."""
        return type(self._inner).stream(self, **kwargs)


class _Embeddings(_Endpoint):
    endpoint = EMBEDDINGS

    def _hit(self, req: LLMRequest, response: dict[str, Any]) -> Any:
        return CreateEmbeddingResponse.model_validate(response)


# ---------------------------------------------------------------------- async


class AsyncRecordingStream(_ChatRecorder, AsyncStreamRecorder):
    """:class:`RecordingStream` for ``AsyncOpenAI`` (``async for``, ``async with``)."""


class AsyncResponsesRecordingStream(_ResponsesRecorder, AsyncRecordingStream):
    """:class:`ResponsesRecordingStream` for ``AsyncOpenAI``."""


class _AsyncEndpoint(AsyncCachedCreate, _Endpoint):
    """:class:`_Endpoint` for ``AsyncOpenAI``: the same rules, awaited."""

    stream_type = openai.AsyncStream
    recorder = AsyncRecordingStream


class _AsyncChatCompletions(_AsyncEndpoint, _ChatCompletions):
    pass


class _AsyncEmbeddings(_AsyncEndpoint, _Embeddings):
    pass


class _AsyncResponses(_AsyncEndpoint, _Responses):
    recorder = AsyncResponsesRecordingStream


# ---------------------------------------------------------------------- the wrapper


class _Chat:
    def __init__(self, inner: Any, completions: _ChatCompletions) -> None:
        self._inner = inner
        self.completions = completions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class CachedClient:
    """The wrapped client: ``chat.completions.create``, ``responses.create`` (and the
    ``responses.stream`` helper) and ``embeddings.create`` are cached; every other attribute is
    the wrapped client's. ``llm`` is the :class:`LLMCache` used and ``tenant`` the tenant its
    entries belong to."""

    def __init__(self, client: Any, ctx: Context, asynchronous: bool) -> None:
        self._client = client
        self._ctx = ctx
        self._asynchronous = asynchronous
        self.llm = ctx.llm
        self.tenant = ctx.tenant
        completions = (_AsyncChatCompletions if asynchronous else _ChatCompletions)(
            client.chat.completions, ctx
        )
        self.chat = _Chat(client.chat, completions)
        self.embeddings = (_AsyncEmbeddings if asynchronous else _Embeddings)(
            client.embeddings, ctx
        )
        if hasattr(client, "responses"):  # openai 1.66 and later
            self.responses = (_AsyncResponses if asynchronous else _Responses)(
                client.responses, ctx
            )

    def feedback(self, correct: bool, **create_kwargs: Any) -> Any:
        """A user's verdict on the semantic hit that ``chat.completions.create(**create_kwargs)``
        got (pass the same arguments; arguments with an ``input`` and no ``messages`` are those
        of ``responses.create``): a wrong one demotes the entry that answered; see
        :meth:`LLMCache.feedback`. Returns whether the hit was known; for an async client, an
        awaitable of it (the Redis round trip runs in a thread)."""
        responses = "input" in create_kwargs and "messages" not in create_kwargs
        req = self._ctx.prepare(RESPONSES if responses else CHAT, create_kwargs)
        if self._asynchronous:
            return asyncio.to_thread(self._feedback, req, correct)
        return self._feedback(req, correct)

    def _feedback(self, req: LLMRequest | None, correct: bool) -> bool:
        return req is not None and self.llm.feedback(req, correct)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def cached_client(
    client: openai.OpenAI | openai.AsyncOpenAI,
    cache: Cache | LLMCache,
    *,
    tenant: str | None = None,
    namespace: str = "",
    tenant_secret: str | None = None,
    bucket_size: int = 1,
) -> Any:
    """Wrap ``client`` so chat completions, responses and embeddings are cached in ``cache`` (a
    :class:`~cachekit.Cache`, used through an :class:`~cachekit.llm.LLMCache` with default
    settings, or an ``LLMCache`` such as :func:`cachekit.llm.build_cache` returns).

    ``tenant``: who the entries belong to; by default the keyed hash of the client's API key,
    as the proxy computes it (same ``tenant_secret`` or ``CACHEKIT_TENANT_SECRET``), so a client
    and a proxy on one cache share entries. ``namespace``: a partition, as the proxy's
    ``x-cachekit-namespace`` header.
    ``bucket_size``: answers kept per key for sampled requests (temperature not 0, absent
    meaning 1): the first ``bucket_size`` calls of a key reach the API, later ones get one of
    those answers at random (:mod:`cachekit.llm.buckets`; the proxy's ``bucket_size``)."""
    if not isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)):
        raise TypeError(
            f"cached_client wraps openai.OpenAI or openai.AsyncOpenAI, got {type(client).__name__}"
        )
    llm = cache if isinstance(cache, LLMCache) else LLMCache(cache)
    ctx = Context(
        client, llm, tenant, namespace, tenant_secret, sentinels=_SENTINELS, bucket_size=bucket_size
    )
    return CachedClient(client, ctx, isinstance(client, openai.AsyncOpenAI))
