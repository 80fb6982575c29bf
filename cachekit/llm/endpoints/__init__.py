"""The APIs the LLM cache knows, one :class:`Endpoint` object each, and their registry.

The proxy's routes, the client adapters and replay iterate over :data:`ENDPOINTS`; nothing
outside the endpoint modules asks which API a request is. Adding an API is one module (a
subclass of :class:`Endpoint`: its validation, key fields, semantic text and scope, what makes an
answer storable, its stream assembler and replay, usage, ids and error shape) and one
:func:`register` call below.
"""

from __future__ import annotations

from cachekit.llm.endpoints.base import OPENAI, Endpoint
from cachekit.llm.endpoints.chat import ChatCompletions
from cachekit.llm.endpoints.completions import Completions
from cachekit.llm.endpoints.embeddings import Embeddings
from cachekit.llm.endpoints.messages import ANTHROPIC, Messages
from cachekit.llm.endpoints.responses import Responses

__all__ = [
    "ANTHROPIC",
    "ENDPOINTS",
    "OPENAI",
    "Endpoint",
    "endpoint_for",
    "get_endpoint",
    "register",
]

#: Every cached API by its path, in registration order.
ENDPOINTS: dict[str, Endpoint] = {}


def register(endpoint: Endpoint) -> Endpoint:
    """Add ``endpoint`` (the proxy routes its path from then on); ``ValueError`` when its path
    is taken."""
    if endpoint.path in ENDPOINTS:
        raise ValueError(f"an endpoint is registered at {endpoint.path} already")
    ENDPOINTS[endpoint.path] = endpoint
    return endpoint


def endpoint_for(path: str) -> Endpoint | None:
    """The endpoint a URL path names (a query and a trailing slash tolerated), else ``None``."""
    found = ENDPOINTS.get(path)
    if found is not None:
        return found
    p = path.split("?", 1)[0]
    if len(p) > 1 and p.endswith("/"):
        p = p[:-1]
    return ENDPOINTS.get(p)


def get_endpoint(path: str) -> Endpoint:
    """:func:`endpoint_for`, and ``ValueError`` for a path no endpoint serves."""
    endpoint = endpoint_for(path)
    if endpoint is None:
        raise ValueError(f"not a cached endpoint: {path!r}; known: {sorted(ENDPOINTS)}")
    return endpoint


for _endpoint in (ChatCompletions(), Completions(), Embeddings(), Responses(), Messages()):
    register(_endpoint)
