"""What one API is to the cache: :class:`Endpoint`, the rules every endpoint module fills in.

An endpoint object answers every question the proxy, the client adapters and replay ask of a
request or an answer of its API, so none of them branches on which API it is:

* **requests**: validation (:meth:`Endpoint.validate`), what is forwarded uncached
  (:meth:`~Endpoint.passthrough_reason`), the fields an exact key is made of
  (:meth:`~Endpoint.answer_fields`, and the request headers that change the answer:
  :attr:`~Endpoint.keyed_headers`), the semantic text and why a request has none
  (:meth:`~Endpoint.semantic_text`, :meth:`~Endpoint.exact_only_reason`), the scope's fields
  (:meth:`~Endpoint.scope_fields`);
* **answers**: their shape (:meth:`~Endpoint.check_response`), whether a finished one may be stored
  (:meth:`~Endpoint.unfinished`), a stream's assembler and a hit's replay as a stream, the usage's
  token counts, a hit's fresh id, and the error body the API's clients parse.

The defaults here are the OpenAI API's; an endpoint module overrides what differs, and one
registration (:mod:`cachekit.llm.endpoints`) makes the proxy route it.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from cachekit.llm.errors import RequestError
from cachekit.llm.streaming import StreamAssembler, sse_event
from cachekit.llm.validate import is_count

__all__ = [
    "COMPLETE_FINISH",
    "IGNORED_FIELDS",
    "OPENAI",
    "Endpoint",
    "last_user_text",
    "message_reason",
    "text_of",
    "unfinished_choices",
    "without_last_content",
]

_ID_PREFIX = re.compile(r"[A-Za-z0-9_]{1,32}")

#: The API family of the OpenAI endpoints: which upstream serves them (``--upstream``).
OPENAI = "openai"

#: Request fields that never change an OpenAI answer's content: left out of keys and scopes.
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


def text_of(content: Any, kind: str = "text") -> str | None:
    """A message's text: the string itself, or its parts' texts joined with newlines when every
    part is a ``kind`` part; ``None`` otherwise (images, audio, files: compared exactly only)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != kind:
                return None
            t = part.get("text")
            if not isinstance(t, str):
                return None
            texts.append(t)
        return "\n".join(texts)
    return None


def last_user_text(messages: Any, kind: str = "text") -> str | None:
    """The text of the last message when it is the user's and holds text only, else ``None``."""
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return None
    last = messages[-1]
    return text_of(last.get("content"), kind) if last.get("role") == "user" else None


def without_last_content(fields: dict[str, Any], name: str = "messages") -> dict[str, Any]:
    """``fields`` with the last message's ``content`` taken out (its other fields kept): a
    conversation's scope, whose last text is compared by similarity."""
    msgs = fields.get(name)
    if isinstance(msgs, list):
        last = dict(msgs[-1]) if msgs and isinstance(msgs[-1], dict) else {}
        last.pop("content", None)
        fields[name] = [*msgs[:-1], last]
    return fields


def _zeroed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _zeroed(v) for k, v in value.items()}
    return 0 if isinstance(value, int) and not isinstance(value, bool) else value


def message_reason(role: Any) -> str:
    """Why a last message of ``role`` has no semantic text: not the user's, or not text alone."""
    if role != "user":
        return f"last message from {str(role)[:20]}"
    return "non-text parts"


