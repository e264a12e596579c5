"""The ``ledgermq`` Python data source: batch and micro-batch readers.

Spark runs the pieces in different processes (see docs/spark.md): ``partitions`` of a
batch read in a short-lived planner worker, the streaming offset calls in one long-lived
Python process per query, ``read`` in executor workers on a pickled copy of the reader.
So readers carry only their parsed options and plain values; a ``BrokerSession`` is made
when needed and left out of the pickled state.

Exactly-once reading rests on Spark's checkpoint: the offsets of every micro-batch are
written there (``{"topic": {"broker:queueId": next}}``) before the batch runs, a batch's
ranges are a pure function of its start and end offsets, and a range is read exactly.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ledgermq.spark.broker import BrokerSession
from ledgermq.spark.offsets import Offsets, QueueId, advance, offsets_from_json, offsets_to_json, rate_limit
from ledgermq.spark.options import ReadOptions, parse_read_options
from ledgermq.spark.planner import plan_batch, resolve_start, subscribed_queues
from ledgermq.spark.planning import DataLossError, QueueRange, ranges_between, split_ranges
from ledgermq.spark.reading import read_range
from ledgermq.util.long_lived import freeze_long_lived

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

NAME = "ledgermq"


def spark_schema() -> StructType:
    """The source's rows (see ``ledgermq.spark.schema``)."""
    text = StringType()
    ts = TimestampType()
    return StructType(
        [
            StructField("key", text),
            StructField("value", BinaryType()),
            StructField("topic", text),
            StructField("broker", text),
            StructField("queueId", IntegerType()),
            StructField("queueOffset", LongType()),
            StructField("msgId", text),
            StructField("tags", text),
            StructField("properties", MapType(text, text)),
            StructField("bornTimestamp", ts),
            StructField("storeTimestamp", ts),
            StructField("reconsumeTimes", IntegerType()),
        ]
    )


class QueuePartition(InputPartition):
    """One range ``[start, end)`` of one queue."""

    def __init__(self, rng: QueueRange) -> None:
        super().__init__(rng)
        self.range = rng

    def __repr__(self) -> str:
        return f"QueuePartition({self.range})"


def _read(opts: ReadOptions, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, QueuePartition):  # Spark reads InputPartition(None) for no partitions
        return iter(())
    freeze_long_lived()  # an executor's Python worker: see util/long_lived.py
    return read_range(opts, partition.range)


class LedgerMQDataSource(DataSource):
    """``spark.read.format("ledgermq")`` / ``readStream`` / ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from ledgermq.spark.sink import make_writer

        return make_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from ledgermq.spark.sink import make_stream_writer

        return make_stream_writer(self.options, schema, overwrite)


class BatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        with BrokerSession(self.opts.namesrv, api_timeout_ms=self.opts.api_timeout_ms, tls=self.opts.tls) as session:
            ranges = session.run(plan_batch(session, self.opts))
        return [QueuePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._session: BrokerSession | None = None
        self._initial: Offsets | None = None
        self._target: Offsets | None = None
        self._latest: Offsets | None = None
        self._committed: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_session=None, _target=None, _latest=None, _committed=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def session(self) -> BrokerSession:
        if self._session is None:
            self._session = BrokerSession(self.opts.namesrv, api_timeout_ms=self.opts.api_timeout_ms, tls=self.opts.tls)
        return self._session

    async def _bounds(self) -> dict[QueueId, tuple[int, int]]:
        queues = await subscribed_queues(self.session, self.opts.subscription)
        return await self.session.bounds(queues)

    # -- offsets -------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        if self._initial is None:  # called twice on a fresh start: resolve once
            s = self.session
            bounds = s.run(self._bounds())
            missing = sorted(q for q in self.opts.starting.offsets if q not in bounds)
            if missing:
                log.warning("startingOffsets names queues the route does not have: %s", missing)
            self._initial = s.run(resolve_start(s, self.opts, bounds))
        return offsets_to_json(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        bounds = self.session.run(self._bounds())
        self._target = {q: high for q, (_low, high) in bounds.items()}
        log.info("availableNow: reading up to %s", self._target)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None) -> dict[str, Any]:
        begin = offsets_from_json(start, "the checkpointed offsets", allow_special=False) if start is not None else None
        if begin is None:
            begin = offsets_from_json(self.initialOffset(), allow_special=False)
        else:
            self._report_progress(begin)  # the previous batch is done: Spark plans the next only then
        bounds = self.session.run(self._bounds())
        latest = {q: high for q, (_low, high) in bounds.items()}
        self._latest = latest
        end = advance(begin, latest, self._target)
        for q, offset in begin.items():
            if q not in bounds:
                continue
            low, high = bounds[q]
            if offset < low:
                self._data_loss(
                    f"{q}: the query is at offset {offset} but the broker's earliest is {low}: "
                    f"{low - offset} messages were deleted by retention before they were read"
                )
            elif offset > high:
                self._data_loss(
                    f"{q}: the query is at offset {offset} but the queue ends at {high} (re-created or reset)"
                )
                end[q] = high if self._target is None else min(high, self._target.get(q, high))
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        return offsets_to_json(end)

    def _data_loss(self, message: str) -> None:
        if self.opts.fail_on_data_loss:
            raise DataLossError(message + " (set failOnDataLoss=false to read on)")
        log.warning("data loss: %s", message)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return offsets_to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = offsets_from_json(start, "the batch's start offsets", allow_special=False)
        stop = offsets_from_json(end, "the batch's end offsets", allow_special=False)
        ranges = split_ranges(ranges_between(begin, stop), self.opts.min_partitions)
        return [QueuePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark is done with everything before ``end``."""
        self._report_progress(offsets_from_json(end, "the committed offsets", allow_special=False))

    def _report_progress(self, offsets: Offsets) -> None:
        """With ``groupId``, commit ``offsets`` to the group (what ``ledgermq admin
        consumerProgress`` shows). Advisory: the checkpoint stays the source of truth, and a
        failure is only logged. Spark calls ``commit`` for a batch only while planning the one
        after it, so the start handed to ``latestOffset`` is committed too (it is the end of
        a finished batch), which keeps the lag shown current when no new batch follows."""
        if self.opts.group_id is None or offsets == self._committed:
            return
        try:
            self.session.run(self._commit(offsets, self.opts.group_id))
            self._committed = dict(offsets)
        except Exception as exc:
            log.warning("committing offsets to group %s failed: %s", self.opts.group_id, exc)

    async def _commit(self, offsets: Offsets, group: str) -> None:
        import asyncio

        await asyncio.gather(*(self.session.commit(q, group, off) for q, off in sorted(offsets.items())))

    def stop(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            session.close()
