"""A fake OpenAI- and Anthropic-compatible upstream for tests and benchmarks (never for
production).

Deterministic answers, served over real HTTP: ``FakeUpstream().app`` is an ASGI app, and
``python -m cachekit.testing.upstream --port N [--latency S]`` serves it under uvicorn. The model
name selects a behaviour:

* ``fake-error``: HTTP 500 with an OpenAI-style error body;
* ``fake-break``: a streamed answer that breaks off after a few chunks (non-streamed: 502);
* ``fake-length``: ``finish_reason: length`` (for ``/v1/responses`` see below);
* ``fake-slow``: waits ``slow_s`` (default 3 s) before answering;
* ``fake-held`` (chat and completions): a whole answer sent once :attr:`gate` is set;
* ``fake-gated``: a streamed answer that sends two chunks, then waits until :attr:`gate` is set
  (so a test can check that a relay forwards chunks before the stream ends);
* anything else: ``Answer #<n> to: <last message text>`` with ``n`` counting the upstream's
  answers, so a test tells a cached answer (same ``n``) from a fresh one.

Requests with ``tools`` get a tool call; ``n`` gives that many choices; embeddings are hashed
vectors of the inputs. Every request is recorded in :attr:`FakeUpstream.calls`.

``POST /v1/responses`` speaks the Responses API, whole or streamed (typed ``event:`` lines, no
``[DONE]``), answering the last user input the same way (a ``function_call`` item when the request
has ``tools``). The model names above work there too, and:

* ``fake-length``: ``status: incomplete`` for ``max_output_tokens`` (streamed: ends with
  ``response.incomplete``) instead of a ``finish_reason``;
* ``fake-failed``: ``status: failed`` with an ``error`` (streamed: ends with ``response.failed``);
* ``fake-refusal``: the message is a ``refusal`` part instead of ``output_text``.

``POST /v1/messages`` (and ``/v1/messages/count_tokens``) speaks Anthropic's Messages API, whole
or streamed: :mod:`cachekit.testing.fake_messages` says how, and which model names it honours.

Other routes: ``GET /v1/models``; ``/v1/echo/...`` (any method) answers with what it received,
with the status given by the ``status`` query parameter; ``GET /v1/stream-echo?n=K`` streams K
lines.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from cachekit.testing.fake_messages import message_routes

__all__ = ["FakeUpstream", "UpstreamServer"]


#: The methods the echo route answers.
ECHO_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


def _text_of(body: dict[str, Any]) -> str:
    if "messages" in body:
        content = body["messages"][-1].get("content")
        if isinstance(content, list):
            return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        return str(content or "")
    return str(body.get("prompt", ""))


def _event(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _typed_event(obj: dict[str, Any]) -> bytes:
    """A Responses API SSE event: an ``event:`` line with its type, compact JSON ``data:``."""
    data = json.dumps(obj, separators=(",", ":"))
    return f"event: {obj['type']}\ndata: {data}\n\n".encode()


def _input_text(body: dict[str, Any]) -> str:
    """The text a Responses API request asks about: ``input`` itself when a string, else the
    last user item's text."""
    items = body.get("input")
    if not isinstance(items, list):
        return str(items or "")
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, list):
                parts = [p for p in content if isinstance(p, dict)]
                return "\n".join(
                    str(p.get("text", "")) for p in parts if p.get("type") == "input_text"
                )
            return str(content or "")
    return ""


