"""Transactional messages (RocketMQ 4.9 ``TransactionMQProducer``), on the asyncio producer.

``send_message_in_transaction(msg, arg)``:

1. the message goes out as a *half message* (properties TRAN_MSG=true and PGROUP=<group>,
   sysflag PREPARED; a delay level is dropped, as Java drops it) with the producer's usual
   retries; consumers cannot see it yet;
2. on SEND_OK the *executor* runs the local transaction (it gets a copy of the message
   whose properties hold the transaction id as UNIQ_KEY, TRAN_MSG and PGROUP) and returns a
   ``LocalTransactionState``; FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE
   mean ROLLBACK_MESSAGE without running it (Java's rule). An executor that raises or
   returns None counts as UNKNOW;
3. END_TRANSACTION (37) goes *oneway* to the master that stored the half message: COMMIT
   makes the message visible, ROLLBACK drops it, UNKNOW leaves it to the broker's check.
   A lost END (the master down, the connection gone) is only logged, as in Java: the
   broker's check resolves it later.

The *check listener* answers the broker's CHECK_TRANSACTION_STATE (39) for any half message
of this producer group that is still unresolved after ``transactionTimeOut`` (a lost END,
an UNKNOW, a producer that died before answering: any live producer of the group may be
asked). It gets the message (``MessageExt``, topic and queue the real ones; its
``msg_id`` is the transaction id, the UNIQ_KEY) and returns a state, which goes back as
END_TRANSACTION with ``fromTransactionCheck=true`` to the broker that asked.

Two-phase use without an executor (a coordinator decides later, elsewhere):
``send_half(msg)`` stores a half message and ends nothing; ``end_transaction(half, state)``
resolves one, given the ``HalfMessage`` the send returned (picklable, so it can travel to
another process), and awaits the broker's answer instead of sending oneway.

Both callables may be plain functions or coroutine functions. Plain ones run in a worker
thread (``asyncio.to_thread``), so a blocking local transaction (a database call) stalls
neither this producer's heartbeats nor other sends; coroutine functions run on the event
loop. Checks are answered ``check_concurrency`` at a time (1, as Java's check executor),
in the order they arrive.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ledgermq.client.errors import MQBrokerError, MQClientError, MQConnectError
from ledgermq.client.message import Message, MessageQueue, SendResult, SendStatus
from ledgermq.client.producer.producer import Producer
from ledgermq.net.client import ConnectError
from ledgermq.net.connection import ConnectionClosedError, RequestTimeoutError
from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import MessageRecord
from ledgermq.protocol.msgid import decode_offset_msg_id

__all__ = ["CheckListener", "HalfMessage", "LocalTransactionState", "TransactionExecutor", "TransactionProducer",
           "TransactionSendResult"]  # fmt: skip

log = logging.getLogger(__name__)


class LocalTransactionState(enum.Enum):
    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"  # RocketMQ's spelling


_END_CODE = {
    LocalTransactionState.COMMIT_MESSAGE: SF.TRANSACTION_COMMIT_TYPE,
    LocalTransactionState.ROLLBACK_MESSAGE: SF.TRANSACTION_ROLLBACK_TYPE,
    LocalTransactionState.UNKNOW: SF.TRANSACTION_NOT_TYPE,
}

StateOrAwaitable = LocalTransactionState | None | Awaitable[LocalTransactionState | None]
TransactionExecutor = Callable[[Message, Any], StateOrAwaitable]
CheckListener = Callable[[MessageRecord], StateOrAwaitable]


@dataclass(frozen=True, slots=True)
class TransactionSendResult:
    """The half message's send result and what the executor decided. ``transaction_id`` is
    the broker's if it sent one (4.9 brokers do not), else the message's UNIQ_KEY."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    transaction_id: str
    local_state: LocalTransactionState


@dataclass(frozen=True, slots=True)
class HalfMessage:
    """What END_TRANSACTION needs to name a stored half message: its broker group, its
    commit-log offset and its offset in the half queue (``tranStateTableOffset``), and the
    transaction id (its UNIQ_KEY)."""

    broker_name: str
    commit_log_offset: int
    queue_offset: int
    msg_id: str

    @classmethod
    def of(cls, sent: SendResult) -> HalfMessage:
        _host, commit_log_offset = decode_offset_msg_id(sent.offset_msg_id)
        return cls(sent.queue.broker_name, commit_log_offset, sent.queue_offset, sent.msg_id)


