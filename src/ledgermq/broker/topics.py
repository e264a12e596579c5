"""Topic configs of a broker (RocketMQ ``TopicConfigManager``), persisted in config/topics.json.

A change appends one record to ``topics.json.changes`` (``metadata_log``): O(1) per topic
created, where rewriting the whole file made creating N topics O(N^2). ``persist`` still
writes the whole file (startup, a slave adopting its master's table, shutdown).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path

from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.metadata_log import Change, LoggedTable, MetadataLog, MetadataLogSettings, replay
from ledgermq.clock import Clock
from ledgermq.protocol.names import NOT_ALLOWED_SEND_TOPICS as NOT_ALLOWED_SEND_TOPICS
from ledgermq.protocol.names import TOPIC_MAX_LENGTH, TOPIC_NAME_PATTERN
from ledgermq.protocol.route import PERM_INHERIT, PERM_READ, PERM_WRITE, DataVersion, TopicConfig
from ledgermq.store.timer.intercept import TIMER_TOPIC

log = logging.getLogger(__name__)

AUTO_CREATE_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
BENCHMARK_TOPIC = "BenchmarkTest"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
MAX_TOPIC_LENGTH = TOPIC_MAX_LENGTH
TABLE_KEY = "topicConfigTable"


@functools.lru_cache(maxsize=4096)
def topic_error(topic: str) -> str | None:
    """Why a client may not send to ``topic``, or None (``AbstractSendMessageProcessor.msgCheck``).
    Cached: every send asks, and a regular expression per send cost more than the rest of
    the check (a pure function of the name; the cache is bounded)."""
    if not topic:
        return "The specified topic is blank."
    if len(topic) > MAX_TOPIC_LENGTH:
        return f"The specified topic is longer than topic max length {MAX_TOPIC_LENGTH}."
    if not TOPIC_NAME_PATTERN.fullmatch(topic):
        return f"The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if topic in NOT_ALLOWED_SEND_TOPICS:
        return f"Sending message to topic[{topic}] is forbidden."
    return None


class TopicConfigManager(LoggedTable):
    def __init__(
        self, path: Path, config: BrokerConfig, clock: Clock, log_settings: MetadataLogSettings | None = None
    ) -> None:
        self.path = path
        self.config = config
        self.clock = clock
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self.on_change: list[Callable[[TopicConfig], None]] = []  # e.g. re-register with name servers
        self.log = MetadataLog(path, self.to_json, log_settings)
        self._loaded = False

    def load(self) -> None:
        """The snapshot, then its change log replayed in order (dataVersion as of the last change)."""
        snapshot, changes = self.log.load()
        doc = replay(snapshot, TABLE_KEY, changes)
        self.data_version = DataVersion.from_json(doc.get("dataVersion"))
        for name, tc in doc[TABLE_KEY].items():
            self.table[name] = TopicConfig.from_json({"topicName": name, **tc})
        self._ensure_system_topics()
        self._loaded = True

    def _ensure_system_topics(self) -> None:
        cfg = self.config
        system = [
            TopicConfig(SELF_TEST_TOPIC, 1, 1),
            TopicConfig(BENCHMARK_TOPIC, 1024, 1024),
            TopicConfig(cfg.cluster_name, 16, 16, PERM_READ | PERM_WRITE if cfg.is_master else PERM_READ),
            TopicConfig(cfg.broker_name, 1, 1, PERM_READ | PERM_WRITE if cfg.is_master else PERM_READ),
            TopicConfig(OFFSET_MOVED_EVENT, 1, 1),
            TopicConfig(SCHEDULE_TOPIC, 18, 18),
            TopicConfig(TRANS_HALF_TOPIC, 1, 1),
            # RocketMQ 5 registers the timer wheel's topic (when timerWheelEnable, its default) so
            # its queue can be read like any other: the console counts pending timers from it.
            TopicConfig(TIMER_TOPIC, 1, 1),
        ]
        if cfg.auto_create_topic_enable:
            q = cfg.default_topic_queue_nums
            system.append(TopicConfig(AUTO_CREATE_TOPIC, q, q, PERM_INHERIT | PERM_READ | PERM_WRITE))
        for tc in system:
            self.table.setdefault(tc.topic_name, tc)

    def to_json(self) -> dict[str, object]:
        """The topics.json document (TopicConfigSerializeWrapper)."""
        return {
            "dataVersion": self.data_version.to_json(),
            TABLE_KEY: {k: v.to_json() for k, v in sorted(self.table.items())},
        }

    def _record(self, change: Change) -> None:
        self.log.append((change,))

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def update(self, tc: TopicConfig) -> None:
        """Create or replace a topic; bump the data version; persist; notify."""
        old = self.table.get(tc.topic_name)
        self.table[tc.topic_name] = tc
        if old != tc:
            log.info("topic %s %s: %s", tc.topic_name, "updated" if old else "created", tc)
            self.data_version = self.data_version.next(self.clock.wall_ms())
            self._record(Change("put", tc.topic_name, tc.to_json(), self.data_version.to_json()))
            for callback in self.on_change:
                callback(tc)

    def bump_version(self) -> None:
        """What the broker advertises changed though no topic did (a new brokerPermission):
        name servers take a registration's queue data only when its version is new. Kept in
        memory; the next recorded change persists a later one."""
        self.data_version = self.data_version.next(self.clock.wall_ms())

    def delete(self, topic: str) -> bool:
        if self.table.pop(topic, None) is None:
            return False
        self.data_version = self.data_version.next(self.clock.wall_ms())
        self._record(Change("del", topic, data_version=self.data_version.to_json()))
        return True

    def create_in_send(self, topic: str, default_topic: str, queue_nums: int, sys_flag: int) -> TopicConfig | None:
        """Auto-create ``topic`` from ``default_topic`` if that one has PERM_INHERIT."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        default = self.table.get(default_topic)
        if default is None or not default.perm & PERM_INHERIT:
            return None
        if default_topic == AUTO_CREATE_TOPIC and not self.config.auto_create_topic_enable:
            return None
        nums = max(1, min(queue_nums, default.write_queue_nums))
        tc = TopicConfig(topic, nums, nums, default.perm & ~PERM_INHERIT, default.topic_filter_type, sys_flag)
        self.update(tc)
        return tc

    def create_retry_topic(self, topic: str, queue_nums: int = 1) -> TopicConfig:
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        tc = TopicConfig(topic, queue_nums, queue_nums, PERM_READ | PERM_WRITE)
        self.update(tc)
        return tc

    def replace_all(self, table: dict[str, TopicConfig], version: DataVersion) -> None:
        """A slave adopting its master's topics (only when the master's version differs).

        The version is taken only once the file is written: a write that fails (a full
        disk) leaves the old version, so the next sync writes again instead of skipping a
        table that a restart would then not find."""
        if version == self.data_version:
            return
        self.table = dict(table)
        self._ensure_system_topics()
        before, self.data_version = self.data_version, version
        try:
            self.persist()
        except BaseException:
            self.data_version = before
            raise
