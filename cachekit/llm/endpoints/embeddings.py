"""``POST /v1/embeddings``: OpenAI's embeddings. Exact-only (there is no answer to share by
similarity), never streamed."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from cachekit.llm.checks import COMMON_INTEGERS, check, check_common, check_input
from cachekit.llm.endpoints.base import Endpoint
from cachekit.llm.validate import check_embeddings

__all__ = ["Embeddings"]


class Embeddings(Endpoint):
    path = "/v1/embeddings"
    label = "embeddings"
    streams = False
    integer_ranges = COMMON_INTEGERS

    def validate(self, body: dict[str, Any]) -> None:
        check_common(body, self.integer_ranges)
        check("input" in body, "you must provide an input parameter", "input")
        check_input(body["input"], "input")

    def exact_only_reason(self, body: Mapping[str, Any]) -> str | None:
        return None  # always exact: nothing to say

    def check_response(self, body: Mapping[str, Any]) -> str | None:
        return check_embeddings(body)

    def unfinished(
        self, body: Mapping[str, Any], *, cache_length: bool, cache_refusals: bool
    ) -> str | None:
        data = body.get("data")
        return None if isinstance(data, list) and data else "no embeddings"

    def replay(
        self, response: dict[str, Any], *, include_usage: bool = False, pieces: int = 8
    ) -> Iterator[bytes]:
        raise TypeError("embeddings are never streamed")
