"""Embedding latency of the packaged all-MiniLM-L6-v2: ONNX Runtime vs torch, by thread count.

Each configuration runs in its own subprocess because torch's thread pool is process-wide.
Reported: single-text embed p50/p99 (batch 1, a ~12-token question) and per-text time of a
64-text batch (mixed 6-30 token questions), medians over repetitions, after warm-up.

    python -m bench.embed.latency                 # the default matrix
    python -m bench.embed.latency --reps 300 --batch-reps 15
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# (backend, ORT intra-op threads or torch threads, torch threads while ONNX runs or None)
MATRIX: list[tuple[str, int, int | None]] = [
    ("onnx", 1, None),
    ("onnx", 2, None),
    ("onnx", 2, 1),
    ("torch", 1, None),
    ("torch", 2, None),
]


def texts64() -> list[str]:
    base = [
        "How do I reset my password?",
        "What is the refund policy for annual subscriptions purchased through the app store?",
        "cancel order",
        "My invoice shows the wrong billing address and the VAT number is missing, how can I fix",
        "Is there an API endpoint to export all of my calendar events as ICS files?",
        "router keeps dropping wifi",
        "Can I share my license with a second laptop at home?",
        "Why does the mobile app crash when I upload a profile photo larger than ten megabytes?",
    ]
    return [f"{t} ({i})" for i, t in enumerate(base * 8)]


def one(backend: str, threads: int, torch_threads: int | None, reps: int, batch_reps: int) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT))
    from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder

    if torch_threads is not None:
        import torch

        torch.set_num_threads(torch_threads)
    emb = SentenceTransformerEmbedder(
        backend=backend,  # type: ignore[arg-type]
        num_threads=threads,
    ).load()
    single = ["How do I reset the password of my account?"]
    batch = texts64()
    for _ in range(20):
        emb.embed(single)
    emb.embed(batch)
    t1 = []
    for _ in range(reps):
        t0 = time.perf_counter()
        emb.embed(single)
        t1.append((time.perf_counter() - t0) * 1e3)
    tb = []
    for _ in range(batch_reps):
        t0 = time.perf_counter()
        emb.embed(batch)
        tb.append((time.perf_counter() - t0) * 1e3 / len(batch))
    t1.sort()
    import torch

    return {
        "backend": emb.backend,
        "threads": threads,
        "torch_threads": torch.get_num_threads(),
        "single_p50_ms": statistics.median(t1),
        "single_p99_ms": t1[min(len(t1) - 1, int(len(t1) * 0.99))],
        "batch64_per_text_ms": statistics.median(tb),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--batch-reps", type=int, default=10)
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        backend, threads, tt = args.one.split(",")
        res = one(backend, int(threads), int(tt) if tt else None, args.reps, args.batch_reps)
        print(json.dumps(res))
        return
    print(
        f"# cpus {os.cpu_count()}; medians over {args.reps} single / {args.batch_reps} batch runs"
    )
    print("backend  threads  torch_threads  single_p50_ms  single_p99_ms  batch64_ms_per_text")
    for backend, threads, tt in MATRIX:
        spec = f"{backend},{threads},{'' if tt is None else tt}"
        out = (
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--one",
                    spec,
                    "--reps",
                    str(args.reps),
                    "--batch-reps",
                    str(args.batch_reps),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        r = json.loads(out)
        print(
            f"{r['backend']:7s}  {r['threads']:7d}  {r['torch_threads']:13d}  "
            f"{r['single_p50_ms']:13.2f}  {r['single_p99_ms']:13.2f}  "
            f"{r['batch64_per_text_ms']:19.2f}"
        )


if __name__ == "__main__":
    main()
