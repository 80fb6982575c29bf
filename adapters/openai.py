"""Client-side caching for the official ``openai`` package, for teams that do not run the proxy.

``cached_client(client, cache)`` wraps an ``openai.OpenAI`` or ``openai.AsyncOpenAI``:
``client.chat.completions.create(...)`` (streaming included) and ``client.embeddings.create(...)``
are answered from the cache by the same key, scope and tenant rules as ``cachekit serve``
(:mod:`cachekit.llm`), and everything else goes to the wrapped client untouched.

Hits come back as the openai package's own types: ``ChatCompletion``,
``CreateEmbeddingResponse``, and for ``stream=True`` an ``openai.Stream`` (``AsyncStream``) of
``ChatCompletionChunk`` replaying the answer in several chunks. A streamed miss is handed through
as it arrives (a thin wrapper over the client's stream, same iteration and ``close``) and stored
only if it completed. Answers that are errors, cut off (``finish_reason: length``) or incomplete
are never stored. The cache failing costs a miss, never an exception.

``client.feedback(correct, **create_kwargs)`` records a user's verdict on the semantic hit that
``chat.completions.create(**create_kwargs)`` got (``LLMCache.feedback``, as the proxy's
``POST /v1/cachekit/feedback`` does).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from cachekit.extras import require

try:
    import openai
    from openai.types import CreateEmbeddingResponse
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
except ImportError:  # name the extra and its install command (the import error is chained)
    require("openai", extra="openai", feature="cachekit.adapters.openai")
    raise

from cachekit.cache import Cache
from cachekit.llm import (
    CHAT,
    EMBEDDINGS,
    LLMCache,
    LLMRequest,
    RequestError,
    StreamAssembler,
    TenantResolver,
    prepare,
    sse_stream,
)

try:  # the openai package's own HTTP library: httpx2 in recent versions, httpx before
    import httpx2 as _http
except ImportError:  # pragma: no cover - depends on the openai version
    import httpx as _http  # type: ignore[no-redef]

__all__ = ["AsyncRecordingStream", "CachedClient", "RecordingStream", "cached_client"]

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
        try:
            return prepare(endpoint, _body(kwargs), self.tenant, self.namespace)
        except (RequestError, TypeError, ValueError):
            return None  # let the client and the API say what is wrong with it

    def storable(self, req: LLMRequest, body: Any) -> bool:
        return self.llm.cacheable(req.endpoint, 200, body)[0]


def _sse_response(completion: dict[str, Any], include_usage: bool) -> _http.Response:
    data = b"".join(sse_stream(completion, include_usage=include_usage))
    return _http.Response(
        200,
        content=data,
        headers={"content-type": "text/event-stream"},
        request=_http.Request("POST", "http://cachekit.invalid" + CHAT),
    )


# ---------------------------------------------------------------------- sync


class RecordingStream:
    """A streamed miss: iterates the client's ``Stream`` as chunks arrive, and stores the
    assembled answer once the stream has ended complete. Supports ``with`` and ``close()``."""

    def __init__(self, inner: Any, ctx: _Context, req: LLMRequest) -> None:
        self._inner = inner
        self._ctx = ctx
        self._req = req
        self._iter = self._record()
        self.response = getattr(inner, "response", None)

    def _record(self) -> Iterator[ChatCompletionChunk]:
        asm = StreamAssembler()
        for chunk in self._inner:
            asm.add_chunk(chunk.model_dump(mode="json", exclude_unset=True))
            yield chunk
        asm.done = True  # the client's stream ended at [DONE] or at a clean end of body
        body = asm.result()
        if asm.complete and self._ctx.storable(self._req, body):
            self._ctx.llm.store(self._req, body)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[ChatCompletionChunk]:
        return self._iter

    def __next__(self) -> ChatCompletionChunk:
        return next(self._iter)

    def __enter__(self) -> RecordingStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._inner.close()


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

    def _miss(self, req: LLMRequest, result: Any) -> tuple[Any, Any]:
        return result, result.model_dump(mode="json", exclude_unset=True)

    def _storable(self, req: LLMRequest, body: Any) -> bool:
        return body is not None and self._ctx.storable(req, body)

    def create(self, **kwargs: Any) -> Any:
        ctx = self._ctx
        req = ctx.prepare(self.endpoint, kwargs)
        if req is None:
            return self._inner.create(**kwargs)
        found = ctx.llm.lookup(req)
        if found.hit and found.response is not None:
            return self._hit(req, found.response)
        result, body = self._miss(req, self._inner.create(**kwargs))
        if self._storable(req, body):
            ctx.llm.store(req, body)
        return result


class _ChatCompletions(_Endpoint):
    def _hit(self, req: LLMRequest, response: dict[str, Any]) -> Any:
        if req.stream:
            return self.stream_type(
                cast_to=ChatCompletionChunk,
                client=self._ctx.client,
                response=_sse_response(response, req.include_usage),
            )
        return ChatCompletion.model_validate(response)

    def _miss(self, req: LLMRequest, result: Any) -> tuple[Any, Any]:
        if req.stream:  # stored by the recorder once the stream ended complete
            return self.recorder(result, self._ctx, req), None
        return super()._miss(req, result)


class _Embeddings(_Endpoint):
    endpoint = EMBEDDINGS

    def _hit(self, req: LLMRequest, response: dict[str, Any]) -> Any:
        return CreateEmbeddingResponse.model_validate(response)


# ---------------------------------------------------------------------- async


class AsyncRecordingStream:
    """:class:`RecordingStream` for ``AsyncOpenAI`` (``async for``, ``async with``)."""

    def __init__(self, inner: Any, ctx: _Context, req: LLMRequest) -> None:
        self._inner = inner
        self._ctx = ctx
        self._req = req
        self._iter = self._record()
        self.response = getattr(inner, "response", None)

    async def _record(self) -> AsyncIterator[ChatCompletionChunk]:
        asm = StreamAssembler()
        async for chunk in self._inner:
            asm.add_chunk(chunk.model_dump(mode="json", exclude_unset=True))
            yield chunk
        asm.done = True
        body = asm.result()
        if asm.complete and self._ctx.storable(self._req, body):
            await self._ctx.llm.astore(self._req, body)  # type: ignore[arg-type]

    def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        return self._iter

    async def __anext__(self) -> ChatCompletionChunk:
        return await self._iter.__anext__()

    async def __aenter__(self) -> AsyncRecordingStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._inner.close()


class _AsyncEndpoint(_Endpoint):
    """:class:`_Endpoint` for ``AsyncOpenAI``: the same rules, awaited."""

    stream_type = openai.AsyncStream
    recorder = AsyncRecordingStream

    async def create(self, **kwargs: Any) -> Any:
        ctx = self._ctx
        req = ctx.prepare(self.endpoint, kwargs)
        if req is None:
            return await self._inner.create(**kwargs)
        found = await ctx.llm.alookup(req)
        if found.hit and found.response is not None:
            return self._hit(req, found.response)
        result, body = self._miss(req, await self._inner.create(**kwargs))
        if self._storable(req, body):
            await ctx.llm.astore(req, body)
        return result


class _AsyncChatCompletions(_AsyncEndpoint, _ChatCompletions):
    pass


class _AsyncEmbeddings(_AsyncEndpoint, _Embeddings):
    pass


# ---------------------------------------------------------------------- the wrapper


class _Chat:
    def __init__(self, inner: Any, completions: _ChatCompletions) -> None:
        self._inner = inner
        self.completions = completions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class CachedClient:
    """The wrapped client: ``chat.completions.create`` and ``embeddings.create`` are cached;
    every other attribute is the wrapped client's. ``llm`` is the :class:`LLMCache` used and
    ``tenant`` the tenant its entries belong to."""

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

    def feedback(self, correct: bool, **create_kwargs: Any) -> Any:
        """A user's verdict on the semantic hit that ``chat.completions.create(**create_kwargs)``
        got (pass the same arguments): a wrong one demotes the entry that answered; see
        :meth:`LLMCache.feedback`. Returns whether the hit was known; for an async client, an
        awaitable of it (the Redis round trip runs in a thread)."""
        req = self._ctx.prepare(CHAT, create_kwargs)
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
    """Wrap ``client`` so chat completions and embeddings are cached in ``cache`` (a
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
