"""Shape checks of upstream answers: what may be stored and what a stored entry may serve.

An answer is cached (and a stored entry is served) only when it is the endpoint's object with
well-typed fields, so that everything downstream (hit replay as a stream, token and dollar
accounting) can read it without raising:

* chat (``/v1/chat/completions``): ``object`` ``"chat.completion"``; ``choices`` a non-empty
  list of objects, each with a ``message`` object (``content`` text or null, tool calls a list of
  objects with a ``function`` object of string ``name``/``arguments``) and a string
  ``finish_reason``;
* completions (``/v1/completions``): ``object`` ``"text_completion"``; each choice with a string
  ``text`` and a string ``finish_reason``;
* embeddings (``/v1/embeddings``): ``object`` ``"list"`` (or absent); ``data`` a non-empty list
  of objects whose ``embedding`` is a list of numbers (or a base64 string);
* responses (``/v1/responses``): ``object`` ``"response"``, string ``id`` and ``status``;
  ``output`` a non-empty list of items, each an object with a string ``type``; a ``message``
  item's ``content`` a list of parts with a string ``type`` (``output_text`` parts with a string
  ``text``, ``refusal`` parts with a string ``refusal``); a ``function_call`` item's ``name`` and
  ``arguments`` strings;
* all: ``usage``, when present, an object whose ``*_tokens`` counts are non-negative integers
  (``true`` is not a count) and whose ``*_details`` are objects of such counts (or null).

Each check returns ``None`` when the answer is well-formed, else a short reason; the endpoint
modules (:mod:`cachekit.llm.endpoints`) pick theirs, and :func:`cachekit.llm.rules.check_response`
dispatches to it. Whether an
answer is *finished* (``finish_reason`` ``stop`` and the like) is :func:`rules.cacheable_response`'s
business, not this module's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "check_chat",
    "check_completion",
    "check_embeddings",
    "check_responses",
    "check_usage",
    "is_count",
]


def is_count(value: Any) -> bool:
    """A token count: a non-negative ``int`` that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _opt_str(value: Any) -> bool:
    return value is None or isinstance(value, str)


def check_usage(usage: Any) -> str | None:
    """``usage`` absent (``None``) or an object of non-negative integer token counts."""
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        return "usage not an object"
    for key, value in usage.items():
        if not isinstance(key, str):
            return "usage key not a string"
        if key.endswith("_tokens") and not is_count(value):
            return f"usage {key} not a count"
        if key.endswith("_details") and value is not None:
            if not isinstance(value, Mapping):
                return f"usage {key} not an object"
            for sub, n in value.items():
                if n is not None and not is_count(n):
                    return f"usage {key}.{sub} not a count"
    return None


def _check_common(body: Mapping[str, Any], obj: str, *, need_object: bool = True) -> str | None:
    got = body.get("object")
    if got != obj and (need_object or got is not None):
        return f"object {str(got)[:40]} not {obj}"
    for key in ("id", "model", "system_fingerprint", "service_tier"):
        if not _opt_str(body.get(key)):
            return f"{key} not a string"
    created = body.get("created")
    if created is not None and not is_count(created):
        return "created not a count"
    return check_usage(body.get("usage"))


def _check_choice_common(choice: Any) -> str | None:
    if not isinstance(choice, Mapping):
        return "choice not an object"
    index = choice.get("index")
    if index is not None and not is_count(index):
        return "choice index not a count"
    if not isinstance(choice.get("finish_reason"), str):
        return "finish_reason not a string"
    logprobs = choice.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, Mapping):
        return "logprobs not an object"
    return None


def _choices(body: Mapping[str, Any]) -> list[Any] | None:
    choices = body.get("choices")
    return choices if isinstance(choices, list) and choices else None


def _check_function(fn: Any) -> bool:
    return isinstance(fn, Mapping) and _opt_str(fn.get("name")) and _opt_str(fn.get("arguments"))


