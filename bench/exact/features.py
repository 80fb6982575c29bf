"""Benchmark FeatureSet.get_many(1000 ids) against a per-id Redis GET loop and the bare loader.

Scenarios (each repetition uses fresh ids where a tier must miss, so every repetition sees the
stated mix):

* 100% L1 hits;
* 90% L1 hits, the other 10% in Redis only (written by another Cache, as another replica would);
* 90% L2 hits (empty L1), the other 10% loaded;
* all misses: every id loaded and written back to both tiers;
* the first three again with ``copy=False`` (callers share the cached objects, no copy per hit);
* all misses with ``write_behind=True``: timed until ``get_many`` returns, and until the
  background write is done too (after each timed call, untimed, pending writes are flushed so
  that they never run inside another scenario's timing).

Baselines, measured in the same run and interleaved with the scenarios so that machine noise
hits all of them alike: a loop of ``redis.get`` + msgpack decode per id against the same server
(all 1000 keys present), one ``MGET`` of the same 1000 keys + msgpack decode, one ``MGET`` of
100 of them (what the 90% L1 + 10% L2 scenarios must fetch from Redis at least), the all-miss
steps no implementation can skip and nothing else (L1 keys, one L1 probe, one ``MGET``, the loader,
the result dict: a floor under the all-miss rows), and the loader
called directly with the 1000 ids. The loader is a dict
lookup with a simulated latency of ``--loader-ms`` per call plus ``--loader-us`` per id.
A last table splits the write-behind all-miss call and the floor at the loader: median ms
before the loader is called, in it, and after it returns; a last line times copying 1,000
packed values one ``Packed.load`` each against one ``load_packed`` of them all.

By default each round times one call of each scenario, cold: the other scenarios ran in
between, so caches and the redis-server's core start cold, as for a call that arrives now and
then. ``--block N`` times N calls of each scenario back to back instead (prepared before the
block, untimed), as in a loop that serves one request after another; rounds still interleave
the scenarios.

It starts its own redis-server on a free port (never the one on :6379)::

    python -m bench.exact.features --reps 30
    python -m bench.exact.features --reps 6 --block 5
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import msgpack  # noqa: E402
import redis  # noqa: E402

from bench.common.servers import RedisServer  # noqa: E402
from cachekit import Cache  # noqa: E402
from cachekit._core.serialization import MsgpackSerializer, Packed, for_sharing, load_packed  # noqa: E402

N = 1000
FLOOR = "baseline: all misses, the unavoidable steps only"


def features_of(i: int) -> dict[str, Any]:
    return {"age": i % 90, "country": "de", "clicks_7d": i * 3, "ctr": 0.013 * (i % 7),
            "emb": [0.001 * (i + k) for k in range(8)]}  # fmt: skip


class Bench:
    def __init__(self, url: str, loader_ms: float, loader_us: float, n_ids: int) -> None:
        self.loader_ms = loader_ms
        self.loader_us = loader_us
        self.next_id = 0
        self.loader_span = (0.0, 0.0)  # when the last loader call started and returned
        self.loader_calls = 0
        self.store = {i: features_of(i) for i in range(n_ids)}
        opts: dict[str, Any] = dict(redis_url=url, namespace="bench", l1_max_entries=200_000,
                                    l1_max_bytes=1 << 30, default_ttl=3600)  # fmt: skip
        self.reader = Cache(**opts)
        self.writer = Cache(**opts)  # another replica: fills Redis, not the reader's L1
        self.users = self.reader.features("user", loader=self.load, ttl=3600, version=1)
        self.shared = self.reader.features("user", loader=self.load, ttl=3600, copy=False)
        self.behind = self.reader.features("user", loader=self.load, ttl=3600, write_behind=True)
        self.wusers = self.writer.features("user", loader=self.load, ttl=3600, version=1)
        self.hot = self.fresh(N)
        self.users.prime({i: self.store[i] for i in self.hot})  # reader L1 (and Redis)
        self.shared.prime({i: self.store[i] for i in self.hot})
        self.redis = redis.Redis.from_url(url)
        self.hot_keys = [self.users.cache_key(i) for i in self.hot]
        self.loop = asyncio.new_event_loop()

    def load(self, ids: list[int]) -> dict[int, Any]:
        t0 = time.perf_counter()
        self.loader_calls += 1
        time.sleep(self.loader_ms / 1e3 + self.loader_us / 1e6 * len(ids))
        store = self.store
        out = {i: store[i] for i in ids if i in store}
        self.loader_span = (t0, time.perf_counter())
        return out

    def fresh(self, n: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return ids

    def in_l2_only(self, n: int) -> list[int]:
        ids = self.fresh(n)
        self.wusers.prime({i: self.store[i] for i in ids})
        return ids

    def mixed(self, first: list[int], second: list[int]) -> list[int]:
        ids = first + second
        random.shuffle(ids)
        return ids

    # Each scenario prepares its ids and returns the call to time.
    def s_all_l1(self) -> Callable[[], Any]:
        ids = list(self.hot)
        return lambda: self.users.get_many(ids)

    def s_l1_90(self) -> Callable[[], Any]:
        ids = self.mixed(self.hot[: N * 9 // 10], self.in_l2_only(N // 10))
        return lambda: self.users.get_many(ids)

    def s_l2_90(self) -> Callable[[], Any]:
        ids = self.mixed(self.in_l2_only(N * 9 // 10), self.fresh(N // 10))
        return lambda: self.users.get_many(ids)

    def s_miss(self) -> Callable[[], Any]:
        ids = self.fresh(N)
        return lambda: self.users.get_many(ids)

    def s_shared_all_l1(self) -> Callable[[], Any]:
        ids = list(self.hot)
        return lambda: self.shared.get_many(ids)

    def s_shared_l1_90(self) -> Callable[[], Any]:
        ids = self.mixed(self.hot[: N * 9 // 10], self.in_l2_only(N // 10))
        return lambda: self.shared.get_many(ids)

    def s_shared_miss(self) -> Callable[[], Any]:
        ids = self.fresh(N)
        return lambda: self.shared.get_many(ids)

    def s_behind_miss(self) -> Callable[[], Any]:
        ids = self.fresh(N)
        return lambda: self.behind.get_many(ids)

    def s_behind_miss_written(self) -> Callable[[], Any]:
        ids = self.fresh(N)

        def run() -> Any:
            out = self.behind.get_many(ids)
            assert self.behind.flush(10.0)
            return out

        return run

    def s_async_l1_90(self) -> Callable[[], Any]:
        ids = self.mixed(self.hot[: N * 9 // 10], self.in_l2_only(N // 10))
        return lambda: self.loop.run_until_complete(self.users.aget_many(ids))

    def b_get_loop(self) -> Callable[[], Any]:
        get, keys = self.redis.get, self.hot_keys

        def run() -> list[Any]:
            return [
                msgpack.unpackb(cast(bytes, get(k))[1:], raw=False, strict_map_key=False)
                for k in keys
            ]

        return run

    def mget_decode(self, keys: list[str]) -> Callable[[], Any]:
        mget = self.redis.mget

        def run() -> list[Any]:
            return [
                msgpack.unpackb(cast(bytes, v)[1:], raw=False, strict_map_key=False)
                for v in mget(keys)
            ]

        return run

    def b_mget(self) -> Callable[[], Any]:
        return self.mget_decode(self.hot_keys)

    def b_mget_tenth(self) -> Callable[[], Any]:
        return self.mget_decode(self.hot_keys[: N // 10])

    def b_floor_miss(self) -> Callable[[], Any]:
        """The all-miss steps no implementation can skip, and nothing else: each id's L1 key,
        one L1 probe, one MGET of the misses, the loader, the result dict (no single-flight,
        negative entries, dedupe, telemetry or write)."""
        ids = self.fresh(N)
        l1, mget, load = self.reader._engine.l1, self.redis.mget, self.load
        assert l1 is not None
        tok = "floor"  # L1 keys shaped like a feature set's (str, id): fresh ids miss alike
        prefix = self.behind.cache_key(0)[: -len("i0")]

        def run() -> dict[int, Any]:
            items = l1.get_items([(tok, i) for i in ids])
            missed = [i for i, item in zip(ids, items, strict=True) if item is None]
            datas = mget([f"{prefix}i{i}" for i in missed])
            need = [i for i, d in zip(missed, datas, strict=True) if d is None]
            found = load(need)
            return {i: found[i] for i in need if i in found}

        return run

    def copies(self, reps: int) -> tuple[float, float]:
        """Median ms to copy 1,000 packed feature values as L1 holds them: one ``Packed.load``
        each, and one :func:`load_packed` of them all (what a get_many of L1 hits does),
        interleaved, in this process (which by now holds what the scenarios stored)."""
        serializer = MsgpackSerializer()
        held = [for_sharing(serializer, self.store[i]) for i in self.hot]
        one: list[float] = []
        batch: list[float] = []
        for _ in range(reps):
            t0 = time.perf_counter()
            a = [v.load() if type(v) is Packed else v for v in held]
            t1 = time.perf_counter()
            b = load_packed(held)
            t2 = time.perf_counter()
            assert a == b
            one.append(t1 - t0)
            batch.append(t2 - t1)
        return statistics.median(one) * 1e3, statistics.median(batch) * 1e3

    def b_loader(self) -> Callable[[], Any]:
        ids = self.fresh(N)
        return lambda: self.load(ids)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--loader-ms", type=float, default=2.0)
    ap.add_argument("--loader-us", type=float, default=5.0)
    ap.add_argument("--block", type=int, default=1, help="calls of a scenario back to back")
    args = ap.parse_args()
    if args.reps < 1 or args.block < 1:
        ap.error("--reps and --block must be >= 1")

    server = RedisServer().start()
    try:
        # Every repetition takes fresh ids (about 7,300 of them): the feature source holds
        # enough for all of them, and at least 200,000 entries.
        calls = args.reps * args.block
        b = Bench(server.url, args.loader_ms, args.loader_us, max(200_000, (calls + 2) * 8 * N))
        scenarios: list[tuple[str, Callable[[], Callable[[], Any]]]] = [
            ("get_many, 100% L1 hits", b.s_all_l1),
            ("get_many, 90% L1 hits + 10% L2", b.s_l1_90),
            ("aget_many, 90% L1 hits + 10% L2", b.s_async_l1_90),
            ("get_many, 90% L2 hits + 10% loaded", b.s_l2_90),
            ("get_many, all misses (loaded)", b.s_miss),
            ("copy=False: get_many, 100% L1 hits", b.s_shared_all_l1),
            ("copy=False: get_many, 90% L1 hits + 10% L2", b.s_shared_l1_90),
            ("copy=False: get_many, all misses (loaded)", b.s_shared_miss),
            ("write_behind: get_many, all misses (loaded)", b.s_behind_miss),
            ("write_behind: get_many + its background write", b.s_behind_miss_written),
            ("baseline: per-id GET loop", b.b_get_loop),
            ("baseline: one MGET + decode", b.b_mget),
            ("baseline: one MGET of 100 keys + decode", b.b_mget_tenth),
            (FLOOR, b.b_floor_miss),
            ("baseline: loader called directly", b.b_loader),
        ]
        times: dict[str, list[float]] = {name: [] for name, _ in scenarios}
        # Where an all-miss call's time goes: before the loader, in it, after it.
        split = ("write_behind: get_many, all misses (loaded)", FLOOR)
        phases: dict[str, list[tuple[float, float, float]]] = {name: [] for name in split}
        for _, setup in scenarios:  # warm-up: connections, code paths
            setup()()
        for _ in range(args.reps):
            for name, setup in scenarios:
                for call in [setup() for _ in range(args.block)]:
                    t0 = time.perf_counter()
                    out = call()
                    t1 = time.perf_counter()
                    times[name].append(t1 - t0)
                    if name in phases:
                        t_in, t_out = b.loader_span
                        phases[name].append((t_in - t0, t_out - t_in, t1 - t_out))
                    assert b.behind.flush(10.0)  # untimed: no write runs inside another timing
                    if "get_many" in name:
                        assert len(out) == N and not out.failed, name
        b.loop.close()

        med = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
        loop_ms = med["baseline: per-id GET loop"]
        mget_ms = med["baseline: one MGET + decode"]
        loader_ms = med["baseline: loader called directly"]
        mode = "cold, one call per round" if args.block == 1 else f"blocks of {args.block}"
        print(f"get_many of {N} ids, {args.reps} rounds ({mode}), medians; loader = "
              f"{args.loader_ms:g} ms + {args.loader_us:g} us/id (time.sleep), "
              f"redis-server on loopback")  # fmt: skip
        print()
        print(
            "| scenario | median ms | p90 ms | vs per-id GET loop | vs MGET | vs loader directly |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for name, ts in times.items():
            ms = med[name]
            p90 = statistics.quantiles(ts, n=10)[-1] * 1e3 if len(ts) >= 2 else ms
            print(f"| {name} | {ms:.3f} | {p90:.3f} | {loop_ms / ms:.1f}x faster | "
                  f"{ms / mget_ms:.2f}x its time | {loader_ms / ms:.2f}x |")  # fmt: skip
        print()
        print("| all misses, medians | ms before the loader | ms in it | ms after it |")
        print("|---|---:|---:|---:|")
        for name, spans in phases.items():
            ms3 = [statistics.median(x[k] for x in spans) * 1e3 for k in range(3)]
            print(f"| {name} | {ms3[0]:.3f} | {ms3[1]:.3f} | {ms3[2]:.3f} |")
        one, batch = b.copies(200)
        print()
        print(f"copies of 1,000 packed values (medians of 200, interleaved): one load each "
              f"{one:.3f} ms, load_packed {batch:.3f} ms ({batch / one:.2f}x)")  # fmt: skip
        b.reader.close()
        b.writer.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
