"""The console's aiohttp application: the one ``Console`` (console/state.py) every handler
shares, the middlewares, and the routes of each page module."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from ledgermq.console.auth import auth_middleware
from ledgermq.console.pages import cluster, consumers, login, messages, producers, topics, trends
from ledgermq.console.render import LOGIN_KEY, REFRESH_MS_KEY, TEMPLATES_KEY, error_middleware, make_environment
from ledgermq.console.settings import ConsoleSettings
from ledgermq.console.state import CONSOLE_KEY, Console

log = logging.getLogger(__name__)
STATIC = Path(__file__).with_name("static")
PAGES = (login, cluster, topics, consumers, producers, messages, trends)  # each module's ``routes``


def build_app(settings: ConsoleSettings, *, sample_trends: bool = True) -> web.Application:
    """The application, ready for an ``AppRunner`` (or aiohttp's test client)."""
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
    for page in PAGES:
        app.router.add_routes(page.routes)

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
