"""One async convention (docs/api.md, "Sync and async"): every decorated function has the
asyncio forms of its helpers (``a`` prefix, always coroutines), whatever its own kind; the
unprefixed helpers are of the function's kind."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from cachekit import Cache, Status

KINDS = ["sync", "async"]


def _cached(cache: Cache, kind: str, calls: list[int]) -> Any:
    if kind == "sync":

        @cache.cached(ttl=60)
        def square(x: int) -> int:
            calls.append(x)
            return x * x

        return square

    @cache.cached(ttl=60)
    async def asquare(x: int) -> int:
        calls.append(x)
        return x * x

    return asquare


@pytest.mark.parametrize("kind", KINDS)
def test_cached_functions_have_the_asyncio_helpers(kind: str) -> None:
    cache, calls = Cache(), list[int]()
    fn = _cached(cache, kind, calls)
    assert inspect.iscoroutinefunction(fn.lookup) is (kind == "async")

    async def scenario() -> None:
        assert (await fn.alookup(3)).status is Status.MISS
        first = fn(3)
        assert (await first if kind == "async" else first) == 9
        assert (await fn.alookup(3)).status is Status.HIT
        await fn.ainvalidate(3)
        assert (await fn.alookup(3)).status is Status.MISS
        assert await fn.arefresh(3) == 9
        assert (await fn.alookup(3)).value == 9

    asyncio.run(scenario())
    assert calls == [3, 3]
    cache.close()


@pytest.mark.parametrize("kind", KINDS)
def test_semantic_functions_have_the_asyncio_helpers(kind: str) -> None:
    pytest.importorskip("numpy")
    pytest.importorskip("faiss")
    from cachekit.testing import DeterministicTestEmbedder

    cache = Cache()
    options: dict[str, Any] = {"embedder": DeterministicTestEmbedder(), "ttl": 60}
    if kind == "sync":

        @cache.semantic(**options)
        def answer(question: str) -> str:
            raise AssertionError("never computed here")

    else:

        @cache.semantic(**options)
        async def answer(question: str) -> str:
            raise AssertionError("never computed here")

    fn: Any = answer
    assert inspect.iscoroutinefunction(fn.lookup) is (kind == "async")

    async def scenario() -> None:
        assert await fn.aput("a cache", "what is a cache")
        assert (await fn.alookup("what is a cache")).value == "a cache"
        assert await fn.aput_many([("a queue", ("what is a queue",), {})]) == 1
        assert (await fn.alookup("what is a queue")).status is Status.HIT
        await fn.ainvalidate("what is a cache")
        assert (await fn.alookup("what is a cache")).status is not Status.HIT

    asyncio.run(scenario())
    cache.close()
