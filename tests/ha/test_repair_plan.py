"""The pure parts of HA repairs: planning who repairs what, the handshake's new messages, and
transfers that stop before a damaged range."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledgermq.admin.model import HARuntimeInfo, decode_ha_runtime_info
from ledgermq.cli.admin_render import ha_status_text
from ledgermq.ha.codec import REPORT
from ledgermq.ha.epochs import Agree, EpochLog, Fetch, Refuse
from ledgermq.ha.handshake import (
    HELLO_MAGIC,
    LENGTH,
    Give,
    HandshakeError,
    Hello,
    decode_answer,
    decode_hello,
    encode_answer,
    encode_hello,
)
from ledgermq.ha.repair import (
    BORDER,
    Transfer,
    Unrepaired,
    clip,
    first_damage_at_or_after,
    normalize,
    plan_repairs,
    subtract,
)
from ledgermq.ha.session import Heartbeat, Idle, MasterSession, Send

SEG = 10_000
L = EpochLog([(1, 0, 11)])


def plan(**kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = {
        "master_damaged": [],
        "slave_damaged": [],
        "master_start": 0,
        "slave_start": 0,
        "agreed": 50_000,
        "segment_size": SEG,
    }
    args.update(kw)
    return plan_repairs(**args)  # type: ignore[arg-type]


# -- planning ------------------------------------------------------------------------------


def test_a_range_damaged_on_the_master_is_taken_from_a_slave_that_holds_it_with_borders() -> None:
    p = plan(master_damaged=[(1000, 1100)])
    assert p.take == (Transfer(1000, 1100, 1000 - BORDER, 1100 + BORDER),)
    assert not p.give and not p.missing and not p.refused and not p.deferred


def test_a_range_damaged_on_the_slave_is_given_by_the_master() -> None:
    p = plan(slave_damaged=[(3000, 3500)])
    assert p.give == (Transfer(3000, 3500, 3000 - BORDER, 3500 + BORDER),)
    assert not p.take and not p.refused


def test_damage_on_both_copies_is_neither_taken_nor_given_but_reported_on_both_sides() -> None:
    p = plan(master_damaged=[(1000, 2000)], slave_damaged=[(1500, 2500)])
    assert p.take == (Transfer(1000, 1500, 1000 - BORDER, 1500),)  # the border stops at the slave's damage
    assert p.give == (Transfer(2000, 2500, 2000, 2500 + BORDER),)
    assert p.missing == (Unrepaired(1500, 2000, "the slave's copy is damaged too"),)
    assert p.refused == (Unrepaired(1500, 2000, "the master's copy is damaged too"),)


def test_nothing_moves_at_or_beyond_the_agreed_offset_nor_outside_either_log() -> None:
    p = plan(master_damaged=[(100, 200), (40_000, 40_100), (49_990, 50_100)], slave_start=1000, agreed=50_000)
    assert p.take == (
        Transfer(40_000, 40_100, 40_000 - BORDER, 40_100 + BORDER),
        Transfer(49_990, 50_000, 49_990 - BORDER, 50_000),  # the part below the agreed offset, no border above
    )
    reasons = {(u.start, u.end): u.reason for u in p.missing}
    assert "starts at 1000" in reasons[(100, 200)]
    assert "ends at 50000" in reasons[(50_000, 50_100)]
    assert len(reasons) == 2
    # the slave's damage beyond the agreed offset goes with the tail it truncates; below the
    # master's start it is refused
    p3 = plan(slave_damaged=[(10, 20), (60_000, 60_010)], master_start=5000, agreed=70_000)
    assert p3.refused == (Unrepaired(10, 20, "the master's log starts at 5000 (its retention deleted it)"),)
    p4 = plan(slave_damaged=[(60_000, 60_010)], agreed=55_000)
    assert not p4.give and not p4.refused


def test_transfers_are_cut_at_segment_ends_and_a_handshake_budget() -> None:
    p = plan(master_damaged=[(9_990, 10_020)])
    assert [(t.start, t.end) for t in p.take] == [(9_990, 10_000), (10_000, 10_020)]
    # the two pieces border each other: neither uses the other (damaged) as a border
    assert p.take[0].high == 10_000 and p.take[1].low == 10_000
    big = plan(master_damaged=[(0, 45_000)], segment_size=1 << 30, agreed=50_000, budget=20_000, chunk=10_000)
    assert [(t.start, t.end) for t in big.take] == [(0, 10_000), (10_000, 20_000)]
    assert big.deferred
    one = plan(master_damaged=[(0, 30_000)], segment_size=1 << 30, budget=10, chunk=30_000)
    assert len(one.take) == 1 and not one.deferred  # always at least one transfer


@given(
    master=st.lists(st.tuples(st.integers(0, 60_000), st.integers(1, 3000)), max_size=6),
    slave=st.lists(st.tuples(st.integers(0, 60_000), st.integers(1, 3000)), max_size=6),
    master_start=st.integers(0, 20_000),
    slave_start=st.integers(0, 20_000),
    agreed=st.integers(0, 70_000),
)
def test_plans_move_only_damaged_bytes_the_other_holds_healthy_inside_both_logs(
    master: list[tuple[int, int]],
    slave: list[tuple[int, int]],
    master_start: int,
    slave_start: int,
    agreed: int,
) -> None:
    mine = normalize((max(a, master_start), max(a, master_start) + n) for a, n in master)
    theirs = normalize(clip(((max(a, slave_start), max(a, slave_start) + n) for a, n in slave), 0, agreed))
    p = plan(
        master_damaged=mine, slave_damaged=theirs, master_start=master_start, slave_start=slave_start, agreed=agreed
    )
    bad = normalize([*mine, *theirs])
    low = max(master_start, slave_start)
    for transfers, damaged, healthy_on in ((p.take, mine, theirs), (p.give, theirs, mine)):
        for t in transfers:
            assert low <= t.low <= t.start < t.end <= t.high <= agreed
            assert subtract([(t.start, t.end)], damaged) == []  # only damaged bytes are rewritten ...
            assert clip(healthy_on, t.start, t.end) == []  # ... from a healthy copy
            assert clip(bad, t.low, t.start) == [] and clip(bad, t.end, t.high) == []  # healthy borders
    taken = normalize((t.start, t.end) for t in p.take)
    missing = normalize((u.start, u.end) for u in p.missing)
    assert normalize([*taken, *missing]) == mine  # every damaged byte of the master is taken or reported


# -- the handshake's new messages ---------------------------------------------------------------


def test_hello_lists_damage_only_when_there_is_some_and_round_trips() -> None:
    plain = encode_hello(3, 1800, 64, 33)
    assert b"damaged" not in plain  # a healthy slave's hello is what it always was
    raw = encode_hello(3, 1800, 64, 33, [(100, 200), (300, 400)])
    assert decode_hello(raw[12:]) == Hello(3, 33, 1800, 64, ((100, 200), (300, 400)))


def test_a_hello_from_a_slave_without_the_field_and_one_with_unknown_fields_decode() -> None:
    old = orjson.dumps({"version": 1, "epoch": 2, "epochId": 5, "maxOffset": 900, "minOffset": 0})
    assert decode_hello(old) == Hello(2, 5, 900, 0, ())
    newer = orjson.dumps({"epoch": 2, "maxOffset": 900, "damaged": [[1, 2]], "somethingLater": {"x": 1}})
    assert decode_hello(newer).damaged == ((1, 2),)
    # what a master before repairs read from a damaged slave's hello: everything but the new field
    body = encode_hello(2, 900, 0, 5, [(10, 20)])
    assert REPORT.unpack(body[:8])[0] == HELLO_MAGIC and LENGTH.unpack(body[8:12])[0] == len(body) - 12
    assert orjson.loads(body[12:])["maxOffset"] == 900


@pytest.mark.parametrize(
    "damaged",
    ["x", [[5, 5]], [[7, 3]], [[-1, 3]], [[1, 2, 3]], [["1", 2]], [[True, 2]], [[0, 950]]],
)
def test_a_hello_with_a_malformed_damaged_list_is_refused(damaged: object) -> None:
    body = orjson.dumps({"epoch": 1, "maxOffset": 900, "damaged": damaged})
    with pytest.raises(HandshakeError):
        decode_hello(body)


def test_repair_answers_round_trip_and_old_answers_still_decode() -> None:
    give = Give(100, 200, 36, 264)
    assert decode_answer(encode_answer(give, L)[12:]).decision == give
    fetch = decode_answer(encode_answer(Fetch(36, 264), L, repair=True)[12:])
    assert fetch.decision == Fetch(36, 264) and fetch.repair
    lost_tail = decode_answer(encode_answer(Fetch(500, 900), L)[12:])
    assert lost_tail.decision == Fetch(500, 900) and not lost_tail.repair
    refused = (Unrepaired(5, 9, "the master's copy is damaged too"),)
    agree = decode_answer(encode_answer(Agree(900), L, (836, 7), refused=refused)[12:])
    assert agree.decision == Agree(900) and agree.check == (836, 7) and agree.refused == refused
    assert agree.log_start is None  # only said when the master says it
    started = decode_answer(encode_answer(Agree(900), L, log_start=4096)[12:])
    assert started.decision == Agree(900) and started.log_start == 4096
    # an answer as a master before repairs wrote it
    old = decode_answer(orjson.dumps({"decision": "agree", "offset": 900, "epochs": [[1, 0, 11]]}))
    assert old.decision == Agree(900) and old.refused == () and old.epochs == L
    assert decode_answer(encode_answer(Refuse("no"), L)[12:]).decision == Refuse("no")


@pytest.mark.parametrize(
    "doc",
    [
        {"decision": "repair", "start": 100, "end": 200, "low": 150, "high": 264},  # low inside the range
        {"decision": "repair", "start": 100, "end": 200, "low": 36, "high": 150},
        {"decision": "repair", "start": 200, "end": 100, "low": 36, "high": 264},
        {"decision": "repair", "start": 100, "end": 200},
        {"decision": "repair", "start": "100", "end": 200, "low": 36, "high": 264},
        {"decision": "agree", "offset": 9, "repairRefused": [{"start": 1}]},
        {"decision": "agree", "offset": 9, "repairRefused": "x"},
        {"decision": "agree", "offset": 9, "logStart": -1},
        {"decision": "agree", "offset": 9, "logStart": "4096"},
    ],
)
def test_malformed_repair_answers_are_refused(doc: dict[str, object]) -> None:
    with pytest.raises(HandshakeError):
        decode_answer(orjson.dumps(doc))


# -- transfers stop before damage -----------------------------------------------------------


def test_the_transfer_stops_before_a_damaged_range_and_waits_there_on_heartbeats() -> None:
    s = MasterSession(segment_size=SEG, batch_size=4096, heartbeat_interval=1.0, housekeeping_interval=20, now=0)
    s.on_report(1000, 9000, 0)
    assert s.plan(0, 9000, 0, 100_000, stop_at=3000) == Send(1000, 2000)
    s.on_sent(1000, 2000, 0)
    assert isinstance(s.plan(0, 9000, 0.5, 100_000, stop_at=3000), Idle)
    assert s.plan(0, 9000, 1.5, 100_000, stop_at=3000) == Heartbeat(3000)
    assert s.plan(0, 9000, 1.5, 100_000) == Send(3000, 6000)  # repaired: it goes on


def test_first_damage_at_or_after() -> None:
    ranges = [(100, 200), (500, 600)]
    assert first_damage_at_or_after(ranges, 0) == 100
    assert first_damage_at_or_after(ranges, 150) == 150
    assert first_damage_at_or_after(ranges, 200) == 500
    assert first_damage_at_or_after(ranges, 600) is None


# -- what admin haStatus shows --------------------------------------------------------------


def test_ha_status_text_shows_repairs_pending_ranges_and_what_no_replica_holds() -> None:
    doc = {
        "master": True,
        "damagedRanges": [[524097, 589941]],
        "unrepaired": ["no replica holds [524097, 589941): slave 127.0.0.1:5: the slave's copy is damaged too"],
        "repairsTaken": 2,
        "repairBytesTaken": 700,
        "repairsGiven": 1,
        "repairBytesGiven": 64,
        "lastRepair": "took [10, 20) from slave 127.0.0.1:5",
    }
    info = decode_ha_runtime_info(doc)
    assert info.damaged_ranges == [(524097, 589941)] and info.repairs_taken == 2
    head, _ = ha_status_text("127.0.0.1:10911", info, 0)
    assert "#Repairs\ttaken 2 (700 bytes) from slaves, given 1 (64 bytes) to slaves" in head
    assert "#LastRepair\ttook [10, 20) from slave 127.0.0.1:5" in head
    assert "#DamagedRanges\t[524097, 589941) (refused until a replica repairs them)" in head
    assert "#Unrepaired\tno replica holds [524097, 589941): slave 127.0.0.1:5: the slave's copy is damaged too" in head
    quiet, _ = ha_status_text("127.0.0.1:10911", HARuntimeInfo(master=True), 0)
    assert "Repair" not in quiet and "Damaged" not in quiet  # nothing shown when there never was damage


def test_ha_status_text_shows_damage_a_slave_let_go_because_its_master_expired_it() -> None:
    doc = {"master": False, "repairsExpired": 1, "repairBytesExpired": 65, "lastRepair": "let [10, 75) go: ..."}
    info = decode_ha_runtime_info(doc)
    assert (info.repairs_expired, info.repair_bytes_expired) == (1, 65)
    head, _ = ha_status_text("127.0.0.1:10921", info, 0)
    assert "#Expired\t1 damaged range(s) (65 bytes) let go: the master's retention had deleted them" in head
