"""``ledgermq bench replication`` and ``ledgermq bench produce --client ledgermq``.

Replication catch-up: a master process is filled with ``mb`` MiB of messages, then a fresh
slave process is started and timed until its commit-log max offset equals the master's.
A fresh slave starts replicating at the start of the master's *last* commit-log segment
(RocketMQ semantics), so the master's segment size is chosen larger than the whole fill:
everything lives in segment 0 and the slave has to copy every byte from offset 0. The
rate is bytes copied / seconds between the first and the last poll of the slave's
``commitLogMaxOffset`` (GET_BROKER_RUNTIME_INFO, every 10 ms); the slave's process
start-up (interpreter, store, registration) is reported separately and not counted.

Baselines from the same run, moving the same number of bytes: loopback TCP (a blocking
socket sender thread writing 32 KiB at a time to a receiver thread over 127.0.0.1) and
the disk's raw sequential write rate (``os.write`` of 1 MiB chunks to a file in the same
temporary directory, ``fsync`` at the end). The figure of merit is
replication / min(tcp, disk).

SYNC vs ASYNC: a master and a slave as processes, run twice (ASYNC_MASTER, then
SYNC_MASTER with the default syncFlushTimeout); our asyncio Producer sends ``count``
messages from ``concurrency`` tasks; msgs/s and per-send latency of both.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.bench.broker_bench import ClientRun, _spawn, _wait_port, _wait_route, free_port, spawn_namesrv
from ledgermq.ha.config import HAConfig

MIB = 1024 * 1024
TOPIC = "BenchReplTopic"
FILL_BODY = 4000  # below the client's compress_over (4096): bodies go to the store as they are
FILL_BATCH = 64  # messages per SEND_BATCH_MESSAGE (about 256 KB)
FILL_SENDERS = 4


@dataclass(frozen=True, slots=True)
class ReplicationResult:
    bytes: int  # the master's commit-log max offset, all of it copied by the slave
    segment_size: int
    transfer_batch: int
    fill_seconds: float
    slave_start_seconds: float  # spawn -> first answer to GET_BROKER_RUNTIME_INFO
    catch_up_seconds: float  # first answer -> offset equal to the master's
    first_offset: int  # the slave's offset at its first answer (not counted in the rate)
    tcp_seconds: float
    disk_seconds: float

    @staticmethod
    def _mb_s(n: int, seconds: float) -> float:
        return n / MIB / seconds if seconds > 0 else 0.0

    @property
    def replication_mb_s(self) -> float:
        return self._mb_s(self.bytes - self.first_offset, self.catch_up_seconds)

    @property
    def tcp_mb_s(self) -> float:
        return self._mb_s(self.bytes, self.tcp_seconds)

    @property
    def disk_mb_s(self) -> float:
        return self._mb_s(self.bytes, self.disk_seconds)

    @property
    def ratio(self) -> float:
        floor = min(self.tcp_mb_s, self.disk_mb_s)
        return self.replication_mb_s / floor if floor > 0 else 0.0


@dataclass(slots=True)
class ProducerRun:
    run: ClientRun
    statuses: Counter[str] = field(default_factory=Counter)


# -- processes ---------------------------------------------------------------------------
class HAPair:
    """A name server, a master and (on demand) a slave of one broker group, as processes."""

    def __init__(self, work: Path, role: str, segment_size: int, **extra: object) -> None:
        self.work = work
        self.role = role
        self.segment_size = segment_size
        self.extra = extra  # more broker properties, for both brokers
        self.ns_port = free_port()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.master_port = self.slave_port = 0

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    @property
    def master_addr(self) -> str:
        return f"127.0.0.1:{self.master_port}"

    @property
    def slave_addr(self) -> str:
        return f"127.0.0.1:{self.slave_port}"

    def __enter__(self) -> HAPair:
        self.procs.append(spawn_namesrv(self.work, self.ns_port))
        return self

    def _broker(self, name: str, broker_id: int, role: str) -> tuple[int, subprocess.Popen[bytes]]:
        port, ha_port = free_port(), free_port()
        d = self.work / name
        d.mkdir(parents=True, exist_ok=True)
        props: dict[str, object] = {
            "brokerClusterName": "BenchCluster",
            "brokerName": "bench-ha",
            "brokerId": broker_id,
            "brokerRole": role,
            "brokerIP1": "127.0.0.1",
            "listenPort": port,
            "haListenPort": ha_port,
            "namesrvAddr": self.namesrv,
            "storePathRootDir": d / "store",
            "mappedFileSizeCommitLog": self.segment_size,
            "registerNameServerPeriod": 1000,
            **self.extra,
        }
        (d / "broker.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        proc = _spawn(["ledgermq.cli.main", "broker", "-c", str(d / "broker.properties")], d / "broker.log")
        self.procs.append(proc)
        return port, proc

    def start_master(self) -> None:
        self.master_port, proc = self._broker("master", 0, self.role)
        _wait_port(self.master_port, proc)
        _wait_route(self.namesrv, "TBW102", proc)

    def spawn_slave(self) -> subprocess.Popen[bytes]:
        self.slave_port, proc = self._broker("slave", 1, "SLAVE")
        return proc

    def __exit__(self, *exc: object) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)


async def _max_offset(admin: AdminClient, addr: str) -> int:
    return int((await admin.broker_runtime_info(addr))["commitLogMaxOffset"])


# -- replication catch-up ----------------------------------------------------------------
async def _fill(namesrv: str, total: int) -> None:
    """``total`` bytes of bodies in batches from a few concurrent senders."""
    from ledgermq.client import Message, Producer

    body = (os.urandom(256) * (FILL_BODY // 256 + 1))[:FILL_BODY]
    batches = -(-total // (FILL_BODY * FILL_BATCH))
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(batches):
        queue.put_nowait(i)
    async with Producer("bench-repl-fill", namesrv, send_timeout=30.0) as producer:

        async def sender() -> None:
            while not queue.empty():
                queue.get_nowait()
                await producer.send_batch([Message(TOPIC, body) for _ in range(FILL_BATCH)])

        await asyncio.gather(*(sender() for _ in range(FILL_SENDERS)))


async def _slave_acked(admin: AdminClient, master_addr: str) -> int:
    """The best live slave's acknowledged offset, from the master (the slave is not disturbed)."""
    info = await admin.ha_status(master_addr)
    live = [c.slave_ack_offset for c in info.connections if c.connected and c.slave_ack_offset >= 0]
    if not live:
        raise LookupError("no slave has reported yet")
    return max(live)


