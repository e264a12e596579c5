"""The task side of ``exactlyOnce=true``: rows go out as half messages, nothing is ended.

A task stores each row as a half message (invisible to consumers) and hands the driver, in
its commit message, the list of halves it stored (``SentHalves``). Only the driver's commit
makes them visible (END_TRANSACTION COMMIT), so a failed or repeated task attempt leaves
only invisible halves behind: the task rolls back what it sent when it fails, and halves
nobody resolves (the executor was killed) are rolled back by the broker's check, which
every producer of the group answers with ROLLBACK (``rollback_every_check``).

A half message cannot travel in a batch (RocketMQ refuses transactional batches), so each
row is one SEND; ``IN_FLIGHT_HALVES`` of them are on the wire at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql.datasource import WriterCommitMessage

from ledgermq.aio.loops import close_loop, new_event_loop
from ledgermq.client import LocalTransactionState, Message, MessageExt, MessageQueue, TransactionProducer
from ledgermq.client.errors import MQClientError
from ledgermq.spark.half_set import HalfSet
from ledgermq.spark.options import WriteOptions
from ledgermq.spark.sink_rows import SinkError, messages_of

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

IN_FLIGHT_HALVES = 64
WRITE_ID_PROPERTY = "SPARK_EO_WRITE"  # on every half (and so on every committed message)


@dataclass
class SentHalves(WriterCommitMessage):
    """What one task stored: the halves, in send order."""

    halves: HalfSet = field(default_factory=HalfSet)

    @property
    def messages(self) -> int:
        return len(self.halves)


def rollback_every_check(_record: MessageExt) -> LocalTransactionState:
    """The broker asks about a half nobody ended in time. Only a driver's commit makes a half
    of this group visible, and it ends the halves it committed itself (by their own offsets,
    not by the copy the check names), so the answer to any check is ROLLBACK: the copy goes,
    the original stays committable by its driver, and an orphan of a failed task stays
    invisible."""
    return LocalTransactionState.ROLLBACK_MESSAGE


def transaction_producer(opts: WriteOptions, *, instance_name: str | None = None) -> TransactionProducer:
    return TransactionProducer(
        opts.producer_group,
        list(opts.namesrv),
        check_listener=rollback_every_check,
        send_timeout=opts.send_timeout_ms / 1000,
        retry_times=opts.retry_times,
        api_timeout=opts.api_timeout_ms / 1000,
        use_tls=opts.tls is not None,
        tls=opts.tls,
        instance_name=instance_name or "DEFAULT",
    )


class HalfSender:
    """One task's producer of half messages, with its own event loop."""

    def __init__(self, opts: WriteOptions, write_id: str) -> None:
        self.opts = opts
        self.write_id = write_id
        self.loop = new_event_loop()
        self.producer = transaction_producer(opts)
        self.loop.run_until_complete(self.producer.start())
        self.sent = HalfSet()
        self._queues: dict[str, list[MessageQueue]] = {}

    async def _queue(self, topic: str, qid: int) -> MessageQueue:
        queues = self._queues.get(topic)
        if queues is None:
            queues = self._queues[topic] = await self.producer.fetch_publish_queues(topic)
        for mq in queues:
            if mq.queue_id == qid:
                return mq
        ids = sorted({mq.queue_id for mq in queues})
        raise SinkError(f"column 'queueId' is {qid}, but topic {topic} has write queues {ids}")

    async def _send_one(self, msg: Message, qid: int | None) -> None:
        msg.properties[WRITE_ID_PROPERTY] = self.write_id
        queue = None if qid is None else await self._queue(msg.topic, qid)
        sent = await self.producer.send_half(msg, queue)
        self.sent.add_sent(sent)

    async def send_all(self, rows: list[tuple[Message, int | None]]) -> None:
        """Every row as a half, ``IN_FLIGHT_HALVES`` workers sending; stops at the first failure."""
        failures: list[BaseException] = []
        todo = iter(rows)

        async def worker() -> None:
            for msg, qid in todo:
                if failures:
                    return
                try:
                    await self._send_one(msg, qid)
                except (MQClientError, SinkError) as exc:
                    failures.append(exc)

        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT_HALVES)))
        if failures:
            raise failures[0]

    async def _rollback_sent(self) -> None:
        """Best effort after a failure: what this attempt stored will never be committed."""
        failed = 0
        for half in self.sent.halves():
            try:
                await self.producer.end_transaction(half, LocalTransactionState.ROLLBACK_MESSAGE)
            except MQClientError:
                failed += 1
        if failed:
            log.warning(
                "ledgermq sink: %d of %d halves of a failed task not rolled back now (the broker's check will)",
                failed,
                len(self.sent),
            )

    def write(self, batches: Iterator[pa.RecordBatch]) -> SentHalves:
        try:
            try:
                for batch in batches:
                    if batch.num_rows:
                        self.loop.run_until_complete(self.send_all(messages_of(batch, self.opts)))
            except BaseException:
                self.loop.run_until_complete(self._rollback_sent())
                raise
            return SentHalves(self.sent)
        finally:
            try:
                self.loop.run_until_complete(self.producer.shutdown())
            finally:
                close_loop(self.loop)
