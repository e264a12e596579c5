"""DLedger files found shorter than their size at start: a truncated copy, a file system
that lost a file's tail, an operator's mistake. Never a crash: files are created at full
size (sparse), so a short file lost bytes it had.

A short data file is padded with zeros so the directory loads, but the zeros must not pass
for a log that simply ends there. Recovery trusts a sealed file whose digest exists without
reading it (the scrub checks it later), so it would start holding entries it cannot read,
believe it committed them, and serve nothing of them until the scrub's next pass. So the
bytes a sealed file lost are recorded as damaged *before* it is padded (a crash between the
two leaves the record, never an unexplained run of zeros): recovery then walks the file,
cuts the log at the loss and repairs it from the group (docs/dledger.md, "Disks that
lie"). The last data file is the log's end: what it lost is a shorter log, which the
checkpoint's committed index judges as for any other end.

The index is derived from the data: a short index file is padded and the index is cut at
the first unit it lost, so recovery rebuilds the units from the entries.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ledgermq.store.damage import DamageRegistry
from ledgermq.store.dledger.config import DLedgerStoreConfig
from ledgermq.store.dledger.entry import INDEX_UNIT_SIZE

log = logging.getLogger(__name__)


def _short_files(directory: Path, size: int) -> list[tuple[Path, int]]:
    """(file, bytes it has) of each segment-named file shorter than ``size``, oldest first."""
    if not directory.is_dir():
        return []
    names = sorted(p for p in directory.iterdir() if p.name.isdigit())
    return [(p, n) for p in names if (n := p.stat().st_size) < size]


def pad_short_data_files(config: DLedgerStoreConfig, damage: DamageRegistry) -> int:
    """Record what each short sealed data file lost as damaged, then pad every short data
    file to its size. Returns how many files were padded."""
    directory, size = config.data_dir, config.data_file_size
    short = _short_files(directory, size)
    if not short:
        return 0
    last = max(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    for path, kept in short:
        start = int(path.name)
        sealed = start != last
        if sealed:
            damage.report(start + kept, start + size, f"data file {path.name} was cut to {kept} bytes")
        log.error(
            "dledger: data file %s is %d bytes, not %d: padding it with zeros; %s",
            path,
            kept,
            size,
            "recovery cuts the log there and repairs what it lost from the group"
            if sealed
            else "it is the last one: the log ends where its entries end",
        )
        os.truncate(path, size)
    return len(short)


def pad_short_index_files(config: DLedgerStoreConfig) -> int | None:
    """Pad every short index file to its size; return the index-space offset of the first
    unit one of them lost (the index must be cut there and rebuilt), or None."""
    size = config.index_file_size
    first_lost: int | None = None
    for path, kept in _short_files(config.index_dir, size):
        lost = int(path.name) + kept - kept % INDEX_UNIT_SIZE
        first_lost = lost if first_lost is None else min(first_lost, lost)
        log.error(
            "dledger: index file %s is %d bytes, not %d: padding it with zeros and rebuilding the index from "
            "the data from index %d",
            path,
            kept,
            size,
            lost // INDEX_UNIT_SIZE,
        )
        os.truncate(path, size)
    return first_lost
