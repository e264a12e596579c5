"""The checker on synthetic histories: loss, duplicates, misplacement, order, divergence, windows."""

from __future__ import annotations

import pytest

from ledgermq.chaos.checker import check, check_divergence, check_source, summarise, windows
from ledgermq.chaos.faults import FaultRecord
from ledgermq.chaos.readback import Entry, ReadBack
from ledgermq.chaos.workload import Attempt


def ok(seq: int, sender: int, q: int, off: int, start: float = 0.0, end: float | None = None) -> Attempt:
    return Attempt(seq, sender, start, start + 0.01 if end is None else end, "SEND_OK", q, off)


def failed(seq: int, sender: int, start: float, end: float, outcome: str = "error:MQConnectError") -> Attempt:
    return Attempt(seq, sender, start, end, outcome)


def read(source: str, queues: dict[int, dict[int, Entry]]) -> ReadBack:
    return ReadBack(source, queues)


def fault(index: int, at: float, kind: str = "kill", role: str = "master") -> FaultRecord:
    return FaultRecord(index, kind, role, role, "", at, at + 1.0, at + 1.0)


def test_a_clean_history_passes() -> None:
    attempts = [ok(0, 0, 0, 0), ok(1, 1, 1, 0), ok(2, 0, 0, 1), failed(3, 1, 1.0, 1.1)]
    master = read("master", {0: {0: (0, 0), 1: (2, 0)}, 1: {0: (1, 1)}})
    v = check(attempts, [], [master, read("slave", master.queues), read("client", master.queues)], 2.0)
    assert v.acked == 3 and v.lost == 0 and not v.diverged and not v.failed
    assert all(not s.duplicates and not s.misplaced and not s.order_violations for s in v.sources)
    assert v.outcomes == {"SEND_OK": 3, "error:MQConnectError": 1}


def test_an_acked_message_missing_is_lost_and_fails_the_run() -> None:
    attempts = [ok(0, 0, 0, 0), ok(1, 0, 0, 1)]
    master = read("master", {0: {0: (0, 0)}})
    v = check(attempts, [], [master], 1.0)
    assert v.sources[0].lost == [1]
    assert v.lost == 1 and v.failed


def test_loss_on_one_replica_counts() -> None:
    attempts = [ok(0, 0, 0, 0), ok(1, 0, 0, 1)]
    full = {0: {0: (0, 0), 1: (1, 0)}}
    v = check(attempts, [], [read("master", full), read("slave", {0: {0: (0, 0)}})], 1.0)
    assert [s.lost for s in v.sources] == [[], [1]]
    assert v.lost == 1 and v.failed
    assert v.divergence[0].master_ahead == 1 and not v.divergence[0].diverged  # lag, not divergence


def test_unacked_messages_may_be_missing_or_stored() -> None:
    attempts = [
        ok(0, 0, 0, 0),
        failed(1, 0, 0.1, 3.1, "error:MQConnectError"),
        failed(2, 0, 3.2, 3.3, "SLAVE_NOT_AVAILABLE"),
    ]
    v = check_source(read("master", {0: {0: (0, 0), 1: (2, 0)}}), attempts)
    assert v.lost == [] and v.unacked_stored == 1


def test_duplicates_are_reported_per_source_without_failing() -> None:
    attempts = [ok(0, 0, 0, 0), ok(1, 0, 0, 2)]
    master = read("master", {0: {0: (0, 0), 1: (0, 0), 2: (1, 0)}})
    v = check(attempts, [], [master], 1.0)
    assert v.sources[0].duplicates == [0]
    assert v.sources[0].order_violations == []  # the later copy is not an order violation
    assert not v.failed


def test_misplaced_when_the_acked_offset_holds_something_else() -> None:
    attempts = [ok(0, 0, 0, 0), ok(1, 0, 0, 1)]
    v = check_source(read("master", {0: {0: (1, 0), 1: (0, 0)}}), attempts)
    assert v.misplaced == [0, 1]
    assert v.order_violations == ["q0@1: sender 0 seq 0 after 1"]


def test_order_is_per_sender_within_a_queue() -> None:
    # Senders interleave freely; only each sender's own numbers must increase.
    attempts = [ok(0, 0, 0, 1), ok(1, 1, 0, 0), ok(2, 0, 0, 3), ok(3, 1, 0, 2), ok(4, 1, 1, 0), ok(5, 1, 1, 1)]
    good = read("m", {0: {0: (1, 1), 1: (0, 0), 2: (3, 1), 3: (2, 0)}, 1: {0: (4, 1), 1: (5, 1)}})
    assert check_source(good, attempts).order_violations == []
    bad = read("m", {0: {0: (1, 1), 1: (0, 0), 2: (3, 1), 3: (2, 0)}, 1: {0: (5, 1), 1: (4, 1)}})
    assert check_source(bad, attempts).order_violations == ["q1@1: sender 1 seq 4 after 5"]


