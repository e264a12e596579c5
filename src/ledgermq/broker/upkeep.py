"""What a running broker does besides answering requests: its periodic tasks (persist the
consumer offsets, expire silent clients, fsync the metadata change logs, sample the
statistics), its reactions to client events (a connection closed, a consumer group
changed) and folding the metadata logs into their files at shutdown.

``BrokerApp`` wires and starts the parts; this keeps them in shape while they run. Every
task reads the settings through the broker context, so a live config change reaches it.
"""

from __future__ import annotations

import logging

from ledgermq.aio.periodic import Periodic
from ledgermq.broker.clients import ConsumerGroupInfo
from ledgermq.broker.context import Broker
from ledgermq.net.connection import Connection
from ledgermq.net.server import RemotingServer
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand

__all__ = ["BrokerUpkeep"]

log = logging.getLogger("ledgermq.broker.app")  # what it reports is the running broker's
CLIENT_SCAN_INTERVAL_S = 10.0
STATS_SAMPLE_INTERVAL_S = 1.0


class BrokerUpkeep:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def periodic_tasks(self) -> list[Periodic]:
        """The tasks to start once the broker serves (not started here)."""
        b = self.broker
        return [
            Periodic("persist-offsets", self.persist_offsets, b.config.flush_consumer_offset_interval_ms / 1000),
            Periodic("scan-clients", self.scan_clients, CLIENT_SCAN_INTERVAL_S),
            Periodic("sync-metadata", self.sync_metadata, b.topics.log.settings.sync_interval_ms / 1000),
            Periodic("sample-stats", self.sample_stats, STATS_SAMPLE_INTERVAL_S),
        ]

    def follow_client_events(self, server: RemotingServer) -> None:
        """Forget a closed connection's clients; tell a group's consumers it changed, and drop
        its SQL92 filters when its last client left."""
        server.on_disconnect.append(self.connection_closed)
        self.broker.consumers.on_group_changed.append(notify_group_changed)
        self.broker.consumers.on_group_changed.append(self.drop_filters_of_gone_group)

    # -- periodic -----------------------------------------------------------------------
    def persist_offsets(self) -> None:
        if self.broker.offsets.dirty:
            self.broker.offsets.persist()

    def scan_clients(self) -> None:
        """Drop the clients whose connection has been silent past channelExpiredTimeout."""
        b = self.broker
        now = b.clock.wall_ms()
        timeout = b.config.channel_expired_timeout_ms
        b.consumers.scan_expired(now, timeout)
        b.producers.scan_expired(now, timeout)

    def sync_metadata(self) -> None:
        """fsync the topic and group change logs: appended changes survive a power loss."""
        self.broker.topics.sync()
        self.broker.subscriptions.sync()

    def sample_stats(self) -> None:
        """TPS and stats-item samples (broker/stats.py), and the midnight snapshots."""
        store = self.broker.store
        self.broker.stats.tick(lambda: sum(cq.max_offset for cq in store.queues.all()))

    # -- client events ------------------------------------------------------------------
    def connection_closed(self, conn: Connection) -> None:
        self.broker.consumers.connection_closed(conn)
        self.broker.producers.connection_closed(conn)

    def drop_filters_of_gone_group(self, group: str, info: ConsumerGroupInfo) -> None:
        if not info.channels:  # the last client left: its SQL92 filters are dead
            self.broker.filters.group_gone(group, self.broker.clock.wall_ms())

    # -- shutdown -----------------------------------------------------------------------
    def close_metadata(self) -> None:
        """Fold every change log into its JSON file, so the files alone are complete (a
        Java broker reads them). A failure is logged: the log still holds the changes, and
        the store must shut down cleanly regardless."""
        b = self.broker
        for manager in (b.topics, b.subscriptions, b.offsets):
            try:
                manager.close()
            except Exception:
                log.exception("could not compact %s at shutdown; its change log keeps the changes", manager.path)


def notify_group_changed(group: str, info: ConsumerGroupInfo) -> None:
    """NOTIFY_CONSUMER_IDS_CHANGED to every consumer of the group, oneway."""
    for conn in list(info.channels):
        try:
            conn.oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}))
        except Exception:
            log.debug("could not notify %s of group %s changes", conn.peer, group)
