"""Base against tuned embedder on labelled pairs never used to tune, under both protocols.

Sets (``--sets``): ``qqp-test``: the dev file's test part (the fixed hash split of
``cachekit.semantic.policy.verifier.pair_part``) less every pair with a text in the training file;
``qqp-unseen``: every dev pair with no text in the training file (the condition the project is
judged under from outside); and each ``--other`` file (``bench/data/sentence_pairs.jsonl``:
statements, not questions; ``bench/data/doc_pairs.jsonl``: documentation questions).

Protocols:

* own pair: each query against its own pair's cached text; average precision, precision where
  recall reaches 0.70 / 0.90 (cosine only); and, through the default policy (slot guard, number
  bonus), recall where the wrong-hit rate (wrong hits / pairs) is at most 1%, 2%, 5%, and at each
  model's own operating point;
* through the cache: every cached text, then every query, asked of ``@cache.semantic`` with misses
  stored (the model's own operating point: the base's default threshold, the tune's stored one).
  A hit is right when the pair is a duplicate and the answer is its own cached text's. The sweep
  over thresholds replays the same requests on the vectors (exact search, same policy) and is
  checked against the real run at the operating point.

Example::

    python -m bench.quality.tune /tmp/tuned --train bench/data/qqp/qqp_pairs_train.jsonl \\
        --dev bench/data/qqp/qqp_pairs_dev.jsonl --other bench/data/sentence_pairs.jsonl \\
        --other bench/data/doc_pairs.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

from bench.common import data
from cachekit import Cache
from cachekit.semantic.embed.adapter import load_embedder
from cachekit.semantic.embed.embedder import CachedEmbedder, SentenceTransformerEmbedder
from cachekit.semantic.policy.hit_policy import DEFAULT_NUMBER_BONUS, DEFAULT_THRESHOLD
from cachekit.semantic.policy.pairs import (
    LabelledPair,
    average_precision,
    precision_at_recall,
    read_pairs,
)
from cachekit.semantic.policy.slots import DEFAULT_GUARD, same_numbers
from cachekit.semantic.policy.verifier import pair_part

WRONG_RATES = (0.01, 0.02, 0.05)
#: Neighbours the semantic tier offers its policy (``SemanticTier(candidates=4)``).
CANDIDATES = 4
SWEEP = [round(0.70 + 0.01 * i, 2) for i in range(30)]


def policy_score(query: str, cached: str, cosine: float) -> float:
    """The cosine as the default policy weighs it: raised by the number bonus where the numbers
    match, and -1 where the slot guard refuses."""
    if DEFAULT_GUARD.check(query, cached) is not None:
        return -1.0
    return cosine + (DEFAULT_NUMBER_BONUS if same_numbers(query, cached) else 0.0)


def own_pair(pairs: list[LabelledPair], vec: dict[str, np.ndarray], point: float) -> dict[str, Any]:
    cos = np.array([float(vec[p.query] @ vec[p.cached]) for p in pairs])
    dup = np.array([p.duplicate for p in pairs])
    pol = np.array([policy_score(p.query, p.cached, c) for p, c in zip(pairs, cos, strict=True)])
    out: dict[str, Any] = {
        "AP": average_precision(cos, dup),
        "P@R0.70": precision_at_recall(cos, dup, 0.70),
        "P@R0.90": precision_at_recall(cos, dup, 0.90),
    }
    order = np.argsort(-pol, kind="stable")
    right = np.cumsum(dup[order]) * (pol[order] >= 0)
    wrong = np.cumsum(~dup[order])
    for rate in WRONG_RATES:
        ok = wrong / len(pairs) <= rate
        out[f"R@wrong<={rate:.0%}"] = float(right[ok].max(initial=0) / max(1, dup.sum()))
    served = pol >= point
    out["at_point"] = {
        "threshold": point,
        "recall": float((served & dup).sum() / max(1, dup.sum())),
        "wrong_rate": float((served & ~dup).sum() / len(pairs)),
    }
    return out


def requests_of(pairs: list[LabelledPair]) -> list[str]:
    return list(dict.fromkeys([p.cached for p in pairs] + [p.query for p in pairs]))


def simulate(
    pairs: list[LabelledPair], vec: dict[str, np.ndarray], threshold: float
) -> dict[str, str]:
    """Each request's answer (the text whose entry answered it; its own on a miss) at
    ``threshold``, misses stored, exact search: the cache's behaviour on these vectors."""
    texts = requests_of(pairs)
    dim = len(vec[texts[0]])
    stored = np.zeros((len(texts), dim), dtype=np.float32)
    names: list[str] = []
    answer: dict[str, str] = {}
    for text in texts:
        if names:
            sims = stored[: len(names)] @ vec[text]
            best = np.argsort(-sims, kind="stable")[:CANDIDATES]
            served = next(
                (j for j in best if policy_score(text, names[j], float(sims[j])) >= threshold),
                None,
            )
            if served is not None:
                answer[text] = answer[names[served]]
                continue
        answer[text] = text
        stored[len(names)] = vec[text]
        names.append(text)
    return answer


