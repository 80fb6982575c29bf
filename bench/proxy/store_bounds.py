"""What a hostile entry in Redis and a run of huge prompts cost a reader and the proxy.

    python -m bench.proxy.store_bounds [--rounds 3] [--prompts 400] [--prompt-mb 1] \\
        [--compare-src DIR]

* decode: a redis-server this script starts on a free port holds, under the key of a
  ``cache.set`` entry, a forged 16 MiB envelope whose value is an array of empty maps (one byte
  each on the wire). A fresh process with ``Cache(redis_url=..., l1=False)`` reads it with
  ``cache.get``: the seconds the read takes and how much the process's peak RSS grows.
* long prompts: ``cachekit serve`` (semantic, the bundled model) in front of the fake upstream
  (``cachekit.testing.upstream``, whose answer repeats the prompt) receives ``--prompts`` distinct
  chat requests of ``--prompt-mb`` MiB each, one after another; the proxy's RSS (VmRSS) after a
  short warm-up request, then its maximum over the run, sampled after every request.

``--compare-src DIR`` also measures, in the same rounds, another checkout (its ``cachekit``
first on ``PYTHONPATH``): the code before a change, say. Loopback only; every loop is bounded.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import httpx

from bench.common.procs import ROOT, env_for, free_port, rss_mib, serving
from bench.common.servers import RedisServer

CHAT = "/v1/chat/completions"

DECODE = """
import resource, sys, time
import msgpack, redis
from cachekit import Cache
url, n = sys.argv[1], int(sys.argv[2])
cache = Cache(redis_url=url, l1=False, namespace="bounds")
cache.set("forged", "x")
client = redis.Redis.from_url(url)
(key,) = list(client.scan_iter(match="*bounds*"))
head = msgpack.packb([1, time.time(), 3600.0, 0.0, None])
client.set(key, b"m\\x96" + head[1:] + b"\\xdd" + n.to_bytes(4, "big") + b"\\x80" * n)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
value = cache.get("forged", default="miss")
took = time.perf_counter() - t0
grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(f"{took:.3f} {grew:.0f} {type(value).__name__}")
cache.close()
"""


def decode(url: str, src: str | None, n: int) -> tuple[float, float, str]:
    out = subprocess.run(
        [sys.executable, "-c", DECODE, url, str(n)],
        env=env_for(src),
        cwd=src or str(ROOT),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    took, grew, kind = out.stdout.split()
    return float(took), float(grew), kind


def ask(client: httpx.Client, url: str, text: str) -> int:
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return client.post(url + CHAT, json=body, timeout=120.0).status_code


def long_prompts(upstream: str, src: str | None, n: int, mib: float) -> tuple[float, float, float]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "cachekit", "serve", "--port", str(port), "--upstream", upstream]
    filler = "lorem ipsum dolor sit amet " * int(mib * 2**20 / 27)
    with serving(cmd, url + "/healthz", src) as pid, httpx.Client() as client:
        ask(client, url, "warm up the model")
        before = peak = rss_mib(pid)
        t0 = time.perf_counter()
        for i in range(n):
            if ask(client, url, f"request {i}: {filler}") != 200:
                raise RuntimeError("the proxy failed a long prompt")
            peak = max(peak, rss_mib(pid))
        return before, peak, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=400)
    ap.add_argument("--prompt-mb", type=float, default=1.0)
    ap.add_argument("--forged-mib", type=int, default=16)
    ap.add_argument("--compare-src", help="a checkout measured beside this one")
    args = ap.parse_args()
    srcs = {"this": None} | ({"compare": args.compare_src} if args.compare_src else {})
    port = free_port()
    upstream = f"http://127.0.0.1:{port}"
    fake = [sys.executable, "-m", "cachekit.testing.upstream", "--port", str(port)]
    with RedisServer() as redis, serving(fake, upstream + "/v1/models"):
        for r in range(args.rounds):
            for name, src in srcs.items():
                took, grew, kind = decode(redis.url, src, args.forged_mib * 2**20)
                before, peak, secs = long_prompts(upstream, src, args.prompts, args.prompt_mb)
                read = "a miss" if kind == "str" else kind
                print(
                    f"round {r + 1} {name}: forged {args.forged_mib} MiB entry read in "
                    f"{took:.2f} s, peak RSS +{grew:.0f} MiB ({read});"
                    f" {args.prompts} prompts of {args.prompt_mb:g} MiB in {secs:.0f} s: proxy "
                    f"RSS {before:.0f} -> max {peak:.0f} MiB (+{peak - before:.0f})",
                    flush=True,
                )


if __name__ == "__main__":
    main()
