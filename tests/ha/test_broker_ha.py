"""Brokers wired for HA: a slave finds its master through the name server and replicates;
SYNC_MASTER sends wait for a slave's acknowledgement or say why they could not."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from ledgermq.broker.app import BrokerApp
from ledgermq.broker.config import BrokerConfig
from ledgermq.config import BrokerRole, StoreConfig
from ledgermq.ha.config import HAConfig
from ledgermq.namesrv.app import NamesrvApp, NamesrvConfig
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.testing.ports import free_port


def _broker(root: Path, namesrv: str, broker_id: int, role: BrokerRole, **store: object) -> BrokerApp:
    cfg = BrokerConfig(
        broker_name="broker-a",
        broker_id=broker_id,
        broker_ip1="127.0.0.1",
        listen_host="127.0.0.1",
        listen_port=free_port(),
        ha_listen_port=free_port(),
        namesrv_addr=namesrv,
        register_name_server_period_ms=10_000,
    )
    store_cfg = StoreConfig(root_dir=str(root), broker_role=role, mapped_file_size_commitlog=256 * 1024, **store)  # type: ignore[arg-type]
    return BrokerApp(cfg, store_cfg, ha_config=HAConfig(send_heartbeat_interval_ms=500))


@asynccontextmanager
async def ha_group(
    tmp_path: Path, master_role: BrokerRole, *, start_slave: bool = True, **store: object
) -> AsyncIterator[tuple[NamesrvApp, BrokerApp, BrokerApp, RemotingClient]]:
    """A name server, a master and its slave (started unless told), and a client; all stopped after."""
    ns = NamesrvApp(NamesrvConfig(listen_host="127.0.0.1", listen_port=0, kv_config_path=""))
    await ns.start()
    namesrv = f"127.0.0.1:{ns.port}"
    master = _broker(tmp_path / "m", namesrv, 0, master_role, **store)
    slave = _broker(tmp_path / "s", namesrv, 1, BrokerRole.SLAVE)
    client = RemotingClient()
    try:
        await master.start()
        if start_slave:
            await slave.start()
        yield ns, master, slave, client
    finally:
        await client.close()
        await slave.stop()
        await master.stop()
        await ns.stop()


async def _send(client: RemotingClient, broker: BrokerApp, i: int) -> RemotingCommand:
    cmd = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        {"a": "pg", "b": "HaTopic", "c": "TBW102", "d": 4, "e": i % 4, "f": 0, "g": int(time.time() * 1000), "h": 0,
         "i": "WAIT\x01true"},
        f"message {i}".encode(),
    )  # fmt: skip
    return await client.invoke(broker.config.broker_addr, cmd, 10.0)


async def _until(cond: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def test_slave_learns_its_master_and_replicates_byte_for_byte(tmp_path: Path) -> None:
    async def run() -> None:
        async with ha_group(tmp_path, BrokerRole.ASYNC_MASTER) as (_ns, master, slave, client):
            for i in range(300):
                assert (await _send(client, master, i)).code == ResponseCode.SUCCESS
            m_store, s_store = master.broker.store, slave.broker.store
            await _until(lambda: s_store.max_phy_offset == m_store.max_phy_offset, 20, "the slave to catch up")
            assert slave.master_addr == master.config.broker_addr
            for mf in m_store.commitlog.queue.files:
                assert s_store.commitlog.read(mf.start_offset, mf.wrote) == mf.read(0, mf.wrote)
            assert s_store.wait_dispatched(timeout=10)
            assert s_store.max_offset_in_queue("HaTopic", 1) == m_store.max_offset_in_queue("HaTopic", 1) == 75
            assert master.broker.ha is not None and [s.connected for s in master.broker.ha.status()] == [True]

    asyncio.run(run())


def test_sync_master_waits_for_the_slave_or_says_why_not(tmp_path: Path) -> None:
    async def run() -> None:
        async with ha_group(tmp_path, BrokerRole.SYNC_MASTER, sync_flush_timeout_ms=800, start_slave=False) as (
            _ns,
            master,
            slave,
            client,
        ):
            lonely = await _send(client, master, 0)
            assert lonely.code == ResponseCode.SLAVE_NOT_AVAILABLE  # stored, but no slave has it
            assert lonely.ext_fields["msgId"]

            await slave.start()
            ha = master.broker.ha
            assert ha is not None
            await _until(lambda: ha.connection_count == 1, 20, "the slave to connect")
            ok = await _send(client, master, 1)
            assert ok.code == ResponseCode.SUCCESS
            assert ha.max_acked_offset >= master.broker.store.max_phy_offset

            assert slave.ha_client is not None
            await slave.ha_client.stop()  # the slave stops acknowledging but is still "connected" a while
            started = time.monotonic()
            late = await _send(client, master, 2)
            assert late.code in (ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE)
            if late.code == ResponseCode.FLUSH_SLAVE_TIMEOUT:  # at the master's timeout, not before
                assert time.monotonic() - started >= 0.7

    asyncio.run(run())


def test_slave_copies_metadata_serves_pulls_and_keeps_newer_offsets(tmp_path: Path) -> None:
    async def run() -> None:
        async with ha_group(tmp_path, BrokerRole.ASYNC_MASTER) as (_ns, master, slave, client):
            for i in range(8):
                assert (await _send(client, master, i)).code == ResponseCode.SUCCESS
            master.broker.offsets.commit("cg", "HaTopic", 0, 1)
            master.broker.offsets.commit("cg", "HaTopic", 1, 2)
            master.broker.subscriptions.find("cg")
            await _until(lambda: slave.master_addr is not None, 20, "the slave to learn its master")
            slave.broker.offsets.commit("cg", "HaTopic", 1, 5)  # committed to the slave meanwhile

            assert slave.slave_sync is not None
            assert await slave.slave_sync.sync_all(), slave.slave_sync.last_error
            assert slave.broker.topics.get("HaTopic") is not None
            assert slave.broker.topics.data_version == master.broker.topics.data_version
            assert slave.broker.offsets.query("cg", "HaTopic", 0) == 1
            assert slave.broker.offsets.query("cg", "HaTopic", 1) == 5  # the newer offset wins
            assert "cg" in slave.broker.subscriptions.table
            assert (tmp_path / "s" / "config" / "topics.json").exists()

            # Consumers can read from the slave (C++-style pull with its subscription).
            m_store, s_store = master.broker.store, slave.broker.store
            await _until(lambda: s_store.max_phy_offset == m_store.max_phy_offset, 20, "replication")
            assert s_store.wait_dispatched(timeout=10)
            pull = RemotingCommand.request(
                RequestCode.PULL_MESSAGE,
                {"consumerGroup": "cg", "topic": "HaTopic", "queueId": 0, "queueOffset": 0, "maxMsgNums": 32,
                 "sysFlag": 4 | 1, "commitOffset": 2, "suspendTimeoutMillis": 0, "subscription": "*",
                 "subVersion": 0},
            )  # fmt: skip
            resp = await client.invoke(slave.config.broker_addr, pull, 5.0)
            assert resp.code == ResponseCode.SUCCESS and resp.body
            assert resp.ext_fields["suggestWhichBrokerId"] == "0"  # back to the master when it can
            assert slave.broker.offsets.query("cg", "HaTopic", 0) == 1  # a pull from a slave commits nothing

    asyncio.run(run())


def test_master_takes_back_newer_offsets_committed_to_its_slave(tmp_path: Path) -> None:
    """Consumers committed to the slave while the master was away; a consumer restarting
    against the returned master must not be sent back to the older offset."""

    async def run() -> None:
        async with ha_group(tmp_path, BrokerRole.ASYNC_MASTER) as (ns, master, slave, _client):
            master.broker.offsets.commit("cg", "T", 0, 2)
            master.broker.offsets.commit("cg", "T", 1, 7)
            slave.broker.offsets.commit("cg", "T", 0, 9)  # newer, committed while the master was down
            slave.broker.offsets.commit("cg", "T", 1, 3)  # older: must not move the master back
            reconciler = master.offset_reconciler
            assert reconciler is not None
            await _until(lambda: bool(ns.routes.brokers.get("broker-a")) and
                         1 in ns.routes.brokers["broker-a"].broker_addrs, 20, "the slave to register")  # fmt: skip
            assert await reconciler.slave_addrs() == [slave.config.broker_addr]
            assert await reconciler.reconcile()
            assert master.broker.offsets.query("cg", "T", 0) == 9
            assert master.broker.offsets.query("cg", "T", 1) == 7
            assert not await reconciler.reconcile()  # nothing newer the second time

    asyncio.run(run())


def test_slave_serves_replicated_queues_before_its_metadata_sync(tmp_path: Path) -> None:
    """A topic created on the master just before it died: the slave has the messages but not
    yet the topic config. It serves them anyway instead of answering TOPIC_NOT_EXIST."""

    async def run() -> None:
        async with ha_group(tmp_path, BrokerRole.ASYNC_MASTER) as (_ns, master, slave, client):
            assert slave.slave_sync is not None
            await slave.slave_sync.stop()  # no metadata sync in this test
            for i in range(8):
                assert (await _send(client, master, i)).code == ResponseCode.SUCCESS
            m_store, s_store = master.broker.store, slave.broker.store
            await _until(lambda: s_store.max_phy_offset == m_store.max_phy_offset, 20, "replication")
            assert s_store.wait_dispatched(timeout=10)
            assert slave.broker.topics.get("HaTopic") is None
            pull = RemotingCommand.request(
                RequestCode.PULL_MESSAGE,
                {"consumerGroup": "cg", "topic": "HaTopic", "queueId": 3, "queueOffset": 0, "maxMsgNums": 32,
                 "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0},
            )  # fmt: skip
            resp = await client.invoke(slave.config.broker_addr, pull, 5.0)
            assert resp.code == ResponseCode.SUCCESS and resp.body
            pull.ext_fields["topic"] = "NeverSeen"
            resp = await client.invoke(slave.config.broker_addr, pull, 5.0)
            assert resp.code == ResponseCode.TOPIC_NOT_EXIST

    asyncio.run(run())
