"""The reput dispatches what a DLedger member just appended from the rows the writer read
(store/dledger/fresh_rows.py), and only when they are exactly what the files hold:
the same units and index entries as a walk of the files, nothing read back on the common
path, and the file walk wherever the queue cannot vouch (a gap, a truncation, a message the
scan does not read, a topic whose tag code needs the delay levels)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from ledgermq.protocol import message as M
from ledgermq.store.dispatch import SCHEDULE_TOPIC
from ledgermq.store.dledger.entry import BODY_OFFSET
from ledgermq.store.dledger.fresh_rows import FreshRows, scan_row
from ledgermq.store.dledger.ledger_store import DLedgerStore
from ledgermq.store.message_store import MessageStore
from ledgermq.store.record_scan import PHYS, TOPIC
from tests.store.dledger.mode_helpers import TOPIC as DLT
from tests.store.dledger.mode_helpers import Driver, bodies_in_queue, encode, open_store


def _stopped(store: MessageStore) -> None:
    assert store.reput is not None
    store.reput.dispatch_available()
    store.reput.stop()


def _fill(d: Driver, rng: random.Random, n: int) -> list[tuple[str, int, bytes, dict[str, str]]]:
    """``n`` messages on two topics and three queues, random keys and tags, some no-ops."""
    sent = []
    for i in range(n):
        topic = DLT if rng.random() < 0.7 else "Other"
        queue_id = rng.randrange(3)
        props = {"UNIQ_KEY": f"U{i:06d}"}
        if rng.random() < 0.6:
            props["TAGS"] = rng.choice(["a", "b", "tag-with-dash"])
        if rng.random() < 0.5:
            props["KEYS"] = " ".join(f"k{rng.randrange(40)}" for _ in range(rng.randrange(1, 3)))
        body = b"m%d-" % i + bytes(rng.randrange(97, 123) for _ in range(rng.randrange(1, 300)))
        d.propose([body], topic=topic, queue_id=queue_id, props=props)
        sent.append((topic, queue_id, body, props))
        if rng.random() < 0.1:
            d.noop()
    return sent


def _dispatched(store: MessageStore) -> dict[str, Any]:
    """What dispatch produced: every queue's bodies and every key's and id's index hits."""
    out: dict[str, Any] = {}
    for topic in (DLT, "Other"):
        for q in range(3):
            out[f"{topic}-{q}"] = bodies_in_queue(store, q, topic)
        for k in range(40):
            hits = store.query_message(topic, f"k{k}", 64, 0, 2**62).messages
            out[f"{topic}-k{k}"] = sorted(M.decode_record(raw).body for raw in hits)
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rows_from_memory_dispatch_exactly_what_a_walk_of_the_files_does(tmp_path: Path, seed: int) -> None:
    stores = [open_store(tmp_path / "memory"), open_store(tmp_path / "files")]
    try:
        for store in stores:
            _stopped(store)
            d = Driver(store)
            _fill(d, random.Random(seed), 120)
            store.commit_to_index(d.last_index)
        assert stores[1].commitlog is not None
        stores[1].commitlog.fresh.clear()  # the second store walks its files
        for store in stores:
            assert store.reput is not None
            assert store.reput.dispatch_available() > 0
            assert store.reput.reput_from == store.commitlog.max_offset  # type: ignore[union-attr]
        assert _dispatched(stores[0]) == _dispatched(stores[1])
    finally:
        for store in stores:
            store.shutdown()


def test_nothing_just_appended_is_read_back_for_dispatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path / "s")
    try:
        _stopped(store)
        d = Driver(store)
        sent = _fill(d, random.Random(7), 80)
        store.commit_to_index(d.last_index)
        reads: list[int] = []
        real = DLedgerStore.read_body_at

        def counting(ledger: DLedgerStore, pos: int, size: int) -> bytes | None:
            reads.append(pos)
            return real(ledger, pos, size)

        monkeypatch.setattr(DLedgerStore, "read_body_at", counting)
        assert store.reput is not None
        assert store.reput.dispatch_available() == len(sent)
        assert reads == []
        monkeypatch.undo()
        for q in range(3):
            assert bodies_in_queue(store, q) == [b for t, qq, b, _p in sent if t == DLT and qq == q]
    finally:
        store.shutdown()


