"""The HA byte stream against hand-driven peers: a scripted master for our slave, a raw
socket slave for our master.

The slave must cope with any split of the stream (frames across reads, many frames in
one read), keep the frames before a bad one and then drop the connection, and report
once per read rather than once per frame. The master must keep streaming without
waiting for acks, in frames of at most haTransferBatchSize that never cross a segment,
and deliver every byte to a slave that reads slowly.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from ledgermq.config import BrokerRole
from ledgermq.ha.codec import HEADER, MAX_FRAME_BODY, REPORT, encode_frame, encode_header, encode_report
from ledgermq.ha.config import HAConfig
from ledgermq.ha.epochs import Agree, EpochLog
from ledgermq.ha.handshake import HELLO_MAGIC, LENGTH, decode_hello, encode_answer
from ledgermq.ha.master import HAService
from ledgermq.ha.master_link import SlaveLink
from ledgermq.ha.slave import HAClient
from ledgermq.store.dispatch import whole_records_end
from ledgermq.store.message_store import MessageStore, open_message_store
from tests.conftest import small_config
from tests.ha.helpers import FAST, open_store, put, until

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, list[int]], Awaitable[None]]


class ScriptedMaster:
    """A master that plays ``script`` on each connection and records every report."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections: list[list[int]] = []  # reports, per connection
        self.hellos: list[int] = []  # the log end each connection's hello named
        self.server: asyncio.Server | None = None
        self.handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            await self._play(reader, writer)
        except asyncio.CancelledError:
            # close() ends connections still open. Python 3.11's stream server reports a
            # handler that ends cancelled as an error ("Exception in callback"): end normally.
            pass
        finally:
            self.handlers.discard(task)

    async def _play(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reports: list[int] = []
        self.connections.append(reports)
        # ledgermq's handshake first: agree wherever the slave's log ends.
        magic = REPORT.unpack(await reader.readexactly(REPORT.size))[0]
        assert magic == HELLO_MAGIC, magic
        size = LENGTH.unpack(await reader.readexactly(LENGTH.size))[0]
        end = decode_hello(await reader.readexactly(size)).max_offset
        self.hellos.append(end)
        writer.write(encode_answer(Agree(end), EpochLog()))
        await writer.drain()

        async def read_reports() -> None:
            buf = b""
            while data := await reader.read(4096):
                buf += data
                while len(buf) >= 8:
                    reports.append(REPORT.unpack_from(buf)[0])
                    buf = buf[8:]

        reading = asyncio.create_task(read_reports())
        try:
            await until(lambda: bool(reports), what="the slave's first report")
            await self.script(reader, writer, reports)
            await reading  # until the slave hangs up
        finally:
            reading.cancel()
            writer.close()

    async def close(self) -> None:
        """Stop listening and end every connection's script (3.11's ``wait_closed`` does not)."""
        if self.server is not None:
            self.server.close()
            handlers = list(self.handlers)
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers)
            await self.server.wait_closed()


def master_log(tmp_path: Path, count: int = 120) -> bytes:
    """The commit log of a real master (records of ~1 KB, all in its first 64 KiB segment)."""
    store = open_store(tmp_path / "source", BrokerRole.ASYNC_MASTER)
    try:
        put(store, count, size=400)
        data = store.read_commitlog(0, store.max_phy_offset)
        assert len(data) == store.max_phy_offset
        return data
    finally:
        store.shutdown()


def frames_of(data: bytes, size: int, start: int = 0) -> list[bytes]:
    return [encode_frame(start + i, data[i : i + size]) for i in range(0, len(data), size)]


async def run_slave(
    tmp_path: Path, script: Script, check: Callable[[MessageStore, HAClient, ScriptedMaster], bool]
) -> tuple[MessageStore, HAClient, ScriptedMaster]:
    master = ScriptedMaster(script)
    port = await master.start()
    slave = open_store(tmp_path / "slave", BrokerRole.SLAVE)
    client = HAClient(slave, lambda: f"127.0.0.1:{port}", FAST, reconnect_min=0.05, reconnect_max=0.2)
    client.start()
    try:
        await until(lambda: check(slave, client, master), timeout=10.0, what="the slave's state")
    except BaseException:
        await client.stop()
        slave.shutdown()
        await master.close()
        raise
    return slave, client, master


async def finish(slave: MessageStore, client: HAClient, master: ScriptedMaster) -> None:
    await client.stop()
    slave.shutdown()
    await master.close()


