"""Executor side: one queue range ``[start, end)`` into Arrow record batches.

Pulls go back to back from ``start`` with ``pullBatchSize`` messages asked per pull (the
broker caps what one pull returns: ``maxTransferCountOnMessageInMemory``, 32 by default).
While Spark consumes one batch the next pull is already on its way: each step sends the
following request before the rows are handed over, so the broker works while the
worker decodes.

A range is read exactly: records at or past ``end`` are dropped, and the read does not
finish before ``end`` is reached. A broker that does not answer, or holds fewer messages
than the range needs (a slave catching up after its master died), is retried with backoff
for up to ``pollTimeoutMs``; then the task fails (and Spark retries it). Offsets below the
queue's earliest (retention) or a queue that went backwards are data loss: an error with
``failOnDataLoss=true``, else a warning and the read goes on with what is there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ledgermq.client.errors import MQBrokerError, MQClientError, ResponseCode
from ledgermq.client.instance.pull_api import PullStatus
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.spark.broker import BrokerSession, Pulled
from ledgermq.spark.columnar import RowBuffer
from ledgermq.spark.options import ReadOptions
from ledgermq.spark.planning import DataLossError, QueueRange

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

BATCH_ROWS = 4096
BACKOFF_START = 0.05
BACKOFF_MAX = 1.0


class ReadTimeoutError(MQClientError):
    """A range could not be read to its end within pollTimeoutMs."""


class RangeReader:
    """Reads one range through a session; ``batches()`` yields RecordBatches."""

    def __init__(self, opts: ReadOptions, rng: QueueRange, session: BrokerSession, clock: Clock = SYSTEM_CLOCK) -> None:
        self.opts = opts
        self.clock = clock  # how long a stalled read has waited (against pollTimeoutMs)
        self.rng = rng
        self.session = session
        self.rows = RowBuffer(rng.queue.topic, rng.queue.broker, rng.queue.queue_id, opts.tag_set)
        self.offset = rng.start
        self.skipped = 0  # offsets lost to retention or a reset (failOnDataLoss=false)
        self._pending: asyncio.Task[Pulled | BaseException] | None = None
        self._pending_offset = -1
        self._stalled_since: float | None = None
        self._backoff = BACKOFF_START

    # -- pulls ---------------------------------------------------------------------------
    def _max_nums(self, offset: int) -> int:
        return max(1, min(self.opts.pull_batch_size, self.rng.end - offset))

    async def _pull(self, offset: int) -> Pulled | BaseException:
        try:
            return await self.session.pull(
                self.rng.queue,
                self.opts.pull_group,
                offset,
                self._max_nums(offset),
                expression=self.opts.tags,
                timeout=self.opts.api_timeout_ms / 1000 + 5,
            )
        except MQClientError as exc:
            return exc

    async def _next(self) -> Pulled | BaseException:
        """The answer for ``self.offset`` (the prefetched one if it was for this offset)."""
        task, self._pending = self._pending, None
        if task is not None and self._pending_offset == self.offset:
            return await task
        if task is not None:
            task.cancel()
        return await self._pull(self.offset)

    async def _prefetch(self, offset: int) -> None:
        """Send the pull for ``offset`` now; its answer is read on the next step."""
        if offset >= self.rng.end:
            return
        self._pending = asyncio.ensure_future(self._pull(offset))
        self._pending_offset = offset
        await asyncio.sleep(0)  # let the task write its request before the loop stops

    async def _step(self) -> Pulled | BaseException:
        answer = await self._next()
        if isinstance(answer, Pulled) and answer.status is PullStatus.FOUND and answer.next_offset < self.rng.end:
            # The answer's next offset is where the next pull starts unless records past the
            # range end came back (they cannot: max_nums stops at the end).
            await self._prefetch(answer.next_offset)
        return answer

    def close(self) -> None:
        task, self._pending = self._pending, None
        if task is not None and not task.done():
            task.cancel()
            try:
                self.session.run(asyncio.wait([task], timeout=1.0))
            except Exception:  # closing must not hide the real error
                pass

    # -- the loop ------------------------------------------------------------------------
    def batches(self) -> Iterator[pa.RecordBatch]:
        end = self.rng.end
        try:
            while self.offset < end:
                answer = self.session.run(self._step())
                if isinstance(answer, BaseException):
                    self._stall(f"the pull failed: {answer}", retriable=_retriable(answer))
                    continue
                self._handle(answer)
                if len(self.rows) >= BATCH_ROWS:
                    yield self.rows.take()
            if len(self.rows):
                yield self.rows.take()
        finally:
            self.close()

    def _handle(self, answer: Pulled) -> None:
        q, end = self.rng.queue, self.rng.end
        if answer.status is PullStatus.FOUND:
            expect = self.offset
            reached = self.rows.add(answer.raw, expect, end)
            if self.rows.gap is not None and self.opts.tag_set is None:
                self._lost(self.rows.gap[0], self.rows.gap[1], "a pull skipped offsets (deleted while being read)")
            self.rows.gap = None
            nxt = answer.next_offset if answer.next_offset > expect else reached
            self.offset = min(max(nxt, reached), end)
            self._progress()
        elif answer.status is PullStatus.NO_MATCHED_MSG:
            # Nothing matched the tag filter (or, without a filter, the messages were being
            # deleted): the broker's next offset skips what it looked at.
            if answer.next_offset > self.offset:
                if self.opts.tag_set is None:
                    self._lost(self.offset, min(answer.next_offset, end), "the messages were deleted while being read")
                self.offset = min(answer.next_offset, end)
                self._progress()
            else:
                self._stall(f"{q}: no matched message and no progress at {self.offset}", retriable=True)
        elif answer.status is PullStatus.OFFSET_ILLEGAL:
            if self.offset < answer.min_offset:
                self._lost(self.offset, min(answer.min_offset, end), "deleted by retention")
                self.offset = min(answer.min_offset, end)
                self._progress()
            elif self.offset > answer.max_offset:
                self._lost(self.offset, end, f"the queue now ends at {answer.max_offset} (re-created or reset)")
                self.offset = end
            else:
                self._stall(f"{q}: the broker called offset {self.offset} illegal", retriable=True)
        else:  # NO_NEW_MSG: the queue does not hold the range's end (yet)
            where = "a slave" if answer.from_slave else "the broker"
            self._stall(
                f"{q}: {where} ({answer.addr}) holds offsets up to {answer.max_offset}, the range needs {end}",
                retriable=True,
            )

    def _lost(self, start: int, stop: int, why: str) -> None:
        q = self.rng.queue
        message = f"{q}: offsets [{start}, {stop}) of the range [{self.rng.start}, {self.rng.end}) are gone: {why}"
        if self.opts.fail_on_data_loss:
            raise DataLossError(message + " (set failOnDataLoss=false to read on)")
        log.warning("data loss: %s", message)
        self.skipped += max(0, stop - start)

    def _progress(self) -> None:
        self._stalled_since = None
        self._backoff = BACKOFF_START

    def _stall(self, why: str, *, retriable: bool) -> None:
        now = self.clock.monotonic()
        if self._stalled_since is None:
            self._stalled_since = now
        waited = now - self._stalled_since
        if not retriable or waited * 1000 >= self.opts.poll_timeout_ms:
            raise ReadTimeoutError(
                f"reading {self.rng} stopped at offset {self.offset} after {waited:.1f}s (pollTimeoutMs="
                f"{self.opts.poll_timeout_ms}): {why}"
            )
        log.info("%s; retrying in %.2fs", why, self._backoff)
        time.sleep(self._backoff)
        self._backoff = min(BACKOFF_MAX, self._backoff * 2)


def _retriable(exc: BaseException) -> bool:
    if isinstance(exc, MQBrokerError):
        # a refused pull (no permission, group disabled, topic missing) will not heal by itself,
        # except while a broker starts up or a slave has not synced the topic yet
        return exc.code in (
            ResponseCode.SYSTEM_ERROR,
            ResponseCode.SYSTEM_BUSY,
            ResponseCode.SERVICE_NOT_AVAILABLE,
            ResponseCode.TOPIC_NOT_EXIST,
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
        )
    return isinstance(exc, MQClientError)


def read_range(opts: ReadOptions, rng: QueueRange) -> Iterator[pa.RecordBatch]:
    """Every message of ``rng`` as RecordBatches (the schema of ``schema.arrow_schema``)."""
    session = BrokerSession(opts.namesrv, api_timeout_ms=opts.api_timeout_ms, tls=opts.tls)
    try:
        yield from RangeReader(opts, rng, session).batches()
    finally:
        session.close()
