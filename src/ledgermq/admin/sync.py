"""``SyncAdmin``: the blocking facade of ``AdminClient``, on the client's loop thread
(``ledgermq.client.sync.loop_thread``): admin tools sit above the client, so the
client's blocking facade does not know them.

Every public coroutine method of ``AdminClient`` is wrapped through the ``blocking``
descriptor, which keeps each method's signature for type checkers."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any

from ledgermq.admin.client import AdminClient
from ledgermq.client.sync.loop_thread import Closable, blocking

__all__ = ["SyncAdmin"]


class SyncAdmin(Closable[AdminClient]):
    """``with SyncAdmin("127.0.0.1:9876") as admin: admin.topic_list()``: every
    ``AdminClient`` call, blocking."""

    def __init__(self, namesrv_addrs: str | Sequence[str], **options: Any) -> None:
        self._attach(lambda: AdminClient(namesrv_addrs, **options))

    @property
    def admin(self) -> AdminClient:
        return self._target

    def close(self) -> None:
        """Close the connections; the last facade object to close stops the loop thread. Idempotent."""
        self._close(self._target.close())

    shutdown = close

    def __enter__(self) -> SyncAdmin:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def create_topic_in_cluster(self, cluster: str, topic: str, **options: Any) -> list[str]:
        """``AdminClient.create_topic_in_cluster`` (written out: ``**options`` defeats ``blocking``'s typing)."""
        return self._run(self._target.create_topic_in_cluster(cluster, topic, **options))

    invoke = blocking(AdminClient.invoke)
    invoke_namesrv = blocking(AdminClient.invoke_namesrv)
    route = blocking(AdminClient.route)
    cluster_info = blocking(AdminClient.cluster_info)
    topic_list = blocking(AdminClient.topic_list)
    topics_by_cluster = blocking(AdminClient.topics_by_cluster)
    put_order_conf = blocking(AdminClient.put_order_conf)
    create_topic = blocking(AdminClient.create_topic)
    topic_stats = blocking(AdminClient.topic_stats)
    examine_topic_stats = blocking(AdminClient.examine_topic_stats)
    consume_stats = blocking(AdminClient.consume_stats)
    examine_consume_stats = blocking(AdminClient.examine_consume_stats)
    consumer_connection = blocking(AdminClient.consumer_connection)
    examine_consumer_connection = blocking(AdminClient.examine_consumer_connection)
    consumer_groups = blocking(AdminClient.consumer_groups)
    view_message = blocking(AdminClient.view_message)
    view_message_by_id = blocking(AdminClient.view_message_by_id)
    query_message = blocking(AdminClient.query_message)
    query_by_key = blocking(AdminClient.query_by_key)
    broker_runtime_info = blocking(AdminClient.broker_runtime_info)
    ha_status = blocking(AdminClient.ha_status)
    dledger_status = blocking(AdminClient.dledger_status)
    dledger_transfer_leader = blocking(AdminClient.dledger_transfer_leader)
