"""The ``ledgermq`` sink: ``df.write.format("ledgermq")`` and ``writeStream``.

Columns (others are ignored, so a frame read from ``ledgermq`` can be written back):

* ``value`` (binary or string, required): the body; null or empty is an error;
* ``topic`` (string): required unless the ``topic`` option is set (the option wins);
* ``key`` (string or binary): the message keys (space-separated, RocketMQ's KEYS);
* ``tags`` (string): the message tag;
* ``properties`` (map<string,string>): user properties; system properties (UNIQ_KEY,
  WAIT, ...) are dropped, TAGS and KEYS are used when the columns are absent or null;
* ``queueId`` (int): send to that queue of the topic (of the first broker group that has
  it); null lets the producer choose.

Each Spark task runs one producer; rows go out as SEND_BATCH_MESSAGE requests of up to
``sendBatchSize`` messages (and 1 MiB), several in flight. A task succeeds only when every
batch was acknowledged (SEND_OK or one of the flush/slave statuses); anything else fails
the task and Spark retries it, so a message may be written twice: at-least-once, as
spark-sql-kafka's sink. Writes come as Arrow batches (``DataSourceArrowWriter``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import DataType, MapType, StructType

from ledgermq.aio.loops import close_loop, new_event_loop
from ledgermq.client import MessageQueue, Producer
from ledgermq.client.errors import MQClientError
from ledgermq.client.producer.outgoing import prepare_rows
from ledgermq.failpoints import failpoint
from ledgermq.spark.eo_commit import abort_write, batch_write_id, commit_write, stream_write_id
from ledgermq.spark.half_sender import HalfSender, SentHalves
from ledgermq.spark.options import OptionError, WriteOptions, parse_write_options
from ledgermq.spark.schema import WRITE_COLUMNS
from ledgermq.spark.sink_rows import SYSTEM_PROPERTIES, RowRun, SinkError, messages_of, row_runs

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

MAX_BATCH_BYTES = 1024 * 1024
IN_FLIGHT = 4
# Reached on the driver when every task of a write (a micro-batch) has returned, its rows
# all acknowledged, and before anything is committed: a driver that dies here makes Spark
# run the batch again. The fault tests hold a driver here to kill it (tests/spark/fault_points.py).
BEFORE_COMMIT = "spark.sink.before_commit"

__all__ = ["SYSTEM_PROPERTIES", "ArrowWriter", "SentHalves", "SentMessages", "SinkError", "StreamArrowWriter",
           "messages_of"]  # fmt: skip


@dataclass
class SentMessages(WriterCommitMessage):
    """What one task sent."""

    messages: int
    batches: int


def check_schema(schema: StructType, opts: WriteOptions) -> None:
    """Reject a frame before any task runs: ``value`` present, known columns typed right."""
    types: dict[str, DataType] = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise SinkError(
            f"the ledgermq sink needs a 'value' column (binary or string); the frame has {', '.join(types) or 'none'}"
        )
    if opts.topic is None and "topic" not in types:
        raise SinkError("the ledgermq sink needs a 'topic' column (string) or the option 'topic'")
    for name, allowed in WRITE_COLUMNS.items():
        if name not in types:
            continue
        kind = types[name].typeName()
        if kind not in allowed:
            raise SinkError(f"column '{name}' must be {' or '.join(allowed)}, not {types[name].simpleString()}")
        prop = types[name]
        if isinstance(prop, MapType) and (prop.keyType.typeName(), prop.valueType.typeName()) != ("string", "string"):
            raise SinkError(f"column 'properties' must be map<string,string>, not {types[name].simpleString()}")


def make_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> ArrowWriter:
    opts = _writer_options(options, schema, overwrite)
    return ArrowWriter(opts)


def make_stream_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> StreamArrowWriter:
    opts = _writer_options(options, schema, overwrite)
    return StreamArrowWriter(opts)


def _writer_options(options: Mapping[str, str], schema: StructType, overwrite: bool) -> WriteOptions:
    if overwrite:
        raise OptionError(
            "mode 'overwrite' is not supported by the ledgermq sink (a topic cannot be truncated); use 'append'"
        )
    opts = parse_write_options(options)
    check_schema(schema, opts)
    return opts


# -- sending ---------------------------------------------------------------------------------
class _Sender:
    """One producer for one task, with its own event loop."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.loop = new_event_loop()
        self.producer = Producer(
            opts.producer_group,
            list(opts.namesrv),
            send_timeout=opts.send_timeout_ms / 1000,
            retry_times=opts.retry_times,
            api_timeout=opts.api_timeout_ms / 1000,
            use_tls=opts.tls is not None,
            tls=opts.tls,
        )
        self.loop.run_until_complete(self.producer.start())
        self.sent = 0
        self.batches = 0
        self._queues: dict[str, list[MessageQueue]] = {}

    async def _queue(self, topic: str, qid: int) -> MessageQueue:
        queues = self._queues.get(topic)
        if queues is None:
            queues = await self.producer.fetch_publish_queues(topic)
            self._queues[topic] = queues
        for mq in queues:
            if mq.queue_id == qid:
                return mq
        ids = sorted({mq.queue_id for mq in queues})
        raise SinkError(f"column 'queueId' is {qid}, but topic {topic} has write queues {ids}")

    async def _send(self, run: RowRun) -> None:
        producer = self.producer
        out = prepare_rows(
            run.topic, run.bodies, run.prefixes, producer.ids, producer.clock, producer.settings.max_message_size
        )
        # a chosen queue: one attempt on it, as send_to_queue, but a whole batch
        queue = None if run.queue_id is None else await self._queue(run.topic, run.queue_id)
        await producer.send_prepared(out, queue)
        self.sent += len(run.bodies)
        self.batches += 1

    async def send_all(self, batches: Iterator[pa.RecordBatch]) -> None:
        """Every row of every batch, ``IN_FLIGHT`` requests at a time. The next Arrow batch is
        read from Spark and cut into runs while the last requests of this one are still in
        flight, so the broker is not idle between batches."""
        gate = asyncio.Semaphore(IN_FLIGHT)
        failures: list[BaseException] = []
        tasks: set[asyncio.Future[None]] = set()

        async def one(run: RowRun) -> None:
            try:
                await self._send(run)
            except (MQClientError, SinkError) as exc:
                failures.append(exc)
            finally:
                gate.release()

        try:
            for batch in batches:
                for run in row_runs(batch, self.opts, self.opts.send_batch_size, MAX_BATCH_BYTES):
                    await gate.acquire()
                    if failures:
                        gate.release()
                        break
                    task = asyncio.ensure_future(one(run))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                if failures:
                    break
        finally:  # a bad row or a failed send: what is in flight ends before the producer stops
            await asyncio.gather(*tasks, return_exceptions=True)
        if failures:
            raise failures[0]

    def write(self, batches: Iterator[pa.RecordBatch]) -> SentMessages:
        try:
            self.loop.run_until_complete(self.send_all(batches))
            return SentMessages(self.sent, self.batches)
        finally:
            try:
                self.loop.run_until_complete(self.producer.shutdown())
            finally:
                close_loop(self.loop)


