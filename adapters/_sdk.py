"""What the client adapters (:mod:`cachekit.adapters.openai`, :mod:`cachekit.adapters.anthropic`)
share, whatever the SDK: a ``create(**kwargs)`` call's arguments as the request body
(:func:`request_body`), the cache and the caller's tenant (:class:`Context`), a cached ``create``
(:class:`CachedCreate`, :class:`AsyncCachedCreate`: a hit as the SDK's own type, a miss from the
wrapped client, stored when the rules allow) and a streamed miss relayed as it arrives and stored
once it completed (:class:`StreamRecorder`, :class:`AsyncStreamRecorder`).

An adapter fills in what its SDK differs by: the endpoint, the SDK's types (``_hit``), its stream
class, how a relayed stream item reaches the endpoint's assembler (``Recorder._add``) and its
sentinels for an argument not given.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any, ClassVar, Self

from cachekit.cache import Status
from cachekit.llm import (
    LLMCache,
    LLMRequest,
    RequestError,
    StreamAssembler,
    TenantResolver,
    get_endpoint,
    prepare,
)
from cachekit.llm.buckets import bucket_for, check_bucket

try:  # the SDKs' own HTTP library: httpx2 in recent versions, httpx before
    import httpx2 as http
except ImportError:  # pragma: no cover - depends on the SDK versions
    import httpx as http  # type: ignore[no-redef]

__all__ = [
    "TRANSPORT",
    "AsyncCachedCreate",
    "AsyncStreamRecorder",
    "CachedCreate",
    "Context",
    "Recorder",
    "StreamRecorder",
    "dump",
    "plain",
    "request_body",
    "sse_response",
]

#: Keyword arguments of ``create()`` that shape the HTTP call, not the request body.
TRANSPORT = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})


def plain(value: Any) -> Any:
    """JSON-able form of a create() argument (pydantic models from earlier answers included)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_unset=True)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def request_body(
    kwargs: Mapping[str, Any],
    sentinels: tuple[type, ...] = (),
    transport: frozenset[str] = TRANSPORT,
) -> dict[str, Any]:
    """The body ``create(**kwargs)`` sends: every argument but the ``transport`` ones and those
    whose value is an instance of ``sentinels`` (the SDK's ``NotGiven``/``Omit``), in
    :func:`plain` form, with ``extra_body`` merged in."""
    body = {
        k: plain(v)
        for k, v in kwargs.items()
        if k not in transport and not isinstance(v, sentinels)
    }
    extra = kwargs.get("extra_body")
    if isinstance(extra, Mapping):
        body.update(plain(extra))
    return body


def dump(item: Any) -> dict[str, Any]:
    """An SDK object (a chunk, an event, a response) as the JSON the API sent."""
    return item.model_dump(mode="json", exclude_unset=True)


def sse_response(events: Iterable[bytes], endpoint: str) -> http.Response:
    """A stored answer's SSE ``events`` as the HTTP response the SDK's stream classes parse."""
    return http.Response(
        200,
        content=b"".join(events),
        headers={"content-type": "text/event-stream"},
        request=http.Request("POST", "http://cachekit.invalid" + endpoint),
    )