@pytest.mark.parametrize("as_proposed", [False, True], ids=["stored-bodies", "proposed-bodies"])
def test_a_follower_reads_each_copied_message_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, as_proposed: bool
) -> None:
    """Its pre-check before the write and its dispatch row are one scan of the body, also
    for bodies as a leader's Append carries its unstable entries: as proposed, before the
    leader's own write set their PHYSICALOFFSET (here zeroed), which the follower's
    placement sets; the dispatch row then carries the placed offset, as a walk of the
    files reads it."""
    from ledgermq.store.dledger import fresh_rows

    leader, follower = open_store(tmp_path / "leader"), open_store(tmp_path / "follower")
    try:
        _stopped(follower)
        d = Driver(leader)
        d.propose([b"f%d" % i for i in range(20)], props={"KEYS": "fk"})
        assert leader.commitlog is not None and follower.commitlog is not None
        entries = [(i, 1, bytearray(leader.commitlog.ledger.get(i).body)) for i in range(d.last_index + 1)]
        if as_proposed:
            for _i, _t, body in entries:
                if body:
                    body[M.PHYSICALOFFSET_POS : M.PHYSICALOFFSET_POS + 8] = bytes(8)
        ledger = leader.commitlog.ledger
        # The rows a walk of the leader's files reads (its bodies carry their placed offsets).
        expected = [
            scan_row(ledger.get(index).body, ledger.entry_span(index)[0] + BODY_OFFSET)
            for index, _term, body in entries
            if body
        ]
        scans: list[int] = []
        real = fresh_rows.scan_records

        def counting(*args: Any) -> Any:
            scans.append(1)
            return real(*args)

        monkeypatch.setattr(fresh_rows, "scan_records", counting)
        follower.append_entries(entries)
        assert len(scans) == 20
        fresh = list(follower.commitlog.fresh._queue)
        assert [row for _span, row in fresh if row is not None] == expected  # the rows a file walk reads
        assert all(row is not None and row[PHYS] == span.body_pos for span, row in fresh if span.body_size)
        follower.commit_to_index(entries[-1][0])
        assert follower.reput is not None
        assert follower.reput.dispatch_available() == 20
        assert len(scans) == 20
        monkeypatch.undo()
        assert bodies_in_queue(follower) == [b"f%d" % i for i in range(20)]
    finally:
        leader.shutdown()
        follower.shutdown()


