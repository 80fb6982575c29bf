"""``cachekit serve`` against clients that try to starve the others or grow its memory.

    python -m bench.proxy.hostile_clients [--rounds 3] [--compare-src DIR] [--body-timeout 10]

The fake upstream (``cachekit.testing.upstream``) runs in this process on 127.0.0.1; each proxy is
``cachekit serve --no-semantic`` in a process of its own, fresh for every scenario. Per round:

* starve: one keyless client opens ``--holders`` (560) passthrough ``POST /v1/files`` with
  ``Content-Length: 1000`` and never sends the body; meanwhile another tenant's cache miss is
  timed (status and seconds, 15 s at most), and how many of the holders were answered 429;
* gauge: 50 passthrough ``POST``s that hang up mid-body; seconds until ``upstream_in_flight`` in
  ``/healthz`` is back at 0 (15 s at most);
* drip: a passthrough body dripped at a byte a second: seconds until the proxy answers (and with
  what) or hangs up (``--body-timeout`` + 15 s at most);
* memo: 4,096 different chat bodies of about 15 KB that parse into 5,000 empty objects each,
  sent with ``Cache-Control: no-store`` (16 at a time): the proxy's resident memory (VmRSS)
  before and after;
* labels: 3,000 model names, each asked twice (a miss, then a hit counted under its model): the
  lines ``/metrics`` grew by, and the median time to fetch it (5 scrapes).

``--compare-src DIR`` also runs, in the same rounds, the proxy of another checkout (its
``cachekit`` first on ``PYTHONPATH``): the code before a change, say. Loopback only; every loop
is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from bench.common.procs import free_port, rss_mib, serving
from cachekit.testing.upstream import FakeUpstream
from cachekit.testing.upstream import serving as fake_upstream

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


@contextmanager
def proxy(upstream: str, src: str | None, body_timeout: float) -> Iterator[tuple[str, int]]:
    port = free_port()
    cmd = [sys.executable, "-m", "cachekit", "serve", "--upstream", upstream, "--port", str(port)]
    cmd += ["--no-semantic", "--body-timeout", str(body_timeout)]
    url = f"http://127.0.0.1:{port}"
    with serving(cmd, url + "/healthz", src) as pid:
        yield url, pid


async def _open(port: int, head: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head)
    await writer.drain()
    return reader, writer


def _files_head(length: int = 1000) -> bytes:
    return (
        f"POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def _status(reader: asyncio.StreamReader, wait: float) -> int | None:
    try:
        line = await asyncio.wait_for(reader.readline(), wait)
    except (TimeoutError, ConnectionError):
        return None
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 else None


async def starve(url: str, holders: int) -> dict[str, Any]:
    port = int(url.rsplit(":", 1)[1])
    conns = await asyncio.gather(*(_open(port, _files_head() + b"{") for _ in range(holders)))
    try:
        await asyncio.sleep(1.0)  # let the proxy take them all in
        t0 = time.perf_counter()
        async with httpx.AsyncClient(timeout=15.0) as client:
            try:
                r = await client.post(
                    url + CHAT,
                    json={
                        "model": "m",
                        "messages": [{"role": "user", "content": uuid.uuid4().hex}],
                    },
                    headers={"authorization": f"Bearer sk-other-{uuid.uuid4().hex}"},
                )
                other: int | str = r.status_code
            except httpx.HTTPError as exc:
                other = type(exc).__name__
        took = time.perf_counter() - t0
        statuses = await asyncio.gather(*(_status(r, 0.5) for r, _ in conns))
    finally:
        for _, w in conns:
            w.close()
    return {"other": other, "other_s": took, "429": statuses.count(429)}


async def gauge(url: str) -> float:
    port = int(url.rsplit(":", 1)[1])
    for _ in range(50):
        _, w = await _open(port, _files_head() + b'{"purpose"')
        w.close()
    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=5.0) as client:
        while time.perf_counter() - t0 < 15.0:
            health = (await client.get(url + "/healthz")).json()
            if health["upstream_in_flight"] == 0:
                return time.perf_counter() - t0
            await asyncio.sleep(0.05)
    return float("inf")


async def drip(url: str, limit: float) -> tuple[float, int | None]:
    port = int(url.rsplit(":", 1)[1])
    reader, writer = await _open(port, _files_head())
    t0 = time.perf_counter()
    try:
        status_task = asyncio.ensure_future(_status(reader, limit))
        while not status_task.done() and time.perf_counter() - t0 < limit:
            try:
                writer.write(b"x")
                await writer.drain()
            except ConnectionError:
                break
            await asyncio.wait([status_task], timeout=1.0)
        status = await status_task
    finally:
        writer.close()
    return time.perf_counter() - t0, status


def inflated(i: int) -> bytes:
    parts = ",".join(["{}"] * 5000)
    return json.dumps({"model": "m", "messages": MESSAGES, "user": f"u{i}"}).encode()[:-1] + (
        f',"metadata":{{"x":[{parts}]}}}}'.encode()
    )


async def memo(url: str, pid: int, n: int = 4096) -> tuple[float, float]:
    before = rss_mib(pid)
    sem = asyncio.Semaphore(16)
    headers = {"content-type": "application/json", "cache-control": "no-store"}
    async with httpx.AsyncClient(timeout=30.0) as client:

        async def one(i: int) -> None:
            async with sem:
                await client.post(url + CHAT, content=inflated(i), headers=headers)

        await asyncio.gather(*(one(i) for i in range(n)))
    return before, rss_mib(pid)


async def labels(url: str, n: int = 3000) -> tuple[int, float]:
    async with httpx.AsyncClient(timeout=30.0) as client:
        base = (await client.get(url + "/metrics")).text.count("\n")
        sem = asyncio.Semaphore(16)

        async def one(i: int) -> None:
            body = {"model": f"model-{i}", "messages": MESSAGES}
            async with sem:
                for _ in range(2):
                    await client.post(url + CHAT, json=body)

        await asyncio.gather(*(one(i) for i in range(n)))
        lines = (await client.get(url + "/metrics")).text.count("\n") - base
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            await client.get(url + "/metrics")
            times.append(time.perf_counter() - t0)
    return lines, statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--holders", type=int, default=560)
    ap.add_argument("--body-timeout", type=float, default=10.0)
    ap.add_argument("--compare-src", help="a checkout whose proxy is measured beside this one")
    args = ap.parse_args()
    srcs = {"this": None} | ({"compare": args.compare_src} if args.compare_src else {})
    with fake_upstream(FakeUpstream()) as up:
        for r in range(args.rounds):
            for name, src in srcs.items():
                with proxy(up.url, src, args.body_timeout) as (url, _):
                    s = asyncio.run(starve(url, args.holders))
                with proxy(up.url, src, args.body_timeout) as (url, _):
                    g = asyncio.run(gauge(url))
                with proxy(up.url, src, args.body_timeout) as (url, _):
                    d_s, d_status = asyncio.run(drip(url, args.body_timeout + 15.0))
                with proxy(up.url, src, args.body_timeout) as (url, pid):
                    m0, m1 = asyncio.run(memo(url, pid))
                with proxy(up.url, src, args.body_timeout) as (url, _):
                    lines, scrape = asyncio.run(labels(url))
                print(
                    f"round {r + 1} {name}: starve: other tenant's miss {s['other']} in "
                    f"{s['other_s']:.2f} s, {s['429']} of {args.holders} holders got 429; "
                    f"gauge at 0 after {g:.2f} s; drip answered {d_status} after {d_s:.1f} s "
                    f"(body timeout {args.body_timeout:g} s); memo RSS {m0:.0f} -> {m1:.0f} MiB "
                    f"(+{m1 - m0:.0f}); 3,000 models: /metrics +{lines} lines, "
                    f"{scrape * 1000:.1f} ms a scrape",
                    flush=True,
                )


if __name__ == "__main__":
    main()
