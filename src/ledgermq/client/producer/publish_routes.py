"""Where a producer's sends may go: a topic's publish info and a broker group's master
address, looked up through the client instance's route cache.

With ``failover`` a send that finds its topic's groups between masters (the old master
gone from the route, no new one registered yet) waits for one, up to half the time it has
left, instead of failing at once; nothing was sent yet, so the wait is no failed attempt.
Without it a missing master fails at once, as Java 4.9.7 does. A topic with no writable
route is refused with the reason: ``NoWritableMasterError`` when the name servers know
its groups but some have no master, ``NoRouteError`` otherwise.
"""

from __future__ import annotations

from ledgermq.client.errors import MQConnectError, NoMasterError, NoRouteError, NoWritableMasterError
from ledgermq.client.instance.routes import RouteCache, TopicPublishInfo
from ledgermq.client.producer.failover import FailoverSettings
from ledgermq.client.producer.master_watch import MasterWatch
from ledgermq.clock import Clock
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.route import MASTER_ID

__all__ = ["PublishRoutes"]


class PublishRoutes:
    def __init__(
        self, routes: RouteCache, watch: MasterWatch, failover: FailoverSettings, create_topic_key: str, clock: Clock
    ) -> None:
        self.routes = routes
        self.watch = watch
        self.failover = failover
        self.create_topic_key = create_topic_key
        self.clock = clock

    async def publish_info(self, topic: str, deadline: float | None = None) -> TopicPublishInfo:
        """The topic's publish info. A send (``deadline``: when its time runs out, on the
        clock's monotonic time) that finds the route between masters waits for one (up to
        half its time left) when failover is enabled."""
        if deadline is not None and self.failover.enabled and self.routes.between_masters(topic):
            await self.watch.wait_for_writable(topic, (deadline - self.clock.monotonic()) / 2)
        try:
            info = await self.routes.find_publish_info(topic)
        except MQConnectError as exc:
            raise NoRouteError(f"no route info of topic {topic}: {exc}") from exc
        if info is None or not info.ok:
            headless = self.groups_without_master(topic)
            if headless:
                raise NoWritableMasterError(
                    f"broker group {', '.join(headless)} of topic {topic} has no writable master now "
                    "(its master is gone and no new one has registered yet: an election in progress in "
                    "controller or DLedger mode, or a master-slave group waiting for its master)"
                )
            raise NoRouteError(f"no route info of topic {topic} (nor of {self.create_topic_key} to auto-create it)")
        return info

    def groups_without_master(self, topic: str) -> list[str]:
        """The broker groups the name servers list for ``topic`` whose master (id 0) is missing."""
        route = self.routes.routes.get(topic)
        if route is None:
            return []
        return sorted(d.broker_name for d in route.broker_datas if MASTER_ID not in d.broker_addrs)

    async def master_addr(self, mq: MessageQueue, wait: float = 0.0) -> str:
        """The master's address of ``mq``'s group; with failover, a group between masters is
        waited for up to ``wait`` seconds. NoMasterError when there is none."""
        addr = self.routes.master_addr(mq.broker_name)
        if addr is None:
            await self.routes.find_publish_info(mq.topic)
            addr = self.routes.master_addr(mq.broker_name)
        if addr is None and wait > 0 and self.failover.enabled:
            await self.watch.wait_for_new_master(mq.topic, mq.broker_name, "", wait)
            addr = self.routes.master_addr(mq.broker_name)
        if addr is None:
            raise NoMasterError(f"the broker {mq.broker_name} does not exist (no master address)")
        return addr
