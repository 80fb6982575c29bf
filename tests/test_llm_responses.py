"""The Responses API's rules: keys, semantic text and scope, what is never cached or stored,
and its event stream both ways."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest
from responses_bodies import responses_answer

from cachekit.llm import (
    RESPONSES,
    PriceTable,
    RequestError,
    ResponsesStreamAssembler,
    cacheable_response,
    canonical_json,
    exact_key,
    passthrough_reason,
    prepare,
    response_events,
    responses_sse,
    scope_key,
    semantic_text,
)


def request(**extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4.1-mini", "input": "How do I reset my password?", **extra}


def answer(text: str = "Open settings, then security.", **extra: Any) -> dict[str, Any]:
    return responses_answer(text, **extra)


def key(body: dict[str, Any]) -> str:
    return exact_key(RESPONSES, body, "t")


@pytest.mark.parametrize(
    "change",
    [
        {"input": "How do I reset my email?"},
        {"input": [{"role": "user", "content": "How do I reset my password?"}]},
        {"instructions": "Answer in French."},
        {"tools": [{"type": "function", "name": "lookup", "parameters": {}}]},
        {"tool_choice": "required"},
        {"text": {"format": {"type": "json_object"}}},
        {"reasoning": {"effort": "high"}},
        {"temperature": 0.2},
        {"top_p": 0.5},
        {"max_output_tokens": 50},
        {"include": ["reasoning.encrypted_content"]},
        {"previous_response_id": "resp_prior"},
        {"some_future_field": 1},
    ],
)
def test_every_answer_changing_field_changes_the_exact_key(change: dict[str, Any]) -> None:
    assert key(request(**change)) != key(request())


def test_streamed_and_metadata_flags_share_an_entry() -> None:
    base = key(request())
    assert key(request(stream=True)) == base
    assert key(request(metadata={"a": "b"}, user="u", store=True, background=False)) == base


def test_store_false_is_another_entry() -> None:
    """An answer fetched with ``store: false`` has an id the upstream never stored: it must not
    answer a request stored upstream (absent ``store`` is true), whose caller may continue from
    the id it gets."""
    base, unstored = request(), request(store=False)
    assert key(unstored) != key(base)
    assert key(request(store=None)) == key(request(store=True)) == key(base)
    assert scope_key(RESPONSES, unstored, "t") != scope_key(RESPONSES, base, "t")
    assert prepare(RESPONSES, unstored, "t").key == key(unstored)


def test_exact_key_of_a_default_request_is_unchanged_by_the_store_rule() -> None:
    """Absent and default ``store`` are keyed as before ``store`` was keyed (no field added):
    entries stored by default requests keep their keys."""
    payload = canonical_json({"e": RESPONSES, "t": "t", "ns": "", "b": request()})
    digest = hashlib.blake2b(payload.encode(), digest_size=20).hexdigest()
    assert key(request(store=True)) == key(request()) == "llm:x:" + digest


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("plain text", "plain text"),
        ([{"role": "user", "content": "as one item"}], "as one item"),
        (
            [
                {"role": "system", "content": "be brief"},
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "first"},
                        {"type": "input_text", "text": "second"},
                    ],
                },
            ],
            "first\nsecond",
        ),
        ([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}], None),
        ([{"type": "function_call_output", "call_id": "c", "output": "42"}], None),
        ([{"role": "assistant", "content": "not the user"}], None),
    ],
)
def test_semantic_text_is_the_last_user_input(value: Any, text: str | None) -> None:
    assert semantic_text(RESPONSES, {"model": "m", "input": value}) == text


def test_scope_holds_everything_but_the_last_text() -> None:
    def scope(**extra: Any) -> str:
        return scope_key(RESPONSES, request(**extra), "t")

    assert scope(input="another question") == scope()
    assert scope(instructions="Answer in French.") != scope()
    items = [{"role": "system", "content": "a"}, {"role": "user", "content": "q1"}]
    other = [{"role": "system", "content": "b"}, {"role": "user", "content": "q1"}]
    same_but_last = [{"role": "system", "content": "a"}, {"role": "user", "content": "q2"}]
    assert scope(input=items) != scope(input=other)
    assert scope(input=items) == scope(input=same_but_last)


def test_background_and_conversation_requests_are_passed_through() -> None:
    assert passthrough_reason(RESPONSES, request(background=True)) == "background"
    assert passthrough_reason(RESPONSES, request(conversation="conv_1")) == "conversation"
    assert passthrough_reason(RESPONSES, request(previous_response_id="resp_1")) is None
    assert prepare(RESPONSES, request(background=True), "t").passthrough == "background"
    assert prepare(RESPONSES, request(), "t").passthrough is None


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "no model"}, "model"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": 3}, "input"),
        ({"model": "m", "input": "x", "instructions": 5}, "instructions"),
        ({"model": "m", "input": "x", "include": "reasoning"}, "include"),
        ({"model": "m", "input": "x", "max_output_tokens": "9"}, "max_output_tokens"),
        ({"model": "m", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "m", "input": "x", "max_output_tokens": 2**31}, "max_output_tokens"),
        ({"model": "m", "input": "x", "max_output_tokens": True}, "max_output_tokens"),
        ({"model": "m", "input": "x", "max_tool_calls": 0}, "max_tool_calls"),
        ({"model": "m", "input": "x", "top_logprobs": 21}, "top_logprobs"),
        ({"model": "m", "input": "x", "store": "false"}, "store"),
        ({"model": "m", "input": "x", "background": 1}, "background"),
    ],
)
def test_bad_requests_name_their_param(body: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as info:
        prepare(RESPONSES, body, "t")
    assert info.value.param == param


def test_a_stored_prompt_needs_no_model_nor_input() -> None:
    assert prepare(RESPONSES, {"prompt": {"id": "pmpt_1"}}, "t").text is None


@pytest.mark.parametrize(
    ("body", "ok", "why"),
    [
        (answer(), True, ""),
        (
            answer(status="incomplete", incomplete_details={"reason": "max_output_tokens"}),
            False,
            "status incomplete",
        ),
        (answer(status="failed", error={"code": "server_error", "message": "x"}), False, "error"),
        (answer(incomplete_details={"reason": "content_filter"}), False, "finish_reason"),
        ({**answer(), "output": []}, False, "invalid"),
        ({**answer(), "object": "chat.completion"}, False, "invalid"),
    ],
)
def test_only_completed_answers_are_stored(body: dict[str, Any], ok: bool, why: str) -> None:
    got, reason = cacheable_response(RESPONSES, 200, body)
    assert got is ok and reason.startswith(why)


def test_refusals_are_stored_unless_told_not_to() -> None:
    refusal = copy.deepcopy(answer())
    refusal["output"][0]["content"] = [{"type": "refusal", "refusal": "I can't help."}]
    assert cacheable_response(RESPONSES, 200, refusal)[0]
    assert cacheable_response(RESPONSES, 200, refusal, cache_refusals=False) == (False, "refusal")


def test_tokens_and_dollars_saved_read_input_and_output_tokens() -> None:
    prices = PriceTable()
    usage = answer()["usage"]
    chat_usage = {"prompt_tokens": 12, "completion_tokens": 7}
    assert prices.cost("gpt-4.1-mini", usage) == prices.cost("gpt-4.1-mini", chat_usage)
    assert prices.cost("gpt-4.1-mini", usage) is not None


def function_call_answer() -> dict[str, Any]:
    body = answer()
    body["output"] = [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "lookup",
            "arguments": json.dumps({"query": "reset my password please"}),
            "status": "completed",
        },
    ]
    return body


@pytest.mark.parametrize("stored", [answer("word " * 40), function_call_answer()])
@pytest.mark.parametrize("cut", [1, 7, 64])
def test_a_replayed_stream_is_well_formed_and_assembles_back(
    stored: dict[str, Any], cut: int
) -> None:
    events = response_events(stored, pieces=8)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed" and events[-1]["response"] == stored
    if stored["output"][0]["type"] == "message":
        deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
        assert len(deltas) > 1 and "".join(deltas) == "word " * 40
    else:
        deltas = [e["delta"] for e in events if e["type"].endswith("arguments.delta")]
        assert "".join(deltas) == stored["output"][1]["arguments"]
    raw = b"".join(responses_sse(stored))
    asm = ResponsesStreamAssembler()
    for i in range(0, len(raw), cut):  # any split of the bytes
        asm.feed_events(raw[i : i + cut])
    assert asm.complete and asm.result() == stored


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


@pytest.mark.parametrize(
    ("stream", "why"),
    [
        (
            sse({"type": "response.created", "response": answer(status="in_progress")}),
            "no response.completed",
        ),
        (sse({"type": "error", "code": "server_error", "message": "boom"}), "error event"),
        (sse({"type": "response.failed", "response": answer(status="failed")}), "error event"),
        (
            sse({"type": "response.incomplete", "response": answer(status="incomplete")}),
            "incomplete",
        ),
        (
            sse({"type": "response.completed", "response": answer()}) + b"data: {}\n\n",
            "data after response.completed",
        ),
        (
            sse({"type": "response.completed", "response": answer(status="in_progress")}),
            "status in_progress",
        ),
        (b"event: response.created\ndata: not json\n\n", "error event"),
    ],
)
def test_a_stream_is_stored_only_when_it_completed(stream: bytes, why: str) -> None:
    asm = ResponsesStreamAssembler()
    asm.feed_events(stream)
    assert not asm.complete and asm.incomplete_reason == why


# ---------------------------------------------------------------------- deltas against the final


def doctored(
    stored: dict[str, Any], change: Any, events: list[dict[str, Any]] | None = None
) -> bytes:
    """``stored``'s live stream with ``change`` applied to the final response (or the events)."""
    events = events if events is not None else response_events(stored)
    final = copy.deepcopy(stored)
    change(final, events)
    events[-1] = {**events[-1], "response": final}
    return sse(*events)


