"""The operator's changes and lookups behind ``ledgermq admin deleteTopic``, ``updateSubGroup``,
``resetOffsetByTime``, ``printMsg``, ``updateBrokerConfig``, ``wipeWritePerm`` and friends, as
functions over an ``AdminClient`` (which keeps the transport and the read-only queries).

Headers follow RocketMQ 4.9.7's ``MQClientAPIImpl``; each function names the request code
it sends. Errors are the AdminClient's (AdminResponseError carries the server's code).
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass, field
from typing import Any

from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import (
    DLQ_PREFIX,
    ORDER_TOPIC_CONFIG,
    RETRY_PREFIX,
    AdminError,
    AdminResponseError,
    ClientConnection,
    select_broker_addr,
)
from ledgermq.client.instance.pull_api import FLAG_SUBSCRIPTION, filter_by_tags
from ledgermq.errors import ProtocolError
from ledgermq.protocol import fastjson
from ledgermq.protocol.admin_body import MessageQueue, decode_mq_table, loads_lenient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.headers_pull import PullMessageRequestHeader
from ledgermq.protocol.message import MessageRecord, decode_records
from ledgermq.protocol.msgid import decode_offset_msg_id
from ledgermq.protocol.tag_expression import TagExpressionError, parse_tag_expression

log = logging.getLogger(__name__)

TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"  # what mqadmin's pulls present themselves as
SYSTEM_TOPIC_PREFIXES = (RETRY_PREFIX, DLQ_PREFIX, "rmq_sys_", "RMQ_SYS_", "SCHEDULE_TOPIC", "TBW102")


# -- topics ------------------------------------------------------------------------------
async def delete_topic_in_broker(client: AdminClient, broker_addr: str, topic: str) -> None:
    """DELETE_TOPIC_IN_BROKER: the broker drops the topic's config (and stops registering it)."""
    resp = await client.invoke(broker_addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
    client._check(resp, f"delete {topic} on {broker_addr}")


async def delete_topic_in_namesrv(client: AdminClient, namesrv_addr: str, topic: str, cluster: str) -> None:
    """DELETE_TOPIC_IN_NAMESRV on one name server (the topic's queues of ``cluster``)."""
    ext = {"topic": topic, "clusterName": cluster}
    resp = await client.invoke(namesrv_addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, ext)
    client._check(resp, f"delete {topic} on name server {namesrv_addr}")


async def delete_kv_config(client: AdminClient, namespace: str, key: str) -> None:
    """DELETE_KV_CONFIG on every name server (an order topic's conf goes with the topic)."""
    for addr in client.namesrv_addrs:
        resp = await client.invoke(addr, RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key})
        client._check(resp, f"delete kv {namespace}/{key} on {addr}")


async def delete_topic_in_cluster(client: AdminClient, cluster: str, topic: str) -> list[str]:
    """``mqadmin deleteTopic``: every master of ``cluster``, then every name server, then the
    topic's order conf. Returns the masters it was deleted from."""
    masters = (await client.cluster_info()).master_addrs(cluster)
    if not masters:
        raise AdminError(f"cluster {cluster!r} has no master broker")
    for addr in masters:
        await delete_topic_in_broker(client, addr, topic)
    for ns in client.namesrv_addrs:
        await delete_topic_in_namesrv(client, ns, topic, cluster)
    await delete_kv_config(client, ORDER_TOPIC_CONFIG, topic)
    return masters


# -- subscription groups ---------------------------------------------------------------
async def update_subscription_group(client: AdminClient, broker_addr: str, config: dict[str, Any]) -> None:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP with a SubscriptionGroupConfig body."""
    resp = await client.invoke(
        broker_addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, fastjson.dumps(config)
    )
    client._check(resp, f"update subscription group {config.get('groupName')} on {broker_addr}")


async def subscription_groups(client: AdminClient, broker_addr: str) -> dict[str, dict[str, Any]]:
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: the broker's group configs by name."""
    what = f"subscription groups of {broker_addr}"
    resp = client._check(await client.invoke(broker_addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), what)
    table = client._json(resp.body, what, lenient=True).get("subscriptionGroupTable") or {}
    return {str(k): v for k, v in table.items() if isinstance(v, dict)}


