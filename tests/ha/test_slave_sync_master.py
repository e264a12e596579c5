"""A slave (or DLedger follower) finds the master it copies metadata from through the name
servers every round, not only from its last registration answer.

A slave registers every 10 s at best, and its first registration often comes before the
master's: the answer names no master, and the slave used to skip every metadata sync
until its next registration. A DLedger chaos run (power loss, seed 2) showed what that
costs: a topic created on the leader was on no follower 14 s later, and after the power
loss the new leader did not know it. After an election the answer also names the
previous leader, and the slave copied from that one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from ledgermq.broker import slave_sync
from ledgermq.broker.app import BrokerApp
from ledgermq.broker.config import BrokerConfig
from ledgermq.config import BrokerRole, StoreConfig
from ledgermq.namesrv.app import NamesrvApp, NamesrvConfig
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.route import TopicConfig
from ledgermq.testing.ports import free_port


def _broker(root: Path, namesrv: str, broker_id: int, role: BrokerRole) -> BrokerApp:
    cfg = BrokerConfig(
        broker_name="broker-a",
        broker_id=broker_id,
        broker_ip1="127.0.0.1",
        listen_host="127.0.0.1",
        listen_port=free_port(span=2),
        namesrv_addr=namesrv,
        register_name_server_period_ms=60_000,  # no registration answer in the test's time
        slave_sync_interval_ms=60_000,  # rounds are run by hand
    )
    return BrokerApp(cfg, StoreConfig(root_dir=str(root), broker_role=role, mapped_file_size_commitlog=256 * 1024))


@asynccontextmanager
async def master_and_slave(tmp_path: Path) -> AsyncIterator[tuple[BrokerApp, BrokerApp]]:
    ns = NamesrvApp(NamesrvConfig(listen_host="127.0.0.1", listen_port=0, kv_config_path=""))
    await ns.start()
    namesrv = f"127.0.0.1:{ns.port}"
    master = _broker(tmp_path / "m", namesrv, 0, BrokerRole.ASYNC_MASTER)
    slave = _broker(tmp_path / "s", namesrv, 1, BrokerRole.SLAVE)
    try:
        await master.start()
        await slave.start()
        assert slave.slave_sync is not None
        await slave.slave_sync.stop()  # only the rounds the test runs
        yield master, slave
    finally:
        await slave.stop()
        await master.stop()
        await ns.stop()


def _create(master: BrokerApp, name: str) -> None:
    master.broker.topics.update(TopicConfig(name, 8, 8, 6))


@pytest.mark.parametrize(
    "answered",
    [None, "127.0.0.1:1"],  # no master named yet; a previous master that is gone
    ids=["no-master-in-the-registration-answer", "stale-master-in-the-registration-answer"],
)
def test_a_slave_copies_topics_from_the_master_the_name_server_lists(tmp_path: Path, answered: str | None) -> None:
    async def run() -> None:
        async with master_and_slave(tmp_path) as (master, slave):
            sync = slave.slave_sync
            assert sync is not None
            _create(master, "CreatedOnTheMaster")
            slave.master_addr = answered  # what the last registration answer said
            assert await sync.sync_all(), sync.last_error
            assert sync.last_master == f"127.0.0.1:{master.port}"
            copied = slave.broker.topics.get("CreatedOnTheMaster")
            assert copied is not None and copied.write_queue_nums == 8
            assert slave.broker.topics.data_version == master.broker.topics.data_version
            # and it is on disk: a restart of the slave (or its promotion) finds it
            assert "CreatedOnTheMaster" in (tmp_path / "s" / "config" / "topics.json").read_text()

    asyncio.run(asyncio.wait_for(run(), 60))


def test_a_broker_listed_as_its_own_master_copies_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A DLedger leader that just stepped down may still be the name servers' brokerId 0:
    it must not copy its own table (nor an older one) as if from a master."""

    async def run() -> None:
        async with master_and_slave(tmp_path) as (_master, slave):
            sync = slave.slave_sync
            assert sync is not None
            me = slave.broker.config.broker_addr

            async def listed_as_master(_c: RemotingClient, _ns: object, _name: str) -> dict[int, str]:
                return {0: me}

            monkeypatch.setattr(slave_sync, "group_addrs", listed_as_master)
            slave.master_addr = me
            assert await sync.find_master() is None
            assert not await sync.sync_all()
            assert "no master" in sync.last_error

    asyncio.run(asyncio.wait_for(run(), 60))


def test_without_name_servers_the_registration_answer_is_used(tmp_path: Path) -> None:
    async def run() -> None:
        async with master_and_slave(tmp_path) as (master, slave):
            sync = slave.slave_sync
            assert sync is not None
            sync.namesrvs = []
            slave.master_addr = f"127.0.0.1:{master.port}"
            _create(master, "ViaTheAnswer")
            assert await sync.sync_all(), sync.last_error
            assert slave.broker.topics.get("ViaTheAnswer") is not None

    asyncio.run(asyncio.wait_for(run(), 60))
