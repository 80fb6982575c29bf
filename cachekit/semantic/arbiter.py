"""Between the semantic tier and its hit policy: candidates, per-entry records, verdicts.

One :class:`HitArbiter` per semantic tier. On a lookup it turns the tier's live neighbours into
:class:`~cachekit.semantic.policy.hit_policy.Candidate` s (each with its entry's own record), asks
the policy, and remembers what must be checked once the function has run: an exploration, or (for
policies that learn from every miss) the nearest rejected candidate. When the function's fresh
answer arrives (:meth:`HitArbiter.computed`) it is compared with the candidate's by the policy's
comparator and the verdict goes back to the policy and into the entry's record. Semantic hits are
remembered by their result key, so ``cache.feedback(result, correct=False)`` can find the entry
that answered, demote it and, once users have refuted it ``evict_after`` times, evict it.

Demotion is the same for every policy: an entry refuted at similarity ``s`` is not offered again
for requests at ``s`` or below (they are no likelier to be right).

Records are read locally on every lookup, never from elsewhere. To share them (the tier does so
through Redis), a tier sets :attr:`HitArbiter.on_verdict`, called after each verdict has been
recorded, collects served counts with :meth:`HitArbiter.take_served` now and then, and hands
records read from other processes to :meth:`HitArbiter.merge_stats`.

Every verdict is also kept as a :class:`Label` (query, candidate text, right or wrong, where the
verdict came from, similarity) in a bounded log, :meth:`HitArbiter.labels`, newest last: labelled
pairs from the cache's own traffic, for ``cachekit tune``. :func:`cache_labels` gathers them from
every arbiter of a cache (``Cache.labels()``); a tier that shares them sets
:attr:`HitArbiter.on_label`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Protocol

from cachekit.semantic.policy.hit_policy import NO_STATS, Candidate, EntryStats, HitPolicy, guard_of
from cachekit.semantic.policy.slots import refusal_kind

__all__ = [
    "LABELS_MAX",
    "LABEL_SOURCES",
    "Choice",
    "HitArbiter",
    "Label",
    "LabelHook",
    "VerdictHook",
    "cache_labels",
    "equal_values",
    "merged_stats",
    "report_feedback",
]

log = logging.getLogger("cachekit.semantic")

_PENDING_MAX = 10_000
_SERVED_MAX = 10_000
#: Most entries whose served counts wait for :meth:`HitArbiter.take_served` (the oldest are
#: dropped beyond it: a count is worth less than memory while nobody collects them).
_UNSENT_MAX = 10_000

#: ``on_verdict(entry_id, correct, similarity, user)``: a verdict was recorded.
VerdictHook = Callable[[int, bool, float, bool], None]

#: Most verdicts an arbiter keeps as labels (the oldest are dropped beyond it).
LABELS_MAX = 10_000
#: Where a label's verdict came from: the policy's check of a fresh answer against the
#: candidate's (an exploration, or a miss checked against its nearest candidate), or a user.
LABEL_SOURCES = ("check", "feedback")


@dataclass(frozen=True, slots=True)
class Label:
    """One verdict as a labelled pair: would ``candidate``'s stored answer answer ``query``.

    ``source`` is ``"check"`` (the function's fresh answer compared with the stored one by the
    policy's comparator: only as good as that comparator) or ``"feedback"`` (a user's word,
    ``cache.feedback``). ``at_s`` is when it was recorded (seconds since the epoch)."""

    query: str
    candidate: str
    correct: bool
    source: str
    similarity: float
    at_s: float

    def to_dict(self) -> dict[str, Any]:
        """The label as JSON-ready data (what the shared Redis list holds)."""
        return {
            "query": self.query,
            "candidate": self.candidate,
            "correct": self.correct,
            "source": self.source,
            "similarity": self.similarity,
            "at_s": self.at_s,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Label:
        """The label :meth:`to_dict` wrote; raises ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"a label is a JSON object, got {type(data).__name__}")
        q, c, ok, src = (data.get(k) for k in ("query", "candidate", "correct", "source"))
        if not isinstance(q, str) or not isinstance(c, str):
            raise ValueError("query and candidate must be strings")
        if not isinstance(ok, bool) or src not in LABEL_SOURCES:
            raise ValueError(f"correct must be a bool and source one of {LABEL_SOURCES}")
        return cls(q, c, ok, src, _finite(data.get("similarity")), _finite(data.get("at_s")))