async def delete_subscription_group(client: AdminClient, broker_addr: str, group: str, remove_offset: bool) -> None:
    """DELETE_SUBSCRIPTIONGROUP; ``remove_offset`` also drops the group's committed offsets."""
    ext = {"groupName": group, "removeOffset": remove_offset}
    resp = await client.invoke(broker_addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, ext)
    client._check(resp, f"delete subscription group {group} on {broker_addr}")


# -- connections -----------------------------------------------------------------------
async def producer_connection(client: AdminClient, group: str, topic: str) -> list[ClientConnection]:
    """GET_PRODUCER_CONNECTION_LIST on each broker of the topic's route, first answer wins."""
    route = await client.route(topic)
    last: AdminError | None = None
    for data in route.broker_datas:
        addr = select_broker_addr(data)
        if addr is None:
            continue
        what = f"producers of {group} on {addr}"
        try:
            resp = client._check(
                await client.invoke(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group}), what
            )
        except AdminError as exc:
            last = exc
            continue
        doc = client._json(resp.body, what)
        return [
            ClientConnection(
                str(c.get("clientId", "")),
                str(c.get("clientAddr", "")),
                str(c.get("language", "")),
                int(c.get("version", 0)),
            )
            for c in doc.get("connectionSet") or []
        ]
    raise last or AdminError(f"topic {topic} has no broker to ask")


# -- offsets ---------------------------------------------------------------------------
async def reset_offset_by_time(
    client: AdminClient, group: str, topic: str, timestamp: int, force: bool
) -> dict[MessageQueue, int]:
    """INVOKE_BROKER_TO_RESET_OFFSET on the master of every broker group of the topic; the
    offsets each chose. timestamp -1 means each queue's end."""
    route = await client.route(topic)
    result: dict[MessageQueue, int] = {}
    for data in route.broker_datas:
        addr = data.master_addr()
        if not addr:
            log.warning("resetOffset: %s has no master; its queues are not reset", data.broker_name)
            continue
        what = f"reset offset of {group}@{topic} on {addr}"
        ext = {"topic": topic, "group": group, "timestamp": timestamp, "isForce": force}
        resp = client._check(await client.invoke(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext), what)
        if resp.body:
            try:
                doc = loads_lenient(resp.body)
                raw = doc.get("offsetTable") if isinstance(doc, dict) else None
                result.update({mq: int(v) for mq, v in decode_mq_table(raw or {}).items()})
            except (ProtocolError, TypeError, ValueError) as exc:
                raise AdminError(f"{what}: the answer does not decode: {exc}") from None
    return dict(sorted(result.items()))


# -- messages --------------------------------------------------------------------------
def _plausible_offset_id(msg_id: str) -> tuple[str, int] | None:
    """(store address, commit-log offset) when ``msg_id`` reads as an offset message id whose
    host could be a broker; None for anything else (e.g. a client's unique key)."""
    try:
        (host, port), offset = decode_offset_msg_id(msg_id)
    except ProtocolError:
        return None
    ip = ipaddress.ip_address(host)
    if not 0 < port < 65536 or offset < 0 or ip.is_unspecified or ip.is_multicast:
        return None
    return f"{host}:{port}", offset


async def query_by_unique_key(client: AdminClient, topic: str, key: str) -> MessageRecord | None:
    """QUERY_MESSAGE on the UNIQ_KEY index (the earliest stored copy), None if not found."""
    result = await client.query_by_key(topic, key, unique_key=True)
    return result.messages[0] if result.messages else None


