"""Which puts become timers, and how: RocketMQ 5's HookUtils rules (store/timer/intercept.py)."""

from __future__ import annotations

import random

import pytest

from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.store.results import PutResult, PutStatus
from ledgermq.store.timer.intercept import INTERCEPTED_NAMES, TIMER_TOPIC, Interception, intercept
from ledgermq.store.timer.settings import TimerSettings, round_precision

NOW = 1_700_000_000_300
LEVELS = [1000, 5000, 10_000]
ON = TimerSettings()


def decide(props: dict[str, str], settings: TimerSettings = ON, sysflag: int = 0) -> Interception | PutResult | None:
    return intercept("Orders", 3, props, sysflag, NOW, settings, LEVELS)


@pytest.mark.parametrize(
    ("props", "slot"),
    [
        ({P.TIMER_DELAY_SEC: "10"}, NOW + 10_000 - 300),  # 1_700_000_010_300 -> its step's start
        ({P.TIMER_DELAY_MS: "9700"}, NOW + 9700 - 1000),  # exactly on a step: the step before
        ({P.TIMER_DELIVER_MS: str(NOW + 5_500)}, NOW + 5_500 - 800),
        ({P.START_DELIVER_TIME: str(NOW + 2_000)}, NOW + 2_000 - 300),
        # TIMER_DELAY_SEC wins over TIMER_DELIVER_MS, as RocketMQ reads them
        ({P.TIMER_DELIVER_MS: str(NOW + 50_000), P.TIMER_DELAY_SEC: "2"}, NOW + 2_000 - 300),
    ],
)
def test_a_future_time_goes_to_the_wheel_topic_at_its_step(props: dict[str, str], slot: int) -> None:
    got = decide({P.KEYS: "k1", **props})
    assert isinstance(got, Interception)
    assert (got.topic, got.queue_id) == (TIMER_TOPIC, 0)
    assert got.properties[P.TIMER_OUT_MS] == str(slot)
    assert got.properties[P.REAL_TOPIC] == "Orders" and got.properties[P.REAL_QID] == "3"
    assert got.properties[P.KEYS] == "k1" and all(got.properties[k] == v for k, v in props.items())


@pytest.mark.parametrize("value", ["abc", "", "1.5", "0x10", "99999999999999999999", " 5"])
def test_a_malformed_value_is_refused_as_illegal(value: str) -> None:
    got = decide({P.TIMER_DELAY_MS: value})
    assert isinstance(got, PutResult) and got.status is PutStatus.WHEEL_TIMER_MSG_ILLEGAL
    assert P.TIMER_DELAY_MS in got.remark


def test_past_the_max_delay_is_refused_and_just_inside_is_taken() -> None:
    limit = 3 * 24 * 3600
    refused = decide({P.TIMER_DELAY_SEC: str(limit + 1)})
    assert isinstance(refused, PutResult) and refused.status is PutStatus.WHEEL_TIMER_MSG_ILLEGAL
    assert "timerMaxDelaySec" in refused.remark
    assert isinstance(decide({P.TIMER_DELAY_SEC: str(limit)}), Interception)


@pytest.mark.parametrize("props", [{P.TIMER_DELAY_MS: "0"}, {P.TIMER_DELAY_SEC: "-5"}, {P.TIMER_DELIVER_MS: "1"}])
def test_a_time_not_in_the_future_is_stored_at_once_as_it_is(props: dict[str, str]) -> None:
    assert decide(props) is None


def test_with_the_wheel_off_a_timer_is_refused_not_delivered_early() -> None:
    got = decide({P.TIMER_DELAY_SEC: "5"}, TimerSettings(enabled=False))
    assert isinstance(got, PutResult) and got.status is PutStatus.WHEEL_TIMER_NOT_ENABLE


def test_a_delay_level_wins_and_the_timer_properties_are_dropped() -> None:
    got = decide({P.DELAY: "2", P.TIMER_DELAY_SEC: "30", P.KEYS: "k"})
    assert isinstance(got, Interception) and got.topic == "Orders"
    assert got.properties == {P.DELAY: "2", P.KEYS: "k"}


def test_intercepting_delay_levels_sends_them_through_the_wheel() -> None:
    got = decide({P.DELAY: "3"}, TimerSettings(intercept_delay_level=True))
    assert isinstance(got, Interception) and got.topic == TIMER_TOPIC
    assert P.DELAY not in got.properties and got.properties[P.TIMER_DELAY_LEVEL] == "3"
    assert got.properties[P.TIMER_OUT_MS] == str(NOW + 10_000 - 300)


def test_half_messages_and_rolled_timers_are_left_alone() -> None:
    assert decide({P.TIMER_DELAY_SEC: "5"}, sysflag=SF.TRANSACTION_PREPARED_TYPE) is None
    assert isinstance(decide({P.TIMER_DELAY_SEC: "5"}, sysflag=SF.TRANSACTION_COMMIT_TYPE), Interception)
    assert decide({P.TIMER_DELAY_SEC: "5", P.TIMER_OUT_MS: "123"}) is None


def test_deleting_a_timer_is_refused_rather_than_delivered_as_a_message() -> None:
    got = decide({P.TIMER_DELAY_SEC: "5", P.TIMER_DEL_UNIQKEY: "Orders+ABC"})
    assert isinstance(got, PutResult) and got.status is PutStatus.WHEEL_TIMER_MSG_ILLEGAL


@pytest.mark.parametrize(("given", "used"), [(1000, 1000), (999, 500), (250, 200), (50, 100), (5000, 1000)])
def test_precision_is_rounded_down_to_what_rocketmq_allows(given: int, used: int) -> None:
    assert round_precision(given) == used


def test_a_put_without_an_intercepted_name_is_left_as_it_is() -> None:
    """``INTERCEPTED_NAMES`` lets a put skip ``intercept`` (store/encoding.py): every other
    property, whatever its value, leaves the put alone; each of those names can change it."""
    names = [v for k, v in vars(P).items() if k.isupper() and isinstance(v, str) and v not in INTERCEPTED_NAMES]
    rng = random.Random(29)
    values = ["", "0", "1", "3", "10", str(NOW + 5_000), "-1", "x", "true"]
    delay_on = TimerSettings(intercept_delay_level=True)
    for _ in range(500):
        props = {rng.choice(names): rng.choice(values) for _ in range(rng.randint(1, 6))}
        for settings in (ON, delay_on, TimerSettings(enabled=False)):
            assert decide(props, settings) is None, props
    changed = {name for name in INTERCEPTED_NAMES for v in values if decide({name: v}, delay_on) is not None}
    assert changed == INTERCEPTED_NAMES
