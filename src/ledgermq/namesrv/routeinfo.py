"""The name server's route registry (RocketMQ ``RouteInfoManager``), pure and clock-driven.

Tables:

* ``topic_queues``: topic -> brokerName -> QueueData (only master registrations write it)
* ``brokers``: brokerName -> BrokerData (cluster, brokerId -> address)
* ``clusters``: cluster -> broker names
* ``live``: broker address -> BrokerLiveInfo (last registration time, data version,
  HA address, the connection it registered on)

Brokers that have not registered for ``expiry_ms`` (120 s) are removed by
``scan_not_active``; a closed registration connection removes its broker at once
(``on_connection_closed``). Removing a broker group's last address removes its queues
from every topic, so routes never point at a broker that is gone. No locks: the name
server calls this from its one event loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ledgermq.protocol.route import (
    MASTER_ID,
    PERM_WRITE,
    BrokerData,
    DataVersion,
    QueueData,
    TopicConfig,
    TopicRouteData,
)

log = logging.getLogger(__name__)

DEFAULT_EXPIRY_MS = 120_000


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update_ms: int
    data_version: DataVersion
    ha_server_addr: str
    connection_id: object | None = None


@dataclass(frozen=True, slots=True)
class RegisterResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(slots=True)
class RouteInfo:
    expiry_ms: int = DEFAULT_EXPIRY_MS
    topic_queues: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    brokers: dict[str, BrokerData] = field(default_factory=dict)
    clusters: dict[str, set[str]] = field(default_factory=dict)
    live: dict[str, BrokerLiveInfo] = field(default_factory=dict)

    # -- registration ----------------------------------------------------------------
    def register_broker(
        self,
        *,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        data_version: DataVersion,
        topic_configs: dict[str, TopicConfig] | None,
        now_ms: int,
        connection_id: object | None = None,
    ) -> RegisterResult:
        self.clusters.setdefault(cluster, set()).add(broker_name)
        data = self.brokers.get(broker_name)
        first = data is None
        if data is None:
            data = self.brokers[broker_name] = BrokerData(cluster, broker_name, {})
        # One address, one id: a slave promoted to master drops its old id first.
        for bid in [b for b, a in data.broker_addrs.items() if a == broker_addr and b != broker_id]:
            del data.broker_addrs[bid]
        old = data.broker_addrs.get(broker_id)
        data.broker_addrs[broker_id] = broker_addr
        if old != broker_addr and broker_id == MASTER_ID:
            log.info("cluster %s broker %s master is now %s (was %s)", cluster, broker_name, broker_addr, old)
        first = first or old is None
        if topic_configs is not None and broker_id == MASTER_ID:
            prev = self.live.get(broker_addr)
            if first or prev is None or prev.data_version != data_version:
                # Upsert only, as RocketMQ 4.x does: a topic absent from the body keeps its
                # route (an increment names only the changed topics; deleting a route is
                # DELETE_TOPIC_IN_NAMESRV's job). So the work is O(topics in the body).
                created = sum(self._update_queue_data(broker_name, tc) for tc in topic_configs.values())
                if created:
                    log.info("%d new topic route(s) on %s, e.g. %s", created, broker_name, next(iter(topic_configs)))
        if broker_addr not in self.live:
            log.info("broker registered: %s (%s id %d), HA %s", broker_addr, broker_name, broker_id, ha_server_addr)
        self.live[broker_addr] = BrokerLiveInfo(now_ms, data_version, ha_server_addr, connection_id)
        if broker_id != MASTER_ID:
            master = data.broker_addrs.get(MASTER_ID)
            if master is not None and master in self.live:
                return RegisterResult(self.live[master].ha_server_addr, master)
        return RegisterResult()

    def _update_queue_data(self, broker_name: str, tc: TopicConfig) -> bool:
        """Upsert one topic's queues on ``broker_name``; True if the route is new. (Logged
        by the caller once per registration: a full registration after a restart brings
        thousands, and a log line each cost more than applying them.)"""
        queues = self.topic_queues.setdefault(tc.topic_name, {})
        new = QueueData(broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)
        old = queues.get(broker_name)
        if old != new:
            log.debug("topic route %s on %s: %s", tc.topic_name, broker_name, new)
            queues[broker_name] = new
        return old is None

    def is_topic_config_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        prev = self.live.get(broker_addr)
        return prev is None or prev.data_version != data_version

    def unregister_broker(self, *, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        self.live.pop(broker_addr, None)
        data = self.brokers.get(broker_name)
        if data is not None and data.broker_addrs.get(broker_id) == broker_addr:
            del data.broker_addrs[broker_id]
            log.info("broker unregistered: %s (%s id %d)", broker_addr, broker_name, broker_id)
        if data is not None and not data.broker_addrs:
            self._remove_broker_name(broker_name)

    def _remove_broker_name(self, broker_name: str) -> None:
        data = self.brokers.pop(broker_name, None)
        if data is not None:
            names = self.clusters.get(data.cluster)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.clusters[data.cluster]
        for topic in list(self.topic_queues):
            queues = self.topic_queues[topic]
            if queues.pop(broker_name, None) is not None and not queues:
                del self.topic_queues[topic]
                log.info("topic %s has no broker left; route removed", topic)

    # -- liveness --------------------------------------------------------------------
    def scan_not_active(self, now_ms: int) -> list[str]:
        """Drop brokers silent for longer than ``expiry_ms``; return their addresses.

        The caller closes their registration connections, as RocketMQ does: a broker
        sends its full table on a new connection and only changes on the one it has, so
        a route table forgotten under a connection left open would never be refilled."""
        dead = [addr for addr, info in self.live.items() if now_ms - info.last_update_ms > self.expiry_ms]
        for addr in dead:
            log.warning("broker %s expired: no registration for %d ms", addr, self.expiry_ms)
            self.remove_broker_addr(addr)
        return dead

    def on_connection_closed(self, connection_id: object) -> list[str]:
        addrs = [a for a, info in self.live.items() if info.connection_id is connection_id]
        for addr in addrs:
            log.info("broker %s's registration connection closed", addr)
            self.remove_broker_addr(addr)
        return addrs

    def remove_broker_addr(self, broker_addr: str) -> None:
        self.live.pop(broker_addr, None)
        for name, data in list(self.brokers.items()):
            for bid in [b for b, a in data.broker_addrs.items() if a == broker_addr]:
                del data.broker_addrs[bid]
            if not data.broker_addrs:
                self._remove_broker_name(name)

    # -- queries ---------------------------------------------------------------------
    def route(self, topic: str) -> TopicRouteData | None:
        queues = self.topic_queues.get(topic)
        if not queues:
            return None
        broker_datas = [
            BrokerData(d.cluster, d.broker_name, dict(d.broker_addrs))
            for name in sorted(queues)
            if (d := self.brokers.get(name)) is not None
        ]
        if not broker_datas:
            return None
        return TopicRouteData(
            [
                QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag)
                for _, q in sorted(queues.items())
            ],
            broker_datas,
        )

    def cluster_info(self) -> dict[str, object]:
        return {
            "brokerAddrTable": {name: d.to_json() for name, d in sorted(self.brokers.items())},
            "clusterAddrTable": {c: sorted(names) for c, names in sorted(self.clusters.items())},
        }

    def topic_list(self) -> list[str]:
        return sorted(self.topic_queues)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        names = self.clusters.get(cluster, set())
        return sorted(t for t, qs in self.topic_queues.items() if any(n in names for n in qs))

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        if cluster is None:
            self.topic_queues.pop(topic, None)
            return
        queues = self.topic_queues.get(topic, {})
        for name in self.clusters.get(cluster, set()):
            queues.pop(name, None)
        if not queues:
            self.topic_queues.pop(topic, None)

    def set_write_perm(self, broker_name: str, writable: bool) -> int:
        """WIPE_WRITE_PERM_OF_BROKER / ADD_WRITE_PERM_OF_BROKER; returns topics changed."""
        changed = 0
        for queues in self.topic_queues.values():
            q = queues.get(broker_name)
            if q is not None:
                q.perm = (q.perm | PERM_WRITE) if writable else (q.perm & ~PERM_WRITE)
                changed += 1
        return changed
