"""Semantic hit policies: which neighbour may answer for a request.

A false semantic hit serves the answer to a *different* question, so the decision is its own
component rather than a constant buried in the lookup. The tier asks the policy about each
nearest candidate (best first) and serves the first one it accepts; a policy can therefore look
at the texts as well as the score, and a stricter policy can be layered over this protocol.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

__all__ = ["DEFAULT_THRESHOLD", "HitPolicy", "ThresholdPolicy", "resolve_policy"]

#: Cosine similarity above which :class:`ThresholdPolicy` accepts a neighbour by default.
#: Chosen on labelled question pairs (bench/quality.py, QQP dev, all-MiniLM-L6-v2, seeded 50/50
#: split) precision first: the lowest threshold at which at least 80% of the hits the labels can
#: judge are right on the tuning half (at most one wrong answer in five). On the held-out half:
#: 0.80 of judgeable hits right, protocol precision 0.62, recall 0.33. Recall-leaning
#: deployments can pass threshold=0.83 (the F0.5 optimum: precision 0.54, recall 0.61);
#: figures and the trade-off are in docs/benchmarks.md.
DEFAULT_THRESHOLD = 0.92


@runtime_checkable
class HitPolicy(Protocol):
    """Decides whether a stored entry may answer a query.

    ``similarity`` is the cosine similarity of the two texts' embeddings (``-1..1``); ``query``
    is the text being looked up and ``candidate`` the stored entry's text. Both are in the same
    scope already: a policy never has to (and cannot) widen the scope.
    """

    @property
    def name(self) -> str: ...

    def accept(self, similarity: float, query: str, candidate: str) -> bool: ...


class ThresholdPolicy:
    """Accept a neighbour whose similarity is at least ``threshold`` (``0 < threshold <= 1``)."""

    __slots__ = ("threshold",)

    def __init__(self, threshold: float = DEFAULT_THRESHOLD) -> None:
        self.threshold = validate_threshold(threshold)

    @property
    def name(self) -> str:
        return f"threshold:{self.threshold:g}"

    def accept(self, similarity: float, query: str, candidate: str) -> bool:
        return similarity >= self.threshold

    def __repr__(self) -> str:
        return f"ThresholdPolicy({self.threshold!r})"


def validate_threshold(threshold: object) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise TypeError(f"threshold must be a number in (0, 1], got {type(threshold).__name__}")
    value = float(threshold)
    if math.isnan(value) or not 0.0 < value <= 1.0:
        raise ValueError(
            f"threshold must be in (0, 1] (a cosine similarity), got {threshold!r}; "
            "1.0 serves only identical embeddings"
        )
    return value


def resolve_policy(threshold: float | None, policy: HitPolicy | None) -> HitPolicy:
    """The policy for ``threshold=`` / ``policy=`` as given to ``cache.semantic``."""
    if policy is not None:
        if threshold is not None:
            raise ValueError("give threshold= or policy=, not both")
        if not callable(getattr(policy, "accept", None)):
            raise TypeError(
                "policy must have accept(similarity, query, candidate) -> bool, "
                f"got {type(policy).__name__}"
            )
        return policy
    return ThresholdPolicy(DEFAULT_THRESHOLD if threshold is None else threshold)
