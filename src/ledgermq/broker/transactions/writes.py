"""The store writes and lookups END_TRANSACTION and the check service share.

Everything is written through ``Broker.put``: the store natively, the Raft group in
DLedger mode, so a transaction's messages replicate like any other.
"""

from __future__ import annotations

import logging

from ledgermq.broker.context import Broker
from ledgermq.broker.transactions.half import HALF_TOPIC
from ledgermq.broker.transactions.ops import op_message
from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol.message import MessageRecord, decode_record
from ledgermq.store.message_input import MessageInput
from ledgermq.store.results import PutResult

log = logging.getLogger("ledgermq.broker.transactions")


def find_half(broker: Broker, commit_log_offset: int) -> MessageRecord | None:
    """The half message stored at ``commit_log_offset`` (``lookMessageByOffset``); None when
    nothing readable is there or it is not in the half topic. RocketMQ 4.9 does not check
    the topic; we do, so an END_TRANSACTION can never rewrite an ordinary message."""
    if commit_log_offset < 0:
        return None
    raw = broker.store.look_message_by_offset(commit_log_offset)
    if raw is None:
        return None
    try:
        rec = decode_record(raw, check_crc=False)
    except RemoteProtocolError:
        return None
    return rec if rec.topic == HALF_TOPIC else None


async def put(broker: Broker, msg: MessageInput) -> PutResult:
    """``Broker.put``, counted (its write turn dispatches it and streams it to slaves)."""
    result = await broker.put(msg)
    if result.append is not None:
        broker.stats.count_put(result.append.topic, result.append.msg_num, result.append.wrote_bytes)
    return result


async def write_op(broker: Broker, half_queue_offset: int) -> bool:
    """Mark the half message at ``half_queue_offset`` resolved (``deletePrepareMessage``)."""
    now = broker.clock.wall_ms()
    msg = op_message(half_queue_offset, broker.store_host, now, broker.unique_ids.next_id(now))
    result = await put(broker, msg)
    if not result.ok:
        log.error(
            "transaction op message for half offset %d not written: %s %s",
            half_queue_offset,
            result.status.value,
            result.remark,
        )
    return result.ok
