"""Child process for crash tests: put numbered messages and print each acknowledged seq.

Usage: python crash_writer.py ROOT FLUSH_TYPE START MAX_COUNT
Failpoints come from LEDGERMQ_FAILPOINTS (e.g. "commitlog.before_append=exit@40").
"""

from __future__ import annotations

import random
import struct
import sys
import time

from ledgermq.config import FlushDiskType, StoreConfig
from ledgermq.failpoints import arm_from_env
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import open_message_store


def main() -> None:
    root, flush, start, max_count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    arm_from_env()
    cfg = StoreConfig(
        root_dir=root,
        mapped_file_size_commitlog=64 * 1024,
        mapped_file_size_consume_queue=20 * 64,
        max_hash_slot_num=64,
        max_index_num=256,
        flush_disk_type=FlushDiskType(flush),
        flush_interval_commitlog_ms=20,
        flush_interval_consume_queue_ms=20,
    )
    store = open_message_store(cfg)
    store.start()
    rng = random.Random(start)
    deadline = time.monotonic() + 60
    for seq in range(start, start + max_count):
        if time.monotonic() > deadline:
            break
        body = struct.pack(">q", seq) + bytes(rng.randrange(256) for _ in range(rng.randrange(600)))
        msg = MessageInput(
            topic="RecoveryTopic",
            body=body,
            queue_id=seq % 4,
            properties={"TAGS": f"t{seq % 3}", "KEYS": f"key-{seq}"},
        )
        result = store.put_message_sync(msg)
        if not result.ok:
            print(f"error {result.status.value}", flush=True)
            break
        print(seq, flush=True)
    store.shutdown()
    print("done", flush=True)


if __name__ == "__main__":
    main()
