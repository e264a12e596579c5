"""``ReplicasState``: the controller's replicated state machine (RocketMQ's ReplicasInfoManager).

Pure and deterministic: no I/O, no clock (time arrives inside events), no randomness. The
only way to change it is ``apply`` with the next committed event, so every node that
applied the same log prefix holds the same state; read-only questions (``replica_info``,
``sync_state_data``, ``next_broker_id``) never change it.

Every refusal is decided here, when the event is applied: an ALTER_SYNC_STATE_SET whose
master or epochs are no longer current is refused even if it looked current when the leader
proposed it. A refused event changes nothing.

Beyond RocketMQ: epochs never go back. When a whole group is cleaned, its last master and
SyncStateSet epochs are remembered, and a group registered again under that name continues
from them, so a broker that kept its epoch file never sees an epoch number reused. A
partial clean that shrinks the SyncStateSet bumps its epoch (RocketMQ changes the set
without one), and cleaning the master's id deposes it with a new master epoch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ledgermq.controller.elect import elect
from ledgermq.controller.events import (
    AlterSyncStateSet,
    ApplyBrokerId,
    BrokerHeartbeat,
    BrokerInactive,
    CleanBrokerData,
    ElectMaster,
    Event,
    EventFormatError,
    RegisterBroker,
    decode_entry,
)
from ledgermq.controller.model import FIRST_BROKER_CONTROLLER_ID, BrokerGroup, Replica, Result
from ledgermq.protocol.codes import ResponseCode as RC

__all__ = ["ReplicasState"]


class ReplicasState:
    def __init__(self) -> None:
        self.groups: dict[str, BrokerGroup] = {}
        self.retired_epochs: dict[str, tuple[int, int]] = {}
        """brokerName -> (master epoch, SyncStateSet epoch) of a group cleaned as a whole."""
        self.applied_events = 0
        self.malformed_entries = 0

    # -- applying ------------------------------------------------------------------
    def apply_entry(self, data: bytes) -> tuple[Result, str]:
        """Decode and apply one committed log entry; (result, request id). A malformed entry
        changes nothing and is answered CONTROLLER_INVALID_REQUEST, on every node alike."""
        try:
            event, rid = decode_entry(data)
        except EventFormatError as exc:
            self.malformed_entries += 1
            return Result.refuse(RC.CONTROLLER_INVALID_REQUEST, f"undecodable controller log entry: {exc}"), ""
        return self.apply(event), rid

    def apply(self, event: Event) -> Result:
        self.applied_events += 1
        if isinstance(event, ApplyBrokerId):
            return self._apply_broker_id(event)
        if isinstance(event, RegisterBroker):
            return self._register_broker(event)
        if isinstance(event, BrokerHeartbeat):
            return self._heartbeat(event)
        if isinstance(event, BrokerInactive):
            return self._inactive(event)
        if isinstance(event, AlterSyncStateSet):
            return self._alter_sync_state_set(event)
        if isinstance(event, ElectMaster):
            return self._elect_master(event)
        return self._clean(event)

    def _apply_broker_id(self, ev: ApplyBrokerId) -> Result:
        g = self.groups.get(ev.broker_name)
        ok = Result(cluster_name=ev.cluster_name, broker_name=ev.broker_name)
        if ev.broker_id < FIRST_BROKER_CONTROLLER_ID:
            return Result.refuse(RC.CONTROLLER_BROKER_ID_INVALID, f"brokerId {ev.broker_id} is below 1")
        if not ev.broker_address:
            return Result.refuse(RC.CONTROLLER_INVALID_REQUEST, "registerCheckCode carries no broker address")
        if g is None:
            if ev.broker_id != FIRST_BROKER_CONTROLLER_ID:
                return Result.refuse(
                    RC.CONTROLLER_BROKER_ID_INVALID,
                    f"broker-set {ev.broker_name} has not been registered, but brokerId {ev.broker_id} was "
                    f"applied for (the first replica must apply for {FIRST_BROKER_CONTROLLER_ID})",
                )
            g = BrokerGroup(ev.cluster_name, ev.broker_name)
            g.master_epoch, g.sync_state_set_epoch = self.retired_epochs.pop(ev.broker_name, (0, 0))
            self.groups[ev.broker_name] = g
        elif ev.cluster_name and g.cluster_name != ev.cluster_name:
            return Result.refuse(
                RC.CONTROLLER_INVALID_REQUEST,
                f"broker-set {ev.broker_name} belongs to cluster {g.cluster_name}, not {ev.cluster_name}",
            )
        existing = g.replicas.get(ev.broker_id)
        if existing is not None:
            if existing.register_check_code != ev.register_check_code:
                return Result.refuse(
                    RC.CONTROLLER_BROKER_ID_INVALID,
                    f"brokerId {ev.broker_id} of broker-set {ev.broker_name} belongs to another broker",
                )
            return ok
        g.replicas[ev.broker_id] = Replica(ev.broker_id, ev.broker_address, ev.register_check_code)
        g.next_broker_id = max(g.next_broker_id, ev.broker_id + 1)
        return Result(cluster_name=ev.cluster_name, broker_name=ev.broker_name, changed=True)

    def _register_broker(self, ev: RegisterBroker) -> Result:
        g = self.groups.get(ev.broker_name)
        if g is None:
            return Result.refuse(
                RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"broker-set {ev.broker_name} has not been registered"
            )
        r = g.replicas.get(ev.broker_id)
        if r is None:
            return Result.refuse(
                RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"brokerId {ev.broker_id} has not been registered in broker-set {ev.broker_name}",
            )
        changed = bool(ev.broker_address) and r.address != ev.broker_address
        if changed:
            r.address = ev.broker_address
        master_alive = g.master_broker_id is not None and g.master_broker_id in g.alive_ids()
        return Result(
            changed=changed,
            cluster_name=g.cluster_name,
            broker_name=g.broker_name,
            master_broker_id=g.master_broker_id if master_alive else None,
            master_address=g.master_address if master_alive else None,
            master_epoch=g.master_epoch if master_alive else None,
            sync_state_set=frozenset(g.sync_state_set),
            sync_state_set_epoch=g.sync_state_set_epoch,
        )

    def _replica(self, broker_name: str, broker_id: int) -> tuple[BrokerGroup, Replica] | Result:
        g = self.groups.get(broker_name)
        r = g.replicas.get(broker_id) if g is not None else None
        if g is None or r is None:
            return Result.refuse(
                RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"brokerId {broker_id} of broker-set {broker_name} is not registered",
            )
        return g, r

    def _heartbeat(self, ev: BrokerHeartbeat) -> Result:
        found = self._replica(ev.broker_name, ev.broker_id)
        if isinstance(found, Result):
            return found
        _g, r = found
        changed = not r.alive
        r.alive = True
        r.last_heartbeat_ms = max(r.last_heartbeat_ms, ev.now_ms)
        return Result(changed=changed)

    def _inactive(self, ev: BrokerInactive) -> Result:
        found = self._replica(ev.broker_name, ev.broker_id)
        if isinstance(found, Result):
            return found
        g, r = found
        changed = r.alive
        r.alive = False
        return Result(changed=changed, was_master=g.master_broker_id == ev.broker_id)

    def _alter_sync_state_set(self, ev: AlterSyncStateSet) -> Result:
        g = self.groups.get(ev.broker_name)
        if g is None:
            return Result.refuse(RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "broker metadata does not exist")
        new = set(ev.sync_state_set)
        if new == g.sync_state_set:
            return Result.refuse(
                RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                "the new SyncStateSet equals the current one; nothing to update",
            )
        if g.master_broker_id is None or g.master_broker_id != ev.master_broker_id:
            return Result.refuse(
                RC.CONTROLLER_INVALID_MASTER,
                f"the current master is {g.master_broker_id}, not {ev.master_broker_id}",
            )
        if ev.master_epoch != g.master_epoch:
            return Result.refuse(
                RC.CONTROLLER_FENCED_MASTER_EPOCH,
                f"the current master epoch is {g.master_epoch}, not {ev.master_epoch}",
            )
        if ev.sync_state_set_epoch != g.sync_state_set_epoch:
            return Result.refuse(
                RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                f"the current SyncStateSet epoch is {g.sync_state_set_epoch}, not {ev.sync_state_set_epoch}",
            )
        for broker_id in sorted(new):
            r = g.replicas.get(broker_id)
            if r is None:
                return Result.refuse(RC.CONTROLLER_INVALID_REPLICAS, f"replica {broker_id} does not exist")
            if not r.alive:
                return Result.refuse(RC.CONTROLLER_BROKER_NOT_ALIVE, f"replica {broker_id} is not alive")
        if g.master_broker_id not in new:
            return Result.refuse(
                RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                f"the new SyncStateSet does not contain the master {g.master_broker_id}",
            )
        g.sync_state_set = new
        g.sync_state_set_epoch += 1
        return Result(changed=True, sync_state_set=frozenset(new), sync_state_set_epoch=g.sync_state_set_epoch)

    def _elect_master(self, ev: ElectMaster) -> Result:
        g = self.groups.get(ev.broker_name)
        if g is None:
            return Result.refuse(
                RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"broker-set {ev.broker_name} has not been registered"
            )
        old = g.master_broker_id
        new: int | None = None
        if not g.elected_once and ev.broker_id in g.replicas:
            new = ev.broker_id  # the group's first election: the replica that asks becomes master
        else:
            prefer = ev.broker_id if ev.designate else None
            info = {c.broker_id: c for c in ev.candidates}
            new = elect(g.sync_state_set, set(g.replicas), g.alive_ids(), old, prefer, ev.unclean, info)
        if new is not None and new == old:
            return Result(
                code=RC.CONTROLLER_MASTER_STILL_EXIST,
                remark=f"the master {old} of broker-set {g.broker_name} is still alive; no election needed",
                master_broker_id=old,
                master_address=g.master_address,
                master_epoch=g.master_epoch,
                sync_state_set=frozenset(g.sync_state_set),
                sync_state_set_epoch=g.sync_state_set_epoch,
            )
        if new is not None:
            g.master_broker_id = new
            g.elected_once = True
            g.master_epoch += 1
            g.sync_state_set = {new}
            g.sync_state_set_epoch += 1
            return Result(
                changed=True,
                cluster_name=g.cluster_name,
                broker_name=g.broker_name,
                master_broker_id=new,
                master_address=g.master_address,
                master_epoch=g.master_epoch,
                sync_state_set=frozenset(g.sync_state_set),
                sync_state_set_epoch=g.sync_state_set_epoch,
                member_addrs={i: r.address for i, r in g.replicas.items()},
            )
        if ev.broker_id == -1 and old is not None:
            # The controller's trigger found nobody: depose the lost master (a new epoch fences
            # it) and keep the SyncStateSet, so a member of it can be elected when it returns.
            g.master_broker_id = None
            g.master_epoch += 1
            return Result(
                code=RC.CONTROLLER_MASTER_NOT_AVAILABLE,
                remark=f"the master of broker-set {g.broker_name} is down and no replica can be elected",
                changed=True,
                master_epoch=g.master_epoch,
            )
        if ev.broker_id == -1:
            return Result.refuse(
                RC.CONTROLLER_MASTER_NOT_AVAILABLE, f"broker-set {g.broker_name} has no master and no electable replica"
            )
        return Result.refuse(RC.CONTROLLER_ELECT_MASTER_FAILED, f"failed to elect a new master for {g.broker_name}")

    def _clean(self, ev: CleanBrokerData) -> Result:
        g = self.groups.get(ev.broker_name)
        if not ev.clean_living:
            if not ev.broker_ids and g is not None and g.master_broker_id is not None:
                return Result.refuse(
                    RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                    f"broker-set {ev.broker_name} still has a master; clean up refused",
                )
            if ev.broker_ids and g is not None:
                living = sorted(i for i in ev.broker_ids if i in g.alive_ids())
                if living:
                    return Result.refuse(
                        RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                        f"broker {ev.broker_name} replicas {living} are still alive; clean up refused",
                    )
        if g is None:
            return Result.refuse(
                RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, f"broker {ev.broker_name} does not exist; nothing to clean"
            )
        if not ev.broker_ids:
            self._retire(g)
            return Result(changed=True)
        for broker_id in ev.broker_ids:
            g.replicas.pop(broker_id, None)
        if g.master_broker_id in ev.broker_ids:
            g.master_broker_id = None
            g.master_epoch += 1
        if g.sync_state_set & ev.broker_ids:
            g.sync_state_set -= ev.broker_ids
            g.sync_state_set_epoch += 1
        if not g.replicas:
            self._retire(g)
        return Result(changed=True)

    def _retire(self, g: BrokerGroup) -> None:
        self.retired_epochs[g.broker_name] = (g.master_epoch, g.sync_state_set_epoch)
        del self.groups[g.broker_name]

    # -- reading -------------------------------------------------------------------
    def replica_info(self, broker_name: str) -> Result:
        """GET_REPLICA_INFO: the master, its epoch and the SyncStateSet."""
        g = self.groups.get(broker_name)
        if g is None:
            return Result.refuse(RC.CONTROLLER_BROKER_METADATA_NOT_EXIST, "broker metadata does not exist")
        return Result(
            master_broker_id=g.master_broker_id,
            master_address=g.master_address,
            master_epoch=g.master_epoch,
            sync_state_set=frozenset(g.sync_state_set),
            sync_state_set_epoch=g.sync_state_set_epoch,
        )

    def next_broker_id(self, broker_name: str) -> int:
        g = self.groups.get(broker_name)
        return FIRST_BROKER_CONTROLLER_ID if g is None else g.next_broker_id

    def sync_state_data(self, broker_names: Iterable[str]) -> dict[str, BrokerGroup]:
        """GET_SYNC_STATE_DATA: the groups that exist among ``broker_names``."""
        return {n: self.groups[n] for n in broker_names if n in self.groups}

    def snapshot(self) -> dict[str, Any]:
        """Canonical contents, for comparing nodes."""
        return {
            "groups": {n: g.snapshot() for n, g in sorted(self.groups.items())},
            "retired": dict(sorted(self.retired_epochs.items())),
        }
