"""The store's read side: pulls from a consume queue, queue offsets and times, lookups.

Both modes' facades hold a ``StoreReads`` over their commit log (the native one, or
DLedger mode's, through the ``LogReads`` protocol) and forward their read methods to it.
Everything here only reads: the consume queues, the commit log and the index, lock-free,
from any thread.
"""

from __future__ import annotations

import os

from ledgermq.config import StoreConfig
from ledgermq.errors import CorruptRangeError, LedgerError, RemoteProtocolError
from ledgermq.protocol import message as M
from ledgermq.protocol import properties as P
from ledgermq.protocol.msgid import decode_offset_msg_id
from ledgermq.store.consumequeue import UNIT, UNIT_SIZE
from ledgermq.store.core import StoreCore
from ledgermq.store.log_reads import LogReads
from ledgermq.store.message_filter import MessageFilter, PropertyFilter, TagFilter
from ledgermq.store.record_check import stored_record_problem, stored_run_problem
from ledgermq.store.results import GetResult, GetStatus, QueryResult

_PRE_BLANK_SIZE = 0x7FFFFFFF


def _filters_records(message_filter: MessageFilter) -> bool:
    """Whether the filter looks at records, not only at consume-queue tag codes."""
    return getattr(type(message_filter), "matches_record", None) is not TagFilter.matches_record


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


