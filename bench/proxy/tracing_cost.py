"""What OpenTelemetry tracing costs an exact hit through the proxy, in process: ``hit_path``'s
measurement (the ASGI app of ``cachekit serve`` answering one stored chat request again and
again, microseconds per request) with tracing off and on, in interleaved rounds (off, on, then
on, off, ...) so that drift of the machine falls on both. Off is the default: ``span()`` returns
one shared no-op object and no middleware is installed. On: an SDK ``TracerProvider`` whose
batch span processor hands each span to an exporter that drops it (the cost of making and
ending the spans, a server span and a lookup span per hit, without the network). The hit path
without any span call is not in the tree to compare with, so the off path's own share is also
timed alone: a ``with span(...)`` block while tracing is off, against an empty loop::

    python -m bench.proxy.tracing_cost --rounds 3 --reps 7 --n 3000 [--unsampled]

Needs the ``otel`` extra (docs/tracing.md).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import timeit
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

from bench.proxy.hit_path import run
from cachekit import disable_tracing, enable_tracing
from cachekit._core.tracing import span


class Dropped(SpanExporter):
    """An exporter that drops what it is given (and counts it)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def measure(on: bool, reps: int, n: int, exporter: Dropped, sampled: bool = True) -> float:
    """The median microseconds per exact hit over ``reps`` repetitions of ``n`` requests."""
    provider = None
    if on:
        provider = TracerProvider(sampler=ALWAYS_ON if sampled else ALWAYS_OFF)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        enable_tracing(provider)
    try:
        return statistics.median(asyncio.run(run(reps, n)))
    finally:
        disable_tracing()
        if provider is not None:
            provider.shutdown()


def off_block_ns(number: int = 1_000_000) -> float:
    """Nanoseconds a ``with span(...) as s: if s.recording: ...`` block adds while tracing is
    off (what a lookup pays), over an empty loop: the best of 5."""
    disable_tracing()

    def traced() -> None:
        for _ in range(number):
            with span("cachekit.lookup") as s:
                if s.recording:
                    raise AssertionError("tracing is off")

    def bare() -> None:
        for _ in range(number):
            pass

    best = min(timeit.repeat(traced, number=1, repeat=5))
    return (best - min(timeit.repeat(bare, number=1, repeat=5))) / number * 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved off/on rounds")
    ap.add_argument("--reps", type=int, default=7, help="repetitions per measurement")
    ap.add_argument("--n", type=int, default=3000, help="requests per repetition")
    ap.add_argument("--unsampled", action="store_true", help="on: a sampler that drops every trace")
    args = ap.parse_args()
    exporter = Dropped()
    off: list[float] = []
    on: list[float] = []
    for r in range(args.rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        for traced in order:
            hit = measure(traced, args.reps, args.n, exporter, not args.unsampled)
            (on if traced else off).append(hit)
        print(f"round {r + 1}: off {off[-1]:.1f} us, on {on[-1]:.1f} us per exact hit", flush=True)
    extra = [b - a for a, b in zip(off, on, strict=True)]
    print(
        f"exact hit through the ASGI app, {args.rounds} interleaved rounds (median of "
        f"{args.reps} x {args.n} requests each): tracing off {min(off):.1f}-{max(off):.1f} us, "
        f"on{' (unsampled)' if args.unsampled else ''} {min(on):.1f}-{max(on):.1f} us; "
        f"on costs {min(extra):+.1f} to {max(extra):+.1f} us "
        f"per hit ({exporter.spans} spans made and dropped)"
    )
    print(f"a span block while tracing is off: {off_block_ns():.0f} ns")


if __name__ == "__main__":
    main()