def _pieces(text: str, n: int = 4) -> list[str]:
    """``text`` cut into about ``n`` pieces (at least one)."""
    size = max(1, -(-len(text) // n))
    return [text[k : k + size] for k in range(0, len(text), size)] or [""]


def _part_events(part: dict[str, Any], where: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The events that stream content ``part`` (output text or refusal) of a message."""
    field = "refusal" if part["type"] == "refusal" else "text"
    yield {"type": "response.content_part.added", **where, "part": {**part, field: ""}}
    if part["type"] == "refusal":
        for piece in _pieces(part["refusal"]):
            yield {"type": "response.refusal.delta", **where, "delta": piece}
        yield {"type": "response.refusal.done", **where, "refusal": part["refusal"]}
    else:
        for piece in _pieces(part["text"]):
            yield {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
        yield {"type": "response.output_text.done", **where, "text": part["text"], "logprobs": []}
    yield {"type": "response.content_part.done", **where, "part": part}


def _item_events(item: dict[str, Any], i: int) -> Iterator[dict[str, Any]]:
    """The events that stream output ``item`` (a message or a function call) at index ``i``."""
    where = {"item_id": item["id"], "output_index": i}
    if item["type"] == "function_call":
        added = {**item, "arguments": "", "status": "in_progress"}
        yield {"type": "response.output_item.added", "output_index": i, "item": added}
        for piece in _pieces(item["arguments"]):
            yield {"type": "response.function_call_arguments.delta", **where, "delta": piece}
        args = item["arguments"]
        yield {"type": "response.function_call_arguments.done", **where, "arguments": args}
    else:
        added = {**item, "content": [], "status": "in_progress"}
        yield {"type": "response.output_item.added", "output_index": i, "item": added}
        for j, part in enumerate(item["content"]):
            yield from _part_events(part, {**where, "content_index": j})
    yield {"type": "response.output_item.done", "output_index": i, "item": item}


def _response_events(done: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The Responses API stream events of the final response ``done``, numbered from 0."""
    start = {
        **done,
        "status": "in_progress",
        "output": [],
        "usage": None,
        "error": None,
        "incomplete_details": None,
    }
    last = {
        "completed": "response.completed",
        "incomplete": "response.incomplete",
        "failed": "response.failed",
    }[done["status"]]

    def events() -> Iterator[dict[str, Any]]:
        yield {"type": "response.created", "response": start}
        yield {"type": "response.in_progress", "response": start}
        for i, item in enumerate(done["output"]):
            yield from _item_events(item, i)
        yield {"type": last, "response": done}

    for k, event in enumerate(events()):
        yield {**event, "sequence_number": k}


def _error(status: int, message: str) -> Response:
    """An OpenAI-style error response."""
    error = {"message": message, "type": "server_error", "param": None, "code": None}
    return JSONResponse({"error": error}, status_code=status)


class FakeUpstream:
    """The fake server's state and its ASGI app (:attr:`app`)."""

    def __init__(self, latency: float = 0.0, slow_s: float = 3.0) -> None:
        self.latency = latency
        self.slow_s = slow_s
        #: Where it answers, once served (:func:`serving`); empty before.
        self.url = ""
        self.calls: list[dict[str, Any]] = []
        self.gate = threading.Event()
        self.answers = 0
        self._lock = threading.Lock()
        self.app = self._build()

    def count(self, path: str = "/v1/chat/completions") -> int:
        """Requests received on ``path``."""
        return sum(1 for c in self.calls if c["path"] == path)

    def next_answer(self) -> int:
        """The next answer's number (1, 2, ...), one counter for every route."""
        with self._lock:
            self.answers += 1
            return self.answers

    def _completion(self, body: dict[str, Any], chat: bool) -> dict[str, Any]:
        text = _text_of(body)
        model = body.get("model", "")
        finish = "length" if model == "fake-length" else "stop"
        choices: list[dict[str, Any]] = []
        words = 0
        for i in range(int(body.get("n") or 1)):
            answer = f"Answer #{self.next_answer()} to: {text}"
            words += len(answer.split())
            if not chat:
                choices.append(
                    {"index": i, "text": answer, "logprobs": None, "finish_reason": finish}
                )
                continue
            msg: dict[str, Any] = {"role": "assistant", "content": answer, "refusal": None}
            if body.get("tools"):
                name = body["tools"][0].get("function", {}).get("name", "tool")
                msg = {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "tool_calls": [
                        {
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps({"q": text})},
                        }
                    ],
                }
                finish = "tool_calls"
            choices.append({"index": i, "message": msg, "logprobs": None, "finish_reason": finish})
        prompt_tokens = len(text.split())
        completion_tokens = words
        return {
            "id": f"chatcmpl-{self.answers}",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _chunks(self, done: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
        base = {k: done[k] for k in ("id", "created", "model", "system_fingerprint")}
        base["object"] = "chat.completion.chunk"
        out = []
        for c in done["choices"]:
            i, msg = c["index"], c["message"]

            def delta(d: dict[str, Any], finish: str | None = None, i: int = i) -> dict[str, Any]:
                return {
                    **base,
                    "choices": [
                        {"index": i, "delta": d, "logprobs": None, "finish_reason": finish}
                    ],
                }

            out.append(delta({"role": "assistant", "content": ""}))
            for word in (msg.get("content") or "").split(" "):
                out.append(delta({"content": word + " "}))
            if out and msg.get("content"):  # undo the trailing space of the last word
                last = out[-1]["choices"][0]["delta"]
                last["content"] = last["content"][:-1]
            for j, tc in enumerate(msg.get("tool_calls") or ()):
                fn = tc["function"]
                out.append(
                    delta(
                        {
                            "tool_calls": [
                                {
                                    "index": j,
                                    "id": tc["id"],
                                    "type": "function",
                                    "function": {"name": fn["name"], "arguments": ""},
                                }
                            ]
                        }
                    )
                )
                args = fn["arguments"]
                for k in range(0, len(args), 5):
                    out.append(
                        delta(
                            {
                                "tool_calls": [
                                    {"index": j, "function": {"arguments": args[k : k + 5]}}
                                ]
                            }
                        )
                    )
            out.append(delta({}, c["finish_reason"]))
        if include_usage:
            out.append({**base, "choices": [], "usage": done["usage"]})
        return out

    def _output_item(self, body: dict[str, Any], text: str, n: int) -> dict[str, Any]:
        """The one output item of answer ``n``: a message, a refusal or a function call."""
        cut = body.get("model") in ("fake-length", "fake-failed")
        status = "incomplete" if cut else "completed"
        if body.get("tools"):
            name = body["tools"][0].get("name", "tool")
            return {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": name,
                "arguments": json.dumps({"q": text}),
                "status": status,
            }
        part: dict[str, Any] = {
            "type": "output_text",
            "text": f"Answer #{n} to: {text}",
            "annotations": [],
        }
        if body.get("model") == "fake-refusal":
            part = {"type": "refusal", "refusal": "I can't help with that."}
        return {
            "type": "message",
            "id": f"msg_{n}",
            "status": status,
            "role": "assistant",
            "content": [part],
        }

    def _response(self, body: dict[str, Any]) -> dict[str, Any]:
        """A final Responses API object answering ``body``, its status as the model name asks."""
        text = _input_text(body)
        model = body.get("model", "")
        n = self.next_answer()
        item = self._output_item(body, text, n)
        said = item.get("arguments") or " ".join(
            p.get("text") or p.get("refusal") or "" for p in item.get("content", [])
        )
        status, error, incomplete = "completed", None, None
        if model == "fake-length":
            status, incomplete = "incomplete", {"reason": "max_output_tokens"}
        elif model == "fake-failed":
            status, error = "failed", {"code": "server_error", "message": "failed on purpose"}
        input_tokens, output_tokens = len(text.split()), len(said.split())
        return {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "error": error,
            "incomplete_details": incomplete,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": model,
            "output": [item],
            "parallel_tool_calls": True,
            "previous_response_id": body.get("previous_response_id"),
            "temperature": body.get("temperature", 1.0),
            "top_p": body.get("top_p", 1.0),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []),
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "metadata": body.get("metadata") or {},
            "usage": {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input_tokens + output_tokens,
            },
        }

    def _embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = []
        for i, text in enumerate(inputs):
            digest = hashlib.sha256(str(text).encode()).digest()
            data.append(
                {"object": "embedding", "index": i, "embedding": [b / 255.0 for b in digest[:8]]}
            )
        tokens = sum(len(str(t).split()) for t in inputs)
        return {
            "object": "list",
            "data": data,
            "model": body.get("model"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    async def record(self, request: Request) -> tuple[dict[str, Any], bytes]:
        """Record ``request`` in :attr:`calls` (after :attr:`latency`); its JSON body and bytes."""
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        self.calls.append(
            {
                "path": request.url.path,
                "method": request.method,
                "headers": dict(request.headers),
                "body": body,
                "raw": raw,
                "query": request.url.query,
            }
        )
        if self.latency:
            await asyncio.sleep(self.latency)
        return body, raw

    async def _generate(self, body: dict[str, Any], chat: bool) -> Response:
        """A completion (chat or legacy), whole or streamed, as the model name asks."""
        model = body.get("model")
        if model == "fake-error":
            return _error(500, "the fake upstream failed on purpose")
        if model == "fake-slow":
            await asyncio.sleep(self.slow_s)
        if model == "fake-held":  # a whole answer held until the gate opens
            await asyncio.to_thread(self.gate.wait, 30.0)
        done = self._completion(body, chat)
        if not body.get("stream"):
            if model == "fake-break":
                return _error(502, "broken")
            return JSONResponse(done)
        include = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = (
            self._chunks(done, include)
            if chat
            else [{**done, "choices": [c]} for c in done["choices"]]
        )
        frames = [*map(_event, chunks), b"data: [DONE]\n\n"]
        events = self.frames(frames, broken=model == "fake-break", gated=model == "fake-gated")
        return StreamingResponse(events, media_type="text/event-stream")

    async def _respond(self, body: dict[str, Any]) -> Response:
        """A Responses API answer, whole or streamed, as the model name asks."""
        model = body.get("model")
        if model == "fake-error":
            return _error(500, "the fake upstream failed on purpose")
        if model == "fake-slow":
            await asyncio.sleep(self.slow_s)
        done = self._response(body)
        if not body.get("stream"):
            if model == "fake-break":
                return _error(502, "broken")
            return JSONResponse(done)
        frames = [_typed_event(e) for e in _response_events(done)]
        events = self.frames(frames, broken=model == "fake-break", gated=model == "fake-gated")
        return StreamingResponse(events, media_type="text/event-stream")

    async def frames(
        self, frames: list[bytes], *, broken: bool, gated: bool
    ) -> AsyncIterator[bytes]:
        """The SSE ``frames`` one by one (the body of a streamed answer); ``broken`` breaks off
        after the third, ``gated`` waits for :attr:`gate` before the third."""
        for k, frame in enumerate(frames):
            if broken and k == 3:
                raise ConnectionResetError("the fake upstream broke off on purpose")
            if gated and k == 2:
                await asyncio.to_thread(self.gate.wait, 30.0)
            yield frame
            await asyncio.sleep(0)

    def _build(self) -> Any:

        async def chat(request: Request) -> Response:
            body, _ = await self.record(request)
            return await self._generate(body, chat=True)

        async def completions(request: Request) -> Response:
            body, _ = await self.record(request)
            return await self._generate(body, chat=False)

        async def responses(request: Request) -> Response:
            body, _ = await self.record(request)
            return await self._respond(body)

        async def embeddings(request: Request) -> Response:
            body, _ = await self.record(request)
            if body.get("model") == "fake-error":
                return _error(500, "the fake upstream failed on purpose")
            return JSONResponse(self._embeddings(body))

        async def models(request: Request) -> Response:
            await self.record(request)
            return JSONResponse(
                {
                    "object": "list",
                    "data": [
                        {
                            "id": "fake-model",
                            "object": "model",
                            "created": 0,
                            "owned_by": "cachekit",
                        }
                    ],
                }
            )

        async def echo(request: Request) -> Response:
            _, raw = await self.record(request)
            status = int(request.query_params.get("status", "200"))
            return JSONResponse(
                {
                    "method": request.method,
                    "path": request.url.path,
                    "query": request.url.query,
                    "body": raw.decode(errors="replace"),
                    "headers": dict(request.headers),
                },
                status_code=status,
                headers={"x-upstream": "fake"},
            )

        async def stream_echo(request: Request) -> Response:
            await self.record(request)
            n = int(request.query_params.get("n", "3"))

            async def lines() -> AsyncIterator[bytes]:
                for i in range(n):
                    yield f"line {i}\n".encode()
                    await asyncio.sleep(0)

            return StreamingResponse(lines(), media_type="text/plain")

        return Starlette(
            routes=[
                Route("/v1/chat/completions", chat, methods=["POST"]),
                Route("/v1/completions", completions, methods=["POST"]),
                Route("/v1/responses", responses, methods=["POST"]),
                Route("/v1/embeddings", embeddings, methods=["POST"]),
                Route("/v1/models", models, methods=["GET"]),
                Route("/v1/echo/{rest:path}", echo, methods=ECHO_METHODS),
                Route("/v1/stream-echo", stream_echo, methods=["GET"]),
                *message_routes(self),
            ]
        )


FakeUpstreamT = TypeVar("FakeUpstreamT", bound=FakeUpstream)


class UpstreamServer:
    """Serve a :class:`FakeUpstream` with uvicorn in a background thread on 127.0.0.1."""

    def __init__(self, upstream: FakeUpstream, port: int = 0) -> None:
        import socket

        import uvicorn

        self.upstream = upstream
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(upstream.app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def start(self, timeout: float = 10.0) -> UpstreamServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fake upstream did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10.0)
        self._sock.close()


def main() -> None:  # pragma: no cover - benchmark helper
    parser = argparse.ArgumentParser(description="a fake OpenAI upstream for benchmarks")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to each answer")
    args = parser.parse_args()
    import uvicorn

    uvicorn.run(
        FakeUpstream(latency=args.latency).app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":  # pragma: no cover
    main()


@contextmanager
def serving(upstream: FakeUpstreamT) -> Iterator[FakeUpstreamT]:
    """``upstream`` served on a free loopback port for the block, its ``url`` set."""
    server = UpstreamServer(upstream).start()
    upstream.url = server.url
    try:
        yield upstream
    finally:
        server.stop()
