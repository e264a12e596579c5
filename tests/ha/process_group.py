"""A name server and one broker group (a master and slaves) as real processes, for the HA process tests.

Built on ``tests.compat.cluster`` (ServerProcess, free ports, bounded polls). Every broker binds 127.0.0.1 on a
port p picked free together with p+1 (its HA port); stores and logs live under the test's tmp_path. Brokers are
started, killed (SIGKILL), stopped (SIGTERM), paused (SIGSTOP) and restarted on the same port and store by name;
``close`` kills whatever still runs. Offsets are read with GET_BROKER_RUNTIME_INFO (``commitLogMaxOffset``).
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.config import BrokerRole, StoreConfig
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import decode_record
from ledgermq.store.message_store import MessageStore, open_message_store
from ledgermq.store.results import GetStatus
from tests.compat.cluster import (
    HOST,
    START_TIMEOUT,
    ServerProcess,
    broker_writable,
    free_port,
    route,
    tail,
    tcp_open,
    wait_until,
)

SEG = 1024 * 1024  # mappedFileSizeCommitLog: small, so a few MiB span several segments
CQ_SEG = 20 * 10_000  # mappedFileSizeConsumeQueue
CLUSTER = "HaProcCluster"
GROUP = "broker-ha"


@dataclass
class BrokerProc:
    name: str
    broker_id: int
    role: str
    port: int
    store_dir: Path
    conf: Path
    server: ServerProcess
    props: dict[str, object] = field(default_factory=dict)

    @property
    def addr(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.server.proc is not None
        return self.server.proc.pid

    def arm_failpoints(self, spec: str) -> None:
        """Run this broker with LEDGERMQ_FAILPOINTS ``spec`` armed (through chaos_child,
        which arms them and then runs the broker); from its next start on."""
        self.server.module = "ledgermq.cli.chaos_child"
        self.server.env = {"LEDGERMQ_FAILPOINTS": spec}

    def commitlog_files(self) -> dict[str, bytes]:
        d = self.store_dir / "commitlog"
        if not d.is_dir():
            return {}
        return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.name.isdigit()}


class HAGroup:
    """``HAGroup(tmp_path)``; ``add("m", 0, "ASYNC_MASTER")``, ``add("s1", 1, "SLAVE")``; ``start()``; ``close()``."""

    def __init__(self, root: Path, **common: object) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.namesrv_port = free_port()
        self.namesrv_addr = f"{HOST}:{self.namesrv_port}"
        self.namesrv = ServerProcess(
            "namesrv",
            ["namesrv", "-p", str(self.namesrv_port), "--host", HOST, "--kv-config", str(root / "kvConfig.json")],
            root / "namesrv.log",
        )
        self.common = common
        self.brokers: dict[str, BrokerProc] = {}

    def add(self, name: str, broker_id: int, role: str, **props: object) -> BrokerProc:
        port = free_port(span=2)
        store = self.root / name / "store"
        store.mkdir(parents=True, exist_ok=True)
        all_props: dict[str, object] = {
            "brokerClusterName": CLUSTER,
            "brokerName": GROUP,
            "brokerId": broker_id,
            "brokerRole": role,
            "brokerIP1": HOST,
            "listenHost": HOST,
            "listenPort": port,
            "namesrvAddr": self.namesrv_addr,
            "storePathRootDir": store,
            "mappedFileSizeCommitLog": SEG,
            "mappedFileSizeConsumeQueue": CQ_SEG,
            "flushConsumerOffsetInterval": 500,
            "registerNameServerPeriod": 1000,
            "haSendHeartbeatInterval": 1000,
            **self.common,
            **props,
        }
        conf = self.root / name / "broker.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in all_props.items()))
        server = ServerProcess(name, ["broker", "-c", str(conf)], self.root / name / "broker.log")
        b = BrokerProc(name, broker_id, role, port, store, conf, server, all_props)
        self.brokers[name] = b
        return b

    # -- processes ---------------------------------------------------------------------------
    def start_namesrv(self) -> None:
        self.namesrv.start()
        wait_until("the name server's port", lambda: self.namesrv.check_alive() and tcp_open(self.namesrv_port), 20)

    def start(self, b: BrokerProc, timeout: float = START_TIMEOUT) -> None:
        b.server.start()
        wait_until(f"{b.name}'s port", lambda: b.server.check_alive() and tcp_open(b.port), timeout, 0.05)
        registered = lambda: b.server.check_alive() and self.registered(b)  # noqa: E731
        wait_until(f"{b.name}'s registration", registered, timeout, 0.1, self.explain)
        if b.broker_id == 0 and any(s.broker_id != 0 and s.server.alive for s in self.brokers.values()):
            # A master that restarted after a crash fences writes until its slave reconciles.
            writable = lambda: b.server.check_alive() and broker_writable(b.addr)  # noqa: E731
            wait_until(f"{b.name} to take writes", writable, timeout, 0.1, self.explain)

    def registered(self, b: BrokerProc) -> bool:
        data = route(self.namesrv_addr, "TBW102")
        return data is not None and any(d.broker_addrs.get(b.broker_id) == b.addr for d in data.broker_datas)

    def kill(self, b: BrokerProc) -> None:
        """SIGKILL and reap."""
        b.server.kill()

    def stop(self, b: BrokerProc) -> int | None:
        """SIGTERM (clean shutdown); the exit code."""
        if b.server.proc is not None and b.server.proc.poll() is None:
            b.server.proc.send_signal(signal.SIGCONT)  # a paused process cannot handle SIGTERM
        return b.server.stop()

    @staticmethod
    def pause(b: BrokerProc) -> None:
        assert b.server.proc is not None
        b.server.proc.send_signal(signal.SIGSTOP)

    @staticmethod
    def resume(b: BrokerProc) -> None:
        assert b.server.proc is not None
        b.server.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        for b in self.brokers.values():
            if b.server.proc is not None and b.server.proc.poll() is None:
                b.server.proc.send_signal(signal.SIGCONT)
            b.server.kill()
        self.namesrv.kill()

    def explain(self) -> str:
        parts = [f"\n--- {b.name} log ---\n{tail(b.server.log_path, 25)}" for b in self.brokers.values()]
        return "".join(parts) + f"\n--- namesrv log ---\n{tail(self.namesrv.log_path, 10)}"

    # -- state -------------------------------------------------------------------------------
    def max_offset(self, b: BrokerProc) -> int:
        """The broker's commitLogMaxOffset (-1 when it does not answer)."""

        async def ask() -> int:
            async with AdminClient(self.namesrv_addr, timeout=2.0, connect_timeout=1.0) as admin:
                return int((await admin.broker_runtime_info(b.addr))["commitLogMaxOffset"])

        try:
            return asyncio.run(ask())
        except Exception:
            return -1

    def wait_caught_up(self, master: BrokerProc, slaves: list[BrokerProc], timeout: float) -> int:
        """Until every slave reports the master's max offset (polled); that offset."""
        target = self.max_offset(master)
        assert target > 0, f"{master.name} does not answer{self.explain()}"
        offsets: dict[str, int] = {}

        def check() -> bool:
            for s in slaves:
                s.server.check_alive()
                offsets[s.name] = self.max_offset(s)
            return all(o == target for o in offsets.values())

        wait_until(f"the slaves to reach {target}", check, timeout, 0.1, lambda: f"{offsets}{self.explain()}")
        return target


