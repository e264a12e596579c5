"""The answer to a stored send, now or once the waits its mode asks for are over.

ASYNC_FLUSH on an ASYNC_MASTER needs no wait: the answer is built at once, within the
call that read the request. SYNC_FLUSH waits for an fsync that covers the message and
SYNC_MASTER for a slave's acknowledgement of the message's own bytes. Those waits are
callbacks on the broker's flush waiters (broker/offset_waiters.py) and the HA service's
acknowledgement waiters, ending in a ``Deferred`` the server answers from within the loop
turn that released it: a waiting send costs no task and no extra loop turns.

The broker registers the store's flush listener at start (BrokerApp), so a SYNC_FLUSH put
reaches here with ``durable_at``; a put with a flush future of its own would mean the
listener is missing, and is refused rather than answered without its fsync.
"""

from __future__ import annotations

import time

from ledgermq.broker.context import Broker
from ledgermq.config import BrokerRole
from ledgermq.net.server import Deferred
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_send import SendMessageResponseHeader
from ledgermq.store.results import PutResult, PutStatus

STATUS_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.CREATE_MAPPED_FILE_FAILED: ResponseCode.SYSTEM_ERROR,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
    # RocketMQ's DLedgerCommitLog: not FLUSH_SLAVE_TIMEOUT, which clients take as stored.
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: ResponseCode.SYSTEM_ERROR,
    # RocketMQ 5's SendMessageProcessor (timer messages, docs/timers.md)
    PutStatus.WHEEL_TIMER_MSG_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.WHEEL_TIMER_NOT_ENABLE: ResponseCode.SYSTEM_ERROR,
}


def answer(
    broker: Broker, cmd: RemotingCommand, result: PutResult, queue_id: int, wait: bool
) -> RemotingCommand | Deferred:
    """The answer to ``result``, or a ``Deferred`` of it when the put must first be flushed
    (SYNC_FLUSH) or reach a slave (SYNC_MASTER); ``wait`` is the message's WAIT property."""
    if result.flush_future is not None or (result.durable_at is not None and broker.flush_waiters is None):
        raise RuntimeError("a SYNC_FLUSH put without the broker's flush listener (BrokerApp registers it)")
    if result.durable_at is None and not _waits_for_slave(broker, result, wait):
        return stored_answer(broker, cmd, result, queue_id)
    return _Waits(broker, cmd, result, queue_id, wait).start()


def stored_answer(broker: Broker, cmd: RemotingCommand, result: PutResult, queue_id: int) -> RemotingCommand:
    """The answer to a put whose waits (if any) are over."""
    code = STATUS_CODES[result.status]
    append = result.append
    if append is None:
        remark = result.remark
        if result.status is PutStatus.SERVICE_NOT_AVAILABLE:
            remark = f"service not available now. It may be caused by one of the following reasons: {remark}"
        return cmd.response(code, remark or result.status.value)
    # stored: RocketMQ counts SLAVE/FLUSH timeouts too, the message is kept
    broker.stats.count_put(append.topic, append.msg_num, append.wrote_bytes)
    header = SendMessageResponseHeader(
        append.msg_id,
        queue_id,
        append.queue_offset,
        broker.config.region_id,
        broker.config.trace_on,
    )
    stored_remark = None if code == ResponseCode.SUCCESS else (result.remark or result.status.value)
    return cmd.response(code, stored_remark, header.ext())


def _waits_for_slave(broker: Broker, result: PutResult, wait: bool) -> bool:
    return result.ok and wait and broker.dledger is None and broker.store_config.broker_role is BrokerRole.SYNC_MASTER


class _Waits:
    """One send's waits as a chain of callbacks: the fsync first, then the slave.

    SYNC_MASTER: no slave connected, or the best one haSlaveFallbehindMax or more behind,
    answers SLAVE_NOT_AVAILABLE at once; no acknowledgement within syncFlushTimeout
    answers FLUSH_SLAVE_TIMEOUT. SYNC_FLUSH: no fsync within syncFlushTimeout answers
    FLUSH_DISK_TIMEOUT, a failed fsync too, saying why. The message is stored either way
    (RocketMQ's semantics)."""

    __slots__ = ("broker", "cmd", "deferred", "queue_id", "result", "started", "wait")

    def __init__(self, broker: Broker, cmd: RemotingCommand, result: PutResult, queue_id: int, wait: bool) -> None:
        self.broker = broker
        self.cmd = cmd
        self.result = result
        self.queue_id = queue_id
        self.wait = wait
        self.deferred = Deferred()
        self.started = 0.0

    def start(self) -> Deferred:
        waiters = self.broker.flush_waiters
        durable_at = self.result.durable_at
        if durable_at is not None and waiters is not None:  # ``answer`` refused a put with no waiters
            waiters.add(durable_at, self._flushed)
        else:
            self._to_slave()
        return self.deferred

    def _flushed(self, durable: bool, reason: str) -> None:
        result = self.result
        if not durable:
            result.status = PutStatus.FLUSH_DISK_TIMEOUT
            if reason:
                result.remark = f"{reason}; the broker refuses writes until it is restarted"
            self._finish()
            return
        self._to_slave()

    def _to_slave(self) -> None:
        broker = self.broker
        result = self.result
        if not _waits_for_slave(broker, result, self.wait):
            self._finish()
            return
        assert result.append is not None
        end = result.append.next_offset
        ha = broker.ha
        if ha is None or not ha.slave_ok(end):
            result.status = PutStatus.SLAVE_NOT_AVAILABLE
            self._finish()
            return
        self.started = time.perf_counter()
        ha.on_ack(end, broker.store_config.sync_flush_timeout_ms / 1000, self._acked)

    def _acked(self, acked: bool) -> None:
        self.broker.stats.replication.observe(time.perf_counter() - self.started)  # timeouts included
        if not acked:
            self.result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
        self._finish()

    def _finish(self) -> None:
        self.deferred.resolve(stored_answer(self.broker, self.cmd, self.result, self.queue_id))
