"""Flush policies: when appended bytes become durable.

* ASYNC_FLUSH: ``AsyncFlushService`` flushes the commit log every flushIntervalCommitLog.
* SYNC_FLUSH: ``GroupCommitService`` takes flush requests (the offset a writer needs to be
  durable), flushes once for everyone waiting and resolves each request's future, so a
  burst of writers shares one fdatasync (group commit). Writers wait on the future with
  syncFlushTimeout; a late answer is FLUSH_DISK_TIMEOUT for them, not an error. A writer
  that gave up may have cancelled its future: resolving it is then skipped, never allowed
  to strand the rest of the batch.
* A failed fsync is sticky in both services: the store is told once (``on_failure``) and
  fails itself, nothing is flushed or reported durable afterwards, and every later flush
  request fails at once with the same error. After a failed fsync the kernel may have
  dropped the dirty pages, so a retry that "succeeds" would claim data that is gone.
* ``ConsumeQueueFlushService`` flushes consume queues and the index every
  flushIntervalConsumeQueue and then writes the checkpoint, whose timestamps only ever
  name data flushed before it was written.
* Both commit-log services time each flush call (the fsync of every dirty segment) into
  ``latency`` (the store's ``flush_latency``, exported as ledgermq_commitlog_flush_seconds);
  the histogram is written by the flush thread only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError

from ledgermq.clock import perf_seconds
from ledgermq.errors import StoreFullError
from ledgermq.store.checkpoint import Checkpoint
from ledgermq.store.commitlog import CommitLog
from ledgermq.store.index import IndexService
from ledgermq.store.queue_table import ConsumeQueueTable
from ledgermq.util.latency import LatencyHistogram
from ledgermq.util.service import ServiceThread

log = logging.getLogger(__name__)

FlushFailure = Callable[[OSError], None]


def _ignore(exc: OSError) -> None:
    pass


def _resolve(fut: Future[bool], value: bool | BaseException) -> None:
    """Set a request's outcome unless its writer already gave up on it (cancelled)."""
    try:
        if isinstance(value, BaseException):
            fut.set_exception(value)
        else:
            fut.set_result(value)
    except InvalidStateError:
        pass


class AsyncFlushService(ServiceThread):
    name = "flush-commitlog"

    def __init__(
        self,
        commitlog: CommitLog,
        checkpoint: Checkpoint,
        interval_ms: int,
        on_failure: FlushFailure = _ignore,
        latency: LatencyHistogram | None = None,
    ) -> None:
        super().__init__(interval_ms / 1000)
        self.commitlog = commitlog
        self.checkpoint = checkpoint
        self.on_failure = on_failure
        self.failed: OSError | None = None
        self.latency = latency or LatencyHistogram()

    def step(self) -> None:
        if self.failed is not None:
            return
        ts = self.commitlog.last_store_timestamp
        dirty = self.commitlog.queue.flushed_offset() < self.commitlog.queue.max_offset()
        start = perf_seconds()
        try:
            self.commitlog.queue.flush()
        except OSError as exc:
            self.failed = exc
            self.on_failure(exc)
            raise
        if dirty:  # an idle tick flushes nothing: not a flush worth timing
            self.latency.observe(perf_seconds() - start)
        if ts:
            self.checkpoint.physic_ts = ts

    def on_stop(self) -> None:
        self.step()


class GroupCommitService(ServiceThread):
    name = "flush-commitlog-sync"

    def __init__(
        self,
        commitlog: CommitLog,
        checkpoint: Checkpoint,
        on_failure: FlushFailure = _ignore,
        latency: LatencyHistogram | None = None,
    ) -> None:
        super().__init__(0.01)
        self.commitlog = commitlog
        self.checkpoint = checkpoint
        self.on_failure = on_failure
        self.failed: OSError | None = None
        self.latency = latency or LatencyHistogram()
        self._lock = threading.Lock()
        self._requests: list[tuple[int, Future[bool]]] = []
        # Told after every flush (from this thread): the durable offset, or the failure.
        # One call per fsync, however many writers it covered (group commit's whole point).
        self.on_flushed: Callable[[int, OSError | None], None] | None = None

    def submit(self, next_offset: int) -> Future[bool]:
        """A future that becomes True once every byte below ``next_offset`` is durable.

        It raises the flush's OSError if an fsync failed, now or earlier."""
        fut: Future[bool] = Future()
        failed = self.failed
        if failed is not None:
            fut.set_exception(failed)
            return fut
        with self._lock:
            self._requests.append((next_offset, fut))
        self.wakeup()
        return fut

    def step(self) -> None:
        with self._lock:
            requests, self._requests = self._requests, []
        if self.failed is not None:
            for _, fut in requests:
                _resolve(fut, self.failed)
            self._tell(self.commitlog.queue.flushed_offset(), self.failed)
            return
        ts = self.commitlog.last_store_timestamp
        dirty = self.commitlog.queue.flushed_offset() < self.commitlog.queue.max_offset()
        start = perf_seconds()
        try:
            flushed = self.commitlog.queue.flush()
        except OSError as exc:
            self.failed = exc
            self.on_failure(exc)
            for _, fut in requests:
                _resolve(fut, exc)
            self._tell(self.commitlog.queue.flushed_offset(), exc)
            raise
        if dirty:
            self.latency.observe(perf_seconds() - start)
        if ts:
            self.checkpoint.physic_ts = ts
        for offset, fut in requests:
            _resolve(fut, flushed >= offset)
        if dirty or requests:
            self._tell(flushed, None)

    def _tell(self, flushed: int, failure: OSError | None) -> None:
        listener = self.on_flushed
        if listener is not None:
            try:
                listener(flushed, failure)
            except Exception:
                log.exception("flush listener failed")

    def on_stop(self) -> None:
        self.step()


class ConsumeQueueFlushService(ServiceThread):
    name = "flush-consumequeue"

    def __init__(
        self,
        queues: ConsumeQueueTable,
        index: IndexService | None,
        checkpoint: Checkpoint,
        dispatched_ts: Callable[[], int],
        interval_ms: int,
    ) -> None:
        super().__init__(interval_ms / 1000)
        self.queues = queues
        self.index = index
        self.checkpoint = checkpoint
        self.dispatched_ts = dispatched_ts
        self._saved: tuple[int, int, int] | None = None

    def step(self) -> None:
        logics_ts = self.dispatched_ts()  # read before flushing: never claim more than flushed
        try:
            self.queues.flush()
        except StoreFullError:
            return  # a queue file cannot be created (the creator says why); no checkpoint past it
        if logics_ts:
            self.checkpoint.logics_ts = logics_ts
        if self.index is not None:
            index_ts = self.index.flush()
            if index_ts:
                self.checkpoint.index_ts = index_ts
        state = (self.checkpoint.physic_ts, self.checkpoint.logics_ts, self.checkpoint.index_ts)
        if state != self._saved:
            self.checkpoint.save()
            self._saved = state

    def on_stop(self) -> None:
        self.step()