def assert_identical(master: BrokerProc, slave: BrokerProc, *, all_segments: bool) -> list[str]:
    """The slave's commit-log files equal the master's byte for byte; the segment names compared."""
    m, s = master.commitlog_files(), slave.commitlog_files()
    assert s, f"{slave.name} has no commit-log files"
    if all_segments:
        assert sorted(s) == sorted(m), f"segments differ: master {sorted(m)}, {slave.name} {sorted(s)}"
    else:
        assert set(s) <= set(m), f"{slave.name} has segments the master lacks: {sorted(set(s) - set(m))}"
        assert max(s) == max(m), f"{slave.name} lacks the master's last segment {max(m)}"
    for name, data in s.items():
        if data != m[name]:
            first = next(i for i, (x, y) in enumerate(zip(data, m[name], strict=True)) if x != y)
            raise AssertionError(f"segment {name} of {slave.name} differs from the master's from byte {first}")
    return sorted(s)


def open_store(b: BrokerProc) -> MessageStore:
    """The (stopped) broker's store, opened in this process with the broker's segment sizes."""
    role = BrokerRole.SLAVE if b.broker_id else BrokerRole.ASYNC_MASTER
    store = open_message_store(
        StoreConfig(
            root_dir=str(b.store_dir),
            mapped_file_size_commitlog=SEG,
            mapped_file_size_consume_queue=CQ_SEG,
            broker_role=role,
        )
    )
    store.start()
    return store


def queue_bodies(store: MessageStore, topic: str, queue_id: int) -> dict[int, bytes]:
    """Queue offset -> body of every message the store serves from one queue."""
    assert store.wait_dispatched(timeout=10.0)
    out: dict[int, bytes] = {}
    offset = store.min_offset_in_queue(topic, queue_id)
    while True:
        res = store.get_message(topic, queue_id, offset, 32)
        if res.status is not GetStatus.FOUND:
            return out
        for raw in res.messages:
            rec = decode_record(raw, check_crc=False)
            out[rec.queue_offset] = bytes(rec.body)
        offset = res.next_begin_offset


def send_request(topic: str, queue_id: int, body: bytes) -> RemotingCommand:
    """A SEND_MESSAGE_V2 as the Java client makes it (auto-create through TBW102, WAIT=true)."""
    return RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        {"a": "ha-pg", "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": 0, "g": int(time.time() * 1000),
         "h": 0, "i": "WAIT\x01true"},
        body,
    )  # fmt: skip


async def send_raw(client: RemotingClient, b: BrokerProc, topic: str, queue_id: int, body: bytes) -> RemotingCommand:
    return await client.invoke(b.addr, send_request(topic, queue_id, body), 10.0)


def send_once(b: BrokerProc, topic: str, body: bytes, queue_id: int = 0) -> tuple[int, str]:
    """One send on a connection of its own: the answer's code and remark."""

    async def run() -> tuple[int, str]:
        client = RemotingClient(connect_timeout=2.0)
        try:
            resp = await send_raw(client, b, topic, queue_id, body)
            return resp.code, resp.remark or ""
        finally:
            await client.close()

    return asyncio.run(run())
