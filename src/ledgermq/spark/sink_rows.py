"""Rows into what the sink sends: the columns of an Arrow batch read and checked once, then
either cut into runs of bodies and property texts for batch requests (the at-least-once
sender: no object per row) or made into one ``Message`` per row (the exactly-once half
sender, which sends each row as a transaction of its own)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledgermq.client import Message
from ledgermq.client import records as R
from ledgermq.client.errors import MessageInvalidError
from ledgermq.client.producer.outgoing import PLAIN_ROW_PREFIX, row_prefix
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


# -- the columns -----------------------------------------------------------------------------
@dataclass(slots=True)
class _Columns:
    """A batch's columns as Python lists, validated; ``None`` for a column the frame lacks
    or holds only nulls in (``topic`` when the option names it)."""

    n: int
    bodies: list[bytes]
    topics: list[str | None] | None
    keys: list[str | None] | None
    tags: list[str | None] | None
    props: list[Any] | None
    qids: list[int | None] | None


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    index = batch.schema.get_field_index(name)
    return None if index < 0 else batch.column(index)


def _present(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    """The column, unless it is missing or every row is null (then no row uses it)."""
    arr = _column(batch, name)
    return None if arr is None or arr.null_count == len(arr) else arr


def _first_null(arr: pa.Array) -> int:
    import pyarrow.compute as pc

    return int(pc.index(arr.is_null(), True).as_py())


def _texts(arr: pa.Array | None, name: str) -> list[str | None] | None:
    import pyarrow as pa

    if arr is None:
        return None
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        try:
            arr = arr.cast(pa.string())
        except pa.ArrowInvalid:
            raise SinkError(f"column '{name}' holds bytes that are not UTF-8") from None
    values: list[str | None] = arr.to_pylist()
    return values


def _columns(batch: pa.RecordBatch, opts: WriteOptions) -> _Columns:
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
    topics = None
    if opts.topic is None:
        topic_col = _column(batch, "topic")
        assert topic_col is not None
        if topic_col.null_count:
            raise SinkError(f"row {_first_null(topic_col)}: column 'topic' is null and the option 'topic' is not set")
        topics = _texts(topic_col, "topic")
    qid_col = _present(batch, "queueId")
    if qid_col is not None and pc.min(qid_col).as_py() < 0:
        row = int(pc.index(pc.less(qid_col, pa.scalar(0, qid_col.type)), True).as_py())
        raise SinkError(f"row {row}: column 'queueId' is {qid_col[row].as_py()}, below 0")
    props_col = _present(batch, "properties")
    return _Columns(
        n,
        value.to_pylist(),
        topics,
        _texts(_present(batch, "key"), "key"),
        _texts(_present(batch, "tags"), "tags"),
        props_col.to_pylist() if props_col is not None else None,
        qid_col.to_pylist() if qid_col is not None else None,
    )


def _user_fields(cols: _Columns, i: int) -> tuple[str | None, str | None, dict[str, str]]:
    """Row ``i``'s tags, keys and user properties: the columns, else the TAGS and KEYS of its
    ``properties``; system properties dropped."""
    row_tags = cols.tags[i] if cols.tags is not None else None
    row_keys = cols.keys[i] if cols.keys is not None else None
    user: dict[str, str] = {}
    row_props = cols.props[i] if cols.props is not None else None
    if row_props:
        for k, v in row_props:
            if v is None or k in SYSTEM_PROPERTIES:
                continue
            if k == R.TAGS:
                row_tags = row_tags if row_tags is not None else v
            elif k == R.KEYS:
                row_keys = row_keys if row_keys is not None else v
            else:
                user[k] = v
    return row_tags or None, row_keys or None, user


# -- rows into runs (the at-least-once sender) ---------------------------------------------
@dataclass(frozen=True, slots=True)
class RowRun:
    """Consecutive rows of one topic and queue: one batch request's bodies and the property
    text of each up to its UNIQ_KEY (``outgoing.prepare_rows``)."""

    topic: str
    queue_id: int | None
    bodies: list[bytes]
    prefixes: list[str]


def row_runs(batch: pa.RecordBatch, opts: WriteOptions, size: int, max_bytes: int) -> list[RowRun]:
    """The batch's rows checked as ``messages_of`` checks them, cut into the longest runs that
    keep one topic and queue, at most ``size`` rows, and bodies within ``max_bytes`` (64 counted
    per row before the last). A frame with no tags, keys or properties has one prefix for all rows."""
    cols = _columns(batch, opts)
    n = cols.n
    if cols.tags is None and cols.keys is None and cols.props is None:
        prefixes = [PLAIN_ROW_PREFIX] * n
    else:
        prefixes = []
        for i in range(n):
            try:
                prefixes.append(row_prefix(*_user_fields(cols, i)))
            except MessageInvalidError as exc:
                raise SinkError(f"row {i}: {exc}") from None
    bodies = cols.bodies
    if cols.topics is None and cols.qids is None:
        assert opts.topic is not None
        widest = max(map(len, bodies), default=0)
        if size * (widest + 64) <= max_bytes:  # no run is cut by its bytes: slices of ``size``
            return [RowRun(opts.topic, None, bodies[s : s + size], prefixes[s : s + size]) for s in range(0, n, size)]
    return list(_cut(cols, prefixes, opts.topic, size, max_bytes))


def _cut(cols: _Columns, prefixes: list[str], topic: str | None, size: int, max_bytes: int) -> Iterator[RowRun]:
    bodies, topics, qids = cols.bodies, cols.topics, cols.qids
    start, nbytes = 0, 0
    key: tuple[str | None, int | None] = (None, None)
    for i, body in enumerate(bodies):
        k = (topic if topics is None else topics[i], None if qids is None else qids[i])
        if i > start and (k != key or i - start >= size or nbytes + len(body) > max_bytes):
            yield _run(key, bodies, prefixes, start, i)
            start, nbytes = i, 0
        key = k
        nbytes += len(body) + 64
    if start < len(bodies):
        yield _run(key, bodies, prefixes, start, len(bodies))


def _run(key: tuple[str | None, int | None], bodies: list[bytes], prefixes: list[str], start: int, end: int) -> RowRun:
    assert key[0] is not None
    return RowRun(key[0], key[1], bodies[start:end], prefixes[start:end])


# -- rows into messages (the exactly-once half sender) ---------------------------------------
def messages_of(batch: pa.RecordBatch, opts: WriteOptions) -> list[tuple[Message, int | None]]:
    """The batch's rows as (message, queueId or None), validated."""
    cols = _columns(batch, opts)
    out: list[tuple[Message, int | None]] = []
    for i in range(cols.n):
        tags, keys, user = _user_fields(cols, i)
        topic = opts.topic if cols.topics is None else cols.topics[i]
        assert topic is not None
        qid = cols.qids[i] if cols.qids is not None else None
        out.append((Message(topic, cols.bodies[i], tags=tags, keys=keys, properties=user), qid))
    return out
