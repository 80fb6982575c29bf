"""What a request body must be before anything keys, looks up or forwards it: JSON within
bounds (:func:`parse_body`, :func:`check_depth`), and the field checks the endpoint modules
(:mod:`cachekit.llm.endpoints`) build their validation from: types, and every integer in its
range (:func:`check_common`, :data:`COMMON_INTEGERS`).

Pure functions over bytes and decoded JSON; :mod:`cachekit.llm.rules` re-exports the public ones
with the rest of the request rules. Every refusal is a :class:`RequestError`: a 400 with an
OpenAI-style body whose ``param`` names the field.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from cachekit.llm.errors import RequestError

__all__ = [
    "COMMON_INTEGERS",
    "INT64_MAX",
    "INT64_MIN",
    "LOGIT_BIAS_RANGE",
    "MAX_COUNT",
    "MAX_JSON_DEPTH",
    "check",
    "check_common",
    "check_depth",
    "check_input",
    "check_int",
    "check_messages",
    "check_responses_input",
    "is_number",
    "parse_body",
]


#: Deepest nesting of objects and arrays accepted in a request body (the body itself is level 1):
#: deeper bodies are refused with 400 before anything that recurses sees them.
MAX_JSON_DEPTH = 64


def _too_deep(limit: int) -> RequestError:
    return RequestError(
        f"The JSON body of your request is nested too deeply: the limit is {limit} levels of "
        "objects and arrays.",
        code="json_too_deep",
    )


def check_depth(value: Any, raw: bytes | str | None = None, limit: int = MAX_JSON_DEPTH) -> None:
    """:class:`RequestError` (400) when ``value`` nests objects and arrays more than ``limit``
    levels deep. Iterative: safe on any depth. ``raw``, the text ``value`` was parsed from, gives
    a fast path: with at most ``limit`` brackets in it, no walk is needed."""
    if raw is not None:
        if isinstance(raw, str):
            brackets = raw.count("{") + raw.count("[")
        else:
            brackets = raw.count(b"{") + raw.count(b"[")
        if brackets <= limit:
            return
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            children: Iterable[Any] = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        if depth > limit:
            raise _too_deep(limit)
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))


def parse_body(raw: bytes | str) -> dict[str, Any]:
    """Decode a JSON request body; :class:`RequestError` unless it is a JSON object nested at
    most :data:`MAX_JSON_DEPTH` levels deep."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise _too_deep(MAX_JSON_DEPTH) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"We could not parse the JSON body of your request: {exc}") from None
    except ValueError:  # an integer of more digits than int() converts (4,300 by default)
        raise RequestError(
            "We could not parse the JSON body of your request: a number in it has more than "
            f"{sys.get_int_max_str_digits()} digits.",
            code="number_too_long",
        ) from None
    if not isinstance(body, dict):
        raise RequestError("The request body must be a JSON object.")
    check_depth(body, raw)
    return body


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    """A finite JSON number a float holds (not a boolean)."""
    if isinstance(v, bool):
        return False
    if isinstance(v, float):
        return math.isfinite(v)
    # An integer is a number when a float holds it: 10**400 is not (the upstream reads floats).
    return isinstance(v, int) and abs(v) <= sys.float_info.max


def check(cond: bool, message: str, param: str) -> None:
    """:class:`RequestError` (400, ``param``) with ``message`` unless ``cond``."""
    if not cond:
        raise RequestError(message, param=param)


#: Largest count accepted in a token, tool-call or dimension field, and largest token id: the
#: largest signed 32-bit integer.
MAX_COUNT = 2**31 - 1
#: The range of ``seed``: a signed 64-bit integer.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

