"""The fake upstream speaks Anthropic's Messages API (``POST /v1/messages`` and
``/v1/messages/count_tokens``), whole and streamed, in the shapes the official ``anthropic``
client parses, sync and async."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pydantic
import pytest
from anthropic.types import Message, RawMessageStreamEvent

from cachekit.testing.upstream import FakeUpstream, serving

MESSAGES = "/v1/messages"
HELLO = [{"role": "user", "content": "hello there world"}]
TOOLS: list[Any] = [
    {"name": "lookup", "description": "look it up", "input_schema": {"type": "object"}},
    {"name": "other", "input_schema": {"type": "object"}},
]
THINKING: Any = {"type": "enabled", "budget_tokens": 1024}
TEXT_EVENTS = [
    "message_start",
    "content_block_start",
    *["content_block_delta"] * 4,
    "content_block_stop",
    "message_delta",
    "message_stop",
]
SYNC = pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with serving(FakeUpstream()) as upstream:
        yield upstream


def create(fake: FakeUpstream, sync: bool, **kw: Any) -> Message:
    """``messages.create(**kw)`` through the sync or the async client."""
    kw = {"model": "claude-fake", "max_tokens": 64, "messages": HELLO, **kw}
    if sync:
        with anthropic.Anthropic(api_key="k", base_url=fake.url, max_retries=0) as client:
            return client.messages.create(**kw)

    async def go() -> Message:
        async with anthropic.AsyncAnthropic(
            api_key="k", base_url=fake.url, max_retries=0
        ) as client:
            return await client.messages.create(**kw)

    return asyncio.run(go())


def stream_events(fake: FakeUpstream, sync: bool, seen: list[Any], **kw: Any) -> None:
    """Iterate ``messages.create(stream=True, **kw)``, appending each event to ``seen`` (which
    holds what came before an exception the stream raises)."""
    kw = {"model": "claude-fake", "max_tokens": 64, "messages": HELLO, **kw, "stream": True}
    if sync:
        with anthropic.Anthropic(api_key="k", base_url=fake.url, max_retries=0) as client:
            for event in client.messages.create(**kw):
                seen.append(event)
        return

    async def go() -> None:
        async with anthropic.AsyncAnthropic(
            api_key="k", base_url=fake.url, max_retries=0
        ) as client:
            async for event in await client.messages.create(**kw):
                seen.append(event)

    asyncio.run(go())


def final_message(fake: FakeUpstream, sync: bool, **kw: Any) -> tuple[Message, list[str]]:
    """``messages.stream(**kw)``'s final message and the text its ``text_stream`` gave."""
    kw = {"model": "claude-fake", "max_tokens": 64, "messages": HELLO, **kw}
    if sync:
        with anthropic.Anthropic(api_key="k", base_url=fake.url, max_retries=0) as client:
            with client.messages.stream(**kw) as stream:
                texts = list(stream.text_stream)
                return stream.get_final_message(), texts

    async def go() -> tuple[Message, list[str]]:
        async with anthropic.AsyncAnthropic(
            api_key="k", base_url=fake.url, max_retries=0
        ) as client:
            async with client.messages.stream(**kw) as stream:
                texts = [t async for t in stream.text_stream]
                return await stream.get_final_message(), texts

    return asyncio.run(go())


def count_tokens(fake: FakeUpstream, sync: bool, **kw: Any) -> int:
    kw = {"model": "claude-fake", "messages": HELLO, **kw}
    if sync:
        with anthropic.Anthropic(api_key="k", base_url=fake.url, max_retries=0) as client:
            return client.messages.count_tokens(**kw).input_tokens

    async def go() -> int:
        async with anthropic.AsyncAnthropic(
            api_key="k", base_url=fake.url, max_retries=0
        ) as client:
            return (await client.messages.count_tokens(**kw)).input_tokens

    return asyncio.run(go())


def number(message: Message) -> int:
    """The answer number of ``message`` (from its id, ``msg_fake<n>``)."""
    assert message.id.startswith("msg_fake")
    return int(message.id[len("msg_fake") :])


def normalized(message: Message) -> dict[str, Any]:
    """``message`` as JSON data, its answer number replaced by ``N`` (to compare two answers)."""
    n = str(number(message))
    data = json.dumps(message.model_dump(mode="json", exclude_none=True))
    for tag in ("msg_fake", "toolu_fake", "sig_fake", "Answer #"):
        data = data.replace(tag + n, tag + "N")
    loaded: dict[str, Any] = json.loads(data)
    return loaded


