"""What a new user sees first from ``cachekit serve``: where it listens, what the upstream is,
a health check that says what is wrong, and OpenAI-style errors for wrong paths."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from redis_servers import free_port
from test_proxy import ProxyProcess

from cachekit.cli.main import main
from cachekit.testing.clock import wait_until
from cachekit.testing.upstream import FakeUpstream


@pytest.fixture(scope="module")
def proxy(upstream: FakeUpstream) -> Iterator[ProxyProcess]:
    p = ProxyProcess(upstream.url, "--no-semantic", embedder=None, threshold=None).start()
    try:
        yield p
    finally:
        p.stop()


def test_serve_says_where_it_listens_and_what_it_found_upstream(
    proxy: ProxyProcess, upstream: FakeUpstream
) -> None:
    log = proxy.log_text()
    assert (
        f"listening on {proxy.url} with 1 worker(s): point OpenAI clients at {proxy.url}/v1" in log
    )
    assert f"upstream {upstream.url}: reachable (GET /v1/models: 200)" in log
    assert "semantic off" in log and "no Redis" in log
    health = httpx.get(proxy.url + "/healthz", timeout=5).json()
    assert health["status"] == "ok" and health["problems"] == []
    assert health["upstream"]["reachable"] is True and health["redis"] is None


@pytest.mark.parametrize(
    ("method", "path", "status", "hint"),
    [
        ("POST", "/chat/completions", 404, "Did you mean /v1/chat/completions?"),
        ("GET", "/nothing", 404, "Did you mean /v1/nothing?"),
        ("PUT", "/healthz", 405, "Method not allowed: PUT /healthz."),
    ],
)
def test_wrong_paths_and_methods_get_openai_style_errors(
    proxy: ProxyProcess, method: str, path: str, status: int, hint: str
) -> None:
    r = httpx.request(method, proxy.url + path, json={"model": "m"}, timeout=5)
    assert r.status_code == status
    error = r.json()["error"]
    assert hint in error["message"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == ("unknown_url" if status == 404 else "method_not_allowed")


def test_an_unreachable_upstream_is_said_at_start_and_by_healthz() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    p = ProxyProcess(dead, "--no-semantic", embedder=None, threshold=None).start()
    try:
        assert f"upstream {dead}: not reachable (ConnectError" in p.log_text()

        def degraded() -> bool:
            return bool(httpx.get(p.url + "/healthz", timeout=5).json()["problems"])

        wait_until(degraded, timeout=10)
        health = httpx.get(p.url + "/healthz", timeout=5).json()
        assert health["status"] == "degraded"
        (problem,) = health["problems"]
        assert problem.startswith(f"upstream {dead}: not reachable") and "--upstream" in problem
        r = httpx.post(
            p.url + "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            timeout=10,
        )
        assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_unreachable"
        assert r.headers["x-cachekit-cache"] == "MISS"
        models = httpx.get(p.url + "/v1/models", timeout=10)
        assert models.status_code == 502 and models.headers["x-cachekit-cache"] == "PASSTHROUGH"
    finally:
        p.stop()


@pytest.mark.parametrize("endpoint", ["/v1/chat/completions", "/chat/completions/", "/embeddings"])
def test_an_endpoint_given_as_the_upstream_is_refused_with_the_base_url(
    endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", "--upstream", "https://api.example.com" + endpoint])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "names an endpoint" in err and "--upstream https://api.example.com" in err
