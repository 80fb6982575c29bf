"""The Responses API's event stream, both ways.

A streamed ``POST /v1/responses`` answers with typed server-sent events (``event: <type>`` and a
``data:`` object carrying the same ``type`` and a ``sequence_number``): ``response.created``,
``response.in_progress``, the output items and their deltas, and one terminal event,
``response.completed`` (or ``response.incomplete``, ``response.failed``, ``error``). There is no
``data: [DONE]``.

* :class:`ResponsesStreamAssembler` reads a relayed stream: the terminal ``response.completed``
  event carries the whole final response, which is what is stored, and only when no ``error``
  or ``response.failed`` event came, the response's ``status`` is ``completed``, nothing but
  comments followed it, and the response says what the client was sent: the text, refusal and
  function-call argument deltas, concatenated per output item and content part, equal the final
  response's parts (a client that prints deltas must not see one answer while another is
  stored). It splits and bounds events as :class:`StreamAssembler` does.
* :func:`response_events` / :func:`responses_sse` replay a stored response as a well-formed
  stream: the same events a live one carries, with sequence numbers from 0 and each text in
  several deltas.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from cachekit.llm.streaming import StreamAssembler, only_comments, split_text

__all__ = [
    "DELTA_EVENTS",
    "TERMINAL_EVENTS",
    "ResponsesStreamAssembler",
    "response_events",
    "responses_sse",
]

#: The events that end a Responses stream; only ``response.completed`` may be stored.
TERMINAL_EVENTS = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error"}
)

#: The delta events checked against the final response, and the field of the final response's
#: part (or item, for function-call arguments) their concatenation must equal.
DELTA_EVENTS: dict[str, str] = {
    "response.output_text.delta": "text",
    "response.refusal.delta": "refusal",
    "response.function_call_arguments.delta": "arguments",
}

#: Where deltas go: (the final field, output index, content index or ``None`` for an item's).
_Where = tuple[str, Any, Any]


def _final_parts(response: dict[str, Any]) -> dict[_Where, Any]:
    """The final response's streamed fields: each message part's ``text`` or ``refusal``, each
    function call's ``arguments``, by where their deltas would come."""
    found: dict[_Where, Any] = {}
    output = response.get("output")
    for i, item in enumerate(output if isinstance(output, list) else ()):
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "function_call":
            found["arguments", i, None] = item.get("arguments")
        elif kind == "message":
            content = item.get("content")
            for j, part in enumerate(content if isinstance(content, list) else ()):
                if isinstance(part, dict) and part.get("type") in ("output_text", "refusal"):
                    field = "text" if part["type"] == "output_text" else "refusal"
                    found[field, i, j] = part.get(field)
    return found


def _where(where: _Where) -> str:
    field, i, j = where  # indices as the upstream sent them: bounded in the text
    return f"{field} of output {str(i)[:20]}" + ("" if j is None else f" content {str(j)[:20]}")


def _disagreement(sent: dict[_Where, list[str]], response: dict[str, Any]) -> str | None:
    """How the deltas ``sent`` and the final ``response`` disagree, or ``None``: deltas for a
    part the response lacks, a part whose text is not its deltas joined, or (when any deltas
    came) a part with text that no delta carried."""
    final = _final_parts(response)
    for where, pieces in sent.items():
        if where not in final:
            return f"deltas for {_where(where)}, which the final response lacks"
        if "".join(pieces) != final[where]:
            return f"the final {_where(where)} is not its deltas joined"
    if sent:
        for where, value in final.items():
            if where not in sent and value:
                return f"the final {_where(where)} came in no delta"
    return None


class ResponsesStreamAssembler(StreamAssembler):
    """Feed it a Responses API event stream as it arrives (:meth:`feed_events`); :meth:`result`
    is the final response once :attr:`complete`. :attr:`mismatch` says how the final response
    disagreed with the deltas sent before it (then the stream is not complete)."""

    def __init__(self, **bounds: Any) -> None:
        super().__init__(**bounds)
        self._final: dict[str, Any] | None = None
        self._terminal: str | None = None
        #: The deltas of :data:`DELTA_EVENTS` seen, by where they go; dropped at the end.
        self._sent: dict[_Where, list[str]] = {}
        #: How the final response disagreed with the deltas the client was sent, or ``None``.
        self.mismatch: str | None = None

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
        field = DELTA_EVENTS.get(kind)
        if field is not None:
            self._add_delta(field, obj)
        elif kind in TERMINAL_EVENTS:
            self._terminal = kind
            self.done = True
            response = obj.get("response")
            if kind != "response.completed" or not isinstance(response, dict):
                self.broken = True
            else:
                self._final = response
                if self.mismatch is None:
                    self.mismatch = _disagreement(self._sent, response)
            self._sent = {}
        return obj

    def _add_delta(self, field: str, event: dict[str, Any]) -> None:
        delta = event.get("delta")
        content = None if field == "arguments" else event.get("content_index")
        where = (field, event.get("output_index"), content)
        if not isinstance(delta, str):
            self.mismatch = self.mismatch or f"a delta of {_where(where)} that is not a string"
            return
        self._sent.setdefault(where, []).append(delta)

    @property
    def incomplete_reason(self) -> str | None:
        """Why the stream may not be stored, or ``None``: an ``error`` or ``response.failed``
        event (or an undecodable one), a bound passed, no terminal event, data after it, a
        final response that is not ``completed``, or one that is not what its deltas said
        (``mismatch: ...``, :attr:`mismatch`)."""
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
        if self.mismatch is not None:
            return f"mismatch: {self.mismatch}"
        return None

    @property
    def not_stored_reason(self) -> str | None:
        """:attr:`StreamAssembler.not_stored_reason`, and ``stream_mismatch`` for a final
        response that disagreed with the deltas sent (:attr:`mismatch`)."""
        why = super().not_stored_reason
        if why == "incomplete_stream" and (self.incomplete_reason or "").startswith("mismatch"):
            return "stream_mismatch"
        return why

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
