"""Stats after probes: ``f.lookup(...)`` asks the cache without being served by it, so it is
counted apart (``probes``) and never as a hit, a call saved or time saved; the hit rate is
served calls / calls. One parametrized test per rule, sync and async."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from cachekit import Cache, Status
from cachekit.testing.embedders import DeterministicTestEmbedder

STORED = "how do I reset my password"
CLOSE = "how do I reset my password please"  # cosine 0.913 with STORED under the test embedder
UNRELATED = "what is the capital of france"


def run(maybe: Any) -> Any:
    return asyncio.run(maybe) if asyncio.iscoroutine(maybe) else maybe


def exact_fn(cache: Cache, mode: str) -> Any:
    if mode == "sync":

        @cache.cached(ttl=60)
        def f(x: int) -> int:
            return x * 2

        return f

    @cache.cached(ttl=60)
    async def af(x: int) -> int:
        return x * 2

    return af


def semantic_fn(cache: Cache, mode: str, closing: Callable[[Any], Any]) -> Any:
    emb = DeterministicTestEmbedder()
    if mode == "sync":

        @cache.semantic(embedder=emb, threshold=0.9, ttl=3600)
        def answer(prompt: str) -> str:
            return f"answer to {prompt}"

        return closing(answer)

    @cache.semantic(embedder=emb, threshold=0.9, ttl=3600)
    async def aanswer(prompt: str) -> str:
        return f"answer to {prompt}"

    return closing(aanswer)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_exact_probes_are_not_hits(mode: str) -> None:
    cache = Cache()
    f = exact_fn(cache, mode)
    assert run(f.lookup(1)).status is Status.MISS  # a probe that misses
    assert run(f(1)) == 2  # computed
    for _ in range(3):
        assert run(f.lookup(1)).status is Status.HIT  # probes that find it
    assert run(f(1)) == 2  # served from cache
    s = cache.stats()
    assert (s.hits, s.misses, s.calls_saved) == (1, 1, 1)
    assert s.hit_rate == pytest.approx(0.5)
    assert (s.probes, s.probe_hits) == (4, 3)
    time_saved = s.time_saved_s
    run(f.lookup(1))
    assert cache.stats().time_saved_s == time_saved


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_semantic_probes_are_not_hits(mode: str, closing: Callable[[Any], Any]) -> None:
    cache = Cache()
    answer = semantic_fn(cache, mode, closing)
    assert run(answer(STORED)) == f"answer to {STORED}"  # computed
    assert run(answer.lookup(STORED)).status is Status.HIT  # exact probe
    assert run(answer.lookup(CLOSE)).status is Status.SEMANTIC_HIT  # semantic probe
    assert run(answer.lookup(UNRELATED)).status is Status.MISS  # probe that misses
    s = cache.stats()
    assert (s.hits, s.misses, s.calls_saved, s.time_saved_s) == (0, 1, 0, 0.0)
    assert (s.probes, s.probe_hits) == (3, 2)
    sec = s.extra[f"semantic:{answer.__module__}.{answer.__qualname__}"]
    assert (sec["lookups"], sec["exact_hits"], sec["semantic_hits"], sec["misses"]) == (1, 0, 0, 1)
    assert (sec["probes"], sec["probe_hits"]) == (3, 2)
    assert sec["hit_similarity_min"] is None  # probes are not hits
    assert run(answer(CLOSE)) == f"answer to {STORED}"  # a semantic hit that serves a call
    s = cache.stats()
    assert (s.hits, s.misses, s.calls_saved) == (1, 1, 1)
    assert s.hit_rate == pytest.approx(0.5)


def test_demo_telemetry_counts_served_calls_only(capsys: pytest.CaptureFixture[str]) -> None:
    from cachekit.cli.demo import run_demo

    assert run_demo(semantic=False) == 0
    out = capsys.readouterr().out
    # Three calls (one computed, two served) and one lookup() probe.
    assert "calls served from cache=2 computed=1 hit_rate=0.67" in out
    assert "probes=1" in out
