"""A topic auto-created by a send must be routable by the name server once the send is answered.

RocketMQ 4.9's ``TopicConfigManager.createTopicInSendMessageMethod`` calls ``registerBrokerAll(false, true, true)``
inline, before the send is answered, so the name server has the new topic by the time the producer sees the
answer. The C++ client depends on that in practice: a consumer started right after the first send asks the name
server for the route; on TOPIC_NOT_EXIST it knows no broker, sends no HEART_BEAT until its 30 s timer, and every
rebalance until then fails with "no consumer for this group" -- it consumes nothing for about 30 s.

The requests below are the ones the C++ client (rocketmq wheel 0.4.4) sends: SEND_MESSAGE (10) with its header,
then GET_ROUTEINFO_BY_TOPIC (105) on the name server.
"""

from __future__ import annotations

import asyncio
import time

from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from tests.compat.cluster import Cluster

ROUNDS = 20


def cpp_send_header(topic: str) -> dict[str, object]:
    return {
        "producerGroup": "PG_compat_route",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": "WAIT\x01true\x02",
        "reconsumeTimes": "0",
        "unitMode": "0",
        "batch": "0",
    }


def test_auto_created_topic_is_routable_when_the_send_is_answered(cluster: Cluster) -> None:
    async def rounds() -> list[str]:
        client = RemotingClient()
        missing = []
        try:
            for i in range(ROUNDS):
                topic = f"CompatRoute{i}"
                req = RemotingCommand.request(RequestCode.SEND_MESSAGE, cpp_send_header(topic), b"hello")
                sent = await client.invoke(cluster.broker_addr, req, 5.0)
                assert sent.code == ResponseCode.SUCCESS, sent
                ask = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
                answer = await client.invoke(cluster.namesrv_addr, ask, 5.0)
                if answer.code != ResponseCode.SUCCESS:
                    missing.append(f"{topic}: {answer.code} {answer.remark}")
        finally:
            await client.close()
        return missing

    missing = asyncio.run(rounds())
    assert not missing, f"{len(missing)}/{ROUNDS} topics not routable right after their first send: {missing}"
