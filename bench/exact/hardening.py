"""What the hardening against hostile entries and awkward keys costs, each next to its baseline
measured in the same run.

    python -m bench.exact.hardening [--reps 15] [--number 20000]

* L1 hit of ``@cache.cached`` with a float argument (checked for -0.0 and NaN) and with an int
  argument (unchecked), each vs ``cachetools.cached`` (TTLCache);
* L2 hit (``l1=False``) with entries signed by ``SignedSerializer`` vs the default msgpack
  serializer, against a redis-server this script starts on a free port;
* an L1 hit followed by a copy of the value (``Packed.load``: what copy-on-read of a mutable
  value costs) vs the L1 hit alone;
* ``decode_envelope`` (with its field checks) vs bare ``msgpack.unpackb`` of the same bytes.

Per-call times are medians over ``--reps`` repetitions of ``--number`` calls, the repetitions
of each pair interleaved.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
import timeit
from collections.abc import Callable

import cachetools
import msgpack

from bench.common.servers import RedisServer
from cachekit import Cache
from cachekit._core.serialization import (
    MsgpackSerializer,
    SignedSerializer,
    decode_envelope,
    for_sharing,
)

FEATURES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
VALUE = {"score": 0.93, "label": "positive", "embedding": [0.1] * 16}


def model(x: object, model: str = "v1") -> dict[str, object]:
    return VALUE


def paired(
    ours: Callable[[], object], base: Callable[[], object], number: int, reps: int
) -> tuple[float, float]:
    """Median seconds per call of each, their repetitions interleaved (alternating which goes
    first)."""
    ours(), base()
    t_ours: list[float] = []
    t_base: list[float] = []
    for r in range(reps):
        order = ((ours, t_ours), (base, t_base)) if r % 2 else ((base, t_base), (ours, t_ours))
        for fn, acc in order:
            acc.append(timeit.timeit(fn, number=number) / number)
    return statistics.median(t_ours), statistics.median(t_base)


def row(name: str, ours: float, base_name: str, base: float) -> str:
    return (
        f"| {name} | {ours * 1e6:.2f} µs | {base_name} | {base * 1e6:.2f} µs | {ours / base:.2f}x |"
    )


def l1_rows(number: int, reps: int) -> list[str]:
    ours = Cache().cached(ttl=300)(model)
    theirs = cachetools.cached(cachetools.TTLCache(maxsize=10_000, ttl=300))(model)
    rows = []
    for label, arg in (("float arg `f(0.5)`", 0.5), ("int arg `f(42)`", 42)):

        def call_ours(a: object = arg) -> object:
            return ours(a)

        def call_theirs(a: object = arg) -> object:
            return theirs(a)

        t_ours, t_theirs = paired(call_ours, call_theirs, number, reps)
        rows.append(row(f"L1 hit, {label}", t_ours, "cachetools.cached", t_theirs))
    held = for_sharing(MsgpackSerializer(), VALUE)
    t_copy, t_hit = paired(lambda: (ours(42), held.load()), lambda: (ours(42), VALUE), number, reps)
    rows.append(row("L1 hit + copy of the value", t_copy, "L1 hit", t_hit))
    return rows


def l2_rows(number: int, reps: int) -> list[str]:
    server = RedisServer().start()
    try:
        plain = Cache(redis_url=server.url, namespace="plain", l1=False)
        signed = Cache(
            redis_url=server.url,
            namespace="signed",
            l1=False,
            serializer=SignedSerializer("msgpack", b"bench-secret-0123456789"),
        )
        fp = plain.cached(ttl=300, name="model")(model)
        fs = signed.cached(ttl=300, name="model")(model)
        n = max(number // 20, 200)
        t_s, t_p = paired(lambda: fs(FEATURES), lambda: fp(FEATURES), n, reps)
        plain.close()
        signed.close()
        return [row("L2 hit, signed entries", t_s, "L2 hit, msgpack", t_p)]
    finally:
        server.stop()


def decode_rows(number: int, reps: int) -> list[str]:
    s = MsgpackSerializer()
    data = b"m" + msgpack.packb([1, 1e9, 300.0, 0.0, None, VALUE])
    payload = data[1:]
    t_dec, t_raw = paired(
        lambda: decode_envelope(s, data), lambda: msgpack.unpackb(payload), number, reps
    )
    return [row("decode_envelope (checked)", t_dec, "msgpack.unpackb", t_raw)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--number", type=int, default=20000)
    args = ap.parse_args()
    rows = (
        l1_rows(args.number, args.reps)
        + l2_rows(args.number, args.reps)
        + decode_rows(args.number, args.reps)
    )
    print(
        f"# bench/exact/hardening.py  ({platform.python_implementation()} "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}, reps={args.reps}, "
        f"number={args.number})"
    )
    print("| what | cachekit | baseline | baseline time | ratio |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
