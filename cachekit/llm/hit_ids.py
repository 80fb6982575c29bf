"""The ids of semantic hits: fresh ones, in the stored answer's style, that no upstream ever
made, and the refusal of a request that tries to continue from (or fetch) one. The proxy and the
client adapter (``cachekit.adapters.openai``) both follow it.

A semantic hit's stored answer was made for another prompt: upstream (the Responses API), its id
names that prompt's history, so a client continuing from it (``previous_response_id``) would
continue someone else's conversation. The proxy hands out a fresh id instead (``resp_ck<24
hex>``: ``k`` is not a hex digit, so no OpenAI id has this shape, and every replica recognises it
without shared state; each endpoint makes its own: :meth:`Endpoint.hit_id
<cachekit.llm.endpoints.Endpoint.hit_id>`); continuing from it is a 400 and fetching it a 404,
each saying why.
"""

from __future__ import annotations

import re
from typing import Any

from cachekit.llm.errors import RequestError

__all__ = ["HIT_ID", "check_continuable", "response_id_in"]

#: The ids cachekit makes for semantic hits.
HIT_ID = re.compile(r"[A-Za-z0-9_]{1,32}[-_]ck[0-9a-f]{24}")


def response_id_in(path: str) -> str | None:
    """The response id of a ``/v1/responses/{id}[/...]`` path, else ``None``."""
    head, _, rest = path.partition("/v1/responses/")
    return rest.split("/", 1)[0] if not head and rest else None


def check_continuable(response_id: Any, status: int = 400) -> None:
    """:class:`RequestError` (``status``) for an id cachekit made for a semantic hit: the
    upstream never stored it, so it can neither be continued (``previous_response_id``) nor
    fetched (404 for ``/v1/responses/{id}``)."""
    if isinstance(response_id, str) and HIT_ID.fullmatch(response_id):
        raise RequestError(
            f"Response {response_id} is a semantic cache hit served by cachekit: the "
            "upstream never stored it, so it cannot be continued or fetched. Continue by sending "
            "the conversation so far as input, or send requests you will continue with "
            "Cache-Control: no-cache.",
            param="previous_response_id" if status == 400 else None,
            status=status,
            code="semantic_hit_not_stored",
        )
