"""A slave the test drives: it speaks RocketMQ 4.x's HA stream (no handshake), keeps every
byte the master streams, and acknowledges only the offsets the test chooses.

The master (ha/master.py) treats a connection whose first 8 bytes are a plain report as a
4.x slave; an empty slave (first report 0) on a master whose log starts at 0 is sent the
log from 0 and is known to hold everything it acknowledges. ``report(x)`` tells the master
"I hold every byte below x", the way a real slave does after appending a frame; x may fall
in the middle of a record. The last report is repeated every second as a 4.x slave's
heartbeat (it acknowledges nothing new), so the master's housekeeping never drops us.
"""

from __future__ import annotations

import asyncio
import contextlib

from ledgermq.ha.codec import HEADER, HEADER_SIZE, encode_report
from ledgermq.protocol.message import MessageRecord, decode_records

HOST = "127.0.0.1"


class FakeSlave:
    def __init__(self) -> None:
        self.data = bytearray()  # the master's log from offset 0, as streamed
        self.reported = -1  # the highest offset reported so far
        self.problems: list[str] = []
        self._writer: asyncio.StreamWriter | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def connect(self, ha_port: int) -> None:
        reader, writer = await asyncio.open_connection(HOST, ha_port)
        self._writer = writer
        self.report(0)  # an empty slave: stream me the log from its start
        self._tasks = [asyncio.create_task(self._read(reader)), asyncio.create_task(self._heartbeat())]

    def report(self, offset: int) -> None:
        assert self._writer is not None
        assert offset <= len(self.data), f"the test reports {offset}, more than the {len(self.data)} bytes held"
        assert offset >= self.reported, "reports only move forward"
        self.reported = offset
        self._writer.write(encode_report(offset))

    @property
    def received(self) -> int:
        return len(self.data)

    def records(self) -> list[MessageRecord]:
        """Every whole record received so far (their stored physical offsets and sizes)."""
        out: list[MessageRecord] = []
        pos = 0
        buf = bytes(self.data)
        while pos + 4 <= len(buf):
            size = int.from_bytes(buf[pos : pos + 4], "big")
            if size <= 0 or pos + size > len(buf):
                break
            [rec] = decode_records(buf[pos : pos + size])
            assert rec.physical_offset == pos, (rec.physical_offset, pos)
            out.append(rec)
            pos += size
        return out

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                offset, size = HEADER.unpack(await reader.readexactly(HEADER_SIZE))
                body = await reader.readexactly(size) if size else b""
                if offset != len(self.data):
                    self.problems.append(f"frame at {offset}, expected {len(self.data)}")
                    return
                self.data += body
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            self.problems.append(f"the master closed the HA connection: {exc!r}")

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            if self._writer is not None and self.reported >= 0:
                self._writer.write(encode_report(self.reported))

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._writer.wait_closed(), 1.0)
