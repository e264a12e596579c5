"""The consumer's calls to brokers: pulls and the offset, lock and group queries around them
(RocketMQ ``PullAPIWrapper`` plus the consumer half of ``MQClientAPIImpl``).

Which broker of a group answers is decided here, as RocketMQ decides it:

* **Pulls** go to the broker id the last pull response suggested for that queue
  (``suggestWhichBrokerId``; the master until told otherwise), through
  ``RouteCache.find_in_subscribe``: the wanted id, else the next slave id, else the
  group's lowest live id. So while a master is gone from the route, pulls go to a slave.
  A pull to a slave never carries the commit-offset flag.
* **Consumer offsets** are read from and committed to the master, or to a slave while the
  master is absent from the route (``fetchConsumeOffsetFromBroker`` /
  ``updateConsumeOffsetToBroker``).
* **Queue offsets** (min, max, by timestamp) go to the master, else a slave: a slave holds
  the same queues at the same offsets, and a reader should not stall while a master is down
  (Java's client insists on the master here; we choose availability, the answers are equal).
* **Queue locks** go to the master only: the lock table lives there.

Errors follow the client's hierarchy: no reachable broker or a timeout raises
``MQConnectError``; a response code that is not an answer raises ``MQBrokerError``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ledgermq.client.errors import MQBrokerError, MQClientError, MQConnectError
from ledgermq.client.instance.routes import BrokerChoice, RouteCache
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.errors import ProtocolError
from ledgermq.net.client import ConnectError, RemotingClient
from ledgermq.net.connection import ConnectionClosedError, RequestTimeoutError
from ledgermq.protocol import fastjson
from ledgermq.protocol import properties as P
from ledgermq.protocol.admin_body import MessageQueue, mq_list
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import MessageRecord, decode_records
from ledgermq.protocol.route import MASTER_ID

log = logging.getLogger(__name__)

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
FLAG_CLASS_FILTER = 0x8
FLAG_LITE_PULL_MESSAGE = 0x10

PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_STATUS_BY_CODE: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(slots=True)
class PullResult:
    """One pull's answer. ``raw`` is the response body (stored records back to back) for
    readers that decode it themselves; ``messages`` is empty when ``decode=False``."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageRecord] = field(default_factory=list)
    raw: bytes = b""
    suggest_which_broker_id: int = MASTER_ID
    from_slave: bool = False
    broker_addr: str = ""


def parse_tags(expression: str | None) -> set[str]:
    """``FilterAPI.buildSubscriptionData``: ``"*"`` or blank subscribes to all (empty set);
    otherwise ``"a || b"`` is the set of trimmed tags."""
    if expression is None or not expression.strip() or expression.strip() == "*":
        return set()
    return {t.strip() for t in expression.split("||") if t.strip()}


def filter_by_tags(messages: list[MessageRecord], tags: set[str]) -> list[MessageRecord]:
    """The client-side re-check of ``processPullResult``: the broker filters by tag hash
    only, so a hash collision may bring a message of another tag."""
    if not tags:
        return messages
    return [m for m in messages if m.properties.get(P.TAGS) in tags]


