"""The DLedger store keeps no Python object per entry: index lookups go to the index file,
but for a bounded table of the last entries appended (``RECENT_SPANS``)."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

from ledgermq.store.dledger import DLedgerStore
from ledgermq.store.dledger.ledger_store import RECENT_SPANS
from tests.store.dledger.helpers import small_config


def _heap() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def test_heap_stays_flat_as_entries_accumulate(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, data_file_size=4 * 1024 * 1024, index_file_size=32 * 65536)
    body = b"m" * 64
    with DLedgerStore.open(cfg) as store:
        tracemalloc.start()
        try:
            warm = RECENT_SPANS + 2_000
            store.append([(i, 1, body) for i in range(warm)])  # warm up: files, buffers, the recent spans
            store.flush()
            before = _heap()
            more = 30_000
            for start in range(warm, warm + more, 100):
                store.append([(i, 1, body) for i in range(start, start + 100)])
                store.flush()
            for i in range(0, warm + more, 97):
                assert store.get(i).body == body
            after = _heap()
        finally:
            tracemalloc.stop()
    per_entry = (after - before) / more
    print(f"heap growth per entry: {per_entry:.3f} bytes")
    assert per_entry < 2, f"heap grew {after - before} bytes for {more} entries"
