"""Stored records (a PULL_MESSAGE answer's body) straight into Arrow columns.

The reader's hot path, with one short Python loop per pull and everything else in Arrow's
compute kernels:

1. The loop walks the records' TOTALSIZE fields and collects where each record starts
   (one ``unpack_from`` and one ``append`` per record; nothing is sliced or copied).
2. One ``take`` copies the records' fixed 88-byte headers (IPv4 hosts) side by side, a
   second gathers the header fields from them byte-reversed, so that slices of its buffer
   are the little-endian int32/int64 columns (queue offset, commit-log offset, born and
   store times, reconsume times, sysflag, magic, body length, store host).
3. The bodies and property strings are cut out of the pull's buffer with one ``take`` each
   over a binary array whose offsets are the records' section boundaries
   (``[body | topic | properties | next header]`` per record), so no Python ``bytes`` is
   made per message.
4. When a batch is taken, the property strings are UTF-8 validated and split into the
   ``properties`` map (``Properties``, in ``properties_map``), and TAGS / KEYS / UNIQ_KEY
   are looked up in it.

A pull of a few hundred records or fewer (the kernels cost ~0.3 ms per pull whatever its
size; the default broker caps answer 32 messages) and a pull with anything unusual (an
IPv6 host, a compressed body, a malformed record) take the per-record loop
(``_add_records``) instead, which gathers rows in lists across pulls, uses the general
decoder for IPv6 and compressed records and raises the precise error for a malformed one.

The header layout both paths read is the client's (``client.records``: ``V4_HEAD``,
``V4_FIELDS``); the cached index arrays and buffer helpers of the vectorised path are in
``arrow_kernels``.
"""

from __future__ import annotations

import array
import bisect
import socket
import sys
from typing import TYPE_CHECKING, Final

from ledgermq.client import records as R
from ledgermq.client.records import (
    MESSAGE_MAGIC_CODE,
    TOTALSIZE,
    V4_BODY_POS,
    V4_HEAD,
    V4_MIN_RECORD_SIZE,
    body_end,
    decode_record,
    offset_msg_id,
)
from ledgermq.errors import RemoteProtocolError
from ledgermq.spark.arrow_kernels import (
    binary_over,
    head_pattern,
    header_columns,
    i32,
    min_max,
    quad_pattern,
    true_scalar,
    values_buffer,
)
from ledgermq.spark.properties_map import Properties, utf8_text
from ledgermq.spark.schema import arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa

_SLOW_FLAGS: Final = R.BORNHOST_V6 | R.STOREHOST_V6 | R.COMPRESSED
_MAGIC: Final = MESSAGE_MAGIC_CODE
_LITTLE: Final = sys.byteorder == "little"
_MAX_RAW: Final = (1 << 31) - (1 << 16)  # int32 offsets into one pull answer
_MIN_VECTOR_ROWS: Final = 384  # fewer records in a pull: the per-record loop is cheaper


class _Chunk:
    """The kept rows of one pull answer, column by column (Arrow arrays)."""

    __slots__ = ("bodies", "born", "hosts", "n", "phys", "props", "qoff", "recon", "store")

    def __init__(
        self,
        qoff: pa.Array,
        phys: pa.Array,
        born: pa.Array,
        store: pa.Array,
        recon: pa.Array,
        bodies: pa.Array,
        props: pa.Array,
        hosts: pa.Array | tuple[list[int], list[tuple[str, int]]],
    ) -> None:
        self.n = len(qoff)
        self.qoff = qoff
        self.phys = phys
        self.born = born
        self.store = store
        self.recon = recon
        self.bodies = bodies
        self.props = props
        # fixed_size_binary(8) ip+port per row, or (first rows, hosts) of runs of rows
        # stored by one host
        self.hosts = hosts

    def host(self, i: int) -> tuple[str, int]:
        if isinstance(self.hosts, tuple):
            firsts, hosts = self.hosts
            k = bisect.bisect_right(firsts, i) - 1
            return hosts[k] if k >= 0 else ("127.0.0.1", 0)
        raw: bytes = self.hosts[i].as_py()
        return socket.inet_ntoa(raw[:4]), int.from_bytes(raw[4:], "big", signed=True)


