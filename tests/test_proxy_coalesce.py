"""One upstream call for identical concurrent misses: the proxy served by uvicorn in a thread of
the test (so the test sees its flights), in front of the fake upstream, whose ``gate`` holds the
first call open until every identical request has joined it."""

from __future__ import annotations

import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from cachekit.proxy.app import Proxy, create_app
from cachekit.proxy.config import ProxyConfig
from cachekit.testing.clock import wait_until
from cachekit.testing.upstream import FakeUpstream, serving

sys.path.insert(0, str(Path(__file__).parent))
from test_proxy import CHAT, msgs


class ProxyThread:
    """``create_app`` served by uvicorn on a free 127.0.0.1 port, in a daemon thread."""

    def __init__(self, upstream: str, **settings: Any) -> None:
        import uvicorn

        config = ProxyConfig.load(None, {"upstream": upstream, "semantic": False, **settings})
        self.app = create_app(config)
        self.proxy: Proxy = self.app.state.proxy
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._server = uvicorn.Server(
            uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="on")
        )
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def __enter__(self) -> ProxyThread:
        self._thread.start()
        wait_until(lambda: self._server.started, timeout=30.0)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(15.0)


@pytest.fixture
def fake() -> Iterator[FakeUpstream]:
    with serving(FakeUpstream()) as upstream:
        try:
            yield upstream
        finally:
            upstream.gate.set()  # nothing waits on it past the test


@pytest.fixture
def proxy(fake: FakeUpstream) -> Iterator[ProxyThread]:
    with ProxyThread(fake.url) as p:
        yield p


def _body(model: str, stream: bool = False) -> dict[str, Any]:
    return {"model": model, "messages": msgs(uuid.uuid4().hex), "stream": stream}


def _post(
    proxy: ProxyThread,
    body: dict[str, Any],
    key: str = "sk-one",
    more: dict[str, str] | None = None,
) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", **(more or {})}
    return httpx.post(proxy.url + CHAT, json=body, headers=headers, timeout=30.0)


def _flight(proxy: ProxyThread) -> Any:
    flights = proxy.proxy.flights.under_way()
    return flights[0] if len(flights) == 1 else None


def test_six_identical_whole_requests_make_one_upstream_call(
    proxy: ProxyThread, fake: FakeUpstream
) -> None:
    body = _body("fake-held")
    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(_post, proxy, body) for _ in range(6)]
        wait_until(lambda: (f := _flight(proxy)) is not None and f.waiting == 5, timeout=20.0)
        fake.gate.set()
        answers = [f.result() for f in futures]
    assert fake.count() == 1
    outcomes = sorted(r.headers["x-cachekit-cache"] for r in answers)
    assert outcomes == ["COALESCED"] * 5 + ["MISS"]
    assert len({r.content for r in answers}) == 1 and answers[0].status_code == 200
    metrics = proxy.proxy.metrics.render().decode()
    assert 'cachekit_proxy_requests_total{cache="COALESCED",endpoint="chat"} 5.0' in metrics
    wait_until(lambda: len(proxy.proxy.flights) == 0)  # landed once stored
    assert _post(proxy, body).headers["x-cachekit-cache"] == "HIT"


def test_other_tenants_and_buckets_make_their_own_calls(
    proxy: ProxyThread, fake: FakeUpstream
) -> None:
    body = _body("fake-held")
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(_post, proxy, body, "sk-one")
        wait_until(lambda: fake.count() == 1)
        other = pool.submit(_post, proxy, body, "sk-two")
        wait_until(lambda: fake.count() == 2)  # another tenant: its own call, not joined
        fake.gate.set()
        assert first.result().headers["x-cachekit-cache"] == "MISS"
        assert other.result().headers["x-cachekit-cache"] == "MISS"


def _stream(proxy: ProxyThread, body: dict[str, Any], out: dict[str, Any], name: str) -> None:
    headers = {"authorization": "Bearer sk-one"}
    with httpx.stream("POST", proxy.url + CHAT, json=body, headers=headers, timeout=30.0) as r:
        out[name + ".cache"] = r.headers["x-cachekit-cache"]
        out[name] = b"".join(r.iter_raw())


def test_identical_streams_share_one_call_and_a_later_caller_gets_it_from_the_start(
    proxy: ProxyThread, fake: FakeUpstream
) -> None:
    body, out = _body("fake-gated", stream=True), dict[str, Any]()
    threads = [threading.Thread(target=_stream, args=(proxy, body, out, f"s{i}")) for i in range(3)]
    threads[0].start()
    wait_until(lambda: (f := _flight(proxy)) is not None and f.readers == 1, timeout=20.0)
    for t in threads[1:]:
        t.start()
    wait_until(lambda: _flight(proxy).readers == 3, timeout=20.0)
    fake.gate.set()
    for t in threads:
        t.join(30.0)
    assert fake.count() == 1
    assert sorted(out[f"s{i}.cache"] for i in range(3)) == ["COALESCED", "COALESCED", "MISS"]
    assert out["s0"] == out["s1"] == out["s2"] and out["s0"].endswith(b"data: [DONE]\n\n")


