"""The Anthropic Messages API's event stream, both ways: a relayed stream assembles into the
Message a non-streamed request returns (and only a complete one is storable), a stored Message
replays as a stream the official SDK parses back into it, and check_message says which bodies
are well-formed Messages."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from typing import Any

import pytest

from cachekit.llm.endpoints.messages_stream import (
    MessagesStreamAssembler,
    check_message,
    message_events,
    messages_sse,
)

USAGE = {"input_tokens": 25, "output_tokens": 17}


def message(*content: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-4-6",
        "content": list(content),
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": dict(USAGE),
        **extra,
    }


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


CITATION = {
    "type": "char_location",
    "cited_text": "The grass is green.",
    "document_index": 0,
    "document_title": "Facts",
    "start_char_index": 0,
    "end_char_index": 19,
}
TOOL = {
    "type": "tool_use",
    "id": "toolu_01A09q90qw90lq917835lq9",
    "name": "get_weather",
    "input": {"location": "San Francisco, CA", "opts": {"units": ["c", "f"], "days": 3.5}},
}
THINKING = {
    "type": "thinking",
    "thinking": "The user wants a haiku. Five, seven, five syllables.",
    "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
}

MESSAGES = {
    "text": message(text("Hello! How can I help you today? " * 5)),
    "several_texts": message(text("First part. "), text("Second part."), text("Third.")),
    "tool_use": message(
        text("Let me check the weather."), TOOL, stop_reason="tool_use", stop_sequence=None
    ),
    "tool_use_empty_input": message({**TOOL, "input": {}}, stop_reason="tool_use"),
    "thinking_and_text": message(THINKING, text("Cherry blossoms fall / ...")),
    "citations": message(
        text("According to the document, "),
        text("the grass is green", citations=[CITATION, {**CITATION, "document_index": 1}]),
        text(".", citations=None),
    ),
    "unicode": message(text('Ünïcödé — 日本語のテキスト 🎉 emoji\nnew line "quoted" \\ tab\t')),
    "empty_text": message(text("")),
    "no_content": message(stop_reason="max_tokens"),
    "stop_sequence": message(text("one two"), stop_reason="stop_sequence", stop_sequence="\n\nH:"),
    "redacted_and_server_tool": message(
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
        {
            "type": "server_tool_use",
            "id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB",
            "name": "web_search",
            "input": {"query": "weather in Paris"},
        },
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB",
            "content": [
                {
                    "type": "web_search_result",
                    "title": "Paris weather",
                    "url": "https://weather.example/paris",
                    "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5",
                    "page_age": None,
                }
            ],
        },
        text("It is sunny."),
        usage={
            "input_tokens": 10,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 5,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            "output_tokens": 50,
            "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0},
            "service_tier": "standard",
        },
    ),
    "container_and_stop_details": message(
        text("No."),
        stop_reason="refusal",
        container={"id": "container_1", "expires_at": "2025-01-01T00:00:00Z"},
        stop_details={"type": "refusal", "category": None, "explanation": None},
    ),
}


def splits(raw: bytes, how: str) -> Iterator[bytes]:
    """``raw`` cut as ``how`` says: whole, one byte at a time, or at random (seeded) places."""
    if how == "whole":
        yield raw
    elif how == "bytes":
        yield from (raw[i : i + 1] for i in range(len(raw)))
    else:
        rng = random.Random(how)
        i = 0
        while i < len(raw):
            n = rng.randint(1, 40)
            yield raw[i : i + n]
            i += n


def assemble(chunks: Any, **bounds: int) -> MessagesStreamAssembler:
    asm = MessagesStreamAssembler(**bounds)
    for chunk in chunks:
        asm.feed(chunk)
    return asm


def frame(event: dict[str, Any], name: str | None = None) -> bytes:
    data = json.dumps(event, ensure_ascii=False)
    return f"event: {name or event['type']}\ndata: {data}\n\n".encode()


def frames(events: list[dict[str, Any]]) -> bytes:
    return b"".join(frame(e) for e in events)


# --- round trip ---------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["whole", "bytes", "seed-1", "seed-2", "seed-3"])
@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_a_replayed_message_assembles_back_exactly(name: str, how: str) -> None:
    stored = MESSAGES[name]
    assert check_message(stored) is None
    raw = b"".join(messages_sse(stored))
    asm = assemble(splits(raw, how))
    assert asm.incomplete_reason is None
    assert asm.complete and asm.not_stored_reason is None
    assert asm.result() == stored


@pytest.mark.parametrize("pieces", [1, 2, 3, 50])
def test_any_number_of_pieces_assembles_back(pieces: int) -> None:
    for stored in MESSAGES.values():
        asm = assemble([b"".join(messages_sse(stored, pieces=pieces))])
        assert asm.complete and asm.result() == stored


def test_crlf_comments_and_pings_are_tolerated() -> None:
    stored = MESSAGES["tool_use"]
    parts = list(messages_sse(stored))
    noisy = [b": keep-alive\n\n", parts[0], frame({"type": "ping"})]
    for part in parts[1:]:
        noisy += [part, b":comment\n\n", frame({"type": "ping"})]
    raw = b"".join(noisy[:-1]).replace(b"\n", b"\r\n") + b": bye\r\n\r\n"
    for how in ("whole", "bytes", "seed-9"):
        asm = assemble(splits(raw, how))
        assert asm.complete, asm.incomplete_reason
        assert asm.result() == stored


def test_feed_events_hands_back_every_byte_and_the_decoded_events() -> None:
    stored = MESSAGES["thinking_and_text"]
    raw = b"".join(messages_sse(stored)) + b": trailing comment\n\n"
    asm = MessagesStreamAssembler()
    got = [event for chunk in splits(raw, "seed-4") for event in asm.feed_events(chunk)]
    assert b"".join(piece for piece, _ in got) == raw
    assert [obj for _, obj in got if obj is not None] == message_events(stored)
    assert got[-1][1] is None and asm.complete


def test_unknown_event_types_are_passed_on_and_ignored() -> None:
    events = message_events(MESSAGES["text"])
    events.insert(2, {"type": "future_event", "whatever": [1, 2]})
    asm = MessagesStreamAssembler()
    decoded = [obj for _, obj in asm.feed_events(frames(events))]
    assert {"type": "future_event", "whatever": [1, 2]} in decoded
    assert asm.complete and asm.result() == MESSAGES["text"]


# --- the replayed events ------------------------------------------------------------------


def test_the_replay_has_the_shape_of_a_live_stream() -> None:
    stored = MESSAGES["tool_use"]
    events = message_events(stored, pieces=4)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    opening = events[0]["message"]
    assert opening["content"] == [] and opening["stop_reason"] is None
    assert opening["stop_sequence"] is None
    assert opening["usage"] == {**stored["usage"], "output_tokens": 0}
    assert events[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[-2]["usage"] == stored["usage"]
    starts = [e for e in events if e["type"] == "content_block_start"]
    assert [s["content_block"] for s in starts] == [text(""), {**TOOL, "input": {}}]
    assert [e["index"] for e in events if e["type"] == "content_block_stop"] == [0, 1]
    texts = [e["delta"]["text"] for e in events if e.get("index") == 0 and "delta" in e]
    assert len(texts) > 1 and "".join(texts) == stored["content"][0]["text"]
    parts = [e["delta"]["partial_json"] for e in events if e.get("index") == 1 and "delta" in e]
    assert len(parts) > 1
    assert "".join(parts) == json.dumps(TOOL["input"], separators=(",", ":"))


def test_thinking_replays_as_deltas_then_one_signature() -> None:
    events = message_events(MESSAGES["thinking_and_text"])
    assert events[1]["content_block"] == {**THINKING, "thinking": "", "signature": ""}
    deltas = [e["delta"] for e in events if e.get("index") == 0 and "delta" in e]
    assert [d["type"] for d in deltas[:-1]] == ["thinking_delta"] * (len(deltas) - 1)
    assert len(deltas) > 2 and "".join(d["thinking"] for d in deltas[:-1]) == THINKING["thinking"]
    assert deltas[-1] == {"type": "signature_delta", "signature": THINKING["signature"]}


def test_citations_replay_as_citation_deltas() -> None:
    events = message_events(MESSAGES["citations"])
    cited = [e for e in events if e.get("index") == 1]
    assert cited[0]["content_block"] == text("", citations=[])
    citations = [e["delta"]["citation"] for e in cited if "citation" in e.get("delta", {})]
    assert citations[:2] == [CITATION, {**CITATION, "document_index": 1}]


def test_messages_sse_frames_each_event_as_compact_utf8() -> None:
    stored = MESSAGES["unicode"]
    raw = list(messages_sse(stored))
    events = message_events(stored)
    assert len(raw) == len(events)
    for piece, event in zip(raw, events, strict=True):
        data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        assert piece == f"event: {event['type']}\ndata: {data}\n\n".encode()
    assert "日本語".encode() in b"".join(raw)


def test_a_message_without_usage_replays_with_zero_counts() -> None:
    stored = message(text("hi"))
    del stored["usage"]
    asm = assemble(messages_sse(stored))
    assert asm.complete
    assert asm.result() == {**stored, "usage": {"input_tokens": 0, "output_tokens": 0}}


# --- the official SDK parses the replay ---------------------------------------------------


def sdk_view(final: Any, stored: dict[str, Any]) -> dict[str, Any]:
    """The SDK's final Message as a dict: the fields the stream set (the SDK always sets
    ``stop_details``, null when the stream had none)."""
    dumped: dict[str, Any] = final.model_dump(mode="json", exclude_unset=True)
    if "stop_details" not in stored and dumped.get("stop_details") is None:
        dumped.pop("stop_details", None)
    return dumped


def sdk_client(raw: bytes) -> Any:
    anthropic = pytest.importorskip("anthropic")
    httpx2 = pytest.importorskip("httpx2")  # the HTTP client the SDK (2.x) is built on
    requests: list[Any] = []

    def answer(request: Any) -> Any:
        requests.append(request)
        headers = {"content-type": "text/event-stream"}
        return httpx2.Response(200, headers=headers, content=raw)

    http = httpx2.Client(transport=httpx2.MockTransport(answer))
    return anthropic.Anthropic(api_key="test", base_url="http://upstream.test", http_client=http)


SDK_MESSAGES = sorted(set(MESSAGES) - {"container_and_stop_details"})
ASK = {
    "model": "claude-opus-4-6",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hi"}],
}


@pytest.mark.parametrize("name", SDK_MESSAGES)
def test_the_sdk_stream_helper_reads_the_replay_back(name: str) -> None:
    stored = MESSAGES[name]
    client = sdk_client(b"".join(messages_sse(stored)))
    with client.messages.stream(**ASK) as stream:
        streamed_text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert sdk_view(final, stored) == stored
    texts = [b["text"] for b in stored["content"] if b["type"] == "text"]
    assert streamed_text == "".join(texts)


def test_the_sdk_raw_stream_yields_every_replayed_event() -> None:
    stored = MESSAGES["tool_use"]
    client = sdk_client(b"".join(messages_sse(stored)))
    got = [event.to_dict() for event in client.messages.create(**ASK, stream=True)]
    assert got == message_events(stored)


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_the_sdk_accumulator_reads_the_replayed_events(name: str) -> None:
    pytest.importorskip("anthropic")
    from anthropic.lib.streaming._messages import accumulate_event
    from anthropic.types import RawMessageStreamEvent
    from pydantic import TypeAdapter

    stored = MESSAGES[name]
    adapter: Any = TypeAdapter(RawMessageStreamEvent)
    snapshot: Any = None
    json_bufs: dict[int, bytes] = {}
    for event in message_events(stored, pieces=3):
        parsed = adapter.validate_python(event)
        snapshot = accumulate_event(event=parsed, current_snapshot=snapshot, json_bufs=json_bufs)
    want = copy.deepcopy(stored)
    if "container" in want:  # the SDK holds a datetime; compare it as the SDK writes it
        want["container"]["expires_at"] = snapshot.container.expires_at.isoformat().replace(
            "+00:00", "Z"
        )
    dumped = sdk_view(snapshot, stored)
    if "container" in dumped:
        dumped["container"]["expires_at"] = dumped["container"]["expires_at"].replace("+00:00", "Z")
    assert dumped == want


# --- upstream transcripts, as the Anthropic docs show them ----------------------------------

TOOL_TRANSCRIPT = b"""event: message_start
data: {"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-opus-4-6","stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2},"content":[],"stop_reason":null}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":","}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" let"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"'s"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" check the weather for San Francisco, CA:"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"location\\":"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \\"San"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" Francisc"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"o,"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" CA\\""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":", "}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\\"unit\\": \\"fah"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"renheit\\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"""  # noqa: E501

TOOL_EXPECTED = {
    "id": "msg_014p7gG3wDgGV9EUtLvnow3U",
    "type": "message",
    "role": "assistant",
    "model": "claude-opus-4-6",
    "content": [
        {"type": "text", "text": "Okay, let's check the weather for San Francisco, CA:"},
        {
            "type": "tool_use",
            "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            "name": "get_weather",
            "input": {"location": "San Francisco, CA", "unit": "fahrenheit"},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 472, "output_tokens": 89},
}

THINKING_TRANSCRIPT = b"""event: message_start
data: {"type": "message_start", "message": {"id": "msg_01...", "type": "message", "role": "assistant", "content": [], "model": "claude-opus-4-6", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}}}

