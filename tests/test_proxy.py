"""``cachekit serve`` end to end: the official openai client against the proxy started as a
subprocess, in front of a fake upstream served over HTTP on 127.0.0.1 by the test
(``cachekit.testing.upstream``). Each test uses its own API key, hence its own tenant, so tests
never see each other's entries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cachekit.testing.clock import wait_until
from cachekit.testing.upstream import FakeUpstream

sys.path.insert(0, str(Path(__file__).parent))
from redis_servers import free_port

TEST_EMBEDDER = "cachekit.testing.embedders:DeterministicTestEmbedder"
CHAT = "/v1/chat/completions"
MODEL = "gpt-4o-mini"
PARAPHRASE = ("How do I reset my password", "how do I reset my password please")


class ProxyProcess:
    """``python -m cachekit serve`` (or the ``cachekit`` script) on a free port."""

    def __init__(
        self,
        upstream: str,
        *args: str,
        script: bool = False,
        embedder: str | None = TEST_EMBEDDER,
        threshold: str | None = "0.8",
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        exe = Path(sys.executable).parent / "cachekit"
        head = [str(exe)] if script and exe.exists() else [sys.executable, "-m", "cachekit"]
        self.cmd = [*head, "serve", "--upstream", upstream, "--port", str(self.port), *args]
        if threshold:
            self.cmd += ["--threshold", threshold]
        if embedder:
            self.cmd += ["--embedder", embedder]
        self.log = tempfile.NamedTemporaryFile(prefix="cachekit-proxy-", suffix=".log")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> ProxyProcess:
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "CACHEKIT_TENANT_SECRET": "test-secret",
        }
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)

        def up() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"proxy exited: {self.log_text()}")
            try:
                return httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, timeout=timeout, interval=0.05)
        return self

    def log_text(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = httpx.get(self.url + "/metrics", timeout=5.0).text
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def metric(self, name: str, **labels: str) -> float:
        want = tuple(sorted(labels.items()))
        return sum(
            v
            for (n, ls), v in self.metrics().items()
            if n == name and all(item in ls for item in want)
        )


@pytest.fixture(scope="module")
def proxy(upstream: FakeUpstream) -> Iterator[ProxyProcess]:
    p = ProxyProcess(
        upstream.url,
        "--upstream-timeout",
        "1.5",
        "--max-body-bytes",
        "65536",
        "--shared-scope",
        "team=sk-team-one,sk-team-two",
    ).start()
    try:
        yield p
    finally:
        p.stop()


def make_client(proxy: ProxyProcess, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0, timeout=20.0)


def upstream_calls(upstream: FakeUpstream, key: str, path: str = CHAT) -> int:
    return sum(
        1
        for c in upstream.calls
        if c["path"] == path and c["headers"].get("authorization") == f"Bearer {key}"
    )


def msgs(text: str) -> list[Any]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]


def chat(
    client: openai.OpenAI, text: str, headers: dict[str, str] | None = None, **kw: Any
) -> tuple[Any, Any]:
    raw = client.chat.completions.with_raw_response.create(
        model=kw.pop("model", MODEL),
        messages=kw.pop("messages", None) or msgs(text),
        extra_headers=headers,
        **kw,
    )
    return raw.parse(), raw.headers


def stream_chat(client: openai.OpenAI, text: str, **kw: Any) -> tuple[list[Any], Any]:
    raw = client.chat.completions.with_raw_response.create(
        model=kw.pop("model", MODEL), messages=msgs(text), stream=True, **kw
    )
    return list(raw.parse()), raw.headers


def cached(proxy: ProxyProcess, key: str, text: str, **body: Any) -> httpx.Response:
    """Look up without going upstream (``Cache-Control: only-if-cached``)."""
    payload = {"model": MODEL, "messages": msgs(text), **body}
    return httpx.post(
        proxy.url + CHAT,
        json=payload,
        timeout=10.0,
        headers={"authorization": f"Bearer {key}", "cache-control": "only-if-cached"},
    )


def wait_cached(proxy: ProxyProcess, key: str, text: str, **body: Any) -> httpx.Response:
    box: list[httpx.Response] = []

    def hit() -> bool:
        box[:] = [cached(proxy, key, text, **body)]
        return box[0].status_code == 200

    wait_until(hit, timeout=10.0, interval=0.02)
    return box[0]


def content_of(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


# ---------------------------------------------------------------------- chat


def test_chat_miss_then_exact_and_semantic_hits(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    first, h1 = chat(client, PARAPHRASE[0])
    assert isinstance(first, openai.types.chat.ChatCompletion)
    assert h1["x-cachekit-cache"] == "MISS" and "x-cachekit-similarity" not in h1
    wait_cached(proxy, key, PARAPHRASE[0])
    again, h2 = chat(client, PARAPHRASE[0])
    assert h2["x-cachekit-cache"] == "HIT" and int(h2["age"]) >= 0
    assert again.choices[0].message.content == first.choices[0].message.content
    para, h3 = chat(client, PARAPHRASE[1])
    assert h3["x-cachekit-cache"] == "SEMANTIC_HIT"
    assert 0.8 <= float(h3["x-cachekit-similarity"]) < 1.0
    assert para.choices[0].message.content == first.choices[0].message.content
    _, h4 = chat(client, "Write a haiku about the sea")
    assert h4["x-cachekit-cache"] == "MISS"
    assert upstream_calls(upstream, key) == 2
    # The caller's key reaches the upstream unchanged.
    assert all(
        c["headers"]["authorization"] == f"Bearer {key}"
        for c in upstream.calls
        if key in c["headers"].get("authorization", "")
    )


SLOT_SWAPS = [
    ("Convert 61 kilometers to miles.", "Convert 63 kilometers to miles.", "slots: numbers"),
    ("Which foods are gluten-free?", "Which foods are not gluten-free?", "slots: negation"),
    ("Which countries drive on the left?", "Which countries drive on the right?", "slots: opp"),
    ("What is the capital city of Austria?", "What is the capital city of Australia?", "slots: n"),
    ("How do I install numpy on Windows?", "How do I install pandas on Windows?", "slots: i"),
    (
        "You answer for a bank, from its policy only, and say when the policy does not cover the "
        "question. Policy: accounts may be closed online at any time. How do I close my account?",
        "You answer for a bank, from its policy only, and say when the policy does not cover the "
        "question. Policy: accounts may be closed online at any time. How do I open an account?",
        "preamble",
    ),
    ("Cheap flights from Vienna to Madrid", "Cheap flights from Madrid to Vienna", "slots: order"),
    ("Did Ghana beat Peru in 2010?", "Did Peru beat Ghana in 2010?", "slots: order"),
    ("Explain the regex `^[a-z]+$`", "Explain the regex `^[A-Z]+$`", "slots: code"),
]


@pytest.mark.parametrize(("stored", "query", "why"), SLOT_SWAPS)
def test_slot_swaps_are_misses_that_say_why(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str, stored: str,
    query: str, why: str,
) -> None:  # fmt: skip
    first, _ = chat(client, stored)
    wait_cached(proxy, key, stored)
    before = proxy.metric("cachekit_proxy_semantic_refusals_total")
    second, h = chat(client, query)
    assert h["x-cachekit-cache"] == "MISS" and h["x-cachekit-reason"].startswith(why)
    assert float(h["x-cachekit-similarity"]) > 0.5
    assert second.choices[0].message.content != first.choices[0].message.content
    assert upstream_calls(upstream, key) == 2
    assert proxy.metric("cachekit_proxy_semantic_refusals_total") == before + 1


def test_a_long_shared_preamble_is_never_a_semantic_hit(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    contract = " ".join(
        f"Clause {i}: the supplier delivers the goods within the agreed period and the buyer "
        "pays the invoice in full."
        for i in range(40)
    )  # far past the embedder's 256 tokens: the two vectors are identical
    chat(client, contract + " Question: when must the buyer pay?")
    wait_cached(proxy, key, contract + " Question: when must the buyer pay?")
    _, h = chat(client, contract + " Question: who chooses the carrier?")
    assert h["x-cachekit-cache"] == "MISS" and h["x-cachekit-reason"].startswith("truncated")
    assert upstream_calls(upstream, key) == 2


def test_stream_miss_is_relayed_then_replayed_in_chunks(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    text = "Explain what a cache is in a few words"
    chunks, h1 = stream_chat(client, text, stream_options={"include_usage": True})
    assert h1["x-cachekit-cache"] == "MISS"
    answer = content_of(chunks)
    assert answer.startswith("Answer #") and chunks[-1].usage is not None
    wait_cached(proxy, key, text)
    replay, h2 = stream_chat(client, text, stream_options={"include_usage": True})
    assert h2["x-cachekit-cache"] == "HIT"
    assert content_of(replay) == answer
    assert sum(1 for c in replay if c.choices and c.choices[0].delta.content) >= 3
    assert replay[-1].usage is not None and replay[-1].usage.total_tokens > 0
    assert [c.choices[0].finish_reason for c in replay if c.choices][-1] == "stop"
    # Without include_usage no usage chunk, on a hit as on a miss.
    plain, _ = stream_chat(client, text)
    assert all(c.usage is None for c in plain) and content_of(plain) == answer
    # A non-streamed request hits the entry a streamed one wrote.
    whole, h3 = chat(client, text)
    assert h3["x-cachekit-cache"] == "HIT" and whole.choices[0].message.content == answer
    assert whole.usage is not None and whole.usage.total_tokens > 0  # asked upstream for it
    assert upstream_calls(upstream, key) == 1


def test_stream_miss_is_relayed_before_the_upstream_finishes(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    upstream.gate.clear()
    try:
        stream: Any = client.chat.completions.create(
            model="fake-gated", messages=msgs("go"), stream=True
        )
        # The upstream holds the rest of its answer until the gate opens: these chunks can only
        # arrive if the proxy relays them as they come.
        first, second = next(stream), next(stream)
        assert first.choices[0].delta.role == "assistant"
        assert second.choices[0].delta.content
    finally:
        upstream.gate.set()
    rest = list(stream)
    assert rest[-1].choices[0].finish_reason == "stop"


def test_stream_hit_from_a_non_streamed_entry(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    text = "Name three primary colours"
    whole, _ = chat(client, text)
    wait_cached(proxy, key, text)
    chunks, h = stream_chat(client, text)
    assert h["x-cachekit-cache"] == "HIT"
    assert content_of(chunks) == whole.choices[0].message.content
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert upstream_calls(upstream, key) == 1


def test_tool_calls_cached_and_streamed(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    tools = [
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
        }
    ]
    text = "What is the weather in Paris?"
    first, _ = chat(client, text, tools=tools)
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    wait_cached(proxy, key, text, tools=tools)
    chunks, h = stream_chat(client, text, tools=tools)
    assert h["x-cachekit-cache"] == "HIT"
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert len(deltas) >= 2  # the arguments arrive in parts
    assert "".join(d.function.arguments or "" for d in deltas) == call.function.arguments
    assert deltas[0].id == call.id and deltas[0].function.name == "get_weather"
    # Other tools are another scope.
    _, h2 = chat(client, text, tools=[{"type": "function", "function": {"name": "other"}}])
    assert h2["x-cachekit-cache"] == "MISS"


def test_n_greater_than_one_is_exact_only(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    first, _ = chat(client, PARAPHRASE[0], n=2)
    assert len(first.choices) == 2
    wait_cached(proxy, key, PARAPHRASE[0], n=2)
    again, h = chat(client, PARAPHRASE[0], n=2)
    assert h["x-cachekit-cache"] == "HIT" and len(again.choices) == 2
    assert [c.message.content for c in again.choices] == [c.message.content for c in first.choices]
    _, h2 = chat(client, PARAPHRASE[1], n=2)
    assert h2["x-cachekit-cache"] == "MISS"
    _, h3 = chat(client, PARAPHRASE[0])  # n=1 is not answered by a piece of the n=2 answer
    assert h3["x-cachekit-cache"] == "MISS"


def test_completions_and_embeddings(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    e1 = client.embeddings.with_raw_response.create(
        model="text-embedding-3-small", input=["alpha beta", "gamma"]
    )
    assert e1.headers["x-cachekit-cache"] == "MISS"
    first = e1.parse()

    def second() -> Any:
        return client.embeddings.with_raw_response.create(
            model="text-embedding-3-small", input=["alpha beta", "gamma"]
        )

    wait_until(lambda: second().headers["x-cachekit-cache"] == "HIT", timeout=10.0)
    got = second().parse()
    assert isinstance(got, openai.types.CreateEmbeddingResponse)
    assert [d.embedding for d in got.data] == [d.embedding for d in first.data]
    c1 = client.completions.with_raw_response.create(model=MODEL, prompt="Say hi")
    assert c1.headers["x-cachekit-cache"] == "MISS"
    wait_until(
        lambda: (
            client.completions.with_raw_response.create(model=MODEL, prompt="Say hi").headers[
                "x-cachekit-cache"
            ]
            == "HIT"
        ),
        timeout=10.0,
    )
    assert upstream_calls(upstream, key, "/v1/embeddings") == 1
    assert upstream_calls(upstream, key, "/v1/completions") == 1


# ---------------------------------------------------------------------- passthrough


def test_other_paths_pass_through(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    assert [m.id for m in client.models.list()] == ["fake-model"]
    r = httpx.put(
        proxy.url + "/v1/echo/files/1?purpose=test&x=1",
        content=b"raw \x00 bytes",
        headers={
            "authorization": f"Bearer {key}",
            "x-custom": "yes",
            "content-type": "application/octet-stream",
        },
        timeout=10.0,
    )
    echo = r.json()
    assert r.status_code == 200 and r.headers["x-upstream"] == "fake"
    assert echo["method"] == "PUT" and echo["path"] == "/v1/echo/files/1"
    assert echo["query"] == "purpose=test&x=1" and echo["body"] == "raw \x00 bytes"
    assert echo["headers"]["x-custom"] == "yes"
    assert echo["headers"]["authorization"] == f"Bearer {key}"
    teapot = httpx.delete(proxy.url + "/v1/echo/x?status=418", timeout=10.0)
    assert teapot.status_code == 418 and teapot.json()["method"] == "DELETE"
    with httpx.stream("GET", proxy.url + "/v1/stream-echo?n=50", timeout=10.0) as s:
        lines = [ln for ln in s.iter_lines() if ln]
    assert lines == [f"line {i}" for i in range(50)]
    # GET on a cached path is not a cached request either.
    assert httpx.get(proxy.url + "/v1/echo/chat", timeout=10.0).status_code == 200


# ---------------------------------------------------------------------- tenants


def test_tenants_share_nothing(proxy: ProxyProcess, upstream: FakeUpstream) -> None:
    a, b = f"sk-a-{uuid.uuid4().hex}", f"sk-b-{uuid.uuid4().hex}"
    ca, cb = make_client(proxy, a), make_client(proxy, b)
    try:
        chat(ca, PARAPHRASE[0])
        wait_cached(proxy, a, PARAPHRASE[0])
        for text in PARAPHRASE:
            _, h = chat(cb, text, {"cache-control": "no-store"}, extra_body={"user": "someone"})
            assert h["x-cachekit-cache"] == "MISS", text
        assert upstream_calls(upstream, b) == 2
    finally:
        ca.close()
        cb.close()


def test_shared_scope_group_shares(proxy: ProxyProcess, upstream: FakeUpstream) -> None:
    text = f"Shared question {uuid.uuid4().hex[:6]}"
    one, two = make_client(proxy, "sk-team-one"), make_client(proxy, "sk-team-two")
    try:
        first, _ = chat(one, text)
        wait_cached(proxy, "sk-team-one", text)
        got, h = chat(two, text)
        assert h["x-cachekit-cache"] == "HIT"
        assert got.choices[0].message.content == first.choices[0].message.content
    finally:
        one.close()
        two.close()


# ---------------------------------------------------------------------- never cached


def test_upstream_errors_reach_the_caller_and_are_not_cached(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    for stream in (False, True, False):
        with pytest.raises(openai.InternalServerError) as info:
            client.chat.completions.create(model="fake-error", messages=msgs("x"), stream=stream)
        assert info.value.status_code == 500
        assert "failed on purpose" in str(info.value.body)
    assert upstream_calls(upstream, key) == 3


def test_broken_streams_and_truncated_answers_are_not_cached(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    before = proxy.metric("cachekit_proxy_not_stored_total", reason="incomplete_stream")
    for _ in range(2):
        with pytest.raises((openai.APIError, httpx.HTTPError)):
            list(
                client.chat.completions.create(
                    model="fake-break", messages=msgs("tell me"), stream=True
                )
            )
    wait_until(
        lambda: (
            proxy.metric("cachekit_proxy_not_stored_total", reason="incomplete_stream")
            >= before + 2
        ),
        timeout=10.0,
    )
    assert upstream_calls(upstream, key) == 2
    for _ in range(2):
        r, _ = chat(client, "long story", model="fake-length")
        assert r.choices[0].finish_reason == "length"
    assert upstream_calls(upstream, key) == 4
    assert cached(proxy, key, "long story", model="fake-length").status_code == 504


# ---------------------------------------------------------------------- bad input, upstream


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"model": "m", "messages": [', None),
        (b"[1, 2]", None),
        (json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode(), "model"),
        (json.dumps({"model": "m"}).encode(), "messages"),
        (json.dumps({"model": "m", "messages": "hi"}).encode(), "messages"),
        (
            json.dumps({"model": "m", "messages": msgs("x"), "temperature": "hot"}).encode(),
            "temperature",
        ),
    ],
)
def test_bad_bodies_get_400(proxy: ProxyProcess, body: bytes, param: str | None) -> None:
    r = httpx.post(
        proxy.url + CHAT, content=body, timeout=10.0, headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["message"]
    assert err["param"] == param


@pytest.mark.parametrize(
    "headers",
    [
        {"cache-control": "max-age=soon"},
        {"x-cachekit-ttl": "-1"},
        {"x-cachekit-threshold": "1.5"},
        {"x-cachekit-namespace": "has space"},
    ],
)
def test_bad_control_headers_get_400(proxy: ProxyProcess, headers: dict[str, str]) -> None:
    r = httpx.post(
        proxy.url + CHAT,
        json={"model": MODEL, "messages": msgs("x")},
        headers=headers,
        timeout=10.0,
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == next(iter(headers))


def test_oversized_body_gets_413(proxy: ProxyProcess, upstream: FakeUpstream) -> None:
    big = {"model": MODEL, "messages": msgs("x" * 70_000)}
    r = httpx.post(proxy.url + CHAT, json=big, timeout=10.0)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

    def chunked() -> Iterator[bytes]:  # no content-length: the limit still holds
        data = json.dumps(big).encode()
        for i in range(0, len(data), 8192):
            yield data[i : i + 8192]

    r2 = httpx.post(proxy.url + CHAT, content=chunked(), timeout=10.0)
    assert r2.status_code == 413


def test_slow_upstream_gets_504(proxy: ProxyProcess, client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="fake-slow", messages=msgs("x"))
    assert info.value.status_code == 504
    assert "upstream" in info.value.message.lower()
    # The timed-out call gave back its hold: the in-flight gauge is back at 0.
    health = proxy.url + "/healthz"
    wait_until(lambda: httpx.get(health, timeout=5.0).json()["upstream_in_flight"] == 0)


def test_unreachable_upstream_gets_502() -> None:
    p = ProxyProcess(f"http://127.0.0.1:{free_port()}", "--no-semantic").start()
    try:
        r = httpx.post(p.url + CHAT, json={"model": MODEL, "messages": msgs("x")}, timeout=10.0)
        assert r.status_code == 502
        assert r.json()["error"]["code"] == "upstream_unreachable"
        assert httpx.get(p.url + "/v1/models", timeout=10.0).status_code == 502
    finally:
        p.stop()


# ---------------------------------------------------------------------- controls


def test_cache_control_and_cachekit_headers(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    text = "What is the boiling point of water?"
    _, h = chat(client, text, {"cache-control": "no-store"})
    assert h["x-cachekit-cache"] == "MISS"
    assert cached(proxy, key, text).status_code == 504  # not stored
    _, h = chat(client, text, {"cache-control": "no-cache"})
    assert h["x-cachekit-cache"] == "BYPASS"
    wait_cached(proxy, key, text)  # no-cache still stores
    _, h = chat(client, text, {"cache-control": "no-cache"})
    assert h["x-cachekit-cache"] == "BYPASS"
    _, h = chat(client, text, {"cache-control": "max-age=3600"})
    assert h["x-cachekit-cache"] == "HIT"
    # Age grows; max-age below it misses.
    wait_until(lambda: int(cached(proxy, key, text).headers.get("age", "0")) >= 1, timeout=10)
    _, h = chat(client, text, {"cache-control": "max-age=0"})
    assert h["x-cachekit-cache"] == "MISS"
    # Namespaces partition the cache.
    _, h = chat(client, text, {"x-cachekit-namespace": "other"})
    assert h["x-cachekit-cache"] == "MISS"
    # The threshold header only raises the bar.
    chat(client, PARAPHRASE[0])
    wait_cached(proxy, key, PARAPHRASE[0])
    _, h = chat(
        client, PARAPHRASE[1], {"x-cachekit-threshold": "0.999", "cache-control": "no-store"}
    )
    assert h["x-cachekit-cache"] == "MISS"
    _, h = chat(client, PARAPHRASE[1], {"x-cachekit-threshold": "0.5"})
    assert h["x-cachekit-cache"] == "SEMANTIC_HIT"
    # A one-second TTL expires.
    short = "Which ocean is the largest?"
    chat(client, short, {"x-cachekit-ttl": "1"})
    wait_cached(proxy, key, short)
    wait_until(lambda: cached(proxy, key, short).status_code == 504, timeout=10.0)


def test_metrics(proxy: ProxyProcess, client: openai.OpenAI, key: str) -> None:
    text = "How many legs does a spider have?"
    before = proxy.metrics()
    chat(client, text)
    wait_cached(proxy, key, text)
    chat(client, text)
    m = proxy.metrics()

    def delta(name: str, **labels: str) -> float:
        want = tuple(sorted(labels.items()))

        def total(d: dict[Any, float]) -> float:
            return sum(v for (n, ls), v in d.items() if n == name and all(i in ls for i in want))

        return total(m) - total(before)

    assert delta("cachekit_proxy_requests_total", endpoint="chat", cache="HIT") >= 2
    assert delta("cachekit_proxy_requests_total", endpoint="chat", cache="MISS") >= 1
    assert delta("cachekit_proxy_hit_latency_seconds_count", kind="HIT") >= 2
    assert delta("cachekit_proxy_upstream_latency_seconds_count", endpoint="chat") >= 1
    assert delta("cachekit_proxy_tokens_saved_total", model=MODEL, type="completion") > 0
    assert delta("cachekit_proxy_dollars_saved_total", model=MODEL) > 0
    assert ("cachekit_proxy_upstream_in_flight", ()) in m
    assert m[("cachekit_proxy_upstream_in_flight_avg", ())] >= 0
    assert httpx.get(proxy.url + "/healthz", timeout=5).json()["status"] == "ok"


def test_in_flight_counts_upstream_concurrency(proxy: ProxyProcess, key: str) -> None:
    started = threading.Barrier(4)

    def slow(i: int) -> None:
        c = make_client(proxy, key)
        try:
            started.wait(5)
            with pytest.raises(openai.APIStatusError):
                c.chat.completions.create(model="fake-slow", messages=msgs(f"q{i}"))
        finally:
            c.close()

    threads = [threading.Thread(target=slow, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: proxy.metric("cachekit_proxy_upstream_in_flight") >= 4, timeout=5.0)
    for t in threads:
        t.join(10)
    wait_until(lambda: proxy.metric("cachekit_proxy_upstream_in_flight") == 0, timeout=5.0)


# ---------------------------------------------------------------------- feedback

FEEDBACK = "/v1/cachekit/feedback"


def report(proxy: ProxyProcess, key: str, body: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        proxy.url + FEEDBACK,
        content=content,
        timeout=10.0,
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
    )


def semantic_hit(proxy: ProxyProcess, client: openai.OpenAI, key: str, text: str) -> Any:
    """Store an answer for ``text`` and get it back for a paraphrase (a semantic hit)."""
    first, _ = chat(client, text)
    wait_cached(proxy, key, text)
    para, h = chat(client, text + " please")
    assert h["x-cachekit-cache"] == "SEMANTIC_HIT"
    return first, para, h


def test_feedback_on_a_semantic_hit_demotes_the_entry(
    proxy: ProxyProcess, client: openai.OpenAI, key: str
) -> None:
    first, para, h = semantic_hit(proxy, client, key, "How do I rotate my signing keys")
    # A semantic hit is sent under an id of its own, also in x-cachekit-response-id; an
    # exact hit replays the stored answer's id.
    assert para.id != first.id and para.id.startswith("chatcmpl-ck")
    assert h["x-cachekit-response-id"] == para.id
    again, h2 = chat(client, "How do I rotate my signing keys")
    assert h2["x-cachekit-cache"] == "HIT" and again.id == first.id
    assert "x-cachekit-response-id" not in h2
    assert report(proxy, key, {"id": first.id, "correct": False}).status_code == 404
    # Another API key (another tenant) cannot report on this tenant's hit.
    other = report(proxy, f"sk-other-{uuid.uuid4().hex}", {"id": para.id, "correct": False})
    assert other.status_code == 404 and other.json()["error"]["code"] == "unknown_response_id"
    wrong = report(proxy, key, {"id": para.id, "correct": False})
    assert wrong.status_code == 200 and wrong.json() == {"recorded": True}
    assert report(proxy, key, {"id": para.id, "correct": False}).status_code == 404  # once
    # Demoted: the paraphrase is no longer served; the exact entry still is.
    assert cached(proxy, key, "How do I rotate my signing keys please").status_code == 504
    assert cached(proxy, key, "How do I rotate my signing keys").status_code == 200
    assert proxy.metric("cachekit_proxy_feedback_total", verdict="wrong", recorded="true") >= 1


def test_feedback_through_the_openai_client_and_on_a_streamed_hit(
    proxy: ProxyProcess, client: openai.OpenAI, key: str
) -> None:
    semantic_hit(proxy, client, key, "What is the boiling point of water")
    chunks, h = stream_chat(client, "What is the boiling point of water at sea level")
    assert h["x-cachekit-cache"] == "SEMANTIC_HIT"
    rid = h["x-cachekit-response-id"]
    assert {c.id for c in chunks} == {rid}
    got = client.post("/cachekit/feedback", cast_to=object, body={"id": rid, "correct": True})
    assert got == {"recorded": True}
    # A confirmation does not demote.
    assert cached(proxy, key, "What is the boiling point of water at sea level").status_code == 200


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"not json", None),
        (b"[1, 2]", None),
        ({"correct": False}, "id"),
        ({"id": 7, "correct": False}, "id"),
        ({"id": "", "correct": False}, "id"),
        ({"id": "x" * 300, "correct": False}, "id"),
        ({"id": "chatcmpl-x"}, "correct"),
        ({"id": "chatcmpl-x", "correct": "false"}, "correct"),
        ({"id": "chatcmpl-x", "correct": 0}, "correct"),
        ({"id": "chatcmpl-x", "correct": False, "why": "bad"}, "why"),
    ],
)
def test_feedback_refuses_bad_bodies(
    proxy: ProxyProcess, key: str, body: Any, param: str | None
) -> None:
    r = report(proxy, key, body)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["message"]
