"""Queue and message lookups: max/min offset, offset by time, earliest store time,
VIEW_MESSAGE_BY_ID and QUERY_MESSAGE (by key)."""

from __future__ import annotations

from ledgermq.broker.context import Broker
from ledgermq.net.server import RequestContext
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers import field, int_field

DEFAULT_QUERY_MAX_NUM = 32


async def max_offset(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    offset = broker.store.max_offset_in_queue(field(cmd, "topic"), int_field(cmd, "queueId", bits=32))
    return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": offset})


async def min_offset(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    offset = broker.store.min_offset_in_queue(field(cmd, "topic"), int_field(cmd, "queueId", bits=32))
    return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": offset})


async def search_offset(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    offset = broker.store.offset_in_queue_by_time(
        field(cmd, "topic"), int_field(cmd, "queueId", bits=32), int_field(cmd, "timestamp")
    )
    return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": offset})


async def earliest_time(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    ts = broker.store.earliest_message_time(field(cmd, "topic"), int_field(cmd, "queueId", bits=32))
    return cmd.response(ResponseCode.SUCCESS, ext_fields={"timestamp": ts})


async def view_message(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    offset = int_field(cmd, "offset")
    record = broker.store.look_message_by_offset(offset)
    if record is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
    return cmd.response(ResponseCode.SUCCESS, body=record)


async def query_message(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    topic, key = field(cmd, "topic"), field(cmd, "key")
    max_num = int_field(cmd, "maxNum", bits=32)
    if cmd.ext_fields.get("_UNIQUE_KEY_QUERY") == "true":
        max_num = DEFAULT_QUERY_MAX_NUM
    found = broker.store.query_message(
        topic, key, max_num, int_field(cmd, "beginTimestamp"), int_field(cmd, "endTimestamp")
    )
    ext = {
        "indexLastUpdateTimestamp": found.index_last_update_timestamp,
        "indexLastUpdatePhyoffset": found.index_last_update_phy_offset,
    }
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
