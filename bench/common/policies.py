"""Hit-policy measurements for ``bench/quality/hit_quality.py``: the verified policy on QQP, the
error-bounded policy on the replay log, and the verifier's cost per lookup.

Split: :func:`cachekit.semantic.policy.verifier.pair_part` (a hash of the pair: 60% train, 20% tune,
20% test), the split ``cachekit train-verifier`` uses; figures here are on ``test`` only. The
cache holds every cached text of the file (the other parts' texts are distractors).
"""

from __future__ import annotations

import itertools
import json
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cachekit.semantic.arbiter import HitArbiter
from cachekit.semantic.policy.error_bounded import ErrorBoundedPolicy
from cachekit.semantic.policy.hit_policy import DEFAULT_THRESHOLD, Candidate, ThresholdPolicy
from cachekit.semantic.policy.verifier import (
    VerifiedPolicy,
    VerifierModel,
    nearest_texts,
    pair_part,
)
from cachekit.semantic.policy.verifier_features import text_info

K = 4


@dataclass(frozen=True)
class Row:
    line: int
    query: str
    cached: str
    duplicate: bool


def qqp_policies(rows: list[Row], vec: dict[str, np.ndarray], model: VerifierModel) -> None:
    """Precision/recall on the test part: static cosine thresholds vs the verified policy."""
    contents: dict[str, int] = {}
    for r in rows:
        contents[r.cached] = r.line
    test = [r for r in rows if pair_part(r.query, r.cached) == "test"]
    near = nearest_texts([r.query for r in test], list(contents), vec, K)
    dups = sum(r.duplicate for r in test)
    verified = VerifiedPolicy(model)
    # Per query: (cosine of the top-1, its value) and (best verifier probability, its value).
    cos_best, ver_best = [], []
    for r, cands in zip(test, near, strict=True):
        cos_best.append((cands[0][0], contents[cands[0][1]]))
        offered = [Candidate(i, t, s) for i, (s, t) in enumerate(cands)]
        probs = verified.scores(r.query, offered)
        scored = [
            (p, contents[c.text]) for p, c in zip(probs, offered, strict=True) if p is not None
        ]
        ver_best.append(max(scored) if scored else (-1.0, -1))

    def at(best: list[tuple[float, int]], t: float) -> tuple[float, float, float, int]:
        hits = [(r, v) for r, (s, v) in zip(test, best, strict=True) if s >= t]
        right = sum(r.duplicate and v == r.line for r, v in hits)
        prec = right / len(hits) if hits else float("nan")
        return prec, right / dups, len(hits) / len(test), len(hits)

    def judged(best: list[tuple[float, int]], t: float) -> float:
        """Precision over the hits the labels can judge (those on the query's own pair)."""
        own = [r.duplicate for r, (s, v) in zip(test, best, strict=True) if s >= t and v == r.line]
        return sum(own) / len(own) if own else float("nan")

    print(
        f"\n## QQP test part (hash split: {len(test)} queries, {dups} duplicates; the cache "
        f"holds all {len(contents)} cached texts), full-cache protocol"
    )
    base = at(cos_best, DEFAULT_THRESHOLD)
    mine = at(ver_best, verified.min_probability)
    print("| policy | precision | recall | hit rate | hits |\n|---|---|---|---|---|")
    print(
        f"| threshold {DEFAULT_THRESHOLD} (default) | {base[0]:.3f} | {base[1]:.3f} | "
        f"{base[2]:.3f} | {base[3]} |"
    )
    print(
        f"| verified p >= {verified.min_probability:.2f} (operating point chosen on tune) | "
        f"{mine[0]:.3f} | {mine[1]:.3f} | {mine[2]:.3f} | {mine[3]} |"
    )
    better = mine[0] > base[0] and mine[1] > base[1]
    print(f"verified beats the default threshold on both precision and recall: {better}")
    print("\nPrecision against hit rate (test part), each policy swept over its own knob:")
    print(
        "| hit rate | precision: cosine threshold | precision: verified | recall: cosine | "
        "recall: verified | judged precision: cosine | judged precision: verified |\n"
        "|---|---|---|---|---|---|---|"
    )
    for target in (0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40, 0.50):
        c, tc = _at_hit_rate(cos_best, target, at)
        v, tv = _at_hit_rate(ver_best, target, at)
        print(
            f"| {target:.2f} | {c[0]:.3f} | {v[0]:.3f} | {c[1]:.3f} | {v[1]:.3f} | "
            f"{judged(cos_best, tc):.3f} | {judged(ver_best, tv):.3f} |"
        )
    print(
        f"judged precision at the operating points: threshold {DEFAULT_THRESHOLD} "
        f"{judged(cos_best, DEFAULT_THRESHOLD):.3f}, verified "
        f"{judged(ver_best, verified.min_probability):.3f}"
    )
    print(
        "\nBest precision at recall >= 0.50 (test part): "
        f"cosine {_best_at_recall(cos_best, at):.3f}, "
        f"verified {_best_at_recall(ver_best, at):.3f}"
    )
    own_pair(test, vec, verified)


