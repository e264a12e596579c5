"""``ledgermq bench replication`` and ``ledgermq bench produce --client ledgermq``.

Replication catch-up: a master process is filled with ``mb`` MiB of message bodies, then
a fresh slave process is started and timed until it has acknowledged the master's whole
commit log. A fresh slave starts replicating at the start of the master's *last*
commit-log segment (RocketMQ semantics), so the master's segment size is chosen larger
than the whole fill: everything lives in segment 0 and the slave has to copy every byte
from offset 0. The fill cycles through bodies of 128 B, 1 KiB and 4,000 B (``FILL_BODIES``).

Timing uses the master's own record of the slave's reports (``lastAckTimestamp`` in
GET_BROKER_HA_STATUS, wall-clock milliseconds): from the slave's first report (offset 0)
to the report of the master's max offset. The bench polls every 1 ms until the slave
shows up and every 20 ms afterwards; polling only finds the timestamps, it does not
round them. The slave's process start-up (interpreter, store, registration) and the time
its consume queues take to catch up afterwards are reported separately, not counted.

Baselines from the same run, moving the same number of bytes, measured after the
brokers have exited and ``os.sync()`` has written their dirty pages back, each the best
of ``BASELINE_TRIES``: loopback TCP with the chunking of the HA path itself (a sender
thread writing ``WRITE_SPAN`` = 1 MiB at a time, a receiver thread reading up to
``READ_MAX`` = 1 MiB) and the disk's raw sequential write rate (``os.write`` of 1 MiB
chunks to a file in the same temporary directory, ``fsync`` at the end). The figure of
merit is replication / min(tcp, disk).

SYNC vs ASYNC: two broker groups as processes, up at the same time: a name server, an
ASYNC_MASTER and its slave, and a name server, a SYNC_MASTER (default syncFlushTimeout)
and its slave. Our asyncio Producer sends ``count`` messages to each from ``concurrency``
tasks, in rounds ordered ASYNC, SYNC, SYNC, ASYNC twice over (a quarter of the messages
per round), each round starting once both slaves have caught up and nothing is left to
dispatch; msgs/s and per-send latency of both roles over their four rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import HAConnectionInfo
from ledgermq.bench.broker_bench import (
    ClientRun,
    _spawn,
    _wait_port,
    _wait_route,
    spawn_namesrv,
    stop_processes,
)
from ledgermq.ha.config import HAConfig
from ledgermq.ha.master_link import WRITE_SPAN
from ledgermq.ha.slave import READ_MAX
from ledgermq.testing.ports import free_port

if TYPE_CHECKING:
    from ledgermq.client import Producer

MIB = 1024 * 1024
TOPIC = "BenchReplTopic"
# A mix, as brokers replicate in practice: small events (128 B, the default of RocketMQ's
# own benchmark producer), typical JSON payloads (1 KiB) and larger records just under
# the client's compress_over (4,096: bodies reach the store as they are). One of each in
# turn: 1,717 B on average, so the slave's dispatch sees about 2.3x the records of a
# 4,000-byte-only fill.
FILL_BODIES = (128, 1024, 4000)
FILL_BATCH = 64  # messages per SEND_BATCH_MESSAGE (about 110 KB)
FILL_SENDERS = 4
BASELINE_TRIES = 3


@dataclass(frozen=True, slots=True)
class ReplicationResult:
    bytes: int  # the master's commit-log max offset, all of it copied by the slave
    segment_size: int
    transfer_batch: int
    fill_seconds: float
    slave_start_seconds: float  # spawn -> the slave's first report (as the master saw it)
    catch_up_seconds: float  # first report -> the report of the master's max offset
    first_offset: int  # the slave's first report (0 for a fresh slave; not counted in the rate)
    tcp_seconds: float  # best of BASELINE_TRIES
    disk_seconds: float  # best of BASELINE_TRIES
    dispatch_seconds: float = -1.0  # caught up -> the slave's consume queues complete (-1: not seen)
    start_exact: bool = True  # False: the first report was missed, start is the last poll before it

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
        stop_processes(self.procs)

    def members(self) -> list[str]:
        return [self.master_addr, self.slave_addr]


class DLedgerTrio:
    """A name server and a 3-broker DLedger group (n0..n2), as processes."""

    def __init__(self, work: Path, segment_size: int) -> None:
        self.work = work
        self.segment_size = segment_size
        self.ns_port = free_port()
        self.ports = [free_port() for _ in range(3)]
        self.raft_ports = [free_port() for _ in range(3)]
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    def members(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    def __enter__(self) -> DLedgerTrio:
        self.procs.append(spawn_namesrv(self.work, self.ns_port))
        return self

    def start(self) -> None:
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(self.raft_ports))
        brokers = []
        for i, port in enumerate(self.ports):
            d = self.work / f"n{i}"
            d.mkdir(parents=True, exist_ok=True)
            props: dict[str, object] = {
                "brokerClusterName": "BenchCluster",
                "brokerName": "bench-dledger",
                "brokerIP1": "127.0.0.1",
                "listenPort": port,
                "namesrvAddr": self.namesrv,
                "storePathRootDir": d / "store",
                "mappedFileSizeCommitLog": self.segment_size,
                "registerNameServerPeriod": 1000,
                "slaveSyncInterval": 1000,
                "enableDLegerCommitLog": "true",
                "dLegerGroup": "bench-dledger",
                "dLegerPeers": peers,
                "dLegerSelfId": f"n{i}",
            }
            (d / "broker.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            proc = _spawn(["ledgermq.cli.main", "broker", "-c", str(d / "broker.properties")], d / "broker.log")
            self.procs.append(proc)
            brokers.append(proc)
        for port, proc in zip(self.ports, brokers, strict=True):
            _wait_port(port, proc)
        _wait_route(self.namesrv, "TBW102", brokers[0])

    def __exit__(self, *exc: object) -> None:
        stop_processes(self.procs)


class Group(Protocol):
    """A broker group the rounds drive: its name server and its members' addresses."""

    @property
    def namesrv(self) -> str: ...

    def members(self) -> list[str]: ...


