"""The DLedgerEntry codec, byte for byte as openmessaging/dledger 0.2.x writes it.

A data file holds entries back to back, big-endian (DLedgerEntryCoder.encode)::

    off size field
    0   4    magic        1 (DLedgerMmapFileStore.MAGIC_1 / CURRENT_MAGIC)
    4   4    size         whole entry: BODY_OFFSET + body length
    8   8    index        Raft index, from 0
    16  8    term
    24  8    pos          where the entry starts in the data files (POS_OFFSET)
    32  4    channel      reserved, 0
    36  4    chainCrc     reserved, 0 (DLedger never fills it)
    40  4    bodyCrc      DLedger never fills it (0); we write crc32(body) & 0x7FFFFFFF
    44  4    body length  (HEADER_SIZE = 44 is the header without this field)
    48  ...  body         (BODY_OFFSET = 48)

An entry never crosses a data-file end: when ``size + 8`` does not fit, the rest of the
file gets a blank (MmapFileList.preAppend: int BLANK_MAGIC = -1, then int bytes left;
note the order, magic first, unlike the commit log's blank) and the entry goes to the
next file. An index file holds one 32-byte unit per entry at ``index * 32``
(DLedgerEntryCoder.encodeIndex): int magic, long pos, int size, long index, long term.

``check_entry`` is the one validator recovery and iteration use; like
``store.dispatch.check_record`` it is pure (a buffer in, a verdict out).
"""

from __future__ import annotations

import enum
import mmap
import struct
import zlib
from dataclasses import dataclass
from typing import NamedTuple

ENTRY_MAGIC = 1
BLANK_MAGIC = -1
MIN_BLANK_LEN = 8
POS_OFFSET = 24
HEADER_SIZE = 44
BODY_OFFSET = 48
INDEX_UNIT_SIZE = 32

# Everything up to the body, body length included (48 bytes).
ENTRY_HEAD = struct.Struct(">iiqqqiiii")
# magic, pos, size, index, term (32 bytes).
INDEX_UNIT = struct.Struct(">iqiqq")
BLANK_HEAD = struct.Struct(">ii")
_POS = struct.Struct(">q")

assert ENTRY_HEAD.size == BODY_OFFSET and INDEX_UNIT.size == INDEX_UNIT_SIZE

Buffer = mmap.mmap | bytes | bytearray | memoryview


def body_crc(body: Buffer) -> int:
    """RocketMQ's UtilAll.crc32 convention: CRC-32 masked to a non-negative int."""
    return zlib.crc32(body) & 0x7FFFFFFF


def entry_size(body_len: int) -> int:
    return BODY_OFFSET + body_len


def pack_entry_head(
    buf: bytearray | memoryview | mmap.mmap, offset: int, index: int, term: int, pos: int, body: Buffer
) -> None:
    """Write the 48-byte head of an entry for ``body`` into ``buf`` at ``offset``."""
    n = len(body)
    ENTRY_HEAD.pack_into(buf, offset, ENTRY_MAGIC, BODY_OFFSET + n, index, term, pos, 0, 0, body_crc(body), n)


def encode_entry(index: int, term: int, pos: int, body: Buffer) -> bytes:
    """A whole entry as one buffer (tests, tools; the store writes head and body in place)."""
    out = bytearray(BODY_OFFSET + len(body))
    pack_entry_head(out, 0, index, term, pos, body)
    out[BODY_OFFSET:] = body
    return bytes(out)


def pack_index_unit(
    buf: bytearray | memoryview | mmap.mmap, offset: int, pos: int, size: int, index: int, term: int
) -> None:
    INDEX_UNIT.pack_into(buf, offset, ENTRY_MAGIC, pos, size, index, term)


def blank_head(remaining: int) -> bytes:
    return BLANK_HEAD.pack(BLANK_MAGIC, remaining)


def set_pos(buf: bytearray | memoryview, offset: int, pos: int) -> None:
    """Rewrite the pos field of the entry at ``offset`` (DLedgerEntryCoder.setPos)."""
    _POS.pack_into(buf, offset + POS_OFFSET, pos)


@dataclass(frozen=True, slots=True)
class EntryInfo:
    """A complete, valid entry found at ``pos``."""

    index: int
    term: int
    pos: int
    size: int

    @property
    def body_pos(self) -> int:
        return self.pos + BODY_OFFSET

    @property
    def body_size(self) -> int:
        return self.size - BODY_OFFSET

    @property
    def end(self) -> int:
        return self.pos + self.size


