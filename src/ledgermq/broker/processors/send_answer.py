"""The answer to a stored send, now or once the waits its mode asks for are over.

ASYNC_FLUSH on an ASYNC_MASTER needs no wait: the answer is built at once, within the
call that read the request. Otherwise the send registers what it waits for in the
broker's write turn (broker/write_turn): an fsync covering the message (SYNC_FLUSH), the
slaves the mode asks for holding its bytes (SYNC_MASTER, controller mode's
allAckInSyncStateSet), a Raft quorum committing it (DLedger); the turn's end-of-turn step
releases it and the answer leaves through a ``Deferred`` the server answers from within
that step. A waiting send costs no task and no extra loop turns.

The broker registers the store's flush listener at start (BrokerApp), so a SYNC_FLUSH put
reaches here with ``durable_at``; a put with a flush future of its own would mean the
listener is missing, and is refused rather than answered without its fsync.
"""

from __future__ import annotations

from ledgermq.broker.context import Broker
from ledgermq.broker.dledger import Proposal
from ledgermq.broker.write_turn import Need, Wait
from ledgermq.config import BrokerRole
from ledgermq.net.server import Deferred
from ledgermq.protocol.codes import RESPONSE_FLAG, ResponseCode
from ledgermq.protocol.command import RemotingCommand
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


# Read per send: an enum member through its class costs a lookup each time (3.11).
_CODES = {status: int(code) for status, code in STATUS_CODES.items()}
_SUCCESS = int(ResponseCode.SUCCESS)
_PUT_OK = PutStatus.PUT_OK
_SERVICE_NOT_AVAILABLE = PutStatus.SERVICE_NOT_AVAILABLE
_SYNC_MASTER = BrokerRole.SYNC_MASTER
_NONE, _DURABLE, _REPLICATED = Need.NONE, Need.DURABLE, Need.REPLICATED


def answer(
    broker: Broker, cmd: RemotingCommand, stored: PutResult | Proposal, queue_id: int, wait: bool
) -> RemotingCommand | Deferred:
    """The answer to ``stored``, or a ``Deferred`` of it when it must first be flushed
    (SYNC_FLUSH), reach the slaves (SYNC_MASTER) or be committed (DLedger); ``wait`` is the
    message's WAIT property."""
    if isinstance(stored, Proposal):
        return _SendWait(broker, cmd, PutResult(PutStatus.UNKNOWN_ERROR), queue_id, Need.COMMITTED, 0, stored).start()
    result = stored
    if result.flush_future is not None or (result.durable_at is not None and broker.turn is None):
        raise RuntimeError("a SYNC_FLUSH put without the broker's flush listener (BrokerApp registers it)")
    end = result.durable_at  # where the message ends, once something is waited for
    needs = _NONE if end is None else _DURABLE
    if _waits_for_slave(broker, result, wait):
        assert result.append is not None
        next_offset = result.append.next_offset  # (the same as ``durable_at`` when that is set)
        ha = broker.ha
        if ha is not None and ha.slave_ok(next_offset):
            needs |= _REPLICATED
            end = next_offset
        elif needs == _NONE:
            result.status = PutStatus.SLAVE_NOT_AVAILABLE
            return stored_answer(broker, cmd, result, queue_id)
        else:  # told once the fsync is over (the answer never comes before it)
            result.status = PutStatus.SLAVE_NOT_AVAILABLE
    if end is None:  # nothing to wait for
        return stored_answer(broker, cmd, result, queue_id)
    return _SendWait(broker, cmd, result, queue_id, needs, end, None).start()


