"""Labelled pairs and the measures every learned part is judged by.

A labelled pair is ``{"query", "cached", "duplicate"}``: would the answer cached for ``cached``
answer ``query``. This module reads them, splits them into parts that share no text (so a figure
on the held-back part is not inflated by a question the model saw in training), and scores a
similarity under the two protocols of ``docs/hit-quality.md``:

* own pair: each query against its own pair's cached text (:func:`average_precision`,
  :func:`precision_at_recall`);
* through the cache: every cached text stored, each query answered by its nearest neighbour
  (:func:`cache_protocol`).

Pure numpy; nothing here loads a model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = [
    "CacheProtocol",
    "LabelledPair",
    "average_precision",
    "cache_protocol",
    "component_parts",
    "latest_labels",
    "precision_at_recall",
    "read_pairs",
    "write_pairs",
]


@dataclass(frozen=True, slots=True)
class LabelledPair:
    line: int
    query: str
    cached: str
    duplicate: bool


def read_pairs(path: str | Path) -> list[LabelledPair]:
    """JSON lines ``{"query", "cached", "duplicate"}``; a bad line raises ValueError naming its
    number. Extra keys are ignored."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                q, c, d = row["query"], row["cached"], row["duplicate"]
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(
                    f"{path}:{n + 1}: expected query, cached, duplicate ({exc})"
                ) from exc
            if not isinstance(q, str) or not isinstance(c, str) or not isinstance(d, bool):
                raise ValueError(f"{path}:{n + 1}: query/cached must be str, duplicate bool")
            if not q.strip() or not c.strip():
                raise ValueError(f"{path}:{n + 1}: query and cached must not be blank")
            out.append(LabelledPair(n, q, c, d))
    return out


def write_pairs(path: str | Path, pairs: Iterable[tuple[str, str, bool]]) -> int:
    """Write ``(query, cached, duplicate)`` rows as JSON lines; returns how many."""
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for query, cached, duplicate in pairs:
            row = {"query": query, "cached": cached, "duplicate": bool(duplicate)}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def latest_labels(
    pairs: Iterable[tuple[str, str, bool]],
) -> tuple[list[tuple[str, str, bool]], int]:
    """Each ``(query, cached)`` once with its latest label, in the order of those latest
    labels, and how many of them were labelled both ways."""
    latest: dict[tuple[str, str], bool] = {}
    disagreed: set[tuple[str, str]] = set()
    for query, cached, duplicate in pairs:
        prev = latest.pop((query, cached), None)
        if prev is not None and prev != duplicate:
            disagreed.add((query, cached))
        latest[(query, cached)] = duplicate
    return [(q, c, d) for (q, c), d in latest.items()], len(disagreed)


def component_parts(
    pairs: Sequence[LabelledPair], held_back: float = 0.2
) -> dict[str, list[LabelledPair]]:
    """Split ``pairs`` into ``train``, ``tune`` and ``test`` so that no text is in two parts.

    Pairs that share a text (directly or through others) form one component; a component goes
    whole to one part, chosen by a hash of its first text, so the split is the same on every run
    and machine. ``held_back`` (0 < x < 1) is the share kept out of training, half ``tune``
    (operating points are chosen on it) and half ``test`` (read only to report)."""
    if not 0.0 < held_back < 1.0:
        raise ValueError(f"held_back must be between 0 and 1, got {held_back!r}")
    parent: dict[str, str] = {}

    def root(text: str) -> str:
        parent.setdefault(text, text)
        while parent[text] != text:
            parent[text] = parent[parent[text]]
            text = parent[text]
        return text

    for p in pairs:
        a, b = root(p.query), root(p.cached)
        if a != b:
            parent[max(a, b)] = min(a, b)
    parts: dict[str, list[LabelledPair]] = {"train": [], "tune": [], "test": []}
    cut_tune = 1.0 - held_back
    cut_test = 1.0 - held_back / 2
    for p in pairs:
        digest = hashlib.blake2b(root(p.query).encode("utf-8", "surrogatepass"), digest_size=8)
        u = int.from_bytes(digest.digest(), "big") / 2.0**64
        parts["train" if u < cut_tune else "tune" if u < cut_test else "test"].append(p)
    return parts


def average_precision(score: npt.ArrayLike, right: npt.ArrayLike) -> float:
    """Average precision of ranking by ``score`` (higher first) for the ``right`` labels: the
    mean of the precision at each right item (ties broken by order given, stably)."""
    s = np.asarray(score, dtype=np.float64)
    r = np.asarray(right, dtype=bool)
    if s.shape != r.shape or s.ndim != 1:
        raise ValueError("score and right must be 1-D and of one length")
    total = int(r.sum())
    if total == 0:
        return float("nan")
    order = np.argsort(-s, kind="stable")
    hits = np.cumsum(r[order])
    precision = hits / np.arange(1, len(s) + 1)
    return float(precision[r[order]].sum() / total)


def precision_at_recall(score: npt.ArrayLike, right: npt.ArrayLike, recall: float) -> float:
    """The precision where recall first reaches ``recall`` as the bar descends (nan if never)."""
    s = np.asarray(score, dtype=np.float64)
    r = np.asarray(right, dtype=bool)
    total = int(r.sum())
    if total == 0:
        return float("nan")
    order = np.argsort(-s, kind="stable")
    hits = np.cumsum(r[order])
    reached = hits / total >= recall - 1e-12
    if not reached.any():
        return float("nan")
    k = int(np.argmax(reached))
    return float(hits[k] / (k + 1))


@dataclass(frozen=True)
class CacheProtocol:
    """Figures of one threshold through the cache: ``hits`` served, ``correct`` of them (the
    pair's own entry, labelled duplicate), ``own_wrong`` (own entry, labelled not a duplicate)."""

    threshold: float
    queries: int
    duplicates: int
    hits: int
    correct: int
    own_wrong: int

    @property
    def precision(self) -> float:
        return self.correct / self.hits if self.hits else float("nan")

    @property
    def labelled_precision(self) -> float:
        judged = self.correct + self.own_wrong
        return self.correct / judged if judged else float("nan")

    @property
    def recall(self) -> float:
        return self.correct / self.duplicates if self.duplicates else float("nan")

    def as_dict(self) -> dict[str, float]:
        return {
            "threshold": round(self.threshold, 4),
            "precision": round(self.precision, 4),
            "recall": round(self.recall, 4),
            "labelled_precision": round(self.labelled_precision, 4),
            "hits": self.hits,
            "queries": self.queries,
        }


def cache_protocol(
    pairs: Sequence[LabelledPair],
    nearest: Sequence[tuple[float, str]],
    threshold: float,
    served: Sequence[bool] | None = None,
) -> CacheProtocol:
    """Score ``pairs`` at ``threshold`` given each query's nearest entry ``(similarity, its
    text)``. A hit on the pair's own ``cached`` text is judged by the pair's label (a text cached
    by several pairs is one entry); a hit on any other entry counts as wrong. ``served``
    (optional, per pair) is False where something other than the threshold (the slot guard)
    refuses the neighbour."""
    hits = correct = own_wrong = 0
    for i, (p, (sim, text)) in enumerate(zip(pairs, nearest, strict=True)):
        if sim < threshold or (served is not None and not served[i]):
            continue
        hits += 1
        if text == p.cached:
            correct += p.duplicate
            own_wrong += not p.duplicate
    dups = sum(p.duplicate for p in pairs)
    return CacheProtocol(threshold, len(pairs), dups, hits, correct, own_wrong)
