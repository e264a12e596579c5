"""Shared helpers for DLedger store tests: small configs and numbered bodies."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

from ledgermq.store.dledger import DLedgerStore, DLedgerStoreConfig

# Small files so a few dozen entries roll data files (with blanks) and index files.
SMALL: dict[str, Any] = dict(data_file_size=4096, index_file_size=32 * 16)


def small_config(base: Path, **overrides: Any) -> DLedgerStoreConfig:
    return DLedgerStoreConfig(store_base_dir=str(base), **{**SMALL, **overrides})


def body_for(index: int, max_filler: int = 300) -> bytes:
    """A marker, the index, then a seeded filler: varied sizes, never all zeros."""
    rng = random.Random(index)
    return b"E" + struct.pack(">q", index) + rng.randbytes(rng.randrange(max_filler))


def append_numbered(store: DLedgerStore, count: int, term: int = 1) -> list[int]:
    start = store.last_index + 1
    return store.append([(i, term, body_for(i)) for i in range(start, start + count)])


def assert_numbered(store: DLedgerStore, last: int) -> None:
    """The log holds exactly entries 0..last, each with its numbered body."""
    assert store.first_index == 0
    assert store.last_index == last
    for i in range(last + 1):
        assert store.get(i).body == body_for(i), i
    assert [s.index for s in store.entries_from(store.config.first_data_offset)] == list(range(last + 1))
