"""One client cannot starve the others: ``cachekit serve`` bounds the upstream calls a caller
holds, reads every body (passthrough included) whole and within its deadline before asking the
upstream, and gives back everything a request held on every exit path. Real HTTP to a proxy
subprocess in front of the fake upstream; raw sockets send what a well-behaved client never would.
Also the byte-bounded request memo and the bounded metric labels, in-process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from urllib.parse import urlsplit

import httpx
import pytest
from test_proxy import CHAT, MODEL, ProxyProcess, msgs

from cachekit.llm import prepare
from cachekit.proxy.app import create_app
from cachekit.proxy.config import ProxyConfig
from cachekit.proxy.fairness import CallerLimits, caller_id
from cachekit.proxy.memo import RequestMemo, estimated_size, parsed_size
from cachekit.proxy.metrics import OTHER, InFlight, LabelFolder, ProxyMetrics
from cachekit.testing.clock import wait_until
from cachekit.testing.upstream import FakeUpstream

PER_CALLER = 4


@pytest.fixture(scope="module")
def proxy(upstream: FakeUpstream) -> Iterator[ProxyProcess]:
    p = ProxyProcess(
        upstream.url,
        "--no-semantic",
        "--max-upstream-per-caller",
        str(PER_CALLER),
        "--body-timeout",
        "2",
        "--max-passthrough-body-bytes",
        "65536",
        embedder=None,
        threshold=None,
    ).start()
    try:
        yield p
    finally:
        p.stop()


def address(proxy: ProxyProcess) -> tuple[str, int]:
    url = urlsplit(proxy.url)
    assert url.hostname and url.port
    return url.hostname, url.port


def hold(proxy: ProxyProcess, stack: ExitStack, path: str = "/v1/files") -> socket.socket:
    """A keyless passthrough POST that announces a body and never sends it."""
    sock = stack.enter_context(socket.create_connection(address(proxy), timeout=15.0))
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    sock.sendall((head + "Content-Length: 1000\r\n\r\n").encode() + b'{"purpose"')
    return sock


def in_flight(proxy: ProxyProcess) -> int:
    return int(httpx.get(proxy.url + "/healthz", timeout=10.0).json()["upstream_in_flight"])


def chat(proxy: ProxyProcess, key: str | None, **body: object) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    question = f"What is request {uuid.uuid4().hex} about?"
    return httpx.post(
        proxy.url + CHAT,
        json={"model": MODEL, "messages": msgs(question), **body},
        headers=headers,
        timeout=20.0,
    )


def test_a_caller_past_its_bound_gets_429_and_others_are_served(proxy: ProxyProcess) -> None:
    with ExitStack() as stack:
        for _ in range(PER_CALLER):
            hold(proxy, stack)
        wait_until(lambda: proxy.metric("cachekit_proxy_passthrough_requests_total") >= PER_CALLER)
        over = httpx.post(proxy.url + "/v1/files", content=b"{}", timeout=10.0)
        assert over.status_code == 429, over.text
        assert over.headers["retry-after"] == "1"
        assert over.headers["x-cachekit-cache"] == "PASSTHROUGH"
        assert over.json()["error"]["code"] == "too_many_concurrent_requests"
        # Another tenant's miss, and a passthrough call of its own, go through meanwhile.
        other = chat(proxy, f"sk-other-{uuid.uuid4().hex}")
        assert other.status_code == 200 and other.headers["x-cachekit-cache"] == "MISS"
        models = httpx.get(
            proxy.url + "/v1/models", headers={"authorization": "Bearer sk-b"}, timeout=10.0
        )
        assert models.status_code == 200
        assert proxy.metric("cachekit_proxy_errors_total", reason="caller_limit") >= 1


def test_a_passthrough_body_over_its_cap_is_413(proxy: ProxyProcess) -> None:
    r = httpx.post(proxy.url + "/v1/echo/upload", content=b"x" * 70_000, timeout=10.0)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    ok = httpx.post(proxy.url + "/v1/echo/upload", content=b"y" * 60_000, timeout=10.0)
    assert ok.status_code == 200 and len(ok.json()["body"]) == 60_000


@pytest.mark.parametrize("where", ["mid-body", "mid-stream"])
def test_disconnects_give_back_what_they_held(proxy: ProxyProcess, where: str) -> None:
    """Clients that hang up mid-body or mid-relay, 3 times the caller's bound: the gauge is back
    to 0, and the caller (by its address) is not held at its bound."""
    for _ in range(3 * PER_CALLER):
        with socket.create_connection(address(proxy), timeout=15.0) as sock:
            if where == "mid-body":
                sock.sendall(
                    b"POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc"
                )
            else:
                sock.sendall(b"GET /v1/stream-echo?n=100000 HTTP/1.1\r\nHost: x\r\n\r\n")
                assert sock.recv(1024).startswith(b"HTTP/1.1 200")
        # Each hang-up gives its hold back (the proxy sees the disconnect a moment later): a
        # leak would keep the gauge up for good, and the caller at its bound after 4 of them.
        wait_until(lambda: in_flight(proxy) == 0, timeout=10.0)
    ok = httpx.get(proxy.url + "/v1/stream-echo?n=2", timeout=10.0)
    assert ok.status_code == 200 and ok.text == "line 0\nline 1\n"
    assert in_flight(proxy) == 0


# ---------------------------------------------------------------------- in-process units


def test_caller_limits_bound_each_caller_and_forget_idle_ones() -> None:
    inflight = InFlight()
    limits = CallerLimits(2, inflight)
    a, b = caller_id("sk-a", "10.0.0.1"), caller_id(None, "10.0.0.1")
    assert a != b and "sk-a" not in a and b == "addr:10.0.0.1"
    held = [limits.acquire(a), limits.acquire(a)]
    assert all(held) and limits.acquire(a) is None and limits.acquire(b) is not None
    held[0].sent()  # type: ignore[union-attr]
    assert inflight.now == 1
    for call in held:
        call.release()  # type: ignore[union-attr]
        call.release()  # type: ignore[union-attr]  # twice: given back once
    assert inflight.now == 0 and limits.holding(a) == 0
    assert limits.callers == 1  # b's hold only; a forgotten
    assert CallerLimits(0, inflight).acquire(a) is not None  # 0: no bound


def inflated(i: int) -> bytes:
    """A chat body of about 16 KB that parses into thousands of objects."""
    parts = ",".join(["{}"] * 5000)
    return (
        f'{{"model":"m{i}","messages":[{{"role":"user","content":"hi {i}"}}],'
        f'"metadata":{{"x":[{parts}]}}}}'
    ).encode()


def test_the_memo_is_bounded_in_bytes_whatever_the_bodies_parse_into() -> None:
    """A small budget filled many times over with inflating bodies: what stays allocated is
    within the budget (bench/proxy/hostile_clients.py measures a worker's RSS at full scale)."""
    memo = RequestMemo()
    budget = memo.max_bytes
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for i in range(200):
            raw = inflated(i)
            assert len(raw) <= memo.max_body
            key = (CHAT, "t", "", (), raw)
            if memo.get(key) is None:
                memo.put(key, prepare(CHAT, json.loads(raw), "t"))
        grown = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert 0 < len(memo) < 200 and memo.bytes <= budget
    assert grown < budget, grown  # unbounded: 200 parsed bodies, about 70 MiB


SHAPES = {
    "empty objects": "[" + ",".join(["{}"] * 3000) + "]",
    "one-key objects": "[" + ",".join(['{"a":1}'] * 1500) + "]",
    "short strings": "[" + ",".join(['"ab"'] * 3000) + "]",
    "floats": "[" + ",".join(["1.5"] * 3000) + "]",
    "empty lists": "[" + ",".join(["[]"] * 3000) + "]",
    "prose": json.dumps({"content": "Well, it is a long story, told slowly. " * 300}),
    "emoji": json.dumps({"content": "\U0001f600" * 2000}, ensure_ascii=False),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_size_estimate_is_an_upper_bound(shape: str) -> None:
    raw = SHAPES[shape].encode()
    assert parsed_size(json.loads(raw)) <= estimated_size(raw) <= 80 * len(raw) + 100


def test_the_memo_remembers_repeats_and_leaves_out_what_costs_too_much() -> None:
    memo = RequestMemo(max_bytes=1 << 20)
    raw = json.dumps({"model": "m", "messages": msgs("hello")}).encode()
    req = prepare(CHAT, json.loads(raw), "t")
    assert memo.get((CHAT, "t", "", (), raw)) is None
    memo.put((CHAT, "t", "", (), raw), req)
    assert memo.get((CHAT, "t", "", (), bytes(raw))) is req  # the same body, another object
    assert memo.get((CHAT, "u", "", (), raw)) is None  # another tenant: its own entry
    memo.put((CHAT, "u", "", (), raw), req)
    assert len(memo) == 2 and 0 < memo.bytes <= memo.max_bytes
    # An entry over a sixteenth of the budget is prepared every time, never kept; so is a body
    # over the length limit.
    big = inflated(0)
    memo.put((CHAT, "t", "", (), big), prepare(CHAT, json.loads(big), "t"))
    long = json.dumps({"model": "m", "messages": msgs("x" * 20_000)}).encode()
    memo.put((CHAT, "t", "", (), long), prepare(CHAT, json.loads(long), "t"))
    assert len(memo) == 2


def test_model_labels_fold_past_the_limit() -> None:
    folder = LabelFolder(2)
    assert [folder(m) for m in ("a", "b", "c", "a", "d")] == ["a", "b", OTHER, "a", OTHER]
    metrics = ProxyMetrics(max_models=64)
    base = metrics.render().count(b"\n")
    for i in range(3000):
        metrics.saved(f"model-{i}", (3, 4), 0.001 if i % 2 else None)
    added = metrics.render().count(b"\n") - base
    assert added < 1000, added
    text = metrics.render().decode()
    assert 'model="other"' in text and 'model="model-63"' in text and "model-64" not in text


# ---------------------------------------------------------------------- cancellation, in-process


@pytest.mark.parametrize(
    ("model", "stream"),
    [("fake-slow", False), ("fake-slow", True), ("fake-gated", True)],
    ids=["waiting for an answer", "waiting for a stream", "mid-stream"],
)
async def test_a_cancelled_request_gives_back_what_it_held(
    upstream: FakeUpstream, model: str, stream: bool
) -> None:
    """The request's task cancelled while it waits on the upstream (a server shutting down, an
    ASGI server that cancels on disconnect): its hold and in-flight count are given back."""
    config = ProxyConfig.load(None, {"upstream": upstream.url, "semantic": False})
    app = create_app(config)
    proxy = app.state.proxy
    await proxy.start()
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            body = {"model": model, "messages": msgs(uuid.uuid4().hex), "stream": stream}
            task = asyncio.create_task(client.post(CHAT, json=body, timeout=30.0))
            deadline = time.monotonic() + 10.0
            while proxy.metrics.inflight.now == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert proxy.metrics.inflight.now == 1 and proxy.limits.callers == 1
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        assert proxy.metrics.inflight.now == 0 and proxy.limits.callers == 0
    finally:
        upstream.gate.set()  # the gated stream's handler ends now, not at its 30 s deadline
        await proxy.stop()
        upstream.gate.clear()
