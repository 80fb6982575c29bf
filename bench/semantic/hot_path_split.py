"""Where a hot path's time goes, part by part, through public interfaces only.

* ``embed``: the default fp32 embedder (``SentenceTransformerEmbedder``, ONNX) on one text of
  4 to 128 tokens (words that are one token each, plus the two special tokens), lengths
  interleaved: p50 per length and a straight line through 4-32 tokens (ms fixed + ms per token).
* ``lookup``: a semantic tier of ``--entries`` entries whose embedder returns precomputed real
  vectors from a table (no forward pass), so a lookup is the tier's own work: ``lookup`` p50
  against ``FaissIndex.search`` alone on the same queries, interleaved.
* ``l1``: 1,000 reads through ``cachetools.LRUCache`` against the same reads and recency
  updates as C-level batch calls on an ``OrderedDict``, interleaved; and
  ``MemoryStore.set_many`` of 100 new entries keyed like a feature set's.

Each part prints medians of ``--reps`` calls; run the script several times for a range::

    python -m bench.semantic.hot_path_split bench/data/qqp/qqp_pairs_dev.jsonl \\
        --part embed,lookup,l1
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.common import data  # noqa: E402
from bench.common.data import load_texts  # noqa: E402
from cachekit import Cache  # noqa: E402
from cachekit.backends.memory import MemoryStore  # noqa: E402

LENGTHS = (4, 8, 16, 32, 64, 128)
WORDS = "one two three four five six seven eight nine ten red blue green black white".split()


def med_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1e3


def interleaved(calls: dict[str, Callable[[], Any]], reps: int) -> dict[str, float]:
    """Median ms of each call, the calls taking turns ``reps`` times."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(reps):
        for name, call in calls.items():
            t = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t)
    return {name: med_ms(ts) for name, ts in times.items()}


def part_embed(embedder: Any, reps: int) -> None:
    def text(tokens: int) -> str:
        return " ".join(WORDS[i % len(WORDS)] for i in range(tokens - 2))

    calls: dict[str, Callable[[], Any]] = {
        str(n): partial(embedder.embed, [text(n)]) for n in LENGTHS
    }
    ms = interleaved(calls, reps)
    short = [n for n in LENGTHS if n <= 32]
    slope, fixed = np.polyfit(short, [ms[str(n)] for n in short], 1)
    print("embed p50 by tokens: " + ", ".join(f"{n}: {ms[str(n)]:.2f} ms" for n in LENGTHS))
    print(f"  line through 4-32 tokens: {fixed:.2f} ms fixed + {slope:.3f} ms per token")


class TableEmbedder:
    """Returns precomputed vectors: the tier's lookup path without a forward pass."""

    name = "table"

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table
        self.dim = len(next(iter(table.values())))

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts])


def part_lookup(embedder: Any, pairs: Path, entries: int, reps: int) -> None:
    cached, novel = load_texts(pairs)
    real = embedder.embed(cached[:2000])
    queries = novel[:reps]
    qv = embedder.embed(queries)
    cache = Cache(default_ttl=None)

    @cache.semantic(  # type: ignore[call-overload]
        threshold=None,
        ttl=None,
        embedder=TableEmbedder(dict(zip(queries, qv, strict=True))),
        capacity=entries + 1,
    )
    def answer(prompt: str, *, model: str) -> str:
        raise AssertionError("the benchmark never computes")

    scope = answer.scope_key("", model="m")
    rng = np.random.default_rng(0)
    vecs = real[rng.integers(0, len(real), entries)]
    vecs = vecs + rng.normal(0, 0.05, vecs.shape).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    texts = [f"t{i}" for i in range(entries)]
    answer.tier.add_vectors(scope, texts, vecs.astype(np.float32), texts)
    index = answer.tier.index(scope)
    index.wait_rebuilt(600)
    lookups: list[float] = []
    searches: list[float] = []
    for i, q in enumerate(queries):
        t0 = time.perf_counter()
        answer.lookup(q, model="m")
        t1 = time.perf_counter()
        index.search(qv[i][None, :], answer.tier.candidates)
        searches.append(time.perf_counter() - t1)
        lookups.append(t1 - t0)
    print(
        f"lookup without a forward pass ({entries:,} entries, {index.mode}) p50 "
        f"{med_ms(lookups):.3f} ms; FaissIndex.search alone p50 {med_ms(searches):.3f} ms"
    )
    cache.close()


def part_l1(reps: int) -> None:
    from cachetools import LRUCache

    keys = [("user", i) for i in range(1000)]
    lru: LRUCache[Any, Any] = LRUCache(maxsize=10**9)
    od: collections.OrderedDict[Any, Any] = collections.OrderedDict()
    for k in keys + [("x", i) for i in range(100_000)]:
        lru[k] = k
        od[k] = k
    get = lru.__getitem__

    def batch() -> list[Any]:
        out = list(map(od.__getitem__, keys))
        collections.deque(map(od.move_to_end, keys), 0)
        return out

    ms = interleaved({"cachetools": lambda: [get(k) for k in keys], "OrderedDict": batch}, reps)
    print(
        f"1,000 L1 reads p50: cachetools.LRUCache {ms['cachetools']:.3f} ms, OrderedDict batch "
        f"{ms['OrderedDict']:.3f} ms"
    )
    store: MemoryStore[Any] = MemoryStore(200_000, 1 << 30)
    nxt = iter(range(10**9))
    times: list[float] = []
    for _ in range(reps):
        items = [(("user", next(nxt)), 1, 3600.0, 100) for _ in range(100)]
        t = time.perf_counter()
        store.set_many(items)
        times.append(time.perf_counter() - t)
    print(f"MemoryStore.set_many of 100 new entries p50 {med_ms(times):.3f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "pairs",
        type=Path,
        nargs="?",
        default=data.QQP_DEV,
        help="a pair file (JSONL of query/cached texts); default: the QQP dev pairs",
    )
    ap.add_argument("--part", default="embed,lookup,l1")
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--entries", type=int, default=10_000)
    args = ap.parse_args()
    parts = {p.strip() for p in args.part.split(",") if p.strip()}
    if not parts <= {"embed", "lookup", "l1"} or args.reps < 1 or args.entries < 1:
        ap.error("--part takes embed, lookup, l1; --reps and --entries must be >= 1")
    embedder: Any = None
    if parts & {"embed", "lookup"}:
        from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder(backend="onnx").load()
    if "embed" in parts:
        part_embed(embedder, args.reps)
    if "lookup" in parts:
        part_lookup(embedder, args.pairs, args.entries, args.reps)
    if "l1" in parts:
        part_l1(args.reps)


if __name__ == "__main__":
    main()
