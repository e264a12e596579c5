"""AdminClient: what RocketMQ's ``DefaultMQAdminExt`` does, as plain async calls.

Name-server calls go to the configured name servers in turn: the one that answered last
is asked first, and one that cannot be reached (refused, timed out, closed) is skipped.
Broker calls go to the address given. Answers come back as plain dataclasses and dicts;
failures are raised as:

* ``AdminConnectError``: no name server / broker could be reached (or it did not answer
  in time);
* ``AdminResponseError``: the server answered with an error code (``code``, ``remark``),
  e.g. TOPIC_NOT_EXIST (17) for the route of an unknown topic;
* ``AdminError``: anything else that makes the request impossible (bad address, unknown
  cluster, an undecodable body).

Request headers and bodies follow RocketMQ 4.9.7 (``MQClientAPIImpl``,
``DefaultMQAdminExtImpl``, ``MQAdminImpl``); tables keyed by MessageQueue are read with
``protocol.admin_body`` (fastjson writes the queue objects inline as keys).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from ledgermq.acl.signing import Credentials, signer
from ledgermq.admin.model import (
    AUTO_CREATE_TOPIC,
    DEFAULT_QUERY_MAX_NUM,
    DEFAULT_TIMEOUT,
    MAX_LONG,
    ORDER_TOPIC_CONFIG,
    RETRY_PREFIX,
    UNIQUE_KEY_QUERY,
    AdminConnectError,
    AdminError,
    AdminResponseError,
    ClientConnection,
    ClusterInfo,
    ConsumerConnection,
    ConsumeStats,
    DLedgerStatus,
    GroupConsumeInfo,
    HARuntimeInfo,
    OffsetWrapper,
    QueryResult,
    TopicOffset,
    decode_dledger_status,
    decode_ha_runtime_info,
    normalize_address,
    select_broker_addr,
    split_namesrv_addrs,
)
from ledgermq.client.errors import MQConnectError
from ledgermq.client.instance.namesrv_client import NameServerClient
from ledgermq.client.instance.tls import client_tls
from ledgermq.client.tls import TlsOptions
from ledgermq.errors import ProtocolError
from ledgermq.net.client import ConnectError, RemotingClient
from ledgermq.net.connection import ConnectionClosedError, RequestTimeoutError
from ledgermq.protocol import fastjson
from ledgermq.protocol import properties as P
from ledgermq.protocol.admin_body import MessageQueue, decode_mq_table, loads_lenient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import MessageRecord, decode_records
from ledgermq.protocol.msgid import decode_offset_msg_id
from ledgermq.protocol.route import PERM_READ, PERM_WRITE, BrokerData, TopicConfig, TopicRouteData

log = logging.getLogger(__name__)


class AdminClient:
    """``async with AdminClient("127.0.0.1:9876") as admin: await admin.topic_list()``."""

    def __init__(
        self,
        namesrv_addrs: str | Sequence[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = 3.0,
        credentials: Credentials | None = None,
        tls: TlsOptions | None = None,
    ) -> None:
        self.namesrv_addrs = split_namesrv_addrs(namesrv_addrs)
        self.timeout = timeout
        # ACL: every request signed (name servers ignore the fields, brokers check them)
        self.remoting = RemotingClient(
            connect_timeout=connect_timeout,
            sign=signer(credentials) if credentials is not None else None,
            tls=client_tls(tls is not None, tls),  # TLS with these options, else plain
        )
        self._namesrv: NameServerClient | None = None

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self.remoting.close()

    # -- transport ---------------------------------------------------------------------
    async def invoke(
        self,
        addr: str,
        code: int,
        ext: dict[str, Any] | None = None,
        body: bytes = b"",
        timeout: float | None = None,
    ) -> RemotingCommand:
        """One request to ``addr``; connection failures and timeouts become AdminConnectError."""
        addr = normalize_address(addr)
        cmd = RemotingCommand.request(code, ext, body)
        try:
            return await self.remoting.invoke(addr, cmd, timeout or self.timeout)
        except ConnectError as exc:
            raise AdminConnectError(str(exc)) from None
        except RequestTimeoutError as exc:
            self.remoting.close_connection(addr)
            raise AdminConnectError(str(exc)) from None
        except ConnectionClosedError as exc:
            raise AdminConnectError(f"{addr} closed the connection: {exc}") from None

    @property
    def namesrv_in_use(self) -> str | None:
        """The name server asked first next time (the one that answered last); None before any."""
        ns = self._namesrv
        return None if ns is None else ns.addrs[ns.preferred]

    async def invoke_namesrv(self, code: int, ext: dict[str, Any] | None = None, body: bytes = b"") -> RemotingCommand:
        """Ask the name servers in turn until one answers (the client's name-server layer,
        starting at the first address as mqadmin does)."""
        if self._namesrv is None:
            if not self.namesrv_addrs:
                raise AdminError("no name server address given (-n host:port or NAMESRV_ADDR)")
            addrs = [normalize_address(a) for a in self.namesrv_addrs]  # a bad one is named at once
            self._namesrv = NameServerClient(self.remoting, addrs, timeout=self.timeout, start_at=0)
        try:
            return await self._namesrv.invoke(code, ext, body)
        except MQConnectError as exc:
            raise AdminConnectError(str(exc)) from None

    @staticmethod
    def _check(resp: RemotingCommand, what: str) -> RemotingCommand:
        if resp.code != ResponseCode.SUCCESS:
            raise AdminResponseError(resp.code, resp.remark, what)
        return resp

    @staticmethod
    def _json(body: bytes, what: str, *, lenient: bool = False) -> dict[str, Any]:
        try:
            doc = loads_lenient(body) if lenient else fastjson.loads(body)
        except ProtocolError as exc:
            raise AdminError(f"{what}: the answer does not decode: {exc}") from None
        if not isinstance(doc, dict):
            raise AdminError(f"{what}: the answer is not a JSON object")
        return doc

    # -- name server -------------------------------------------------------------------
    async def route(self, topic: str) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC; AdminResponseError(TOPIC_NOT_EXIST) if the topic has none."""
        resp = await self.invoke_namesrv(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": True}
        )
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            raise AdminResponseError(resp.code, resp.remark or f"topic {topic} has no route")
        self._check(resp, f"route of {topic}")
        try:
            return TopicRouteData.decode(resp.body)
        except ProtocolError as exc:
            raise AdminError(f"route of {topic}: {exc}") from None

    async def cluster_info(self) -> ClusterInfo:
        resp = self._check(await self.invoke_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO), "cluster info")
        doc = self._json(resp.body, "cluster info")
        try:
            brokers = {
                str(name): BrokerData.from_json({"brokerName": name, **data})
                for name, data in (doc.get("brokerAddrTable") or {}).items()
            }
            clusters = {
                str(c): sorted(str(n) for n in names) for c, names in (doc.get("clusterAddrTable") or {}).items()
            }
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise AdminError(f"cluster info does not decode: {exc}") from None
        return ClusterInfo(brokers, clusters)

    async def topic_list(self) -> list[str]:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER, sorted."""
        resp = self._check(await self.invoke_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), "topic list")
        topics = self._json(resp.body, "topic list").get("topicList") or []
        return sorted(str(t) for t in topics)

    async def topics_by_cluster(self, cluster: str) -> list[str]:
        """GET_TOPICS_BY_CLUSTER: the topics with queues on a broker of ``cluster``."""
        resp = self._check(
            await self.invoke_namesrv(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster}), f"topics of {cluster}"
        )
        topics = self._json(resp.body, f"topics of {cluster}").get("topicList") or []
        return sorted(str(t) for t in topics)

    async def put_order_conf(self, topic: str, order_conf: str) -> None:
        """``createOrUpdateOrderConf``: the topic's "brokerName:queues;..." on every name server."""
        ext = {"namespace": ORDER_TOPIC_CONFIG, "key": topic, "value": order_conf}
        if not self.namesrv_addrs:
            raise AdminError("no name server address given (-n host:port or NAMESRV_ADDR)")
        for addr in self.namesrv_addrs:
            self._check(await self.invoke(addr, RequestCode.PUT_KV_CONFIG, ext), f"order conf on {addr}")

    # -- topics ------------------------------------------------------------------------
    async def create_topic(
        self,
        broker_addr: str,
        topic: str,
        *,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = PERM_READ | PERM_WRITE,
        order: bool = False,
        topic_filter_type: str = "SINGLE_TAG",
        topic_sys_flag: int = 0,
    ) -> TopicConfig:
        """UPDATE_AND_CREATE_TOPIC on one broker (mqadmin's defaults: 8/8 queues, perm 6)."""
        tc = TopicConfig(topic, read_queue_nums, write_queue_nums, perm, topic_filter_type, topic_sys_flag, order)
        ext = {
            "topic": topic,
            "defaultTopic": AUTO_CREATE_TOPIC,
            "readQueueNums": read_queue_nums,
            "writeQueueNums": write_queue_nums,
            "perm": perm,
            "topicFilterType": topic_filter_type,
            "topicSysFlag": topic_sys_flag,
            "order": order,
        }
        self._check(await self.invoke(broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, ext), f"create {topic}")
        return tc

    async def create_topic_in_cluster(self, cluster: str, topic: str, **options: Any) -> list[str]:
        """``create_topic`` on every master of ``cluster``; the addresses done."""
        masters = (await self.cluster_info()).master_addrs(cluster)
        if not masters:
            raise AdminError(f"cluster {cluster!r} has no master broker")
        for addr in masters:
            await self.create_topic(addr, topic, **options)
        return masters

    async def topic_stats(self, broker_addr: str, topic: str) -> dict[MessageQueue, TopicOffset]:
        """GET_TOPIC_STATS_INFO on one broker: min/max offset and last store time per queue."""
        what = f"stats of {topic} on {broker_addr}"
        resp = self._check(await self.invoke(broker_addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic}), what)
        doc = self._json(resp.body, what, lenient=True)
        try:
            return {
                mq: TopicOffset(
                    int(v.get("minOffset", 0)), int(v.get("maxOffset", 0)), int(v.get("lastUpdateTimestamp", 0))
                )
                for mq, v in decode_mq_table(doc.get("offsetTable") or {}).items()
            }
        except (ProtocolError, AttributeError, TypeError, ValueError) as exc:
            raise AdminError(f"{what}: the answer does not decode: {exc}") from None

    async def examine_topic_stats(self, topic: str) -> dict[MessageQueue, TopicOffset]:
        """``examineTopicStats``: the stats of every broker group in the topic's route."""
        route = await self.route(topic)
        table: dict[MessageQueue, TopicOffset] = {}
        for data in route.broker_datas:
            addr = select_broker_addr(data)
            if addr is not None:
                table.update(await self.topic_stats(addr, topic))
        if not table:
            raise AdminError(f"no topic stats found for {topic}")
        return dict(sorted(table.items()))

    # -- consumers ---------------------------------------------------------------------
    async def consume_stats(self, broker_addr: str, group: str, topic: str | None = None) -> ConsumeStats:
        """GET_CONSUME_STATS on one broker (every topic of the group when ``topic`` is None)."""
        what = f"consume stats of {group} on {broker_addr}"
        ext = {"consumerGroup": group, "topic": topic or ""}
        resp = self._check(await self.invoke(broker_addr, RequestCode.GET_CONSUME_STATS, ext), what)
        doc = self._json(resp.body, what, lenient=True)
        try:
            table = {
                mq: OffsetWrapper(
                    int(v.get("brokerOffset", 0)), int(v.get("consumerOffset", 0)), int(v.get("lastTimestamp", 0))
                )
                for mq, v in decode_mq_table(doc.get("offsetTable") or {}).items()
            }
            return ConsumeStats(table, float(doc.get("consumeTps") or 0.0))
        except (ProtocolError, AttributeError, TypeError, ValueError) as exc:
            raise AdminError(f"{what}: the answer does not decode: {exc}") from None

    async def _group_brokers(self, group: str, topic: str | None) -> list[str]:
        """Where a group's offsets live: the brokers of its retry topic (as RocketMQ asks),
        else of ``topic``, else every master the name server knows."""
        for name in (RETRY_PREFIX + group, topic):
            if not name:
                continue
            try:
                route = await self.route(name)
            except AdminResponseError as exc:
                if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                    raise
                continue
            return [a for a in (select_broker_addr(d) for d in route.broker_datas) if a]
        info = await self.cluster_info()
        return [a for a in (select_broker_addr(d) for _, d in sorted(info.broker_addr_table.items())) if a]

    async def examine_consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        """``examineConsumeStats``: the group's progress summed over its brokers."""
        result = ConsumeStats()
        for addr in await self._group_brokers(group, topic):
            stats = await self.consume_stats(addr, group, topic)
            result.offset_table.update(stats.offset_table)
            result.consume_tps += stats.consume_tps
        if not result.offset_table:
            raise AdminResponseError(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"no consume stats for group {group}"
                + (f" on topic {topic}" if topic else "")
                + ": it has committed no offset and no live consumer subscribes",
            )
        result.offset_table = dict(sorted(result.offset_table.items()))
        return result

    async def consumer_connection(self, broker_addr: str, group: str) -> ConsumerConnection:
        """GET_CONSUMER_CONNECTION_LIST; AdminResponseError(CONSUMER_NOT_ONLINE) if none."""
        what = f"connections of {group} on {broker_addr}"
        resp = self._check(
            await self.invoke(broker_addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}), what
        )
        doc = self._json(resp.body, what)
        try:
            connections = [
                ClientConnection(
                    str(c.get("clientId", "")),
                    str(c.get("clientAddr", "")),
                    str(c.get("language", "")),
                    int(c.get("version", 0)),
                )
                for c in doc.get("connectionSet") or []
            ]
            return ConsumerConnection(
                connections,
                str(doc.get("consumeType") or ""),
                str(doc.get("messageModel") or ""),
                str(doc.get("consumeFromWhere") or ""),
                {str(k): v for k, v in (doc.get("subscriptionTable") or {}).items()},
            )
        except (AttributeError, TypeError, ValueError) as exc:
            raise AdminError(f"{what}: the answer does not decode: {exc}") from None

    async def examine_consumer_connection(self, group: str) -> ConsumerConnection:
        """The group's connections as the first broker of its retry topic sees them."""
        route = await self.route(RETRY_PREFIX + group)
        last: AdminError | None = None
        for data in route.broker_datas:
            addr = select_broker_addr(data)
            if addr is None:
                continue
            try:
                return await self.consumer_connection(addr, group)
            except AdminError as exc:
                last = exc
        raise last or AdminResponseError(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")

    async def consumer_groups(self) -> list[GroupConsumeInfo]:
        """``consumerProgress`` without a group: every group that has a retry topic."""
        out: list[GroupConsumeInfo] = []
        for topic in await self.topic_list():
            if not topic.startswith(RETRY_PREFIX):
                continue
            info = GroupConsumeInfo(topic[len(RETRY_PREFIX) :])
            try:
                stats = await self.examine_consume_stats(info.group)
                info.consume_tps, info.diff_total = stats.consume_tps, stats.total_diff
            except AdminError as exc:
                log.debug("consume stats of %s: %s", info.group, exc)
            try:
                conn = await self.examine_consumer_connection(info.group)
                info.count, info.version = len(conn.connections), conn.min_version
                info.consume_type, info.message_model = conn.consume_type, conn.message_model
            except AdminError as exc:
                log.debug("connections of %s: %s", info.group, exc)
            out.append(info)
        return out

    # -- messages ----------------------------------------------------------------------
    async def view_message(self, broker_addr: str, offset: int) -> MessageRecord:
        """VIEW_MESSAGE_BY_ID: the message stored at commit-log ``offset`` (body inflated)."""
        what = f"message at {broker_addr} offset {offset}"
        resp = self._check(await self.invoke(broker_addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset}), what)
        try:
            records = decode_records(resp.body, check_crc=False, inflate=True)
        except ProtocolError as exc:
            raise AdminError(f"{what}: the answer does not decode: {exc}") from None
        if not records:
            raise AdminError(f"{what}: the broker sent no message")
        return records[0]

    async def view_message_by_id(self, offset_msg_id: str) -> MessageRecord:
        """The message an offset message id names (store host + commit-log offset)."""
        try:
            (host, port), offset = decode_offset_msg_id(offset_msg_id.strip())
        except ProtocolError as exc:
            raise AdminError(f"{offset_msg_id!r} is not an offset message id: {exc}") from None
        return await self.view_message(f"{host}:{port}", offset)

    async def query_message(
        self,
        broker_addr: str,
        topic: str,
        key: str,
        *,
        max_num: int = DEFAULT_QUERY_MAX_NUM,
        begin: int = 0,
        end: int = MAX_LONG,
        unique_key: bool = False,
    ) -> QueryResult:
        """QUERY_MESSAGE on one broker (index lookup, may include hash collisions)."""
        ext = {
            "topic": topic,
            "key": key,
            "maxNum": max_num,
            "beginTimestamp": begin,
            "endTimestamp": end,
            UNIQUE_KEY_QUERY: unique_key,
        }
        resp = await self.invoke(broker_addr, RequestCode.QUERY_MESSAGE, ext)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return QueryResult()
        what = f"query {topic}#{key} on {broker_addr}"
        self._check(resp, what)
        try:
            records = decode_records(resp.body, check_crc=False, inflate=True)
            stamp = int(resp.ext_fields.get("indexLastUpdateTimestamp") or 0)
        except (ProtocolError, ValueError) as exc:
            raise AdminError(f"{what}: the answer does not decode: {exc}") from None
        return QueryResult(stamp, records)

    async def query_by_key(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = DEFAULT_QUERY_MAX_NUM,
        begin: int = 0,
        end: int = MAX_LONG,
        unique_key: bool = False,
    ) -> QueryResult:
        """``MQAdminImpl.queryMessage``: ask every broker group of the topic's route, keep
        the messages whose topic and KEYS (or UNIQ_KEY for ``unique_key``) really match.

        Brokers that fail are skipped (as RocketMQ does) unless every one of them fails."""
        route = await self.route(topic)
        addrs = [a for a in (select_broker_addr(d) for d in route.broker_datas) if a]
        if not addrs:
            raise AdminResponseError(ResponseCode.TOPIC_NOT_EXIST, f"the topic[{topic}] has no broker in its route")
        answers = await asyncio.gather(
            *(
                self.query_message(a, topic, key, max_num=max_num, begin=begin, end=end, unique_key=unique_key)
                for a in addrs
            ),
            return_exceptions=True,
        )
        failures = [a for a in answers if isinstance(a, BaseException)]
        for exc in failures:
            if not isinstance(exc, Exception):
                raise exc
            log.warning("queryMessage: %s", exc)
        if len(failures) == len(answers):
            raise failures[0]
        result = QueryResult()
        for answer in answers:
            if isinstance(answer, BaseException):
                continue
            result.index_last_update_timestamp = max(
                result.index_last_update_timestamp, answer.index_last_update_timestamp
            )
            for rec in answer.messages:
                if unique_key:
                    if rec.properties.get(P.UNIQ_KEY) == key:
                        result.messages.append(rec)
                elif rec.topic == topic and key in rec.keys:
                    result.messages.append(rec)
        if unique_key and len(result.messages) > 1:  # RocketMQ keeps the earliest stored copy
            result.messages = [min(result.messages, key=lambda r: r.store_timestamp)]
        return result

    # -- brokers -----------------------------------------------------------------------
    async def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO: the KVTable ``mqadmin brokerStatus`` prints."""
        what = f"runtime info of {broker_addr}"
        resp = self._check(await self.invoke(broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO), what)
        table = self._json(resp.body, what).get("table") or {}
        if not isinstance(table, dict):
            raise AdminError(f"{what}: the answer has no table")
        return {str(k): "" if v is None else str(v) for k, v in sorted(table.items())}

    async def ha_status(self, broker_addr: str) -> HARuntimeInfo:
        """GET_BROKER_HA_STATUS (907): what ``mqadmin haStatus`` prints for one broker.

        A broker without the code (RocketMQ 4.x) answers REQUEST_CODE_NOT_SUPPORTED, raised
        as AdminResponseError."""
        what = f"HA status of {broker_addr}"
        resp = self._check(await self.invoke(broker_addr, RequestCode.GET_BROKER_HA_STATUS), what)
        doc = self._json(resp.body, what)
        try:
            return decode_ha_runtime_info(doc)
        except (AttributeError, TypeError, ValueError) as exc:
            raise AdminError(f"{what}: the answer does not decode: {exc}") from None

    async def dledger_status(self, broker_addr: str) -> DLedgerStatus:
        """GET_DLEDGER_STATUS (ledgermq-only): the broker's Raft role, term, leader and indices,
        and on the leader each member's match index and lag. A broker not in DLedger mode
        answers SYSTEM_ERROR saying so (a Java broker REQUEST_CODE_NOT_SUPPORTED), raised as
        AdminResponseError."""
        what = f"DLedger status of {broker_addr}"
        resp = self._check(await self.invoke(broker_addr, RequestCode.GET_DLEDGER_STATUS), what)
        doc = self._json(resp.body, what)
        try:
            return decode_dledger_status(doc)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise AdminError(f"{what}: the answer does not decode: {exc}") from None

    async def dledger_transfer_leader(self, broker_addr: str, target: str, timeout: float = 5.0) -> str:
        """DLEDGER_TRANSFER_LEADER to the group's leader at ``broker_addr``: hand over to
        ``target`` (``n<k>``) and wait (at most ``timeout`` s) until it stepped down. Returns
        the broker's remark; AdminResponseError if it refused (a follower names the leader)."""
        ext = {"target": target, "timeoutMillis": int(timeout * 1000)}
        resp = await self.invoke(broker_addr, RequestCode.DLEDGER_TRANSFER_LEADER, ext, timeout=timeout + self.timeout)
        self._check(resp, f"transfer of leadership to {target} via {broker_addr}")
        return resp.remark or ""
