"""GET_BROKER_HA_STATUS and ``ledgermq admin haStatus``: a name server, a master and a slave
in this process on free 127.0.0.1 ports; the master reports its slave (acknowledged offset,
lag in bytes and time, state), the slave reports its master.

Until BrokerApp lists the ha_status module the harness registers it (and the slave's
HAClient in ``broker.ha_client``) itself. Every wait is bounded; everything is stopped in finally.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner, Result

from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import HARuntimeInfo
from ledgermq.broker.app import PROCESSOR_MODULES, BrokerApp
from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.processors import ha_status
from ledgermq.broker.processors.common import bind
from ledgermq.cli.main import cli
from ledgermq.config import BrokerRole, StoreConfig
from ledgermq.ha.config import HAConfig
from ledgermq.namesrv.app import NamesrvApp, NamesrvConfig
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.testing.ports import free_port

T = TypeVar("T")
HOST = "127.0.0.1"
CLUSTER = "HaStatusCluster"
TOPIC = "HaStatusTopic"
TIMEOUT = 20.0


@dataclass
class HaCluster:
    namesrv: NamesrvApp
    master: BrokerApp
    slave: BrokerApp

    @property
    def ns_addr(self) -> str:
        return f"{HOST}:{self.namesrv.port}"


def _broker(root: Path, namesrv: str, broker_id: int, role: BrokerRole) -> BrokerApp:
    cfg = BrokerConfig(
        cluster_name=CLUSTER,
        broker_name="broker-a",
        broker_id=broker_id,
        broker_ip1=HOST,
        listen_host=HOST,
        listen_port=free_port(),
        ha_listen_port=free_port(),
        namesrv_addr=namesrv,
        register_name_server_period_ms=10_000,
    )
    store_cfg = StoreConfig(root_dir=str(root), broker_role=role, mapped_file_size_commitlog=256 * 1024)
    app = BrokerApp(cfg, store_cfg, ha_config=HAConfig(send_heartbeat_interval_ms=500))
    if ha_status not in PROCESSOR_MODULES:  # until app.py registers the module itself
        for code, fn in ha_status.PROCESSORS.items():
            app.server.register(code, bind(fn, app.broker))
    return app


@asynccontextmanager
async def ha_cluster(root: Path) -> AsyncIterator[HaCluster]:
    ns = NamesrvApp(NamesrvConfig(listen_host=HOST, listen_port=0, kv_config_path=""))
    await asyncio.wait_for(ns.start(), TIMEOUT)
    namesrv = f"{HOST}:{ns.port}"
    master = _broker(root / "m", namesrv, 0, BrokerRole.ASYNC_MASTER)
    slave = _broker(root / "s", namesrv, 1, BrokerRole.SLAVE)
    try:
        await asyncio.wait_for(master.start(), TIMEOUT)
        await asyncio.wait_for(slave.start(), TIMEOUT)
        yield HaCluster(ns, master, slave)
    finally:
        try:
            await asyncio.wait_for(slave.stop(), TIMEOUT)
        finally:
            try:
                await asyncio.wait_for(master.stop(), TIMEOUT)
            finally:
                await asyncio.wait_for(ns.stop(), TIMEOUT)


async def send(broker: BrokerApp, count: int) -> None:
    client = RemotingClient()
    try:
        for i in range(count):
            ext = {"a": "pg", "b": TOPIC, "c": "TBW102", "d": 4, "e": i % 4, "f": 0,
                   "g": int(time.time() * 1000), "h": 0, "i": "WAIT\x01true"}  # fmt: skip
            cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, f"message {i}".encode())
            resp = await client.invoke(broker.config.broker_addr, cmd, 10.0)
            assert resp.code == ResponseCode.SUCCESS, resp
    finally:
        await client.close()


async def poll(what: str, check: Callable[[], Awaitable[T | None]], timeout: float = TIMEOUT) -> T:
    """Await ``check()`` until it returns something truthy; AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


async def caught_up(c: HaCluster) -> None:
    """Until the slave holds and has acknowledged everything the master has."""
    admin = AdminClient(c.ns_addr)
    master_max = c.master.broker.store.max_phy_offset
    try:

        async def acked() -> HARuntimeInfo | None:
            info = await admin.ha_status(c.master.config.broker_addr)
            done = [x for x in info.connections if x.connected and x.slave_ack_offset == master_max]
            return info if done else None

        await poll("the slave to acknowledge the master's max offset", acked)
    finally:
        await admin.close()


