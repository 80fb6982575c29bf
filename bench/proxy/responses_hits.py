"""Hits of the Responses API through ``cachekit serve`` beside chat completion hits, on loopback.

    python -m bench.proxy.responses_hits [--rounds 3] [--requests 300]

A fake upstream and ``cachekit serve`` (semantic on, the test embedder) run on free ports. One
chat request and one Responses request are stored first; then each round sends ``--requests`` of
each kind, interleaved one by one from one client (httpx, one connection): chat exact hits,
Responses exact hits, and both kinds streamed (read to the end). Prints p50 and p90 per kind and
the Responses / chat ratio of the p50s, per round. Every answer must be a hit.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import httpx

from bench.common.procs import free_port, serving

KINDS = ("chat", "responses", "chat streamed", "responses streamed")


def request_of(kind: str) -> tuple[str, dict[str, Any]]:
    stream = kind.endswith("streamed")
    if kind.startswith("chat"):
        messages = [{"role": "user", "content": "How do I reset my password"}]
        return "/v1/chat/completions", {
            "model": "gpt-4o-mini",
            "messages": messages,
            "stream": stream,
        }
    body = {"model": "gpt-4.1-mini", "input": "How do I reset my password", "stream": stream}
    return "/v1/responses", body


def timed(client: httpx.Client, base: str, kind: str) -> float:
    path, body = request_of(kind)
    t0 = time.perf_counter()
    with client.stream("POST", base + path, json=body) as r:
        for _ in r.iter_raw():
            pass
        took = time.perf_counter() - t0
        if r.headers.get("x-cachekit-cache") != "HIT":
            raise RuntimeError(f"{kind}: {r.status_code} {r.headers.get('x-cachekit-cache')}")
    return took


def one_round(base: str, n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in KINDS}
    headers = {"authorization": "Bearer sk-bench"}
    with httpx.Client(headers=headers, timeout=30.0) as client:
        for _ in range(n):
            for kind in KINDS:
                out[kind].append(timed(client, base, kind))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=300)
    args = ap.parse_args()
    up, px = free_port(), free_port()
    up_cmd = [sys.executable, "-m", "cachekit.testing.upstream", "--port", str(up)]
    px_cmd = [
        sys.executable,
        "-m",
        "cachekit",
        "serve",
        "--upstream",
        f"http://127.0.0.1:{up}",
        "--port",
        str(px),
        "--embedder",
        "cachekit.testing.embedders:DeterministicTestEmbedder",
    ]
    base = f"http://127.0.0.1:{px}"
    with serving(up_cmd, f"http://127.0.0.1:{up}/v1/models"), serving(px_cmd, base + "/healthz"):
        with httpx.Client(headers={"authorization": "Bearer sk-bench"}, timeout=30.0) as c:
            for kind in ("chat", "responses"):
                path, body = request_of(kind)
                c.post(base + path, json=body)
                deadline = time.monotonic() + 10
                while c.post(base + path, json=body).headers.get("x-cachekit-cache") != "HIT":
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{kind} was not stored")
                    time.sleep(0.05)
        for r in range(args.rounds):
            got = one_round(base, args.requests)
            p50 = {k: statistics.median(v) * 1e3 for k, v in got.items()}
            p90 = {k: statistics.quantiles(v, n=10)[8] * 1e3 for k, v in got.items()}
            cells = ", ".join(f"{k} p50 {p50[k]:.2f} / p90 {p90[k]:.2f} ms" for k in KINDS)
            ratio = p50["responses"] / p50["chat"]
            sratio = p50["responses streamed"] / p50["chat streamed"]
            print(
                f"round {r + 1}: {cells}; responses/chat p50 {ratio:.2f}x, streamed {sratio:.2f}x"
            )


if __name__ == "__main__":
    main()
