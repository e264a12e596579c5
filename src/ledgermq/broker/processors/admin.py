"""Admin requests (RocketMQ 4.9.7 ``AdminBrokerProcessor``): topics, subscription groups,
offsets, statistics, broker config and runtime info; what ``mqadmin`` and slaves send.

Bodies follow the Java JSON shapes (docs/formats.md §3.6). Tables keyed by MessageQueue
(GET_TOPIC_STATS_INFO, GET_CONSUME_STATS) are written as fastjson writes them, with the
queue objects inline as keys, which is what the Java admin tools decode; see
``ledgermq.protocol.admin_body``.

Changes (topic and group create/delete) are refused on a slave with RocketMQ's remark.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import math
import shutil
from pathlib import Path
from typing import Any

from ledgermq.broker.context import Broker
from ledgermq.broker.stats import stats_runtime_info
from ledgermq.broker.subscriptions import SubscriptionGroupConfig
from ledgermq.broker.topics import (
    AUTO_CREATE_TOPIC,
    BENCHMARK_TOPIC,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from ledgermq.errors import CorruptRangeError, RemoteProtocolError
from ledgermq.net.server import RequestContext
from ledgermq.protocol import fastjson
from ledgermq.protocol.admin_body import MessageQueue, mq_table
from ledgermq.protocol.codes import CURRENT_VERSION, RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_admin import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetBrokerConfigResponseHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetTopicStatsInfoRequestHeader,
)
from ledgermq.protocol.message import decode_record
from ledgermq.protocol.names import TOPIC_MAX_LENGTH, TOPIC_NAME_PATTERN
from ledgermq.protocol.route import TopicConfig

log = logging.getLogger(__name__)

CURRENT_VERSION_DESC = "V4_9_7"
SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        TRANS_HALF_TOPIC,
        "RMQ_SYS_TRACE_TOPIC",
        TRANS_OP_HALF_TOPIC,
        "TRANS_CHECK_MAX_TIME_TOPIC",
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
MAX_TOPIC_LENGTH = TOPIC_MAX_LENGTH
SLAVE_REMARK = "Can't modify topic or subscription group from slave broker, please execute it from master broker."


# -- helpers ---------------------------------------------------------------------------
def _refused_on_slave(broker: Broker, cmd: RemotingCommand) -> RemotingCommand | None:
    if broker.store_config.is_slave:
        return cmd.response(ResponseCode.SYSTEM_ERROR, SLAVE_REMARK)
    return None


def _topic_problem(broker: Broker, topic: str) -> str | None:
    """TopicValidator.validateTopic + isSystemTopic, with RocketMQ's remarks."""
    if not topic.strip():
        return "The specified topic is blank."
    if not TOPIC_NAME_PATTERN.fullmatch(topic):
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(topic) > MAX_TOPIC_LENGTH:
        return "The specified topic is longer than topic max length."
    cfg = broker.config
    dynamic = {cfg.cluster_name, cfg.broker_name, f"{cfg.cluster_name}_{REPLY_TOPIC_POSTFIX}"}
    if topic in SYSTEM_TOPICS or topic in dynamic or topic.startswith(SYSTEM_TOPIC_PREFIX):
        return f"The topic[{topic}] is conflict with system topic."
    return None


