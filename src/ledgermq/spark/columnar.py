"""Stored records (a PULL_MESSAGE answer's body) straight into Arrow columns.

The reader's hot path. ``protocol.message.decode_records`` builds a ``MessageRecord`` per
message (a dict of properties, host tuples, a CRC check); here one Python loop walks the
records and keeps only what the rows need (one ``struct.unpack_from`` per record, two
slices), and everything per-value after that happens inside Arrow's compute kernels:
UTF-8 validation of the property strings, their split into the ``properties`` map, the
TAGS / KEYS / UNIQ_KEY lookups, the timestamp conversion and the tag re-check.

Records with an IPv6 host or a compressed body take the general decoder (rare: the
producer compresses bodies of 4 KiB or more).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.message import MESSAGE_MAGIC_CODE, decode_record
from ledgermq.protocol.msgid import offset_msg_id
from ledgermq.spark.schema import arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa

# IPv4 born and store hosts: total, magic, [crc queueId flag], queueOffset, physicalOffset,
# sysflag, bornTimestamp, [bornHost], storeTimestamp, [storeHost], reconsumeTimes,
# [preparedTransactionOffset], bodyLength; the body starts at byte 88.
_V4: Final = struct.Struct(">ii12xqqiq8xq8xi8xi")
_V4_BODY: Final = _V4.size
_SLOW_FLAGS: Final = SF.BORNHOST_V6 | SF.STOREHOST_V6 | SF.COMPRESSED
_MAGIC: Final = MESSAGE_MAGIC_CODE

_PROP_SEP: Final = "\x02"


class RowBuffer:
    """Rows of one queue accumulated from pull answers; ``take()`` makes a RecordBatch.

    ``add(raw, start, end)`` appends the records of ``raw`` (pulled from ``start``) whose
    queue offset is below ``end`` and returns the offset after the last one it kept. ``gap``
    is the first (from, to) hole in the offsets it saw (records a tag filter left out, or
    messages deleted while being read), None when they were contiguous."""

    __slots__ = (
        "_bodies",
        "_born",
        "_offsets",
        "_phys",
        "_props",
        "_reconsume",
        "_store",
        "_store_hosts",
        "broker",
        "gap",
        "queue_id",
        "tags",
        "topic",
    )

    def __init__(self, topic: str, broker: str, queue_id: int, tags: frozenset[str] | None = None) -> None:
        self.topic = topic
        self.broker = broker
        self.queue_id = queue_id
        self.tags = tags or None
        self.gap: tuple[int, int] | None = None
        self._reset()

    def _reset(self) -> None:
        self._offsets: list[int] = []
        self._phys: list[int] = []
        self._born: list[int] = []
        self._store: list[int] = []
        self._reconsume: list[int] = []
        self._bodies: list[bytes] = []
        self._props: list[bytes] = []
        self._store_hosts: dict[int, tuple[str, int]] = {}

    def __len__(self) -> int:
        return len(self._offsets)

    def add(self, raw: bytes, start: int, end: int) -> int:
        """Append the records of one pull answer (offsets below ``end``); the next offset."""
        unpack = _V4.unpack_from
        offsets, phys, born, store, reconsume = self._offsets, self._phys, self._born, self._store, self._reconsume
        bodies, props = self._bodies, self._props
        pos = 0
        size = len(raw)
        expect = start
        while pos < size:
            if size - pos < _V4_BODY:
                raise RemoteProtocolError(f"record at {pos}: {size - pos} bytes, too short for a header")
            total, magic, qoff, phy, sysflag, born_ts, store_ts, recon, blen = unpack(raw, pos)
            if magic != _MAGIC or total < _V4_BODY + 3 or pos + total > size:
                raise RemoteProtocolError(f"record at {pos}: bad magic or size {total}")
            if qoff >= end:
                break
            if qoff != expect and self.gap is None:
                self.gap = (expect, qoff)
            if sysflag & _SLOW_FLAGS:
                self._add_slow(raw, pos)
            else:
                b = pos + _V4_BODY
                be = b + blen
                if be + 3 > pos + total:
                    raise RemoteProtocolError(f"record at {pos}: body length {blen} overruns the record")
                offsets.append(qoff)
                phys.append(phy)
                born.append(born_ts)
                store.append(store_ts)
                reconsume.append(recon)
                bodies.append(raw[b:be])
                props.append(raw[be + 3 + raw[be] : pos + total])
            expect = qoff + 1
            pos += total
        return expect

    def _add_slow(self, raw: bytes, pos: int) -> None:
        rec = decode_record(raw, pos, check_crc=False, inflate=True)
        self._offsets.append(rec.queue_offset)
        self._phys.append(rec.physical_offset)
        self._born.append(rec.born_timestamp)
        self._store.append(rec.store_timestamp)
        self._reconsume.append(rec.reconsume_times)
        self._bodies.append(rec.body)
        self._props.append(_props_bytes(raw, pos, rec.store_size))
        if rec.store_host[0] != "127.0.0.1" or ":" in rec.store_host[0]:
            self._store_hosts[len(self._offsets) - 1] = rec.store_host

    def take(self) -> pa.RecordBatch:
        """The rows so far as one RecordBatch (the schema of ``schema.arrow_schema``); then empty."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(self._offsets)
        props = Properties(_utf8(self._props))
        tags = props.lookup("TAGS")
        uniq = props.lookup("UNIQ_KEY")
        if uniq.null_count:
            uniq = self._fill_msg_ids(uniq)
        ts_type = pa.timestamp("us", tz="UTC")
        batch = pa.RecordBatch.from_arrays(
            [
                props.lookup("KEYS"),
                pa.array(self._bodies, pa.binary()),
                pa.repeat(pa.scalar(self.topic, pa.string()), n),
                pa.repeat(pa.scalar(self.broker, pa.string()), n),
                pa.repeat(pa.scalar(self.queue_id, pa.int32()), n),
                pa.array(self._offsets, pa.int64()),
                uniq,
                tags,
                props.map,
                pc.multiply(pa.array(self._born, pa.int64()), 1000).cast(ts_type),
                pc.multiply(pa.array(self._store, pa.int64()), 1000).cast(ts_type),
                pa.array(self._reconsume, pa.int32()),
            ],
            schema=arrow_schema(),
        )
        if self.tags is not None:
            batch = batch.filter(pc.fill_null(pc.is_in(tags, pa.array(sorted(self.tags), pa.string())), False))
        self._reset()
        return batch

    def _fill_msg_ids(self, uniq: pa.Array) -> pa.Array:
        """The offset message id (store host + commit-log offset) where a record has no UNIQ_KEY."""
        import pyarrow as pa

        values = uniq.to_pylist()
        for i, v in enumerate(values):
            if v is None:
                host = self._store_hosts.get(i, ("127.0.0.1", 0))
                values[i] = offset_msg_id(host, self._phys[i])
        return pa.array(values, pa.string())