#: The integer fields checked on every OpenAI endpoint and their inclusive ranges (the OpenAI
#: API reference's, where it gives one; else a 32-bit count). Every field is checked on every
#: endpoint (one that an endpoint does not define is refused upstream or ignored); completions
#: add ``best_of`` and ``logprobs`` (chat's ``logprobs`` is a boolean). Booleans are not integers
#: here. Values outside get a 400 naming the field and the range.
COMMON_INTEGERS: Mapping[str, tuple[int, int]] = {
    "n": (1, 128),
    "max_tokens": (1, MAX_COUNT),
    "max_completion_tokens": (1, MAX_COUNT),
    "max_output_tokens": (1, MAX_COUNT),
    "max_tool_calls": (1, MAX_COUNT),
    "dimensions": (1, MAX_COUNT),
    "top_logprobs": (0, 20),
    "seed": (INT64_MIN, INT64_MAX),
}

#: The range of a ``logit_bias`` value (its keys are token ids: 0 to :data:`MAX_COUNT`).
LOGIT_BIAS_RANGE = (-100, 100)

_NUMBER_FIELDS = ("temperature", "top_p", "presence_penalty", "frequency_penalty")
#: Fields that must be booleans where they are given: ``store`` and ``background`` decide what
#: is keyed and what is passed through.
_BOOL_FIELDS = ("stream", "store", "background")


def _shown(v: Any) -> str:
    """``v`` in an error message, bounded: never a 4,000-digit integer."""
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        if v.bit_length() <= 64:
            return str(v)
        return f"an integer of about {int(v.bit_length() * math.log10(2)) + 1} digits"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def check_int(value: Any, name: str, lo: int, hi: int) -> None:
    """:class:`RequestError` (400, ``param`` ``name``) unless ``value`` is ``None`` or an
    integer (not a boolean) in ``lo..hi``; the message names the field and the range."""
    if value is None:
        return
    if not _is_int(value):
        raise RequestError(
            f"Invalid type for '{name}': expected an integer from {lo} to {hi}, "
            f"got {_shown(value)}.",
            param=name,
            code="invalid_type",
        )
    if value < lo:
        raise RequestError(
            f"Invalid '{name}': integer below minimum value. Expected an integer from {lo} to "
            f"{hi}, got {_shown(value)}.",
            param=name,
            code="integer_below_min_value",
        )
    if value > hi:
        raise RequestError(
            f"Invalid '{name}': integer above maximum value. Expected an integer from {lo} to "
            f"{hi}, got {_shown(value)}.",
            param=name,
            code="integer_above_max_value",
        )


def _check_logit_bias(bias: Any) -> None:
    check(bias is None or isinstance(bias, dict), "'logit_bias' must be an object", "logit_bias")
    lo, hi = LOGIT_BIAS_RANGE
    for key, value in (bias or {}).items():
        token = str(key) if _is_int(key) else key  # int keys from Python callers: JSON's strings
        check(
            isinstance(token, str)
            and token.isascii()
            and token.isdigit()
            and len(token) <= len(str(MAX_COUNT))
            and int(token) <= MAX_COUNT,
            f"Invalid key in 'logit_bias': expected a token id from 0 to {MAX_COUNT}, got "
            f"{str(token)[:20]!r}.",
            "logit_bias",
        )
        check(
            is_number(value) and lo <= value <= hi,
            f"Invalid value in 'logit_bias' for token {token}: expected a number from {lo} to "
            f"{hi}, got {_shown(value)}.",
            "logit_bias",
        )