class Context:
    """What every wrapped endpoint needs: the cache, the caller's tenant and namespace, and how
    the SDK's arguments become a body (its ``sentinels`` and ``transport`` arguments dropped).

    ``tenant`` defaults to the keyed hash of ``credential`` (the client's ``api_key`` when not
    given), as the proxy computes it."""

    def __init__(
        self,
        client: Any,
        llm: LLMCache,
        tenant: str | None,
        namespace: str,
        secret: str | None,
        *,
        sentinels: tuple[type, ...] = (),
        transport: frozenset[str] = TRANSPORT,
        credential: str | None = None,
        bucket_size: int = 1,
    ) -> None:
        self.client = client
        #: Answers kept per key for sampled requests (:mod:`cachekit.llm.buckets`).
        self.bucket_size = check_bucket(bucket_size)
        self.llm = llm
        self.namespace = namespace
        self.sentinels = sentinels
        self.transport = transport
        if tenant is None:
            resolver = TenantResolver(
                secret
                or os.environ.get("CACHEKIT_TENANT_SECRET")
                or f"cachekit-tenant:{llm.cache.namespace}"
            )
            key = credential if credential is not None else getattr(client, "api_key", None)
            tenant = resolver.for_key(key)
        self.tenant = tenant

    def bucket(self, req: LLMRequest) -> int:
        """The bucket ``req`` gets: :attr:`bucket_size` when it is sampled, else 1."""
        return bucket_for(req.body, self.bucket_size)

    def body(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """:func:`request_body` with this SDK's sentinels and transport arguments."""
        return request_body(kwargs, self.sentinels, self.transport)

    def prepare(
        self, endpoint: str, kwargs: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> LLMRequest | None:
        """The request ``create(**kwargs)`` makes (``headers``: its header lines, of which the
        endpoint's keyed ones join the key), or ``None`` when the rules refuse it: the client
        sends it as it is and the API says what is wrong. Raises the endpoint's own refusals
        (:meth:`~cachekit.llm.Endpoint.check_request`: continuing a semantic hit's id)."""
        get_endpoint(endpoint).check_request(kwargs)
        try:
            return prepare(endpoint, self.body(kwargs), self.tenant, self.namespace, headers)
        except (RequestError, TypeError, ValueError):
            return None

    def storable(self, req: LLMRequest, body: Any) -> bool:
        return self.llm.cacheable(req.endpoint, 200, body)[0]


class Recorder:
    """What a recording stream does with the client's stream, sync or async: each item goes
    into the endpoint's assembler (:meth:`_add`, which an adapter defines), and once the stream
    has ended, :meth:`_answer` is what to store (the assembled answer when complete and
    storable), if anything."""

    def __init__(self, inner: Any, ctx: Context, req: LLMRequest) -> None:
        self._inner = inner
        self._ctx = ctx
        self._req = req
        self._asm = self._assembler()
        self.response = getattr(inner, "response", None)

    def _assembler(self) -> StreamAssembler:
        return self._req.api.assembler()

    def _add(self, item: Any) -> None:
        raise NotImplementedError

    def _answer(self) -> dict[str, Any] | None:
        asm = self._asm
        body = asm.result()
        return body if asm.complete and self._ctx.storable(self._req, body) else None


class StreamRecorder(Recorder):
    """A streamed miss: iterates the client's stream as items arrive, and stores the assembled
    answer once the stream has ended complete. Supports ``with`` and ``close()``."""

    def __init__(self, inner: Any, ctx: Context, req: LLMRequest) -> None:
        super().__init__(inner, ctx, req)
        self._iter = self._record()

    def _record(self) -> Iterator[Any]:
        for item in self._inner:
            self._add(item)
            yield item
        body = self._answer()
        if body is not None:
            self._ctx.llm.store(self._req, body, bucket=self._ctx.bucket(self._req))

    def __iter__(self) -> Iterator[Any]:
        return self._iter

    def __next__(self) -> Any:
        return next(self._iter)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._inner.close()


class AsyncStreamRecorder(Recorder):
    """:class:`StreamRecorder` for an async client (``async for``, ``async with``)."""

    def __init__(self, inner: Any, ctx: Context, req: LLMRequest) -> None:
        super().__init__(inner, ctx, req)
        self._iter = self._record()

    async def _record(self) -> AsyncIterator[Any]:
        async for item in self._inner:
            self._add(item)
            yield item
        body = self._answer()
        if body is not None:
            await self._ctx.llm.astore(self._req, body, bucket=self._ctx.bucket(self._req))

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iter

    async def __anext__(self) -> Any:
        return await self._iter.__anext__()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._inner.close()


class CachedCreate:
    """A cached ``create``: the request rules decide, a hit comes back as the SDK's own type
    (:meth:`_hit`, which an adapter defines), a miss is the client's result, stored when
    complete (:meth:`_miss` says what to return and what, if anything, to store now). Every
    other attribute is the wrapped resource's."""

    #: The API path (:data:`cachekit.llm.CHAT` ...).
    endpoint: ClassVar[str]
    #: The SDK's stream class a streamed hit is replayed as (``openai.Stream`` ...).
    stream_type: ClassVar[Any]
    #: The :class:`StreamRecorder` (or async) class a streamed miss is relayed through.
    recorder: ClassVar[Any]
    #: The SDK's package name, for the log.
    package: ClassVar[str] = "SDK"

    def __init__(self, inner: Any, ctx: Context) -> None:
        self._inner = inner
        self._ctx = ctx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _prepare(self, kwargs: Mapping[str, Any]) -> LLMRequest | None:
        return self._ctx.prepare(self.endpoint, kwargs)

    def _hit(self, req: LLMRequest, response: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _served(self, req: LLMRequest, found: Any) -> Any:
        """A hit as the SDK's type, or ``None``: a miss, or a stored answer this version of the
        package cannot read (an output type it does not know): a miss too."""
        if not found.hit or found.response is None:
            return None
        response = found.response
        if found.status is Status.SEMANTIC_HIT:  # another request's answer: never its id
            response = {**response, "id": req.api.hit_id(response.get("id"))}
        try:
            return self._hit(req, response)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            logging.getLogger(f"cachekit.adapters.{self.package}").warning(
                "cached answer the %s package cannot read, served as a miss: %s",
                self.package,
                exc,
            )
            return None

    def _miss(self, req: LLMRequest, result: Any) -> tuple[Any, Any]:
        if req.stream:  # stored by the recorder once the stream ended complete
            return self.recorder(result, self._ctx, req), None
        return result, dump(result)

    def _replay(self, events: Iterable[bytes], cast_to: Any) -> Any:
        """A stored answer's SSE ``events`` as the SDK's own stream of ``cast_to``."""
        return self.stream_type(
            cast_to=cast_to,
            client=self._ctx.client,
            response=sse_response(events, self.endpoint),
        )

    def _storable(self, req: LLMRequest, body: Any) -> bool:
        return body is not None and self._ctx.storable(req, body)

    def create(self, **kwargs: Any) -> Any:
        ctx = self._ctx
        req = self._prepare(kwargs)
        if req is None or req.passthrough is not None:
            return self._inner.create(**kwargs)
        served = self._served(req, ctx.llm.lookup(req, bucket=ctx.bucket(req)))
        if served is not None:
            return served
        result, body = self._miss(req, self._inner.create(**kwargs))
        if self._storable(req, body):
            ctx.llm.store(req, body, bucket=ctx.bucket(req))
        return result


class AsyncCachedCreate(CachedCreate):
    """:class:`CachedCreate` for an async client: the same rules, awaited."""

    async def create(self, **kwargs: Any) -> Any:
        ctx = self._ctx
        req = self._prepare(kwargs)
        if req is None or req.passthrough is not None:
            return await self._inner.create(**kwargs)
        served = self._served(req, await ctx.llm.alookup(req, bucket=ctx.bucket(req)))
        if served is not None:
            return served
        result, body = self._miss(req, await self._inner.create(**kwargs))
        if self._storable(req, body):
            await ctx.llm.astore(req, body, bucket=ctx.bucket(req))
        return result
