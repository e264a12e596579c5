"""Topic routes for producers: the cache that fetches routes from the name servers and
refreshes them.

The pure part (route -> publish queues, the TBW102 shape) lives in ``publish_info``
and is re-exported here. ``RouteCache`` asks the name servers (one preferred, the others in turn when
it cannot be reached), keeps routes, publish infos and broker addresses by broker name,
and refreshes every known topic every ``poll_interval`` seconds (pollNameServerInterval,
30 s).
"""

from __future__ import annotations

import asyncio
import logging
import random

from ledgermq.aio.periodic import Periodic
from ledgermq.client.errors import MQBrokerError, MQClientError, MQConnectError, NoRouteError
from ledgermq.client.instance.namesrv import split_namesrv_addrs
from ledgermq.client.instance.namesrv_client import NameServerClient
from ledgermq.client.instance.publish_info import (
    AUTO_CREATE_TOPIC,
    DEFAULT_TOPIC_QUEUE_NUMS,
    TopicPublishInfo,
    default_topic_route,
    publish_info_from_route,
)
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.route import MASTER_ID, PERM_READ, TopicRouteData
from ledgermq.util.ratelog import limited

__all__ = [
    "AUTO_CREATE_TOPIC",
    "DEFAULT_TOPIC_QUEUE_NUMS",
    "POLL_NAMESRV_INTERVAL",
    "BrokerChoice",
    "NameServerClient",
    "RouteCache",
    "TopicPublishInfo",
    "default_topic_route",
    "publish_info_from_route",
    "split_namesrv_addrs",
]

log = logging.getLogger(__name__)

POLL_NAMESRV_INTERVAL = 30.0