event: content_block_start
data: {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "I need to find the GCD of 1071 and 462 using the Euclidean algorithm.\\n\\n1071 = 2 \xc3\x97 462 + 147"}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "\\n462 = 3 \xc3\x97 147 + 21\\n147 = 7 \xc3\x97 21 + 0\\n\\nSo GCD(1071, 462) = 21"}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds..."}}

event: content_block_stop
data: {"type": "content_block_stop", "index": 0}

event: content_block_start
data: {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "The greatest common divisor of 1071 and 462 is **21**."}}

event: content_block_stop
data: {"type": "content_block_stop", "index": 1}

event: message_delta
data: {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 153}}

event: message_stop
data: {"type": "message_stop"}

"""  # noqa: E501

THINKING_EXPECTED = {
    "id": "msg_01...",
    "type": "message",
    "role": "assistant",
    "model": "claude-opus-4-6",
    "content": [
        {
            "type": "thinking",
            "thinking": "I need to find the GCD of 1071 and 462 using the Euclidean algorithm.\n\n"
            "1071 = 2 \u00d7 462 + 147\n462 = 3 \u00d7 147 + 21\n147 = 7 \u00d7 21 + 0\n\n"
            "So GCD(1071, 462) = 21",
            "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds...",
        },
        {"type": "text", "text": "The greatest common divisor of 1071 and 462 is **21**."},
    ],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 25,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 153,
    },
}

TRANSCRIPTS = [(TOOL_TRANSCRIPT, TOOL_EXPECTED), (THINKING_TRANSCRIPT, THINKING_EXPECTED)]


@pytest.mark.parametrize("how", ["whole", "bytes", "seed-5"])
@pytest.mark.parametrize(("raw", "expected"), TRANSCRIPTS, ids=["tool_use", "thinking"])
def test_an_upstream_transcript_assembles_to_its_message(
    raw: bytes, expected: dict[str, Any], how: str
) -> None:
    asm = assemble(splits(raw, how))
    assert asm.incomplete_reason is None
    assert asm.result() == expected
    assert check_message(asm.result()) is None


@pytest.mark.parametrize(("raw", "expected"), TRANSCRIPTS, ids=["tool_use", "thinking"])
def test_the_sdk_agrees_on_an_upstream_transcript(raw: bytes, expected: dict[str, Any]) -> None:
    with sdk_client(raw).messages.stream(**ASK) as stream:
        final = stream.get_final_message()
    assert sdk_view(final, expected) == expected


def test_the_assembler_and_the_sdk_agree_on_odd_but_valid_streams() -> None:
    """A start block that already holds text, thinking, a signature or citations: deltas add to
    the text and thinking and citations, a signature delta replaces the signature."""
    events = [
        message_events(message())[0],
        {"type": "content_block_start", "index": 0, "content_block": {**THINKING}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": " More."},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "new"},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": text("Said: ", citations=[CITATION]),
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "citations_delta", "citation": CITATION},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "text_delta", "text": "green"},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 4},
        },
        {"type": "message_stop"},
    ]
    expected = message(
        {**THINKING, "thinking": THINKING["thinking"] + " More.", "signature": "new"},
        text("Said: green", citations=[CITATION, CITATION]),
        usage={**USAGE, "output_tokens": 4},
    )
    asm = assemble([frames(events)])
    assert asm.complete and asm.result() == expected
    with sdk_client(frames(events)).messages.stream(**ASK) as stream:
        assert sdk_view(stream.get_final_message(), expected) == expected


def test_tool_input_deltas_that_join_to_nothing_mean_an_empty_input() -> None:
    stored = message({**TOOL, "input": {}}, stop_reason="tool_use")
    raw = frames(replace_json(message_events(stored), "", index=0))
    asm = assemble([raw])
    assert asm.complete and asm.result() == stored
    with sdk_client(raw).messages.stream(**ASK) as stream:
        assert sdk_view(stream.get_final_message(), stored) == stored


def test_message_delta_usage_overrides_and_a_null_count_keeps_the_start() -> None:
    events = message_events(message(text("hi"), usage={"input_tokens": 5, "output_tokens": 1}))
    events[0]["message"]["usage"] = {"input_tokens": 5, "cache_read_input_tokens": 3}
    events[-2]["usage"] = {"output_tokens": 9, "input_tokens": 7, "cache_read_input_tokens": None}
    asm = assemble([frames(events)])
    assert asm.complete
    assert asm.result()["usage"] == {  # type: ignore[index]
        "input_tokens": 7,
        "cache_read_input_tokens": 3,
        "output_tokens": 9,
    }


# --- incomplete streams -------------------------------------------------------------------

ERROR = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def tool_events() -> list[dict[str, Any]]:
    return message_events(MESSAGES["tool_use"], pieces=3)


def replace_json(
    events: list[dict[str, Any]], partial: str, index: int = 1
) -> list[dict[str, Any]]:
    """``events`` with the tool input deltas of block ``index`` replaced by one ``partial``."""
    out = [e for e in events if e.get("delta", {}).get("type") != "input_json_delta"]
    stop = next(
        i for i, e in enumerate(out) if e["type"] == "content_block_stop" and e["index"] == index
    )
    delta = {"type": "input_json_delta", "partial_json": partial}
    extra = {"type": "content_block_delta", "index": index, "delta": delta}
    return [*out[:stop], extra, *out[stop:]]


def drop(events: list[dict[str, Any]], kind: str, index: int | None = None) -> bytes:
    return frames([e for e in events if not (e["type"] == kind and e.get("index", index) == index)])


def with_delta(events: list[dict[str, Any]], index: int, delta: dict[str, Any]) -> bytes:
    extra = {"type": "content_block_delta", "index": index, "delta": delta}
    return frames([*events[:-2], extra, *events[-2:]])


def edit(events: list[dict[str, Any]], where: int, **fields: Any) -> bytes:
    events = copy.deepcopy(events)
    events[where].update(fields)
    return frames(events)


GOOD = frames(tool_events())
START, BLOCK0 = frame(tool_events()[0]), frame(tool_events()[1])
TEXT_DELTA = {"type": "text_delta", "text": "more"}

INCOMPLETE = {
    "error event mid-stream": (GOOD[:300] + b"\n\n" + frame(ERROR) + GOOD[300:], "error event"),
    "error event name": (GOOD[:-30] + b"event: error\ndata: {}\n\n", "error event"),
    "error object without its event name": (frame(ERROR, "message_delta"), "error event"),
    "undecodable data": (START + b"event: ping\ndata: {not json\n\n" + GOOD, "error event"),
    "invalid utf-8": (START + b'event: x\ndata: {"type":"x","a":"\xff"}\n\n', "error event"),
    "data not an object": (START + b"event: ping\ndata: [1]\n\n", "error event"),
    "event name not the data's type": (
        frames(tool_events()[:3]) + frame(tool_events()[3], "ping") + frames(tool_events()[4:]),
        "error event",
    ),
    "data without an event name": (
        START + b'data: {"type":"content_block_stop","index":0}\n\n',
        "error event",
    ),
    "ill-typed delta": (
        with_delta(tool_events(), 0, {"type": "text_delta", "text": 1}),
        "error event",
    ),
    "ill-typed index": (edit(tool_events(), 1, index="0"), "error event"),
    "ill-typed stop reason": (
        edit(tool_events(), -2, delta={"stop_reason": 5, "stop_sequence": None}),
        "error event",
    ),
    "message_start with content": (
        edit(tool_events(), 0, message={**tool_events()[0]["message"], "content": [text("x")]}),
        "error event",
    ),
    "cut off before message_stop": (drop(tool_events(), "message_stop"), "no message_stop"),
    "cut off mid-event": (GOOD[: len(GOOD) // 2], "no message_stop"),
    "cut off mid-frame at the end": (GOOD[:-5], "no message_stop"),
    "no message_start": (frames(tool_events()[1:]), "no message_start"),
    "event before message_start": (BLOCK0 + GOOD, "content_block_start before message_start"),
    "second message_start": (START + GOOD, "second message_start"),
    "data after message_stop": (GOOD + frame({"type": "ping"}), "data after message_stop"),
    "unterminated bytes after message_stop": (GOOD + b"data: {", "data after message_stop"),
    "bad tool json": (
        frames(replace_json(tool_events(), '{"location": "SF"')),
        "tool input of block 1 not a JSON object",
    ),
    "tool json not an object": (
        frames(replace_json(tool_events(), "[1, 2]")),
        "tool input of block 1 not a JSON object",
    ),
    "delta to an unknown index": (
        with_delta(tool_events(), 5, TEXT_DELTA),
        "delta for unknown block 5",
    ),
    "delta to a stopped block": (
        with_delta(tool_events(), 0, TEXT_DELTA),
        "delta for stopped block 0",
    ),
    "delta of the wrong kind": (
        frames(
            [
                *tool_events()[:2],
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": "{}"},
                },
                *tool_events()[2:],
            ]
        ),
        "input_json_delta for a text block",
    ),
    "unknown delta type": (
        frames(
            [
                *tool_events()[:2],
                {"type": "content_block_delta", "index": 0, "delta": {"type": "future_delta"}},
                *tool_events()[2:],
            ]
        ),
        "future_delta for a text block",
    ),
    "block started out of order": (
        edit(
            tool_events(),
            next(i for i, e in enumerate(tool_events()) if e.get("index") == 1),
            index=2,
        ),
        "block 2 started out of order",
    ),
    "block started twice": (
        frames([*tool_events()[:-2], tool_events()[1], *tool_events()[-2:]]),
        "block 0 started out of order",
    ),
    "ill-typed block start": (
        edit(tool_events(), 1, content_block={"type": "tool_use", "id": "t", "input": "{}"}),
        "error event",
    ),
    "block stopped twice": (
        frames(
            [*tool_events()[:-2], {"type": "content_block_stop", "index": 0}, *tool_events()[-2:]]
        ),
        "block 0 stopped twice",
    ),
    "stop of an unknown block": (
        frames(
            [*tool_events()[:-2], {"type": "content_block_stop", "index": 7}, *tool_events()[-2:]]
        ),
        "stop of unknown block 7",
    ),
    "block never stopped": (drop(tool_events(), "content_block_stop", 1), "block 1 not stopped"),
    "stop_reason null": (
        edit(tool_events(), -2, delta={"stop_reason": None, "stop_sequence": None}),
        "no stop_reason",
    ),
    "no message_delta": (drop(tool_events(), "message_delta"), "no stop_reason"),
}


@pytest.mark.parametrize(("raw", "why"), list(INCOMPLETE.values()), ids=list(INCOMPLETE))
def test_an_incomplete_stream_is_never_complete(raw: bytes, why: str) -> None:
    for how in ("whole", "bytes", "seed-6"):
        asm = assemble(splits(raw, how))
        assert asm.incomplete_reason == why
        assert not asm.complete
        assert asm.not_stored_reason == "incomplete_stream"


def test_the_good_stream_the_failures_are_made_from_is_complete() -> None:
    asm = assemble([GOOD])
    assert asm.complete and asm.result() == MESSAGES["tool_use"]


@pytest.mark.parametrize("bounds", [{"max_answer_bytes": 500}, {"max_event_bytes": 100}])
def test_a_stream_past_a_bound_is_too_large_and_relayed_whole(bounds: dict[str, int]) -> None:
    asm = MessagesStreamAssembler(**bounds)
    relayed = [piece for chunk in splits(GOOD, "seed-7") for piece, _ in asm.feed_events(chunk)]
    assert b"".join(relayed) + asm.rest() == GOOD
    assert asm.incomplete_reason == "too large"
    assert asm.not_stored_reason == "too_large"
    assert not asm.complete and asm.result() is None


def test_the_result_of_a_cut_stream_is_what_came() -> None:
    asm = assemble([drop(tool_events(), "message_stop")])
    assert asm.result() == MESSAGES["tool_use"]  # usable for logs, but never stored
    assert MessagesStreamAssembler().result() is None


# --- check_message ------------------------------------------------------------------------


@pytest.mark.parametrize("body", [*MESSAGES.values(), TOOL_EXPECTED, THINKING_EXPECTED])
def test_check_message_accepts_well_formed_messages(body: dict[str, Any]) -> None:
    assert check_message(body) is None


def test_check_message_accepts_null_counts_and_null_stop_fields() -> None:
    body = message(
        text("x"),
        stop_reason=None,
        usage={
            "input_tokens": 1,
            "output_tokens": 2,
            "cache_creation_input_tokens": None,
            "cache_creation": None,
        },
    )
    assert check_message(body) is None


GOOD_BODY = MESSAGES["tool_use"]
MALFORMED: list[tuple[Any, str]] = [
    ([GOOD_BODY], "not an object"),
    ({**GOOD_BODY, "type": "completion"}, "type completion not message"),
    ({k: v for k, v in GOOD_BODY.items() if k != "type"}, "type None not message"),
    ({**GOOD_BODY, "role": "user"}, "role user not assistant"),
    ({**GOOD_BODY, "id": 7}, "id not a string"),
    ({**GOOD_BODY, "model": None}, "model not a string"),
    ({**GOOD_BODY, "content": "hello"}, "content not a list"),
    ({**GOOD_BODY, "content": ["hello"]}, "content block not an object with a type"),
    ({**GOOD_BODY, "content": [{"text": "hi"}]}, "content block not an object with a type"),
    ({**GOOD_BODY, "content": [{"type": "text"}]}, "text block text not a string"),
    (
        {**GOOD_BODY, "content": [text("a", citations="x")]},
        "text block citations not a list of objects",
    ),
    (
        {**GOOD_BODY, "content": [text("a", citations=[1])]},
        "text block citations not a list of objects",
    ),
    ({**GOOD_BODY, "content": [{**TOOL, "id": None}]}, "tool_use block id not a string"),
    ({**GOOD_BODY, "content": [{**TOOL, "name": 1}]}, "tool_use block name not a string"),
    ({**GOOD_BODY, "content": [{**TOOL, "input": "{}"}]}, "tool_use block input not an object"),
    (
        {**GOOD_BODY, "content": [{**TOOL, "type": "server_tool_use", "input": []}]},
        "server_tool_use block input not an object",
    ),
    (
        {**GOOD_BODY, "content": [{**THINKING, "thinking": None}]},
        "thinking block thinking not a string",
    ),
    (
        {**GOOD_BODY, "content": [{**THINKING, "signature": 5}]},
        "thinking block signature not a string",
    ),
    ({**GOOD_BODY, "stop_reason": 1}, "stop_reason not a string or null"),
    ({**GOOD_BODY, "stop_sequence": ["x"]}, "stop_sequence not a string or null"),
    ({**GOOD_BODY, "usage": [1]}, "usage not an object"),
    (
        {**GOOD_BODY, "usage": {"input_tokens": -1, "output_tokens": 1}},
        "usage input_tokens not a count",
    ),
    (
        {**GOOD_BODY, "usage": {"input_tokens": 1, "output_tokens": True}},
        "usage output_tokens not a count",
    ),
    (
        {**GOOD_BODY, "usage": {"input_tokens": 1, "output_tokens": 1.5}},
        "usage output_tokens not a count",
    ),
    (
        {**GOOD_BODY, "usage": {"cache_read_input_tokens": "3"}},
        "usage cache_read_input_tokens not a count",
    ),
    ({**GOOD_BODY, "usage": {"cache_creation": 4}}, "usage cache_creation not an object"),
    (
        {**GOOD_BODY, "usage": {"cache_creation": {"ephemeral_5m_input_tokens": -2}}},
        "usage cache_creation.ephemeral_5m_input_tokens not a count",
    ),
    (
        {**GOOD_BODY, "usage": {"server_tool_use": {"web_search_requests": False}}},
        "usage server_tool_use.web_search_requests not a count",
    ),
]


@pytest.mark.parametrize(("body", "why"), MALFORMED, ids=[why for _, why in MALFORMED])
def test_check_message_rejects_malformed_bodies_with_a_reason(body: Any, why: str) -> None:
    assert check_message(body) == why


def test_checked_messages_without_usage_or_with_odd_blocks_still_replay() -> None:
    body = message({"type": "mcp_tool_result", "content": [{"type": "text", "text": "ok"}]})
    assert check_message(body) is None
    asm = assemble(messages_sse(body))
    assert asm.complete and asm.result() == body
