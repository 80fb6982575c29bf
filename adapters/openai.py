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
import logging
import os
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any

from cachekit._core.extras import require

try:
    import openai
    from openai.types import CreateEmbeddingResponse
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
except ImportError:  # name the extra and its install command (the import error is chained)
    require("openai", extra="openai", feature="cachekit.adapters.openai")
    raise

from cachekit.cache import Cache, Status
from cachekit.llm import (
    CHAT,
    EMBEDDINGS,
    RESPONSES,
    LLMCache,
    LLMRequest,
    RequestError,
    ResponsesStreamAssembler,
    StreamAssembler,
    TenantResolver,
    get_endpoint,
    prepare,
    responses_sse,
    sse_event,
    sse_stream,
)

try:  # the openai package's own HTTP library: httpx2 in recent versions, httpx before
    import httpx2 as _http
except ImportError:  # pragma: no cover - depends on the openai version
    import httpx as _http  # type: ignore[no-redef]

__all__ = [
    "AsyncRecordingStream",
    "AsyncResponsesRecordingStream",
    "CachedClient",
    "RecordingStream",
    "ResponsesRecordingStream",
    "cached_client",
]

log = logging.getLogger("cachekit.adapters.openai")

# Keyword arguments of create() that shape the HTTP call, not the request body.
_TRANSPORT = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})


def _plain(value: Any) -> Any:
    """JSON-able form of a create() argument (pydantic models from earlier answers included)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_unset=True)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _body(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    body = {
        k: _plain(v)
        for k, v in kwargs.items()
        if k not in _TRANSPORT and not isinstance(v, (openai.NotGiven, openai.Omit))
    }
    extra = kwargs.get("extra_body")
    if isinstance(extra, Mapping):
        body.update(_plain(extra))
    return body


class _Context:
    """What every wrapped endpoint needs: the cache, the caller's tenant and namespace."""

    def __init__(
        self, client: Any, llm: LLMCache, tenant: str | None, namespace: str, secret: str | None
    ) -> None:
        self.client = client
        self.llm = llm
        self.namespace = namespace
        if tenant is None:
            resolver = TenantResolver(
                secret
                or os.environ.get("CACHEKIT_TENANT_SECRET")
                or f"cachekit-tenant:{llm.cache.namespace}"
            )
            tenant = resolver.for_key(getattr(client, "api_key", None))
        self.tenant = tenant

    def prepare(self, endpoint: str, kwargs: Mapping[str, Any]) -> LLMRequest | None:
        # RequestError (a ValueError) with the reason: the upstream never stored that id.
        get_endpoint(endpoint).check_request(kwargs)
        try:
            return prepare(endpoint, _body(kwargs), self.tenant, self.namespace)
        except (RequestError, TypeError, ValueError):
            return None  # let the client and the API say what is wrong with it

    def storable(self, req: LLMRequest, body: Any) -> bool:
        return self.llm.cacheable(req.endpoint, 200, body)[0]


def _sse_response(events: Iterable[bytes], endpoint: str) -> _http.Response:
    """A stored answer's SSE ``events`` as the HTTP response the SDK's stream classes parse."""
    return _http.Response(
        200,
        content=b"".join(events),
        headers={"content-type": "text/event-stream"},
        request=_http.Request("POST", "http://cachekit.invalid" + endpoint),
    )


def _dump(item: Any) -> dict[str, Any]:
    """An SDK object (a chunk, an event, a response) as the JSON the API sent."""
    return item.model_dump(mode="json", exclude_unset=True)


class _Recorder:
    """What a recording stream does with the client's stream, sync or async: each item (a chat
    chunk here) goes into an assembler (:meth:`_add`), and once the stream has ended,
    :meth:`_answer` is what to store (the assembled answer when complete), if anything."""

    def __init__(self, inner: Any, ctx: _Context, req: LLMRequest) -> None:
        self._inner = inner
        self._ctx = ctx
        self._req = req
        self._asm = self._assembler()
        self.response = getattr(inner, "response", None)

    def _assembler(self) -> StreamAssembler:
        return StreamAssembler()

    def _add(self, item: Any) -> None:
        self._asm.add_chunk(_dump(item))

    def _answer(self) -> dict[str, Any] | None:
        asm = self._asm
        # The client's stream ended at [DONE] or at a clean end of body (a Responses stream
        # ends at its terminal event: the flag changes nothing there).
        asm.done = True
        body = asm.result()
        return body if asm.complete and self._ctx.storable(self._req, body) else None


class _ResponsesRecorder(_Recorder):
    """:class:`_Recorder` for the Responses API's typed events: the answer is the response of
    the ``response.completed`` event, when no ``error``, ``response.failed`` or
    ``response.incomplete`` came (:class:`~cachekit.llm.ResponsesStreamAssembler`'s rules)."""

    def _assembler(self) -> StreamAssembler:
        return ResponsesStreamAssembler()

    def _add(self, item: Any) -> None:
        self._asm.feed_events(sse_event(_dump(item)))


# ---------------------------------------------------------------------- sync


class RecordingStream(_Recorder):
    """A streamed miss: iterates the client's ``Stream`` as chunks arrive, and stores the
    assembled answer once the stream has ended complete. Supports ``with`` and ``close()``."""

    def __init__(self, inner: Any, ctx: _Context, req: LLMRequest) -> None:
        super().__init__(inner, ctx, req)
        self._iter = self._record()

    def _record(self) -> Iterator[Any]:
        for item in self._inner:
            self._add(item)
            yield item
        body = self._answer()
        if body is not None:
            self._ctx.llm.store(self._req, body)

    def __iter__(self) -> Iterator[Any]:
        return self._iter

    def __next__(self) -> Any:
        return next(self._iter)

    def __enter__(self) -> RecordingStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._inner.close()