async def _max_offset(admin: AdminClient, addr: str) -> int:
    return int((await admin.broker_runtime_info(addr))["commitLogMaxOffset"])


# -- replication catch-up ----------------------------------------------------------------
def fill_bodies() -> list[bytes]:
    pattern = os.urandom(256)
    return [(pattern * (size // 256 + 1))[:size] for size in FILL_BODIES]


async def _fill(namesrv: str, total: int) -> None:
    """``total`` bytes of bodies in batches from a few concurrent senders."""
    from ledgermq.client import Message, Producer

    bodies = fill_bodies()
    per_batch = sum(len(bodies[i % len(bodies)]) for i in range(FILL_BATCH))
    batches = -(-total // per_batch)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(batches):
        queue.put_nowait(i)
    async with Producer("bench-repl-fill", namesrv, send_timeout=30.0) as producer:

        async def sender() -> None:
            while not queue.empty():
                queue.get_nowait()
                await producer.send_batch([Message(TOPIC, bodies[i % len(bodies)]) for i in range(FILL_BATCH)])

        await asyncio.gather(*(sender() for _ in range(FILL_SENDERS)))


async def _settle_master(pair: HAPair, timeout: float) -> int:
    """The master's max offset once it has dispatched the whole fill (it is idle then)."""
    deadline = time.monotonic() + timeout
    async with AdminClient(pair.namesrv, timeout=5.0) as admin:
        while True:
            info = await admin.broker_runtime_info(pair.master_addr)
            if int(info["dispatchBehindBytes"]) == 0 or time.monotonic() > deadline:
                return int(info["commitLogMaxOffset"])
            await asyncio.sleep(0.05)


async def _slave_connection(admin: AdminClient, master_addr: str) -> HAConnectionInfo | None:
    """The live slave connection that has reported, from the master (the slave is not disturbed)."""
    try:
        info = await admin.ha_status(master_addr)
    except Exception:
        return None
    live = [c for c in info.connections if c.connected and c.slave_ack_offset >= 0]
    return max(live, key=lambda c: c.slave_ack_offset) if live else None


@dataclass(frozen=True, slots=True)
class CatchUp:
    start_seconds: float
    catch_up_seconds: float
    first_offset: int
    dispatch_seconds: float
    start_exact: bool


async def _catch_up(pair: HAPair, target: int, timeout: float) -> CatchUp:
    """Spawn the slave and time its catch-up with the master's ack timestamps (wall ms)."""
    spawned = time.time()
    proc = pair.spawn_slave()
    deadline = time.monotonic() + timeout

    def check() -> None:
        if proc.poll() is not None:
            raise RuntimeError(f"the slave exited with {proc.returncode}; see {pair.work / 'slave' / 'broker.log'}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the slave did not reach {target} within {timeout}s")

    async with AdminClient(pair.namesrv, timeout=2.0, connect_timeout=0.5) as admin:
        unseen = time.time()  # the last poll that found no report
        while (conn := await _slave_connection(admin, pair.master_addr)) is None:
            check()
            unseen = time.time()
            await asyncio.sleep(0.001)
        # A fresh slave's first report is 0 and its next one is larger: if the master still
        # shows 0, its timestamp is the first report's; otherwise start at the last empty poll.
        first_off = 0
        exact = conn.slave_ack_offset == 0 and conn.last_ack_timestamp > 0
        start_ms = conn.last_ack_timestamp if exact else int(unseen * 1000)
        while conn is None or conn.slave_ack_offset < target:
            check()
            await asyncio.sleep(0.02)
            conn = await _slave_connection(admin, pair.master_addr)
        end_ms = conn.last_ack_timestamp
        caught = time.monotonic()
        dispatch_s = -1.0
        while time.monotonic() < caught + timeout:  # the slave's consume queues, for the record
            try:
                info = await admin.broker_runtime_info(pair.slave_addr)
                if int(info["dispatchBehindBytes"]) == 0:
                    dispatch_s = time.monotonic() - caught
                    break
            except Exception:
                pass
            await asyncio.sleep(0.02)
    # Millisecond timestamps: an interval under 1 ms counts as 1 ms (the rate errs low, never high).
    catch_up_s = max(1, end_ms - start_ms) / 1000
    return CatchUp(start_ms / 1000 - spawned, catch_up_s, first_off, dispatch_s, exact)


def loopback_tcp_seconds(nbytes: int, chunk: int = WRITE_SPAN, read_size: int = READ_MAX) -> float:
    """Seconds to move ``nbytes`` over 127.0.0.1 in ``chunk``-byte writes and reads of up to
    ``read_size`` (a sender and a receiver thread): the HA path's own chunking."""
    payload = os.urandom(chunk)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        received = 0

        def receive() -> None:
            nonlocal received
            conn, _ = listener.accept()
            buf = bytearray(read_size)
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


def best_seconds(measure: Callable[[], float], tries: int = BASELINE_TRIES) -> float:
    """The fastest of ``tries`` runs: a baseline stands for what the machine can do."""
    return min(measure() for _ in range(tries))


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

            target = asyncio.run(_settle_master(pair, timeout))
            os.sync()  # the fill's dirty pages go to disk before the slave starts
            if target > segment:
                raise RuntimeError(f"the fill ({target} bytes) outgrew the {segment}-byte segment")
            caught = asyncio.run(_catch_up(pair, target, timeout))
        os.sync()  # the brokers' dirty pages go to disk before the baselines run
        tcp_s = best_seconds(lambda: loopback_tcp_seconds(target))
        disk_s = best_seconds(lambda: disk_write_seconds(base, target))
        return ReplicationResult(
            target,
            segment,
            transfer_batch or HAConfig().transfer_batch_size,
            fill_seconds,
            caught.start_seconds,
            caught.catch_up_seconds,
            caught.first_offset,
            tcp_s,
            disk_s,
            caught.dispatch_seconds,
            caught.start_exact,
        )
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)


# -- SYNC_MASTER vs ASYNC_MASTER -------------------------------------------------------------
async def _wait_slave_in_sync(pair: Group, timeout: float) -> None:
    """Until every member reports the same max offset (connected and caught up)."""
    deadline = time.monotonic() + timeout
    async with AdminClient(pair.namesrv, timeout=2.0, connect_timeout=0.5) as admin:
        while time.monotonic() < deadline:
            try:
                offsets = {await _max_offset(admin, a) for a in pair.members()}
                if len(offsets) == 1 and offsets.pop() > 0:
                    return
            except Exception:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"the group's members did not catch up with each other within {timeout}s")


async def _wait_quiet(pair: Group, timeout: float) -> None:
    """Until every member has caught up and dispatched everything."""
    await _wait_slave_in_sync(pair, timeout)
    deadline = time.monotonic() + timeout
    async with AdminClient(pair.namesrv, timeout=2.0, connect_timeout=0.5) as admin:
        while time.monotonic() < deadline:
            try:
                behind = [int((await admin.broker_runtime_info(a))["dispatchBehindBytes"]) for a in pair.members()]
                if not any(behind):
                    return
            except Exception:
                pass
            await asyncio.sleep(0.05)


async def _send_round(producer: Producer, count: int, size: int, concurrency: int, run: ProducerRun) -> None:
    from ledgermq.client import Message

    body = b"x" * size
    remaining = count
    latencies = run.run.latencies_ms

    async def sender() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            t0 = time.perf_counter()
            result = await producer.send(Message(TOPIC, body))
            latencies.append((time.perf_counter() - t0) * 1000)
            run.statuses[result.status.name] += 1

    started = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(concurrency)))
    run.run = ClientRun(run.run.count + count, run.run.seconds + time.perf_counter() - started, latencies)


