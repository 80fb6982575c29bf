"""The verifier: re-scores a scope's nearest entries with more than the cosine.

Candidates above a loose cosine pre-filter get the pair features of
:mod:`cachekit.semantic.policy.verifier_features` (negation, numbers, names, question type, lexical
overlap and difference, length) and a logistic combiner turns them into the probability that the
stored answer answers the query. :class:`VerifiedPolicy` serves the most probable candidate when
that probability clears the model's operating point.

The model is a few dozen numbers in a JSON file: the packaged one
(``cachekit/semantic/verifier_model.json``, see ``docs/verifier-model-card.md``) or one trained on
your own labelled pairs with ``cachekit train-verifier PAIRS.jsonl --out DIR``. Inference is pure
Python (no numpy, no model download); training needs numpy and an embedder.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachekit.semantic.policy.hit_policy import MISS, Candidate, Decision, check_guard
from cachekit.semantic.policy.pairs import LabelledPair, read_pairs
from cachekit.semantic.policy.slots import DEFAULT_GUARD, SlotCheck
from cachekit.semantic.policy.verifier_features import FEATURE_NAMES, pair_features

if TYPE_CHECKING:
    import numpy as np

    from cachekit._core.protocols import Embedder

__all__ = [
    "PACKAGED_MODEL",
    "LabelledPair",
    "VerifiedPolicy",
    "VerifierModel",
    "load_pairs",
    "nearest_texts",
    "pair_part",
    "train_verifier",
]

PACKAGED_MODEL = Path(__file__).with_name("verifier_model.json")
_FORMAT = 1
#: Candidates below this cosine are never verified (nor served): the pre-filter.
DEFAULT_PREFILTER = 0.70
# Hard negatives: a training query's nearest *other* stored texts; a cache offers them too.
_NEGATIVES_PER_QUERY = 4
_L2 = 1.0


@dataclass(frozen=True)
class VerifierModel:
    """Standardise the features, then a logistic regression. ``threshold`` is the probability
    at which :class:`VerifiedPolicy` serves by default; ``prefilter`` the cosine below which a
    candidate is not considered; ``info`` says how the model was trained (see the model card)."""

    weights: tuple[float, ...]
    bias: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    threshold: float
    prefilter: float = DEFAULT_PREFILTER
    features: tuple[str, ...] = FEATURE_NAMES
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if tuple(self.features) != FEATURE_NAMES:
            raise ValueError(
                "verifier model was trained on other features "
                f"({len(self.features)} vs {len(FEATURE_NAMES)}); retrain it with this version"
            )
        n = len(FEATURE_NAMES)
        if not len(self.weights) == len(self.mean) == len(self.scale) == n:
            raise ValueError(f"verifier model needs {n} weights, means and scales")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be a probability in (0, 1), got {self.threshold}")

    def logit(self, cosine: float, query: str, candidate: str) -> float:
        """Log-odds that ``candidate``'s answer answers ``query``."""
        z = self.bias
        for x, w, m, s in zip(
            pair_features(cosine, query, candidate),
            self.weights,
            self.mean,
            self.scale,
            strict=True,
        ):
            z += w * (x - m) / s
        return z

    def probability(self, cosine: float, query: str, candidate: str) -> float:
        return _sigmoid(self.logit(cosine, query, candidate))

    # ------------------------------------------------------------------ files

    def to_json(self) -> dict[str, Any]:
        return {
            "format": _FORMAT,
            "features": list(self.features),
            "weights": list(self.weights),
            "bias": self.bias,
            "mean": list(self.mean),
            "scale": list(self.scale),
            "threshold": self.threshold,
            "prefilter": self.prefilter,
            "info": self.info,
        }

    def save(self, path: str | Path) -> Path:
        """Write the model as JSON to ``path`` (a file, or a directory: ``verifier.json``)."""
        p = Path(path)
        if p.suffix != ".json":
            p.mkdir(parents=True, exist_ok=True)
            p = p / "verifier.json"
        p.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        return p

    @classmethod
    def load(cls, path: str | Path | None = None) -> VerifierModel:
        """Load a model file (or a directory holding ``verifier.json``); None: the packaged one."""
        p = PACKAGED_MODEL if path is None else Path(path)
        if p.is_dir():
            p = p / "verifier.json"
        raw = json.loads(p.read_text())
        if raw.get("format") != _FORMAT:
            raise ValueError(f"{p}: unsupported verifier model format {raw.get('format')!r}")
        return cls(
            weights=tuple(raw["weights"]),
            bias=float(raw["bias"]),
            mean=tuple(raw["mean"]),
            scale=tuple(raw["scale"]),
            threshold=float(raw["threshold"]),
            prefilter=float(raw.get("prefilter", DEFAULT_PREFILTER)),
            features=tuple(raw["features"]),
            info=dict(raw.get("info", {})),
        )


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