class Endpoint:
    """One API: the rules a request and an answer of it follow. Subclasses set the class
    attributes and override what differs from the OpenAI defaults."""

    #: The URL path the API is served at (``/v1/chat/completions``).
    path: ClassVar[str]
    #: Its metrics label (``chat``).
    label: ClassVar[str]
    #: Which upstream serves it (:data:`OPENAI`, ``anthropic``).
    family: ClassVar[str] = OPENAI
    #: Whether ``stream: true`` answers with events (embeddings never stream).
    streams: ClassVar[bool] = True
    #: Request fields that never change the answer: left out of keys and scopes.
    ignored_fields: ClassVar[frozenset[str]] = IGNORED_FIELDS
    #: ``store``'s default, for the APIs that have one (it is keyed only when not the default).
    store_default: ClassVar[bool | None] = None
    #: Request headers that change the answer (beta features): keyed with the body.
    keyed_headers: ClassVar[tuple[str, ...]] = ()
    #: The integer fields checked on a request and their inclusive ranges.
    integer_ranges: ClassVar[Mapping[str, tuple[int, int]]] = {}
    #: A hit id's prefix and separator when the stored id has none usable (``chatcmpl``, ``-``).
    id_prefix: ClassVar[str] = "cmpl"
    id_sep: ClassVar[str] = "-"

    def __repr__(self) -> str:
        return f"<endpoint {self.path}>"

    # ------------------------------------------------------------------ requests

    def validate(self, body: dict[str, Any]) -> None:
        """:class:`RequestError` naming the field when ``body`` is not a request of this API."""
        raise NotImplementedError

    def check_request(self, body: Mapping[str, Any]) -> None:
        """Refusals beyond the API's own rules (continuing a semantic hit's id); none here."""

    def passthrough_reason(self, body: Mapping[str, Any]) -> str | None:
        """Why a request is forwarded without the cache (state the upstream holds), or ``None``."""
        return None

    def answer_fields(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The fields a key is made of: not ignored, not ``null``; ``store`` only when it is not
        the API's default (and not at all where there is none)."""
        fields = {k: v for k, v in body.items() if k not in self.ignored_fields and v is not None}
        store = fields.pop("store", None)
        if self.store_default is not None and store is not None and store != self.store_default:
            fields["store"] = store
        return fields

    def semantic_text(self, body: Mapping[str, Any]) -> str | None:
        """The text compared by similarity, or ``None`` when the request is exact-only."""
        return None

    def exact_only_reason(self, body: Mapping[str, Any]) -> str | None:
        """Why a request has no semantic text, in words for ``x-cachekit-reason`` (``tool
        result``, ``empty text``), or ``None`` when that needs no saying."""
        n = body.get("n")
        if n is not None and n != 1:
            return "n > 1"
        return None

    def scope_fields(self, fields: dict[str, Any]) -> dict[str, Any]:
        """:meth:`answer_fields` without the semantic text: what a scope is made of."""
        return fields

    def include_usage(self, body: Mapping[str, Any]) -> bool:
        """Whether a streamed answer to ``body`` ends with a usage event the client asked for."""
        return False

    def upstream_body(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """The body to send instead of the client's when a stream must report its usage, or
        ``None`` when the client's is sent as it came."""
        return None

    def drop_event(self, event: Any) -> bool:
        """Whether a relayed event was asked for by :meth:`upstream_body` only (the client's
        stream never carries it)."""
        return False

    # ------------------------------------------------------------------ answers

    def check_response(self, body: Mapping[str, Any]) -> str | None:
        """``None`` when ``body`` is a well-formed answer of this API, else why not."""
        raise NotImplementedError

    def unfinished(
        self, body: Mapping[str, Any], *, cache_length: bool, cache_refusals: bool
    ) -> str | None:
        """Why a 2xx answer may not be stored (cut off, refused, not finished), or ``None``. The
        reason's first word is a metric label."""
        return None

    def assembler(self, **bounds: Any) -> StreamAssembler:
        """What reads a relayed stream of this API into the answer to store."""
        return StreamAssembler(**bounds)

    def replay(
        self, response: dict[str, Any], *, include_usage: bool = False, pieces: int = 8
    ) -> Iterator[bytes]:
        """A stored answer as the event stream a live one would be."""
        raise NotImplementedError

    def logged_events(self, items: list[Any]) -> Iterator[bytes]:
        """A stream logged as the list of its event objects, as the bytes it came as."""
        for item in items:
            yield sse_event(item)

    def assemble_logged(self, logged: Any) -> tuple[dict[str, Any] | None, bool]:
        """``(answer, complete)`` of a logged response: an answer object as it is; a stream
        logged as SSE text or as a list of its event objects, assembled as the proxy assembles
        a relayed one."""
        if isinstance(logged, dict):
            return logged, True
        asm = self.assembler()
        if isinstance(logged, str):
            asm.feed(logged.encode("utf-8"))
        elif isinstance(logged, list):
            for event in self.logged_events(logged):
                asm.feed(event)
        else:
            return None, False
        return asm.result(), asm.complete

    def usage_counts(self, usage: Any) -> tuple[int, int] | None:
        """``(input, output)`` tokens of an answer's ``usage``, or ``None`` when unknown or
        malformed."""
        if not isinstance(usage, dict) and not isinstance(usage, Mapping):
            return None
        prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
        if type(prompt) is int and type(completion) is int and prompt >= 0 and completion >= 0:
            return prompt, completion  # the common case, without a call per count
        if not (is_count(prompt) and is_count(completion)):
            return None
        return prompt, completion

    def hit_id(self, original: Any) -> str:
        """A fresh id for a semantic hit, in the stored id's style (``chatcmpl-ck<24 hex>``):
        no upstream ever made it (``k`` is not a hex digit)."""
        sep = self.id_sep
        prefix = original.split(sep, 1)[0] if isinstance(original, str) else ""
        if not _ID_PREFIX.fullmatch(prefix):
            prefix = self.id_prefix
        return f"{prefix}{sep}ck{secrets.token_hex(12)}"

    def without_usage(self, response: dict[str, Any]) -> dict[str, Any]:
        """``response`` with every token count of its ``usage`` at 0: what a hit spent."""
        usage = response.get("usage")
        return {**response, "usage": _zeroed(usage)} if isinstance(usage, dict) else response

    def error_body(self, error: RequestError) -> dict[str, Any]:
        """The error body this API's clients parse (OpenAI's ``{"error": {...}}``)."""
        return error.body()


#: Finish reasons of a complete OpenAI choice. ``length`` (truncated) is cacheable only on request.
COMPLETE_FINISH = frozenset({"stop", "tool_calls", "function_call", "end_turn", "eos"})


def unfinished_choices(body: Mapping[str, Any], cache_length: bool) -> str | None:
    """Why a completion's choices may not be stored: none, or one not finished (``length``
    unless ``cache_length``; never ``content_filter``)."""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        return "no choices"
    for c in choices:
        reason = c.get("finish_reason") if isinstance(c, dict) else None
        if reason == "length" and cache_length:
            continue
        if not isinstance(reason, str) or reason not in COMPLETE_FINISH:
            return f"finish_reason {str(reason)[:40]}"
    return None