# ASYNC, SYNC, SYNC, ASYNC, twice: each role gets a quarter of the messages four times, and
# a load that drifts during the run (other processes on the host) weighs on both alike.
ROUND_ORDER = ("ASYNC_MASTER", "SYNC_MASTER", "SYNC_MASTER", "ASYNC_MASTER") * 2


async def _drive(
    pairs: dict[str, Group], count: int, size: int, concurrency: int, order: tuple[str, ...] = ROUND_ORDER
) -> dict[str, ProducerRun]:
    from ledgermq.client import Message, Producer

    runs = {role: ProducerRun(ClientRun(0, 0.0, [])) for role in pairs}
    async with contextlib.AsyncExitStack() as stack:
        producers = {}
        for role, pair in pairs.items():
            producer = await stack.enter_async_context(Producer(f"bench-{role}", pair.namesrv, send_timeout=10.0))
            for _ in range(10):  # warm-up: route, topic auto-creation, connections
                await producer.send(Message(TOPIC, b"x" * size))
            producers[role] = producer
        rounds = Counter(order)
        done: Counter[str] = Counter()
        for role in order:
            for pair in pairs.values():  # every slave caught up, nothing left to dispatch
                await _wait_quiet(pair, 30.0)
            done[role] += 1
            share = count // rounds[role] if done[role] < rounds[role] else count - runs[role].run.count
            await _send_round(producers[role], share, size, concurrency, runs[role])
    return runs