def test_divergence_same_offset_different_message_and_replica_ahead() -> None:
    master = read("master", {0: {0: (0, 0), 1: (5, 0)}, 1: {0: (2, 1)}})
    slave = read("slave", {0: {0: (0, 0), 1: (3, 0), 2: (4, 0)}, 1: {0: (2, 1)}})
    d = check_divergence(master, slave)
    assert d.differing == ["q0@1: master 5 / slave 3"]
    assert d.replica_ahead == 1 and d.diverged
    v = check([ok(0, 0, 0, 0), ok(5, 0, 0, 1), ok(2, 1, 1, 0)], [], [master, slave], 1.0)
    assert v.diverged and v.failed


def test_non_chaos_records_count_but_do_not_match() -> None:
    d = check_divergence(read("master", {0: {0: None}}), read("slave", {0: {0: (1, 0)}}))
    assert d.differing == ["q0@0: master non-chaos record / slave 1"]


def test_window_from_first_failure_to_next_success() -> None:
    attempts = [
        ok(0, 0, 0, 0, start=9.0),
        failed(1, 0, 10.2, 10.5),
        failed(2, 1, 10.3, 11.0),
        ok(3, 0, 0, 1, start=11.5, end=11.6),
        ok(4, 1, 0, 2, start=12.0),
    ]
    ws = windows(attempts, [fault(0, 10.0)], 20.0)
    assert ws[0].seconds == pytest.approx(11.6 - 10.2)
    assert ws[0].failed_sends == 2
    assert ws[0].slowest_send_s == pytest.approx(0.7)


def test_a_stall_without_failures_shows_as_the_slowest_send() -> None:
    attempts = [ok(0, 0, 0, 0, start=9.9, end=13.5), ok(1, 1, 0, 1, start=13.6, end=13.7)]
    ws = windows(attempts, [fault(0, 10.0, "suspend")], 20.0)
    assert (ws[0].seconds, ws[0].failed_sends) == (0.0, 0)
    assert ws[0].slowest_send_s == pytest.approx(3.6)
    assert summarise(ws)[0].slowest_send_s == pytest.approx(3.6)


def test_resume_is_injection_to_the_first_success_begun_after_it() -> None:
    # a send in flight at the fault ends first but began before it; no send fails
    attempts = [ok(0, 0, 0, 0, start=9.9, end=11.4), ok(1, 1, 0, 1, start=10.2, end=11.3), ok(2, 0, 0, 2, 11.5)]
    ws = windows(attempts, [fault(0, 10.0, "suspend"), fault(1, 30.0)], 40.0)
    assert (ws[0].seconds, ws[0].resume_s) == (0.0, pytest.approx(1.3))
    assert ws[1].resume_s is None  # no send began after the second fault
    summary = summarise(ws)
    by = {x.label: x for x in summary}
    assert by["suspend:master"].resume_max_s == pytest.approx(1.3)
    assert by["kill:master"].not_resumed == 1


def test_a_success_that_began_before_the_failure_does_not_end_the_window() -> None:
    attempts = [ok(0, 1, 0, 0, start=10.1, end=10.9), failed(1, 0, 10.2, 10.5), ok(2, 0, 0, 1, start=12.0, end=12.1)]
    ws = windows(attempts, [fault(0, 10.0)], 20.0)
    assert ws[0].seconds == pytest.approx(12.1 - 10.2)


def test_no_failure_is_a_zero_window_and_no_success_is_not_recovered() -> None:
    attempts = [ok(0, 0, 0, 0, start=10.5), failed(1, 0, 20.5, 21.0), failed(2, 0, 21.0, 22.0)]
    ws = windows(attempts, [fault(0, 10.0), fault(1, 20.0, "suspend")], 30.0)
    assert [(w.label, w.seconds, w.failed_sends) for w in ws] == [("kill:master", 0.0, 0), ("suspend:master", None, 2)]
    assert ws[1].at_least_s == pytest.approx(30.0 - 20.5)
    summary = {s.label: s for s in summarise(ws)}
    assert summary["suspend:master"].not_recovered == 1
    assert summary["suspend:master"].open_at_least_s == pytest.approx(9.5)


def test_failures_after_the_next_fault_belong_to_it() -> None:
    attempts = [failed(0, 0, 10.5, 10.6), ok(1, 0, 0, 0, start=10.7, end=10.8), failed(2, 0, 20.5, 20.6)]
    ws = windows(attempts, [fault(0, 10.0), fault(1, 20.0)], 30.0)
    assert ws[0].seconds == pytest.approx(0.3) and ws[0].failed_sends == 1
    assert ws[1].seconds is None


