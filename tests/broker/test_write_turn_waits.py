"""The write turn's waits table (broker/write_turn/waits.py): offsets in, released waits out.

Pure: no loop, no clock, no threads. Each rule an answer is held to has a test that fails
if the table let a wait go before its fact (an fsync covering it, the slaves holding it, a
proposal committed), plus a seeded random run checking the same at every release.
"""

from __future__ import annotations

import math
import random

from ledgermq.broker.write_turn import Need, Wait, Waits


def _wait(end: int, needs: int, timeout: float = 5.0) -> Wait:
    return Wait(end, needs, timeout)


def _ends(waits: list[Wait]) -> list[int]:
    return [w.end for w in waits]


def test_a_durable_wait_is_released_only_when_an_fsync_covers_its_own_end() -> None:
    t = Waits()
    for end in (100, 200, 300):
        assert t.add(_wait(end, Need.DURABLE), now=0.0) == []
    assert _ends(t.durable(199, now=0.1)) == [100]
    released = t.durable(300, now=0.2)
    assert _ends(released) == [200, 300] and all(w.met for w in released)
    assert len(t) == 0
    assert _ends(t.add(_wait(250, Need.DURABLE), now=0.3)) == [250]  # already durable: at once


def test_a_log_cut_back_makes_earlier_durable_reports_stale() -> None:
    """A broker that was master fsynced up to 1000, then became a slave and truncated to 600
    (controller mode's role change), then master again: a message written at 600-800 is
    durable only once an fsync after the cut covers it, not because 1000 was once reported.
    Without the store's own flushed offset the table let it go at once: acknowledged with
    no fsync behind it, and lost in the next power loss."""
    truth = [1000]  # the store's flushed offset now
    t = Waits(flushed=lambda: truth[0])
    assert t.durable(1000, now=0.0) == []
    truth[0] = 600  # the cut
    assert t.add(_wait(800, Need.DURABLE), now=1.0) == []  # not met by the report of 1000
    assert t.durable(1000, now=1.1) == []  # a stale report drained after the cut
    assert t.durable_offset == 600
    truth[0] = 800  # an fsync after the cut
    assert _ends(t.durable(800, now=1.2)) == [800]


def test_one_offset_below_the_end_releases_nothing() -> None:
    t = Waits()
    t.add(_wait(100, Need.DURABLE), now=0.0)
    assert t.durable(99, now=0.0) == []
    assert len(t) == 1


def test_an_out_of_order_durable_wait_is_released_late_never_early() -> None:
    t = Waits()
    t.add(_wait(500, Need.DURABLE), now=0.0)
    t.add(_wait(100, Need.DURABLE), now=0.0)
    assert _ends(t.durable(100, now=0.0)) == [100]
    assert _ends(t.durable(500, now=0.0)) == [500]


def test_a_failed_fsync_fails_every_durable_wait_now_and_later() -> None:
    t = Waits()
    t.add(_wait(100, Need.DURABLE | Need.REPLICATED), now=0.0)
    [failed] = t.durable_failed("flush failed: EIO")
    assert failed.missed == Need.DURABLE and failed.reason == "flush failed: EIO"
    [later] = t.add(_wait(200, Need.DURABLE), now=1.0)
    assert later.missed == Need.DURABLE and "EIO" in later.reason
    assert t.durable(1000, now=1.0) == []  # sticky: a later report does not make anything durable


def test_a_replicated_wait_needs_the_floor_and_slaves_that_hold_its_bytes() -> None:
    t = Waits()
    t.add(_wait(100, Need.REPLICATED), now=0.0)
    t.add(_wait(200, Need.REPLICATED), now=0.0)
    assert t.replicated(150, holds=lambda end: False, now=0.1) == []  # floor passed it, no slave holds it
    assert _ends(t.replicated(250, holds=lambda end: True, now=0.2)) == [200]  # 100 was left to time out
    [expired] = t.expire(now=5.0)
    assert expired.end == 100 and expired.missed == Need.REPLICATED


