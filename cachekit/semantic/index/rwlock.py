"""A readers-writer lock: many concurrent readers or one writer."""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["RWLock"]


class RWLock:
    """Many concurrent readers or one writer; waiting writers block new readers so a stream of
    searches cannot starve an add. faiss releases the GIL in search, so readers do overlap.

    ``with lock.read():`` and ``with lock.write():`` hold it; the holds are plain objects with
    ``__enter__``/``__exit__`` (a read is taken on every search, and a generator-based context
    manager costs several times as much)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self._readers_waiting = 0
        self._read = _Hold(self.acquire_read, self.release_read)
        self._write = _Hold(self.acquire_write, self.release_write)

    @property
    def writers_waiting(self) -> int:
        """Writers waiting for the lock (they keep new readers out)."""
        return self._writers_waiting

    @property
    def readers_waiting(self) -> int:
        """Readers waiting for a writer (holding or waiting) to be done."""
        return self._readers_waiting

    def read(self) -> _Hold:
        return self._read

    def write(self) -> _Hold:
        return self._write

    def acquire_read(self) -> None:
        # The uncontended read takes the plain mutex (the condition's own, entered in C).
        with self._mutex:
            if not (self._writer or self._writers_waiting):
                self._readers += 1
                return
        with self._cond:
            self._readers_waiting += 1
            try:
                while self._writer or self._writers_waiting:
                    self._cond.wait()
            finally:
                self._readers_waiting -= 1
            self._readers += 1

    def release_read(self) -> None:
        with self._mutex:
            self._readers -= 1
            if self._readers == 0 and self._writers_waiting:
                self._cond.notify_all()

    def acquire_write(self) -> None:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True

    def release_write(self) -> None:
        with self._cond:
            self._writer = False
            self._cond.notify_all()


class _Hold:
    """Holds a lock for a ``with`` block through its acquire and release functions."""

    __slots__ = ("_acquire", "_release")

    def __init__(self, acquire: Callable[[], None], release: Callable[[], None]) -> None:
        self._acquire = acquire
        self._release = release

    def __enter__(self) -> None:
        self._acquire()

    def __exit__(self, *exc: object) -> None:
        self._release()
