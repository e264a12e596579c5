"""The seeded schedule: the same seed gives the same faults; the kinds are respected."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledgermq.chaos.faults import (
    CONTROLLER_KINDS,
    KINDS,
    TAIL_LOSS_BYTES,
    parse_kinds,
    schedule,
    targets_for,
    zero_tail,
)

MS_KINDS = tuple(k for k in KINDS if k not in CONTROLLER_KINDS)  # what a master-slave layout runs


def test_same_seed_same_schedule() -> None:
    assert schedule(42, 50, MS_KINDS) == schedule(42, 50, MS_KINDS)
    ctl = targets_for("controller")
    assert schedule(42, 50, KINDS, targets=ctl) == schedule(42, 50, KINDS, targets=ctl)


def test_another_seed_another_schedule() -> None:
    assert schedule(42, 50, MS_KINDS) != schedule(43, 50, MS_KINDS)


def test_a_kind_with_no_target_on_the_layout_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="controller-kill"):
        schedule(1, 5, ("kill", "controller-kill"))


def test_only_the_chosen_kinds_and_their_targets() -> None:
    plans = schedule(5, 200, ("kill", "partition"), steady_s=(0.5, 1.0), hold_scale=0.5)
    assert {p.kind for p in plans} == {"kill", "partition"}
    assert {p.role for p in plans if p.kind == "kill"} == {"master", "slave"}
    assert {p.role for p in plans if p.kind == "partition"} == {"link"}
    assert {p.mode for p in plans if p.kind == "partition"} == {"reset", "blackhole"}
    assert all(0.5 <= p.steady_s <= 1.0 for p in plans)
    assert all(0.25 <= p.hold_s <= 1.5 for p in plans if p.kind == "kill")
    assert [p.index for p in plans] == list(range(200))


def test_tail_loss_only_hits_the_master() -> None:
    assert {p.role for p in schedule(1, 30, ("tail-loss",))} == {"master"}


def test_parse_kinds() -> None:
    assert parse_kinds("kill, suspend") == ("kill", "suspend")
    with pytest.raises(ValueError, match="nope"):
        parse_kinds("kill,nope")
    with pytest.raises(ValueError):
        parse_kinds("")


def test_zero_tail_finds_the_end_of_data_in_the_newest_segment(tmp_path: Path) -> None:
    log = tmp_path / "commitlog"
    log.mkdir()
    seg = 256 * 1024
    (log / f"{0:020d}").write_bytes(b"\x01" * seg)
    data = b"\x02" * 100_000
    (log / f"{seg:020d}").write_bytes(data + b"\0" * (seg - len(data)))
    (log / "not-a-segment").write_bytes(b"\x03")
    info = zero_tail(tmp_path)
    assert info["segment"] == f"{seg:020d}"
    assert (info["zeroed_from"], info["zeroed_to"]) == (seg + 100_000 - TAIL_LOSS_BYTES, seg + 100_000)
    after = (log / f"{seg:020d}").read_bytes()
    assert after[: 100_000 - TAIL_LOSS_BYTES] == data[: 100_000 - TAIL_LOSS_BYTES]
    assert after[100_000 - TAIL_LOSS_BYTES :].count(0) == seg - (100_000 - TAIL_LOSS_BYTES)
    assert (log / f"{0:020d}").read_bytes() == b"\x01" * seg


def test_zero_tail_skips_an_empty_newest_segment(tmp_path: Path) -> None:
    log = tmp_path / "commitlog"
    log.mkdir()
    (log / f"{0:020d}").write_bytes(b"\x01" * 1000 + b"\0" * 3096)
    (log / f"{4096:020d}").write_bytes(b"\0" * 4096)
    info = zero_tail(tmp_path, nbytes=100)
    assert info == {"segment": f"{0:020d}", "zeroed_from": 900, "zeroed_to": 1000, "bytes": 100}


def test_first_ok_after_looks_at_the_tail_only() -> None:
    from ledgermq.chaos.workload import Attempt, Workload

    w = Workload("127.0.0.1:1")
    w.attempts = [
        Attempt(0, 0, 0.0, 1.0, "SEND_OK"),
        Attempt(1, 0, 4.0, 5.0, "error:X"),
        Attempt(2, 1, 3.0, 5.5, "SEND_OK"),  # began before the moment
        Attempt(3, 0, 5.1, 6.0, "SEND_OK"),
        Attempt(4, 1, 5.6, 7.0, "SEND_OK"),
    ]
    assert w._first_ok_after(4.0) == 6.0
    assert w._first_ok_after(8.0) == 0.0


def test_the_new_kinds_replay_exactly_and_leave_the_clean_kinds_schedules_alone() -> None:
    from ledgermq.chaos.faults import CLEAN_KINDS, DATA_KINDS, MAX_FLIPS, PAIR_KINDS

    every = CLEAN_KINDS + DATA_KINDS + PAIR_KINDS
    assert every + CONTROLLER_KINDS == KINDS
    plans = schedule(9, 300, every)
    assert plans == schedule(9, 300, every)  # kind, target, holds, modes and every draw
    assert plans != schedule(10, 300, every)
    assert {p.kind for p in plans} == set(every)
    # a clean kind draws nothing more than before: its schedule did not change
    assert schedule(1, 50, CLEAN_KINDS) == schedule(1, 50, CLEAN_KINDS, targets=targets_for("sync"))
    assert all(p.draws == () for p in schedule(1, 50, CLEAN_KINDS))
    by_kind: dict[str, list[object]] = {}
    for p in plans:
        by_kind.setdefault(p.kind, []).append(p)
    flips = [p for p in plans if p.kind == "bitflip"]
    assert {p.mode for p in flips} == {"kill", "stop", "online"}
    assert all(3 <= len(p.draws) <= 1 + 2 * MAX_FLIPS and len(p.draws) % 2 == 1 for p in flips)
    assert all(0.0 <= d < 1.0 for p in flips for d in p.draws)
    assert {p.mode for p in plans if p.kind == "segment-loss"} == {"delete", "truncate"}
    jumps = [p for p in plans if p.kind == "clock-jump"]
    assert all(5 <= p.draws[0] <= 180 and -180 <= p.draws[1] <= -5 for p in jumps)
    assert {p.role for p in plans if p.kind == "power-loss"} == {"group"}
    assert {p.role for p in plans if p.kind in ("kill+disk-full", "partition+restart")} == {"master"}
    assert all(0.05 <= p.draws[0] <= 1.0 for p in plans if p.kind == "kill-in-recovery")


def test_the_new_kinds_on_a_dledger_group_use_the_raft_roles() -> None:
    from ledgermq.chaos.faults import DATA_KINDS, PAIR_KINDS, applicable

    kinds, skipped = applicable("dledger", DATA_KINDS + PAIR_KINDS)
    assert kinds == DATA_KINDS + PAIR_KINDS and skipped == []
    plans = schedule(4, 200, kinds, targets=targets_for("dledger"))
    assert {p.role for p in plans} == {"leader", "follower", "group"}
