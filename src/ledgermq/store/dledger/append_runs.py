"""Several entries written a run at a time: the entries that fit the current data file and
index file go in with one write to each, with exactly the bytes entry-by-entry appends
write (``DLedgerStore._append``'s loop: a head, the body, an index unit per entry, a data
file closed with a blank when the next entry does not fit). A Ready's worth of entries
then no longer costs each its own placement and three writes; one entry, or a torn-entry
failpoint armed, keeps the entry-by-entry path (tests/store/dledger/test_append_runs.py
compares the two byte for byte)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ledgermq.store.dledger.entry import (
    BODY_OFFSET,
    ENTRY_HEAD,
    ENTRY_MAGIC,
    INDEX_UNIT,
    INDEX_UNIT_SIZE,
    MIN_BLANK_LEN,
    body_crc,
)
from ledgermq.store.dledger.segments import data_file_for, index_file_for
from ledgermq.store.mapped_file_queue import MappedFileQueue

EntryInput = tuple[int, int, bytes | bytearray | memoryview]  # index, term, body
# Called with the body and the position its first byte will have in the data files
# (entry pos + BODY_OFFSET), before the entry is encoded: the leader fills the inner
# message's PHYSICALOFFSET with it.
BodyPatch = Callable[[bytearray, int], None]


def write_runs(
    data: MappedFileQueue,
    index: MappedFileQueue,
    first_offset: int,
    entries: Sequence[EntryInput],
    patch: BodyPatch | None,
) -> list[int]:
    """Write ``entries`` (checked by the caller: contiguous, sizes within a data file) and
    return each one's data position; ``patch(body, body_pos)`` as ``append_with_pos``'s.
    The caller publishes them (last index, spans) once this returns: readers trust the
    published last index only."""
    positions: list[int] = []
    head_pack, unit_pack = ENTRY_HEAD.pack, INDEX_UNIT.pack
    i, n = 0, len(entries)
    while i < n:
        first_index, _term, first_body = entries[i]
        mf = data_file_for(data, BODY_OFFSET + len(first_body), first_offset)
        imf = index_file_for(index, first_index * INDEX_UNIT_SIZE)
        room = mf.remaining() - MIN_BLANK_LEN  # every entry leaves room for a closing blank
        units_left = imf.remaining() // INDEX_UNIT_SIZE
        pos = start = mf.write_offset
        parts: list[bytes | bytearray | memoryview] = []
        units: list[bytes] = []
        while i < n and units_left:
            entry_index, term, body = entries[i]
            size = BODY_OFFSET + len(body)
            if pos - start + size > room and parts:
                break  # the next file (data_file_for closes this one with a blank)
            if patch is not None:
                assert isinstance(body, bytearray)
                patch(body, pos + BODY_OFFSET)
            parts.append(head_pack(ENTRY_MAGIC, size, entry_index, term, pos, 0, 0, body_crc(body), len(body)))
            parts.append(body)
            units.append(unit_pack(ENTRY_MAGIC, pos, size, entry_index, term))
            positions.append(pos)
            pos += size
            units_left -= 1
            i += 1
        mf.append_parts(parts, pos - start)
        imf.append(b"".join(units))
    return positions