class VerdictKind(enum.Enum):
    END_OF_DATA = "end of data"
    BLANK = "blank (end of data file)"
    INCOMPLETE = "entry not completely written yet"
    CORRUPT = "torn or corrupt"


class Verdict(NamedTuple):
    """Anything but a complete entry. For BLANK, ``size`` is the bytes to the file end."""

    kind: VerdictKind
    reason: str
    size: int = 0


END_OF_DATA = Verdict(VerdictKind.END_OF_DATA, "end of data")
INCOMPLETE = Verdict(VerdictKind.INCOMPLETE, "entry not completely written yet")


def _corrupt(reason: str) -> Verdict:
    return Verdict(VerdictKind.CORRUPT, reason)


def check_entry(
    buf: Buffer,
    at: int,
    limit: int,
    expected_pos: int,
    *,
    capacity: int | None = None,
    check_crc: bool = True,
) -> EntryInfo | Verdict:
    """Validate the entry at ``at`` in ``buf`` (bytes valid up to ``limit``).

    ``expected_pos`` is the absolute data position of ``at``; the entry must name it.
    ``capacity`` is where the data file ends (default ``limit``): an entry must leave
    room for a blank before it, as DLedger's preAppend guarantees, and a blank must run
    exactly to it. A body CRC of 0 means "not recorded" (files DLedger itself wrote) and
    is not checked; the body-length field must still agree with the size.
    """
    cap = limit if capacity is None else capacity
    if limit - at < MIN_BLANK_LEN:
        return END_OF_DATA
    magic, size = BLANK_HEAD.unpack_from(buf, at)
    if magic == BLANK_MAGIC:
        if size != cap - at:
            return _corrupt(f"blank of {size} bytes at {expected_pos} does not reach the file end ({cap - at})")
        return Verdict(VerdictKind.BLANK, "blank (end of data file)", size)
    if magic == 0 and size == 0:
        return END_OF_DATA
    if magic != ENTRY_MAGIC:
        return _corrupt(f"bad magic {magic} at {expected_pos}")
    if size < BODY_OFFSET or size + MIN_BLANK_LEN > cap - at:
        return _corrupt(f"size {size} at {expected_pos} does not fit")
    if size > limit - at:
        return INCOMPLETE
    _m, _s, index, term, pos, _channel, _chain, crc, body_len = ENTRY_HEAD.unpack_from(buf, at)
    if body_len + BODY_OFFSET != size:
        return _corrupt(f"size {size} != {BODY_OFFSET} + body length {body_len} at {expected_pos}")
    if pos != expected_pos:
        return _corrupt(f"entry claims pos {pos}, found at {expected_pos}")
    if index < 0 or term < 0:
        return _corrupt(f"negative index {index} or term {term} at {expected_pos}")
    if check_crc and crc != 0 and body_crc(buf[at + BODY_OFFSET : at + size]) != crc:
        return _corrupt(f"body CRC mismatch for index {index} at {expected_pos}")
    return EntryInfo(index, term, pos, size)


def entry_body_problem(raw: Buffer, pos: int, body_size: int) -> str | None:
    """Why ``raw`` (an entry head and ``body_size`` body bytes read at data position ``pos``)
    must not be served, or None. A read of a whole stored message checks the entry around it:
    its head names this position and body length, and its body CRC (when recorded) holds."""
    if len(raw) < BODY_OFFSET + body_size:
        return f"{len(raw)} bytes read at {pos}, {BODY_OFFSET + body_size} expected"
    magic, size, index, _term, epos, _ch, _chain, crc, body_len = ENTRY_HEAD.unpack_from(raw, 0)
    if magic != ENTRY_MAGIC or epos != pos or size != BODY_OFFSET + body_len:
        return f"entry head at {pos} is damaged (magic {magic}, pos {epos}, size {size}, body length {body_len})"
    if body_len != body_size:
        return None  # not a whole-entry read (a part of a message): nothing more to compare
    if crc != 0 and body_crc(memoryview(raw)[BODY_OFFSET : BODY_OFFSET + body_len]) != crc:
        return f"body CRC mismatch for entry {index} at {pos}"
    return None
