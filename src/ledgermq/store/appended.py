"""Dispatch facts of records this process appended itself.

A put knows everything the consume queue and the index need about its record (topic,
queue, tags, keys, uniq key, sysflag, and under the commit-log lock the offsets and the
store time), so the reput service need not parse the bytes back out of the commit log
for them: re-parsing cost about a quarter of the store's CPU per put. The facts are
built next to the record (``facts_for``), completed by ``CommitLog.append`` and queued
here; the reput takes them by physical offset (``take``).

They must equal what ``dispatch.check_record`` would read from the stored bytes, field
for field (tests/store/test_fast_dispatch.py holds the two paths against each other).
Anything whose facts cannot be known for sure at put time goes without, and is parsed
as before: records that arrive as bytes (a slave's replication, recovery, DLedger), and
SCHEDULE_TOPIC_XXXX records, whose tag code is their due time (store time plus the
level's delay, which only the reput's delay table knows). rmq_sys_wheel_timer records
carry their slot time (TIMER_OUT_MS) as tag code, so the timer store files them from the
consume queue alone (``dispatch.timer_tags_code``).

The queue is bounded: when dispatch falls behind (the reput thread catching up a
backlog, a stuck dispatch) new facts are dropped and their records are parsed later;
nothing depends on a record having facts.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Mapping

from ledgermq.protocol import properties as P
from ledgermq.protocol.javahash import tag_hash
from ledgermq.protocol.message import SYSFLAG_POS
from ledgermq.store.dispatch import SCHEDULE_TOPIC, TIMER_TOPIC, DispatchRequest, timer_tags_code

MAX_QUEUED = 16384  # records; past this, dispatch is behind and parsing costs nothing extra
_SYSFLAG = struct.Struct(">i")


def facts_for(
    topic: str,
    queue_id: int,
    record: bytearray,
    props: Mapping[str, str],
    props_text: str,
    prepared_transaction_offset: int,
) -> DispatchRequest | None:
    """The dispatch request of an encoded ``record`` whose properties ``props`` were
    encoded as ``props_text``; offsets and store time are filled in at append. None for
    records the reput must parse (see the module docstring)."""
    if topic == SCHEDULE_TOPIC:
        return None
    n = len(props)
    if "" not in props and props_text.count("\x01") == n and props_text.count("\x02") == (n - 1 if n else 0):
        # No key or value holds a separator, so each key is one pair of the text and the
        # dict answers what ``get_property`` would (an empty value reads as absent).
        tags = props.get(P.TAGS) or None
        keys = props.get(P.KEYS) or None
        uniq = props.get(P.UNIQ_KEY) or None
    else:  # separators inside keys or values: read the text exactly as the parse does
        tags = P.get_property(props_text, P.TAGS)
        keys = P.get_property(props_text, P.KEYS)
        uniq = P.get_property(props_text, P.UNIQ_KEY)
    tags_code = tag_hash(tags) if tags else 0
    if topic == TIMER_TOPIC:
        tags_code = timer_tags_code(props.get(P.TIMER_OUT_MS))
    return DispatchRequest(  # positional, in field order: this runs for every put
        topic,
        queue_id,
        -1,  # commit_log_offset, set at append
        len(record),  # size
        tags_code,
        0,  # store_timestamp, set at append
        0,  # queue_offset, set at append
        _SYSFLAG.unpack_from(record, SYSFLAG_POS)[0],  # sysflag as stored (host bits set)
        keys,
        uniq,
        prepared_transaction_offset,
        props_text,  # properties
    )


class AppendedRecords:
    """Facts of appended records in commit-log order: appended under the commit log's
    put lock, taken by the reput under its dispatch lock (one taker)."""

    __slots__ = ("_queue", "queued")

    def __init__(self) -> None:
        self._queue: deque[DispatchRequest] = deque()
        self.queued = self._queue
        """The queue itself, read only: its truth is the reput's per-record "any facts?"
        look, which ``len(self)`` would make two Python calls."""

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, facts: DispatchRequest) -> None:
        if len(self._queue) < MAX_QUEUED:
            self._queue.append(facts)

    def clear(self) -> None:
        """The log was cut or written by others: offsets may now name other records."""
        self._queue.clear()

    def take(self, offset: int, available: int) -> DispatchRequest | None:
        """The facts of the record at ``offset`` if they are known and the record's
        ``available`` bytes cover it; facts of records before ``offset`` are dropped (they
        were dispatched some other way, or their bytes were cut)."""
        queue = self._queue
        while queue:
            head = queue[0]
            if head.commit_log_offset >= offset:
                if head.commit_log_offset == offset and head.size <= available:
                    return queue.popleft()
                return None
            queue.popleft()
        return None
