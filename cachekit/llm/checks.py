"""What a request body must be before anything keys, looks up or forwards it: JSON within
bounds (:func:`parse_body`, :func:`check_depth`), and a cached endpoint's fields of the right
types with every integer in its range (:func:`validate_request`, :data:`INTEGER_RANGES`).

Pure functions over bytes and decoded JSON; :mod:`cachekit.llm.rules` re-exports them with the
rest of the request rules. Every refusal is a :class:`RequestError`: a 400 with an OpenAI-style
body whose ``param`` names the field.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from cachekit.llm.errors import RequestError

__all__ = [
    "CACHED_ENDPOINTS",
    "CHAT",
    "COMPLETIONS",
    "EMBEDDINGS",
    "INT64_MAX",
    "INT64_MIN",
    "INTEGER_RANGES",
    "LOGIT_BIAS_RANGE",
    "MAX_COUNT",
    "MAX_JSON_DEPTH",
    "RESPONSES",
    "check_depth",
    "parse_body",
    "validate_request",
]

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
EMBEDDINGS = "/v1/embeddings"
RESPONSES = "/v1/responses"
CACHED_ENDPOINTS: frozenset[str] = frozenset({CHAT, COMPLETIONS, EMBEDDINGS, RESPONSES})


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


def _is_number(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, float):
        return math.isfinite(v)
    # An integer is a number when a float holds it: 10**400 is not (the upstream reads floats).
    return isinstance(v, int) and abs(v) <= sys.float_info.max


def _check(cond: bool, message: str, param: str) -> None:
    if not cond:
        raise RequestError(message, param=param)


#: Largest count accepted in a token, tool-call or dimension field, and largest token id: the
#: largest signed 32-bit integer.
MAX_COUNT = 2**31 - 1
#: The range of ``seed``: a signed 64-bit integer.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_COMMON_INTEGERS: dict[str, tuple[int, int]] = {
    "n": (1, 128),
    "max_tokens": (1, MAX_COUNT),
    "max_completion_tokens": (1, MAX_COUNT),
    "max_output_tokens": (1, MAX_COUNT),
    "max_tool_calls": (1, MAX_COUNT),
    "dimensions": (1, MAX_COUNT),
    "top_logprobs": (0, 20),
    "seed": (INT64_MIN, INT64_MAX),
}

#: The integer fields of each cached endpoint's request and their inclusive ranges (the OpenAI
#: API reference's, where it gives one; else a 32-bit count). Every field is checked on every
#: endpoint (one that an endpoint does not define is refused upstream or ignored), except
#: ``best_of`` and ``logprobs``, which are completions' (chat's ``logprobs`` is a boolean).
#: Booleans are not integers here. Values outside get a 400 naming the field and the range.
INTEGER_RANGES: Mapping[str, Mapping[str, tuple[int, int]]] = {
    CHAT: _COMMON_INTEGERS,
    COMPLETIONS: {
        **_COMMON_INTEGERS,
        "max_tokens": (0, MAX_COUNT),  # 0 with echo: the prompt's logprobs alone
        "best_of": (0, 20),
        "logprobs": (0, 5),
    },
    EMBEDDINGS: _COMMON_INTEGERS,
    RESPONSES: _COMMON_INTEGERS,
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


def _check_int(value: Any, name: str, lo: int, hi: int) -> None:
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
    _check(bias is None or isinstance(bias, dict), "'logit_bias' must be an object", "logit_bias")
    lo, hi = LOGIT_BIAS_RANGE
    for key, value in (bias or {}).items():
        token = str(key) if _is_int(key) else key  # int keys from Python callers: JSON's strings
        _check(
            isinstance(token, str)
            and token.isascii()
            and token.isdigit()
            and len(token) <= len(str(MAX_COUNT))
            and int(token) <= MAX_COUNT,
            f"Invalid key in 'logit_bias': expected a token id from 0 to {MAX_COUNT}, got "
            f"{str(token)[:20]!r}.",
            "logit_bias",
        )
        _check(
            _is_number(value) and lo <= value <= hi,
            f"Invalid value in 'logit_bias' for token {token}: expected a number from {lo} to "
            f"{hi}, got {_shown(value)}.",
            "logit_bias",
        )


def _check_common(endpoint: str, body: Mapping[str, Any], model_optional: bool = False) -> None:
    model = body.get("model")
    _check(
        (model is None and model_optional) or (isinstance(model, str) and bool(model)),
        "you must provide a model parameter",
        "model",
    )
    for name in _NUMBER_FIELDS:
        v = body.get(name)
        _check(v is None or _is_number(v), f"'{name}' must be a number", name)
    for name, (lo, hi) in INTEGER_RANGES[endpoint].items():
        _check_int(body.get(name), name, lo, hi)
    for name in _BOOL_FIELDS:
        v = body.get(name)
        _check(v is None or isinstance(v, bool), f"'{name}' must be a boolean", name)
    if endpoint == CHAT:
        v = body.get("logprobs")
        _check(v is None or isinstance(v, bool), "'logprobs' must be a boolean", "logprobs")
    _check_logit_bias(body.get("logit_bias"))
    so = body.get("stream_options")
    _check(
        so is None or isinstance(so, dict), "'stream_options' must be an object", "stream_options"
    )
    stop = body.get("stop")
    _check(
        stop is None
        or isinstance(stop, str)
        or (isinstance(stop, list) and all(isinstance(s, str) for s in stop)),
        "'stop' must be a string or a list of strings",
        "stop",
    )
    for name in ("tools", "functions"):
        v = body.get(name)
        _check(
            v is None or (isinstance(v, list) and all(isinstance(t, dict) for t in v)),
            f"'{name}' must be a list of objects",
            name,
        )
    for name in ("response_format", "text", "reasoning"):
        v = body.get(name)
        _check(v is None or isinstance(v, dict), f"'{name}' must be an object", name)
    for name in ("instructions", "previous_response_id"):
        v = body.get(name)
        _check(v is None or isinstance(v, str), f"'{name}' must be a string", name)
    include = body.get("include")
    _check(
        include is None or (isinstance(include, list) and all(isinstance(i, str) for i in include)),
        "'include' must be an array of strings",
        "include",
    )


def _check_messages(messages: Any) -> None:
    _check(
        isinstance(messages, list) and len(messages) > 0,
        "'messages' must be a non-empty array",
        "messages",
    )
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        _check(isinstance(m, dict), f"'{where}' must be an object", where)
        _check(isinstance(m.get("role"), str), f"'{where}.role' must be a string", where)
        c = m.get("content")
        _check(
            c is None
            or isinstance(c, str)
            or (isinstance(c, list) and all(isinstance(p, dict) for p in c)),
            f"'{where}.content' must be a string or an array of content parts",
            where,
        )


def _is_token_list(v: Any) -> bool:
    return isinstance(v, list) and all(_is_int(x) for x in v)


def _check_input(value: Any, name: str) -> None:
    ok = (
        isinstance(value, str)
        or _is_token_list(value)
        or (
            isinstance(value, list)
            and len(value) > 0
            and all(isinstance(x, str) or _is_token_list(x) for x in value)
        )
    )
    _check(ok, f"'{name}' must be a string, an array of strings or of token arrays", name)
    if isinstance(value, list):
        tokens = (
            value if _is_token_list(value) else [t for x in value if isinstance(x, list) for t in x]
        )
        for token in tokens:
            _check(
                0 <= token <= MAX_COUNT,
                f"Invalid token id in '{name}': expected integers from 0 to {MAX_COUNT}, got "
                f"{_shown(token)}.",
                name,
            )


def _check_responses_input(body: Mapping[str, Any]) -> None:
    prompt = body.get("prompt")  # a stored prompt's reference (completions: the text itself)
    _check(prompt is None or isinstance(prompt, dict), "'prompt' must be an object", "prompt")
    value = body.get("input")
    if value is None:
        _check(
            body.get("previous_response_id") is not None
            or body.get("prompt") is not None
            or body.get("conversation") is not None,
            "you must provide an input parameter",
            "input",
        )
        return
    _check(
        isinstance(value, str)
        or (isinstance(value, list) and all(isinstance(i, dict) for i in value)),
        "'input' must be a string or an array of input items",
        "input",
    )


def validate_request(endpoint: str, body: Any) -> dict[str, Any]:
    """Check a decoded body for ``endpoint``; returns it, or raises :class:`RequestError` with
    the offending ``param`` (missing model or messages, wrong types, an integer out of its
    range: :data:`INTEGER_RANGES`, ``logit_bias`` keys and values, token ids in a prompt or an
    input). Unknown fields pass: the upstream may support more than we know of."""
    if not isinstance(body, dict):
        raise RequestError("The request body must be a JSON object.")
    if endpoint not in CACHED_ENDPOINTS:
        raise ValueError(f"not a cached endpoint: {endpoint!r}")
    # A Responses request may take its model from a stored prompt.
    _check_common(
        endpoint, body, model_optional=endpoint == RESPONSES and body.get("prompt") is not None
    )
    if endpoint == CHAT:
        _check_messages(body.get("messages"))
    elif endpoint == RESPONSES:
        _check_responses_input(body)
    elif endpoint == COMPLETIONS:
        _check("prompt" in body, "you must provide a prompt parameter", "prompt")
        _check_input(body["prompt"], "prompt")
    else:
        _check("input" in body, "you must provide an input parameter", "input")
        _check_input(body["input"], "input")
    return body
