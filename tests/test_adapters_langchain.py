"""The LangChain caches against LangChain's own standard cache suites, plus semantic scoping."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from cachekit.adapters.langchain import CachekitCache, CachekitSemanticCache, split_prompt
from langchain_core.caches import BaseCache
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.outputs import Generation
from langchain_tests.integration_tests.cache import AsyncCacheTestSuite, SyncCacheTestSuite

from cachekit import Cache
from cachekit.testing.embedders import DeterministicTestEmbedder


def _semantic(cache: Cache) -> CachekitSemanticCache:
    return CachekitSemanticCache(cache, threshold=0.8, embedder=DeterministicTestEmbedder(64))


class TestExactSync(SyncCacheTestSuite):
    @pytest.fixture
    def cache(self) -> Iterator[BaseCache]:
        with Cache() as c:
            yield CachekitCache(c)


class TestExactAsync(AsyncCacheTestSuite):
    @pytest.fixture
    async def cache(self) -> AsyncIterator[BaseCache]:
        with Cache() as c:
            yield CachekitCache(c)


class TestSemanticSync(SyncCacheTestSuite):
    @pytest.fixture
    def cache(self) -> Iterator[BaseCache]:
        with Cache() as c:
            sem = _semantic(c)
            yield sem
            sem.close()


class TestSemanticAsync(AsyncCacheTestSuite):
    @pytest.fixture
    async def cache(self) -> AsyncIterator[BaseCache]:
        with Cache() as c:
            sem = _semantic(c)
            yield sem
            sem.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_semantic_hits_are_scoped_by_llm_string(mode: str) -> None:
    with Cache() as c:
        sem = _semantic(c)
        gen = [Generation(text="Use the reset link.")]
        if mode == "async":
            await sem.aupdate("How do I reset my password", "model-a", gen)
            assert await sem.alookup("how do I reset my password please", "model-a") == gen
            assert await sem.alookup("how do I reset my password please", "model-b") is None
            assert await sem.alookup("What is the capital of France", "model-a") is None
        else:
            sem.update("How do I reset my password", "model-a", gen)
            assert sem.lookup("how do I reset my password please", "model-a") == gen
            assert sem.lookup("how do I reset my password please", "model-b") is None
            assert sem.lookup("What is the capital of France", "model-a") is None
        sem.close()


def test_chat_prompts_compare_the_last_human_message() -> None:
    from langchain_core.load import dumps
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    def prompt(*msgs: object) -> str:
        return dumps(list(msgs))

    a = prompt(SystemMessage("Be brief."), HumanMessage("How do I reset my password"))
    b = prompt(SystemMessage("Be brief."), HumanMessage("how do I reset my password please"))
    c = prompt(SystemMessage("Be long."), HumanMessage("how do I reset my password please"))
    d = prompt(HumanMessage("hi"), AIMessage("hello"))
    (ta, sa), (tb, sb), (_, sc) = (split_prompt(p, "m") for p in (a, b, c))
    assert ta == "How do I reset my password" and tb.endswith("please") and sa == sb != sc
    assert split_prompt(d, "m") == (d, "m")  # last message not human: the whole prompt


def test_with_langchain_models() -> None:
    with Cache() as c:
        llm = FakeListLLM(responses=["first", "second"], cache=CachekitCache(c))
        assert llm.invoke("tell me") == "first"
        assert llm.invoke("tell me") == "first"
        assert llm.invoke("something else") == "second"
        sem = _semantic(c)
        chat = FakeListChatModel(responses=["one", "two"], cache=sem)
        assert chat.invoke("How do I reset my password").content == "one"
        assert chat.invoke("how do I reset my password please").content == "one"
        assert chat.invoke("What is the capital of France").content == "two"
        sem.close()