def _finite(x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise ValueError(f"expected a finite number, got {x!r}")
    return float(x)


#: ``on_label(label)``: a verdict was recorded (called after :data:`VerdictHook`).
LabelHook = Callable[[Label], None]


class _Entry(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def scope(self) -> str: ...
    @property
    def text(self) -> str: ...


class _Envelope(Protocol):
    @property
    def value(self) -> Any: ...


class _Tier(Protocol):
    engine: Any
    capacity: int

    def decode(self, entry: Any) -> _Envelope | None: ...
    def invalidate(self, scope: str, text: str) -> bool: ...


def equal_values(a: Any, b: Any) -> bool:
    """The default comparator: the fresh answer equals the stored one."""
    try:
        return bool(a == b)
    except Exception:  # e.g. numpy arrays: ambiguous truth value
        return False


class Choice(NamedTuple):
    """What :meth:`HitArbiter.decide` chose: ``serve``, an index into the live candidates (None:
    a miss) and, on a miss, ``reason``: why the nearest candidate was not served."""

    serve: int | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class _Check:
    query: str
    candidate: Candidate
    entry: Any


class HitArbiter:
    """See the module docstring. Thread-safe: lookups run on the batching thread, verdicts arrive
    from callers' threads."""

    def __init__(
        self,
        policy: HitPolicy,
        *,
        decode: Callable[[Any], _Envelope | None],
        evict: Callable[[str, str], bool],
        capacity: int = 100_000,
        evict_after: int = 2,
        labels_max: int = LABELS_MAX,
    ) -> None:
        self.policy = policy
        #: The slot check every candidate passes before the policy sees it (the policy's).
        self.guard = guard_of(policy)
        #: Similarity below which the policy never serves (``policy.floor``, when it says).
        self.floor = _floor_of(policy)
        #: Misses by why the nearest candidate was not served (see ``slots.refusal_kind``).
        self.refusals: Counter[str] = Counter()
        self._decode = decode
        self._evict = evict
        self._capacity = max(1, capacity)
        self.evict_after = evict_after
        self._lock = threading.Lock()
        self._stats: OrderedDict[int, EntryStats] = OrderedDict()
        self._pending: OrderedDict[tuple[str, str], _Check] = OrderedDict()
        self._served: OrderedDict[str, _Check] = OrderedDict()
        self._unsent: OrderedDict[int, int] = OrderedDict()
        #: Called (outside the lock, errors logged) after each verdict; see the module doc.
        self.on_verdict: VerdictHook | None = None
        #: Called (outside the lock, errors logged) with each verdict's :class:`Label`.
        self.on_label: LabelHook | None = None
        self._labels: deque[Label] = deque(maxlen=max(1, labels_max))
        self.explorations = 0
        self.verdicts = 0
        self.reports = 0
        self.evicted = 0

    @classmethod
    def attach(cls, tier: _Tier, policy: HitPolicy) -> HitArbiter:
        """The arbiter of ``tier``, registered with its cache's engine for ``cache.feedback``."""
        arbiter = cls(policy, decode=tier.decode, evict=tier.invalidate, capacity=tier.capacity)
        _register(tier.engine, arbiter)
        return arbiter

    # ------------------------------------------------------------------ lookups

    def stats_of(self, entry_id: int) -> EntryStats:
        with self._lock:
            return self._stats.get(entry_id, NO_STATS)

    def choose(self, scope: str, query: str, live: Sequence[tuple[float, _Entry]]) -> int | None:
        """Index into ``live`` of the entry that answers ``query``, or None (a miss)."""
        return self.decide(scope, query, live).serve

    def decide(self, scope: str, query: str, live: Sequence[tuple[float, _Entry]]) -> Choice:
        """Which entry of ``live`` (best first) answers ``query``, and on a miss why the nearest
        did not: demoted, refused by the guard (slots, truncated, preamble), or by the policy.
        Every miss is counted under its reason's kind (:attr:`refusals`)."""
        offered, cands, first_refusal = self._offer(query, live)
        if not cands:
            return self._refused(first_refusal)
        decision = self.policy.decide(query, cands)
        if decision.serve is not None:
            j = decision.serve
            if not 0 <= j < len(cands):
                raise IndexError(f"policy chose candidate {j} of {len(cands)}")
            return Choice(offered[j], None)
        check = decision.explore
        if check is not None and 0 <= check < len(cands):
            with self._lock:
                self.explorations += 1
                self._pending[(scope, query)] = _Check(query, cands[check], live[offered[check]][1])
                _trim(self._pending, _PENDING_MAX)
        if first_refusal is None:  # the nearest was offered: the policy's word
            first_refusal = decision.reason or f"refused by policy {self.policy.name}"
        return self._refused(first_refusal)

    def _offer(
        self, query: str, live: Sequence[tuple[float, _Entry]]
    ) -> tuple[list[int], list[Candidate], str | None]:
        """The candidates the policy may see (not demoted, passed by the guard), their indexes
        into ``live``, and why the nearest was held back (None: it was offered)."""
        offered: list[int] = []
        cands: list[Candidate] = []
        why_first: str | None = None
        guard = self.guard
        floor = self.floor
        with self._lock:
            records = [self._stats.get(entry.id, NO_STATS) for _, entry in live]
        for i, ((score, entry), st) in enumerate(zip(live, records, strict=True)):
            bar = st.max_refuted_similarity
            why: str | None
            if bar is not None and score <= bar:
                why = f"demoted: refuted at similarity {bar:.3f}"
            elif guard is None or score < floor:
                why = None  # below the policy's floor it is never served: no need to check
            else:
                why = guard.check(query, entry.text)
            if why is None:
                offered.append(i)
                cands.append(Candidate(entry.id, entry.text, score, st))
            elif i == 0:
                why_first = why
        return offered, cands, why_first

    def _refused(self, reason: str | None) -> Choice:
        kind = refusal_kind(reason) if reason else "policy"
        with self._lock:
            self.refusals[kind] += 1
        return Choice(None, reason)

    def served(
        self, key: str | None, scope: str, query: str, entry: _Entry, similarity: float
    ) -> None:
        """A semantic hit was served under result key ``key``: remember it for feedback."""
        with self._lock:
            st = self._stats.get(entry.id, NO_STATS)
            self._put_stats(entry.id, replace(st, served=st.served + 1))
            self._unsent[entry.id] = self._unsent.get(entry.id, 0) + 1
            _trim(self._unsent, _UNSENT_MAX)
            if key is not None:
                self._served[key] = _Check(
                    query, Candidate(entry.id, entry.text, similarity, st), entry
                )
                _trim(self._served, _SERVED_MAX)

    # ------------------------------------------------------------------ verdicts

    def pending(self, scope: str, query: str) -> bool:
        """Whether a check waits for the function's answer to ``query``."""
        return bool(self._pending) and (scope, query) in self._pending

    def computed(self, scope: str, query: str, value: Any) -> bool | None:
        """The function ran for ``query``: compare its answer with a pending check's candidate.
        Returns the verdict, or None when nothing was pending (or the candidate is gone).
        Never raises: a verdict is bookkeeping, the caller's value must still be returned."""
        if not self._pending:
            return None
        try:
            return self._computed(scope, query, value)
        except Exception:
            log.warning("semantic verdict failed", exc_info=True)
            return None

    def _computed(self, scope: str, query: str, value: Any) -> bool | None:
        with self._lock:
            check = self._pending.pop((scope, query), None)
        if check is None:
            return None
        env = self._decode(check.entry)
        if env is None:
            return None
        comparator = getattr(self.policy, "comparator", None) or equal_values
        try:
            correct = bool(comparator(value, env.value))
        except Exception:
            log.warning("semantic comparator failed; no verdict", exc_info=True)
            return None
        self._verdict(check, correct)
        return correct

    def feedback(self, key: str, correct: bool) -> bool:
        """A user's verdict on the semantic hit served under ``key``. Returns whether the key
        was known (a recent semantic hit of this tier)."""
        with self._lock:
            check = self._served.get(key)
        if check is None:
            return False
        self.reports += 1
        self._verdict(check, correct, user=True)
        if not correct:
            with self._lock:
                self._served.pop(key, None)
                st = self._stats.get(check.candidate.entry_id, NO_STATS)
            if st.reported_wrong >= self.evict_after:
                entry = check.entry
                self._evict(entry.scope, entry.text)
                self.evicted += 1
                with self._lock:
                    self._stats.pop(entry.id, None)
        return True

    def _verdict(self, check: _Check, correct: bool, *, user: bool = False) -> None:
        cand = check.candidate
        with self._lock:
            st = self._stats.get(cand.entry_id, NO_STATS)
            if correct:
                st = replace(st, confirmed=st.confirmed + 1)
            else:
                bar = st.max_refuted_similarity
                st = replace(
                    st,
                    refuted=st.refuted + 1,
                    reported_wrong=st.reported_wrong + user,
                    max_refuted_similarity=(
                        cand.similarity if bar is None else max(bar, cand.similarity)
                    ),
                )
            self._put_stats(cand.entry_id, st)
            self.verdicts += 1
            label = Label(
                check.query,
                cand.text,
                correct,
                "feedback" if user else "check",
                float(cand.similarity),
                time.time(),
            )
            self._labels.append(label)
        try:
            self.policy.observe(check.query, replace(cand, stats=st), correct)
        except Exception:
            log.warning("hit policy %r failed to observe", self.policy, exc_info=True)
        self._announce(cand.entry_id, label, user)

    def _announce(self, entry_id: int, label: Label, user: bool) -> None:
        """Hand a recorded verdict to the hooks; their failures are logged, never raised."""
        hook = self.on_verdict
        if hook is not None:
            try:
                hook(entry_id, label.correct, label.similarity, user)
            except Exception:
                log.warning("sharing a semantic verdict failed", exc_info=True)
        on_label = self.on_label
        if on_label is not None:
            try:
                on_label(label)
            except Exception:
                log.warning("sharing a semantic label failed", exc_info=True)

    def labels(self) -> list[Label]:
        """The last ``labels_max`` (:data:`LABELS_MAX`) verdicts as labelled pairs, oldest
        first."""
        with self._lock:
            return list(self._labels)

    # ------------------------------------------------------------------ sharing

    def take_served(self) -> list[tuple[int, int]]:
        """``(entry id, times served)`` since the last call, for a tier to share in a batch."""
        with self._lock:
            out, self._unsent = list(self._unsent.items()), OrderedDict()
        return out

    def merge_stats(self, entry_id: int, shared: EntryStats) -> None:
        """Fold a record read from another process into this one (see :func:`merged_stats`)."""
        with self._lock:
            mine = self._stats.get(entry_id)
            self._put_stats(entry_id, shared if mine is None else merged_stats(mine, shared))

    def forget(self, ids: Sequence[int]) -> None:
        """Drop the records of entries removed everywhere (a new entry under the same id
        starts afresh, as it does in the process that removed it)."""
        with self._lock:
            for i in ids:
                self._stats.pop(i, None)
                self._unsent.pop(i, None)

    def _put_stats(self, entry_id: int, st: EntryStats) -> None:
        self._stats[entry_id] = st
        self._stats.move_to_end(entry_id)
        _trim(self._stats, self._capacity)

    def summary(self) -> dict[str, int]:
        return {
            "policy_checks": self.explorations,
            "verdicts": self.verdicts,
            "feedback_reports": self.reports,
            "feedback_evictions": self.evicted,
        }


def _floor_of(policy: object) -> float:
    floor = getattr(policy, "floor", None)
    return float(floor) if isinstance(floor, (int, float)) and not isinstance(floor, bool) else -2.0


def merged_stats(a: EntryStats, b: EntryStats) -> EntryStats:
    """Two records of one entry made one, field by field the larger: the shared record holds
    every process's reports once they reached it, a local one may be ahead of it (reports not
    yet written or read back), and neither loses a demotion."""
    bars = [x for x in (a.max_refuted_similarity, b.max_refuted_similarity) if x is not None]
    return EntryStats(
        max(a.served, b.served),
        max(a.confirmed, b.confirmed),
        max(a.refuted, b.refuted),
        max(a.reported_wrong, b.reported_wrong),
        max(bars) if bars else None,
    )


def _trim(d: OrderedDict[Any, Any], limit: int) -> None:
    while len(d) > limit:
        d.popitem(last=False)


# Arbiters by cache, for cache.feedback(result): weak both ways, so neither keeps the other alive.
_BY_CACHE: weakref.WeakKeyDictionary[Any, weakref.WeakSet[HitArbiter]] = weakref.WeakKeyDictionary()
_REGISTRY_LOCK = threading.Lock()


def _register(cache: Any, arbiter: HitArbiter) -> None:
    with _REGISTRY_LOCK:
        _BY_CACHE.setdefault(cache, weakref.WeakSet()).add(arbiter)


def cache_labels(engine: Any) -> list[Label]:
    """The labels of every semantic function of the cache whose engine is ``engine``, oldest
    first (see :meth:`HitArbiter.labels`)."""
    with _REGISTRY_LOCK:
        arbiters = list(_BY_CACHE.get(engine, ()))
    out = [label for a in arbiters for label in a.labels()]
    out.sort(key=lambda label: label.at_s)
    return out


def report_feedback(engine: Any, result: Any, correct: bool) -> bool:
    """Route a user's verdict on ``result`` (a ``LookupResult``) to the tier that served it.
    Returns whether it reached one (only semantic hits of this cache can)."""
    if not isinstance(correct, bool):
        raise TypeError(f"correct must be a bool, got {type(correct).__name__}")
    key = getattr(result, "key", None)
    if key is None or getattr(getattr(result, "status", None), "value", None) != "semantic_hit":
        return False
    with _REGISTRY_LOCK:
        arbiters = list(_BY_CACHE.get(engine, ()))
    return any(a.feedback(key, correct) for a in arbiters)
