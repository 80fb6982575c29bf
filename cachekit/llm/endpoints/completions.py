"""``POST /v1/completions``: OpenAI's legacy text completions.

The semantic text is a string ``prompt`` (token arrays and lists of prompts are exact-only, and
so is ``n > 1``); the scope is every other field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cachekit.llm.checks import COMMON_INTEGERS, MAX_COUNT, check, check_common, check_input
from cachekit.llm.endpoints.chat import ChunkStreamed
from cachekit.llm.validate import check_completion

__all__ = ["Completions"]


class Completions(ChunkStreamed):
    path = "/v1/completions"
    label = "completions"
    integer_ranges = {
        **COMMON_INTEGERS,
        "max_tokens": (0, MAX_COUNT),  # 0 with echo: the prompt's logprobs alone
        "best_of": (0, 20),
        "logprobs": (0, 5),
    }

    def validate(self, body: dict[str, Any]) -> None:
        check_common(body, self.integer_ranges)
        check("prompt" in body, "you must provide a prompt parameter", "prompt")
        check_input(body["prompt"], "prompt")

    def semantic_text(self, body: Mapping[str, Any]) -> str | None:
        n, prompt = body.get("n"), body.get("prompt")
        if n is not None and n != 1:
            return None
        return prompt if isinstance(prompt, str) else None

    def exact_only_reason(self, body: Mapping[str, Any]) -> str | None:
        return super().exact_only_reason(body) or "prompt not one string"

    def scope_fields(self, fields: dict[str, Any]) -> dict[str, Any]:
        fields.pop("prompt", None)
        return fields

    def check_response(self, body: Mapping[str, Any]) -> str | None:
        return check_completion(body)