def test_summary_min_median_max_per_label() -> None:
    attempts = [
        failed(0, 0, 10.0, 10.0), ok(1, 0, 0, 0, start=11.0, end=11.0),
        failed(2, 0, 20.0, 20.0), ok(3, 0, 0, 1, start=23.0, end=23.0),
        failed(4, 0, 30.0, 30.0), ok(5, 0, 0, 2, start=32.0, end=32.0),
        ok(6, 0, 0, 3, start=40.5, end=40.6),
    ]  # fmt: skip
    faults = [fault(0, 9.5), fault(1, 19.5), fault(2, 29.5), fault(3, 40.0, "partition", "link")]
    summary = {s.label: s for s in summarise(windows(attempts, faults, 50.0))}
    kill = summary["kill:master"]
    assert (kill.faults, kill.unavailable, kill.not_recovered) == (3, 3, 0)
    assert (kill.min_s, kill.median_s, kill.max_s) == (1.0, 2.0, 3.0)
    part = summary["partition:link"]
    assert (part.faults, part.unavailable, part.max_s) == (1, 0, 0.0)


def test_the_window_closes_at_the_earliest_success_not_the_first_to_start() -> None:
    # Sender 1's send began first but waited on a stopped leader; sender 0's later one
    # reached the new leader and ended first: that is when writes were possible again.
    attempts = [
        failed(0, 0, 10.0, 13.0),
        ok(1, 1, 0, 0, start=13.0, end=14.2),
        ok(2, 0, 1, 0, start=13.01, end=13.02),
    ]
    ws = windows(attempts, [fault(0, 10.0)], 20.0)
    assert ws[0].seconds == pytest.approx(13.02 - 10.0)


def _sent(seq: int, sender: int, q: int, off: int, end: float = 0.01, phys: int = -1) -> Attempt:
    from ledgermq.chaos.workload import body_for, content_digest

    a = ok(seq, sender, q, off, end=end)
    a.digest, a.phys = content_digest(body_for(seq, sender, 128)), phys
    return a


def _served(source: str, bodies: dict[int, dict[int, bytes]]) -> ReadBack:
    r = ReadBack(source)
    for q, by_offset in bodies.items():
        for off, body in by_offset.items():
            r.keep(q, off, body)
    return r


def test_a_message_served_with_other_content_is_corrupt_and_fails_the_run() -> None:
    from ledgermq.chaos.workload import body_for

    attempts = [_sent(0, 0, 0, 0), _sent(1, 0, 0, 1)]
    good = {0: {0: body_for(0, 0, 128), 1: body_for(1, 0, 128)}}
    flipped = bytearray(body_for(1, 0, 128))
    flipped[60] ^= 0x10  # the number and sender still parse: only the hash tells
    master = _served("master", good)
    slave = _served("slave", {0: {0: body_for(0, 0, 128), 1: bytes(flipped)}})
    v = check(attempts, [], [master, slave], 1.0)
    assert v.lost == 0
    assert [s.corrupt for s in v.sources] == [[], ["q0@1: seq 1"]]
    assert v.corrupt_served == 1 and v.failed
    assert v.divergence[0].differing == ["q0@1: 1 with other content on slave"]
    assert v.to_json()["corrupt_served"] == 1


def test_an_undecodable_answer_counts_as_corrupt_served() -> None:
    master = ReadBack("master", {0: {}}, corrupt_pulls=1)
    v = check([_sent(0, 0, 0, 0)], [], [master], 1.0)
    assert v.corrupt_served == 1 and v.failed


def _power_loss(at: float, ends: dict[str, int]) -> FaultRecord:
    rec = FaultRecord(0, "power-loss", "group", ",".join(ends), "", at, at + 1.0, at + 1.0)
    rec.notes = {"nodes": {n: {"durable_end": e, "files_cut": 1, "log_bytes_lost": 0} for n, e in ends.items()}}
    return rec


def test_async_flush_may_lose_what_no_broker_had_fsynced_before_a_power_loss() -> None:
    from ledgermq.chaos.promise import allowed_losses, promise_text

    attempts = [
        _sent(0, 0, 0, 0, end=1.0, phys=100),  # fsynced on the slave only: must survive
        _sent(1, 0, 0, 1, end=1.1, phys=300),  # on no broker's disk: may go
        _sent(2, 0, 0, 2, end=3.0, phys=300),  # after the power loss: must survive
    ]
    loss = _power_loss(2.0, {"master": 50, "slave": 200})
    allowed = allowed_losses(attempts, [loss], "async", "async")
    assert list(allowed) == [1] and "fsynced on 0 of 2 brokers" in allowed[1]
    master = read("master", {0: {}})
    v = check(attempts, [loss], [master], 5.0, allowed=allowed, promise=promise_text("async", "async"))
    assert v.lost_allowed == [1] and v.lost == 2 and v.failed  # seqs 0 and 2 are real losses
    v_ok = check(attempts[1:2], [loss], [master], 5.0, allowed=allowed)
    assert v_ok.lost == 0 and v_ok.lost_allowed == [1] and not v_ok.failed
    assert v_ok.to_json()["lost_allowed"] == 1


