"""Subscription groups (RocketMQ ``SubscriptionGroupManager``), config/subscriptionGroup.json.

A change appends one record to ``subscriptionGroup.json.changes`` (``metadata_log``), so
auto-created groups cost O(1) each; ``persist`` writes the whole file (a slave adopting
its master's table, shutdown).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledgermq.broker.metadata_log import Change, LoggedTable, MetadataLog, MetadataLogSettings, replay
from ledgermq.clock import Clock
from ledgermq.protocol.route import DataVersion

TABLE_KEY = "subscriptionGroupTable"
SYSTEM_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
)


@dataclass(slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "groupName": self.group_name,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SubscriptionGroupConfig:
        return cls(
            group_name=str(doc["groupName"]),
            consume_enable=bool(doc.get("consumeEnable", True)),
            consume_from_min_enable=bool(doc.get("consumeFromMinEnable", True)),
            consume_broadcast_enable=bool(doc.get("consumeBroadcastEnable", True)),
            retry_queue_nums=int(doc.get("retryQueueNums", 1)),
            retry_max_times=int(doc.get("retryMaxTimes", 16)),
            broker_id=int(doc.get("brokerId", 0)),
            which_broker_when_consume_slowly=int(doc.get("whichBrokerWhenConsumeSlowly", 1)),
            notify_consumer_ids_changed_enable=bool(doc.get("notifyConsumerIdsChangedEnable", True)),
        )


class SubscriptionGroupManager(LoggedTable):
    def __init__(
        self, path: Path, clock: Clock, auto_create: bool, log_settings: MetadataLogSettings | None = None
    ) -> None:
        self.path = path
        self.clock = clock
        self.auto_create = auto_create
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()
        self.log = MetadataLog(path, self.to_json, log_settings)
        self._loaded = False

    def load(self) -> None:
        """The snapshot, then its change log replayed in order (dataVersion as of the last change)."""
        snapshot, changes = self.log.load()
        doc = replay(snapshot, TABLE_KEY, changes)
        self.data_version = DataVersion.from_json(doc.get("dataVersion"))
        for name, cfg in doc[TABLE_KEY].items():
            self.table[name] = SubscriptionGroupConfig.from_json({"groupName": name, **cfg})
        for name in SYSTEM_GROUPS:
            self.table.setdefault(name, SubscriptionGroupConfig(name))
        self._loaded = True

    def to_json(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json(),
            TABLE_KEY: {k: v.to_json() for k, v in sorted(self.table.items())},
        }

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, auto-created when autoCreateSubscriptionGroup is on."""
        cfg = self.table.get(group)
        if cfg is None and self.auto_create:
            cfg = SubscriptionGroupConfig(group)
            self.update(cfg)
        return cfg

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        self.table[cfg.group_name] = cfg
        self.data_version = self.data_version.next(self.clock.wall_ms())
        self.log.append((Change("put", cfg.group_name, cfg.to_json(), self.data_version.to_json()),))

    def delete(self, group: str) -> bool:
        if self.table.pop(group, None) is None:
            return False
        self.data_version = self.data_version.next(self.clock.wall_ms())
        self.log.append((Change("del", group, data_version=self.data_version.to_json()),))
        return True
