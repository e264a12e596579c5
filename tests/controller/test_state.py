"""ReplicasState: every operation's answers and refusals, and that a refusal changes nothing."""

from __future__ import annotations

import copy

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
    RegisterBroker,
    encode_entry,
)
from ledgermq.controller.state import ReplicasState
from ledgermq.protocol.codes import ResponseCode as RC

G = "broker-a"


def code(state: ReplicasState, event: Event) -> RC:
    return state.apply(event).code


def apply_id(broker_id: int, addr: str | None = None, cluster: str = "DefaultCluster") -> ApplyBrokerId:
    addr = addr or f"127.0.0.1:{30910 + broker_id}"
    return ApplyBrokerId(cluster, G, broker_id, f"{addr};disk-{broker_id}")


def alive(broker_id: int, now: int = 1000) -> BrokerHeartbeat:
    return BrokerHeartbeat(G, broker_id, now)


def elect(
    broker_id: int = -1, designate: bool = False, unclean: bool = False, cands: tuple[CandidateInfo, ...] = ()
) -> ElectMaster:
    return ElectMaster(G, broker_id, designate, unclean, cands, 2000)


def group_of_three(state: ReplicasState) -> None:
    """Replicas 1, 2, 3 alive; 1 master (epoch 1); SyncStateSet {1, 2, 3} (epoch 2)."""
    for i in (1, 2, 3):
        assert state.apply(apply_id(i)).ok
        assert state.apply(alive(i)).ok
    assert state.apply(elect(1)).ok
    assert state.apply(AlterSyncStateSet(G, 1, 1, frozenset({1, 2, 3}), 1)).ok


def refused_without_change(state: ReplicasState, event: Event, expected: RC) -> None:
    before = copy.deepcopy(state.snapshot())
    result = state.apply(event)
    assert result.code is expected, result.remark
    assert result.remark and not result.changed
    assert state.snapshot() == before


# -- apply broker id / register ---------------------------------------------------------------
def test_first_replica_must_apply_for_id_1_and_ids_are_never_handed_out_twice() -> None:
    s = ReplicasState()
    refused_without_change(s, apply_id(2), RC.CONTROLLER_BROKER_ID_INVALID)
    assert s.apply(apply_id(1)).ok
    assert s.next_broker_id(G) == 2
    assert s.apply(apply_id(5)).ok
    assert s.next_broker_id(G) == 6
    assert s.apply(apply_id(1)).ok  # the same broker again (same check code): accepted, unchanged
    refused_without_change(
        s, ApplyBrokerId("DefaultCluster", G, 1, "127.0.0.1:1;other-disk"), RC.CONTROLLER_BROKER_ID_INVALID
    )
    refused_without_change(s, apply_id(3, cluster="OtherCluster"), RC.CONTROLLER_INVALID_REQUEST)
    refused_without_change(s, apply_id(0), RC.CONTROLLER_BROKER_ID_INVALID)
    refused_without_change(s, ApplyBrokerId("DefaultCluster", G, 3, ";x"), RC.CONTROLLER_INVALID_REQUEST)
    assert s.next_broker_id("unknown") == 1


def test_register_refuses_unknown_groups_and_ids_and_reports_only_an_alive_master() -> None:
    s = ReplicasState()
    refused_without_change(s, RegisterBroker("c", G, 1, "a:1"), RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED)
    s.apply(apply_id(1))
    refused_without_change(s, RegisterBroker("c", G, 2, "a:1"), RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED)
    assert s.apply(elect(1)).ok
    r = s.apply(RegisterBroker("DefaultCluster", G, 1, "127.0.0.1:40000"))
    assert r.ok and r.changed and r.master_broker_id is None  # master 1 not alive yet
    assert s.groups[G].replicas[1].address == "127.0.0.1:40000"
    s.apply(alive(1))
    r = s.apply(RegisterBroker("DefaultCluster", G, 1, "127.0.0.1:40000"))
    assert r.ok and not r.changed and r.master_broker_id == 1 and r.master_epoch == 1
    assert r.master_address == "127.0.0.1:40000" and r.sync_state_set == {1}


