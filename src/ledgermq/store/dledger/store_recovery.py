"""Start-up of a message store in DLedger mode: the DLedger files, then what derives from them.

1. Migration: a native commit log in ``commitlog/`` and no DLedger data yet means the
   first start in DLedger mode. The old log is recovered as usual (``store.recovery``),
   dispatched to the end, its consume queues flushed, and its last segment sealed with a
   blank; DLedger data begins at that segment's end (the divided offset). Later starts
   take the divided offset from the DLedger ``logstart`` record (``dataBeginPos``; stores
   from before it: the first DLedger data file) and keep the old log read-only.
2. The DLedger files open and recover themselves (``DLedgerStore.open``); the committed
   index is the checkpoint's, so the committed position is that entry's end.
3. Consume queues trim themselves to their last valid unit, then drop units at or beyond
   the committed position (a crash can leave units for entries committed in memory but
   not checkpointed; the driver commits them again and they are dispatched again, at the
   same queue offsets, which the entries carry).
4. The reput resumes after a clean stop where the queues end; after a crash from the
   newest data file whose first message is older than the checkpoint's logics (and index)
   time minus 3 s, or earlier if an index file was dropped (dispatch is idempotent).

The next-offset table is rebuilt by the store once the reput has caught up
(``DLedgerCommitLog.rebuild_queue_offsets``), over committed and uncommitted entries.
"""

from __future__ import annotations

import logging
import struct

from ledgermq.protocol import message as M
from ledgermq.store.checkpoint import RECOVERY_MARGIN_MS, Checkpoint
from ledgermq.store.dispatch import END_OF_DATA
from ledgermq.store.dledger.commitlog import DLedgerCommitLog
from ledgermq.store.dledger.metadata import load_log_start
from ledgermq.store.index import IndexService
from ledgermq.store.mapped_file import parse_segment_name
from ledgermq.store.queue_table import ConsumeQueueTable
from ledgermq.store.recovery import RecoveryResult, recover
from ledgermq.store.reput import ReputService

log = logging.getLogger(__name__)

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")


def recover_dledger(
    commitlog: DLedgerCommitLog,
    queues: ConsumeQueueTable,
    index: IndexService | None,
    checkpoint: Checkpoint,
    *,
    abnormal: bool,
    check_crc: bool,
    delay_levels_ms: list[int],
    index_rebuild_from: int | None = None,
) -> RecoveryResult:
    divided = _divided_offset(
        commitlog, queues, index, checkpoint, abnormal, check_crc, delay_levels_ms, index_rebuild_from
    )
    ledger = commitlog.open_ledger(divided)
    for cq in queues.all():
        cq.recover()
    committed_end = commitlog.max_offset
    for cq in queues.all():
        cq.truncate_dirty(committed_end)
    if index is not None:
        index.forget_after(committed_end)
    low = commitlog.min_offset
    for cq in queues.all():
        cq.correct_min_offset(low)
    if abnormal:
        reput_from = _safe_start(commitlog, checkpoint, index is not None, index_rebuild_from)
    else:
        reput_from = max(queues.max_physic_offset(), divided, low)
    reput_from = min(max(reput_from, divided), committed_end)
    rec = ledger.recovery
    return RecoveryResult(
        abnormal=abnormal,
        scan_start=rec.scan_start if rec else divided,
        valid_end=committed_end,
        dirty_tail=rec.dirty_tail if rec else False,
        segments_dropped=rec.data_files_dropped if rec else 0,
        records_scanned=rec.entries_scanned if rec else 0,
        records_redispatched=0,
        stop_reason=rec.stop_reason if rec else END_OF_DATA,
        reput_from=reput_from,
    )


def _divided_offset(
    commitlog: DLedgerCommitLog,
    queues: ConsumeQueueTable,
    index: IndexService | None,
    checkpoint: Checkpoint,
    abnormal: bool,
    check_crc: bool,
    delay_levels_ms: list[int],
    index_rebuild_from: int | None,
) -> int:
    recorded = load_log_start(commitlog.ledger_config.default_path)
    if recorded is not None:
        return recorded.data_begin  # where index 0 was written, even once retention or a repair emptied the log
    old_log = commitlog.old_log
    if not old_log.queue.files:
        return 0
    data_dir = commitlog.ledger_config.data_dir
    if commitlog.ledger_has_data():
        starts = [s for s in map(parse_segment_name, (p.name for p in data_dir.iterdir())) if s is not None]
        return min(starts)
    # First start in DLedger mode over a native commit log.
    native = recover(
        old_log,
        queues,
        index,
        checkpoint,
        abnormal=abnormal,
        check_crc=check_crc,
        delay_levels_ms=delay_levels_ms,
        index_rebuild_from=index_rebuild_from,
    )
    ReputService(old_log, queues, index, native.reput_from, delay_levels_ms).dispatch_available()
    queues.flush()
    if index is not None:
        index.flush()
    divided = commitlog.seal_old_log()
    log.info("switching to DLedger: the old commit log ends at %d, DLedger data begins there", divided)
    return divided


def _first_store_ts(commitlog: DLedgerCommitLog, start: int) -> int:
    ledger = commitlog.ledger
    for span in ledger.entries_from(start, commitlog.committed_index):
        if span.body_size < M.BORNHOST_POS + 20:
            continue
        head = ledger.read_body_at(span.body_pos, M.BORNHOST_POS + 20 + 8)
        if head is None:
            return -1
        sysflag = _INT.unpack_from(head, M.SYSFLAG_POS)[0]
        return int(_LONG.unpack_from(head, M.store_timestamp_pos(sysflag))[0])
    return -1


def _safe_start(commitlog: DLedgerCommitLog, checkpoint: Checkpoint, with_index: bool, rebuild_from: int | None) -> int:
    """Where re-dispatch starts after a crash (see the module docstring, step 4)."""
    files = commitlog.ledger.data.files
    if not files:
        return commitlog.divided_offset
    safe_ts = checkpoint.logics_ts if not with_index else min(checkpoint.logics_ts, checkpoint.index_ts)
    safe_ts = max(safe_ts - RECOVERY_MARGIN_MS, 0)
    start = files[0].start_offset
    for mf in reversed(files):
        ts = _first_store_ts(commitlog, mf.start_offset)
        if 0 < ts <= safe_ts:
            start = mf.start_offset
            break
    if rebuild_from is not None:
        start = min(start, max(rebuild_from - rebuild_from % commitlog.ledger_config.data_file_size, 0))
    return start
