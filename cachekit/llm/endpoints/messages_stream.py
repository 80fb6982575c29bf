"""The Anthropic Messages API's event stream, both ways.

A streamed ``POST /v1/messages`` answers with typed server-sent events, each an ``event: <type>``
line and a ``data:`` object carrying the same ``type``: ``message_start`` (the message with empty
``content`` and a null ``stop_reason``), then for each content block ``content_block_start``, its
``content_block_delta`` events and ``content_block_stop``, then ``message_delta`` (the stop reason
and the final usage counts) and ``message_stop``. ``ping`` events and ``:`` comments may come
anywhere before the end; an ``error`` event ends a failed stream. There is no ``data: [DONE]``.

* :class:`MessagesStreamAssembler` reads a relayed stream (any split of its bytes, CRLF
  tolerated) and assembles the Message a non-streamed request would have returned, the way the
  official SDK's ``accumulate_event`` does: block texts, thinking and tool-input JSON are their
  deltas joined (the JSON parsed), citations appended to their text block, a signature replaced
  by its delta, and ``message_delta`` sets the stop reason and sequence and overrides the usage
  counts (``output_tokens`` is cumulative; a null count keeps the one ``message_start`` gave).
  It is :attr:`~MessagesStreamAssembler.complete` only when (:attr:`incomplete_reason` in order):
  no ``error`` event came and every event was well-typed (its ``data`` a JSON object whose
  ``type`` equals its ``event:`` field, with the fields its type needs of the right types); no
  bound was passed; a ``message_start`` came, before any other event and only once; blocks
  started in index order, each delta went to a started, unstopped block of its kind, each block
  stopped once and each tool input is a JSON object; ``message_stop`` came with nothing but
  comments after it; every block stopped; the stop reason is a string. Which stop reasons may
  be stored is decided elsewhere. It splits and bounds events as :class:`StreamAssembler` does.
* :func:`message_events` / :func:`messages_sse` replay a stored Message as the event stream the
  official SDK parses back into the same Message: texts and thinking in several deltas, tool
  input as its compact JSON in several parts, citations one delta each.
* :func:`check_message` says whether a body is a well-formed Message that can be served so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from cachekit.llm.streaming import (
    MAX_ANSWER_BYTES,
    MAX_EVENT_BYTES,
    StreamAssembler,
    only_comments,
    split_text,
)
from cachekit.llm.validate import is_count

__all__ = [
    "DELTA_BLOCKS",
    "TOOL_BLOCKS",
    "MessagesStreamAssembler",
    "check_message",
    "message_events",
    "messages_sse",
]

#: The blocks whose ``input`` streams as ``input_json_delta`` parts.
TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use"})

#: Each delta type, the field it carries with that field's type, and the blocks it may extend.
DELTA_BLOCKS: dict[str, tuple[str, type, frozenset[str]]] = {
    "text_delta": ("text", str, frozenset({"text"})),
    "citations_delta": ("citation", dict, frozenset({"text"})),
    "input_json_delta": ("partial_json", str, TOOL_BLOCKS),
    "thinking_delta": ("thinking", str, frozenset({"thinking"})),
    "signature_delta": ("signature", str, frozenset({"thinking"})),
}

#: The events that build the message (any other type is passed on and ignored).
_EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    }
)

_STOP = ("stop_reason", "stop_sequence")

#: The nested usage objects a live ``message_delta`` repeats besides the ``*_tokens`` counts.
_DELTA_USAGE_OBJECTS = ("server_tool_use", "output_tokens_details")


class _IllTyped(Exception):
    """An event without the fields its type needs, of the right types."""


def _n(value: Any) -> str:
    """An upstream value in a reason, bounded."""
    return str(value)[:40]


def _merge(target: dict[str, Any], updates: Mapping[str, Any]) -> None:
    """Each update overrides, except a null one over a value already there."""
    for key, value in updates.items():
        if value is not None or key not in target:
            target[key] = value


def _opt(value: Any, kind: type) -> bool:
    return value is None or isinstance(value, kind)


def _fields(event: bytes) -> tuple[str | None, bytes | None]:
    """An event's ``event:`` field (the last one) and its ``data:`` lines joined, or ``None``."""
    name: str | None = None
    data: list[bytes] = []
    for line in event.replace(b"\r\n", b"\n").split(b"\n"):
        if line.startswith(b"event:"):
            name = line[6:].strip().decode("utf-8", "replace")
        elif line.startswith(b"data:"):
            data.append(line[5:].lstrip())
    return name, b"\n".join(data) if data else None


