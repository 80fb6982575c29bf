"""The endpoint registry (one :class:`Endpoint` object per API, nothing else branching on which
API a request is), the Messages API's keys, agentic turns on every endpoint, and answer
buckets on :class:`LLMCache` (both forms, shared through Redis)."""

from __future__ import annotations

import ast
import asyncio
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from cachekit import Cache, Status
from cachekit.llm import (
    CHAT,
    ENDPOINTS,
    MESSAGES,
    RESPONSES,
    Endpoint,
    LLMCache,
    PriceTable,
    cacheable_response,
    endpoint_for,
    prepare,
    register,
)
from cachekit.testing import DeterministicTestEmbedder

sys.path.insert(0, str(Path(__file__).parent))
from responses_bodies import responses_answer

ROOT = Path(__file__).resolve().parents[1]
ENDPOINT_NAMES = {"CHAT", "COMPLETIONS", "EMBEDDINGS", "RESPONSES", "MESSAGES", "endpoint"}


# ---------------------------------------------------------------------- the registry


def _compares_an_endpoint(node: ast.Compare) -> bool:
    """``endpoint == CHAT``, ``req.endpoint != RESPONSES``, ``x in (CHAT, ...)``; not
    ``is None``."""
    if any(isinstance(c, ast.Constant) and c.value is None for c in node.comparators):
        return False
    for side in (node.left, *node.comparators):
        name = side.id if isinstance(side, ast.Name) else getattr(side, "attr", None)
        if name in ENDPOINT_NAMES:
            return True
    return False


def test_no_module_outside_the_endpoint_modules_branches_on_the_endpoint() -> None:
    found = []
    for folder in (ROOT / "cachekit", ROOT / "adapters"):
        for path in folder.rglob("*.py"):
            if "endpoints" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Compare) and _compares_an_endpoint(node):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_the_registry_holds_every_api_once() -> None:
    assert list(ENDPOINTS) == [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/responses",
        "/v1/messages",
    ]
    assert endpoint_for("/v1/messages/") is ENDPOINTS[MESSAGES]
    assert endpoint_for("/v1/messages?beta=true") is ENDPOINTS[MESSAGES]
    assert endpoint_for("/v1/messages/count_tokens") is None
    with pytest.raises(ValueError, match="registered"):
        register(ENDPOINTS[CHAT])


class EchoEndpoint(Endpoint):
    """A one-module API: requests ``{"model", "text"}``, answers ``{"object": "echo", "text"}``."""

    path = "/v1/echo/endpoint-test"
    label = "echo"
    streams = False

    def validate(self, body: dict[str, Any]) -> None:
        if not isinstance(body.get("text"), str):
            from cachekit.llm import RequestError

            raise RequestError("text must be a string", param="text")

    def semantic_text(self, body: Mapping[str, Any]) -> str | None:
        return body["text"]

    def scope_fields(self, fields: dict[str, Any]) -> dict[str, Any]:
        fields.pop("text", None)
        return fields

    def check_response(self, body: Mapping[str, Any]) -> str | None:
        return None if body.get("object") == "echo" else "not an echo"


@pytest.fixture
def echo_registered() -> Iterator[Endpoint]:
    endpoint = register(EchoEndpoint())
    try:
        yield endpoint
    finally:
        del ENDPOINTS[endpoint.path]


def test_adding_an_api_is_one_class_and_one_registration(echo_registered: Endpoint) -> None:
    from starlette.testclient import TestClient

    from cachekit.proxy.app import create_app
    from cachekit.proxy.config import ProxyConfig
    from cachekit.testing.upstream import FakeUpstream, serving

    with serving(FakeUpstream()) as upstream:
        config = ProxyConfig.load(overrides={"upstream": upstream.url, "semantic": False})
        with TestClient(create_app(config)) as client:
            r = client.post("/v1/echo/endpoint-test", json={"model": "m", "text": "hi"})
            # Routed, keyed and sent upstream (whose echo is no answer of this API: not stored).
            assert r.status_code == 200 and r.headers["x-cachekit-cache"] == "MISS"
            assert upstream.count("/v1/echo/endpoint-test") == 1
            bad = client.post("/v1/echo/endpoint-test", json={"model": "m", "text": 3})
            assert bad.status_code == 400 and bad.json()["error"]["param"] == "text"