def _props_bytes(raw: bytes, pos: int, total: int) -> bytes:
    """The stored properties text of the (already validated) record at ``pos``."""
    sysflag = int.from_bytes(raw[pos + 36 : pos + 40], "big", signed=True)
    head = 88 + (12 if sysflag & SF.BORNHOST_V6 else 0) + (12 if sysflag & SF.STOREHOST_V6 else 0)
    blen = int.from_bytes(raw[pos + head - 4 : pos + head], "big", signed=True)
    t = pos + head + blen
    start = t + 1 + raw[t] + 2
    return raw[start : pos + total]


def _utf8(chunks: list[bytes]) -> pa.Array:
    import pyarrow as pa

    arr = pa.array(chunks, pa.binary())
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: replace bad bytes as decode_records does
        return pa.array([c.decode("utf-8", "replace") for c in chunks], pa.string())


class Properties:
    """A column of property strings (``key\\x01value\\x02...``) split into a map column, with
    lookups of single properties. Segments without a key or a value are skipped, as RocketMQ's
    decoder skips them; of a repeated key the first is looked up."""

    def __init__(self, text: pa.Array) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        self.rows = len(text)
        lists = pc.split_pattern(pc.ascii_rtrim(text, _PROP_SEP), _PROP_SEP)
        parent = pc.list_parent_indices(lists)
        pairs = pc.split_pattern(lists.flatten(), "\x01", max_splits=1)
        offsets = lists.offsets
        keep = pc.equal(pc.list_value_length(pairs), 2)
        if keep.false_count:
            pairs = pairs.filter(keep)
            parent = parent.filter(keep)
            offsets = _kept_offsets(keep, offsets)
        keys = pc.list_element(pairs, 0)
        values = pc.list_element(pairs, 1)
        if len(keys) and (pc.min(pc.binary_length(keys)).as_py() == 0 or pc.min(pc.binary_length(values)).as_py() == 0):
            keep = pc.and_(pc.greater(pc.binary_length(keys), 0), pc.greater(pc.binary_length(values), 0))
            keys, values, parent = keys.filter(keep), values.filter(keep), parent.filter(keep)
            offsets = _kept_offsets(keep, offsets)
        self.keys: pa.Array = keys
        self.values: pa.Array = values
        self.parent: pa.Array = parent
        self.map: pa.Array = pa.MapArray.from_arrays(offsets, keys, values)

    def lookup(self, name: str) -> pa.Array:
        """The value of property ``name`` per row, null where a row lacks it."""
        import pyarrow as pa
        import pyarrow.compute as pc

        mask = pc.equal(self.keys, name)
        rows = self.parent.filter(mask)
        values = self.values.filter(mask)
        n = self.rows
        if len(rows) == 0:
            return pa.nulls(n, pa.string())
        if len(rows) == n and (n == 1 or pc.all(pc.greater(rows[1:], rows[:-1])).as_py()):
            return values  # every row has it once: already in row order
        every_row = pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, rows.type), n)), 1)
        return pc.take(values, pc.index_in(every_row, value_set=rows))


def _kept_offsets(keep: pa.Array, offsets: pa.Array) -> pa.Array:
    """List offsets after dropping the elements ``keep`` is false for."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kept_before = pc.cumulative_sum(pc.cast(keep, pa.int32()))
    kept_before = pa.concat_arrays([pa.array([0], pa.int32()), kept_before.cast(pa.int32())])
    return pc.take(kept_before, offsets)