def _check_message(msg: Any) -> str | None:
    if not isinstance(msg, Mapping):
        return "message not an object"
    for key in ("role", "content", "refusal", "reasoning_content", "reasoning"):
        if not _opt_str(msg.get(key)):
            return f"message {key} not a string"
    tool_calls = msg.get("tool_calls")
    if tool_calls is not None:
        if not isinstance(tool_calls, list):
            return "tool_calls not a list"
        for tc in tool_calls:
            if not isinstance(tc, Mapping) or not _check_function(tc.get("function")):
                return "tool call not an object with a function"
            if not _opt_str(tc.get("id")) or not _opt_str(tc.get("type")):
                return "tool call id/type not a string"
    fc = msg.get("function_call")
    if fc is not None and not _check_function(fc):
        return "function_call not an object"
    return None


def check_chat(body: Mapping[str, Any]) -> str | None:
    """A ``chat.completion`` object."""
    why = _check_common(body, "chat.completion")
    if why:
        return why
    choices = _choices(body)
    if choices is None:
        return "no choices"
    for choice in choices:
        why = _check_choice_common(choice) or _check_message(choice.get("message"))
        if why:
            return why
    return None


def check_completion(body: Mapping[str, Any]) -> str | None:
    """A ``text_completion`` object."""
    why = _check_common(body, "text_completion")
    if why:
        return why
    choices = _choices(body)
    if choices is None:
        return "no choices"
    for choice in choices:
        why = _check_choice_common(choice)
        if why:
            return why
        if not isinstance(choice.get("text"), str):
            return "choice text not a string"
    return None


def _is_vector(value: Any) -> bool:
    if isinstance(value, str):  # encoding_format: base64
        return bool(value)
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)
    )


def check_embeddings(body: Mapping[str, Any]) -> str | None:
    """An embeddings ``list`` object (``object`` may be absent)."""
    why = _check_common(body, "list", need_object=False)
    if why:
        return why
    data = body.get("data")
    if not isinstance(data, list) or not data:
        return "no embeddings"
    for item in data:
        if not isinstance(item, Mapping) or not _is_vector(item.get("embedding")):
            return "no embeddings"
        index = item.get("index")
        if index is not None and not is_count(index):
            return "embedding index not a count"
    return None


def _check_part(part: Any) -> str | None:
    if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
        return "content part not an object with a type"
    kind = part["type"]
    if kind == "output_text" and not isinstance(part.get("text"), str):
        return "output_text text not a string"
    if kind == "refusal" and not isinstance(part.get("refusal"), str):
        return "refusal not a string"
    return None


def _check_item(item: Any) -> str | None:
    if not isinstance(item, Mapping) or not isinstance(item.get("type"), str):
        return "output item not an object with a type"
    if not _opt_str(item.get("id")) or not _opt_str(item.get("status")):
        return "output item id/status not a string"
    if item["type"] == "message":
        content = item.get("content")
        if not isinstance(content, list):
            return "message content not a list"
        for part in content:
            why = _check_part(part)
            if why:
                return why
    elif item["type"] == "function_call":
        if not isinstance(item.get("name"), str) or not isinstance(item.get("arguments"), str):
            return "function_call name/arguments not a string"
    return None


def check_responses(body: Mapping[str, Any]) -> str | None:
    """A Responses API ``response`` object."""
    if body.get("object") != "response":
        return f"object {str(body.get('object'))[:40]} not response"
    for key in ("id", "status"):
        if not isinstance(body.get(key), str):
            return f"{key} not a string"
    if not _opt_str(body.get("model")):
        return "model not a string"
    created = body.get("created_at")
    if created is not None and not isinstance(created, (int, float)):
        return "created_at not a number"
    output = body.get("output")
    if not isinstance(output, list) or not output:
        return "no output"
    for item in output:
        why = _check_item(item)
        if why:
            return why
    return check_usage(body.get("usage"))
