"""The proxy's stream relay in process, over ASGI: a client gone before the first byte still
releases the upstream stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

import pytest

from cachekit.proxy.app import create_app
from cachekit.proxy.config import ProxyConfig
from cachekit.testing.upstream import FakeUpstream

CHAT = "/v1/chat/completions"


def _scope(body: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": CHAT,
        "raw_path": CHAT.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"authorization", b"Bearer sk-relay"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }


@pytest.mark.parametrize("when", ["before the first byte", "after the first chunk"])
def test_a_client_gone_mid_relay_releases_the_upstream_stream(
    upstream: FakeUpstream, when: str
) -> None:
    config = ProxyConfig.load(None, {"upstream": upstream.url, "semantic": False})
    app = create_app(config)
    proxy = app.state.proxy
    body = json.dumps(
        {
            "model": "fake-gated",  # two chunks, then waits: the stream is open when we leave
            "stream": True,
            "messages": [{"role": "user", "content": f"relay {when}"}],
        }
    ).encode()
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        if not sent:
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)  # the client says nothing more
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message["type"])
        gone_at = "http.response.start" if when.startswith("before") else "http.response.body"
        if message["type"] == gone_at:
            raise OSError("the client has gone")

    async def run() -> int:
        await proxy.start()
        try:
            with pytest.raises(Exception):  # noqa: B017 - Starlette's ClientDisconnect or ours
                await app(_scope(body), receive, send)
            return int(proxy.metrics.inflight.now)
        finally:
            upstream.gate.set()
            await proxy.stop()
            upstream.gate.clear()

    assert asyncio.run(run()) == 0
    assert "http.response.start" in sent
