"""Benchmark FaissIndex: exact (flat) vs approximate (HNSW) build time, search latency, recall@1.

Data: ``--data model`` (default) embeds a few thousand template-generated questions with the
packaged all-MiniLM-L6-v2 (ONNX) as cluster centres; stored vectors are centre + Gaussian noise
(renormalised, pairwise cosine ~0.85 inside a cluster, like paraphrases), and queries are stored
vectors + smaller noise (cosine ~0.97 to their source: near-duplicate cache lookups).
``--data random`` uses random unit vectors as centres instead (no model needed).
Recall@1 is the fraction of queries whose HNSW top-1 id equals the exact top-1 id.

Examples::

    python -m bench.semantic.index --sizes 10k,100k
    python -m bench.semantic.index --sizes 1m --queries 200
    python -m bench.semantic.index --crossover            # flat vs HNSW batch-1 p50 at small sizes
    python -m bench.semantic.index --sizes 100k --efc 40,80,200 --ef 16,32,64,128
    python -m bench.semantic.index --stall --rebuild-sizes 100k,1m   # lookups across rebuilds

``--stall`` measures what lookups see while the index restructures itself: a reader thread
searches (batch 1) back to back while a writer adds one vector every ``--write-every-ms``,
across (a) the exact-to-HNSW migration, starting just under ``exact_max`` (8k) and writing
through it, and (b) a tombstone rebuild at each ``--rebuild-sizes``: an HNSW index of that size
has just over 25% of its ids removed, which triggers the rebuild. Both run with the rebuild in
the background (the default) and, as the baseline, synchronous (``background_min`` above the
size: the write that triggers it holds the lock for the whole build). The removals up to just
under the rebuild threshold are made before the window, in batches of 1000; one more batch of
1000 inside the window triggers the rebuild. Printed per case: the
worst, p99 and p50 search latency and the worst write latency over the window, the rebuild's
duration, and how many searches and writes were served meanwhile (for a rebuild, the searches
still running when the triggering removal came, or begun later; the worst one that ended before
it is printed on a comment line). The reader's first 20 searches are a warm-up, not counted.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

from bench.common.templates import SUBJECTS, VERBS, parse_size
from cachekit.semantic.index.faiss_index import DEFAULT_BACKGROUND_MIN, FaissIndex

DIM = 384
STORE_NOISE = 0.0215  # per-dim std; |noise| ~ 0.42 -> cosine between cluster members ~0.85
QUERY_NOISE = 0.0125  # |noise| ~ 0.25 -> cosine to the source vector ~0.97


def template_texts(n: int) -> list[str]:
    subjects, verbs = SUBJECTS, VERBS
    frames = [
        "How do I {v} my {s}?",
        "What is the fastest way to {v} the {s}",
        "I can't {v} my {s}, please help",
        "Steps to {v} a {s} on mobile",
        "Is it possible to {v} my {s} without support?",
        "why does {v} {s} fail",
    ]
    combos = itertools.product(frames, verbs, subjects)
    return [f.format(v=v, s=s) for f, v, s in itertools.islice(combos, n)]


def centres(kind: str, count: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "random":
        x = rng.standard_normal((count, DIM)).astype(np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)
    cache = Path(os.environ.get("TMPDIR", "/tmp")) / f"cachekit_bench_centres_{count}.npy"
    if cache.exists():
        return np.load(cache)
    from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder

    emb = SentenceTransformerEmbedder(backend="onnx")
    t0 = time.perf_counter()
    out = emb.embed(template_texts(count))
    print(f"# embedded {len(out)} texts in {time.perf_counter() - t0:.1f}s (cached in {cache})")
    np.save(cache, out)
    return out


def perturb(base: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    out = base + rng.standard_normal(base.shape, dtype=np.float32) * np.float32(sigma)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def make_data(n: int, nq: int, kind: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` stored vectors and ``nq`` queries near stored ones."""
    rng = np.random.default_rng(seed)
    c = centres(kind, 1440, rng)
    stored = np.empty((n, DIM), dtype=np.float32)
    step = 100_000
    for lo in range(0, n, step):  # chunked so 1M does not need a second full-size temporary
        hi = min(n, lo + step)
        stored[lo:hi] = perturb(c[rng.integers(0, len(c), hi - lo)], STORE_NOISE, rng)
    queries = perturb(stored[rng.integers(0, n, nq)], QUERY_NOISE, rng)
    return stored, queries


def latencies(index: FaissIndex, queries: np.ndarray, batch: int, reps: int) -> list[float]:
    times = []
    nb = max(1, len(queries) // batch)
    for r in range(reps):
        lo = (r % nb) * batch
        q = queries[lo : lo + batch]
        t0 = time.perf_counter()
        index.search(q, 10)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(xs, p))