def raw_frames(fake: FakeUpstream, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The ``(event, data)`` pairs of a streamed answer to ``body``, read without the SDK."""
    body = {"model": "claude-fake", "max_tokens": 64, "messages": HELLO, **body, "stream": True}
    reply = httpx.post(fake.url + MESSAGES, json=body, timeout=10)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    out = []
    for frame in reply.text.split("\n\n"):
        if not frame:
            continue
        event, data = frame.split("\n")
        assert event.startswith("event: ") and data.startswith("data: ")
        out.append((event[len("event: ") :], json.loads(data[len("data: ") :])))
    return out


@SYNC
def test_a_text_answer_parses_with_its_number_and_usage(fake: FakeUpstream, sync: bool) -> None:
    m = create(fake, sync)
    n = number(m)
    assert m.type == "message" and m.role == "assistant" and m.model == "claude-fake"
    assert [b.type for b in m.content] == ["text"]
    assert m.content[0].type == "text" and m.content[0].text == f"Answer #{n} to: hello there world"
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    assert (m.usage.input_tokens, m.usage.output_tokens) == (3, 6)
    assert (m.usage.cache_creation_input_tokens, m.usage.cache_read_input_tokens) == (0, 0)


def test_the_whole_body_validates_strictly(fake: FakeUpstream) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": HELLO, "tools": TOOLS, "thinking": THINKING}
    reply = httpx.post(fake.url + MESSAGES, json=body, timeout=10)
    assert reply.status_code == 200
    Message.model_validate(reply.json())  # the SDK builds without validating: check here
    assert reply.json()["stop_sequence"] is None and "stop_sequence" in reply.json()


def test_the_answer_counter_is_shared_with_the_openai_routes(fake: FakeUpstream) -> None:
    first = number(create(fake, True))
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    reply = httpx.post(fake.url + "/v1/chat/completions", json=chat, timeout=10)
    assert reply.json()["choices"][0]["message"]["content"] == f"Answer #{first + 1} to: hi"
    assert number(create(fake, True)) == first + 2


@pytest.mark.parametrize(
    ("messages", "text"),
    [
        (
            [{"role": "user", "content": [{"type": "text", "text": "two blocks"}] * 2}],
            "two blocks two blocks",
        ),
        (
            [
                {"role": "user", "content": "an old question"},
                {"role": "assistant", "content": "an old answer"},
                {"role": "user", "content": "the new one"},
            ],
            "the new one",
        ),
        (
            [
                {"role": "user", "content": "asked"},
                {"role": "assistant", "content": "answered"},
                {"role": "user", "content": [{"type": "image", "source": {}}]},
            ],
            "",
        ),
    ],
    ids=["blocks", "last-user", "no-text"],
)
def test_the_answer_is_to_the_last_user_messages_text(
    fake: FakeUpstream, messages: list[Any], text: str
) -> None:
    m = create(fake, True, messages=messages)
    assert m.content[0].type == "text"
    assert m.content[0].text == f"Answer #{number(m)} to: {text}"
    assert m.usage.input_tokens == len(text.split())


def test_a_tool_result_is_answered_by_its_content(fake: FakeUpstream) -> None:
    messages: list[Any] = [
        {"role": "user", "content": "look it up"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "forty two"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "and more"}],
                },
            ],
        },
    ]
    m = create(fake, True, messages=messages)
    assert m.content[0].type == "text"
    assert m.content[0].text == f"Answer #{number(m)} to: forty two and more"


@SYNC
def test_tools_get_a_tool_use_of_the_first_tool(fake: FakeUpstream, sync: bool) -> None:
    m = create(fake, sync, tools=TOOLS)
    n = number(m)
    assert [b.type for b in m.content] == ["text", "tool_use"]
    text, call = m.content
    assert text.type == "text" and text.text == "Calling lookup"
    assert call.type == "tool_use"
    assert (call.id, call.name, call.input) == (
        f"toolu_fake{n}",
        "lookup",
        {"q": "hello there world"},
    )
    assert m.stop_reason == "tool_use"


def test_tool_choice_none_gets_text(fake: FakeUpstream) -> None:
    m = create(fake, True, tools=TOOLS, tool_choice={"type": "none"})
    assert [b.type for b in m.content] == ["text"] and m.stop_reason == "end_turn"
    auto = create(fake, True, tools=TOOLS, tool_choice={"type": "auto"})
    assert [b.type for b in auto.content] == ["text", "tool_use"]


@SYNC
def test_thinking_comes_first_with_its_signature(fake: FakeUpstream, sync: bool) -> None:
    m = create(fake, sync, thinking=THINKING)
    n = number(m)
    assert [b.type for b in m.content] == ["thinking", "text"]
    thought = m.content[0]
    assert thought.type == "thinking"
    assert thought.thinking == "Thinking about: hello there world"
    assert thought.signature == f"sig_fake{n}"
    disabled = create(fake, sync, thinking={"type": "disabled"})
    assert [b.type for b in disabled.content] == ["text"]


@SYNC
@pytest.mark.parametrize(
    ("model", "stop"), [("fake-length", "max_tokens"), ("fake-refusal", "refusal")]
)
def test_model_names_set_the_stop_reason(
    fake: FakeUpstream, sync: bool, model: str, stop: str
) -> None:
    assert create(fake, sync, model=model).stop_reason == stop
    streamed, _ = final_message(fake, sync, model=model)
    assert streamed.stop_reason == stop


@SYNC
def test_a_streamed_text_answer_has_the_documented_events(fake: FakeUpstream, sync: bool) -> None:
    seen: list[Any] = []
    stream_events(fake, sync, seen)
    assert [e.type for e in seen] == TEXT_EVENTS  # the SDK drops the ping
    start = seen[0].message
    n = int(start.id[len("msg_fake") :])
    assert start.content == [] and start.stop_reason is None
    assert (start.usage.input_tokens, start.usage.output_tokens) == (3, 1)
    text = "".join(e.delta.text for e in seen if e.type == "content_block_delta")
    assert text == f"Answer #{n} to: hello there world"
    assert seen[-2].delta.stop_reason == "end_turn" and seen[-2].usage.output_tokens == 6


def test_every_streamed_event_validates_strictly(fake: FakeUpstream) -> None:
    frames = raw_frames(fake, {"tools": TOOLS, "thinking": THINKING})
    assert [e for e, _ in frames][:2] == ["message_start", "ping"]
    assert frames[1][1] == {"type": "ping"}
    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RawMessageStreamEvent)
    for event, data in frames:
        assert data["type"] == event
        if event != "ping":
            adapter.validate_python(data)
    deltas = [d["delta"]["type"] for e, d in frames if e == "content_block_delta"]
    assert deltas.count("signature_delta") == 1
    assert deltas.count("thinking_delta") >= 2 and deltas.count("input_json_delta") >= 2
    assert deltas.index("signature_delta") == deltas.count("thinking_delta")
    tool = "".join(
        d["delta"].get("partial_json", "") for e, d in frames if e == "content_block_delta"
    )
    assert json.loads(tool) == {"q": "hello there world"}


@SYNC
@pytest.mark.parametrize(
    "extra",
    [{}, {"tools": TOOLS}, {"thinking": THINKING}, {"tools": TOOLS, "thinking": THINKING}],
    ids=["text", "tools", "thinking", "both"],
)
def test_the_streamed_final_message_equals_the_whole_one(
    fake: FakeUpstream, sync: bool, extra: dict[str, Any]
) -> None:
    streamed, texts = final_message(fake, sync, **extra)
    whole = create(fake, sync, **extra)
    assert number(whole) == number(streamed) + 1
    assert normalized(streamed) == normalized(whole)
    assert len(texts) >= 2  # the text came in pieces
    said = [b.text for b in streamed.content if b.type == "text"]
    assert "".join(texts) == "".join(said)


@SYNC
def test_count_tokens_counts_the_words_create_counts(fake: FakeUpstream, sync: bool) -> None:
    messages = [{"role": "user", "content": "one two three four five"}]
    assert count_tokens(fake, sync, messages=messages) == 5
    assert create(fake, sync, messages=messages).usage.input_tokens == 5
    assert fake.calls[-2]["path"] == "/v1/messages/count_tokens"


@SYNC
@pytest.mark.parametrize(
    "bad",
    [{"max_tokens": 0}, {"messages": []}, {"model": 7}, {"max_tokens": True}],
    ids=["max-tokens-0", "no-messages", "model-not-str", "max-tokens-bool"],
)
def test_an_invalid_request_raises_bad_request(
    fake: FakeUpstream, sync: bool, bad: dict[str, Any]
) -> None:
    before = fake.answers
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(fake, sync, **bad)
    assert caught.value.status_code == 400 and caught.value.type == "invalid_request_error"
    assert fake.answers == before  # no answer was made
    assert fake.calls[-1]["path"] == MESSAGES  # but the call was recorded


@pytest.mark.parametrize("missing", ["model", "max_tokens", "messages"])
def test_a_missing_field_gets_an_anthropic_error_body(fake: FakeUpstream, missing: str) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": HELLO}
    del body[missing]
    reply = httpx.post(fake.url + MESSAGES, json=body, timeout=10)
    assert reply.status_code == 400
    error = reply.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert missing in error["error"]["message"]


def test_count_tokens_needs_no_max_tokens_but_messages(fake: FakeUpstream) -> None:
    url = fake.url + MESSAGES + "/count_tokens"
    reply = httpx.post(url, json={"model": "m", "messages": HELLO}, timeout=10)
    assert reply.status_code == 200 and reply.json() == {"input_tokens": 3}
    reply = httpx.post(url, json={"model": "m", "messages": []}, timeout=10)
    assert reply.status_code == 400 and reply.json()["error"]["type"] == "invalid_request_error"


@SYNC
def test_fake_error_raises_internal_server_error(fake: FakeUpstream, sync: bool) -> None:
    with pytest.raises(anthropic.InternalServerError) as caught:
        create(fake, sync, model="fake-error")
    assert caught.value.status_code == 500 and caught.value.type == "api_error"
    with pytest.raises(anthropic.InternalServerError):
        stream_events(fake, sync, [], model="fake-error")


@SYNC
def test_fake_error_event_raises_while_the_stream_is_read(fake: FakeUpstream, sync: bool) -> None:
    seen: list[Any] = []
    with pytest.raises(anthropic.APIStatusError) as caught:
        stream_events(fake, sync, seen, model="fake-error-event")
    assert [e.type for e in seen] == ["message_start", "content_block_start", "content_block_delta"]
    assert caught.value.type == "overloaded_error" and caught.value.api_message == "Overloaded"
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }


def test_fake_error_event_frames_end_with_the_error(fake: FakeUpstream) -> None:
    frames = raw_frames(fake, {"model": "fake-error-event"})
    assert [e for e, _ in frames] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "error",
    ]
    assert frames[-1][1]["error"]["type"] == "overloaded_error"


@SYNC
def test_fake_error_event_whole_is_overloaded(fake: FakeUpstream, sync: bool) -> None:
    with pytest.raises(anthropic.OverloadedError) as caught:
        create(fake, sync, model="fake-error-event")
    assert caught.value.status_code == 529 and caught.value.type == "overloaded_error"


@SYNC
def test_fake_break_breaks_the_stream_off(fake: FakeUpstream, sync: bool) -> None:
    seen: list[Any] = []
    with pytest.raises(Exception) as caught:  # the SDK's transport error, not a status error
        stream_events(fake, sync, seen, model="fake-break")
    assert not isinstance(caught.value, anthropic.APIStatusError)
    assert [e.type for e in seen] == ["message_start", "content_block_start"]  # ping dropped
    with pytest.raises(anthropic.InternalServerError) as whole:
        create(fake, sync, model="fake-break")
    assert whole.value.status_code == 502


def test_fake_break_breaks_off_after_three_frames(fake: FakeUpstream) -> None:
    body = {"model": "fake-break", "max_tokens": 5, "messages": HELLO, "stream": True}
    got = b""
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", fake.url + MESSAGES, json=body, timeout=10) as reply:
            for chunk in reply.iter_raw():
                got += chunk
    assert got.count(b"\n\n") == 3


def test_fake_gated_holds_the_third_frame_until_the_gate_opens() -> None:
    with serving(FakeUpstream()) as fake:
        body = {"model": "fake-gated", "max_tokens": 5, "messages": HELLO, "stream": True}
        with httpx.stream("POST", fake.url + MESSAGES, json=body, timeout=10) as reply:
            lines = reply.iter_lines()
            events: list[str] = []
            while len(events) < 2:
                line = next(lines)
                if line.startswith("event: "):
                    events.append(line[len("event: ") :])
            assert events == ["message_start", "ping"]
            assert not fake.gate.is_set()
            fake.gate.set()
            events += [x[len("event: ") :] for x in lines if x.startswith("event: ")]
        assert events == ["message_start", "ping", *TEXT_EVENTS[1:]]


@SYNC
def test_calls_are_recorded_with_their_headers_and_body(fake: FakeUpstream, sync: bool) -> None:
    headers = {"x-api-key": "sk-ant-fake", "anthropic-beta": "fancy-2025-01-01"}
    m = create(fake, sync, extra_headers=headers, extra_body={"temperature": 0.5})
    call = fake.calls[-1]
    assert call["path"] == MESSAGES and call["method"] == "POST"
    assert call["body"]["messages"] == HELLO and call["body"]["temperature"] == 0.5
    assert call["headers"]["x-api-key"] == "sk-ant-fake"
    assert call["headers"]["anthropic-beta"] == "fancy-2025-01-01"
    assert call["headers"]["anthropic-version"]
    assert call["headers"]["authorization"] == "Bearer k"  # how this SDK sends api_key
    again = create(fake, sync, extra_body={"temperature": 0.5})
    assert number(again) == number(m) + 1  # a new answer each call
    assert fake.count(MESSAGES) >= 2
