"""LangChain caches on cachekit (needs langchain-core: ``pip install 'cachekit-ml[langchain]'``).

* :class:`CachekitCache`: exact, keyed by the prompt and the ``llm_string`` (LangChain's
  description of the model and its parameters).
* :class:`CachekitSemanticCache`: semantic, scoped by the ``llm_string``: a prompt is answered by
  a similar earlier prompt for the same model and parameters only. For chat models, whose prompt
  is the serialized message list, the compared text is the last human message and the earlier
  messages are part of the scope, as in ``cachekit serve``.

Both are ``langchain_core.caches.BaseCache`` with sync and async methods, and pass LangChain's
standard cache test suites. ``clear()`` retires every entry of the cache's namespace (the
library's namespace invalidation, seen by every process sharing it): give LangChain a
``Cache`` with a namespace of its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import warnings
from collections.abc import Sequence
from typing import Any

from cachekit._core.extras import require

try:
    from langchain_core.caches import RETURN_VAL_TYPE, BaseCache
    from langchain_core.load import dumps, loads
    from langchain_core.messages import (
        AIMessage,
        AIMessageChunk,
        ChatMessage,
        FunctionMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )
    from langchain_core.outputs import (
        ChatGeneration,
        ChatGenerationChunk,
        Generation,
        GenerationChunk,
    )
except ImportError:  # name the extra and its install command (the import error is chained)
    require("langchain_core", extra="langchain", feature="cachekit.adapters.langchain")
    raise

from cachekit.cache import Cache

__all__ = ["CachekitCache", "CachekitSemanticCache"]


def _encode(generations: Sequence[Any]) -> list[str]:
    return [dumps(g) for g in generations]


# What a cached answer may revive into: generations and messages, never models or anything
# with configuration (a shared Redis is not trusted to hold only what we wrote).
_ALLOWED = (
    Generation,
    GenerationChunk,
    ChatGeneration,
    ChatGenerationChunk,
    AIMessage,
    AIMessageChunk,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    FunctionMessage,
    ChatMessage,
)


def _decode(value: Any) -> RETURN_VAL_TYPE | None:
    if not isinstance(value, list):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # loads() is marked beta; its format is stable
            return [loads(v, allowed_objects=_ALLOWED) for v in value]
    except Exception:  # an entry of another version, or a class not allowed: a miss
        return None


def _key(prompt: str, llm_string: str) -> str:
    digest = hashlib.blake2b(f"{llm_string}\x00{prompt}".encode(), digest_size=20)
    return "lc:" + digest.hexdigest()


class CachekitCache(BaseCache):
    """Exact LangChain cache on a :class:`~cachekit.Cache` (L1, and Redis when configured).
    ``ttl``: seconds (default: the cache's ``default_ttl``)."""

    def __init__(self, cache: Cache, *, ttl: float | None = None) -> None:
        self.cache = cache
        self.ttl = ttl

    def lookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        return _decode(self.cache.get(_key(prompt, llm_string)))

    def update(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        self.cache.set(_key(prompt, llm_string), _encode(return_val), ttl=self.ttl)

    def clear(self, **kwargs: Any) -> None:
        self.cache.invalidate_namespace()

    async def alookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        return _decode(await self.cache.aget(_key(prompt, llm_string)))

    async def aupdate(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        await self.cache.aset(_key(prompt, llm_string), _encode(return_val), ttl=self.ttl)

    async def aclear(self, **kwargs: Any) -> None:
        await self.cache.ainvalidate_namespace()


def split_prompt(prompt: str, llm_string: str) -> tuple[str, str]:
    """``(text, scope)`` of a LangChain prompt: a chat prompt (serialized messages) compares its
    last human message, with the earlier messages in the scope; any other prompt is the text."""
    if prompt.startswith("["):
        try:
            messages = json.loads(prompt)
        except ValueError:
            messages = None
        if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
            kwargs = messages[-1].get("kwargs") or {}
            content = kwargs.get("content")
            if kwargs.get("type") == "human" and isinstance(content, str):
                rest = json.dumps(messages[:-1], sort_keys=True)
                return content, f"{llm_string}\x00{rest}"
    return prompt, llm_string


def _semantic_only(prompt: str, *, scope: str) -> Any:
    raise RuntimeError("used through lookup/put only")


def _scope_of(prompt: str, *, scope: str) -> str:
    return scope


class CachekitSemanticCache(BaseCache):
    """Semantic LangChain cache: one ``@cache.semantic`` function whose text is the prompt (the
    last human message for chat models) and whose scope is the ``llm_string`` (plus the earlier
    messages). ``threshold``: the similarity bar (``None``: the library default);
    ``embedder``: any embedder ``@cache.semantic`` accepts (default: the bundled model)."""

    def __init__(
        self,
        cache: Cache,
        threshold: float | None = None,
        *,
        embedder: Any = None,
        ttl: float | None = None,
        name: str = "cachekit.adapters.langchain",
    ) -> None:
        self.cache = cache
        self.fn = cache.semantic(
            _semantic_only,
            threshold=threshold,
            ttl=ttl,
            scope=_scope_of,
            embedder=embedder,
            name=name,
        )

    def lookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        text, scope = split_prompt(prompt, llm_string)
        result = self.fn.lookup(text, scope=scope)
        return _decode(result.value) if result.hit else None

    def update(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        text, scope = split_prompt(prompt, llm_string)
        self.fn.put(_encode(return_val), text, scope=scope)

    def clear(self, **kwargs: Any) -> None:
        self.cache.invalidate_namespace()

    # Embedding is CPU work: never on the event loop.
    async def alookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        return await asyncio.to_thread(self.lookup, prompt, llm_string)

    async def aupdate(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        await asyncio.to_thread(self.update, prompt, llm_string, return_val)

    async def aclear(self, **kwargs: Any) -> None:
        await self.cache.ainvalidate_namespace()

    def close(self) -> None:
        """Stop the semantic function's background threads."""
        self.fn.close()