def stored_answer(broker: Broker, cmd: RemotingCommand, result: PutResult, queue_id: int) -> RemotingCommand:
    """The answer to a put whose waits (if any) are over.

    The extFields of SendMessageResponseHeader (protocol/headers_send.py) are written
    straight into the answer, in that header's field order, as the strings its encoder
    makes: a header object, its encoder and ``RemotingCommand.response``'s stringify per
    send cost more than the answer's JSON itself (tests/broker pin the two to each other)."""
    status = result.status
    code = _CODES[status]
    append = result.append
    if append is None:
        remark = result.remark
        if status is _SERVICE_NOT_AVAILABLE:
            remark = f"service not available now. It may be caused by one of the following reasons: {remark}"
        return cmd.response(code, remark or status.value)
    # stored: RocketMQ counts SLAVE/FLUSH timeouts too, the message is kept
    broker.stats.count_put(append.topic, append.msg_num, append.wrote_bytes)
    config = broker.config
    ids = append.msg_ids
    ext = {
        "msgId": ids[0] if len(ids) == 1 else ",".join(ids),
        "queueId": str(queue_id),
        "queueOffset": str(append.queue_offset),
        "MSG_REGION": config.region_id,
        "TRACE_ON": "true" if config.trace_on else "false",
    }
    stored_remark = None if code == _SUCCESS else (result.remark or status.value)
    return RemotingCommand(
        code, cmd.opaque, RESPONSE_FLAG, remark=stored_remark, ext_fields=ext, serialize_type=cmd.serialize_type
    )


def _waits_for_slave(broker: Broker, result: PutResult, wait: bool) -> bool:
    return (
        wait and result.status is _PUT_OK and broker.dledger is None and broker.store_config.broker_role is _SYNC_MASTER
    )


class _SendWait(Wait):
    """One send's entry in the write turn's waits table (it is the table's ``Wait``: one
    object per held send, not three) and the answer it becomes.

    SYNC_MASTER: no slave connected, or the best one haSlaveFallbehindMax or more behind,
    answers SLAVE_NOT_AVAILABLE at once (after the fsync under SYNC_FLUSH); no
    acknowledgement within syncFlushTimeout answers FLUSH_SLAVE_TIMEOUT. SYNC_FLUSH: no
    fsync within syncFlushTimeout answers FLUSH_DISK_TIMEOUT, a failed fsync too, saying
    why. The message is stored either way (RocketMQ's semantics). DLedger: the proposal's
    outcome (its PutResult) once committed or failed."""

    __slots__ = ("broker", "cmd", "deferred", "proposal", "queue_id", "result")
    # The proposal's, when ``proposal`` is set (DLedger); ``result`` stands in until then.

    def __init__(
        self,
        broker: Broker,
        cmd: RemotingCommand,
        result: PutResult,
        queue_id: int,
        needs: int,
        end: int,
        proposal: Proposal | None,
    ) -> None:
        Wait.__init__(self, end, needs, broker.store_config.sync_flush_timeout_ms / 1000, _answer_released)
        self.broker = broker
        self.cmd = cmd
        self.result = result
        self.queue_id = queue_id
        self.proposal = proposal
        self.deferred = Deferred()

    def start(self) -> Deferred:
        turn = self.broker.turn
        assert turn is not None  # BrokerApp builds it before it serves
        turn.add(self)
        if self.proposal is not None:
            self.proposal.on_done(lambda committed: turn.settle(self, committed))
        return self.deferred

    def released(self) -> None:
        """The table let go of this send: answer it (met, or why not)."""
        result = self.result
        if self.proposal is not None:
            result = self.proposal.outcome()  # committed, or why not (the Raft driver says)
        elif self.missed == Need.DURABLE:
            result.status = PutStatus.FLUSH_DISK_TIMEOUT
            if self.reason:
                result.remark = f"{self.reason}; the broker refuses writes until it is restarted"
        elif self.missed == Need.REPLICATED:
            result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
        if self.asked & Need.REPLICATED and self.missed in (Need.NONE, Need.REPLICATED):
            # the slave's share of the send (timeouts included), from the start of that stage
            self.broker.stats.replication.observe(self.broker.clock.monotonic() - self.stage_started)
        self.deferred.resolve(stored_answer(self.broker, self.cmd, result, self.queue_id))


def _answer_released(wait: Wait) -> None:
    """Every held send's ``on_released`` (one function, no bound method per send)."""
    assert isinstance(wait, _SendWait)
    wait.released()