def check_common(
    body: Mapping[str, Any],
    integer_ranges: Mapping[str, tuple[int, int]],
    *,
    model_optional: bool = False,
    boolean_logprobs: bool = False,
) -> None:
    """The fields every OpenAI endpoint shares: ``model`` (unless ``model_optional``), numbers,
    the integers of ``integer_ranges`` in their ranges, booleans (``logprobs`` too when
    ``boolean_logprobs``), ``logit_bias``, ``stop``, tools, and the object and string fields."""
    model = body.get("model")
    check(
        (model is None and model_optional) or (isinstance(model, str) and bool(model)),
        "you must provide a model parameter",
        "model",
    )
    for name in _NUMBER_FIELDS:
        v = body.get(name)
        check(v is None or is_number(v), f"'{name}' must be a number", name)
    for name, (lo, hi) in integer_ranges.items():
        check_int(body.get(name), name, lo, hi)
    for name in _BOOL_FIELDS:
        v = body.get(name)
        check(v is None or isinstance(v, bool), f"'{name}' must be a boolean", name)
    if boolean_logprobs:
        v = body.get("logprobs")
        check(v is None or isinstance(v, bool), "'logprobs' must be a boolean", "logprobs")
    _check_logit_bias(body.get("logit_bias"))
    so = body.get("stream_options")
    check(
        so is None or isinstance(so, dict), "'stream_options' must be an object", "stream_options"
    )
    stop = body.get("stop")
    check(
        stop is None
        or isinstance(stop, str)
        or (isinstance(stop, list) and all(isinstance(s, str) for s in stop)),
        "'stop' must be a string or a list of strings",
        "stop",
    )
    for name in ("tools", "functions"):
        v = body.get(name)
        check(
            v is None or (isinstance(v, list) and all(isinstance(t, dict) for t in v)),
            f"'{name}' must be a list of objects",
            name,
        )
    for name in ("response_format", "text", "reasoning"):
        v = body.get(name)
        check(v is None or isinstance(v, dict), f"'{name}' must be an object", name)
    for name in ("instructions", "previous_response_id"):
        v = body.get(name)
        check(v is None or isinstance(v, str), f"'{name}' must be a string", name)
    include = body.get("include")
    check(
        include is None or (isinstance(include, list) and all(isinstance(i, str) for i in include)),
        "'include' must be an array of strings",
        "include",
    )


def check_messages(messages: Any) -> None:
    """``messages``: a non-empty array of objects with a string ``role`` and string or
    content-part ``content``."""
    check(
        isinstance(messages, list) and len(messages) > 0,
        "'messages' must be a non-empty array",
        "messages",
    )
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        check(isinstance(m, dict), f"'{where}' must be an object", where)
        check(isinstance(m.get("role"), str), f"'{where}.role' must be a string", where)
        c = m.get("content")
        check(
            c is None
            or isinstance(c, str)
            or (isinstance(c, list) and all(isinstance(p, dict) for p in c)),
            f"'{where}.content' must be a string or an array of content parts",
            where,
        )


def _is_token_list(v: Any) -> bool:
    return isinstance(v, list) and all(_is_int(x) for x in v)


def check_input(value: Any, name: str) -> None:
    """A prompt or an embedding input: a string, an array of strings or of token arrays, every
    token id in range."""
    ok = (
        isinstance(value, str)
        or _is_token_list(value)
        or (
            isinstance(value, list)
            and len(value) > 0
            and all(isinstance(x, str) or _is_token_list(x) for x in value)
        )
    )
    check(ok, f"'{name}' must be a string, an array of strings or of token arrays", name)
    if isinstance(value, list):
        tokens = (
            value if _is_token_list(value) else [t for x in value if isinstance(x, list) for t in x]
        )
        for token in tokens:
            check(
                0 <= token <= MAX_COUNT,
                f"Invalid token id in '{name}': expected integers from 0 to {MAX_COUNT}, got "
                f"{_shown(token)}.",
                name,
            )


def check_responses_input(body: Mapping[str, Any]) -> None:
    """A Responses request's ``input`` (or what stands in for it: a stored prompt, a previous
    response, a conversation)."""
    prompt = body.get("prompt")  # a stored prompt's reference (completions: the text itself)
    check(prompt is None or isinstance(prompt, dict), "'prompt' must be an object", "prompt")
    value = body.get("input")
    if value is None:
        check(
            body.get("previous_response_id") is not None
            or body.get("prompt") is not None
            or body.get("conversation") is not None,
            "you must provide an input parameter",
            "input",
        )
        return
    check(
        isinstance(value, str)
        or (isinstance(value, list) and all(isinstance(i, dict) for i in value)),
        "'input' must be a string or an array of input items",
        "input",
    )
