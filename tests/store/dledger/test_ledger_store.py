"""DLedgerStore operations: appends, rolls with blanks, reads, truncation, flush, state files."""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import pytest

from ledgermq.errors import StoreClosedError
from ledgermq.protocol import message as M
from ledgermq.store.dledger import (
    BODY_OFFSET,
    DLedgerStore,
    EntryNotFoundError,
    LogMismatchError,
    TermState,
)
from ledgermq.store.dledger import entry as E
from tests.store.dledger.helpers import append_numbered, assert_numbered, body_for, small_config


@pytest.fixture
def store(tmp_path: Path) -> DLedgerStore:
    s = DLedgerStore.open(small_config(tmp_path))
    yield s  # type: ignore[misc]
    s.close()


def test_empty_log(store: DLedgerStore) -> None:
    assert (store.first_index, store.last_index, store.last_term) == (0, -1, -1)
    assert store.end_pos == 0 and store.flush() == -1
    assert list(store.entries_from(0)) == []
    with pytest.raises(EntryNotFoundError):
        store.get(0)
    with pytest.raises(EntryNotFoundError):
        store.term_at(-1)


def test_layout_on_disk(tmp_path: Path) -> None:
    with DLedgerStore.open(small_config(tmp_path, self_id="n2")) as s:
        append_numbered(s, 3)
        s.save_committed_index(s.flush())
        s.save_term_state(TermState(4, "n1"))
    root = tmp_path / "dledger-n2"
    assert sorted(os.listdir(root)) == ["checkpoint", "currterm", "data", "index", "logstart"]  # logstart: ledgermq's
    assert os.listdir(root / "data") == ["00000000000000000000"]
    assert os.path.getsize(root / "index" / "00000000000000000000") == 32 * 16
    assert (root / "currterm").read_text() == "currTerm=4\nvoteLeader=n1\n"
    assert (root / "checkpoint").read_text() == "endIndex=2\ncommittedIndex=2\n"
    assert (root / "logstart").read_text() == "firstIndex=0\nfirstDataPos=0\ndataBeginPos=0\n"


def test_append_get_and_positions(store: DLedgerStore) -> None:
    positions = append_numbered(store, 10)
    assert positions[0] == 0
    for i, pos in enumerate(positions):
        got = store.get(i)
        assert got.body == body_for(i) and got.term == 1 and got.pos == pos
        assert store.entry_span(i) == (pos, BODY_OFFSET + len(body_for(i)))
        assert store.term_at(i) == 1
        assert store.read_body_at(pos + BODY_OFFSET, len(body_for(i))) == body_for(i)
    assert store.last_index == 9 and store.end_pos == positions[-1] + BODY_OFFSET + len(body_for(9))


