"""The proxy's live dashboard (``GET /dashboard``): routes added by :func:`dashboard_routes`."""

from __future__ import annotations

from typing import Any

from starlette.routing import Route

__all__ = ["dashboard_routes"]


def dashboard_routes(proxy: Any) -> list[Route]:
    """The dashboard's routes for ``proxy`` (a :class:`cachekit.proxy.app.Proxy`)."""
    return []