def _java_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _human_bytes(n: int) -> str:
    """MixAll.humanReadableByteCount(n, false)."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n) / math.log(1024)), 6)
    return f"{n / 1024**exp:.1f} {'KMGTPE'[exp - 1]}iB"


def _disk_ratio(path: Path) -> str:
    """Used fraction of the partition that holds (or will hold) ``path``; -1 if unknown."""
    while not path.exists() and path.parent != path:
        path = path.parent  # not created before the first message: same partition as its parent
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return "-1.0"
    return str(usage.used / usage.total if usage.total else -1.0)


# -- topics ----------------------------------------------------------------------------
async def update_and_create_topic(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    refused = _refused_on_slave(broker, cmd)
    if refused is not None:
        return refused
    hdr = CreateTopicRequestHeader.decode(cmd)
    topic = hdr.topic
    problem = _topic_problem(broker, topic)
    if problem is not None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, problem)
    read_nums, write_nums = hdr.read_queue_nums, hdr.write_queue_nums
    if read_nums < 0 or write_nums < 0:
        return cmd.response(ResponseCode.SYSTEM_ERROR, "readQueueNums and writeQueueNums must not be negative")
    filter_type = hdr.topic_filter_type or "SINGLE_TAG"
    if filter_type not in TOPIC_FILTER_TYPES:
        return cmd.response(
            ResponseCode.SYSTEM_ERROR,
            f"No enum constant org.apache.rocketmq.common.TopicFilterType.{filter_type}",
        )
    # As in 4.9.7 the `order` header is not stored: order topics are a name-server KV matter.
    tc = TopicConfig(
        topic,
        read_nums,
        write_nums,
        hdr.perm,
        filter_type,
        hdr.topic_sys_flag,
    )
    log.info("updateAndCreateTopic from %s: %s", ctx.peer, tc)
    broker.topics.update(tc)  # persists, bumps the data version, queues the increment
    # As RocketMQ answers only after registerIncrementBrokerData: the route exists when
    # the creator hears back. Concurrent creates wait for one shared increment.
    await broker.register_now()
    return cmd.response(ResponseCode.SUCCESS)


def delete_topic(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    """RocketMQ: deleteTopicConfig, then the store's cleanUnusedTopic. The store has no
    API to drop a topic's consume queues yet, so only the config goes: the queue files
    stay on disk (retention ages them out with the commit log) and a topic re-created
    under the same name continues their offsets instead of starting at 0."""
    refused = _refused_on_slave(broker, cmd)
    if refused is not None:
        return refused
    topic = DeleteTopicRequestHeader.decode(cmd).topic
    problem = _topic_problem(broker, topic)
    if problem is not None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, problem)
    if broker.topics.delete(topic):
        log.info("deleteTopic from %s: %s deleted", ctx.peer, topic)
    else:
        log.warning("deleteTopic from %s: %s does not exist", ctx.peer, topic)
    return cmd.response(ResponseCode.SUCCESS)


def get_all_topic_config(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    topics = broker.topics
    doc = {
        "dataVersion": topics.data_version.to_json(),
        "topicConfigTable": {name: tc.to_json() for name, tc in sorted(topics.table.items())},
    }
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(doc))


def get_topic_stats_info(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    topic = GetTopicStatsInfoRequestHeader.decode(cmd).topic
    tc = broker.topics.get(topic)
    if tc is None:
        return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
    store = broker.store
    table: dict[MessageQueue, dict[str, int]] = {}
    for queue_id in range(tc.write_queue_nums):
        low = max(0, store.min_offset_in_queue(topic, queue_id))
        high = max(0, store.max_offset_in_queue(topic, queue_id))
        last = store.message_store_timestamp(topic, queue_id, high - 1) if high > 0 else 0
        table[MessageQueue(topic, broker.config.broker_name, queue_id)] = {
            "lastUpdateTimestamp": last,
            "maxOffset": high,
            "minOffset": low,
        }
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps({"offsetTable": mq_table(table)}))


# -- runtime info and config -----------------------------------------------------------
def runtime_info(broker: Broker) -> dict[str, str]:
    """The KVTable of GET_BROKER_RUNTIME_INFO (what `mqadmin brokerStatus` prints).

    Message counters (broker/stats.py): gets are counted since boot with snapshots at
    midnight, as RocketMQ's BrokerStats does; ``msgPutTotalTodayNow`` stays the number of
    consume-queue entries in the store (all messages kept, since the store was created:
    ``bench scale`` relies on it), its morning snapshots the same figure at midnight. The
    TPS triples are 10 s / 1 min / 10 min rates of puts and of pulls.
    """
    store = broker.store
    info = dict(store.runtime_info())
    stored = sum(cq.max_offset for cq in store.queues.all())
    earliest = -1
    try:  # the first record may be in a damaged range (CorruptRangeError): no time then
        first = store.look_message_by_offset(store.min_phy_offset)
        if first is not None:
            earliest = decode_record(first, check_crc=False).store_timestamp
    except (RemoteProtocolError, CorruptRangeError):
        earliest = -1
    commitlog_dir = Path(broker.store_config.commitlog_path)
    root = Path(broker.store_config.root_dir)
    try:
        usage = shutil.disk_usage(root)
        capacity = f"Total : {_human_bytes(usage.total)}, Free : {_human_bytes(usage.free)}."
    except OSError:
        capacity = ""
    info.update(
        {
            "brokerVersionDesc": CURRENT_VERSION_DESC,
            "brokerVersion": str(CURRENT_VERSION),
            **stats_runtime_info(broker.stats, stored),
            "sendThreadPoolQueueSize": "0",
            "pullThreadPoolQueueSize": "0",
            "queryThreadPoolQueueSize": "0",
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "queryThreadPoolQueueHeadWaitTimeMills": "0",
            "pageCacheLockTimeMills": "0",
            "earliestMessageTimeStamp": str(earliest),
            "startAcceptSendRequestTimeStamp": "0",
            "commitLogDiskRatio": _disk_ratio(commitlog_dir),
            "consumeQueueDiskRatio": _disk_ratio(Path(broker.store_config.consume_queue_path)),
            "remainHowManyDataToFlush": _human_bytes(max(0, store.max_phy_offset - store.flushed_phy_offset)),
        }
    )
    if capacity:
        info["commitLogDirCapacity"] = capacity
    if broker.controller is not None:  # controller mode: the role the controller gave (ledgermq's keys)
        st = broker.controller.status()
        info.update(
            {
                "controllerRole": str(st["role"]),
                "brokerControllerId": str(st["brokerControllerId"]),
                "masterEpoch": str(st["masterEpoch"]),
                "masterBrokerId": str(st["masterBrokerId"]),
                "syncStateSet": ",".join(str(i) for i in st["syncStateSet"]),  # type: ignore[attr-defined]
                "syncStateSetEpoch": str(st["syncStateSetEpoch"]),
                "controllerLeaseValidMillis": str(st["leaseValidMillis"]),
                "controllerRoleChanges": str(st["roleChanges"]),
                "controllerRoleChangeFailures": str(st["roleChangeFailures"]),
            }
        )
    if broker.timer is not None:  # RocketMQ 5's timer keys (docs/timers.md)
        info.update(broker.timer.runtime_info())
    return info


def get_broker_runtime_info(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps({"table": runtime_info(broker)}))


def config_properties(broker: Broker) -> dict[str, str]:
    """Every broker and store setting under its RocketMQ key."""
    props: dict[str, str] = {}
    configs: list[Any] = [broker.config, broker.store_config]
    if broker.controller is not None:  # RocketMQ 5 brokers report controllerAddr and the rest too
        configs.append(broker.controller.cfg)
    for cfg in configs:
        for f in dataclasses.fields(cfg):
            key = f.metadata.get("key")
            if key:
                props[key] = _java_value(getattr(cfg, f.name))
    if props.get("aclSecretKey"):
        props["aclSecretKey"] = "***"  # any signed client may read the config: never the secret
    return props


def bump_config_version(broker: Broker) -> None:
    """A runtime config change: GET_BROKER_CONFIG's version moves on, as RocketMQ's does."""
    broker.config_version = broker.config_version.next(broker.clock.wall_ms())


def get_broker_config(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    text = "".join(f"{k}={v}\n" for k, v in sorted(config_properties(broker).items()))
    version = fastjson.dumps(broker.config_version.to_json()).decode()
    return cmd.response(
        ResponseCode.SUCCESS, ext_fields=GetBrokerConfigResponseHeader(version).ext(), body=text.encode()
    )


def trigger_delete_files(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    log.warning("manual commit-log clean requested by %s", ctx.peer)
    broker.store.trigger_delete_files()
    return cmd.response(ResponseCode.SUCCESS)


# -- offsets ---------------------------------------------------------------------------
def get_all_consumer_offset(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(broker.offsets.to_json()))


def get_all_delay_offset(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    table = broker.schedule.to_json() if broker.schedule is not None else {"offsetTable": {}}
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(table))


# -- subscription groups ---------------------------------------------------------------
_GROUP_BOOL_KEYS = ("consumeEnable", "consumeFromMinEnable", "consumeBroadcastEnable", "notifyConsumerIdsChangedEnable")


def get_all_subscription_group(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(broker.subscriptions.to_json()))


def update_and_create_subscription_group(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    refused = _refused_on_slave(broker, cmd)
    if refused is not None:
        return refused
    if not cmd.body.strip():
        return cmd.response(ResponseCode.SUCCESS)  # RocketMQ: a null config changes nothing
    doc = fastjson.loads(cmd.body)
    if not isinstance(doc, dict):
        return cmd.response(ResponseCode.SYSTEM_ERROR, "the body is not a SubscriptionGroupConfig object")
    for key in _GROUP_BOOL_KEYS:  # fastjson also accepts "true"/"false" strings
        if isinstance(doc.get(key), str):
            doc[key] = doc[key].strip().lower() == "true"
    name = doc.get("groupName")
    if not isinstance(name, str) or not name.strip():
        return cmd.response(ResponseCode.SYSTEM_ERROR, "the subscription group config has no groupName")
    try:
        cfg = SubscriptionGroupConfig.from_json(doc)
    except (KeyError, TypeError, ValueError) as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"the subscription group config does not decode: {exc}")
    log.info("updateAndCreateSubscriptionGroup from %s: %s", ctx.peer, cfg)
    broker.subscriptions.update(cfg)
    return cmd.response(ResponseCode.SUCCESS)


def delete_subscription_group(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    refused = _refused_on_slave(broker, cmd)
    if refused is not None:
        return refused
    hdr = DeleteSubscriptionGroupRequestHeader.decode(cmd)
    group = hdr.group_name
    if not broker.subscriptions.delete(group):
        log.warning("deleteSubscriptionGroup from %s: %s does not exist", ctx.peer, group)
    if hdr.remove_offset:
        offsets = broker.offsets
        gone = [key for key in offsets.table if len(parts := key.split("@")) == 2 and parts[1] == group]
        for key in gone:
            offsets.remove(key)
        if gone:
            log.warning("deleteSubscriptionGroup: offsets of %s removed: %s", group, gone)
    return cmd.response(ResponseCode.SUCCESS)


# -- consumers -------------------------------------------------------------------------
def get_consume_stats(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    """ConsumeStats: per read queue brokerOffset / consumerOffset / lastTimestamp.

    Without a topic the group's topics come from its committed offsets. A topic the group
    does not subscribe to is skipped while the group has live subscriptions (RocketMQ).
    """
    hdr = GetConsumeStatsRequestHeader.decode(cmd)
    group, topic_arg = hdr.consumer_group, hdr.topic.strip()
    topics = [topic_arg] if topic_arg else broker.offsets.topics_of_group(group)
    info = broker.consumers.groups.get(group)
    store = broker.store
    table: dict[MessageQueue, dict[str, int]] = {}
    for topic in topics:
        tc = broker.topics.get(topic)
        if tc is None:
            log.warning("consumeStats: topic %s of group %s does not exist", topic, group)
            continue
        if info is not None and info.subscriptions and topic not in info.subscriptions:
            continue
        for queue_id in range(tc.read_queue_nums):
            broker_offset = max(0, store.max_offset_in_queue(topic, queue_id))
            consumer_offset = max(0, broker.offsets.query(group, topic, queue_id))
            last = store.message_store_timestamp(topic, queue_id, consumer_offset - 1) if consumer_offset > 0 else 0
            table[MessageQueue(topic, broker.config.broker_name, queue_id)] = {
                "brokerOffset": broker_offset,
                "consumerOffset": consumer_offset,
                "lastTimestamp": max(0, last),
            }
    consume_tps = sum(broker.stats.group_get_tps(t, group) for t in topics)  # GROUP_GET_NUMS, last minute
    body = fastjson.dumps({"consumeTps": consume_tps, "offsetTable": mq_table(table)})
    return cmd.response(ResponseCode.SUCCESS, body=body)


def get_consumer_connection_list(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    group = GetConsumerConnectionListRequestHeader.decode(cmd).consumer_group
    info = broker.consumers.groups.get(group)
    if info is None:
        return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
    connections = [
        {
            "clientAddr": ch.connection.peer,
            "clientId": ch.client_id,
            "language": ch.language,
            "version": ch.version,
        }
        for ch in sorted(info.channels.values(), key=lambda c: (c.client_id, c.connection.peer))
    ]
    doc = {
        "connectionSet": connections,
        "consumeFromWhere": info.consume_from_where,
        "consumeType": info.consume_type,
        "messageModel": info.message_model,
        "subscriptionTable": {t: s.to_json() for t, s in sorted(info.subscriptions.items())},
    }
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(doc))


PROCESSORS = {
    RequestCode.UPDATE_AND_CREATE_TOPIC: update_and_create_topic,
    RequestCode.DELETE_TOPIC_IN_BROKER: delete_topic,
    RequestCode.GET_ALL_TOPIC_CONFIG: get_all_topic_config,
    RequestCode.GET_TOPIC_STATS_INFO: get_topic_stats_info,
    RequestCode.GET_BROKER_RUNTIME_INFO: get_broker_runtime_info,
    RequestCode.GET_BROKER_CONFIG: get_broker_config,
    RequestCode.TRIGGER_DELETE_FILES: trigger_delete_files,
    RequestCode.DELETE_EXPIRED_COMMITLOG: trigger_delete_files,  # what 4.9.7's mqadmin deleteExpiredCommitLog sends
    RequestCode.GET_ALL_CONSUMER_OFFSET: get_all_consumer_offset,
    RequestCode.GET_ALL_DELAY_OFFSET: get_all_delay_offset,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: get_all_subscription_group,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: update_and_create_subscription_group,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: delete_subscription_group,
    RequestCode.GET_CONSUME_STATS: get_consume_stats,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: get_consumer_connection_list,
}
