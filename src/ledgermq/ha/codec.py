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


def frame_buffers(offset: int, data: bytes | memoryview, batch: int) -> list[bytes | memoryview]:
    """``data`` (commit-log bytes from ``offset``) as frames of at most ``batch`` body bytes.

    Returns header, body, header, body, ...: bodies are views of ``data`` (no copy), ready
    for one ``sendmsg``. Empty ``data`` gives no frames (a heartbeat is ``encode_header``).
    """
    if not 0 < batch <= MAX_FRAME_BODY:
        raise LocalProtocolError(f"HA frame batch of {batch} bytes (max {MAX_FRAME_BODY})")
    if not 0 <= offset <= _INT64_MAX - len(data):
        raise LocalProtocolError(f"HA frame offset {offset} is not a non-negative int64")
    view = memoryview(data)
    total = len(view)
    pack = HEADER.pack
    out: list[bytes | memoryview] = []
    for start in range(0, total, batch):
        size = min(batch, total - start)
        out.append(pack(offset + start, size))
        out.append(view[start : start + size])
    return out


FrameSpan = tuple[int, int, int]  # (commit-log offset, body start in the buffer, body size)


def scan_frames(
    buf: bytes | bytearray | memoryview, pos: int, end: int, max_body: int
) -> tuple[list[FrameSpan], int, str]:
    """Find every complete frame in ``buf[pos:end]`` in one pass, without copying.

    Returns the frames as (offset, body start, body size), the position after the last
    complete one (a partial frame starts there) and an error: "" while the stream is
    sound, else why it is not (negative offset, body over ``max_body``). Scanning stops
    at a bad header, which is refused as soon as its 12 bytes are in; the frames before
    it are still returned, so the caller can keep them before dropping the connection.
    """
    frames: list[FrameSpan] = []
    unpack = HEADER.unpack_from
    while end - pos >= HEADER_SIZE:
        offset, size = unpack(buf, pos)
        if offset < 0:
            return frames, pos, f"master frame with negative offset {offset}"
        if size < 0 or size > max_body:
            return frames, pos, f"master frame body of {size} bytes (max {max_body})"
        start = pos + HEADER_SIZE
        if end - start < size:
            break
        frames.append((offset, start, size))
        pos = start + size
    return frames, pos, ""


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
    """Incremental decoder of the master's frames with a body-size cap (copies each body).

    The slave's receive loop uses ``scan_frames`` over its own buffer instead; this is the
    convenient form for tests and tools."""

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
        end = len(buf)
        spans, pos, error = scan_frames(buf, self._pos, end, self.max_body)
        if error:
            raise HAProtocolError(error)
        frames = [TransferFrame(offset, bytes(buf[start : start + size])) for offset, start, size in spans]
        if pos > (1 << 20) or pos == end:
            del buf[:pos]
            pos = 0
        self._pos = pos
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos
