"""OpenTelemetry traces (docs/tracing.md): off unless enabled, and then the spans of a lookup
(exact, semantic, Redis) and of a proxied request, whose trace the client's ``traceparent``
starts and the upstream call continues."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")  # the otel extra: not in a base install

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cachekit import Cache, disable_tracing, enable_tracing
from cachekit._core.tracing import NO_SPAN, client_span, server_span, span, tracing_enabled
from cachekit.llm import LLMCache
from cachekit.testing import DeterministicTestEmbedder

CHAT = "/v1/chat/completions"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def chat(text: str) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}


def answer(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


@pytest.fixture(autouse=True)
def tracing_left_off() -> Iterator[None]:
    """No test leaves tracing on for the next one."""
    disable_tracing()
    try:
        yield
    finally:
        disable_tracing()


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Tracing on, every finished span kept in memory."""
    found = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(found))
    enable_tracing(provider)
    try:
        yield found
    finally:
        disable_tracing()
        provider.shutdown()


def named(spans: Any, name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def children(spans: Any, parent: ReadableSpan, name: str) -> list[ReadableSpan]:
    own = parent.context.span_id
    return [s for s in named(spans, name) if s.parent is not None and s.parent.span_id == own]


Call = Callable[..., Any]


@pytest.fixture(params=["sync", "async"])
def form(request: pytest.FixtureRequest) -> Iterator[Callable[[Call, Call], Call]]:
    """``form(llm.lookup, llm.alookup)``: the method of the test's form, called synchronously
    (the asyncio form runs on one loop for the whole test)."""
    if request.param == "sync":
        yield lambda sync, _: sync
    else:
        with asyncio.Runner() as runner:
            yield lambda _, coro: lambda *a, **k: runner.run(coro(*a, **k))


@pytest.mark.parametrize("shared", ["memory", "redis"])
def test_lookup_spans(
    shared: str,
    form: Callable[[Call, Call], Call],
    exporter: InMemorySpanExporter,
    request: pytest.FixtureRequest,
) -> None:
    redis_url = request.getfixturevalue("redis_url") if shared == "redis" else None
    form_name = request.node.callspec.params["form"]
    llm = LLMCache(
        Cache(redis_url=redis_url, namespace="tracing"),
        threshold=0.8,
        embedder=DeterministicTestEmbedder(),
    )
    lookup, store = form(llm.lookup, llm.alookup), form(llm.store, llm.astore)
    try:
        question = chat("how do I reset my password")
        assert lookup(question).status.name == "MISS"
        assert store(question, answer("like this"))
        exporter.clear()
        assert lookup(question).status.name == "HIT"
        assert lookup(chat("how do I reset my password please")).status.name == "SEMANTIC_HIT"
        spans = exporter.get_finished_spans()
    finally:
        llm.close()

    hit, semantic = named(spans, "cachekit.lookup")
    assert hit.attributes is not None and semantic.attributes is not None
    assert dict(hit.attributes) == {
        "cachekit.endpoint": CHAT,
        "cachekit.status": "HIT",
        "cachekit.tier": "exact",
    }
    assert semantic.attributes["cachekit.status"] == "SEMANTIC_HIT"
    assert semantic.attributes["cachekit.tier"] == "semantic"
    assert float(semantic.attributes["cachekit.similarity"]) >= 0.8  # type: ignore[arg-type]
    assert not children(spans, hit, "cachekit.embed")  # an exact hit embeds nothing
    (embed,) = children(spans, semantic, "cachekit.embed")
    assert embed.attributes is not None and embed.attributes["cachekit.texts"] == 1
    assert len(children(spans, semantic, "cachekit.index.search")) == 1
    if shared == "redis":
        # The exact hit is L1's; the semantic lookup's exact read of its new text misses L1
        # and asks Redis (the shared tier's method: get_many, or aget_many in the async form).
        assert not children(spans, hit, "cachekit.redis")
        reads = children(spans, semantic, "cachekit.redis")
        assert [(s.attributes or {}).get("db.operation.name") for s in reads] == [
            "get_many" if form_name == "sync" else "aget_many"
        ]
    else:
        assert not named(spans, "cachekit.redis")


def test_a_miss_is_traced_with_its_reason(exporter: InMemorySpanExporter) -> None:
    llm = LLMCache(Cache(), threshold=0.99, embedder=DeterministicTestEmbedder())
    try:
        llm.store(chat("how do I reset my password"), answer("like this"))
        exporter.clear()
        found = llm.lookup(chat("how do I reset my password please"))
    finally:
        llm.close()
    (lookup,) = named(exporter.get_finished_spans(), "cachekit.lookup")
    assert lookup.attributes is not None
    assert lookup.attributes["cachekit.status"] == "MISS"
    assert lookup.attributes["cachekit.tier"] == "semantic"
    assert lookup.attributes["cachekit.reason"] == found.reason
    assert lookup.attributes["cachekit.similarity"] == found.similarity


# ---------------------------------------------------------------------- the proxy


def test_a_proxied_request_continues_the_clients_trace_upstream(
    exporter: InMemorySpanExporter,
) -> None:
    from starlette.testclient import TestClient

    from cachekit.proxy.app import create_app
    from cachekit.proxy.config import ProxyConfig
    from cachekit.testing.upstream import FakeUpstream, serving

    headers = {"authorization": "Bearer sk-tracing", "traceparent": TRACEPARENT}
    with serving(FakeUpstream()) as fake:
        config = ProxyConfig.load(None, {"upstream": fake.url, "semantic": False})
        with TestClient(create_app(config)) as client:
            miss = client.post(CHAT, json=chat("hello there"), headers=headers)
            hit = client.post(CHAT, json=chat("hello there"), headers=headers)
            models = client.get("/v1/models", headers=headers)
            client.get("/healthz", headers=headers)
        # The proxy's own probe of the upstream at start is a GET /v1/models too: the last one.
        calls = [c for c in fake.calls if c["path"] == CHAT]
        calls += [c for c in fake.calls if c["path"] == "/v1/models"][-1:]
    assert (miss.headers["x-cachekit-cache"], hit.headers["x-cachekit-cache"]) == ("MISS", "HIT")
    assert models.headers["x-cachekit-cache"] == "PASSTHROUGH"
    spans = exporter.get_finished_spans()

    requests = named(spans, "cachekit.proxy.request")
    assert len(requests) == 3  # /healthz is not a proxied request
    for server in requests:
        assert format(server.context.trace_id, "032x") == TRACE_ID
        assert server.parent is not None and format(server.parent.span_id, "016x") == PARENT_ID
    first, second, third = requests
    attrs = [dict(s.attributes or {}) for s in requests]
    assert [a["cachekit.cache"] for a in attrs] == ["MISS", "HIT", "PASSTHROUGH"]
    assert [a["http.response.status_code"] for a in attrs] == [200, 200, 200]
    assert attrs[0]["url.path"] == CHAT and attrs[0]["http.request.method"] == "POST"

    # The miss's lookup and upstream call are the server span's children, and the upstream
    # received the upstream span's context: the same trace, continued.
    assert len(children(spans, first, "cachekit.lookup")) == 1
    (upstream,) = children(spans, first, "cachekit.upstream")
    assert upstream.attributes is not None and upstream.attributes["url.path"] == CHAT
    assert upstream.attributes["http.response.status_code"] == 200
    assert not children(spans, second, "cachekit.upstream")  # a hit never goes upstream
    (forwarded,) = children(spans, third, "cachekit.upstream")  # the passthrough route
    assert len(calls) == 2
    for call, parent in zip(calls, (upstream, forwarded), strict=True):
        version, trace_id, span_id, _ = call["headers"]["traceparent"].split("-")
        assert (version, trace_id) == ("00", TRACE_ID)
        assert span_id == format(parent.context.span_id, "016x")


def test_a_request_without_traceparent_starts_a_trace(exporter: InMemorySpanExporter) -> None:
    from starlette.testclient import TestClient

    from cachekit.proxy.app import create_app
    from cachekit.proxy.config import ProxyConfig
    from cachekit.testing.upstream import FakeUpstream, serving

    with serving(FakeUpstream()) as fake:
        config = ProxyConfig.load(None, {"upstream": fake.url, "semantic": False})
        with TestClient(create_app(config)) as client:
            client.post(CHAT, json=chat("hi"), headers={"authorization": "Bearer sk-t2"})
        sent = [c for c in fake.calls if c["path"] == CHAT][-1]["headers"]["traceparent"]
    (server,) = named(exporter.get_finished_spans(), "cachekit.proxy.request")
    assert server.parent is None
    assert sent.split("-")[1] == format(server.context.trace_id, "032x")


# ---------------------------------------------------------------------- off


def test_off_makes_no_spans_and_one_no_op_object(exporter: InMemorySpanExporter) -> None:
    disable_tracing()  # enabled by the fixture, then off again
    assert not tracing_enabled()
    assert span("a") is span("b", x=1) is client_span("c") is NO_SPAN
    assert server_span("d", {"traceparent": TRACEPARENT}) is NO_SPAN
    with span("a") as s:
        assert s is NO_SPAN and not s.recording
        s.set_attribute("status", "HIT")  # a no-op, never an error
        headers: dict[str, str] = {}
        s.inject(headers)
        assert headers == {}
    llm = LLMCache(Cache(), threshold=0.8, embedder=DeterministicTestEmbedder())
    try:
        llm.store(chat("how do I reset my password"), answer("like this"))
        assert llm.lookup(chat("how do I reset my password please")).hit
    finally:
        llm.close()
    assert exporter.get_finished_spans() == ()


def test_off_by_default_never_imports_opentelemetry() -> None:
    code = (
        "import json, sys\n"
        "from cachekit import Cache\n"
        "from cachekit._core.tracing import NO_SPAN, span\n"
        "from cachekit.llm import LLMCache\n"
        "from cachekit.proxy.app import create_app\n"
        "from cachekit.proxy.config import ProxyConfig\n"
        "from cachekit.testing import DeterministicTestEmbedder\n"
        "llm = LLMCache(Cache(), threshold=0.8, embedder=DeterministicTestEmbedder())\n"
        "body = {'model': 'm', 'messages': [{'role': 'user', 'content': 'hi'}]}\n"
        "llm.lookup(body)\n"
        "app = create_app(ProxyConfig.load(None, {'upstream': 'http://127.0.0.1:9', "
        "'semantic': False}))\n"
        "assert span('x') is NO_SPAN\n"
        "print(json.dumps([m for m in sys.modules if m.startswith('opentelemetry')]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CACHEKIT_OTEL"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


# ---------------------------------------------------------------------- configuration


def test_serve_otel_option_and_setting() -> None:
    from cachekit.cli.main import build_parser
    from cachekit.proxy import server as serve_cli

    parse = build_parser().parse_args
    on = serve_cli.config_from_args(parse(["serve", "--upstream", "http://u", "--otel"]))
    off = serve_cli.config_from_args(parse(["serve", "--upstream", "http://u"]))
    assert (on.proxy.otel, off.proxy.otel) == (True, False)


def test_cachekit_otel_env_traces_with_the_otel_environments_exporter() -> None:
    # A process of its own: it sets the global tracer provider, from the OTEL_* variables.
    code = (
        "from starlette.testclient import TestClient\n"
        "from cachekit.proxy.app import create_app\n"
        "from cachekit.proxy.config import ProxyConfig\n"
        "from cachekit._core.tracing import tracing_enabled\n"
        "app = create_app(ProxyConfig.load(None, {'upstream': 'http://127.0.0.1:9', "
        "'semantic': False}))\n"
        "assert tracing_enabled()\n"
        "with TestClient(app) as client:\n"
        f"    client.get('/v1/models', headers={{'traceparent': '{TRACEPARENT}'}})\n"
    )
    env = {
        **os.environ,
        "CACHEKIT_OTEL": "1",
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_SERVICE_NAME": "proxy-under-test",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    # The console exporter prints each span as JSON (on exit at the latest).
    assert '"name": "cachekit.proxy.request"' in out.stdout
    assert f'"trace_id": "0x{TRACE_ID}"' in out.stdout
    assert '"service.name": "proxy-under-test"' in out.stdout
