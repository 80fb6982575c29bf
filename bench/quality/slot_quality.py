"""Hit quality on labelled pairs with and without the slot guard, through ``@cache.semantic``.

Each configuration is a real semantic function (``answer.put`` stores, ``answer.lookup`` asks),
all sharing one embedder so every text is encoded once:

* ``default``: the library's default (``ThresholdPolicy()``: the slot guard at 0.90);
* ``guard@0.92``: the guard at the former default threshold;
* ``unguarded@0.90``, ``unguarded@0.92`` (the former default): no slot work at all,
  ``ThresholdPolicy(t, guard=None, number_bonus=0)``.

Protocols (``bench/README.md``):

* ``own-pair``: each query is looked up against its own pair's cached text only (a scope per
  pair): every hit is judged by the pair's label;
* ``full-cache``: every cached text in one scope, every query looked up: a hit is right when
  the pair is a duplicate and the answer is its own pair's.

Reported: hits, precision, recall (right hits / duplicates) and wrong hits as a share of
requests. The rules were tuned on part of ``qqp_pairs_train.jsonl``; report on files never used
to tune (``qqp_pairs_dev.jsonl``, ``bench/data/doc_pairs.jsonl``).

Examples::

    python -m bench.quality.slot_quality bench/data/qqp/qqp_pairs_dev.jsonl \\
        bench/data/doc_pairs.jsonl
    python -m bench.quality.slot_quality bench/data/doc_pairs.jsonl --protocol full-cache \\
        --backend torch
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from bench.common import data
from cachekit import Cache, Status
from cachekit.semantic.embed.embedder import CachedEmbedder, SentenceTransformerEmbedder
from cachekit.semantic.policy.hit_policy import ThresholdPolicy

CONFIGS: dict[str, Callable[[], ThresholdPolicy]] = {
    "default": ThresholdPolicy,
    "guard@0.92": lambda: ThresholdPolicy(0.92),
    "unguarded@0.90": lambda: ThresholdPolicy(0.90, guard=None, number_bonus=0.0),
    "unguarded@0.92": lambda: ThresholdPolicy(0.92, guard=None, number_bonus=0.0),
}


@dataclass(frozen=True)
class Pair:
    query: str
    cached: str
    duplicate: bool


@dataclass
class Tally:
    requests: int = 0
    duplicates: int = 0
    hits: int = 0
    right: int = 0

    def row(self) -> str:
        wrong = self.hits - self.right
        precision = self.right / self.hits if self.hits else float("nan")
        return (
            f"hits {self.hits:5d}  precision {precision:.3f}  "
            f"recall {self.right / max(1, self.duplicates):.3f}  "
            f"wrong {wrong / max(1, self.requests):6.2%} of {self.requests} requests"
        )


def load(path: Path) -> list[Pair]:
    pairs = []
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                row = json.loads(line)
                try:
                    pairs.append(Pair(row["query"], row["cached"], bool(row["duplicate"])))
                except KeyError as exc:
                    raise SystemExit(f"{path}:{n}: missing {exc}") from None
    return pairs


def run(pairs: list[Pair], policy: ThresholdPolicy, embedder: Any, own_pair: bool) -> Tally:
    cache = Cache(namespace="slot-quality")

    @cache.semantic(embedder=embedder, policy=policy, capacity=len(pairs) + 1, batching=False)
    def answer(text: str, scope: str) -> str:
        raise AssertionError("never called: the bench stores with put")

    cached_ids: dict[str, int] = {}
    for i, p in enumerate(pairs):
        scope = str(i) if own_pair else "all"
        if own_pair or p.cached not in cached_ids:
            cached_ids.setdefault(p.cached, i)
            answer.put(str(i), p.cached, scope)
    tally = Tally()
    for i, p in enumerate(pairs):
        r = answer.lookup(p.query, str(i) if own_pair else "all")
        tally.requests += 1
        tally.duplicates += p.duplicate
        if r.status is Status.SEMANTIC_HIT:
            tally.hits += 1
            own = str(i) if own_pair else str(cached_ids[p.cached])
            tally.right += p.duplicate and r.value == own
    answer.close()
    cache.close()
    return tally


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs", type=Path, nargs="+", help="JSON lines: query, cached, duplicate")
    ap.add_argument("--protocol", choices=["own-pair", "full-cache", "both"], default="both")
    ap.add_argument("--backend", choices=["onnx", "torch"], default="onnx")
    args = ap.parse_args()
    embedder = CachedEmbedder(SentenceTransformerEmbedder(backend=args.backend), 200_000)
    protocols = ["own-pair", "full-cache"] if args.protocol == "both" else [args.protocol]
    for path in args.pairs:
        pairs = load(data.need(path))
        embedder.embed(sorted({t for p in pairs for t in (p.query, p.cached)}))  # once, up front
        print(f"\n{path.name}: {len(pairs)} pairs, {sum(p.duplicate for p in pairs)} duplicates")
        for protocol in protocols:
            for name, make in CONFIGS.items():
                tally = run(pairs, make(), embedder, protocol == "own-pair")
                print(f"  {protocol:10s} {name:15s} {tally.row()}")


if __name__ == "__main__":
    main()