async def _catch_up(pair: HAPair, target: int, timeout: float) -> tuple[float, float, int]:
    """Spawn the slave; (start-up seconds, catch-up seconds, offset at the first answer).

    Progress is read from the master's view of the slave's acknowledgements, so polling
    does not take CPU from the slave being measured."""
    spawned = time.monotonic()
    proc = pair.spawn_slave()
    async with AdminClient(pair.namesrv, timeout=2.0, connect_timeout=0.5) as admin:
        first_t, first_off = 0.0, -1
        deadline = spawned + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the slave exited with {proc.returncode}; see {pair.work / 'slave' / 'broker.log'}")
            try:
                off = await _slave_acked(admin, pair.master_addr)
            except Exception:
                await asyncio.sleep(0.01)
                continue
            now = time.monotonic()
            if first_off < 0:
                first_t, first_off = now, off
            if off >= target:
                return first_t - spawned, now - first_t, first_off
            await asyncio.sleep(0.01)
    raise RuntimeError(f"the slave did not reach {target} within {timeout}s")


def loopback_tcp_seconds(nbytes: int, chunk: int = 32 * 1024) -> float:
    """Seconds to move ``nbytes`` over 127.0.0.1 in ``chunk``-byte writes (sender and receiver threads)."""
    payload = os.urandom(chunk)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        received = 0

        def receive() -> None:
            nonlocal received
            conn, _ = listener.accept()
            buf = bytearray(256 * 1024)
            with conn:
                while received < nbytes:
                    n = conn.recv_into(buf)
                    if not n:
                        return
                    received += n

        receiver = threading.Thread(target=receive, daemon=True)
        receiver.start()
        with socket.create_connection(listener.getsockname()) as out:
            started = time.perf_counter()
            sent = 0
            while sent < nbytes:
                part = payload if nbytes - sent >= chunk else payload[: nbytes - sent]
                out.sendall(part)
                sent += len(part)
            receiver.join(120)
            elapsed = time.perf_counter() - started
    if received < nbytes:
        raise RuntimeError(f"loopback TCP moved {received} of {nbytes} bytes")
    return elapsed


