"""What the controller holds per broker group, and what applying an event answers.

Mutable on purpose: only ``ReplicasState.apply`` changes these objects, one committed log
entry at a time; readers take ``ReplicasState.view``-style copies (``snapshot``) or read
between entries on the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledgermq.protocol.codes import ResponseCode

__all__ = ["FIRST_BROKER_CONTROLLER_ID", "BrokerGroup", "Replica", "Result"]

FIRST_BROKER_CONTROLLER_ID = 1
"""The id of a group's first replica (RocketMQ's MixAll.FIRST_BROKER_CONTROLLER_ID)."""


@dataclass(slots=True)
class Replica:
    broker_id: int
    address: str
    register_check_code: str
    alive: bool = False
    """As the leader last recorded it (BROKER_HEARTBEAT / BROKER_INACTIVE events)."""
    last_heartbeat_ms: int = 0
    """The leader's clock when it last recorded this replica as alive (0: never)."""


@dataclass(slots=True)
class BrokerGroup:
    """One broker group (``brokerName``), RocketMQ's BrokerReplicaInfo and SyncStateInfo in one."""

    cluster_name: str
    broker_name: str
    replicas: dict[int, Replica] = field(default_factory=dict)
    next_broker_id: int = FIRST_BROKER_CONTROLLER_ID
    master_broker_id: int | None = None
    master_epoch: int = 0
    sync_state_set: set[int] = field(default_factory=set)
    sync_state_set_epoch: int = 0
    elected_once: bool = False
    """A master was ever elected for this group (until then, the first replica to ask becomes it)."""

    @property
    def master_address(self) -> str | None:
        r = self.replicas.get(self.master_broker_id) if self.master_broker_id is not None else None
        return r.address if r is not None else None

    def address_of(self, broker_id: int) -> str | None:
        r = self.replicas.get(broker_id)
        return r.address if r is not None else None

    def alive_ids(self) -> set[int]:
        return {i for i, r in self.replicas.items() if r.alive}

    def snapshot(self) -> dict[str, Any]:
        """A canonical, comparable copy (tests compare nodes' states with it)."""
        return {
            "cluster": self.cluster_name,
            "replicas": {
                i: (r.address, r.register_check_code, r.alive, r.last_heartbeat_ms)
                for i, r in sorted(self.replicas.items())
            },
            "next": self.next_broker_id,
            "master": self.master_broker_id,
            "masterEpoch": self.master_epoch,
            "syncStateSet": sorted(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
            "electedOnce": self.elected_once,
        }


@dataclass(frozen=True, slots=True)
class Result:
    """The answer of one applied event: a RocketMQ response code, a remark, and the values the
    request's response header and body are built from (None where the operation has none)."""

    code: ResponseCode = ResponseCode.SUCCESS
    remark: str | None = None
    changed: bool = False
    """Whether the event changed the state (a refusal never does)."""
    cluster_name: str | None = None
    broker_name: str | None = None
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int | None = None
    sync_state_set: frozenset[int] | None = None
    sync_state_set_epoch: int | None = None
    member_addrs: dict[int, str] | None = None
    """The group's replicas (id -> address) after an election: whom to tell."""
    was_master: bool = False
    """BROKER_INACTIVE: the replica that went away was the group's master."""

    @property
    def ok(self) -> bool:
        return self.code is ResponseCode.SUCCESS

    @classmethod
    def refuse(cls, code: ResponseCode, remark: str) -> Result:
        return cls(code=code, remark=remark)
