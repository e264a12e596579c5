"""Live producers and consumers per group, learned from heartbeats (Producer/ConsumerManager).

A consumer group remembers its clients' connections and the latest subscription per
topic. When the set of clients of a group changes, every client of the group is told
(NOTIFY_CONSUMER_IDS_CHANGED) so it rebalances at once. Clients silent for
channelExpiredTimeout (120 s) or whose connection closes are dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from ledgermq.broker.heartbeat_data import ConsumerData, SubscriptionData
from ledgermq.net.connection import Connection

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ClientChannel:
    client_id: str
    connection: Connection
    language: str
    version: int
    last_update_ms: int


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[Connection, ClientChannel] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted({c.client_id for c in self.channels.values()})


GroupChanged = Callable[[str, ConsumerGroupInfo], None]


class ConsumerManager:
    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}
        self.on_group_changed: list[GroupChanged] = []

    def register(self, data: ConsumerData, channel: ClientChannel) -> None:
        info = self.groups.get(data.group)
        if info is None:
            info = self.groups[data.group] = ConsumerGroupInfo(data.group)
        info.consume_type = data.consume_type
        info.message_model = data.message_model
        info.consume_from_where = data.consume_from_where
        old = info.channels.get(channel.connection)
        info.channels[channel.connection] = channel
        channels_changed = old is None or old.client_id != channel.client_id
        if channels_changed:
            log.info("consumer %s joined group %s", channel.client_id, data.group)
        topics_changed = self._update_subscriptions(info, data.subscriptions)
        if channels_changed or topics_changed:
            self._changed(info)

    @staticmethod
    def _update_subscriptions(info: ConsumerGroupInfo, subs: list[SubscriptionData]) -> bool:
        """RocketMQ's updateSubscription: newer versions replace, topics no longer sent are
        dropped; True when the set of topics changed (that is what makes clients rebalance)."""
        changed = False
        for sub in subs:
            prev = info.subscriptions.get(sub.topic)
            if prev is None:
                changed = True
                info.subscriptions[sub.topic] = sub
            elif sub.sub_version > prev.sub_version or (sub.sub_version == prev.sub_version == 0):
                info.subscriptions[sub.topic] = sub
        wanted = {s.topic for s in subs}
        for topic in [t for t in info.subscriptions if t not in wanted]:
            del info.subscriptions[topic]
            changed = True
        return changed

    def unregister(self, group: str, connection: Connection) -> None:
        info = self.groups.get(group)
        if info is not None and info.channels.pop(connection, None) is not None:
            if not info.channels:
                del self.groups[group]
            self._changed(info)

    def connection_closed(self, connection: Connection) -> None:
        for group in [g for g, info in self.groups.items() if connection in info.channels]:
            self.unregister(group, connection)

    def scan_expired(self, now_ms: int, timeout_ms: int) -> None:
        for info in list(self.groups.values()):
            for conn, ch in list(info.channels.items()):
                if now_ms - ch.last_update_ms > timeout_ms:
                    log.warning("consumer %s of %s expired (no heartbeat)", ch.client_id, info.group)
                    conn.close()
                    self.unregister(info.group, conn)

    def subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.groups.get(group)
        return info.subscriptions.get(topic) if info else None

    def _changed(self, info: ConsumerGroupInfo) -> None:
        for callback in self.on_group_changed:
            try:
                callback(info.group, info)
            except Exception:
                log.exception("group-changed callback failed for %s", info.group)


class ProducerManager:
    def __init__(self) -> None:
        self.groups: dict[str, dict[Connection, ClientChannel]] = {}

    def register(self, group: str, channel: ClientChannel) -> None:
        self.groups.setdefault(group, {})[channel.connection] = channel

    def unregister(self, group: str, connection: Connection) -> None:
        channels = self.groups.get(group)
        if channels is not None:
            channels.pop(connection, None)
            if not channels:
                del self.groups[group]

    def connection_closed(self, connection: Connection) -> None:
        for group in [g for g, chans in self.groups.items() if connection in chans]:
            self.unregister(group, connection)

    def scan_expired(self, now_ms: int, timeout_ms: int) -> None:
        for group, channels in list(self.groups.items()):
            for conn, ch in list(channels.items()):
                if now_ms - ch.last_update_ms > timeout_ms:
                    conn.close()
                    self.unregister(group, conn)

    def any_channel(self, group: str) -> ClientChannel | None:
        for ch in self.groups.get(group, {}).values():
            if ch.connection.is_open:
                return ch
        return None