def _index(event: dict[str, Any]) -> int:
    index: Any = event.get("index")
    if not is_count(index):
        raise _IllTyped
    return int(index)


def _check_start_block(block: Any) -> dict[str, Any]:
    """A ``content_block_start`` block with its streamed fields of the right types."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise _IllTyped
    kind = block["type"]
    ok = True
    if kind == "text":
        ok = isinstance(block.get("text"), str) and _opt(block.get("citations"), list)
    elif kind == "thinking":
        ok = isinstance(block.get("thinking"), str) and _opt(block.get("signature"), str)
    elif kind in TOOL_BLOCKS:
        ok = isinstance(block.get("input"), dict)
    if not ok:
        raise _IllTyped
    return block


class _Block:
    """One content block being assembled."""

    __slots__ = ("block", "citations", "json", "kind", "parts", "stopped")

    def __init__(self, block: dict[str, Any]) -> None:
        self.block = dict(block)
        self.kind: str = block["type"]
        #: The text or thinking deltas, after the start block's own text.
        self.parts: list[str] = []
        self.json: list[str] = []
        self.citations: list[Any] | None = None
        self.stopped = False

    def add(self, kind: str, value: Any) -> None:
        if kind == "citations_delta":
            if self.citations is None:
                self.citations = list(self.block.get("citations") or ())
            self.citations.append(value)
        elif kind == "signature_delta":
            self.block["signature"] = value  # replaced, as the SDK does
        elif kind == "input_json_delta":
            self.json.append(value)
        else:
            self.parts.append(value)

    def stop(self) -> bool:
        """Mark it stopped; ``False`` when its tool input is not a JSON object. Input deltas
        that join to ``""`` leave the start block's input (``{}``), as the SDK does."""
        self.stopped = True
        joined = "".join(self.json)
        if self.kind not in TOOL_BLOCKS or not joined:
            return True
        try:
            parsed = json.loads(joined)
        except (ValueError, RecursionError):
            return False
        if not isinstance(parsed, dict):
            return False
        self.block["input"], self.json = parsed, []
        return True

    def result(self) -> dict[str, Any]:
        out = dict(self.block)
        if self.parts:
            field = "thinking" if self.kind == "thinking" else "text"
            out[field] = out[field] + "".join(self.parts)
        if self.citations is not None:
            out["citations"] = list(self.citations)
        return out


