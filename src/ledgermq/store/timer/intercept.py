"""Which puts become timer messages, and how (RocketMQ 5's ``HookUtils.handleScheduleMessage``).

Pure: a put's topic, queue, properties and sysflag and the time in, a decision out. It
runs where a put's record is built (store/encoding.py), so every way into the store
(sends, transaction commits, consumer send-back, DLedger proposals) is treated alike.

* Only ordinary and committed messages are looked at; a half message is intercepted
  when its commit is written.
* DELAY (a 4.x delay level) wins over the timer properties, which are then removed, as
  RocketMQ does; with ``timerInterceptDelayLevel`` the level's delay goes through the
  wheel instead of SCHEDULE_TOPIC_XXXX (its level kept in TIMER_DELAY_LEVEL).
* TIMER_DELAY_SEC, else TIMER_DELAY_MS (both from now), else TIMER_DELIVER_MS, else
  ``__STARTDELIVERTIME`` (both milliseconds since the epoch) give the delivery time. A
  value that is not a Java long is refused (WHEEL_TIMER_MSG_ILLEGAL, answered
  MESSAGE_ILLEGAL), as is a time more than ``timerMaxDelaySec`` ahead; a time not in the
  future is stored on its real topic at once, properties kept. With ``timerWheelEnable``
  off a timer is refused (WHEEL_TIMER_NOT_ENABLE, answered SYSTEM_ERROR).
* A future time is moved to the start of the precision step before it (a time on a step
  boundary to the step before: it is delivered when that step has passed, so never early
  and at most one step late) and kept in TIMER_OUT_MS; the message goes to
  ``rmq_sys_wheel_timer`` queue 0 with REAL_TOPIC / REAL_QID.
* TIMER_DEL_UNIQKEY (deleting a pending timer, RocketMQ 5.1) is refused: ledgermq does
  not implement it, and storing the marker as a message would deliver it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.store.results import PutResult, PutStatus
from ledgermq.store.timer.settings import TimerSettings

TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_PROPERTIES = (P.TIMER_DELAY_SEC, P.TIMER_DELAY_MS, P.TIMER_DELIVER_MS, P.START_DELIVER_TIME)
INTERCEPTED_NAMES = frozenset((*TIMER_PROPERTIES, P.DELAY))
"""``intercept`` leaves a put none of whose property names is here as it is (returns None):
a caller may skip it then, which a plain put does with one call instead of six."""
_JAVA_LONG = re.compile(r"[+-]?[0-9]+")
_LONG_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class Interception:
    """Where the put goes instead, with which properties."""

    topic: str
    queue_id: int
    properties: dict[str, str]


def _parse_long(text: str) -> int | None:
    """Java's ``Long.parseLong``: optional sign, ASCII digits, within a signed 64-bit long."""
    if not _JAVA_LONG.fullmatch(text):
        return None
    value = int(text)
    return value if -_LONG_MAX - 1 <= value <= _LONG_MAX else None


def _illegal(remark: str) -> PutResult:
    return PutResult(PutStatus.WHEEL_TIMER_MSG_ILLEGAL, remark=remark)


def intercept(
    topic: str,
    queue_id: int,
    props: Mapping[str, str],
    sysflag: int,
    now_ms: int,
    settings: TimerSettings,
    delay_levels_ms: list[int],
) -> Interception | PutResult | None:
    """None: store the put as it is; an Interception: store it there instead; a PutResult:
    refuse it with that status."""
    if SF.transaction_type(sysflag) not in (SF.TRANSACTION_NOT_TYPE, SF.TRANSACTION_COMMIT_TYPE):
        return None
    if topic == TIMER_TOPIC or P.TIMER_OUT_MS in props:
        return None  # a rolled timer going back into the wheel, or one already converted
    delay = props.get(P.DELAY, "")
    level = int(delay) if delay.isdigit() else 0
    if level > 0:
        if settings.enabled and settings.intercept_delay_level and delay_levels_ms:
            level = min(level, len(delay_levels_ms))
            rest = {k: v for k, v in props.items() if k not in TIMER_PROPERTIES and k != P.DELAY}
            rest[P.TIMER_DELAY_LEVEL] = str(level)
            return _to_wheel(topic, queue_id, rest, now_ms + delay_levels_ms[level - 1], settings)
        if any(k in props for k in TIMER_PROPERTIES):
            rest = {k: v for k, v in props.items() if k not in TIMER_PROPERTIES}
            return Interception(topic, queue_id, rest)  # the level wins (RocketMQ's checkIfTimerMessage)
        return None
    if props.keys().isdisjoint(TIMER_PROPERTIES):  # every plain put: one call, no list
        return None
    named = [k for k in TIMER_PROPERTIES if k in props]
    if not settings.enabled:
        remark = "accurate timer message is not enabled, timerWheelEnable is false"
        return PutResult(PutStatus.WHEEL_TIMER_NOT_ENABLE, remark=remark)
    name = named[0]
    value = _parse_long(props[name])
    if value is None:
        return _illegal(f"timer message illegal: {name}={props[name]!r} is not a number")
    if name == P.TIMER_DELAY_SEC:
        deliver_ms = now_ms + value * 1000
    elif name == P.TIMER_DELAY_MS:
        deliver_ms = now_ms + value
    else:
        deliver_ms = value
    if deliver_ms <= now_ms:
        if P.TIMER_DEL_UNIQKEY in props:
            return _illegal("timer message illegal: a delete marker's time must be in the future")
        return None  # due already: stored on its topic now, properties kept (as RocketMQ)
    if deliver_ms - now_ms > settings.max_delay_ms:
        return _illegal(
            "timer message illegal, the delay time should not be bigger than the max delay "
            f"{settings.max_delay_ms}ms (timerMaxDelaySec)"
        )
    if P.TIMER_DEL_UNIQKEY in props:
        return _illegal("timer message illegal: deleting a pending timer (TIMER_DEL_UNIQKEY) is not supported")
    return _to_wheel(topic, queue_id, dict(props), deliver_ms, settings)


def _to_wheel(
    topic: str, queue_id: int, props: dict[str, str], deliver_ms: int, settings: TimerSettings
) -> Interception:
    precision = settings.precision_ms
    deliver_ms = deliver_ms - precision if deliver_ms % precision == 0 else deliver_ms // precision * precision
    props[P.TIMER_OUT_MS] = str(deliver_ms)
    props[P.REAL_TOPIC] = topic
    props[P.REAL_QID] = str(queue_id)
    return Interception(TIMER_TOPIC, 0, props)