class ArrowWriter(DataSourceArrowWriter):
    """``df.write``. With ``exactlyOnce``, a fresh write id per write (made here, on the
    driver, and shipped to the tasks with the writer)."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.write_id = batch_write_id() if opts.exactly_once else ""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentMessages | SentHalves:
        if self.opts.exactly_once:
            return HalfSender(self.opts, self.write_id).write(iterator)
        return _Sender(self.opts).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        failpoint(BEFORE_COMMIT)
        if self.opts.exactly_once:
            commit_write(self.opts, self.write_id, 0, messages, fresh=True)
            return
        sent = sum(m.messages for m in messages if isinstance(m, SentMessages))
        log.info("ledgermq sink: %d messages sent by %d tasks", sent, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.opts.exactly_once:
            abort_write(self.opts, self.write_id, 0, messages, fresh=True)
            return
        sent = sum(m.messages for m in messages if isinstance(m, SentMessages))
        log.warning(
            "ledgermq sink: a task failed; %d messages were sent (at-least-once: a retry may repeat them)", sent
        )


class StreamArrowWriter(DataSourceStreamArrowWriter):
    """``writeStream``. With ``exactlyOnce``, the write id comes from the checkpoint location,
    so a query restarted from its checkpoint finds the commit records of its earlier run."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.write_id = stream_write_id(opts) if opts.exactly_once else ""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentMessages | SentHalves:
        if self.opts.exactly_once:
            return HalfSender(self.opts, self.write_id).write(iterator)
        return _Sender(self.opts).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        failpoint(BEFORE_COMMIT)
        if self.opts.exactly_once:
            commit_write(self.opts, self.write_id, batchId, messages, fresh=False)
            return
        sent = sum(m.messages for m in messages if isinstance(m, SentMessages))
        log.info("ledgermq sink: batch %d, %d messages", batchId, sent)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.opts.exactly_once:
            abort_write(self.opts, self.write_id, batchId, messages, fresh=False)
            return
        log.warning("ledgermq sink: batch %d failed (a retry may repeat messages already sent)", batchId)
