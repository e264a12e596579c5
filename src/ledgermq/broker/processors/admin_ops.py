"""Operator requests beyond topic/group CRUD (RocketMQ 4.9.7 ``AdminBrokerProcessor`` /
``Broker2Client``): producer connections, resetting a group's offsets by time, and changing
broker settings at runtime.

INVOKE_BROKER_TO_RESET_OFFSET differs from RocketMQ in one way on purpose: the broker also
writes the new offsets into its own offset table, so a group whose consumers are offline is
reset too (RocketMQ answers CONSUMER_NOT_ONLINE and leaves that to the admin tool). Live
consumers are told with RESET_CONSUMER_CLIENT_OFFSET, as RocketMQ does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from ledgermq.broker.context import Broker
from ledgermq.broker.live_config import ConfigChangeRefused, apply_changes, parse_properties
from ledgermq.broker.processors.admin import bump_config_version, config_properties
from ledgermq.errors import RemoteProtocolError
from ledgermq.net.connection import Connection
from ledgermq.net.server import RequestContext
from ledgermq.protocol import fastjson
from ledgermq.protocol.admin_body import MessageQueue, mq_table
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_admin import (
    ConsumeMessageDirectlyResultRequestHeader,
    GetProducerConnectionListRequestHeader,
    ResetOffsetRequestHeader,
)
from ledgermq.protocol.msgid import decode_offset_msg_id

log = logging.getLogger(__name__)

NOTIFY_TIMEOUT_S = 30.0
_NOTIFYING: set[asyncio.Future[None]] = set()  # notifications under way (kept referenced)
RESET_TO_MAX = -1  # timestamp -1: to the end of each queue (RocketMQ's "now" shortcut)


def get_producer_connection_list(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    group = GetProducerConnectionListRequestHeader.decode(cmd).producer_group
    channels = broker.producers.groups.get(group)
    if not channels:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
    connections = [
        {"clientAddr": ch.connection.peer, "clientId": ch.client_id, "language": ch.language, "version": ch.version}
        for ch in sorted(channels.values(), key=lambda c: (c.client_id, c.connection.peer))
    ]
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps({"connectionSet": connections}))


def reset_offsets(broker: Broker, group: str, topic: str, timestamp: int, force: bool) -> dict[int, int]:
    """``Broker2Client.resetOffset``'s choice per queue: the offset of ``timestamp`` (the
    queue's end for -1), but without ``force`` never later than what the group committed.
    The chosen offsets are committed in the broker's table; returns them by queue id."""
    tc = broker.topics.get(topic)
    assert tc is not None
    store = broker.store
    chosen: dict[int, int] = {}
    for queue_id in range(tc.write_queue_nums):
        committed = broker.offsets.query(group, topic, queue_id)
        if timestamp == RESET_TO_MAX:
            target = max(0, store.max_offset_in_queue(topic, queue_id))
        else:
            target = max(0, store.offset_in_queue_by_time(topic, queue_id, timestamp))
        offset = target if force or committed < 0 or target < committed else committed
        broker.offsets.commit(group, topic, queue_id, offset)
        chosen[queue_id] = offset
    return chosen


def invoke_broker_to_reset_offset(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = ResetOffsetRequestHeader.decode(cmd)
    topic, group, timestamp, force = hdr.topic, hdr.group, hdr.timestamp, hdr.is_force
    if broker.topics.get(topic) is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"[reset-offset] request failed, the topic:{topic} not exist")
    chosen = reset_offsets(broker, group, topic, timestamp, force)
    name = broker.config.broker_name
    body = fastjson.dumps({"offsetTable": mq_table({MessageQueue(topic, name, q): o for q, o in chosen.items()})})
    log.warning("resetOffset from %s: %s@%s to %s (force=%s): %s", ctx.peer, group, topic, timestamp, force, chosen)
    info = broker.consumers.groups.get(group)
    if info is not None and info.channels:
        # Told in the background: a consumer resets only once its running listeners finish,
        # which may take longer than the admin tool waits for this answer.
        header = hdr.ext()
        task = asyncio.ensure_future(_notify_reset(list(info.channels), group, header, body))
        _NOTIFYING.add(task)
        task.add_done_callback(_NOTIFYING.discard)
    return cmd.response(ResponseCode.SUCCESS, body=body)


async def _notify_reset(conns: list[Connection], group: str, header: dict[str, str], body: bytes) -> None:
    """RESET_CONSUMER_CLIENT_OFFSET to each live consumer of the group; failures are logged
    (the broker's table is already reset, so a consumer that missed it reads from there
    after its next rebalance)."""
    code = RequestCode.RESET_CONSUMER_CLIENT_OFFSET
    answers = await asyncio.gather(
        *(c.request(RemotingCommand.request(code, header, body), NOTIFY_TIMEOUT_S) for c in conns),
        return_exceptions=True,
    )
    for conn, answer in zip(conns, answers, strict=True):
        if isinstance(answer, BaseException) or answer.code != ResponseCode.SUCCESS:
            log.warning("resetOffset: consumer %s of %s did not accept the reset: %s", conn.peer, group, answer)


DIRECT_CONSUME_TIMEOUT_S = 10.0  # the consumer runs its listener before it answers


async def consume_message_directly(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    """CONSUME_MESSAGE_DIRECTLY from an admin tool (mqadmin queryMsgByUniqueKey -g -d): the
    broker reads the message at the offset id's commit-log offset and hands it to one live
    consumer of the group, whose answer (ConsumeMessageDirectlyResult) goes back as is, as
    RocketMQ's AdminBrokerProcessor.consumeMessageDirectly does."""
    hdr = ConsumeMessageDirectlyResultRequestHeader.decode(cmd)
    group, client_id, msg_id = hdr.consumer_group, hdr.client_id, hdr.msg_id
    try:
        _host, offset = decode_offset_msg_id(msg_id)
    except RemoteProtocolError as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))
    record = broker.store.look_message_by_offset(offset)
    if record is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
    info = broker.consumers.groups.get(group)
    channel = next((ch for ch in info.channels.values() if ch.client_id == client_id), None) if info else None
    if channel is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
    ext = dataclasses.replace(hdr, broker_name=broker.config.broker_name).ext()
    forward = RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, ext, record)
    try:
        answer = await channel.connection.request(forward, DIRECT_CONSUME_TIMEOUT_S)
    except Exception as exc:  # a timeout or a closed connection: the tool hears why
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"consumer {client_id} did not answer: {exc}")
    return cmd.response(answer.code, answer.remark, body=answer.body)


def update_broker_config(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    """Applies only keys the broker honours live (``broker.live_config``); refuses the rest."""
    try:
        props = parse_properties(cmd.body.decode("utf-8"))
        new = apply_changes(broker.config, props, set(config_properties(broker)))
    except (ConfigChangeRefused, UnicodeDecodeError) as exc:
        log.warning("updateBrokerConfig from %s refused: %s", ctx.peer, exc)
        return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))
    if broker.host is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, "this broker cannot change its config at runtime")
    log.warning("updateBrokerConfig from %s: %s", ctx.peer, props)
    broker.host.apply_config(new)
    bump_config_version(broker)
    return cmd.response(ResponseCode.SUCCESS)


PROCESSORS = {
    RequestCode.GET_PRODUCER_CONNECTION_LIST: get_producer_connection_list,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: invoke_broker_to_reset_offset,
    RequestCode.CONSUME_MESSAGE_DIRECTLY: consume_message_directly,
    RequestCode.UPDATE_BROKER_CONFIG: update_broker_config,
}