# ---------------------------------------------------------------------- Messages keys


def message(text: str = "What is 2 + 2?", **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


def _key(body: dict[str, Any], **headers: str) -> str:
    return prepare(MESSAGES, body, "t", headers=headers).key


def test_messages_keys_what_changes_the_answer_and_nothing_else() -> None:
    base = _key(message(system="Be brief."))
    same = [
        message(system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "x"}}]),
        message(system="Be brief.", metadata={"user_id": "u"}, stream=True),
        message(system="Be brief.", service_tier="auto"),
        {
            **message(system="Be brief."),
            "messages": [{"role": "user", "content": [{"type": "text", "text": "What is 2 + 2?"}]}],
        },
    ]
    assert all(_key(b) == base for b in same)
    different = [
        message(system="Be verbose."),
        message(system="Be brief.", max_tokens=100),
        message(system="Be brief.", temperature=0.5),
        message(system="Be brief.", stop_sequences=["\n"]),
        message(system="Be brief.", tools=[{"name": "t", "input_schema": {}}]),
        message(system="Be brief.", tool_choice={"type": "any"}),
        message(system="Be brief.", thinking={"type": "enabled", "budget_tokens": 1024}),
    ]
    assert len({_key(b) for b in different} | {base}) == len(different) + 1
    assert _key(message(system="Be brief."), **{"anthropic-beta": "x-2025"}) != base
    assert _key(message(system="Be brief."), **{"anthropic-version": "2023-06-01"}) != base


def test_messages_storable_stop_reasons() -> None:
    def answer(stop: str | None) -> dict[str, Any]:
        return {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "4"}],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 1},
        }

    for stop in ("end_turn", "stop_sequence", "tool_use"):
        assert cacheable_response(MESSAGES, 200, answer(stop)) == (True, "")
    for unfinished in ("max_tokens", "pause_turn", "model_context_window_exceeded", None):
        assert not cacheable_response(MESSAGES, 200, answer(unfinished))[0]
    assert cacheable_response(MESSAGES, 200, answer("max_tokens"), cache_length=True)[0]
    assert not cacheable_response(MESSAGES, 200, answer("refusal"), cache_refusals=False)[0]
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}
    assert cacheable_response(MESSAGES, 200, error) == (False, "error body")


def test_messages_usage_counts_the_prompt_cache_as_input() -> None:
    usage = {
        "input_tokens": 10,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 1000,
        "output_tokens": 20,
    }
    assert ENDPOINTS[MESSAGES].usage_counts(usage) == (1110, 20)
    assert ENDPOINTS[MESSAGES].usage_counts({"input_tokens": True}) is None
    dollars = PriceTable().cost("claude-sonnet-4-5-20250929", usage)
    assert dollars == pytest.approx((1110 * 3.0 + 20 * 15.0) / 1e6)


# ---------------------------------------------------------------------- agentic turns


def _chat_turn(result: str) -> tuple[str, dict[str, Any]]:
    return CHAT, {
        "model": "m",
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": []},
            {"role": "tool", "tool_call_id": "call_1", "content": result},
        ],
    }


def _responses_turn(result: str) -> tuple[str, dict[str, Any]]:
    return RESPONSES, {
        "model": "m",
        "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": result},
        ],
    }


def _messages_turn(result: str) -> tuple[str, dict[str, Any]]:
    return MESSAGES, {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "w"}]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": result}],
            },
        ],
    }


def _claude_answer() -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Take an umbrella."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 3},
    }


TURNS = [_chat_turn, _responses_turn, _messages_turn]
ANSWERS = {
    CHAT: lambda: _answer(0),
    RESPONSES: lambda: responses_answer(),
    MESSAGES: _claude_answer,
}
RESULT = "It is 21 degrees and sunny in Paris today"


