"""What ``mqadmin statsAll`` asks a broker besides consumeStats: VIEW_BROKER_STATS_DATA (one
stats item's minute / hour / day figures: TOPIC_PUT_NUMS by topic, GROUP_GET_NUMS by
``topic@group``; the counting is in broker/stats.py) and QUERY_TOPIC_CONSUME_BY_WHO (the
groups consuming a topic: online subscribers and groups with committed offsets)."""

from __future__ import annotations

from ledgermq.broker.context import Broker
from ledgermq.net.server import RequestContext
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_admin import QueryTopicConsumeByWhoRequestHeader, ViewBrokerStatsDataRequestHeader


def view_broker_stats_data(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = ViewBrokerStatsDataRequestHeader.decode(cmd)
    name, key = hdr.stats_name, hdr.stats_key
    found = broker.stats.key_stats(name, key)
    if found is None:  # RocketMQ's remark, word for word (mqadmin statsAll skips such keys)
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
    minute, hour, day = found
    body = {"statsDay": day.to_json(), "statsHour": hour.to_json(), "statsMinute": minute.to_json()}
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(body))


def query_topic_consume_by_who(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    topic = QueryTopicConsumeByWhoRequestHeader.decode(cmd).topic
    groups = {g for g, info in broker.consumers.groups.items() if topic in info.subscriptions}
    groups.update(broker.offsets.groups_of_topic(topic))
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps({"groupList": sorted(groups)}))


PROCESSORS = {
    RequestCode.VIEW_BROKER_STATS_DATA: view_broker_stats_data,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: query_topic_consume_by_who,
}
