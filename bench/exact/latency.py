"""Exact-tier costs, each next to its baseline measured in the same run.

    python -m bench.exact.latency [--reps 15] [--number 20000]

* L1 hit of ``@cache.cached`` vs ``cachetools.cached`` (TTLCache) on the same function;
* L2 hit (``l1=False``) vs a raw redis-py GET plus msgpack decode of the same value, against a
  redis-server this script starts on a free port;
* miss overhead (lookup + store) vs calling the function bare, L1 only and with Redis.

Per-call times are medians over ``--reps`` repetitions of ``--number`` calls; the repetitions of
cachekit and of its baseline are interleaved.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import statistics
import time
import timeit
from collections.abc import Callable
from typing import Any

import cachetools
import msgpack
import redis

from bench.common.servers import RedisServer
from cachekit import Cache


def bound(
    f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
) -> Callable[[], Any]:
    """``f(*args, **kwargs)`` as a function of nothing, for timeit."""
    if kwargs:
        return lambda: f(*args, **kwargs)
    return lambda: f(*args)


def per_call(fn: Callable[[], object], number: int, reps: int) -> float:
    """Median seconds per call over ``reps`` runs of ``number`` calls."""
    fn()
    runs = timeit.repeat(fn, number=number, repeat=reps)
    return statistics.median(runs) / number


def paired(
    ours: Callable[[], object], base: Callable[[], object], number: int, reps: int
) -> tuple[float, float]:
    """Median seconds per call of each, their repetitions interleaved (alternating which goes
    first), so drift on a shared machine hits both sides alike."""
    ours(), base()
    t_ours: list[float] = []
    t_base: list[float] = []
    for r in range(reps):
        order = ((ours, t_ours), (base, t_base)) if r % 2 else ((base, t_base), (ours, t_ours))
        for fn, acc in order:
            acc.append(timeit.timeit(fn, number=number) / number)
    return statistics.median(t_ours), statistics.median(t_base)


def row(name: str, ours: float, base_name: str, base: float, target: str) -> str:
    return (
        f"| {name} | {ours * 1e6:.2f} µs | {base_name} | {base * 1e6:.2f} µs | "
        f"{ours / base:.2f}x | {target} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument("--l1-only", action="store_true", help="only the L1 hit rows (no Redis)")
    args = ap.parse_args()
    reps, number = args.reps, args.number

    features = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
    value = {"score": 0.93, "label": "positive", "embedding": [0.1] * 16}

    def model(features: tuple[float, ...], model: str = "v1") -> dict[str, object]:
        return value

    rows = []
    # --- L1 hit vs cachetools.cached. A mutable value (the dict) is copied on every cachekit
    # read (decoded from its packed bytes) and handed out as is by cachetools; an immutable one
    # is handed out as is by both.
    frozen = ("positive", 0.93, (0.1,) * 16)

    def frozen_model(features: object, model: str = "v1") -> tuple[object, ...]:
        return frozen

    def keyword_only(x: object, *, scale: float = 1.0) -> tuple[object, ...]:
        return frozen

    cache = Cache()
    cases: list[tuple[str, Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = [
        ("`f(1)`, a keyword-only default, immutable value", keyword_only, (1,), {}),
        ("`f(1, scale=2.0)`, immutable value", keyword_only, (1,), {"scale": 2.0}),
        ("`f(42)`, immutable value", frozen_model, (42,), {}),
        ("`f(0.5)`, immutable value", frozen_model, (0.5,), {}),
        ("`f(42)`, dict value (copied)", model, (42,), {}),
        ("tuple of 8 floats, dict value (copied)", model, (features,), {}),
    ]
    for label, fn, call_args, call_kwargs in cases:
        ours: Callable[..., Any] = cache.cached(ttl=300)(fn)
        theirs: Callable[..., Any] = cachetools.cached(
            cachetools.TTLCache(maxsize=10_000, ttl=300)
        )(fn)
        t_ours, t_theirs = paired(
            bound(ours, call_args, call_kwargs), bound(theirs, call_args, call_kwargs), number, reps
        )
        rows.append(
            row(f"L1 hit, {label}", t_ours, "cachetools.cached (TTLCache)", t_theirs, "<= 1.5x")
        )
    if args.l1_only:
        print_rows(rows, reps, number)
        return

    server = RedisServer().start()
    try:
        # --- L2 hit (no L1) vs raw GET + msgpack decode of the same stored bytes
        l2cache = Cache(redis_url=server.url, namespace="bench", l1=False)
        l2 = l2cache.cached(ttl=300, name="model")(model)
        l2(features)
        raw = redis.Redis.from_url(server.url)
        assert raw.get(l2.cache_key(features)) is not None
        # the baseline: the same value, plain msgpack, under a key of its own
        raw.set("bench:raw", msgpack.packb(value))

        def baseline() -> object:
            return msgpack.unpackb(raw.get("bench:raw"), raw=False)

        assert baseline() == value
        n_l2 = max(number // 20, 200)
        t_l2, t_raw = paired(lambda: l2(features), baseline, n_l2, reps)
        rows.append(
            row("L2 hit (l1=False)", t_l2, "redis-py GET + msgpack decode", t_raw, "<= 1.3x")
        )

        # --- L1 hit of a Redis-backed cache (its invalidation follower running): the hit path
        # must cost what it costs without Redis
        shared = Cache(redis_url=server.url, namespace="bench-l1").cached(ttl=300)(model)
        t_shared, t_theirs = paired(lambda: shared(42), lambda: theirs(42), number, reps)  # type: ignore[arg-type]
        rows.append(
            row(
                "L1 hit with Redis behind it, `f(42)`",
                t_shared,
                "cachetools.cached (TTLCache)",
                t_theirs,
                "<= 1.5x",
            )
        )

        # --- miss overhead: always-new keys, so every call is lookup + compute + store
        counter = itertools.count()

        def bare_model(i: int) -> dict[str, object]:
            return value

        t_bare = per_call(lambda: bare_model(next(counter)), number, reps)
        miss_l1 = Cache(l1_max_entries=1_000_000).cached(ttl=300)(bare_model)
        t_miss_l1 = per_call(lambda: miss_l1(next(counter)), number // 4, reps)
        rows.append(row("miss, L1 only (lookup + store)", t_miss_l1, "bare call", t_bare, "-"))
        miss_l2 = Cache(redis_url=server.url, namespace="bench-miss").cached(ttl=300)(bare_model)
        t_miss_l2 = per_call(lambda: miss_l2(next(counter)), n_l2, reps)
        rows.append(row("miss, L1 + Redis (lookup + store)", t_miss_l2, "bare call", t_bare, "-"))
    finally:
        server.stop()

    print_rows(rows, reps, number)


def print_rows(rows: list[str], reps: int, number: int) -> None:
    print(
        f"# bench/exact/latency.py  ({platform.python_implementation()} "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}, reps={reps}, number={number})"
    )
    print("| what | cachekit | baseline | baseline time | ratio | target |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
