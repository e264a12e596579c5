"""An in-process broker on 127.0.0.1 for processor tests, driven by a RemotingClient.

``BrokerConfig`` wants a real port (1..65535), so a free one is found by binding port 0
first; if another process grabs it before the broker binds, the start is retried on a
new port. No name server: the broker registers nowhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from ledgermq.broker.app import BrokerApp
from ledgermq.broker.config import BrokerConfig
from ledgermq.config import StoreConfig
from ledgermq.net.client import RemotingClient
from ledgermq.protocol import fastjson
from ledgermq.protocol import properties as P
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import MessageRecord, decode_records
from ledgermq.testing.ports import free_port

CALL_TIMEOUT = 5.0

SMALL_STORE = dict(
    mapped_file_size_commitlog=256 * 1024,
    mapped_file_size_consume_queue=20 * 256,
    max_hash_slot_num=64,
    max_index_num=256,
    flush_interval_commitlog_ms=50,
    flush_interval_consume_queue_ms=50,
)


def broker_config(port: int, **overrides: Any) -> BrokerConfig:
    base: dict[str, Any] = dict(
        cluster_name="TestCluster",
        broker_name="broker-a",
        broker_ip1="127.0.0.1",
        listen_host="127.0.0.1",
        listen_port=port,
        namesrv_addr="",
        flush_consumer_offset_interval_ms=60_000,
    )
    base.update(overrides)
    return BrokerConfig(**base)


def store_config(root: Path, **overrides: Any) -> StoreConfig:
    return StoreConfig(root_dir=str(root), **{**SMALL_STORE, **overrides})


class Harness:
    """A running broker plus a client connected to it."""

    def __init__(self, app: BrokerApp, client: RemotingClient) -> None:
        self.app = app
        self.client = client

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.app.port}"

    async def call(
        self, code: int, ext: dict[str, Any] | None = None, body: bytes = b"", timeout: float = CALL_TIMEOUT
    ) -> RemotingCommand:
        return await self.client.invoke(self.addr, RemotingCommand.request(code, ext, body), timeout)

    async def send(
        self,
        topic: str,
        body: bytes = b"hello",
        queue_id: int = 0,
        props: dict[str, str] | None = None,
        reconsume_times: int = 0,
    ) -> RemotingCommand:
        properties = P.encode_properties({"TAGS": "TagA", "UNIQ_KEY": "0" * 32, **(props or {})})
        header = {
            "a": "pg",
            "b": topic,
            "c": "TBW102",
            "d": 4,
            "e": queue_id,
            "f": 0,
            "g": 1_700_000_000_000,
            "h": 0,
            "i": properties,
            "j": reconsume_times,
            "k": False,
            "m": False,
        }
        resp = await self.call(RequestCode.SEND_MESSAGE_V2, header, body)
        assert resp.code == ResponseCode.SUCCESS, resp
        return resp

    async def pull(self, group: str, topic: str, queue_id: int = 0, offset: int = 0) -> list[MessageRecord]:
        """Messages of a queue (no long polling); [] when there are none."""
        header = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": 32,
            "sysFlag": 4,  # SUBSCRIPTION only: answer at once
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subscription": "*",
            "subVersion": 0,
        }
        resp = await self.call(RequestCode.PULL_MESSAGE, header)
        if resp.code != ResponseCode.SUCCESS:
            return []
        return decode_records(resp.body)

    async def dispatched(self) -> None:
        assert await asyncio.to_thread(self.app.broker.store.wait_dispatched, None, 5.0)

    async def heartbeat(self, client_id: str, group: str, topics: list[str]) -> RemotingCommand:
        body = {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "consumeType": "CONSUME_PASSIVELY",
                    "groupName": group,
                    "messageModel": "CLUSTERING",
                    "subscriptionDataSet": [
                        {
                            "classFilterMode": False,
                            "codeSet": [],
                            "expressionType": "TAG",
                            "subString": "*",
                            "subVersion": 1,
                            "tagsSet": [],
                            "topic": t,
                        }
                        for t in topics
                    ],
                    "unitMode": False,
                }
            ],
            "producerDataSet": [],
        }
        return await self.call(RequestCode.HEART_BEAT, {}, fastjson.dumps(body))


@asynccontextmanager
async def running_broker(
    root: Path,
    *,
    port: int | None = None,
    store: dict[str, Any] | None = None,
    before_start: Callable[[BrokerApp], None] | None = None,
    **broker_overrides: Any,
) -> AsyncIterator[Harness]:
    """Start a broker (store under ``root``), yield a Harness, always stop both."""
    app: BrokerApp | None = None
    for attempt in range(3):
        cfg = broker_config(port or free_port(span=2), **broker_overrides)
        app = BrokerApp(cfg, store_config(root, **(store or {})))
        if before_start is not None:
            before_start(app)
        try:
            await asyncio.wait_for(app.start(), 15)
            break
        except OSError:
            await asyncio.wait_for(app.stop(), 15)
            if port is not None or attempt == 2:
                raise
    assert app is not None
    client = RemotingClient()
    try:
        yield Harness(app, client)
    finally:
        try:
            await asyncio.wait_for(client.close(), 5)
        finally:
            await asyncio.wait_for(app.stop(), 15)
