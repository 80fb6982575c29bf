"""MicroBatcher: a lone synchronous caller runs its batch in its own thread, asyncio callers go
to the worker, and callers that arrive while a batch runs share the next one."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from cachekit._engine.batcher import MicroBatcher
from cachekit.testing.clock import wait_until


class Recorder:
    """A batch function that notes each batch's size, thread and overlap; the first batch can
    be held at a gate."""

    def __init__(self, hold_first: bool = False) -> None:
        self.sizes: list[int] = []
        self.threads: list[threading.Thread] = []
        self.running = 0
        self.max_running = 0
        self.gate = threading.Event()
        self.entered = threading.Event()
        if not hold_first:
            self.gate.set()
        self._lock = threading.Lock()

    def __call__(self, batch: Sequence[int]) -> list[int]:
        with self._lock:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            self.sizes.append(len(batch))
            self.threads.append(threading.current_thread())
        self.entered.set()
        try:
            assert self.gate.wait(10), "test gate never opened"
            if any(x < 0 for x in batch):
                raise ValueError(f"negative in batch of {len(batch)}")
            return [x * 10 for x in batch]
        finally:
            with self._lock:
                self.running -= 1


@pytest.fixture
def closing() -> Any:
    batchers: list[MicroBatcher[int, int]] = []

    def make(fn: Callable[[Sequence[int]], list[int]], **kw: Any) -> MicroBatcher[int, int]:
        b: MicroBatcher[int, int] = MicroBatcher(fn, **kw)
        batchers.append(b)
        return b

    yield make
    for b in batchers:
        b.close()


def test_lone_sync_caller_runs_in_its_own_thread(closing: Any) -> None:
    rec = Recorder()
    b = closing(rec)
    assert b.call(4) == 40
    assert b.call(5) == 50
    assert rec.threads == [threading.current_thread()] * 2
    assert b.inline_batches == 2 and b.batches == 2 and b.pending == 0
    assert not any(t.name == "cachekit-batcher" for t in threading.enumerate())


def test_inline_batch_exception_reaches_the_caller_and_the_batcher_goes_on(closing: Any) -> None:
    b = closing(Recorder())
    with pytest.raises(ValueError, match="negative"):
        b.call(-1)
    assert b.pending == 0
    assert b.call(2) == 20


@pytest.mark.parametrize("form", ["sync", "async"])
def test_callers_arriving_during_a_batch_share_the_next_one(closing: Any, form: str) -> None:
    rec = Recorder(hold_first=True)
    b = closing(rec, max_batch=64)
    first_result: list[int] = []
    if form == "sync":
        # The first sync caller finds the batcher idle and runs inline, in its own thread.
        first = threading.Thread(target=lambda: first_result.append(b.call(1)))
    else:
        first = threading.Thread(target=lambda: first_result.append(b.submit(1).result(10)))
    first.start()
    assert rec.entered.wait(10)
    n = 8
    results: list[int] = []
    if form == "sync":
        callers = [
            threading.Thread(target=lambda i=i: results.append(b.call(i + 2))) for i in range(n)
        ]
        for t in callers:
            t.start()
    else:

        async def many() -> list[int]:
            futures = [asyncio.wrap_future(b.submit(i + 2)) for i in range(n)]
            wait_until(lambda: b.pending == n + 1)
            rec.gate.set()
            return list(await asyncio.gather(*futures))

        results = asyncio.run(many())
        callers = []
    if form == "sync":
        wait_until(lambda: b.pending == n + 1)
        rec.gate.set()
    for t in [first, *callers]:
        t.join(10)
    assert first_result == [10]
    assert sorted(results) == [(i + 2) * 10 for i in range(n)]
    assert rec.sizes == [1, n]  # the latecomers formed one batch
    assert rec.max_running == 1  # an inline batch and the worker's never overlap
    assert rec.threads[0] is (first if form == "sync" else rec.threads[1])
    assert rec.threads[1] is not threading.current_thread()
    assert b.inline_batches == (1 if form == "sync" else 0)


async def test_call_refuses_to_block_an_event_loop(closing: Any) -> None:
    b = closing(Recorder())
    with pytest.raises(RuntimeError, match="submit"):
        b.call(1)
    assert await asyncio.wrap_future(b.submit(3)) == 30
    assert b.inline_batches == 0


async def test_call_told_to_block_the_loop_hands_the_request_to_the_worker(
    closing: Any,
) -> None:
    rec = Recorder()
    b = closing(rec)
    assert b.call(4, block_loop=True) == 40
    assert b.inline_batches == 0
    assert rec.threads[-1] is not threading.current_thread()


def test_call_after_close_runs_unbatched(closing: Any) -> None:
    rec = Recorder()
    b = closing(rec)
    b.close()
    assert b.call(7) == 70
    assert rec.threads == [threading.current_thread()]
