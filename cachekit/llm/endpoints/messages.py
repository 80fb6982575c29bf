"""``POST /v1/messages``: Anthropic's Messages API.

* **Key**: every field that changes the answer (``system`` as a string or blocks, ``messages``
  with text, image and tool blocks, ``tools``, ``tool_choice``, ``thinking``, ``max_tokens``,
  ``stop_sequences``, sampling) and the ``anthropic-beta`` and ``anthropic-version`` headers;
  not ``stream``, ``metadata``, ``service_tier`` nor any ``cache_control`` marker (prompt caching
  upstream changes the price, never the answer); a lone text block (``system`` or a message's
  ``content``) is keyed as the string it means.
* **Semantic text**: the last message's text when it is the user's and holds text blocks only;
  a ``tool_result`` block makes the turn exact-only (a tool's fresh output must never be answered
  from another's), as does an image or a document. The scope is the rest: ``system``, earlier
  turns, tools, parameters, beta features.
* **Storable**: a Message whose ``stop_reason`` is ``end_turn``, ``stop_sequence`` or
  ``tool_use``; ``max_tokens`` (cut off) only with ``cache_length``; ``refusal`` unless refusals
  are not cached; never ``pause_turn`` (a paused server-tool turn the client must continue) or
  ``model_context_window_exceeded``. A stream is stored only when it ended with ``message_stop``
  after its content and carried no ``error`` event
  (:class:`~cachekit.llm.endpoints.messages_stream.MessagesStreamAssembler`).
* **Tenants** by ``x-api-key`` (or ``Authorization: Bearer``), forwarded as received; errors in
  Anthropic's shape, ``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from cachekit.llm.checks import MAX_COUNT, check, check_int, is_number
from cachekit.llm.endpoints.base import (
    Endpoint,
    message_reason,
    text_of,
    without_last_content,
)
from cachekit.llm.endpoints.messages_stream import (
    MessagesStreamAssembler,
    check_message,
    messages_sse,
)
from cachekit.llm.errors import RequestError
from cachekit.llm.streaming import StreamAssembler
from cachekit.llm.validate import is_count

__all__ = ["ANTHROPIC", "STORABLE_STOP", "Messages", "anthropic_error_type"]

#: The API family: its upstream may differ from the OpenAI endpoints'.
ANTHROPIC = "anthropic"
#: Stop reasons of an answer that may be stored as it is.
STORABLE_STOP = frozenset({"end_turn", "stop_sequence", "tool_use"})
#: Request fields that never change the answer.
_IGNORED = frozenset({"stream", "metadata", "service_tier", "cache_control"})
_ERROR_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "rate_limit_error",
        "api_error",
        "overloaded_error",
        "timeout_error",
    }
)
_BY_STATUS = {404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error"}


def anthropic_error_type(error: RequestError) -> str:
    """The Anthropic error type of a refusal: its own when Anthropic has it, else by status."""
    if error.type in _ERROR_TYPES:
        return error.type
    if error.status in _BY_STATUS:
        return _BY_STATUS[error.status]
    return "api_error" if error.status >= 500 else "invalid_request_error"


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


def _plain(content: Any) -> Any:
    """One text block (its cache marker gone) as the string it means: the API reads
    ``"system": "Be brief."`` and ``[{"type": "text", "text": "Be brief."}]`` alike."""
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict):
        block = content[0]
        if block.keys() == {"type", "text"} and block["type"] == "text":
            return block["text"]
    return content


def _canonical(fields: dict[str, Any]) -> dict[str, Any]:
    if "system" in fields:
        fields["system"] = _plain(fields["system"])
    msgs = fields.get("messages")
    if isinstance(msgs, list):
        fields["messages"] = [
            {**m, "content": _plain(m["content"])} if isinstance(m, dict) and "content" in m else m
            for m in msgs
        ]
    return fields


def _blocks(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(b, dict) and isinstance(b.get("type"), str) for b in value
    )


def _check_messages(messages: Any) -> None:
    check(
        isinstance(messages, list) and len(messages) > 0,
        "messages: field required (a non-empty array)",
        "messages",
    )
    for i, m in enumerate(messages):
        where = f"messages.{i}"
        check(isinstance(m, dict), f"{where}: must be an object", where)
        check(
            m.get("role") in ("user", "assistant"),
            f"{where}.role: must be 'user' or 'assistant'",
            where,
        )
        c = m.get("content")
        check(
            isinstance(c, str) or _blocks(c),
            f"{where}.content: must be a string or an array of content blocks with a type",
            where,
        )


class Messages(Endpoint):
    path = "/v1/messages"
    label = "messages"
    family = ANTHROPIC
    ignored_fields = _IGNORED
    keyed_headers = ("anthropic-beta", "anthropic-version")
    integer_ranges = {"max_tokens": (1, MAX_COUNT), "top_k": (0, MAX_COUNT)}
    id_prefix = "msg"
    id_sep = "_"

    def validate(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        check(isinstance(model, str) and bool(model), "model: field required", "model")
        check("max_tokens" in body, "max_tokens: field required", "max_tokens")
        for name, (lo, hi) in self.integer_ranges.items():
            check_int(body.get(name), name, lo, hi)
        _check_messages(body.get("messages"))
        system = body.get("system")
        check(
            system is None or isinstance(system, str) or _blocks(system),
            "system: must be a string or an array of text blocks",
            "system",
        )
        for name in ("temperature", "top_p"):
            v = body.get(name)
            check(v is None or is_number(v), f"{name}: must be a number", name)
        stop = body.get("stop_sequences")
        check(
            stop is None or (isinstance(stop, list) and all(isinstance(s, str) for s in stop)),
            "stop_sequences: must be an array of strings",
            "stop_sequences",
        )
        tools = body.get("tools")
        check(
            tools is None or (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)),
            "tools: must be an array of objects",
            "tools",
        )
        for name in ("tool_choice", "thinking", "metadata"):
            v = body.get(name)
            check(v is None or isinstance(v, dict), f"{name}: must be an object", name)
        stream = body.get("stream")
        check(stream is None or isinstance(stream, bool), "stream: must be a boolean", "stream")

    def answer_fields(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Every field but the ignored ones, without ``cache_control`` markers, a lone text
        block written as its string."""
        return _canonical(
            {
                k: _without_cache_control(v)
                for k, v in body.items()
                if k not in self.ignored_fields and v is not None
            }
        )

    def semantic_text(self, body: Mapping[str, Any]) -> str | None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
            return None
        last = messages[-1]
        return text_of(last.get("content")) if last.get("role") == "user" else None

    def exact_only_reason(self, body: Mapping[str, Any]) -> str | None:
        messages = body.get("messages")
        last = messages[-1] if isinstance(messages, list) and messages else None
        if not isinstance(last, dict):
            return "no messages"
        content = last.get("content")
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        ):
            return "tool result"
        return message_reason(last.get("role"))

    def scope_fields(self, fields: dict[str, Any]) -> dict[str, Any]:
        return without_last_content(fields)

    def check_response(self, body: Mapping[str, Any]) -> str | None:
        return check_message(body)

    def unfinished(
        self, body: Mapping[str, Any], *, cache_length: bool, cache_refusals: bool
    ) -> str | None:
        reason = body.get("stop_reason")
        if reason in STORABLE_STOP:
            return None
        if (reason == "max_tokens" and cache_length) or (reason == "refusal" and cache_refusals):
            return None
        return f"finish_reason {str(reason)[:40]}"

    def assembler(self, **bounds: Any) -> StreamAssembler:
        return MessagesStreamAssembler(**bounds)

    def replay(
        self, response: dict[str, Any], *, include_usage: bool = False, pieces: int = 8
    ) -> Iterator[bytes]:
        return messages_sse(response, pieces=pieces)

    def usage_counts(self, usage: Any) -> tuple[int, int] | None:
        """Input counts the tokens read from Anthropic's prompt cache and written to it too:
        a hit saves the whole call."""
        if not isinstance(usage, Mapping):
            return None
        keys = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        counts = [usage.get(k) or 0 for k in keys]
        out = usage.get("output_tokens") or 0
        if not all(is_count(n) for n in (*counts, out)):
            return None
        return sum(counts), out

    def error_body(self, error: RequestError) -> dict[str, Any]:
        return {
            "type": "error",
            "error": {"type": anthropic_error_type(error), "message": error.message},
        }