def build(n: int, stored: np.ndarray, exact: bool, efc: int, m: int) -> tuple[FaissIndex, float]:
    index = FaissIndex(DIM, exact_max=n if exact else 0, hnsw_m=m, ef_construction=max(efc, 1))
    ids = np.arange(n, dtype=np.int64)
    t0 = time.perf_counter()
    index.add(ids, stored)
    return index, time.perf_counter() - t0


def run_size(n: int, args: argparse.Namespace) -> None:
    stored, queries = make_data(n, args.queries, args.data)
    reps1 = args.reps if n < 500_000 else max(50, args.reps // 4)
    flat, t_flat = build(n, stored, True, 0, args.m)
    f1 = latencies(flat, queries, 1, reps1)
    f32 = latencies(flat, queries, 32, max(20, reps1 // 8))
    _, truth = flat.search(queries, 1)
    del flat
    print(f"\nN={n:,}  data={args.data}  queries={len(queries)}")
    print(
        f"  exact  build {t_flat:7.2f}s | batch1 p50 {statistics.median(f1):7.3f} ms "
        f"p99 {pct(f1, 99):7.3f} | batch32 p50 {statistics.median(f32):7.2f} ms "
        f"p99 {pct(f32, 99):7.2f}"
    )
    for efc in args.efc:
        hnsw, t_h = build(n, stored, False, efc, args.m)
        assert hnsw.mode == "hnsw"
        for ef in args.ef:
            hnsw.ef_search = ef
            h1 = latencies(hnsw, queries, 1, args.reps)
            h32 = latencies(hnsw, queries, 32, max(20, args.reps // 8))
            _, got = hnsw.search(queries, 1)
            recall = float((got[:, 0] == truth[:, 0]).mean())
            print(
                f"  hnsw M={args.m} efC={efc:3d} ef={ef:3d} build {t_h:7.2f}s | batch1 p50 "
                f"{statistics.median(h1):7.3f} ms p99 {pct(h1, 99):7.3f} | batch32 p50 "
                f"{statistics.median(h32):7.2f} ms p99 {pct(h32, 99):7.2f} | "
                f"recall@1 {recall:.4f} | batch1 speed-up "
                f"x{statistics.median(f1) / statistics.median(h1):.1f}"
            )
        del hnsw


def crossover(args: argparse.Namespace) -> None:
    print("N        flat_p50_ms  hnsw_p50_ms  hnsw_build_s  recall@1")
    for n in [1_000, 2_000, 4_000, 6_000, 8_000, 10_000, 20_000, 50_000]:
        stored, queries = make_data(n, args.queries, args.data)
        flat, _ = build(n, stored, True, 0, args.m)
        hnsw, tb = build(n, stored, False, args.efc[0], args.m)
        hnsw.ef_search = args.ef[0]
        f = statistics.median(latencies(flat, queries, 1, args.reps))
        h = statistics.median(latencies(hnsw, queries, 1, args.reps))
        _, truth = flat.search(queries, 1)
        _, got = hnsw.search(queries, 1)
        print(f"{n:<8d} {f:11.3f}  {h:11.3f}  {tb:12.2f}  {(got == truth).mean():.4f}")


class Traffic:
    """A reader searching back to back and a writer adding one new id every ``every_s``, both
    bounded by ``limit_s``; latencies in seconds."""

    def __init__(
        self,
        index: FaissIndex,
        queries: np.ndarray,
        fresh: np.ndarray,
        first_id: int,
        every_s: float,
        limit_s: float,
    ) -> None:
        self.index, self.queries, self.fresh = index, queries, fresh
        self.first_id, self.every_s, self.limit_s = first_id, every_s, limit_s
        self.reads: list[float] = []
        self.read_at: list[float] = []  # perf_counter at each search's start
        self.writes: list[float] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._read), threading.Thread(target=self._write)]

    def __enter__(self) -> Traffic:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()

    def _read(self) -> None:
        for q in self.queries[:20]:
            # Unrecorded warm-up: this thread's first searches (OpenMP set-up, the tombstone
            # bitmap) are not what the window measures.
            self.index.search(q[None, :], 10)
        deadline = time.perf_counter() + self.limit_s
        for i in itertools.count():
            if self.stop.is_set() or time.perf_counter() > deadline:
                return
            q = self.queries[i % len(self.queries)][None, :]
            t0 = time.perf_counter()
            self.index.search(q, 10)
            self.reads.append(time.perf_counter() - t0)
            self.read_at.append(t0)

    def _write(self) -> None:
        deadline = time.perf_counter() + self.limit_s
        for i in range(len(self.fresh)):
            if self.stop.wait(self.every_s) or time.perf_counter() > deadline:
                return
            t0 = time.perf_counter()
            self.index.add(np.array([self.first_id + i], dtype=np.int64), self.fresh[i : i + 1])
            self.writes.append(time.perf_counter() - t0)


def background_min(mode: str) -> int:
    """The sync baseline: no rebuild is big enough to go to the background."""
    return 10**9 if mode == "sync" else DEFAULT_BACKGROUND_MIN


def stall_row(
    case: str, mode: str, n: int, tr: Traffic, took: float, since: float | None = None
) -> str:
    """Search figures over the searches still running at ``since`` or begun later (all by
    default): one blocked by the triggering write counts, one that ended before it does not."""
    r = [
        x * 1e3
        for x, at in zip(tr.reads, tr.read_at, strict=True)
        if since is None or at + x >= since
    ] or [float("nan")]
    w = [x * 1e3 for x in tr.writes] or [float("nan")]
    return (
        f"| {case} | {n:,} | {mode} | {max(r):.1f} ms | {pct(r, 99):.2f} ms | "
        f"{statistics.median(r):.3f} ms | {max(w):.1f} ms | {took:.2f} s | {len(tr.reads):,} "
        f"| {len(tr.writes):,} |"
    )


def stall_migration(args: argparse.Namespace, mode: str) -> str:
    n = 8_000
    stored, queries = make_data(n + 2_000, args.queries, args.data, seed=1)
    index = FaissIndex(
        DIM,
        exact_max=n,
        hnsw_m=args.m,
        ef_construction=args.efc[0],
        background_min=background_min(mode),
    )
    start = n - 50
    index.add(np.arange(start, dtype=np.int64), stored[:start])
    t0 = time.perf_counter()
    with Traffic(index, queries, stored[start:], start, args.write_every_ms / 1e3, 120) as tr:
        # Bounded: the writer crosses exact_max after ~50 writes; then wait for the build.
        while index.mode == "exact" and time.perf_counter() - t0 < 120:
            index.wait_rebuilt(0.05)
        index.wait_rebuilt(120)
        done = time.perf_counter()
        tr.stop.wait(0.25)  # a little traffic after the swap, inside the window
    assert index.mode == "hnsw" and len(index) == start + len(tr.writes)
    return stall_row("exact->HNSW migration", mode, n, tr, done - t0)


def hnsw_of(n: int, stored: np.ndarray, args: argparse.Namespace, mode: str) -> FaissIndex:
    cache = Path(args.cache_dir) / f"cachekit_bench_hnsw_{n}_{args.m}_{args.efc[0]}"
    index = None
    if cache.exists():
        index = FaissIndex.load(cache)
        index.background_min = background_min(mode)
        print(f"# loaded the {n:,}-entry graph from {cache}")
    if index is None:
        t0 = time.perf_counter()
        # Set-up, not measured: built in this thread with every core.
        index = FaissIndex(
            DIM, exact_max=0, hnsw_m=args.m, ef_construction=args.efc[0], background_min=10**9
        )
        index.add(np.arange(n, dtype=np.int64), stored)
        index.background_min = background_min(mode)
        print(f"# built the {n:,}-entry graph in {time.perf_counter() - t0:.1f}s")
        if args.cache_dir:
            index.save(cache)
    return index


def stall_rebuild(n: int, args: argparse.Namespace, mode: str) -> str:
    stored, queries = make_data(n, args.queries, args.data, seed=2)
    index = hnsw_of(n, stored, args, mode)
    built_at: list[float] = []
    index.rebuild_hook = lambda phase: built_at.append(time.perf_counter())
    fresh = perturb(stored[:20_000], STORE_NOISE, np.random.default_rng(3))
    del stored
    # Tombstones up to just under rebuild_fraction (25%) before the window, in batches of 1000
    # (removing a quarter of a million ids in one call holds the write lock for seconds by
    # itself); inside the window, one more batch of 1000 tips it and the rebuild starts.
    under = int(n * 0.25) - 1_000
    for lo in range(0, under, 1_000):
        index.remove(np.arange(lo, min(under, lo + 1_000), dtype=np.int64))
    assert not index.rebuilding and index.tombstones == under
    # A graph just built or loaded has exactly full arrays: its first add copies them all
    # (seconds at 1M). Taken here, before the window, as a running cache would long have.
    index.add(np.array([n + len(fresh)], dtype=np.int64), fresh[:1])
    gone = np.arange(0, under + 2_000, dtype=np.int64)
    limit = args.rebuild_limit_s
    with Traffic(index, queries, fresh, n, args.write_every_ms / 1e3, limit) as tr:
        tr.stop.wait(0.25)  # traffic before the trigger, inside the window
        t_rm = time.perf_counter()
        index.remove(gone[under:])  # past 25% dead: the rebuild starts
        while not index.wait_rebuilt(60) and time.perf_counter() - t_rm < limit:
            print(
                f"#   {mode} rebuild at {n:,}: {time.perf_counter() - t_rm:.0f}s, "
                f"{len(tr.reads):,} searches, worst {max(tr.reads, default=0) * 1e3:.1f} ms, "
                f"{len(tr.writes):,} writes, worst {max(tr.writes, default=0) * 1e3:.1f} ms",
                flush=True,
            )
        done = time.perf_counter()
        tr.stop.wait(0.25)
    if tr.reads:
        worst = int(np.argmax(tr.reads))
        before = [x for x, at in zip(tr.reads, tr.read_at, strict=True) if at + x < t_rm]
        built = f", build done at {built_at[0] - t_rm:.1f}s" if built_at else ""
        print(
            f"#   worst search began {tr.read_at[worst] - t_rm:.2f}s after the trigger"
            f"{built}, swap done at {done - t_rm:.1f}s; worst search in the "
            f"{len(before)} before the trigger {max(before, default=0) * 1e3:.1f} ms "
            f"(not in the row: it counts searches from the trigger on)",
            flush=True,
        )
    if index.rebuilding:
        return stall_row(
            f"tombstone rebuild, unfinished after {limit:.0f}s",
            mode,
            n,
            tr,
            done - t_rm,
            since=t_rm,
        )
    assert index.tombstones < len(gone) and len(index) == n - len(gone) + len(tr.writes) + 1
    return stall_row("tombstone rebuild", mode, n, tr, done - t_rm, since=t_rm)


def stall(args: argparse.Namespace) -> None:
    print(
        f"# reader: batch-1 searches back to back; writer: one add every "
        f"{args.write_every_ms} ms; efConstruction {args.efc[0]}, M {args.m}"
    )
    rows = []
    for mode in ("background", "sync"):
        rows.append(stall_migration(args, mode))
        print(rows[-1], flush=True)
    for size in args.rebuild_sizes.split(","):
        if not size.strip():
            continue
        for mode in args.rebuild_modes.split(","):
            rows.append(stall_rebuild(parse_size(size), args, mode))
            print(rows[-1], flush=True)
    print(
        "\n| case | entries | rebuild | worst search | search p99 | search p50 | worst write "
        "| rebuild took | searches served | writes served |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", default="10k,100k", help="comma list, e.g. 10k,100k,1m")
    p.add_argument("--queries", type=int, default=1000, help="distinct query vectors")
    p.add_argument("--reps", type=int, default=400, help="timed batch-1 searches per setting")
    p.add_argument("--data", choices=["model", "random"], default="model")
    p.add_argument("--m", type=int, default=32, help="HNSW M")
    p.add_argument("--efc", default="80", help="comma list of HNSW efConstruction")
    p.add_argument("--ef", default="16,32,64,128", help="comma list of HNSW efSearch")
    p.add_argument("--crossover", action="store_true", help="flat vs HNSW at 1k..50k")
    p.add_argument("--stall", action="store_true", help="lookups across migration and rebuilds")
    p.add_argument("--rebuild-sizes", default="100k,1m", help="--stall: tombstone rebuild sizes")
    p.add_argument(
        "--rebuild-modes",
        default="background,sync",
        help="--stall: rebuild modes at --rebuild-sizes (sync at 1M takes minutes)",
    )
    p.add_argument(
        "--rebuild-limit-s",
        type=float,
        default=3600,
        help="--stall: give up on a rebuild after this long",
    )
    p.add_argument("--write-every-ms", type=float, default=5.0, help="--stall: write interval")
    p.add_argument(
        "--cache-dir",
        default=os.environ.get("TMPDIR", "/tmp"),
        help="--stall: where built graphs are saved for reuse ('' not to)",
    )
    args = p.parse_args()
    args.efc = [int(x) for x in args.efc.split(",")]
    args.ef = [int(x) for x in args.ef.split(",")]
    import faiss

    print(
        f"# faiss {faiss.__version__}, omp threads {faiss.omp_get_max_threads()}, "
        f"cpus {os.cpu_count()}; times are search-only medians over repetitions"
    )
    if args.crossover:
        crossover(args)
        return
    if args.stall:
        stall(args)
        return
    for size in args.sizes.split(","):
        run_size(parse_size(size), args)


if __name__ == "__main__":
    main()
