"""What a feature set's loads produce: the loader's result types, each entity's outcome, the
result handed to callers, and the waits on another request's load.

An outcome is the entity's features, :data:`ABSENT` (the loader does not know the id, or a
negative entry said so) or a :class:`Failure` (the load failed this time; not cached).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from cachekit._core.sansio import Core
from cachekit._engine.singleflight import Flight
from cachekit._engine.telemetry import LatencyHistogram

__all__ = [
    "ABSENT",
    "AWAIT_OPS",
    "NEGATIVE_MARK",
    "NOT_FOUND",
    "WAIT_OPS",
    "Absent",
    "AllFound",
    "Failure",
    "FeatureBatch",
    "FeatureCounters",
    "FeatureResult",
    "FeatureStats",
    "Loaded",
    "PartialLoadError",
    "Todo",
    "at",
    "in_step",
    "unclaimed",
    "waits_core",
]


#: Envelope ``version`` of a negative entry; positive entries carry ``None`` there, so a cached
#: ``None`` feature value and "this entity does not exist" stay distinguishable.
NEGATIVE_MARK = "ck:absent"


class Absent:
    """The type of :data:`ABSENT`, a type of its own so that a batch of outcomes is checked
    for absent ids with one ``set(map(type, ...))``."""

    __slots__ = ()


ABSENT: Any = Absent()  # outcome: the loader does not know this id (or a negative entry hit)


@dataclass(frozen=True)
class FeatureResult:
    """What a loader may return instead of a plain mapping, to report ids it failed to load.

    ``found``: id -> features. ``failed``: id -> the exception (or reason) for ids that could not
    be loaded this time; they are not cached. Ids in neither do not exist (negative cache)."""

    found: Mapping[Any, Any]
    failed: Mapping[Any, Any] = field(default_factory=dict)


class PartialLoadError(Exception):
    """A loader may raise this to return what it could: same meaning as :class:`FeatureResult`."""

    def __init__(self, found: Mapping[Any, Any], failed: Mapping[Any, Any]) -> None:
        super().__init__(f"{len(failed)} ids failed to load")
        self.found = found
        self.failed = failed


class FeatureBatch(dict[Any, Any]):
    """The result of :meth:`FeatureSet.get_many`: ``{id: features}`` in request order (first
    occurrence of each id), without the ids that do not exist or failed to load. ``failed`` maps
    each id whose load failed in this request to its exception."""

    __slots__ = ("failed",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.failed: dict[Any, Any] = {}


@dataclass(slots=True)
class FeatureCounters:
    requested: int = 0
    unique: int = 0
    l1: int = 0
    l2: int = 0
    stale: int = 0
    loaded: int = 0
    negative_hits: int = 0
    negative_stored: int = 0
    failed: int = 0
    shared: int = 0
    loader_calls: int = 0
    loader_errors: int = 0
    written_behind: int = 0


class FeatureStats:
    """The telemetry section ``features:<name>``. Shared by every FeatureSet of that name on one
    cache (a version bump makes a new FeatureSet, not a new series)."""

    def __init__(self) -> None:
        self.c = FeatureCounters()
        self.latency = LatencyHistogram()

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = asdict(self.c)
        lat = self.latency.summary()
        out["latency_ms"] = {
            "count": lat.count, "p50": lat.p50_ms, "p95": lat.p95_ms, "p99": lat.p99_ms,
            "max": lat.max_ms,
        }  # fmt: skip
        return out


class Failure:
    __slots__ = ("error",)

    def __init__(self, error: Any) -> None:
        self.error = error


NOT_FOUND = (Absent, Failure)  # the types of outcomes that store no features


class AllFound(list[Any]):
    """Outcomes of a loader call that returned every id asked for: features only (no
    ``ABSENT``, no ``Failure``), so nobody needs to look at each."""

    __slots__ = ()


class Todo(NamedTuple):
    """Entities to load (or refresh): their local keys and ids, in step. Lists, not a tuple per
    entity: a batch of a thousand new ids goes through the read path without one."""

    locals: list[Hashable]
    ids: list[Any]


# What one loader call gave: its entities and their outcomes, in step.
Loaded = tuple[Todo, list[Any]]


def at(todo: Todo, idx: list[int]) -> Todo:
    """The entities of ``todo`` at ``idx`` (``todo`` itself when that is all of them)."""
    if len(idx) == len(todo.ids):
        return todo
    lks, ids = todo.locals, todo.ids
    return Todo([lks[i] for i in idx], [ids[i] for i in idx])


def waits_core(
    todo: Todo, waits: Mapping[Hashable, Flight], outcomes: dict[Hashable, Any]
) -> Core[list[int]]:
    """Each key of ``todo`` that another load holds: its outcome into ``outcomes``, waiting for
    its flight (op ``wait``). Returns the positions whose leader was abandoned (cancelled, or
    interrupted by a BaseException that is not an error), which the caller loads itself; the
    leader's error, or this caller's own cancellation, propagates."""
    orphans: list[int] = []
    for k, lk in enumerate(todo.locals):
        other = waits.get(lk)
        if other is None:
            continue
        try:
            got = yield ("wait", (other,))
        except BaseException:
            if not other.abandoned():
                raise
            orphans.append(k)
            continue
        outcomes[lk] = got.get(lk, ABSENT)
    return orphans


WAIT_OPS: dict[str, Callable[..., Any]] = {"wait": Flight.wait}
AWAIT_OPS: dict[str, Callable[..., Any]] = {"wait": Flight.await_outcome}


def unclaimed(todo: Todo, waits: Mapping[Hashable, Any]) -> Todo:
    """The entities of ``todo`` no other load holds (``waits``: those that one does)."""
    if not waits:
        return todo
    return at(todo, [k for k, lk in enumerate(todo.locals) if lk not in waits])


def in_step(todo: Todo, outcomes: Mapping[Hashable, Any]) -> list[Any]:
    """The outcomes of ``todo``'s entities, in step with it."""
    get = outcomes.get
    return [get(lk, ABSENT) for lk in todo.locals]
