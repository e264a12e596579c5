"""The broker's ``/metrics`` HTTP endpoint on aiohttp (the server library the web console
uses too): ``GET /metrics`` (and HEAD) answers the 0.0.4 text format, any other path 404;
connections are kept alive as Prometheus likes. A scrape whose collection raises answers
500 with the error's one-line text and logs the traceback."""

from __future__ import annotations

import logging

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from ledgermq.broker.context import Broker
from ledgermq.broker.metrics import BrokerCollector

log = logging.getLogger(__name__)
_STOP_GRACE_S = 2.0


class BrokerMetrics:
    """The broker's registry and its ``/metrics`` HTTP endpoint (started only on request)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = BrokerCollector(broker)
        self.registry.register(self.collector)
        self.host = "127.0.0.1"
        self.port = 0
        self._runner: web.AppRunner | None = None

    def render(self) -> bytes:
        return generate_latest(self.registry)

    @property
    def serving(self) -> bool:
        return self._runner is not None

    async def start(self, port: int, host: str = "127.0.0.1") -> None:
        """Serve ``/metrics`` on ``host:port`` (0 picks a free port; see ``port``); OSError if
        the port cannot be bound."""
        if self._runner is not None:
            return
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/{path:.*}", _not_found)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=_STOP_GRACE_S)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.host = host
        self.port = int(runner.addresses[0][1])
        log.info("metrics of broker %s on http://%s:%d/metrics", self.broker.config.broker_name, host, self.port)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _metrics(self, request: web.Request) -> web.Response:
        try:
            body = self.render()
        except Exception as exc:  # a broken figure must not take the endpoint down silently
            log.exception("metrics: collecting failed")
            return web.Response(status=500, text=f"collecting metrics failed: {type(exc).__name__}: {exc}\n")
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})


async def _not_found(request: web.Request) -> web.Response:
    return web.Response(status=404, text="not found; try /metrics\n")