async def view_message_any_id(client: AdminClient, msg_id: str, topic: str | None = None) -> MessageRecord:
    """``mqadmin queryMsgById``: an offset id first (VIEW_MESSAGE_BY_ID at its store host);
    if it is not one, names an implausible host, or is not found there, the id is looked up
    as a unique key (UNIQ_KEY index) in ``topic``, or in every user topic."""
    msg_id = msg_id.strip()
    plausible = _plausible_offset_id(msg_id)
    first_error: AdminError | None = None
    if plausible is not None:
        addr, offset = plausible
        try:
            return await client.view_message(addr, offset)
        except AdminError as exc:
            first_error = exc
    topics = [topic] if topic else [t for t in await client.topic_list() if not t.startswith(SYSTEM_TOPIC_PREFIXES)]
    for name in topics:
        try:
            found = await query_by_unique_key(client, name, msg_id)
        except AdminError as exc:
            log.debug("unique-key lookup of %s in %s: %s", msg_id, name, exc)
            continue
        if found is not None:
            return found
    where = f"topic {topic}" if topic else "any topic"
    detail = f" (as an offset id: {first_error})" if first_error is not None else ""
    raise AdminResponseError(ResponseCode.QUERY_NOT_FOUND, f"no message with id {msg_id} in {where}{detail}")


async def queue_offset(client: AdminClient, broker_addr: str, mq: MessageQueue, timestamp: int | None) -> int:
    """SEARCH_OFFSET_BY_TIMESTAMP, or GET_MAX_OFFSET for ``timestamp`` None."""
    ext: dict[str, Any] = {"topic": mq.topic, "queueId": mq.queue_id}
    code = RequestCode.GET_MAX_OFFSET
    if timestamp is not None:
        code, ext["timestamp"] = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp
    resp = client._check(await client.invoke(broker_addr, code, ext), f"offset of {mq} on {broker_addr}")
    try:
        return int(resp.ext_fields["offset"])
    except (KeyError, ValueError) as exc:
        raise AdminError(f"offset of {mq} on {broker_addr}: no offset in the answer ({exc})") from None


@dataclass(slots=True)
class QueueSlice:
    """One queue's messages between two offsets (what ``printMsg`` prints per queue)."""

    mq: MessageQueue
    min_offset: int
    max_offset: int
    messages: list[MessageRecord] = field(default_factory=list)


PULL_ANSWERS = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.PULL_NOT_FOUND,
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        ResponseCode.PULL_OFFSET_MOVED,
    }
)
"""What a pull may answer about the queue itself; any other code refuses the request."""


async def pull_range(
    client: AdminClient, broker_addr: str, mq: MessageQueue, begin: int, end: int, expression: str = "*"
) -> list[MessageRecord]:
    """PULL_MESSAGE from ``begin`` until ``end`` (exclusive) or the queue's end, no commit."""
    out: list[MessageRecord] = []
    try:
        tags = parse_tag_expression(expression)
    except TagExpressionError as exc:
        raise AdminError(str(exc)) from None
    offset = begin
    while offset < end:
        header = PullMessageRequestHeader(
            consumer_group=TOOLS_CONSUMER_GROUP,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=offset,
            max_msg_nums=min(32, end - offset),
            sys_flag=FLAG_SUBSCRIPTION,
            commit_offset=0,
            suspend_timeout_millis=0,
            sub_version=0,
            subscription=tags.text,
            expression_type="TAG",
        )
        resp = await client.invoke(broker_addr, RequestCode.PULL_MESSAGE, header.ext())
        if resp.code not in PULL_ANSWERS:  # a refusal (no such topic, no permission...) is not "no messages"
            client._check(resp, f"a pull of {mq} from {broker_addr}")
        if resp.code != ResponseCode.SUCCESS:  # NO_NEW_MSG / NO_MATCHED / OFFSET_MOVED: done, or skip ahead
            next_offset = int(resp.ext_fields.get("nextBeginOffset") or offset)
            if resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED) or next_offset <= offset:
                break
            offset = next_offset
            continue
        try:
            records = decode_records(resp.body, check_crc=False, inflate=True)
        except ProtocolError as exc:
            raise AdminError(f"a pull of {mq} from {broker_addr} does not decode: {exc}") from None
        for rec in records:
            rec.broker_name = mq.broker_name
        out.extend(r for r in filter_by_tags(records, tags) if r.queue_offset < end)
        next_offset = int(resp.ext_fields.get("nextBeginOffset") or offset)
        if next_offset <= offset:
            break
        offset = next_offset
    return out