# -- liveness ---------------------------------------------------------------------------------
def test_heartbeat_and_inactive_need_a_registered_replica_and_report_a_lost_master() -> None:
    s = ReplicasState()
    refused_without_change(s, alive(1), RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED)
    refused_without_change(s, BrokerInactive(G, 1, 5), RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED)
    s.apply(apply_id(1))
    assert s.apply(alive(1, now=50)).changed
    assert not s.apply(alive(1, now=40)).changed
    assert s.groups[G].replicas[1].last_heartbeat_ms == 50
    s.apply(elect(1))
    gone = s.apply(BrokerInactive(G, 1, 60))
    assert gone.ok and gone.changed and gone.was_master
    assert not s.apply(BrokerInactive(G, 1, 61)).changed


# -- alter SyncStateSet -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (AlterSyncStateSet("nope", 1, 1, frozenset({1}), 2), RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),
        (AlterSyncStateSet(G, 1, 1, frozenset({1, 2, 3}), 2), RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),  # same set
        (AlterSyncStateSet(G, 2, 1, frozenset({1, 2}), 2), RC.CONTROLLER_INVALID_MASTER),
        (AlterSyncStateSet(G, 1, 0, frozenset({1, 2}), 2), RC.CONTROLLER_FENCED_MASTER_EPOCH),
        (AlterSyncStateSet(G, 1, 1, frozenset({1, 2}), 1), RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH),
        (AlterSyncStateSet(G, 1, 1, frozenset({1, 9}), 2), RC.CONTROLLER_INVALID_REPLICAS),
        (AlterSyncStateSet(G, 1, 1, frozenset({2, 3}), 2), RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),  # no master
    ],
)
def test_alter_sync_state_set_refusals(event: AlterSyncStateSet, expected: RC) -> None:
    s = ReplicasState()
    group_of_three(s)
    refused_without_change(s, event, expected)


def test_alter_sync_state_set_refuses_a_dead_member_and_bumps_the_epoch_when_accepted() -> None:
    s = ReplicasState()
    group_of_three(s)
    s.apply(BrokerInactive(G, 3, 5000))
    s.apply(AlterSyncStateSet(G, 1, 1, frozenset({1, 2}), 2))
    refused_without_change(s, AlterSyncStateSet(G, 1, 1, frozenset({1, 2, 3}), 3), RC.CONTROLLER_BROKER_NOT_ALIVE)
    r = s.apply(AlterSyncStateSet(G, 1, 1, frozenset({1}), 3))
    assert r.ok and r.sync_state_set == {1} and r.sync_state_set_epoch == 4


def test_alter_without_a_master_is_refused() -> None:
    s = ReplicasState()
    s.apply(apply_id(1))
    s.apply(alive(1))
    refused_without_change(s, AlterSyncStateSet(G, 1, 0, frozenset({1}), 0), RC.CONTROLLER_INVALID_MASTER)


# -- elections ------------------------------------------------------------------------------------
def test_first_election_makes_the_asking_replica_master() -> None:
    s = ReplicasState()
    refused_without_change(s, elect(1), RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED)
    s.apply(apply_id(1))
    s.apply(apply_id(2))
    r = s.apply(elect(2))
    assert r.ok and r.master_broker_id == 2 and r.master_epoch == 1 and r.sync_state_set == {2}
    assert r.member_addrs == {1: "127.0.0.1:30911", 2: "127.0.0.1:30912"}


def test_controller_trigger_picks_the_sync_state_set_member_with_the_most_data() -> None:
    s = ReplicasState()
    group_of_three(s)
    s.apply(BrokerInactive(G, 1, 5000))
    cands = (CandidateInfo(2, epoch=1, max_offset=100), CandidateInfo(3, epoch=1, max_offset=200))
    r = s.apply(elect(cands=cands))
    assert r.ok and r.master_broker_id == 3 and r.master_epoch == 2 and r.sync_state_set == {3}
    assert r.sync_state_set_epoch == 3


def test_a_live_master_stays_and_says_so() -> None:
    s = ReplicasState()
    group_of_three(s)
    r = s.apply(elect())
    assert r.code is RC.CONTROLLER_MASTER_STILL_EXIST and not r.changed and r.master_broker_id == 1
    r = s.apply(elect(1, designate=True))
    assert r.code is RC.CONTROLLER_MASTER_STILL_EXIST


