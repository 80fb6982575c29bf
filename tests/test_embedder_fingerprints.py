"""Embedder fingerprints: a shared semantic entry written by another embedder (another name,
width or weights) is never a candidate; the mismatch is counted, named in the tier's stats and
in the proxy's ``/healthz``. Two caches on one Redis with test embedders side by side (the real
base model and a tuned adapter: tests/test_tune.py)."""

from __future__ import annotations

from typing import Any

import pytest

from cachekit import Cache, Status
from cachekit.llm import LLMCache, prepare
from cachekit.semantic.embed.embedder import fingerprint_of
from cachekit.testing import DeterministicTestEmbedder, wait_until

CHAT = "/v1/chat/completions"


class WeightedTestEmbedder(DeterministicTestEmbedder):
    """The deterministic test embedder with a fingerprint of its own (same name and width, other
    "weights"), as two builds of one model would have."""

    def __init__(self, weights: str) -> None:
        super().__init__(dim=64, name="mini")
        self.fingerprint = f"mini|64|{weights}"


def answer(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
    }


def mismatched(llm: LLMCache) -> bool:
    """Whether ``llm``'s tier has refused a shared entry as another embedder's."""
    return bool((llm.semantic_health() or {}).get("embedder_mismatch"))


def request(text: str) -> Any:
    return prepare(CHAT, {"model": "m", "messages": [{"role": "user", "content": text}]}, "t")


def test_fingerprints_name_width_and_weights() -> None:
    assert fingerprint_of(DeterministicTestEmbedder(dim=64, name="mini")) == "mini|64"
    assert fingerprint_of(DeterministicTestEmbedder(dim=32, name="mini")) == "mini|32"
    assert fingerprint_of(WeightedTestEmbedder("aaaa")) == "mini|64|aaaa"


@pytest.mark.parametrize(
    "other",
    [
        DeterministicTestEmbedder(dim=64, name="other"),
        WeightedTestEmbedder("bbbb"),
    ],
    ids=["another name", "other weights, same name and width"],
)
def test_another_embedders_entries_are_never_candidates(redis_url: str, other: Any) -> None:
    mine = WeightedTestEmbedder("aaaa")
    writer = LLMCache(Cache(redis_url=redis_url, namespace="fp"), threshold=0.8, embedder=mine)
    reader = LLMCache(Cache(redis_url=redis_url, namespace="fp"), threshold=0.8, embedder=other)
    same = LLMCache(Cache(redis_url=redis_url, namespace="fp"), threshold=0.8, embedder=mine)
    try:
        for c in (reader, same):
            c.warm(False, 10.0)
        assert writer.store(request("How do I reset my password"), answer("Settings."))
        para = request("how do I reset my password please")
        # The same embedder on another replica finds it once synced: the entry is shared.
        wait_until(lambda: same.lookup(para).status is Status.SEMANTIC_HIT, timeout=10.0)
        wait_until(lambda: mismatched(reader), timeout=10.0)
        assert reader.lookup(para).status is Status.MISS
        health = reader.semantic_health()
        assert health is not None
        assert health["foreign_embedders"] == ["mini|64|aaaa"]
        assert health["embedder"] == fingerprint_of(other)
        assert (same.semantic_health() or {}).get("embedder_mismatch") == 0
    finally:
        for c in (writer, reader, same):
            c.close()


class EarlierVersionEmbedder(DeterministicTestEmbedder):
    """Writes what an earlier version wrote with each shared entry: the embedder's name alone."""

    def __init__(self) -> None:
        super().__init__(dim=64, name="mini")
        self.fingerprint = "mini"


