"""The pure parts of the check: which half messages a round checks, passes, discards or
leaves for later (``scan``), and the op-message bookkeeping (``OpBook``)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.broker.transactions.half import check_times, immunity_ms, is_prepared, to_committed, to_half
from ledgermq.broker.transactions.ops import REMOVE_TAG, OpBook, OpRecord, parse_half_offset
from ledgermq.broker.transactions.scan import HalfRead, OpsRead, ScanSettings, scan
from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.message import MessageRecord
from ledgermq.store.message_input import MessageInput

NOW = 1_000_000
S = ScanSettings(timeout_ms=6000, check_max=15, reserved_ms=72 * 3600 * 1000)


def half(offset: int, born: int, stored: int | None = None, **props: str) -> MessageRecord:
    return MessageRecord(
        topic="RMQ_SYS_TRANS_HALF_TOPIC",
        body=b"x",
        queue_offset=offset,
        physical_offset=1000 + offset,
        born_timestamp=born,
        store_timestamp=born if stored is None else stored,
        properties={P.UNIQ_KEY: f"U{offset}", P.REAL_TOPIC: "T", P.REAL_QID: "0", P.PGROUP: "pg", **props},
    )


def op(offset: int, half_offset: int, born: int = 0, tag: str = REMOVE_TAG) -> OpRecord:
    return OpRecord(offset, tag, str(half_offset).encode(), born)


class Queues:
    def __init__(self, halves: list[MessageRecord], ops: list[OpRecord], half_min: int = 0) -> None:
        self.halves = {h.queue_offset: h for h in halves}
        self.half_end = max(self.halves, default=half_min - 1) + 1
        self.half_min = half_min
        self.ops = ops
        self.op_reads = 0

    def half_at(self, offset: int) -> HalfRead:
        if offset >= self.half_end:
            return HalfRead(None, end=True)
        if offset < self.half_min:
            return HalfRead(None, next_offset=self.half_min)
        return HalfRead(self.halves[offset])

    def ops_from(self, offset: int, max_count: int) -> OpsRead:
        self.op_reads += 1
        found = [o for o in self.ops if offset <= o.queue_offset < offset + max_count]
        return OpsRead(found, offset + len(found))


def kinds(result: object) -> list[tuple[str, int]]:
    return [(a.kind, a.offset) for a in result.actions]  # type: ignore[attr-defined]


def test_an_unresolved_half_message_past_the_timeout_is_checked_with_its_check_count_raised() -> None:
    q = Queues([half(0, NOW - 7000), half(1, NOW - 6500, TRANSACTION_CHECK_TIMES="4")], [])
    r = scan(q, 0, 0, NOW, NOW, S)
    assert kinds(r) == [("check", 0), ("check", 1)]
    assert [a.properties[P.TRANSACTION_CHECK_TIMES] for a in r.actions] == ["1", "5"]
    assert (r.half_offset, r.op_offset) == (2, 0)


def test_a_young_half_message_stops_the_round_and_everything_after_it_waits() -> None:
    q = Queues([half(0, NOW - 7000), half(1, NOW - 100), half(2, NOW - 9000)], [])
    r = scan(q, 0, 0, NOW, NOW, S)
    assert kinds(r) == [("check", 0)] and r.half_offset == 1


def test_a_message_stored_during_the_round_waits_for_the_next_one() -> None:
    q = Queues([half(0, NOW - 9000, stored=NOW + 5)], [])
    r = scan(q, 0, 0, NOW + 10, NOW, S)
    assert kinds(r) == [] and r.half_offset == 0


def test_op_messages_resolve_half_messages_and_the_op_offset_moves_over_done_ops_only() -> None:
    # op 0 names half 1 (resolved in this round); op 1 names half 0 of an earlier round (done);
    # op 2 names half 7, which this round does not reach: the op offset stops before it.
    q = Queues([half(1, NOW - 9000), half(2, NOW - 9000), half(3, NOW - 10)], [op(0, 1), op(1, 0), op(2, 7)], 1)
    r = scan(q, 1, 0, NOW, NOW, S)
    assert kinds(r) == [("check", 2)]
    assert (r.half_offset, r.op_offset) == (3, 2)


def test_op_messages_past_the_first_batch_are_read_before_a_message_is_checked() -> None:
    ops = [op(i, 1000 + i) for i in range(40)] + [op(40, 0)]
    q = Queues([half(0, NOW - 9000)], ops)
    r = scan(q, 0, 0, NOW, NOW, S)
    assert kinds(r) == [] and r.half_offset == 1  # op 40 resolved it: no check
    assert q.op_reads == 2  # 32, then the 9 holding op 40; no more once it is resolved


def test_past_check_max_the_message_is_discarded_with_its_count_unchanged() -> None:
    q = Queues([half(0, NOW - 9000, TRANSACTION_CHECK_TIMES="15"), half(1, NOW - 9000)], [])
    r = scan(q, 0, 0, NOW, NOW, S)
    assert kinds(r) == [("discard", 0), ("check", 1)]
    assert r.actions[0].properties[P.TRANSACTION_CHECK_TIMES] == "15"
    assert r.actions[0].reason == "checked too many times" and r.actions[0].next_half == 1


def test_a_message_older_than_file_reserved_time_is_discarded_unchecked() -> None:
    q = Queues([half(0, NOW - S.reserved_ms - 1)], [])
    assert [a.reason for a in scan(q, 0, 0, NOW, NOW, S).actions] == ["older than fileReservedTime"]


def test_own_immunity_re_puts_the_message_at_the_end_instead_of_stopping_the_round() -> None:
    immune = half(0, NOW - 7000, CHECK_IMMUNITY_TIME_IN_SECONDS="60")
    q = Queues([immune, half(1, NOW - 7000)], [])
    r = scan(q, 0, 0, NOW, NOW, S)
    assert kinds(r) == [("immunity", 0), ("check", 1)]
    assert r.actions[0].properties[P.TRAN_PREPARED_QUEUE_OFFSET] == "0"
    # its copy stays immune (re-put again) until its immunity passes: the op its producer wrote
    # names the first offset, which RocketMQ 4.9 has already counted done by then
    copy = half(2, NOW - 7000, CHECK_IMMUNITY_TIME_IN_SECONDS="60", TRAN_PREPARED_QUEUE_OFFSET="1")
    r3 = scan(Queues([copy], [op(0, 1)], 2), 2, 0, NOW, NOW, S)
    assert kinds(r3) == [("immunity", 2)] and r3.op_offset == 1
    # past its immunity it is checked like any other
    assert kinds(scan(Queues([half(0, NOW - 61_000, CHECK_IMMUNITY_TIME_IN_SECONDS="60")], []), 0, 0, NOW, NOW, S)) == [
        ("check", 0)
    ]


def test_a_gap_in_the_half_queue_is_skipped_from_its_start() -> None:
    q = Queues([half(5, NOW - 9000)], [], half_min=5)
    r = scan(q, 2, 0, NOW, NOW, S)
    assert kinds(r) == [("check", 5)] and r.half_offset == 6


def test_ops_with_another_tag_are_reported_and_never_done() -> None:
    q = Queues([half(0, NOW - 9000)], [op(0, 0, tag="x")])
    r = scan(q, 0, 0, NOW, NOW, S)
    assert kinds(r) == [("check", 0)] and r.op_offset == 0 and len(r.bad_ops) == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60), max_size=40), st.integers(0, 10), st.integers(0, 20))
def test_next_op_offset_is_old_plus_the_contiguous_run_of_done_ops(halves: list[int], start: int, old: int) -> None:
    book = OpBook(start)
    book.add([op(old + i, h) for i, h in enumerate(halves)])
    for h in range(start, 61):
        book.take(h)
    done = set(book.done)
    expected = old
    while expected in done:
        expected += 1
    assert book.next_op_offset(old) == expected
    assert all(h >= start for h in book.remove) and not book.remove  # every half offset was taken


def test_property_readers_follow_rocketmq() -> None:
    assert check_times({}) is None and check_times({P.TRANSACTION_CHECK_TIMES: "x"}) == -1
    assert immunity_ms({}, 6000) is None
    assert immunity_ms({P.CHECK_IMMUNITY_TIME_IN_SECONDS: "-1"}, 6000) == 6000
    assert immunity_ms({P.CHECK_IMMUNITY_TIME_IN_SECONDS: "20"}, 6000) == 20_000
    assert is_prepared({P.TRAN_MSG: "TRUE"}) and not is_prepared({P.TRAN_MSG: "1"})
    assert parse_half_offset(b"12") == 12 and parse_half_offset(b"zz") == -1


def test_half_and_committed_shapes() -> None:
    props = {P.TRAN_MSG: "true", P.PGROUP: "pg"}
    sent = MessageInput("T", b"b", 3, 9, props, SF.TRANSACTION_PREPARED_TYPE | SF.COMPRESSED)
    h = to_half(sent)
    assert (h.topic, h.queue_id, h.sysflag) == ("RMQ_SYS_TRANS_HALF_TOPIC", 0, SF.COMPRESSED)
    assert (h.properties[P.REAL_TOPIC], h.properties[P.REAL_QID]) == ("T", "3")
    rec = MessageRecord("RMQ_SYS_TRANS_HALF_TOPIC", b"b", 0, 9, 4, 500, SF.COMPRESSED, properties=h.properties)
    c = to_committed(rec, 500)
    assert (c.topic, c.queue_id, c.prepared_transaction_offset) == ("T", 3, 500)
    assert c.sysflag == SF.COMPRESSED | SF.TRANSACTION_COMMIT_TYPE and c.properties == h.properties
