"""The engine's shared-tier paths, per call, beside another checkout's: what the driver and the
guarded call cost where nothing else hides them (an in-process shared tier, no network).

    python -m bench.exact.engine_paths [--rounds 5] [--number 20000] [--compare-src DIR]

Per round and checkout, in a fresh process (``PYTHONPATH`` first on the checkout's ``cachekit``):

* ``cache.get`` of a present key with ``l1=False`` over ``MemoryTier`` (one shared-tier read);
* the same through ``await cache.aget`` (the asyncio driver);
* an ``@cache.cached`` call that hits the shared tier (``l1=False``);
* ``cache.set`` (one shared-tier write);
* ``cache.get`` of a present key with ``l1=False`` over a redis-server this script starts on a
  free port (``redis get``): where the network round trip is part of the call.

Reported: the median per-call time of each round, and across rounds the range; the checkouts
alternate round by round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench.common.servers import RedisServer

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import asyncio, json, sys, timeit
from cachekit import Cache
from cachekit.backends.memory import MemoryTier
n = int(sys.argv[1])
cache = Cache(l2=MemoryTier(), l1=False)
cache.set("k", {"a": 1})

@cache.cached(name="f")
def f(x):
    return x

f(1)

async def agets():
    for _ in range(n):
        await cache.aget("k")

def run_async():
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(agets())
    finally:
        loop.close()

out = {}
for name, stmt in [("get", lambda: cache.get("k")), ("cached", lambda: f(1)),
                   ("set", lambda: cache.set("k", {"a": 1}))]:
    out[name] = min(timeit.repeat(stmt, number=n, repeat=3)) / n
out["aget"] = min(timeit.repeat(run_async, number=1, repeat=3)) / n
remote = Cache(redis_url=sys.argv[2], l1=False, namespace="paths")
remote.set("k", {"a": 1})
out["redis get"] = min(timeit.repeat(lambda: remote.get("k"), number=n // 4, repeat=3)) / (n // 4)
remote.close()
print(json.dumps(out))
"""


def run(src: str | None, number: int, redis_url: str) -> dict[str, float]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(number), redis_url],
        env=env,
        cwd=src or str(ROOT),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return dict(json.loads(out.stdout))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument("--compare-src", help="a checkout measured beside this one")
    args = ap.parse_args()
    srcs = {"this": None} | ({"compare": args.compare_src} if args.compare_src else {})
    seen: dict[str, dict[str, list[float]]] = {name: {} for name in srcs}
    with RedisServer() as server:
        rounds(args.rounds, srcs, args.number, server.url, seen)
    for name, paths in seen.items():
        cells = ", ".join(
            f"{p} {min(ts) * 1e6:.2f}-{max(ts) * 1e6:.2f} us (median "
            f"{statistics.median(ts) * 1e6:.2f})"
            for p, ts in paths.items()
        )
        print(f"{name}: {cells}")


def rounds(
    n: int,
    srcs: dict[str, str | None],
    number: int,
    url: str,
    seen: dict[str, dict[str, list[float]]],
) -> None:
    for r in range(n):
        for name, src in srcs.items():
            got = run(src, number, url)
            for path, t in got.items():
                seen[name].setdefault(path, []).append(t)
            cells = ", ".join(f"{p} {t * 1e6:.2f} us" for p, t in got.items())
            print(f"round {r + 1} {name}: {cells}", flush=True)


if __name__ == "__main__":
    main()
