"""The retry policy of sends: which attempts a send makes, within what time, and the error
it raises when they are spent (``DefaultMQProducerImpl.sendDefaultImpl`` and, for async
sends, ``MQClientAPIImpl.onExceptionImpl``, 4.9.7).

* ``send_with_retries``: each attempt on a queue picked by ``select_queue``, away from
  the broker of the previous attempt; connection errors, timeouts and retriable broker
  codes go on to the next attempt, other broker codes are raised at once; a non-SEND_OK
  status is retried only when asked (``retry_another_broker_when_not_store_ok``).
* ``send_to_queue_with_retries``: every attempt on the one queue the caller chose (async
  sends to a given or selector-picked queue).

Every attempt reports its latency to the fault strategy, and all attempts share one
deadline. The attempt itself is passed in (the producer's ``_send_kernel``), so this
module holds the policy and nothing of the transport. These are plain functions, the
producer's send path calls them once per send.

With a ``MasterWatch`` (``failover.FailoverSettings``) two things are added to Java's
policy, both because a broker group's master can move (DLedger) faster than retries
notice:

* an attempt abandoned because the route names a new master (``MasterMovedError``) is
  made again at once on the same queue, now served by that master. It does not use up
  one of the ``retry_times`` (it was no failure of the broker group, and each one needs
  the master to have moved, bounded by the send timeout) and is not reported to the
  fault strategy (the group's new master has done nothing wrong);
* after a failure that says the group's master is not where the route says (unreachable,
  SERVICE_NOT_AVAILABLE, no master in the route), a retry that would go to the same
  broker group first backs off, until the route names another master or the back-off
  ends. A retry that can go to another broker group goes at once, as in Java.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ledgermq.client.errors import (
    MasterMovedError,
    MQBrokerError,
    MQClientError,
    MQConnectError,
    NoMasterError,
    SendFailedError,
)
from ledgermq.client.instance.publish_info import TopicPublishInfo
from ledgermq.client.message import SendResult, SendStatus
from ledgermq.client.producer.fault import FaultStrategy
from ledgermq.client.producer.master_watch import MasterWatch
from ledgermq.client.producer.outgoing import Outgoing
from ledgermq.client.producer.selector import select_queue
from ledgermq.clock import Clock
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.codes import ResponseCode
from ledgermq.util.ratelog import limited

# The producer's logger, as before this module was split out of it: logging configured
# for ledgermq.client.producer.producer still sees the warnings of failed attempts.
log = logging.getLogger("ledgermq.client.producer.producer")

# One attempt: (message, queue, time left in seconds, oneway) -> result, None when oneway.
Attempt = Callable[[Outgoing, MessageQueue, float, bool], Awaitable[SendResult | None]]


def follows_master(exc: MQClientError) -> str | None:
    """The master address a failure says is not (or no longer) the group's writable master,
    "" when the route named none; None for failures a new route would not cure."""
    if isinstance(exc, MasterMovedError):
        return None
    if isinstance(exc, MQConnectError):
        return exc.addr
    if isinstance(exc, NoMasterError):
        return ""
    if isinstance(exc, MQBrokerError) and exc.code == ResponseCode.SERVICE_NOT_AVAILABLE:
        return exc.addr
    return None


async def _refreshed(info: TopicPublishInfo, watch: MasterWatch | None, topic: str) -> TopicPublishInfo:
    if watch is None:
        return info
    try:
        newer = await watch.publish_info(topic)
    except MQClientError as exc:
        log.debug("route refresh after a failed send did not work: %s", exc)
        return info
    return newer if newer is not None and newer.ok else info


async def _back_off(
    watch: MasterWatch | None, queue: MessageQueue, failed_addr: str, previous: int, remaining: float
) -> bool:
    """The pause before a retry on the group whose master just failed; True if one was made."""
    if watch is None:
        return False
    delay = watch.settings.backoff(previous, remaining)
    if delay <= 0:
        return False
    await watch.wait_for_new_master(queue.topic, queue.broker_name, failed_addr, delay)
    return True


class Retries:
    """The state of one ``send_with_retries``: which attempts were made, on which broker
    groups, what failed last. Split into steps so a send can make its first attempt
    without a coroutine (the producer's fast path, ``fast_send``) and hand the rest over
    to ``run`` only when that attempt did not end the send."""

    __slots__ = (
        "attempt", "backoffs", "begin_first", "brokers", "call_timeout", "clock", "failed", "fault", "info",
        "last_broker", "last_exc", "made", "moved", "oneway", "out", "result", "retry_not_ok", "timeout",
        "times_total", "watch",
    )  # fmt: skip

    def __init__(
        self,
        out: Outgoing,
        info: TopicPublishInfo,
        attempt: Attempt,
        fault: FaultStrategy,
        clock: Clock,
        times_total: int,
        timeout: float,
        begin_first: float,
        retry_not_ok: bool,
        oneway: bool,
        watch: MasterWatch | None = None,
    ) -> None:
        self.out, self.info, self.attempt, self.fault, self.clock = out, info, attempt, fault, clock
        self.times_total, self.timeout, self.begin_first = times_total, timeout, begin_first
        self.retry_not_ok, self.oneway, self.watch = retry_not_ok, oneway, watch
        self.last_broker: str | None = None
        self.brokers: list[str] = []
        self.last_exc: MQClientError | None = None
        self.result: SendResult | None = None
        self.call_timeout = False
        self.made = self.backoffs = 0
        self.failed: tuple[str, str] | None = None  # (broker name, address) of a master that failed
        self.moved: MessageQueue | None = None  # the queue of an attempt abandoned for a new master

    def remaining(self) -> float:
        return self.timeout - (self.clock.monotonic() - self.begin_first)

    def first_queue(self) -> MessageQueue | None:
        """The first attempt's queue (no failure yet: nothing to back off from)."""
        mq = select_queue(self.info, None, self.fault)
        if mq is not None:
            self.last_broker = mq.broker_name
        return mq

    async def next_queue(self) -> MessageQueue | None:
        """The next attempt's queue, after a back-off when it is the group whose master just
        failed; None when the topic has none or the time is spent (then ``call_timeout``)."""
        if self.moved is not None:
            mq, self.moved = self.moved, None
        else:
            picked = select_queue(self.info, self.last_broker, self.fault)
            if picked is None:
                return None
            mq = picked
            failed = self.failed
            if failed is not None and mq.broker_name == failed[0] and await self._backed_off(mq, failed[1]):
                mq = select_queue(self.info, self.last_broker, self.fault) or mq
            self.failed = None
        self.last_broker = mq.broker_name
        if self.remaining() <= 0:
            self.call_timeout = True
            return None
        self.brokers.append(mq.broker_name)
        return mq

    async def _backed_off(self, mq: MessageQueue, failed_addr: str) -> bool:
        """A pause before retrying the group whose master just failed, then a fresher route."""
        if not await _back_off(self.watch, mq, failed_addr, self.backoffs, self.remaining()):
            return False
        self.backoffs += 1
        self.info = await _refreshed(self.info, self.watch, self.out.topic)
        return True

    def resume_at(self, mq: MessageQueue) -> None:
        """The first queue was picked but no attempt made on it (no master address or open
        connection yet): ``run`` makes it there."""
        self.moved = mq

    def abandoned(self, mq: MessageQueue, exc: MasterMovedError) -> None:
        """An attempt given up for a new master: made again at once on the same queue."""
        log.info("send to %s abandoned, trying its new master at once: %s", mq, exc)
        self.last_exc = exc
        self.moved = mq

    async def failed_attempt(self, mq: MessageQueue, exc: MQClientError, begin: float) -> None:
        """An attempt that failed: counted, reported to fault avoidance, the route looked up
        again; a broker error that is not retriable is raised at once."""
        self.made += 1
        self.fault.update_fault_item(mq.broker_name, _elapsed_ms(self.clock, begin), True)
        log.debug("send to %s failed (retried while attempts remain): %s", mq, exc)
        self.last_exc = exc
        if isinstance(exc, MQBrokerError) and not exc.retriable:
            raise exc
        self.failed = _failed_master(mq, exc)
        self.info = await _refreshed(self.info, self.watch, self.out.topic)

    def answered(self, mq: MessageQueue, result: SendResult | None, begin: float) -> bool:
        """An attempt the broker answered (or a oneway one sent); True when the send is done."""
        self.made += 1
        if self.fault.enabled:  # else the latency is not recorded: not measured either
            self.fault.update_fault_item(mq.broker_name, _elapsed_ms(self.clock, begin), False)
        self.result = result
        if self.oneway or result is None:
            return True
        return result.status is SendStatus.SEND_OK or not self.retry_not_ok

    async def run(self) -> SendResult | None:
        """Attempts until one ends the send or they are spent; then the last result, or
        the error saying why there is none."""
        while self.made < self.times_total:
            mq = await self.next_queue()
            if mq is None:
                break
            begin = self.clock.monotonic()
            try:
                result = await self.attempt(self.out, mq, self.timeout - (begin - self.begin_first), self.oneway)
            except MasterMovedError as exc:
                self.abandoned(mq, exc)
                continue
            except MQClientError as exc:  # broker codes, connection errors, timeouts, no master
                await self.failed_attempt(mq, exc, begin)
                continue
            if self.answered(mq, result, begin):
                return None if self.oneway else result
        return self.gave_up()

    def gave_up(self) -> SendResult | None:
        if self.result is not None:
            return self.result
        raise gave_up_error(self.out, self.clock, self.begin_first, self.brokers, self.last_exc, self.call_timeout)


async def send_with_retries(
    out: Outgoing,
    info: TopicPublishInfo,
    attempt: Attempt,
    fault: FaultStrategy,
    clock: Clock,
    times_total: int,
    timeout: float,
    begin_first: float,
    retry_not_ok: bool,
    oneway: bool,
    watch: MasterWatch | None = None,
) -> SendResult | None:
    """Up to ``times_total`` attempts, each on a queue of another broker group than the last,
    until ``timeout`` seconds after ``begin_first`` (a monotonic time). After a failed attempt
    ``watch`` (if given) brings a newer route: a master that died or stepped down is then
    left for the one that replaced it within the same send (see the module notes)."""
    retries = Retries(out, info, attempt, fault, clock, times_total, timeout, begin_first, retry_not_ok, oneway, watch)
    return await retries.run()


def _failed_master(mq: MessageQueue, exc: MQClientError) -> tuple[str, str] | None:
    addr = follows_master(exc)
    return None if addr is None else (mq.broker_name, addr)


async def send_to_queue_with_retries(
    out: Outgoing,
    queue: MessageQueue,
    attempt: Attempt,
    fault: FaultStrategy,
    clock: Clock,
    retries: int,
    started: float,
    timeout: float,
    watch: MasterWatch | None = None,
) -> SendResult:
    """One queue, up to ``retries`` retries on it, fault items updated: Java's async sends
    without publish info keep the broker in ``onExceptionImpl``. With ``watch``, abandoned
    attempts and back-offs as ``send_with_retries``."""
    brokers: list[str] = []
    last_exc: MQClientError | None = None
    made = backoffs = 0
    failed_addr: str | None = None
    while made < 1 + retries:
        if failed_addr is not None:
            remaining = timeout - (clock.monotonic() - started)
            if await _back_off(watch, queue, failed_addr, backoffs, remaining):
                backoffs += 1
            failed_addr = None
        begin = clock.monotonic()
        remaining = timeout - (begin - started)
        if remaining <= 0:
            raise gave_up_error(out, clock, started, brokers, last_exc, True)
        brokers.append(queue.broker_name)
        try:
            result = await attempt(out, queue, remaining, False)
        except MasterMovedError as exc:
            log.info("async send to %s abandoned, trying its new master at once: %s", queue, exc)
            last_exc = exc
            continue
        except MQClientError as exc:
            made += 1
            fault.update_fault_item(queue.broker_name, _elapsed_ms(clock, begin), True)
            if isinstance(exc, MQBrokerError) and not exc.retriable:
                raise
            log.debug("async send to %s failed (retried while attempts remain): %s", queue, exc)
            last_exc = exc
            failed_addr = follows_master(exc)
            continue
        fault.update_fault_item(queue.broker_name, _elapsed_ms(clock, begin), False)
        assert result is not None
        return result
    raise gave_up_error(out, clock, started, brokers, last_exc, False)


def gave_up_error(
    out: Outgoing,
    clock: Clock,
    begin_first: float,
    brokers: list[str],
    last_exc: MQClientError | None,
    timed_out: bool,
) -> MQClientError:
    """The error a send raises when its attempts are spent (``SendFailedError``) or its time
    is (a timeout ``MQConnectError``); the last attempt's error is its cause. Logged as a
    warning (once a minute per topic) besides: the single attempts were only DEBUG."""
    spent = (clock.monotonic() - begin_first) * 1000
    if timed_out:
        exc: MQClientError = MQConnectError(
            f"send to {out.topic} timed out after {spent:.0f}ms and {len(brokers)} attempts", timeout=True
        )
    else:
        exc = SendFailedError(
            f"send to {out.topic} failed {len(brokers)} times in {spent:.0f}ms (brokers {brokers}): {last_exc}",
            attempts=len(brokers),
            brokers=brokers,
            last=last_exc,
        )
    exc.__cause__ = last_exc
    limited.log(log, logging.WARNING, ("send-gave-up", out.topic), "%s", exc)
    return exc


def _elapsed_ms(clock: Clock, begin: float) -> int:
    return int((clock.monotonic() - begin) * 1000)
