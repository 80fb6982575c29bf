"""The Responses API through ``cachekit serve``, with the official openai client over real HTTP
against a fake upstream that speaks the Responses event stream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response
from test_proxy import ProxyProcess, report

from cachekit.testing.clock import wait_until
from cachekit.testing.upstream import FakeUpstream

RESPONSES = "/v1/responses"
MODEL = "gpt-4.1-mini"


@pytest.fixture(scope="module")
def proxy(upstream: FakeUpstream) -> Iterator[ProxyProcess]:
    p = ProxyProcess(upstream.url).start()
    try:
        yield p
    finally:
        p.stop()


def calls(upstream: FakeUpstream, key: str) -> int:
    return sum(
        1
        for c in upstream.calls
        if c["path"] == RESPONSES and c["headers"].get("authorization") == f"Bearer {key}"
    )


def create(client: openai.OpenAI, text: str, **kw: Any) -> tuple[Response, Any]:
    raw = client.responses.with_raw_response.create(
        model=kw.pop("model", MODEL), input=text, instructions="Be brief.", **kw
    )
    return raw.parse(), raw.headers


def stream(client: openai.OpenAI, text: str, **kw: Any) -> tuple[list[Any], Any]:
    raw = client.responses.with_raw_response.create(
        model=kw.pop("model", MODEL), input=text, instructions="Be brief.", stream=True, **kw
    )
    return list(raw.parse()), raw.headers


def only_if_cached(proxy: ProxyProcess, key: str, text: str, **body: Any) -> httpx.Response:
    return httpx.post(
        proxy.url + RESPONSES,
        json={"model": MODEL, "input": text, "instructions": "Be brief.", **body},
        headers={"authorization": f"Bearer {key}", "cache-control": "only-if-cached"},
        timeout=10.0,
    )


def wait_stored(proxy: ProxyProcess, key: str, text: str, **body: Any) -> None:
    wait_until(lambda: only_if_cached(proxy, key, text, **body).status_code == 200, timeout=10)


def text_of(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def test_a_repeat_is_a_hit_and_a_paraphrase_a_semantic_hit(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    first, h1 = create(client, "How do I reset my password")
    assert h1["x-cachekit-cache"] == "MISS" and first.output_text.startswith("Answer #")
    wait_stored(proxy, key, "How do I reset my password")
    again, h2 = create(client, "How do I reset my password")
    assert h2["x-cachekit-cache"] == "HIT"
    assert again.output_text == first.output_text and again.id == first.id
    para, h3 = create(client, "how do I reset my password please")
    assert h3["x-cachekit-cache"] == "SEMANTIC_HIT"
    assert 0.8 <= float(h3["x-cachekit-similarity"]) < 1.0
    assert para.output_text == first.output_text
    assert calls(upstream, key) == 1
    # Other instructions: another scope, never served this answer.
    h4 = client.responses.with_raw_response.create(
        model=MODEL, input="How do I reset my password", instructions="Answer in French."
    ).headers
    assert h4["x-cachekit-cache"] == "MISS" and calls(upstream, key) == 2


def test_a_streamed_hit_is_a_typed_event_stream_the_sdk_parses(
    proxy: ProxyProcess, client: openai.OpenAI, key: str
) -> None:
    text = "What is the capital of Peru"
    first, _ = create(client, text)
    wait_stored(proxy, key, text)
    events, h = stream(client, text)
    assert h["x-cachekit-cache"] == "HIT"
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert types.count("response.output_text.delta") > 1
    assert text_of(events) == first.output_text == events[-1].response.output_text


def test_a_streamed_miss_is_relayed_then_served_to_a_plain_request(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    text = "Name three prime numbers"
    events, h = stream(client, text)
    assert h["x-cachekit-cache"] == "MISS" and events[-1].type == "response.completed"
    wait_stored(proxy, key, text)
    plain, h2 = create(client, text)
    assert h2["x-cachekit-cache"] == "HIT" and plain.output_text == text_of(events)
    assert calls(upstream, key) == 1


def test_function_calls_are_cached(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    tools: Any = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    first, _ = create(client, "Find the order 1234", tools=tools)
    assert first.output[0].type == "function_call"
    wait_stored(proxy, key, "Find the order 1234", tools=tools)
    again, h = create(client, "Find the order 1234", tools=tools)
    assert h["x-cachekit-cache"] == "HIT" and again.output[0] == first.output[0]
    events, hs = stream(client, "Find the order 1234", tools=tools)
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert hs["x-cachekit-cache"] == "HIT" and args == first.output[0].arguments
    assert calls(upstream, key) == 1


@pytest.mark.parametrize("model", ["fake-failed", "fake-length"])
@pytest.mark.parametrize("streamed", [False, True])
def test_failed_and_incomplete_answers_are_never_stored(
    upstream: FakeUpstream, client: openai.OpenAI, key: str, model: str, streamed: bool
) -> None:
    for n in (1, 2):
        if streamed:
            events, h = stream(client, f"Tell me about {model}", model=model)
            assert events[-1].type in ("response.failed", "response.incomplete")
        else:
            _, h = create(client, f"Tell me about {model}", model=model)
        assert h["x-cachekit-cache"] == "MISS"
        assert calls(upstream, key) == n


@pytest.mark.parametrize(
    "extra",
    [{"background": True}, {"conversation": "conv_123"}],
    ids=["background", "conversation"],
)
def test_requests_that_depend_on_upstream_state_pass_through(
    proxy: ProxyProcess, upstream: FakeUpstream, key: str, extra: dict[str, Any]
) -> None:
    body = {"model": MODEL, "input": "Summarise the meeting", **extra}
    for n in (1, 2):
        r = httpx.post(
            proxy.url + RESPONSES,
            json=body,
            headers={"authorization": f"Bearer {key}"},
            timeout=10.0,
        )
        assert r.status_code == 200 and r.headers["x-cachekit-cache"] == "PASSTHROUGH"
        assert calls(upstream, key) == n


def test_only_if_cached_never_reaches_the_upstream_for_a_passthrough_request(
    proxy: ProxyProcess, upstream: FakeUpstream, key: str
) -> None:
    r = only_if_cached(proxy, key, "Summarise the meeting", background=True)
    assert r.status_code == 504 and r.json()["error"]["code"] == "not_cached"
    assert calls(upstream, key) == 0


def test_other_paths_say_passthrough(proxy: ProxyProcess, key: str) -> None:
    r = httpx.get(proxy.url + "/v1/models", headers={"authorization": f"Bearer {key}"}, timeout=10)
    assert r.status_code == 200 and r.headers["x-cachekit-cache"] == "PASSTHROUGH"


def test_feedback_on_a_responses_semantic_hit(
    proxy: ProxyProcess, client: openai.OpenAI, key: str
) -> None:
    first, _ = create(client, "How do I rotate my signing keys")
    wait_stored(proxy, key, "How do I rotate my signing keys")
    para, h = create(client, "How do I rotate my signing keys please")
    assert h["x-cachekit-cache"] == "SEMANTIC_HIT"
    # A fresh id: upstream, the stored answer's id names the other prompt's history.
    assert para.id != first.id and para.id == h["x-cachekit-response-id"]
    wrong = report(proxy, key, {"id": para.id, "correct": False})
    assert wrong.status_code == 200 and wrong.json() == {"recorded": True}
    assert only_if_cached(proxy, key, "How do I rotate my signing keys please").status_code == 504
    assert only_if_cached(proxy, key, "How do I rotate my signing keys").status_code == 200


def test_a_semantic_hit_of_an_unstored_request_gets_a_fresh_id(
    proxy: ProxyProcess, client: openai.OpenAI, key: str
) -> None:
    first, _ = create(client, "How tall is the Eiffel tower", store=False)
    wait_stored(proxy, key, "How tall is the Eiffel tower", store=False)
    para, h = create(client, "How tall is the Eiffel tower please", store=False)
    assert h["x-cachekit-cache"] == "SEMANTIC_HIT"
    assert para.id != first.id and para.id.startswith("resp_ck")
    assert h["x-cachekit-response-id"] == para.id


def test_a_semantic_hit_id_is_never_continued_upstream(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    """Continuing from (or fetching) a semantic hit's id is refused with the reason, never
    forwarded: upstream that id is unknown, and the stored answer's id is another prompt's."""
    first, _ = create(client, "How do I renew my passport online")
    wait_stored(proxy, key, "How do I renew my passport online")
    para, h = create(client, "How do I renew my passport online please")
    assert h["x-cachekit-cache"] == "SEMANTIC_HIT" and para.id.startswith("resp_ck")
    before = calls(upstream, key)
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model=MODEL, input="And in Spain?", previous_response_id=para.id)
    assert bad.value.code == "semantic_hit_not_stored" and para.id in bad.value.message
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.retrieve(para.id)
    assert missing.value.code == "semantic_hit_not_stored"
    assert calls(upstream, key) == before
    # The upstream's own ids (an exact answer's) continue as ever.
    follow, _ = create(client, "And in Spain?", previous_response_id=first.id)
    assert follow.id != first.id


def test_an_unstored_answer_never_answers_a_request_stored_upstream(
    proxy: ProxyProcess, upstream: FakeUpstream, client: openai.OpenAI, key: str
) -> None:
    """``store`` is keyed: an answer fetched with ``store: false`` has an id the upstream never
    stored, so a default (stored) request, whose caller may continue from the id it gets, is
    never served it; absent ``store`` and ``store: true`` share an entry."""
    text = "What is the tallest mountain in Africa"
    unstored, _ = create(client, text, store=False)
    wait_stored(proxy, key, text, store=False)
    assert only_if_cached(proxy, key, text).status_code == 504
    stored, h = create(client, text)
    assert h["x-cachekit-cache"] == "MISS" and stored.id != unstored.id
    assert calls(upstream, key) == 2
    wait_stored(proxy, key, text)
    assert only_if_cached(proxy, key, text, store=True).json()["id"] == stored.id
    assert only_if_cached(proxy, key, text, store=False).json()["id"] == unstored.id
    assert calls(upstream, key) == 2
