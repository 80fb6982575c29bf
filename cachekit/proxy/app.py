"""The ``cachekit serve`` application: an OpenAI-compatible caching proxy (Starlette).

HTTP translation only: every caching decision is made by :class:`cachekit.llm.LLMCache` and the
rules of :mod:`cachekit.llm.rules`, and what differs between APIs by each one's
:class:`~cachekit.llm.Endpoint` object. Every registered endpoint (:data:`cachekit.llm.ENDPOINTS`:
``POST /v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``, ``/v1/responses`` and
Anthropic's ``/v1/messages``) is looked up and stored (a Responses request run in the background
or continuing a ``conversation`` is forwarded uncached); every other ``/v1/...`` request is
passed through untouched (``/v1/messages/count_tokens`` included), and every answer says which
it was in ``x-cachekit-cache`` (``PASSTHROUGH`` for what the cache never saw).
``POST /v1/cachekit/feedback`` records a verdict on a semantic hit served here. See docs/proxy.md;
the operators' routes and shadow mode are :mod:`cachekit.proxy.ops`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from cachekit.cache import Status
from cachekit.llm import (
    ENDPOINTS,
    CacheLookup,
    Endpoint,
    LLMCache,
    LLMRequest,
    RequestError,
    build_cache,
    parse_feedback,
    prepare,
)
from cachekit.llm.hit_ids import check_continuable, response_id_in
from cachekit.llm.rules import caller_key, keyed_headers
from cachekit.proxy.config import ENV_VAR, ProxyConfig, base_url, load_embedder
from cachekit.proxy.fairness import RETRY_AFTER_S, CallerLimits, UpstreamCall, caller_id
from cachekit.proxy.feedback import HITS_REMEMBERED, UNKNOWN_ID, ServedHits
from cachekit.proxy.headers import (
    BODY_CONTROLS,
    HOP_BY_HOP,
    NO_CONTROLS,
    UPSTREAM_DROP_RESPONSE,
    Controls,
    forward_headers,
    parse_controls,
    response_headers,
    sampling,
    strip_body_controls,
)
from cachekit.proxy.http import (
    JSON,
    RelayResponse,
    aiter,
    api_under,
    body_within,
    dumps,
    error_response,
    http_error,
    loads,
    refusal,
    tagged,
    then,
    trace_requests,
)
from cachekit.proxy.inflight.flights import Flight, Flights
from cachekit.proxy.inflight.relay import joined_response, pump, releaser
from cachekit.proxy.inflight.replicas import ReplicaFlights
from cachekit.proxy.memo import RequestMemo
from cachekit.proxy.metrics import ProxyMetrics
from cachekit.proxy.ops.admin import admin_routes
from cachekit.proxy.ops.dashboard import dashboard_routes
from cachekit.proxy.ops.shadow import Shadow
from cachekit.proxy.upstream import UpstreamHealth, describe, health_report, upstream_failure
from cachekit.semantic.policy.slots import refusal_kind

__all__ = [
    "FEEDBACK_PATH",
    "HITS_REMEMBERED",
    "Controls",
    "Proxy",
    "app_from_env",
    "create_app",
    "parse_controls",
]

log = logging.getLogger("cachekit.proxy")

#: What ``x-cachekit-cache`` says of an answer the cache never saw.
PASSTHROUGH = {"x-cachekit-cache": "PASSTHROUGH"}
#: Where clients report a verdict on a semantic hit.
FEEDBACK_PATH = "/v1/cachekit/feedback"


class Proxy:
    """The proxy's state and request handling; :func:`create_app` wires it into Starlette."""

    def __init__(
        self, config: ProxyConfig, llm: LLMCache | None = None, embedder: Any = None
    ) -> None:
        self.config = config
        settings = config.proxy
        self.upstream = base_url(settings.upstream)
        #: Each API family's upstream (``[proxy.upstreams]``), else :attr:`upstream`.
        self.upstreams = {f: base_url(u) for f, u in settings.upstreams.items()}
        if llm is None:
            llm = build_cache(
                config.cache,
                embedder=embedder if embedder is not None else load_embedder(settings.embedder),
            )
        self.llm = llm
        self.tenants = config.cache.tenants()
        #: Buckets or a temperature bound configured (else a request without controls skips
        #: :func:`sampling`); a hit's usage reported as zeros.
        self._sampling = config.cache.bucket_size > 1 or config.cache.max_temperature is not None
        self._zero_usage = config.cache.hit_usage == "zero"
        self.prices = config.cache.prices
        self.metrics = ProxyMetrics(max_models=settings.metrics_max_models)
        self.shadow = Shadow(settings, self.metrics.registry, llm)  # semantic hits decided only
        self.limits = CallerLimits(settings.max_upstream_per_caller, self.metrics.inflight)
        #: The upstream as this worker last saw it (a probe at start, then every call).
        self.upstream_health = UpstreamHealth(self.upstream)
        self.client: httpx.AsyncClient | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._memo = RequestMemo()
        #: Upstream calls under way that identical misses share.
        self.flights = Flights()
        #: Identical misses on other replicas sharing the Redis.
        self.replicas = ReplicaFlights(llm.cache, settings.coalesce_wait)
        #: Semantic hits served, for :meth:`feedback`.
        self.served = ServedHits()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        s = self.config.proxy
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(s.upstream_timeout, connect=s.connect_timeout),
            limits=httpx.Limits(
                max_connections=s.max_connections, max_keepalive_connections=s.max_connections
            ),
            follow_redirects=False,
        )
        self._spawn(self.upstream_health.aprobe(self.client))
        if self.llm.semantic_enabled:
            # Load the model and the shared index before the first request, not during it.
            await asyncio.to_thread(self.llm.warm, True, 10.0)

    async def stop(self) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5.0)
        if self.client is not None:
            await self.client.aclose()
        await asyncio.to_thread(self.llm.close)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------ cached endpoints

    async def _read_body(self, request: Request, limit: int | None = None) -> bytes:
        """The whole body, within ``limit`` bytes (413 past it; default ``max_body_bytes``) and
        the body deadline (408 past it)."""
        limit = self.config.proxy.max_body_bytes if limit is None else limit
        too_large = RequestError(
            f"Request body too large: the limit is {limit} bytes.",
            status=413,
            code="request_too_large",
        )
        length = request.headers.get("content-length")
        if length is not None and length.isascii() and length.isdigit():
            if len(length) > 18 or int(length) > limit:
                raise too_large
        timeout = self.config.proxy.body_timeout
        try:
            # A deadline on this task: no second task on every request.
            async with asyncio.timeout(timeout):
                return await body_within(request, limit, too_large)
        except TimeoutError:
            raise RequestError(
                f"The request body did not arrive within {timeout:g} seconds.",
                status=408,
                code="request_timeout",
            ) from None
        except ClientDisconnect:  # nobody reads the answer; counted, nothing held
            raise RequestError(
                "The client disconnected before its request body arrived.",
                status=499,
                code="client_disconnected",
            ) from None

    def _prepare(
        self, api: Endpoint, raw: bytes, tenant: str, namespace: str, request: Request
    ) -> LLMRequest:
        """:func:`prepare` of the body, remembered (:class:`RequestMemo`): a repeat (an exact
        hit) skips parsing, validation and hashing."""
        headers = keyed_headers(api.path, request.headers.items()) if api.keyed_headers else ()
        key = (api.path, tenant, namespace, headers, raw)
        req = self._memo.get(key)
        if req is None:
            req = prepare(api.path, loads(raw), tenant, namespace, headers)
            self._memo.put(key, req)
        return req

    def upstream_for(self, api: Endpoint | None) -> str:
        """The base URL ``api``'s requests go to: its family's, else ``--upstream``."""
        return self.upstream if api is None else self.upstreams.get(api.family, self.upstream)

    def _hold(self, request: Request, api: Endpoint | None = None) -> UpstreamCall | Response:
        """A hold on the upstream for this request's caller, or the 429 to send when the caller
        holds :attr:`ProxySettings.max_upstream_per_caller` calls already."""
        client = request.client
        who = caller_id(caller_key(request.headers.items()), client.host if client else None)
        call = self.limits.acquire(who)
        if call is not None:
            return call
        self.metrics.errors.labels("caller_limit").inc()
        resp = refusal(
            RequestError(
                f"Too many concurrent requests from this caller: at most "
                f"{self.limits.per_caller} may wait on the upstream at once. Retry after "
                f"{RETRY_AFTER_S} s.",
                status=429,
                type="rate_limit_error",
                code="too_many_concurrent_requests",
            ),
            api,
        )
        resp.headers["retry-after"] = str(RETRY_AFTER_S)
        return resp

    async def cached(self, request: Request, api: Endpoint) -> Response:
        t0 = time.perf_counter()
        label = api.label
        try:
            controls = parse_controls(request.headers)
            raw = await self._read_body(request)
            if _BODY_CONTROLS in raw:  # LiteLLM's controls: honoured, never forwarded
                body = loads(raw)
                if BODY_CONTROLS in body:
                    controls = strip_body_controls(body, controls)
                    raw = dumps(body)
            tenant = self.tenants.for_headers(request.headers.items())
            req = self._prepare(api, raw, tenant, controls.namespace, request)
            api.check_request(req.body)
        except RequestError as exc:
            self.metrics.errors.labels(_ERROR_REASON.get(exc.status, "bad_request")).inc()
            return refusal(exc, api)
        skip = None
        if self._sampling or controls is not NO_CONTROLS:
            cfg = self.config.cache
            controls, skip = sampling(req.body, controls, cfg.bucket_size, cfg.max_temperature)
        if req.passthrough is not None:  # state upstream: forwarded, never stored
            outcome, controls = PASSTHROUGH, dataclasses.replace(controls, no_store=True)
        elif controls.no_cache or skip is not None:
            outcome = {"x-cachekit-cache": "BYPASS"}
            if skip is not None:
                outcome["x-cachekit-reason"] = skip
        else:
            found = await self.llm.alookup(
                req,
                max_age=controls.max_age,
                min_similarity=controls.threshold,
                bucket=controls.bucket or 1,
            )
            if found.hit and not self.shadow.diverts(found, controls):
                return self._hit(req, found, label, t0)
            outcome, controls = self.shadow.miss(found, req, controls)
            self.metrics.nearest(found.similarity)
            if found.reason:
                self.metrics.refused(refusal_kind(found.reason))
        if controls.only_if_cached:  # never upstream, a passed-through request included
            self.metrics.child(self.metrics.requests, label, outcome["x-cachekit-cache"]).inc()
            self.metrics.by_model(req.model, outcome["x-cachekit-cache"])
            not_cached = RequestError(
                "Not in the cache (Cache-Control: only-if-cached).",
                status=504,
                type="cache_miss",
                code="not_cached",
            )
            response = refusal(not_cached, api)
            response.headers.update(outcome)  # why not: a reason, a bucket still filling
            return response
        return await self._shared_miss(request, req, raw, controls, outcome)

    async def _shared_miss(
        self,
        request: Request,
        req: LLMRequest,
        raw: bytes,
        controls: Controls,
        outcome: dict[str, str],
    ) -> Response:
        """A miss that shares the upstream call of an identical request of the same tenant
        under way (:mod:`cachekit.proxy.inflight.flights`), else makes its own, which later
        identical requests may share. A bucket's requests each want an answer of their own."""
        counted = self.metrics.requests
        shareable = req.passthrough is None and (controls.bucket or 1) == 1
        key = (req.key, req.stream, req.include_usage) if shareable else None
        flight = self.flights.joinable(key) if key is not None else None
        if flight is not None:
            joined = await joined_response(flight)
            if joined is not None:
                self.metrics.child(counted, req.api.label, "COALESCED").inc()
                self.metrics.by_model(req.model, "COALESCED")
                return joined
        if key is not None and self.replicas.enabled:
            semantic = not self.shadow.on(controls)
            found = await self.replicas.answered(
                req, self.llm.alookup(req, max_age=controls.max_age, semantic=semantic)
            )
            if found is not None:
                return self._hit(req, found, req.api.label, time.perf_counter())
        self.metrics.child(counted, req.api.label, outcome["x-cachekit-cache"]).inc()
        self.metrics.by_model(req.model, outcome["x-cachekit-cache"])
        flight = self.flights.start(key, self.config.proxy.max_answer_bytes)
        if key is not None and self.replicas.enabled:
            flight.then(lambda: self._spawn(self.replicas.unmark(req)))
        try:
            response = await self._miss(request, req, raw, controls, outcome, flight)
        except BaseException:
            flight.fail()
            raise
        if not flight.ready.is_set():  # a whole answer (or an error the proxy made)
            flight.publish(response.status_code, dict(response.headers), bytes(response.body))
            if response.background is None:
                flight.land()
            else:  # later callers share it until it is stored
                response.background = then(response.background, flight.land)
        return response

    def _hit(self, req: LLMRequest, found: CacheLookup, label: str, t0: float) -> Response:
        kind = "SEMANTIC_HIT" if found.status is Status.SEMANTIC_HIT else "HIT"
        response = found.response or {}
        headers = {"x-cachekit-cache": kind, "age": str(int(found.age or 0))}
        if found.similarity is not None:
            headers["x-cachekit-similarity"] = f"{found.similarity:.4f}"
        if found.status is Status.SEMANTIC_HIT:
            response = self._semantic_answer(req, response)
            if "id" in response:
                headers["x-cachekit-response-id"] = str(response["id"])
        usage = response.get("usage")
        counts = req.api.usage_counts(usage)
        if self._zero_usage:  # the tokens saved go in a header instead
            response = req.api.without_usage(response)
            if counts is not None:
                headers["x-cachekit-tokens-saved"] = f"{counts[0] + counts[1]}"
        model = str(response.get("model") or req.model)[:80]
        metrics = self.metrics
        metrics.child(metrics.requests, label, kind).inc()
        metrics.by_model(req.model, kind)
        metrics.saved(model, counts, self.prices.cost(model, usage))
        metrics.child(metrics.hit_latency, kind).observe(time.perf_counter() - t0)
        if req.stream:
            events = req.api.replay(
                response, include_usage=req.include_usage, pieces=self.config.proxy.stream_pieces
            )
            return StreamingResponse(aiter(events), media_type="text/event-stream", headers=headers)
        return Response(dumps(response), media_type=JSON, headers=headers)

    # ------------------------------------------------------------------ feedback

    def _semantic_answer(self, req: LLMRequest, response: dict[str, Any]) -> dict[str, Any]:
        """A semantic hit under a fresh id of its own: the stored answer's id is another
        request's, and upstream (Responses API) it names the other prompt's history, which a
        client continuing from it would continue. A request continuing from a fresh id is
        refused with the reason (:func:`~cachekit.llm.hit_ids.check_continuable`). Remembered
        with its tenant for :meth:`feedback`."""
        rid = req.api.hit_id(response.get("id"))
        ref = self.llm.feedback_ref(req)
        if ref is not None:
            self.served.remember(rid, req.tenant, ref)
        return {**response, "id": rid}

    async def feedback(self, request: Request) -> Response:
        """``POST /v1/cachekit/feedback`` ``{"id": ..., "correct": false}``: 200
        ``{"recorded": bool}``; 400 for a bad body; 404 when no semantic hit of the caller's
        tenant was sent with that id by this process (or it was reported already)."""
        try:
            tenant = self.tenants.for_headers(request.headers.items())
            rid, correct = parse_feedback(await self._read_body(request))
        except RequestError as exc:
            self.metrics.errors.labels(_ERROR_REASON.get(exc.status, "bad_request")).inc()
            return Response(dumps(exc.body()), status_code=exc.status, media_type=JSON)
        ref = self.served.take(rid, tenant)
        if ref is None:
            return error_response(
                404, UNKNOWN_ID, type="not_found", code="unknown_response_id", param="id"
            )
        recorded = await asyncio.to_thread(self.llm.feedback, ref, correct)
        verdict = "correct" if correct else "wrong"
        self.metrics.feedback.labels(verdict, "true" if recorded else "false").inc()
        return Response(dumps({"recorded": recorded}), media_type=JSON)

    def _upstream_error(self, exc: Exception, api: Endpoint | None = None) -> Response:
        self.upstream_health.record(*describe(None, exc))
        error = upstream_failure(exc)
        self.metrics.errors.labels(error.code or "upstream_unreachable").inc()
        return refusal(error, api)

    async def _miss(
        self,
        request: Request,
        req: LLMRequest,
        raw: bytes,
        controls: Controls,
        outcome: dict[str, str],
        flight: Flight,
    ) -> Response:
        """Ask the upstream, answer the client, and store the answer when it may be: a whole
        response after it was sent, a stream (relayed event by event through ``flight``, which
        identical requests may share) once it completed."""
        stream = req.stream
        # Ask for usage (tokens saved are counted from it), and drop it on the way.
        asked = None
        if stream and self.config.proxy.stream_usage:
            asked = req.api.upstream_body(req.body)
        inject = asked is not None
        content = raw if asked is None else dumps(asked)
        call = self._hold(request, req.api)
        if isinstance(call, Response):
            return tagged(call, outcome)
        t0 = time.perf_counter()
        relayed = False  # from then on, the relay releases the hold, however it ends
        try:
            resp = await self._send(request, req, content, stream, call)
            if isinstance(resp, Response):  # the upstream could not be asked
                return tagged(resp, outcome)
            if stream:
                out = response_headers(resp.headers, UPSTREAM_DROP_RESPONSE)
                out.update(outcome)
                relayed = True
                return await self._relay_response(
                    req, resp, inject, controls, out, (t0, call), flight
                )
        finally:
            if not relayed:
                self._left(req, t0, call)
        out = response_headers(resp.headers, UPSTREAM_DROP_RESPONSE)
        out.update(outcome)
        task = None
        if len(resp.content) > self.config.proxy.max_answer_bytes:
            self.metrics.not_kept("too_large")
        elif not controls.no_store:
            task = BackgroundTask(self._store_answer, req, resp.status_code, resp.content, controls)
        return Response(resp.content, status_code=resp.status_code, headers=out, background=task)

    async def _send(
        self, request: Request, req: LLMRequest, content: bytes, stream: bool, call: UpstreamCall
    ) -> httpx.Response | Response:
        """POST ``content`` to ``req``'s endpoint upstream, counted in flight from now until
        ``call`` is released (the caller's business, on every exit path): the upstream's
        response, or the error response to send when the upstream could not be asked."""
        assert self.client is not None
        upstream_req = self.client.build_request(
            "POST",
            self.upstream_for(req.api) + req.endpoint,
            content=content,
            headers=forward_headers(request.headers, identity=True),
        )
        call.sent()
        try:
            resp = await self.upstream_health.send(self.client, upstream_req, stream)
        except httpx.HTTPError as exc:
            return self._upstream_error(exc, req.api)
        return resp

    def _left(self, req: LLMRequest, t0: float, call: UpstreamCall) -> None:
        """One upstream call ended: its hold released, its latency recorded."""
        call.release()
        self.metrics.upstream_latency.labels(req.api.label).observe(time.perf_counter() - t0)

    async def _store_answer(
        self, req: LLMRequest, status: int, content: bytes, c: Controls
    ) -> None:
        try:
            body = json.loads(content) if 200 <= status < 300 else None
        except ValueError:
            body = None
        await self._store(req, status, body, c)

    async def _store(self, req: LLMRequest, status: int, body: Any, controls: Controls) -> None:
        if controls.shadowed is not None:  # scored against what would have been served
            self._spawn(self.shadow.compare(req, controls.shadowed, status, body))
        ok, reason = self.llm.cacheable(req.endpoint, status, body)
        if not ok:
            self.metrics.not_kept(reason.split(" ")[0])
            return
        if await self.llm.astore(req, body, ttl=controls.ttl, bucket=controls.bucket or 1):
            self.metrics.stored.inc()

    async def _relay_response(
        self,
        req: LLMRequest,
        resp: httpx.Response,
        drop_usage: bool,
        controls: Controls,
        out: dict[str, str],
        held: tuple[float, UpstreamCall],
        flight: Flight,
    ) -> Response:
        """The client's response to an upstream stream: relayed through ``flight`` by a task of
        its own (and stored once complete) when it succeeded, else the upstream's error body as
        it came. The task stops when every client reading it has left."""
        t0, call = held
        release = releaser(resp, lambda: self._left(req, t0, call))
        if not 200 <= resp.status_code < 300:
            try:
                data = await resp.aread()
            except httpx.HTTPError as exc:
                return tagged(self._upstream_error(exc, req.api), out)
            finally:
                await release()
            self.metrics.not_kept("status")
            return Response(data, status_code=resp.status_code, headers=out)
        flight.publish(resp.status_code, out, None)
        sub = flight.subscribe()
        pump = self._spawn(self._pump(req, resp, drop_usage, controls, release, flight))
        flight.task, flight.release = pump, release
        return RelayResponse(sub.stream(), sub.leave, status_code=resp.status_code, headers=out)

    async def _pump(
        self,
        req: LLMRequest,
        resp: httpx.Response,
        drop_usage: bool,
        controls: Controls,
        release: Callable[[], Awaitable[None]],
        flight: Flight,
    ) -> None:
        """:func:`~cachekit.proxy.inflight.relay.pump` the stream into ``flight``; the
        assembled answer is stored only if the stream completed."""
        asm = req.api.assembler(max_answer_bytes=self.config.proxy.max_answer_bytes)
        finished = False
        try:
            drop = req.api.drop_event if drop_usage else None
            finished = await pump(resp, asm, drop, flight, release)
        finally:
            why = asm.not_stored_reason if finished else "incomplete_stream"
            if why is not None:
                self.metrics.not_kept(why)
            elif not controls.no_store:
                self._spawn(self._store(req, 200, asm.result(), controls))

    # ------------------------------------------------------------------ everything else

    async def passthrough(self, request: Request) -> Response:
        """Any other ``/v1/...`` request, forwarded as it came once its body has arrived whole
        (within ``max_passthrough_body_bytes`` and the body deadline), under the caller's bound
        on upstream calls; the answer relayed as raw bytes."""
        assert self.client is not None
        api = api_under(request.url.path)
        try:
            caller_key(request.headers.items())  # one credential, as on the cached endpoints
            check_continuable(response_id_in(request.url.path), status=404)
        except RequestError as exc:
            self.metrics.errors.labels("bad_request").inc()
            return tagged(refusal(exc, api), PASSTHROUGH)
        self.metrics.passthrough.inc()
        call = self._hold(request, api)
        if isinstance(call, Response):
            return tagged(call, PASSTHROUGH)
        response = None
        try:
            response = await self._forward(request, call, api)
            return response
        finally:
            if not isinstance(response, RelayResponse):  # a relay releases it when it ends
                call.release()

    async def _forward(
        self, request: Request, call: UpstreamCall, api: Endpoint | None = None
    ) -> Response:
        """:meth:`passthrough`'s body read and upstream call: an error response, or the relay
        of the upstream's answer, which owns ``call`` and releases it however it ends."""
        assert self.client is not None
        content = None
        if "content-length" in request.headers or "transfer-encoding" in request.headers:
            try:
                content = await self._read_body(
                    request, self.config.proxy.max_passthrough_body_bytes
                )
            except RequestError as exc:
                self.metrics.errors.labels(_ERROR_REASON.get(exc.status, "bad_request")).inc()
                return tagged(refusal(exc, api), PASSTHROUGH)
        url = self.upstream_for(api) + request.url.path
        if request.url.query:
            url += "?" + request.url.query
        upstream_req = self.client.build_request(
            request.method,
            url,
            headers=forward_headers(request.headers, identity=False),
            content=content,
        )
        call.sent()
        try:
            resp = await self.upstream_health.send(self.client, upstream_req, True)
        except httpx.HTTPError as exc:
            return tagged(self._upstream_error(exc, api), PASSTHROUGH)

        async def release() -> None:
            try:
                await resp.aclose()
            finally:
                call.release()

        # Raw bytes, encoding untouched: content-encoding and content-length stay valid.
        headers = response_headers(
            resp.headers, HOP_BY_HOP - {"content-length"} | {"date", "server"}
        )
        headers.update(PASSTHROUGH)
        return RelayResponse(
            resp.aiter_raw(), release, status_code=resp.status_code, headers=headers
        )

    async def render_metrics(self) -> bytes:
        """``GET /metrics``, rendered on a worker thread: never on the event loop, which every
        request shares (label values are bounded: :class:`~cachekit.proxy.metrics.LabelFolder`)."""
        return await asyncio.to_thread(self.metrics.render)

    def health(self) -> dict[str, Any]:
        """``GET /healthz``: :func:`~cachekit.proxy.upstream.health_report`."""
        inflight, semantic = self.metrics.inflight.now, self.llm.semantic_health()
        return health_report(self.llm.cache.health(), self.upstream_health, inflight, semantic)


