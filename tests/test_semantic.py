"""The semantic tier in one process, with the deterministic test embedder (no model)."""

from __future__ import annotations

import asyncio
import math
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cachekit import Cache, Status
from cachekit._engine.batcher import MicroBatcher
from cachekit.semantic.policy.hit_policy import ThresholdPolicy
from cachekit.testing.clock import ManualClock
from cachekit.testing.embedders import DeterministicTestEmbedder

ROOT = Path(__file__).resolve().parents[1]
# The texts below are chosen around this bar for the test embedder; the library's default
# threshold is calibrated for the real model and is not what these tests are about.
THRESHOLD = 0.9

STORED = "how do I reset my password"
CLOSE = "how do I reset my password please"  # cosine 0.913 with STORED under the test embedder
FAR = "how can I reset my password"  # cosine 0.871: below 0.9, above 0.85
UNRELATED = "what is the capital of france"

WORDS = [
    "apple", "river", "motor", "violet", "castle", "pepper", "silver", "tunnel", "garden",
    "rocket", "marble", "forest", "candle", "window", "bridge", "island", "lemon", "tiger",
    "planet", "shadow", "copper", "meadow", "falcon", "harbor", "velvet", "glacier", "lantern",
    "orchid", "canyon", "saddle", "walnut", "comet", "ember", "quartz",
]  # fmt: skip


def topic(i: int) -> str:
    return f"tell me about the {WORDS[i]} and the {WORDS[(i + 7) % len(WORDS)]}"


def paraphrase(i: int) -> str:
    # >= 0.937 with its own topic, <= 0.895 with any other (checked in test_topics_are_separable)
    return "please " + topic(i)


@pytest.fixture
def emb() -> DeterministicTestEmbedder:
    return DeterministicTestEmbedder()


def make_answer(cache: Cache, emb: Any, closing: Callable[[Any], Any], **kw: Any) -> Any:
    calls: list[tuple[str, str]] = []

    if "policy" not in kw:
        kw.setdefault("threshold", THRESHOLD)

    @cache.semantic(embedder=emb, ttl=kw.pop("ttl", 3600), **kw)
    def answer(prompt: str, *, model: str = "m1") -> str:
        calls.append((prompt, model))
        return f"{model}:{prompt}"

    answer.calls = calls
    return closing(answer)


def test_topics_are_separable(emb: DeterministicTestEmbedder) -> None:
    import numpy as np

    t = emb.embed([topic(i) for i in range(32)])
    q = emb.embed([paraphrase(i) for i in range(32)])
    sims = q @ t.T
    assert sims.diagonal().min() >= THRESHOLD
    assert (sims - np.eye(32) * 10).max() < THRESHOLD


def test_exact_match_is_served_before_embedding(emb, closing) -> None:
    answer = make_answer(Cache(), emb, closing)
    assert answer(STORED, model="a") == f"a:{STORED}"
    inner_calls, cached = emb.calls, answer.tier.embedder
    cached_uses = cached.hits + cached.misses
    r = answer.lookup(STORED, model="a")
    assert r.status is Status.HIT and r.value == f"a:{STORED}" and r.tier == "l1"
    assert answer(STORED, model="a") == f"a:{STORED}"
    assert emb.calls == inner_calls
    assert cached.hits + cached.misses == cached_uses  # not even the embedding cache was asked
    assert len(answer.calls) == 1


def test_semantic_hit_above_threshold_and_miss_below(emb, closing) -> None:
    answer = make_answer(Cache(), emb, closing, threshold=0.9)
    answer(STORED, model="a")
    r = answer.lookup(CLOSE, model="a")
    assert r.status is Status.SEMANTIC_HIT
    assert r.value == f"a:{STORED}" and r.matched_text == STORED and r.tier == "semantic"
    assert r.similarity is not None and 0.9 <= r.similarity < 1.0
    far = answer.lookup(FAR, model="a")
    assert far.status is Status.MISS and far.value is None
    assert far.similarity is not None and far.similarity < 0.9  # nearest, for diagnostics
    assert answer.lookup(UNRELATED, model="a").status is Status.MISS
    # A call that misses runs the function and gets its own answer.
    assert answer(FAR, model="a") == f"a:{FAR}"
    assert answer(CLOSE, model="a") == f"a:{STORED}"
    assert [p for p, _ in answer.calls] == [STORED, FAR]

    looser = make_answer(Cache(), emb, closing, threshold=0.85)
    looser(STORED, model="a")
    assert looser.lookup(FAR, model="a").status is Status.SEMANTIC_HIT


