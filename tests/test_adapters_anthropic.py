"""``cachekit.adapters.anthropic.cached_client`` with the real anthropic client (sync and async)
talking HTTP to the fake upstream's Messages API on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anthropic
import pytest
from anthropic.lib.streaming import AsyncMessageStreamManager, MessageStreamManager
from anthropic.types import Message, ToolUseBlock
from cachekit.adapters.anthropic import (
    AsyncRecordingStream,
    RecordingStream,
    cached_client,
)

from cachekit import Cache, Status
from cachekit.llm import CacheLookup, LLMCache
from cachekit.testing import DeterministicTestEmbedder, FakeUpstream, serving

MODEL = "claude-fake"
MESSAGES = "/v1/messages"
TOOLS: list[Any] = [
    {"name": "weather", "description": "the weather", "input_schema": {"type": "object"}}
]
MODES = ["sync", "async"]


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with serving(FakeUpstream()) as fake:
        yield fake


@pytest.fixture
def llm() -> Iterator[LLMCache]:
    cache = LLMCache(Cache(), threshold=0.8, embedder=DeterministicTestEmbedder(dim=64))
    yield cache
    cache.close()


@pytest.fixture
async def make(upstream: FakeUpstream, llm: LLMCache) -> AsyncIterator[Callable[[str], Any]]:
    """A cached client of a fresh API key (a tenant of its own), sync or async; closed after."""
    raws: list[Any] = []

    def client(mode: str) -> Any:
        cls = anthropic.AsyncAnthropic if mode == "async" else anthropic.Anthropic
        raw = cls(api_key=f"sk-ant-{uuid.uuid4().hex}", base_url=upstream.url, max_retries=0)
        raws.append(raw)
        return cached_client(raw, llm)

    yield client
    for raw in raws:
        await call(raw.close())


async def call(x: Any) -> Any:
    return await x if hasattr(x, "__await__") else x


async def events_of(stream: Any) -> list[Any]:
    if hasattr(stream, "__aiter__"):
        return [e async for e in stream]
    return list(stream)


def text_of(events: list[Any]) -> str:
    return "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )


def answer(message: Any) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


async def helper(manager: Any) -> tuple[str, Any]:
    """The joined ``text_stream`` and the final message of the SDK's ``messages.stream(...)``."""
    if isinstance(manager, AsyncMessageStreamManager):
        async with manager as stream:
            text = "".join([t async for t in stream.text_stream])
            return text, await stream.get_final_message()
    assert isinstance(manager, MessageStreamManager)
    with manager as stream:
        return "".join(stream.text_stream), stream.get_final_message()


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def ask(client: Any, text: str, **kwargs: Any) -> Any:
    kwargs.setdefault("model", MODEL)
    kwargs.setdefault("max_tokens", 64)
    return client.messages.create(messages=[user(text)], **kwargs)


@pytest.mark.parametrize("mode", MODES)
async def test_exact_semantic_and_tenants(upstream: FakeUpstream, make: Any, mode: str) -> None:
    client = make(mode)
    first = await call(ask(client, "How do I reset my password"))
    again = await call(ask(client, "How do I reset my password", metadata={"user_id": "u1"}))
    para = await call(ask(client, "how do I reset my password please"))
    assert isinstance(again, Message) and isinstance(para, Message)
    assert again.model_dump() == first.model_dump()  # an exact hit keeps the upstream's id
    assert answer(first) == "Answer #1 to: How do I reset my password" == answer(para)
    assert para.id != first.id and para.id.startswith("msg_ck")
    assert upstream.count(MESSAGES) == 1
    other = make(mode)  # another API key: another tenant
    theirs = await call(ask(other, "How do I reset my password"))
    assert answer(theirs) == "Answer #2 to: How do I reset my password"
    prompted = await call(ask(client, "How do I reset my password", system="Answer in French"))
    assert answer(prompted) == "Answer #3 to: How do I reset my password"
    assert upstream.count(MESSAGES) == 3


@pytest.mark.parametrize("mode", MODES)
async def test_arguments_the_sdk_drops_and_headers_it_sends(
    upstream: FakeUpstream, make: Any, mode: str
) -> None:
    client = make(mode)
    text = "Explain caching briefly"
    stop = ["THE END"]
    first = await call(ask(client, text, stop_sequences=stop))
    # extra_body is part of the body; NotGiven / omit values and transport arguments are not.
    same = [
        await call(ask(client, text, extra_body={"stop_sequences": stop})),
        await call(ask(client, text, stop_sequences=stop, system=anthropic.NOT_GIVEN, timeout=30)),
        await call(ask(client, text, stop_sequences=stop, tool_choice=anthropic.omit)),
    ]
    assert [m.id for m in same] == [first.id] * 3
    assert upstream.count(MESSAGES) == 1
    # A beta feature changes the answer: keyed, like the proxy keys the anthropic-beta header.
    beta = await call(
        ask(client, text, stop_sequences=stop, extra_headers={"anthropic-beta": "x-1"})
    )
    assert beta.id != first.id and upstream.count(MESSAGES) == 2
    assert upstream.calls[-1]["headers"]["anthropic-beta"] == "x-1"
    again = await call(
        ask(client, text, stop_sequences=stop, extra_headers={"anthropic-beta": "x-1"})
    )
    assert again.id == beta.id and upstream.count(MESSAGES) == 2


