"""The fake upstream speaks OpenAI's Responses API (``POST /v1/responses``), whole and streamed,
in the shapes the official ``openai`` client parses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pydantic
import pytest
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputRefusal,
    ResponseStreamEvent,
    ResponseTextDeltaEvent,
)

from cachekit.testing.upstream import FakeUpstream, serving

RESPONSES = "/v1/responses"
TOOLS: list[Any] = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
MESSAGE_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    *["response.output_text.delta"] * 4,
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with serving(FakeUpstream()) as upstream:
        yield upstream


@pytest.fixture()
def client(fake: FakeUpstream) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-test", max_retries=0) as c:
        yield c


def raw_events(fake: FakeUpstream, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The ``(event, data)`` pairs of a streamed answer to ``body``, read without the SDK."""
    reply = httpx.post(fake.url + RESPONSES, json={**body, "stream": True}, timeout=10)
    assert reply.headers["content-type"].startswith("text/event-stream")
    out = []
    for frame in reply.text.split("\n\n"):
        if not frame:
            continue
        event, data = frame.split("\n")
        assert event.startswith("event: ") and data.startswith("data: ")
        out.append((event[len("event: ") :], json.loads(data[len("data: ") :])))
    return out


def test_a_whole_response_parses_with_its_answer_and_usage(client: openai.OpenAI) -> None:
    r = client.responses.create(model="fake-model", input="hello there world")
    assert r.output_text.startswith("Answer #") and r.output_text.endswith(" to: hello there world")
    assert r.status == "completed" and r.error is None and r.incomplete_details is None
    n = r.output_text.split()[1][1:]
    assert r.id == f"resp_{n}" and r.output[0].id == f"msg_{n}"
    assert r.usage is not None
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens) == (3, 6, 9)


def test_the_whole_body_validates_strictly(fake: FakeUpstream) -> None:
    reply = httpx.post(fake.url + RESPONSES, json={"model": "fake-model", "input": "q"})
    assert reply.status_code == 200
    Response.model_validate(reply.json())  # the SDK builds without validating: check here


def test_a_list_input_answers_the_last_user_item(client: openai.OpenAI) -> None:
    r = client.responses.create(
        model="fake-model",
        instructions="be brief",
        input=[
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "an answer"},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "line one"},
                    {"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"},
                    {"type": "input_text", "text": "line two"},
                ],
            },
        ],
    )
    assert r.output_text.endswith(" to: line one\nline two")
    assert r.instructions == "be brief"


def test_a_stream_yields_typed_events_that_add_up_to_the_whole_answer(
    fake: FakeUpstream, client: openai.OpenAI
) -> None:
    fake.answers = 0
    whole = client.responses.create(model="fake-model", input="stream me")
    fake.answers = 0
    events = list(client.responses.create(model="fake-model", input="stream me", stream=True))
    assert [e.type for e in events] == MESSAGE_EVENTS
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if isinstance(e, ResponseTextDeltaEvent)]
    assert "".join(deltas) == whole.output_text == "Answer #1 to: stream me"
    started = events[0].response  # type: ignore[union-attr]
    assert started.status == "in_progress" and started.output == [] and started.usage is None
    last = events[-1]
    assert isinstance(last, ResponseCompletedEvent)
    streamed, expected = last.response.model_dump(), whole.model_dump()
    assert streamed.pop("created_at") - expected.pop("created_at") in (0, 1)
    assert streamed == expected


def test_every_streamed_event_validates_strictly(fake: FakeUpstream) -> None:
    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)
    for body in (
        {"model": "fake-model", "input": "strict"},
        {"model": "fake-model", "input": "strict", "tools": TOOLS},
        {"model": "fake-refusal", "input": "strict"},
        {"model": "fake-length", "input": "strict"},
        {"model": "fake-failed", "input": "strict"},
    ):
        pairs = raw_events(fake, body)
        for k, (name, data) in enumerate(pairs):
            assert name == data["type"] and data["sequence_number"] == k
            assert adapter.validate_python(data).type == name
        assert "[DONE]" not in json.dumps(pairs)


