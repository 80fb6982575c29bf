"""Semantic hit quality on labelled question pairs: precision, recall and hit rate per threshold.

Protocol (``bench/README.md``): every ``cached`` text goes into the cache, one scope,
its value being its line number; every ``query`` is looked up. A hit is correct when the pair is
a duplicate and the value returned is that pair's own line. Precision = correct hits / hits,
recall = correct hits / duplicates, hit rate = hits / queries.

The pairs are split by a seeded shuffle into a TUNE part and a TEST part. The cache always holds
every cached text (the other part's texts are distractors); only the queries are split. The
default threshold is chosen on TUNE by the rule in :func:`choose_threshold` and reported on TEST.

The sweep takes each query's top-1 neighbour and cosine once (an exact :class:`FaissIndex` over
the same vectors the cache stores) and applies every threshold to it. The figures "at the default
setting" come from real ``answer.lookup`` calls through ``Cache.semantic(threshold=None)``, and are
checked against the sweep's prediction.

Hit policies (``bench/common/policies.py``): ``--policies`` adds the verified policy against the
static thresholds on the test part of the fixed hash split (``cachekit train-verifier`` trains on
``train`` and picks its operating point on ``tune``); ``--replay PREFIX`` replays a request log
through the static thresholds, the verified policy and the error-bounded policy at delta
0.01..0.07; ``--cost`` times the verifier per lookup against one bare torch encode.

Examples::

    python -m bench.quality.hit_quality bench/data/qqp/qqp_pairs_dev.jsonl
    python -m bench.quality.hit_quality bench/data/qqp/qqp_pairs_dev.jsonl --no-cache --policies \\
        --replay bench/data/replay/replay_dev --cost --vectors /tmp/qqp_vectors.npy
    python -m bench.quality.hit_quality bench/data/qqp/qqp_pairs_dev.jsonl --backend onnx \\
        --compare torch
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

from bench.common import data
from bench.common import policies as _policies
from cachekit.semantic.embed.embedder import CachedEmbedder, SentenceTransformerEmbedder
from cachekit.semantic.index.faiss_index import FaissIndex
from cachekit.semantic.policy.pairs import CacheProtocol

SCOPE_MODEL = "qqp"
# Thresholds searched by the selection rule, and the subset printed as the table.
GRID = [round(0.50 + 0.01 * i, 2) for i in range(50)]
SHOWN = [0.70, 0.75, 0.80, 0.82, 0.84, 0.86, 0.88, 0.90, 0.92, 0.94, 0.95, 0.97]
# F-beta with beta < 1 weighs precision above recall: a false hit serves a wrong answer, a
# missed hit only costs one model call.
BETA = 0.5
TARGET_LABELLED_PRECISION = 0.80


@dataclass(frozen=True)
class Pair:
    line: int
    query: str
    cached: str
    duplicate: bool


@dataclass(frozen=True)
class Scores(CacheProtocol):
    """The library's through-the-cache figures (precision, labelled precision, recall), plus
    ``other``: hits on another pair's entry (wrong by the protocol)."""

    other: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else float("nan")

    def f_beta(self, beta: float = BETA) -> float:
        p, r = self.precision, self.recall
        if not self.hits or p + r == 0:
            return 0.0
        b2 = beta * beta
        return (1 + b2) * p * r / (b2 * p + r)


def load_pairs(path: Path) -> list[Pair]:
    pairs = []
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh):
            if line.strip():
                row = json.loads(line)
                pairs.append(Pair(line_no, row["query"], row["cached"], bool(row["duplicate"])))
    return pairs


def split(pairs: list[Pair], tune_fraction: float, seed: int) -> tuple[list[Pair], list[Pair]]:
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    cut = round(len(pairs) * tune_fraction)
    tune = sorted(order[:cut])
    test = sorted(order[cut:])
    return [pairs[i] for i in tune], [pairs[i] for i in test]


def make_embedder(backend: str) -> CachedEmbedder:
    if backend == "onnx-int8":
        inner = SentenceTransformerEmbedder(backend="onnx", quantize="int8")
    else:
        inner = SentenceTransformerEmbedder(backend=backend)  # type: ignore[arg-type]
    inner.load()
    return CachedEmbedder(inner, max_entries=50_000)


def embed_all(embedder: CachedEmbedder, texts: list[str]) -> tuple[dict[str, np.ndarray], float]:
    unique = list(dict.fromkeys(texts))
    t0 = time.perf_counter()
    vectors = embedder.embed(unique)
    return dict(zip(unique, vectors, strict=True)), time.perf_counter() - t0