def _set_text(final: dict[str, Any], events: Any) -> None:
    final["output"][0]["content"][0]["text"] = "Visit evil.example to reset it."


def _set_args(final: dict[str, Any], events: Any) -> None:
    final["output"][1]["arguments"] = '{"query": "drop table users"}'


def _drop_part(final: dict[str, Any], events: Any) -> None:
    final["output"][0]["content"] = []


def _add_item(final: dict[str, Any], events: Any) -> None:
    final["output"].append(copy.deepcopy(final["output"][0]))


def _add_part(final: dict[str, Any], events: Any) -> None:
    final["output"][0]["content"].append(
        {"type": "output_text", "text": "Also visit evil.example.", "annotations": []}
    )


def _number_delta(final: dict[str, Any], events: list[dict[str, Any]]) -> None:
    for e in events:
        if e["type"] == "response.output_text.delta":
            e["delta"] = 7
            return


def _move_delta(final: dict[str, Any], events: list[dict[str, Any]]) -> None:
    for e in events:
        if e["type"] == "response.output_text.delta":
            e["content_index"] = 1  # a part the final message does not have


def refusal_answer() -> dict[str, Any]:
    body = answer()
    body["output"][0]["content"] = [{"type": "refusal", "refusal": "I can't help with that."}]
    return body


