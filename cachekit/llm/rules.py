"""OpenAI request rules: what is cached, what a request's key and scope are, who its tenant is,
and which responses may be stored.

Pure functions over decoded JSON bodies (``dict``); no web framework, no network. The proxy
(``cachekit serve``), the replay command and the OpenAI client adapter all call these, so that
what replay predicts is what production does.

Vocabulary:

* **endpoint**: one of :data:`CACHED_ENDPOINTS` (``/v1/chat/completions``, ``/v1/completions``,
  ``/v1/embeddings``, ``/v1/responses``); anything else is passed through by the proxy, as are
  Responses API requests that depend on state the upstream holds and that changes
  (``conversation``) or that the upstream runs later (``background: true``):
  :func:`passthrough_reason`.
* **exact key**: a digest of the canonical JSON (sorted keys, compact) of every request field
  that changes the answer, plus the endpoint, the tenant and the namespace. Fields that do not
  change the answer (:data:`IGNORED_FIELDS`: ``user``, ``stream``, ``stream_options``,
  ``metadata``, ``service_tier`` ...) are left out, so a streamed and a non-streamed request
  share an entry. ``store`` is keyed (it changes what the answer's id means upstream: a stored
  response can be continued from, :data:`STORE_DEFAULT`), and so is ``previous_response_id``.
* **validation** (:func:`validate_request`, from :mod:`cachekit.llm.checks`): types, and every
  integer field in its range (:data:`INTEGER_RANGES`, ``logit_bias``, token arrays), so that no
  out-of-range request is keyed, forwarded or stored.
* **semantic text**: the last user message (a string, or the concatenated ``text`` parts), a
  completion's string prompt, or a Responses request's ``input`` (a string, or its last item
  when that is a user message of text). ``None`` when the request is exact-only: ``n > 1``, a
  last message that is not from the user or carries non-text parts, embeddings.
* **scope**: a digest of everything else (endpoint, model, parameters, system prompt, earlier
  turns, tools, response_format, tenant, namespace): two requests may share an answer through
  similarity only when their scopes are equal.
* **tenant**: by default a keyed BLAKE2b hash of the caller's API key (never the key in clear);
  keys listed in a shared-scope group map to that group; an explicit tenant string overrides.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from cachekit.llm.checks import (
    CACHED_ENDPOINTS,
    CHAT,
    COMPLETIONS,
    EMBEDDINGS,
    INT64_MAX,
    INT64_MIN,
    INTEGER_RANGES,
    LOGIT_BIAS_RANGE,
    MAX_COUNT,
    MAX_JSON_DEPTH,
    RESPONSES,
    check_depth,
    parse_body,
    validate_request,
)
from cachekit.llm.errors import RequestError
from cachekit.llm.tenants import (
    CREDENTIAL_HEADERS,
    TenantResolver,
    bearer_token,
    caller_key,
    key_fingerprint,
)
from cachekit.llm.validate import check_response

__all__ = [
    "CACHED_ENDPOINTS",
    "CHAT",
    "COMPLETIONS",
    "CREDENTIAL_HEADERS",
    "EMBEDDINGS",
    "IGNORED_FIELDS",
    "INT64_MAX",
    "INT64_MIN",
    "INTEGER_RANGES",
    "LOGIT_BIAS_RANGE",
    "MAX_COUNT",
    "MAX_JSON_DEPTH",
    "MAX_RESPONSE_ID",
    "RESPONSES",
    "STORE_DEFAULT",
    "LLMRequest",
    "RequestError",
    "TenantResolver",
    "bearer_token",
    "cacheable_response",
    "caller_key",
    "canonical_json",
    "check_depth",
    "endpoint_of",
    "exact_key",
    "key_fingerprint",
    "parse_body",
    "parse_feedback",
    "passthrough_reason",
    "prepare",
    "scope_key",
    "semantic_text",
    "validate_request",
]


#: Request fields that never change the answer's content: left out of keys and scopes.
IGNORED_FIELDS: frozenset[str] = frozenset(
    {
        "user",
        "stream",
        "stream_options",
        "metadata",
        "service_tier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "safety_identifier",
    }
)

#: ``store``'s default by endpoint (chat: false, Responses: true). ``store`` changes what the
#: answer's id means upstream (a stored response can be continued from or fetched by id, an
#: unstored one cannot), so it is keyed, absent and the default being one value: the key holds it
#: only when it is not the default. Other endpoints have no ``store``: left out.
STORE_DEFAULT: Mapping[str, bool] = {CHAT: False, RESPONSES: True}

#: Finish reasons of a complete answer. ``length`` (truncated) is cacheable only on request.
_COMPLETE_FINISH = frozenset({"stop", "tool_calls", "function_call", "end_turn", "eos"})
_KEY_DIGEST = 20  # bytes of BLAKE2b in keys: 160 bits, collision-free for any cache size


# ---------------------------------------------------------------------- endpoints and bodies


def endpoint_of(path: str) -> str | None:
    """The cached endpoint a URL path names (a trailing slash tolerated), else ``None``."""
    p = path.split("?", 1)[0]
    if len(p) > 1 and p.endswith("/"):
        p = p[:-1]
    return p if p in CACHED_ENDPOINTS else None


#: Longest response id accepted by :func:`parse_feedback`.
MAX_RESPONSE_ID = 256


def parse_feedback(raw: bytes | str) -> tuple[str, bool]:
    """``(response id, correct)`` of a feedback body ``{"id": "...", "correct": false}``;
    :class:`RequestError` naming the problem otherwise (no other fields are accepted)."""
    body = parse_body(raw)
    unknown = sorted(set(body) - {"id", "correct"})
    if unknown:
        raise RequestError(
            f"Unknown field(s) {unknown} in the feedback body; expected id and correct.",
            param=unknown[0],
        )
    rid, correct = body.get("id"), body.get("correct")
    if not isinstance(rid, str) or not 0 < len(rid) <= MAX_RESPONSE_ID:
        raise RequestError(
            f"id must be the response id of a cached answer (a string of 1-{MAX_RESPONSE_ID} "
            f"characters), got {rid!r:.80}",
            param="id",
        )
    if not isinstance(correct, bool):
        raise RequestError(f"correct must be true or false, got {correct!r:.80}", param="correct")
    return rid, correct


def passthrough_reason(endpoint: str, body: Mapping[str, Any]) -> str | None:
    """Why a request is forwarded without looking it up or storing it, or ``None``: a Responses
    request run in the ``background`` (the upstream answers later, by id), or one continuing a
    ``conversation`` (its items live upstream and change with every turn; a
    ``previous_response_id`` names a fixed history, and is keyed like any other field)."""
    if endpoint != RESPONSES:
        return None
    if body.get("background"):
        return "background"
    if body.get("conversation") is not None:
        return "conversation"
    return None


# ---------------------------------------------------------------------- keys and scope


def _normalize(value: Any) -> Any:
    # 1 and 1.0 mean the same temperature; JSON writes them differently.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, integral floats written as ints, non-ASCII kept."""
    return json.dumps(
        _normalize(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=_KEY_DIGEST).hexdigest()


def _answer_fields(endpoint: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a key is made of: not ignored, not ``null``; ``store`` only when it is not
    its endpoint's default (and not at all where there is no ``store``), ``background`` only
    when true (such a request is never looked up, :func:`passthrough_reason`)."""
    fields = {k: v for k, v in body.items() if k not in IGNORED_FIELDS and v is not None}
    store = fields.pop("store", None)
    default = STORE_DEFAULT.get(endpoint)
    if default is not None and store is not None and store != default:
        fields["store"] = store
    if fields.get("background") is False:
        del fields["background"]
    return fields


def exact_key(endpoint: str, body: Mapping[str, Any], tenant: str, namespace: str = "") -> str:
    """The exact-match key: ``llm:x:`` and a digest of the canonical JSON of the endpoint,
    tenant, namespace and every field that changes the answer. ``null`` fields count as absent."""
    payload = {"e": endpoint, "t": tenant, "ns": namespace, "b": _answer_fields(endpoint, body)}
    return "llm:x:" + _digest(canonical_json(payload))


def _text_of(content: Any, kind: str = "text") -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != kind:
                return None  # images, audio, files: compared exactly only
            t = part.get("text")
            if not isinstance(t, str):
                return None
            texts.append(t)
        return "\n".join(texts)
    return None


def semantic_text(endpoint: str, body: Mapping[str, Any]) -> str | None:
    """The text compared by similarity, or ``None`` when the request is exact-only (``n > 1``,
    embeddings, a last message not from the user or with non-text parts, a non-string prompt)."""
    n = body.get("n")
    if n is not None and n != 1:
        return None
    if endpoint == CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
            return None
        last = messages[-1]
        return _text_of(last.get("content")) if last.get("role") == "user" else None
    if endpoint == COMPLETIONS:
        prompt = body.get("prompt")
        return prompt if isinstance(prompt, str) else None
    if endpoint == RESPONSES:
        return _responses_text(body.get("input"))
    return None


def _is_user_message(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and item.get("role") == "user"
        and item.get("type", "message") == "message"
    )


def _responses_text(value: Any) -> str | None:
    """A Responses ``input``'s semantic text: the string itself, or the last item's text when it
    is a user message of ``input_text`` parts (anything else: exact-only)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and _is_user_message(value[-1]):
        return _text_of(value[-1].get("content"), "input_text")
    return None


def scope_key(endpoint: str, body: Mapping[str, Any], tenant: str, namespace: str = "") -> str:
    """The digest of everything but the semantic text: endpoint, model, parameters, system
    prompt, earlier turns, the last message's other fields, tools, response_format, tenant,
    namespace. Meaningful when :func:`semantic_text` is not ``None``."""
    fields = _answer_fields(endpoint, body)
    if endpoint == CHAT and isinstance(fields.get("messages"), list):
        msgs = list(fields["messages"])
        last = dict(msgs[-1]) if msgs and isinstance(msgs[-1], dict) else {}
        last.pop("content", None)
        fields["messages"] = [*msgs[:-1], last]
    elif endpoint == COMPLETIONS:
        fields.pop("prompt", None)
    elif endpoint == RESPONSES:
        value = fields.pop("input", None)
        if isinstance(value, list) and value and isinstance(value[-1], dict):
            last = dict(value[-1])
            last.pop("content", None)
            fields["input"] = [*value[:-1], last]
    payload = {"e": endpoint, "t": tenant, "ns": namespace, "b": fields}
    return "llm:s:" + _digest(canonical_json(payload))


@dataclass(frozen=True)
class LLMRequest:
    """A validated request with its exact key computed once: what
    :class:`~cachekit.llm.LLMCache` looks up and stores. Build it with :func:`prepare`.
    ``scope`` (``None`` for exact-only requests) is computed on first use: an exact hit never
    needs it."""

    endpoint: str
    body: Mapping[str, Any]
    tenant: str
    namespace: str
    key: str
    text: str | None
    #: Why this request is forwarded without the cache (:func:`passthrough_reason`), or None.
    passthrough: str | None = None

    @cached_property
    def scope(self) -> str | None:
        if self.text is None:
            return None
        return scope_key(self.endpoint, self.body, self.tenant, self.namespace)

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def include_usage(self) -> bool:
        so = self.body.get("stream_options")
        return isinstance(so, dict) and bool(so.get("include_usage"))


def prepare(endpoint: str, body: Any, tenant: str, namespace: str = "") -> LLMRequest:
    """Validate ``body`` (:class:`RequestError` when bad) and compute its exact key and
    semantic text (and, lazily, its scope)."""
    endpoint = endpoint_of(endpoint) or endpoint
    validate_request(endpoint, body)
    try:
        key = exact_key(endpoint, body, tenant, namespace)
    except ValueError as exc:  # NaN or infinity somewhere in the body
        raise RequestError(f"The request body is not valid JSON for the API: {exc}") from None
    return LLMRequest(
        endpoint,
        body,
        tenant,
        namespace,
        key,
        semantic_text(endpoint, body),
        passthrough_reason(endpoint, body),
    )


# ---------------------------------------------------------------------- responses


def cacheable_response(
    endpoint: str,
    status: int,
    body: Any,
    *,
    cache_length: bool = False,
    cache_refusals: bool = True,
) -> tuple[bool, str]:
    """Whether an upstream answer may be stored, and why not: 2xx, a JSON object without
    ``error``, the endpoint's object with well-typed fields (:mod:`cachekit.llm.validate`:
    ``object``, ``usage`` counts, ``choices``), every choice finished (``finish_reason`` not
    ``null``; not ``length`` unless ``cache_length``; never ``content_filter``). The reason's
    first word is a metric label: ``status``, ``error``, ``no``, ``finish_reason``, ``invalid``."""

    if not 200 <= status < 300:
        return False, f"status {status}"
    if not isinstance(body, dict) or body.get("error") is not None:
        return False, "error body"
    if endpoint == EMBEDDINGS:
        data = body.get("data")
        if not isinstance(data, list) or not data:
            return False, "no embeddings"
    elif endpoint == RESPONSES:
        why = _unfinished_response(body, cache_refusals)
        if why is not None:
            return False, why
    else:
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices:
            return False, "no choices"
        for c in choices:
            reason = c.get("finish_reason") if isinstance(c, dict) else None
            if reason == "length" and cache_length:
                continue
            if not isinstance(reason, str) or reason not in _COMPLETE_FINISH:
                return False, f"finish_reason {str(reason)[:40]}"
    why = check_response(endpoint, body)
    if why is not None:
        return False, f"invalid {why}"
    return True, ""


def _unfinished_response(body: Mapping[str, Any], cache_refusals: bool) -> str | None:
    """Why a Responses API answer may not be stored: not ``completed``, incomplete, or (with
    ``cache_refusals=False``) holding a refusal. The reason's first word is a metric label."""
    status = body.get("status")
    if status != "completed":
        return f"status {str(status)[:40]}"
    if body.get("incomplete_details") is not None:
        return "finish_reason incomplete"
    if not cache_refusals and _has_refusal(body):
        return "refusal"
    return None


def _has_refusal(body: Mapping[str, Any]) -> bool:
    for item in body.get("output") or ():
        if isinstance(item, dict) and item.get("type") == "message":
            for part in item.get("content") or ():
                if isinstance(part, dict) and part.get("type") == "refusal":
                    return True
    return False
