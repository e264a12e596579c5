"""The words controller mode speaks in: a broker's role, what the controller says of its group,
and what the broker's wiring must do to take a role."""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Protocol

from ledgermq.controller.client import ControllerClient
from ledgermq.errors import LedgerError
from ledgermq.protocol.codes import ResponseCode

__all__ = ["MasterView", "Role", "RoleSwitch", "fetch_view", "request_election"]

log = logging.getLogger(__name__)


class Role(enum.Enum):
    STARTING = "STARTING"  # no id or no role yet
    MASTER = "MASTER"
    SLAVE = "SLAVE"
    SWITCHING = "SWITCHING"


@dataclass(frozen=True, slots=True)
class MasterView:
    """What the controller says of the group (an answer or a notification)."""

    master_id: int | None
    master_addr: str | None
    master_epoch: int
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0


class RoleSwitch(Protocol):
    """The broker's wiring, told to take a role (``BrokerApp``)."""

    async def become_master(self, master_epoch: int) -> None: ...

    async def become_slave(self, master_addr: str | None, broker_id: int) -> None: ...

    def settled(self) -> None:
        """The role is taken (and a master's lease open): register it with the name servers now."""


async def fetch_view(controllers: ControllerClient, broker_name: str) -> MasterView:
    """GET_REPLICA_INFO as a ``MasterView``."""
    hdr, sss = await controllers.get_replica_info(broker_name)
    return MasterView(
        hdr.master_broker_id, hdr.master_address, hdr.master_epoch or 0, sss.sync_state_set, sss.sync_state_set_epoch
    )


async def request_election(
    controllers: ControllerClient, cluster_name: str, broker_name: str, broker_id: int
) -> MasterView | None:
    """CONTROLLER_ELECT_MASTER for a group with no master; the group as the answer gives it
    (also when a master exists already), or None when nobody was elected (logged)."""
    try:
        resp, hdr, body = await controllers.elect_master(cluster_name, broker_name, broker_id, designate=False)
    except (LedgerError, OSError, TimeoutError) as exc:
        log.warning("controller mode: election request failed: %s", exc)
        return None
    if resp.code not in (ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST):
        log.info("controller mode: no master elected for %s yet: %s", broker_name, resp.remark)
        return None
    sss = body.sync_state_set if body is not None else frozenset()
    return MasterView(
        hdr.master_broker_id, hdr.master_address, hdr.master_epoch or 0, sss, hdr.sync_state_set_epoch or 0
    )
