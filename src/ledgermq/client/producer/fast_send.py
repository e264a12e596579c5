"""One send in flight without a task or coroutine chain of its own (``SendOp``).

A profile of the producer showed most of a send's client CPU in the machinery around
it rather than in the message: a task per async send, a coroutine per layer of the send
path (producer, retry loop, master watch, remoting client, connection), a future and an
``asyncio.wait`` with a timer per send waiting for an in-flight slot. The common send
needs none of that: its route is cached, its master's connection is open, and the
broker answers SEND_OK. So a send starts as a ``SendOp``: the first attempt is sent from
the caller's step (``RemotingClient.start_invoke``) and its answer is read in the
answer's done callback, which completes the send's future. Only when the send needs
more (no cached route or open connection, a failed or abandoned attempt, a result to
retry) does the op hand over to the coroutine path (``Retries.run``, the producer's
``_send_default``) in a task, which then has the same retries, timeouts, back-offs and
master following as before.

The caller's future is a ``SendFuture``: cancelling it (directly, or by cancelling a task
awaiting it) stops the send: the request is withdrawn and the task, if any, cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ledgermq.client.errors import MQClientError, MQConnectError
from ledgermq.client.instance.publish_info import TopicPublishInfo
from ledgermq.client.instance.routes import RouteCache
from ledgermq.client.message import SendResult, SendStatus
from ledgermq.client.producer.fault import FaultStrategy
from ledgermq.client.producer.master_watch import MasterWatch
from ledgermq.client.producer.outgoing import Outgoing
from ledgermq.client.producer.selector import select_queue
from ledgermq.client.producer.send_budget import Queued
from ledgermq.client.producer.send_codec import read_send_response, send_request
from ledgermq.client.producer.send_retry import Attempt, Retries
from ledgermq.clock import Clock
from ledgermq.net.client import RemotingClient
from ledgermq.net.connection import ConnectionClosedError, PendingCall, RequestTimeoutError
from ledgermq.protocol.admin_body import MessageQueue

log = logging.getLogger("ledgermq.client.producer.producer")

# The whole coroutine path of a send, for when the fast one cannot start:
# (message, timeout, start time, attempts in all, retry non-SEND_OK) -> result.
FullSend = Callable[[Outgoing, float, float, int, bool], Awaitable[SendResult | None]]


@dataclass(frozen=True, slots=True)
class SendPath:
    """What a ``SendOp`` needs of its producer, handed over once when the producer is made."""

    routes: RouteCache
    remoting: RemotingClient
    fault: FaultStrategy
    clock: Clock
    watch: MasterWatch
    group: str
    create_topic_key: str
    default_topic_queue_nums: int
    attempt: Attempt  # one attempt through the coroutine path (the producer's _send_kernel)
    full: FullSend


class SendFuture(asyncio.Future[SendResult]):
    """An async send's future; cancelling it stops the send (no callback runs then). ``op``
    is set by whoever starts the send (no ``__init__`` of its own: one frame less per send)."""

    __slots__ = ("op",)
    op: SendOp | None

    def cancel(self, msg: Any = None) -> bool:
        op = getattr(self, "op", None)
        if op is not None and not self.done():
            op.abort()
        return super().cancel(msg)


class SendOp(Queued):
    """One send of ``out``: its first attempt made here, the rest in a task when needed.
    An async send waiting for an in-flight slot is its own entry in the budget's queue
    (``Queued``), started by ``launch`` when admitted.

    ``on_end`` is called once when the send ends whichever way, with True when it was
    aborted (the async sends' budget and bookkeeping); ``report`` (async sends' callbacks) gets the outcome before the
    future is completed, and completes it through the function it is given."""

    __slots__ = (
        "addr",
        "attempt",
        "begin",
        "ended",
        "fut",
        "handler",
        "held",
        "info",
        "launch",
        "mq",
        "on_end",
        "out",
        "path",
        "report",
        "request",
        "retry_not_ok",
        "started",
        "task",
        "timeout",
        "times_total",
    )  # fmt: skip

    launch: Callable[[SendOp], None]  # set when queued for a budget slot: how it starts when admitted

    def __init__(
        self,
        path: SendPath,
        out: Outgoing,
        fut: asyncio.Future[SendResult],
        timeout: float,
        started: float,
        times_total: int,
        retry_not_ok: bool,
        on_end: Callable[[SendOp, bool], None] | None = None,
        report: Callable[[SendOp, SendResult | None, BaseException | None], None] | None = None,
    ) -> None:
        self.path, self.out, self.fut = path, out, fut
        self.timeout, self.started, self.times_total, self.retry_not_ok = timeout, started, times_total, retry_not_ok
        self.on_end, self.report = on_end, report
        self.handler: Any = None  # the async sends' callbacks (``report`` reads them)
        self.held = -1  # body bytes held in the async sends' budget, -1: none
        self.withdrawn = True  # not waiting in the budget's queue
        self.addr = ""
        self.info: TopicPublishInfo | None = None
        self.mq: MessageQueue | None = None
        self.begin = 0.0
        self.request: PendingCall | None = None
        self.attempt: Any = None  # the master watch's entry for the attempt in flight
        self.task: asyncio.Task[SendResult | None] | None = None
        self.ended = False

    # -- the first attempt, without a coroutine ----------------------------------------------
    def start(self) -> None:
        """Send the first attempt now if the route and the connection allow, else go the
        coroutine path at once. The retry state (``Retries``) is made only if needed."""
        path = self.path
        info = path.routes.usable_publish_info(self.out.topic)
        if info is None:
            self._hand_over(self._full())
            return
        mq = select_queue(info, None, path.fault)
        self.info = info
        if mq is None:
            self._hand_over(self._retries(None, False).run())
            return
        addr = path.routes.master_addr(mq.broker_name)
        self.begin = begin = path.clock.monotonic()
        remaining = self.timeout - (begin - self.started)
        request = None
        if addr is not None and remaining > 0:
            out = self.out
            cmd = send_request(
                out, mq, path.group, path.create_topic_key, path.default_topic_queue_nums, path.clock.wall_ms()
            )
            request = path.remoting.start_invoke(addr, cmd, remaining, self._answered)
        if request is None:  # no master known or no open connection: the coroutine path connects
            retries = self._retries(mq, False)
            retries.resume_at(mq)
            self._hand_over(retries.run())
            return
        assert addr is not None
        self.mq, self.request, self.addr = mq, request, addr
        self.attempt = path.watch.register(request.cancel, out.topic, mq.broker_name, addr)

    def _retries(self, mq: MessageQueue | None, attempted: bool) -> Retries:
        """The retry state of this send, as ``Retries`` would have it after the first queue
        was picked (``mq``) and, if ``attempted``, an attempt made on it."""
        path = self.path
        assert self.info is not None
        retries = Retries(
            self.out, self.info, path.attempt, path.fault, path.clock, self.times_total, self.timeout, self.started,
            self.retry_not_ok, False, path.watch,
        )  # fmt: skip
        if mq is not None:
            retries.last_broker = mq.broker_name
            if attempted:
                retries.brokers.append(mq.broker_name)
        return retries

    def _answered(self, request: PendingCall) -> None:
        """The first attempt's answer (or its end): the send's result, or the hand-over."""
        self.request = None
        path = self.path
        watched = self.attempt
        self.attempt = None  # it holds the request's cancel, the request holds this method: a cycle
        if watched is not None:
            path.watch.unregister(watched)
        if self.ended:
            return
        mq = self.mq
        assert mq is not None
        if request.cancelled():
            if watched is not None and watched.moved_to is not None:
                retries = self._retries(mq, True)
                retries.abandoned(mq, path.watch.moved_error(watched))
                self._hand_over(retries.run())
            return
        exc = request.exception()
        try:
            if exc is not None:
                raise _attempt_error(exc, self.addr)
            result = read_send_response(request.result(), self.out, mq, self.addr)
        except MQClientError as failure:
            self._hand_over(self._after_failure(self._retries(mq, True), mq, failure, self.begin))
            return
        except Exception as error:  # not a send failure the retry policy knows: the send's error
            self.finish(None, error)
            return
        if path.fault.enabled:  # else the latency is not recorded: not measured either
            path.fault.update_fault_item(mq.broker_name, int((path.clock.monotonic() - self.begin) * 1000), False)
        if result.status is SendStatus.SEND_OK or not self.retry_not_ok:
            self.finish(result, None)
            return
        retries = self._retries(mq, True)  # stored, but not SEND_OK: retried on another group
        retries.made, retries.result = 1, result
        self._hand_over(retries.run())

    @staticmethod
    async def _after_failure(
        retries: Retries, mq: MessageQueue, failure: MQClientError, begin: float
    ) -> SendResult | None:
        await retries.failed_attempt(mq, failure, begin)
        return await retries.run()

    async def _full(self) -> SendResult | None:
        return await self.path.full(self.out, self.timeout, self.started, self.times_total, self.retry_not_ok)

    # -- the coroutine path and the end ------------------------------------------------------
    def run_coroutine(self, coro: Awaitable[SendResult | None]) -> None:
        """Carry the send out by ``coro`` in a task (sends the fast path does not cover)."""
        self._hand_over(coro)

    def _hand_over(self, coro: Awaitable[SendResult | None]) -> None:
        task = self.task = asyncio.ensure_future(coro)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[SendResult | None]) -> None:
        self.task = None
        if self.ended:
            if not task.cancelled():
                task.exception()  # retrieved: the send already ended (aborted or shut down)
            return
        if task.cancelled():
            self.finish(None, asyncio.CancelledError())
            return
        exc = task.exception()
        self.finish(task.result() if exc is None else None, exc)

    def finish(self, result: SendResult | None, exc: BaseException | None) -> None:
        """End the send with its result or error (once; later calls do nothing)."""
        if self.ended:
            return
        self.ended = True
        if self.on_end is not None:
            self.on_end(self, False)
        if self.report is not None:
            self.report(self, result, exc)
        else:
            self.complete(result, exc)

    def complete(self, result: SendResult | None, exc: BaseException | None) -> None:
        fut = self.fut
        if isinstance(fut, SendFuture):
            fut.op = None  # ended: the future no longer stops it, and the two no longer hold each other
        if fut.done():
            return
        if exc is None:
            assert result is not None
            fut.set_result(result)
        elif isinstance(exc, asyncio.CancelledError):
            fut.cancel()  # the op has ended: this cancels the future only
        else:
            fut.set_exception(exc)

    def stop_work(self) -> None:
        """Withdraw the attempt in flight and cancel the task, if any."""
        request, task = self.request, self.task
        self.request = self.task = None
        if request is not None:
            request.cancel()
        if task is not None:
            task.cancel()

    def abort(self) -> None:
        """The caller cancelled the send: stop it; no callback runs."""
        if self.ended:
            return
        self.ended = True
        self.stop_work()
        if self.on_end is not None:
            self.on_end(self, True)

    def fail_now(self, exc: Exception) -> None:
        """End the send with ``exc`` whatever it is doing (the producer shut down)."""
        if self.ended:
            return
        self.stop_work()
        self.finish(None, exc)


def _attempt_error(exc: BaseException, addr: str) -> BaseException:
    """What ``Producer._send_kernel`` makes of a transport error of one attempt."""
    if isinstance(exc, ConnectionClosedError):
        return MQConnectError(f"{addr} closed the connection: {exc}", addr)
    if isinstance(exc, RequestTimeoutError):
        return MQConnectError(str(exc), addr, timeout=True)
    return exc