def test_entries_of_an_earlier_version_match_by_name(redis_url: str) -> None:
    """Entries written before fingerprints carry the embedder's name alone: accepted when the
    name is this tier's (the vector's width is checked apart), refused otherwise."""
    writer = LLMCache(
        Cache(redis_url=redis_url, namespace="old"),
        threshold=0.8,
        embedder=EarlierVersionEmbedder(),
    )
    same_name = LLMCache(
        Cache(redis_url=redis_url, namespace="old"),
        threshold=0.8,
        embedder=DeterministicTestEmbedder(dim=64, name="mini"),
    )
    other = LLMCache(
        Cache(redis_url=redis_url, namespace="old"),
        threshold=0.8,
        embedder=DeterministicTestEmbedder(dim=64, name="other"),
    )
    try:
        for c in (same_name, other):
            c.warm(False, 10.0)
        assert writer.store(request("How do I reset my password"), answer("Settings."))
        para = request("how do I reset my password please")
        wait_until(lambda: same_name.lookup(para).status is Status.SEMANTIC_HIT, timeout=10.0)
        assert (same_name.semantic_health() or {}).get("embedder_mismatch") == 0
        wait_until(lambda: mismatched(other), timeout=10.0)
        assert other.lookup(para).status is Status.MISS
    finally:
        for c in (writer, same_name, other):
            c.close()


def test_healthz_names_the_mismatch(redis_url: str) -> None:
    from starlette.testclient import TestClient

    from cachekit.proxy.app import create_app
    from cachekit.proxy.config import ProxyConfig

    writer = LLMCache(
        Cache(redis_url=redis_url, namespace="hz"), embedder=WeightedTestEmbedder("aaaa")
    )
    reader = LLMCache(
        Cache(redis_url=redis_url, namespace="hz"), embedder=WeightedTestEmbedder("bbbb")
    )
    try:
        writer.store(request("What is the capital of France"), answer("Paris."))
        config = ProxyConfig.load(None, {"upstream": "http://127.0.0.1:9"})
        with TestClient(create_app(config, llm=reader)) as client:
            wait_until(lambda: mismatched(reader))
            body = client.get("/healthz").json()
        assert body["status"] == "degraded"
        assert body["semantic"]["foreign_embedders"] == ["mini|64|aaaa"]
        assert any("another embedder" in p and "reembed" in p for p in body["problems"])
    finally:
        writer.close()
        reader.close()


def test_reembed_makes_another_embedders_entries_usable(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from cachekit.cli.main import main as cli_main

    new = "cachekit.testing.embedders:DeterministicTestEmbedder"  # deterministic-test-64|64
    writer = LLMCache(
        Cache(redis_url=redis_url, namespace="re"),
        threshold=0.8,
        embedder=WeightedTestEmbedder("aaaa"),
    )
    reader = LLMCache(
        Cache(redis_url=redis_url, namespace="re"),
        threshold=0.8,
        embedder=DeterministicTestEmbedder(),
    )
    try:
        reader.warm(False, 10.0)
        for text in ("How do I reset my password", "What is the capital of France"):
            assert writer.store(request(text), answer("An answer."))
        para = request("how do I reset my password please")
        wait_until(lambda: mismatched(reader), timeout=10.0)
        assert reader.lookup(para).status is Status.MISS
        args = ["reembed", "--redis-url", redis_url, "--namespace", "re", "--embedder", new]
        assert cli_main([*args, "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert "would embed again 2" in out and "2 written by mini|64|aaaa" in out
        assert reader.lookup(para).status is Status.MISS  # a dry run changes nothing
        assert cli_main(args) == 0
        assert "embedded again 2 (as deterministic-test-64|64)" in capsys.readouterr().out
        wait_until(lambda: reader.lookup(para).status is Status.SEMANTIC_HIT, timeout=10.0)
        assert cli_main(args) == 0  # nothing left to do
        assert "embedded again 0" in capsys.readouterr().out
    finally:
        writer.close()
        reader.close()


def test_reembed_needs_a_shared_tier(capsys: pytest.CaptureFixture[str]) -> None:
    from cachekit.cli.main import main as cli_main

    assert cli_main(["reembed"]) == 2
    assert "--redis-url" in capsys.readouterr().err


def test_reembed_refuses_a_batch_below_one(capsys: pytest.CaptureFixture[str]) -> None:
    from cachekit.cli.main import main as cli_main

    with pytest.raises(SystemExit) as info:
        cli_main(["reembed", "--redis-url", "redis://127.0.0.1:9/0", "--batch", "0"])
    assert info.value.code == 2
    assert "--batch: must be a whole number >= 1" in capsys.readouterr().err