def bench_sync_vs_async(
    count: int, size: int, concurrency: int, workdir: Path | None = None
) -> tuple[ProducerRun, ProducerRun]:
    """(SYNC_MASTER, ASYNC_MASTER), each a name server, master and slave as processes, all
    up at once; our asyncio Producer sends ``count`` messages to each role in the rounds of
    ``ROUND_ORDER``, each round starting once every slave has caught up."""
    base = workdir or Path(tempfile.mkdtemp(prefix="ledgermq-bench-sync-"))
    try:
        with (
            HAPair(base / "async", "ASYNC_MASTER", 64 * MIB) as async_pair,
            HAPair(base / "sync", "SYNC_MASTER", 64 * MIB) as sync_pair,
        ):
            pairs: dict[str, Group] = {"ASYNC_MASTER": async_pair, "SYNC_MASTER": sync_pair}
            for pair in (async_pair, sync_pair):
                pair.start_master()
                slave = pair.spawn_slave()
                _wait_port(pair.slave_port, slave)
            runs = asyncio.run(_drive(pairs, count, size, concurrency))
        return runs["SYNC_MASTER"], runs["ASYNC_MASTER"]
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)


# DLEDGER, SYNC, SYNC, DLEDGER, twice (as ROUND_ORDER).
DLEDGER_ROUND_ORDER = ("DLEDGER", "SYNC_MASTER", "SYNC_MASTER", "DLEDGER") * 2


def bench_dledger_vs_sync(
    count: int, size: int, concurrency: int, workdir: Path | None = None
) -> tuple[ProducerRun, ProducerRun]:
    """(DLedger group of 3, SYNC_MASTER with one slave), all up at once; our Producer sends
    ``count`` messages to each in alternating rounds, each round once every member caught up.
    A DLedger SEND_OK waits until a quorum wrote (and flushed) the entry; the SYNC_MASTER
    one until its slave acknowledged it."""
    base = workdir or Path(tempfile.mkdtemp(prefix="ledgermq-bench-dledger-"))
    try:
        with (
            DLedgerTrio(base / "dledger", 64 * MIB) as trio,
            HAPair(base / "sync", "SYNC_MASTER", 64 * MIB) as sync_pair,
        ):
            trio.start()
            sync_pair.start_master()
            slave = sync_pair.spawn_slave()
            _wait_port(sync_pair.slave_port, slave)
            groups: dict[str, Group] = {"DLEDGER": trio, "SYNC_MASTER": sync_pair}
            runs = asyncio.run(_drive(groups, count, size, concurrency, DLEDGER_ROUND_ORDER))
        return runs["DLEDGER"], runs["SYNC_MASTER"]
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)
