"""The console's aiohttp application: one ``Console`` object (the admin client, the lazily
started test-message producer, sessions, shared answers, the trends sampler) and the
routes of each page module."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from ledgermq.admin.client import AdminClient
from ledgermq.client.producer.producer import Producer
from ledgermq.console.auth import Sessions, auth_middleware
from ledgermq.console.cache import SharedAnswers
from ledgermq.console.cluster_view import ClusterWatcher
from ledgermq.console.render import LOGIN_KEY, REFRESH_MS_KEY, TEMPLATES_KEY, error_middleware, make_environment
from ledgermq.console.settings import ConsoleSettings
from ledgermq.console.trends import TrendSampler
from ledgermq.console.users import User, load_users

log = logging.getLogger(__name__)
STATIC = Path(__file__).with_name("static")
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


def build_app(settings: ConsoleSettings, *, sample_trends: bool = True) -> web.Application:
    """The application, ready for an ``AppRunner`` (or aiohttp's test client)."""
    from ledgermq.console.pages import register_all

    console = Console(settings)
    app = web.Application(
        # error pages outside (the auth middleware's own refusals) and inside (a handler's failures
        # become pages before the auth middleware adds a new session's cookie to them)
        middlewares=[
            error_middleware,
            auth_middleware(console.sessions, settings.login_required, settings.host),
            error_middleware,
        ],
        client_max_size=2 * 1024 * 1024,  # a test message's body and its form
    )
    app[CONSOLE_KEY] = console
    app[TEMPLATES_KEY] = make_environment()
    app[REFRESH_MS_KEY] = settings.refresh_ms
    app[LOGIN_KEY] = settings.login_required
    app.router.add_static("/static/", STATIC, append_version=True)
    register_all(app)

    async def lifecycle(_app: web.Application) -> AsyncIterator[None]:
        if sample_trends:
            console.trends.start()
        yield
        await console.close()

    app.cleanup_ctx.append(lifecycle)
    return app


class ConsoleServer:
    """The console on ``settings.host:settings.port`` (port 0 picks one; ``url`` says which)."""

    def __init__(self, settings: ConsoleSettings, *, sample_trends: bool = True) -> None:
        self.settings = settings
        self.app = build_app(settings, sample_trends=sample_trends)
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        host = self.settings.host
        shown = "127.0.0.1" if host in ("", "0.0.0.0") else f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}/"

    async def start(self) -> None:
        """Bind and serve; OSError if the port cannot be bound (nothing is left running)."""
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.settings.host, self.settings.port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        log.info("console on %s for name server %s", self.url, self.settings.namesrv)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
