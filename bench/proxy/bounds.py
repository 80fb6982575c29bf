"""The proxy in front of a hostile upstream: the memory an endless stream holds, and how
``/healthz`` answers while a stream with no event separator is relayed.

    python -m bench.proxy.bounds [--endless-mb 800] [--nosep-s 6] [--rounds 3] [--compare-src DIR]

A raw asyncio upstream on 127.0.0.1 answers every POST with a close-delimited
``text/event-stream``: for the model ``endless``, well-formed chunk events (64 KiB of content
each) and never ``[DONE]``; for ``nosep``, 64 KiB pieces with no blank line at all. Each stops when
the proxy hangs up or after ``--max-s``. The proxy is ``cachekit serve --no-semantic`` in a
process of its own. Per round:

* endless: the proxy's resident memory (VmRSS, sampled every 20 ms) before the request and at
  most while the client reads ``--endless-mb`` of the stream; the growth is the difference;
* nosep: ``/healthz`` on another connection every 20 ms for ``--nosep-s`` seconds while the
  stream is relayed, and for as long with no stream (the baseline): p50 and max of each, and
  how much of the stream reached the client meanwhile;
* slow clients: ``--slow-clients`` connections at once, each sending a request's headers a byte a
  second: how many the proxy cuts off within ``--slow-limit-s`` seconds, and when; ``/healthz``
  meanwhile.

``--compare-src DIR`` also runs, in the same rounds, the proxy of another checkout (its
``cachekit`` first on ``PYTHONPATH``): the code before a change, say. Loopback only; every loop
is bounded in bytes and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from bench.common.procs import free_port, rss_mib, serving

CHAT = "/v1/chat/completions"
PIECE = 64 * 1024


def endless_event() -> bytes:
    chunk = {
        "id": "chatcmpl-endless",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "endless",
        "choices": [{"index": 0, "delta": {"content": "x" * PIECE}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class HostileUpstream:
    """An upstream that never ends its streams (until the caller hangs up or ``max_s``)."""

    def __init__(self, max_s: float) -> None:
        self.max_s = max_s
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port)
        )
        self.ready.set()
        self.loop.run_forever()
        server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            model = json.loads(await reader.readexactly(length)).get("model")
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
            )
            piece = endless_event() if model == "endless" else b"y" * PIECE
            if model != "endless":
                writer.write(b"data: {")
            deadline = time.monotonic() + self.max_s
            while time.monotonic() < deadline:
                writer.write(piece)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    def __enter__(self) -> HostileUpstream:
        self.thread.start()
        self.ready.wait(10.0)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5.0)


@contextmanager
def proxy(upstream_port: int, src: str | None) -> Iterator[tuple[str, int]]:
    port = free_port()
    cmd = [sys.executable, "-m", "cachekit", "serve", "--no-semantic", "--port", str(port)]
    cmd += ["--upstream", f"http://127.0.0.1:{upstream_port}"]
    url = f"http://127.0.0.1:{port}"
    with serving(cmd, url + "/healthz", src) as pid:
        yield url, pid


def body(model: str) -> dict[str, object]:
    return {"model": model, "stream": True, "messages": [{"role": "user", "content": "go"}]}


def endless(url: str, pid: int, mib: int, max_s: float) -> tuple[float, float]:
    """(RSS before, max RSS while reading ``mib`` of the endless stream), MiB."""
    before = rss_mib(pid)
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_mib(pid))
            done.wait(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    got, deadline = 0, time.monotonic() + max_s
    try:
        with httpx.stream("POST", url + CHAT, json=body("endless"), timeout=30.0) as r:
            for data in r.iter_raw(PIECE):
                got += len(data)
                if got >= mib * 2**20 or time.monotonic() > deadline:
                    break
    finally:
        done.set()
        sampler.join()
    return before, peak[0]


def health_ms(url: str, seconds: float) -> list[float]:
    out = []
    with httpx.Client(timeout=10.0) as client:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            client.get(url + "/healthz")
            out.append((time.perf_counter() - t0) * 1e3)
            time.sleep(0.02)  # the polling interval, not a wait for a condition
    return out


def nosep(url: str, seconds: float) -> tuple[list[float], int]:
    """/healthz latencies while a separator-less stream is relayed for ``seconds``, and the
    bytes of the stream the client received meanwhile."""
    stop = threading.Event()
    got = [0]

    def read() -> None:
        try:
            with httpx.stream("POST", url + CHAT, json=body("nosep"), timeout=30.0) as r:
                for data in r.iter_raw(PIECE):
                    got[0] += len(data)
                    if stop.is_set():
                        break
        except httpx.HTTPError:
            pass  # a proxy that relays nothing times the client out: got stays as it was

    reader = threading.Thread(target=read)
    reader.start()
    try:
        return health_ms(url, seconds), got[0]
    finally:
        stop.set()
        reader.join(40.0)


async def _slow_client(host: str, port: int, limit_s: float) -> float | None:
    """Send a request's headers a byte a second; seconds until the proxy hung up, or None if
    it had not by ``limit_s``."""
    reader, writer = await asyncio.open_connection(host, port)
    head = f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nX-Slow: {'y' * 64}\r\n\r\n".encode()
    t0 = time.monotonic()
    try:
        for i in range(len(head)):
            if time.monotonic() - t0 > limit_s:
                return None
            writer.write(head[i : i + 1])
            await writer.drain()
            try:
                if await asyncio.wait_for(reader.read(1), 1.0) == b"":
                    return time.monotonic() - t0
            except TimeoutError:
                continue
        return None
    except ConnectionError:
        return time.monotonic() - t0
    finally:
        writer.close()


def slow_clients(url: str, n: int, limit_s: float) -> tuple[list[float], list[float]]:
    """``n`` clients sending headers a byte a second, at once: when each was cut off (those the
    proxy did not cut by ``limit_s`` are left out), and /healthz latencies meanwhile."""
    host, port = url.rsplit("//", 1)[1].split(":")

    async def run() -> list[float | None]:
        return await asyncio.gather(*(_slow_client(host, int(port), limit_s) for _ in range(n)))

    result: list[list[float | None]] = []
    worker = threading.Thread(target=lambda: result.append(asyncio.run(run())))
    worker.start()
    health = health_ms(url, 2.0)
    worker.join(limit_s + 30.0)
    return [t for t in result[0] if t is not None], health


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--endless-mb", type=int, default=800)
    ap.add_argument("--nosep-s", type=float, default=6.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-s", type=float, default=120.0, help="cap on any one stream")
    ap.add_argument("--compare-src", help="a checkout whose proxy is measured beside this one")
    ap.add_argument("--slow-clients", type=int, default=400, help="0: skip that part")
    ap.add_argument("--slow-limit-s", type=float, default=20.0)
    args = ap.parse_args()
    srcs = {"this": None} | ({"compare": args.compare_src} if args.compare_src else {})
    with HostileUpstream(args.max_s) as up:
        for r in range(args.rounds):
            for name, src in srcs.items():
                with proxy(up.port, src) as (url, pid):
                    before, peak = endless(url, pid, args.endless_mb, args.max_s)
                    quiet = health_ms(url, args.nosep_s)
                    busy, relayed = nosep(url, args.nosep_s)
                    cut, slow_health = (
                        slow_clients(url, args.slow_clients, args.slow_limit_s)
                        if args.slow_clients
                        else ([], [0.0])
                    )
                print(
                    f"round {r + 1} {name}: endless {args.endless_mb} MiB: RSS {before:.0f} -> "
                    f"max {peak:.0f} MiB (+{peak - before:.0f}); /healthz p50/max "
                    f"{statistics.median(quiet):.1f}/{max(quiet):.1f} ms idle, "
                    f"{statistics.median(busy):.1f}/{max(busy):.1f} ms during a separator-less "
                    f"stream ({relayed / 2**20:.0f} MiB of it relayed meanwhile); "
                    f"{len(cut)} of {args.slow_clients} byte-a-second clients cut off within "
                    f"{args.slow_limit_s:g} s"
                    + (f" (after {min(cut):.1f}-{max(cut):.1f} s)" if cut else "")
                    + f", /healthz max {max(slow_health):.1f} ms meanwhile",
                    flush=True,
                )


if __name__ == "__main__":
    main()
