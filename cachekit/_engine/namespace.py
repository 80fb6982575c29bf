"""A cache namespace's version, and the keys made with it.

Every shared-tier key of a namespace carries its version (``{prefix}:{namespace}:v{version}:``);
:meth:`Namespace.invalidate_core` bumps the version in the shared tier, which retires every entry
at once, and :meth:`Namespace.version_core` re-reads it now and then so that every process
follows. Both are sans-IO cores (:mod:`cachekit._core.sansio`): they yield the shared-tier
operations they need and the engine drives them, guarded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from cachekit._core.sansio import Core
from cachekit._core.serialization import parse_version
from cachekit._core.types import FAILED, CacheKey

__all__ = ["VERSION_EXHAUSTED", "VERSION_LIMIT", "Namespace", "shared_version"]

log = logging.getLogger("cachekit")

#: Namespace versions are integers below this (2**53: exact in a Lua number and in a float); a
#: version key holding anything else is malformed (see :meth:`Namespace.version_core`).
VERSION_LIMIT = 2**53
#: A version at or above this is exhausted: the next bump moves the namespace to a new epoch.
#: Counting from the wall clock in milliseconds (about 2**41 today) never gets here honestly.
VERSION_EXHAUSTED = 2**52


def shared_version(data: Any) -> int | None:
    """A namespace version read from (or returned by) the shared tier, or ``None`` when
    ``data`` is absent or malformed: :func:`parse_version` bounded by :data:`VERSION_LIMIT`.
    Never raises."""
    version = parse_version(data)
    return version if version is not None and version < VERSION_LIMIT else None


class Namespace:
    """The version of namespace ``name`` under ``key_prefix``. ``shared``: a shared tier holds
    the version (re-read every ``refresh_s``); ``on_change`` runs after this process moved to
    another version (the engine drops its L1)."""

    def __init__(
        self,
        name: str,
        key_prefix: str,
        *,
        shared: bool,
        refresh_s: float,
        on_change: Callable[[], None],
    ) -> None:
        self.name = name
        self.version = 0
        self.version_key = f"{key_prefix}:{name}:__version__"
        self._prefix = f"{key_prefix}:{name}:v"
        self._refresh_s = refresh_s
        self._shared = shared
        self._on_change = on_change
        #: When the version is next re-read: hit paths compare the clock against this one
        #: float (inf when there is nothing to re-read).
        self.next_check = float("-inf") if shared else float("inf")
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ keys

    def prefix(self, version: int, kind: str, owner: str) -> str:
        """What every key of ``owner``'s ``kind`` entries at ``version`` starts with."""
        return f"{self._prefix}{version}:{kind}:{owner}:"

    def make_key(self, kind: str, owner: str, part: str, local: Hashable | None) -> CacheKey:
        version = self.version
        remote = self.prefix(version, kind, owner) + part
        return CacheKey(remote if local is None else local, remote, version)

    def make_keys(
        self,
        kind: str,
        owner: str,
        parts: Iterable[Any],
        locals_: Iterable[Hashable],
        tag: str = "",
    ) -> list[CacheKey]:
        """The keys of many entries of one owner, each ``tag`` + its part as text, with their
        local keys in step, all at one version (read once)."""
        version = self.version
        prefix = self.prefix(version, kind, owner) + tag
        new = tuple.__new__  # CacheKey(...) without its Python-level __new__: a third less
        return [
            new(CacheKey, (local, f"{prefix}{part}", version))
            for part, local in zip(parts, locals_, strict=True)
        ]

    def current(self, keys: Sequence[CacheKey]) -> Sequence[CacheKey]:
        """``keys`` re-made for the current version: a bump seen by the version check that
        runs inside a batch operation must apply to keys built just before it."""
        version = self.version
        if all(k.version == version for k in keys):
            return keys
        cut = len(self._prefix)
        return [
            k
            if k.version == version
            else CacheKey(
                k.local,
                f"{self._prefix}{version}:{k.remote[cut:].split(':', 1)[1]}",
                version,
            )
            for k in keys
        ]

    # ------------------------------------------------------------------ the version

    def _set(self, version: int) -> None:
        # Never backwards: a version key lost to eviction (or deleted) must not bring back the
        # entries that invalidate_core() retired. The one exception is a process at an
        # exhausted version (only a value written by someone else gets there): it follows the
        # shared key to the new epoch that the next bump moved the namespace to.
        with self._lock:
            current = self.version
            changed = version > current or (current >= VERSION_EXHAUSTED and version != current)
            if changed:
                self.version = version
        if changed:
            self._on_change()

    def _fresh_epoch(self) -> int:
        """Where a namespace whose version key was malformed or exhausted restarts: past the
        version this process knows and at the wall clock in milliseconds, so past every version
        an honest counter has held (the clock moves faster than invalidations are counted)."""
        epoch = time.time_ns() // 1_000_000
        known = self.version
        return epoch if known >= VERSION_EXHAUSTED else max(known + 1, epoch)

    def version_core(self, now: float) -> Core[None]:
        """Re-read the version from the shared tier when it is due (callers test
        ``now >= next_check`` first: a generator costs more than the test).

        The version key holds the decimal digits of an integer below :data:`VERSION_LIMIT`
        (2**53, exact in a Lua number and a float). A process never goes below the highest
        version it has seen, so:

        * a missing key, or one lowered below the version this process knows, is re-seeded
          with that version;
        * a malformed key (not digits, float text such as ``1.5`` or ``9.2e+18``, a sign,
          2**53 or more, e.g. 2**63-1) moves the namespace to a fresh *epoch*: a version past
          the one this process knows and at least the wall clock in milliseconds, so past
          every version used before; the re-seed is atomic (``raise_counter``) and every
          process adopts what the key then holds;
        * a version at or above :data:`VERSION_EXHAUSTED` (2**52, which honest counting
          never reaches) is exhausted: the next bump moves the namespace to a fresh epoch, and
          processes at an exhausted version follow the key down to it.

        Nothing here raises to a caller, and nothing but integer digits is ever written."""
        if now < self.next_check or not self._shared:
            return
        self.next_check = now + self._refresh_s
        got = yield ("get_many", ([self.version_key],))
        if got is FAILED:
            return
        seen = shared_version(got[0])
        if seen is None and (got[0] is not None or self.version > 0):
            floor = self.version
            if got[0] is not None:
                floor = self._fresh_epoch()
                log.warning(
                    "namespace version key %s holds %r, not a version; moved to a new epoch (%d)",
                    self.version_key,
                    got[0][:32],
                    floor,
                )
            seeded = yield ("raise_counter", (self.version_key, floor))
            if seeded is not None:  # None: the tier leaves counters as they are
                seen = None if seeded is FAILED else shared_version(seeded)
        elif seen is not None and seen < self.version < VERSION_EXHAUSTED:
            # Lowered by another writer: put it back, so that processes started now do not
            # adopt a version that was retired.
            seeded = yield ("raise_counter", (self.version_key, self.version))
            if seeded is not None:
                seen = None if seeded is FAILED else shared_version(seeded)
        if seen is not None:
            self._set(seen)

    def invalidate_core(self) -> Core[bool]:
        """Bump the version (in the shared tier when there is one); False, with the old version
        kept, when the shared tier could not be reached or answered nonsense."""
        if not self._shared:
            with self._lock:
                self.version += 1
            self._on_change()
            return True
        known = self.version
        # INCR-safe re-seed (where the tier offers it): a lost key restarts above the version
        # this process knows, a malformed or exhausted one at a fresh epoch (see version_core).
        new = yield (
            "incr_from",
            (self.version_key, known, self._fresh_epoch(), VERSION_EXHAUSTED),
        )
        if new is FAILED:
            log.warning("could not bump namespace %r: shared tier unavailable", self.name)
            return False
        bumped = shared_version(new)
        if bumped is None:
            log.warning("could not bump namespace %r: the shared tier answered %r", self.name, new)
            return False
        # At an exhausted version the bump moved to a new epoch, below the old version.
        self._set(bumped if known >= VERSION_EXHAUSTED else max(bumped, known + 1))
        return True