def subscribe_queues_from_route(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """``topicRouteData2TopicSubscribeInfo``: every readable queue of every broker group, sorted."""
    queues = [
        MessageQueue(topic, qd.broker_name, i)
        for qd in route.queue_datas
        if qd.perm & PERM_READ
        for i in range(qd.read_queue_nums)
    ]
    queues.sort(key=lambda q: (q.topic, q.broker_name, q.queue_id))
    return queues


class BrokerChoice(tuple[str, bool]):
    """(address, is_slave) as ``FindBrokerResult``."""

    __slots__ = ()

    def __new__(cls, addr: str, slave: bool) -> BrokerChoice:
        return super().__new__(cls, (addr, slave))

    @property
    def addr(self) -> str:
        return self[0]

    @property
    def slave(self) -> bool:
        return self[1]


# -- the cache -------------------------------------------------------------------------------
class RouteCache:
    """Routes, publish infos and broker addresses, refreshed from the name servers."""

    def __init__(
        self,
        namesrv: NameServerClient,
        *,
        create_topic_key: str = AUTO_CREATE_TOPIC,
        default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS,
        poll_interval: float = POLL_NAMESRV_INTERVAL,
        rng: random.Random | None = None,
    ) -> None:
        self.namesrv = namesrv
        self.create_topic_key = create_topic_key
        self.default_topic_queue_nums = default_topic_queue_nums
        self.poll_interval = poll_interval
        self.rng = rng or random.Random()
        self.routes: dict[str, TopicRouteData] = {}
        self.publish: dict[str, TopicPublishInfo] = {create_topic_key: TopicPublishInfo(create_topic_key)}
        self.subscribe: dict[str, list[MessageQueue]] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self._lock = asyncio.Lock()
        self._timer: Periodic | None = None

    # -- lookups -------------------------------------------------------------------------
    def master_addr(self, broker_name: str) -> str | None:
        """``findBrokerAddressInPublish``."""
        return self.broker_addrs.get(broker_name, {}).get(MASTER_ID)

    def between_masters(self, topic: str) -> bool:
        """The name servers know the topic's route, but it names no master to write to (a
        master gone, its successor not yet registered)."""
        info = self.publish.get(topic)
        return topic in self.routes and info is not None and not info.ok

    def master_addrs(self) -> list[str]:
        return sorted(a for addrs in self.broker_addrs.values() if (a := addrs.get(MASTER_ID)))

    def all_addrs(self) -> list[str]:
        return sorted({a for addrs in self.broker_addrs.values() for a in addrs.values()})

    def find_in_subscribe(self, broker_name: str, broker_id: int, only_this: bool = False) -> BrokerChoice | None:
        """``findBrokerAddressInSubscribe``: the wanted id, else the next slave id, else (unless
        ``only_this``) the lowest id the group still has, so reads and offset commits go to a
        slave while the master is gone from the route."""
        addrs = self.broker_addrs.get(broker_name)
        if not addrs:
            return None
        addr = addrs.get(broker_id)
        slave = broker_id != MASTER_ID
        if addr is None and slave:
            addr = addrs.get(broker_id + 1)
        if addr is None and not only_this:
            lowest = min(addrs)
            addr, slave = addrs[lowest], lowest != MASTER_ID
        return None if addr is None else BrokerChoice(addr, slave)

    def any_addr(self, broker_name: str) -> str | None:
        """The master's address, else any slave's (``findBrokerAddrByTopic``-like choice)."""
        choice = self.find_in_subscribe(broker_name, MASTER_ID)
        return None if choice is None else choice.addr

    # -- updates -------------------------------------------------------------------------
    def _install(self, topic: str, route: TopicRouteData) -> TopicPublishInfo:
        self.routes[topic] = route
        # cleanOfflineBroker in one step: the addresses of every broker some route still names
        addrs: dict[str, dict[int, str]] = {}
        for r in self.routes.values():
            for bd in r.broker_datas:
                addrs.setdefault(bd.broker_name, {}).update(bd.broker_addrs)
        for bd in route.broker_datas:  # the newest route wins for its brokers
            addrs[bd.broker_name] = dict(bd.broker_addrs)
        self.broker_addrs = addrs
        old = self.publish.get(topic)
        start = old.index if old is not None else self.rng.getrandbits(31)
        info = publish_info_from_route(topic, route, start_index=start)
        self.publish[topic] = info
        if topic in self.subscribe:
            self.subscribe[topic] = subscribe_queues_from_route(topic, route)
        return info

    async def update(self, topic: str, *, use_default: bool = False) -> bool:
        """Fetch one topic's route (or, with ``use_default``, TBW102's shaped for it).

        True when a route was installed; False when the name servers know none.
        Connection failures raise MQConnectError."""
        async with self._lock:
            if use_default:
                route = await self.namesrv.route(self.create_topic_key)
                if route is not None:
                    route = default_topic_route(route, self.default_topic_queue_nums)
            else:
                route = await self.namesrv.route(topic)
            if route is None:
                return False
            self._install(topic, route)
            return True

    def usable_publish_info(self, topic: str) -> TopicPublishInfo | None:
        """The cached info when it names writable queues (what ``find_publish_info`` returns
        without a lookup), else None: a send's fast path, with no coroutine to await."""
        info = self.publish.get(topic)
        return info if info is not None and info.ok else None

    async def find_publish_info(self, topic: str) -> TopicPublishInfo | None:
        """``tryToFindTopicPublishInfo``: the cached info, else the topic's route, else TBW102's."""
        info = self.publish.get(topic)
        if info is not None and info.ok:
            return info
        try:
            if await self.update(topic):  # a route, even one without writable queues, is the answer
                return self.publish[topic]
            if await self.update(topic, use_default=True):
                return self.publish[topic]
        except MQBrokerError as exc:  # a name server that answers with an error: if it lasts
            limited.persisting(log, logging.WARNING, ("route", topic), "route of %s: %s", topic, exc)
        return self.publish.get(topic)

    async def find_subscribe_queues(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]:
        """``fetchSubscribeMessageQueues``: the topic's readable queues; the topic is then kept
        fresh by the refresh timer. Raises ``NoRouteError`` when the name servers know no
        such topic, ``MQConnectError`` when none can be reached."""
        queues = self.subscribe.get(topic)
        if queues is not None and queues and not refresh:
            return queues
        self.subscribe.setdefault(topic, [])
        if not await self.update(topic):
            raise NoRouteError(f"the name servers know no route of topic {topic}")
        return self.subscribe[topic]

    def watch(self, topic: str) -> None:
        """Keep ``topic``'s subscribe queues refreshed (a consumer subscribed to it)."""
        self.subscribe.setdefault(topic, [])

    async def refresh_all(self) -> None:
        """Refresh every known topic (TBW102 included); failures are logged and the old route kept."""
        for topic in list(dict.fromkeys([*self.publish, *self.subscribe])):
            try:
                await self.update(topic)
            except MQConnectError as exc:  # no name server answered: a warning if that lasts
                limited.persisting(
                    log, logging.WARNING, ("namesrv", id(self)), "no name server answered (%s): %s", topic, exc
                )
            except MQClientError as exc:
                log.info("route refresh of %s failed: %s", topic, exc)
            else:
                limited.reset(("namesrv", id(self)))

    # -- the timer -----------------------------------------------------------------------
    def start(self, first_delay: float = 0.01) -> None:
        if self._timer is None:
            self._timer = Periodic(
                "route-refresh",
                self.refresh_all,
                lambda: self.poll_interval,
                first_delay=first_delay,
                on_error=lambda _p, _exc: limited.log(
                    log, logging.ERROR, ("route-refresh", id(self)), "route refresh failed", exc_info=True
                ),
            )
        self._timer.start()

    async def stop(self) -> None:
        if self._timer is not None:
            await self._timer.stop()
