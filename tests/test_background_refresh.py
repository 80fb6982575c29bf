"""Background refreshes around a shutdown: after ``close()`` a refresh that was only queued never
runs and holds nothing, so ``running()`` (the engine's ``refreshing()``) turns false as soon as
the refreshes already under way have ended; both the thread-pool and the asyncio forms."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from cachekit._engine.background import BackgroundRefresh

WAIT_S = 10.0


class ThreadForm:
    """``start``: refreshes in the refresh pool, each ``work`` a blocking function."""

    def start(self, refresh: BackgroundRefresh, token: str, work: Callable[[], None]) -> bool:
        return refresh.start(token, work)

    def call(self, fn: Callable[[], Any]) -> Any:
        return fn()


class LoopForm:
    """``astart``: refreshes as tasks of an event loop running in a thread of its own; ``call``
    runs a function on that loop, so a start and a close can happen in one loop step (the task
    started is then still queued when the close comes)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def start(self, refresh: BackgroundRefresh, token: str, work: Callable[[], None]) -> bool:
        async def awork() -> None:
            await asyncio.get_running_loop().run_in_executor(None, work)

        return refresh.astart(token, awork)

    def call(self, fn: Callable[[], Any]) -> Any:
        done: Future[Any] = Future()

        def run() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:
                done.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return done.result(WAIT_S)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT_S)
        self.loop.close()


@pytest.fixture(params=["thread", "asyncio"])
def form(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "thread":
        yield ThreadForm()
        return
    loop_form = LoopForm()
    try:
        yield loop_form
    finally:
        loop_form.close()


def blocking(began: threading.Event, gate: threading.Event) -> Callable[[], None]:
    def work() -> None:
        began.set()
        gate.wait(WAIT_S)

    return work


def test_close_releases_queued_refreshes_and_waits_only_for_running_ones(form: Any) -> None:
    ended = threading.Event()  # after_close: a refresh that ran past close() has ended
    refresh = BackgroundRefresh(1, on_done=lambda ok: None, after_close=ended.set)
    gate = threading.Event()
    began = {t: threading.Event() for t in ("running", "queued")}
    assert form.call(lambda: form.start(refresh, "running", blocking(began["running"], gate)))
    assert began["running"].wait(WAIT_S)

    def queue_then_close() -> None:
        # One worker, busy: this refresh waits in the queue (as a task, for the loop's next
        # step) when the shutdown comes.
        assert form.start(refresh, "queued", blocking(began["queued"], gate))
        refresh.close()

    form.call(queue_then_close)
    assert refresh.running()  # the first refresh is still under way
    assert not form.call(lambda: form.start(refresh, "late", blocking(began["queued"], gate)))
    gate.set()
    assert ended.wait(WAIT_S)
    assert not refresh.running()  # a graceful shutdown waiting on it ends here
    form.call(lambda: None)  # one more loop step: a queued task would have begun by now
    assert not began["queued"].is_set()
    assert not refresh.running()


async def test_a_task_cancelled_before_it_began_releases_its_token() -> None:
    """As ``asyncio.run`` does to the tasks still pending when its main coroutine returns."""
    refresh = BackgroundRefresh(1, on_done=lambda ok: None, after_close=lambda: None)
    ran = asyncio.Event()

    async def work() -> None:
        ran.set()

    before = asyncio.all_tasks()
    assert refresh.astart("t", work)
    (task,) = asyncio.all_tasks() - before
    task.cancel()  # before the loop's next step: the refresh never begins
    await asyncio.gather(task, return_exceptions=True)
    assert not ran.is_set()
    assert not refresh.running()
    assert refresh.astart("t", work)  # the token is free again
    await asyncio.wait_for(ran.wait(), WAIT_S)
