"""Controller groups for tests: in-process ``ControllerService`` nodes on loopback, and a fake
broker that heartbeats every node and records what the controller tells it.

Timing is scaled down (Raft tick 50 ms, election timeout 500 ms, scans every 50 ms, brokers'
heartbeat timeout 400 ms). Every wait has a deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledgermq.controller.client import ControllerClient
from ledgermq.controller.config import ControllerConfig
from ledgermq.controller.service import ControllerService
from ledgermq.net.client import RemotingClient
from ledgermq.net.server import RemotingServer, RequestContext
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_controller import (
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
)
from ledgermq.testing.ports import HOST, free_port

FAST = {
    "raft_heartbeat_interval_ms": 50,
    "raft_election_timeout_ms": 500,
    "scan_not_active_broker_interval_ms": 50,
    "scan_inactive_master_interval_ms": 200,
    "heartbeat_timeout_ms": 400,
    "mapped_file_size": 1 << 20,
}


def peers_string(ids: list[str]) -> str:
    return ";".join(f"{n}-{HOST}:{free_port()}" for n in ids)


def fast_config(root: Path, peers: str, self_id: str, **overrides: Any) -> ControllerConfig:
    return ControllerConfig(
        group="group1", peers=peers, self_id=self_id, store_path=str(root / self_id), **{**FAST, **overrides}
    )


async def wait_until(pred: Callable[[], bool], timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


class Group:
    def __init__(self, root: Path, size: int = 3, **overrides: Any) -> None:
        self.root = root
        self.ids = [f"n{i}" for i in range(size)]
        self.peers = peers_string(self.ids)
        self.overrides = overrides
        self.services: dict[str, ControllerService] = {}

    async def start_node(self, node_id: str) -> ControllerService:
        svc = ControllerService(fast_config(self.root, self.peers, node_id, **self.overrides), listen_host=HOST)
        await svc.start()
        self.services[node_id] = svc
        return svc

    async def start(self) -> None:
        for n in self.ids:
            await self.start_node(n)

    async def stop_node(self, node_id: str) -> None:
        svc = self.services.pop(node_id)
        await svc.stop()

    async def stop(self) -> None:
        for n in list(self.services):
            await self.stop_node(n)

    async def leader(self, timeout: float = 5.0) -> ControllerService:
        def ready() -> list[ControllerService]:
            return [s for s in self.services.values() if s.node.is_ready_leader]

        await wait_until(lambda: len(ready()) == 1, timeout, "one ready controller leader")
        return ready()[0]

    @property
    def addrs(self) -> list[str]:
        return [s.node.address for s in self.services.values()]


class FakeBroker:
    """A broker's controller-facing half: applies for its id, registers, heartbeats every
    controller node on a timer, and records NOTIFY_BROKER_ROLE_CHANGED requests."""

    def __init__(self, controllers: list[str], broker_name: str, broker_id: int, *, timeout_ms: int = 400) -> None:
        self.controllers = controllers
        self.broker_name = broker_name
        self.broker_id = broker_id
        self.timeout_ms = timeout_ms
        self.server = RemotingServer(HOST, free_port(), name=f"fake-broker-{broker_id}")
        self.server.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, self._on_notify)
        self.notified: list[tuple[NotifyBrokerRoleChangedRequestHeader, bytes]] = []
        self.client = RemotingClient(connect_timeout=0.5)
        self.epoch = 0
        self.max_offset = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.server.port}"

    async def _on_notify(self, ctx: RequestContext, cmd: RemotingCommand) -> None:
        self.notified.append((NotifyBrokerRoleChangedRequestHeader.decode(cmd), cmd.body))

    async def start(self) -> None:
        await self.server.start()

    async def register(self, ctl: ControllerClient) -> None:
        code = f"{self.address};disk-{self.broker_id}"
        hdr = ApplyBrokerIdRequestHeader("DefaultCluster", self.broker_name, self.broker_id, code)
        resp = await ctl.invoke(RemotingCommand.request(RequestCode.CONTROLLER_APPLY_BROKER_ID, hdr.ext()))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        reg = RegisterBrokerToControllerRequestHeader("DefaultCluster", self.broker_name, self.broker_id, self.address)
        resp = await ctl.invoke(RemotingCommand.request(RequestCode.CONTROLLER_REGISTER_BROKER, reg.ext()))
        assert resp.code == ResponseCode.SUCCESS, resp.remark

    def start_heartbeats(self, interval: float = 0.1) -> None:
        self._task = asyncio.create_task(self._beat(interval))

    async def _beat(self, interval: float) -> None:
        while True:
            hdr = BrokerHeartbeatRequestHeader(
                "DefaultCluster",
                self.address,
                self.broker_name,
                self.broker_id,
                self.epoch,
                self.max_offset,
                self.max_offset,
                self.timeout_ms,
                None,
            )
            for addr in self.controllers:
                cmd = RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, hdr.ext(), oneway=True)
                try:
                    await self.client.invoke_oneway(addr, cmd)
                except Exception:
                    pass  # a controller node that is down: the others still hear us
            await asyncio.sleep(interval)

    async def stop_heartbeats(self, *, close: bool = False) -> None:
        """Stop beating; ``close`` also closes the connections (as a killed broker's would)."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if close:
            await self.client.close()
            self.client = RemotingClient(connect_timeout=0.5)

    async def stop(self) -> None:
        await self.stop_heartbeats()
        await self.client.close()
        await self.server.stop()
