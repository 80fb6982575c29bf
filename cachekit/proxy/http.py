"""The proxy's HTTP pieces that know nothing of caching: JSON in and out, error bodies in each
API's shape, a body read within its limit, a streamed response that releases its upstream, and
the server span of each request (docs/tracing.md)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from cachekit._core.tracing import enable_tracing, server_span, tracing_enabled
from cachekit.llm import ENDPOINTS, Endpoint, RequestError, parse_body
from cachekit.llm.rules import check_depth

__all__ = [
    "JSON",
    "OTEL_ENV",
    "RelayResponse",
    "ServerSpans",
    "aiter",
    "api_under",
    "body_within",
    "dumps",
    "error_response",
    "http_error",
    "loads",
    "refusal",
    "tagged",
    "then",
    "trace_requests",
]

JSON = "application/json"


try:  # a faster encoder for answers when installed (the proxy extra installs it)
    import orjson

    def dumps(obj: Any) -> bytes:
        try:
            return orjson.dumps(obj)
        except TypeError:  # integers beyond 64 bits and the like
            return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()

    def loads(raw: bytes) -> dict[str, Any]:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return parse_body(raw)  # the standard parser says what is wrong (or accepts it)
        except RecursionError:
            return parse_body(raw)  # refused there, with the nesting limit named
        if not isinstance(body, dict):
            return parse_body(raw)
        check_depth(body, raw)
        return body

except ImportError:  # pragma: no cover - depends on the environment

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()

    loads = parse_body


def error_response(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
) -> Response:
    """An OpenAI-style error body with ``status``."""
    body = {"error": {"message": message, "type": type, "param": param, "code": code}}
    return Response(dumps(body), status_code=status, media_type=JSON)


class RelayResponse(StreamingResponse):
    """A relayed stream that releases its upstream however the response ends, including a
    client that left before the first byte (then the relay never starts)."""

    def __init__(
        self,
        content: AsyncIterator[bytes],
        release: Callable[[], Awaitable[None]],
        **kwargs: Any,
    ) -> None:
        super().__init__(content, **kwargs)
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._release()


async def body_within(request: Request, limit: int, too_large: RequestError) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def aiter(items: Any) -> AsyncIterator[bytes]:
    for item in items:
        yield item


async def http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and methods, answered as the OpenAI API answers them (an ``error`` body a
    client library can show), with a hint when the client's base URL lacks ``/v1``."""
    status = getattr(exc, "status_code", 500)
    where = f"{request.method} {request.url.path}"
    if status == 404:
        message = f"Unknown request URL: {where}."
        path = request.url.path
        if not path.startswith("/v1/"):
            message += (
                f" Did you mean /v1{path}? Point the client's base URL at this server's /v1 "
                f"(for example base_url='{request.base_url}v1')."
            )
        return error_response(404, message, code="unknown_url")
    if status == 405:
        return error_response(405, f"Method not allowed: {where}.", code="method_not_allowed")
    detail = getattr(exc, "detail", None) or "error"
    return error_response(status, str(detail), code=None)


def api_under(path: str) -> Endpoint | None:
    """The endpoint whose path ``path`` is or lies under (``/v1/messages/count_tokens``: the
    Messages API's family and error shape), else ``None``."""
    for api in ENDPOINTS.values():
        if path == api.path or path.startswith(api.path + "/"):
            return api
    return None


def refusal(exc: RequestError, api: Endpoint | None = None) -> Response:
    """The response refusing a request, in its API's error shape (OpenAI's without one)."""
    body = exc.body() if api is None else api.error_body(exc)
    return Response(dumps(body), status_code=exc.status, media_type=JSON)


def tagged(response: Response, outcome: dict[str, str]) -> Response:
    """``response`` (one the proxy made itself: an upstream error) with the cache's word on the
    request in ``x-cachekit-cache``, as every answer to a proxied request has."""
    response.headers["x-cachekit-cache"] = outcome["x-cachekit-cache"]
    return response


def then(first: BackgroundTask, then: Callable[[], None]) -> BackgroundTask:
    """A background task that runs ``first``, then ``then`` (however ``first`` ended)."""

    async def run() -> None:
        try:
            await first()
        finally:
            then()

    return BackgroundTask(run)


# ---------------------------------------------------------------------- traces (docs/tracing.md)

#: The environment variable that turns tracing on, as ``--otel`` and ``[proxy] otel`` do.
OTEL_ENV = "CACHEKIT_OTEL"


def trace_requests(app: Starlette, otel: bool) -> Starlette:
    """Turn tracing on when ``otel`` (``--otel``, ``[proxy] otel``) or ``$CACHEKIT_OTEL`` asks
    and it is not on already (:func:`~cachekit._core.tracing.enable_tracing`: the ``OTEL_*``
    variables' provider); once on, give ``app`` a server span per ``/v1`` request. Off, ``app``
    is left as it is: requests pay nothing for it. Returns ``app``."""
    wanted = otel or os.environ.get(OTEL_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    if wanted and not tracing_enabled():
        enable_tracing()
    if tracing_enabled():
        app.add_middleware(ServerSpans)
    return app


class ServerSpans:
    """ASGI middleware: a server span ``cachekit.proxy.request`` around each ``/v1`` request,
    continuing the trace of its ``traceparent``/``tracestate`` headers, with its method, path,
    status and ``x-cachekit-cache`` outcome."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        method, path = scope["method"], scope["path"]
        attributes = {"http.request.method": method, "url.path": path}
        with server_span("cachekit.proxy.request", headers, **attributes) as traced:

            async def traced_send(message: Any) -> None:
                if message["type"] == "http.response.start":
                    traced.set_attribute("http.response.status_code", message["status"])
                    for k, v in message.get("headers", ()):
                        if k == b"x-cachekit-cache":
                            traced.set_attribute("cache", v.decode("latin-1"))
                await send(message)

            await self.app(scope, receive, traced_send)
