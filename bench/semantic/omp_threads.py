"""HNSW batch search against OpenMP thread count: p50 per batch size and thread count.

``FaissIndex`` searches batches of 2 to 64 queries on one OpenMP thread (waking a team cost
milliseconds on 2 cores, where the callers need the cores). This times the graph the index
builds (``IndexHNSWSQ``, float16 vectors, M=32, efConstruction 80, efSearch 64) at ``--n``
clustered unit vectors, batch by batch, at each thread count, to show what that choice costs
on a machine with more cores. faiss alone, no cachekit code; nothing else runs meanwhile.

Examples::

    python -m bench.semantic.omp_threads                       # 100k vectors, threads 1,2,4,8,16
    python -m bench.semantic.omp_threads --n 3000 --threads 1,2
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import faiss
import numpy as np

#: Query vectors drawn once; a batch is a slice of them.
QUERIES = 4096


def positive_ints(p: argparse.ArgumentParser, flag: str, text: str, most: int) -> list[int]:
    """A comma-separated list of ints in [1, most], or exit with an argparse error."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        p.error(f"{flag} must be comma-separated integers, got {text!r}")
    if not values or not all(1 <= v <= most for v in values):
        p.error(f"{flag} values must be between 1 and {most}, got {text!r}")
    return values


def build(n: int, dim: int, rng: np.random.Generator) -> tuple[object, np.ndarray]:
    centres = rng.standard_normal((1440, dim)).astype(np.float32)
    x = centres[rng.integers(0, len(centres), n)]
    x += np.float32(0.05) * rng.standard_normal(x.shape, dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    index = faiss.IndexHNSWSQ(
        dim,
        faiss.ScalarQuantizer.QT_fp16,  # type: ignore[arg-type]  # an enum value (int)
        32,
        faiss.METRIC_INNER_PRODUCT,
    )
    index.hnsw.efConstruction = 80
    t0 = time.perf_counter()
    index.add(x)
    print(f"# built {n:,} vectors in {time.perf_counter() - t0:.1f} s")
    index.hnsw.efSearch = 64
    q = x[rng.integers(0, n, QUERIES)]
    q += np.float32(0.02) * rng.standard_normal(q.shape, dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return index, q


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--batches", default="2,4,8,16,32,64,128")
    p.add_argument("--threads", default="1,2,4,8,16")
    p.add_argument("--reps", type=int, default=25, help="searches per cell (p50 printed)")
    p.add_argument("--seconds", type=float, default=60.0, help="stop after this long")
    args = p.parse_args()
    if args.n < 1 or args.reps < 1 or args.dim < 1:
        p.error("--n, --dim and --reps must be at least 1")
    batches = positive_ints(p, "--batches", args.batches, QUERIES)
    threads = positive_ints(p, "--threads", args.threads, 1024)
    cpus, omp = os.cpu_count(), faiss.omp_get_max_threads()
    print(f"# {cpus} cpus, faiss {faiss.__version__}, omp max {omp}")
    index, q = build(args.n, args.dim, np.random.default_rng(0))
    deadline = time.perf_counter() + args.seconds
    print("| batch | " + " | ".join(f"{t} threads" for t in threads) + " |")
    print("|---" * (len(threads) + 1) + "|")
    for m in batches:
        row = []
        for t in threads:
            faiss.omp_set_num_threads(t)
            ms = []
            for r in range(args.reps):
                start = (r * m) % (len(q) - m + 1)
                t0 = time.perf_counter()
                index.search(q[start : start + m], 5)  # type: ignore[attr-defined]
                ms.append((time.perf_counter() - t0) * 1e3)
            row.append(f"{statistics.median(ms):.3f} ms")
        print(f"| {m} | " + " | ".join(row) + " |", flush=True)
        if time.perf_counter() > deadline:
            print("# stopped: --seconds reached")
            break


if __name__ == "__main__":
    main()
