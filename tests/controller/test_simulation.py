"""The controller's state machine inside the seeded Raft simulator (ledgermq.testing.raft_sim).

Each seed runs a cluster under loss, reordering, partitions, crashes and disk stalls while
the leader proposes controller events drawn from the seed (registrations, heartbeats,
inactivity, SyncStateSet changes with current or stale epochs, elections clean, unclean and
planned, cleans). Every node applies what it commits to its own ``ReplicasState``; a
crashed node restarts with an empty one and replays its log. After every applied entry:

* every node's state after entry i is identical (nodes never change state but by applying
  the log, and applying is deterministic);
* at most one master per group per master epoch, over the whole run and all nodes;
* epochs only grow (also across a group cleaned and registered again);
* a new master comes from the SyncStateSet, unless the event allowed unclean election or it
  is the group's first election;
* the master, when there is one, is in the SyncStateSet.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from ledgermq.controller.events import (
    AlterSyncStateSet,
    ApplyBrokerId,
    BrokerHeartbeat,
    BrokerInactive,
    CandidateInfo,
    CleanBrokerData,
    ElectMaster,
    Event,
    EventFormatError,
    decode_entry,
    encode_entry,
)
from ledgermq.controller.state import ReplicasState
from ledgermq.raft import EntryKind, ProposalDroppedError
from ledgermq.raft.types import Entry
from ledgermq.testing.raft_invariants import ClusterChecker, InvariantFailure
from ledgermq.testing.raft_sim import MAX_BACKLOG, Simulation, random_profile

SEEDS = int(os.environ.get("LEDGERMQ_CONTROLLER_SEEDS", "160"))
GROUPS = ("broker-a", "broker-b")


class ControllerChecker(ClusterChecker):
    def __init__(self) -> None:
        super().__init__()
        self.states: dict[str, ReplicasState] = {}
        self.after: dict[int, dict[str, Any]] = {}
        """The state after entry i, as the first node to apply it left it."""
        self.masters: dict[tuple[str, int], int] = {}
        self.epochs_seen: dict[str, tuple[int, int]] = {}

    def state(self, node_id: str) -> ReplicasState:
        return self.states.setdefault(node_id, ReplicasState())

    def restarted(self, node_id: str, applied: int) -> None:
        super().restarted(node_id, applied)
        assert applied == 0
        self.states[node_id] = ReplicasState()  # replays the log from the start

    def check_apply(self, node_id: str, entries: tuple[Entry, ...]) -> None:
        super().check_apply(node_id, entries)
        st = self.state(node_id)
        for e in entries:
            before = st.snapshot()
            event: Event | None = None
            if e.kind is EntryKind.NORMAL:
                st.apply_entry(e.data)
                try:
                    event, _ = decode_entry(e.data)
                except EventFormatError:
                    event = None
            after = st.snapshot()
            self._check_transition(node_id, e.index, before, after, event)
            first = self.after.setdefault(e.index, after)
            if first != after:
                raise InvariantFailure(f"{node_id}'s state after entry {e.index} differs: {after} vs {first}")

    def _check_transition(
        self, node_id: str, index: int, before: dict[str, Any], after: dict[str, Any], event: Event | None
    ) -> None:
        where = f"{node_id} entry {index} ({type(event).__name__})"
        for name, g in after["groups"].items():
            epochs = (g["masterEpoch"], g["syncStateSetEpoch"])
            old = before["groups"].get(name)
            floor = (old["masterEpoch"], old["syncStateSetEpoch"]) if old else before["retired"].get(name, (0, 0))
            if epochs[0] < floor[0] or epochs[1] < floor[1]:
                raise InvariantFailure(f"{where}: epochs of {name} went back from {floor} to {epochs}")
            master = g["master"]
            if master is not None and master not in g["syncStateSet"]:
                raise InvariantFailure(
                    f"{where}: master {master} of {name} not in its SyncStateSet {g['syncStateSet']}"
                )
            if master is not None:
                seen = self.masters.setdefault((name, epochs[0]), master)
                if seen != master:
                    raise InvariantFailure(f"{where}: {name} epoch {epochs[0]} has masters {seen} and {master}")
            if old is not None and master is not None and master != old["master"]:
                if epochs[0] <= old["masterEpoch"]:
                    raise InvariantFailure(f"{where}: {name} changed master without a new epoch")
                clean = master in old["syncStateSet"] or not old["electedOnce"]
                if not clean and not (isinstance(event, ElectMaster) and event.unclean):
                    raise InvariantFailure(f"{where}: {name} elected {master} outside {old['syncStateSet']}")
        for name, g in before["groups"].items():
            kept = after["retired"].get(name, (-1, -1))
            if name not in after["groups"] and (kept[0] < g["masterEpoch"] or kept[1] < g["syncStateSetEpoch"]):
                raise InvariantFailure(f"{where}: {name} removed without keeping its epochs")


class ControllerSimulation(Simulation):
    def __init__(self, seed: int, nodes: int) -> None:
        import random

        super().__init__(seed, random_profile(random.Random(seed), nodes))
        self.checker = ControllerChecker()

    def _propose(self) -> None:
        up = [n for n in self.nodes.values() if n is not None]
        if not up:
            return
        leader = self.leader()
        n = leader if leader is not None and self.rng.random() < 0.8 else self.rng.choice(up)
        if n.last_index - n.commit > MAX_BACKLOG:
            return
        event = self._event(self.checker.state(n.id))  # type: ignore[attr-defined]
        try:
            index = n.propose(encode_entry(event, f"{n.id}-{self.now}"))
        except ProposalDroppedError as exc:
            self._log(f"{n.id} propose dropped: {type(exc).__name__}")
            return
        self._after(n, f"{n.id} propose {event} -> {index}")

    def _event(self, st: ReplicasState) -> Event:
        rng = self.rng
        name = rng.choice(GROUPS)
        g = st.groups.get(name)
        ids = sorted(g.replicas) if g else []
        some_id = rng.choice(ids) if ids and rng.random() < 0.9 else rng.randrange(1, 6)
        now = self.now
        roll = rng.random()
        if g is None or roll < 0.12:
            bid = (g.next_broker_id if g else 1) if rng.random() < 0.8 else rng.randrange(1, 6)
            return ApplyBrokerId("c", name, bid, f"10.0.0.{bid}:10911;disk{bid}")
        if roll < 0.35:
            return BrokerHeartbeat(name, some_id, now)
        if roll < 0.5:
            return BrokerInactive(name, some_id, now)
        if roll < 0.7:
            members = {i for i in ids if rng.random() < 0.6}
            if g.master_broker_id is not None and rng.random() < 0.9:
                members.add(g.master_broker_id)
            master = g.master_broker_id if g.master_broker_id is not None and rng.random() < 0.9 else some_id
            stale = rng.random() < 0.2
            return AlterSyncStateSet(
                name,
                master,
                g.master_epoch - (stale and rng.random() < 0.5),
                frozenset(members),
                g.sync_state_set_epoch - (stale and rng.random() < 0.5),
            )
        if roll < 0.95:
            designate = rng.random() < 0.3
            cands = tuple(CandidateInfo(i, rng.randrange(3), rng.randrange(1000)) for i in ids if rng.random() < 0.7)
            return ElectMaster(
                name, some_id if designate or rng.random() < 0.2 else -1, designate, rng.random() < 0.15, cands, now
            )
        picked = frozenset(i for i in ids if rng.random() < 0.4) or None
        return CleanBrokerData(name, picked, rng.random() < 0.3)


def _chunks(total: int, size: int = 40) -> list[tuple[int, int]]:
    return [(lo, min(lo + size, total)) for lo in range(0, total, size)]


@pytest.mark.parametrize(("lo", "hi"), _chunks(SEEDS), ids=str)
def test_state_machine_under_raft_faults(lo: int, hi: int) -> None:
    elections = 0
    for seed in range(lo, hi):
        sim = ControllerSimulation(seed, nodes=3 if seed % 4 else 5)
        sim.run()
        checker = sim.checker
        assert isinstance(checker, ControllerChecker)
        elections += len(checker.masters)
        # Every node that is up ended with the same state (the run lets logs converge).
        live = [nid for nid, n in sim.nodes.items() if n is not None]
        final = {nid: checker.state(nid).snapshot() for nid in live if nid in checker.states}
        top = max((n.applied for n in sim.nodes.values() if n is not None), default=0)
        for nid in live:
            n = sim.nodes[nid]
            assert n is not None
            if n.applied == top and nid in final:
                assert final[nid] == checker.after[top]
    assert elections > (hi - lo)  # the workload really elects masters
