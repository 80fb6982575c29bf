"""The fake upstream's Anthropic Messages API (for tests, never for production).

:func:`message_routes` gives a :class:`~cachekit.testing.upstream.FakeUpstream` two routes, in the
wire shapes the official ``anthropic`` client parses:

* ``POST /v1/messages``: a ``Message``, or with ``stream: true`` its server-sent events
  (``message_start``, a ``ping``, each content block's ``content_block_start`` / deltas /
  ``content_block_stop``, ``message_delta``, ``message_stop``);
* ``POST /v1/messages/count_tokens``: ``{"input_tokens": <words>}``.

A request needs a string ``model``, an integer ``max_tokens`` of at least 1 and a non-empty list of
``messages``, else it gets a 400 ``invalid_request_error``. The answer is ``Answer #<n> to:
<text>``, ``n`` from the upstream's one answer counter and ``<text>`` the last user message's text
(its ``text`` blocks, or a ``tool_result``'s content). With ``tools`` (unless ``tool_choice`` is
``{"type": "none"}``) it is a text block ``Calling <name>`` and a ``tool_use`` of the first tool
with input ``{"q": <text>}``; with ``thinking`` of type ``enabled`` a ``thinking`` block comes
first. Token counts are words. The model name selects a behaviour:

* ``fake-error``: HTTP 500, an ``api_error``;
* ``fake-slow``: waits the upstream's ``slow_s`` before answering;
* ``fake-length``: ``stop_reason: max_tokens``; ``fake-refusal``: ``stop_reason: refusal``;
* ``fake-break``: a stream that breaks off after its third frame (not streamed: HTTP 502);
* ``fake-gated``: a stream that waits for the upstream's ``gate`` before its third frame;
* ``fake-error-event``: a stream that sends ``message_start``, a block's start and one delta,
  then an ``event: error`` (``overloaded_error``) and ends (not streamed: HTTP 529).

The events are built here, independently of :mod:`cachekit.llm`, so that the fake checks the code
under test rather than agreeing with it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

if TYPE_CHECKING:
    from cachekit.testing.upstream import FakeUpstream

__all__ = ["message_routes"]

#: The error event ``fake-error-event`` ends its stream with (and the body of its HTTP 529).
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def _error(status: int, kind: str, message: str) -> Response:
    """An Anthropic-style error response."""
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return JSONResponse(body, status_code=status)


def _invalid(body: Any, *, needs_max_tokens: bool) -> str | None:
    """Why ``body`` is not a Messages request, or None when it is."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    if not isinstance(body.get("model"), str):
        return "model: field required (a string)"
    if needs_max_tokens:
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            return "max_tokens: field required (an integer of at least 1)"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: field required (a non-empty list)"
    return None


def _block_text(block: Any) -> str:
    """The text of one content block: a ``text`` block's text, a ``tool_result``'s content."""
    if not isinstance(block, dict):
        return ""
    if block.get("type") == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            return " ".join(_block_text(b) for b in content if isinstance(b, dict))
        return str(content or "")
    if block.get("type", "text") == "text":
        return str(block.get("text", ""))
    return ""


def _request_text(body: dict[str, Any]) -> str:
    """The text of the last user message of ``body``."""
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(t for t in map(_block_text, content) if t)
            return str(content or "")
    return ""


def _words(text: str) -> int:
    return len(text.split())


def _wants_tool(body: dict[str, Any]) -> bool:
    tools = body.get("tools")
    choice = body.get("tool_choice")
    off = isinstance(choice, dict) and choice.get("type") == "none"
    return isinstance(tools, list) and bool(tools) and not off


def _thinks(body: dict[str, Any]) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") == "enabled"


def _said(block: dict[str, Any]) -> str:
    """What content ``block`` says, as its output tokens count it."""
    if block["type"] == "tool_use":
        return json.dumps(block["input"])
    return str(block.get("thinking" if block["type"] == "thinking" else "text", ""))