def test_a_send_acknowledged_while_the_power_loss_was_being_injected_belongs_to_it() -> None:
    """An ASYNC_MASTER run: the master answered a send 45 ms after the power loss began (the
    processes are killed one by one), on no broker's disk; judged by the next power loss, its
    loss was reported as a failure of the mode's promise."""
    from ledgermq.chaos.promise import allowed_losses

    during = _sent(0, 0, 0, 0, end=2.045, phys=300)  # the loss began at 2.0, the restart at 3.0
    first = _power_loss(2.0, {"master": 200, "slave": 250})
    second = _power_loss(9.0, {"master": 5000, "slave": 5000})
    allowed = allowed_losses([during], [first, second], "async", "async")
    assert list(allowed) == [0] and "0.045s into power loss" in allowed[0]
    after_restart = _sent(1, 0, 0, 1, end=3.5, phys=300)  # stored after the restart: the second one decides
    assert allowed_losses([after_restart], [first, second], "async", "async") == {}


def test_sync_flush_allows_no_loss_and_dledger_needs_a_majority() -> None:
    from ledgermq.chaos.promise import allowed_losses

    attempts = [_sent(0, 0, 0, 0, end=1.0, phys=100)]
    one_copy = _power_loss(2.0, {"n0": 200, "n1": 50, "n2": 50})
    assert allowed_losses(attempts, [one_copy], "sync", "sync") == {}
    assert allowed_losses(attempts, [one_copy], "dledger", "sync") == {}
    assert list(allowed_losses(attempts, [one_copy], "dledger", "async")) == [0]
    two_copies = _power_loss(2.0, {"n0": 200, "n1": 200, "n2": 50})
    assert allowed_losses(attempts, [two_copies], "dledger", "async") == {}
    # only the first power loss after the acknowledgement decides
    assert (
        allowed_losses(attempts, [two_copies, _power_loss(9.0, {"n0": 0, "n1": 0, "n2": 0})], "dledger", "async") == {}
    )


def test_a_run_that_stopped_early_or_left_a_node_down_fails_with_nothing_lost() -> None:
    """A dledger partition+restart run once stopped after 11 of 100 cycles (a restarted member
    could not bind its port, no leader for 120 s) and still printed PASS: nothing it had
    acknowledged was lost, but it had not done what it was asked."""
    from ledgermq.chaos.runner import incomplete_run

    attempts = [ok(0, 0, 0, 0)]
    master = read("master", {0: {0: (0, 0)}})
    v = check(attempts, [], [master, read("client", master.queues)], 2.0)
    assert not v.failed
    down = fault(10, 5.0, "partition+restart", "follower")
    down.error = "heal failed: n2 exited with 1"
    v.incomplete = incomplete_run([fault(9, 1.0), down], "the fault cycles stopped early: RuntimeError: no leader")
    assert v.failed and v.lost == 0
    assert v.incomplete == [
        "fault 11 (): heal failed: n2 exited with 1",
        "the fault cycles stopped early: RuntimeError: no leader",
    ]
    assert v.to_json()["incomplete"] == v.incomplete and v.to_json()["failed"]
    assert incomplete_run([fault(0, 1.0)], "") == []


def test_a_partition_heals_even_when_the_restart_beside_it_fails() -> None:
    """The partition+restart run above: the restart raised before the links were healed, so
    the cut member stayed cut and the group had no majority for the rest of the run."""
    import asyncio
    from typing import Any, cast

    from ledgermq.chaos.injector import Injector

    class Proxy:
        is_cut = True

        def heal(self) -> None:
            self.is_cut = False

    class Layout:
        async def restart(self, name: str) -> None:
            raise RuntimeError(f"{name} exited with 1")

    proxy = Proxy()
    injector = Injector(cast(Any, Layout()), cast(Any, {"n1-n0": proxy}), seed=1)
    rec = fault(10, 5.0, "partition+restart", "leader")
    rec.notes = {"restarted": "n2"}
    asyncio.run(injector.end(rec))
    assert rec.error == "heal failed: n2 exited with 1" and not proxy.is_cut