def test_a_truncated_tail_is_never_dispatched_from_memory(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        _stopped(store)
        d = Driver(store)
        d.propose([b"kept"])
        store.commit_to_index(d.last_index)
        d.propose([b"cut-0", b"cut-1"])  # uncommitted, then replaced by a new leader's entries
        store.truncate_after_index(0)
        d.term = 2
        d.propose([b"the-new-0", b"the-new-1"])  # the same indices, the first at the same position, longer
        store.commit_to_index(d.last_index)
        assert store.reput is not None
        store.reput.dispatch_available()
        assert bodies_in_queue(store) == [b"kept", b"the-new-0", b"the-new-1"]
    finally:
        store.shutdown()


def _span_run(rows: FreshRows, first: int, n: int, pos: int = 1000, size: int = 100) -> list[int]:
    """Queue ``n`` entries of ``size`` body bytes from index ``first``, back to back; their positions."""
    out = []
    for i in range(n):
        rows.add(first + i, 1, pos, size, None)
        out.append(pos)
        pos += BODY_OFFSET + size
    return out


def test_take_hands_out_only_a_run_that_starts_at_the_cursor() -> None:
    rows = FreshRows()
    pos = _span_run(rows, 0, 5)
    assert rows.take(pos[0] - 1, 10) == []  # not where the queue starts: walk the files
    assert [s.index for s, _r in rows.take(pos[0], 1)] == [0, 1]  # up to max_index
    assert [s.index for s, _r in rows.take(pos[3], 10)] == [3, 4]  # older ones dropped
    assert len(rows) == 0


def test_take_stops_at_a_gap() -> None:
    rows = FreshRows()
    first = _span_run(rows, 0, 2)
    later = _span_run(rows, 2, 2, pos=50_000)  # a data file rolled
    assert [s.index for s, _r in rows.take(first[0], 10)] == [0, 1]
    assert rows.take(first[1] + BODY_OFFSET + 100, 10) == []
    assert [s.index for s, _r in rows.take(later[0], 10)] == [2, 3]


def test_a_full_queue_loses_its_oldest_and_the_reput_walks_the_files_for_them() -> None:
    rows = FreshRows(max_entries=4)
    pos = _span_run(rows, 0, 6)
    assert rows.take(pos[0], 10) == []
    assert [s.index for s, _r in rows.take(pos[2], 10)] == [2, 3, 4, 5]


def test_rows_whose_tag_code_needs_the_delay_levels_are_left_to_the_file_walk() -> None:
    body = bytearray(encode(b"later", topic=SCHEDULE_TOPIC, props={"DELAY": "3"}).data)
    M.set_append_fields(body, 0, 0, 5000 + BODY_OFFSET, 1)
    row = scan_row(body, 5000 + BODY_OFFSET)
    assert row is not None and row[TOPIC] == SCHEDULE_TOPIC and row[PHYS] == 5000 + BODY_OFFSET
    rows = FreshRows()
    rows.add(0, 1, 5000, len(body), row)
    assert rows.take(5000, 0)[0][1] is None
    plain = bytearray(encode(b"now").data)
    M.set_append_fields(plain, 0, 0, 5000 + BODY_OFFSET, 1)
    assert scan_row(plain, 6000) is None  # its PHYSICALOFFSET says it belongs elsewhere
    assert scan_row(plain[:-1], 5000 + BODY_OFFSET) is None  # not one whole message


class _Twin:
    """One DLedger store driven by a seeded walk; ``files`` makes its reput walk the files."""

    def __init__(self, root: Path, files: bool) -> None:
        self.store = open_store(root)
        _stopped(self.store)
        self.d = Driver(self.store)
        self.files = files

    def own_proposal(self, bodies: list[bytes], topic: str, queue_id: int, props: dict[str, str]) -> None:
        """As a leader writes its own: offsets given by ``prepare_append``, appended placed."""
        msgs = [encode(b, topic=topic, queue_id=queue_id, props=props) for b in bodies]
        entry_bodies = self.store.prepare_append(msgs, topic, queue_id)  # type: ignore[union-attr]
        first = self.d.last_index + 1
        entries = [(first + i, self.d.term, b) for i, b in enumerate(entry_bodies)]
        self.store.append_entries(entries, placed=True)  # type: ignore[union-attr]

    def dispatch(self) -> None:
        assert self.store.reput is not None and self.store.commitlog is not None
        if self.files:
            self.store.commitlog.fresh.clear()  # type: ignore[attr-defined]
        self.store.reput.dispatch_available()


@pytest.mark.parametrize("seed", [11, 12, 13, 14])
def test_a_seeded_walk_of_writes_truncations_and_commits_dispatches_as_the_files_say(tmp_path: Path, seed: int) -> None:
    """Leader-style and follower-style appends, no-ops, cut uncommitted tails rewritten by
    a later term, commits by random steps and dispatch passes in between: after every pass
    the store dispatching from memory holds exactly what the one walking its files holds."""
    rng = random.Random(seed)
    twins = [_Twin(tmp_path / "memory", False), _Twin(tmp_path / "files", True)]
    try:
        for step in range(80):
            roll = rng.random()
            if roll < 0.45:
                bodies = [b"s%d-%d-" % (step, i) + b"x" * rng.randrange(200) for i in range(rng.randrange(1, 4))]
                topic = rng.choice([DLT, "Other"])
                queue_id = rng.randrange(3)
                props = {"KEYS": f"k{rng.randrange(40)}", "TAGS": rng.choice(["a", "b"])}
                own = rng.random() < 0.5
                for t in twins:
                    if own:
                        t.own_proposal(bodies, topic, queue_id, props)
                    else:
                        t.d.propose(bodies, topic=topic, queue_id=queue_id, props=props)
            elif roll < 0.55:
                for t in twins:
                    t.d.noop()
            elif roll < 0.65:
                cl = twins[0].store.commitlog
                assert cl is not None
                low, high = max(cl.committed_index, 0), twins[0].d.last_index  # type: ignore[union-attr]
                if high > low:
                    cut = rng.randrange(low, high)
                    for t in twins:
                        t.store.truncate_after_index(cut)  # type: ignore[union-attr]
                        t.d.term += 1
            elif roll < 0.85:
                target = rng.randrange(0, twins[0].d.last_index + 1) if twins[0].d.last_index >= 0 else -1
                for t in twins:
                    cl = t.store.commitlog
                    assert cl is not None
                    if target > cl.committed_index:  # type: ignore[union-attr]
                        t.store.commit_to_index(target)  # type: ignore[union-attr]
            else:
                for t in twins:
                    t.dispatch()
                assert _dispatched(twins[0].store) == _dispatched(twins[1].store), f"seed {seed} step {step}"
        for t in twins:
            t.store.commit_to_index(t.d.last_index)  # type: ignore[union-attr]
            t.dispatch()
        assert _dispatched(twins[0].store) == _dispatched(twins[1].store)
        assert twins[0].store.reput is not None
        assert twins[0].store.reput.reput_from == twins[0].store.commitlog.max_offset  # type: ignore[union-attr]
    finally:
        for t in twins:
            t.store.shutdown()