def test_ha_status_of_master_and_slave(tmp_path: Path) -> None:
    async def run() -> None:
        async with ha_cluster(tmp_path) as c, AdminClient(c.ns_addr) as admin:
            await send(c.master, 40)
            await caught_up(c)
            m_max = c.master.broker.store.max_phy_offset
            m_addr, s_addr = c.master.config.broker_addr, c.slave.config.broker_addr

            info = await admin.ha_status(m_addr)
            assert info.master and info.master_commit_log_max_offset == m_max
            assert info.in_sync_slave_nums == 1
            (conn,) = info.connections
            assert conn.addr.startswith(f"{HOST}:") and conn.connected and conn.in_sync
            assert (conn.slave_ack_offset, conn.diff, conn.lag_time_ms) == (m_max, 0, 0)
            assert 0 <= conn.since_last_ack_ms(int(time.time() * 1000)) < 10_000
            assert conn.transfer_from_where == m_max and conn.closed_reason == ""
            # replication epochs: the master is in its first, open for writes, nothing repaired
            assert info.epoch == 1 and not info.recovering and info.write_fence == ""
            assert info.truncated_slaves == 0 and info.took_back_bytes == 0

            sinfo = await admin.ha_status(s_addr)
            assert not sinfo.master and sinfo.connections == [] and sinfo.in_sync_slave_nums == 0
            client = sinfo.client
            assert client.master_addr == c.master.config.ha_server_addr
            assert client.connected and client.max_offset == m_max and client.reported_offset == m_max
            assert client.connects >= 1 and client.last_error == ""
            assert client.epoch == 1 and client.truncations == 0 and client.refused == ""
            now = int(time.time() * 1000)
            assert now - 10_000 < client.last_read_timestamp <= now + 1000
            assert now - 10_000 < client.last_write_timestamp <= now + 1000

            # The slave stops replicating: the master shows it gone, then lagging as the log grows.
            assert c.slave.ha_client is not None
            await asyncio.wait_for(c.slave.ha_client.stop(), TIMEOUT)

            async def gone() -> HARuntimeInfo | None:
                i = await admin.ha_status(m_addr)
                return i if i.connections and not any(x.connected for x in i.connections) else None

            info = await poll("the master to see the slave disconnect", gone)
            (conn,) = info.connections
            assert not conn.in_sync and info.in_sync_slave_nums == 0 and conn.closed_reason
            assert (conn.slave_ack_offset, conn.diff) == (m_max, 0)

            sent_at = int(time.time() * 1000)
            await send(c.master, 5)
            info = await admin.ha_status(m_addr)
            (conn,) = info.connections
            grown = c.master.broker.store.max_phy_offset
            assert grown > m_max and info.master_commit_log_max_offset == grown
            assert conn.diff == grown - m_max and not conn.connected and not conn.in_sync
            assert 0 <= conn.lag_time_ms <= int(time.time() * 1000) - sent_at + 1000

            sinfo = await admin.ha_status(s_addr)
            assert not sinfo.client.connected and sinfo.client.max_offset == m_max

    asyncio.run(run())


def test_a_broker_with_neither_side_answers_a_neutral_body(tmp_path: Path) -> None:
    async def run() -> None:
        async with ha_cluster(tmp_path) as c, AdminClient(c.ns_addr) as admin:
            saved, c.slave.broker.ha_client = c.slave.broker.ha_client, None
            try:
                sinfo = await admin.ha_status(c.slave.config.broker_addr)
            finally:
                c.slave.broker.ha_client = saved
            assert not sinfo.master and sinfo.connections == []
            assert sinfo.client.master_addr == "" and not sinfo.client.connected

            ha, c.master.broker.ha = c.master.broker.ha, None
            try:
                minfo = await admin.ha_status(c.master.config.broker_addr)
            finally:
                c.master.broker.ha = ha
            assert minfo.master and minfo.connections == [] and minfo.in_sync_slave_nums == 0

    asyncio.run(run())


