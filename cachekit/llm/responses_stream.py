"""The Responses API's event stream, both ways.

A streamed ``POST /v1/responses`` answers with typed server-sent events (``event: <type>`` and a
``data:`` object carrying the same ``type`` and a ``sequence_number``): ``response.created``,
``response.in_progress``, the output items and their deltas, and one terminal event,
``response.completed`` (or ``response.incomplete``, ``response.failed``, ``error``). There is no
``data: [DONE]``.

* :class:`ResponsesStreamAssembler` reads a relayed stream: the terminal ``response.completed``
  event carries the whole final response, which is what is stored, and only when no ``error``
  or ``response.failed`` event came, the response's ``status`` is ``completed`` and nothing but
  comments followed it. It splits and bounds events as :class:`StreamAssembler` does.
* :func:`response_events` / :func:`responses_sse` replay a stored response as a well-formed
  stream: the same events a live one carries, with sequence numbers from 0 and each text in
  several deltas.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from cachekit.llm.streaming import StreamAssembler, only_comments, split_text

__all__ = ["TERMINAL_EVENTS", "ResponsesStreamAssembler", "response_events", "responses_sse"]

#: The events that end a Responses stream; only ``response.completed`` may be stored.
TERMINAL_EVENTS = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error"}
)


class ResponsesStreamAssembler(StreamAssembler):
    """Feed it a Responses API event stream as it arrives (:meth:`feed_events`); :meth:`result`
    is the final response once :attr:`complete`."""

    def __init__(self, **bounds: Any) -> None:
        super().__init__(**bounds)
        self._final: dict[str, Any] | None = None
        self._terminal: str | None = None

    def parse_event(self, event: bytes) -> dict[str, Any] | None:
        if self._terminal is not None:
            if not only_comments(event):
                self.after_done = True
            return None
        lines = event.replace(b"\r\n", b"\n").split(b"\n")
        data = [ln[5:].lstrip() for ln in lines if ln.startswith(b"data:")]
        if not data:
            return None  # comments and keep-alives
        try:
            obj = json.loads(b"\n".join(data))
        except ValueError:
            self.broken = True
            return None
        kind = obj.get("type") if isinstance(obj, dict) else None
        if not isinstance(kind, str):
            self.broken = True
            return None
        self.chunks += 1
        if kind in TERMINAL_EVENTS:
            self._terminal = kind
            self.done = True
            response = obj.get("response")
            if kind != "response.completed" or not isinstance(response, dict):
                self.broken = True
            else:
                self._final = response
        return obj

    @property
    def incomplete_reason(self) -> str | None:
        """Why the stream may not be stored, or ``None``: an ``error`` or ``response.failed``
        event (or an undecodable one), a bound passed, no terminal event, data after it, or a
        final response that is not ``completed``."""
        if self.broken:
            return "error event" if self._terminal != "response.incomplete" else "incomplete"
        if self.too_large:
            return "too large"
        if self._final is None:
            return "no response.completed"
        if self.after_done or not only_comments(self.rest()):
            return "data after response.completed"
        if self._final.get("status") != "completed":
            return f"status {self._final.get('status')}"
        return None

    def result(self) -> dict[str, Any] | None:
        """The final response (what a non-streamed request would have returned), or ``None``."""
        return self._final


def _event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


def _text_part_events(
    item_id: str, out_i: int, part_i: int, part: dict[str, Any], pieces: int
) -> Iterator[dict[str, Any]]:
    where = {"item_id": item_id, "output_index": out_i, "content_index": part_i}
    kind = part.get("type")
    if kind == "refusal":
        yield _event("response.content_part.added", **where, part={**part, "refusal": ""})
        for piece in split_text(part.get("refusal") or "", pieces):
            yield _event("response.refusal.delta", **where, delta=piece)
        yield _event("response.refusal.done", **where, refusal=part.get("refusal") or "")
    elif kind == "output_text":
        yield _event("response.content_part.added", **where, part={**part, "text": ""})
        for piece in split_text(part.get("text") or "", pieces):
            yield _event("response.output_text.delta", **where, delta=piece, logprobs=[])
        yield _event("response.output_text.done", **where, text=part.get("text") or "", logprobs=[])
    else:
        yield _event("response.content_part.added", **where, part=part)
    yield _event("response.content_part.done", **where, part=part)


def _item_events(item: dict[str, Any], out_i: int, pieces: int) -> Iterator[dict[str, Any]]:
    item_id = str(item.get("id") or "")
    kind = item.get("type")
    if kind == "message":
        yield _event(
            "response.output_item.added",
            output_index=out_i,
            item={**item, "status": "in_progress", "content": []},
        )
        for part_i, part in enumerate(item.get("content") or ()):
            if isinstance(part, dict):
                yield from _text_part_events(item_id, out_i, part_i, part, pieces)
    elif kind == "function_call":
        args = item.get("arguments") or ""
        yield _event(
            "response.output_item.added",
            output_index=out_i,
            item={**item, "status": "in_progress", "arguments": ""},
        )
        for piece in split_text(args, max(2, pieces // 2)):
            yield _event(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=out_i,
                delta=piece,
            )
        yield _event(
            "response.function_call_arguments.done",
            item_id=item_id,
            output_index=out_i,
            arguments=args,
        )
    else:  # reasoning, tool calls of hosted tools ...: whole, as added then done
        yield _event("response.output_item.added", output_index=out_i, item=item)
    yield _event("response.output_item.done", output_index=out_i, item=item)


def response_events(response: dict[str, Any], *, pieces: int = 8) -> list[dict[str, Any]]:
    """A stored ``response`` as the events of a live stream, numbered from 0: created and in
    progress (no output yet), each output item with its parts and text in about ``pieces``
    deltas, and ``response.completed`` with the whole response."""
    opening = {**response, "status": "in_progress", "output": [], "usage": None}
    events = [
        _event("response.created", response=opening),
        _event("response.in_progress", response=opening),
    ]
    for out_i, item in enumerate(response.get("output") or ()):
        if isinstance(item, dict):
            events.extend(_item_events(item, out_i, pieces))
    events.append(_event("response.completed", response=response))
    for n, event in enumerate(events):
        event["sequence_number"] = n
    return events


def responses_sse(response: dict[str, Any], *, pieces: int = 8) -> Iterator[bytes]:
    """:func:`response_events` as server-sent events (``event:`` and ``data:`` lines)."""
    for event in response_events(response, pieces=pieces):
        data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        yield f"event: {event['type']}\ndata: {data}\n\n".encode()