@pytest.mark.parametrize("changed", ["model", "tenant", "system"])
def test_scope_isolates_every_other_argument(emb, closing, changed: str) -> None:
    cache = Cache()
    calls: list[dict[str, str]] = []

    @cache.semantic(embedder=emb, threshold=THRESHOLD)
    def chat(prompt: str, *, model: str, tenant: str, system: str = "be brief") -> str:
        calls.append({"model": model, "tenant": tenant, "system": system})
        return f"{model}/{tenant}/{system}"

    closing(chat)
    base = {"model": "a", "tenant": "acme", "system": "be brief"}
    chat(STORED, **base)
    other = dict(base, **{changed: "other"})
    # Even the identical text (similarity 1.0) must not cross a scope boundary.
    for text in (STORED, CLOSE):
        assert chat.lookup(text, **other).status is Status.MISS
    assert chat(CLOSE, **other) == "/".join(other[k] for k in ("model", "tenant", "system"))
    assert chat.lookup(CLOSE, **base).status is Status.SEMANTIC_HIT
    assert len(calls) == 2


def test_scopes_of_values_that_compare_equal_stay_apart(emb, closing) -> None:
    """Scope digests are remembered per value; values equal under == (1, True, 1.0; 0.0 and
    -0.0) are still different scopes, and a remembered scope is the one computed first."""
    cache = Cache()

    @cache.semantic(embedder=emb, threshold=THRESHOLD)
    def answer(prompt: str, *, model: object) -> str:
        return "x"

    closing(answer)
    values: list[object] = [1, True, 1.0, "1", 0.0, -0.0, (1,), (True,), None]
    first = [answer.scope_key(STORED, model=v) for v in values]
    assert len(set(first)) == len(values)
    assert [answer.scope_key(CLOSE, model=v) for v in values] == first
    plain = {"scope": 7}
    assert answer.scope_key(STORED, model=plain) == answer.scope_key(STORED, model={"scope": 7})


def test_scope_function_overrides_default_scope(emb, closing) -> None:
    cache = Cache()

    @cache.semantic(
        threshold=THRESHOLD, embedder=emb, scope=lambda prompt, *, model, request_id: model
    )
    def answer(prompt: str, *, model: str, request_id: str) -> str:
        return f"{model}:{prompt}"

    closing(answer)
    answer(STORED, model="a", request_id="r1")
    hit = answer.lookup(CLOSE, model="a", request_id="r2")
    assert hit.status is Status.SEMANTIC_HIT and hit.value == f"a:{STORED}"
    assert answer.lookup(CLOSE, model="b", request_id="r1").status is Status.MISS


def test_text_function_and_the_argument_it_names(emb, closing) -> None:
    cache = Cache()

    @cache.semantic(threshold=THRESHOLD, embedder=emb, text=lambda user, question: question)
    def ask(user: str, question: str) -> str:
        return f"{user}:{question}"

    closing(ask)
    ask("alice", STORED)
    assert ask.lookup("alice", CLOSE).status is Status.SEMANTIC_HIT
    assert ask.lookup("bob", CLOSE).status is Status.MISS  # the other argument is scope


def test_first_str_parameter_is_compared(emb, closing) -> None:
    cache = Cache()

    @cache.semantic(threshold=THRESHOLD, embedder=emb)
    def f(n: int, prompt: str) -> str:
        return f"{n}:{prompt}"

    closing(f)
    f(1, STORED)
    assert f.lookup(1, CLOSE).status is Status.SEMANTIC_HIT
    assert f.lookup(2, CLOSE).status is Status.MISS


