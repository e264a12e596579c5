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
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ledgermq.client.errors import MQBrokerError, MQClientError, MQConnectError, SendFailedError
from ledgermq.client.fault import FaultStrategy
from ledgermq.client.message import SendResult, SendStatus
from ledgermq.client.outgoing import Outgoing
from ledgermq.client.publish_info import TopicPublishInfo
from ledgermq.client.selector import select_queue
from ledgermq.clock import Clock
from ledgermq.protocol.admin_body import MessageQueue

# The producer's logger, as before this module was split out of it: logging configured
# for ledgermq.client.producer still sees the warnings of failed attempts.
log = logging.getLogger("ledgermq.client.producer")

# One attempt: (message, queue, time left in seconds, oneway) -> result, None when oneway.
Attempt = Callable[[Outgoing, MessageQueue, float, bool], Awaitable[SendResult | None]]
# A fresher route after a failed attempt (None: keep the one we have).
Refresh = Callable[[], Awaitable[TopicPublishInfo | None]]


async def _refreshed(info: TopicPublishInfo, refresh: Refresh | None) -> TopicPublishInfo:
    if refresh is None:
        return info
    try:
        newer = await refresh()
    except MQClientError as exc:
        log.debug("route refresh after a failed send did not work: %s", exc)
        return info
    return newer if newer is not None and newer.ok else info


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
    refresh: Refresh | None = None,
) -> SendResult | None:
    """Up to ``times_total`` attempts, each on a queue of another broker group than the last,
    until ``timeout`` seconds after ``begin_first`` (a monotonic time). After a failed attempt
    ``refresh`` (if given) may bring a newer route: a master that died or stepped down is
    then left for the one that replaced it within the same send."""
    last_broker: str | None = None
    brokers: list[str] = []
    last_exc: MQClientError | None = None
    result: SendResult | None = None
    call_timeout = False
    for _ in range(times_total):
        mq = select_queue(info, last_broker, fault)
        if mq is None:
            break
        last_broker = mq.broker_name
        brokers.append(mq.broker_name)
        begin = clock.monotonic()
        remaining = timeout - (begin - begin_first)
        if remaining <= 0:
            call_timeout = True
            break
        try:
            result = await attempt(out, mq, remaining, oneway)
        except MQBrokerError as exc:
            fault.update_fault_item(mq.broker_name, _elapsed_ms(clock, begin), True)
            log.warning("send to %s failed: %s", mq, exc)
            last_exc = exc
            if exc.retriable:
                info = await _refreshed(info, refresh)
                continue
            raise
        except MQClientError as exc:  # connection errors, timeouts, a broker without master
            fault.update_fault_item(mq.broker_name, _elapsed_ms(clock, begin), True)
            log.warning("send to %s failed, trying again at once: %s", mq, exc)
            last_exc = exc
            info = await _refreshed(info, refresh)
            continue
        fault.update_fault_item(mq.broker_name, _elapsed_ms(clock, begin), False)
        if oneway or result is None:
            return None
        if result.status is not SendStatus.SEND_OK and retry_not_ok:
            continue
        return result
    if result is not None:
        return result
    if call_timeout:
        brokers.pop()  # that attempt was never made
    raise gave_up_error(out, clock, begin_first, brokers, last_exc, call_timeout)


async def send_to_queue_with_retries(
    out: Outgoing,
    queue: MessageQueue,
    attempt: Attempt,
    fault: FaultStrategy,
    clock: Clock,
    retries: int,
    started: float,
    timeout: float,
) -> SendResult:
    """One queue, up to ``retries`` retries on it, fault items updated: Java's async sends
    without publish info keep the broker in ``onExceptionImpl``."""
    brokers: list[str] = []
    last_exc: MQClientError | None = None
    for _ in range(1 + retries):
        begin = clock.monotonic()
        remaining = timeout - (begin - started)
        if remaining <= 0:
            raise gave_up_error(out, clock, started, brokers, last_exc, True)
        brokers.append(queue.broker_name)
        try:
            result = await attempt(out, queue, remaining, False)
        except MQClientError as exc:
            fault.update_fault_item(queue.broker_name, _elapsed_ms(clock, begin), True)
            if isinstance(exc, MQBrokerError) and not exc.retriable:
                raise
            log.warning("async send to %s failed: %s", queue, exc)
            last_exc = exc
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
    is (a timeout ``MQConnectError``); the last attempt's error is its cause."""
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
    return exc


def _elapsed_ms(clock: Clock, begin: float) -> int:
    return int((clock.monotonic() - begin) * 1000)