def _message(body: dict[str, Any], n: int) -> dict[str, Any]:
    """The whole ``Message`` answering ``body`` as answer number ``n``."""
    text = _request_text(body)
    model = body["model"]
    content: list[dict[str, Any]] = []
    if _thinks(body):
        thought = f"Thinking about: {text}"
        content.append({"type": "thinking", "thinking": thought, "signature": f"sig_fake{n}"})
    stop = "end_turn"
    if _wants_tool(body):
        tool = body["tools"][0]
        name = str(tool.get("name", "tool")) if isinstance(tool, dict) else "tool"
        content.append({"type": "text", "text": f"Calling {name}"})
        call = {"type": "tool_use", "id": f"toolu_fake{n}", "name": name, "input": {"q": text}}
        content.append(call)
        stop = "tool_use"
    else:
        content.append({"type": "text", "text": f"Answer #{n} to: {text}"})
    stop = {"fake-length": "max_tokens", "fake-refusal": "refusal"}.get(model, stop)
    said = " ".join(_said(b) for b in content)
    return {
        "id": f"msg_fake{n}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": _words(text),
            "output_tokens": _words(said),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def _pieces(text: str, n: int = 4) -> list[str]:
    """``text`` cut into about ``n`` pieces (at least one)."""
    size = max(1, -(-len(text) // n))
    return [text[k : k + size] for k in range(0, len(text), size)] or [""]


def _block_events(block: dict[str, Any], i: int) -> Iterator[dict[str, Any]]:
    """The events that stream content ``block`` at index ``i``."""
    kind = block["type"]
    if kind == "thinking":
        start: dict[str, Any] = {**block, "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"])]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "tool_use":
        start = {**block, "input": {}}
        args = json.dumps(block["input"])
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(args)]
    else:
        start = {**block, "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]
    yield {"type": "content_block_start", "index": i, "content_block": start}
    for delta in deltas:
        yield {"type": "content_block_delta", "index": i, "delta": delta}
    yield {"type": "content_block_stop", "index": i}


def _stream_events(message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The stream events of ``message``, whole: what an SDK accumulates back into it."""
    usage = {**message["usage"], "output_tokens": 1}
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
    yield {"type": "message_start", "message": start}
    yield {"type": "ping"}
    for i, block in enumerate(message["content"]):
        yield from _block_events(block, i)
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": message["usage"]["output_tokens"]},
    }
    yield {"type": "message_stop"}


def _frame(event: dict[str, Any]) -> bytes:
    """One server-sent event: its type on the ``event:`` line, the event as ``data:``."""
    data = json.dumps(event, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


def _error_event_frames(message: dict[str, Any]) -> list[bytes]:
    """``fake-error-event``'s stream: the message's start, a block's start and first delta,
    then an overloaded error."""
    events = list(_stream_events(message))
    first = [e for e in events if e["type"] != "ping"][:3]
    return [*map(_frame, first), _frame(OVERLOADED)]


def message_routes(upstream: FakeUpstream) -> list[Route]:
    """The Messages API routes of ``upstream``: its calls recorded, its answers numbered from
    its counter, its streams sent through :meth:`~cachekit.testing.upstream.FakeUpstream.frames`."""

    async def messages(request: Request) -> Response:
        body, _ = await upstream.record(request)
        why = _invalid(body, needs_max_tokens=True)
        if why:
            return _error(400, "invalid_request_error", why)
        model = body["model"]
        streamed = body.get("stream") is True
        if model == "fake-error":
            return _error(500, "api_error", "the fake upstream failed on purpose")
        if model == "fake-error-event" and not streamed:
            return JSONResponse(OVERLOADED, status_code=529)
        if model == "fake-slow":
            await asyncio.sleep(upstream.slow_s)
        message = _message(body, upstream.next_answer())
        if not streamed:
            if model == "fake-break":
                return _error(502, "api_error", "broken")
            return JSONResponse(message)
        if model == "fake-error-event":
            frames = _error_event_frames(message)
        else:
            frames = [_frame(e) for e in _stream_events(message)]
        sent = upstream.frames(frames, broken=model == "fake-break", gated=model == "fake-gated")
        return StreamingResponse(sent, media_type="text/event-stream")

    async def count_tokens(request: Request) -> Response:
        body, _ = await upstream.record(request)
        why = _invalid(body, needs_max_tokens=False)
        if why:
            return _error(400, "invalid_request_error", why)
        return JSONResponse({"input_tokens": _words(_request_text(body))})

    return [
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
    ]