def test_validation(emb, closing) -> None:
    cache = Cache()
    answer = make_answer(cache, emb, closing)
    with pytest.raises(TypeError, match="'prompt' must be str, got int"):
        answer(42, model="a")
    with pytest.raises(TypeError, match="'prompt' must be str, got NoneType"):
        answer.lookup(None, model="a")
    for bad in (0, -0.5, 1.5, math.nan):
        with pytest.raises(ValueError, match=r"threshold must be in \(0, 1\]"):
            cache.semantic(threshold=bad, embedder=emb)
    with pytest.raises(TypeError, match="threshold must be a number"):
        ThresholdPolicy("0.9")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not both"):
        cache.semantic(threshold=0.9, policy=ThresholdPolicy(0.8), embedder=emb)
    with pytest.raises(TypeError, match="text= returned int"):
        not_a_text: Any = lambda x: 3  # noqa: E731
        fn = closing(cache.semantic(lambda x: x, text=not_a_text, embedder=emb))
        fn("hello")
    assert ThresholdPolicy(1.0).accept(1.0, "a", "a")


def test_empty_text_is_exact_only(emb, closing) -> None:
    answer = make_answer(Cache(), emb, closing)
    assert answer("", model="a") == "a:"
    before = emb.texts_embedded
    assert answer("", model="a") == "a:"
    assert answer.lookup("", model="b").status is Status.MISS
    assert len(answer.calls) == 1
    assert emb.texts_embedded == before and len(answer.tier) == 0


def test_default_embedder_is_not_loaded_at_decoration(closing) -> None:
    @closing
    @Cache().semantic
    def answer(prompt: str) -> str:
        return prompt

    assert answer.tier._embedder is None  # the model loads on first use only


