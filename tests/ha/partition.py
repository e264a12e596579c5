"""Cutting one broker off from the controller, the name server and its slave, while clients still reach it.

The broker advertises ``brokerIP1=127.0.0.3`` (Linux routes all of 127/8 to loopback) but binds 127.0.0.1, and
names the name server (which runs the controller) at 127.0.0.3 too. Fault proxies (``ledgermq.chaos.proxy``)
listen on 127.0.0.3 and forward to 127.0.0.1: on the broker's port (what the controller and the other brokers
use: role notifications, GET_BROKER_CONFIG), on its HA port (what its slave connects to) and on the name server's
port (its heartbeats, controller requests and registrations). A test's own client sends to 127.0.0.1 directly, so
cutting the proxies isolates the broker from everything but its clients. The proxies run on an event loop in a
background thread; ``cut`` and ``heal`` return once applied.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import HAClientInfo
from ledgermq.chaos.proxy import FaultProxy
from tests.compat.cluster import HOST
from tests.ha.controller_group import ControllerGroup
from tests.ha.process_group import BrokerProc

ISOLATED_HOST = "127.0.0.3"
T = TypeVar("T")


class IsolatedLinks:
    def __init__(self, group: ControllerGroup, listen_port: int) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxies", daemon=True)
        self._thread.start()
        ports = {"broker": listen_port, "ha": listen_port + 1, "namesrv": group.namesrv_port}
        self.proxies = [FaultProxy((ISOLATED_HOST, p), (HOST, p), name) for name, p in ports.items()]
        for proxy in self.proxies:
            self._run(proxy.start())
        self.props: dict[str, object] = {
            "brokerIP1": ISOLATED_HOST,
            "namesrvAddr": f"{ISOLATED_HOST}:{group.namesrv_port}",
            "controllerAddr": f"{ISOLATED_HOST}:{group.namesrv_port}",
        }

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(10)

    def cut(self, mode: str = "blackhole", only: tuple[str, ...] = ("broker", "ha", "namesrv")) -> None:
        """Cut the links named in ``only`` (all by default; "ha" alone stops replication to the slave)."""

        async def cut() -> None:
            for proxy in self.proxies:
                if proxy.name in only:
                    proxy.cut(mode)

        self._run(cut())

    def heal(self) -> None:
        async def heal() -> None:
            for proxy in self.proxies:
                proxy.heal()

        self._run(heal())

    def close(self) -> None:
        async def close() -> None:
            for proxy in self.proxies:
                await proxy.close()

        try:
            self._run(close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop.close()


def start_isolatable_pair(
    tmp_path: Path, **common: object
) -> tuple[ControllerGroup, IsolatedLinks, BrokerProc, BrokerProc]:
    """A name server with the controller, master ``a`` (its links through the proxies) and slave ``b``, in sync."""
    group = ControllerGroup(tmp_path, **common)
    a = group.add_broker("a")
    b = group.add_broker("b")
    links = IsolatedLinks(group, a.port)
    lines = [line for line in a.conf.read_text().splitlines() if line.split("=", 1)[0] not in links.props]
    a.conf.write_text("".join(f"{line}\n" for line in lines) + "".join(f"{k}={v}\n" for k, v in links.props.items()))
    group.start_pair(a, b)
    return group, links, a, b


def ha_client_info(group: ControllerGroup, b: BrokerProc) -> HAClientInfo:
    """A slave's HA client as haStatus shows it."""

    async def ask() -> HAClientInfo:
        async with AdminClient(group.namesrv_addr, timeout=2.0) as admin:
            return (await admin.ha_status(b.addr)).client

    return asyncio.run(ask())