def test_frames_split_across_reads_at_random_points(tmp_path: Path) -> None:
    data = master_log(tmp_path)
    stream = b"".join(frames_of(data, 700))
    rng = random.Random(7)

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reports: list[int]) -> None:
        pos = 0
        while pos < len(stream):  # pieces of 1..2,000 bytes, each its own read on the slave
            n = rng.randrange(1, 2000)
            writer.write(stream[pos : pos + n])
            await writer.drain()
            await asyncio.sleep(0.002)
            pos += n

    async def main() -> None:
        slave, client, master = await run_slave(
            tmp_path, script, lambda s, c, m: bool(m.connections) and len(data) in m.connections[0]
        )
        try:
            assert slave.read_commitlog(0, len(data)) == data
            reports = master.connections[0]
            assert reports == sorted(reports) and reports[0] == 0 and reports[-1] == len(data)
            assert client.last_error == "" and client.connects == 1
        finally:
            await finish(slave, client, master)

    asyncio.run(main())


def test_many_frames_in_one_read_are_appended_together_and_reported_once(tmp_path: Path) -> None:
    data = master_log(tmp_path)
    frames = frames_of(data, 500)
    assert len(frames) > 100

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reports: list[int]) -> None:
        writer.write(encode_header(0, 0) + b"".join(frames) + encode_header(len(data), 0))  # heartbeats around
        await writer.drain()

    async def main() -> None:
        slave, client, master = await run_slave(
            tmp_path, script, lambda s, c, m: bool(m.connections) and len(data) in m.connections[0]
        )
        try:
            assert slave.read_commitlog(0, len(data)) == data
            reports = master.connections[0]
            # one report per read, not per frame: a few reads at most for ~120 KB
            assert 2 <= len(reports) <= 10 < len(frames), reports
            assert reports[-1] == len(data)
            assert slave.wait_dispatched(timeout=10.0)
            assert slave.max_offset_in_queue("HaTopic", 0) == 30  # 120 messages over 4 queues
        finally:
            await finish(slave, client, master)

    asyncio.run(main())


def test_a_bad_offset_mid_read_keeps_the_frames_before_it_and_drops_the_connection(tmp_path: Path) -> None:
    data = master_log(tmp_path)
    good = frames_of(data[:3000], 1000)
    bad = encode_frame(3000 + 10, data[3010:4000])  # skips 10 bytes: not at the slave's end

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reports: list[int]) -> None:
        if len(reports) == 1 and reports[0] == 0:  # first connection: good, good, good, bad, good
            writer.write(b"".join(good) + bad + encode_frame(4000, data[4000:5000]))
            await writer.drain()
        else:  # the slave came back: it resumes at its own end
            await until(lambda: bool(reports), what="report")
            writer.write(encode_frame(reports[0], data[reports[0] :]))
            await writer.drain()

    async def main() -> None:
        slave, client, master = await run_slave(
            tmp_path, script, lambda s, c, m: len(m.connections) >= 2 and len(data) in m.connections[1]
        )
        try:
            first, second = master.connections[:2]
            assert max(first) < 4000  # the frame after the bad one was never taken
            # The three good frames were kept; 3000 falls inside a record, which the slave trims
            # before its next hello: it resumes at the last whole record before 3000.
            boundary = whole_records_end(data[:3000], 0, len(data) * 2)
            assert 2000 < boundary < 3000
            assert master.hellos[1] == second[0] == boundary
            assert slave.read_commitlog(0, len(data)) == data
            assert client.connects >= 2
        finally:
            await finish(slave, client, master)

    asyncio.run(main())


def test_a_bad_header_mid_read_keeps_the_frames_before_it_and_drops_the_connection(tmp_path: Path) -> None:
    data = master_log(tmp_path)
    oversized = HEADER.pack(2000, MAX_FRAME_BODY + 1)

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reports: list[int]) -> None:
        if reports[0] == 0:
            writer.write(b"".join(frames_of(data[:2000], 1000)) + oversized + b"\0" * 64)
            await writer.drain()

    async def main() -> None:
        slave, client, master = await run_slave(
            tmp_path, script, lambda s, c, m: len(m.connections) >= 2 and bool(m.connections[1])
        )
        try:
            # Both good frames were kept; the record they end inside is trimmed on reconnect.
            boundary = whole_records_end(data[:2000], 0, len(data) * 2)
            assert 1000 < boundary < 2000
            assert slave.max_phy_offset == boundary
            assert master.connections[1][0] == boundary
            assert slave.read_commitlog(0, boundary) == data[:boundary]
        finally:
            await finish(slave, client, master)

    asyncio.run(main())


# -- our master against a raw-socket slave ----------------------------------------------------


