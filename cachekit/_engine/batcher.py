"""Dynamic micro-batching: concurrent requests share one call of a batch function.

One embedding call for many texts amortises per-call overhead (and on a GPU most of the
compute), and one FAISS search serves every query of a scope. A single worker thread takes the
first waiting request, gathers more for up to ``max_wait_ms`` or until ``max_batch`` are
waiting, calls the batch function once and hands each caller its own result. The default wait
is 0: a batch is whatever queued up while the previous one ran, so a lone caller never waits,
and under load batches form by themselves (32 callers on 2 cores: the same throughput as a 2 ms
wait, bench/semantic/throughput.py). Threads block on a :class:`concurrent.futures.Future`; asyncio
callers await it with :func:`asyncio.wrap_future`, so the work never runs on an event loop.

A synchronous caller (:meth:`MicroBatcher.call`) that finds the batcher idle (nothing queued,
no batch running) runs its batch of one in its own thread: handing it to the worker and waking
the caller again costs two thread switches, a share of a ~5 ms lookup on a small machine.
Callers that arrive while it runs queue as usual and form the next batch, so batches never
overlap. Asyncio callers use :meth:`MicroBatcher.submit`, which always goes to the worker.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

from cachekit._core.tracing import tracing_enabled
from cachekit._engine.telemetry import LatencyHistogram

__all__ = ["BatcherClosed", "MicroBatcher", "on_event_loop"]

log = logging.getLogger("cachekit.semantic")

Req = TypeVar("Req")
Res = TypeVar("Res")


class BatcherClosed(RuntimeError):
    """The batcher was closed before the request could run."""


class _Item(Generic[Req, Res]):
    __slots__ = ("context", "enqueued", "future", "request")

    def __init__(self, request: Req) -> None:
        self.request = request
        self.future: Future[Res] = Future()
        self.enqueued = time.perf_counter()
        # With tracing on, the caller's context: a batch's spans join its first request's trace.
        self.context = contextvars.copy_context() if tracing_enabled() else None


_STOP: Any = object()


class MicroBatcher(Generic[Req, Res]):
    """Runs ``fn(requests) -> results`` (same length, same order) on batches of requests.

    An exception raised by ``fn`` is set on the future of every request in that batch. After
    :meth:`close`, :meth:`submit` runs ``fn`` on the single request in the caller's thread, so a
    closed batcher degrades to unbatched calls rather than failing.
    """

    def __init__(
        self,
        fn: Callable[[Sequence[Req]], Sequence[Res]],
        *,
        max_batch: int = 64,
        max_wait_ms: float = 0.0,
        name: str = "cachekit-batcher",
    ) -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be a positive int, got {max_batch!r}")
        if not max_wait_ms >= 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms!r}")
        self._fn = fn
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000.0
        self._name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._submitted = 0  # queued or running requests, for flush()
        self._idle = threading.Condition(self._lock)
        self._flushing = 0  # callers waiting in flush() (only they are woken when idle)
        # Held while any batch runs, by the worker or by a caller running its own: batches
        # never overlap, so what queues behind an inline batch becomes one batch, as before.
        self._running = threading.Lock()
        self.inline_batches = 0
        # Telemetry: written by whichever thread runs a batch (batches never overlap).
        self.batches = 0
        self.requests = 0
        self.max_seen = 0
        self.queue_wait = LatencyHistogram()
        self.batch_time = LatencyHistogram()

    # ------------------------------------------------------------------ callers

    def submit(self, request: Req) -> Future[Res]:
        """Queue ``request`` for the worker; the future resolves to its result (or the batch's
        exception). For asyncio callers and for callers that submit several before waiting."""
        item: _Item[Req, Res] = _Item(request)
        self._enqueue(item)
        return item.future

    def call(self, request: Req, *, block_loop: bool = False) -> Res:
        """Run ``request`` and return its result (raising the batch's exception): in this
        thread when the batcher is idle, else as part of the worker's next batch.

        For synchronous callers. On a running event loop it refuses to block the loop and
        raises RuntimeError (await ``asyncio.wrap_future(submit(request))`` there instead),
        unless ``block_loop``: then the loop waits for the worker to run it (a synchronous
        function called from async code, which blocks its loop whatever it does).
        """
        if on_event_loop():
            if not block_loop:
                raise RuntimeError("MicroBatcher.call() blocks; on an event loop use submit()")
            return self.submit(request).result()
        if self._claim_idle():
            return self._run_inline(request)
        item: _Item[Req, Res] = _Item(request)
        self._enqueue(item)
        return item.future.result()

    def _claim_idle(self) -> bool:
        """Take the batch slot if nothing is queued or running (never waits)."""
        with self._lock:
            if self._closed or self._submitted or not self._running.acquire(blocking=False):
                return False
            self._submitted += 1
            return True

    def _run_inline(self, request: Req) -> Res:
        """A batch of one, run in the caller's thread with no future (it never queued)."""
        self.inline_batches += 1
        self.queue_wait.record(0.0)
        try:
            return self._execute([request])[0]
        finally:
            self._done(1)
            self._running.release()

    def _enqueue(self, item: _Item[Req, Res]) -> None:
        with self._lock:
            closed = self._closed
            if not closed:
                self._submitted += 1
                if self._thread is None:
                    # Started on first use: decorating a function must not start threads.
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()
                self._queue.put(item)
        if closed:
            self._run_batch([item], counted=False)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every request submitted so far has its result. Returns False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            self._flushing += 1
            try:
                while self._submitted:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._idle.wait(remaining)
            finally:
                self._flushing -= 1
        return True

    def close(self, timeout: float | None = 5.0) -> None:
        """Finish what is queued, then stop the worker thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
            if thread is not None:
                self._queue.put(_STOP)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending(self) -> int:
        """Requests queued or running now."""
        return self._submitted

    # ------------------------------------------------------------------ worker

    def _run(self) -> None:
        q = self._queue
        while True:
            first = q.get()
            if first is _STOP:
                return
            batch: list[_Item[Req, Res]] = [first]
            stop = False
            # Waits out a batch a caller is running inline; what queued meanwhile joins this one.
            self._running.acquire()
            deadline = first.enqueued + self.max_wait_s
            while len(batch) < self.max_batch:
                try:
                    # Whatever queued up while the previous batch ran is taken at once; only
                    # then is it worth waiting for stragglers, and never past the first
                    # request's deadline.
                    remaining = deadline - time.perf_counter()
                    nxt = q.get_nowait() if remaining <= 0 else q.get(timeout=remaining)
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                batch.append(nxt)
            try:
                self._run_batch(batch)
            finally:
                self._running.release()
            if stop:
                self._drain()
                return

    def _drain(self) -> None:
        """Run what was queued behind the stop marker (submitters that raced ``close``)."""
        leftover: list[_Item[Req, Res]] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                leftover.append(item)
        for start in range(0, len(leftover), self.max_batch):
            with self._running:
                self._run_batch(leftover[start : start + self.max_batch])

    def _run_batch(self, batch: list[_Item[Req, Res]], counted: bool = True) -> None:
        started = time.perf_counter()
        for item in batch:
            self.queue_wait.record(started - item.enqueued)
        requests, context = [item.request for item in batch], batch[0].context
        try:
            results = (
                self._execute(requests) if context is None else context.run(self._execute, requests)
            )
        except BaseException as exc:
            for item in batch:
                item.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            for item, result in zip(batch, results, strict=True):
                item.future.set_result(result)
        finally:
            if counted:
                self._done(len(batch))

    def _execute(self, requests: list[Req]) -> Sequence[Res]:
        """``fn`` on one batch, counted and timed; raises what it raises."""
        started = time.perf_counter()
        n = len(requests)
        self.batches += 1
        self.requests += n
        if n > self.max_seen:
            self.max_seen = n
        try:
            results = self._fn(requests)
            if len(results) != n:
                raise RuntimeError(f"batch function returned {len(results)} results for {n}")
            return results
        finally:
            self.batch_time.record(time.perf_counter() - started)

    def _done(self, n: int) -> None:
        """``n`` requests have their results (set after them, so ``flush`` sees them)."""
        with self._lock:
            self._submitted -= n
            if not self._submitted and self._flushing:
                self._idle.notify_all()

    # ------------------------------------------------------------------ stats

    @property
    def mean_batch(self) -> float:
        return self.requests / self.batches if self.batches else 0.0


def on_event_loop() -> bool:
    """Whether the calling thread is running an asyncio event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
