"""Controller mode's pure parts: the SyncStateSet tracker, the identity files, the config checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledgermq.broker.controller_mode.config import ControllerModeConfig, check_roles_in_file
from ledgermq.broker.controller_mode.identity import BrokerIdentity, IdentityFiles
from ledgermq.broker.controller_mode.in_sync import InSyncTracker
from ledgermq.config import config_from_properties
from ledgermq.errors import ConfigError

ME, SLAVE = 1, 2


def tracker(members: frozenset[int] = frozenset({ME})) -> InSyncTracker:
    t = InSyncTracker(ME, max_lag_s=3.0)
    t.reset(members, epoch=1, now=0.0)
    return t


def test_a_slave_joins_only_once_it_holds_everything_and_is_required_from_the_proposal_on() -> None:
    t = tracker()
    assert t.on_ack(SLAVE, 900, log_end=1000, now=0.1) is None  # within a gap is not enough
    assert t.required() == frozenset()
    assert t.on_ack(SLAVE, 1000, log_end=1000, now=0.2) == {ME, SLAVE}
    assert t.required() == {SLAVE} and t.in_sync_count() == 2  # waited for before the controller agrees
    assert t.on_ack(SLAVE, 1000, log_end=1000, now=0.3) is None  # one proposal at a time
    t.proposal_failed()
    assert t.required() == frozenset() and t.accepted.members == {ME}
    assert t.on_ack(SLAVE, 1000, log_end=1000, now=0.4) == {ME, SLAVE}
    assert t.accept(frozenset({ME, SLAVE}), 2) and not t.accept(frozenset({ME}), 2)  # stale epochs change nothing
    assert t.required() == {SLAVE} and t.pending is None


def test_a_member_that_disconnects_leaves_at_once_but_counts_until_the_controller_agrees() -> None:
    t = tracker(frozenset({ME, SLAVE}))
    t.on_ack(SLAVE, 1000, 1000, 0.1)
    assert t.on_gone(SLAVE) == {ME}
    assert t.required() == {SLAVE} and t.in_sync_count() == 2  # not relied on before it is accepted
    assert t.accept(frozenset({ME}), 2)
    assert t.required() == frozenset() and t.in_sync_count() == 1


def test_a_member_that_keeps_up_under_load_stays_and_one_that_stalls_leaves_after_the_lag_limit() -> None:
    t = tracker(frozenset({ME, SLAVE}))
    end = 0
    for step in range(1, 600):  # 6 s of steady writes; the slave is always one window behind
        now = step * 0.01
        end += 100
        t.on_ack(SLAVE, end - 100, end, now)
        assert t.next_proposal(now, end) is None, f"dropped a slave that keeps up at {now:.2f}s"
    stalled_at = 6.0
    for step in range(1, 400):  # the slave stops acknowledging
        now = stalled_at + step * 0.01
        end += 100
        proposal = t.next_proposal(now, end)
        if proposal is not None:
            assert proposal == {ME}
            assert 2.95 < now - stalled_at < 3.1  # caught up as of its last passed mark, one step back
            return
    raise AssertionError("a stalled slave was never dropped")


def test_a_member_that_never_connects_gets_the_lag_limit_to_do_so() -> None:
    t = tracker(frozenset({ME, SLAVE}))
    assert t.next_proposal(2.9, 0) is None
    assert t.next_proposal(3.1, 0) == {ME}


def test_an_idle_slave_that_holds_everything_stays_though_it_acks_less_often_than_the_lag_limit() -> None:
    t = tracker(frozenset({ME, SLAVE}))
    t.on_ack(SLAVE, 1000, 1000, 0.1)
    for step in range(1, 200):  # 20 s idle, the slave's heartbeat ack every 5 s (haSendHeartbeatInterval)
        now = step * 0.1
        if step % 50 == 0:
            t.on_ack(SLAVE, 1000, 1000, now)
        assert t.next_proposal(now, 1000) is None, f"dropped an idle slave holding everything at {now:.1f}s"
    # writes arrive and the slave does not copy them: it leaves once it lags past the limit
    assert t.next_proposal(20.0, 1500) is None
    assert t.next_proposal(22.9, 1500) is None
    assert t.next_proposal(23.1, 1500) == {ME}


def test_identity_files_keep_the_application_until_granted(tmp_path: Path) -> None:
    files = IdentityFiles(tmp_path)
    assert files.load() is None and files.load_temp() is None
    ident = BrokerIdentity("C", "broker-a", 3, "127.0.0.1:10911;1700000000000")
    files.save_temp(ident)
    assert files.load_temp() == ident and files.load() is None
    files.commit(ident)
    assert files.load() == ident and files.load_temp() is None
    assert (tmp_path / "brokerIdentity").read_text() == "C#broker-a#3#127.0.0.1:10911;1700000000000"
    with pytest.raises(ConfigError, match="config names C/broker-b"):
        files.check_matches(ident, "C", "broker-b")


def config(**props: str) -> tuple[dict[str, str], ControllerModeConfig]:
    all_props = {"enableControllerMode": "true", "controllerAddr": "127.0.0.1:9876", **props}
    return all_props, config_from_properties(ControllerModeConfig, all_props)


def test_contradictions_in_the_file_are_refused_and_ignored_keys_are_named() -> None:
    with pytest.raises(ConfigError, match="brokerRole=SLAVE"):
        check_roles_in_file(*config(brokerRole="SLAVE"))
    with pytest.raises(ConfigError, match="ASYNC_MASTER with allAckInSyncStateSet"):
        check_roles_in_file(*config(brokerRole="ASYNC_MASTER", allAckInSyncStateSet="true"))
    with pytest.raises(ConfigError, match="enableDLegerCommitLog"):
        check_roles_in_file(*config(enableDLegerCommitLog="true"))
    warnings = check_roles_in_file(*config(brokerId="0", brokerRole="SYNC_MASTER"))
    assert len(warnings) == 1 and "brokerId=0 is ignored" in warnings[0]
    with pytest.raises(ConfigError, match="controllerAddr"):
        config_from_properties(ControllerModeConfig, {"enableControllerMode": "true"})
    with pytest.raises(ConfigError, match="at least 3 times brokerHeartbeatInterval"):
        config(controllerHeartBeatTimeoutMills="500", brokerHeartbeatInterval="200")
    with pytest.raises(ConfigError, match="minInSyncReplicas"):
        config(minInSyncReplicas="0")


def test_the_lag_deadline_is_the_last_catch_up_plus_the_limit_and_the_drop_comes_right_after_it() -> None:
    t = tracker(frozenset({ME, SLAVE}))
    t.on_ack(SLAVE, 1000, 1000, 1.0)  # caught up at 1.0
    assert t.lag_deadline(1000) is None  # it holds everything: nothing to wait for
    t.on_ack(SLAVE, 1000, 1500, 1.2)  # then writes arrive that it does not copy
    deadline = t.lag_deadline(1500)
    assert deadline == pytest.approx(4.0)
    assert t.next_proposal(deadline, 1500) is None  # "more than" the limit, not "at" it
    assert t.next_proposal(deadline + 0.001, 1500) == {ME}
    assert t.lag_deadline(1500) is None  # a proposal is in flight


def test_a_member_that_never_connected_has_its_deadline_at_the_grace_end() -> None:
    t = tracker(frozenset({ME, SLAVE}))
    assert t.lag_deadline(0) == pytest.approx(3.0)
