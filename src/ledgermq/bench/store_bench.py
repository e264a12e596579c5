"""``ledgermq bench store``: the store's write, read and recovery paths against baselines.

Each case is measured next to a baseline doing the least possible work for the same
outcome in the same run, so figures compare across machines as ratios:

* puts (ASYNC_FLUSH) vs appending the same pre-encoded bytes with ``os.write``;
* batch puts vs the same baseline;
* SYNC_FLUSH puts with many in flight (group commit) vs one fdatasync per message;
* pulls (get_message, 32 at a time) vs reading the same bytes with ``os.pread``;
* abnormal recovery (scan, CRC, re-dispatch) vs reading the commit log once.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from ledgermq.config import FlushDiskType, StoreConfig
from ledgermq.protocol.message import encode_record
from ledgermq.store.message_input import BatchInput, MessageInput
from ledgermq.store.native_store import NativeMessageStore
from ledgermq.testing.crash import abandon


@dataclass(frozen=True, slots=True)
class BenchRow:
    case: str
    ops: int
    seconds: float
    baseline: str
    baseline_seconds: float

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds else 0.0

    @property
    def baseline_rate(self) -> float:
        return self.ops / self.baseline_seconds if self.baseline_seconds else 0.0

    @property
    def ratio(self) -> float:
        """Our rate as a fraction of the baseline's."""
        return self.rate / self.baseline_rate if self.baseline_rate else 0.0


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _config(root: Path, **kw: object) -> StoreConfig:
    return StoreConfig(
        root_dir=str(root),
        mapped_file_size_commitlog=64 * 1024 * 1024,
        mapped_file_size_consume_queue=20 * 300_000,
        max_hash_slot_num=500_000,
        max_index_num=2_000_000,
        **kw,  # type: ignore[arg-type]
    )


def _message(i: int, body: bytes) -> MessageInput:
    return MessageInput(
        topic="BenchTopic",
        body=body,
        queue_id=i % 8,
        properties={"TAGS": "TagA", "KEYS": f"key-{i}", "UNIQ_KEY": f"{i:032X}"},
    )


def _raw_append(path: Path, records: list[bytes], sync_each: bool) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:

        def run() -> None:
            for r in records:
                os.write(fd, r)
                if sync_each:
                    os.fdatasync(fd)

        return _timed(run)
    finally:
        os.close(fd)


def run_store_bench(workdir: Path | None, messages: int, body_size: int, inflight: int) -> list[BenchRow]:
    base = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ledgermq-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    body = os.urandom(body_size)
    try:
        records = [
            bytes(encode_record(topic="BenchTopic", body=body, properties=f"TAGS\x01TagA\x02KEYS\x01key-{i}"))
            for i in range(messages)
        ]
        raw_s = _raw_append(base / "raw", records, sync_each=False)
        msgs = [_message(i, body) for i in range(messages)]
        root = base / "async"
        store = NativeMessageStore(_config(root))
        store.start()
        put_s = _timed(lambda: [store.put_message(m) for m in msgs])
        store.wait_dispatched(timeout=120)
        return [
            BenchRow("put (ASYNC_FLUSH)", messages, put_s, "os.write of encoded records", raw_s),
            _bench_pulls(store, root, records),
            _bench_recovery(store, root, records),
            _bench_batch_puts(base / "batch", body, messages, raw_s),
            _bench_sync_flush(base, records, msgs, inflight),
        ]
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)


def _bench_pulls(store: NativeMessageStore, root: Path, records: list[bytes]) -> BenchRow:
    """Pulls of 32 from each queue until drained vs a pread of the same bytes."""

    def pull_all() -> None:
        for q in range(8):
            off = 0
            while True:
                res = store.get_message("BenchTopic", q, off, 32)
                if not res.message_count:
                    break
                off = res.next_begin_offset

    pull_s = _timed(pull_all)
    fd = os.open(_first_segment(root), os.O_RDONLY)
    try:
        sizes = [len(r) for r in records]

        def pread_all() -> None:
            pos = 0
            for s in sizes:
                os.pread(fd, s, pos)
                pos += s

        pread_s = _timed(pread_all)
    finally:
        os.close(fd)
    return BenchRow("pull 32/request", len(records), pull_s, "os.pread per record", pread_s)


def _first_segment(root: Path) -> Path:
    return sorted((root / "commitlog").iterdir())[0]


def _bench_recovery(store: NativeMessageStore, root: Path, records: list[bytes]) -> BenchRow:
    """Abnormal recovery (queues and index rebuilt) vs one sequential read of the commit log."""
    abandon(store)
    (root / "checkpoint").unlink(missing_ok=True)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index", ignore_errors=True)
    total = sum(len(r) for r in records)
    seg = _first_segment(root)

    def read_log() -> None:
        with open(seg, "rb") as f:
            f.read(total)

    read_s = _timed(read_log)
    recovered = NativeMessageStore(_config(root))
    rec_s = _timed(recovered.start)
    recovered.shutdown()
    return BenchRow("crash recovery + rebuild", len(records), rec_s, "read the commit log once", read_s)


def _bench_batch_puts(root: Path, body: bytes, messages: int, raw_s: float) -> BenchRow:
    """Batch puts of 32 vs writing the encoded records."""
    store = NativeMessageStore(_config(root))
    store.start()
    batches = [
        BatchInput("BenchTopic", [(0, body, {"KEYS": f"k{i + j}"}) for j in range(32)], queue_id=i % 8)
        for i in range(0, messages, 32)
    ]
    batch_s = _timed(lambda: [store.put_messages(b) for b in batches])
    store.shutdown()
    return BenchRow("batch put x32", len(batches) * 32, batch_s, "os.write of encoded records", raw_s)


def _bench_sync_flush(base: Path, records: list[bytes], msgs: list[MessageInput], inflight: int) -> BenchRow:
    """SYNC_FLUSH with group commit vs one fdatasync per message. Puts are issued from one
    thread with up to ``inflight`` awaiting durability, the way the broker's event loop keeps
    many clients' sends in flight."""
    messages = len(msgs)
    sync_n = max(inflight * 20, messages // 5)
    sync_raw_s = _raw_append(base / "rawsync", records[:sync_n], sync_each=True)
    store = NativeMessageStore(_config(base / "sync", flush_disk_type=FlushDiskType.SYNC_FLUSH))
    store.start()

    def run_sync() -> None:
        pending: deque[Future[bool]] = deque()
        for i in range(sync_n):
            result = store.put_message(msgs[i % messages])
            assert result.flush_future is not None
            pending.append(result.flush_future)
            if len(pending) >= inflight:
                pending.popleft().result(30)
        for fut in pending:
            fut.result(30)

    sync_s = _timed(run_sync)
    store.shutdown()
    return BenchRow(f"put SYNC_FLUSH, {inflight} in flight", sync_n, sync_s, "fdatasync per message", sync_raw_s)
