"""The proxy's HTTP protocol: uvicorn's httptools protocol with a deadline on request headers.

uvicorn times out idle kept-alive connections but not a client that sends its headers slowly: a
few hundred connections sending a byte a second would each be held open without end. Here a
timer starts when a connection opens and when each request on it begins, and a connection whose
headers are not complete by then is closed. The body has its own deadline in the app
(``--body-timeout``).

``cachekit serve`` names :class:`HeaderDeadlineProtocol` as uvicorn's ``http`` protocol. Worker
processes import it afresh, so the deadline is read once from the serve config in the
environment (``--header-timeout``)."""

from __future__ import annotations

import asyncio
import os

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from cachekit.proxy.config import ENV_VAR, ProxyConfig, ProxySettings

__all__ = ["HeaderDeadlineProtocol", "header_timeout"]

_timeout: list[float] = []


def header_timeout() -> float:
    """Seconds a client has to send a request's headers: the serve config's
    ``header_timeout`` (read once per process), else its default."""
    if not _timeout:
        raw = os.environ.get(ENV_VAR)
        config = ProxyConfig.from_env(raw).proxy if raw else ProxySettings()
        _timeout.append(config.header_timeout)
    return _timeout[0]


class HeaderDeadlineProtocol(HttpToolsProtocol):
    """:class:`HttpToolsProtocol` that closes a connection whose request headers have not all
    arrived within :func:`header_timeout` seconds of it opening, or of the request beginning."""

    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(header_timeout(), self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()
