"""Flush policies: when appended bytes become durable.

* ASYNC_FLUSH: ``AsyncFlushService`` flushes the commit log every flushIntervalCommitLog.
* SYNC_FLUSH: ``GroupCommitService`` takes flush requests (the offset a writer needs to be
  durable), flushes once for everyone waiting and resolves each request's future, so a
  burst of writers shares one fdatasync (group commit). Writers wait on the future with
  syncFlushTimeout; a late answer is FLUSH_DISK_TIMEOUT for them, not an error.
* ``ConsumeQueueFlushService`` flushes consume queues and the index every
  flushIntervalConsumeQueue and then writes the checkpoint, whose timestamps only ever
  name data flushed before it was written.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future

from ledgermq.store.checkpoint import Checkpoint
from ledgermq.store.commitlog import CommitLog
from ledgermq.store.consumequeue import ConsumeQueueTable
from ledgermq.store.index import IndexService
from ledgermq.util.service import ServiceThread

log = logging.getLogger(__name__)


class AsyncFlushService(ServiceThread):
    name = "flush-commitlog"

    def __init__(self, commitlog: CommitLog, checkpoint: Checkpoint, interval_ms: int) -> None:
        super().__init__(interval_ms / 1000)
        self.commitlog = commitlog
        self.checkpoint = checkpoint

    def step(self) -> None:
        ts = self.commitlog.last_store_timestamp
        self.commitlog.queue.flush()
        if ts:
            self.checkpoint.physic_ts = ts

    def on_stop(self) -> None:
        self.step()


class GroupCommitService(ServiceThread):
    name = "flush-commitlog-sync"

    def __init__(self, commitlog: CommitLog, checkpoint: Checkpoint) -> None:
        super().__init__(0.01)
        self.commitlog = commitlog
        self.checkpoint = checkpoint
        self._lock = threading.Lock()
        self._requests: list[tuple[int, Future[bool]]] = []

    def submit(self, next_offset: int) -> Future[bool]:
        """A future that becomes True once every byte below ``next_offset`` is durable."""
        fut: Future[bool] = Future()
        with self._lock:
            self._requests.append((next_offset, fut))
        self.wakeup()
        return fut

    def step(self) -> None:
        with self._lock:
            requests, self._requests = self._requests, []
        ts = self.commitlog.last_store_timestamp
        try:
            flushed = self.commitlog.queue.flush()
        except OSError as exc:
            for _, fut in requests:
                fut.set_exception(exc)
            raise
        if ts:
            self.checkpoint.physic_ts = ts
        for offset, fut in requests:
            fut.set_result(flushed >= offset)

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
        self.queues.flush()
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