# -- the CLI (CliRunner runs its own event loop: the cluster lives on a thread) ---------------
class Background:
    """``ha_cluster`` on a thread's event loop; ``call`` runs a coroutine there."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="ha-status-cluster", daemon=True)
        self.cluster: HaCluster | None = None
        self._stop: asyncio.Event | None = None
        self._done: Any = None

    def start(self) -> HaCluster:
        self.thread.start()
        started = threading.Event()
        self._done = asyncio.run_coroutine_threadsafe(self._main(started), self.loop)
        deadline = time.monotonic() + TIMEOUT * 2
        while not started.wait(0.05):
            if self._done.done():
                self._done.result()  # start-up failed: raise it here
            if time.monotonic() > deadline:
                raise AssertionError("the background cluster did not start in time")
        assert self.cluster is not None
        return self.cluster

    async def _main(self, started: threading.Event) -> None:
        self._stop = asyncio.Event()
        async with ha_cluster(self.root) as cluster:
            self.cluster = cluster
            started.set()
            await self._stop.wait()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = TIMEOUT * 2) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        try:
            if self._stop is not None:
                self.loop.call_soon_threadsafe(self._stop.set)
            if self._done is not None:
                self._done.result(TIMEOUT * 3)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            if not self.thread.is_alive():
                self.loop.close()


def admin_cli(*args: str) -> Result:
    return CliRunner().invoke(cli, ["admin", *args], catch_exceptions=False)


def _row(output: str, first: str) -> list[str]:
    rows = [line.split() for line in output.splitlines() if line.strip().startswith(first)]
    assert len(rows) == 1, output
    return rows[0]


def test_ha_status_cli(tmp_path: Path) -> None:
    bg = Background(tmp_path)
    try:
        c = bg.start()
        bg.call(send(c.master, 20))
        bg.call(caught_up(c))
        m_max = c.master.broker.store.max_phy_offset
        m_addr, ns = c.master.config.broker_addr, c.ns_addr

        result = admin_cli("haStatus", "-b", m_addr, "-n", ns)
        assert result.exit_code == 0, result.output
        out = result.stdout
        assert f"\n#MasterAddr\t{m_addr}\n#MasterCommitLogMaxOffset\t{m_max}\n#SlaveNum\t1\n#InSyncSlaveNum\t1\n" in out
        header = _row(out, "#SlaveAddr")
        assert header[:4] == ["#SlaveAddr", "#SlaveAckOffset", "#Diff", "#LagTime(ms)"]
        row = _row(out, f"{HOST}:")
        assert row[1:4] == [str(m_max), "0", "0"] and "OK" in row

        by_cluster = admin_cli("haStatus", "-c", CLUSTER, "-n", ns)
        assert by_cluster.exit_code == 0, by_cluster.output
        assert m_addr in by_cluster.stdout and _row(by_cluster.stdout, f"{HOST}:")[1] == str(m_max)

        slave = admin_cli("haStatus", "-b", c.slave.config.broker_addr, "-n", ns)
        assert slave.exit_code == 0, slave.output
        lines = {ln.split("\t")[0]: ln.split("\t")[-1] for ln in slave.stdout.splitlines() if ln.startswith("#")}
        assert lines["#MasterAddr"] == c.master.config.ha_server_addr
        assert lines["#Connected"] == "true" and lines["#CommitLogMaxOffset"] == str(m_max)

        assert c.slave.ha_client is not None
        bg.call(c.slave.ha_client.stop())

        async def disconnected() -> bool:
            ha = c.master.broker.ha
            return ha is not None and ha.connection_count == 0

        bg.call(poll("the master to see the slave disconnect", disconnected))
        bg.call(send(c.master, 3))
        lagging = admin_cli("haStatus", "-b", m_addr, "-n", ns)
        assert lagging.exit_code == 0, lagging.output
        row = _row(lagging.stdout, f"{HOST}:")
        assert int(row[2]) == c.master.broker.store.max_phy_offset - m_max > 0 and "Disconnected" in row

        usage = admin_cli("haStatus", "-n", ns)
        assert usage.exit_code == 2 and "exactly one of -b brokerAddr or -c clusterName" in usage.output
    finally:
        bg.stop()


@pytest.mark.parametrize("value", ["true", True])
def test_decode_accepts_java_booleans(value: object) -> None:
    from ledgermq.admin.model import decode_ha_runtime_info

    info = decode_ha_runtime_info(
        {
            "master": value,
            "masterCommitLogMaxOffset": 10,
            "inSyncSlaveNums": 1,
            "haConnectionInfo": [
                {"addr": "10.0.0.2:1234", "slaveAckOffset": 4, "diff": 6, "inSync": value,
                 "transferredByteInSecond": 2048, "transferFromWhere": 4}
            ],
            "haClientRuntimeInfo": {"masterAddr": None, "maxOffset": 0},
        }
    )  # fmt: skip
    assert info.master and info.in_sync_slave_nums == 1
    (conn,) = info.connections
    assert conn.in_sync and conn.connected and conn.diff == 6 and conn.lag_time_ms == -1
