"""Incremental frame splitting for a byte stream, with a hard size cap.

``FrameDecoder.feed(data)`` returns every complete frame now available, each either a
``RemotingCommand`` or a ``BadFrame`` (framing intact but the header did not decode: the
server can answer it if it learned the opaque, and the connection goes on). A length
field that is impossible (below 4) or above ``max_frame_size`` raises
RemoteProtocolError: the stream cannot be resynchronised, so the connection must close.
The check happens before the body is buffered, so a hostile length costs no memory.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol.command import RemotingCommand, decode_command

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024  # Java's com.rocketmq.remoting.frameMaxLength
_LEN = struct.Struct(">i")
_OPAQUE = re.compile(rb'"opaque"\s*:\s*"?(-?\d+)')
_CODE = re.compile(rb'"code"\s*:\s*"?(-?\d+)')


@dataclass(frozen=True, slots=True)
class BadFrame:
    reason: str
    opaque: int | None  # recovered from the raw header when possible
    code: int | None


class FrameDecoder:
    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand | BadFrame]:
        out: list[RemotingCommand | BadFrame] = []
        if not self._buf:
            # Nothing buffered (nearly every read: whole frames): decoded from ``data`` in
            # place, and only an incomplete tail copied into the buffer.
            view = memoryview(data)
            try:
                pos = self._split(view, 0, out)
                if pos < len(view):
                    self._buf += view[pos:]
            finally:
                view.release()
            return out
        buf = self._buf
        buf += data
        view = memoryview(buf)
        try:
            self._pos = self._split(view, self._pos, out)
        finally:
            view.release()  # before the buffer is resized below
        if self._pos and self._pos * 2 >= len(buf):
            del buf[: self._pos]
            self._pos = 0
        return out

    def _split(self, view: memoryview, pos: int, out: list[RemotingCommand | BadFrame]) -> int:
        """Decode every whole frame of ``view`` from ``pos`` into ``out``; where the first
        incomplete one starts."""
        end_of_data = len(view)
        while end_of_data - pos >= 4:
            length = _LEN.unpack_from(view, pos)[0]
            if length < 4 or length > self.max_frame_size:
                raise RemoteProtocolError(
                    f"frame length {length} outside 4..{self.max_frame_size}; closing the connection"
                )
            end = pos + 4 + length
            if end > end_of_data:
                break
            payload = view[pos + 4 : end]
            try:
                out.append(decode_command(payload))
            except RemoteProtocolError as exc:
                out.append(_bad_frame(bytes(payload), str(exc)))
            finally:
                payload.release()
            pos = end
        return pos


def _bad_frame(payload: bytes, reason: str) -> BadFrame:
    header = payload[4 : 4 + min(len(payload) - 4, 4096)] if len(payload) > 4 else b""
    # Keys are sorted: "code" comes before "extFields" and "opaque" after it, so the first
    # code and the last opaque are the command's own, not ones inside extFields.
    opaques = _OPAQUE.findall(header)
    code = _CODE.search(header)
    return BadFrame(reason, int(opaques[-1]) if opaques else None, int(code.group(1)) if code else None)
