"""A tuned embedder's lookup against the base's: same architecture, so the same cost.

Two semantic functions hold the same texts (the pair file's ``cached`` texts, up to
``--entries``), one embedding with the packaged base, one with the tune in ``TUNED`` (both ONNX
fp32 unless ``--backend``). Each round looks up ``--queries`` fresh ``query`` texts (never cached,
never looked up before, so every lookup runs a forward pass) in both, alternating which goes
first, and prints the p50 / p90 of each and the ratio of the p50s. Rounds are the repetitions:
report the range of the ratio over them.

Example::

    python -m bench.semantic.tuned_cost /tmp/tuned bench/data/qqp/qqp_pairs_dev.jsonl --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from bench.common import data
from cachekit import Cache
from cachekit.semantic.embed.adapter import load_embedder
from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder
from cachekit.semantic.policy.pairs import read_pairs


def filled(cache: Cache, embedder: Any, texts: list[str], name: str) -> Any:
    @cache.semantic(embedder=embedder, threshold=0.9, ttl=None, name=name, batching=False)
    def answer(prompt: str) -> str:
        return prompt

    answer.put_many([(t, (t,), {}) for t in texts])
    return answer


def quantile(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("tuned", help="a directory written by cachekit tune")
    p.add_argument(
        "pairs",
        nargs="?",
        default=data.QQP_DEV,
        help="labelled pairs whose texts are used (default: the QQP dev pairs)",
    )
    p.add_argument("--backend", choices=["onnx", "torch"], default="onnx")
    p.add_argument("--entries", type=int, default=3000)
    p.add_argument("--queries", type=int, default=200, help="lookups per round and model")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args()

    pairs = read_pairs(data.need(args.pairs))
    cached = list(dict.fromkeys(x.cached for x in pairs))[: args.entries]
    fresh = [q for q in dict.fromkeys(x.query for x in pairs) if q not in set(cached)]
    need = args.warmup + args.rounds * args.queries
    if len(fresh) < need:
        raise SystemExit(f"{len(fresh)} fresh queries, {need} needed: fewer rounds or queries")
    base = SentenceTransformerEmbedder(backend=args.backend, num_threads=1)
    tuned = load_embedder(args.tuned, backend=args.backend, num_threads=1)
    cache = Cache(default_ttl=None)
    fns = {
        "base": filled(cache, base, cached, "base"),
        "tuned": filled(cache, tuned, cached, "tuned"),
    }
    print(f"{len(cached)} entries each; base {base.name}, tuned {tuned.name}")
    for q in fresh[: args.warmup]:
        for fn in fns.values():
            fn.lookup(q)
    queries = iter(fresh[args.warmup :])
    ratios = []
    for r in range(args.rounds):
        times: dict[str, list[float]] = {"base": [], "tuned": []}
        for i in range(args.queries):
            q = next(queries)
            order = ["base", "tuned"] if i % 2 == 0 else ["tuned", "base"]
            for name in order:
                t0 = time.perf_counter()
                fns[name].lookup(q)
                times[name].append((time.perf_counter() - t0) * 1e3)
        b, t = statistics.median(times["base"]), statistics.median(times["tuned"])
        ratios.append(t / b)
        print(
            f"round {r + 1}: base p50 {b:.2f} ms p90 {quantile(times['base'], 0.9):.2f}; "
            f"tuned p50 {t:.2f} ms p90 {quantile(times['tuned'], 0.9):.2f}; tuned/base {t / b:.3f}"
        )
    print(f"tuned/base p50 over {args.rounds} rounds: {min(ratios):.3f}-{max(ratios):.3f}")
    cache.close()


if __name__ == "__main__":
    main()