def test_an_entry_never_crosses_a_data_file_end(store: DLedgerStore) -> None:
    positions = append_numbered(store, 60)
    size = store.config.data_file_size
    rolled = [i for i in range(1, 60) if positions[i] // size != positions[i - 1] // size]
    assert rolled, "60 entries of up to 350 bytes must roll a 4 KiB file"
    for i in rolled:
        assert positions[i] % size == 0
        prev_end = positions[i - 1] + BODY_OFFSET + len(body_for(i - 1))
        blank = store.data.find(prev_end)
        assert blank is not None
        at = prev_end - blank.start_offset
        assert blank.read(at, 8) == E.blank_head(size - at)  # magic -1, then bytes left
    for i, pos in enumerate(positions):
        assert pos // size == (pos + BODY_OFFSET + len(body_for(i)) + 7) // size
    assert_numbered(store, 59)


def test_next_entry_pos_accounts_for_a_roll(store: DLedgerStore) -> None:
    size = store.config.data_file_size
    store.append([(0, 1, bytes(size - BODY_OFFSET - 8 - 100))])  # leaves 108 bytes
    assert store.next_entry_pos(100 - BODY_OFFSET - 8 + 8) == store.end_pos
    assert store.next_entry_pos(100 - BODY_OFFSET + 1) == size  # needs a blank and a new file
    big = size - BODY_OFFSET - 8
    assert store.next_entry_pos(big) == size
    with pytest.raises(LogMismatchError):
        store.next_entry_pos(big + 1)
    pos = store.next_entry_pos(200)
    assert store.append([(1, 1, bytes(200))]) == [pos]


def test_append_with_pos_fills_the_inner_physical_offset(store: DLedgerStore) -> None:
    append_numbered(store, 14)  # somewhere near a data file end
    bodies = [bytearray(M.PHYSICALOFFSET_POS + 8 + n) for n in (300, 3000, 10)]
    seen: list[int] = []

    def patch(body: bytearray, body_pos: int) -> None:
        seen.append(body_pos)
        struct.pack_into(">q", body, M.PHYSICALOFFSET_POS, body_pos)

    entries = [(14 + k, 2, b) for k, b in enumerate(bodies)]
    positions = store.append_with_pos(entries, patch)
    assert seen == [p + BODY_OFFSET for p in positions]
    for k, pos in enumerate(positions):
        got = store.get(14 + k)
        assert struct.unpack_from(">q", got.body, M.PHYSICALOFFSET_POS)[0] == pos + BODY_OFFSET
    store.close()
    reopened = DLedgerStore.open(store.config)  # the CRC covers the patched body
    assert reopened.recovery is not None and reopened.recovery.stop_reason == "end of data"
    assert reopened.last_index == 16
    reopened.close()


def test_appends_must_continue_the_log(store: DLedgerStore) -> None:
    append_numbered(store, 3, term=5)
    with pytest.raises(LogMismatchError, match="continues at 3"):
        store.append([(4, 5, b"x")])
    with pytest.raises(LogMismatchError, match="below the previous term"):
        store.append([(3, 4, b"x")])
    with pytest.raises(LogMismatchError):  # all or nothing: the first entry is fine, the second is not
        store.append([(3, 5, b"a"), (5, 5, b"b")])
    with pytest.raises(LogMismatchError, match="does not fit"):
        store.append([(3, 5, bytes(store.config.data_file_size))])
    assert store.last_index == 2
    assert store.append([(3, 6, b"a"), (4, 6, b"b")]) and store.last_term == 6


def test_truncate_after_then_append_again(store: DLedgerStore) -> None:
    positions = append_numbered(store, 40)
    data_files = len(store.data.files)
    store.truncate_after(12)
    assert (store.last_index, store.last_term) == (12, 1)
    assert store.end_pos == positions[13]
    assert len(store.data.files) <= data_files
    with pytest.raises(EntryNotFoundError):
        store.get(13)
    new = store.append([(13, 2, b"new-13"), (14, 2, b"new-14")])
    assert new[0] == positions[13]
    assert store.get(13).body == b"new-13" and store.term_at(14) == 2
    assert [s.index for s in store.entries_from(0)] == list(range(15))
    store.close()
    again = DLedgerStore.open(store.config)
    assert again.last_index == 14 and again.get(14).body == b"new-14"
    assert again.recovery is not None and not again.recovery.dirty_tail
    again.close()


def test_truncate_at_a_file_boundary_and_to_empty(store: DLedgerStore) -> None:
    positions = append_numbered(store, 40)
    size = store.config.data_file_size
    first_in_second = next(i for i, p in enumerate(positions) if p >= size)
    store.truncate_after(first_in_second - 1)  # the first file keeps its blank
    assert store.end_pos == size and store.next_entry_pos(10) == size
    assert store.append([(first_in_second, 3, b"x")]) == [size]
    store.truncate_after(-1)
    assert (store.last_index, store.last_term, store.end_pos) == (-1, -1, 0)
    assert store.append([(0, 4, b"again")]) == [0]


def test_truncation_below_the_committed_index_is_refused(store: DLedgerStore) -> None:
    append_numbered(store, 10)
    assert store.save_committed_index(store.flush()) == 9
    store.append([(10, 1, b"x")])
    with pytest.raises(LogMismatchError, match="committed"):
        store.truncate_after(8)
    store.truncate_after(9)
    assert store.last_index == 9


def test_flush_and_the_committed_checkpoint(store: DLedgerStore) -> None:
    append_numbered(store, 5)
    assert store.persisted_index == -1
    assert store.save_committed_index(4) == -1  # nothing flushed yet: nothing may be promised
    assert store.flush() == 4
    assert store.save_committed_index(10) == 4  # clamped to what is durable
    assert store.save_committed_index(2) == 4  # and never goes back
    store.truncate_after(4)
    append_numbered(store, 3)
    assert store.persisted_index == 4
    assert store.flush() == 7


def test_entries_from_walks_blanks_and_stops_at_max_index(store: DLedgerStore) -> None:
    positions = append_numbered(store, 50)
    spans = list(store.entries_from(0))
    assert [s.pos for s in spans] == positions
    for s in spans:
        assert store.read_body_at(s.body_pos, s.body_size) == body_for(s.index)
    assert [s.index for s in store.entries_from(positions[20], max_index=25)] == list(range(20, 26))
    assert list(store.entries_from(store.end_pos)) == []
    resume = spans[30].next_pos
    assert next(iter(store.entries_from(resume))).index == 31


def test_first_data_offset_continues_an_old_commit_log(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, first_data_offset=3 * 4096)
    with DLedgerStore.open(cfg) as s:
        assert s.end_pos == 3 * 4096 and s.next_entry_pos(10) == 3 * 4096
        positions = append_numbered(s, 30)
        assert positions[0] == 3 * 4096
    with DLedgerStore.open(cfg) as s:
        assert s.last_index == 29
        assert [x.pos for x in s.entries_from(3 * 4096)] == positions


def test_closed_store_refuses_writes(tmp_path: Path) -> None:
    s = DLedgerStore.open(small_config(tmp_path))
    s.close()
    with pytest.raises(StoreClosedError):
        s.append([(0, 1, b"x")])
    with pytest.raises(StoreClosedError):
        s.truncate_after(-1)


def test_readers_and_a_flusher_alongside_appends(store: DLedgerStore) -> None:
    """Readers never see a half-written entry; flush never claims one it did not cover."""
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        try:
            while not done.is_set():
                last = store.last_index
                if last >= 0:
                    assert store.get(last).body == body_for(last)
                    spans = list(store.entries_from(0, max_index=last))
                    assert [s.index for s in spans] == list(range(last + 1))
        except BaseException as exc:
            errors.append(exc)

    def flush() -> None:
        try:
            while not done.is_set():
                before = store.last_index
                assert store.flush() >= before
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=read), threading.Thread(target=flush)]
    for t in threads:
        t.start()
    try:
        for _ in range(150):
            append_numbered(store, 2)
    finally:
        done.set()
        for t in threads:
            t.join(10)
    assert not errors, errors
    assert store.flush() == 299