def test_tools_give_a_function_call_whole_and_streamed(client: openai.OpenAI) -> None:
    r = client.responses.create(model="fake-model", input="weather", tools=TOOLS)
    call = r.output[0]
    assert isinstance(call, ResponseFunctionToolCall)
    assert call.name == "lookup" and json.loads(call.arguments) == {"q": "weather"}
    n = r.id.removeprefix("resp_")
    assert (call.id, call.call_id) == (f"fc_{n}", f"call_{n}")
    events = list(
        client.responses.create(model="fake-model", input="weather", stream=True, tools=TOOLS)
    )
    kinds = [e.type for e in events]
    assert kinds[2] == "response.output_item.added" and kinds[-2] == "response.output_item.done"
    assert "response.function_call_arguments.done" in kinds
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(args) == {"q": "weather"}


def test_the_sdk_stream_helper_assembles_the_final_response(client: openai.OpenAI) -> None:
    with client.responses.stream(model="fake-model", input="helper") as stream:
        texts = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.output_text == "".join(texts) and final.output_text.endswith(" to: helper")
    with client.responses.stream(model="fake-model", input="helper", tools=TOOLS) as stream:
        call = stream.get_final_response().output[0]
    assert isinstance(call, ResponseFunctionToolCall) and call.name == "lookup"


def test_a_refusal_is_a_refusal_part(client: openai.OpenAI) -> None:
    r = client.responses.create(model="fake-refusal", input="something bad")
    message = r.output[0]
    assert isinstance(message, ResponseOutputMessage)
    assert message.content == [
        ResponseOutputRefusal(type="refusal", refusal="I can't help with that.")
    ]
    events = list(client.responses.create(model="fake-refusal", input="bad", stream=True))
    refusal = "".join(e.delta for e in events if e.type == "response.refusal.delta")
    assert refusal == "I can't help with that."
    assert "response.refusal.done" in [e.type for e in events]


@pytest.mark.parametrize(
    ("model", "status", "last"),
    [
        ("fake-length", "incomplete", "response.incomplete"),
        ("fake-failed", "failed", "response.failed"),
    ],
)
def test_length_and_failure_end_incomplete_or_failed(
    client: openai.OpenAI, model: str, status: str, last: str
) -> None:
    r = client.responses.create(model=model, input="cut short")
    assert r.status == status
    if status == "incomplete":
        assert r.incomplete_details is not None
        assert r.incomplete_details.reason == "max_output_tokens"
    else:
        assert r.error is not None and r.error.code == "server_error"
    events = list(client.responses.create(model=model, input="cut short", stream=True))
    assert events[-1].type == last
    assert events[-1].response.status == status  # type: ignore[union-attr]


def test_errors_and_breaks(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError):
        client.responses.create(model="fake-error", input="x")
    with pytest.raises(openai.APIStatusError) as broken:
        client.responses.create(model="fake-break", input="x")
    assert broken.value.status_code == 502
    got = []
    with pytest.raises((httpx.HTTPError, openai.APIError)):
        for event in client.responses.create(model="fake-break", input="x", stream=True):
            got.append(event.type)
    assert got == MESSAGE_EVENTS[:3]


def test_a_gated_stream_sends_two_events_then_waits(
    fake: FakeUpstream, client: openai.OpenAI
) -> None:
    fake.gate.clear()
    try:
        events = iter(client.responses.create(model="fake-gated", input="wait", stream=True))
        assert [next(events).type, next(events).type] == MESSAGE_EVENTS[:2]
        fake.gate.set()
        assert [e.type for e in events] == MESSAGE_EVENTS[2:]
    finally:
        fake.gate.set()


def test_calls_are_counted(fake: FakeUpstream, client: openai.OpenAI) -> None:
    before = fake.count(RESPONSES)
    client.responses.create(model="fake-model", input="one")
    list(client.responses.create(model="fake-model", input="two", stream=True))
    assert fake.count(RESPONSES) == before + 2
    assert fake.calls[-1]["body"]["input"] == "two" and fake.calls[-1]["body"]["stream"] is True