async def print_messages(
    client: AdminClient, topic: str, expression: str, begin_ms: int | None, end_ms: int | None
) -> list[QueueSlice]:
    """``mqadmin printMsg``: every queue of the topic, from the offset of ``begin_ms`` (or the
    queue's start) to the offset of ``end_ms`` (or its end)."""
    route = await client.route(topic)
    slices: list[QueueSlice] = []
    for data in sorted(route.broker_datas, key=lambda d: d.broker_name):
        addr = select_broker_addr(data)
        if addr is None:
            continue
        queues = next((q.read_queue_nums for q in route.queue_datas if q.broker_name == data.broker_name), 0)
        for queue_id in range(queues):
            mq = MessageQueue(topic, data.broker_name, queue_id)
            low = await queue_offset(client, addr, mq, begin_ms if begin_ms is not None else 0)
            high = await queue_offset(client, addr, mq, end_ms)
            slices.append(QueueSlice(mq, low, high, await pull_range(client, addr, mq, low, high, expression)))
    return slices


# -- broker config ---------------------------------------------------------------------
async def get_broker_config(client: AdminClient, broker_addr: str) -> dict[str, str]:
    """GET_BROKER_CONFIG: the broker's settings (a properties text) by key."""
    what = f"config of {broker_addr}"
    resp = client._check(await client.invoke(broker_addr, RequestCode.GET_BROKER_CONFIG), what)
    props: dict[str, str] = {}
    for line in resp.body.decode("utf-8", "replace").splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, v = line.split("=", 1)
            props[k.strip()] = v.strip()
    return dict(sorted(props.items()))


async def update_broker_config(client: AdminClient, broker_addr: str, key: str, value: str) -> None:
    """UPDATE_BROKER_CONFIG with one ``key=value``; a broker refuses keys it cannot change live."""
    body = f"{key}={value}\n".encode()
    resp = await client.invoke(broker_addr, RequestCode.UPDATE_BROKER_CONFIG, None, body)
    client._check(resp, f"update {key} on {broker_addr}")


# -- name servers ----------------------------------------------------------------------
async def set_write_perm(client: AdminClient, namesrv_addr: str, broker_name: str, writable: bool) -> int:
    """WIPE_WRITE_PERM_OF_BROKER / ADD_WRITE_PERM_OF_BROKER on one name server: the number
    of topics whose queue data of ``broker_name`` changed."""
    code = RequestCode.ADD_WRITE_PERM_OF_BROKER if writable else RequestCode.WIPE_WRITE_PERM_OF_BROKER
    what = f"{'add' if writable else 'wipe'} write perm of {broker_name} on {namesrv_addr}"
    resp = client._check(await client.invoke(namesrv_addr, code, {"brokerName": broker_name}), what)
    name = "addTopicCount" if writable else "wipeTopicCount"
    try:
        return int(resp.ext_fields.get(name) or 0)
    except ValueError:
        raise AdminError(f"{what}: {name} is not a number") from None


# -- statistics (statsAll) -----------------------------------------------------------------
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
GROUP_GET_NUMS = "GROUP_GET_NUMS"


@dataclass(frozen=True, slots=True)
class StatsFigures:
    """One broker's figures for one stats item (BrokerStatsData): the minute's TPS and the
    sums over the last minute, hour and day."""

    minute_tps: float
    minute_sum: int
    hour_sum: int
    day_sum: int

    def last_24h(self) -> int:
        """mqadmin's ``compute24HourSum``: the day's sum, or failing that the hour's, or the
        minute's (a broker up for less than a day has an empty day window)."""
        return self.day_sum or self.hour_sum or self.minute_sum


