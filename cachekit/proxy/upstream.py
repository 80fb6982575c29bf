"""What the proxy knows of its upstream: a probe at start, and every call's outcome since.

``cachekit serve`` probes the upstream once before it starts (``GET /v1/models``) and prints what
it found; each worker probes again in the background and then keeps the outcome of every upstream
call, which ``GET /healthz`` reports. A wrong upstream is said at once, with the fix, instead of
surfacing as a 502 or a bare 404 on the first request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from cachekit import Health
from cachekit._core.tracing import client_span, tracing_enabled
from cachekit.llm import RequestError

__all__ = [
    "PROBE_PATH",
    "UpstreamHealth",
    "describe",
    "health_report",
    "probe",
    "upstream_failure",
]

#: What the probe asks: listed by every OpenAI-compatible server, cheap, and free of charge.
PROBE_PATH = "/v1/models"


def describe(status: int | None, error: BaseException | None) -> tuple[bool, str]:
    """Whether the probe reached the upstream, and what it found, in words (with the fix)."""
    if error is not None:
        if isinstance(error, httpx.TimeoutException):
            return False, f"no answer in time ({type(error).__name__}): check the host and port"
        return False, (
            f"not reachable ({type(error).__name__}: {error}): check --upstream (scheme, host, "
            "port); requests get 502 until it answers"
        )
    if status in (401, 403):
        return (
            True,
            f"reachable (GET {PROBE_PATH}: {status}, it wants an API key: clients send theirs)",
        )
    if status == 404:
        return True, (
            f"reachable, but GET {PROBE_PATH} answered 404: is --upstream the server's base URL "
            "(https://host or https://host/v1)?"
        )
    return True, f"reachable (GET {PROBE_PATH}: {status})"


def probe(base: str, timeout: float = 5.0) -> tuple[bool, str]:
    """Ask ``base`` (the upstream without ``/v1``) for its model list once; never raises."""
    try:
        resp = httpx.get(base + PROBE_PATH, timeout=timeout, follow_redirects=False)
    except httpx.HTTPError as exc:
        return describe(None, exc)
    return describe(resp.status_code, None)


@dataclass
class UpstreamHealth:
    """The upstream as this worker last saw it: ``reachable`` is None until the first probe or
    call; ``detail`` says what was found."""

    url: str
    reachable: bool | None = None
    detail: str | None = None

    def record(self, reachable: bool, detail: str) -> None:
        self.reachable, self.detail = reachable, detail

    def reached(self) -> None:
        """An upstream call got an answer (any status)."""
        if self.reachable is not True:
            self.record(True, "reachable (it answered a request)")

    async def send(
        self, client: httpx.AsyncClient, request: httpx.Request, stream: bool
    ) -> httpx.Response:
        """One upstream call, ``client.send(request)``, its answer recorded (:meth:`reached`;
        an error is raised for the caller to answer). With tracing on (docs/tracing.md), inside
        a client span ``cachekit.upstream`` (method, path, status; until the answer's headers)
        whose trace context the request carries upstream in ``traceparent``/``tracestate``."""
        if not tracing_enabled():
            resp = await client.send(request, stream=stream)
        else:
            attributes = {"http.request.method": request.method, "url.path": request.url.path}
            with client_span("cachekit.upstream", **attributes) as traced:
                traced.inject(request.headers)
                resp = await client.send(request, stream=stream)
                traced.set_attribute("http.response.status_code", resp.status_code)
        self.reached()
        return resp

    async def aprobe(self, client: httpx.AsyncClient, timeout: float = 5.0) -> None:
        try:
            resp = await client.get(self.url + PROBE_PATH, timeout=timeout)
        except httpx.HTTPError as exc:
            self.record(*describe(None, exc))
            return
        self.record(*describe(resp.status_code, None))

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "reachable": self.reachable, "detail": self.detail}


def upstream_failure(exc: Exception) -> RequestError:
    """The refusal sent when the upstream could not answer: 504 ``upstream_timeout`` for a
    timeout, else 502 ``upstream_unreachable`` (the code is the errors metric's reason)."""
    if isinstance(exc, httpx.TimeoutException):
        return RequestError(
            f"The upstream did not answer in time ({exc!r}).",
            status=504,
            type="upstream_error",
            code="upstream_timeout",
        )
    return RequestError(
        f"The upstream could not be reached ({exc!r}).",
        status=502,
        type="upstream_error",
        code="upstream_unreachable",
    )


def health_report(
    shared: Health, up: UpstreamHealth, in_flight: int, semantic: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``GET /healthz``: ``status`` is ``ok``, or ``degraded`` with each problem in words in
    ``problems`` (the proxy still answers: Redis down costs misses, an upstream down 502s, a
    shared semantic entry of another embedder is never a candidate). ``semantic``:
    :meth:`~cachekit.llm.LLMCache.semantic_health`."""
    problems: list[str] = []
    if semantic and semantic.get("embedder_mismatch"):
        foreign = ", ".join(semantic.get("foreign_embedders") or ())
        problems.append(
            f"semantic: {semantic['embedder_mismatch']} shared entries were written by another "
            f"embedder ({foreign}) and are never candidates here ({semantic.get('embedder')}). "
            "Fix: re-embed them (cachekit reembed) or purge them"
        )
    redis: dict[str, Any] | None = None
    if shared.shared_tier:
        redis = shared.to_dict()
        if not shared.ok:
            err = shared.last_error
            why = f"{err.cause}. Fix: {err.fix}" if err else f"circuit {shared.breaker_state}"
            problems.append(f"redis {shared.target}: {why} (lookups miss meanwhile)")
    if up.reachable is False:
        problems.append(f"upstream {up.url}: {up.detail}")
    return {
        "status": "degraded" if problems else "ok",
        "problems": problems,
        "redis": redis,
        "upstream": up.to_dict(),
        "upstream_in_flight": in_flight,
        "semantic": semantic,
    }
