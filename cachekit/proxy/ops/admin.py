"""The proxy's admin API (docs/admin.md), added by :func:`admin_routes` only when an admin key is
configured (``--admin-key``, ``$CACHEKIT_ADMIN_KEY`` or ``[proxy] admin_key``); without one the
routes do not exist (404).

* ``POST /admin/purge`` ``{"tenant_key": ..., "tenant": ..., "model": ..., "endpoint": ...}``
  (any of them, all must match) or ``{"all": true}``: removes the matching exact and semantic
  entries here, in the Redis and on every replica sharing it; answers ``{"removed": n, "exact":
  n, "semantic": n, "filter": {...}}``.
* ``GET /admin/entries?tenant=...&model=...&endpoint=...&page=1&page_size=50``: a page of the
  stored entries (:func:`cachekit.llm.admin.list_entries`).
* ``GET /admin/entries/{key}``: one entry in full, with its stored answer (404 when absent).

Every route needs ``Authorization: Bearer <admin key>`` (401 otherwise; compared in constant
time). A tenant's API key never opens them. A bad filter, an empty purge body or a bad page is a
400 naming the problem, never a purge of everything; a failing Redis is a 503 (nothing is said to
be removed that was not). Each action is logged once, at WARNING on ``cachekit.proxy.ops.admin``
(who asked: the client address; what: the filter, the tenant as its hashed id; the outcome).
Scans and purges run on a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from cachekit.llm.admin import FILTERS, EntryFilter, get_entry, list_entries, purge
from cachekit.llm.errors import RequestError
from cachekit.proxy.http import JSON, body_within, dumps, error_response

if TYPE_CHECKING:
    from cachekit.proxy.app import Proxy

__all__ = ["MAX_ADMIN_BODY", "Admin", "admin_routes"]

log = logging.getLogger("cachekit.proxy.ops.admin")

#: Largest admin request body (bytes).
MAX_ADMIN_BODY = 64 * 1024
_PAGING = ("page", "page_size")


def admin_routes(proxy: Proxy) -> list[Route]:
    """The admin routes, or none without an admin key."""
    key = proxy.config.admin_key()
    if not key:
        return []
    admin = Admin(proxy, key)
    return [
        Route("/admin/purge", admin.purge, methods=["POST"]),
        Route("/admin/entries", admin.entries, methods=["GET"]),
        Route("/admin/entries/{key:path}", admin.entry, methods=["GET"]),
    ]


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _who(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"


class Admin:
    """The admin routes of ``proxy``, opened by ``key``."""

    def __init__(self, proxy: Proxy, key: str) -> None:
        self.proxy = proxy
        self._key = _digest(key)  # digests: equal lengths, compared in constant time

    def _allowed(self, request: Request) -> bool:
        scheme, _, token = request.headers.get("authorization", "").strip().partition(" ")
        given = _digest(token.strip() if scheme.lower() == "bearer" else "")
        return hmac.compare_digest(given, self._key)

    def _refused(self, request: Request) -> Response:
        log.warning("admin %s %s from %s refused: no valid admin key", *_what(request))
        response = error_response(
            401,
            "the admin API needs Authorization: Bearer <admin key>",
            type="authentication_error",
            code="invalid_admin_key",
        )
        response.headers["www-authenticate"] = "Bearer"
        return response

    async def purge(self, request: Request) -> Response:
        """``POST /admin/purge``."""
        if not self._allowed(request):
            return self._refused(request)
        try:
            flt = EntryFilter.parse(await _json_body(request), self.proxy.tenants)
        except RequestError as exc:
            return _bad(request, exc)
        try:
            removed = await asyncio.to_thread(purge, self.proxy.llm, flt)
        except Exception as exc:
            return _failed(request, flt, exc)
        result = {**removed, "filter": flt.describe()}
        log.warning("admin purge from %s: %s", _who(request), json.dumps(result, sort_keys=True))
        return Response(dumps(result), media_type=JSON)

    async def entries(self, request: Request) -> Response:
        """``GET /admin/entries``."""
        if not self._allowed(request):
            return self._refused(request)
        query = dict(request.query_params)
        flt = None
        try:
            paging = {k: _whole(k, query.pop(k)) for k in _PAGING if k in query}
            if "all" in query:
                raise RequestError(
                    "a listing takes no all (give no filter)", param="all", code="bad_filter"
                )
            flt = EntryFilter.parse(query, self.proxy.tenants, purge=False) if query else None
            page = await asyncio.to_thread(list_entries, self.proxy.llm, flt, **paging)
        except RequestError as exc:
            return _bad(request, exc)
        except Exception as exc:
            return _failed(request, flt, exc)
        described = flt.describe() if flt is not None else {}
        log.warning(
            "admin listing from %s: filter %s, page %d: %d entries",
            _who(request),
            json.dumps(described, sort_keys=True),
            page["page"],
            len(page["entries"]),
        )
        return Response(dumps(page), media_type=JSON)

    async def entry(self, request: Request) -> Response:
        """``GET /admin/entries/{key}``."""
        if not self._allowed(request):
            return self._refused(request)
        key = request.path_params["key"]
        try:
            found = await asyncio.to_thread(get_entry, self.proxy.llm, key)
        except Exception as exc:
            return _failed(request, None, exc)
        log.warning("admin entry %s from %s: %s", key, _who(request), "found" if found else "none")
        if found is None:
            return error_response(404, f"no entry {key!r}", type="not_found", code="no_entry")
        return Response(dumps(found), media_type=JSON)


def _what(request: Request) -> tuple[str, str, str]:
    return request.method, request.url.path, _who(request)


def _whole(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise RequestError(f"{name} must be a whole number, got {text!r}", param=name) from None


async def _json_body(request: Request) -> Any:
    too_large = RequestError(f"the body is over {MAX_ADMIN_BODY} bytes", status=413)
    raw = await body_within(request, MAX_ADMIN_BODY, too_large)
    if not raw.strip():
        raise RequestError(
            f"the body must be a JSON object of filters ({', '.join(FILTERS)}); "
            '{"all": true} removes every entry',
            code="empty_filter",
        )
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"the body is not JSON: {exc}", code="bad_filter") from None


def _bad(request: Request, exc: RequestError) -> Response:
    log.warning("admin %s %s from %s refused: %s", *_what(request), exc.message)
    return Response(dumps(exc.body()), status_code=exc.status, media_type=JSON)


def _failed(request: Request, flt: EntryFilter | None, exc: Exception) -> Response:
    described = flt.describe() if flt is not None else {}
    log.warning(
        "admin %s %s from %s failed (filter %s): %r",
        *_what(request),
        json.dumps(described, sort_keys=True),
        exc,
    )
    return error_response(
        503,
        f"the cache's shared tier failed: {type(exc).__name__}: {exc}; a purge may have "
        "removed part of its entries: retry it",
        type="service_unavailable",
        code="shared_tier_failed",
    )