def judge(pairs: list[LabelledPair], answer: dict[str, str]) -> dict[str, float]:
    hits = sum(answer[p.query] != p.query for p in pairs)
    right = sum(p.duplicate and answer[p.query] == p.cached for p in pairs)
    dups = sum(p.duplicate for p in pairs)
    return {
        "hits": hits,
        "precision": right / hits if hits else float("nan"),
        "recall": right / dups if dups else float("nan"),
    }


def through_cache_real(
    pairs: list[LabelledPair], embedder: Any, threshold: float | None
) -> dict[str, str]:
    """The same requests through ``@cache.semantic``: the path a user gets."""
    cache = Cache(default_ttl=None)

    @cache.semantic(threshold=threshold, ttl=None, embedder=embedder)
    def answer(prompt: str) -> str:
        return prompt

    out = {text: answer(text) for text in requests_of(pairs)}
    cache.close()
    return out


def frontier(pairs: list[LabelledPair], vec: dict[str, np.ndarray]) -> dict[str, float]:
    """Best precision at recall >= 0.50 over the sweep, through the cache."""
    best = float("nan")
    for t in SWEEP:
        s = judge(pairs, simulate(pairs, vec, t))
        if s["recall"] >= 0.50 and not s["precision"] <= best:
            best = s["precision"]
    return {"P@R>=0.50 (sweep)": best}


def load_sets(args: argparse.Namespace) -> dict[str, list[LabelledPair]]:
    train_texts = {t for p in read_pairs(data.need(args.train)) for t in (p.query, p.cached)}
    dev = read_pairs(data.need(args.dev))
    unseen = [p for p in dev if p.query not in train_texts and p.cached not in train_texts]
    sets = {
        "qqp-test": [p for p in unseen if pair_part(p.query, p.cached) == "test"],
        "qqp-unseen": unseen,
    }
    for path in args.other:
        sets[Path(path).stem] = read_pairs(data.need(path))
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tuned", help="a directory written by cachekit tune")
    parser.add_argument(
        "--train", default=data.QQP_TRAIN, help="the pairs the tune was trained on (default: QQP's)"
    )
    parser.add_argument(
        "--dev", default=data.QQP_DEV, help="labelled QQP pairs to report on (default: QQP's dev)"
    )
    parser.add_argument("--other", action="append", default=[], help="more labelled pairs")
    parser.add_argument("--backend", default="onnx", choices=["onnx", "torch"])
    parser.add_argument("--no-cache", action="store_true", help="skip the real cache runs")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()

    sets = load_sets(args)
    base = CachedEmbedder(SentenceTransformerEmbedder(backend=args.backend), 100_000)
    tuned_inner = load_embedder(args.tuned, backend=args.backend)
    tuned = CachedEmbedder(tuned_inner, 100_000)
    models = {
        "base": (base, DEFAULT_THRESHOLD, None),
        "tuned": (tuned, tuned_inner.operating_point, None),  # None: its own point
    }
    figures: dict[str, Any] = {}
    for set_name, pairs in sets.items():
        texts = requests_of(pairs)
        for model_name, (emb, point, threshold) in models.items():
            t0 = time.perf_counter()
            vec = dict(zip(texts, emb.embed(texts), strict=True))
            row: dict[str, Any] = {"own_pair": own_pair(pairs, vec, point)}
            simulated = simulate(pairs, vec, point)
            row["cache_at_point"] = judge(pairs, simulated)
            row.update(frontier(pairs, vec))
            if not args.no_cache:
                real = through_cache_real(pairs, emb, threshold)
                row["cache_real_matches_sweep"] = real == simulated
            row["seconds"] = round(time.perf_counter() - t0, 1)
            figures.setdefault(set_name, {})[model_name] = row
            print(f"{set_name} ({len(pairs)} pairs) {model_name}: {json.dumps(row)}", flush=True)
    print(f"tuned embedder {tuned_inner.name}, operating point {tuned_inner.operating_point}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
