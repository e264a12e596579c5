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
import logging
import random
from collections.abc import Iterable
from typing import TypeVar

from ledgermq.client.errors import MQBrokerError, MQClientError, MQConnectError
from ledgermq.client.instance.announcements import Announcements
from ledgermq.client.instance.pull_result import PullResult, PullStatus
from ledgermq.client.instance.routes import BrokerChoice, RouteCache
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.errors import ProtocolError
from ledgermq.filter import is_tag_type
from ledgermq.net.client import ConnectError, RemotingClient
from ledgermq.net.connection import ConnectionClosedError, RequestTimeoutError
from ledgermq.protocol import fastjson
from ledgermq.protocol import properties as P
from ledgermq.protocol.admin_body import MessageQueue, mq_list
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.header_codec import RequestHeader, ResponseHeader
from ledgermq.protocol.headers import MissingField
from ledgermq.protocol.headers_pull import (
    FLAG_CLASS_FILTER,
    FLAG_COMMIT_OFFSET,
    FLAG_LITE_PULL_MESSAGE,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    GetConsumerListByGroupRequestHeader,
    OffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueueRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from ledgermq.protocol.headers_send import ConsumerSendMsgBackRequestHeader
from ledgermq.protocol.message import MessageRecord, decode_records
from ledgermq.protocol.route import MASTER_ID
from ledgermq.protocol.tag_expression import SUB_ALL, TagExpression, TagExpressionError, parse_tag_expression

log = logging.getLogger(__name__)

__all__ = [
    "FLAG_CLASS_FILTER",
    "FLAG_COMMIT_OFFSET",
    "FLAG_LITE_PULL_MESSAGE",
    "FLAG_SUBSCRIPTION",
    "FLAG_SUSPEND",
    "PROPERTY_MAX_OFFSET",
    "PROPERTY_MIN_OFFSET",
    "PullAPI",
    "PullResult",
    "PullStatus",
    "filter_by_tags",
]

R = TypeVar("R", bound=ResponseHeader)

PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"


_STATUS_BY_CODE: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


def filter_by_tags(messages: list[MessageRecord], expression: TagExpression) -> list[MessageRecord]:
    """The client-side re-check of ``processPullResult``: the broker filters by tag hash
    only, so a hash collision may bring a message of another tag."""
    if not expression.tags:
        return messages
    return [m for m in messages if expression.matches_tag(m.properties.get(P.TAGS))]


_REFUSED_FOR_SUBSCRIPTION = frozenset(
    {
        ResponseCode.SUBSCRIPTION_NOT_EXIST,
        ResponseCode.SUBSCRIPTION_NOT_LATEST,
        ResponseCode.FILTER_DATA_NOT_EXIST,
        ResponseCode.FILTER_DATA_NOT_LATEST,
    }
)
"""Answers saying the broker lacks the subscription a pull without it relied on."""


class PullAPI:
    """Pulls and consumer-side queries for one client instance."""

    def __init__(
        self,
        remoting: RemotingClient,
        routes: RouteCache,
        *,
        timeout: float = 3.0,
        clock: Clock = SYSTEM_CLOCK,
        announcements: Announcements | None = None,
    ) -> None:
        self.remoting = remoting
        self.routes = routes
        # what each broker holds of our subscriptions (the client instance records heartbeats)
        self.announcements = announcements or Announcements()
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
        self,
        addr: str,
        code: int,
        header: RequestHeader | None,
        body: bytes = b"",
        timeout: float | None = None,
    ) -> RemotingCommand:
        timeout = self.timeout if timeout is None else timeout
        ext = header.ext() if header is not None else None
        try:
            return await self.remoting.invoke(addr, RemotingCommand.request(code, ext, body), timeout)
        except ConnectError as exc:
            raise MQConnectError(str(exc), addr) from None
        except ConnectionClosedError as exc:
            raise MQConnectError(f"{addr} closed the connection: {exc}", addr) from None
        except RequestTimeoutError as exc:
            raise MQConnectError(str(exc), addr, timeout=True) from None

    async def oneway(self, addr: str, code: int, header: RequestHeader | None, body: bytes = b"") -> None:
        ext = header.ext() if header is not None else None
        try:
            await self.remoting.invoke_oneway(addr, RemotingCommand.request(code, ext, body))
        except ConnectError as exc:
            raise MQConnectError(str(exc), addr) from None
        except ConnectionClosedError as exc:
            raise MQConnectError(f"{addr} closed the connection: {exc}", addr) from None

    @staticmethod
    def _answer(header: type[R], resp: RemotingCommand, addr: str) -> R:
        """The typed header of an answer; MQClientError naming the field it lacks."""
        try:
            return header.decode(resp)
        except MissingField as exc:
            raise MQClientError(f"the answer from {addr} does not decode: {exc}") from None

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
        post_subscription: bool = True,
    ) -> PullResult:
        """``pullKernelImpl`` + ``processPullResult``. ``commit_offset`` > 0 asks the master to
        record it in passing; ``suspend_ms`` > 0 lets the broker hold the pull (long polling).

        ``post_subscription=False`` (the push consumer's default, as Java's) sends the
        subscription only when the chosen broker may not hold ``sub_version`` of it from our
        heartbeats (``Announcements``); True always sends it (lite pulls, tools)."""
        choice = await self._choose(mq.broker_name, self.pull_node(mq), False, mq.topic)
        addr = choice.addr
        posted = post_subscription or not self.announcements.holds(addr, group, mq.topic, sub_version)
        sys_flag = FLAG_SUBSCRIPTION if posted else 0
        if commit_offset > 0 and not choice.slave:
            sys_flag |= FLAG_COMMIT_OFFSET
        if suspend_ms > 0:
            sys_flag |= FLAG_SUSPEND
        if lite:
            sys_flag |= FLAG_LITE_PULL_MESSAGE
        header = PullMessageRequestHeader(
            consumer_group=group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=sys_flag,
            commit_offset=commit_offset,
            suspend_timeout_millis=suspend_ms,
            sub_version=sub_version,
            subscription=(expression or SUB_ALL) if posted else None,
            expression_type=expression_type,
        )
        if timeout is None:
            timeout = suspend_ms / 1000 + self.timeout
        try:
            resp = await self.invoke(addr, RequestCode.PULL_MESSAGE, header, timeout=timeout)
        except MQConnectError:
            # A dead master stays in the cached route until the 30 s refresh; asking the name
            # server now moves the next pull to a slave within about a second. A broker that
            # comes back has lost our heartbeats: the next pull carries the subscription.
            self.announcements.forget(addr)
            self._refresh_soon(mq.topic)
            raise
        status = _STATUS_BY_CODE.get(resp.code)
        if status is None:
            if resp.code in _REFUSED_FOR_SUBSCRIPTION:
                self.announcements.forget(addr)
            raise MQBrokerError(resp.code, resp.remark, addr)
        answer = self._answer(PullMessageResponseHeader, resp, addr)
        self.pull_from[mq] = answer.suggest_which_broker_id
        result = PullResult(
            status,
            answer.next_begin_offset,
            answer.min_offset,
            answer.max_offset,
            raw=resp.body if status is PullStatus.FOUND else b"",
            suggest_which_broker_id=answer.suggest_which_broker_id,
            from_slave=choice.slave,
            broker_addr=addr,
        )
        if decode and status is PullStatus.FOUND:
            result.messages = self._decode(resp.body, mq, result, expression, expression_type)
        return result

    @staticmethod
    def _decode(
        body: bytes, mq: MessageQueue, result: PullResult, expression: str, expression_type: str
    ) -> list[MessageRecord]:
        try:
            records = decode_records(body, inflate=True)
        except ProtocolError as exc:
            raise MQClientError(f"a pull answer from {result.broker_addr} does not decode: {exc}") from None
        min_text, max_text = str(result.min_offset), str(result.max_offset)
        for rec in records:
            rec.broker_name = mq.broker_name
            rec.properties[PROPERTY_MIN_OFFSET] = min_text
            rec.properties[PROPERTY_MAX_OFFSET] = max_text
        if not is_tag_type(expression_type):
            return records
        try:
            tags = parse_tag_expression(expression)
        except TagExpressionError:  # the broker parsed it to answer; keep what it sent
            return records
        return filter_by_tags(records, tags)

    # -- queue offsets -------------------------------------------------------------------
    async def _queue_offset(self, code: int, mq: MessageQueue, header: RequestHeader) -> int:
        choice = await self._master_or_slave(mq)
        resp = await self.invoke(choice.addr, code, header)
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, choice.addr)
        return self._answer(OffsetResponseHeader, resp, choice.addr).offset

    async def max_offset(self, mq: MessageQueue) -> int:
        """The offset the next message of the queue will get."""
        return await self._queue_offset(RequestCode.GET_MAX_OFFSET, mq, QueueRequestHeader(mq.topic, mq.queue_id))

    async def min_offset(self, mq: MessageQueue) -> int:
        """The smallest offset still stored (retention moves it forward)."""
        return await self._queue_offset(RequestCode.GET_MIN_OFFSET, mq, QueueRequestHeader(mq.topic, mq.queue_id))

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The offset of the first message stored at or after ``timestamp_ms`` (as the broker
        rounds it)."""
        header = SearchOffsetRequestHeader(mq.topic, mq.queue_id, timestamp_ms)
        return await self._queue_offset(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, header)

    # -- consumer offsets ----------------------------------------------------------------
    async def query_consumer_offset(self, mq: MessageQueue, group: str) -> int | None:
        """The group's committed offset of the queue; None when the broker has none."""
        choice = await self._master_or_slave(mq)
        header = QueryConsumerOffsetRequestHeader(group, mq.topic, mq.queue_id)
        resp = await self.invoke(choice.addr, RequestCode.QUERY_CONSUMER_OFFSET, header)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, choice.addr)
        return self._answer(OffsetResponseHeader, resp, choice.addr).offset

    async def update_consumer_offset(self, mq: MessageQueue, group: str, offset: int, *, oneway: bool = False) -> None:
        """Commit the group's offset of the queue to the master (a slave while it is down)."""
        choice = await self._master_or_slave(mq)
        header = UpdateConsumerOffsetRequestHeader(group, mq.topic, mq.queue_id, offset)
        if oneway:
            await self.oneway(choice.addr, RequestCode.UPDATE_CONSUMER_OFFSET, header)
            return
        resp = await self.invoke(choice.addr, RequestCode.UPDATE_CONSUMER_OFFSET, header)
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
                header = GetConsumerListByGroupRequestHeader(group)
                resp = await self.invoke(choice.addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, header)
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
        header = ConsumerSendMsgBackRequestHeader(
            group=group,
            offset=msg.physical_offset,
            delay_level=delay_level,
            max_reconsume_times=max_reconsume_times,
            origin_msg_id=msg.msg_id,
            origin_topic=msg.topic,
            unit_mode=False,
        )
        resp = await self.invoke(addr, RequestCode.CONSUMER_SEND_MSG_BACK, header, timeout=timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, addr)
