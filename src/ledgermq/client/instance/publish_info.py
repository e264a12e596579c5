"""Producer publish queues from a topic route (pure: no I/O, no asyncio).

* ``publish_info_from_route`` (RocketMQ ``MQClientInstance.topicRouteData2TopicPublishInfo``):
  with an ``orderTopicConf`` ("brokerA:4;brokerB:2") the queues come from it alone;
  otherwise queue datas are sorted by broker name and every writable one
  (perm & WRITE) whose broker group has a master (id 0) gives queues
  0..writeQueueNums-1.
* ``default_topic_route`` (the TBW102 fallback of ``updateTopicRouteInfoFromNameServer``):
  the auto-create topic's route shaped for a new topic, read and write queue counts
  min(defaultTopicQueueNums, readQueueNums).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.route import MASTER_ID, PERM_WRITE, QueueData, TopicRouteData

AUTO_CREATE_TOPIC = "TBW102"
DEFAULT_TOPIC_QUEUE_NUMS = 4
_INDEX_MASK = 0x7FFFFFFF


@dataclass(slots=True)
class TopicPublishInfo:
    """The queues a producer may write to, plus the round-robin position (``sendWhichQueue``)."""

    topic: str
    queues: list[MessageQueue] = field(default_factory=list)
    route: TopicRouteData | None = None
    order_topic: bool = False
    index: int = 0

    @property
    def ok(self) -> bool:
        return bool(self.queues)

    def next_index(self) -> int:
        """``ThreadLocalIndex.incrementAndGet``: never negative."""
        self.index = (self.index + 1) & _INDEX_MASK
        return self.index

    def write_queue_nums(self, broker_name: str) -> int:
        """``getQueueIdByBroker``: the broker's writeQueueNums in the route, or -1."""
        if self.route is not None:
            for qd in self.route.queue_datas:
                if qd.broker_name == broker_name:
                    return qd.write_queue_nums
        return -1

    def broker_names(self) -> list[str]:
        return sorted({q.broker_name for q in self.queues})


def _parse_order_conf(topic: str, conf: str) -> list[MessageQueue]:
    queues: list[MessageQueue] = []
    for item in conf.split(";"):
        if not item.strip():
            continue
        name, sep, nums = item.rpartition(":")
        if not sep or not name or not nums.strip().lstrip("-").isdigit():
            raise ValueError(f"orderTopicConf item {item!r} is not brokerName:queueNums")
        queues.extend(MessageQueue(topic, name, i) for i in range(int(nums)))
    return queues


def publish_info_from_route(topic: str, route: TopicRouteData, *, start_index: int = 0) -> TopicPublishInfo:
    info = TopicPublishInfo(topic, route=route, index=start_index & _INDEX_MASK)
    if route.order_topic_conf:
        info.queues = _parse_order_conf(topic, route.order_topic_conf)
        info.order_topic = True
        return info
    masters = {bd.broker_name for bd in route.broker_datas if MASTER_ID in bd.broker_addrs}
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if qd.perm & PERM_WRITE and qd.broker_name in masters:
            info.queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return info


def default_topic_route(route: TopicRouteData, default_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS) -> TopicRouteData:
    """The auto-create topic's route with min(defaultTopicQueueNums, readQueueNums) queues per broker."""
    shaped = copy.deepcopy(route)
    shaped.queue_datas = [
        QueueData(
            qd.broker_name,
            min(default_queue_nums, qd.read_queue_nums),
            min(default_queue_nums, qd.read_queue_nums),
            qd.perm,
            qd.topic_sys_flag,
        )
        for qd in route.queue_datas
    ]
    return shaped
