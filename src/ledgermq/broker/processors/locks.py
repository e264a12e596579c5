"""LOCK_BATCH_MQ and UNLOCK_BATCH_MQ (orderly consumers), as RocketMQ 4.9.7's
AdminBrokerProcessor answers them.

Request body (both codes; the C++ client ends it with a newline)::

    {"clientId":"ip@pid","consumerGroup":"cg","mqSet":[{"brokerName":"b","queueId":0,"topic":"T"}]}

LOCK answers SUCCESS with ``{"lockOKMQSet":[...]}``: the queues the client holds now, with
``queueId`` a JSON number (the C++ client reads it with asInt). UNLOCK answers SUCCESS
with no body. The lock table is the broker's ``RebalanceLockManager`` (``broker.locks``,
60 s lifetime as RocketMQ's default).
"""

from __future__ import annotations

from typing import Any

from ledgermq.broker.context import Broker
from ledgermq.net.server import RequestContext
from ledgermq.protocol import fastjson
from ledgermq.protocol.admin_body import MessageQueue, mq_list, mq_set
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand


def _decode(cmd: RemotingCommand) -> tuple[str, str, set[MessageQueue]] | RemotingCommand:
    if not cmd.body:
        return cmd.response(ResponseCode.SYSTEM_ERROR, "the request has no body (clientId, consumerGroup, mqSet)")
    doc: Any = fastjson.loads(cmd.body)
    if not isinstance(doc, dict):
        return cmd.response(ResponseCode.SYSTEM_ERROR, "the request body is not a JSON object")
    group, client_id = doc.get("consumerGroup"), doc.get("clientId")
    if not isinstance(group, str) or not group or not isinstance(client_id, str) or not client_id:
        return cmd.response(ResponseCode.SYSTEM_ERROR, "the request body lacks consumerGroup or clientId")
    return group, client_id, mq_set(doc.get("mqSet"))


def lock_batch_mq(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    decoded = _decode(cmd)
    if isinstance(decoded, RemotingCommand):
        return decoded
    group, client_id, mqs = decoded
    locked = broker.locks.try_lock_batch(group, mqs, client_id)
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps({"lockOKMQSet": mq_list(locked)}))


def unlock_batch_mq(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    decoded = _decode(cmd)
    if isinstance(decoded, RemotingCommand):
        return decoded
    group, client_id, mqs = decoded
    broker.locks.unlock_batch(group, mqs, client_id)
    return cmd.response(ResponseCode.SUCCESS)


PROCESSORS = {
    RequestCode.LOCK_BATCH_MQ: lock_batch_mq,
    RequestCode.UNLOCK_BATCH_MQ: unlock_batch_mq,
}
