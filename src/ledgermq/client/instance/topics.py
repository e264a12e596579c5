"""Topic listings from the name servers, for tools that choose topics by name (the Spark
source's ``subscribePattern``): which user topics exist, without the broker's own.

RocketMQ's name server lists every topic any broker registered, including the system
topics (``TopicValidator``), retry and DLQ topics of consumer groups, and one topic per
cluster name and per broker name (``autoCreateTopicEnable`` brokers register those). A
user who asks for "the topics" means none of these, so they are left out here once rather
than by every caller.

The name-server client is taken by shape (``invoke(code, ext)``), so this module does not
depend on where ``NameServerClient`` is defined; ``ClientInstance.namesrv`` is one.
"""

from __future__ import annotations

from typing import Any, Protocol

from ledgermq.client.errors import MQBrokerError, MQClientError
from ledgermq.errors import ProtocolError
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand

__all__ = ["SYSTEM_TOPICS", "SYSTEM_TOPIC_PREFIXES", "NameServerInvoker", "is_system_topic", "list_user_topics"]

# The broker's own topics (RocketMQ TopicValidator's system topics in 4.9.x).
SYSTEM_TOPICS: frozenset[str] = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "OFFSET_MOVED_EVENT",
        "SELF_TEST_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    }
)
# Retry and dead-letter topics of consumer groups, and the system-topic prefixes.
SYSTEM_TOPIC_PREFIXES: tuple[str, ...] = ("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_")


class NameServerInvoker(Protocol):
    """What this module needs of a name-server client: one request, failover its own."""

    async def invoke(self, code: int, ext: dict[str, object]) -> RemotingCommand: ...


def is_system_topic(topic: str) -> bool:
    """A system, retry or DLQ topic (not a cluster or broker name: those need the cluster info)."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIXES)


async def _ask(namesrv: NameServerInvoker, code: int, what: str) -> Any:
    resp = await namesrv.invoke(code, {})
    if resp.code != ResponseCode.SUCCESS:
        raise MQBrokerError(resp.code, resp.remark, "name server")
    if not resp.body:
        return {}
    try:
        return fastjson.loads(resp.body)
    except ProtocolError as exc:
        raise MQClientError(f"the name server's {what} does not decode: {exc}") from None


def _names(table: object, what: str) -> set[str]:
    if table is None:
        return set()
    if not isinstance(table, dict):
        raise MQClientError(f"the name server's {what} is not an object")
    return {str(name) for name in table}


async def list_user_topics(namesrv: NameServerInvoker) -> list[str]:
    """Every user topic the name servers know, sorted: GET_ALL_TOPIC_LIST_FROM_NAMESERVER
    minus system, retry and DLQ topics and minus the cluster and broker names of
    GET_BROKER_CLUSTER_INFO. Raises ``MQConnectError`` when no name server answers,
    ``MQBrokerError`` when one refuses, ``MQClientError`` when an answer does not decode."""
    listed = await _ask(namesrv, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, "topic list")
    cluster = await _ask(namesrv, RequestCode.GET_BROKER_CLUSTER_INFO, "cluster info")
    if not isinstance(listed, dict) or not isinstance(cluster, dict):
        raise MQClientError("the name server's topic list or cluster info is not an object")
    topic_list = listed.get("topicList") or []
    if not isinstance(topic_list, list):
        raise MQClientError("the name server's topic list is not a list")
    hidden = _names(cluster.get("brokerAddrTable"), "broker table") | _names(
        cluster.get("clusterAddrTable"), "cluster table"
    )
    topics = (str(t) for t in topic_list)
    return sorted(t for t in topics if t not in hidden and not is_system_topic(t))