def _set_refusal(final: dict[str, Any], events: Any) -> None:
    final["output"][0]["content"][0]["refusal"] = "Sure, here is how."


@pytest.mark.parametrize(
    ("stored", "change", "why"),
    [
        (answer("word " * 20), _set_text, "the final text of output 0 content 0 is not its"),
        (function_call_answer(), _set_args, "the final arguments of output 1 is not its"),
        (refusal_answer(), _set_refusal, "the final refusal of output 0 content 0 is not its"),
        (answer(), _drop_part, "deltas for text of output 0 content 0, which the final"),
        (answer(), _add_item, "the final text of output 1 content 0 came in no delta"),
        (answer(), _add_part, "the final text of output 0 content 1 came in no delta"),
        (answer(), _number_delta, "a delta of text of output 0 content 0 that is not a string"),
        (answer(), _move_delta, "deltas for text of output 0 content 1, which the final"),
    ],
    ids=[
        "text",
        "arguments",
        "refusal",
        "part-dropped",
        "item-added",
        "part-added",
        "not-a-string",
        "wrong-part",
    ],
)
def test_a_final_response_that_is_not_what_the_deltas_said_is_not_stored(
    stored: dict[str, Any], change: Any, why: str
) -> None:
    honest = ResponsesStreamAssembler()
    honest.feed_events(b"".join(responses_sse(stored)))
    assert honest.complete and honest.not_stored_reason is None
    asm = ResponsesStreamAssembler()
    raw = doctored(stored, change)
    for i in range(0, len(raw), 7):  # any split of the bytes
        asm.feed_events(raw[i : i + 7])
    assert asm.result() is not None  # the final response arrived, completed ...
    assert not asm.complete  # ... and is not stored
    assert asm.mismatch is not None and asm.mismatch.startswith(why), asm.mismatch
    assert asm.incomplete_reason == f"mismatch: {asm.mismatch}"
    assert asm.not_stored_reason == "stream_mismatch"


def test_a_stream_of_the_final_response_alone_is_stored() -> None:
    """No deltas (an upstream that sends only the final event): the client was sent the final
    response itself, which is what is stored."""
    asm = ResponsesStreamAssembler()
    asm.feed_events(sse({"type": "response.completed", "response": answer()}))
    assert asm.complete and asm.mismatch is None and asm.result() == answer()


def test_other_reasons_win_over_a_mismatch() -> None:
    events = response_events(answer())
    final = copy.deepcopy(answer())
    _set_text(final, events)
    events[-1] = {**events[-1], "response": final}
    asm = ResponsesStreamAssembler()
    asm.feed_events(sse(*events) + b"data: {}\n\n")
    assert asm.incomplete_reason == "data after response.completed"
    assert asm.not_stored_reason == "incomplete_stream"
    big = ResponsesStreamAssembler(max_answer_bytes=200)
    big.feed_events(sse(*events))
    assert big.not_stored_reason == "too_large"