def test_the_fsync_comes_first_and_the_slave_stage_gets_its_own_timeout() -> None:
    t = Waits()
    w = _wait(100, Need.DURABLE | Need.REPLICATED, timeout=1.0)
    t.add(w, now=0.0)
    assert t.replicated(10_000, holds=lambda end: True, now=0.5) == []  # replicated, but not yet durable
    assert t.durable(100, now=0.9) == []  # now waiting for the slave, until 0.9 + 1.0
    assert w.deadline == 1.9 and w.stage_started == 0.9
    assert t.expire(now=1.5) == []
    [done] = t.replicated(100, holds=lambda end: True, now=1.6)
    assert done.met and done.asked == Need.DURABLE | Need.REPLICATED


def test_a_stage_that_times_out_names_its_need() -> None:
    t = Waits()
    t.add(_wait(100, Need.DURABLE, timeout=1.0), now=0.0)
    t.add(_wait(200, Need.REPLICATED, timeout=2.0), now=0.0)
    assert t.next_deadline() == 1.0
    assert t.expire(now=0.99) == []
    [flush] = t.expire(now=1.0)
    assert flush.missed == Need.DURABLE
    assert t.next_deadline() == 2.0
    [slave] = t.expire(now=2.0)
    assert slave.missed == Need.REPLICATED
    assert t.next_deadline() is None and len(t) == 0


def test_a_committed_wait_is_settled_by_its_proposal_only() -> None:
    t = Waits()
    ok, lost = _wait(0, Need.COMMITTED, math.inf), _wait(0, Need.COMMITTED, math.inf)
    t.add(ok, now=0.0)
    t.add(lost, now=0.0)
    assert t.next_deadline() is None  # no deadline: the Raft driver ends every proposal
    assert t.durable(10**9, now=1.0) == [] and t.replicated(10**9, lambda e: True, now=1.0) == []
    assert t.settle(ok, committed=True, reason="", now=2.0) == [ok] and ok.met
    [failed] = t.settle(lost, committed=False, reason="leadership lost", now=2.0)
    assert failed.missed == Need.COMMITTED and failed.reason == "leadership lost"
    assert t.settle(ok, committed=True, reason="", now=3.0) == []  # once only
    assert len(t) == 0


def test_clear_releases_every_wait_as_missed() -> None:
    t = Waits()
    waits = [_wait(100, Need.DURABLE), _wait(200, Need.REPLICATED), _wait(0, Need.COMMITTED, math.inf)]
    for w in waits:
        t.add(w, now=0.0)
    released = t.clear("stopping")
    assert sorted(w.end for w in released) == [0, 100, 200]
    assert all(not w.met and w.reason == "stopping" for w in released)
    assert len(t) == 0 and t.next_deadline() is None


def test_seeded_random_facts_never_release_a_wait_before_its_facts() -> None:
    rng = random.Random(24)
    t = Waits()
    durable = 0
    floor = 0
    held_from = 0  # the slave holds (held_from, floor]
    now = 0.0
    end = 0
    released: list[Wait] = []
    for _ in range(5000):
        now += rng.random() * 0.01
        r = rng.random()
        if r < 0.4:
            end += rng.randint(1, 300)
            needs = rng.choice([Need.DURABLE, Need.REPLICATED, Need.DURABLE | Need.REPLICATED])
            got = t.add(Wait(end, needs, rng.choice([0.05, 1.0, 5.0])), now)
        elif r < 0.6:
            durable = rng.randint(durable, end)
            got = t.durable(durable, now)
        elif r < 0.8:
            floor = rng.randint(floor, end)
            if rng.random() < 0.05:
                held_from = floor  # a fresh slave: holds nothing below where it started
            got = t.replicated(floor, lambda e, lo=held_from, hi=floor: lo < e <= hi, now)
        else:
            got = t.expire(now)
        for w in got:
            if w.met:
                assert not w.asked & Need.DURABLE or w.end <= durable
                assert not w.asked & Need.REPLICATED or held_from < w.end <= floor
            else:
                assert w.deadline == math.inf and w.missed != Need.NONE
        released += got
    released += t.expire(now + 10)
    assert len(t) == 0
    assert sum(1 for w in released if w.met) > 100 and sum(1 for w in released if not w.met) > 10
