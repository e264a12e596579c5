"""END_TRANSACTION (37): a producer's verdict on a half message (RocketMQ 4.9
``EndTransactionProcessor``).

Producers send it oneway, after their local transaction (``fromTransactionCheck=false``)
or in answer to CHECK_TRANSACTION_STATE (``true``). COMMIT (8) writes the real message
from the half one and then an op message; ROLLBACK (12) writes only the op message;
NOT_TYPE (0, "unknown") is logged and ignored, the half message staying for the check
service. The half message is found by ``commitLogOffset`` and must match the request:
its PGROUP is ``producerGroup``, its queue offset ``tranStateTableOffset``. A slave (a
DLedger follower included) answers SLAVE_NOT_AVAILABLE. The answers below go to callers
that did not send it oneway; a oneway caller gets none (the server sends nothing).
"""

from __future__ import annotations

import logging

from ledgermq.broker.context import Broker
from ledgermq.broker.transactions.half import to_committed
from ledgermq.broker.transactions.writes import find_half, put, write_op
from ledgermq.net.server import RequestContext
from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_send import EndTransactionRequestHeader
from ledgermq.protocol.message import MessageRecord
from ledgermq.store.results import PutStatus

log = logging.getLogger("ledgermq.broker.transactions")

_KINDS = {
    SF.TRANSACTION_NOT_TYPE: "unknown",
    SF.TRANSACTION_COMMIT_TYPE: "commit",
    SF.TRANSACTION_ROLLBACK_TYPE: "rollback",
}
_STORED = (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT, PutStatus.SLAVE_NOT_AVAILABLE)
_FAILED = {
    PutStatus.CREATE_MAPPED_FILE_FAILED: (ResponseCode.SYSTEM_ERROR, "Create mapped file failed."),
    PutStatus.MESSAGE_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL, "The message is illegal"),
    PutStatus.PROPERTIES_SIZE_EXCEEDED: (ResponseCode.MESSAGE_ILLEGAL, "The message is illegal"),
    PutStatus.SERVICE_NOT_AVAILABLE: (ResponseCode.SERVICE_NOT_AVAILABLE, "Service not available now."),
    PutStatus.WHEEL_TIMER_MSG_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL, "The message is illegal"),
}


def acting_master(broker: Broker) -> bool:
    """A master-slave master, or the DLedger group's current leader."""
    if broker.dledger is not None:
        return broker.dledger.is_master
    return not broker.store_config.is_slave


def _mismatch(half: MessageRecord, group: str, table_offset: int, commit_log_offset: int) -> str | None:
    """``checkPrepareMessage``: why the request does not name this half message."""
    if half.properties.get(P.PGROUP) != group:
        return "The producer group wrong"
    if half.queue_offset != table_offset:
        return "The transaction state table offset wrong"
    if half.physical_offset != commit_log_offset:
        return "The commit log offset wrong"
    return None


async def end_transaction(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
    hdr = EndTransactionRequestHeader.decode(cmd)
    group, table_offset, commit_log_offset = hdr.producer_group, hdr.tran_state_table_offset, hdr.commit_log_offset
    kind, from_check, msg_id = hdr.commit_or_rollback, hdr.from_transaction_check, hdr.msg_id
    if kind not in _KINDS:
        return cmd.response(ResponseCode.SYSTEM_ERROR, "commitOrRollback field wrong")
    if not acting_master(broker):
        log.warning("END_TRANSACTION from %s refused: this broker is a slave", ctx.peer)
        return cmd.response(ResponseCode.SLAVE_NOT_AVAILABLE, "this broker is a slave: end transaction is forbidden")
    source = "answering a check" if from_check else "after sending"
    if kind == SF.TRANSACTION_NOT_TYPE:
        log.warning("producer %s (group %s) %s: transaction %s still unknown", ctx.peer, group, source, msg_id)
        return None
    if from_check or kind == SF.TRANSACTION_ROLLBACK_TYPE:
        log.warning("producer %s (group %s) %s: %s %s", ctx.peer, group, source, _KINDS[kind], msg_id)
    half = find_half(broker, commit_log_offset)
    if half is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
    problem = _mismatch(half, group, table_offset, commit_log_offset)
    if problem is not None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, problem)
    if kind == SF.TRANSACTION_COMMIT_TYPE:
        result = await put(broker, to_committed(half, commit_log_offset))
        if result.status not in _STORED:
            code, remark = _FAILED.get(result.status, (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"))
            return cmd.response(code, f"{remark} {result.remark}".strip())
    await write_op(broker, half.queue_offset)
    return cmd.response(ResponseCode.SUCCESS)


PROCESSORS = {RequestCode.END_TRANSACTION: end_transaction}