def cache_contents(pairs: list[Pair]) -> dict[str, int]:
    """Cached text -> the value the cache ends up holding for it: storing the same text twice
    in one scope replaces the first value, so the last line wins."""
    contents: dict[str, int] = {}
    for p in pairs:
        contents[p.cached] = p.line
    return contents


def top1(
    pairs: list[Pair], contents: dict[str, int], vectors: dict[str, np.ndarray]
) -> dict[int, tuple[float, int]]:
    """For every pair: (cosine, value) of its query's nearest cached text."""
    texts = list(contents)
    index = FaissIndex(len(next(iter(vectors.values()))), exact_max=len(texts) + 1)
    index.add(np.arange(len(texts), dtype=np.int64), np.stack([vectors[t] for t in texts]))
    queries = np.stack([vectors[p.query] for p in pairs])
    sims, ids = index.search(queries, 1)
    values = [contents[texts[i]] for i in ids[:, 0]]
    return {p.line: (float(s), v) for p, s, v in zip(pairs, sims[:, 0], values, strict=True)}


def score(pairs: list[Pair], hits: dict[int, int | None], threshold: float) -> Scores:
    """``hits`` maps a pair's line to the value returned for its query, or None for a miss."""
    n_hits = correct = own_wrong = 0
    for p in pairs:
        value = hits.get(p.line)
        if value is None:
            continue
        n_hits += 1
        correct += int(p.duplicate and value == p.line)
        own_wrong += int(not p.duplicate and value == p.line)
    dups = sum(p.duplicate for p in pairs)
    other = n_hits - correct - own_wrong
    return Scores(threshold, len(pairs), dups, n_hits, correct, own_wrong, other)


def sweep(pairs: list[Pair], nearest: dict[int, tuple[float, int]], threshold: float) -> Scores:
    hits = {line: value for line, (sim, value) in nearest.items() if sim >= threshold}
    return score(pairs, {p.line: hits.get(p.line) for p in pairs}, threshold)


def best_f_beta(tune: list[Pair], nearest: dict[int, tuple[float, int]]) -> Scores:
    """The threshold on the grid that maximises F0.5 on TUNE (ties: the higher)."""
    best: Scores | None = None
    for t in GRID:
        s = sweep(tune, nearest, t)
        if best is None or s.f_beta() >= best.f_beta():
            best = s
    assert best is not None
    return best


def choose_threshold(tune: list[Pair], nearest: dict[int, tuple[float, int]]) -> Scores:
    """The rule: the lowest threshold on the grid at which at least 80% of the hits the labels
    can judge (hits on the query's own pair) are correct on TUNE: at most one wrong answer in
    five, precision first. Falls back to the F0.5 optimum if no threshold gets there."""
    for t in GRID:
        s = sweep(tune, nearest, t)
        if s.labelled_precision >= TARGET_LABELLED_PRECISION:
            return s
    return best_f_beta(tune, nearest)


def fmt(x: float) -> str:
    return "  n/a" if x != x else f"{x:.3f}"


