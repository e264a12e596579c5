"""The RocketMQ 4.x stored message record (commit log, pull bodies, HA stream).

Layout (big-endian; hosts are 8 bytes for IPv4, 20 for IPv6, chosen by SYSFLAG bits)::

    off  size  field
    0    4     TOTALSIZE            whole record, this field included
    4    4     MAGICCODE            0xDAA320A7 (BLANK 0xCBD43194 ends a segment)
    8    4     BODYCRC              zlib.crc32(stored body) & 0x7FFFFFFF
    12   4     QUEUEID
    16   4     FLAG                 user flag
    20   8     QUEUEOFFSET          consume-queue index
    28   8     PHYSICALOFFSET       commit-log offset of this record
    36   4     SYSFLAG
    40   8     BORNTIMESTAMP
    48   8|20  BORNHOST             ip + int32 port
    ..   8     STORETIMESTAMP
    ..   8|20  STOREHOST
    ..   4     RECONSUMETIMES
    ..   8     PREPARED TRANSACTION OFFSET
    ..   4+n   BODY                 length-prefixed, stored compressed if COMPRESSED
    ..   1+t   TOPIC                int8 length
    ..   2+p   PROPERTIES           int16 length

The codec pre-encodes a record with its queue offset, physical offset and store time
left open, so the commit log fills those three under its lock with ``pack_into`` and
the expensive part (CRC, property encoding) happens outside it.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Final

from ledgermq import speedups
from ledgermq.errors import LocalProtocolError, PropertiesTooLargeError, RemoteProtocolError
from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.hosts import Host as Host  # a record's hosts; importers name it M.Host
from ledgermq.protocol.hosts import pack_host, unpack_host
from ledgermq.protocol.msgid import offset_msg_id
from ledgermq.protocol.record_layout import BORNHOST_POS as BORNHOST_POS  # importers name offsets M.*
from ledgermq.protocol.record_layout import PHYSICALOFFSET_POS as PHYSICALOFFSET_POS
from ledgermq.protocol.record_layout import QUEUEOFFSET_POS as QUEUEOFFSET_POS
from ledgermq.protocol.record_layout import SYSFLAG_POS as SYSFLAG_POS
from ledgermq.protocol.record_layout import V4_BODY_POS
from ledgermq.protocol.record_layout import store_timestamp_pos as store_timestamp_pos

MESSAGE_MAGIC_CODE: Final = -626843481  # 0xDAA320A7 as a Java int
BLANK_MAGIC_CODE: Final = -875286124  # 0xCBD43194 as a Java int
MAX_TOPIC_BYTES: Final = 127
MAX_PROPERTIES_BYTES: Final = 32767

_PREFIX = ">iiiiiqqiq"  # totalsize magic crc queueid flag queueoffset physoffset sysflag borntime


def _host_fmt(v6: bool) -> str:
    return "16si" if v6 else "4si"


def _head_struct(born_v6: bool, store_v6: bool) -> struct.Struct:
    return struct.Struct(_PREFIX + _host_fmt(born_v6) + "q" + _host_fmt(store_v6) + "iqi")


# Index by (sysflag & BORNHOST_V6 != 0) * 2 + (sysflag & STOREHOST_V6 != 0).
_HEADS: Final = tuple(_head_struct(b, s) for b in (False, True) for s in (False, True))
_SYSFLAG = struct.Struct(">i")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_SHORT = struct.Struct(">h")
_SIZE_MAGIC = struct.Struct(">ii")
_TWO_LONGS = struct.Struct(">qq")
_BYTE = [bytes((i,)) for i in range(256)]

# A build of the extension from before it had the decoder reads as none.
_C_DECODE: Final = getattr(speedups.recordc, "decode_records", None)

_STORE_TS_POS_V4: Final = store_timestamp_pos(0)
_STORE_TS_POS_V6: Final = store_timestamp_pos(SF.BORNHOST_V6)
assert PHYSICALOFFSET_POS == QUEUEOFFSET_POS + 8 and SF.BORNHOST_V6 < 0x100
assert _head_struct(False, False).size == V4_BODY_POS  # the codec's header is the layout's


def _head_index(sysflag: int) -> int:
    return (2 if sysflag & SF.BORNHOST_V6 else 0) + (1 if sysflag & SF.STOREHOST_V6 else 0)


def queue_offset_and_store_time(buf: bytes | bytearray | memoryview, at: int = 0) -> tuple[int, int]:
    """QUEUEOFFSET and STORETIMESTAMP of an encoded record, read in place (a put result
    names them; decoding the whole record for two fixed fields would cost ten times more)."""
    sysflag = _SYSFLAG.unpack_from(buf, at + SYSFLAG_POS)[0]
    return _LONG.unpack_from(buf, at + QUEUEOFFSET_POS)[0], _LONG.unpack_from(buf, at + store_timestamp_pos(sysflag))[0]


def offset_msg_id_of(buf: bytes | bytearray | memoryview, physical_offset: int, at: int = 0) -> str:
    """The offset message id of an encoded record stored at ``physical_offset``: its
    STOREHOSTADDRESS bytes (ip, int32 port) followed by the offset, as hex (as ``offset_msg_id``)."""
    sysflag = _SYSFLAG.unpack_from(buf, at + SYSFLAG_POS)[0]
    host = at + store_timestamp_pos(sysflag) + 8
    host_len = 20 if sysflag & SF.STOREHOST_V6 else 8
    return (bytes(buf[host : host + host_len]) + _LONG.pack(physical_offset)).hex().upper()


MAX_HEAD_SIZE: Final = max(h.size for h in _HEADS)
"""The longest fixed part of a record (both hosts IPv6), BODYLENGTH included."""


def body_end(head: bytes | bytearray | memoryview) -> int:
    """Where the body of a record ends (its TOPIC length byte), from the record's first
    ``MAX_HEAD_SIZE`` bytes (fewer when the record is shorter): lets a reader skip the body."""
    head_struct = _HEADS[_head_index(_SYSFLAG.unpack_from(head, SYSFLAG_POS)[0])]
    body_len = _INT.unpack_from(head, head_struct.size - 4)[0]
    return int(head_struct.size + max(body_len, 0))


def properties_after_body(tail: bytes | bytearray | memoryview) -> str:
    """The properties text of a record from the bytes after its body (TOPIC, PROPERTIES);
    RemoteProtocolError when they do not fit together."""
    if not tail:
        raise RemoteProtocolError("record tail is empty")
    p = 1 + tail[0]
    if p + 2 > len(tail):
        raise RemoteProtocolError("record tail: topic overruns the record")
    props_len = _SHORT.unpack_from(tail, p)[0]
    if props_len < 0 or p + 2 + props_len != len(tail):
        raise RemoteProtocolError("record tail: properties length disagrees with the record size")
    return bytes(tail[p + 2 :]).decode("utf-8", "replace")


def record_properties_text(record: bytes) -> str:
    """The properties text of a whole record (``body_end`` and ``properties_after_body`` in
    one pass, for the filter's hot path); RemoteProtocolError when the fields do not add up."""
    head_struct = _HEADS[_head_index(_SYSFLAG.unpack_from(record, SYSFLAG_POS)[0])]
    p = head_struct.size + _INT.unpack_from(record, head_struct.size - 4)[0]
    end = len(record)
    if p < head_struct.size or p + 3 > end:
        raise RemoteProtocolError("record: body length overruns the record")
    p += 1 + record[p]
    if p + 2 > end:
        raise RemoteProtocolError("record: topic overruns the record")
    props_len = _SHORT.unpack_from(record, p)[0]
    if props_len < 0 or p + 2 + props_len != end:
        raise RemoteProtocolError("record: properties length disagrees with the record size")
    return record[p + 2 :].decode("utf-8", "replace")


def record_length(body_len: int, topic_len: int, props_len: int, sysflag: int = 0) -> int:
    """TOTALSIZE for the given parts (``CommitLog.calMsgLength``)."""
    head = _HEADS[_head_index(sysflag)].size
    return head + body_len + 1 + topic_len + 2 + props_len


def body_crc(body: bytes | memoryview) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


@dataclass(slots=True)
class MessageRecord:
    """One decoded stored message (RocketMQ ``MessageExt``)."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    sysflag: int = 0
    born_timestamp: int = 0
    born_host: Host = ("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: Host = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    body_crc: int = 0
    store_size: int = 0
    # Set by consumers (the group the record was pulled from); the stored record does not carry it.
    broker_name: str = ""

    @property
    def tags(self) -> str | None:
        return self.properties.get(P.TAGS)

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(P.KEYS, "").split(P.KEY_SEPARATOR) if k]

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.physical_offset)

    @property
    def msg_id(self) -> str:
        """``MessageClientExt.getMsgId``: the client's UNIQ_KEY when it set one, else the offset id."""
        return self.properties.get(P.UNIQ_KEY) or self.offset_msg_id


def encode_record(
    *,
    topic: str,
    body: bytes | memoryview,
    queue_id: int = 0,
    flag: int = 0,
    properties: str = "",
    sysflag: int = 0,
    born_timestamp: int = 0,
    born_host: Host = ("127.0.0.1", 0),
    store_host: Host = ("127.0.0.1", 0),
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    store_timestamp: int = 0,
    crc: int | None = None,
) -> bytearray:
    """Build one record. The host flags in ``sysflag`` are derived from the hosts given."""
    born_ip, born_port, born_v6 = pack_host(born_host)
    store_ip, store_port, store_v6 = pack_host(store_host)
    sysflag &= ~(SF.BORNHOST_V6 | SF.STOREHOST_V6)
    sysflag |= (SF.BORNHOST_V6 if born_v6 else 0) | (SF.STOREHOST_V6 if store_v6 else 0)
    topic_b = topic.encode()
    props_b = properties.encode()
    if not topic_b or len(topic_b) > MAX_TOPIC_BYTES:
        raise LocalProtocolError(f"topic must be 1..{MAX_TOPIC_BYTES} bytes, got {len(topic_b)}")
    if len(props_b) > MAX_PROPERTIES_BYTES:
        raise PropertiesTooLargeError(f"properties are {len(props_b)} bytes, more than {MAX_PROPERTIES_BYTES}")
    head = _HEADS[_head_index(sysflag)]
    total = head.size + len(body) + 1 + len(topic_b) + 2 + len(props_b)
    try:
        head_b = head.pack(
            total,
            MESSAGE_MAGIC_CODE,
            body_crc(body) if crc is None else crc,
            queue_id,
            flag,
            queue_offset,
            physical_offset,
            sysflag,
            born_timestamp,
            born_ip,
            born_port,
            store_timestamp,
            store_ip,
            store_port,
            reconsume_times,
            prepared_transaction_offset,
            len(body),
        )
    except struct.error as exc:
        raise LocalProtocolError(f"a record field is out of range: {exc}") from exc
    # One join copies each part once (cheaper than filling a zeroed buffer in place).
    return bytearray().join((head_b, body, _BYTE[len(topic_b)], topic_b, _SHORT.pack(len(props_b)), props_b))


def record_head(
    *, topic: str, queue_id: int, sysflag: int, born_timestamp: int, born_host: Host, store_host: Host
) -> tuple[bytes, bytes, int] | None:
    """What every record of a batch shares, as ``encode_record`` would write it: the header
    with TOTALSIZE, BODYCRC, FLAG and BODYLEN (its last four bytes) zero, the topic's length
    byte and bytes, and SYSFLAG with the host bits. None where ``encode_record`` raises
    (a topic's length, a field out of range), so the caller takes that path instead."""
    try:
        born_ip, born_port, born_v6 = pack_host(born_host)
        store_ip, store_port, store_v6 = pack_host(store_host)
    except ValueError:  # not an address: the Python path says so
        return None
    sysflag &= ~(SF.BORNHOST_V6 | SF.STOREHOST_V6)
    sysflag |= (SF.BORNHOST_V6 if born_v6 else 0) | (SF.STOREHOST_V6 if store_v6 else 0)
    topic_b = topic.encode()
    if not topic_b or len(topic_b) > MAX_TOPIC_BYTES:
        return None
    head = _HEADS[_head_index(sysflag)]
    try:
        head_b = head.pack(
            0,
            MESSAGE_MAGIC_CODE,
            0,
            queue_id,
            0,
            0,
            0,
            sysflag,
            born_timestamp,
            born_ip,
            born_port,
            0,
            store_ip,
            store_port,
            0,
            0,
            0,
        )
    except struct.error:
        return None
    return head_b, _BYTE[len(topic_b)] + topic_b, sysflag


def set_append_fields(
    buf: bytearray | memoryview, at: int, queue_offset: int, physical_offset: int, store_ts: int
) -> None:
    """Fill the three fields the commit log knows only under its lock (under it, every
    call counts: QUEUEOFFSET and PHYSICALOFFSET are adjacent, and BORNHOST_V6 sits in
    SYSFLAG's last byte)."""
    _TWO_LONGS.pack_into(buf, at + QUEUEOFFSET_POS, queue_offset, physical_offset)
    born_v6 = buf[at + SYSFLAG_POS + 3] & SF.BORNHOST_V6
    _LONG.pack_into(buf, at + (_STORE_TS_POS_V6 if born_v6 else _STORE_TS_POS_V4), store_ts)


def decode_record(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    check_crc: bool = True,
    inflate: bool = False,
) -> MessageRecord:
    """Decode the record at ``pos``; raise RemoteProtocolError on any inconsistency."""
    avail = len(buf) - pos
    if avail < 8:
        raise RemoteProtocolError(f"record at {pos}: {avail} bytes, too short for a header")
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC_CODE:
        raise RemoteProtocolError(f"record at {pos}: bad magic {magic & 0xFFFFFFFF:#x}")
    if total > avail or total < _HEADS[0].size:
        raise RemoteProtocolError(f"record at {pos}: size {total} outside 0..{avail}")
    sysflag = _SYSFLAG.unpack_from(buf, pos + SYSFLAG_POS)[0]
    head = _HEADS[_head_index(sysflag)]
    if total < head.size + 3:
        raise RemoteProtocolError(f"record at {pos}: size {total} below its header")
    (
        _t,
        _m,
        crc,
        queue_id,
        flag,
        queue_offset,
        phys,
        _sf,
        born_ts,
        born_ip,
        born_port,
        store_ts,
        store_ip,
        store_port,
        reconsume,
        prepared,
        body_len,
    ) = head.unpack_from(buf, pos)
    p = pos + head.size
    end = pos + total
    if body_len < 0 or p + body_len + 3 > end:
        raise RemoteProtocolError(f"record at {pos}: body length {body_len} overruns the record")
    body = bytes(buf[p : p + body_len])
    p += body_len
    if check_crc and body_crc(body) != crc:
        raise RemoteProtocolError(f"record at {pos}: body CRC mismatch")
    topic_len = buf[p]
    topic = bytes(buf[p + 1 : p + 1 + topic_len]).decode("utf-8", "replace")
    p += 1 + topic_len
    if p + 2 > end:
        raise RemoteProtocolError(f"record at {pos}: topic overruns the record")
    props_len = _SHORT.unpack_from(buf, p)[0]
    p += 2
    if props_len < 0 or p + props_len != end:
        raise RemoteProtocolError(f"record at {pos}: size {total} disagrees with its fields")
    props_text = bytes(buf[p : p + props_len]).decode("utf-8", "replace")
    if inflate and sysflag & SF.COMPRESSED:
        body = inflate_body(body, sysflag)
    # positional, in the fields' order: a third of the cost of keywords for a slotted dataclass
    return MessageRecord(
        topic,
        body,
        queue_id,
        flag,
        queue_offset,
        phys,
        sysflag,
        born_ts,
        unpack_host(born_ip, born_port),
        store_ts,
        unpack_host(store_ip, store_port),
        reconsume,
        prepared,
        P.decode_properties(props_text),
        crc,
        total,
    )


def inflate_body(body: bytes, sysflag: int) -> bytes:
    """Undo client compression; RocketMQ 4.x clients only ever use zlib (types 0 and 0x300)."""
    kind = sysflag & SF.COMPRESSION_TYPE_MASK
    if kind not in (0, SF.COMPRESSION_ZLIB):
        raise RemoteProtocolError(f"compression type {kind:#x} is not supported")
    try:
        return zlib.decompress(body)
    except zlib.error as exc:
        raise RemoteProtocolError(f"compressed body does not inflate: {exc}") from exc


def decode_records(
    buf: bytes | bytearray | memoryview, *, check_crc: bool = True, inflate: bool = False
) -> list[MessageRecord]:
    """Split a pull / query / view body: records back to back, no extra framing.

    Where ledgermq/_recordc.c is built (ledgermq/speedups.py) its ``decode_records``
    (_record_decode.c) reads the plain records in a third of the Python decoder's time
    (1 KiB bodies: 2.8 -> 1.0 µs, 0.4 of it the CRC), where a push consumer's drain spent
    a third of its CPU. It hands every other record (IPv6 hosts, a body to inflate,
    anything malformed) to ``decode_record`` at its position, so the records and errors
    are this module's either way (tests/protocol/test_record_decode_c.py holds the two
    against each other)."""
    if _C_DECODE is not None:
        records: list[MessageRecord] | None = _C_DECODE(buf, check_crc, inflate, MessageRecord, decode_record)
        if records is not None:  # None: a buffer C does not read (not contiguous bytes)
            return records
    return _decode_records_py(buf, check_crc=check_crc, inflate=inflate)


def _decode_records_py(
    buf: bytes | bytearray | memoryview, *, check_crc: bool = True, inflate: bool = False
) -> list[MessageRecord]:
    """``decode_records`` in Python: the fallback without the extension, and the reference
    the compiled path is tested against."""
    out: list[MessageRecord] = []
    pos = 0
    while pos < len(buf):
        rec = decode_record(buf, pos, check_crc=check_crc, inflate=inflate)
        out.append(rec)
        pos += rec.store_size
    return out