def _big_segment_master(root: Path, seg: int) -> MessageStore:
    store = open_message_store(small_config(root, broker_role=BrokerRole.ASYNC_MASTER, mapped_file_size_commitlog=seg))
    store.start()
    return store


def _read_frames(sock: socket.socket, until_offset: int, pause: float = 0.0) -> list[tuple[int, bytes]]:
    """Blocking: read frames until one ends at ``until_offset`` (heartbeats kept too)."""
    frames: list[tuple[int, bytes]] = []
    buf = b""
    while True:
        chunk = sock.recv(4096)
        assert chunk, "the master closed the connection"
        buf += chunk
        while len(buf) >= 12:
            offset, size = HEADER.unpack_from(buf)
            if len(buf) < 12 + size:
                break
            frames.append((offset, buf[12 : 12 + size]))
            buf = buf[12 + size :]
            if offset + size == until_offset and size:
                return frames
        if pause:
            time.sleep(pause)


def test_master_streams_everything_without_waiting_for_acks_in_batch_sized_frames(tmp_path: Path) -> None:
    async def main() -> None:
        seg = 256 * 1024
        store = _big_segment_master(tmp_path / "m", seg)
        service = HAService(store, "127.0.0.1", 0, HAConfig(transfer_batch_size=3000, send_heartbeat_interval_ms=200))
        try:
            end = put(store, 700, size=800)  # ~640 KB over three segments
            assert end > 2 * seg
            await service.start()
            with socket.create_connection(("127.0.0.1", service.port), timeout=10) as sock:
                sock.sendall(encode_report(seg))  # one report, then never again
                frames = await asyncio.to_thread(_read_frames, sock, end)
                data = [(off, body) for off, body in frames if body]
                assert all(len(body) <= 3000 for _, body in data)
                assert all(off // seg == (off + len(body) - 1) // seg for off, body in data)  # within a segment
                assert [off for off, _ in data] == sorted(off for off, _ in data)
                assert data[0][0] == seg
                assert all(a[0] + len(a[1]) == b[0] for a, b in itertools.pairwise(data))
                assert b"".join(body for _, body in data) == store.read_commitlog(seg, seg) + store.read_commitlog(
                    2 * seg, end - 2 * seg
                )
                assert service.max_acked_offset == seg  # no ack was needed for any of it
        finally:
            await service.stop()
            store.shutdown()

    asyncio.run(main())


def test_master_delivers_every_byte_to_a_slave_that_reads_slowly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small socket buffers and a slow reader: sendmsg takes part of a window at a time."""

    waits = 0
    writable = SlaveLink._writable

    async def counting_writable(self: SlaveLink, loop: asyncio.AbstractEventLoop) -> None:
        nonlocal waits
        waits += 1
        await writable(self, loop)

    monkeypatch.setattr(SlaveLink, "_writable", counting_writable)

    async def main() -> None:
        seg = 8 * 1024 * 1024
        store = _big_segment_master(tmp_path / "m", seg)
        service = HAService(store, "127.0.0.1", 0, FAST)
        try:
            end = put(store, 4000, size=1500)  # ~6.4 MB in segment 0: more than a socket buffers
            await service.start()
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(10)
            with sock:
                sock.connect(("127.0.0.1", service.port))
                sock.sendall(encode_report(0))
                frames = await asyncio.to_thread(_read_frames, sock, end, 0.0005)
                body = b"".join(b for _, b in frames)
                assert body == store.read_commitlog(0, end)
                assert all(len(b) <= FAST.transfer_batch_size for _, b in frames)
                sock.sendall(encode_report(end))
                await until(lambda: service.max_acked_offset == end, what="the ack")
                assert waits > 0  # the socket was full at times: the rest of a window waited for it
        finally:
            await service.stop()
            store.shutdown()

    asyncio.run(main())


def test_master_drops_a_slave_that_goes_silent(tmp_path: Path) -> None:
    async def main() -> None:
        store = open_store(tmp_path / "m", BrokerRole.ASYNC_MASTER)
        service = HAService(store, "127.0.0.1", 0, HAConfig(housekeeping_interval_ms=300))
        try:
            put(store, 3)
            await service.start()
            with socket.create_connection(("127.0.0.1", service.port), timeout=5) as sock:
                sock.sendall(encode_report(0))
                await until(lambda: service.max_acked_offset == 0 and bool(service.links), what="the link")
                await until(lambda: not service.links, timeout=5.0, what="housekeeping to drop the link")
                assert "housekeeping" in service.status()[0].closed_reason
        finally:
            await service.stop()
            store.shutdown()

    asyncio.run(main())
