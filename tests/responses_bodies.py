"""A Responses API answer body for tests (what an upstream's ``POST /v1/responses`` returns)."""

from __future__ import annotations

from typing import Any


def responses_answer(
    text: str = "Open settings, then security.",
    *,
    rid: str = "abc",
    input_tokens: int = 12,
    output_tokens: int = 7,
    **extra: Any,
) -> dict[str, Any]:
    """A completed ``response`` object with one message holding ``text``; ``extra`` fields
    replace the defaults (``status``, ``incomplete_details``, ``output`` ...)."""
    return {
        "id": f"resp_{rid}",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "model": "gpt-4.1-mini",
        "output": [
            {
                "type": "message",
                "id": f"msg_{rid}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
        **extra,
    }
