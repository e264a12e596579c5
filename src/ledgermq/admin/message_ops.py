"""Message lookups a console needs beyond ``mqadmin``'s: the messages of a topic stored in a
time range, which consumer groups have consumed one message (``messageTrackDetail``), and
the copies of a message in its groups' retry and dead-letter topics.

Everything goes through ``AdminClient`` and the request codes of RocketMQ 4.9.7:
SEARCH_OFFSET_BY_TIMESTAMP, GET_MAX_OFFSET, PULL_MESSAGE (never committing),
QUERY_TOPIC_CONSUME_BY_WHO, GET_CONSUME_STATS, GET_CONSUMER_CONNECTION_LIST and
QUERY_MESSAGE on the UNIQ_KEY index.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import DLQ_PREFIX, RETRY_PREFIX, AdminError, AdminResponseError, select_broker_addr
from ledgermq.admin.operations import pull_range, query_topic_consume_by_who, queue_offset
from ledgermq.protocol import properties as P
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.message import MessageRecord

log = logging.getLogger(__name__)

__all__ = [
    "MessageCopy",
    "TrackState",
    "TrackType",
    "message_copies",
    "message_track",
    "messages_by_time",
    "store_addr",
]


def store_addr(record: MessageRecord) -> str:
    """``host:port`` of the broker that stored ``record`` (its store host)."""
    host, port = record.store_host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def messages_by_time(
    client: AdminClient, topic: str, begin_ms: int, end_ms: int, limit: int = 200
) -> tuple[list[MessageRecord], bool]:
    """The messages of ``topic`` stored between ``begin_ms`` and ``end_ms`` (inclusive), newest
    first, at most ``limit``; the flag says whether more matched. Each queue is read from the
    offset its broker finds for ``begin_ms`` until its end or a message past ``end_ms``."""
    if end_ms < begin_ms:
        raise AdminError(f"the time range ends ({end_ms}) before it begins ({begin_ms})")
    route = await client.route(topic)
    found: list[MessageRecord] = []
    for data in sorted(route.broker_datas, key=lambda d: d.broker_name):
        addr = select_broker_addr(data)
        if addr is None:
            continue
        queues = next((q.read_queue_nums for q in route.queue_datas if q.broker_name == data.broker_name), 0)
        for queue_id in range(queues):
            mq = MessageQueue(topic, data.broker_name, queue_id)
            low = await queue_offset(client, addr, mq, begin_ms)
            high = await queue_offset(client, addr, mq, None)
            # one more than asked for tells whether more matched; a queue never needs more than that
            records = await pull_range(client, addr, mq, low, min(high, low + limit + 1))
            found.extend(r for r in records if begin_ms <= r.store_timestamp <= end_ms)
    found.sort(key=lambda r: (r.store_timestamp, r.broker_name, r.queue_id, r.queue_offset), reverse=True)
    return found[:limit], len(found) > limit


class TrackType(enum.Enum):
    """RocketMQ's ``TrackType``, as ``messageTrackDetail`` reports it per group."""

    CONSUMED = "CONSUMED"
    NOT_CONSUME_YET = "NOT_CONSUME_YET"
    NOT_ONLINE = "NOT_ONLINE"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True, slots=True)
class TrackState:
    group: str
    track: TrackType
    online_clients: int
    detail: str = ""


async def message_track(client: AdminClient, record: MessageRecord) -> list[TrackState]:
    """For every group that consumes the record's topic: whether its committed offset in the
    record's queue has passed the record (CONSUMED), not yet (NOT_CONSUME_YET, or NOT_ONLINE
    when no client of the group is connected), or could not be told (UNKNOWN, with why)."""
    addr = store_addr(record)
    groups = await query_topic_consume_by_who(client, addr, record.topic)
    broker_name = record.broker_name or (await client.cluster_info()).broker_name_of(addr) or ""
    mq = MessageQueue(record.topic, broker_name, record.queue_id)
    out: list[TrackState] = []
    for group in sorted(groups):
        try:
            online = len((await client.examine_consumer_connection(group)).connections)
        except AdminError:
            online = 0
        try:
            stats = await client.consume_stats(addr, group, record.topic)
        except AdminError as exc:
            out.append(TrackState(group, TrackType.UNKNOWN, online, str(exc)))
            continue
        wrapper = stats.offset_table.get(mq)
        if wrapper is not None and wrapper.consumer_offset > record.queue_offset:
            out.append(TrackState(group, TrackType.CONSUMED, online))
        elif online:
            out.append(TrackState(group, TrackType.NOT_CONSUME_YET, online))
        else:
            out.append(TrackState(group, TrackType.NOT_ONLINE, online))
    return out


@dataclass(frozen=True, slots=True)
class MessageCopy:
    """A copy of a message in a group's retry (``%RETRY%``) or dead-letter (``%DLQ%``) topic."""

    group: str
    kind: str  # "retry" or "DLQ"
    record: MessageRecord


async def message_copies(client: AdminClient, record: MessageRecord, groups: list[str]) -> list[MessageCopy]:
    """The record's copies in each group's retry and DLQ topics (found on the UNIQ_KEY index by
    the record's message id; a copy also names it in ORIGIN_MESSAGE_ID), oldest first. Topics
    that do not exist are skipped."""
    key = record.properties.get(P.UNIQ_KEY)
    if not key:
        return []
    copies: list[MessageCopy] = []
    for group in groups:
        for kind, topic in (("retry", RETRY_PREFIX + group), ("DLQ", DLQ_PREFIX + group)):
            try:
                route = await client.route(topic)
            except AdminResponseError as exc:
                if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                    raise
                continue
            for data in route.broker_datas:
                addr = select_broker_addr(data)
                if addr is None:
                    continue
                result = await client.query_message(addr, topic, key, unique_key=True)
                copies.extend(
                    MessageCopy(group, kind, r)
                    for r in result.messages
                    if r.topic == topic and key in (r.properties.get(P.UNIQ_KEY), r.properties.get(P.ORIGIN_MESSAGE_ID))
                )
    copies.sort(key=lambda c: c.record.store_timestamp)
    return copies