def test_import_stays_light() -> None:
    code = (
        "import sys, cachekit, cachekit.semantic, cachekit.semantic.policy.hit_policy\n"
        "heavy = [m for m in ('numpy', 'faiss', 'torch', 'sentence_transformers') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


def test_ttl_expiry_removes_from_index_and_is_never_served(emb, closing) -> None:
    clock = ManualClock()
    cache = Cache(clock=clock)
    answer = make_answer(cache, emb, closing, ttl=10)
    answer(STORED, model="a")
    assert len(answer.tier) == 1
    clock.advance(9)
    assert answer.lookup(CLOSE, model="a").status is Status.SEMANTIC_HIT
    clock.advance(2)
    assert answer.lookup(CLOSE, model="a").status is Status.MISS
    assert answer.lookup(STORED, model="a").status is Status.MISS  # exact entry expired too
    assert len(answer.tier) == 0 and answer.tier.index_size() == 0
    assert answer.tier.stats()["expirations"] == 1


def test_expired_entry_is_not_served_before_it_is_purged(emb, closing, monkeypatch) -> None:
    clock = ManualClock()
    answer = make_answer(Cache(clock=clock), emb, closing, ttl=10)
    answer(STORED, model="a")
    monkeypatch.setattr(answer.tier, "purge_expired", lambda now=None: 0)
    clock.advance(11)
    assert answer.lookup(CLOSE, model="a").status is Status.MISS
    assert answer.tier.index_size() == 1  # still in the index, yet not served


def test_capacity_evicts_oldest_first_from_the_index(emb, closing) -> None:
    answer = make_answer(Cache(), emb, closing, capacity=3)
    for i in range(5):
        answer(topic(i), model="a")
    assert len(answer.tier) == 3 and answer.tier.index_size() == 3
    assert {e.text for e in answer.tier.entries()} == {topic(2), topic(3), topic(4)}
    assert answer.tier.stats()["evictions"] == 2
    assert answer.lookup(paraphrase(0), model="a").status is Status.MISS
    hit = answer.lookup(paraphrase(4), model="a")
    assert hit.status is Status.SEMANTIC_HIT and hit.value == f"a:{topic(4)}"


def _long(i: int, chars: int = 2000) -> str:
    """Texts of one length (the bytes bound counts characters), told apart by their head."""
    return f"{i:04d} " + "lorem " * (chars // 6)


def _entry_size(emb: Any, closing: Callable[[Any], Any]) -> int:
    probe = make_answer(Cache(), emb, closing)
    probe.put("v", _long(0), model="a")
    size: int = probe.tier.stats()["index_bytes"]
    assert size > 2000  # the text, its value and its vector are counted
    return size


def test_max_bytes_evicts_oldest_first(emb, closing) -> None:
    size = _entry_size(emb, closing)
    answer = make_answer(Cache(), emb, closing, max_bytes=16 * size + size // 2)
    assert answer.put_many([("v", (_long(i),), {"model": "a"}) for i in range(20)]) == 20
    stats = answer.tier.stats()
    assert len(answer.tier) == 16 and answer.tier.index_size() == 16
    assert stats["index_bytes"] == 16 * size and stats["evictions"] == 4
    assert {e.text for e in answer.tier.entries()} == {_long(i) for i in range(4, 20)}


def test_an_entry_over_a_share_of_max_bytes_is_not_held(emb, closing) -> None:
    size = _entry_size(emb, closing)
    answer = make_answer(Cache(), emb, closing, max_bytes=16 * size)
    answer.put("short", STORED, model="a")
    assert answer.put("long", _long(1, chars=4000), model="a")  # its exact entry is kept
    assert answer.lookup(_long(1, chars=4000), model="a").status is Status.HIT
    assert answer.tier.stats()["too_large"] == 1
    assert [e.text for e in answer.tier.entries()] == [STORED]  # nothing evicted for it
    with pytest.raises(ValueError, match="max_bytes"):
        make_answer(Cache(), emb, closing, max_bytes=0)


def test_load_keeps_the_loading_tiers_bounds(tmp_path, emb, closing) -> None:
    size = _entry_size(emb, closing)
    a = make_answer(Cache(), emb, closing)
    a.put_many([("v", (_long(i),), {"model": "a"}) for i in range(20)])
    a.tier.save(tmp_path / "sem")
    b = make_answer(Cache(), emb, closing, max_bytes=16 * size)
    assert b.tier.load(tmp_path / "sem") == 16
    assert b.tier.stats()["index_bytes"] == 16 * size and b.tier.index_size() == 16


def test_invalidate_removes_exact_and_semantic_entries(emb, closing) -> None:
    answer = make_answer(Cache(), emb, closing)
    answer(STORED, model="a")
    answer.invalidate(STORED, model="a")
    assert answer.lookup(STORED, model="a").status is Status.MISS
    assert answer.lookup(CLOSE, model="a").status is Status.MISS
    assert len(answer.tier) == 0


def test_put_and_put_many_store_without_calling(emb, closing) -> None:
    answer = make_answer(Cache(), emb, closing)
    assert answer.put("stored", STORED, model="a")
    before = emb.calls
    n = answer.put_many([(f"v{i}", (topic(i),), {"model": "a"}) for i in range(8)])
    assert n == 8 and emb.calls == before + 1  # one embedding call for the batch
    assert answer.lookup(CLOSE, model="a").value == "stored"
    assert answer(paraphrase(5), model="a") == "v5"
    assert answer.calls == []


def test_errors_are_not_cached(emb, closing) -> None:
    cache = Cache()
    attempts: list[int] = []

    @cache.semantic(threshold=THRESHOLD, embedder=emb)
    def flaky(prompt: str) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("upstream failed")
        return "ok"

    closing(flaky)
    with pytest.raises(RuntimeError):
        flaky(STORED)
    assert flaky.lookup(STORED).status is Status.MISS and len(flaky.tier) == 0
    assert flaky(STORED) == "ok" and len(attempts) == 2


def test_none_is_not_cached_unless_asked(emb, closing) -> None:
    cache = Cache()
    for cache_none, expected in ((False, Status.MISS), (True, Status.HIT)):
        fn = closing(
            cache.semantic(
                lambda prompt: None, embedder=emb, cache_none=cache_none, name=f"none-{cache_none}"
            )
        )
        fn(STORED)
        assert fn.lookup(STORED).status is expected


def test_policy_is_pluggable(emb, closing) -> None:
    seen: list[tuple[float, str, str]] = []

    class SameNumbers:
        """Like an error-bounded policy would: refuse neighbours that differ in a number."""

        name = "same-numbers"

        def accept(self, similarity: float, query: str, candidate: str) -> bool:
            seen.append((similarity, query, candidate))
            return similarity >= 0.5 and re.findall(r"\d+", query) == re.findall(r"\d+", candidate)

    answer = make_answer(Cache(), emb, closing, policy=SameNumbers())
    answer("reset the password of account 1234", model="a")
    assert answer.lookup("reset the password of account 1235", model="a").status is Status.MISS
    hit = answer.lookup("please reset the password of account 1234", model="a")
    assert hit.status is Status.SEMANTIC_HIT
    assert seen[-1][1:] == (
        "please reset the password of account 1234",
        "reset the password of account 1234",
    )
    assert answer.tier.stats()["policy"] == "same-numbers"


def test_failing_policy_is_a_miss_not_an_exception(emb, closing) -> None:
    class Broken:
        name = "broken"

        def accept(self, similarity: float, query: str, candidate: str) -> bool:
            raise ZeroDivisionError

    answer = make_answer(Cache(), emb, closing, policy=Broken())
    answer(STORED, model="a")
    assert answer(CLOSE, model="a") == f"a:{CLOSE}"
    assert answer.tier.stats()["errors"] >= 1


def test_failing_embedder_costs_a_miss(closing) -> None:
    def broken(texts: list[str]) -> Any:
        raise OSError("model server down")

    cache = Cache()
    answer = make_answer(cache, broken, closing)
    assert answer(STORED, model="a") == f"a:{STORED}"  # stored exact only (embedding failed)
    assert answer(STORED, model="a") == f"a:{STORED}"
    assert len(answer.calls) == 1 and len(answer.tier) == 0
    # With an entry in the scope, a lookup has to embed: the failure is an ERROR, not a hit.
    scope = answer.scope_key(STORED, model="a")
    answer.tier.add_vectors(scope, [STORED], DeterministicTestEmbedder().embed([STORED]), ["x"])
    assert answer.lookup(CLOSE, model="a").status is Status.ERROR
    assert answer(CLOSE, model="a") == f"a:{CLOSE}"  # the function still runs


def test_invalidate_namespace_retires_semantic_entries(emb, closing) -> None:
    cache = Cache()
    answer = make_answer(cache, emb, closing)
    answer(STORED, model="a")
    assert cache.invalidate_namespace()
    assert answer.lookup(CLOSE, model="a").status is Status.MISS
    assert len(answer.tier) == 0


def test_micro_batching_routes_each_thread_its_own_answer(emb, closing) -> None:
    answer = make_answer(Cache(), emb, closing, max_wait_ms=50, max_batch=64)
    answer.put_many([(f"v{i}", (topic(i),), {"model": "a"}) for i in range(32)])
    before = emb.calls
    barrier = threading.Barrier(32)
    results: dict[int, Any] = {}

    def worker(i: int) -> None:
        barrier.wait()
        results[i] = answer(paraphrase(i), model="a")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == {i: f"v{i}" for i in range(32)}
    assert answer.calls == []
    assert emb.calls - before < 32  # gathered: fewer embedding calls than callers
    stats = answer.tier.stats()
    assert stats["batch_size_max"] > 1 and stats["semantic_hits"] == 32


async def test_micro_batching_routes_each_task_its_own_answer(emb, closing) -> None:
    cache = Cache()
    calls: list[str] = []

    @cache.semantic(threshold=THRESHOLD, embedder=emb, max_wait_ms=50)
    async def answer(prompt: str, *, model: str) -> str:
        calls.append(prompt)
        await asyncio.sleep(0)
        return f"computed:{prompt}"

    closing(answer)
    await answer.put_many([(f"v{i}", (topic(i),), {"model": "a"}) for i in range(32)])
    before = emb.calls
    results = await asyncio.gather(*(answer(paraphrase(i), model="a") for i in range(32)))
    assert results == [f"v{i}" for i in range(32)]
    assert emb.calls - before < 32 and calls == []
    # Misses in the same gathering still get their own computed answers.
    misses = await asyncio.gather(*(answer(f"unrelated {w} {w}", model="a") for w in WORDS[:8]))
    assert misses == [f"computed:unrelated {w} {w}" for w in WORDS[:8]]


async def test_async_lookup_put_invalidate(emb, closing) -> None:
    cache = Cache()

    @cache.semantic(threshold=THRESHOLD, embedder=emb)
    async def answer(prompt: str) -> str:
        return "computed"

    closing(answer)
    assert await answer.put("stored", STORED)
    r = await answer.lookup(CLOSE)
    assert r.status is Status.SEMANTIC_HIT and r.value == "stored"
    assert (await answer.lookup(STORED)).status is Status.HIT
    await answer.invalidate(STORED)
    assert (await answer.lookup(CLOSE)).status is Status.MISS
    assert await answer(CLOSE) == "computed"


async def test_event_loop_is_not_blocked_by_embedding(closing) -> None:
    inside = threading.Event()
    release = threading.Event()
    gated = [False]

    def gated_embed(texts: list[str]) -> Any:
        if gated[0]:
            inside.set()
            # Only the event loop sets this: if embedding ran on the loop, it never would.
            assert release.wait(30), "the event loop was blocked while embedding"
        return DeterministicTestEmbedder().embed(texts)

    cache = Cache()

    @cache.semantic(threshold=THRESHOLD, embedder=gated_embed)
    async def answer(prompt: str) -> str:
        return "computed"

    closing(answer)
    await answer.put("stored", STORED)
    gated[0] = True
    lookup = asyncio.create_task(answer.lookup(CLOSE))
    deadline = time.monotonic() + 30
    while not inside.is_set():
        assert time.monotonic() < deadline, "embedding never started"
        await asyncio.sleep(0.001)  # polling interval; the loop runs while the worker embeds
    release.set()
    assert (await lookup).status is Status.SEMANTIC_HIT


def test_batcher_sends_a_batch_exception_to_every_caller() -> None:
    started = threading.Event()

    def fn(batch: Any) -> list[int]:
        started.wait(5)
        raise ValueError(f"bad batch of {len(batch)}")

    b: MicroBatcher[int, int] = MicroBatcher(fn, max_batch=8, max_wait_ms=100)
    futures = [b.submit(i) for i in range(4)]
    started.set()
    for f in futures:
        with pytest.raises(ValueError, match="bad batch"):
            f.result(5)
    b.close()
    # Closed: runs inline, unbatched, instead of failing.
    b2: MicroBatcher[int, int] = MicroBatcher(lambda xs: [x * 2 for x in xs])
    b2.close()
    assert b2.submit(21).result(1) == 42


def test_batcher_routes_results_and_respects_max_batch() -> None:
    sizes: list[int] = []
    gate = threading.Event()

    def fn(batch: Any) -> list[str]:
        gate.wait(5)
        sizes.append(len(batch))
        return [f"r{x}" for x in batch]

    b: MicroBatcher[int, str] = MicroBatcher(fn, max_batch=5, max_wait_ms=20)
    futures = [b.submit(i) for i in range(23)]
    gate.set()
    assert [f.result(5) for f in futures] == [f"r{i}" for i in range(23)]
    assert b.flush(5)
    assert max(sizes) <= 5 and sum(sizes) == 23 and len(sizes) < 23
    b.close()


def test_batching_off_embeds_directly(emb, closing) -> None:
    answer = make_answer(Cache(), emb, closing, batching=False)
    answer(STORED, model="a")
    assert answer.tier.batcher is None
    assert answer.lookup(CLOSE, model="a").status is Status.SEMANTIC_HIT


def test_save_and_load(tmp_path, emb, closing) -> None:
    clock = ManualClock()
    a = make_answer(Cache(clock=clock), emb, closing, name="saved")
    a(STORED, model="a")
    a.put("short-lived", topic(1), model="a")
    a.tier.add_many([(a.scope_key(topic(2), model="b"), topic(2), "ttl 5")], ttl=5)
    a.tier.save(tmp_path / "sem")

    clock.advance(6)  # the 5-second entry expired while saved
    b = make_answer(Cache(clock=clock), emb, closing, name="saved")
    assert b.tier.load(tmp_path / "sem") == 2
    hit = b.lookup(CLOSE, model="a")
    assert hit.status is Status.SEMANTIC_HIT and hit.value == f"a:{STORED}"
    assert b.lookup(paraphrase(1), model="a").value == "short-lived"
    assert b.lookup(paraphrase(2), model="b").status is Status.MISS
    assert b.calls == []

    c = make_answer(Cache(), DeterministicTestEmbedder(dim=32), closing, name="saved")
    with pytest.raises(ValueError, match="not comparable"):
        c.tier.load(tmp_path / "sem")


def test_add_vectors_inserts_precomputed_vectors(emb, closing) -> None:
    answer = make_answer(Cache(), emb, closing)
    texts = [topic(i) for i in range(10)]
    vectors = emb.embed(texts) * 3.0  # not normalised on purpose
    before = emb.calls
    scope = answer.scope_key("ignored", model="a")
    assert answer.tier.add_vectors(scope, texts, vectors, [f"v{i}" for i in range(10)]) == 10
    assert emb.calls == before and len(answer.tier) == 10
    r = answer.lookup(paraphrase(3), model="a")
    assert r.status is Status.SEMANTIC_HIT and r.value == "v3"
    assert r.similarity is not None and r.similarity <= 1.0 + 1e-5


def test_telemetry_section(emb, closing) -> None:
    cache = Cache()
    answer = make_answer(cache, emb, closing, name="tel")
    answer(STORED, model="a")
    answer(STORED, model="a")
    answer(CLOSE, model="a")
    answer(UNRELATED, model="a")
    sec = cache.stats().extra["semantic:tel"]
    assert (sec["lookups"], sec["exact_hits"], sec["semantic_hits"], sec["misses"]) == (4, 1, 1, 2)
    assert sec["index_size"] == 2 and sec["hit_similarity_min"] >= 0.9
    for key in (
        "batch_size_mean",
        "batch_size_max",
        "queue_wait_p50_ms",
        "queue_wait_p99_ms",
        "embed_p50_ms",
        "embed_p99_ms",
        "search_p50_ms",
        "search_p99_ms",
        "hit_similarity_p50",
        "evictions",
        "expirations",
        "redis_sync_lag_p50_ms",
    ):
        assert key in sec


def test_redis_down_costs_misses_never_exceptions(emb, closing) -> None:
    from redis_servers import free_port

    cache = Cache(redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_timeout=0.05)
    answer = make_answer(cache, emb, closing)
    assert answer(STORED, model="a") == f"a:{STORED}"
    assert answer.lookup(UNRELATED, model="a").status is Status.MISS
    assert answer(UNRELATED, model="a") == f"a:{UNRELATED}"
    answer.invalidate(UNRELATED, model="a")
    # Stores were local only, and are still served locally.
    assert answer.lookup(CLOSE, model="a").status is Status.SEMANTIC_HIT
    assert not answer.tier.wait_ready(0.01)  # never synced with Redis
    stats = cache.stats()
    assert stats.tiers["l2"].errors + stats.tiers["l2"].skipped > 0


def test_cache_close_stops_semantic_background_threads() -> None:
    import threading

    from cachekit import Cache
    from cachekit.testing.embedders import DeterministicTestEmbedder

    before = {t.ident for t in threading.enumerate()}
    cache = Cache()

    @cache.semantic(embedder=DeterministicTestEmbedder(), threshold=0.9)
    def answer(prompt: str) -> str:
        return prompt.upper()

    assert answer("hello there") == "HELLO THERE"  # a lone caller: its batch runs inline
    batcher = answer.tier.batcher
    assert batcher is not None
    batcher.submit((answer.scope_key("hi"), "hi")).result()  # submitted work starts the worker
    started = [t for t in threading.enumerate() if t.ident not in before]
    assert started, "the batcher runs a worker thread"
    cache.close()
    for t in started:
        t.join(5)
    assert not any(t.is_alive() for t in started)
    cache.close()  # idempotent


def test_returned_values_are_copies_on_exact_and_semantic_hits(emb, closing) -> None:
    cache = Cache()

    @cache.semantic(embedder=emb, ttl=3600, threshold=THRESHOLD)
    def answer(prompt: str) -> dict[str, list[str]]:
        return {"said": [prompt]}

    closing(answer)
    answer(STORED)["said"].append("changed")  # the miss's own result
    answer(STORED)["said"].append("changed")  # an exact L1 hit
    answer(CLOSE)["said"].append("changed")  # a semantic hit
    assert answer(STORED) == {"said": [STORED]} == answer(CLOSE)
    assert answer.lookup(CLOSE).status is Status.SEMANTIC_HIT


def test_keyword_only_parameters_are_scope_not_the_compared_text() -> None:
    from cachekit import Cache, Status
    from cachekit.testing.embedders import DeterministicTestEmbedder

    cache = Cache()

    @cache.semantic(embedder=DeterministicTestEmbedder(), threshold=0.99)
    def answer(prompt, *, model: str) -> str:
        return f"{model}:{prompt}"

    try:
        question = "what is the capital of france"
        assert answer(question, model="m1") == f"m1:{question}"
        answer.flush()
        assert [e.text for e in answer.tier.entries()] == [question]  # not "m1"
        # The prompt is compared: another model is another scope, another prompt another text.
        assert answer.lookup("what is the capital of france", model="m1").status is Status.HIT
        assert answer.lookup("what is the capital of france", model="m2").status is Status.MISS
        assert answer.lookup("how do I bake bread", model="m1").status is Status.MISS
    finally:
        cache.close()
