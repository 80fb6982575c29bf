"""Semantic hit policies: which neighbour may answer for a request.

A false semantic hit serves the answer to a *different* question, so the decision is its own
component rather than a constant buried in the lookup. The tier offers a policy the nearest live
candidates of the request's scope at once (best first, each with its similarity, entry id and
that entry's own record: how often it answered, how often its answer was confirmed or refuted)
and the policy answers with a :class:`Decision`: which candidate to serve, if any, and which one
to check against the function's fresh answer (an *exploration*). What the check finds, and what
users report through ``cache.feedback``, comes back to the policy through ``observe``.

Two shapes are accepted:

* :class:`HitPolicy`: ``decide(query, candidates) -> Decision`` and ``observe(...)``;
* the older :class:`AcceptPolicy`: ``accept(similarity, query, candidate) -> bool``, asked about
  each candidate in turn (the first accepted one answers). :func:`resolve_policy` wraps it.

:class:`ThresholdPolicy` implements both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from cachekit._core.types import NO_STATS, EntryStats
from cachekit.semantic.policy.slots import DEFAULT_GUARD, SlotCheck, same_numbers

__all__ = [
    "DEFAULT_GUARD",
    "DEFAULT_NUMBER_BONUS",
    "DEFAULT_THRESHOLD",
    "AcceptPolicy",
    "AcceptPolicyAdapter",
    "Candidate",
    "Decision",
    "EntryStats",
    "HitPolicy",
    "SlotCheck",
    "ThresholdPolicy",
    "guard_of",
    "resolve_policy",
]

#: Cosine similarity above which :class:`ThresholdPolicy` accepts a neighbour by default (a
#: neighbour whose slots differ from the query's is refused whatever its similarity; see
#: :mod:`cachekit.semantic.policy.slots`). Chosen with the slot guard on labelled question pairs
#: (QQP, all-MiniLM-L6-v2, each query against its own pair): on 12,000 pairs of the training file
#: the guard lifts precision at equal recall by about 0.03, so the bar comes down from 0.92 to the
#: highest setting that keeps precision >= 0.80 with recall >= 0.40 (guarded 0.90: precision
#: 0.82, recall 0.42; unguarded 0.92: 0.81 / 0.36). Held-out figures, and those of the other
#: sets, are in docs/hit-quality.md ("The slot guard").
DEFAULT_THRESHOLD = 0.90
#: How much lower :class:`ThresholdPolicy`'s bar is for a candidate whose numbers are the query's
#: (both state some, all equal): matching numbers are evidence the embedding does not weigh
#: ("What is seventeen plus 25?" / "17 + 25 = ?" sit near 0.87). Chosen on the same 12,000
#: training pairs: 0.04 left precision unchanged (0.821 -> 0.820) and raised recall 0.422 ->
#: 0.430; the same bonus for matching names cost precision (0.810 at 0.02), so numbers only.
DEFAULT_NUMBER_BONUS = 0.04


@dataclass(frozen=True, slots=True)
class Candidate:
    """A stored entry offered to a policy: its text, its similarity to the query (cosine of the
    embeddings, ``-1..1``), its id (stable across processes) and its own record."""

    entry_id: int
    text: str
    similarity: float
    stats: EntryStats = NO_STATS


@dataclass(frozen=True, slots=True)
class Decision:
    """``serve``: index of the candidate that answers (None: a miss, the function runs).
    ``explore``: index of a candidate whose answer is compared with the function's fresh one
    (only meaningful when nothing is served); the outcome reaches ``observe``. ``reason``: on a
    miss, why the first candidate was not served (shown to users: ``"below threshold 0.91 <
    0.92"``)."""

    serve: int | None = None
    explore: int | None = None
    reason: str | None = field(default=None, compare=False)  # explains; decides nothing


MISS = Decision()


@runtime_checkable
class HitPolicy(Protocol):
    """Decides which, if any, of a scope's nearest entries may answer a query.

    ``candidates`` are live entries of the query's scope, best similarity first (at most the
    tier's ``candidates``, 4 by default; never empty). A policy never has to (and cannot) widen
    the scope. ``observe`` is told whether ``candidate``'s answer was right for ``query``; a
    policy that does not learn ignores it.

    Before ``decide`` sees them, candidates pass the policy's ``guard`` (a
    :class:`~cachekit.semantic.policy.slots.SlotCheck`; see :func:`guard_of`): one whose numbers,
    polarity, names or identifiers differ from the query's, or whose text is past the embedder's
    window, is never offered. A policy without a ``guard`` attribute gets
    :data:`~cachekit.semantic.policy.slots.DEFAULT_GUARD`; ``guard = None`` opts out. A policy that
    never serves below some similarity may say so as ``floor``: candidates under it reach
    ``decide`` unchecked (the check would be wasted on them).
    """

    @property
    def name(self) -> str: ...

    def decide(self, query: str, candidates: Sequence[Candidate]) -> Decision: ...

    def observe(self, query: str, candidate: Candidate, correct: bool) -> None: ...


@runtime_checkable
class AcceptPolicy(Protocol):
    """The one-candidate-at-a-time policy shape (still accepted everywhere a policy is)."""

    @property
    def name(self) -> str: ...

    def accept(self, similarity: float, query: str, candidate: str) -> bool: ...


class ThresholdPolicy:
    """Accept a neighbour whose similarity is at least ``threshold`` (``0 < threshold <= 1``),
    or ``threshold - number_bonus`` when its numbers are the query's (see
    :data:`DEFAULT_NUMBER_BONUS`), and whose slots match the query's (``guard``, see
    :class:`HitPolicy`)."""

    __slots__ = ("guard", "number_bonus", "threshold")

    def __init__(
        self,
        threshold: float = DEFAULT_THRESHOLD,
        *,
        guard: SlotCheck | None = DEFAULT_GUARD,
        number_bonus: float = DEFAULT_NUMBER_BONUS,
    ) -> None:
        self.threshold = validate_threshold(threshold)
        self.guard = check_guard(guard)
        if isinstance(number_bonus, bool) or not isinstance(number_bonus, (int, float)):
            raise TypeError(f"number_bonus must be a number, got {type(number_bonus).__name__}")
        if not 0.0 <= number_bonus < self.threshold:
            raise ValueError(f"number_bonus must be in [0, threshold), got {number_bonus!r}")
        self.number_bonus = float(number_bonus)

    @property
    def name(self) -> str:
        return f"threshold:{self.threshold:g}"

    @property
    def floor(self) -> float:
        """Never serves below its threshold less the number bonus."""
        return self.threshold - self.number_bonus

    def bar(self, query: str, candidate: str) -> float:
        """The similarity ``candidate`` must reach to answer ``query``."""
        if self.number_bonus and same_numbers(query, candidate):
            return self.threshold - self.number_bonus
        return self.threshold

    def accept(self, similarity: float, query: str, candidate: str) -> bool:
        if similarity >= self.threshold:
            return True
        return similarity >= self.floor and similarity >= self.bar(query, candidate)

    def decide(self, query: str, candidates: Sequence[Candidate]) -> Decision:
        if not candidates:
            return MISS
        first = candidates[0]
        if first.similarity < self.floor:
            # Best first, so none reaches the floor (most misses): no candidate, and no text,
            # needs a look.
            return below_threshold(first.similarity, self.threshold)
        for i, c in enumerate(candidates):
            if self.accept(c.similarity, query, c.text):
                return Decision(serve=i)
        return below_threshold(first.similarity, self.bar(query, first.text))

    def observe(self, query: str, candidate: Candidate, correct: bool) -> None:
        """A static threshold learns nothing (the tier still demotes refuted entries)."""

    def __repr__(self) -> str:
        extra = "" if self.guard is DEFAULT_GUARD else f", guard={self.guard!r}"
        if self.number_bonus != DEFAULT_NUMBER_BONUS:
            extra += f", number_bonus={self.number_bonus!r}"
        return f"ThresholdPolicy({self.threshold!r}{extra})"


def below_threshold(similarity: float, threshold: float) -> Decision:
    """A miss because the best candidate's similarity is under ``threshold``."""
    return Decision(reason=f"below threshold {similarity:.4f} < {threshold:g}")


class AcceptPolicyAdapter:
    """Runs an :class:`AcceptPolicy` as a :class:`HitPolicy`: each candidate in turn, best
    first, the first accepted one answers."""

    __slots__ = ("inner",)

    def __init__(self, inner: AcceptPolicy) -> None:
        self.inner = inner

    @property
    def guard(self) -> SlotCheck | None:
        return guard_of(self.inner)

    @property
    def name(self) -> str:
        return str(getattr(self.inner, "name", repr(self.inner)))

    def decide(self, query: str, candidates: Sequence[Candidate]) -> Decision:
        for i, c in enumerate(candidates):
            if self.inner.accept(c.similarity, query, c.text):
                return Decision(serve=i)
        return MISS

    def observe(self, query: str, candidate: Candidate, correct: bool) -> None:
        observe = getattr(self.inner, "observe", None)
        if callable(observe):
            observe(query, candidate, correct)

    def __repr__(self) -> str:
        return f"AcceptPolicyAdapter({self.inner!r})"


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


def check_guard(guard: object) -> SlotCheck | None:
    """``guard`` when it is a :class:`SlotCheck` or None; TypeError otherwise."""
    if guard is not None and not callable(getattr(guard, "check", None)):
        raise TypeError(
            "guard must have check(query, candidate) -> str | None (a SlotCheck), or be None; "
            f"got {type(guard).__name__}"
        )
    return guard  # type: ignore[return-value]


def guard_of(policy: object) -> SlotCheck | None:
    """The slot check a policy's candidates pass: its ``guard`` attribute, the default guard
    when it has none (a policy written before guards existed is guarded too)."""
    return check_guard(getattr(policy, "guard", DEFAULT_GUARD))


def as_hit_policy(policy: object) -> HitPolicy:
    """``policy`` as a :class:`HitPolicy` (an :class:`AcceptPolicy` is wrapped)."""
    if callable(getattr(policy, "decide", None)):
        if not callable(getattr(policy, "observe", None)):
            raise TypeError(f"policy {type(policy).__name__} has decide() but no observe()")
        return policy  # type: ignore[return-value]
    if callable(getattr(policy, "accept", None)):
        return AcceptPolicyAdapter(policy)  # type: ignore[arg-type]
    raise TypeError(
        "policy must have decide(query, candidates) -> Decision and observe(...), or "
        f"accept(similarity, query, candidate) -> bool; got {type(policy).__name__}"
    )


def resolve_policy(
    threshold: float | None, policy: object | None, embedder: object = None
) -> HitPolicy:
    """The policy for ``threshold=`` / ``policy=`` as given to ``cache.semantic``. With neither,
    the threshold is the embedder's ``operating_point`` when it has one (a tuned embedder, chosen
    on its held-back pairs), else :data:`DEFAULT_THRESHOLD`."""
    if policy is not None:
        if threshold is not None:
            raise ValueError("give threshold= or policy=, not both")
        return as_hit_policy(policy)
    if threshold is None:
        threshold = operating_point_of(embedder)
    return ThresholdPolicy(threshold)


def operating_point_of(embedder: object) -> float:
    """``embedder.operating_point`` when it is a valid threshold, else :data:`DEFAULT_THRESHOLD`."""
    point = getattr(embedder, "operating_point", None)
    if isinstance(point, float) and 0.0 < point <= 1.0:
        return point
    return DEFAULT_THRESHOLD
