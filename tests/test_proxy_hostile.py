"""``cachekit serve`` against hostile requests, over real HTTP to a proxy subprocess in front of
the fake upstream: who the caller is (``Authorization`` and ``api-key``, repeated credential
headers), repeated ``Cache-Control`` lines, non-ASCII digits in numbers, deeply nested JSON.
Raw httpx requests with explicit header lists send what the openai client never would."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from test_proxy import CHAT, MODEL, ProxyProcess, msgs

from cachekit.llm.rules import MAX_JSON_DEPTH, RequestError, caller_key, check_depth, parse_body
from cachekit.proxy.http import loads
from cachekit.testing.clock import wait_until
from cachekit.testing.upstream import FakeUpstream

Headers = list[tuple[Any, Any]]  # str or bytes names and values


@pytest.fixture(scope="module")
def proxy(upstream: FakeUpstream) -> Iterator[ProxyProcess]:
    p = ProxyProcess(
        upstream.url, "--max-body-bytes", "1048576", "--body-timeout", "1", "--header-timeout", "1"
    ).start()
    try:
        yield p
    finally:
        p.stop()


def new_key() -> str:
    return f"sk-hostile-{uuid.uuid4().hex}"


def text() -> str:
    """A question no other test asks: entries never collide."""
    return f"What is the meaning of request {uuid.uuid4().hex}?"


def post(
    proxy: ProxyProcess, headers: Headers, content: bytes | None = None, **kw: Any
) -> httpx.Response:
    if content is None:
        content = json.dumps({"model": MODEL, "messages": msgs(kw.pop("question"))}).encode()
    return httpx.post(
        proxy.url + kw.pop("path", CHAT),
        content=content,
        headers=[*headers, ("content-type", "application/json")],
        timeout=20.0,
    )


def lookup(proxy: ProxyProcess, headers: Headers, question: str) -> httpx.Response:
    """Only-if-cached: 200 when stored for this caller, 504 otherwise; never upstream."""
    return post(proxy, [*headers, ("cache-control", "only-if-cached")], question=question)


def calls_with(upstream: FakeUpstream, question: str) -> list[dict[str, Any]]:
    return [c for c in upstream.calls if question.encode() in c["raw"]]


def assert_error(resp: httpx.Response, status: int, *words: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    for w in words:
        assert w in err["message"], err
    return err


# ---------------------------------------------------------------------- who the caller is


def test_api_key_callers_get_their_own_tenant(proxy: ProxyProcess, upstream: FakeUpstream) -> None:
    a, b = new_key(), new_key()
    q = text()
    first = post(proxy, [("api-key", a)], question=q)
    assert first.status_code == 200 and first.headers["x-cachekit-cache"] == "MISS"
    # The api-key is what reaches the upstream.
    (call,) = calls_with(upstream, q)
    assert call["headers"].get("api-key") == a and "authorization" not in call["headers"]
    wait_until(lambda: lookup(proxy, [("api-key", a)], q).status_code == 200, timeout=10.0)
    assert lookup(proxy, [("api-key", a)], q).headers["x-cachekit-cache"] == "HIT"
    # Not another api-key's answer, nor a keyless caller's.
    assert_error(lookup(proxy, [("api-key", b)], q), 504)
    assert_error(lookup(proxy, [], q), 504)
    assert_error(lookup(proxy, [("authorization", f"Bearer {b}")], q), 504)
    # The same key sent the OpenAI way is the same caller.
    assert lookup(proxy, [("authorization", f"Bearer {a}")], q).status_code == 200
    # A miss of another api-key goes upstream with that key.
    other = post(proxy, [("api-key", b)], question=q)
    assert other.status_code == 200 and other.headers["x-cachekit-cache"] == "MISS"
    assert [c["headers"].get("api-key") for c in calls_with(upstream, q)] == [a, b]


@pytest.mark.parametrize(
    ("headers", "named"),
    [
        (
            [("authorization", "Bearer sk-first"), ("authorization", "Bearer sk-second")],
            "authorization",
        ),
        ([("api-key", "sk-first"), ("api-key", "sk-second")], "api-key"),
        ([("authorization", "Bearer sk-first"), ("api-key", "sk-second")], "api-key"),
    ],
    ids=["two-authorization", "two-api-key", "different-credentials"],
)
def test_ambiguous_credentials_are_refused(
    proxy: ProxyProcess, upstream: FakeUpstream, headers: list[tuple[str, str]], named: str
) -> None:
    q = text()
    err = assert_error(post(proxy, headers, question=q), 400, named)
    assert err["code"] == "ambiguous_credentials"
    assert calls_with(upstream, q) == []  # never sent upstream with either key
    feedback = json.dumps({"id": "chatcmpl-x", "correct": False}).encode()
    assert_error(post(proxy, headers, feedback, path="/v1/cachekit/feedback"), 400, named)
    before = len(upstream.calls)
    assert_error(httpx.get(proxy.url + "/v1/models", headers=headers, timeout=10.0), 400, named)
    assert len(upstream.calls) == before


def test_same_key_in_both_headers_is_one_caller(proxy: ProxyProcess) -> None:
    k = new_key()
    q = text()
    both = [("authorization", f"Bearer {k}"), ("api-key", k)]
    assert post(proxy, both, question=q).status_code == 200
    wait_until(lambda: lookup(proxy, [("api-key", k)], q).status_code == 200, timeout=10.0)


# ---------------------------------------------------------------------- control headers


def test_no_store_on_a_second_cache_control_line_is_obeyed(
    proxy: ProxyProcess, upstream: FakeUpstream
) -> None:
    k = new_key()
    auth = [("authorization", f"Bearer {k}")]
    q, control = text(), text()
    resp = post(
        proxy, [*auth, ("cache-control", "no-cache"), ("cache-control", "no-store")], question=q
    )
    assert resp.status_code == 200 and resp.headers["x-cachekit-cache"] == "BYPASS"
    # A later request of the same caller is stored: by then the first would have been too.
    assert post(proxy, auth, question=control).status_code == 200
    wait_until(lambda: lookup(proxy, auth, control).status_code == 200, timeout=10.0)
    assert_error(lookup(proxy, auth, q), 504, "only-if-cached")
    # Asked again, the question goes upstream again.
    assert post(proxy, auth, question=q).headers["x-cachekit-cache"] == "MISS"
    assert len(calls_with(upstream, q)) == 2


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (b"cache-control", b"max-age=\xb2"),
        (b"cache-control", b"max-age=1\xb9"),
        (b"x-cachekit-ttl", b"\xb2"),
        (b"x-cachekit-threshold", b"0.\xb9"),
    ],
)
def test_non_ascii_digits_in_headers_are_400(
    proxy: ProxyProcess, upstream: FakeUpstream, name: bytes, value: bytes
) -> None:
    q = text()
    auth = (b"authorization", f"Bearer {new_key()}".encode())
    err = assert_error(post(proxy, [auth, (name, value)], question=q), 400)
    assert err["param"] == name.decode()
    assert calls_with(upstream, q) == []


def test_repeated_single_value_headers_are_400(proxy: ProxyProcess) -> None:
    err = assert_error(
        post(proxy, [("x-cachekit-ttl", "60"), ("x-cachekit-ttl", "5")], question=text()), 400
    )
    assert err["param"] == "x-cachekit-ttl"


# ---------------------------------------------------------------------- nesting


def nested(depth: int, open_: str = "[", close: str = "]") -> str:
    return open_ * depth + close * depth


def chat_body(question: str, **extra: str) -> bytes:
    base = json.dumps({"model": MODEL, "messages": msgs(question)})[:-1]
    return (base + "".join(f', "{k}": {v}' for k, v in extra.items()) + "}").encode()


@pytest.mark.parametrize("depth", [990, 5000])
@pytest.mark.parametrize("where", ["unknown", "logit_bias", "feedback"])
def test_deep_json_is_400_naming_the_limit(
    proxy: ProxyProcess, upstream: FakeUpstream, where: str, depth: int
) -> None:
    q = text()
    auth = [("authorization", f"Bearer {new_key()}")]
    path = CHAT
    if where == "unknown":
        body = chat_body(q, x_extra=nested(depth))
    elif where == "logit_bias":
        body = chat_body(q, logit_bias='{"1": ' * depth + "0" + "}" * depth)
    else:
        path = "/v1/cachekit/feedback"
        body = ('{"id": ' + nested(depth) + ', "correct": false}').encode()
    err = assert_error(post(proxy, auth, body, path=path), 400, f"{MAX_JSON_DEPTH} levels")
    assert err["code"] == "json_too_deep"
    assert calls_with(upstream, q) == []
    assert httpx.get(proxy.url + "/healthz", timeout=5.0).json()["status"] == "ok"


def test_nesting_up_to_the_limit_is_accepted(proxy: ProxyProcess, upstream: FakeUpstream) -> None:
    auth = [("authorization", f"Bearer {new_key()}")]
    q = text()
    # The body is level 1 and the field's outer array level 2: MAX_JSON_DEPTH levels in all.
    ok = post(proxy, auth, chat_body(q, x_extra=nested(MAX_JSON_DEPTH - 1)))
    assert ok.status_code == 200, ok.text
    assert len(calls_with(upstream, q)) == 1
    q2 = text()
    deep = post(proxy, auth, chat_body(q2, x_extra=nested(MAX_JSON_DEPTH)))
    assert_error(deep, 400, f"{MAX_JSON_DEPTH} levels")
    assert calls_with(upstream, q2) == []


# ---------------------------------------------------------------------- integers


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("max_tokens", "9" * 4001, "from 1 to 2147483647"),  # orjson refuses it: stdlib parses
        ("max_tokens", "9" * 4300, "from 1 to 2147483647"),
        ("max_tokens", "9" * 5000, "4300 digits"),  # more than int() converts
        ("max_tokens", "1" + "0" * 30, "from 1 to 2147483647"),  # a float to orjson
        ("max_tokens", "-" + "9" * 4001, "from 1 to 2147483647"),
        ("n", "1000000000", "from 1 to 128"),
        ("seed", str(2**63), "from -9223372036854775808 to 9223372036854775807"),
        ("top_logprobs", "21", "from 0 to 20"),
        ("max_completion_tokens", "true", "from 1 to 2147483647"),
        ("logit_bias", '{"50256": 1000}', "from -100 to 100"),
        ("temperature", "9" * 4001, "must be a number"),
        ("x_unknown", "9" * 5000, "4300 digits"),
    ],
)
def test_integers_out_of_range_are_400_never_forwarded(
    proxy: ProxyProcess, upstream: FakeUpstream, field: str, value: str, words: str
) -> None:
    q = text()
    auth = [("authorization", f"Bearer {new_key()}")]
    r = post(proxy, auth, chat_body(q, **{field: value}))
    err = assert_error(r, 400, words)
    assert err["type"] == "invalid_request_error"
    assert err["param"] == (None if words == "4300 digits" else field)
    assert len(r.content) < 1000  # the digits are not echoed
    assert calls_with(upstream, q) == []
    # The same request within the range is forwarded (and the proxy is well).
    assert post(proxy, auth, chat_body(q, max_tokens="16")).status_code == 200
    assert len(calls_with(upstream, q)) == 1


def test_responses_and_embeddings_integers_are_checked(
    proxy: ProxyProcess, upstream: FakeUpstream
) -> None:
    auth = [("authorization", f"Bearer {new_key()}")]
    q = text()
    cases: list[tuple[str, dict[str, Any], str | None]] = [
        ("/v1/responses", {"model": MODEL, "input": q, "max_output_tokens": 2**31}, None),
        ("/v1/responses", {"model": MODEL, "input": q, "max_tool_calls": 0}, None),
        ("/v1/embeddings", {"model": MODEL, "input": q, "dimensions": 0}, None),
        ("/v1/embeddings", {"model": MODEL, "input": [[1, -5]]}, "input"),
        ("/v1/completions", {"model": MODEL, "prompt": q, "logprobs": 6}, None),
    ]
    for path, body, param in cases:
        name = param or next(k for k in body if k not in ("model", "input", "prompt"))
        err = assert_error(post(proxy, auth, json.dumps(body).encode(), path=path), 400, name)
        assert err["param"] == name
    assert calls_with(upstream, q) == []


def test_the_proxy_parser_hands_long_integers_to_the_range_check() -> None:
    """orjson refuses an integer past a double's range; ``loads`` then asks the standard
    parser, which reads up to 4,300 digits: the range check refuses them, never a 500."""
    raw = chat_body("hi", max_tokens="9" * 4001)
    assert loads(raw)["max_tokens"] == int("9" * 4001)
    with pytest.raises(RequestError) as info:
        loads(chat_body("hi", max_tokens="9" * 4301))
    assert info.value.status == 400 and info.value.code == "number_too_long"


# ---------------------------------------------------------------------- the rules themselves


def test_caller_key_rule() -> None:
    assert caller_key([]) is None
    assert caller_key([("Authorization", "Bearer sk-a")]) == "sk-a"
    assert caller_key([("api-key", " sk-a ")]) == "sk-a"
    assert caller_key([("authorization", "Bearer sk-a"), ("api-key", "sk-a")]) == "sk-a"
    assert caller_key([("authorization", "Basic dXNlcg==")]) == "Basic dXNlcg=="
    assert caller_key([("authorization", "Bearer "), ("accept", "x")]) is None
    for lines in (
        [("authorization", "Bearer sk-a"), ("Authorization", "Bearer sk-a")],
        [("api-key", "sk-a"), ("api-key", "sk-b")],
        [("authorization", "Bearer sk-a"), ("api-key", "sk-b")],
    ):
        with pytest.raises(RequestError) as info:
            caller_key(lines)
        assert info.value.status == 400 and info.value.param in ("authorization", "api-key")


def test_check_depth_is_iterative_and_exact() -> None:
    check_depth(json.loads(nested(MAX_JSON_DEPTH)))
    with pytest.raises(RequestError, match=f"{MAX_JSON_DEPTH} levels"):
        check_depth(json.loads(nested(MAX_JSON_DEPTH + 1)))
    deep: Any = []
    for _ in range(100_000):  # far beyond the interpreter's recursion limit
        deep = [deep]
    with pytest.raises(RequestError):
        check_depth(deep)
    with pytest.raises(RequestError, match="levels"):
        parse_body(b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")


# ---------------------------------------------------------------------- slow clients


@pytest.mark.parametrize("path", [CHAT, "/v1/files"], ids=["cached", "passthrough"])
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_slower_than_the_timeout_is_408(
    proxy: ProxyProcess, framing: str, path: str
) -> None:
    """On every route: a passthrough body is read whole before the upstream is asked."""
    url = urlsplit(proxy.url)
    assert url.hostname and url.port
    length = "Content-Length: 100" if framing == "content-length" else "Transfer-Encoding: chunked"
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{length}\r\n\r\n"
    part = b'{"model"' if framing == "content-length" else b'8\r\n{"model"\r\n'
    with socket.create_connection((url.hostname, url.port), timeout=15.0) as sock:
        sock.sendall(head.encode() + part)  # then nothing more: the proxy must not wait forever
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            data = sock.recv(65536)
            if not data:
                break
            reply += data
    status, _, rest = reply.partition(b"\r\n")
    assert status.split()[1] == b"408", reply
    body = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert "did not arrive within 1 seconds" in body["error"]["message"]
    assert body["error"]["code"] == "request_timeout"
    assert proxy.metric("cachekit_proxy_errors_total", reason="body_timeout") >= 1
    if path != CHAT:
        assert b"x-cachekit-cache: passthrough" in reply.lower()


def _read_until_closed(sock: socket.socket) -> bytes:
    got = b""
    while data := sock.recv(65536):
        got += data
    return got


@pytest.mark.parametrize("first", ["slow headers", "a request, then slow headers"])
def test_headers_slower_than_the_timeout_close_the_connection(
    proxy: ProxyProcess, first: str
) -> None:
    url = urlsplit(proxy.url)
    assert url.hostname and url.port
    with socket.create_connection((url.hostname, url.port), timeout=15.0) as sock:
        if first != "slow headers":  # a kept-alive connection: the deadline restarts per request
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = b""
            while b'"status"' not in reply:
                reply += sock.recv(65536)
            assert reply.startswith(b"HTTP/1.1 200")
        sock.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n".encode())  # and no more
        # The proxy hangs up (recv returns b"") well before the socket's own 15 s timeout.
        assert _read_until_closed(sock) == b""
    assert httpx.get(proxy.url + "/healthz", timeout=10.0).status_code == 200
