"""LLM request rules and the LLM cache shared by ``cachekit serve`` (:mod:`cachekit.proxy`),
``cachekit replay`` and the client adapters (OpenAI, Anthropic).

* :mod:`cachekit.llm.endpoints`: one :class:`Endpoint` object per API (OpenAI's chat
  completions, completions, embeddings and Responses; Anthropic's Messages) and their registry,
  :data:`ENDPOINTS`: everything that differs between APIs.
* :mod:`cachekit.llm.rules`: cached endpoints, validation (:class:`RequestError`), exact key,
  semantic text and scope, tenants, response cacheability; the body and field checks
  themselves (JSON bounds, types, integer ranges) are :mod:`cachekit.llm.checks`.
* :mod:`cachekit.llm.streaming`: SSE chunks assembled into one completion, and a stored
  completion replayed as a stream; :mod:`cachekit.llm.responses_stream`: the same for the
  Responses API's typed event stream.
* :mod:`cachekit.llm.tenants`: who a caller is; :mod:`cachekit.llm.config`: the settings both
  commands share; :mod:`cachekit.llm.answers`: what a cached answer says.
* :mod:`cachekit.llm.prices`: dated dollar prices per model, overridable from TOML.
* :mod:`cachekit.llm.store`: :class:`LLMCache` (``lookup``/``store``/``alookup``/``astore``) and
  :func:`build_cache`, the factory both commands use.

Imports nothing heavy: the semantic tier loads only on the first semantic lookup.
"""

from cachekit.llm.endpoints import ENDPOINTS, Endpoint, endpoint_for, get_endpoint, register
from cachekit.llm.prices import PRICES_AS_OF, Price, PriceTable
from cachekit.llm.responses_stream import (
    ResponsesStreamAssembler,
    response_events,
    responses_sse,
)
from cachekit.llm.rules import (
    CACHED_ENDPOINTS,
    CHAT,
    COMPLETIONS,
    EMBEDDINGS,
    IGNORED_FIELDS,
    MESSAGES,
    RESPONSES,
    LLMRequest,
    RequestError,
    TenantResolver,
    bearer_token,
    cacheable_response,
    canonical_json,
    endpoint_of,
    exact_key,
    key_fingerprint,
    parse_body,
    parse_feedback,
    passthrough_reason,
    prepare,
    scope_key,
    semantic_text,
    validate_request,
)
from cachekit.llm.store import (
    CacheLookup,
    LLMCache,
    LLMCacheConfig,
    LookupOptions,
    StoreOptions,
    Where,
    build_cache,
)
from cachekit.llm.streaming import (
    DONE,
    StreamAssembler,
    completion_chunks,
    split_text,
    sse_event,
    sse_stream,
)

__all__ = [
    "CACHED_ENDPOINTS",
    "CHAT",
    "COMPLETIONS",
    "DONE",
    "EMBEDDINGS",
    "ENDPOINTS",
    "IGNORED_FIELDS",
    "MESSAGES",
    "PRICES_AS_OF",
    "RESPONSES",
    "CacheLookup",
    "Endpoint",
    "LLMCache",
    "LLMCacheConfig",
    "LLMRequest",
    "LookupOptions",
    "Price",
    "PriceTable",
    "RequestError",
    "ResponsesStreamAssembler",
    "StoreOptions",
    "StreamAssembler",
    "TenantResolver",
    "Where",
    "bearer_token",
    "build_cache",
    "cacheable_response",
    "canonical_json",
    "completion_chunks",
    "endpoint_for",
    "endpoint_of",
    "exact_key",
    "get_endpoint",
    "key_fingerprint",
    "parse_body",
    "parse_feedback",
    "passthrough_reason",
    "prepare",
    "register",
    "response_events",
    "responses_sse",
    "scope_key",
    "semantic_text",
    "split_text",
    "sse_event",
    "sse_stream",
    "validate_request",
]
