"""``ControllerService``: a controller node with its leader duties and request processors,
started and stopped as one; what a name server embeds and ``ledgermq controller`` runs.

Requests are answered on the node's Raft address and on every server given to ``attach``
(a name server's port, a standalone controller's ``listenPort``), registered before start.
"""

from __future__ import annotations

import logging

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.controller.config import ControllerConfig
from ledgermq.controller.failover import Failover
from ledgermq.controller.node import ControllerNode
from ledgermq.controller.processors import Controller, register
from ledgermq.net.server import RemotingServer

__all__ = ["ControllerService"]

log = logging.getLogger(__name__)


class ControllerService:
    def __init__(self, config: ControllerConfig, clock: Clock = SYSTEM_CLOCK, *, listen_host: str = "0.0.0.0") -> None:
        self.config = config
        self.node = ControllerNode(config, clock, listen_host=listen_host)
        self.failover = Failover(self.node)
        self.controller = Controller(self.node, self.failover)
        register(self.node.server, self.controller)
        self._started = False

    def attach(self, server: RemotingServer) -> None:
        """Answer controller requests on ``server`` too (before it starts)."""
        register(server, self.controller)

    async def start(self) -> None:
        await self.node.start()
        self.failover.start()
        self._started = True

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        await self.failover.stop()
        await self.node.stop()
