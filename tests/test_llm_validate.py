"""Poisoned upstream answers: what :func:`cacheable_response` refuses
(:mod:`cachekit.llm.validate`), prices that never raise, forged stored entries read as misses,
and streams that carried an error or data after ``[DONE]`` never stored."""

from __future__ import annotations

import copy
import itertools
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachekit import Status
from cachekit.llm import (
    CHAT,
    COMPLETIONS,
    EMBEDDINGS,
    LLMCache,
    LLMCacheConfig,
    PriceTable,
    StreamAssembler,
    build_cache,
    cacheable_response,
    completion_chunks,
    sse_event,
)
from cachekit.llm.rules import check_response
from cachekit.llm.validate import check_usage, is_count

USAGE = {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}


def chat_body(**extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello there."},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": dict(USAGE),
        **extra,
    }


def text_body() -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "gpt-3.5-turbo-instruct",
        "choices": [{"index": 0, "text": "Hi.", "logprobs": None, "finish_reason": "stop"}],
        "usage": dict(USAGE),
    }


def embeddings_body() -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.1, -0.2]}],
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 2, "total_tokens": 2},
    }


BAD_COUNTS = ["n/a", [1], -1, True, False, 1.5, None, {"n": 1}]


# ---------------------------------------------------------------------- validate


def test_is_count() -> None:
    assert is_count(0) and is_count(12)
    for bad in (-1, True, False, 1.0, "3", None, [3]):
        assert not is_count(bad), bad


