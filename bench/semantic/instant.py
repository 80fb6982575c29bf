"""The cache's own work on a semantic lookup, with embedding taken out: an instant embedder (the
real MiniLM vectors of every text, computed beforehand) behind ``@cache.semantic``, against the
bare FAISS HNSW search of the same vectors.

    python -m bench.semantic.instant bench/data/qqp/qqp_pairs_dev.jsonl [--profile]

Side by side, in rounds whose order rotates:

* ``cache, N threads``: ``--callers`` threads each look up novel texts (not stored) through
  ``fn.lookup`` on a cache holding ``--entries`` entries; the embedder answers from a table, so
  what is timed is keys, the exact-tier miss, the batcher, the index search, the policy and the
  answer;
* ``bare HNSW, batches of 32``: FAISS ``IndexHNSWSQ`` (float16, M 32, efSearch 32, what the
  tier migrates to) holding the same vectors, searched for the same queries 32 at a time.

``--profile`` also runs one caller's lookups under cProfile and prints where the time goes (per
lookup, by function, own time). Vectors are cached in ``--vectors`` (an ``.npy`` beside a text
list) so later runs skip the embedding.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

from bench.semantic.throughput import concurrent
from cachekit import Cache
from cachekit.replay.vectors import PrecomputedEmbedder
from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder


def _texts(pairs: Path) -> list[str]:
    seen: dict[str, None] = {}
    with pairs.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            seen.setdefault(row["cached"], None)
            seen.setdefault(row["query"], None)
    return list(seen)


def _vectors(texts: list[str], cache_file: Path) -> np.ndarray:
    if cache_file.exists():
        vecs = np.load(cache_file)
        if len(vecs) == len(texts):
            return vecs
    emb = SentenceTransformerEmbedder()
    vecs = np.asarray(emb.embed(texts), dtype=np.float32)
    np.save(cache_file, vecs)
    return vecs


def _bare_index(stored: np.ndarray, queries: np.ndarray, batch: int) -> float:
    """Searches per second of a bare HNSW (float16, M 32, efSearch 32), ``batch`` at a time."""
    import faiss

    quantizer: Any = faiss.ScalarQuantizer.QT_fp16
    index = faiss.IndexHNSWSQ(stored.shape[1], quantizer, 32)
    index.hnsw.efSearch = 32
    index.add(stored)
    t0 = time.perf_counter()
    for start in range(0, len(queries), batch):
        index.search(queries[start : start + batch], 8)
    return len(queries) / (time.perf_counter() - t0)


def _profile(fn: Any, queries: list[str], top: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for q in queries:
        fn.lookup(q)
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out).sort_stats("tottime")
    stats.print_stats(top)
    return out.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs", type=Path, help="labelled pairs (JSON lines: query, cached, ...)")
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--callers", type=int, default=32)
    ap.add_argument("--lookups", type=int, default=1600, help="novel lookups per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vectors", type=Path, default=Path("/tmp/cachekit-instant-vectors.npy"))
    ap.add_argument("--profile", action="store_true", help="cProfile one caller's lookups")
    args = ap.parse_args()
    texts = _texts(args.pairs)
    if len(texts) < args.entries + args.lookups:
        raise SystemExit(f"{args.pairs} has {len(texts)} texts; need entries + lookups")
    vecs = _vectors(texts, args.vectors)
    instant = PrecomputedEmbedder(texts, vecs, name="all-MiniLM-L6-v2")
    stored, novel = texts[: args.entries], texts[args.entries : args.entries + args.lookups]
    cache = Cache(default_ttl=None)
    fn = cache.semantic(
        lambda text: text, embedder=instant, threshold=0.9, name="bench.instant", capacity=50_000
    )
    fn.put_many([(f"answer {i}", (t,), {}) for i, t in enumerate(stored)])
    fn.tier.wait_ready(30)
    fn.lookup(novel[0])  # warm: the index migrated, the batcher started
    query_vecs = vecs[args.entries : args.entries + args.lookups]
    cache_rates: list[float] = []
    bare_rates: list[float] = []
    for r in range(args.rounds):
        runs = [
            ("cache", lambda: concurrent(fn.lookup, novel, args.callers)),
            ("bare", lambda: _bare_index(vecs[: args.entries], query_vecs, 32)),
        ]
        for name, run in runs if r % 2 == 0 else runs[::-1]:
            (cache_rates if name == "cache" else bare_rates).append(run())
    c, b = statistics.median(cache_rates), statistics.median(bare_rates)
    print(f"{len(stored):,} entries, {args.callers} threads, {len(novel):,} novel lookups a round")
    print(f"  cache:      {c:,.0f} lookups/s ({1e6 / c:.0f} us each), rounds {cache_rates}")
    print(f"  bare HNSW:  {b:,.0f} searches/s ({1e6 / b:.0f} us each), rounds {bare_rates}")
    print(f"  ratio cache / bare: {c / b:.3f} (medians of {args.rounds} rounds)")
    if args.profile:
        print(_profile(fn, novel, 25))
    fn.close()
    cache.close()


if __name__ == "__main__":
    main()
