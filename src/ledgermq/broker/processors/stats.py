"""VIEW_BROKER_STATS_DATA: one stats item's minute / hour / day figures (``mqadmin statsAll``
and ``brokerConsumeStats`` read TOPIC_PUT_NUMS by topic and GROUP_GET_NUMS by
``topic@group`` this way). The counting is in broker/stats.py."""

from __future__ import annotations

from ledgermq.broker.context import Broker
from ledgermq.net.server import RequestContext
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers import field


async def view_broker_stats_data(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    name, key = field(cmd, "statsName"), field(cmd, "statsKey")
    found = broker.stats.key_stats(name, key)
    if found is None:  # RocketMQ's remark, word for word (mqadmin statsAll skips such keys)
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
    minute, hour, day = found
    body = {"statsDay": day.to_json(), "statsHour": hour.to_json(), "statsMinute": minute.to_json()}
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(body))


PROCESSORS = {RequestCode.VIEW_BROKER_STATS_DATA: view_broker_stats_data}