class StoreReads:
    """The read side of a message store: pulls, queue offsets and times, lookups."""

    def __init__(self, core: StoreCore, commitlog: LogReads) -> None:
        self.core = core
        self.commitlog = commitlog
        self.queues = core.queues
        self.index = core.index
        self.damage = core.damage  # ranges never served (store/damage.py)
        # Bytes from the commit log's head that count as "in memory" (accessMessageInMemoryMaxRatio).
        self.memory_budget = _total_memory() * core.config.access_message_in_memory_max_ratio // 100

    @property
    def config(self) -> StoreConfig:
        """The store's config as it is now (a role change replaces it)."""
        return self.core.config

    def get_message(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        message_filter: MessageFilter | None = None,
    ) -> GetResult:
        """Messages of one queue from ``offset`` (RocketMQ ``getMessage`` semantics)."""
        cq = self.queues.get(topic, queue_id)
        if cq is None or cq.max_offset == 0:
            status = GetStatus.NO_MATCHED_LOGIC_QUEUE if cq is None else GetStatus.NO_MESSAGE_IN_QUEUE
            return GetResult(status, self._correct(offset, 0), 0, 0)
        low, high = cq.min_offset, cq.max_offset
        if offset < low:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, self._correct(offset, low), low, high)
        if offset == high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, low, high)
        if offset > high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, self._correct(offset, high), low, high)
        max_filter_bytes = max(16000, max_msgs * UNIT_SIZE)
        units = cq.read_units(offset, max_filter_bytes // UNIT_SIZE)
        if not units:
            nxt = (offset * UNIT_SIZE // cq.segment_size + 1) * cq.segment_size // UNIT_SIZE
            return GetResult(GetStatus.OFFSET_FOUND_NULL, self._correct(offset, nxt), low, high)
        if message_filter is None or not _filters_records(message_filter):
            found = self._get_runs(units, offset, max_msgs, message_filter, low, high)
            if found is not None:
                return found
        return self._get_each(units, offset, max_msgs, message_filter, low, high)

    def _get_runs(
        self, units: bytes, offset: int, max_msgs: int, message_filter: MessageFilter | None, low: int, high: int
    ) -> GetResult | None:
        """``get_message`` reading each run of adjacent records with one commit-log read.

        The batch is chosen from the consume-queue units alone (the filter by tag code and
        the caps, exactly as ``_get_each`` does), then read run by run. None when a read
        fails (a segment going away, or a run crossing a segment end): the caller then
        falls back to ``_get_each``, whose statuses and counts such failures affect."""
        cfg = self.config
        max_phy = self.commitlog.max_offset
        disk_below = max_phy - self.memory_budget  # records below it count as on disk
        accept = message_filter.matches_tags_code if message_filter is not None else None
        runs: list[list[int]] = []  # [start, end) of adjacent records
        run_end = -1
        count = total = scanned = last_phy = 0
        for phy, size, tags in UNIT.iter_unpack(units):
            if size == _PRE_BLANK_SIZE:
                scanned += 1
                continue
            if count and total:  # _batch_full, inlined
                if count >= max_msgs:
                    break
                if phy < disk_below:
                    if total + size > cfg.max_transfer_bytes_on_disk or count >= cfg.max_transfer_count_on_disk:
                        break
                elif total + size > cfg.max_transfer_bytes_in_memory or count >= cfg.max_transfer_count_in_memory:
                    break
            scanned += 1
            if accept is not None and not accept(tags):
                continue
            if phy == run_end:
                runs[-1][1] = run_end = phy + size
            else:
                run_end = phy + size
                runs.append([phy, run_end])
            count += 1
            total += size
            last_phy = phy
        chunks: list[bytes] = []
        damaged = self.damage.any
        for start, end in runs:
            if damaged and self.damage.overlapping(start, end) is not None:
                return None  # record by record: the records before the damage, or the refusal
            data = self.commitlog.read(start, end - start)
            if data is None or stored_run_problem(data, start) is not None:
                return None
            chunks.append(data)
        status = GetStatus.FOUND if count else GetStatus.NO_MATCHED_MESSAGE
        suggest = count > 0 and max_phy - last_phy > self.memory_budget
        return GetResult(status, offset + scanned, low, high, chunks, count, total, suggest)

    def _get_each(
        self, units: bytes, offset: int, max_msgs: int, message_filter: MessageFilter | None, low: int, high: int
    ) -> GetResult:
        """``get_message`` reading record by record (filters that look at records, failed reads)."""
        status = GetStatus.NO_MATCHED_MESSAGE
        messages: list[bytes] = []
        total = 0
        max_phy = self.commitlog.max_offset
        last_phy = 0
        by_properties = message_filter if isinstance(message_filter, PropertyFilter) else None
        verdict = by_properties.verdict if by_properties is not None else None
        i = 0
        while i < len(units):
            phy, size, tags = UNIT.unpack_from(units, i)
            if size == _PRE_BLANK_SIZE:
                i += UNIT_SIZE
                continue
            in_disk = max_phy - phy > self.memory_budget
            if self._batch_full(size, max_msgs, total, len(messages), in_disk):
                break
            i += UNIT_SIZE
            if message_filter is not None and not message_filter.matches_tags_code(tags):
                continue
            refused = self._damaged_record(phy, size)
            if refused is not None:
                return self._refuse_at(refused, messages, total, offset + i // UNIT_SIZE - 1, low, high)
            if by_properties is not None:
                known = verdict(offset + i // UNIT_SIZE - 1, phy) if verdict is not None else None
                if known is False:
                    continue
                if known is None:
                    try:
                        props = self.commitlog.properties_at(phy, size)
                    except RemoteProtocolError as exc:  # its fields do not add up: corrupt
                        self.damage.report(phy, phy + size, f"read: {exc}")
                        refused = CorruptRangeError(phy, phy + size, str(exc))
                        return self._refuse_at(refused, messages, total, offset + i // UNIT_SIZE - 1, low, high)
                    if props is not None and not by_properties.matches_properties(props):
                        continue
            data = self.commitlog.read(phy, size)
            if data is None:
                why = self.commitlog.unreadable_reason(phy, size)
                if why is not None:  # coming back: never moved past (that would lose it)
                    at = offset + i // UNIT_SIZE - 1
                    return self._stop_at(GetStatus.STORE_UNAVAILABLE, why, messages, total, at, low, high)
                if not messages:
                    status = GetStatus.MESSAGE_WAS_REMOVING  # retention deleted it
                continue
            problem = stored_record_problem(data, 0, size, phy)
            if problem is not None:
                self.damage.report(phy, phy + size, f"read: {problem}")
                refused = CorruptRangeError(phy, phy + size, problem)
                return self._refuse_at(refused, messages, total, offset + i // UNIT_SIZE - 1, low, high)
            if by_properties is None and message_filter is not None and not message_filter.matches_record(data):
                continue
            messages.append(data)
            total += size
            last_phy = phy
            status = GetStatus.FOUND
        next_offset = offset + i // UNIT_SIZE
        suggest = bool(messages) and max_phy - last_phy > self.memory_budget
        return GetResult(status, next_offset, low, high, messages, len(messages), total, suggest)

    def _damaged_record(self, phy: int, size: int) -> CorruptRangeError | None:
        hit = self.damage.overlapping(phy, phy + size) if self.damage.any else None
        return CorruptRangeError(*hit) if hit is not None else None

    def _refuse_at(
        self,
        error: CorruptRangeError,
        messages: list[bytes],
        total: int,
        at: int,
        low: int,
        high: int,
    ) -> GetResult:
        """A pull reached a corrupt record at queue offset ``at``: see ``_stop_at``."""
        return self._stop_at(GetStatus.CORRUPT_RANGE, str(error), messages, total, at, low, high)

    def _stop_at(
        self, status: GetStatus, why: str, messages: list[bytes], total: int, at: int, low: int, high: int
    ) -> GetResult:
        """A pull reached a record it may not or cannot serve now at queue offset ``at``: the
        messages before it are answered (the next pull starts at it); with none before it,
        the pull is refused with ``status`` and ``why`` (never an empty answer, never a skip)."""
        if messages:
            return GetResult(GetStatus.FOUND, at, low, high, messages, len(messages), total, False)
        return GetResult(status, at, low, high, remark=why)

    def _batch_full(self, size: int, max_msgs: int, total: int, count: int, in_disk: bool) -> bool:
        if total == 0 or count == 0:
            return False
        if count >= max_msgs:
            return True
        cfg = self.config
        if in_disk:
            return total + size > cfg.max_transfer_bytes_on_disk or count >= cfg.max_transfer_count_on_disk
        return total + size > cfg.max_transfer_bytes_in_memory or count >= cfg.max_transfer_count_in_memory

    def _correct(self, old: int, new: int) -> int:
        """RocketMQ's nextOffsetCorrection: a slave keeps the client's offset."""
        return old if self.config.is_slave else new

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get(topic, queue_id)
        return cq.max_offset if cq else 0

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get(topic, queue_id)
        return cq.min_offset if cq else 0

    def commitlog_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.queues.get(topic, queue_id)
        unit = cq.unit(offset) if cq else None
        return unit[0] if unit else 0

    def offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return 0
        return cq.offset_by_time(timestamp, self.commitlog.store_timestamp_at)

    def earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of the oldest message still in the queue, or -1."""
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return -1
        unit = cq.unit(cq.min_offset)
        if unit is None:
            return -1
        return self.commitlog.store_timestamp_at(unit[0], unit[1])

    def message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.queues.get(topic, queue_id)
        unit = cq.unit(offset) if cq else None
        return self.commitlog.store_timestamp_at(unit[0], unit[1]) if unit else -1

    def look_message_by_offset(self, phy_offset: int) -> bytes | None:
        """The stored record at a commit-log offset (VIEW_MESSAGE_BY_ID), or None if there
        is none; CorruptRangeError if it lies in a damaged range or fails its checks (it is
        then registered as damaged)."""
        record = self.commitlog.record_at(phy_offset)
        if record is None:
            if self.damage.any:  # the size in a damaged header cannot be trusted
                self.damage.check(phy_offset, phy_offset + 1)
            return None
        size = len(record)
        self.damage.check(phy_offset, phy_offset + size)
        problem = stored_record_problem(record, 0, size, phy_offset)
        if problem is not None:
            self.damage.report(phy_offset, phy_offset + size, f"read: {problem}")
            raise CorruptRangeError(phy_offset, phy_offset + size, problem)
        return record

    def look_message_by_id(self, msg_id: str) -> bytes | None:
        """The record an offset message id points at (any store host)."""
        _host, offset = decode_offset_msg_id(msg_id)
        return self.look_message_by_offset(offset)

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> QueryResult:
        """Messages whose KEYS or UNIQ_KEY equal ``key`` within [begin_ts, end_ts];
        CorruptRangeError when a record the index points at is corrupt (whether it holds
        the key cannot be known, so the answer would be incomplete)."""
        if self.index is None:
            return QueryResult([], 0, 0)
        found: list[bytes] = []
        for phy in self.index.query(topic, key, max_num, begin_ts, end_ts):
            rec = self.look_message_by_offset(phy)  # CorruptRangeError: refused, not skipped
            if rec is not None and rec not in found and _has_key(rec, topic, key):
                found.append(rec)
        ts, phy = self.index.last_update
        return QueryResult(found, ts, phy)


def _has_key(record: bytes, topic: str, key: str) -> bool:
    """Does the record really carry ``key`` (hash collisions, entries left by a truncation)?"""
    try:
        rec = M.decode_record(record, check_crc=False)
    except LedgerError:
        return False
    return rec.topic == topic and (rec.properties.get(P.UNIQ_KEY) == key or key in rec.keys)