class _Lists:
    """Rows of the per-record path, gathered in lists across pulls until a chunk is made."""

    __slots__ = ("bodies", "born", "host_rows", "hosts", "last_host", "offsets", "phys", "props", "recon", "store")

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.phys: list[int] = []
        self.born: list[int] = []
        self.store: list[int] = []
        self.recon: list[int] = []
        self.bodies: list[bytes] = []
        self.props: list[bytes] = []
        # the store host of rows host_rows[k]... is hosts[k] (one entry per run of rows)
        self.host_rows: list[int] = []
        self.hosts: list[tuple[str, int]] = []
        self.last_host: tuple[bytes, int] | None = None  # (ip, port) of the last IPv4 row

    def chunk(self) -> _Chunk:
        import pyarrow as pa

        return _Chunk(
            pa.array(self.offsets, pa.int64()),
            pa.array(self.phys, pa.int64()),
            pa.array(self.born, pa.int64()),
            pa.array(self.store, pa.int64()),
            pa.array(self.recon, pa.int32()),
            pa.array(self.bodies, pa.binary()),
            pa.array(self.props, pa.binary()),
            (self.host_rows, self.hosts),
        )


class RowBuffer:
    """Rows of one queue accumulated from pull answers; ``take()`` makes a RecordBatch.

    ``add(raw, start, end)`` appends the records of ``raw`` (pulled from ``start``) whose
    queue offset is below ``end`` and returns the offset after the last one it kept. ``gap``
    is the first (from, to) hole in the offsets it saw (records a tag filter left out, or
    messages deleted while being read), None when they were contiguous."""

    __slots__ = ("_chunks", "_lists", "_rows", "broker", "gap", "queue_id", "tags", "topic")

    def __init__(self, topic: str, broker: str, queue_id: int, tags: frozenset[str] | None = None) -> None:
        self.topic = topic
        self.broker = broker
        self.queue_id = queue_id
        self.tags = tags or None
        self.gap: tuple[int, int] | None = None
        self._chunks: list[_Chunk] = []
        self._rows = 0  # in _chunks
        self._lists = _Lists()  # rows of the per-record path not yet in a chunk

    def __len__(self) -> int:
        return self._rows + len(self._lists.offsets)

    def _keep(self, chunk: _Chunk) -> None:
        self._flush_lists()
        if chunk.n:
            self._chunks.append(chunk)
            self._rows += chunk.n

    def _flush_lists(self) -> None:
        if self._lists.offsets:
            lists, self._lists = self._lists, _Lists()
            self._keep(lists.chunk())

    def add(self, raw: bytes, start: int, end: int) -> int:
        """Append the records of one pull answer (offsets below ``end``); the next offset."""
        size = len(raw)
        if not _LITTLE or size > _MAX_RAW or size < V4_MIN_RECORD_SIZE:
            return self._add_records(raw, start, end)
        first = TOTALSIZE.unpack_from(raw, 0)[0]
        if first > 0 and size < first * _MIN_VECTOR_ROWS:
            # few records: the kernels' fixed cost per pull (~0.3 ms) outweighs the loop's
            return self._add_records(raw, start, end)
        starts: list[int] = []
        append = starts.append
        total = TOTALSIZE.unpack_from
        pos = 0
        last = size - V4_BODY_POS
        while pos <= last:
            t = total(raw, pos)[0]
            if t < V4_MIN_RECORD_SIZE:
                break
            append(pos)
            pos += t
        if pos != size or not starts:
            # a malformed record (maybe past ``end``, where it is not an error), or nothing
            return self._add_records(raw, start, end)
        starts.append(size)
        return self._add_vectorised(raw, starts, start, end)

    def _add_vectorised(self, raw: bytes, starts: list[int], start: int, end: int) -> int:
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(starts) - 1
        pat = head_pattern(n)
        buf = pa.py_buffer(raw)
        edges = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(array.array("i", starts))])
        pos = edges.slice(0, n)
        # headers side by side: offsets [pos0, pos0+88, pos1, pos1+88, ...], every other element
        head_offsets = pc.add(pc.take(pos, pat.half), pat.head_step)
        heads = pc.take(binary_over(head_offsets, buf), pat.even)
        head_bytes = pa.Array.from_buffers(pa.uint8(), n * V4_BODY_POS, [None, values_buffer(heads)])
        fields = pc.take(head_bytes, pat.gather, boundscheck=False).buffers()[1]
        assert fields is not None
        col = header_columns(fields, n)
        magic, sysflag, blen, qoff = col["magic"], col["sysflag"], col["blen"], col["qoff"]
        totals = pc.subtract(edges.slice(1), pos)
        if (
            min_max(magic) != (_MAGIC, _MAGIC)
            or min_max(pc.bit_wise_and(sysflag, i32(_SLOW_FLAGS)))[1] != 0
            or min_max(blen)[0] < 0
            or min_max(pc.subtract(totals, blen))[0] < V4_MIN_RECORD_SIZE
        ):
            return self._add_records(raw, start, end)  # IPv6, compressed or malformed somewhere
        if min_max(qoff)[1] >= end:
            cut = pc.index(pc.greater_equal(qoff, pa.scalar(end, pa.int64())), true_scalar()).as_py()
            if cut == 0:
                return start
            n = cut
            pos = pos.slice(0, n)
            edges = edges.slice(0, n + 1)
            col = {name: a.slice(0, n) for name, a in col.items()}
            qoff, blen = col["qoff"], col["blen"]
        if self.gap is None and min_max(pc.subtract(qoff, pat.ramp.slice(0, n))) != (start, start):
            self._note_gap(qoff, start)  # not start, start + 1, ...: find the first hole
        # sections: [body | topic | properties | next header] per record
        quads = quad_pattern(n)
        body = pc.add(pos, i32(V4_BODY_POS))
        body_end = pc.add(body, blen)
        topic_len = pc.take(pa.Array.from_buffers(pa.uint8(), len(raw), [None, buf]), body_end)
        props = pc.add(pc.add(body_end, i32(3)), topic_len.cast(pa.int32()))
        bounds = pc.take(pa.concat_arrays([body, body_end, props, edges.slice(1)]), quads.quad, boundscheck=False)
        sections = binary_over(bounds, buf)
        self._keep(
            _Chunk(
                qoff,
                col["phys"],
                col["born"],
                col["store"],
                col["recon"],
                pc.take(sections, quads.first),
                pc.take(sections, quads.third),
                col["host"],
            )
        )
        return int(qoff[n - 1].as_py()) + 1

    def _note_gap(self, qoff: pa.Array, start: int) -> None:
        """Set ``gap`` to the first hole in ``start, qoff...`` (if none was seen before)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self.gap is not None:
            return
        n = len(qoff)
        first = qoff[0].as_py()
        if first != start:
            self.gap = (start, first)
            return
        if n > 1:
            steps = pc.subtract(qoff.slice(1), qoff.slice(0, n - 1))
            i = pc.index(pc.not_equal(steps, pa.scalar(1, pa.int64())), true_scalar()).as_py()
            if i >= 0:
                self.gap = (qoff[i].as_py() + 1, qoff[i + 1].as_py())

    def _add_records(self, raw: bytes, start: int, end: int) -> int:
        """The per-record path: small pulls, IPv6 hosts, compressed bodies, malformed records
        (the error)."""
        unpack = V4_HEAD.unpack_from
        rows = self._lists
        offsets, phys, born, store, reconsume = rows.offsets, rows.phys, rows.born, rows.store, rows.recon
        bodies, props = rows.bodies, rows.props
        last_ip, last_port = rows.last_host or (b"", -1)
        pos = 0
        size = len(raw)
        expect = start
        while pos < size:
            if size - pos < V4_BODY_POS:
                raise RemoteProtocolError(f"record at {pos}: {size - pos} bytes, too short for a header")
            total, magic, qoff, phy, sysflag, born_ts, store_ts, ip, port, recon, blen = unpack(raw, pos)
            if magic != _MAGIC or total < V4_MIN_RECORD_SIZE or pos + total > size:
                raise RemoteProtocolError(f"record at {pos}: bad magic or size {total}")
            if qoff >= end:
                break
            if qoff != expect and self.gap is None:
                self.gap = (expect, qoff)
            if sysflag & _SLOW_FLAGS:
                rec = decode_record(raw, pos, check_crc=False, inflate=True)
                rows.host_rows.append(len(offsets))
                rows.hosts.append(rec.store_host)
                last_ip, last_port = b"", -1
                offsets.append(rec.queue_offset)
                phys.append(rec.physical_offset)
                born.append(rec.born_timestamp)
                store.append(rec.store_timestamp)
                reconsume.append(rec.reconsume_times)
                bodies.append(rec.body)
                props.append(_props_bytes(raw, pos, rec.store_size))
            else:
                b = pos + V4_BODY_POS
                be = b + blen
                if blen < 0 or be + 3 > pos + total:
                    raise RemoteProtocolError(f"record at {pos}: body length {blen} overruns the record")
                if port != last_port or ip != last_ip:
                    rows.host_rows.append(len(offsets))
                    rows.hosts.append((socket.inet_ntoa(ip), port))
                    last_ip, last_port = ip, port
                offsets.append(qoff)
                phys.append(phy)
                born.append(born_ts)
                store.append(store_ts)
                reconsume.append(recon)
                bodies.append(raw[b:be])
                props.append(raw[be + 3 + raw[be] : pos + total])
            expect = qoff + 1
            pos += total
            rows.last_host = (last_ip, last_port)
        return expect

    def take(self) -> pa.RecordBatch:
        """The rows so far as one RecordBatch (the schema of ``schema.arrow_schema``); then empty."""
        import pyarrow as pa
        import pyarrow.compute as pc

        self._flush_lists()
        chunks, n = self._chunks, self._rows
        self._chunks, self._rows = [], 0

        props = Properties(utf8_text(_concat([c.props for c in chunks], pa.binary())))
        tags = props.lookup(R.TAGS)
        uniq = props.lookup(R.UNIQ_KEY)
        if uniq.null_count:
            uniq = _fill_msg_ids(uniq, chunks)
        ts_type = pa.timestamp("us", tz="UTC")
        batch = pa.RecordBatch.from_arrays(
            [
                props.lookup(R.KEYS),
                _concat([c.bodies for c in chunks], pa.binary()),
                pa.repeat(pa.scalar(self.topic, pa.string()), n),
                pa.repeat(pa.scalar(self.broker, pa.string()), n),
                pa.repeat(pa.scalar(self.queue_id, pa.int32()), n),
                _concat([c.qoff for c in chunks], pa.int64()),
                uniq,
                tags,
                props.map,
                pc.multiply(_concat([c.born for c in chunks], pa.int64()), pa.scalar(1000, pa.int64())).cast(ts_type),
                pc.multiply(_concat([c.store for c in chunks], pa.int64()), pa.scalar(1000, pa.int64())).cast(ts_type),
                _concat([c.recon for c in chunks], pa.int32()),
            ],
            schema=arrow_schema(),
        )
        if self.tags is not None:
            wanted = pc.is_in(tags, pa.array(sorted(self.tags), pa.string()))
            batch = batch.filter(pc.fill_null(wanted, pa.scalar(False, pa.bool_())))
        return batch


def _concat(arrays: list[pa.Array], kind: pa.DataType) -> pa.Array:
    import pyarrow as pa

    if len(arrays) == 1:
        return arrays[0]
    return pa.concat_arrays(arrays) if arrays else pa.array([], kind)


def _fill_msg_ids(uniq: pa.Array, chunks: list[_Chunk]) -> pa.Array:
    """The offset message id (store host + commit-log offset) where a record has no UNIQ_KEY."""
    import pyarrow as pa

    values = uniq.to_pylist()
    row = 0
    for chunk in chunks:
        for i in range(chunk.n):
            if values[row + i] is None:
                values[row + i] = offset_msg_id(chunk.host(i), chunk.phys[i].as_py())
        row += chunk.n
    return pa.array(values, pa.string())


def _props_bytes(raw: bytes, pos: int, total: int) -> bytes:
    """The stored properties text of the (already validated) record at ``pos``."""
    t = pos + body_end(memoryview(raw)[pos : pos + total])  # the topic's length byte
    start = t + 1 + raw[t] + 2
    return raw[start : pos + total]
