"""Small values every layer may use: statuses, lookup results, keys and the found-entry record.

This module sits at the bottom of the package: it imports nothing of cachekit but the envelope
(defined with its codec in :mod:`cachekit._core.serialization`, re-exported here).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from cachekit._core.serialization import Envelope

__all__ = [
    "FAILED",
    "MISSED",
    "CacheKey",
    "Envelope",
    "Found",
    "LazyFound",
    "LookupResult",
    "Status",
    "StoreItem",
]


class _Failed:
    """The type of :data:`FAILED`; a named singleton so it reads well in a debugger."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FAILED"


#: What a guarded shared-tier call returns when the call errored or the circuit breaker skipped
#: it. Compare with ``is``: a tier's own result can be anything, ``None`` included.
FAILED: Final[Any] = _Failed()


class Status(str, enum.Enum):  # noqa: UP042 (StrEnum would change str(Status.HIT))
    """The outcome of a lookup. A status, never ``None``: ``None`` can be a cached value."""

    HIT = "hit"
    SEMANTIC_HIT = "semantic_hit"
    STALE = "stale"
    MISS = "miss"
    ERROR = "error"


@dataclass(frozen=True)
class LookupResult:
    """What a lookup found. ``value`` is meaningful when :attr:`hit` is true. For a semantic
    miss with a live entry in the scope, ``similarity`` and ``matched_text`` are the nearest
    entry's and ``reason`` says why it was not served (``"below threshold 0.8704 < 0.9"``,
    ``"slots: numbers 61 km != 63 km"``, ``"truncated: ..."``)."""

    status: Status
    value: Any = None
    tier: str | None = None
    key: str | None = None
    age_s: float | None = None
    similarity: float | None = None
    matched_text: str | None = None
    reason: str | None = None

    @property
    def hit(self) -> bool:
        return self.status in (Status.HIT, Status.SEMANTIC_HIT, Status.STALE)


class CacheKey(NamedTuple):
    """``local`` keys the in-process tier (any hashable), ``remote`` the shared one (a string that
    is stable across processes and already carries the namespace and its version). A named tuple:
    batch operations build one per entry, and a tuple is built in a third of a frozen
    dataclass's time."""

    local: Hashable
    remote: str
    version: int = 0


#: One item of a batch write: (key, value, ttl, stale_ttl, version).
StoreItem = tuple[CacheKey, Any, "float | None", float, "str | int | None"]


@dataclass(slots=True)
class Found:
    """What the engine found for one key: the status, and for HIT and STALE the envelope and the
    tier (``"l1"`` or ``"l2"``) that answered."""

    status: Status
    env: Envelope | None = None
    tier: str | None = None


class LazyFound(NamedTuple):
    """What :meth:`Engine.lookup_lazy <cachekit._engine.engine.Engine.lookup_lazy>` found for a
    batch.

    ``fresh``: L1's fresh envelopes by index (``None`` elsewhere). ``pending``: every other
    index, in order; ``remotes``: their shared-tier keys, and ``found``: what each found (a
    stale L1 entry, what the shared tier held, a miss or an error), both in step with
    ``pending``. ``misses_only``: nothing in ``found`` but misses and errors (a batch of new
    entries: no need to look at each)."""

    fresh: list[Envelope | None]
    pending: list[int]
    remotes: list[str]
    found: list[Found]
    misses_only: bool


#: What a batch lookup that found nothing finds for an entry (:meth:`Engine.lookup_lazy`): the
#: engine never changes a Found once made, so every miss of a batch is this one object; do not
#: change it either. (:meth:`Engine.lookup_many` hands out Found values of their own.)
MISSED = Found(Status.MISS)


@dataclass(frozen=True, slots=True)
class EntryStats:
    """What one stored entry has done so far (kept beside the entry, per process;
    read by the hit policies, shared through the semantic store).

    ``confirmed``/``refuted``: checks of its answer against a neighbour's fresh answer (an
    exploration, a miss whose function ran, or a user's verdict) that agreed / disagreed.
    ``max_refuted_similarity``: the highest similarity at which its answer was wrong for
    another request; a less similar request is no likelier to be right.
    """

    served: int = 0
    confirmed: int = 0
    refuted: int = 0
    reported_wrong: int = 0
    max_refuted_similarity: float | None = None


NO_STATS = EntryStats()