class VerifiedPolicy:
    """Serve the candidate the verifier finds most probable, if its probability is at least
    ``min_probability`` (default: the model's operating point) and its cosine at least
    ``prefilter`` (default: the model's). ``model``: a :class:`VerifierModel`, a path to one, or
    None for the packaged model. ``guard``: the slot check candidates pass first (see
    :class:`~cachekit.semantic.policy.hit_policy.HitPolicy`; None opts out)."""

    def __init__(
        self,
        model: VerifierModel | str | Path | None = None,
        *,
        min_probability: float | None = None,
        prefilter: float | None = None,
        guard: SlotCheck | None = DEFAULT_GUARD,
    ) -> None:
        self.guard = check_guard(guard)
        self.model = model if isinstance(model, VerifierModel) else VerifierModel.load(model)
        self.min_probability = (
            self.model.threshold if min_probability is None else float(min_probability)
        )
        if not 0.0 < self.min_probability < 1.0:
            raise ValueError(f"min_probability must be in (0, 1), got {min_probability!r}")
        self.prefilter = self.model.prefilter if prefilter is None else float(prefilter)

    @property
    def name(self) -> str:
        return f"verified:{self.min_probability:.2f}"

    @property
    def floor(self) -> float:
        """Never serves below its pre-filter."""
        return self.prefilter

    def scores(self, query: str, candidates: Sequence[Candidate]) -> list[float | None]:
        """Each candidate's probability (None below the pre-filter)."""
        return [
            self.model.probability(c.similarity, query, c.text)
            if c.similarity >= self.prefilter
            else None
            for c in candidates
        ]

    def decide(self, query: str, candidates: Sequence[Candidate]) -> Decision:
        best, best_p = None, self.min_probability
        scores = self.scores(query, candidates)
        for i, p in enumerate(scores):
            if p is not None and p >= best_p:
                best, best_p = i, p
        if best is not None:
            return Decision(serve=best)
        first = scores[0] if scores else None
        if first is None:
            return MISS if not candidates else Decision(reason=self._below_prefilter(candidates))
        return Decision(reason=f"verifier {first:.2f} < {self.min_probability:.2f}")

    def _below_prefilter(self, candidates: Sequence[Candidate]) -> str:
        return f"below threshold {candidates[0].similarity:.4f} < {self.prefilter:g}"

    def observe(self, query: str, candidate: Candidate, correct: bool) -> None:
        """The verifier is trained offline; verdicts demote entries through the tier."""

    def __repr__(self) -> str:
        return f"VerifiedPolicy(min_probability={self.min_probability:.3f})"


# ---------------------------------------------------------------------- training


#: Labelled pairs are read by :func:`cachekit.semantic.policy.pairs.read_pairs` (one reader for
#: every learned part); the old name stays.
load_pairs = read_pairs


def pair_part(query: str, cached: str) -> str:
    """``"train"`` (60%), ``"tune"`` (20%) or ``"test"`` (20%): a fixed split by a hash of the
    pair, so every run, and the benchmark, agree on which pairs were never trained or tuned on."""
    raw = f"{query}\x1f{cached}".encode("utf-8", "surrogatepass")
    bucket = int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big") % 10
    return "train" if bucket < 6 else "tune" if bucket < 8 else "test"


