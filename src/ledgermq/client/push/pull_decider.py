"""What a push consumer's pull loop does next, decided from facts alone (RocketMQ 4.9.7
``DefaultMQPushConsumerImpl.pullMessage`` and its ``PullCallback``).

The loop (``pull_loop.py``) gathers the facts, asks ``before_pull`` whether to pull now,
pulls when told to, and hands the outcome to ``after_pull``; it then carries out the
decision (move the offset, hand messages over, commit, stop, wait). Every choice lives
here, without awaits, clocks or logging, so each can be checked case by case:

* before a pull: a dropped queue stops; a paused consumer waits ``PULL_DELAY_WHEN_SUSPENDED``;
  a queue whose cache holds more than its thresholds (count, MiB) or, consumed
  concurrently, spans more offsets than allowed waits ``flow_control_delay``; an orderly
  consumer pulls only a locked queue, and the first time it holds the lock it first
  re-reads where to start (``StartOffsetNeeded``); a queue whose topic was unsubscribed
  waits for the rebalance to drop it;
* after a pull: an error waits (``PULL_DELAY_WHEN_BROKER_FLOW_CONTROL`` after the broker's
  FLOW_CONTROL, ``pull_delay_when_exception`` otherwise); an answer filtered by a
  subscription that changed meanwhile is dropped and the offset pulled again (RocketMQ
  would move on past messages the new subscription wants); FOUND moves the offset and hands
  the messages over; NO_NEW_MSG / NO_MATCHED_MSG move the offset and, with nothing cached,
  commit it; OFFSET_ILLEGAL drops the queue and has its offset fixed later.

Pure: this module imports no asyncio and does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgermq.client.consumer.common import PULL_DELAY_WHEN_BROKER_FLOW_CONTROL
from ledgermq.client.instance.pull_result import PullStatus
from ledgermq.protocol.codes import ResponseCode

__all__ = [
    "MIB",
    "PULL_DELAY_WHEN_SUSPENDED",
    "AfterPull",
    "Limits",
    "PullNow",
    "PullOutcome",
    "QueueFacts",
    "StartOffsetNeeded",
    "Stop",
    "Wait",
    "after_pull",
    "before_pull",
    "start_offset",
]

MIB = 1024 * 1024
PULL_DELAY_WHEN_SUSPENDED = 1.0


@dataclass(frozen=True, slots=True)
class Limits:
    """The thresholds and delays a loop obeys (the push settings and the per-queue share of
    topic-wide thresholds, read at every round: both may change while it runs)."""

    threshold_count: int
    threshold_mib: int
    max_span: int
    flow_control_delay: float
    pull_delay_when_exception: float
    pull_interval: float


@dataclass(frozen=True, slots=True)
class QueueFacts:
    """One queue's state as a round starts."""

    dropped: bool
    paused: bool
    cached_count: int
    cached_bytes: int
    span: int
    orderly: bool
    locked: bool
    previously_locked: bool
    subscribed: bool


@dataclass(frozen=True, slots=True)
class Stop:
    """End the loop; ``why`` is logged at INFO when it is worth saying."""

    why: str = ""


@dataclass(frozen=True, slots=True)
class Wait:
    """Do not pull this round; try again after ``delay`` seconds. ``flow_control`` names the
    threshold that held the pull back (``"cache"``, ``"span"``), for the rate-limited warning."""

    delay: float
    why: str
    flow_control: str | None = None


@dataclass(frozen=True, slots=True)
class StartOffsetNeeded:
    """An orderly consumer's first round holding the queue's lock: ask where to start
    (the previous owner may have committed more before it let go), then decide again."""


@dataclass(frozen=True, slots=True)
class PullNow:
    """Pull the queue now."""


BeforePull = Stop | Wait | StartOffsetNeeded | PullNow


def before_pull(facts: QueueFacts, limits: Limits) -> BeforePull:
    if facts.dropped:
        return Stop("dropped")
    if facts.paused:
        return Wait(PULL_DELAY_WHEN_SUSPENDED, "paused")
    if facts.cached_count > limits.threshold_count or facts.cached_bytes // MIB > limits.threshold_mib:
        return Wait(limits.flow_control_delay, "cache over its thresholds", flow_control="cache")
    if not facts.orderly:
        if facts.span > limits.max_span:
            return Wait(limits.flow_control_delay, "cache spans too many offsets", flow_control="span")
    elif not facts.locked:
        return Wait(limits.pull_delay_when_exception, "not locked yet")
    elif not facts.previously_locked:
        return StartOffsetNeeded()
    if not facts.subscribed:
        return Wait(limits.pull_delay_when_exception, "no subscription (unsubscribed; the rebalance drops the queue)")
    return PullNow()


def start_offset(found: int | None, limits: Limits) -> Wait | int:
    """After ``StartOffsetNeeded``: the offset to pull from, or a wait when it could not be
    read (``found`` None: the lookup failed; negative: no usable offset yet)."""
    if found is None or found < 0:
        return Wait(limits.pull_delay_when_exception, "no start offset")
    return found


@dataclass(frozen=True, slots=True)
class PullOutcome:
    """What one pull brought: an error's response code (``error``; 0 for one that is no
    broker's answer), or a status with the next offset and the first message's offset.
    ``stale``: the topic's subscription changed while the pull was out."""

    dropped: bool
    error: int | None = None
    status: PullStatus | None = None
    next_begin_offset: int = 0
    message_count: int = 0
    first_queue_offset: int | None = None
    cached_count: int = 0
    stale: bool = False


@dataclass(frozen=True, slots=True)
class AfterPull:
    """What the loop does with a pull's outcome, in this order: set the queue's next offset
    (``next_offset``), warn that the broker answered data before the offset asked
    (``went_back``), hand the messages over (``deliver``), commit the new offset
    (``commit``), drop the queue and fix its offset later (``fix_offset``), then wait
    ``delay`` seconds before the next round (None: stop)."""

    delay: float | None
    next_offset: int | None = None
    went_back: bool = False
    deliver: bool = False
    commit: bool = False
    fix_offset: bool = False


def after_pull(outcome: PullOutcome, asked_offset: int, limits: Limits) -> AfterPull:
    if outcome.error is not None:
        if outcome.error == ResponseCode.FLOW_CONTROL:
            return AfterPull(PULL_DELAY_WHEN_BROKER_FLOW_CONTROL)
        return AfterPull(limits.pull_delay_when_exception)
    if outcome.dropped:
        return AfterPull(None)
    if outcome.stale:
        # Filtered by the old subscription: what it skipped may match the new one, and what
        # it found may not. Pull the same offset again at once, with the new one.
        return AfterPull(0.0)
    nxt = outcome.next_begin_offset
    if outcome.status is PullStatus.FOUND:
        first = outcome.first_queue_offset
        went_back = nxt < asked_offset or (first is not None and first < asked_offset)
        if outcome.message_count == 0:  # all filtered out on the client: go on at once
            return AfterPull(0.0, nxt, went_back)
        return AfterPull(limits.pull_interval, nxt, went_back, deliver=True)
    if outcome.status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
        # correctTagsOffset: with nothing in flight the committed offset may move on
        return AfterPull(0.0, nxt, commit=outcome.cached_count == 0)
    # OFFSET_ILLEGAL: stop here, record where to restart, let the rebalance re-add the queue
    return AfterPull(None, nxt, fix_offset=True)
