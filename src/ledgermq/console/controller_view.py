"""Controller mode on the cluster page: what each broker says of the role the controller gave
it (brokerStatus's controller keys), and where the controller is, so the page can ask it for
every group's master epoch and SyncStateSet without being told.

Where the controller is: ``--controller`` when given; else the ``controllerAddr`` of a
controller-mode broker's own config (GET_BROKER_CONFIG, asked once per broker address, since
a running broker does not change it: RocketMQ 5 brokers list it there, ledgermq's do not
yet), which names the controller nodes whether they run inside the name servers or alone;
else the name servers themselves (one with the controller inside answers controller
requests on its own port).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from ledgermq.admin import operations as ops
from ledgermq.admin.client import AdminClient
from ledgermq.errors import LedgerError

CONTROLLER_ADDR_KEY = "controllerAddr"
NAMESRV_SOURCE = "the name servers"


@dataclass(frozen=True, slots=True)
class ControllerFacts:
    """A controller-mode broker's own view: its role, its id, and the master, master epoch and
    SyncStateSet it last learned (the controller's answer is the authority; this is the broker's)."""

    role: str  # STARTING, MASTER, SLAVE, SWITCHING
    broker_id: int
    master_broker_id: int
    master_epoch: int
    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int


def controller_facts(table: Mapping[str, str]) -> ControllerFacts | None:
    """The controller keys of a GET_BROKER_RUNTIME_INFO table; None for a broker not in
    controller mode (it has no ``controllerRole``)."""
    role = table.get("controllerRole")
    if not role:
        return None
    members = tuple(int(m) for m in table.get("syncStateSet", "").split(",") if m.strip().lstrip("-").isdigit())
    return ControllerFacts(
        role=role,
        broker_id=_int(table.get("brokerControllerId")),
        master_broker_id=_int(table.get("masterBrokerId")),
        master_epoch=_int(table.get("masterEpoch")),
        sync_state_set=members,
        sync_state_set_epoch=_int(table.get("syncStateSetEpoch")),
    )


class ControllerFinder:
    """The controller addresses to ask for a set of controller-mode brokers (see the module)."""

    def __init__(self, admin: AdminClient, override: str | None, timeout_s: float) -> None:
        self.admin = admin
        self.override = override
        self.timeout_s = timeout_s
        self._configured: dict[str, str] = {}  # broker address -> its controllerAddr ("" if none)

    async def addrs(self, broker_addrs: list[str]) -> tuple[str, str]:
        """(controller addresses ``host:port;...``, where they came from, for the page)."""
        if self.override:
            return self.override, "--controller"
        for addr in broker_addrs:
            if addr not in self._configured:
                try:
                    config = await asyncio.wait_for(ops.get_broker_config(self.admin, addr), self.timeout_s)
                except (LedgerError, OSError, TimeoutError):
                    continue  # not kept: asked again at the next look
                self._configured[addr] = config.get(CONTROLLER_ADDR_KEY, "").strip()
            if self._configured[addr]:
                return self._configured[addr], f"{CONTROLLER_ADDR_KEY} of broker {addr}"
        return ";".join(self.admin.namesrv_addrs), NAMESRV_SOURCE


def _int(text: str | None) -> int:
    try:
        return int(text or "")
    except ValueError:
        return -1


__all__ = ["NAMESRV_SOURCE", "ControllerFacts", "ControllerFinder", "controller_facts"]