def own_pair(test: list[Row], vec: dict[str, np.ndarray], verified: VerifiedPolicy) -> None:
    """Each query against its own cached text only: no other entry can take the hit, so every
    hit is judged by the labels (the protocol of the published pair-classification figures)."""
    cos = np.array([float(vec[r.query] @ vec[r.cached]) for r in test])
    ver = np.array(
        [verified.model.probability(c, r.query, r.cached) for c, r in zip(cos, test, strict=True)]
    )
    dup = np.array([r.duplicate for r in test])

    def curve(score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(-score)
        tp = np.cumsum(dup[order])
        return tp / np.arange(1, len(order) + 1), tp / dup.sum()

    print("\nTest part, each query against its own cached text only (every hit judged):")
    print(
        "| | precision at recall 0.50 | at recall 0.70 | recall at precision 0.80 | "
        "at precision 0.90 | at the operating point (P / R) |\n|---|---|---|---|---|---|"
    )
    for name, score, bar in (
        ("cosine", cos, DEFAULT_THRESHOLD),
        ("verified", ver, verified.min_probability),
    ):
        prec, rec = curve(score)
        p50, p70 = prec[np.argmax(rec >= 0.5)], prec[np.argmax(rec >= 0.7)]
        enough = np.arange(1, len(prec) + 1) >= 20
        r80 = rec[(prec >= 0.8) & enough].max(initial=0.0)
        r90 = rec[(prec >= 0.9) & enough].max(initial=0.0)
        hit = score >= bar
        op_p = dup[hit].mean() if hit.any() else float("nan")
        op_r = (dup & hit).sum() / dup.sum()
        print(
            f"| {name} | {p50:.3f} | {p70:.3f} | {r80:.3f} | {r90:.3f} | {op_p:.3f} / {op_r:.3f} |"
        )


def _at_hit_rate(
    best: list[tuple[float, int]],
    target: float,
    at: Callable[[list[tuple[float, int]], float], tuple[float, float, float, int]],
) -> tuple[tuple[float, float], float]:
    scores = sorted((s for s, _ in best), reverse=True)
    t = scores[min(len(scores) - 1, max(0, round(target * len(scores)) - 1))]
    p, r, _, _ = at(best, t)
    return (p, r), t


def _best_at_recall(
    best: list[tuple[float, int]],
    at: Callable[[list[tuple[float, int]], float], tuple[float, float, float, int]],
) -> float:
    out = float("nan")
    for t in sorted({s for s, _ in best}, reverse=True):
        p, r, _, _ = at(best, t)
        if r >= 0.5:
            return p
    return out


# ---------------------------------------------------------------------- replay


@dataclass
class _Entry:
    id: int
    scope: str
    text: str
    value: str


def load_replay(prefix: str) -> list[tuple[str, str, str]]:
    """(scope = tenant|model, last user message, true answer id) per request, in log order."""
    truth = {}
    with open(f"{prefix}.truth.jsonl", encoding="utf-8") as fh:
        for line in fh:
            t = json.loads(line)
            truth[t["custom_id"]] = t["answer"]
    out = []
    with open(f"{prefix}.input.jsonl", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            body = r["body"]
            scope = f"{r.get('metadata', {}).get('tenant')}|{body['model']}"
            out.append((scope, body["messages"][-1]["content"], truth[r["custom_id"]]))
    return out


def simulate(
    requests: Sequence[tuple[str, str, str]], vec: dict[str, np.ndarray], policy: Any
) -> dict[str, float]:
    """Replay the log through a policy with the tier's own arbiter: exact repeats are served,
    other requests go to the policy with the scope's top-4 entries; a miss computes (the true
    answer), is checked against a pending exploration, and is stored."""
    arbiter = HitArbiter(policy, decode=lambda e: e, evict=lambda s, t: False)
    dim = len(next(iter(vec.values())))
    scopes: dict[str, tuple[dict[str, str], list[_Entry], np.ndarray]] = {}
    hits = wrong = semantic = 0
    for scope, text, answer in requests:
        exact, entries, mat = scopes.setdefault(
            scope, ({}, [], np.zeros((len(requests), dim), dtype=np.float32))
        )
        if text in exact:
            hits += 1
            wrong += exact[text] != answer
            continue
        q = vec[text]
        if entries:
            sims = mat[: len(entries)] @ q
            top = np.argsort(-sims)[:K]
            live = [(float(sims[j]), entries[j]) for j in top]
            chosen = arbiter.choose(scope, text, live)
            if chosen is not None:
                hits += 1
                semantic += 1
                wrong += live[chosen][1].value != answer
                continue
            arbiter.computed(scope, text, answer)
        mat[len(entries)] = q
        entries.append(_Entry(len(entries), scope, text, answer))
        exact[text] = answer
    n = len(requests)
    return {
        "error": wrong / n,
        "hit_rate": hits / n,
        "semantic": semantic / n,
        "checks": arbiter.explorations / n,
    }


def replay_policies(
    prefix: str, vec: dict[str, np.ndarray], model: VerifierModel, seeds: int = 3
) -> None:
    requests = load_replay(prefix)
    print(
        f"\n## Replay log {prefix}.*: {len(requests)} requests, scopes = tenant x model; "
        "error = wrong hits / requests"
    )
    static = []
    for step in range(70, 100):
        t = step / 100
        static.append((t, simulate(requests, vec, ThresholdPolicy(t))))
    print("| static threshold | realised error | hit rate |\n|---|---|---|")
    for t, m in static[::2]:
        print(f"| {t:.2f} | {m['error']:.4f} | {m['hit_rate']:.4f} |")
    v = simulate(requests, vec, VerifiedPolicy(model))
    print(
        f"\nverified (p >= {model.threshold:.2f}): error {v['error']:.4f}, hit rate "
        f"{v['hit_rate']:.4f}; static at that error: {_static_at(static, v['error']):.4f}"
    )
    print(
        "\n| delta | score | realised error (seeds) | hit rate (seeds) | static hit rate at "
        "equal error | checks / request |\n|---|---|---|---|---|---|"
    )
    for delta in (0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07):
        for name, verifier in (("cosine", None), ("verified", model)):
            runs = [
                simulate(
                    requests,
                    vec,
                    ErrorBoundedPolicy(delta, verifier=verifier, rng=random.Random(seed)),
                )
                for seed in range(seeds)
            ]
            errs = [r["error"] for r in runs]
            hrs = [r["hit_rate"] for r in runs]
            eq = [_static_at(static, e) for e in errs]
            print(
                f"| {delta:.2f} | {name} | {min(errs):.4f}-{max(errs):.4f} | "
                f"{min(hrs):.4f}-{max(hrs):.4f} | {min(eq):.4f}-{max(eq):.4f} | "
                f"{statistics.mean(r['checks'] for r in runs):.3f} |"
            )


def _static_at(static: list[tuple[float, dict[str, float]]], error: float) -> float:
    """The static thresholds' hit rate at realised error ``error``."""
    return hit_rate_at_error([(m["error"], m["hit_rate"]) for _, m in static], error)


def hit_rate_at_error(points: list[tuple[float, float]], error: float) -> float:
    """The hit rate at realised ``error`` on a curve of ``(error, hit rate)`` points (linear
    interpolation between neighbouring points, the end values outside them)."""
    pts = sorted(points)
    if error <= pts[0][0]:
        return pts[0][1]
    for (e0, h0), (e1, h1) in itertools.pairwise(pts):
        if e0 <= error <= e1:
            return h0 if e1 == e0 else h0 + (h1 - h0) * (error - e0) / (e1 - e0)
    return pts[-1][1]


# ---------------------------------------------------------------------- cost


def verifier_cost(
    rows: list[Row],
    vec: dict[str, np.ndarray],
    model: VerifierModel,
    encode_one: Callable[[str], Any],
    reps: int = 3,
) -> None:
    """The verified policy's added time per lookup (decide() on the top-4 candidates, hit and
    miss apart) against one bare torch encode, interleaved, medians of ``reps`` rounds."""
    contents = list(dict.fromkeys(r.cached for r in rows))
    test = [r for r in rows if pair_part(r.query, r.cached) == "test"]
    near = nearest_texts([r.query for r in test], contents, vec, K)
    offered = [[Candidate(i, t, s) for i, (s, t) in enumerate(c)] for c in near]
    verified = VerifiedPolicy(model)
    threshold = ThresholdPolicy()
    sample = [r.query for r in test[:200]]
    rounds: dict[str, list[float]] = {"hit": [], "miss": [], "threshold": [], "encode": []}
    p99s: dict[str, list[float]] = {"hit": [], "miss": []}
    for _ in range(reps):
        # Cold: no text's tokenisation is memoised, as for a new query and unseen entries.
        text_info.cache_clear()
        model_cost: dict[str, list[float]] = {"hit": [], "miss": [], "threshold": []}
        for r, cands in zip(test, offered, strict=True):
            t0 = time.perf_counter()
            d = verified.decide(r.query, cands)
            t1 = time.perf_counter()
            threshold.decide(r.query, cands)
            t2 = time.perf_counter()
            model_cost["hit" if d.serve is not None else "miss"].append(t1 - t0)
            model_cost["threshold"].append(t2 - t1)
        enc = []
        for text in sample:
            t0 = time.perf_counter()
            encode_one(text)
            enc.append(time.perf_counter() - t0)
        for key in ("hit", "miss", "threshold"):
            rounds[key].append(statistics.median(model_cost[key]))
        for key in ("hit", "miss"):
            p99s[key].append(float(np.percentile(model_cost[key], 99)))
        rounds["encode"].append(statistics.median(enc))
    print(
        f"\n## Verifier cost per lookup (test queries, top-{K} candidates, texts not memoised, "
        f"{reps} interleaved rounds; range of the rounds' p50 and p99)"
    )
    print("| | p50 (ms) | p99 (ms) |\n|---|---|---|")
    for key, label in (("hit", "verified decide(), hit"), ("miss", "verified decide(), miss")):
        print(f"| {label} | {_rng(rounds[key])} | {_rng(p99s[key])} |")
    print(f"| threshold decide() | {_rng(rounds['threshold'])} | |")
    print(f"| one bare torch encode (1 text) | {_rng(rounds['encode'])} | |")


def _rng(xs: list[float]) -> str:
    return f"{min(xs) * 1e3:.3f}-{max(xs) * 1e3:.3f}"


def load_vectors(path: Path | None) -> dict[str, np.ndarray] | None:
    if path is None or not path.exists():
        return None
    data = np.load(path, allow_pickle=False)
    texts = json.loads(path.with_suffix(".json").read_text())
    return dict(zip(texts, data, strict=True))


def save_vectors(path: Path | None, vec: dict[str, np.ndarray]) -> None:
    if path is None:
        return
    texts = list(vec)
    np.save(path, np.stack([vec[t] for t in texts]))
    path.with_suffix(".json").write_text(json.dumps(texts))
