"""The store keeps no Python object per stored message.

Python-heap growth (tracemalloc; mmap'd pages are not Python allocations) while storing
tens of thousands more messages must stay under a few bytes per message: any per-message
object (an int, a list slot, a dict entry) would cost at least 8-28 bytes each.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable

from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore


def _put(store: MessageStore, start: int, count: int) -> None:
    for i in range(start, start + count):
        msg = MessageInput(
            topic="Mem",
            body=b"x" * 32,
            queue_id=i % 8,
            properties={"TAGS": f"t{i % 5}", "KEYS": f"k{i}", "UNIQ_KEY": f"U{i:030d}"},
        )
        assert store.put_message(msg).ok


def _heap() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def test_heap_stays_flat_as_messages_accumulate(store_factory: Callable[..., MessageStore]) -> None:
    store = store_factory(
        mapped_file_size_commitlog=4 * 1024 * 1024,
        mapped_file_size_consume_queue=20 * 4096,
        max_hash_slot_num=4096,
        max_index_num=8192,
    )
    tracemalloc.start()
    try:
        _put(store, 0, 5_000)  # warm up: segments, queues, index files, caches
        assert store.wait_dispatched()
        before = _heap()
        more = 20_000
        _put(store, 5_000, more)
        assert store.wait_dispatched()
        after = _heap()
    finally:
        tracemalloc.stop()
    per_message = (after - before) / more
    print(f"heap growth per message: {per_message:.3f} bytes")
    # under 6: a per-message object costs at least 8 bytes (a list slot) and usually 36 or
    # more; the files the run adds (segments, queue files, index files) cost a few KiB each,
    # which came to 4.1 bytes per message once on a loaded machine
    assert per_message < 6, f"heap grew {after - before} bytes for {more} messages"
    assert store.max_offset_in_queue("Mem", 0) == 25_000 // 8