@pytest.mark.parametrize("mode", MODES)
async def test_streamed_hit_replays_the_answer(
    upstream: FakeUpstream, make: Any, mode: str
) -> None:
    client = make(mode)
    whole = await call(ask(client, "Explain caching briefly"))
    stream = await call(ask(client, "Explain caching briefly", stream=True))
    assert isinstance(stream, anthropic.AsyncStream if mode == "async" else anthropic.Stream)
    events = await events_of(stream)
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    assert text_of(events) == answer(whole)
    assert sum(1 for e in events if e.type == "content_block_delta") >= 3
    assert events[0].message.id == whole.id
    assert upstream.count(MESSAGES) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_stream_helper_over_the_cache(upstream: FakeUpstream, make: Any, mode: str) -> None:
    client = make(mode)
    whole = await call(ask(client, "Explain caching briefly"))
    manager = client.messages.stream(
        model=MODEL, max_tokens=64, messages=[user("Explain caching briefly")]
    )
    text, final = await helper(manager)
    assert text == answer(whole) == answer(final)
    assert final.id == whole.id and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == whole.usage.output_tokens
    # A miss through the helper is relayed as it comes, then stored.
    text, final = await helper(
        client.messages.stream(model=MODEL, max_tokens=64, messages=[user("stream this")])
    )
    assert text == "Answer #2 to: stream this" == answer(final)
    stored = await call(ask(client, "stream this"))
    assert stored.id == final.id and answer(stored) == text
    assert upstream.count(MESSAGES) == 2


@pytest.mark.parametrize("mode", MODES)
async def test_streamed_miss_is_relayed_then_stored(
    upstream: FakeUpstream, make: Any, mode: str
) -> None:
    client = make(mode)
    stream = await call(ask(client, "stream me", stream=True))
    assert isinstance(stream, AsyncRecordingStream if mode == "async" else RecordingStream)
    events = await events_of(stream)
    assert text_of(events) == "Answer #1 to: stream me"
    whole = await call(ask(client, "stream me"))
    assert isinstance(whole, Message) and answer(whole) == text_of(events)
    assert whole.id == events[0].message.id and whole.stop_reason == "end_turn"
    assert upstream.count(MESSAGES) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_tool_use_is_cached(upstream: FakeUpstream, make: Any, mode: str) -> None:
    client = make(mode)
    first = await call(ask(client, "weather in Paris", tools=TOOLS))
    assert first.stop_reason == "tool_use"
    again = await call(ask(client, "weather in Paris", tools=TOOLS))
    call_of = [b for b in again.content if isinstance(b, ToolUseBlock)]
    assert call_of and call_of[0].input == {"q": "weather in Paris"}
    assert again.model_dump() == first.model_dump()
    events = await events_of(await call(ask(client, "weather in Paris", tools=TOOLS, stream=True)))
    parts = "".join(
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    )
    assert json.loads(parts) == call_of[0].input
    _, final = await helper(
        client.messages.stream(
            model=MODEL, max_tokens=64, messages=[user("weather in Paris")], tools=TOOLS
        )
    )
    assert [b.input for b in final.content if b.type == "tool_use"] == [call_of[0].input]
    assert upstream.count(MESSAGES) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_errors_and_broken_streams_are_not_stored(
    upstream: FakeUpstream, make: Any, mode: str
) -> None:
    client = make(mode)
    for n in range(2):
        with pytest.raises(anthropic.APIStatusError):
            await events_of(await call(ask(client, "x", model="fake-error-event", stream=True)))
        with pytest.raises(anthropic.APIStatusError):
            await helper(
                client.messages.stream(
                    model="fake-error-event", max_tokens=64, messages=[user("x")]
                )
            )
        with pytest.raises(anthropic.InternalServerError):
            await call(ask(client, "y", model="fake-error"))
        cut = await call(ask(client, "z", model="fake-length"))
        assert cut.stop_reason == "max_tokens"
        assert upstream.count(MESSAGES) == 4 * (n + 1)  # each went upstream


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_result_is_never_a_semantic_hit(
    upstream: FakeUpstream, make: Any, mode: str
) -> None:
    client = make(mode)
    asked = user("What is the weather in Paris")
    called = {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"q": "Paris"}}
        ],
    }

    def result(text: str) -> dict[str, Any]:
        return user([{"type": "tool_result", "tool_use_id": "toolu_1", "content": text}])

    def turn(last: dict[str, Any]) -> Any:
        return client.messages.create(
            model=MODEL, max_tokens=64, tools=TOOLS, messages=[asked, called, last]
        )

    stored = "Paris is sunny and warm with a light wind"
    near = "Paris is sunny and warm with a light breeze"
    # The two texts are close enough for a semantic hit as a user's text ...
    await call(turn(user(stored)))
    hit = await call(turn(user(near)))
    assert hit.id.startswith("msg_ck") and upstream.count(MESSAGES) == 1
    # ... but a tool's output is matched exactly only.
    first = await call(turn(result(stored)))
    other = await call(turn(result(near)))
    assert upstream.count(MESSAGES) == 3
    assert other.content[-1].input == {"q": near} != first.content[-1].input
    again = await call(turn(result(stored)))
    assert again.model_dump() == first.model_dump() and upstream.count(MESSAGES) == 3