def test_well_formed_answers_pass() -> None:
    assert check_response(CHAT, chat_body()) is None
    assert check_response(COMPLETIONS, text_body()) is None
    assert check_response(EMBEDDINGS, embeddings_body()) is None
    assert cacheable_response(CHAT, 200, chat_body()) == (True, "")
    assert cacheable_response(COMPLETIONS, 200, text_body()) == (True, "")
    assert cacheable_response(EMBEDDINGS, 200, embeddings_body()) == (True, "")
    no_usage = chat_body()
    del no_usage["usage"]
    assert cacheable_response(CHAT, 200, no_usage) == (True, "")
    details = chat_body(usage={**USAGE, "completion_tokens_details": {"reasoning_tokens": 3}})
    assert cacheable_response(CHAT, 200, details) == (True, "")
    tools = chat_body()
    tools["choices"][0]["finish_reason"] = "tool_calls"
    tools["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    assert cacheable_response(CHAT, 200, tools) == (True, "")


@pytest.mark.parametrize("field", ["prompt_tokens", "completion_tokens", "total_tokens"])
@pytest.mark.parametrize("bad", BAD_COUNTS, ids=repr)
@pytest.mark.parametrize("endpoint", [CHAT, COMPLETIONS, EMBEDDINGS])
def test_usage_of_the_wrong_type_is_not_cached(endpoint: str, field: str, bad: Any) -> None:
    body = {CHAT: chat_body, COMPLETIONS: text_body, EMBEDDINGS: embeddings_body}[endpoint]()
    body["usage"][field] = bad
    ok, reason = cacheable_response(endpoint, 200, body)
    assert not ok
    assert reason.startswith("invalid usage") and field in reason


@pytest.mark.parametrize("usage", ["n/a", [10, 7], 17, True])
def test_usage_not_an_object_is_not_cached(usage: Any) -> None:
    assert check_usage(usage) == "usage not an object"
    assert cacheable_response(CHAT, 200, chat_body(usage=usage)) == (
        False,
        "invalid usage not an object",
    )


def test_usage_details_must_be_counts() -> None:
    bad = {**USAGE, "prompt_tokens_details": {"cached_tokens": "lots"}}
    assert not cacheable_response(CHAT, 200, chat_body(usage=bad))[0]
    bad = {**USAGE, "prompt_tokens_details": [1]}
    assert not cacheable_response(CHAT, 200, chat_body(usage=bad))[0]


@pytest.mark.parametrize(
    "endpoint, wrong",
    [
        (CHAT, "text_completion"),
        (CHAT, "chat.completion.chunk"),
        (CHAT, None),
        (COMPLETIONS, "chat.completion"),
        (COMPLETIONS, None),
        (EMBEDDINGS, "chat.completion"),
    ],
)
def test_object_must_be_the_endpoints(endpoint: str, wrong: Any) -> None:
    body = {CHAT: chat_body, COMPLETIONS: text_body, EMBEDDINGS: embeddings_body}[endpoint]()
    body["object"] = wrong
    ok, reason = cacheable_response(endpoint, 200, body)
    assert not ok and reason.startswith("invalid object"), reason


@pytest.mark.parametrize(
    "choices",
    [
        [],
        "stop",
        [None],
        ["a choice"],
        [{"index": 0, "finish_reason": "stop"}],  # no message
        [{"index": 0, "message": "hi", "finish_reason": "stop"}],
        [{"index": 0, "message": {"content": 3}, "finish_reason": "stop"}],
        [{"index": 0, "message": {"content": ["x"]}, "finish_reason": "stop"}],
        [{"index": "0", "message": {"content": "x"}, "finish_reason": "stop"}],
        [{"index": 0, "message": {"content": "x"}, "finish_reason": ["stop"]}],
        [{"index": 0, "message": {"content": "x"}, "logprobs": [1], "finish_reason": "stop"}],
        [{"index": 0, "message": {"tool_calls": "f"}, "finish_reason": "stop"}],
        [{"index": 0, "message": {"tool_calls": [{"function": 1}]}, "finish_reason": "stop"}],
    ],
    ids=repr,
)
def test_chat_choices_must_be_well_typed(choices: Any) -> None:
    assert not cacheable_response(CHAT, 200, chat_body(choices=choices))[0]


def test_completion_and_embeddings_shapes() -> None:
    body = text_body()
    body["choices"][0]["text"] = None
    assert cacheable_response(COMPLETIONS, 200, body) == (
        False,
        "invalid choice text not a string",
    )
    for bad in ([], "", [True], ["0.1"], None):
        body = embeddings_body()
        body["data"][0]["embedding"] = bad
        assert not cacheable_response(EMBEDDINGS, 200, body)[0], bad
    body = embeddings_body()
    body["data"][0]["embedding"] = "AAAAAA=="  # encoding_format: base64
    assert cacheable_response(EMBEDDINGS, 200, body)[0]
    body = embeddings_body()
    body["data"] = [1]
    assert not cacheable_response(EMBEDDINGS, 200, body)[0]


def test_top_level_fields_must_be_well_typed() -> None:
    assert not cacheable_response(CHAT, 200, chat_body(id=7))[0]
    assert not cacheable_response(CHAT, 200, chat_body(model=["gpt"]))[0]
    assert not cacheable_response(CHAT, 200, chat_body(created="now"))[0]
    assert not cacheable_response(CHAT, 200, chat_body(error={"message": "x"}))[0]


# ---------------------------------------------------------------------- prices


@pytest.mark.parametrize("bad", BAD_COUNTS, ids=repr)
def test_cost_of_malformed_usage_is_unpriced(bad: Any) -> None:
    table = PriceTable()
    assert table.cost("gpt-4o", USAGE) == pytest.approx((10 * 2.5 + 7 * 10.0) / 1e6)
    if bad is None:  # an absent count is zero tokens
        assert table.cost("gpt-4o", {"prompt_tokens": None, "completion_tokens": 7}) is not None
        return
    assert table.cost("gpt-4o", {"prompt_tokens": bad, "completion_tokens": 7}) is None
    assert table.cost("gpt-4o", {"prompt_tokens": 10, "completion_tokens": bad}) is None


@pytest.mark.parametrize("usage", ["n/a", [1, 2], 5, True])
def test_cost_of_usage_not_an_object_is_unpriced(usage: Any) -> None:
    assert PriceTable().cost("gpt-4o", usage) is None


def test_cost_of_a_model_not_a_string_is_unpriced() -> None:
    assert PriceTable().cost(["gpt-4o"], USAGE) is None  # type: ignore[arg-type]


# ---------------------------------------------------------------------- stored entries


@pytest.fixture
def llm() -> Iterator[LLMCache]:
    cache = build_cache(LLMCacheConfig(semantic=False))
    try:
        yield cache
    finally:
        cache.close()


REQ = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello"}]}


def _forge(llm: LLMCache, request: dict[str, Any], value: Any, endpoint: str = CHAT) -> str:
    """Overwrite the stored entry of ``request`` with ``value`` through the public Cache API."""
    req = llm.request(request, "t", endpoint=endpoint)
    assert llm.cache.set(req.key, value, ttl=60)
    return req.key


def _serialization_errors(llm: LLMCache) -> int:
    return int(llm.cache.stats().extra["serialization_errors"])


def _wrapped(llm: LLMCache, response: Any) -> dict[str, Any]:
    now = llm.cache.clock()
    return {"r": response, "t": now, "e": now + 60}


@pytest.mark.parametrize(
    "poison",
    [
        {"usage": {"prompt_tokens": "n/a", "completion_tokens": 1}},
        {"usage": {"prompt_tokens": [1], "completion_tokens": 1}},
        {"usage": {"prompt_tokens": -5, "completion_tokens": 1}},
        {"usage": {"prompt_tokens": True, "completion_tokens": 1}},
        {"usage": "n/a"},
        {"object": "text_completion"},
        {"choices": []},
        {"choices": [{"message": "hi", "finish_reason": "stop"}]},
    ],
    ids=repr,
)
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_forged_entry_is_a_counted_miss(
    llm: LLMCache, poison: dict[str, Any], mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert llm.store(REQ, chat_body(), "t")
    assert llm.lookup(REQ, "t").status is Status.HIT
    before = _serialization_errors(llm)
    key = _forge(llm, REQ, _wrapped(llm, chat_body(**poison)))
    with caplog.at_level(logging.WARNING, logger="cachekit.llm"):
        found = await llm.alookup(REQ, "t") if mode == "async" else llm.lookup(REQ, "t")
    assert found.status is Status.MISS and found.response is None
    assert _serialization_errors(llm) == before + 1
    assert any(
        "malformed LLM cache entry" in r.getMessage() and key in r.getMessage()
        for r in caplog.records
    )
    assert not any("lookup failed" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "value",
    [
        "a string",
        {"r": "not a dict", "t": 0},
        {"r": None},
        "wrapper",  # replaced below: a well-typed response under a forged store time
        "expiry",
    ],
)
def test_a_forged_wrapper_is_a_counted_miss(llm: LLMCache, value: Any) -> None:
    assert llm.store(REQ, chat_body(), "t")
    if value == "wrapper":
        value = {**_wrapped(llm, chat_body()), "t": "yesterday"}
    elif value == "expiry":
        value = {**_wrapped(llm, chat_body()), "e": [1]}
    before = _serialization_errors(llm)
    _forge(llm, REQ, value)
    assert llm.lookup(REQ, "t").status is Status.MISS
    assert _serialization_errors(llm) == before + 1


def test_a_valid_forged_entry_is_served_and_plain_misses_are_not_counted(llm: LLMCache) -> None:
    before = _serialization_errors(llm)
    assert llm.lookup(REQ, "t").status is Status.MISS  # nothing stored: not malformed
    assert _serialization_errors(llm) == before
    _forge(llm, REQ, _wrapped(llm, chat_body(id="chatcmpl-forged")))
    found = llm.lookup(REQ, "t")
    assert found.status is Status.HIT and found.response is not None
    assert found.response["id"] == "chatcmpl-forged"


def test_an_entry_of_another_endpoints_shape_is_a_miss(llm: LLMCache) -> None:
    emb = {"model": "text-embedding-3-small", "input": "hello"}
    _forge(llm, emb, _wrapped(llm, chat_body()), endpoint=EMBEDDINGS)
    assert llm.lookup(emb, "t", endpoint=EMBEDDINGS).status is Status.MISS
    _forge(llm, emb, _wrapped(llm, embeddings_body()), endpoint=EMBEDDINGS)
    assert llm.lookup(emb, "t", endpoint=EMBEDDINGS).status is Status.HIT


# ---------------------------------------------------------------------- streams


def _stream_events(include_usage: bool = True) -> list[bytes]:
    chunks = completion_chunks(chat_body(), include_usage=include_usage, pieces=3)
    return [sse_event(c) for c in chunks]


def _feed(asm: StreamAssembler, events: list[bytes], *, split: int = 0) -> None:
    """Feed ``events`` one by one (or, with ``split``, cut into pieces of that many bytes)."""
    raw = b"".join(events)
    pieces = [raw[i : i + split] for i in range(0, len(raw), split)] if split else events
    for piece in pieces:
        asm.feed(piece)


@pytest.mark.parametrize("split", [0, 1, 7])
def test_a_clean_stream_is_complete(split: int) -> None:
    asm = StreamAssembler()
    _feed(asm, [*_stream_events(), b": keep-alive\n\n", b"data: [DONE]\n\n"], split=split)
    assert asm.complete and asm.incomplete_reason is None
    result = asm.result()
    assert result is not None
    assert result["choices"][0]["message"]["content"] == "Hello there."
    ok, _ = cacheable_response(CHAT, 200, result)
    assert ok


@pytest.mark.parametrize(
    "trailer",
    [b"\n", b"   \n\n", b": comment\n\n", b":ping\r\n\r\n", b": a\n: b\n\n\n\n", b": no end"],
    ids=repr,
)
def test_only_comments_and_whitespace_may_follow_done(trailer: bytes) -> None:
    asm = StreamAssembler()
    _feed(asm, [*_stream_events(), b"data: [DONE]\n\n", trailer])
    assert asm.complete, asm.incomplete_reason


@pytest.mark.parametrize(
    "trailer",
    [
        sse_event({"choices": [{"index": 0, "delta": {"content": " INJECTED"}}]}),
        b"data: [DONE]\n\n",
        b"event: ping\n\n",
        b"id: 7\n\n",
        b"garbage\n\n",
        b'data: {"choices": []}',  # unterminated, left in the buffer
        b"trailing bytes",
    ],
    ids=repr,
)
@pytest.mark.parametrize("split", [0, 1])
def test_data_after_done_is_never_stored(trailer: bytes, split: int) -> None:
    asm = StreamAssembler()
    _feed(asm, [*_stream_events(), b"data: [DONE]\n\n", trailer], split=split)
    assert not asm.complete
    assert asm.incomplete_reason == "data after [DONE]"
    result = asm.result()
    assert result is not None and "INJECTED" not in json.dumps(result)


@pytest.mark.parametrize(
    "error",
    [
        b'event: error\ndata: {"message": "overloaded"}\n\n',
        b"event:error\ndata: {}\n\n",
        b"event: error\n\n",
        b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n',
        b'data: {"error": null, "choices": []}\n\n',
        b'data: {"error": "boom"}\r\n\r\n',
        b"data: [1, 2]\n\n",
        b"data: not json\n\n",
        sse_event({"choices": [{"index": [0], "delta": {"content": "x"}}]}),
        sse_event({"choices": [{"index": 0, "delta": {"tool_calls": "oops"}}]}),
    ],
    ids=repr,
)
@pytest.mark.parametrize("where", [0, 2, -1])
def test_a_stream_that_carried_an_error_is_never_stored(error: bytes, where: int) -> None:
    events = _stream_events()
    events.insert(where if where >= 0 else len(events), error)
    asm = StreamAssembler()
    for e in [*events, b"data: [DONE]\n\n"]:
        asm.feed(e)  # chunk by chunk, never raises
    assert asm.broken and not asm.complete
    assert asm.incomplete_reason == "error event"


def test_a_stream_without_done_is_not_stored() -> None:
    asm = StreamAssembler()
    _feed(asm, _stream_events())
    assert asm.incomplete_reason == "no [DONE]" and not asm.complete


def test_a_complete_stream_with_poisoned_usage_is_not_cacheable() -> None:
    chunks = completion_chunks(chat_body(), include_usage=True, pieces=3)
    chunks[-1]["usage"] = {"prompt_tokens": "n/a", "completion_tokens": 2}
    asm = StreamAssembler()
    _feed(asm, [*(sse_event(c) for c in chunks), b"data: [DONE]\n\n"])
    assert asm.complete  # a well-formed stream ...
    ok, reason = cacheable_response(CHAT, 200, asm.result())
    assert not ok and reason.startswith("invalid usage")  # ... whose answer is not stored


def test_chunks_after_done_are_not_assembled() -> None:
    asm = StreamAssembler()
    _feed(asm, [*_stream_events(), b"data: [DONE]\n\n"])
    before = copy.deepcopy(asm.result())
    events = asm.feed_events(sse_event({"choices": [{"index": 1, "delta": {"content": "x"}}]}))
    assert [c for _, c in events] == [None]
    assert asm.result() == before


# ---------------------------------------------------------------------- stream bounds


def _relay(asm: StreamAssembler, pieces: list[bytes]) -> tuple[bytes, list[Any]]:
    """What a relay sends (every event's bytes, then the unterminated tail) and the chunks."""
    out, chunks = [], []
    for piece in pieces:
        for raw, chunk in asm.feed_events(piece):
            out.append(raw)
            chunks.append(chunk)
    return b"".join(out) + asm.rest(), chunks


@given(cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12))
@settings(max_examples=60, deadline=None)
def test_any_split_and_either_separator_give_the_same_events(cuts: list[int]) -> None:
    events = [
        e.replace(b"\n\n", b"\r\n\r\n") if i % 2 else e for i, e in enumerate(_stream_events())
    ]
    raw = b"".join([*events, b": ping\r\n\r\n", b"data: [DONE]\n\n"])
    bounds = sorted({min(c, len(raw)) for c in cuts} | {0, len(raw)})
    pieces = [raw[a:b] for a, b in itertools.pairwise(bounds)]
    whole = StreamAssembler()
    _relay(whole, [raw])
    split = StreamAssembler()
    _, chunks = _relay(split, pieces)
    assert split.complete and whole.complete
    assert split.result() == whole.result()
    assert len([c for c in chunks if c is not None]) == len(events)


def test_an_event_past_the_bound_is_relayed_unparsed_and_not_held() -> None:
    asm = StreamAssembler(max_event_bytes=1000)
    pieces = [b"data: {", *[b"x" * 300] * 10, sse_event({"a": 1}), b"data: [DONE]\n\n"]
    sent, chunks = _relay(asm, pieces)
    assert sent == b"".join(pieces)  # every byte relayed, in order
    assert asm.too_large and asm.incomplete_reason == "too large"
    assert all(c is None for c in chunks)  # nothing parsed once past the bound
    assert asm.rest() == b""  # and nothing held
    assert asm.result() is None


def test_an_answer_past_the_bound_is_relayed_whole_and_not_stored() -> None:
    events = [*_stream_events(), b"data: [DONE]\n\n"]
    limit = len(b"".join(events)) // 2
    asm = StreamAssembler(max_answer_bytes=limit)
    sent, _ = _relay(asm, events)
    assert sent == b"".join(events)
    assert not asm.complete and asm.incomplete_reason == "too large"
    assert asm.result() is None  # what was assembled is dropped
    roomy = StreamAssembler(max_answer_bytes=limit * 4)
    _relay(roomy, events)
    assert roomy.complete


def test_stream_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError):
        StreamAssembler(max_event_bytes=0)
    with pytest.raises(ValueError):
        StreamAssembler(max_answer_bytes=-1)