def test_entry_spans_from_memory_are_the_index_units(tmp_path: Path) -> None:
    """The last entries' (pos, size) come from memory: always what their index units say,
    across a truncation, new entries at the same indices, a reopen, and past the table's bound."""
    from ledgermq.store.dledger.ledger_store import RECENT_SPANS
    from ledgermq.store.dledger.segments import read_index_unit

    def units_agree(s: DLedgerStore) -> None:
        for i in range(s.first_index, s.last_index + 1):
            unit = read_index_unit(s.index, i)
            assert unit is not None and s.entry_span(i) == (unit[1], unit[2]), i

    cfg = small_config(tmp_path, data_file_size=1 << 20, index_file_size=32 * 16384)
    with DLedgerStore.open(cfg) as s:
        s.append([(i, 1, b"x" * (i % 50 + 1)) for i in range(300)])
        units_agree(s)
        s.truncate_after(199)
        s.append([(i, 2, b"y" * (i % 7 + 90)) for i in range(200, 260)])
        units_agree(s)
        s.append([(i, 2, b"z" * 10) for i in range(260, RECENT_SPANS + 400)])
        assert len(s._spans) == RECENT_SPANS
        units_agree(s)
    with DLedgerStore.open(cfg) as s:
        assert not s._spans
        units_agree(s)
