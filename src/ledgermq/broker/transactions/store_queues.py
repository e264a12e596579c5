"""The half and op queues as a check round reads them, and the round's progress offsets.

Progress is kept as RocketMQ keeps it: consumer offsets of the group CID_RMQ_SYS_TRANS for
RMQ_SYS_TRANS_HALF_TOPIC and RMQ_SYS_TRANS_OP_HALF_TOPIC queue 0 in consumerOffset.json,
persisted with every other consumer offset and copied to slaves by their metadata sync,
so a restarted master or a new DLedger leader resumes near where the last one stopped
(from an older offset at worst: the op messages then pass what was resolved, and what
was not is checked again). An offset never stored starts at the queue's minimum.
"""

from __future__ import annotations

from ledgermq.broker.offsets import ConsumerOffsetManager
from ledgermq.broker.transactions.half import HALF_QUEUE, HALF_TOPIC, OP_TOPIC, SYSTEM_GROUP
from ledgermq.broker.transactions.ops import OpRecord
from ledgermq.broker.transactions.scan import HalfRead, OpsRead
from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol import properties as P
from ledgermq.protocol.message import decode_record
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import GetStatus

_END = (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MATCHED_LOGIC_QUEUE)


class StoreQueues:
    """``TransactionQueues`` over the broker's store (reads only; any thread)."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store

    def half_at(self, offset: int) -> HalfRead:
        res = self.store.get_message(HALF_TOPIC, HALF_QUEUE, offset, 1)
        if res.status is GetStatus.FOUND and res.message_count:
            try:
                return HalfRead(decode_record(res.messages[0], check_crc=False))
            except RemoteProtocolError:
                return HalfRead(None, next_offset=offset + 1)  # unreadable: pass it
        if res.status in _END:
            return HalfRead(None, end=True)
        return HalfRead(None, next_offset=res.next_begin_offset)

    def ops_from(self, offset: int, max_count: int) -> OpsRead:
        res = self.store.get_message(OP_TOPIC, HALF_QUEUE, offset, max_count)
        if res.status is GetStatus.FOUND:
            ops = []
            for raw in res.messages:
                try:
                    rec = decode_record(raw, check_crc=False)
                except RemoteProtocolError:
                    continue  # never counted done: read again, harmlessly, next round
                ops.append(OpRecord(rec.queue_offset, rec.properties.get(P.TAGS), bytes(rec.body), rec.born_timestamp))
            return OpsRead(ops, res.next_begin_offset)
        if res.status in _END:
            return OpsRead([], offset)
        return OpsRead([], res.next_begin_offset, moved=True)


def progress(offsets: ConsumerOffsetManager, store: MessageStore, topic: str) -> int:
    """``fetchConsumeOffset``: the stored offset, else the queue's minimum."""
    offset = offsets.query(SYSTEM_GROUP, topic, HALF_QUEUE)
    return offset if offset >= 0 else store.min_offset_in_queue(topic, HALF_QUEUE)


def save_progress(offsets: ConsumerOffsetManager, topic: str, offset: int) -> None:
    offsets.commit(SYSTEM_GROUP, topic, HALF_QUEUE, offset)
