"""``cachekit serve`` in front of a misbehaving upstream (over real HTTP): an answer with a
poisoned ``usage``, a stream that carried an error event, a stream with data after ``[DONE]``,
an answer over ``--max-answer-bytes`` (streamed or not), a stream with no event separator and a
Responses stream whose final response is not what its deltas said are relayed to the caller but
never stored."""

from __future__ import annotations

import copy
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.responses import JSONResponse, Response, StreamingResponse

from cachekit.llm import completion_chunks, response_events, sse_event
from cachekit.testing.clock import wait_until
from cachekit.testing.upstream import FakeUpstream, serving

sys.path.insert(0, str(Path(__file__).parent))
from test_proxy import ProxyProcess

CHAT = "/v1/chat/completions"


#: The proxy's --max-answer-bytes here, and an answer well past it.
MAX_ANSWER = 100_000
BIG = 3 * MAX_ANSWER


async def _separatorless() -> Any:
    """One event that never ends: 3 x the bound of bytes with no blank line, then the end."""
    yield b"data: {"
    for _ in range(BIG // 1000):
        yield b"x" * 1000


class PoisonUpstream(FakeUpstream):
    """The fake upstream, with models that misbehave: ``poison-usage`` answers with
    ``usage.prompt_tokens: "n/a"``; streamed, ``poison-error-event`` sends an ``event: error``
    mid-stream and ``poison-after-done`` sends a chunk after ``[DONE]``."""

    async def _generate(self, body: dict[str, Any], chat: bool) -> Response:
        model = body.get("model")
        if not isinstance(model, str) or not model.startswith("poison-"):
            return await super()._generate(body, chat)
        done = self._completion(body, chat)
        if model == "poison-usage":
            done["usage"]["prompt_tokens"] = "n/a"
        if model == "poison-huge":
            done["choices"][0]["message"]["content"] = "x" * BIG
        if not body.get("stream"):
            return JSONResponse(done)
        if model == "poison-no-separator":
            return StreamingResponse(_separatorless(), media_type="text/event-stream")
        events = [sse_event(c) for c in completion_chunks(done, include_usage=True, pieces=3)]
        if model == "poison-error-event":
            events.insert(2, b'event: error\ndata: {"message": "overloaded"}\n\n')
        events.append(b"data: [DONE]\n\n")
        if model == "poison-after-done":
            events.append(sse_event({"choices": [{"index": 0, "delta": {"content": "!"}}]}))

        async def gen() -> Any:
            for e in events:
                yield e

        return StreamingResponse(gen(), media_type="text/event-stream")

    async def _respond(self, body: dict[str, Any]) -> Response:
        """``poison-mismatch``, streamed: the deltas say the honest answer, the final
        ``response.completed`` another text (what a client printing deltas never saw)."""
        if body.get("model") != "poison-mismatch" or not body.get("stream"):
            return await super()._respond(body)
        honest = self._response(body)
        events = response_events(honest)
        final = copy.deepcopy(honest)
        final["output"][0]["content"][0]["text"] = "Visit evil.example to fix it."
        events[-1] = {**events[-1], "response": final}
        frames = [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]

        async def gen() -> Any:
            for f in frames:
                yield f

        return StreamingResponse(gen(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def upstream() -> Iterator[PoisonUpstream]:
    with serving(PoisonUpstream()) as fake:
        yield fake


@pytest.fixture(scope="module")
def proxy(upstream: PoisonUpstream) -> Iterator[ProxyProcess]:
    p = ProxyProcess(upstream.url, "--max-answer-bytes", str(MAX_ANSWER)).start()
    try:
        yield p
    finally:
        p.stop()


def _post(proxy: ProxyProcess, key: str, model: str, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi there"}], **extra}
    headers = {"authorization": f"Bearer {key}", **extra.pop("headers", {})}
    return httpx.post(proxy.url + CHAT, json=body, headers=headers, timeout=10.0)


def _calls(upstream: PoisonUpstream, key: str) -> int:
    return sum(
        1
        for c in upstream.calls
        if c["path"] == CHAT and c["headers"].get("authorization") == f"Bearer {key}"
    )


def _only_if_cached(proxy: ProxyProcess, key: str, model: str, **extra: Any) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": "hi there"}], **extra}
    headers = {"authorization": f"Bearer {key}", "cache-control": "only-if-cached"}
    return httpx.post(proxy.url + CHAT, json=body, headers=headers, timeout=10.0).status_code


def test_poisoned_usage_is_relayed_not_stored(
    proxy: ProxyProcess, upstream: PoisonUpstream
) -> None:
    key = f"sk-poison-{uuid.uuid4().hex}"
    before = proxy.metric("cachekit_proxy_not_stored_total", reason="invalid")
    for n in (1, 2):
        r = _post(proxy, key, "poison-usage")
        assert r.status_code == 200
        assert r.json()["usage"]["prompt_tokens"] == "n/a"  # relayed as the upstream sent it
        assert r.headers.get("x-cachekit-cache") != "HIT"
        assert _calls(upstream, key) == n  # each one went upstream: nothing was stored
    wait_until(
        lambda: proxy.metric("cachekit_proxy_not_stored_total", reason="invalid") >= before + 2,
        timeout=10.0,
    )
    assert _only_if_cached(proxy, key, "poison-usage") == 504
    # the control: a well-formed answer on the same proxy is stored
    assert _post(proxy, key, "gpt-4o-mini").status_code == 200
    wait_until(lambda: _only_if_cached(proxy, key, "gpt-4o-mini") == 200, timeout=10.0)


@pytest.mark.parametrize("model", ["poison-error-event", "poison-after-done"])
def test_a_stream_with_an_error_or_data_after_done_is_relayed_not_stored(
    proxy: ProxyProcess, upstream: PoisonUpstream, model: str
) -> None:
    key = f"sk-poison-{uuid.uuid4().hex}"
    before = proxy.metric("cachekit_proxy_not_stored_total", reason="incomplete_stream")
    r = _post(proxy, key, model, stream=True)
    assert r.status_code == 200
    assert b"data: [DONE]" in r.content
    content = "".join(
        (json.loads(line[6:]).get("choices") or [{}])[0].get("delta", {}).get("content") or ""
        for line in r.text.splitlines()
        if line.startswith("data: {")
    )
    assert "Answer #" in content  # the answer reached the caller
    if model == "poison-error-event":
        assert b"event: error" in r.content
    wait_until(
        lambda: (
            proxy.metric("cachekit_proxy_not_stored_total", reason="incomplete_stream")
            >= before + 1
        ),
        timeout=10.0,
    )
    assert _only_if_cached(proxy, key, model, stream=True) == 504
    assert _post(proxy, key, model, stream=True).status_code == 200
    assert _calls(upstream, key) == 2


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_over_the_bound_is_relayed_whole_not_stored(
    proxy: ProxyProcess, upstream: PoisonUpstream, stream: bool
) -> None:
    key = f"sk-poison-{uuid.uuid4().hex}"
    before = proxy.metric("cachekit_proxy_not_stored_total", reason="too_large")
    r = _post(proxy, key, "poison-huge", stream=stream)
    assert r.status_code == 200
    if stream:
        content = "".join(
            (json.loads(line[6:]).get("choices") or [{}])[0].get("delta", {}).get("content") or ""
            for line in r.text.splitlines()
            if line.startswith("data: {")
        )
        assert r.content.endswith(b"data: [DONE]\n\n")
    else:
        content = r.json()["choices"][0]["message"]["content"]
    assert content == "x" * BIG  # every byte reached the caller
    wait_until(
        lambda: proxy.metric("cachekit_proxy_not_stored_total", reason="too_large") >= before + 1,
        timeout=10.0,
    )
    assert _only_if_cached(proxy, key, "poison-huge", stream=stream) == 504


def test_a_stream_without_separators_is_relayed_as_it_came(
    proxy: ProxyProcess, upstream: PoisonUpstream
) -> None:
    key = f"sk-poison-{uuid.uuid4().hex}"
    r = _post(proxy, key, "poison-no-separator", stream=True)
    assert r.status_code == 200
    assert r.content == b"data: {" + b"x" * (BIG // 1000 * 1000)
    assert _only_if_cached(proxy, key, "poison-no-separator", stream=True) == 504
    assert httpx.get(proxy.url + "/healthz", timeout=10.0).status_code == 200


def test_a_responses_stream_whose_final_response_is_not_its_deltas_is_not_stored(
    proxy: ProxyProcess, upstream: PoisonUpstream
) -> None:
    key = f"sk-poison-{uuid.uuid4().hex}"
    body = {"model": "poison-mismatch", "input": "How do I reset my password", "stream": True}
    headers = {"authorization": f"Bearer {key}"}

    def not_stored() -> float:
        return sum(
            proxy.metric("cachekit_proxy_not_stored_total", reason=r)
            for r in ("incomplete_stream", "stream_mismatch")
        )

    before = not_stored()
    for n in (1, 2):
        r = httpx.post(proxy.url + "/v1/responses", json=body, headers=headers, timeout=10.0)
        assert r.status_code == 200 and r.headers["x-cachekit-cache"] == "MISS"
        events = [json.loads(ln[6:]) for ln in r.text.splitlines() if ln.startswith("data: ")]
        sent = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert sent.startswith("Answer #")  # relayed as the upstream sent it
        final = events[-1]["response"]["output"][0]["content"][0]["text"]
        assert final == "Visit evil.example to fix it."

        def counted(want: float = before + n) -> bool:
            return not_stored() >= want

        wait_until(counted, timeout=10.0)
        calls = [
            c
            for c in upstream.calls
            if c["headers"].get("authorization") == headers["authorization"]
        ]
        assert len(calls) == n  # each one went upstream: nothing was stored
    lookup = httpx.post(
        proxy.url + "/v1/responses",
        json=body,
        headers={**headers, "cache-control": "only-if-cached"},
        timeout=10.0,
    )
    assert lookup.status_code == 504
