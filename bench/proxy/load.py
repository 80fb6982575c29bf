"""Load test of ``cachekit serve`` with wrk, against a bare FastAPI/uvicorn endpoint in the
same run.

Everything runs on 127.0.0.1: a fake upstream of fixed latency (``cachekit.testing.upstream``), the
proxy (one uvicorn worker, the real embedding model), and a bare endpoint that reads and parses
the request body and returns a fixed body of the size of a cached answer (the ceiling: the same
server stack doing no caching work). Scenarios, interleaved round by round:

* closed loop (``wrk -t2 -c16``, and ``-t1 -c1`` for the unloaded latency): bare endpoint,
  exact hits, exact hits while ``/dashboard``'s data is asked for every 2 s (a browser showing the
  page), semantic hits (a different paraphrase each request, so embeddings are computed),
  and misses (a new question each request) through the proxy, through a second proxy with
  ``--no-semantic`` (no embedding on the miss path), and straight to the upstream;
* open loop: wrk with exponentially distributed per-connection think times (wrk's ``delay()``),
  64 connections, at 50%, 70% and 90% of the capacity measured closed loop in the same round.
  This approximates Poisson arrivals while latency is well below the think time; near
  saturation it undercounts queueing (a connection waits for its answer before sending again).

Needs Debian's ``wrk`` (``apt-get install wrk``). Prints one JSON line per run and a summary
table (ranges over the rounds). Usage::

    python -m bench.proxy.load --rounds 3 --duration 5
    python -m bench.proxy.load --rounds 7 --duration 5 --only "bare endpoint,exact hit" --no-open
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import Response

from bench.common.procs import free_port

CHAT = "/v1/chat/completions"
SYSTEM = "You are a support assistant. Answer briefly."
STORED = "How do I reset my password?"
# Paraphrase + a ticket reference in letters: a new text per request, still within the hit
# threshold (a number would differ from the stored text's, which the slot guard refuses).
PARAPHRASE = "How can I reset my password? Ticket {ref}."
# A new question each request: random words (see _LUA's words()), so no two are alike.
QUESTION = "%s?"

_LUA = r"""
local template = %(template)s
local counter = 0
local id = 0
local threads = {}
function setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end
function init(args)
  id = tonumber(wrk.thread:get("id")) or 1
  math.randomseed(id * 7919 + os.time())
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"
%(headers)s
local vocab = {"apple", "river", "engine", "quantum", "tax", "violin", "glacier", "python",
  "mortgage", "tennis", "volcano", "protein", "satellite", "poetry", "bread", "contract",
  "magnet", "forest", "invoice", "galaxy", "harbor", "vaccine", "chess", "bridge", "sugar",
  "lawyer", "pixel", "desert", "battery", "opera", "wheat", "crypto", "salmon", "thunder",
  "ladder", "census", "marble", "rocket", "jazz", "yoga"}
function words()
  local out = {}
  for i = 1, 8 do out[i] = vocab[math.random(#vocab)] end
  return table.concat(out, " ")
end
function letters(n)
  local s = ""
  repeat
    local r = n %% 26
    s = string.char(97 + r) .. s
    n = (n - r) / 26
  until n == 0
  return s
end
function request()
  counter = counter + 1
  local body = template
  if string.find(template, "{ref}", 1, true) then
    body = (string.gsub(template, "{ref}", letters(%(offset)d + id * 10000000 + counter)))
  elseif string.find(template, "%%%%d") then
    body = string.format(template, %(offset)d + id * 10000000 + counter)
  elseif string.find(template, "%%%%s") then
    body = string.format(template, words())
  end
  return wrk.format(nil, "%(path)s", nil, body)
end
%(delay)s
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'RESULT {"requests": %%d, "duration_s": %%.3f, "p50_ms": %%.3f, "p95_ms": %%.3f, ' ..
    '"p99_ms": %%.3f, "socket_errors": %%d, "non_2xx": %%d}\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1000,
    latency:percentile(95) / 1000, latency:percentile(99) / 1000,
    e.connect + e.read + e.write + e.timeout, e.status))
end
"""

_DELAY = """
function delay()
  return -math.log(1 - math.random()) * %(mean_ms)f