class MessagesStreamAssembler(StreamAssembler):
    """Feed it a Messages API event stream as it arrives (:meth:`feed_events`); :meth:`result`
    is the assembled Message once :attr:`complete`."""

    def __init__(
        self, max_event_bytes: int = MAX_EVENT_BYTES, max_answer_bytes: int = MAX_ANSWER_BYTES
    ) -> None:
        super().__init__(max_event_bytes=max_event_bytes, max_answer_bytes=max_answer_bytes)
        self._message: dict[str, Any] | None = None
        self._blocks: list[_Block] = []
        #: The first way the events broke the protocol (see :attr:`incomplete_reason`).
        self.fault: str | None = None

    def _fail(self, reason: str) -> None:
        self.fault = self.fault or reason

    def parse_event(self, event: bytes) -> dict[str, Any] | None:
        if self.done:
            if not only_comments(event):
                self.after_done = True
            return None
        name, data = _fields(event)
        if name == "error":
            self.broken = True
            return None
        if data is None:
            return None  # comments, keep-alives
        obj = self._decode(name, data)
        if obj is None or obj["type"] == "ping":
            return None
        self.chunks += 1
        try:
            self._add(obj)
        except _IllTyped:
            self.broken = True
            return None
        return obj

    def _decode(self, name: str | None, data: bytes) -> dict[str, Any] | None:
        """The data object, or ``None`` (and broken) when it is not one with a string ``type``
        equal to the event's name, or is an error."""
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            obj = None
        kind = obj.get("type") if isinstance(obj, dict) else None
        if not isinstance(kind, str) or kind == "error" or kind != name:
            self.broken = True
            return None
        return obj

    def _add(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind not in _EVENTS:
            return  # an event type this codec does not know: relayed, not assembled
        if kind == "message_start":
            self._on_message_start(event)
        elif self._message is None:
            self._fail(f"{kind} before message_start")
        elif kind == "content_block_start":
            self._on_block_start(event)
        elif kind == "content_block_delta":
            self._on_block_delta(event)
        elif kind == "content_block_stop":
            self._on_block_stop(event)
        elif kind == "message_delta":
            self._on_message_delta(event)
        else:
            self.done = True  # message_stop

    def _on_message_start(self, event: dict[str, Any]) -> None:
        message = event.get("message")
        if not isinstance(message, dict) or message.get("content") != []:
            raise _IllTyped
        if not _opt(message.get("usage"), dict):
            raise _IllTyped
        if self._message is not None:
            self._fail("second message_start")
            return
        self._message = dict(message)
        if message.get("usage") is not None:
            self._message["usage"] = dict(message["usage"])

    def _on_block_start(self, event: dict[str, Any]) -> None:
        index = _index(event)
        block = _check_start_block(event.get("content_block"))
        if index != len(self._blocks):
            self._fail(f"block {_n(index)} started out of order")
            return
        self._blocks.append(_Block(block))

    def _on_block_delta(self, event: dict[str, Any]) -> None:
        index = _index(event)
        delta = event.get("delta")
        if not isinstance(delta, dict) or not isinstance(delta.get("type"), str):
            raise _IllTyped
        kind = delta["type"]
        field, field_type, blocks = DELTA_BLOCKS.get(kind, ("", object, frozenset()))
        if field and not isinstance(delta.get(field), field_type):
            raise _IllTyped
        if index >= len(self._blocks):
            self._fail(f"delta for unknown block {_n(index)}")
        elif self._blocks[index].stopped:
            self._fail(f"delta for stopped block {_n(index)}")
        elif self._blocks[index].kind not in blocks:
            self._fail(f"{_n(kind)} for a {_n(self._blocks[index].kind)} block")
        else:
            self._blocks[index].add(kind, delta[field])

    def _on_block_stop(self, event: dict[str, Any]) -> None:
        index = _index(event)
        if index >= len(self._blocks):
            self._fail(f"stop of unknown block {_n(index)}")
        elif self._blocks[index].stopped:
            self._fail(f"block {_n(index)} stopped twice")
        elif not self._blocks[index].stop():
            self._fail(f"tool input of block {_n(index)} not a JSON object")

    def _on_message_delta(self, event: dict[str, Any]) -> None:
        delta, usage = event.get("delta"), event.get("usage")
        if not isinstance(delta, dict) or not _opt(usage, dict):
            raise _IllTyped
        stop = {key: delta.get(key) for key in _STOP}
        if not all(_opt(value, str) for value in stop.values()):
            raise _IllTyped
        message = self._message or {}
        message.update(stop)  # both set, as the SDK does; other fields (stop_details ...) merged
        _merge(message, {k: v for k, v in delta.items() if k not in stop})
        if usage is not None:
            counts = message.get("usage")
            counts = dict(counts) if isinstance(counts, dict) else {}
            _merge(counts, usage)
            message["usage"] = counts

    def _give_up(self, out: list[tuple[bytes, dict[str, Any] | None]]) -> None:
        super()._give_up(out)
        self._blocks.clear()
        self._message = None

    @property
    def incomplete_reason(self) -> str | None:
        """Why the stream may not be stored, or ``None``. In order: ``error event`` (an
        ``error`` event, or one undecodable or ill-typed), ``too large``, ``no message_start``,
        the first protocol :attr:`fault` (``<type> before message_start``, ``second
        message_start``, ``block N started out of order``, ``delta for unknown block N``,
        ``delta for stopped block N``, ``<delta type> for a <block type> block``, ``stop of
        unknown block N``, ``block N stopped twice``, ``tool input of block N not a JSON
        object``), ``no message_stop``, ``data after message_stop``, ``block N not stopped``,
        ``no stop_reason``."""
        if self.broken:
            return "error event"
        if self.too_large:
            return "too large"
        if self._message is None:
            return "no message_start"
        if self.fault is not None:
            return self.fault
        if not self.done:
            return "no message_stop"
        if self.after_done or not only_comments(self.rest()):
            return "data after message_stop"
        for index, block in enumerate(self._blocks):
            if not block.stopped:
                return f"block {index} not stopped"
        if not isinstance(self._message.get("stop_reason"), str):
            return "no stop_reason"
        return None

    def result(self) -> dict[str, Any] | None:
        """The assembled Message (what a non-streamed request would have returned), or ``None``
        before ``message_start`` or past a bound. Meaningful as an answer only when
        :attr:`complete`."""
        if self._message is None:
            return None
        return {**self._message, "content": [block.result() for block in self._blocks]}


def _event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


def _split_even(text: str, pieces: int) -> list[str]:
    """``text`` cut into about ``pieces`` parts of equal length (one part when short)."""
    size = max(1, -(-len(text) // max(1, pieces)))
    return [text[i : i + size] for i in range(0, len(text), size)] or [text]


def _text_events(index: int, block: dict[str, Any], pieces: int) -> Iterator[dict[str, Any]]:
    start = {**block, "text": ""}
    if isinstance(block.get("citations"), list):
        start["citations"] = []
    yield _event("content_block_start", index=index, content_block=start)
    citations = block.get("citations")
    for citation in citations if isinstance(citations, list) else ():
        delta = {"type": "citations_delta", "citation": citation}
        yield _event("content_block_delta", index=index, delta=delta)
    for part in split_text(block.get("text") or "", pieces):
        yield _event("content_block_delta", index=index, delta={"type": "text_delta", "text": part})


def _tool_events(index: int, block: dict[str, Any], pieces: int) -> Iterator[dict[str, Any]]:
    yield _event("content_block_start", index=index, content_block={**block, "input": {}})
    text = json.dumps(block.get("input") or {}, separators=(",", ":"), ensure_ascii=False)
    for part in _split_even(text, pieces):
        delta = {"type": "input_json_delta", "partial_json": part}
        yield _event("content_block_delta", index=index, delta=delta)


def _thinking_events(index: int, block: dict[str, Any], pieces: int) -> Iterator[dict[str, Any]]:
    start = {**block, "thinking": ""}
    if "signature" in block:
        start["signature"] = ""
    yield _event("content_block_start", index=index, content_block=start)
    for part in split_text(block.get("thinking") or "", pieces):
        delta = {"type": "thinking_delta", "thinking": part}
        yield _event("content_block_delta", index=index, delta=delta)
    if "signature" in block:
        delta = {"type": "signature_delta", "signature": block["signature"]}
        yield _event("content_block_delta", index=index, delta=delta)


def _block_events(index: int, block: dict[str, Any], pieces: int) -> Iterator[dict[str, Any]]:
    kind = block.get("type")
    if kind == "text":
        yield from _text_events(index, block, pieces)
    elif kind in TOOL_BLOCKS:
        yield from _tool_events(index, block, pieces)
    elif kind == "thinking":
        yield from _thinking_events(index, block, pieces)
    else:  # redacted thinking, tool results ...: whole
        yield _event("content_block_start", index=index, content_block=block)
    yield _event("content_block_stop", index=index)


def _usages(message: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The usage of ``message_start`` (every count but ``output_tokens``, which is 0) and that of
    ``message_delta`` (``output_tokens`` and the other counts). A message without usage replays
    with zero counts: the SDK needs them."""
    usage = message.get("usage")
    if not isinstance(usage, dict):
        usage = {"input_tokens": 0, "output_tokens": 0}
    closing = {
        key: value
        for key, value in usage.items()
        if key.endswith("_tokens") or key in _DELTA_USAGE_OBJECTS
    }
    closing["output_tokens"] = usage.get("output_tokens", 0)
    return {**usage, "output_tokens": 0}, closing


def message_events(message: dict[str, Any], *, pieces: int = 8) -> list[dict[str, Any]]:
    """A stored Message as the events of a live stream: ``message_start`` (no content, no stop
    reason, output tokens 0), each block's start, deltas (text and thinking in about ``pieces``
    parts, tool input as its compact JSON in about ``pieces`` parts, one delta per citation,
    the signature last) and stop, then ``message_delta`` (stop reason, sequence and details, the
    usage counts) and ``message_stop``."""
    opening_usage, closing_usage = _usages(message)
    opening = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": opening_usage,
    }
    stop = {key: message.get(key) for key in _STOP}
    if "stop_details" in message:
        opening["stop_details"] = None
        stop["stop_details"] = message["stop_details"]
    events = [_event("message_start", message=opening)]
    blocks = [block for block in message.get("content") or () if isinstance(block, dict)]
    for index, block in enumerate(blocks):
        events.extend(_block_events(index, block, pieces))
    events.append(_event("message_delta", delta=stop, usage=closing_usage))
    events.append(_event("message_stop"))
    return events


def messages_sse(message: dict[str, Any], *, pieces: int = 8) -> Iterator[bytes]:
    """:func:`message_events` as server-sent events (``event:`` and ``data:`` lines)."""
    for event in message_events(message, pieces=pieces):
        data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        yield f"event: {event['type']}\ndata: {data}\n\n".encode()


def _check_count(name: str, value: Any) -> str | None:
    return None if value is None or is_count(value) else f"usage {_n(name)} not a count"


def _check_usage(usage: Any) -> str | None:
    """Absent, or an object whose ``*_tokens`` are counts or null and whose nested objects
    (``cache_creation``, ``server_tool_use`` ...) hold counts or nulls."""
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        return "usage not an object"
    for key, value in usage.items():
        if str(key).endswith("_tokens"):
            why = _check_count(key, value)
        elif key in ("cache_creation", "server_tool_use", "output_tokens_details"):
            why = _check_nested(key, value)
        else:
            why = None
        if why:
            return why
    return None


def _check_nested(key: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return f"usage {key} not an object"
    for sub, count in value.items():
        why = _check_count(f"{key}.{sub}", count)
        if why:
            return why
    return None


def _check_block(block: Any) -> str | None:
    if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
        return "content block not an object with a type"
    kind = block["type"]
    if kind == "text":
        if not isinstance(block.get("text"), str):
            return "text block text not a string"
        citations = block.get("citations")
        if citations is not None and not (
            isinstance(citations, list) and all(isinstance(c, Mapping) for c in citations)
        ):
            return "text block citations not a list of objects"
    elif kind in TOOL_BLOCKS:
        for field in ("id", "name"):
            if not isinstance(block.get(field), str):
                return f"{kind} block {field} not a string"
        if not isinstance(block.get("input"), Mapping):
            return f"{kind} block input not an object"
    elif kind == "thinking":
        if not isinstance(block.get("thinking"), str):
            return "thinking block thinking not a string"
        if not _opt(block.get("signature"), str):
            return "thinking block signature not a string"
    return None


def check_message(body: Any) -> str | None:
    """``None`` when ``body`` is a well-formed Message that can be served (as a body or replayed
    as a stream), else a short reason: ``type`` ``"message"``, ``role`` ``"assistant"``, string
    ``id`` and ``model``; ``content`` a list of blocks, each an object with a string ``type``
    (a ``text`` block's ``text`` a string and its ``citations`` null or a list of objects; a
    ``tool_use`` or ``server_tool_use`` block's ``id`` and ``name`` strings and ``input`` an
    object; a ``thinking`` block's ``thinking`` a string, its ``signature`` a string when
    present); ``stop_reason`` and ``stop_sequence`` strings or null; ``usage``, when present, an
    object whose ``*_tokens`` counts are non-negative integers (``true`` is not one) or null,
    and whose nested objects hold such counts. Whether the stop reason may be stored is not
    this check's business."""
    if not isinstance(body, Mapping):
        return "not an object"
    if body.get("type") != "message":
        return f"type {_n(body.get('type'))} not message"
    if body.get("role") != "assistant":
        return f"role {_n(body.get('role'))} not assistant"
    for key in ("id", "model"):
        if not isinstance(body.get(key), str):
            return f"{key} not a string"
    content = body.get("content")
    if not isinstance(content, list):
        return "content not a list"
    for block in content:
        why = _check_block(block)
        if why:
            return why
    for key in ("stop_reason", "stop_sequence"):
        if not _opt(body.get(key), str):
            return f"{key} not a string or null"
    return _check_usage(body.get("usage"))
