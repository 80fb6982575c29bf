"""Request rules: what is cached, what a request's key and scope are, who its tenant is, and
which responses may be stored.

Pure functions over decoded JSON bodies (``dict``); no web framework, no network. The proxy
(``cachekit serve``), the replay command and the client adapters all call these, so that what
replay predicts is what production does. What differs between APIs is each one's
:class:`~cachekit.llm.endpoints.Endpoint` object (:mod:`cachekit.llm.endpoints`); these functions
take an endpoint's path and ask its object.

Vocabulary:

* **endpoint**: one of :data:`~cachekit.llm.endpoints.ENDPOINTS` (``/v1/chat/completions``,
  ``/v1/completions``, ``/v1/embeddings``, ``/v1/responses``, Anthropic's ``/v1/messages``);
  anything else is passed through by the proxy, as are
  Responses API requests that depend on state the upstream holds and that changes
  (``conversation``) or that the upstream runs later (``background: true``):
  :func:`passthrough_reason`.
* **exact key**: a digest of the canonical JSON (sorted keys, compact) of every request field
  that changes the answer, plus the endpoint, the tenant and the namespace. Fields that do not
  change the answer (OpenAI's :data:`IGNORED_FIELDS`: ``user``, ``stream``, ``stream_options``,
  ``metadata``, ``service_tier`` ...) are left out, so a streamed and a non-streamed request
  share an entry; request headers that change the answer (``anthropic-beta``) are keyed.
  ``store`` is keyed (it changes what the answer's id means upstream: a stored response can be
  continued from, :data:`STORE_DEFAULT`), and so is ``previous_response_id``.
* **validation** (:func:`validate_request`, from :mod:`cachekit.llm.checks`): types, and every
  integer field in its range (:data:`INTEGER_RANGES`, ``logit_bias``, token arrays), so that no
  out-of-range request is keyed, forwarded or stored.
* **semantic text**: the last user message (a string, or the concatenated ``text`` parts), a
  completion's string prompt, or a Responses request's ``input`` (a string, or its last item
  when that is a user message of text), the last Anthropic user message's text blocks. ``None``
  when the request is exact-only: ``n > 1``, a last message that is a tool's result, not from
  the user, blank or with non-text parts, embeddings (:attr:`LLMRequest.exact_only` says why).
* **scope**: a digest of everything else (endpoint, model, parameters, system prompt, earlier
  turns, tools, response_format, tenant, namespace): two requests may share an answer through
  similarity only when their scopes are equal.
* **tenant**: by default a keyed BLAKE2b hash of the caller's API key (never the key in clear);
  keys listed in a shared-scope group map to that group; an explicit tenant string overrides.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from cachekit.llm.checks import (
    INT64_MAX,
    INT64_MIN,
    LOGIT_BIAS_RANGE,
    MAX_COUNT,
    MAX_JSON_DEPTH,
    check_depth,
    parse_body,
)
from cachekit.llm.endpoints import ENDPOINTS, Endpoint, endpoint_for, get_endpoint
from cachekit.llm.endpoints.base import IGNORED_FIELDS
from cachekit.llm.endpoints.chat import ChatCompletions
from cachekit.llm.endpoints.completions import Completions
from cachekit.llm.endpoints.embeddings import Embeddings
from cachekit.llm.endpoints.messages import Messages
from cachekit.llm.endpoints.responses import Responses
from cachekit.llm.errors import RequestError
from cachekit.llm.tenants import (
    CREDENTIAL_HEADERS,
    TenantResolver,
    bearer_token,
    caller_key,
    key_fingerprint,
)

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
    "MESSAGES",
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
    "check_response",
    "endpoint_of",
    "exact_key",
    "key_fingerprint",
    "keyed_headers",
    "parse_body",
    "parse_feedback",
    "passthrough_reason",
    "prepare",
    "scope_key",
    "semantic_text",
    "validate_request",
]

CHAT = ChatCompletions.path
COMPLETIONS = Completions.path
EMBEDDINGS = Embeddings.path
RESPONSES = Responses.path
MESSAGES = Messages.path
#: The built-in cached endpoints' paths (:data:`~cachekit.llm.endpoints.ENDPOINTS` holds them all).
CACHED_ENDPOINTS: frozenset[str] = frozenset(ENDPOINTS)
#: The integer fields of each endpoint's request and their inclusive ranges (the API reference's,
#: where it gives one; else a 32-bit count). Values outside get a 400 naming the field and range.
INTEGER_RANGES: Mapping[str, Mapping[str, tuple[int, int]]] = {
    p: e.integer_ranges for p, e in ENDPOINTS.items()
}
#: ``store``'s default by endpoint (chat: false, Responses: true). ``store`` changes what the
#: answer's id means upstream (a stored response can be continued from or fetched by id, an
#: unstored one cannot), so it is keyed, absent and the default being one value: the key holds it
#: only when it is not the default. Other endpoints have no ``store``: left out.
STORE_DEFAULT: Mapping[str, bool] = {
    p: e.store_default for p, e in ENDPOINTS.items() if e.store_default is not None
}

_KEY_DIGEST = 20  # bytes of BLAKE2b in keys: 160 bits, collision-free for any cache size


# ---------------------------------------------------------------------- endpoints and bodies


def endpoint_of(path: str) -> str | None:
    """The cached endpoint a URL path names (a trailing slash tolerated), else ``None``."""
    endpoint = endpoint_for(path)
    return endpoint.path if endpoint is not None else None


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
    return get_endpoint(endpoint).passthrough_reason(body)


def validate_request(endpoint: str, body: Any) -> dict[str, Any]:
    """Check a decoded body for ``endpoint``; returns it, or raises :class:`RequestError` with
    the offending ``param`` (missing model or messages, wrong types, an integer out of its
    range: :data:`INTEGER_RANGES`, ``logit_bias`` keys and values, token ids in a prompt or an
    input). Unknown fields pass: the upstream may support more than we know of. ``ValueError``
    for a path no endpoint serves."""
    if not isinstance(body, dict):
        raise RequestError("The request body must be a JSON object.")
    get_endpoint(endpoint).validate(body)
    return body


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


Headers = Mapping[str, str] | Iterable[tuple[str, str]] | None


def keyed_headers(endpoint: str, headers: Headers) -> tuple[tuple[str, str], ...]:
    """The request headers of ``endpoint``'s :attr:`~cachekit.llm.endpoints.Endpoint.keyed_headers`
    that were sent, name lower-cased, repeated lines joined with ``", "``, sorted."""
    wanted = get_endpoint(endpoint).keyed_headers
    if not wanted or headers is None:
        return ()
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    found: dict[str, list[str]] = {}
    for name, value in pairs:
        n = name.lower()
        if n in wanted:
            found.setdefault(n, []).append(value.strip())
    return tuple(sorted((n, ", ".join(v)) for n, v in found.items()))


def _key(
    kind: str, endpoint: str, fields: dict[str, Any], tenant: str, namespace: str, headers: Any
) -> str:
    """``kind`` and the digest of the canonical JSON of what a key is made of (keyed headers
    only when there are some: the OpenAI keys of earlier versions stay valid)."""
    payload = {"e": endpoint, "t": tenant, "ns": namespace, "b": fields}
    if headers:
        payload["h"] = dict(headers)
    return kind + _digest(canonical_json(payload))


def exact_key(
    endpoint: str,
    body: Mapping[str, Any],
    tenant: str,
    namespace: str = "",
    headers: tuple[tuple[str, str], ...] = (),
) -> str:
    """The exact-match key: ``llm:x:`` and a digest of the canonical JSON of the endpoint,
    tenant, namespace, keyed headers (:func:`keyed_headers`) and every field that changes the
    answer. ``null`` fields count as absent."""
    fields = get_endpoint(endpoint).answer_fields(body)
    return _key("llm:x:", endpoint, fields, tenant, namespace, headers)


def semantic_text(endpoint: str, body: Mapping[str, Any]) -> str | None:
    """The text compared by similarity, or ``None`` when the request is exact-only (``n > 1``,
    embeddings, a last message not from the user, a tool's result, blank or with non-text
    parts, a non-string prompt)."""
    text = get_endpoint(endpoint).semantic_text(body)
    return text if text is not None and text.strip() else None


def _exact_only(api: Endpoint, body: Mapping[str, Any], text: str | None) -> str | None:
    if text is not None:
        return None
    raw = api.semantic_text(body)
    return "empty text" if raw is not None else api.exact_only_reason(body)


def scope_key(
    endpoint: str,
    body: Mapping[str, Any],
    tenant: str,
    namespace: str = "",
    headers: tuple[tuple[str, str], ...] = (),
) -> str:
    """The digest of everything but the semantic text: endpoint, model, parameters, system
    prompt, earlier turns, the last message's other fields, tools, response_format, keyed
    headers, tenant, namespace. Meaningful when :func:`semantic_text` is not ``None``."""
    api = get_endpoint(endpoint)
    fields = api.scope_fields(api.answer_fields(body))
    return _key("llm:s:", endpoint, fields, tenant, namespace, headers)


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
    #: The request headers keyed with the body (:func:`keyed_headers`).
    headers: tuple[tuple[str, str], ...] = ()
    #: Why a request without semantic text is compared exactly only (``tool result``), or None.
    exact_only: str | None = None

    @cached_property
    def scope(self) -> str | None:
        if self.text is None:
            return None
        return scope_key(self.endpoint, self.body, self.tenant, self.namespace, self.headers)

    @cached_property
    def api(self) -> Endpoint:
        """The request's :class:`~cachekit.llm.endpoints.Endpoint`."""
        return get_endpoint(self.endpoint)

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @cached_property
    def stream(self) -> bool:
        """Whether the answer is sent as events (``stream: true`` where the API streams)."""
        return bool(self.body.get("stream")) and self.api.streams

    @cached_property
    def include_usage(self) -> bool:
        return self.api.include_usage(self.body)


