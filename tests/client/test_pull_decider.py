"""The push consumer's pull decisions (client/push/pull_decider.py), case by case: every
combination of the queue's facts around each threshold, and every pull outcome.

The rules are RocketMQ 4.9.7's ``DefaultMQPushConsumerImpl.pullMessage`` and its
``PullCallback``: stop a dropped queue; wait while paused (1 s); flow control on cached
count or size above the queue's thresholds (any consumer) or on the span of offsets
cached (concurrent consumers only); orderly consumers pull a locked queue only, asking
where to start the first time; an unsubscribed topic waits; then pull.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledgermq.client.consumer.common import PULL_DELAY_WHEN_BROKER_FLOW_CONTROL
from ledgermq.client.instance.pull_result import PullStatus
from ledgermq.client.push.pull_decider import (
    MIB,
    PULL_DELAY_WHEN_SUSPENDED,
    AfterPull,
    Limits,
    PullNow,
    PullOutcome,
    QueueFacts,
    StartOffsetNeeded,
    Stop,
    Wait,
    after_pull,
    before_pull,
    start_offset,
)
from ledgermq.protocol.codes import ResponseCode

LIMITS = Limits(
    threshold_count=1000,
    threshold_mib=100,
    max_span=2000,
    flow_control_delay=0.05,
    pull_delay_when_exception=3.0,
    pull_interval=0.25,
)
CALM = QueueFacts(
    dropped=False,
    paused=False,
    cached_count=0,
    cached_bytes=0,
    span=0,
    orderly=False,
    locked=False,
    previously_locked=False,
    subscribed=True,
)


def facts(**changes: object) -> QueueFacts:
    return dataclasses.replace(CALM, **changes)  # type: ignore[arg-type]  # keyword values checked by the dataclass


# -- before a pull: every combination around every threshold ---------------------------------
COUNTS = [0, LIMITS.threshold_count, LIMITS.threshold_count + 1]
SIZES = [0, (LIMITS.threshold_mib + 1) * MIB - 1, (LIMITS.threshold_mib + 1) * MIB]  # MiB rounded down
SPANS = [0, LIMITS.max_span, LIMITS.max_span + 1]
FLAGS = [False, True]


def expected(f: QueueFacts) -> object:
    """The rules of the module docstring, in their order of precedence."""
    if f.dropped:
        return Stop
    if f.paused:
        return ("wait", PULL_DELAY_WHEN_SUSPENDED, None)
    if f.cached_count > LIMITS.threshold_count or f.cached_bytes // MIB > LIMITS.threshold_mib:
        return ("wait", LIMITS.flow_control_delay, "cache")
    if not f.orderly and f.span > LIMITS.max_span:
        return ("wait", LIMITS.flow_control_delay, "span")
    if f.orderly and not f.locked:
        return ("wait", LIMITS.pull_delay_when_exception, None)
    if f.orderly and not f.previously_locked:
        return StartOffsetNeeded
    if not f.subscribed:
        return ("wait", LIMITS.pull_delay_when_exception, None)
    return PullNow


ALL_FACTS = [
    QueueFacts(d, p, c, b, s, o, lk, pl, sub)
    for d, p, c, b, s, o, lk, pl, sub in itertools.product(
        FLAGS, FLAGS, COUNTS, SIZES, SPANS, FLAGS, FLAGS, FLAGS, FLAGS
    )
]


def test_every_combination_of_facts() -> None:
    assert len(ALL_FACTS) == 2**6 * 27  # six flags, three values around each of three thresholds
    for f in ALL_FACTS:
        got = before_pull(f, LIMITS)
        want = expected(f)
        if isinstance(want, tuple):
            assert isinstance(got, Wait), f
            assert (got.delay, got.flow_control) == want[1:], f
            assert got.why, f
        else:
            assert type(got) is want, f


def test_thresholds_are_limits_not_bounds() -> None:
    """At a threshold the queue is still pulled; one past it, it waits."""
    at = facts(cached_count=LIMITS.threshold_count, cached_bytes=LIMITS.threshold_mib * MIB, span=LIMITS.max_span)
    assert isinstance(before_pull(at, LIMITS), PullNow)
    assert before_pull(facts(cached_count=LIMITS.threshold_count + 1), LIMITS) == Wait(
        LIMITS.flow_control_delay, "cache over its thresholds", "cache"
    )


def test_an_orderly_consumer_ignores_the_span() -> None:
    f = facts(orderly=True, locked=True, previously_locked=True, span=10**9)
    assert isinstance(before_pull(f, LIMITS), PullNow)


@given(
    st.builds(
        QueueFacts,
        dropped=st.booleans(),
        paused=st.booleans(),
        cached_count=st.integers(0, 10**6),
        cached_bytes=st.integers(0, 1 << 40),
        span=st.integers(0, 10**6),
        orderly=st.booleans(),
        locked=st.booleans(),
        previously_locked=st.booleans(),
        subscribed=st.booleans(),
    )
)
def test_any_facts_follow_the_rules(f: QueueFacts) -> None:
    got = before_pull(f, LIMITS)
    want = expected(f)
    if isinstance(want, tuple):
        assert isinstance(got, Wait) and (got.delay, got.flow_control) == want[1:]
    else:
        assert type(got) is want
    assert not isinstance(got, PullNow) or (f.subscribed and not f.dropped and not f.paused)


def test_the_start_offset_of_a_newly_locked_queue() -> None:
    assert start_offset(42, LIMITS) == 42
    assert start_offset(0, LIMITS) == 0
    for unreadable in (None, -1):
        wait = start_offset(unreadable, LIMITS)
        assert isinstance(wait, Wait) and wait.delay == LIMITS.pull_delay_when_exception


# -- after a pull ----------------------------------------------------------------------------
def found(nxt: int, count: int, first: int | None, cached: int = 0) -> PullOutcome:
    return PullOutcome(
        dropped=False,
        status=PullStatus.FOUND,
        next_begin_offset=nxt,
        message_count=count,
        first_queue_offset=first,
        cached_count=cached,
    )


@pytest.mark.parametrize(
    ("outcome", "want"),
    [
        # errors: the broker's flow control retries soon, anything else after the exception delay
        (PullOutcome(dropped=False, error=ResponseCode.FLOW_CONTROL), AfterPull(PULL_DELAY_WHEN_BROKER_FLOW_CONTROL)),
        (PullOutcome(dropped=False, error=ResponseCode.SUBSCRIPTION_NOT_LATEST), AfterPull(3.0)),
        (PullOutcome(dropped=False, error=0), AfterPull(3.0)),  # no answer (connection, timeout)
        (PullOutcome(dropped=True, error=0), AfterPull(3.0)),  # the loop stops at its next round
        # dropped while the pull was out: nothing of the answer is used
        (PullOutcome(dropped=True, status=PullStatus.FOUND, next_begin_offset=20, message_count=3), AfterPull(None)),
        # FOUND: move on, hand over, wait the pull interval
        (found(13, 3, 10), AfterPull(0.25, 13, deliver=True)),
        # FOUND but every message filtered out on the client: move on, pull again at once
        (found(13, 0, None), AfterPull(0.0, 13)),
        # FOUND with data before the offset asked: warned, still delivered
        (found(13, 3, 9), AfterPull(0.25, 13, went_back=True, deliver=True)),
        (found(5, 3, 10), AfterPull(0.25, 5, went_back=True, deliver=True)),
        # nothing new / nothing matched: move on; commit only with nothing cached
        (
            PullOutcome(dropped=False, status=PullStatus.NO_NEW_MSG, next_begin_offset=10),
            AfterPull(0.0, 10, commit=True),
        ),
        (
            PullOutcome(dropped=False, status=PullStatus.NO_MATCHED_MSG, next_begin_offset=40, cached_count=2),
            AfterPull(0.0, 40),
        ),
        # the subscription changed while the pull was out: drop the answer, pull the same offset again
        (dataclasses.replace(found(13, 3, 10), stale=True), AfterPull(0.0)),
        (
            PullOutcome(dropped=False, status=PullStatus.NO_MATCHED_MSG, next_begin_offset=40, stale=True),
            AfterPull(0.0),
        ),
        # OFFSET_ILLEGAL: stop, restart where the broker says, fixed later
        (
            PullOutcome(dropped=False, status=PullStatus.OFFSET_ILLEGAL, next_begin_offset=7),
            AfterPull(None, 7, fix_offset=True),
        ),
    ],
)
def test_after_a_pull(outcome: PullOutcome, want: AfterPull) -> None:
    assert after_pull(outcome, 10, LIMITS) == want


@given(
    status=st.sampled_from(list(PullStatus)),
    asked=st.integers(0, 1000),
    nxt=st.integers(0, 1000),
    count=st.integers(0, 32),
    cached=st.integers(0, 5),
)
def test_any_answer_moves_the_offset_to_what_the_broker_said(
    status: PullStatus, asked: int, nxt: int, count: int, cached: int
) -> None:
    first = asked if count else None
    outcome = PullOutcome(False, None, status, nxt, count if status is PullStatus.FOUND else 0, first, cached)
    act = after_pull(outcome, asked, LIMITS)
    assert act.next_offset == nxt
    assert act.deliver == (status is PullStatus.FOUND and count > 0)
    assert act.commit == (status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG) and cached == 0)
    assert (act.delay is None) == (status is PullStatus.OFFSET_ILLEGAL) == act.fix_offset
    assert act.went_back == (status is PullStatus.FOUND and nxt < asked)
