"""Route and registration bodies exchanged with name servers (RocketMQ's JSON shapes).

TopicRouteData::

    {"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"broker-a",
      "cluster":"DefaultCluster"}],
     "filterServerTable":{},
     "queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,
      "topicSysFlag":0,"writeQueueNums":4}]}

Numbers stay JSON numbers (the C++ client reads them with asInt); brokerAddrs keys are
quoted brokerIds, which every client accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol import fastjson

MASTER_ID = 0
PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1


@dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> QueueData:
        return cls(
            str(doc["brokerName"]),
            int(doc.get("readQueueNums", 0)),
            int(doc.get("writeQueueNums", 0)),
            int(doc.get("perm", 6)),
            int(doc.get("topicSysFlag", 0)),
        )


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> BrokerData:
        addrs = {int(k): str(v) for k, v in (doc.get("brokerAddrs") or {}).items()}
        return cls(str(doc.get("cluster", "")), str(doc["brokerName"]), addrs)

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)


@dataclass(slots=True)
class TopicRouteData:
    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    order_topic_conf: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "brokerDatas": [b.to_json() for b in self.broker_datas],
            "filterServerTable": {},
            "queueDatas": [q.to_json() for q in self.queue_datas],
        }
        if self.order_topic_conf:
            doc["orderTopicConf"] = self.order_topic_conf
        return doc

    def encode(self) -> bytes:
        return fastjson.dumps(self.to_json())

    @classmethod
    def decode(cls, body: bytes) -> TopicRouteData:
        doc = fastjson.loads(body)
        try:
            return cls(
                [QueueData.from_json(q) for q in doc.get("queueDatas") or []],
                [BrokerData.from_json(b) for b in doc.get("brokerDatas") or []],
                doc.get("orderTopicConf"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RemoteProtocolError(f"route body does not decode: {exc}") from exc


@dataclass(slots=True)
class DataVersion:
    """A config's version: name servers compare both fields to spot changes."""

    timestamp: int = 0
    counter: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, doc: Any) -> DataVersion:
        doc = doc or {}
        if not isinstance(doc, dict):
            raise RemoteProtocolError(f"a DataVersion is a JSON object, not {type(doc).__name__}")
        counter = doc.get("counter", 0)
        if isinstance(counter, dict):  # Java AtomicLong may serialise as an object
            counter = counter.get("value", 0)
        try:
            return cls(int(doc.get("timestamp", 0)), int(counter))
        except (TypeError, ValueError) as exc:
            raise RemoteProtocolError(f"DataVersion fields are not numbers: {exc}") from exc

    def next(self, now_ms: int) -> DataVersion:
        return DataVersion(now_ms, self.counter + 1)


@dataclass(slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TopicConfig:
        return cls(
            str(doc["topicName"]),
            int(doc.get("readQueueNums", 16)),
            int(doc.get("writeQueueNums", 16)),
            int(doc.get("perm", 6)),
            str(doc.get("topicFilterType", "SINGLE_TAG")),
            int(doc.get("topicSysFlag", 0)),
            bool(doc.get("order", False)),
        )


@dataclass(slots=True)
class RegisterBrokerBody:
    """REGISTER_BROKER body: the broker's topic configs with their DataVersion."""

    data_version: DataVersion
    topic_configs: dict[str, TopicConfig]
    filter_servers: list[str] = field(default_factory=list)

    def encode(self) -> bytes:
        return fastjson.dumps(
            {
                "filterServerList": self.filter_servers,
                "topicConfigSerializeWrapper": {
                    "dataVersion": self.data_version.to_json(),
                    "topicConfigTable": {k: v.to_json() for k, v in self.topic_configs.items()},
                },
            }
        )

    @classmethod
    def decode(cls, body: bytes) -> RegisterBrokerBody:
        doc = fastjson.loads(body) if body else {}
        try:
            wrapper = doc.get("topicConfigSerializeWrapper") or {}
            table = wrapper.get("topicConfigTable") or {}
            return cls(
                DataVersion.from_json(wrapper.get("dataVersion")),
                {name: TopicConfig.from_json({"topicName": name, **tc}) for name, tc in table.items()},
                [str(s) for s in doc.get("filterServerList") or []],
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RemoteProtocolError(f"register body does not decode: {exc}") from exc