def print_table(title: str, rows: list[tuple[str, Scores]]) -> None:
    print(f"\n{title}")
    print(
        "| threshold | precision | recall | hit rate | F0.5  | hits | correct | wrong: own pair "
        "| wrong: other pair | precision on own-pair hits | queries |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, s in rows:
        print(
            f"| {label:<9} | {fmt(s.precision):>9} | {fmt(s.recall):>6} | {fmt(s.hit_rate):>8} |"
            f" {s.f_beta():.3f} | {s.hits:>4} | {s.correct:>7} | {s.own_wrong} | {s.other} |"
            f" {fmt(s.labelled_precision)} | {s.queries:>7} |"
        )


def real_lookups(
    embedder: CachedEmbedder,
    pairs: list[Pair],
    queries: list[Pair],
    threshold: float | None,
) -> tuple[dict[int, int | None], dict[str, Any], float]:
    """Store every cached text through ``answer.put_many`` and look every query up through
    ``answer.lookup``: the path a user gets. Returns line -> value (None on a miss)."""
    from cachekit import Cache

    cache = Cache(default_ttl=None)

    @cache.semantic(threshold=threshold, ttl=None, embedder=embedder)
    def answer(prompt: str, *, model: str) -> int:
        raise AssertionError("the benchmark never computes")

    try:
        answer.put_many([(p.line, (p.cached,), {"model": SCOPE_MODEL}) for p in pairs])
        got: dict[int, int | None] = {}
        statuses: dict[str, int] = {}
        t0 = time.perf_counter()
        for p in queries:
            res = answer.lookup(p.query, model=SCOPE_MODEL)
            statuses[res.status.value] = statuses.get(res.status.value, 0) + 1
            got[p.line] = int(res.value) if res.hit else None
        elapsed = time.perf_counter() - t0
        info: dict[str, Any] = {"entries": len(answer.tier), "statuses": statuses}
        return got, info, elapsed
    finally:
        answer.close()
        cache.close()


def default_threshold() -> float | None:
    try:
        from cachekit.semantic.policy.hit_policy import DEFAULT_THRESHOLD
    except ImportError:
        return None
    return float(DEFAULT_THRESHOLD)


def run_policies(
    args: argparse.Namespace, pairs: list[Pair], vectors: dict[str, np.ndarray]
) -> None:
    if not (args.policies or args.replay or args.cost):
        return
    from cachekit.semantic.policy.verifier import VerifierModel

    model = VerifierModel.load(args.verifier_model)
    rows = [_policies.Row(p.line, p.query, p.cached, p.duplicate) for p in pairs]
    source = args.verifier_model or "packaged"
    print(
        f"\n# verifier model: {source} ({model.info.get('train_pairs')} train pairs, "
        f"operating point p >= {model.threshold:.2f})"
    )
    if args.policies:
        _policies.qqp_policies(rows, vectors, model)
    if args.replay:
        _policies.replay_policies(data.need_replay(args.replay), vectors, model)
    if args.cost:
        torch_embedder = SentenceTransformerEmbedder(backend="torch")
        torch_embedder.load()
        _policies.verifier_cost(rows, vectors, model, lambda t: torch_embedder.embed([t]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "pairs",
        type=Path,
        nargs="?",
        default=data.QQP_DEV,
        help="labelled pairs (JSON lines: query, cached, duplicate); default: the QQP dev pairs",
    )
    p.add_argument("--backend", choices=["onnx", "onnx-int8", "torch"], default="onnx")
    p.add_argument(
        "--compare",
        choices=["onnx", "torch"],
        default=None,
        help="also sweep with this embedder backend and print both side by side",
    )
    p.add_argument("--split", type=float, default=0.5, help="fraction of pairs in TUNE")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="skip the real lookups through Cache.semantic (sweep only)",
    )
    p.add_argument(
        "--policies",
        action="store_true",
        help="verified policy vs static thresholds on the hash split's test part",
    )
    p.add_argument(
        "--replay",
        default=None,
        metavar="PREFIX",
        help="replay PREFIX.input.jsonl with PREFIX.truth.jsonl through the policies",
    )
    p.add_argument("--cost", action="store_true", help="verifier time per lookup vs one encode")
    p.add_argument(
        "--verifier-model",
        default=None,
        help="verifier model file or directory (default: the packaged one)",
    )
    p.add_argument(
        "--vectors",
        type=Path,
        default=None,
        help="cache of embeddings (.npy + .json beside it), reused when present",
    )
    args = p.parse_args()
    print("$ python " + " ".join(shlex.quote(a) for a in sys.argv))

    pairs = load_pairs(data.need(args.pairs))
    tune, test = split(pairs, args.split, args.seed)
    contents = cache_contents(pairs)
    replaced = sum(1 for q in pairs if q.duplicate and contents[q.cached] != q.line)
    print(
        f"# {len(pairs)} pairs ({sum(q.duplicate for q in pairs)} duplicates), "
        f"{len(contents)} distinct cached texts; TUNE {len(tune)} / TEST {len(test)} "
        f"(seed {args.seed}); {replaced} duplicate pairs share their cached text with a later "
        f"line, whose value replaces theirs"
    )

    results: dict[str, dict[int, tuple[float, int]]] = {}
    embedders: dict[str, CachedEmbedder] = {}
    vectors_by_backend: dict[str, dict[str, np.ndarray]] = {}
    replay = _policies.load_replay(data.need_replay(args.replay)) if args.replay else []
    for backend in [args.backend] + ([args.compare] if args.compare else []):
        embedder = make_embedder(backend)
        texts = [q.cached for q in pairs] + [q.query for q in pairs] + [r[1] for r in replay]
        stored = _policies.load_vectors(args.vectors) if backend == args.backend else None
        if stored is not None and all(t in stored for t in texts):
            vectors, secs = stored, 0.0
        else:
            vectors, secs = embed_all(embedder, texts)
            if backend == args.backend:
                _policies.save_vectors(args.vectors, vectors)
        print(f"# {embedder.name}: embedded {len(vectors)} distinct texts in {secs:.1f}s")
        results[backend] = top1(pairs, contents, vectors)
        vectors_by_backend[backend] = vectors
        embedders[backend] = embedder

    nearest = results[args.backend]
    chosen = choose_threshold(tune, nearest)
    t_star = chosen.threshold
    f_opt = best_f_beta(tune, nearest)
    print(
        f"\nRule: lowest threshold in {GRID[0]}..{GRID[-1]} (step 0.01) whose precision on "
        f"own-pair hits on TUNE is >= {TARGET_LABELLED_PRECISION}. Chosen: {t_star:.2f} (TUNE "
        f"precision {fmt(chosen.precision)}, own-pair precision "
        f"{fmt(chosen.labelled_precision)}, recall {fmt(chosen.recall)})"
    )
    p80 = next((t for t in GRID if sweep(tune, nearest, t).precision >= 0.8), None)
    print(
        f"(Alternatives on TUNE: maximum F{BETA} at {f_opt.threshold:.2f} (precision "
        f"{fmt(f_opt.precision)}, recall {fmt(f_opt.recall)}); lowest threshold with protocol "
        f"precision >= 0.80: {p80})"
    )

    shown = sorted(set(SHOWN) | {t_star})
    for name, part in (("TUNE", tune), ("TEST", test)):
        rows = [
            (f"{t:.2f}" + (" *" if t == t_star else ""), sweep(part, nearest, t)) for t in shown
        ]
        print_table(
            f"{name} half, {embedders[args.backend].name}, sweep over top-1 (* = chosen on TUNE)",
            rows,
        )

    # Context for the data README's reference figures, which compare each query with its own
    # cached text only: no other entry can take the hit.
    vecs = vectors_by_backend[args.backend]
    own = {q.line: float(vecs[q.query] @ vecs[q.cached]) for q in test}
    print(
        f"\nTEST half, each query against its own cached text only (no other entries; "
        f"not the protocol), {embedders[args.backend].name}"
    )
    print("| threshold | precision | recall |")
    print("|---|---|---|")
    for t in shown:
        hit_lines = [q for q in test if own[q.line] >= t]
        good = sum(q.duplicate for q in hit_lines)
        dups = sum(q.duplicate for q in test)
        prec = good / len(hit_lines) if hit_lines else float("nan")
        print(f"| {t:.2f} | {fmt(prec)} | {fmt(good / dups)} |")

    if args.compare:
        other = results[args.compare]
        lines = [q.line for q in test]
        diffs = [abs(nearest[line][0] - other[line][0]) for line in lines]
        same = sum(nearest[line][1] == other[line][1] for line in lines)
        print(
            f"\nBackend parity, TEST half: top-1 cosine |{args.backend} - {args.compare}| max "
            f"{max(diffs):.2e}, mean {np.mean(diffs):.2e}; same top-1 for {same}/{len(lines)}"
        )
        print(
            f"| threshold | P {args.backend} | P {args.compare} | R {args.backend} | "
            f"R {args.compare} | hits {args.backend} | hits {args.compare} |"
        )
        print("|---|---|---|---|---|---|---|")
        for t in shown:
            a, b = sweep(test, nearest, t), sweep(test, other, t)
            print(
                f"| {t:.2f} | {fmt(a.precision)} | {fmt(b.precision)} | {fmt(a.recall)} | "
                f"{fmt(b.recall)} | {a.hits} | {b.hits} |"
            )
        ca = choose_threshold(tune, other)
        print(f"({args.compare} alone would choose {ca.threshold:.2f} on TUNE)")

    run_policies(args, pairs, vectors_by_backend[args.backend])
    if args.no_cache:
        return
    default = default_threshold()
    if default is None:
        print("\ncachekit.semantic.policy is missing: no lookups through the cache")
        return
    if abs(default - t_star) > 1e-9:
        print(f"\nNOTE: policy.DEFAULT_THRESHOLD is {default}, the rule chose {t_star:.2f}")
    got, info, secs = real_lookups(embedders[args.backend], pairs, test, None)
    real = score(test, got, default)
    predicted = sweep(test, nearest, default)
    disagree = sum(
        (got[q.line] is None) != (nearest[q.line][0] < default)
        or (got[q.line] is not None and got[q.line] != nearest[q.line][1])
        for q in test
    )
    print(
        f"\nAt the default setting (Cache.semantic(threshold=None) -> DEFAULT_THRESHOLD "
        f"{default}), {len(test)} TEST queries through answer.lookup, {info['entries']} entries, "
        f"statuses {info['statuses']}, {secs / len(test) * 1e3:.2f} ms/lookup (embeddings "
        f"cached):"
    )
    print_table(
        "TEST half, real lookups vs the sweep's prediction",
        [
            ("cache", real),
            ("sweep", predicted),
        ],
    )
    print(f"lookups that differ from the sweep's prediction: {disagree}/{len(test)}")


if __name__ == "__main__":
    main()
