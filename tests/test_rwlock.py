"""The index's readers-writer lock: readers share it, a writer holds it alone, and a waiting
writer keeps new readers out until it has had its turn."""

from __future__ import annotations

import threading

from cachekit.semantic.index.rwlock import RWLock
from cachekit.testing.clock import wait_until


def test_readers_share_and_a_writer_waits_for_them() -> None:
    lock = RWLock()
    events: list[str] = []
    with lock.read(), lock.read():  # two holds at once, one thread: readers share
        writer = threading.Thread(target=lambda: _write(lock, events))
        writer.start()
        wait_until(lambda: lock.writers_waiting == 1)
        assert events == []  # the writer waits while any reader holds the lock
    writer.join(10)
    assert events == ["wrote"]


def test_a_waiting_writer_goes_before_new_readers() -> None:
    lock = RWLock()
    events: list[str] = []
    lock.acquire_read()
    writer = threading.Thread(target=lambda: _write(lock, events))
    writer.start()
    wait_until(lambda: lock.writers_waiting == 1)
    reader = threading.Thread(target=lambda: _read(lock, events))
    reader.start()
    wait_until(lambda: lock.readers_waiting == 1)
    assert events == []  # the new reader queues behind the waiting writer
    lock.release_read()
    writer.join(10)
    reader.join(10)
    assert events == ["wrote", "read"]


def test_a_hold_is_released_when_its_block_raises() -> None:
    lock = RWLock()
    for hold in (lock.read, lock.write):
        try:
            with hold():
                raise KeyError("inside")
        except KeyError:
            pass
    with lock.write():  # would block for ever had either hold leaked
        pass


def _write(lock: RWLock, events: list[str]) -> None:
    with lock.write():
        events.append("wrote")


def _read(lock: RWLock, events: list[str]) -> None:
    with lock.read():
        events.append("read")
