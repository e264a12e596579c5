"""Sans-I/O codec of RocketMQ's HA stream (a raw TCP stream, no remoting frames).

* slave -> master: an 8-byte big-endian int64, the slave's max commit-log offset;
* master -> slave: a 12-byte header (int64 start offset, int32 body size) and ``size``
  bytes of raw commit-log data; size 0 is a heartbeat.

Decoders are incremental (feed any split of the stream) and bounded: they keep at most
one partial report or one partial frame, and a negative offset or a body larger than
the configured maximum is a ``HAProtocolError`` (the caller closes the connection).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ledgermq.errors import LocalProtocolError, RemoteProtocolError

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
REPORT_SIZE = REPORT.size  # 8
HEADER_SIZE = HEADER.size  # 12
# A 4.9.7 slave reads into a 4 MiB buffer, so no master can usefully send a larger frame.
MAX_FRAME_BODY = 4 * 1024 * 1024 - HEADER_SIZE
_INT64_MAX = (1 << 63) - 1


class HAProtocolError(RemoteProtocolError):
    """The peer's HA stream does not decode (negative offset, oversized body)."""


def encode_report(max_offset: int) -> bytes:
    if not 0 <= max_offset <= _INT64_MAX:
        raise LocalProtocolError(f"HA report offset {max_offset} is not a non-negative int64")
    return REPORT.pack(max_offset)


def encode_header(offset: int, size: int) -> bytes:
    if not 0 <= offset <= _INT64_MAX:
        raise LocalProtocolError(f"HA frame offset {offset} is not a non-negative int64")
    if not 0 <= size <= MAX_FRAME_BODY:
        raise LocalProtocolError(f"HA frame body of {size} bytes (max {MAX_FRAME_BODY})")
    return HEADER.pack(offset, size)


def encode_frame(offset: int, body: bytes | memoryview = b"") -> bytes:
    return encode_header(offset, len(body)) + bytes(body)


class ReportDecoder:
    """Master side: turns the slave's byte stream into offsets, in arrival order."""

    __slots__ = ("_partial",)

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, data: bytes | memoryview) -> list[int]:
        buf = self._partial + bytes(data) if self._partial else bytes(data)
        whole = len(buf) - len(buf) % REPORT_SIZE
        self._partial = buf[whole:]
        offsets = [v for (v,) in REPORT.iter_unpack(buf[:whole])]
        for v in offsets:
            if v < 0:
                raise HAProtocolError(f"slave reported a negative offset {v}")
        return offsets

    @property
    def buffered(self) -> int:
        return len(self._partial)


@dataclass(frozen=True, slots=True)
class TransferFrame:
    offset: int
    body: bytes

    @property
    def is_heartbeat(self) -> bool:
        return not self.body

    @property
    def end(self) -> int:
        return self.offset + len(self.body)


class FrameDecoder:
    """Slave side: incremental decoder of the master's frames with a body-size cap."""

    __slots__ = ("_buf", "_pos", "max_body")

    def __init__(self, max_body: int = MAX_FRAME_BODY) -> None:
        if not 0 < max_body <= MAX_FRAME_BODY:
            raise ValueError(f"max_body must be within 1..{MAX_FRAME_BODY}")
        self.max_body = max_body
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes | memoryview) -> list[TransferFrame]:
        """Add bytes; return every frame now complete (raises ``HAProtocolError``)."""
        buf = self._buf
        buf += data
        frames: list[TransferFrame] = []
        pos, end = self._pos, len(buf)
        while end - pos >= HEADER_SIZE:
            offset, size = HEADER.unpack_from(buf, pos)
            if offset < 0:
                raise HAProtocolError(f"master frame with negative offset {offset}")
            if size < 0 or size > self.max_body:
                raise HAProtocolError(f"master frame body of {size} bytes (max {self.max_body})")
            if end - pos < HEADER_SIZE + size:
                break
            start = pos + HEADER_SIZE
            frames.append(TransferFrame(offset, bytes(buf[start : start + size])))
            pos = start + size
        if pos > (1 << 20) or pos == end:
            del buf[:pos]
            pos = 0
        self._pos = pos
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos
