"""``list_user_topics`` (client/instance/topics.py): the name servers' topic list without the
broker's own topics, retry/DLQ topics or cluster and broker names; a refusal or an answer
that does not decode is a client error, never an empty or partial list."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from ledgermq.client import Message, Producer
from ledgermq.client.errors import MQBrokerError, MQClientError, MQConnectError
from ledgermq.client.instance.client_instance import ClientInstance, InstanceSettings
from ledgermq.client.instance.topics import is_system_topic, list_user_topics
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from tests.admin.servers import free_port, poll
from tests.client.cluster import CLUSTER, running
from tests.client.consumer_cluster import aio


class FakeNamesrv:
    """Answers GET_ALL_TOPIC_LIST_FROM_NAMESERVER and GET_BROKER_CLUSTER_INFO from canned replies."""

    def __init__(self, replies: dict[int, RemotingCommand]) -> None:
        self.replies = replies
        self.asked: list[int] = []

    async def invoke(self, code: int, ext: dict[str, object]) -> RemotingCommand:
        self.asked.append(code)
        return self.replies[code]


def ok(body: object) -> RemotingCommand:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return RemotingCommand(code=ResponseCode.SUCCESS, body=raw)


def answers(topics: object, cluster: object) -> FakeNamesrv:
    return FakeNamesrv(
        {
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: ok({"topicList": topics}),
            RequestCode.GET_BROKER_CLUSTER_INFO: ok(cluster),
        }
    )


CLUSTER_INFO = {
    "brokerAddrTable": {"broker-a": {"cluster": "C1", "brokerName": "broker-a", "brokerAddrs": {"0": "h:1"}}},
    "clusterAddrTable": {"C1": ["broker-a"]},
}


def test_system_retry_dlq_cluster_and_broker_names_are_left_out() -> None:
    listed = [
        "Orders",
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "rmq_sys_anything",
        "%RETRY%group",
        "%DLQ%group",
        "C1",
        "broker-a",
        "Clicks",
        "OFFSET_MOVED_EVENT",
    ]
    ns = answers(listed, CLUSTER_INFO)
    assert asyncio.run(list_user_topics(ns)) == ["Clicks", "Orders"]
    assert ns.asked == [RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, RequestCode.GET_BROKER_CLUSTER_INFO]


def test_is_system_topic() -> None:
    assert is_system_topic("TBW102") and is_system_topic("%RETRY%g") and is_system_topic("%DLQ%g")
    assert not is_system_topic("Orders") and not is_system_topic("retry")


def test_no_broker_registered_lists_every_topic_but_system_ones() -> None:
    # a name server with no broker answers the cluster info with an empty body
    ns = FakeNamesrv(
        {
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: ok({"topicList": ["B", "A", "TBW102"]}),
            RequestCode.GET_BROKER_CLUSTER_INFO: RemotingCommand(code=ResponseCode.SUCCESS),
        }
    )
    assert asyncio.run(list_user_topics(ns)) == ["A", "B"]


def test_a_refusal_is_a_broker_error() -> None:
    ns = answers(["A"], CLUSTER_INFO)
    ns.replies[RequestCode.GET_BROKER_CLUSTER_INFO] = RemotingCommand(
        code=ResponseCode.SYSTEM_ERROR, remark="no cluster info"
    )
    with pytest.raises(MQBrokerError) as info:
        asyncio.run(list_user_topics(ns))
    assert info.value.code == ResponseCode.SYSTEM_ERROR and "no cluster info" in str(info.value)


@pytest.mark.parametrize(
    ("topics_body", "cluster", "what"),
    [
        (b"{not json", CLUSTER_INFO, "topic list does not decode"),
        ({"topicList": {"A": 1}}, CLUSTER_INFO, "not a list"),
        ({"topicList": ["A"]}, {"brokerAddrTable": ["broker-a"]}, "broker table"),
        ([1, 2], CLUSTER_INFO, "not an object"),
    ],
)
def test_an_answer_that_does_not_decode_is_a_client_error(topics_body: object, cluster: object, what: str) -> None:
    ns = FakeNamesrv(
        {
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: ok(topics_body),
            RequestCode.GET_BROKER_CLUSTER_INFO: ok(cluster),
        }
    )
    with pytest.raises(MQClientError, match=what):
        asyncio.run(list_user_topics(ns))


@aio(60)
async def test_against_a_real_name_server(tmp_path: Path) -> None:
    """A real name server and broker: TBW102, the cluster and the broker name are registered
    topics (autoCreateTopicEnable); only the topic a producer created is listed."""
    async with running(tmp_path) as cluster:
        async with Producer("pg-topics", cluster.ns_addr) as producer:
            await producer.send(Message("UserTopicA", b"x"))
        client = ClientInstance(InstanceSettings(namesrv_addrs=cluster.ns_addr, instance_name="topics-test"))
        await client.start()
        try:

            async def listed() -> list[str] | None:
                topics = await list_user_topics(client.namesrv)
                return topics if topics else None

            assert await poll("the new topic's registration", listed) == ["UserTopicA"]
            raw = cluster.namesrv.routes  # the name server does list the hidden names
            assert raw.route("TBW102") is not None and raw.route(CLUSTER) is not None
        finally:
            await client.shutdown()


@aio(30)
async def test_no_name_server_reachable_is_a_connect_error(tmp_path: Path) -> None:
    client = ClientInstance(
        InstanceSettings(namesrv_addrs=f"127.0.0.1:{free_port()}", instance_name="topics-none", api_timeout=1.0)
    )
    await client.start()
    try:
        with pytest.raises(MQConnectError):
            await list_user_topics(client.namesrv)
    finally:
        await client.shutdown()
