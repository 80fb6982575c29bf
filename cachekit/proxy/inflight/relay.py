"""How the proxy relays an upstream stream: one task reads it into a
:class:`~cachekit.proxy.inflight.flights.Flight` (every client reading it follows there) and
assembles the answer to store; its end is released once, however it ends. HTTP and events only:
whether the answer is stored is the proxy's business."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from starlette.responses import Response

from cachekit.llm.streaming import StreamAssembler
from cachekit.proxy.http import RelayResponse
from cachekit.proxy.inflight.flights import Flight

__all__ = ["joined_response", "pump", "releaser"]

log = logging.getLogger("cachekit.proxy")


def releaser(resp: httpx.Response, left: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    """What ends one upstream stream, once: close it, then ``left()`` (leave the in-flight
    gauge, record the latency). The pump calls it when it ends; the response too, for a client
    gone before the pump ever started."""
    done = False

    async def release() -> None:
        nonlocal done
        if done:
            return
        done = True
        try:
            await resp.aclose()
        finally:
            left()

    return release


async def pump(
    resp: httpx.Response,
    asm: StreamAssembler,
    drop: Callable[[Any], bool] | None,
    flight: Flight,
    release: Callable[[], Awaitable[None]],
) -> bool:
    """Upstream events into ``flight`` as they arrive, each fed to ``asm`` (events ``drop``
    says were asked for by the proxy alone are not relayed); whether the stream ended whole.
    A broken upstream stream breaks the clients' too
    (:class:`~cachekit.proxy.inflight.flights.BrokenStream`)."""
    finished = False
    try:
        async for data in resp.aiter_raw():
            events = asm.feed_events(data)
            if drop is not None:
                events = [(e, c) for e, c in events if not drop(c)]
            out = b"".join(e for e, _ in events)
            if out:
                await flight.add(out)
        if asm.rest():
            await flight.add(asm.rest())  # an unterminated tail: relayed as it came, never stored
        finished = True
    except Exception as exc:  # the upstream broke off
        log.info("upstream stream broke off: %r", exc)
    finally:
        flight.end(broken=not finished)
        await release()
    return finished


async def joined_response(flight: Flight) -> Response | None:
    """The answer of an identical request's upstream call, or ``None`` when it failed or
    can no longer be read from its start (then this request asks on its own)."""
    flight.waiting += 1
    try:
        await flight.ready.wait()
    finally:
        flight.waiting -= 1
    if flight.failed:
        return None
    headers = {**flight.headers, "x-cachekit-cache": "COALESCED"}
    if flight.body is not None:
        return Response(flight.body, status_code=flight.status, headers=headers)
    if not flight.joinable():
        return None
    sub = flight.subscribe()
    return RelayResponse(sub.stream(), sub.leave, status_code=flight.status, headers=headers)