def prepare(
    endpoint: str, body: Any, tenant: str, namespace: str = "", headers: Headers = None
) -> LLMRequest:
    """Validate ``body`` (:class:`RequestError` when bad) and compute its exact key and
    semantic text (and, lazily, its scope). ``headers``: the request's header lines, of which
    the endpoint's keyed ones join the key."""
    endpoint = endpoint_of(endpoint) or endpoint
    validate_request(endpoint, body)
    api = get_endpoint(endpoint)
    keyed = keyed_headers(endpoint, headers)
    try:
        key = exact_key(endpoint, body, tenant, namespace, keyed)
    except ValueError as exc:  # NaN or infinity somewhere in the body
        raise RequestError(f"The request body is not valid JSON for the API: {exc}") from None
    text = semantic_text(endpoint, body)
    return LLMRequest(
        endpoint,
        body,
        tenant,
        namespace,
        key,
        text,
        api.passthrough_reason(body),
        keyed,
        _exact_only(api, body, text),
    )


# ---------------------------------------------------------------------- responses


def check_response(endpoint: str, body: Any) -> str | None:
    """``None`` when ``body`` is a well-formed answer of ``endpoint``, else why not. An unknown
    endpoint is never well-formed (nothing is cached for it)."""
    if not isinstance(body, dict) and not isinstance(body, Mapping):
        return "not an object"
    api = ENDPOINTS.get(endpoint) or endpoint_for(endpoint)
    if api is None:
        return f"endpoint {endpoint} not cached"
    return api.check_response(body)


def cacheable_response(
    endpoint: str,
    status: int,
    body: Any,
    *,
    cache_length: bool = False,
    cache_refusals: bool = True,
) -> tuple[bool, str]:
    """Whether an upstream answer may be stored, and why not: 2xx, a JSON object without
    ``error``, finished by its endpoint's rules (:meth:`Endpoint.unfinished
    <cachekit.llm.endpoints.Endpoint.unfinished>`: every choice's ``finish_reason`` set, not
    ``length`` unless ``cache_length``, never ``content_filter``; a response ``completed``; a
    Message's storable ``stop_reason``), and of the endpoint's shape
    (:mod:`cachekit.llm.validate`). The reason's first word is a metric label: ``status``,
    ``error``, ``no``, ``finish_reason``, ``invalid``, ``refusal``."""

    if not 200 <= status < 300:
        return False, f"status {status}"
    if not isinstance(body, dict) or body.get("error") is not None:
        return False, "error body"
    why = get_endpoint(endpoint).unfinished(
        body, cache_length=cache_length, cache_refusals=cache_refusals
    )
    if why is None:
        why = check_response(endpoint, body)
        why = None if why is None else f"invalid {why}"
    return (False, why) if why is not None else (True, "")