class ResponsesRecordingStream(_ResponsesRecorder, RecordingStream):
    """:class:`RecordingStream` of a streamed ``responses.create``: relays the typed events and
    stores the final response once ``response.completed`` has come (and nothing failed)."""


class _Endpoint:
    """A cached ``create``: the request rules decide, a hit comes back as the openai package's
    own type (:meth:`_hit`), a miss is the client's result, stored when complete (:meth:`_miss`
    says what to return and what, if anything, to store now)."""

    endpoint = CHAT
    stream_type: Any = openai.Stream
    recorder: Any = RecordingStream

    def __init__(self, inner: Any, ctx: _Context) -> None:
        self._inner = inner
        self._ctx = ctx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _hit(self, req: LLMRequest, response: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _served(self, req: LLMRequest, found: Any) -> Any:
        """A hit as the openai package's type, or ``None``: a miss, or a stored answer this
        version of the package cannot read (an output type it does not know): a miss too."""
        if not found.hit or found.response is None:
            return None
        response = found.response
        if found.status is Status.SEMANTIC_HIT:  # another request's answer: never its id
            response = {**response, "id": req.api.hit_id(response.get("id"))}
        try:
            return self._hit(req, response)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            log.warning("cached answer the openai package cannot read, served as a miss: %s", exc)
            return None

    def _miss(self, req: LLMRequest, result: Any) -> tuple[Any, Any]:
        if req.stream:  # stored by the recorder once the stream ended complete
            return self.recorder(result, self._ctx, req), None
        return result, _dump(result)

    def _replay(self, events: Iterable[bytes], cast_to: Any) -> Any:
        """A stored answer's SSE ``events`` as the SDK's own stream of ``cast_to``."""
        return self.stream_type(
            cast_to=cast_to,
            client=self._ctx.client,
            response=_sse_response(events, self.endpoint),
        )

    def _storable(self, req: LLMRequest, body: Any) -> bool:
        return body is not None and self._ctx.storable(req, body)

    def create(self, **kwargs: Any) -> Any:
        ctx = self._ctx
        req = ctx.prepare(self.endpoint, kwargs)
        if req is None or req.passthrough is not None:
            return self._inner.create(**kwargs)
        served = self._served(req, ctx.llm.lookup(req))
        if served is not None:
            return served
        result, body = self._miss(req, self._inner.create(**kwargs))
        if self._storable(req, body):
            ctx.llm.store(req, body)
        return result


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
    recorder: Any = ResponsesRecordingStream

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


class AsyncRecordingStream(_Recorder):
    """:class:`RecordingStream` for ``AsyncOpenAI`` (``async for``, ``async with``)."""

    def __init__(self, inner: Any, ctx: _Context, req: LLMRequest) -> None:
        super().__init__(inner, ctx, req)
        self._iter = self._record()

    async def _record(self) -> AsyncIterator[Any]:
        async for item in self._inner:
            self._add(item)
            yield item
        body = self._answer()
        if body is not None:
            await self._ctx.llm.astore(self._req, body)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iter

    async def __anext__(self) -> Any:
        return await self._iter.__anext__()

    async def __aenter__(self) -> AsyncRecordingStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._inner.close()


class AsyncResponsesRecordingStream(_ResponsesRecorder, AsyncRecordingStream):
    """:class:`ResponsesRecordingStream` for ``AsyncOpenAI``."""


class _AsyncEndpoint(_Endpoint):
    """:class:`_Endpoint` for ``AsyncOpenAI``: the same rules, awaited."""

    stream_type = openai.AsyncStream
    recorder = AsyncRecordingStream

    async def create(self, **kwargs: Any) -> Any:
        ctx = self._ctx
        req = ctx.prepare(self.endpoint, kwargs)
        if req is None or req.passthrough is not None:
            return await self._inner.create(**kwargs)
        served = self._served(req, await ctx.llm.alookup(req))
        if served is not None:
            return served
        result, body = self._miss(req, await self._inner.create(**kwargs))
        if self._storable(req, body):
            await ctx.llm.astore(req, body)
        return result


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

    def __init__(self, client: Any, ctx: _Context, asynchronous: bool) -> None:
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
) -> Any:
    """Wrap ``client`` so chat completions, responses and embeddings are cached in ``cache`` (a
    :class:`~cachekit.Cache`, used through an :class:`~cachekit.llm.LLMCache` with default
    settings, or an ``LLMCache`` such as :func:`cachekit.llm.build_cache` returns).

    ``tenant``: who the entries belong to; by default the keyed hash of the client's API key,
    as the proxy computes it (same ``tenant_secret`` or ``CACHEKIT_TENANT_SECRET``), so a client
    and a proxy on one cache share entries. ``namespace``: a partition, as the proxy's
    ``x-cachekit-namespace`` header."""
    if not isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)):
        raise TypeError(
            f"cached_client wraps openai.OpenAI or openai.AsyncOpenAI, got {type(client).__name__}"
        )
    llm = cache if isinstance(cache, LLMCache) else LLMCache(cache)
    ctx = _Context(client, llm, tenant, namespace, tenant_secret)
    return CachedClient(client, ctx, isinstance(client, openai.AsyncOpenAI))