async def view_broker_stats_data(client: AdminClient, broker_addr: str, name: str, key: str) -> StatsFigures | None:
    """VIEW_BROKER_STATS_DATA; None when the broker has no such item (nothing counted yet)."""
    resp = await client.invoke(broker_addr, RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key})
    if resp.code != ResponseCode.SUCCESS:
        return None
    doc = loads_lenient(resp.body)

    def part(window: str, item: str) -> Any:
        return (doc.get(window) or {}).get(item, 0)

    return StatsFigures(
        float(part("statsMinute", "tps")),
        int(part("statsMinute", "sum")),
        int(part("statsHour", "sum")),
        int(part("statsDay", "sum")),
    )


async def query_topic_consume_by_who(client: AdminClient, broker_addr: str, topic: str) -> list[str]:
    """QUERY_TOPIC_CONSUME_BY_WHO: groups subscribed to or with offsets in ``topic``."""
    resp = await client.invoke(broker_addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})
    client._check(resp, f"consumers of {topic} on {broker_addr}")
    return [str(g) for g in loads_lenient(resp.body).get("groupList") or []]


@dataclass(frozen=True, slots=True)
class TopicStatsRow:
    """One line of ``statsAll``: a topic and one of its consumer groups (``group`` None: no
    consumer), summed over the topic's master brokers."""

    topic: str
    group: str | None
    accumulation: int
    in_tps: float
    out_tps: float
    in_24h: int
    out_24h: int


async def topic_stats_rows(client: AdminClient, topic: str) -> list[TopicStatsRow]:
    """What mqadmin's ``statsAll`` prints for ``topic``: puts per master, then per group the
    gets per master and the group's accumulation (consumeStats' total difference)."""
    route = await client.route(topic)
    masters = [addr for bd in route.broker_datas if (addr := bd.broker_addrs.get(0)) is not None]
    in_tps, in_24h = 0.0, 0
    groups: set[str] = set()
    for addr in masters:
        put = await view_broker_stats_data(client, addr, TOPIC_PUT_NUMS, topic)
        if put is not None:
            in_tps += put.minute_tps
            in_24h += put.last_24h()
        try:
            groups.update(await query_topic_consume_by_who(client, addr, topic))
        except AdminError as exc:
            log.debug("consumers of %s on %s: %s", topic, addr, exc)
    if not groups:
        return [TopicStatsRow(topic, None, 0, in_tps, 0.0, in_24h, 0)]
    rows = []
    for group in sorted(groups):
        out_tps, out_24h = 0.0, 0
        for addr in masters:
            got = await view_broker_stats_data(client, addr, GROUP_GET_NUMS, f"{topic}@{group}")
            if got is not None:
                out_tps += got.minute_tps
                out_24h += got.last_24h()
        try:
            accumulation = max(0, (await client.examine_consume_stats(group, topic)).total_diff)
        except AdminError:
            accumulation = 0
        rows.append(TopicStatsRow(topic, group, accumulation, in_tps, out_tps, in_24h, out_24h))
    return rows


async def consume_message_directly(
    client: AdminClient, group: str, client_id: str, record: MessageRecord
) -> dict[str, Any]:
    """CONSUME_MESSAGE_DIRECTLY to the broker that stores ``record``, which hands it to the
    consumer ``client_id`` of ``group``; the consumer's ConsumeMessageDirectlyResult."""
    host, port = record.store_host
    addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    ext = {"consumerGroup": group, "clientId": client_id, "msgId": record.offset_msg_id}
    resp = await client.invoke(addr, RequestCode.CONSUME_MESSAGE_DIRECTLY, ext)
    client._check(resp, f"direct consumption by {client_id} of {group}")
    doc = loads_lenient(resp.body)
    return doc if isinstance(doc, dict) else {}


def direct_result_text(doc: dict[str, Any]) -> str:
    """``ConsumeMessageDirectlyResult.toString()`` as mqadmin prints it."""
    remark = doc.get("remark")
    return (
        f"ConsumeMessageDirectlyResult [order={str(bool(doc.get('order'))).lower()}, "
        f"autoCommit={str(bool(doc.get('autoCommit', True))).lower()}, consumeResult={doc.get('consumeResult')}, "
        f"remark={remark if remark is not None else 'null'}, spentTimeMills={doc.get('spentTimeMills', 0)}]"
    )