end
"""


def body(text: str) -> str:
    return json.dumps(
        {
            "model": "gpt-4o-mini",
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
        }
    )


# ---------------------------------------------------------------------- the bare endpoint


def bare_app(size: int) -> Any:
    fixed = json.dumps({"pad": "x" * max(0, size - 11)}).encode()
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.post(CHAT)
    async def bare(request: Request) -> Response:
        json.loads(await request.body())
        return Response(fixed, media_type="application/json")

    return app


# ---------------------------------------------------------------------- processes


@contextmanager
def process(cmd: list[str], health: str, timeout: float = 120.0) -> Iterator[None]:
    log = tempfile.TemporaryFile()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"{cmd[:4]} exited: {log.read()[-2000:]!r}")
            try:
                httpx.get(health, timeout=1.0)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{cmd[:4]} did not start") from None
                time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def wrk(
    url: str,
    template: str,
    *,
    threads: int,
    conns: int,
    duration: float,
    rate: float | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    extra = "\n".join(
        f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in (headers or {}).items()
    )
    delay = ""
    if rate is not None:
        delay = _DELAY % {"mean_ms": 1000.0 * conns / rate}
    # A fresh number range per run: texts (and so embeddings) never repeat across runs.
    wrk.runs += 1  # type: ignore[attr-defined]
    script = _LUA % {
        "template": json.dumps(template),
        "path": CHAT,
        "delay": delay,
        "headers": extra,
        "offset": wrk.runs * 10**9,  # type: ignore[attr-defined]
    }
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    try:
        out = subprocess.run(
            [
                "wrk",
                f"-t{threads}",
                f"-c{conns}",
                f"-d{max(1, round(duration))}s",
                "--timeout",
                "10s",
                "-s",
                f.name,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=duration + 60,
        )
    finally:
        os.unlink(f.name)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"wrk failed: {out.stdout[-1000:]} {out.stderr[-1000:]}")
    result: dict[str, Any] = json.loads(line[7:])
    result["rps"] = result["requests"] / result["duration_s"]
    return result


wrk.runs = 0  # type: ignore[attr-defined]


def check(url: str, text: str, expect: str) -> None:
    r = httpx.post(
        url,
        content=body(text),
        timeout=30.0,
        headers={"authorization": "Bearer sk-bench", "content-type": "application/json"},
    )
    got = r.headers.get("x-cachekit-cache")
    if r.status_code != 200 or got != expect:
        raise RuntimeError(f"expected {expect} for {text!r}, got {r.status_code} {got}")


# ---------------------------------------------------------------------- the run


#: Exact hits while a browser shows ``/dashboard`` (its data asked for every 2 s, as the page
#: does): the dashboard's cost to the hit path, beside "exact hit" in the same round.
DASHBOARD_OPEN = "exact hit with dashboard open"


@contextlib.contextmanager
def dashboard_open(proxy: str, every: float = 2.0) -> Iterator[None]:
    """Ask ``proxy`` for ``/dashboard/data`` every ``every`` seconds meanwhile."""
    stop = threading.Event()

    def poll() -> None:
        with httpx.Client(timeout=10.0) as client:
            client.get(proxy + "/dashboard/data", params={"history": 1})
            while not stop.wait(every):
                client.get(proxy + "/dashboard/data")

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(15.0)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    up_port, px_port, bare_port, ex_port = free_port(), free_port(), free_port(), free_port()
    up, px, bare, ex = (f"http://127.0.0.1:{p}" for p in (up_port, px_port, bare_port, ex_port))
    py = sys.executable
    upstream_cmd = [
        py,
        "-m",
        "cachekit.testing.upstream",
        "--port",
        str(up_port),
        "--latency",
        str(args.upstream_latency),
    ]
    proxy_cmd = [
        py,
        "-m",
        "cachekit",
        "serve",
        "--upstream",
        up,
        "--port",
        str(px_port),
        "--threshold",
        str(args.threshold),
        "--ttl",
        "86400",
    ]
    exact_cmd = [
        py,
        "-m",
        "cachekit",
        "serve",
        "--upstream",
        up,
        "--port",
        str(ex_port),
        "--no-semantic",
        "--ttl",
        "86400",
    ]
    results: list[dict[str, Any]] = []
    with (
        process(upstream_cmd, up + "/v1/models"),
        process(proxy_cmd, px + "/healthz"),
        process(exact_cmd, ex + "/healthz"),
    ):
        first = httpx.post(
            px + CHAT,
            content=body(STORED),
            timeout=30.0,
            headers={"authorization": "Bearer sk-bench"},
        )
        size = len(first.content)
        check(px + CHAT, STORED, "HIT")
        check(px + CHAT, PARAPHRASE.replace("{ref}", "b"), "SEMANTIC_HIT")
        bare_cmd = [
            py,
            "-m",
            "bench.proxy.load",
            "--serve-bare",
            str(bare_port),
            "--size",
            str(size),
        ]
        with process(bare_cmd, bare + "/docs"):
            for rnd in range(1, args.rounds + 1):
                results.extend(one_round(rnd, args, up, px, bare, ex))
    return results


def one_round(
    rnd: int, args: argparse.Namespace, up: str, px: str, bare: str, ex: str
) -> list[dict[str, Any]]:
    d = args.duration
    out = []

    def record(scenario: str, mode: str, res: dict[str, Any]) -> dict[str, Any]:
        res.update(round=rnd, scenario=scenario, mode=mode)
        print(json.dumps(res), flush=True)
        out.append(res)
        return res

    cap = {}
    # A miss still pays the semantic lookup (the question is embedded and searched); the
    # header only makes sure that none of the similar-looking questions is served as a hit.
    never_similar = {"x-cachekit-threshold": "1"}
    for scenario, url, template, headers in (
        ("bare endpoint", bare, body(STORED), None),
        ("exact hit", px, body(STORED), None),
        (DASHBOARD_OPEN, px, body(STORED), None),
        ("semantic hit", px, body(PARAPHRASE), None),
        ("miss via proxy", px, body(QUESTION), never_similar),
        ("miss via exact-only proxy", ex, body(QUESTION), None),
        ("upstream direct", up, body(QUESTION), None),
    ):
        if args.only and scenario not in args.only:
            continue
        with dashboard_open(px) if scenario == DASHBOARD_OPEN else contextlib.nullcontext():
            res = record(
                scenario,
                "closed c16",
                wrk(url + CHAT, template, threads=2, conns=16, duration=d, headers=headers),
            )
            cap[scenario] = res["rps"]
            record(
                scenario,
                "closed c1",
                wrk(url + CHAT, template, threads=1, conns=1, duration=d, headers=headers),
            )
    for scenario, url, template in (
        ("bare endpoint", bare, body(STORED)),
        ("exact hit", px, body(STORED)),
    ):
        if args.no_open or scenario not in cap:
            continue
        for frac in (0.5, 0.7, 0.9):
            rate = frac * cap[scenario]
            res = wrk(url + CHAT, template, threads=2, conns=64, duration=d, rate=rate)
            res["offered_rps"] = rate
            record(scenario, f"open {int(frac * 100)}%", res)
    return out


def summarize(results: list[dict[str, Any]]) -> str:
    keys: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        keys.setdefault((r["scenario"], r["mode"]), []).append(r)

    def rng(values: list[float], fmt: str) -> str:
        lo, hi = min(values), max(values)
        return fmt % lo if f"{fmt % lo}" == f"{fmt % hi}" else f"{fmt % lo}-{fmt % hi}"

    lines = [
        "| scenario | load | requests/s | p50 ms | p95 ms | p99 ms | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for (scenario, mode), rs in keys.items():
        errors = sum(r["socket_errors"] + r["non_2xx"] for r in rs)
        lines.append(
            f"| {scenario} | {mode} | {rng([r['rps'] for r in rs], '%.0f')} | "
            f"{rng([r['p50_ms'] for r in rs], '%.2f')} | "
            f"{rng([r['p95_ms'] for r in rs], '%.2f')} | "
            f"{rng([r['p99_ms'] for r in rs], '%.2f')} | {errors} |"
        )
    by_round: dict[int, dict[str, float]] = {}
    for r in results:
        by_round.setdefault(r["round"], {})[f"{r['scenario']}|{r['mode']}"] = r["rps"]
    ratios = [
        v["exact hit|closed c16"] / v["bare endpoint|closed c16"]
        for v in by_round.values()
        if "exact hit|closed c16" in v and "bare endpoint|closed c16" in v
    ] or [0.0]
    p50 = {k: [r["p50_ms"] for r in rs] for (s, m), rs in keys.items() for k in [f"{s}|{m}"]}
    added = [
        a - b
        for a, b in zip(
            p50.get("miss via proxy|closed c1", []),
            p50.get("upstream direct|closed c1", []),
            strict=False,
        )
    ]
    lines.append("")
    lines.append(
        f"exact-hit throughput / bare endpoint (c16): {rng(ratios, '%.2f')}x "
        f"(median {statistics.median(ratios):.2f}x)"
    )
    if added:
        lines.append(
            f"p50 added by a miss over calling the upstream directly (c1): {rng(added, '%.2f')} ms"
        )
    added_ex = [
        a - b
        for a, b in zip(
            p50.get("miss via exact-only proxy|closed c1", []),
            p50.get("upstream direct|closed c1", []),
            strict=False,
        )
    ]
    if added_ex:
        lines.append(
            f"p50 added by a miss, exact-only proxy (--no-semantic, c1): {rng(added_ex, '%.2f')} ms"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    parser.add_argument("--upstream-latency", type=float, default=0.02)
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--json", help="also write every run to this file")
    parser.add_argument(
        "--only",
        type=lambda v: [x.strip() for x in v.split(",")],
        help="comma-separated scenario names to run (default: all)",
    )
    parser.add_argument("--no-open", action="store_true", help="skip the open-loop runs")
    parser.add_argument("--serve-bare", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, default=400, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_bare:
        import uvicorn

        uvicorn.run(
            bare_app(args.size),
            host="127.0.0.1",
            port=args.serve_bare,
            log_level="warning",
            access_log=False,
        )
        return
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    results = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(summarize(results))


if __name__ == "__main__":
    main()
