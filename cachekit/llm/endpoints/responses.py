"""``POST /v1/responses``: OpenAI's Responses API.

The semantic text is a string ``input``, or the last input item's text when it is a user message
of ``input_text`` parts; a last item that is a tool's output (``function_call_output`` and the
other ``*_output`` items) or anything else makes the request exact-only. Requests run in the
``background`` or continuing a ``conversation`` are forwarded uncached (the upstream holds their
state); a ``previous_response_id`` names a fixed history and is keyed. ``store`` defaults to true.
A semantic hit's id is one cachekit made (:mod:`cachekit.llm.hit_ids`): continuing from it is
refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from cachekit.llm.checks import COMMON_INTEGERS, check_common, check_responses_input
from cachekit.llm.endpoints.base import Endpoint, message_reason, text_of
from cachekit.llm.hit_ids import check_continuable
from cachekit.llm.responses_stream import ResponsesStreamAssembler, responses_sse
from cachekit.llm.streaming import StreamAssembler
from cachekit.llm.validate import check_responses, is_count

__all__ = ["Responses"]


def _is_user_message(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and item.get("role") == "user"
        and item.get("type", "message") == "message"
    )


def _has_refusal(body: Mapping[str, Any]) -> bool:
    for item in body.get("output") or ():
        if isinstance(item, dict) and item.get("type") == "message":
            for part in item.get("content") or ():
                if isinstance(part, dict) and part.get("type") == "refusal":
                    return True
    return False


class Responses(Endpoint):
    path = "/v1/responses"
    label = "responses"
    store_default = True
    integer_ranges = COMMON_INTEGERS
    id_prefix = "resp"
    id_sep = "_"

    def validate(self, body: dict[str, Any]) -> None:
        # A Responses request may take its model from a stored prompt.
        check_common(body, self.integer_ranges, model_optional=body.get("prompt") is not None)
        check_responses_input(body)

    def check_request(self, body: Mapping[str, Any]) -> None:
        check_continuable(body.get("previous_response_id"))

    def passthrough_reason(self, body: Mapping[str, Any]) -> str | None:
        if body.get("background"):
            return "background"
        if body.get("conversation") is not None:
            return "conversation"
        return None

    def answer_fields(self, body: Mapping[str, Any]) -> dict[str, Any]:
        fields = super().answer_fields(body)
        if fields.get("background") is False:
            del fields["background"]  # a background request is never looked up
        return fields

    def semantic_text(self, body: Mapping[str, Any]) -> str | None:
        value = body.get("input")
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value and _is_user_message(value[-1]):
            return text_of(value[-1].get("content"), "input_text")
        return None

    def exact_only_reason(self, body: Mapping[str, Any]) -> str | None:
        value = body.get("input")
        if not isinstance(value, list) or not value or not isinstance(value[-1], dict):
            return "no input text"
        last = value[-1]
        kind = str(last.get("type", "message"))
        if kind.endswith("_output"):  # function_call_output, computer_call_output, ...
            return "tool result"
        if kind != "message":
            return f"last item {kind[:40]}"
        return message_reason(last.get("role"))

    def scope_fields(self, fields: dict[str, Any]) -> dict[str, Any]:
        value = fields.pop("input", None)
        if isinstance(value, list) and value and isinstance(value[-1], dict):
            last = dict(value[-1])
            last.pop("content", None)
            fields["input"] = [*value[:-1], last]
        return fields

    def check_response(self, body: Mapping[str, Any]) -> str | None:
        return check_responses(body)

    def unfinished(
        self, body: Mapping[str, Any], *, cache_length: bool, cache_refusals: bool
    ) -> str | None:
        status = body.get("status")
        if status != "completed":
            return f"status {str(status)[:40]}"
        if body.get("incomplete_details") is not None:
            return "finish_reason incomplete"
        if not cache_refusals and _has_refusal(body):
            return "refusal"
        return None

    def assembler(self, **bounds: Any) -> StreamAssembler:
        return ResponsesStreamAssembler(**bounds)

    def replay(
        self, response: dict[str, Any], *, include_usage: bool = False, pieces: int = 8
    ) -> Iterator[bytes]:
        return responses_sse(response, pieces=pieces)  # its final event carries the usage

    def usage_counts(self, usage: Any) -> tuple[int, int] | None:
        if not isinstance(usage, Mapping):
            return None
        i, o = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
        return (i, o) if is_count(i) and is_count(o) else None
