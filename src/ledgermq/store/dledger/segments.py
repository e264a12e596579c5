"""Placement rules over the two MappedFileQueues, shared by appends and recovery.

Data: an entry goes where the last data file has room for it plus a minimal blank;
otherwise the file is closed with a blank and the entry starts the next file
(MmapFileList.preAppend with useBlank). Index: the unit of index ``i`` sits at byte
``i * 32`` of the index space, so index files never need a blank (their size is a
multiple of 32).
"""

from __future__ import annotations

import os

from ledgermq.errors import InvariantViolation
from ledgermq.store.dledger.entry import INDEX_UNIT, INDEX_UNIT_SIZE, MIN_BLANK_LEN, blank_head
from ledgermq.store.mapped_file import MappedFile, SegmentGoneError
from ledgermq.store.mapped_file_queue import MappedFileQueue

IndexUnit = tuple[int, int, int, int, int]  # magic, pos, size, index, term


def next_data_pos(data: MappedFileQueue, size: int, first_offset: int) -> int:
    """Where an entry of ``size`` bytes would start if appended now."""
    last = data.last()
    if last is None:
        return first_offset
    if last.is_full or size + MIN_BLANK_LEN > last.remaining():
        return last.end_offset
    return last.write_offset


def data_file_for(data: MappedFileQueue, size: int, first_offset: int) -> MappedFile:
    """The data file the next entry of ``size`` bytes goes to, closing the last with a blank
    if it does not fit there. The blank's head is all that is written: a data file's
    unwritten tail is zeros (new files are sparse, truncation zeroes)."""
    mf = data.last_for_write(start_if_empty=first_offset)
    rest = mf.remaining()
    if size + MIN_BLANK_LEN > rest:
        mf.append(blank_head(rest))  # rest >= MIN_BLANK_LEN: every entry leaves room for one
        mf.wrote = mf.size
        mf = data.last_for_write()
    return mf


def index_file_for(index: MappedFileQueue, offset: int) -> MappedFile:
    """The index file whose write position is ``offset`` (the unit about to be written).

    An empty index space may start mid-file (a log whose first index is not 0 after its
    index files were deleted): the file is created at the boundary below and the units
    before ``offset`` stay zero.
    """
    mf = index.last_for_write(start_if_empty=offset)
    if mf.write_offset != offset:
        if mf.wrote == 0 and mf.start_offset <= offset < mf.end_offset:
            mf.wrote = offset - mf.start_offset
        else:
            raise InvariantViolation(f"index unit at {offset} but the index files end at {mf.write_offset}")
    return mf


def read_index_unit(index: MappedFileQueue, entry_index: int) -> IndexUnit | None:
    """The unit of ``entry_index`` as stored, or None if no index file holds it."""
    offset = entry_index * INDEX_UNIT_SIZE
    mf = index.find(offset)
    if mf is None or not mf.pin():
        return None
    try:
        at = offset - mf.start_offset
        if at + INDEX_UNIT_SIZE > mf.wrote:
            return None
        raw = mf.read(at, INDEX_UNIT_SIZE)
    except SegmentGoneError:
        return None
    finally:
        mf.unpin()
    magic, pos, size, idx, term = INDEX_UNIT.unpack(raw)
    return magic, pos, size, idx, term


def read_data(data: MappedFileQueue, pos: int, size: int) -> bytes | None:
    """``size`` bytes at data position ``pos`` within one file, or None if not (all) written."""
    mf = data.find(pos)
    if mf is None or not mf.pin():
        return None
    try:
        at = pos - mf.start_offset
        if at + size > mf.wrote:
            return None
        return mf.read(at, size)
    except SegmentGoneError:
        return None
    finally:
        mf.unpin()


def sync_file(mf: MappedFile) -> None:
    """fdatasync a file whatever its positions say (after zeroing a truncated tail, which
    ``MappedFile.flush`` does not count as unflushed bytes)."""
    os.fdatasync(mf.fd)
