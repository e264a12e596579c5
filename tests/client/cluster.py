"""A name server and one or more broker groups (masters only) in this event loop, on
127.0.0.1 free ports, for producer tests. Every wait is bounded; ``running`` stops
everything it started, brokers first."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledgermq.broker.app import BrokerApp
from ledgermq.broker.config import BrokerConfig
from ledgermq.config import StoreConfig
from ledgermq.namesrv.app import NamesrvApp, NamesrvConfig
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import MessageRecord, decode_records
from tests.admin.servers import SMALL_STORE, free_port, poll

HOST = "127.0.0.1"
CLUSTER = "TestCluster"
START_TIMEOUT = 15.0
STOP_TIMEOUT = 15.0


@dataclass
class Cluster:
    root: Path
    namesrv: NamesrvApp
    brokers: dict[str, BrokerApp] = field(default_factory=dict)
    stopped: set[str] = field(default_factory=set)

    @property
    def ns_addr(self) -> str:
        return f"{HOST}:{self.namesrv.port}"

    def addr(self, name: str) -> str:
        return f"{HOST}:{self.brokers[name].port}"

    async def stop_broker(self, name: str) -> None:
        if name not in self.stopped:
            self.stopped.add(name)
            await asyncio.wait_for(self.brokers[name].stop(), STOP_TIMEOUT)

    async def pull(
        self, broker: str, topic: str, queue_id: int, offset: int = 0, *, inflate: bool = True
    ) -> list[MessageRecord]:
        """The records of a queue from ``offset`` (no long polling); [] when none."""
        header = {
            "consumerGroup": "test-cg",
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": 32,
            "sysFlag": 4,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subscription": "*",
            "subVersion": 0,
        }
        client = RemotingClient()
        try:
            resp = await client.invoke(self.addr(broker), RemotingCommand.request(RequestCode.PULL_MESSAGE, header), 5)
        finally:
            await client.close()
        if resp.code != ResponseCode.SUCCESS:
            return []
        return decode_records(resp.body, inflate=inflate)

    async def pull_until(self, broker: str, topic: str, queue_id: int, count: int, **kw: Any) -> list[MessageRecord]:
        async def enough() -> list[MessageRecord] | None:
            records = await self.pull(broker, topic, queue_id, **kw)
            return records if len(records) >= count else None

        return await poll(f"{count} messages in {topic}/{broker}/{queue_id}", enough, timeout=5.0)


async def _start_broker(
    root: Path, ns_port: int, name: str, store: dict[str, Any], broker: dict[str, Any] | None = None
) -> BrokerApp:
    for attempt in range(3):
        cfg = BrokerConfig(
            cluster_name=CLUSTER,
            broker_name=name,
            broker_ip1=HOST,
            listen_host=HOST,
            listen_port=free_port(span=2),
            namesrv_addr=f"{HOST}:{ns_port}",
            flush_consumer_offset_interval_ms=60_000,
            **(broker or {}),
        )
        app = BrokerApp(cfg, StoreConfig(root_dir=str(root / name), **{**SMALL_STORE, **store}))
        try:
            await asyncio.wait_for(app.start(), START_TIMEOUT)
            return app
        except OSError:
            await asyncio.wait_for(app.stop(), STOP_TIMEOUT)
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


@asynccontextmanager
async def running(
    root: Path, names: tuple[str, ...] = ("broker-a",), *, broker: dict[str, Any] | None = None, **store: Any
) -> AsyncIterator[Cluster]:
    """``broker``: BrokerConfig fields for every broker (e.g. ``{"enable_property_filter": True}``)."""
    ns = NamesrvApp(NamesrvConfig(listen_host=HOST, listen_port=0, kv_config_path=str(root / "kvConfig.json")))
    await asyncio.wait_for(ns.start(), START_TIMEOUT)
    cluster = Cluster(root, ns)
    try:
        for name in names:
            cluster.brokers[name] = await _start_broker(root, ns.port, name, store, broker)

        async def registered() -> bool:
            r = ns.routes.route("TBW102")
            return r is not None and {q.broker_name for q in r.queue_datas} == set(names)

        await poll("the brokers' registration", registered)
        yield cluster
    finally:
        try:
            for name in cluster.brokers:
                try:
                    await cluster.stop_broker(name)
                except Exception:  # stop the others anyway
                    pass
        finally:
            await asyncio.wait_for(ns.stop(), STOP_TIMEOUT)
