"""Writing 1,000 entries with a TTL to Redis: the storage tier's ``set_many`` (one EVAL of a
small script) against a redis-py pipeline of ``SET PX`` (what it did before) and a pipeline of
raw ``execute_command`` SETs, repetitions interleaved, medians.

    python -m bench.exact.redis_write [--reps 15] [--entries 1000]

It starts its own redis-server on a free port.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import redis

from bench.common.servers import RedisServer
from cachekit.backends.redis import RedisTier


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--entries", type=int, default=1000)
    args = ap.parse_args()
    server = RedisServer().start()
    try:
        r = redis.Redis.from_url(server.url)
        tier = RedisTier(server.url)
        entries = [
            (f"ck:ns:v0:feat:user:i{i}", b"m" + b"x" * 120, 3600.0) for i in range(args.entries)
        ]

        def pipeline_set() -> None:
            p = r.pipeline(False)
            for k, v, t in entries:
                p.set(k, v, px=int(t * 1000))
            p.execute()

        def pipeline_raw() -> None:
            p = r.pipeline(False)
            for k, v, t in entries:
                p.execute_command("SET", k, v, "PX", int(t * 1000))
            p.execute()

        def tier_set_many() -> None:
            tier.set_many(entries)

        runs: dict[str, Callable[[], None]] = {
            "RedisTier.set_many (one EVAL)": tier_set_many,
            "pipeline of SET PX (redis-py set)": pipeline_set,
            "pipeline of raw SET PX commands": pipeline_raw,
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        for fn in runs.values():
            fn()
        for _ in range(args.reps):
            for name, fn in runs.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        base = statistics.median(times["pipeline of SET PX (redis-py set)"])
        print(f"{args.entries} entries, {args.reps} reps, medians")
        print("| write | median ms | vs pipeline of SET PX |")
        print("|---|---:|---:|")
        for name, ts in times.items():
            m = statistics.median(ts)
            print(f"| {name} | {m * 1e3:.2f} | {m / base:.2f}x its time |")
        tier.close()
        r.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
