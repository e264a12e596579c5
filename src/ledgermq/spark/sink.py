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
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import DataType, MapType, StructType

from ledgermq.aio.loops import close_loop, new_event_loop
from ledgermq.client import Message, MessageQueue, Producer
from ledgermq.client import records as R
from ledgermq.client.errors import MQClientError
from ledgermq.spark.options import OptionError, WriteOptions, parse_write_options
from ledgermq.spark.schema import WRITE_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

MAX_BATCH_BYTES = 1024 * 1024
IN_FLIGHT = 4
# RocketMQ's system properties (MessageConst): set by clients and brokers, never copied from a row.
SYSTEM_PROPERTIES = frozenset(
    {
        "UNIQ_KEY",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "MSG_REGION",
        "TRACE_ON",
        "__transactionId__",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "CLUSTER",
    }
)


class SinkError(ValueError):
    """A frame the sink cannot write (a missing column, a wrong type, a bad row)."""


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


# -- rows into messages ----------------------------------------------------------------------
def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    index = batch.schema.get_field_index(name)
    return None if index < 0 else batch.column(index)


def _first_null(arr: pa.Array) -> int:
    import pyarrow.compute as pc

    return int(pc.index(arr.is_null(), True).as_py())


def _texts(arr: pa.Array | None, name: str, n: int) -> list[str | None]:
    import pyarrow as pa

    if arr is None:
        return [None] * n
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        try:
            arr = arr.cast(pa.string())
        except pa.ArrowInvalid:
            raise SinkError(f"column '{name}' holds bytes that are not UTF-8") from None
    values: list[str | None] = arr.to_pylist()
    return values


def messages_of(batch: pa.RecordBatch, opts: WriteOptions) -> list[tuple[Message, int | None]]:
    """The batch's rows as (message, queueId or None), validated."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    value = _column(batch, "value")
    if value is None:
        raise SinkError("the batch has no 'value' column")
    if value.null_count:
        raise SinkError(f"row {_first_null(value)}: column 'value' is null (a message needs a body)")
    if pa.types.is_string(value.type) or pa.types.is_large_string(value.type):
        value = value.cast(pa.binary())
    if n and pc.min(pc.binary_length(value)).as_py() == 0:
        empty = int(pc.index(pc.equal(pc.binary_length(value), 0), True).as_py())
        raise SinkError(f"row {empty}: column 'value' is empty (RocketMQ refuses empty bodies)")
    bodies: list[bytes] = value.to_pylist()
    if opts.topic is not None:
        topics: list[str | None] = [opts.topic] * n
    else:
        topic_col = _column(batch, "topic")
        assert topic_col is not None
        if topic_col.null_count:
            raise SinkError(f"row {_first_null(topic_col)}: column 'topic' is null and the option 'topic' is not set")
        topics = _texts(topic_col, "topic", n)
    keys = _texts(_column(batch, "key"), "key", n)
    tags = _texts(_column(batch, "tags"), "tags", n)
    props_col = _column(batch, "properties")
    props: list[Any] = props_col.to_pylist() if props_col is not None else [None] * n
    qid_col = _column(batch, "queueId")
    qids: list[int | None] = qid_col.to_pylist() if qid_col is not None else [None] * n
    out: list[tuple[Message, int | None]] = []
    for i in range(n):
        user: dict[str, str] = {}
        row_tags, row_keys = tags[i], keys[i]
        if props[i]:
            for k, v in props[i]:
                if v is None or k in SYSTEM_PROPERTIES:
                    continue
                if k == R.TAGS:
                    row_tags = row_tags if row_tags is not None else v
                elif k == R.KEYS:
                    row_keys = row_keys if row_keys is not None else v
                else:
                    user[k] = v
        qid = qids[i]
        if qid is not None and qid < 0:
            raise SinkError(f"row {i}: column 'queueId' is {qid}, below 0")
        topic = topics[i]
        assert topic is not None
        out.append((Message(topic, bodies[i], tags=row_tags or None, keys=row_keys or None, properties=user), qid))
    return out


def batches_of(rows: list[tuple[Message, int | None]], size: int) -> Iterator[tuple[str, int | None, list[Message]]]:
    """Consecutive runs of one topic and queue, cut at ``size`` messages or 1 MiB of bodies."""
    current: list[Message] = []
    key: tuple[str, int | None] | None = None
    nbytes = 0
    for msg, qid in rows:
        k = (msg.topic, qid)
        if current and (k != key or len(current) >= size or nbytes + len(msg.body) > MAX_BATCH_BYTES):
            assert key is not None
            yield key[0], key[1], current
            current, nbytes = [], 0
        key = k
        current.append(msg)
        nbytes += len(msg.body) + 64
    if current and key is not None:
        yield key[0], key[1], current


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

    async def _send(self, topic: str, qid: int | None, msgs: list[Message]) -> None:
        if qid is None:
            await self.producer.send_batch(msgs)
        else:
            mq = await self._queue(topic, qid)
            # one attempt on the chosen queue, as send_to_queue, but a whole batch
            await self.producer.send_batch_to_queue(msgs, mq)
        self.sent += len(msgs)
        self.batches += 1

    async def send_all(self, rows: list[tuple[Message, int | None]]) -> None:
        gate = asyncio.Semaphore(IN_FLIGHT)
        failures: list[BaseException] = []

        async def one(topic: str, qid: int | None, msgs: list[Message]) -> None:
            try:
                await self._send(topic, qid, msgs)
            except (MQClientError, SinkError) as exc:
                failures.append(exc)
            finally:
                gate.release()

        tasks = []
        for topic, qid, msgs in batches_of(rows, self.opts.send_batch_size):
            await gate.acquire()
            if failures:
                gate.release()
                break
            tasks.append(asyncio.ensure_future(one(topic, qid, msgs)))
        await asyncio.gather(*tasks)
        if failures:
            raise failures[0]

    def write(self, batches: Iterator[pa.RecordBatch]) -> SentMessages:
        try:
            for batch in batches:
                if batch.num_rows:
                    self.loop.run_until_complete(self.send_all(messages_of(batch, self.opts)))
            return SentMessages(self.sent, self.batches)
        finally:
            try:
                self.loop.run_until_complete(self.producer.shutdown())
            finally:
                close_loop(self.loop)


class ArrowWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentMessages:
        return _Sender(self.opts).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = sum(m.messages for m in messages if isinstance(m, SentMessages))
        log.info("ledgermq sink: %d messages sent by %d tasks", sent, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = sum(m.messages for m in messages if isinstance(m, SentMessages))
        log.warning(
            "ledgermq sink: a task failed; %d messages were sent (at-least-once: a retry may repeat them)", sent
        )


class StreamArrowWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentMessages:
        return _Sender(self.opts).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sent = sum(m.messages for m in messages if isinstance(m, SentMessages))
        log.info("ledgermq sink: batch %d, %d messages", batchId, sent)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("ledgermq sink: batch %d failed (a retry may repeat messages already sent)", batchId)