def test_the_stream_goes_on_for_a_follower_when_the_first_caller_leaves(
    proxy: ProxyThread, fake: FakeUpstream
) -> None:
    body, headers = _body("fake-gated", stream=True), {"authorization": "Bearer sk-one"}
    with httpx.Client(timeout=30.0) as one, httpx.Client(timeout=30.0) as two:
        first = one.send(
            one.build_request("POST", proxy.url + CHAT, json=body, headers=headers), stream=True
        )
        chunks = first.iter_raw()  # kept: a dropped iterator closes the response
        head = next(chunks)  # the stream is under way
        second = two.send(
            two.build_request("POST", proxy.url + CHAT, json=body, headers=headers), stream=True
        )
        assert second.headers["x-cachekit-cache"] == "COALESCED"
        first.close()  # the first caller hangs up mid-stream
        wait_until(lambda: _flight(proxy).readers == 1)
        fake.gate.set()
        rest = b"".join(second.iter_raw())
        second.close()
    assert rest.startswith(head) and rest.endswith(b"data: [DONE]\n\n")
    assert fake.count() == 1


def test_when_every_caller_leaves_the_upstream_call_is_released(
    proxy: ProxyThread, fake: FakeUpstream
) -> None:
    body, headers = _body("fake-gated", stream=True), {"authorization": "Bearer sk-one"}
    with httpx.Client(timeout=30.0) as one:
        first = one.send(
            one.build_request("POST", proxy.url + CHAT, json=body, headers=headers), stream=True
        )
        chunks = first.iter_raw()
        next(chunks)
        assert proxy.proxy.metrics.inflight.now == 1
        first.close()
    deadline = time.monotonic() + 10.0
    wait_until(lambda: proxy.proxy.metrics.inflight.now == 0, timeout=deadline - time.monotonic())
    assert len(proxy.proxy.flights) == 0


def test_a_replica_waits_for_the_answer_another_replica_is_fetching(
    fake: FakeUpstream, redis_url: str
) -> None:
    body = _body("fake-held")
    shared = {"redis_url": redis_url, "coalesce_wait": 20.0}
    with ProxyThread(fake.url, **shared) as one, ProxyThread(fake.url, **shared) as two:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(_post, one, body)
            wait_until(lambda: fake.count() == 1, timeout=20.0)
            second = pool.submit(_post, two, body)
            wait_until(lambda: two.proxy.replicas.waiting == 1, timeout=20.0)
            fake.gate.set()
            r1, r2 = first.result(), second.result()
        assert fake.count() == 1  # the second replica never asked
        assert r1.headers["x-cachekit-cache"] == "MISS" and r2.headers["x-cachekit-cache"] == "HIT"
        assert r1.content == r2.content
        # The mark is gone once the answer landed: a new key on the second replica asks at once.
        other = _body("fake-slow-not")
        assert _post(two, other).headers["x-cachekit-cache"] == "MISS"
        assert two.proxy.replicas.waiting == 0 and fake.count() == 2


def test_a_replica_asks_on_its_own_when_the_other_call_brings_nothing(
    fake: FakeUpstream, redis_url: str
) -> None:
    body = {**_body("fake-held"), "n": 1}
    shared = {"redis_url": redis_url, "coalesce_wait": 20.0}
    with ProxyThread(fake.url, **shared) as one, ProxyThread(fake.url, **shared) as two:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(_post, one, body, "sk-one", {"cache-control": "no-store"})
            wait_until(lambda: fake.count() == 1, timeout=20.0)
            second = pool.submit(_post, two, body, "sk-one")
            wait_until(lambda: two.proxy.replicas.waiting == 1, timeout=20.0)
            fake.gate.set()
            assert first.result().headers["x-cachekit-cache"] == "MISS"
            assert second.result().headers["x-cachekit-cache"] == "MISS"
        assert fake.count() == 2  # nothing was stored: the waiting replica asked itself


@pytest.mark.parametrize("wait", [-1, "soon", True, 601])
def test_a_bad_coalesce_wait_is_refused(wait: Any) -> None:
    with pytest.raises(ValueError, match="coalesce_wait must be a number of seconds"):
        ProxyConfig.load(None, {"upstream": "http://127.0.0.1:9", "coalesce_wait": wait})
