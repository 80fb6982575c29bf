"""Background work of the entry points, each bounded and closable: refreshes of stale entries
(:class:`BackgroundRefresh`, the engine's) and the write-behind stores of feature sets
(:class:`WriteBehind`). Threads for sync callers, tasks of the caller's loop for async ones."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["WRITE_BEHIND_FLUSH_TIMEOUT", "BackgroundRefresh", "WriteBehind"]

log = logging.getLogger("cachekit")


class BackgroundRefresh:
    """Refreshes run once per token at a time: in a pool of ``workers`` threads, or as a task
    of the running loop. A failure is logged and the old value stays. ``on_done(ok)`` counts
    each one; after :meth:`close` no refresh starts, and one that ran past it calls
    ``after_close`` when it ends (it may have reopened connections the close released).

    A token is held from the start call until its refresh ends or can no longer run: a queued
    refresh dropped by :meth:`close` (or a task cancelled before it began) releases it at once,
    so :meth:`running` turns false once the refreshes already under way have ended."""

    def __init__(
        self,
        workers: int,
        on_done: Callable[[bool], None],
        after_close: Callable[[], None],
    ) -> None:
        self._workers = workers
        self._on_done = on_done
        self._after_close = after_close
        self._executor: ThreadPoolExecutor | None = None
        #: Tokens of refreshes queued or under way; :attr:`_begun` those whose work began.
        self._running: set[Hashable] = set()
        self._begun: set[Hashable] = set()
        self._closed = False
        self._lock = threading.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()

    def _claim(self, token: Hashable) -> bool:
        with self._lock:
            if self._closed or token in self._running:
                return False
            self._running.add(token)
            return True

    def _begin(self, token: Hashable) -> bool:
        """Whether a queued refresh of ``token`` may run now: not after :meth:`close`, which
        already released its token."""
        with self._lock:
            if self._closed:
                return False
            self._begun.add(token)
            return True

    def _release(self, token: Hashable) -> None:
        with self._lock:
            self._running.discard(token)
            self._begun.discard(token)

    def _done(self, token: Hashable, ok: bool) -> None:
        self._on_done(ok)
        self._release(token)
        if self._closed:
            self._after_close()

    def start(self, token: Hashable, work: Callable[[], Any]) -> bool:
        """Run ``work`` once in a worker thread unless a refresh of ``token`` is under way (or
        this is closed). True when it was started."""
        executor = self._claim_executor(token)
        if executor is None:
            return False

        def run() -> None:
            if not self._begin(token):
                return
            ok = False
            try:
                work()
                ok = True
            except Exception:
                log.warning("background refresh failed (old value kept)", exc_info=True)
            finally:
                self._done(token, ok)

        try:
            executor.submit(run)
        except RuntimeError:  # closed between the claim and the submit: nothing will run
            self._release(token)
            return False
        return True

    def _claim_executor(self, token: Hashable) -> ThreadPoolExecutor | None:
        """The pool to run a refresh of ``token`` in, its token claimed; None when a refresh of
        it is under way or this is closed."""
        with self._lock:
            if self._closed or token in self._running:
                return None
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self._workers, thread_name_prefix="cachekit-refresh"
                )
            self._running.add(token)
            return self._executor

    def astart(self, token: Hashable, work: Callable[[], Awaitable[Any]]) -> bool:
        """The asyncio form of :meth:`start`: a task on the running loop."""
        if not self._claim(token):
            return False
        begun = False

        async def run() -> None:
            nonlocal begun
            begun = self._begin(token)
            if not begun:
                return
            ok = False
            try:
                await work()
                ok = True
            except Exception:
                log.warning("background refresh failed (old value kept)", exc_info=True)
            finally:
                self._done(token, ok)

        def ended(task: asyncio.Task[Any]) -> None:
            self._tasks.discard(task)
            if not begun:  # cancelled or dropped before it began: its token is free
                self._release(token)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(ended)
        return True

    def running(self) -> bool:
        """Whether a refresh is queued or under way; after :meth:`close`, whether one that began
        before it has yet to end (queued ones will never run)."""
        return bool(self._running)

    def close(self) -> None:
        """No refresh starts from now on; queued ones are dropped (their tokens released),
        running ones finish."""
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
            self._running = set(self._begun)
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


#: Seconds an invalidate or prime waits for pending write-behind stores before going ahead (each
#: store is itself bounded by the shared tier's timeout).
WRITE_BEHIND_FLUSH_TIMEOUT = 5.0


class WriteBehind:
    """The pending stores of a write-behind feature set: run in order on one worker thread
    (loads of sync callers) or as tasks of the caller's event loop (async callers), counted so
    that a later delete or prime can wait for them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending = 0
        self._deferred = threading.local()
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()

    def defer(self, fn: Callable[..., None], *args: Any) -> None:
        """Queue ``fn(*args)`` for this thread's next :meth:`kick`: a get_many hands its writes
        to the worker only as it returns, so the worker does not take the interpreter lock from
        the request while the request is still answering (the lock changes hands every 5 ms).
        Every path that defers must kick, or the load's waiters wait until the flush timeout."""
        jobs = getattr(self._deferred, "jobs", None)
        if jobs is None:
            jobs = self._deferred.jobs = []
        jobs.append((fn, args))

    def kick(self) -> None:
        """Start this thread's deferred writes (inline once closed)."""
        jobs = getattr(self._deferred, "jobs", None)
        if not jobs:
            return
        self._deferred.jobs = []
        for fn, args in jobs:
            if not self.submit(fn, *args):
                fn(*args)

    def submit(self, fn: Callable[..., None], *args: Any) -> bool:
        """Run ``fn(*args)`` on the worker; False (nothing run) once closed."""
        with self._cond:
            if self._closed:
                return False
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="cachekit-write-behind")
            self._pending += 1
            self._executor.submit(self._run, fn, args)
        return True

    def _run(self, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        try:
            fn(*args)
        except Exception:
            log.warning("feature write-behind failed", exc_info=True)
        finally:
            self._done()

    def _done(self) -> None:
        with self._cond:
            self._pending -= 1
            self._cond.notify_all()

    def asubmit(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task of the running loop."""
        with self._cond:
            self._pending += 1
        task = asyncio.get_running_loop().create_task(self._arun(coro))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _arun(self, coro: Coroutine[Any, Any, None]) -> None:
        try:
            await coro
        except Exception:
            log.warning("feature write-behind failed", exc_info=True)
        finally:
            self._done()

    def flush(self, timeout: float = WRITE_BEHIND_FLUSH_TIMEOUT) -> bool:
        """Wait until every pending store is done; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)

    async def aflush(self, timeout: float = WRITE_BEHIND_FLUSH_TIMEOUT) -> bool:
        """The asyncio form of :meth:`flush`: this loop's pending stores, then any others."""
        loop = asyncio.get_running_loop()
        mine = [t for t in self._tasks if t.get_loop() is loop]
        if mine:
            await asyncio.wait(mine, timeout=timeout)
        if not self._pending:
            return True
        return await asyncio.to_thread(self.flush, timeout)

    def close(self) -> None:
        """Finish what is pending (bounded), then refuse new work: later loads store inline."""
        self.flush()
        with self._cond:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)