async def _call(fn: Callable[..., StateOrAwaitable], *args: Any) -> tuple[LocalTransactionState, BaseException | None]:
    """Run a user callable (plain: in a thread; async: awaited); exceptions and None are UNKNOW."""
    try:
        if inspect.iscoroutinefunction(fn):
            state = await fn(*args)
        else:
            state = await asyncio.to_thread(fn, *args)
            if isinstance(state, Awaitable):  # a plain callable that returned an awaitable
                state = await state
    except Exception as exc:
        return LocalTransactionState.UNKNOW, exc
    if state is None:
        return LocalTransactionState.UNKNOW, None
    if not isinstance(state, LocalTransactionState):
        return LocalTransactionState.UNKNOW, TypeError(f"returned {state!r}, not a LocalTransactionState")
    return state, None


class TransactionProducer(Producer):
    """``TransactionProducer("pg", ns, check_listener=check)``; then
    ``await p.send_message_in_transaction(msg, executor=run_local, arg=...)``.

    ``executor`` may also be given here as the default for every send; every other option
    is ``Producer``'s."""

    def __init__(
        self,
        group: str | None = None,
        namesrv_addrs: str | Sequence[str] | None = None,
        *,
        check_listener: CheckListener,
        executor: TransactionExecutor | None = None,
        check_concurrency: int = 1,
        **options: Any,
    ) -> None:
        if check_listener is None:
            raise MQClientError("a transaction producer needs a check listener")
        if check_concurrency < 1:
            raise MQClientError("check_concurrency must be 1 or more")
        super().__init__(group, namesrv_addrs, **options)
        self.check_listener = check_listener
        self.executor = executor
        self._checks = asyncio.Semaphore(check_concurrency)

    async def start(self) -> None:
        self.instance.transaction_checkers[self.group] = self._on_check  # before the first heartbeat
        try:
            await super().start()
        except BaseException:
            self.instance.transaction_checkers.pop(self.group, None)
            raise

    async def shutdown(self) -> None:
        if self.instance.transaction_checkers.get(self.group) == self._on_check:
            del self.instance.transaction_checkers[self.group]
        await super().shutdown()

    async def send_message_in_transaction(
        self, msg: Message, arg: Any = None, *, executor: TransactionExecutor | None = None
    ) -> TransactionSendResult:
        """Send ``msg`` as a half message, run the local transaction, end it (see the module notes)."""
        self._check_running()
        run = executor or self.executor
        if run is None:
            raise MQClientError("no local-transaction executor given (tranExecutor is null)")
        half = self._half_of(msg)
        out = self._prepare(half)
        out.sysflag |= SF.TRANSACTION_PREPARED_TYPE
        half.properties[P.UNIQ_KEY] = out.msg_id  # what the executor sees: the transaction id
        try:
            sent = await self._send_default(out, None, oneway=False)
        except Exception as exc:
            raise MQClientError(f"send message Exception: {exc}") from exc
        assert sent is not None
        state, error = LocalTransactionState.UNKNOW, None
        if sent.status is SendStatus.SEND_OK:
            state, error = await _call(run, half, arg)
            if error is not None:
                log.info("local transaction of %s failed: %r", sent.msg_id, error)
        else:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        try:
            await self._end_transaction(sent, state, error)
        except Exception as exc:  # the broker's check resolves it
            log.warning("local transaction %s is %s, but ending it on the broker failed: %s", sent.msg_id, state, exc)
        return TransactionSendResult(
            sent.status,
            sent.msg_id,
            sent.offset_msg_id,
            sent.queue,
            sent.queue_offset,
            sent.transaction_id or sent.msg_id,
            state,
        )

    def _half_of(self, msg: Message) -> Message:
        return Message(
            msg.topic,
            msg.body,
            tags=msg.tags,
            keys=msg.keys,
            properties={**msg.properties, P.TRAN_MSG: "true", P.PGROUP: self.group},
            delay_level=0,
            flag=msg.flag,
            wait_store_msg_ok=msg.wait_store_msg_ok,
        )

    async def send_half(
        self, msg: Message, queue: MessageQueue | None = None, *, timeout: float | None = None
    ) -> SendResult:
        """Store ``msg`` as a half message and end nothing: it stays invisible until
        ``end_transaction`` (from this or any process) or the broker's check resolves it.
        With ``queue``, one attempt on that queue; without, the usual retries (a retry after
        a timeout may leave an earlier copy on another broker group, unresolved: only the
        returned one is named by the result). Raises ``MQClientError`` unless SEND_OK (a
        half stored without its flush or slave guarantee is rolled back at once)."""
        self._check_running()
        out = self._prepare(self._half_of(msg))
        out.sysflag |= SF.TRANSACTION_PREPARED_TYPE
        if queue is None:
            sent = await self._send_default(out, timeout, oneway=False)
        else:
            sent = await self._send_selected(out, queue, timeout)
        assert sent is not None
        if sent.status is not SendStatus.SEND_OK:
            try:
                await self.end_transaction(HalfMessage.of(sent), LocalTransactionState.ROLLBACK_MESSAGE)
            except MQClientError as exc:
                log.warning("rolling back half message %s (%s) failed: %s", sent.msg_id, sent.status.value, exc)
            raise MQClientError(f"half message {sent.msg_id} stored as {sent.status.value}, not SEND_OK: rolled back")
        return sent

    async def end_transaction(
        self, half: HalfMessage, state: LocalTransactionState, *, timeout: float | None = None
    ) -> None:
        """END_TRANSACTION for ``half`` to the master of its broker group, awaiting the answer:
        returns when the broker wrote the resolution, raises ``MQBrokerError`` when it refused
        and ``MQConnectError`` when no answer came (the broker may or may not have applied
        it: an END is not idempotent, a second COMMIT of one half writes its message twice)."""
        self._check_running()
        addr = await self.publishing.master_addr(MessageQueue("", half.broker_name, 0))
        header = {
            "producerGroup": self.group,
            "tranStateTableOffset": str(half.queue_offset),
            "commitLogOffset": str(half.commit_log_offset),
            "commitOrRollback": str(_END_CODE[state]),
            "fromTransactionCheck": "false",
            "msgId": half.msg_id,
            "transactionId": half.msg_id,
        }
        cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, header)
        timeout = self.settings.send_timeout if timeout is None else timeout
        try:
            resp = await self.remoting.invoke(addr, cmd, timeout)
        except ConnectError as exc:
            raise MQConnectError(str(exc), addr) from None
        except ConnectionClosedError as exc:
            raise MQConnectError(f"{addr} closed the connection: {exc}", addr) from None
        except RequestTimeoutError as exc:
            raise MQConnectError(str(exc), addr, timeout=True) from None
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, addr, what=f"END_TRANSACTION of {half.msg_id}")

    async def _end_transaction(
        self, sent: SendResult, state: LocalTransactionState, error: BaseException | None
    ) -> None:
        """``endTransaction``: oneway to the master of the queue's broker group."""
        addr = self.routes.master_addr(sent.queue.broker_name)
        if addr is None:
            raise MQClientError(f"no master address of {sent.queue.broker_name}")
        _host, commit_log_offset = decode_offset_msg_id(sent.offset_msg_id)
        header = {
            "producerGroup": self.group,
            "tranStateTableOffset": str(sent.queue_offset),
            "commitLogOffset": str(commit_log_offset),
            "commitOrRollback": str(_END_CODE[state]),
            "fromTransactionCheck": "false",
            "msgId": sent.msg_id,
            "transactionId": sent.transaction_id or sent.msg_id,
        }
        cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, header)
        if error is not None:
            cmd.remark = f"executeLocalTransactionBranch exception: {error!r}"
        await self.remoting.invoke_oneway(addr, cmd)

    async def _on_check(self, broker_addr: str, record: MessageRecord, cmd: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE from ``broker_addr``: ask the listener, answer oneway."""
        async with self._checks:
            state, error = await _call(self.check_listener, record)
        if error is not None:
            log.error("transaction check listener failed on %s: %r", record.msg_id, error)
        ext = cmd.ext_fields
        header = {
            "producerGroup": self.group,
            "tranStateTableOffset": str(ext.get("tranStateTableOffset", "")),
            "commitLogOffset": str(ext.get("commitLogOffset", "")),
            "commitOrRollback": str(_END_CODE[state]),
            "fromTransactionCheck": "true",
            "msgId": record.properties.get(P.UNIQ_KEY) or record.offset_msg_id,
        }
        if ext.get("transactionId"):
            header["transactionId"] = str(ext["transactionId"])
        end = RemotingCommand.request(RequestCode.END_TRANSACTION, header)
        if error is not None:
            end.remark = f"checkLocalTransactionState Exception: {error!r}"
        if state is not LocalTransactionState.COMMIT_MESSAGE:
            log.warning("broker %s checked transaction %s: answering %s", broker_addr, record.msg_id, state.value)
        try:
            await self.remoting.invoke_oneway(broker_addr, end)
        except Exception as exc:  # the broker asks again next round
            log.error("answering the transaction check of %s to %s failed: %s", record.msg_id, broker_addr, exc)
