"""The ``Console``: what every page handler of the web console shares (the admin client, the
lazily started test-message producer, sessions, shared answers, the cluster watcher and the
trends sampler), and how a handler finds it. Page modules import it from here, never from
the application module that imports them."""

from __future__ import annotations

import asyncio

from aiohttp import web

from ledgermq.admin.client import AdminClient
from ledgermq.client.producer.producer import Producer
from ledgermq.console.auth import Sessions
from ledgermq.console.cache import SharedAnswers
from ledgermq.console.cluster_view import ClusterWatcher
from ledgermq.console.settings import ConsoleSettings
from ledgermq.console.trends import TrendSampler
from ledgermq.console.users import User, load_users

PRODUCER_GROUP = "LEDGERMQ_CONSOLE_PRODUCER"  # the group test messages are sent as


class Console:
    """Everything the handlers share; one per application."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.users: dict[str, User] = load_users(settings.users_file) if settings.users_file is not None else {}
        self.admin = AdminClient(
            settings.namesrv,
            timeout=settings.request_timeout_s,
            connect_timeout=1.0,
            credentials=settings.credentials,
            tls=settings.tls,
        )
        self.sessions = Sessions(settings.session_ttl_s)
        self.answers = SharedAnswers(settings.cache_s)
        self.watcher = ClusterWatcher(self.admin, settings.controller_addrs, settings.request_timeout_s)
        self.trends = TrendSampler(self.admin, settings.trend_interval_s, settings.trend_points)
        self._producer: Producer | None = None
        self._producer_lock = asyncio.Lock()

    async def producer(self) -> Producer:
        """The producer test messages go through, started on first use (most sessions never send)."""
        async with self._producer_lock:
            if self._producer is None:
                producer = Producer(
                    PRODUCER_GROUP,
                    self.settings.namesrv,
                    credentials=self.settings.credentials,
                    send_timeout=self.settings.request_timeout_s,
                    use_tls=self.settings.tls is not None,
                    tls=self.settings.tls,
                )
                await producer.start()
                self._producer = producer
            return self._producer

    async def close(self) -> None:
        await self.trends.stop()
        if self._producer is not None:
            await self._producer.shutdown()
        await self.admin.close()


CONSOLE_KEY = web.AppKey("console", Console)


def console_of(request: web.Request) -> Console:
    return request.app[CONSOLE_KEY]
