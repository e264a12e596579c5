"""Rows into messages: the sink's columns read from an Arrow batch and checked (shared by
the at-least-once sender and the exactly-once half sender)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ledgermq.client import Message
from ledgermq.client import records as R
from ledgermq.spark.options import WriteOptions

if TYPE_CHECKING:
    import pyarrow as pa

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
