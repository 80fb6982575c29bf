"""``cachekit.adapters.openai.cached_client`` with the real openai client (sync and async)
talking HTTP to the fake upstream on 127.0.0.1."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from cachekit.adapters.openai import cached_client
from openai.types import CreateEmbeddingResponse
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseCompletedEvent, ResponseFunctionToolCall

from cachekit import Cache, Status
from cachekit.llm import CacheLookup, LLMCache, RequestError
from cachekit.testing.embedders import DeterministicTestEmbedder
from cachekit.testing.upstream import FakeUpstream, UpstreamServer

MODEL = "gpt-4o-mini"
RESPONSES = "/v1/responses"
TOOLS: list[Any] = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    server = UpstreamServer(fake).start()
    try:
        yield fake, server.url
    finally:
        server.stop()


@pytest.fixture
def llm() -> Iterator[LLMCache]:
    cache = LLMCache(Cache(), threshold=0.8, embedder=DeterministicTestEmbedder(dim=64))
    yield cache
    cache.close()


def make(
    upstream: tuple[FakeUpstream, str], llm: LLMCache, mode: str, key: str | None = None
) -> Any:
    cls = openai.AsyncOpenAI if mode == "async" else openai.OpenAI
    raw = cls(base_url=upstream[1] + "/v1", api_key=key or f"sk-{uuid.uuid4().hex}", max_retries=0)
    return cached_client(raw, llm)


async def call(x: Any) -> Any:
    return await x if hasattr(x, "__await__") else x


async def chunks_of(stream: Any) -> list[Any]:
    if hasattr(stream, "__aiter__"):
        return [c async for c in stream]
    return list(stream)


def calls(upstream: tuple[FakeUpstream, str], client: Any, path: str) -> int:
    auth = f"Bearer {client.api_key}"
    return sum(
        1
        for c in upstream[0].calls
        if c["path"] == path and c["headers"].get("authorization") == auth
    )


def msgs(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_chat_exact_semantic_and_tenants(upstream: Any, llm: LLMCache, mode: str) -> None:
    client = make(upstream, llm, mode)
    first = await call(
        client.chat.completions.create(model=MODEL, messages=msgs("How do I reset my password"))
    )
    again = await call(
        client.chat.completions.create(
            model=MODEL, messages=msgs("How do I reset my password"), user="ignored"
        )
    )
    para = await call(
        client.chat.completions.create(
            model=MODEL, messages=msgs("how do I reset my password please")
        )
    )
    assert isinstance(again, ChatCompletion) and isinstance(para, ChatCompletion)
    assert again.choices[0].message.content == first.choices[0].message.content
    assert para.choices[0].message.content == first.choices[0].message.content
    assert calls(upstream, client, "/v1/chat/completions") == 1
    other = make(upstream, llm, mode)  # another API key: another tenant
    theirs = await call(
        other.chat.completions.create(model=MODEL, messages=msgs("How do I reset my password"))
    )
    assert theirs.choices[0].message.content != first.choices[0].message.content
    # Everything else is the wrapped client's.
    models = other.models.list()
    ids = [m.id async for m in models] if mode == "async" else [m.id for m in models]
    assert ids == ["fake-model"]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_feedback_on_a_semantic_hit(upstream: Any, llm: LLMCache, mode: str) -> None:
    client = make(upstream, llm, mode)
    stored, para = "How do I rotate my signing keys", "how do I rotate my signing keys please"
    await call(client.chat.completions.create(model=MODEL, messages=msgs(stored)))
    await call(client.chat.completions.create(model=MODEL, messages=msgs(para)))
    assert calls(upstream, client, "/v1/chat/completions") == 1  # the paraphrase was a hit
    assert await call(client.feedback(False, model=MODEL, messages=msgs("never asked"))) is False
    assert await call(client.feedback(False, model=MODEL, messages=msgs(para))) is True
    await call(client.chat.completions.create(model=MODEL, messages=msgs(para)))
    assert calls(upstream, client, "/v1/chat/completions") == 2  # demoted: computed upstream


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_chat_streaming(upstream: Any, llm: LLMCache, mode: str) -> None:
    client = make(upstream, llm, mode)
    text = "Explain caching briefly"
    live = await chunks_of(
        await call(
            client.chat.completions.create(
                model=MODEL,
                messages=msgs(text),
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    )
    answer = "".join(c.choices[0].delta.content or "" for c in live if c.choices)
    stream = await call(
        client.chat.completions.create(
            model=MODEL, messages=msgs(text), stream=True, stream_options={"include_usage": True}
        )
    )
    assert isinstance(stream, openai.AsyncStream if mode == "async" else openai.Stream)
    replay = await chunks_of(stream)
    assert all(isinstance(c, ChatCompletionChunk) for c in replay)
    assert "".join(c.choices[0].delta.content or "" for c in replay if c.choices) == answer
    assert sum(1 for c in replay if c.choices and c.choices[0].delta.content) >= 3
    assert replay[-1].usage is not None
    whole = await call(client.chat.completions.create(model=MODEL, messages=msgs(text)))
    assert whole.choices[0].message.content == answer
    assert calls(upstream, client, "/v1/chat/completions") == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_errors_and_broken_streams_not_cached(
    upstream: Any, llm: LLMCache, mode: str
) -> None:
    client = make(upstream, llm, mode)
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            await call(client.chat.completions.create(model="fake-error", messages=msgs("x")))
        with pytest.raises(openai.APIError):
            await chunks_of(
                await call(
                    client.chat.completions.create(
                        model="fake-break", messages=msgs("y"), stream=True
                    )
                )
            )
        cut = await call(client.chat.completions.create(model="fake-length", messages=msgs("z")))
        assert cut.choices[0].finish_reason == "length"
    assert calls(upstream, client, "/v1/chat/completions") == 6


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_embeddings(upstream: Any, llm: LLMCache, mode: str) -> None:
    client = make(upstream, llm, mode)
    first = await call(client.embeddings.create(model="text-embedding-3-small", input=["a b", "c"]))
    again = await call(client.embeddings.create(model="text-embedding-3-small", input=["a b", "c"]))
    assert isinstance(again, CreateEmbeddingResponse)
    assert [d.embedding for d in again.data] == [d.embedding for d in first.data]
    assert calls(upstream, client, "/v1/embeddings") == 1


def deltas(events: list[Any], kind: str = "response.output_text.delta") -> str:
    return "".join(e.delta for e in events if e.type == kind)


async def final_of(manager: Any) -> Any:
    """The final response of the SDK's ``responses.stream(...)`` helper, sync or async."""
    if hasattr(manager, "__aenter__"):
        async with manager as stream:
            return await stream.get_final_response()
    with manager as stream:
        return stream.get_final_response()


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_responses_exact_and_semantic_hits(upstream: Any, llm: LLMCache, mode: str) -> None:
    client = make(upstream, llm, mode)
    first = await call(client.responses.create(model=MODEL, input="How do I reset my password"))
    again = await call(
        client.responses.create(model=MODEL, input="How do I reset my password", user="ignored")
    )
    para = await call(
        client.responses.create(model=MODEL, input="how do I reset my password please")
    )
    assert isinstance(again, Response) and isinstance(para, Response)
    assert again.output_text == para.output_text == first.output_text
    assert first.output_text.endswith(" to: How do I reset my password")
    assert calls(upstream, client, RESPONSES) == 1
    # The exact hit keeps the upstream's id; the semantic one never hands out another prompt's
    # (upstream, it names that prompt's history), and continuing from its own is refused.
    assert again.id == first.id and para.id != first.id and para.id.startswith("resp_ck")
    with pytest.raises(RequestError, match="never stored it"):
        await call(client.responses.create(model=MODEL, input="more", previous_response_id=para.id))
    assert calls(upstream, client, RESPONSES) == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_responses_streamed_hit_replays_typed_events(
    upstream: Any, llm: LLMCache, mode: str
) -> None:
    client = make(upstream, llm, mode)
    whole = await call(client.responses.create(model=MODEL, input="Explain caching briefly"))
    stream = await call(
        client.responses.create(model=MODEL, input="Explain caching briefly", stream=True)
    )
    assert isinstance(stream, openai.AsyncStream if mode == "async" else openai.Stream)
    events = await chunks_of(stream)
    assert deltas(events) == whole.output_text
    assert sum(1 for e in events if e.type == "response.output_text.delta") >= 3
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and isinstance(events[-1], ResponseCompletedEvent)
    assert events[-1].response.output_text == whole.output_text
    assert calls(upstream, client, RESPONSES) == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_responses_streamed_miss_is_relayed_then_stored(
    upstream: Any, llm: LLMCache, mode: str
) -> None:
    client = make(upstream, llm, mode)
    events = await chunks_of(
        await call(client.responses.create(model=MODEL, input="stream this", stream=True))
    )
    assert events[-1].type == "response.completed"
    assert deltas(events).endswith(" to: stream this")
    whole = await call(client.responses.create(model=MODEL, input="stream this"))
    assert isinstance(whole, Response) and whole.output_text == deltas(events)
    helper = await final_of(client.responses.stream(model=MODEL, input="stream this"))
    assert helper.output_text == whole.output_text  # the SDK's helper goes through the cache
    assert calls(upstream, client, RESPONSES) == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_failed_incomplete_and_broken_responses_not_cached(
    upstream: Any, llm: LLMCache, mode: str
) -> None:
    client = make(upstream, llm, mode)
    for model, last in (("fake-failed", "response.failed"), ("fake-length", "response.incomplete")):
        for _ in range(2):
            whole = await call(client.responses.create(model=model, input="cut short"))
            assert whole.status in ("failed", "incomplete")
            events = await chunks_of(
                await call(client.responses.create(model=model, input="cut short", stream=True))
            )
            assert events[-1].type == last
    for _ in range(2):
        with pytest.raises(openai.APIError):
            await chunks_of(
                await call(client.responses.create(model="fake-break", input="x", stream=True))
            )
    assert calls(upstream, client, RESPONSES) == 10


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_responses_function_calls_are_cached(upstream: Any, llm: LLMCache, mode: str) -> None:
    client = make(upstream, llm, mode)
    first = await call(client.responses.create(model=MODEL, input="weather", tools=TOOLS))
    again = await call(client.responses.create(model=MODEL, input="weather", tools=TOOLS))
    assert isinstance(again.output[0], ResponseFunctionToolCall)
    assert again.output[0].arguments == first.output[0].arguments
    events = await chunks_of(
        await call(client.responses.create(model=MODEL, input="weather", tools=TOOLS, stream=True))
    )
    args = deltas(events, "response.function_call_arguments.delta")
    assert args == first.output[0].arguments
    assert calls(upstream, client, RESPONSES) == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_background_and_conversation_pass_through(
    upstream: Any, llm: LLMCache, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def untouched(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a passthrough request reached the cache")

    for name in ("lookup", "alookup", "store", "astore"):
        monkeypatch.setattr(llm, name, untouched)
    client = make(upstream, llm, mode)
    for _ in range(2):
        await call(client.responses.create(model=MODEL, input="later", background=True))
        await call(client.responses.create(model=MODEL, input="next", conversation="conv_1"))
    assert calls(upstream, client, RESPONSES) == 4


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_feedback_on_a_responses_semantic_hit(
    upstream: Any, llm: LLMCache, mode: str
) -> None:
    client = make(upstream, llm, mode)
    stored, para = "How do I rotate my signing keys", "how do I rotate my signing keys please"
    await call(client.responses.create(model=MODEL, input=stored))
    await call(client.responses.create(model=MODEL, input=para))
    assert calls(upstream, client, RESPONSES) == 1  # the paraphrase was a hit
    assert await call(client.feedback(False, model=MODEL, input="never asked")) is False
    assert await call(client.feedback(False, model=MODEL, input=para)) is True
    await call(client.responses.create(model=MODEL, input=para))
    assert calls(upstream, client, RESPONSES) == 2  # demoted: computed upstream


def test_rejects_other_clients(llm: LLMCache) -> None:
    with pytest.raises(TypeError):
        cached_client(object(), llm)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_stored_answer_the_sdk_cannot_read_is_a_miss(
    upstream: Any, llm: LLMCache, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry holding an output item this openai package does not know (written from a newer
    upstream's answer) is a miss for the adapter, never a validation error."""
    client = make(upstream, llm, mode)
    odd = {
        "id": "resp_odd",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": MODEL,
        "output": [{"type": "a_future_item", "id": "x_1", "status": "completed"}],
    }
    found = CacheLookup(Status.HIT, odd)

    async def afound(*args: Any, **kwargs: Any) -> CacheLookup:
        return found

    monkeypatch.setattr(llm, "lookup", lambda *args, **kwargs: found)
    monkeypatch.setattr(llm, "alookup", afound)
    got = await call(client.responses.create(model=MODEL, input="What is new in this release"))
    assert isinstance(got, Response) and got.output_text.startswith("Answer #")
    assert calls(upstream, client, RESPONSES) == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_bucket_of_three_answers_sampled_requests(
    upstream: tuple[FakeUpstream, str], llm: LLMCache, mode: str
) -> None:
    cls = openai.AsyncOpenAI if mode == "async" else openai.OpenAI
    raw = cls(base_url=upstream[1] + "/v1", api_key=f"sk-{uuid.uuid4().hex}", max_retries=0)
    client = cached_client(raw, llm, bucket_size=3)

    async def joke() -> str:
        r = await call(
            client.chat.completions.create(
                model="gpt-4o-mini", messages=msgs("Tell me a joke"), temperature=0.8
            )
        )
        return str(r.choices[0].message.content)

    made = [await joke() for _ in range(3)]
    assert len(set(made)) == 3 and calls(upstream, client, "/v1/chat/completions") == 3
    served = {await joke() for _ in range(24)}
    assert served <= set(made) and len(served) >= 2  # one of the three, at random
    assert calls(upstream, client, "/v1/chat/completions") == 3
    with pytest.raises(ValueError, match="bucket size"):
        cached_client(raw, llm, bucket_size=0)
