"""Queue and message lookups: max/min offset, offset by time, earliest store time,
VIEW_MESSAGE_BY_ID and QUERY_MESSAGE (by key)."""

from __future__ import annotations

from ledgermq.broker.context import Broker
from ledgermq.errors import CorruptRangeError
from ledgermq.net.server import RequestContext
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_pull import (
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    OffsetResponseHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    SearchOffsetRequestHeader,
    ViewMessageRequestHeader,
)

DEFAULT_QUERY_MAX_NUM = 32


def max_offset(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = GetMaxOffsetRequestHeader.decode(cmd)
    offset = broker.store.max_offset_in_queue(hdr.topic, hdr.queue_id)
    return cmd.response(ResponseCode.SUCCESS, ext_fields=OffsetResponseHeader(offset).ext())


def min_offset(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = GetMinOffsetRequestHeader.decode(cmd)
    offset = broker.store.min_offset_in_queue(hdr.topic, hdr.queue_id)
    return cmd.response(ResponseCode.SUCCESS, ext_fields=OffsetResponseHeader(offset).ext())


def search_offset(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = SearchOffsetRequestHeader.decode(cmd)
    offset = broker.store.offset_in_queue_by_time(hdr.topic, hdr.queue_id, hdr.timestamp)
    return cmd.response(ResponseCode.SUCCESS, ext_fields=OffsetResponseHeader(offset).ext())


def earliest_time(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = GetEarliestMsgStoretimeRequestHeader.decode(cmd)
    ts = broker.store.earliest_message_time(hdr.topic, hdr.queue_id)
    return cmd.response(ResponseCode.SUCCESS, ext_fields=GetEarliestMsgStoretimeResponseHeader(ts).ext())


def view_message(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    offset = ViewMessageRequestHeader.decode(cmd).offset
    try:
        record = broker.store.look_message_by_offset(offset)
    except CorruptRangeError as exc:  # refused, never served
        return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))
    if record is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
    return cmd.response(ResponseCode.SUCCESS, body=record)


def query_message(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = QueryMessageRequestHeader.decode(cmd)
    max_num = DEFAULT_QUERY_MAX_NUM if hdr.by_unique_key else hdr.max_num
    try:
        found = broker.store.query_message(hdr.topic, hdr.key, max_num, hdr.begin_timestamp, hdr.end_timestamp)
    except CorruptRangeError as exc:  # a record the index names is corrupt: no silent gap
        return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))
    ext = QueryMessageResponseHeader(found.index_last_update_timestamp, found.index_last_update_phy_offset).ext()
    if not found.messages:
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", ext)
    return cmd.response(ResponseCode.SUCCESS, None, ext, b"".join(found.messages))


PROCESSORS = {
    RequestCode.GET_MAX_OFFSET: max_offset,
    RequestCode.GET_MIN_OFFSET: min_offset,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: search_offset,
    RequestCode.GET_EARLIEST_MSG_STORETIME: earliest_time,
    RequestCode.VIEW_MESSAGE_BY_ID: view_message,
    RequestCode.QUERY_MESSAGE: query_message,
}
