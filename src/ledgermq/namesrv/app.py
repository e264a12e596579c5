"""The name-server process: remoting server, route registry, expiry scan, KV config, and with
``enableControllerInNamesrv=true`` a controller node answering on the name server's port too."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ledgermq.aio.periodic import Periodic
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.config import key
from ledgermq.controller.config import ControllerConfig
from ledgermq.controller.service import ControllerService
from ledgermq.namesrv.kvconfig import KVConfig
from ledgermq.namesrv.processors import NamesrvState, register_all
from ledgermq.namesrv.routeinfo import RouteInfo
from ledgermq.net.connection import Connection
from ledgermq.net.server import RemotingServer
from ledgermq.startup import bind_failed

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NamesrvConfig:
    listen_host: str = key("listenHost", "0.0.0.0")
    listen_port: int = key("listenPort", 9876)
    kv_config_path: str = key("kvConfigPath", str(Path.home() / "namesrv" / "kvConfig.json"))
    broker_expiry_ms: int = key("brokerChannelExpiredTime", 120_000)
    scan_interval_ms: int = key("scanNotActiveBrokerInterval", 10_000)
    idle_timeout_s: int = key("serverChannelMaxIdleTimeSeconds", 120)
    enable_controller: bool = key("enableControllerInNamesrv", False)
    """Run a controller node in this process (its keys: ledgermq.controller.config)."""


class NamesrvApp:
    def __init__(
        self, config: NamesrvConfig, clock: Clock = SYSTEM_CLOCK, controller: ControllerConfig | None = None
    ) -> None:
        if config.enable_controller != (controller is not None):
            raise ValueError("enableControllerInNamesrv=true needs the controller's config, and only then")
        self.config = config
        self.clock = clock
        self.routes = RouteInfo(expiry_ms=config.broker_expiry_ms)
        self.kv = KVConfig(Path(config.kv_config_path) if config.kv_config_path else None)
        self.server = RemotingServer(
            config.listen_host, config.listen_port, name="namesrv", idle_timeout=config.idle_timeout_s
        )
        self.state = NamesrvState(self.routes, self.kv, clock)
        register_all(self.server, self.state)
        self.server.on_disconnect.append(self._on_disconnect)
        interval = config.scan_interval_ms / 1000  # RocketMQ: first after 5 s, then every 10 s
        self._scan = Periodic("broker-expiry-scan", self._expire_brokers, interval, first_delay=min(5.0, interval))
        self.controller: ControllerService | None = None
        if controller is not None:
            self.controller = ControllerService(controller, clock, listen_host=config.listen_host)
            self.controller.attach(self.server)

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        self.kv.load()
        if self.controller is not None:
            node = self.controller.node
            try:
                await self.controller.start()
            except OSError as exc:
                peers_key = "controllerDLegerPeers"
                raise bind_failed(
                    "controller Raft address", node.server.host, node.server.port, peers_key, exc
                ) from None
        try:
            await self.server.start()
        except BaseException:
            if self.controller is not None:
                await self.controller.stop()
            raise
        self._scan.start()

    async def stop(self) -> None:
        await self._scan.stop()
        await self.server.stop()
        if self.controller is not None:
            await self.controller.stop()

    def _on_disconnect(self, conn: Connection) -> None:
        self.routes.on_connection_closed(conn)

    def _expire_brokers(self) -> None:
        """Drop silent brokers and close their connections (RocketMQ's scanNotActiveBroker):
        the broker then reconnects and registers its full table, not just changes."""
        connections = {addr: info.connection_id for addr, info in self.routes.live.items()}
        for addr in self.routes.scan_not_active(self.clock.wall_ms()):
            conn = connections.get(addr)
            if isinstance(conn, Connection):
                conn.close()
