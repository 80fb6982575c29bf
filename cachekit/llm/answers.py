"""What a cached LLM answer says: its text, and whether two answers agree (for hit policies that
check a served answer against a fresh one)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["AnswerComparator", "answer_text"]


class AnswerComparator:
    """Whether two cached LLM answers say the same: their text (message contents, completion
    texts) compared by embedding similarity, as free text must be; identical texts agree at
    once. Embeddings responses agree only when equal."""

    def __init__(self, embedder: Any = None, min_similarity: float = 0.9) -> None:
        from cachekit.semantic.policy.error_bounded import EmbeddingComparator

        self._texts = EmbeddingComparator(embedder, min_similarity=min_similarity)

    def score(self, fresh: Any, stored: Any) -> float:
        """How alike the two answers are: their texts' cosine, or (answers without text, such
        as embeddings) 1.0 when equal, else 0.0."""
        a, b = answer_text(fresh), answer_text(stored)
        if a is None or b is None:
            return 1.0 if fresh == stored else 0.0
        return self._texts.similarity(a, b)

    def __call__(self, fresh: Any, stored: Any) -> bool:
        return self.score(fresh, stored) >= self._texts.min_similarity


def answer_text(value: Any) -> str | None:
    """The text of a cached answer (a stored entry or a response body), or None."""
    body = value.get("r", value) if isinstance(value, Mapping) else None
    if isinstance(body, Mapping) and isinstance(body.get("output"), list):
        return _output_text(body["output"])
    choices = body.get("choices") if isinstance(body, Mapping) else None
    if not isinstance(choices, list):
        return None
    parts = []
    for choice in choices:
        if not isinstance(choice, Mapping):
            return None
        message = choice.get("message")
        text = message.get("content") if isinstance(message, Mapping) else choice.get("text")
        parts.append(text if isinstance(text, str) else "")
    return "\n".join(parts)


def _output_text(output: list[Any]) -> str:
    """A Responses API answer's text: its ``output_text`` parts, in order."""
    parts = []
    for item in output:
        if isinstance(item, Mapping) and item.get("type") == "message":
            for part in item.get("content") or ():
                if isinstance(part, Mapping) and part.get("type") == "output_text":
                    parts.append(str(part.get("text") or ""))
    return "\n".join(parts)
