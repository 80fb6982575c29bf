"""Server-sent events of the OpenAI streaming API, both ways.

* :class:`StreamAssembler` turns the ``chat.completion.chunk`` (or ``text_completion``) events
  of a streamed answer into the one ``chat.completion`` (``text_completion``) object the
  non-streamed API would have returned: content, reasoning content, tool-call deltas, refusal,
  logprobs, usage, finish reasons. It knows whether the stream completed (``data: [DONE]`` seen
  and nothing but comments after it, no error event, every choice finished), so an interrupted,
  failed or padded stream is never stored.
* :func:`completion_chunks` / :func:`sse_stream` replay a stored completion as a stream of
  several well-formed chunks ending with ``data: [DONE]``, with a usage chunk when the request
  asked for one (``stream_options.include_usage``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

__all__ = [
    "DONE",
    "MAX_ANSWER_BYTES",
    "MAX_EVENT_BYTES",
    "StreamAssembler",
    "completion_chunks",
    "only_comments",
    "split_text",
    "sse_event",
    "sse_stream",
]

DONE = b"data: [DONE]\n\n"
#: The longest single event a :class:`StreamAssembler` holds whole (a chunk is a few hundred bytes).
MAX_EVENT_BYTES = 1 << 20
#: The most bytes of events it assembles into one answer; a longer stream is relayed, not stored.
MAX_ANSWER_BYTES = 8 << 20
_PIECE = re.compile(r"\S+\s*|\s+")


def only_comments(raw: bytes) -> bool:
    """Whether ``raw`` holds nothing but blank lines and ``:`` comment lines."""
    return all(
        not ln.strip() or ln.startswith(b":")
        for ln in raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    )


def sse_event(obj: Any) -> bytes:
    """One ``data: {json}`` event."""
    return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


class _Choice:
    __slots__ = (
        "content",
        "finish_reason",
        "function_call",
        "logprobs",
        "reasoning",
        "reasoning_key",
        "refusal",
        "role",
        "tool_calls",
    )

    def __init__(self) -> None:
        self.role: str | None = None
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.reasoning_key = "reasoning_content"
        self.refusal: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.function_call: dict[str, str] | None = None
        self.finish_reason: str | None = None
        self.logprobs: dict[str, list[Any]] | None = None

    def add_delta(self, delta: dict[str, Any]) -> None:
        if delta.get("role"):
            self.role = delta["role"]
        for key, out in (("content", self.content), ("refusal", self.refusal)):
            if isinstance(delta.get(key), str):
                out.append(delta[key])
        for key in ("reasoning_content", "reasoning"):
            if isinstance(delta.get(key), str):
                self.reasoning_key = key
                self.reasoning.append(delta[key])
        for tc in delta.get("tool_calls") or ():
            self._add_tool_call(tc)
        fc = delta.get("function_call")
        if isinstance(fc, dict):
            cur = self.function_call or {"name": "", "arguments": ""}
            cur["name"] += fc.get("name") or ""
            cur["arguments"] += fc.get("arguments") or ""
            self.function_call = cur

    def _add_tool_call(self, tc: dict[str, Any]) -> None:
        idx = tc.get("index", len(self.tool_calls))
        cur = self.tool_calls.setdefault(
            idx, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if tc.get("id"):
            cur["id"] = tc["id"]
        if tc.get("type"):
            cur["type"] = tc["type"]
        fn = tc.get("function") or {}
        cur["function"]["name"] += fn.get("name") or ""
        cur["function"]["arguments"] += fn.get("arguments") or ""

    def add_logprobs(self, lp: Any) -> None:
        if not isinstance(lp, dict):
            return
        self.logprobs = self.logprobs or {}
        for key, items in lp.items():
            if isinstance(items, list):
                self.logprobs.setdefault(key, []).extend(items)

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {
            "role": self.role or "assistant",
            "content": "".join(self.content) if self.content else None,
        }
        if self.reasoning:
            msg[self.reasoning_key] = "".join(self.reasoning)
        if self.refusal:
            msg["refusal"] = "".join(self.refusal)
        if self.tool_calls:
            msg["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        if self.function_call is not None:
            msg["function_call"] = self.function_call
        return msg


class StreamAssembler:
    """Feed it the raw bytes of an SSE response as they arrive (any split); read the assembled
    object with :meth:`result` once :attr:`complete`.

    ``complete`` (see :attr:`incomplete_reason` for the rules) is true only when ``data: [DONE]``
    arrived with nothing but blank lines and ``:`` comments after it, no error was carried in any
    SSE form (an ``event: error`` field, a ``data:`` JSON object with an ``error`` key, a data
    line that is not a JSON object, a chunk of the wrong types) and every choice has a finish
    reason. Events after ``[DONE]`` are never assembled into the answer.
    """

    def __init__(
        self, max_event_bytes: int = MAX_EVENT_BYTES, max_answer_bytes: int = MAX_ANSWER_BYTES
    ) -> None:
        if max_event_bytes < 1 or max_answer_bytes < 1:
            raise ValueError("max_event_bytes and max_answer_bytes must be positive")
        self.max_event_bytes = min(max_event_bytes, max_answer_bytes)
        self.max_answer_bytes = max_answer_bytes
        self._buf = bytearray()
        #: Where the next search for a separator may start (earlier bytes hold none).
        self._scanned = 0
        #: Bytes of the events assembled so far.
        self._held = 0
        #: Past a bound: the rest is relayed as it comes, never parsed nor stored.
        self.too_large = False
        self._choices: dict[int, _Choice] = {}
        self._texts: dict[int, list[str]] = {}
        self._meta: dict[str, Any] = {}
        self.usage: dict[str, Any] | None = None
        self.done = False
        #: An error event (or an undecodable one) was seen: the stream is never stored.
        self.broken = False
        #: Something other than blank lines and comments came after ``[DONE]``.
        self.after_done = False
        self.chunks = 0
        self.object: str | None = None

    def feed(self, data: bytes) -> None:
        self.feed_events(data)

    def feed_events(self, data: bytes) -> list[tuple[bytes, dict[str, Any] | None]]:
        """:meth:`feed`, returning the events completed by ``data``: each one's raw bytes
        (separator included, ready to relay) and its decoded chunk (``None`` for ``[DONE]``,
        comments, error and undecodable events, and anything after ``[DONE]``). A relay can
        drop events this way.

        Work is linear in the bytes fed, and memory is bounded: an event longer than
        ``max_event_bytes``, or events adding up to more than ``max_answer_bytes``, make the
        stream :attr:`too_large` (never stored); from then on every byte is returned as it
        comes, unparsed, and nothing more is held."""
        if self.too_large:
            return [(bytes(data), None)] if data else []
        out: list[tuple[bytes, dict[str, Any] | None]] = []
        self._buf += data
        start = 0
        while True:
            cut = self._next_boundary(max(start, self._scanned))
            if cut is None:
                break
            event = bytes(self._buf[start : cut[0]])
            out.append((event + b"\n\n", self.parse_event(event)))
            self._held += cut[1] - start
            start = self._scanned = cut[1]
        del self._buf[:start]
        # A separator may begin in the last 3 bytes and end in the next feed.
        self._scanned = max(0, len(self._buf) - 3)
        if len(self._buf) > self.max_event_bytes or self._held > self.max_answer_bytes:
            self._give_up(out)
        return out

    def _next_boundary(self, start: int) -> tuple[int, int] | None:
        """The first separator at or after ``start``: ``(where it begins, where it ends)``. Each
        search stops at the first ``\\n\\n``, so a feed costs one pass over its bytes."""
        buf = self._buf
        lf = buf.find(b"\n\n", start)
        # A CRLF separator before it ends by lf + 1 at the latest (lf's own bytes are "\n\n").
        crlf = buf.find(b"\r\n\r\n", start, lf + 1 if lf >= 0 else len(buf))
        if crlf >= 0:
            return crlf, crlf + 4
        return (lf, lf + 2) if lf >= 0 else None

    def rest(self) -> bytes:
        """The bytes fed after the last complete event (an unterminated tail), for a relay to
        pass on when the stream ends; they are never assembled."""
        return bytes(self._buf)

    def _give_up(self, out: list[tuple[bytes, dict[str, Any] | None]]) -> None:
        """Past a bound: relay what is buffered as it is and keep nothing of the answer."""
        self.too_large = True
        if self._buf:
            out.append((bytes(self._buf), None))
        self._buf = bytearray()
        self._choices.clear()
        self._texts.clear()

    def parse_event(self, event: bytes) -> dict[str, Any] | None:
        """One event (its bytes without the separator): its decoded chunk, assembled, or
        ``None``. The hook an assembler of another event format overrides."""
        if self.done:
            # After [DONE] only blank lines and comments may follow; nothing is assembled.
            if not only_comments(event):
                self.after_done = True
            return None
        raw_lines = event.replace(b"\r\n", b"\n").split(b"\n")
        lines = [ln[5:].lstrip() for ln in raw_lines if ln.startswith(b"data:")]
        if any(ln.startswith(b"event:") and ln[6:].strip() == b"error" for ln in raw_lines):
            self.broken = True  # ``event: error``, whatever its data says
            return None
        if not lines:
            return None  # comments, keep-alives, event:/id: lines alone
        payload = b"\n".join(lines)
        if payload.strip() == b"[DONE]":
            self.done = True
            return None
        try:
            obj = json.loads(payload)
        except ValueError:
            self.broken = True
            return None
        if not isinstance(obj, dict) or "error" in obj:
            self.broken = True  # an error object (even ``"error": null``) or not a chunk
            return None
        try:
            self.add_chunk(obj)
        except (TypeError, AttributeError, ValueError):
            self.broken = True  # a chunk of the wrong types: relayed, never stored
            return None
        return obj

    def add_chunk(self, chunk: dict[str, Any]) -> None:
        """Add one decoded chunk (what the openai client's stream yields, as a dict)."""
        self.chunks += 1
        for key in ("id", "created", "model", "system_fingerprint", "service_tier"):
            if chunk.get(key) is not None:
                self._meta.setdefault(key, chunk[key])
        self.object = self.object or chunk.get("object")
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for c in chunk.get("choices") or ():
            if isinstance(c, dict):
                self._add_choice(c)

    def _add_choice(self, c: dict[str, Any]) -> None:
        idx = c.get("index", 0)
        ch = self._choices.setdefault(idx, _Choice())
        if isinstance(c.get("delta"), dict):
            ch.add_delta(c["delta"])
        if isinstance(c.get("text"), str):
            self._texts.setdefault(idx, []).append(c["text"])
        if c.get("logprobs") is not None:
            ch.add_logprobs(c["logprobs"])
        if c.get("finish_reason") is not None:
            ch.finish_reason = c["finish_reason"]

    @property
    def incomplete_reason(self) -> str | None:
        """Why the stream may not be stored, or ``None`` when it is complete. The rules, in
        order: an error was carried (``event: error``, a ``data:`` object with an ``error``
        key, a data line that is not a JSON object, a malformed chunk); no ``data: [DONE]``;
        past a bound (an event over ``max_event_bytes``, an answer over ``max_answer_bytes``); no
        ``data: [DONE]``; something other than blank lines and ``:`` comments after ``[DONE]``
        (also bytes left unterminated in the buffer); no choice; a choice without a finish
        reason."""
        if self.broken:
            return "error event"
        if self.too_large:
            return "too large"
        if not self.done:
            return "no [DONE]"
        if self.after_done or not only_comments(bytes(self._buf)):
            return "data after [DONE]"
        if not self._choices:
            return "no choices"
        if any(c.finish_reason is None for c in self._choices.values()):
            return "unfinished choice"
        return None

    @property
    def complete(self) -> bool:
        """Whether the stream may be stored: :attr:`incomplete_reason` is ``None``."""
        return self.incomplete_reason is None

    @property
    def not_stored_reason(self) -> str | None:
        """Why a stream that ended may not be stored, as a metric label (the proxy's
        ``cachekit_proxy_not_stored_total{reason}``), or ``None`` when it is complete:
        ``too_large`` past a bound, else ``incomplete_stream`` (:attr:`incomplete_reason` says
        more). A Responses stream adds ``stream_mismatch``."""
        if self.too_large:
            return "too_large"
        return None if self.complete else "incomplete_stream"

    def result(self) -> dict[str, Any] | None:
        """The assembled completion, or ``None`` when nothing usable arrived."""
        if not self._choices:
            return None
        is_text = self.object == "text_completion" or (
            bool(self._texts)
            and not any(c.role or c.content or c.tool_calls for c in self._choices.values())
        )
        out: dict[str, Any] = {
            "id": self._meta.get("id", ""),
            "object": "text_completion" if is_text else "chat.completion",
            "created": self._meta.get("created", 0),
            "model": self._meta.get("model", ""),
            "choices": [self._choice_out(i, is_text) for i in sorted(self._choices)],
        }
        for key in ("system_fingerprint", "service_tier"):
            if key in self._meta:
                out[key] = self._meta[key]
        if self.usage is not None:
            out["usage"] = self.usage
        return out

    def _choice_out(self, i: int, is_text: bool) -> dict[str, Any]:
        ch = self._choices[i]
        if is_text:
            return {
                "index": i,
                "text": "".join(self._texts.get(i, [])),
                "logprobs": ch.logprobs,
                "finish_reason": ch.finish_reason,
            }
        return {
            "index": i,
            "message": ch.message(),
            "logprobs": ch.logprobs,
            "finish_reason": ch.finish_reason,
        }


def split_text(text: str, pieces: int = 8) -> list[str]:
    """``text`` cut at word boundaries into about ``pieces`` parts (at least one per word group;
    a one-word text stays whole). Joining the parts gives ``text`` back."""
    words = _PIECE.findall(text)
    if not words:
        return [text] if text else []
    per = max(1, -(-len(words) // max(1, pieces)))
    return ["".join(words[i : i + per]) for i in range(0, len(words), per)]


def _chunk(base: dict[str, Any], choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {**base, "choices": choices}


def _chat_choice_chunks(
    base: dict[str, Any], choice: dict[str, Any], pieces: int
) -> Iterator[dict[str, Any]]:
    i = choice.get("index", 0)
    msg = choice.get("message") or {}

    def delta(d: dict[str, Any]) -> dict[str, Any]:
        return _chunk(base, [{"index": i, "delta": d, "logprobs": None, "finish_reason": None}])

    yield delta({"role": msg.get("role", "assistant"), "content": ""})
    for key in ("reasoning_content", "reasoning"):
        for part in split_text(msg.get(key) or "", pieces):
            yield delta({key: part})
    for part in split_text(msg.get("content") or "", pieces):
        yield delta({"content": part})
    if msg.get("refusal"):
        yield delta({"refusal": msg["refusal"]})
    for j, tc in enumerate(msg.get("tool_calls") or ()):
        fn = tc.get("function") or {}
        yield delta(
            {
                "tool_calls": [
                    {
                        "index": j,
                        "id": tc.get("id"),
                        "type": tc.get("type", "function"),
                        "function": {"name": fn.get("name", ""), "arguments": ""},
                    }
                ]
            }
        )
        for part in split_text(fn.get("arguments") or "", max(2, pieces // 2)):
            yield delta({"tool_calls": [{"index": j, "function": {"arguments": part}}]})
    if msg.get("function_call"):
        yield delta({"function_call": msg["function_call"]})
    yield _chunk(
        base,
        [
            {
                "index": i,
                "delta": {},
                "logprobs": choice.get("logprobs"),
                "finish_reason": choice.get("finish_reason"),
            }
        ],
    )


def _text_choice_chunks(
    base: dict[str, Any], choice: dict[str, Any], pieces: int
) -> Iterator[dict[str, Any]]:
    i = choice.get("index", 0)
    for part in split_text(choice.get("text") or "", pieces):
        yield _chunk(base, [{"index": i, "text": part, "logprobs": None, "finish_reason": None}])
    yield _chunk(
        base,
        [
            {
                "index": i,
                "text": "",
                "logprobs": choice.get("logprobs"),
                "finish_reason": choice.get("finish_reason"),
            }
        ],
    )


def completion_chunks(
    completion: dict[str, Any], *, include_usage: bool = False, pieces: int = 8
) -> list[dict[str, Any]]:
    """A stored ``chat.completion`` (or ``text_completion``) as the chunk objects a real stream
    would carry: a role chunk, content in about ``pieces`` parts (reasoning first, then content,
    refusal, tool calls with their arguments in parts), a finish chunk per choice, and, when
    ``include_usage``, a final chunk with ``choices: []`` and the usage."""
    is_text = completion.get("object") == "text_completion"
    base = {
        "id": completion.get("id", ""),
        "object": "text_completion" if is_text else "chat.completion.chunk",
        "created": completion.get("created", 0),
        "model": completion.get("model", ""),
    }
    if completion.get("system_fingerprint") is not None:
        base["system_fingerprint"] = completion["system_fingerprint"]
    out: list[dict[str, Any]] = []
    for choice in completion.get("choices") or ():
        gen = _text_choice_chunks if is_text else _chat_choice_chunks
        out.extend(gen(base, choice, pieces))
    if include_usage:
        out.append({**base, "choices": [], "usage": completion.get("usage")})
    return out


def sse_stream(
    completion: dict[str, Any], *, include_usage: bool = False, pieces: int = 8
) -> Iterator[bytes]:
    """:func:`completion_chunks` as SSE events, then ``data: [DONE]``."""
    for chunk in completion_chunks(completion, include_usage=include_usage, pieces=pieces):
        yield sse_event(chunk)
    yield DONE
