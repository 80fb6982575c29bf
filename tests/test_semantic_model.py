"""The semantic tier with the real default embedder (all-MiniLM-L6-v2). Slow: loads the model."""

from __future__ import annotations

import pytest

from cachekit import Cache, Status
from cachekit.semantic.policy.hit_policy import DEFAULT_THRESHOLD

pytestmark = pytest.mark.model


def test_real_model_paraphrase_hits_and_unrelated_misses() -> None:
    pytest.importorskip("onnxruntime")  # the default embedder's runtime (no torch)
    cache = Cache()
    calls: list[str] = []

    @cache.semantic(ttl=600)  # default embedder and the default threshold
    def answer(prompt: str, *, model: str) -> str:
        calls.append(prompt)
        return f"answer to: {prompt}"

    try:
        assert answer.tier._embedder is None  # nothing loaded before first use
        answer("How do I reset my password?", model="a")
        hit = answer.lookup("What are the steps to reset my password?", model="a")
        assert hit.status is Status.SEMANTIC_HIT, hit
        assert hit.value == "answer to: How do I reset my password?"
        assert hit.matched_text == "How do I reset my password?"
        assert hit.similarity is not None and hit.similarity >= DEFAULT_THRESHOLD

        for unrelated in ("What is the capital of France?", "How do I reset my router?"):
            assert answer.lookup(unrelated, model="a").status is Status.MISS
        # Scope still isolates, however similar the text.
        assert answer.lookup("How do I reset my password?", model="b").status is Status.MISS
        assert answer.lookup("What are the steps to reset my password?", model="b").status is (
            Status.MISS
        )
        assert calls == ["How do I reset my password?"]
        assert answer.tier.embedder.name.startswith("all-MiniLM-L6-v2")
    finally:
        answer.close()