def train_verifier(
    pairs: str | Path | Sequence[LabelledPair],
    out: str | Path | None = None,
    *,
    embedder: Embedder | None = None,
    target_precision: float = 0.80,
    log: Callable[[str], None] = print,
) -> VerifierModel:
    """Fit the combiner on the ``train`` part of ``pairs`` (own pairs plus mined hard
    negatives) and pick its operating point on the ``tune`` part: the lowest probability at
    which ``target_precision`` of the hits the labels can judge are right (the rule that chose
    ``DEFAULT_THRESHOLD``). The ``test`` part is not read. Writes ``out/verifier.json``."""

    rows = load_pairs(pairs) if isinstance(pairs, (str, Path)) else list(pairs)
    parts: dict[str, list[LabelledPair]] = {"train": [], "tune": [], "test": []}
    for p in rows:
        parts[pair_part(p.query, p.cached)].append(p)
    train, tune = parts["train"], parts["tune"]
    if sum(p.duplicate for p in train) < 2 or len(train) - sum(p.duplicate for p in train) < 2:
        raise ValueError("need duplicates and non-duplicates among the training pairs")
    t0 = time.perf_counter()
    vec = _embed_texts(embedder, [t for p in train + tune for t in (p.query, p.cached)])
    log(f"embedded {len(vec)} texts in {time.perf_counter() - t0:.1f}s")
    x, y, n_neg = _training_rows(train, vec)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-6] = 1.0
    w, b = _fit_logistic((x - mean) / scale, y, _L2)
    model = VerifierModel(
        tuple(map(float, w)),
        float(b),
        tuple(map(float, mean)),
        tuple(map(float, scale)),
        threshold=0.5,
    )
    cached = list(dict.fromkeys(p.cached for p in rows if pair_part(p.query, p.cached) != "test"))
    threshold, at = _operating_point(model, tune, cached, vec, target_precision)
    info = {
        "trained_on": str(pairs) if isinstance(pairs, (str, Path)) else "pairs",
        "train_pairs": len(train),
        "hard_negatives": n_neg,
        "tune_pairs": len(tune),
        "test_pairs_unread": len(parts["test"]),
        "target_precision": target_precision,
        "tune_at_threshold": at,
        "embedder": getattr(embedder, "name", "all-MiniLM-L6-v2"),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    model = VerifierModel(model.weights, model.bias, model.mean, model.scale, threshold, info=info)
    log(
        f"trained on {len(train)} pairs + {n_neg} hard negatives; operating point "
        f"p >= {threshold:.2f} on {len(tune)} tune pairs: {at}"
    )
    if out is not None:
        log(f"wrote {model.save(out)}")
    return model


def _embed_texts(embedder: Embedder | None, texts: list[str]) -> dict[str, np.ndarray]:
    import numpy as np

    if embedder is None:
        from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder()
    unique = list(dict.fromkeys(texts))
    vecs = np.concatenate(
        [
            np.asarray(embedder.embed(unique[i : i + 256]), dtype=np.float32)
            for i in range(0, len(unique), 256)
        ]
    )
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    return dict(zip(unique, vecs, strict=True))


def nearest_texts(
    queries: list[str], pool: list[str], vec: dict[str, np.ndarray], k: int
) -> list[list[tuple[float, str]]]:
    """For each query, its ``k`` nearest texts of ``pool`` by the cosine of their unit vectors
    in ``vec``, best first, as ``(cosine, text)``."""
    import numpy as np

    m = np.stack([vec[t] for t in pool])
    out = []
    for start in range(0, len(queries), 512):
        q = np.stack([vec[t] for t in queries[start : start + 512]])
        sims = q @ m.T
        top = np.argsort(-sims, axis=1)[:, :k]
        out.extend([[(float(sims[r, j]), pool[j]) for j in top[r]] for r in range(len(q))])
    return out


def _training_rows(
    train: list[LabelledPair], vec: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, int]:
    import numpy as np

    x: list[list[float]] = []
    y: list[int] = []
    for p in train:
        x.append(pair_features(float(vec[p.query] @ vec[p.cached]), p.query, p.cached))
        y.append(int(p.duplicate))
    pool = list(dict.fromkeys(p.cached for p in train))
    negatives = 0
    near = nearest_texts([p.query for p in train], pool, vec, _NEGATIVES_PER_QUERY + 1)
    for p, cands in zip(train, near, strict=True):
        for sim, text in cands[: _NEGATIVES_PER_QUERY + 1]:
            if text in (p.cached, p.query) or sim < DEFAULT_PREFILTER:
                continue
            x.append(pair_features(sim, p.query, text))
            y.append(0)
            negatives += 1
    return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64), negatives


def _fit_logistic(x: np.ndarray, y: np.ndarray, l2: float) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression by Newton's method (the bias is not penalised)."""
    import numpy as np

    a = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(a.shape[1])
    penalty = np.full(a.shape[1], l2)
    penalty[-1] = 0.0
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(a @ w)))
        grad = a.T @ (p - y) + penalty * w
        hess = (a * (p * (1 - p))[:, None]).T @ a + np.diag(penalty) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.max(np.abs(step))) < 1e-8:
            break
    return w[:-1], float(w[-1])


def _operating_point(
    model: VerifierModel,
    tune: list[LabelledPair],
    cached: list[str],
    vec: dict[str, np.ndarray],
    target: float,
) -> tuple[float, dict[str, Any]]:
    """The lowest probability on a 0.01 grid at which ``target`` of the judgeable hits on
    ``tune`` (each query against every cached text) are right."""
    if not tune:
        return 0.5, {}
    policy = VerifiedPolicy(model, min_probability=0.5)
    best: list[tuple[float, bool, bool]] = []  # (probability, on own pair, duplicate)
    for p, cands in zip(tune, nearest_texts([p.query for p in tune], cached, vec, 4), strict=True):
        offered = [Candidate(i, text, sim) for i, (sim, text) in enumerate(cands)]
        scores = [
            (s, c)
            for s, c in zip(policy.scores(p.query, offered), offered, strict=True)
            if s is not None
        ]
        if scores:
            s, c = max(scores, key=lambda sc: sc[0])
            best.append((s, c.text == p.cached, p.duplicate))
    dups = sum(p.duplicate for p in tune)
    for step in range(5, 96):
        t = step / 100
        hits = [(own, dup) for s, own, dup in best if s >= t]
        judged = [dup for own, dup in hits if own]
        if len(judged) >= 10 and sum(judged) / len(judged) >= target:
            right = sum(judged)
            return t, {
                "judged_precision": round(right / len(judged), 3),
                "precision": round(right / len(hits), 3),
                "recall": round(right / max(1, dups), 3),
            }
    return 0.95, {}
