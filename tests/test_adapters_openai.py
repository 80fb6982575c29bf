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

from cachekit import Cache
from cachekit.llm import LLMCache
from cachekit.proxy.testing import FakeUpstream, UpstreamServer
from cachekit.semantic.testing import DeterministicTestEmbedder

MODEL = "gpt-4o-mini"


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


def test_rejects_other_clients(llm: LLMCache) -> None:
    with pytest.raises(TypeError):
        cached_client(object(), llm)