@pytest.mark.parametrize("turn", TURNS, ids=["chat", "responses", "messages"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_tool_result_turn_is_never_a_semantic_hit(turn: Any, asynchronous: bool) -> None:
    endpoint, body = turn(RESULT)
    req = prepare(endpoint, body, "t")
    assert req.text is None and req.exact_only == "tool result"
    llm = LLMCache(Cache(), threshold=0.5, embedder=DeterministicTestEmbedder(dim=64))
    answer = ANSWERS[endpoint]()
    assert llm.cacheable(endpoint, 200, answer)[0]

    def run(coro_or_value: Any) -> Any:
        return asyncio.run(coro_or_value) if asynchronous else coro_or_value

    store = llm.astore if asynchronous else llm.store
    lookup = llm.alookup if asynchronous else llm.lookup
    run(store(req, answer, semantic=True))
    near = prepare(endpoint, turn(RESULT + "!")[1], "t")
    assert run(lookup(near)).status is Status.MISS
    assert run(lookup(prepare(endpoint, body, "t"))).status is Status.HIT
    llm.close()


@pytest.mark.parametrize(
    ("endpoint", "body"),
    [
        (CHAT, {"model": "m", "messages": [{"role": "user", "content": "  "}]}),
        (RESPONSES, {"model": "m", "input": ""}),
        (MESSAGES, message("")),
    ],
    ids=["chat", "responses", "messages"],
)
def test_an_empty_last_user_text_is_exact_only(endpoint: str, body: dict[str, Any]) -> None:
    req = prepare(endpoint, body, "t")
    assert req.text is None and req.exact_only == "empty text"


# ---------------------------------------------------------------------- buckets


def _answer(i: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{i}",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": f"joke {i}"},
                "finish_reason": "stop",
            }
        ],
    }


def _ask(text: str) -> dict[str, Any]:
    return {"model": "m", "temperature": 0.8, "messages": [{"role": "user", "content": text}]}


async def _maybe(value: Any) -> Any:
    return await value if asyncio.iscoroutine(value) else value


def _bucket_round(llm: LLMCache, other: LLMCache, asynchronous: bool) -> None:
    lookup = llm.alookup if asynchronous else llm.lookup
    store = llm.astore if asynchronous else llm.store
    other_lookup = other.alookup if asynchronous else other.lookup

    async def go() -> None:
        req = prepare(CHAT, _ask("Tell me a joke about cats"), "t")
        for i in range(3):
            found = await _maybe(lookup(req, bucket=3))
            assert found.status is Status.MISS
            assert (found.reason or "") == ("" if i == 0 else f"bucket filling {i}/3")
            assert await _maybe(store(req, _answer(i), bucket=3))
        assert not await _maybe(store(req, _answer(9), bucket=3))  # full: not added
        seen = set()
        for _ in range(30):
            found = await _maybe(other_lookup(req, bucket=3))
            assert found.status is Status.HIT
            seen.add(found.response["id"])
        assert seen == {"chatcmpl-0", "chatcmpl-1", "chatcmpl-2"}
        para = prepare(CHAT, _ask("Tell me a joke about cats please"), "t")
        deadline = time.monotonic() + 10.0  # another process's index syncs through Redis
        while (await _maybe(other_lookup(para, bucket=3))).status is not Status.SEMANTIC_HIT:
            assert time.monotonic() < deadline, "the bucket never became a semantic hit"
            await asyncio.sleep(0.01)
        hits = {(await _maybe(other_lookup(para, bucket=3))).response["id"] for _ in range(30)}
        assert hits == seen  # a semantic match draws from the bucket too
        plain = await _maybe(other_lookup(req))
        assert plain.status is Status.HIT and plain.response["id"] in seen

    asyncio.run(go())


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_bucket_fills_then_serves_its_answers_at_random(asynchronous: bool) -> None:
    llm = LLMCache(Cache(), threshold=0.8, embedder=DeterministicTestEmbedder(dim=64))
    _bucket_round(llm, llm, asynchronous)
    llm.close()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_bucket_is_shared_through_redis(redis_url: str, asynchronous: bool) -> None:
    embedder = DeterministicTestEmbedder(dim=64)
    one = LLMCache(Cache(redis_url=redis_url, namespace="b"), threshold=0.8, embedder=embedder)
    two = LLMCache(Cache(redis_url=redis_url, namespace="b"), threshold=0.8, embedder=embedder)
    two.warm(False, 10.0)
    _bucket_round(one, two, asynchronous)
    one.close()
    two.close()


def test_bucket_sizes_are_checked() -> None:
    llm = LLMCache(Cache(), semantic=False)
    for bad in (0, 65, True, "3"):
        with pytest.raises(ValueError, match="bucket size"):
            llm.lookup(_ask("x"), bucket=bad)  # type: ignore[arg-type]
    llm.close()