def disk_write_seconds(directory: Path, nbytes: int, chunk: int = MIB) -> float:
    """Seconds to write ``nbytes`` sequentially with os.write (``chunk`` at a time) plus one fsync."""
    payload = os.urandom(chunk)
    path = directory / "disk-baseline.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        started = time.perf_counter()
        written = 0
        while written < nbytes:
            written += os.write(fd, payload if nbytes - written >= chunk else payload[: nbytes - written])
        os.fsync(fd)
        return time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def segment_size_for(mb: int) -> int:
    """A commit-log segment that holds the whole fill (bodies + record overhead), at least 16 MiB."""
    return max(16, -(-mb * 5 // 4)) * MIB


def bench_replication(
    mb: int, workdir: Path | None = None, timeout: float = 300.0, transfer_batch: int | None = None
) -> ReplicationResult:
    """``transfer_batch``: haTransferBatchSize for both brokers (None: the broker's default, 32 KiB)."""
    base = workdir or Path(tempfile.mkdtemp(prefix="ledgermq-bench-repl-"))
    segment = segment_size_for(mb)
    extra: dict[str, object] = {} if transfer_batch is None else {"haTransferBatchSize": transfer_batch}
    try:
        with HAPair(base / "ha", "ASYNC_MASTER", segment, **extra) as pair:
            pair.start_master()
            started = time.monotonic()
            asyncio.run(_fill(pair.namesrv, mb * MIB))
            fill_seconds = time.monotonic() - started

            async def master_offset() -> int:
                async with AdminClient(pair.namesrv, timeout=5.0) as admin:
                    return await _max_offset(admin, pair.master_addr)

            target = asyncio.run(master_offset())
            if target > segment:
                raise RuntimeError(f"the fill ({target} bytes) outgrew the {segment}-byte segment")
            start_s, catch_s, first = asyncio.run(_catch_up(pair, target, timeout))
        tcp_s = loopback_tcp_seconds(target)
        disk_s = disk_write_seconds(base, target)
        return ReplicationResult(
            target,
            segment,
            transfer_batch or HAConfig().transfer_batch_size,
            fill_seconds,
            start_s,
            catch_s,
            first,
            tcp_s,
            disk_s,
        )
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)


# -- SYNC_MASTER vs ASYNC_MASTER -------------------------------------------------------------
async def _wait_slave_in_sync(pair: HAPair, timeout: float) -> None:
    """Until the slave reports the master's max offset (it is connected and caught up)."""
    deadline = time.monotonic() + timeout
    async with AdminClient(pair.namesrv, timeout=2.0, connect_timeout=0.5) as admin:
        while time.monotonic() < deadline:
            try:
                m = await _max_offset(admin, pair.master_addr)
                if m > 0 and await _max_offset(admin, pair.slave_addr) == m:
                    return
            except Exception:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"the slave did not catch up with the master within {timeout}s")


async def _drive(namesrv: str, pair: HAPair, count: int, size: int, concurrency: int) -> ProducerRun:
    from ledgermq.client import Message, Producer

    body = b"x" * size
    async with Producer("bench-sync-async", namesrv, send_timeout=10.0) as producer:
        for _ in range(10):  # warm-up: route, topic auto-creation, connections
            await producer.send(Message(TOPIC, body))
        await _wait_slave_in_sync(pair, 30.0)
        latencies: list[float] = []
        statuses: Counter[str] = Counter()
        remaining = count

        async def sender() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                t0 = time.perf_counter()
                result = await producer.send(Message(TOPIC, body))
                latencies.append((time.perf_counter() - t0) * 1000)
                statuses[result.status.name] += 1

        started = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(concurrency)))
        seconds = time.perf_counter() - started
    return ProducerRun(ClientRun(count, seconds, latencies), statuses)


def _run_role(work: Path, role: str, count: int, size: int, concurrency: int) -> ProducerRun:
    with HAPair(work, role, 64 * MIB) as pair:
        pair.start_master()
        slave = pair.spawn_slave()
        _wait_port(pair.slave_port, slave)
        return asyncio.run(_drive(pair.namesrv, pair, count, size, concurrency))


def bench_sync_vs_async(
    count: int, size: int, concurrency: int, workdir: Path | None = None
) -> tuple[ProducerRun, ProducerRun]:
    """(SYNC_MASTER, ASYNC_MASTER), each a master + slave driven by our asyncio Producer."""
    base = workdir or Path(tempfile.mkdtemp(prefix="ledgermq-bench-sync-"))
    try:
        async_run = _run_role(base / "async", "ASYNC_MASTER", count, size, concurrency)
        sync_run = _run_role(base / "sync", "SYNC_MASTER", count, size, concurrency)
        return sync_run, async_run
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)
