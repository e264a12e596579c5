"""Shared pieces of the transaction process tests: broker settings that make checks quick,
client settings that follow a broker's restart quickly, a consumer that counts what it
sees, and raw queries of a broker's queues and check progress."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from ledgermq.client import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer
from ledgermq.client.producer.transaction import LocalTransactionState
from ledgermq.net.client import RemotingClient
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import MessageRecord, decode_records
from tests.client.consumer_cluster import FAST

HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
BROKER_PROPS: dict[str, object] = {
    "transactionCheckInterval": 1000,  # a check must be answered within it, or it is asked again
    "transactionTimeOut": 1000,
    "transactionCheckMax": 3,
    "autoCreateTopicEnable": "true",
}
CLIENT: dict[str, Any] = {"heartbeat_interval": 0.5, "poll_namesrv_interval": 0.5, "send_timeout": 5.0}
COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW


class Counting:
    """A push consumer that counts bodies and refuses to count a message that is not a
    committed transactional one (a half message would show up without the COMMIT bits)."""

    def __init__(self, group: str, ns_addr: str, topic: str) -> None:
        self.seen: Counter[bytes] = Counter()
        self.not_committed: list[MessageRecord] = []
        self.consumer = PushConsumer(
            group, ns_addr, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **FAST
        )
        self.consumer.subscribe(topic, "*")
        self.consumer.register_listener(self._on_messages)

    def _on_messages(self, msgs: list[MessageRecord], _ctx: object) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            if SF.transaction_type(m.sysflag) != SF.TRANSACTION_COMMIT_TYPE:
                self.not_committed.append(m)
            self.seen[bytes(m.body)] += 1
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


async def until(what: str, cond: Callable[[], object], timeout: float = 30.0, explain: Callable[[], str] = str) -> None:
    """Poll ``cond`` (plain or returning an awaitable) until truthy; AssertionError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} {explain()}")
        await asyncio.sleep(0.05)


async def call(addr: str, code: int, ext: dict[str, Any]) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(addr, RemotingCommand.request(code, ext), 5)
    finally:
        await client.close()


async def max_offset(addr: str, topic: str, queue_id: int) -> int:
    resp = await call(addr, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
    return int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else 0


async def topic_total(addr: str, topic: str, queues: int = 8) -> int:
    """Messages in the topic's queues on this broker (what any consumer could ever read)."""
    return sum([await max_offset(addr, topic, q) for q in range(queues)])


async def resolved(addr: str) -> bool:
    """The check service's progress reached the end of the half queue: every half message
    was resolved by an op message or discarded."""
    ext = {"consumerGroup": "CID_RMQ_SYS_TRANS", "topic": HALF, "queueId": 0}
    resp = await call(addr, RequestCode.QUERY_CONSUMER_OFFSET, ext)
    progress = int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else -1
    return progress == await max_offset(addr, HALF, 0) > 0


async def pull_all(addr: str, topic: str, queue_id: int = 0) -> list[MessageRecord]:
    header = {"consumerGroup": "txn-test-reader", "topic": topic, "queueId": queue_id, "queueOffset": 0,
              "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0,
              "subscription": "*", "subVersion": 0}  # fmt: skip
    resp = await call(addr, RequestCode.PULL_MESSAGE, header)
    return decode_records(resp.body) if resp.code == ResponseCode.SUCCESS else []
