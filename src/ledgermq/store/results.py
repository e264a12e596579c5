"""Outcomes of store calls, named as RocketMQ names them so the broker maps them 1:1."""

from __future__ import annotations

import enum
import struct
from concurrent.futures import Future
from dataclasses import dataclass, field

_TOTALSIZE = struct.Struct(">i")  # a stored record's first field


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    """DLedger: a quorum did not acknowledge (the leader lost leadership first); outcome unknown."""
    WHEEL_TIMER_NOT_ENABLE = "WHEEL_TIMER_NOT_ENABLE"  # a timer message with timerWheelEnable=false
    WHEEL_TIMER_MSG_ILLEGAL = "WHEEL_TIMER_MSG_ILLEGAL"  # a malformed or too distant timer


@dataclass(slots=True)
class AppendResult:
    """Where a put (single or batch) landed in the commit log."""

    wrote_offset: int  # physical offset of the first record
    wrote_bytes: int
    msg_ids: list[str]  # offset message ids, one per record
    store_timestamp: int
    queue_offset: int  # consume-queue offset of the first record (0 for half messages)
    msg_num: int
    topic: str = ""
    queue_id: int = 0

    @property
    def next_offset(self) -> int:
        return self.wrote_offset + self.wrote_bytes

    @property
    def msg_id(self) -> str:
        return ",".join(self.msg_ids)


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    append: AppendResult | None = None
    remark: str = ""
    # Set under SYNC_FLUSH when the message asked to wait: resolves True once durable.
    flush_future: Future[bool] | None = field(default=None, repr=False)
    # Instead of ``flush_future`` when the store reports its fsyncs to a listener
    # (MessageStore.report_flushes): the offset an fsync must reach before the answer.
    durable_at: int | None = None

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    CORRUPT_RANGE = "CORRUPT_RANGE"
    """The next message lies in a commit-log range known corrupt (``remark`` says which):
    refused, not skipped, until a replica repairs it."""
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    """The next message cannot be read *for now* (``remark`` says why: a DLedger member
    re-recovering its log, or refilling entries a repair cut): refused, not skipped, so
    the reader asks again at the same offset. Unlike MESSAGE_WAS_REMOVING, whose readers
    move past the units (retention deleted their messages), nothing here is gone."""


@dataclass(slots=True)
class GetResult:
    """A pull's outcome. ``chunks`` hold the found records as stored, back to back: each
    chunk is one read of the commit log covering a run of adjacent records (several
    messages when the consume queue points to consecutive records of one segment)."""

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    chunks: list[bytes] = field(default_factory=list)
    message_count: int = 0
    buffer_total_size: int = 0
    suggest_pulling_from_slave: bool = False
    remark: str = ""  # CORRUPT_RANGE: the CorruptRangeError text; STORE_UNAVAILABLE: why

    @property
    def messages(self) -> list[bytes]:
        """The stored records one by one (split out of ``chunks``)."""
        if self.message_count == len(self.chunks):
            return list(self.chunks)
        out: list[bytes] = []
        for chunk in self.chunks:
            pos, end = 0, len(chunk)
            while pos < end:
                size = _TOTALSIZE.unpack_from(chunk, pos)[0]
                out.append(chunk[pos : pos + size])
                pos += size
        return out

    def body(self) -> bytes:
        """The records back to back: a PULL_MESSAGE response body."""
        return b"".join(self.chunks)


@dataclass(frozen=True, slots=True)
class QueryResult:
    """Messages found by key, newest index first, plus the index's progress."""

    messages: list[bytes]
    index_last_update_timestamp: int
    index_last_update_phy_offset: int