def test_planned_election_to_a_named_replica_and_its_refusals() -> None:
    s = ReplicasState()
    group_of_three(s)
    r = s.apply(elect(2, designate=True))
    assert r.ok and r.master_broker_id == 2 and r.master_epoch == 2
    # 3 is no longer in the SyncStateSet ({2} after the election): refused unless unclean.
    refused_without_change(s, elect(3, designate=True), RC.CONTROLLER_ELECT_MASTER_FAILED)
    assert s.apply(elect(3, designate=True, unclean=True)).master_broker_id == 3


def test_no_electable_replica_deposes_a_lost_master_once_and_keeps_the_sync_state_set() -> None:
    s = ReplicasState()
    group_of_three(s)
    s.apply(AlterSyncStateSet(G, 1, 1, frozenset({1}), 2))
    s.apply(BrokerInactive(G, 1, 5000))
    r = s.apply(elect())
    assert r.code is RC.CONTROLLER_MASTER_NOT_AVAILABLE and r.changed
    g = s.groups[G]
    assert g.master_broker_id is None and g.master_epoch == 2 and g.sync_state_set == {1}
    refused_without_change(s, elect(), RC.CONTROLLER_MASTER_NOT_AVAILABLE)  # no second epoch bump
    # Unclean election may take a replica outside the SyncStateSet.
    r = s.apply(elect(unclean=True))
    assert r.ok and r.master_broker_id in (2, 3) and r.master_epoch == 3
    # 1 returns; as the SyncStateSet member it would have been preferred by a clean election.


def test_unknown_group_elect_is_refused() -> None:
    refused_without_change(ReplicasState(), elect(), RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED)


# -- clean ----------------------------------------------------------------------------------------
def test_clean_refusals() -> None:
    s = ReplicasState()
    refused_without_change(s, CleanBrokerData(G, None, False), RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA)
    group_of_three(s)
    refused_without_change(s, CleanBrokerData(G, None, False), RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA)
    refused_without_change(s, CleanBrokerData(G, frozenset({2}), False), RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA)


def test_clean_of_dead_replicas_shrinks_the_set_with_a_new_epoch_and_deposes_a_cleaned_master() -> None:
    s = ReplicasState()
    group_of_three(s)
    s.apply(BrokerInactive(G, 1, 1))
    s.apply(BrokerInactive(G, 3, 1))
    r = s.apply(CleanBrokerData(G, frozenset({1, 3}), False))
    g = s.groups[G]
    assert r.ok and set(g.replicas) == {2} and g.sync_state_set == {2}
    assert g.master_broker_id is None and g.master_epoch == 2 and g.sync_state_set_epoch == 3


def test_a_group_cleaned_and_registered_again_continues_its_epochs() -> None:
    s = ReplicasState()
    group_of_three(s)
    assert s.apply(CleanBrokerData(G, None, True)).ok
    assert G not in s.groups
    s.apply(apply_id(1))
    r = s.apply(elect(1))
    assert r.master_epoch == 2 and r.sync_state_set_epoch == 3


# -- reads and entries ------------------------------------------------------------------------------
def test_replica_info_and_sync_state_data() -> None:
    s = ReplicasState()
    assert s.replica_info(G).code is RC.CONTROLLER_BROKER_METADATA_NOT_EXIST
    group_of_three(s)
    info = s.replica_info(G)
    assert info.ok and info.master_broker_id == 1 and info.sync_state_set == {1, 2, 3}
    assert list(s.sync_state_data([G, "other"])) == [G]


def test_malformed_entries_are_refused_alike_and_change_nothing() -> None:
    s = ReplicasState()
    for raw in (b"heal", b"{}", b'{"v": 1, "type": "NOPE"}', b'{"v": 1, "type": "BROKER_HEARTBEAT", "broker_name": 1}'):
        result, rid = s.apply_entry(raw)
        assert result.code is RC.CONTROLLER_INVALID_REQUEST and rid == ""
    assert s.malformed_entries == 4 and s.snapshot() == ReplicasState().snapshot()
    result, rid = s.apply_entry(encode_entry(apply_id(1), "n0-x-1"))
    assert result.ok and rid == "n0-x-1"
