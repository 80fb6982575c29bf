"""``POST /v1/chat/completions``: OpenAI's chat completions.

The semantic text is the last message's text when it is the user's (a string, or its ``text``
parts joined); a last message from a tool, the assistant or with other parts makes the request
exact-only, and so does ``n > 1``. The scope is everything else: earlier turns, the last
message's other fields, tools, parameters. ``store`` defaults to false.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from cachekit.llm.checks import COMMON_INTEGERS, check_common, check_messages
from cachekit.llm.endpoints.base import (
    Endpoint,
    last_user_text,
    message_reason,
    unfinished_choices,
    without_last_content,
)
from cachekit.llm.streaming import DONE, sse_event, sse_stream
from cachekit.llm.validate import check_chat

__all__ = ["ChatCompletions", "ChunkStreamed", "chunk_events", "stream_usage_body", "usage_only"]


def chunk_events(items: list[Any]) -> Iterator[bytes]:
    """A stream logged as a list of chunk objects: a client that logged them read the stream
    to its end, so it ends with ``data: [DONE]`` unless the client recorded the terminator."""
    for item in items:
        yield DONE if item == "[DONE]" else sse_event(item)
    if "[DONE]" not in items:
        yield DONE


def stream_usage_body(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """``body`` asking for a stream's usage (``stream_options.include_usage``), or ``None``
    when it asks already."""
    so = body.get("stream_options")
    if isinstance(so, dict) and so.get("include_usage"):
        return None
    return {**body, "stream_options": {**(so or {}), "include_usage": True}}


def usage_only(chunk: Any) -> bool:
    """A stream's usage chunk (``choices: []``), which a client that did not ask never sees."""
    return isinstance(chunk, dict) and chunk.get("choices") == [] and bool(chunk.get("usage"))


class ChunkStreamed(Endpoint):
    """What chat completions and completions share: choices with finish reasons, streamed as
    ``data:`` chunks up to ``data: [DONE]`` with usage on request
    (``stream_options.include_usage``)."""

    def logged_events(self, items: list[Any]) -> Iterator[bytes]:
        return chunk_events(items)

    def include_usage(self, body: Mapping[str, Any]) -> bool:
        so = body.get("stream_options")
        return isinstance(so, dict) and bool(so.get("include_usage"))

    def upstream_body(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        return stream_usage_body(body)

    def drop_event(self, event: Any) -> bool:
        return usage_only(event)

    def unfinished(
        self, body: Mapping[str, Any], *, cache_length: bool, cache_refusals: bool
    ) -> str | None:
        return unfinished_choices(body, cache_length)

    def replay(
        self, response: dict[str, Any], *, include_usage: bool = False, pieces: int = 8
    ) -> Iterator[bytes]:
        return sse_stream(response, include_usage=include_usage, pieces=pieces)


class ChatCompletions(ChunkStreamed):
    path = "/v1/chat/completions"
    label = "chat"
    store_default = False
    integer_ranges = COMMON_INTEGERS
    id_prefix = "chatcmpl"

    def validate(self, body: dict[str, Any]) -> None:
        check_common(body, self.integer_ranges, boolean_logprobs=True)
        check_messages(body.get("messages"))

    def semantic_text(self, body: Mapping[str, Any]) -> str | None:
        n = body.get("n")
        if n is not None and n != 1:
            return None
        return last_user_text(body.get("messages"))

    def exact_only_reason(self, body: Mapping[str, Any]) -> str | None:
        messages = body.get("messages")
        last = messages[-1] if isinstance(messages, list) and messages else None
        role = last.get("role") if isinstance(last, dict) else None
        if role in ("tool", "function"):
            return "tool result"
        return super().exact_only_reason(body) or message_reason(role)

    def scope_fields(self, fields: dict[str, Any]) -> dict[str, Any]:
        return without_last_content(fields)

    def check_response(self, body: Mapping[str, Any]) -> str | None:
        return check_chat(body)