@pytest.mark.parametrize("mode", MODES)
async def test_feedback_on_a_semantic_hit(upstream: FakeUpstream, make: Any, mode: str) -> None:
    client = make(mode)
    stored, para = "How do I rotate my signing keys", "how do I rotate my signing keys please"
    await call(ask(client, stored))
    await call(ask(client, para))
    assert upstream.count(MESSAGES) == 1  # the paraphrase was a hit
    kwargs: dict[str, Any] = {"model": MODEL, "max_tokens": 64}
    assert await call(client.feedback(False, messages=[user("never asked")], **kwargs)) is False
    assert await call(client.feedback(False, messages=[user(para)], **kwargs)) is True
    await call(ask(client, para))
    assert upstream.count(MESSAGES) == 2  # demoted: computed upstream


@pytest.mark.parametrize("mode", MODES)
async def test_everything_else_is_the_clients(upstream: FakeUpstream, make: Any, mode: str) -> None:
    client = make(mode)
    counted = await call(
        client.messages.count_tokens(model=MODEL, messages=[user("three words here")])
    )
    assert counted.input_tokens == 3
    assert upstream.count("/v1/messages/count_tokens") == 1
    # A request the rules refuse goes to the API as it is, which says what is wrong.
    for n in (1, 2):
        with pytest.raises(anthropic.BadRequestError):
            await call(ask(client, "hello", max_tokens=0))
        assert upstream.count(MESSAGES) == n


@pytest.mark.parametrize("mode", MODES)
async def test_a_stored_answer_the_sdk_cannot_read_is_a_miss(
    upstream: FakeUpstream, llm: LLMCache, make: Any, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make(mode)
    odd = {"id": "msg_odd", "type": "message", "role": "assistant", "content": "not blocks"}
    found = CacheLookup(Status.HIT, odd)

    async def afound(*args: Any, **kwargs: Any) -> CacheLookup:
        return found

    monkeypatch.setattr(llm, "lookup", lambda *args, **kwargs: found)
    monkeypatch.setattr(llm, "alookup", afound)
    whole = await call(ask(client, "What is new"))
    events = await events_of(await call(ask(client, "What is new", stream=True)))
    assert answer(whole) == "Answer #1 to: What is new"
    assert text_of(events) == "Answer #2 to: What is new"
    assert upstream.count(MESSAGES) == 2


def test_rejects_other_clients(llm: LLMCache) -> None:
    with pytest.raises(TypeError, match=r"anthropic\.Anthropic"):
        cached_client(object(), llm)


def test_a_missing_anthropic_package_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['anthropic'] = None\n"
        "try:\n"
        "    import cachekit.adapters.anthropic\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("MissingExtraError"), out.stdout
    assert "pip install 'cachekit-ml[anthropic]'" in out.stdout
    assert "(anthropic is missing)" in out.stdout


@pytest.mark.parametrize("mode", MODES)
async def test_a_bucket_of_three_answers_sampled_requests(
    upstream: FakeUpstream, llm: LLMCache, mode: str
) -> None:
    cls = anthropic.AsyncAnthropic if mode == "async" else anthropic.Anthropic
    raw = cls(api_key=f"sk-ant-{uuid.uuid4().hex}", base_url=upstream.url, max_retries=0)
    client = cached_client(raw, llm, bucket_size=3)
    sampled = {"extra_body": {"temperature": 0.8}}
    made = [answer(await call(ask(client, "Tell me a joke", **sampled))) for _ in range(3)]
    assert len(set(made)) == 3 and upstream.count("/v1/messages") == 3
    served = {answer(await call(ask(client, "Tell me a joke", **sampled))) for _ in range(24)}
    assert served <= set(made) and len(served) >= 2  # one of the three, at random
    assert upstream.count("/v1/messages") == 3
    greedy = {"extra_body": {"temperature": 0}}
    await call(ask(client, "Tell me a joke", **greedy))
    await call(ask(client, "Tell me a joke", **greedy))
    assert upstream.count("/v1/messages") == 4  # temperature 0: one answer per key
    await call(raw.close())
