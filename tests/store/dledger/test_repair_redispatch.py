"""A DLedger member's derived state across a repair: its log is cut in the middle (damage
found while running), the leader re-sends the same entries, and the consume queues and
the index must hold exactly what the log holds again; while the log is being re-recovered
a pull is refused for now, never answered as if its messages were gone (docs/dledger.md,
"Disks that lie").

``victim`` and ``twin`` are two stores of one group: the victim writes entries as a leader,
the twin follows its bytes and stays untouched, so it is what the victim must equal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgermq.protocol import properties as P
from ledgermq.store.consumequeue import UNIT_SIZE
from ledgermq.store.dledger.commitlog import DLedgerStore
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import GetResult, GetStatus
from tests.store.dledger.mode_helpers import TOPIC, Driver, bodies_in_queue, open_store

QUEUES = 4
MESSAGES = 480  # about 40 data files of 4 KiB, 2 consume-queue files of 64 units per queue
STORE = dict(mapped_file_size_commitlog=4096)


def _body(i: int) -> bytes:
    return f"m{i:04d}-".encode() + bytes([65 + i % 26]) * (40 + i % 90)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[MessageStore, MessageStore]]:
    victim = open_store(tmp_path / "victim", **STORE)
    twin = open_store(tmp_path / "twin", **STORE)
    try:
        d = Driver(victim)
        for i in range(MESSAGES):
            d.propose([_body(i)], queue_id=i % QUEUES, props={P.KEYS: f"k{i}"})
        d.commit()
        d.checkpoint()
        _follow(twin, victim, 0)
        yield victim, twin
    finally:
        victim.shutdown()
        twin.shutdown()


def _follow(follower: MessageStore, leader: MessageStore, first: int) -> None:
    """Write ``leader``'s entries from index ``first`` on into ``follower`` as a Raft
    follower does (the leader's bytes), commit them and wait until they are dispatched."""
    assert follower.commitlog is not None and leader.commitlog is not None
    source = leader.commitlog.ledger
    entries = [(i, e.term, e.body) for i in range(first, source.last_index + 1) for e in [source.get(i)]]
    for at in range(0, len(entries), 32):
        follower.append_entries(entries[at : at + 32])
    follower.commit_to_index(source.last_index)
    assert follower.wait_dispatched(timeout=10)


def _units(store: MessageStore, queue_id: int) -> bytes:
    cq = store.queues.get(TOPIC, queue_id)
    assert cq is not None
    out = b""
    while len(out) // UNIT_SIZE < cq.max_offset:
        more = cq.read_units(len(out) // UNIT_SIZE, 1024)
        assert more, f"queue {queue_id}: no units at {len(out) // UNIT_SIZE} below {cq.max_offset}"
        out += more
    return out


def _damage_the_middle(victim: MessageStore) -> int:
    """Record damage in a sealed data file in the middle of the victim's log (what its scrub
    does on finding a flipped byte); returns the data position."""
    assert victim.commitlog is not None
    ledger = victim.commitlog.ledger
    files = ledger.data.files
    at = files[len(files) // 2].start_offset + 1000
    ledger.damage.report(at, at + 64, "a flipped byte (test)")
    return at


def _first_unit_at_or_past(store: MessageStore, queue_id: int, pos: int) -> int:
    """The queue offset of the first unit whose record ends past data position ``pos``."""
    units = _units(store, queue_id)
    for k in range(len(units) // UNIT_SIZE):
        phy = int.from_bytes(units[k * UNIT_SIZE : k * UNIT_SIZE + 8], "big", signed=True)
        size = int.from_bytes(units[k * UNIT_SIZE + 8 : k * UNIT_SIZE + 12], "big", signed=True)
        if phy + size > pos:
            return k
    raise AssertionError(f"queue {queue_id} has no unit past {pos}")


def test_a_cut_in_the_middle_then_the_same_entries_again_leave_queues_and_index_as_an_untouched_copy(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    victim, twin = pair
    assert victim.commitlog is not None
    before = {q: _units(twin, q) for q in range(QUEUES)}
    damaged_at = _damage_the_middle(victim)
    victim.reopen_ledger()  # what the broker does once the scrub fail-stopped the driver
    ledger = victim.commitlog.ledger
    cut = victim.commitlog.max_offset
    assert ledger.recovery is not None and ledger.recovery.damage_found
    assert cut <= damaged_at and 0 < ledger.last_index < MESSAGES // 2 + 40
    for q in range(QUEUES):  # units before the cut kept as they were, those past it dropped
        kept = _units(victim, q)
        assert kept == before[q][: len(kept)]
        assert len(kept) // UNIT_SIZE == _first_unit_at_or_past(twin, q, cut)
    _follow(victim, twin, ledger.last_index + 1)  # the leader re-sends what the cut lost
    for q in range(QUEUES):
        assert _units(victim, q) == before[q], f"queue {q}"
        assert bodies_in_queue(victim, q) == [_body(i) for i in range(q, MESSAGES, QUEUES)]
    for i in (0, MESSAGES // 2 - 3, MESSAGES // 2 + 5, MESSAGES - 1):  # across the cut
        found = victim.query_message(TOPIC, f"k{i}", 32, 0, 2**62).messages
        assert found == twin.query_message(TOPIC, f"k{i}", 32, 0, 2**62).messages and len(found) == 1, i


def _pulls(store: MessageStore, offsets: dict[int, int]) -> dict[int, GetResult]:
    return {q: store.get_message(TOPIC, q, offset, 32) for q, offset in offsets.items()}


def _during(monkeypatch: pytest.MonkeyPatch, target: Any, name: str, probe: Callable[[], None]) -> None:
    """Run ``probe`` right before ``target.name`` is called (inside the re-recovery)."""
    real = getattr(target, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        probe()
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, wrapped)


def _assert_refused_for_now(results: dict[int, GetResult], offsets: dict[int, int]) -> None:
    for q, got in results.items():
        # (before the fix: MESSAGE_WAS_REMOVING, with the next offset past the whole batch)
        answer = (got.status.value, got.next_begin_offset, got.message_count)
        assert answer == ("STORE_UNAVAILABLE", offsets[q], 0), f"queue {q} at {offsets[q]}: {answer}"
        assert "ask again" in got.remark or "re-sending" in got.remark, got.remark


def test_pulls_while_the_log_is_re_recovered_are_refused_for_now_never_moved_past(
    pair: tuple[MessageStore, MessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The member's files are closed while they are recovered again, and then its consume
    queues still point past the cut for a moment: a pull meeting either must not be told
    "removed" (MESSAGE_WAS_REMOVING), which moves a consumer past up to a batch of units
    whose messages are all still committed in the group."""
    victim, twin = pair
    assert victim.commitlog is not None
    dl = victim.commitlog
    damaged_at = _damage_the_middle(victim)
    from_start = {q: 0 for q in range(QUEUES)}
    past_cut = {q: _first_unit_at_or_past(twin, q, damaged_at) + 2 for q in range(QUEUES)}
    while_closed: dict[int, GetResult] = {}
    after_cut: dict[int, GetResult] = {}
    spanning: list[GetResult] = []

    def probe_after_cut() -> None:
        after_cut.update(_pulls(victim, past_cut))
        q0_cut = _first_unit_at_or_past(victim, 0, dl.max_offset)  # the units are still there
        spanning.append(victim.get_message(TOPIC, 0, q0_cut - 3, 32))

    _during(monkeypatch, DLedgerStore, "open", lambda: while_closed.update(_pulls(victim, from_start)))
    real_reopen = dl.reopen_ledger

    def reopen_then_probe() -> DLedgerStore:
        ledger = real_reopen()
        probe_after_cut()
        return ledger

    monkeypatch.setattr(dl, "reopen_ledger", reopen_then_probe)
    victim.reopen_ledger()

    _assert_refused_for_now(while_closed, from_start)
    _assert_refused_for_now(after_cut, past_cut)
    (span,) = spanning  # the messages before the cut are answered, the pull stops at it
    assert span.status is GetStatus.FOUND and span.message_count == 3, (span.status, span.message_count)
    assert span.next_begin_offset == _first_unit_at_or_past(twin, 0, dl.max_offset)
    _follow(victim, twin, dl.ledger.last_index + 1)
    for q in range(QUEUES):  # and everything is there again afterwards
        assert bodies_in_queue(victim, q) == [_body(i) for i in range(q, MESSAGES, QUEUES)]


def test_a_record_retention_deleted_is_still_moved_past(pair: tuple[MessageStore, MessageStore]) -> None:
    """Only bytes that are coming back are refused for now: a unit left pointing below the
    log's first data file (retention deleted it) still answers MESSAGE_WAS_REMOVING."""
    victim, _twin = pair
    assert victim.commitlog is not None
    dl = victim.commitlog
    low = dl.ledger.data.files[3].start_offset
    assert dl.unreadable_reason(low - 200, 100) is not None  # still stored: not "removed"
    gone = dl.ledger.delete_leading_files(lambda _mf, _head: True, 3, 0.0)
    assert len(gone) == 3 and dl.min_offset == low
    assert dl.unreadable_reason(low - 200, 100) is None
    assert dl.unreadable_reason(low, 100) is not None


def test_the_damage_counts_as_a_damaged_range_from_its_find_until_the_repair_ends(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    """storeDamagedRanges (runtime info, admin brokerStatus) as a native store reports it:
    the range a read or the scrub recorded, then, once the re-recovery cut the log there,
    the repair under way, until the Raft member ends it (its log holds every entry again)."""
    victim, twin = pair
    assert victim.commitlog is not None

    def info() -> tuple[str, str, str, str]:
        i = victim.runtime_info()
        return i["storeDamagedRanges"], i["storeDamagedBytes"], i["storeCorruptionsFound"], i["storeRepairs"]

    assert info() == ("0", "0", "0", "0")
    _damage_the_middle(victim)
    assert info() == ("1", "64", "1", "0")
    victim.reopen_ledger()
    ledger = victim.commitlog.ledger
    assert ledger.repair is not None  # cut at the damage: the range is gone, the repair is not over
    assert info() == ("1", "0", "1", "0")
    _follow(victim, twin, ledger.last_index + 1)
    assert info()[0] == "1"  # the entries are back, but only the Raft member can say it holds them all
    ledger.end_repair()  # what the driver does then
    assert info() == ("0", "0", "1", "1")