class PullAPI:
    """Pulls and consumer-side queries for one client instance."""

    def __init__(
        self, remoting: RemotingClient, routes: RouteCache, *, timeout: float = 3.0, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.remoting = remoting
        self.routes = routes
        self.timeout = timeout
        self.clock = clock
        # pullFromWhichNodeTable: the broker id the last answer suggested, per queue
        self.pull_from: dict[MessageQueue, int] = {}
        self.connect_broker_by_user = False
        self.default_broker_id = MASTER_ID
        self.route_refresh_after_failure = 1.0  # seconds between refreshes of one topic after failed pulls
        self._refreshed_at: dict[str, float] = {}
        self._refreshing: set[asyncio.Task[None]] = set()

    # -- broker choice -------------------------------------------------------------------
    async def _choose(self, broker_name: str, broker_id: int, only_this: bool, topic: str) -> BrokerChoice:
        choice = self.routes.find_in_subscribe(broker_name, broker_id, only_this)
        if choice is None:
            try:
                await self.routes.update(topic)
            except MQClientError as exc:
                log.info("route of %s could not be refreshed: %s", topic, exc)
            choice = self.routes.find_in_subscribe(broker_name, broker_id, False)
        if choice is None:
            raise MQClientError(f"the broker[{broker_name}] does not exist (no address in the route)")
        return choice

    async def _master_or_slave(self, mq: MessageQueue) -> BrokerChoice:
        return await self._choose(mq.broker_name, MASTER_ID, True, mq.topic)

    async def _master(self, mq: MessageQueue) -> str:
        addr = self.routes.master_addr(mq.broker_name)
        if addr is None:
            try:
                await self.routes.update(mq.topic)
            except MQClientError as exc:
                log.info("route of %s could not be refreshed: %s", mq.topic, exc)
            addr = self.routes.master_addr(mq.broker_name)
        if addr is None:
            raise MQClientError(f"the master of broker[{mq.broker_name}] is not in the route")
        return addr

    def _refresh_soon(self, topic: str) -> None:
        loop = asyncio.get_running_loop()
        now = self.clock.monotonic()
        if now - self._refreshed_at.get(topic, -1e9) < self.route_refresh_after_failure:
            return
        self._refreshed_at[topic] = now

        async def refresh() -> None:
            try:
                await self.routes.update(topic)
            except MQClientError as exc:
                log.info("route of %s could not be refreshed after a failed pull: %s", topic, exc)

        task = loop.create_task(refresh())
        self._refreshing.add(task)
        task.add_done_callback(self._refreshing.discard)

    async def close(self) -> None:
        """Cancel route refreshes still running (the instance is shutting down)."""
        tasks = list(self._refreshing)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def pull_node(self, mq: MessageQueue) -> int:
        """``recalculatePullFromWhichNode``."""
        if self.connect_broker_by_user:
            return self.default_broker_id
        return self.pull_from.get(mq, MASTER_ID)

    # -- the wire ------------------------------------------------------------------------
    async def invoke(
        self, addr: str, code: int, ext: dict[str, Any] | None, body: bytes = b"", timeout: float | None = None
    ) -> RemotingCommand:
        timeout = self.timeout if timeout is None else timeout
        try:
            return await self.remoting.invoke(addr, RemotingCommand.request(code, ext, body), timeout)
        except ConnectError as exc:
            raise MQConnectError(str(exc), addr) from None
        except ConnectionClosedError as exc:
            raise MQConnectError(f"{addr} closed the connection: {exc}", addr) from None
        except RequestTimeoutError as exc:
            raise MQConnectError(str(exc), addr, timeout=True) from None

    async def oneway(self, addr: str, code: int, ext: dict[str, Any] | None, body: bytes = b"") -> None:
        try:
            await self.remoting.invoke_oneway(addr, RemotingCommand.request(code, ext, body))
        except ConnectError as exc:
            raise MQConnectError(str(exc), addr) from None
        except ConnectionClosedError as exc:
            raise MQConnectError(f"{addr} closed the connection: {exc}", addr) from None

    @staticmethod
    def _int(resp: RemotingCommand, name: str, addr: str) -> int:
        try:
            return int(resp.ext_fields[name])
        except (KeyError, ValueError, TypeError):
            raise MQClientError(f"the answer from {addr} lacks a numeric {name}") from None

    # -- pull ----------------------------------------------------------------------------
    async def pull(
        self,
        mq: MessageQueue,
        group: str,
        offset: int,
        max_nums: int = 32,
        *,
        expression: str = "*",
        expression_type: str = "TAG",
        sub_version: int = 0,
        commit_offset: int = 0,
        suspend_ms: int = 0,
        timeout: float | None = None,
        decode: bool = True,
        lite: bool = False,
    ) -> PullResult:
        """``pullKernelImpl`` + ``processPullResult``. ``commit_offset`` > 0 asks the master to
        record it in passing; ``suspend_ms`` > 0 lets the broker hold the pull (long polling)."""
        choice = await self._choose(mq.broker_name, self.pull_node(mq), False, mq.topic)
        sys_flag = FLAG_SUBSCRIPTION
        if commit_offset > 0 and not choice.slave:
            sys_flag |= FLAG_COMMIT_OFFSET
        if suspend_ms > 0:
            sys_flag |= FLAG_SUSPEND
        if lite:
            sys_flag |= FLAG_LITE_PULL_MESSAGE
        ext = {
            "consumerGroup": group,
            "topic": mq.topic,
            "queueId": mq.queue_id,
            "queueOffset": offset,
            "maxMsgNums": max_nums,
            "sysFlag": sys_flag,
            "commitOffset": commit_offset,
            "suspendTimeoutMillis": suspend_ms,
            "subscription": expression or "*",
            "subVersion": sub_version,
            "expressionType": expression_type,
        }
        if timeout is None:
            timeout = suspend_ms / 1000 + self.timeout
        try:
            resp = await self.invoke(choice.addr, RequestCode.PULL_MESSAGE, ext, timeout=timeout)
        except MQConnectError:
            # A dead master stays in the cached route until the 30 s refresh; asking the name
            # server now moves the next pull to a slave within about a second.
            self._refresh_soon(mq.topic)
            raise
        status = _STATUS_BY_CODE.get(resp.code)
        if status is None:
            raise MQBrokerError(resp.code, resp.remark, choice.addr)
        suggest = self._int(resp, "suggestWhichBrokerId", choice.addr)
        self.pull_from[mq] = suggest
        result = PullResult(
            status,
            self._int(resp, "nextBeginOffset", choice.addr),
            self._int(resp, "minOffset", choice.addr),
            self._int(resp, "maxOffset", choice.addr),
            raw=resp.body if status is PullStatus.FOUND else b"",
            suggest_which_broker_id=suggest,
            from_slave=choice.slave,
            broker_addr=choice.addr,
        )
        if decode and status is PullStatus.FOUND:
            try:
                records = decode_records(resp.body, inflate=True)
            except ProtocolError as exc:
                raise MQClientError(f"a pull answer from {choice.addr} does not decode: {exc}") from None
            min_text, max_text = str(result.min_offset), str(result.max_offset)
            for rec in records:
                rec.broker_name = mq.broker_name
                rec.properties[PROPERTY_MIN_OFFSET] = min_text
                rec.properties[PROPERTY_MAX_OFFSET] = max_text
            result.messages = filter_by_tags(records, parse_tags(expression) if expression_type == "TAG" else set())
        return result

    # -- queue offsets -------------------------------------------------------------------
    async def _queue_offset(self, code: int, mq: MessageQueue, extra: dict[str, Any] | None = None) -> int:
        choice = await self._master_or_slave(mq)
        resp = await self.invoke(choice.addr, code, {"topic": mq.topic, "queueId": mq.queue_id, **(extra or {})})
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, choice.addr)
        return self._int(resp, "offset", choice.addr)

    async def max_offset(self, mq: MessageQueue) -> int:
        """The offset the next message of the queue will get."""
        return await self._queue_offset(RequestCode.GET_MAX_OFFSET, mq)

    async def min_offset(self, mq: MessageQueue) -> int:
        """The smallest offset still stored (retention moves it forward)."""
        return await self._queue_offset(RequestCode.GET_MIN_OFFSET, mq)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The offset of the first message stored at or after ``timestamp_ms`` (as the broker
        rounds it)."""
        return await self._queue_offset(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, {"timestamp": timestamp_ms})

    # -- consumer offsets ----------------------------------------------------------------
    async def query_consumer_offset(self, mq: MessageQueue, group: str) -> int | None:
        """The group's committed offset of the queue; None when the broker has none."""
        choice = await self._master_or_slave(mq)
        ext = {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id}
        resp = await self.invoke(choice.addr, RequestCode.QUERY_CONSUMER_OFFSET, ext)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, choice.addr)
        return self._int(resp, "offset", choice.addr)

    async def update_consumer_offset(self, mq: MessageQueue, group: str, offset: int, *, oneway: bool = False) -> None:
        """Commit the group's offset of the queue to the master (a slave while it is down)."""
        choice = await self._master_or_slave(mq)
        ext = {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id, "commitOffset": offset}
        if oneway:
            await self.oneway(choice.addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext)
            return
        resp = await self.invoke(choice.addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext)
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, choice.addr)

    # -- group membership and locks ------------------------------------------------------
    async def consumer_ids(self, topic: str, group: str) -> list[str]:
        """``findConsumerIdList``: the group's client ids as one broker of the topic knows
        them (any broker will do: every client heartbeats to all of them)."""
        route = self.routes.routes.get(topic)
        names = sorted({bd.broker_name for bd in route.broker_datas}) if route else []
        random.shuffle(names)
        last: MQClientError | None = None
        for name in names:
            choice = self.routes.find_in_subscribe(name, MASTER_ID)
            if choice is None:
                continue
            try:
                resp = await self.invoke(choice.addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
            except MQConnectError as exc:
                last = exc
                continue
            if resp.code != ResponseCode.SUCCESS:
                last = MQBrokerError(resp.code, resp.remark, choice.addr)
                continue
            doc = fastjson.loads(resp.body) if resp.body else {}
            ids = doc.get("consumerIdList") if isinstance(doc, dict) else None
            return sorted(str(i) for i in ids) if isinstance(ids, list) else []
        if last is not None:
            raise last
        return []

    async def lock_batch(
        self, broker_name: str, topic: str, group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> set[MessageQueue]:
        """LOCK_BATCH_MQ on the group's master: the queues this client now holds."""
        addr = await self._master(MessageQueue(topic, broker_name, 0))
        body = fastjson.dumps({"consumerGroup": group, "clientId": client_id, "mqSet": mq_list(set(mqs))})
        resp = await self.invoke(addr, RequestCode.LOCK_BATCH_MQ, None, body)
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, addr)
        doc = fastjson.loads(resp.body) if resp.body else {}
        items = doc.get("lockOKMQSet") if isinstance(doc, dict) else None
        return {MessageQueue.from_json(i) for i in items} if isinstance(items, list) else set()

    async def unlock_batch(
        self, broker_name: str, topic: str, group: str, client_id: str, mqs: Iterable[MessageQueue], *, oneway: bool
    ) -> None:
        addr = await self._master(MessageQueue(topic, broker_name, 0))
        body = fastjson.dumps({"consumerGroup": group, "clientId": client_id, "mqSet": mq_list(set(mqs))})
        if oneway:
            await self.oneway(addr, RequestCode.UNLOCK_BATCH_MQ, None, body)
            return
        resp = await self.invoke(addr, RequestCode.UNLOCK_BATCH_MQ, None, body)
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, addr)

    async def send_back(
        self,
        msg: MessageRecord,
        group: str,
        delay_level: int,
        max_reconsume_times: int,
        *,
        timeout: float | None = None,
    ) -> None:
        """CONSUMER_SEND_MSG_BACK to the master of the group the message came from: the broker
        re-stores it in the retry topic (or the DLQ after ``max_reconsume_times``)."""
        addr = await self._master(MessageQueue(msg.topic, msg.broker_name, 0))
        ext = {
            "offset": msg.physical_offset,
            "group": group,
            "delayLevel": delay_level,
            "originMsgId": msg.msg_id,
            "originTopic": msg.topic,
            "unitMode": False,
            "maxReconsumeTimes": max_reconsume_times,
        }
        resp = await self.invoke(addr, RequestCode.CONSUMER_SEND_MSG_BACK, ext, timeout=timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, addr)