_BODY_CONTROLS = BODY_CONTROLS.encode()

#: The errors metric's reason for a request error's status (anything else: bad_request).
_ERROR_REASON = {413: "too_large", 408: "body_timeout", 499: "client_disconnected"}


def create_app(
    config: ProxyConfig, *, llm: LLMCache | None = None, embedder: Any = None
) -> Starlette:
    """The ASGI app for ``config`` (Starlette: the proxy reads and writes raw requests, so a
    router is all it needs). ``llm``: an already built cache (tests, embedding the proxy in
    another app); ``embedder``: replaces the configured one."""
    proxy = Proxy(config, llm, embedder)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await proxy.start()
        try:
            yield
        finally:
            await proxy.stop()

    def cached(api: Endpoint) -> Callable[[Request], Awaitable[Response]]:
        async def route(request: Request) -> Response:
            return await proxy.cached(request, api)

        return route

    async def healthz(request: Request) -> Response:
        return JSONResponse(proxy.health())

    async def metrics(request: Request) -> Response:
        return Response(await proxy.render_metrics(), media_type=CONTENT_TYPE_LATEST)

    routes = [Route(api.path, cached(api), methods=["POST"]) for api in ENDPOINTS.values()]
    routes += [
        Route(FEEDBACK_PATH, proxy.feedback, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *dashboard_routes(proxy),
        *admin_routes(proxy),
        Route("/v1/{path:path}", proxy.passthrough, methods=PASSTHROUGH_METHODS),
    ]
    app = Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={StarletteHTTPException: http_error}
    )
    app.state.proxy = proxy
    return trace_requests(app, config.proxy.otel)  # --otel: spans per request (docs/tracing.md)


#: Every method a passthrough route forwards.
PASSTHROUGH_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def app_from_env() -> Starlette:
    """The app for uvicorn worker processes: settings from ``$CACHEKIT_SERVE_CONFIG``."""
    return create_app(ProxyConfig.from_env(os.environ[ENV_VAR]))
